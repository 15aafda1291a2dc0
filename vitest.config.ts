import { defineConfig } from 'vitest/config';

// Three tiers (`npm test` runs them all):
// - unit: every test beside the code and in test/ that needs no Redis and starts no
//   long-lived process; Redis cases of shared suites are left to the redis tier
//   (VIGIL_TEST_TIER, read by backends() in test/helpers). `npm run test:unit`.
// - redis: the Redis cases of the suites listed in REDIS (the real Redis at
//   VIGIL_TEST_REDIS_URL, default 127.0.0.1:6379). A test checks the list is complete.
// - e2e: suites that start real processes (opencode, vigil serve, npm, a browser). Its
//   global setup installs the agent CLIs into a cache on the first run (test/helpers/agents.ts).
// A suite that needs a program from outside the repo (chromium, an agent CLI, redis-server)
// is skipped with one line when it is missing, and fails where CI is set (test/helpers/external.ts).
// The machines have 2 cores, so files run with limited parallelism and generous timeouts.

export const REDIS = [
  'core/binding.test.ts',
  'core/decoded.test.ts',
  'core/notifier/notifier.test.ts',
  'core/store/store.test.ts',
  'core/unit.test.ts',
  'detectors/behavior-breaker/breaker.test.ts',
  'detectors/money/money.detector.test.ts',
  'detectors/no-progress/no-progress.detector.test.ts',
  'modes/modes.test.ts',
  'service/server.test.ts',
  'service/routes/hooks.test.ts',
  'service/session-keys.test.ts',
  'test/redis-topologies.test.ts',
  'test/unit-contract.test.ts',
];
export const E2E = ['test/**/*.e2e.test.ts', '**/*.browser.test.ts'];
const ALL = ['{core,detectors,channels,modes,sensors,watchdog,service,cli,test}/**/*.test.ts'];

export default defineConfig({
  // Import 'vigil' (and vigil/router, vigil/testing) from source, not from the build.
  resolve: { conditions: ['vigil-source'] },
  ssr: { resolve: { conditions: ['vigil-source'] } },
  test: {
    setupFiles: ['./test/setup.ts'],
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ALL, exclude: [...E2E, '**/node_modules/**'], env: { VIGIL_TEST_TIER: 'unit' } },
      },
      { extends: true, test: { name: 'redis', include: REDIS, env: { VIGIL_TEST_TIER: 'redis' } } },
      { extends: true, test: { name: 'e2e', include: E2E, globalSetup: ['./test/agents.setup.ts'] } },
    ],
  },
});
