// Unit tests of the JavaScript SDK's builders (plain Node, no bindings):
//   node --test plugins/sdk-js/
import test from 'node:test';
import assert from 'node:assert/strict';
import {
  exportPolicy, parseConfig, pattern, Patch, pointer, Request, Response, Violations,
} from './wasm-apiserver-sdk.js';

test('pointers escape tilde and slash', () => {
  assert.equal(pointer(['metadata', 'labels', 'a/b~c']), '/metadata/labels/a~1b~0c');
});

test('set creates missing parents once', () => {
  const p = Patch.on({ metadata: { name: 'x' } }).setLabel('a', '1').setLabel('b', '2');
  assert.deepEqual(p.ops, [
    { op: 'add', path: '/metadata/labels', value: { a: '1' } },
    { op: 'add', path: '/metadata/labels/b', value: '2' },
  ]);
  assert.deepEqual(Patch.on({}).setAnnotation('k', 'v').ops,
    [{ op: 'add', path: '/metadata', value: { annotations: { k: 'v' } } }]);
});

test('set replaces a non-object parent and skips unchanged values', () => {
  const obj = { metadata: { labels: null, annotations: { k: 'v' } } };
  const p = Patch.on(obj).setLabel('a', '1').setAnnotation('k', 'v');
  assert.deepEqual(p.ops, [{ op: 'replace', path: '/metadata/labels', value: { a: '1' } }]);
  assert.equal(obj.metadata.labels, null, "the caller's object is not modified");
});

test('defaults keep what is there, in key order', () => {
  const p = Patch.on({ metadata: { labels: { b: 'old' } } })
    .defaultLabels({ c: '3', a: '1', b: '2' }).defaultAnnotations({ y: '2', x: '1' });
  assert.deepEqual(p.ops, [
    { op: 'add', path: '/metadata/labels/a', value: '1' },
    { op: 'add', path: '/metadata/labels/c', value: '3' },
    { op: 'add', path: '/metadata/annotations', value: { x: '1' } },
    { op: 'add', path: '/metadata/annotations/y', value: '2' },
  ]);
});

test('remove only what exists; raw operations', () => {
  const p = Patch.on({ metadata: { labels: { a: '1' } } }).removeLabel('a').removeLabel('a').removeAnnotation('x');
  assert.deepEqual(p.ops, [{ op: 'remove', path: '/metadata/labels/a' }]);
  assert.equal(new Patch().test('/spec/replicas', 3).replace('/spec/replicas', 5).removePointer('/status').toJson(),
    '[{"op":"test","path":"/spec/replicas","value":3},{"op":"replace","path":"/spec/replicas","value":5},{"op":"remove","path":"/status"}]');
});

test('responses: deny defaults, code, reason, causes; allow ignores them', () => {
  const d = Response.invalid('bad').cause('spec.replicas', 'FieldValueInvalid', 'too many').toWit();
  assert.deepEqual(d.status, { code: 422, reason: 'Invalid', message: 'bad',
    causes: [{ field: 'spec.replicas', reason: 'FieldValueInvalid', message: 'too many' }] });
  assert.equal(Response.deny('no').toWit().status.code, 403);
  const a = Response.allow().code(500).warn('w').annotate('k', 'v').toWit();
  assert.deepEqual(a, { allowed: true, status: undefined, patch: undefined, warnings: ['w'], auditAnnotations: [['k', 'v']] });
  assert.equal(Response.patched(new Patch().add('/a', 1)).toWit().patch, '[{"op":"add","path":"/a","value":1}]');
  assert.equal(Response.patched(new Patch()).toWit().patch, undefined);
  assert.equal(Response.deny('x').when(false).allowed, true);
});

test('violations', () => {
  assert.equal(new Violations().intoResponse('x').allowed, true);
  const v = new Violations();
  v.required('metadata.labels', 'missing team');
  v.forbidden('metadata.name', 'reserved');
  const r = v.intoResponse('ConfigMap "a" denied');
  assert.equal(r.message, 'ConfigMap "a" denied: missing team; reserved');
  assert.deepEqual(r.status.causes.map((c) => c.reason), ['FieldValueRequired', 'FieldValueForbidden']);
});

test('configuration: defaults, patterns and errors', () => {
  const schema = { labels: [], namePattern: pattern(), mode: 'warn' };
  assert.deepEqual(parseConfig(' ', schema), { labels: [], namePattern: undefined, mode: 'warn' });
  const c = parseConfig('{"labels": ["team"], "namePattern": "^tmp-"}', schema);
  assert.ok(c.namePattern.isMatch('tmp-1') && !c.namePattern.isMatch('a-tmp'));
  for (const [text, want] of [['{"lables": []}', 'unknown field(s): lables'], ['{"namePattern": "("}', 'invalid pattern "("'],
    ['{"labels": "team"}', 'labels must be a list'], ['[1]', 'expected a JSON object'], ['{', 'not JSON']]) {
    assert.throws(() => parseConfig(text, schema), (e) => e.message.startsWith('invalid configuration: ') && e.message.includes(want));
  }
});

test('requests fall back to the old object; exported policies turn errors into denials', () => {
  const r = Request.fromReview({ request: { operation: 'DELETE', kind: { kind: 'ConfigMap' },
    oldObject: { metadata: { name: 'a', labels: { team: 'x' } } } } });
  assert.ok(r.isDelete);
  assert.deepEqual([r.name, r.label('team'), r.missingLabels(['team', 'env'])], ['a', 'x', ['env']]);
  const admission = exportPolicy({ config: { x: 1 } });
  assert.throws(() => admission.checkConfig('{"y": 2}'), (e) => typeof e === 'string' && e.includes('unknown field(s): y'));
  const wit = { uid: 'u', kind: { group: '', version: 'v1', kind: 'ConfigMap' }, resource: { group: '', version: 'v1', resource: 'configmaps' },
    operation: 'create', userInfo: { username: 'u', uid: '', groups: [], extra: [] }, dryRun: false, object: '{not json' };
  assert.equal(admission.validate('', wit).status.code, 400);
  assert.equal(admission.validate('{"y": 2}', wit).status.code, 500);
  assert.equal(admission.validate('', { ...wit, object: '{}' }).allowed, true);
});

// --- the controller SDK, on the namespace-defaults example -------------------

import { fixtureHost, reconcile as reconcileWith } from './wasm-apiserver-controller-sdk.js';
import { namespaceDefaults } from '../../examples/namespace-defaults/js/logic.js';

const nsKey = (name) => ({ group: '', version: 'v1', resource: 'namespaces', namespace: undefined, name });

test('a labelled namespace gets three objects and loses them with the label', () => {
  const host = fixtureHost([{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'a', uid: 'u', labels: { tenant: 'a' } } }]);
  assert.equal(reconcileWith(namespaceDefaults, '', nsKey('a'), host), undefined);
  assert.deepEqual(host.state.writes.map(([v, k]) => [v, k]),
    [['apply', 'NetworkPolicy'], ['apply', 'ResourceQuota'], ['apply', 'RoleBinding']]);
  host.state.objects[0] = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'a', uid: 'u' } };
  host.state.writes.length = 0;
  reconcileWith(namespaceDefaults, '', nsKey('a'), host);
  assert.deepEqual(host.state.writes.map(([v]) => v), ['delete', 'delete', 'delete']);
});

test('an unknown configuration field is refused', () => {
  assert.throws(() => reconcileWith(namespaceDefaults, '{"nope": 1}', nsKey('a'), fixtureHost()), /unknown/);
});
