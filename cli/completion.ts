import type { Command } from 'commander';

// Shell completion generated from the program itself, so a new command or option
// completes without editing this file.

interface Spec {
  path: string[];
  subs: string[];
  opts: string[];
}

function specs(cmd: Command, path: string[] = []): Spec[] {
  const subs = cmd.commands.map((c) => c.name());
  const opts = cmd.options.map((o) => o.long).filter((x): x is string => Boolean(x));
  const out: Spec[] = [{ path, subs, opts: [...opts, '--help'] }];
  for (const c of cmd.commands) out.push(...specs(c, [...path, c.name()]));
  return out;
}

export function completionScript(program: Command, shell: 'bash' | 'zsh' | 'fish'): string {
  const all = specs(program);
  if (shell === 'fish') {
    const lines = ['# vigil completion for fish: vigil completion fish > ~/.config/fish/completions/vigil.fish'];
    for (const s of all) {
      const cond =
        s.path.length === 0 ? '__fish_use_subcommand' : `__fish_seen_subcommand_from ${s.path[s.path.length - 1]}`;
      if (s.subs.length) lines.push(`complete -c vigil -f -n '${cond}' -a '${s.subs.join(' ')}'`);
      for (const o of s.opts) lines.push(`complete -c vigil -n '${cond}' -l ${o.slice(2)}`);
    }
    return `${lines.join('\n')}\n`;
  }
  // bash (zsh loads it through bashcompinit): the words so far pick the command level.
  const cases = all.map((s) => `    "${s.path.join(' ')}") words="${[...s.subs, ...s.opts].join(' ')}" ;;`).join('\n');
  const fn = `_vigil() {
  local cur path w
  cur="\${COMP_WORDS[COMP_CWORD]}"
  path=""
  for w in "\${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    case "$w" in -*) ;; *) if [ -z "$path" ]; then cand="$w"; else cand="$path $w"; fi
      case "$cand" in
${all.map((s) => `        "${s.path.join(' ')}") path="$cand" ;;`).join('\n')}
      esac ;;
    esac
  done
  local words=""
  case "$path" in
${cases}
  esac
  COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}
complete -o default -F _vigil vigil
`;
  if (shell === 'zsh') {
    return `# vigil completion for zsh: eval "$(vigil completion zsh)" in ~/.zshrc
autoload -U +X bashcompinit && bashcompinit
${fn}`;
  }
  return `# vigil completion for bash: eval "$(vigil completion bash)" in ~/.bashrc\n${fn}`;
}
