import { desktopPlugin } from './channels/desktop/index.ts';
import { pagerdutyPlugin } from './channels/pagerduty/index.ts';
import { twilioPlugin } from './channels/twilio/index.ts';
import { webhookPlugin } from './channels/webhook/index.ts';
import type { AgentInstaller } from './core/installer.ts';
import { Registry } from './core/registry.ts';
import type { InputReader } from './core/replay.ts';
import type { SensorDescriptor } from './core/sensor.ts';
import { behaviorBreakerPlugin } from './detectors/behavior-breaker/index.ts';
import { moneyPlugin } from './detectors/money/index.ts';
import { noProgressPlugin } from './detectors/no-progress/index.ts';
import { sessionHygienePlugin } from './detectors/session-hygiene/index.ts';
import { autoCompactPlugin } from './modes/auto-compact/index.ts';
import { autoLimitContextPlugin } from './modes/auto-limit-context/index.ts';
import { autoRecoverPlugin } from './modes/auto-recover/index.ts';
import { warnPlugin } from './modes/warn/index.ts';
import { claudeCodeBridge } from './sensors/claude-code/bridge.ts';
import { claudeCodeSensor } from './sensors/claude-code/descriptor.ts';
import { claudeCodeInstaller } from './sensors/claude-code/installer.ts';
import { claudeCodeReader } from './sensors/claude-code/transcripts.ts';
import { codexBridge } from './sensors/codex/bridge.ts';
import { codexSensor } from './sensors/codex/descriptor.ts';
import { codexInstaller } from './sensors/codex/installer.ts';
import { codexReader } from './sensors/codex/replay.ts';
import { geminiBridge } from './sensors/gemini/bridge.ts';
import { geminiSensor } from './sensors/gemini/descriptor.ts';
import { geminiInstaller } from './sensors/gemini/installer.ts';
import { geminiReader } from './sensors/gemini/replay.ts';
import { opencodeSensor } from './sensors/opencode/descriptor.ts';
import { opencodeInstaller } from './sensors/opencode/plugin/installer.ts';
import { opencodeDbReader, opencodeExportReader } from './sensors/opencode/replay.ts';
import { LocalComputeSchema, WatchdogSchema } from './watchdog/options.ts';

// The composition root: the one list of what ships with Vigil. The kernel (core/)
// knows none of these; it drives whatever is registered here or loaded from the
// modules named under `plugins:` in the config file.

/** A registry with every built-in plugin. Third parties add theirs with `registry.register(plugin)`. */
export function createRegistry(): Registry {
  return new Registry()
    .register(desktopPlugin, 'built-in')
    .register(webhookPlugin, 'built-in')
    .register(pagerdutyPlugin, 'built-in')
    .register(twilioPlugin, 'built-in')
    .register(noProgressPlugin, 'built-in')
    .register(behaviorBreakerPlugin, 'built-in')
    .register(sessionHygienePlugin, 'built-in')
    .register(moneyPlugin, 'built-in')
    .register(warnPlugin, 'built-in')
    .register(autoCompactPlugin, 'built-in')
    .register(autoLimitContextPlugin, 'built-in')
    .register(autoRecoverPlugin, 'built-in')
    .section('local_compute', LocalComputeSchema)
    .section('watchdog', WatchdogSchema)
    .sensor(opencodeSensor)
    .sensor(claudeCodeSensor)
    .sensor(codexSensor)
    .sensor(geminiSensor)
    .hook(claudeCodeBridge)
    .hook(codexBridge)
    .hook(geminiBridge);
}

/** The sensors' installers: `vigil install <agent>` and `vigil uninstall <agent>`, one per agent. */
export const installers: readonly AgentInstaller<any>[] = [
  opencodeInstaller,
  claudeCodeInstaller,
  codexInstaller,
  geminiInstaller,
];

/** What each sensor can carry out (core/sensor.ts), for the readouts. */
export const sensors: readonly SensorDescriptor[] = [opencodeSensor, claudeCodeSensor, codexSensor, geminiSensor];

/**
 * The readers `vigil replay INPUT` asks, in order, for anything but the replay's own
 * JSONL (core/replay.ts). A folder none of them claims is read as an opencode export,
 * whose reader then names the session.json it misses.
 */
export const replayReaders: readonly InputReader[] = [
  claudeCodeReader,
  opencodeExportReader,
  opencodeDbReader,
  codexReader,
  geminiReader,
  { ...opencodeExportReader, claims: (p) => p.dir },
];
