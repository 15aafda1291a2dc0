import { classChannel } from '../../core/registry.ts';
import { DesktopChannel } from './desktop.channel.ts';
import { type DesktopOptions, DesktopOptionsSchema } from './desktop.options.ts';

export const desktopPlugin = classChannel<DesktopOptions>('desktop', DesktopOptionsSchema, DesktopChannel);

export { DesktopOptionsSchema };
