import { z } from 'zod';

export const DesktopOptionsSchema = z.strictObject({
  /** Shown as the sending application (notify-send --app-name). */
  app_name: z.string().min(1).max(64).default('Vigil'),
  /** The notify-send binary; a name on PATH or an absolute path. */
  command: z.string().min(1).default('notify-send'),
});
export type DesktopOptions = z.output<typeof DesktopOptionsSchema>;
