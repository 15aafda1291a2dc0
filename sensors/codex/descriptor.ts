import { defineSensor } from '../../core/sensor.ts';

export const SENSOR_NAME = 'codex';

// What Codex CLI 0.169 hooks can carry out (docs/codex.md has the verified behaviour):
// - block_tool: PreToolUse `permissionDecision: "deny"`: the call does not run, the
//   model gets "Command blocked by PreToolUse hook: <reason>", the turn goes on.
// - inject: a Stop hook's `decision: "block"` with the report (the turn goes on with it
//   as a user message), or the reason of a denied call mid-turn.
// - compact: no hook compacts; the report is injected instead.
// - cap_context: only a router in front (a model provider's base_url), which tells
//   Codex's conversations apart by their thread-id header.
// - abort: no hook interrupts a running call; the next call is denied instead.
// - stop_run: no hook answer ends a running loop (PreToolUse `continue: false` is
//   unsupported and the tool runs anyway); every call is denied instead and a new
//   prompt is refused (UserPromptSubmit `continue: false`), until a Resume.
// - toast: no window to show it in.
export const codexSensor = defineSensor({
  name: SENSOR_NAME,
  agent: 'Codex CLI 0.169',
  capabilities: {
    block_tool: 'native',
    inject: 'native',
    compact: { via: 'inject' },
    cap_context: 'router',
    abort: { via: 'block_tool' },
    stop_run: { via: 'block_tool' },
    toast: 'none',
  },
  // Every model request carries `thread-id` (the thread's own id, a subagent's too) and,
  // for a subagent, `x-codex-parent-thread-id`; hooks give the same ids (map.ts).
  gate: { conversation: 'thread-id', parent: 'x-codex-parent-thread-id' },
});
