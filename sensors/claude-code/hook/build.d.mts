export const DIST: string;
export const BANNER_PREFIX: string;
export function distOf(sensor: string): string;
export function buildHook(o?: { sensor?: string; out?: string }): Promise<{ path: string; version: string }>;
