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
