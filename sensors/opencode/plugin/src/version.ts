// The plugin names itself in the X-Vigil-Plugin header, so GET /health on the service
// shows which builds are running and a stale install is visible. build.mjs replaces
// __VIGIL_PLUGIN_VERSION__ with `<package.json version>+<bundle hash>`; unbundled
// (unit tests) it is a dev marker.
declare const __VIGIL_PLUGIN_VERSION__: string | undefined;

export const PLUGIN_NAME = 'vigil-opencode';
export const PLUGIN_VERSION: string =
  typeof __VIGIL_PLUGIN_VERSION__ === 'string' ? __VIGIL_PLUGIN_VERSION__ : '0.0.0-dev';
/** The X-Vigil-Plugin header value: `name/version`. */
export const PLUGIN_ID = `${PLUGIN_NAME}/${PLUGIN_VERSION}`;
