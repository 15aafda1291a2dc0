import { defineSensor } from '../../core/sensor.ts';

export const SENSOR_NAME = 'gemini';

// What Gemini CLI 0.61 hooks can carry out (docs/gemini.md has the verified behaviour):
// - block_tool: BeforeTool `decision: "deny"`: the call does not run, the model gets
//   "Tool execution blocked: <reason>", the loop goes on.
// - inject: AfterAgent `decision: "block"` with the report (the run goes on with it as
//   a user message), or the reason of a denied call mid-turn.
// - compact: no hook compacts; the report is injected instead.
// - cap_context: none. No model request carries a session id (no header, no body
//   field), so a router in front cannot tell Gemini's conversations apart: the hooks
//   are the only scoped control.
// - abort: no hook interrupts a running call; the next call is denied instead.
// - stop_run: BeforeTool `continue: false` ends the run without running the call.
// - toast: no window to show it in.
export const geminiSensor = defineSensor({
  name: SENSOR_NAME,
  agent: 'Gemini CLI 0.61',
  capabilities: {
    block_tool: 'native',
    inject: 'native',
    compact: { via: 'inject' },
    cap_context: 'none',
    abort: { via: 'block_tool' },
    stop_run: 'native',
    toast: 'none',
  },
});
