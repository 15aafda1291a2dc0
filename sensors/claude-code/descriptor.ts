import { defineSensor } from '../../core/sensor.ts';

export const SENSOR_NAME = 'claude-code';

// What Claude Code 2.1.x hooks can carry out (docs/agents.md has the per-mode table):
// - block_tool: PreToolUse `permissionDecision: "deny"` with the reason and report.
// - inject: a Stop hook's `decision: "block"` with the report (the session goes on with
//   it), or the reason of a denied tool call mid-turn.
// - compact: no hook compacts; the report is injected instead (the step a compaction
//   serves in a recovery: the model reads the incident report and goes on).
// - cap_context: only a router in front (ANTHROPIC_BASE_URL) can cap a request.
// - abort: no hook interrupts a running tool; the next call is denied instead.
// - stop_run: every tool denied plus `continue: false`, held until a Resume.
// - toast: no window to show it in (the hooks run for `claude -p` as well).
export const claudeCodeSensor = defineSensor({
  name: SENSOR_NAME,
  agent: 'Claude Code 2.1',
  capabilities: {
    block_tool: 'native',
    inject: 'native',
    compact: { via: 'inject' },
    cap_context: 'router',
    abort: { via: 'block_tool' },
    stop_run: 'native',
    toast: 'none',
  },
});
