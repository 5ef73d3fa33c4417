// Builds a JavaScript handler into a switchyard plugin component with componentize-js.
//
//   node build.mjs HANDLER.js WIT-DIR OUT.wasm
//
// HANDLER.js is an ES module exporting `init(config)` and `handle(event)` for the `handler`
// world in WIT-DIR; it imports the host's functions from `switchyard:plugin/host@0.1.1`
// (and `metrics`, `cache`, `kube` likewise). `fetch` sends outbound HTTP requests through
// `wasi:http/outgoing-handler`, to the destinations the handler's `capabilities.http` allows;
// incoming HTTP (`fetch-event`) is left out: a handler is called with events, not requests.
import { componentize } from '@bytecodealliance/componentize-js';
import { rename, writeFile } from 'node:fs/promises';

const [source, wit, out] = process.argv.slice(2);
if (!source || !wit || !out) {
  console.error('usage: node build.mjs HANDLER.js WIT-DIR OUT.wasm');
  process.exit(2);
}
const { component } = await componentize({
  sourcePath: source,
  witPath: wit,
  worldName: 'handler',
  disableFeatures: ['fetch-event'],
});
// Through a temporary name, so a daemon watching the folder never sees half a file.
await writeFile(`${out}.tmp`, component);
await rename(`${out}.tmp`, out);
