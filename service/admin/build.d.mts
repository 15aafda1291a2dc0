// Types for build.mjs (plain JS so it runs with node alone).
export interface BuiltFile {
  body: Buffer;
  gz: Buffer;
  type: string;
}
export interface Built {
  source: string;
  version: string;
  files: Record<string, BuiltFile>;
}
export const UI: string;
export const DIST: string;
export function sourceHash(): string;
export function buildAdmin(opts?: { write?: boolean; outdir?: string }): Promise<Built>;
