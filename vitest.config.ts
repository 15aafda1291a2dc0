import { defineConfig } from 'vitest/config';

// Unit tests sit beside the code (`*.test.ts`); end-to-end suites that start real
// processes (Redis, opencode) live in test/ as `*.e2e.test.ts`. The machines have
// 2 cores, so files run with limited parallelism and generous timeouts.
export default defineConfig({
  // Import 'vigil' (and vigil/router, vigil/testing) from source, not from the build.
  resolve: { conditions: ['vigil-source'] },
  ssr: { resolve: { conditions: ['vigil-source'] } },
  test: {
    include: [
      'core/**/*.test.ts',
      'detectors/**/*.test.ts',
      'channels/**/*.test.ts',
      'modes/**/*.test.ts',
      'opencode/**/*.test.ts',
      'service/**/*.test.ts',
      'cli/**/*.test.ts',
      'test/**/*.test.ts',
    ],
    setupFiles: ['./test/setup.ts'],
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
