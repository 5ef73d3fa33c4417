// Lets `node --test` import handler.js: `switchyard:plugin/...` imports resolve to the
// recording host in host.mjs instead of the daemon.
import { register } from 'node:module';

register(
  'data:text/javascript,' +
    encodeURIComponent(`
      export async function resolve(specifier, context, next) {
        if (specifier.startsWith('switchyard:plugin/')) {
          return { url: ${JSON.stringify(new URL('./host.mjs', import.meta.url).href)}, shortCircuit: true };
        }
        return next(specifier, context);
      }
    `),
);
