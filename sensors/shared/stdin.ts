// Bounded stdin for command hooks, in its own module without zod so the smallest hook
// bundle (Claude Code's, on zod/mini) can import it.

/** Reads stdin up to `max` bytes or `ms`, whichever comes first. */
export function readStdin(max = 4 * 1024 * 1024, ms = 2000): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let n = 0;
    const done = () => {
      clearTimeout(t);
      process.stdin.pause();
      resolve(n > max ? '' : Buffer.concat(chunks).toString('utf8'));
    };
    const t = setTimeout(done, ms);
    process.stdin.on('data', (c: Buffer) => {
      n += c.length;
      if (n <= max) chunks.push(c);
    });
    process.stdin.on('end', done);
    process.stdin.on('error', done);
  });
}
