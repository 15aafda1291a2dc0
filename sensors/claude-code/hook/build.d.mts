export const DIST: string;
export const BANNER_PREFIX: string;
export function buildHook(o?: { out?: string }): Promise<{ path: string; version: string }>;
