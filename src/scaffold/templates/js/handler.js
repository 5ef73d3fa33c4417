// {{name}}: a switchyard handler. For each event it
//
// - logs one line: the kind of change, the object's kind and namespace/name;
// - counts events by change (counter `events`), records the object's size (histogram
//   `object_kib`) and how many objects of its kind the daemon's cache holds in its
//   namespace (gauge `cached_objects`);
// - given a config like {"label": "owner", "value": "unknown"}, adds that label to an object
//   that lacks it, with a merge patch (grant the handler `capabilities: {configmaps: [patch]}`).
//
// The daemon calls `init` once per instance with the handler's config as JSON, then
// `handle` with the event; a thrown string is the error the daemon retries with backoff.
// The host's functions come from `switchyard:plugin/host@0.1.1` (and `metrics`, `cache`,
// `kube` likewise): see wit/world.wit.
import { log } from 'switchyard:plugin/host@0.1.1';
import { counterAdd, gaugeSet, histogramObserve } from 'switchyard:plugin/metrics@0.1.1';
import { list } from 'switchyard:plugin/cache@0.1.1';
import { mergePatch } from 'switchyard:plugin/kube@0.1.1';

// The label to add, [name, value], or undefined.
let label;

export function init(config) {
  try {
    const settings = JSON.parse(config) ?? {};
    label = undefined;
    if (settings.label !== undefined) {
      if (typeof settings.label !== 'string' || typeof settings.value !== 'string') {
        throw 'config: "label" and "value" must be strings';
      }
      label = [settings.label, settings.value];
    }
  } catch (e) {
    throw asError(e);
  }
}

export function handle(event) {
  try {
    const object = JSON.parse(event.object);
    const meta = object.metadata ?? {};
    const key = [meta.namespace, meta.name ?? '?'].filter(Boolean).join('/');
    log('info', `${event.kind} ${object.kind ?? '?'} ${key}`);
    counterAdd('events', 1, [['change', event.kind]]);
    histogramObserve('object_kib', new TextEncoder().encode(event.object).length / 1024, []);
    if (object.kind && meta.namespace) {
      const cached = list(object.kind, meta.namespace);
      gaugeSet('cached_objects', cached.length, [['namespace', meta.namespace]]);
    }
    if (label && event.kind !== 'deleted' && meta.labels?.[label[0]] === undefined) {
      const patch = { metadata: { labels: { [label[0]]: label[1] } } };
      mergePatch(object.kind, meta.namespace, meta.name, JSON.stringify(patch));
      log('info', `labelled ${key} ${label[0]}=${label[1]}`);
    }
    return { tag: 'done' };
  } catch (e) {
    throw asError(e);
  }
}

// The string the daemon sees for a caught exception: a host function's error (its text is
// in `payload`) as it is, anything else named by its type. Anything thrown that is not a
// string would end the call as a trap.
function asError(e) {
  if (typeof e === 'string') return e;
  if (typeof e?.payload === 'string') return e.payload;
  return `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
}
