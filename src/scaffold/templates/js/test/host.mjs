// A host for `node --test`: the handler's own module runs in this process on an event, and
// the test asserts on what it did. test/register.mjs makes every `switchyard:plugin/...`
// import resolve to this module, so it exports the functions of every interface of the
// world (see wit/world.wit), besides `TestHost`, `event` and `updated` for the tests.
// While a call runs, the global `fetch` answers from the test's HTTP stubs.
//
//   import * as handler from '../handler.js';
//   import { TestHost, event } from './host.mjs';
//
//   const report = new TestHost()
//     .config({ label: 'owner', value: 'unknown' })
//     .object('configmaps', configmap)                  // what cache reads see
//     .handle(handler, event('added', configmap));
//   assert.deepEqual(report.outcome, { tag: 'done' });
//   assert.deepEqual(report.lines(), ['added ConfigMap default/demo']);
//   assert.equal(report.counter('events', { change: 'added' }), 1);
//   assert.deepEqual(report.writes, [{ op: 'merge-patch', resource: 'ConfigMap', ... }]);
//
//   // A handler that sends with `fetch` (its `handle` is async): await the report.
//   const posted = await new TestHost()
//     .http('https://hooks.example.com/', { status: 200, body: 'ok' })
//     .handle(handler, event('added', configmap));
//   assert.deepEqual(posted.requests, [{ method: 'POST', url: 'https://hooks.example.com/notify', ... }]);
//
// How it differs from the daemon: each `handle` calls `init` and then `handle` like the
// daemon's fresh instance per event, but the module's variables keep their values between
// calls in one test process; capabilities are not checked, and a cache read may name any
// resource (every write is recorded, none is sent); cache reads answer from the objects
// given with `object`. A host function's error is thrown as the component sees it: an
// object whose `message` and `payload` are the error's text. `fetch` sends nothing: it
// answers from `http` and `httpError`, and a request neither answers is rejected as the
// daemon rejects a destination the handler's `capabilities.http` does not allow: with a
// `TypeError` ("NetworkError when attempting to fetch resource.", as `fetch` in a
// component reports every failed request, followed here by what failed).

// The error a host function throws, as componentize-js throws it in a component.
export class ComponentError extends Error {
  constructor(payload) {
    super(payload);
    this.name = 'Error';
    this.payload = payload;
  }
}

// The call in progress: what the host answers and what it records.
let call = null;

function current() {
  if (!call) {
    throw new Error('a switchyard host function was called outside TestHost.handle');
  }
  return call;
}

// A host in the test process. Give it config and cached objects, then call `handle` as
// often as needed; each call returns a `Report`.
export class TestHost {
  #config = null;
  #objects = [];
  #indexes = new Map();
  #writeError = undefined;
  #answers = [];

  // The handler's `config`, as the daemon would pass it from the YAML (`null` if unset).
  config(value) {
    this.#config = value;
    return this;
  }

  // Puts `object` in the cache under `resource` (found by that name or by its `kind`).
  object(resource, object) {
    this.#objects.push([resource, object]);
    return this;
  }

  // Declares the cache index `name`: `values(object)` gives the object's values (an array
  // of strings). `namespace` is always there.
  index(name, values) {
    this.#indexes.set(name, values);
    return this;
  }

  // Makes every write fail with `message`, as a refused or failed write would.
  failWrites(message) {
    this.#writeError = message;
    return this;
  }

  // Answers `fetch` requests whose URL starts with `urlPrefix` with a response of
  // `status` (200 unless given), `headers` (an object) and `body` (a string); the first
  // matching prefix wins. A request nothing answers is refused (see above).
  http(urlPrefix, { status = 200, headers = {}, body = '' } = {}) {
    this.#answers.push([urlPrefix, { status, headers, body }]);
    return this;
  }

  // Makes `fetch` requests whose URL starts with `urlPrefix` fail as a timeout or a refused
  // connection does: rejected with a `TypeError` whose message ends with `message`.
  httpError(urlPrefix, message) {
    this.#answers.push([urlPrefix, { error: message }]);
    return this;
  }

