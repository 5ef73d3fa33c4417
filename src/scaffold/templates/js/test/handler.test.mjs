// The handler's own code on events, against the host in test/host.mjs (`npm test`).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as handler from '../handler.js';
import {
  TestHost,
  apply,
  counterAdd,
  createEvent,
  delete as remove,
  event,
  mergePatch,
  updated,
} from './host.mjs';

const configmap = (name, labels) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace: 'default', ...(labels && { labels }) },
});

test('logs the change and the object', () => {
  const demo = configmap('demo');
  const report = new TestHost()
    .object('configmaps', demo) // what cache reads see
    .object('configmaps', configmap('other'))
    .handle(handler, event('added', demo));
  assert.deepEqual(report.outcome, { tag: 'done' });
  assert.deepEqual(report.logs, [['info', 'added ConfigMap default/demo']]);
  assert.equal(report.counter('events', { change: 'added' }), 1);
  assert.equal(report.gauge('cached_objects', { namespace: 'default' }), 2);
  assert.deepEqual(report.observed('object_kib'), [JSON.stringify(demo).length / 1024]);
  assert.deepEqual(report.writes, []);
});

test('adds the configured label to an object without it, and only then', () => {
  const demo = configmap('demo');
  const host = new TestHost().config({ label: 'owner', value: 'unknown' }).object('configmaps', demo);
  const report = host.handle(handler, event('added', demo));
  assert.deepEqual(report.writes, [
    {
      op: 'merge-patch',
      resource: 'ConfigMap',
      namespace: 'default',
      name: 'demo',
      patch: { metadata: { labels: { owner: 'unknown' } } },
    },
  ]);
  assert.deepEqual(report.lines(), ['added ConfigMap default/demo', 'labelled default/demo owner=unknown']);

  const again = host.handle(handler, updated(demo, configmap('demo', { owner: 'unknown' })));
  assert.deepEqual(again.writes, []);
  assert.equal(again.counter('events', { change: 'updated' }), 1);
});

test('a refused write and a bad config are errors the daemon retries', () => {
  const demo = configmap('demo');
  const host = new TestHost().config({ label: 'owner', value: 'unknown' }).object('configmaps', demo);
  const refused = host.failWrites('capability denied').handle(handler, event('added', demo));
  assert.equal(refused.outcome, undefined);
  assert.equal(refused.error, 'capability denied');

  const bad = new TestHost().config({ label: 7 }).handle(handler, event('added', demo));
  assert.equal(bad.error, 'init: config: "label" and "value" must be strings');
  assert.deepEqual(bad.logs, []);
});

test('what the host records of each write, and what it refuses (a handler written here)', () => {
  const writer = {
    init() {},
    handle() {
      const applied = apply('configmaps', 'default', 'made', JSON.stringify({ data: { a: '1' } }));
      mergePatch('configmaps', 'default', 'demo', JSON.stringify({ data: { b: '2' } }));
      remove('configmaps', 'default', 'old');
      createEvent(applied, 'Normal', 'Made', 'made it');
      assert.throws(() => createEvent(applied, 'Odd', 'Made', 'x'), {
        payload: 'event type "Odd" must be Normal or Warning',
      });
      assert.throws(() => counterAdd('events', -1, []), { payload: /a counter only goes up/ });
      return { tag: 'requeue-after', val: 500n };
    },
  };
  const report = new TestHost().object('configmaps', configmap('demo')).handle(writer, event('sync', {}));
  assert.deepEqual(report.outcome, { tag: 'requeue-after', val: 500n });
  assert.deepEqual(
    report.writes.map((w) => w.op),
    ['apply', 'merge-patch', 'delete', 'event'],
  );
  assert.deepEqual(report.writes[0].body, { data: { a: '1' } });
  assert.deepEqual(report.writes[2], { op: 'delete', resource: 'configmaps', namespace: 'default', name: 'old' });
  assert.deepEqual(report.writes[3].object.metadata, { name: 'made', namespace: 'default' });
  assert.equal(report.writes[3].eventType, 'Normal');
});

test('what the host answers and records of requests sent with fetch (a handler written here)', async () => {
  // Posts each event's object to a webhook; a failed request or a 5xx is an error the
  // daemon retries. Its `handle` is async, so the report is awaited.
  const notifier = {
    init() {},
    async handle(event) {
      try {
        const response = await fetch('https://hooks.example.com/notify', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: event.object,
        });
        if (!response.ok) throw `the receiver answered ${response.status}: ${await response.text()}`;
        return { tag: 'done' };
      } catch (e) {
        throw typeof e === 'string' ? e : `${e.name}: ${e.message}`;
      }
    },
  };
  const realFetch = globalThis.fetch;
  const demo = configmap('demo');
  const sent = await new TestHost()
    .http('https://hooks.example.com/', { status: 200, body: 'ok' })
    .handle(notifier, event('added', demo));
  assert.deepEqual(sent.outcome, { tag: 'done' });
  assert.deepEqual(sent.requests, [
    {
      method: 'POST',
      url: 'https://hooks.example.com/notify',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(demo),
    },
  ]);

  const busy = new TestHost().http('https://hooks.example.com/', { status: 503, body: 'busy' });
  assert.equal((await busy.handle(notifier, event('added', demo))).error, 'the receiver answered 503: busy');

  const down = new TestHost().httpError('https://hooks.example.com/', 'connection refused');
  assert.equal(
    (await down.handle(notifier, event('added', demo))).error,
    'TypeError: NetworkError when attempting to fetch resource. connection refused',
  );

  // A request no stub answers is refused, as one to a destination the handler's
  // `capabilities.http` does not allow; it is recorded all the same.
  const refused = await new TestHost().handle(notifier, event('added', demo));
  assert.match(refused.error, /^TypeError: NetworkError .*no answer for https:\/\/hooks\.example\.com\/notify/);
  assert.equal(refused.requests.length, 1);
  assert.equal(globalThis.fetch, realFetch); // the real fetch is back after each call
});
