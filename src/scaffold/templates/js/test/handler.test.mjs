import assert from 'node:assert/strict';
import { test } from 'node:test';

import { handle, init } from '../handler.js';
import { logged, writes } from './host.mjs';

test('logs the change and the object', () => {
  const configmap = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'demo', namespace: 'default' } };
  init('null');
  const outcome = handle({
    kind: 'added',
    route: 'test',
    object: JSON.stringify(configmap),
    oldObject: undefined,
    attempt: 1,
    finalStateUnknown: false,
  });
  assert.deepEqual(outcome, { tag: 'done' });
  assert.deepEqual(logged, [['info', 'added ConfigMap default/demo']]);
  assert.deepEqual(writes, []);
});
