import { AGENTS, ensureAgent } from './helpers/agents.ts';
import { inCi } from './helpers/external.ts';

// Global setup of the e2e project (vitest.config.ts): the agent CLIs its suites drive,
// npm-installed into the cache on the first run (tens of seconds each), found there after.
// A failed install is one line; the suites that need that agent then skip (needs()),
// or fail where CI is set.
export default function setup(): void {
  for (const [name, a] of Object.entries(AGENTS)) {
    const r = ensureAgent(a, (line) => process.stderr.write(`agent CLIs: ${line}\n`));
    if (r.error) {
      if (inCi()) throw new Error(`agent CLIs: ${r.error}`);
      process.stderr.write(`agent CLIs: ${r.error}; the suites that drive ${name} are skipped\n`);
    }
  }
}
