import { defineSensor } from '../../core/sensor.ts';

// What the opencode plugin carries out (docs/agents.md): everything but the context
// cap, which the router in front of opencode enforces (gate answers `limit`).
export const opencodeSensor = defineSensor({
  name: 'opencode',
  agent: 'opencode 1.18',
  capabilities: {
    block_tool: 'native',
    inject: 'native',
    compact: 'native',
    cap_context: 'router',
    abort: 'native',
    stop_run: 'native',
    toast: 'native',
  },
  // opencode 1.18 sends the session id (a subagent's own) on every model request.
  gate: { conversation: 'x-session-id' },
});