  // Calls `handler.init` with the config and then `handler.handle` with `event`, where
  // `handler` is the handler's module (`import * as handler from '../handler.js'`).
  // Returns the Report, or a promise of it when `handle` is async (a handler that awaits
  // `fetch`): await it, and make one call at a time. Anything thrown other than a string
  // (a trap in the daemon) is thrown on to the test.
  handle(handler, event) {
    if (call) throw new Error('a TestHost.handle is still running: await it before the next');
    const realFetch = globalThis.fetch;
    const c = {
      objects: this.#objects.map(([resource, object]) => [resource, structuredClone(object)]),
      indexes: this.#indexes,
      writeError: this.#writeError,
      answers: this.#answers,
      types: new Map(),
      report: new Report(),
    };
    call = c;
    globalThis.fetch = (input, init) => stubFetch(c, input, init);
    const end = () => {
      call = null;
      globalThis.fetch = realFetch;
    };
    const report = c.report;
    const failed = (e) => {
      if (typeof e !== 'string') throw e;
      report.error = e;
      return report;
    };
    let pending = false;
    try {
      try {
        handler.init(JSON.stringify(this.#config));
      } catch (e) {
        if (typeof e !== 'string') throw e;
        report.error = `init: ${e}`;
        return report;
      }
      let outcome;
      try {
        outcome = handler.handle(event);
      } catch (e) {
        return failed(e);
      }
      if (typeof outcome?.then === 'function') {
        pending = true;
        return Promise.resolve(outcome)
          .then((value) => {
            report.outcome = value;
            return report;
          }, failed)
          .finally(end);
      }
      report.outcome = outcome;
      return report;
    } finally {
      if (!pending) end();
    }
  }
}

// The global `fetch` while a call runs: records the request and answers from the
// TestHost's `http` and `httpError`.
async function stubFetch(c, input, init) {
  const request = new Request(input, init);
  const sent = { method: request.method, url: request.url, headers: Object.fromEntries(request.headers), body: '' };
  c.report.requests.push(sent);
  sent.body = await request.text();
  const answer = c.answers.find(([prefix]) => request.url.startsWith(prefix))?.[1];
  if (answer === undefined || answer.error !== undefined) {
    const why =
      answer?.error ?? `HttpRequestDenied: the TestHost has no answer for ${request.url} (give one with TestHost.http)`;
    throw new TypeError(`NetworkError when attempting to fetch resource. ${why}`);
  }
  // A status that has no body (204, 304, ...) must be given none.
  const empty = [101, 103, 204, 205, 304].includes(answer.status);
  const response = new Response(empty ? null : answer.body, { status: answer.status, headers: answer.headers });
  Object.defineProperty(response, 'url', { value: request.url });
  return response;
}

// What one call did.
export class Report {
  // What `handle` returned (`{ tag: 'done' }`, `{ tag: 'requeue-after', val: 500n }`),
  // or undefined when it threw.
  outcome = undefined;
  // The string `handle` threw (the error the daemon retries); `init: ...` for `init`.
  error = undefined;
  // The lines logged, in order: `[level, message]`.
  logs = [];
  // The metrics recorded, in order: `{ kind, name, value, labels }`, `kind` one of
  // `counter`, `gauge`, `histogram` and `labels` as given (`[[name, value], ...]`).
  metrics = [];
  // The writes asked for, in order, recorded instead of sent:
  // `{ op: 'apply', resource, namespace, name, body }`,
  // `{ op: 'merge-patch', resource, namespace, name, patch }`,
  // `{ op: 'delete', resource, namespace, name }`,
  // `{ op: 'event', object, eventType, reason, message }` (bodies parsed from JSON).
  writes = [];
  // The HTTP requests sent with `fetch`, in order, answered or not:
  // `{ method, url, headers, body }`, `headers` an object of lowercase names and `body`
  // the body's text ('' for none).
  requests = [];

  // The logged messages without their levels.
  lines() {
    return this.logs.map(([, message]) => message);
  }

  // The sum added to counter `name` with exactly `labels` (an object), or 0.
  counter(name, labels = {}) {
    return this.#series('counter', name, labels).reduce((sum, v) => sum + v, 0);
  }

  // The last value gauge `name` with exactly `labels` was set to, or undefined.
  gauge(name, labels = {}) {
    return this.#series('gauge', name, labels).at(-1);
  }

  // The values observed in histogram `name` with exactly `labels`, in order.
  observed(name, labels = {}) {
    return this.#series('histogram', name, labels);
  }

  #series(kind, name, labels) {
    const wanted = JSON.stringify(Object.entries(labels).sort());
    return this.metrics
      .filter((m) => m.kind === kind && m.name === name)
      .filter((m) => JSON.stringify([...m.labels].sort()) === wanted)
      .map((m) => m.value);
  }
}

// An event of `kind` (`added`, `updated`, `deleted`, `sync`) about `object`, on route
// `test`, first attempt; `more` sets other fields (`{ route, attempt, oldObject, ... }`).
export function event(kind, object, more = {}) {
  return {
    kind,
    route: 'test',
    object: JSON.stringify(object),
    oldObject: undefined,
    attempt: 1,
    finalStateUnknown: false,
    ...more,
  };
}

// An `updated` event from `old` to `now`, on route `test`, first attempt.
export function updated(old, now) {
  return event('updated', now, { oldObject: JSON.stringify(old) });
}

// ---- switchyard:plugin/host ----

export function log(level, message) {
  current().report.logs.push([level, message]);
}

// ---- switchyard:plugin/metrics: checked as the daemon checks them ----

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function record(kind, name, value, labels) {
  const c = current();
  if (!METRIC_NAME.test(name)) {
    throw new ComponentError(
      `invalid metric name ${JSON.stringify(name)}: use letters, digits, '_' and ':', not starting with a digit`,
    );
  }
  const family = kind === 'counter' && name.endsWith('_total') ? name.slice(0, -6) : name;
  const q = JSON.stringify(family);
  if (kind === 'counter' && !(Number.isFinite(value) && value >= 0)) {
    throw new ComponentError(`counter ${q}: cannot add ${value}: a counter only goes up by finite amounts`);
  }
  if (kind === 'histogram' && !Number.isFinite(value)) {
    throw new ComponentError(`histogram ${q}: cannot observe ${value}: not a finite number`);
  }
  if (kind === 'gauge' && Number.isNaN(value)) {
    throw new ComponentError(`gauge ${q}: cannot set NaN`);
  }
  const seen = new Set();
  for (const [label] of labels) {
    if (!LABEL_NAME.test(label) || label.startsWith('__')) {
      throw new ComponentError(
        `invalid label name ${JSON.stringify(label)}: use letters, digits and '_', not starting with a digit or '__'`,
      );
    }
    if (label === 'handler') {
      throw new ComponentError(`the label "handler" is set by the host to the handler's name`);
    }
    if (seen.has(label)) throw new ComponentError(`label ${JSON.stringify(label)} is given twice`);
    seen.add(label);
  }
  const known = c.types.get(family);
  if (known && known !== kind) {
    throw new ComponentError(`metric ${q} is a ${known}, not a ${kind}: use another name`);
  }
  c.types.set(family, kind);
  c.report.metrics.push({ kind, name, value, labels: labels.map(([k, v]) => [k, v]) });
}

export function counterAdd(name, value, labels) {
  record('counter', name, value, labels);
}
export function gaugeSet(name, value, labels) {
  record('gauge', name, value, labels);
}
export function histogramObserve(name, value, labels) {
  record('histogram', name, value, labels);
}

// ---- switchyard:plugin/cache: answers from the objects given to TestHost.object ----

function cached(resource) {
  return current()
    .objects.filter(([r, o]) => r === resource || o.kind === resource)
    .map(([, o]) => o);
}

const inNamespace = (o, namespace) => namespace === undefined || o.metadata?.namespace === namespace;

export function get(resource, namespace, name) {
  const found = cached(resource).find((o) => inNamespace(o, namespace) && o.metadata?.name === name);
  return found === undefined ? undefined : JSON.stringify(found);
}
export function list(resource, namespace) {
  return cached(resource)
    .filter((o) => inNamespace(o, namespace))
    .map((o) => JSON.stringify(o));
}
export function listByIndex(resource, index, value) {
  const values = index === 'namespace' ? (o) => [o.metadata?.namespace] : current().indexes.get(index);
  if (!values) {
    throw new ComponentError(`${resource} has no index ${JSON.stringify(index)} (declare it with TestHost.index)`);
  }
  return cached(resource)
    .filter((o) => values(o).includes(value))
    .map((o) => JSON.stringify(o));
}

// ---- switchyard:plugin/kube: recorded, never sent ----

function write(entry) {
  const c = current();
  if (c.writeError !== undefined) throw new ComponentError(c.writeError);
  c.report.writes.push(entry);
}

function parse(what, text) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ComponentError(`${what}: not JSON: ${e.message}`);
  }
}

