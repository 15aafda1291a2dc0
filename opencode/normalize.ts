// The normalisation moved to sensors/shared/normalize.ts (every sensor uses the same
// rules); this name stays for the opencode plugin, the watchdog and their tests.
export * from '../sensors/shared/normalize.ts';
