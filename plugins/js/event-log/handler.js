// event-log: a switchyard handler written in JavaScript.
//
// Logs one line per event through the host's `log`:
//
//     PREFIX KIND OBJECT-KIND NAMESPACE/NAME rv=RESOURCE-VERSION route=ROUTE
//
// `PREFIX` comes from the handler's config (`{"prefix": "..."}`, default "event-log").
// The object's annotations steer the outcome:
//
// - `event-log/error: MESSAGE` fails the call with MESSAGE (retried with backoff);
// - `event-log/requeue-ms: N` asks to be called again for the object after N ms.
//
// Any other exception becomes an error too, named by its type, instead of a trap.
import { log } from 'switchyard:plugin/host@0.1.1';

const ERROR = 'event-log/error';
const REQUEUE_MS = 'event-log/requeue-ms';

// The daemon calls `init` and then `handle` on one fresh instance per event.
let prefix = 'event-log';

// A thrown string is the error the daemon sees; anything else is named by its type.
function asError(e) {
  return typeof e === 'string' ? e : `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
}

export function init(config) {
  try {
    const settings = JSON.parse(config) ?? {};
    if (typeof settings !== 'object' || typeof (settings.prefix ?? '') !== 'string') {
      throw 'config must be an object like {"prefix": "..."}';
    }
    prefix = settings.prefix ?? prefix;
  } catch (e) {
    throw asError(e);
  }
}

export function handle(event) {
  try {
    return summarize(event);
  } catch (e) {
    throw asError(e);
  }
}

function summarize(event) {
  const obj = JSON.parse(event.object);
  const meta = obj.metadata ?? {};
  const annotations = meta.annotations ?? {};
  if (ERROR in annotations) {
    throw annotations[ERROR];
  }
  const key = [meta.namespace, meta.name ?? '?'].filter(Boolean).join('/');
  log(
    'info',
    `${prefix} ${event.kind} ${obj.kind ?? '?'} ${key}` +
      ` rv=${meta.resourceVersion ?? '?'} route=${event.route}`,
  );
  if (REQUEUE_MS in annotations) {
    return { tag: 'requeue-after', val: BigInt(annotations[REQUEUE_MS]) };
  }
  return { tag: 'done' };
}