export function apply(resource, namespace, name, body) {
  const object = parse('apply', body);
  write({ op: 'apply', resource, namespace, name, body: structuredClone(object) });
  object.metadata = { ...object.metadata, name, ...(namespace === undefined ? {} : { namespace }) };
  return JSON.stringify(object);
}

export function mergePatch(resource, namespace, name, patch) {
  const changes = parse('merge-patch', patch);
  const found = get(resource, namespace, name);
  if (found === undefined) {
    throw new ComponentError(`${resource} ${namespace === undefined ? name : `${namespace}/${name}`} not found`);
  }
  write({ op: 'merge-patch', resource, namespace, name, patch: changes });
  return JSON.stringify(merge(JSON.parse(found), changes));
}

// RFC 7386 JSON merge patch.
function merge(target, patch) {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = merge(out[key], value);
  }
  return out;
}

function delete_(resource, namespace, name) {
  write({ op: 'delete', resource, namespace, name });
}
export { delete_ as delete };

export function createEvent(object, eventType, reason, message) {
  if (eventType !== 'Normal' && eventType !== 'Warning') {
    throw new ComponentError(`event type ${JSON.stringify(eventType)} must be Normal or Warning`);
  }
  write({ op: 'event', object: parse('event', object), eventType, reason, message });
}
