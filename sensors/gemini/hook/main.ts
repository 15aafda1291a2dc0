import { hookMain } from '../../shared/hook-io.ts';
import { runHook } from '../bridge.ts';

// The entry of the bundled hook (sensors/claude-code/hook/build.mjs --sensor gemini).
await hookMain(runHook);
