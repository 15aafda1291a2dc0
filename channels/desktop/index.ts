import type { ChannelPlugin } from '../../core/contracts.ts';
import { TOKENS } from '../../core/tokens.ts';
import { DesktopChannel } from './desktop.channel.ts';
import { type DesktopOptions, DesktopOptionsSchema } from './desktop.options.ts';

export const desktopPlugin: ChannelPlugin<DesktopOptions> = {
  kind: 'channel',
  type: 'desktop',
  options: DesktopOptionsSchema,
  create(c, opts, name) {
    const child = c.createChildContainer();
    child.register(TOKENS.PluginOptions, { useValue: opts });
    child.register(TOKENS.PluginName, { useValue: name });
    return child.resolve(DesktopChannel);
  },
};

export { DesktopOptionsSchema };
