// {{name}}: a switchyard handler. Logs one line per event: the kind of change, the
// object's kind and namespace/name.
//
// The daemon calls `init` once per instance with the handler's config as JSON, then
// `handle` with the event; a thrown string is the error the daemon retries with backoff.
// The host's functions come from `switchyard:plugin/host@0.1.0` (and `metrics`, `cache`,
// `kube` likewise): see wit/world.wit.
import { log } from 'switchyard:plugin/host@0.1.0';

export function init(config) {
  JSON.parse(config);
}

export function handle(event) {
  try {
    const object = JSON.parse(event.object);
    const meta = object.metadata ?? {};
    const key = [meta.namespace, meta.name ?? '?'].filter(Boolean).join('/');
    log('info', `${event.kind} ${object.kind ?? '?'} ${key}`);
    return { tag: 'done' };
  } catch (e) {
    throw typeof e === 'string' ? e : `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
  }
}
