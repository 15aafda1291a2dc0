import { readStdin, runHook } from '../bridge.ts';

// The entry of the bundled hook (build.mjs): `node hook.mjs <Event>`, payload on stdin.
// Whatever happens it exits 0, within a bounded time, printing an answer or nothing.
export async function main(argv: readonly string[] = process.argv.slice(2)): Promise<void> {
  // The last resort: no opinion rather than a slow agent (per-request timeouts are shorter).
  setTimeout(() => process.exit(0), 4_500).unref();
  try {
    const r = await runHook(argv[0] ?? '', await readStdin(), process.env);
    if (r.stdout) process.stdout.write(r.stdout);
  } catch {
    // fail open
  }
  process.exitCode = 0;
}

await main();
