// Module resolution hook for running from a clone: `import ... from 'vigil'` (the package
// importing itself, or a plugin module beside it) resolves to the TypeScript sources
// (the `vigil-source` export condition), not to the build.
export async function resolve(specifier, context, next) {
  return next(specifier, { ...context, conditions: [...context.conditions, 'vigil-source'] });
}
