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

// --- the cluster helpers' fixtures --------------------------------------------

import {
  cluster, ClusterError, connectCluster, setCanI, setCluster, SUBJECT_ACCESS_REVIEW,
} from './wasm-apiserver-sdk.js';

const ingress = (namespace, name, labels) => ({ apiVersion: 'networking.k8s.io/v1', kind: 'Ingress',
  metadata: { namespace, name, labels }, spec: { rules: [{ host: 'a.example.com' }] } });
const ING = ['networking.k8s.io/v1', 'Ingress'];
const names = (objects) => objects.map((o) => o.metadata.name);
const fixture = () => {
  setCanI(false);
  setCluster([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'a', labels: { team: 'x' } } },
    ingress('a', 'web', { app: 'web', tier: 'front' }),
    ingress('b', 'web', { app: 'web' }),
    ingress('b', 'db', { app: 'db', legacy: 'yes' }),
  ]);
};

test('cluster.get finds an object by namespace and name; answers are copies', () => {
  fixture();
  assert.deepEqual(cluster.get('v1', 'Namespace', undefined, 'a').metadata.labels, { team: 'x' });
  assert.equal(cluster.get('v1', 'Namespace', null, 'b'), undefined);
  assert.equal(cluster.get(...ING, 'b', 'web').metadata.namespace, 'b');
  assert.equal(cluster.get(...ING, undefined, 'web'), undefined);
  assert.equal(cluster.get('networking.k8s.io/v1beta1', 'Ingress', 'b', 'web'), undefined);
  cluster.get('v1', 'Namespace', undefined, 'a').metadata.labels.team = 'changed';
  assert.equal(cluster.get('v1', 'Namespace', undefined, 'a').metadata.labels.team, 'x');
});

test('cluster.list by namespace and label selector', () => {
  fixture();
  assert.deepEqual(names(cluster.list(...ING)), ['web', 'web', 'db']);
  assert.deepEqual(names(cluster.list(...ING, 'b')), ['web', 'db']);
  for (const [selector, want] of [['app=web', ['web', 'web']], ['app==web,tier=front', ['web']],
    ['app!=web', ['db']], ['tier!=front', ['web', 'db']], ['app in (db, web),!legacy', ['web', 'web']],
    ['app notin (web)', ['db']], ['legacy', ['db']], ['', ['web', 'web', 'db']]]) {
    assert.deepEqual(names(cluster.list(...ING, undefined, selector)), want, selector);
  }
  assert.throws(() => cluster.list(...ING, undefined, 'app in web'), ClusterError);
});

test('cluster.list by field selector on any path, lists fanning out', () => {
  const withHosts = (namespace, name, hosts) => ({ ...ingress(namespace, name, {}), spec: { rules: hosts.map((host) => ({ host })) } });
  setCluster([withHosts('a', 'one', ['x.example.com']), withHosts('b', 'two', ['y.example.com', 'x.example.com']),
    withHosts('b', 'none', [])]);
  for (const [selector, want] of [['spec.rules.host=x.example.com', ['one', 'two']],
    ['spec.rules.host!=y.example.com', ['one', 'none']], ['spec.rules.host=x.example.com,metadata.namespace=b', ['two']],
    ['spec.rules.host=', ['none']]]) {
    assert.deepEqual(names(cluster.list(...ING, undefined, undefined, selector)), want, selector);
  }
  assert.throws(() => cluster.list(...ING, undefined, undefined, 'spec..host=a'), ClusterError);
});

test('kinds not granted throw the host\'s error', () => {
  setCluster([ingress('a', 'web', {})], [{ apiVersion: 'networking.k8s.io/v1', kind: 'Ingress' }]);
  assert.equal(cluster.list(...ING).length, 1);
  assert.throws(() => cluster.get('v1', 'Secret', 'a', 'token'), (e) => e instanceof ClusterError
    && e.message === "reading v1 Secret is not granted: it is not in the plugin's spec.contextAwareResources");
  assert.throws(() => cluster.canI('alice', { verb: 'get', resource: 'pods' }),
    /reading authorization.k8s.io\/v1 SubjectAccessReview is not granted/);
  setCluster([], [SUBJECT_ACCESS_REVIEW]);
  assert.equal(cluster.canI('alice', { verb: 'get', resource: 'pods' }), false);
});

test('cluster.canI answers from rules or a function', () => {
  fixture();
  const alice = { username: 'alice', uid: '1', groups: ['devs'], extra: { scopes: ['a'] } };
  const pods = (verb, namespace) => ({ verb, group: '', resource: 'pods', namespace });
  assert.equal(cluster.canI(alice, pods('delete', 'team-a')), false, 'denied until set');
  setCanI([{ as: 'alice', verb: ['get', 'delete'], resource: 'pods', namespace: 'team-a' }, { asGroup: 'admins' }]);
  assert.equal(cluster.canI(alice, pods('delete', 'team-a')), true);
  assert.equal(cluster.canI(alice, pods('delete', 'team-b')), false);
  assert.equal(cluster.canI(alice, pods('delete')), false, 'cluster-wide is not team-a');
  assert.equal(cluster.canI(alice, pods('create', 'team-a')), false);
  assert.equal(cluster.canI('bob', pods('delete', 'team-a')), false);
  assert.equal(cluster.canI({ username: 'bob', groups: ['admins'] }, { verb: 'delete', group: 'apps', resource: 'deployments' }), true);
  const seen = [];
  setCanI((user, attributes) => { seen.push([user, attributes]); return attributes.verb === 'get'; });
  assert.equal(cluster.canI(alice, { verb: 'get', group: 'apps', resource: 'deployments', subresource: 'scale', namespace: 'a', name: 'web' }), true);
  assert.deepEqual(seen, [[alice, { verb: 'get', group: 'apps', resource: 'deployments', subresource: 'scale', namespace: 'a', name: 'web' }]]);
  setCanI(true);
  assert.equal(cluster.canI('anyone', { verb: 'delete', resource: 'nodes' }), true);
  setCluster([]);
  assert.equal(cluster.canI('anyone', { verb: 'delete', resource: 'nodes' }), true, 'setCluster keeps the answer');
});

test('in a component the calls go to the cluster import, its errors as ClusterError', () => {
  const calls = [];
  const fields = [];
  const page = (names, continueToken) => ({ items: names.map((n) => ({ json: JSON.stringify({ metadata: { name: n } }), resourceVersion: '1' })), resourceVersion: '9', continueToken });
  const imports = {
    get(target, namespace, name) {
      calls.push(['get', target, namespace, name]);
      if (name === 'secret') throw Object.assign(new Error('err'), { payload: 'reading v1 Secret is not granted: ...' });
      return name === 'a' ? { json: '{"kind":"Namespace"}', resourceVersion: '1' } : undefined;
    },
    list(target, options) {
      calls.push(['list', options.continueToken]);
      fields.push(options.fieldSelector);
      return options.continueToken ? page(['c'], undefined) : page(['a', 'b'], 'next');
    },
    canI(user, attributes) {
      calls.push(['canI', user, attributes]);
      return true;
    },
  };
  const admission = exportPolicy({}, { cluster: imports });
  assert.equal(typeof admission.validate, 'function');
  assert.deepEqual(cluster.get('v1', 'Namespace', undefined, 'a'), { kind: 'Namespace' });
  assert.equal(cluster.get('v1', 'Namespace', undefined, 'b'), undefined);
  assert.deepEqual(calls[0], ['get', { tag: 'kind', val: { apiVersion: 'v1', kind: 'Namespace' } }, undefined, 'a']);
  assert.throws(() => cluster.get('v1', 'Secret', 'x', 'secret'),
    (e) => e instanceof ClusterError && e.message === 'reading v1 Secret is not granted: ...');
  assert.deepEqual(names(cluster.list('v1', 'ConfigMap')), ['a', 'b', 'c']);
  assert.deepEqual(calls.filter(([c]) => c === 'list'), [['list', undefined], ['list', 'next']]);
  cluster.list('v1', 'ConfigMap', undefined, undefined, 'data.k=v');
  assert.deepEqual(fields, [undefined, undefined, 'data.k=v', 'data.k=v']);
  assert.equal(cluster.canI({ username: 'alice', groups: ['g'], extra: { k: ['v'] } }, { verb: 'get', resource: 'pods', namespace: 'n' }), true);
  assert.deepEqual(calls.at(-1), ['canI', { username: 'alice', uid: '', groups: ['g'], extra: [['k', ['v']]] },
    { verb: 'get', group: '', resource: 'pods', subresource: undefined, namespace: 'n', name: undefined }]);
  connectCluster(imports);
  fixture(); // back to fixtures for the other tests
});

// --- a context-aware policy: the unique-ingress-host example -----------------

import * as sdk from './wasm-apiserver-sdk.js';
import { uniqueIngressHost } from '../../examples/unique-ingress-host/js/logic.js';

test('unique-ingress-host: a host another Ingress serves is refused unless its owner may share it', () => {
  const policy = uniqueIngressHost(sdk);
  const review = (user, host, config = '') => sdk.run(policy, 'validate', config, sdk.Request.fromReview({
    namespace: 'web', userInfo: { username: user, groups: [] },
    object: { ...ingress('web', 'mine', {}), spec: { rules: [{ host }] } } }));
  const grants = [ING, SUBJECT_ACCESS_REVIEW];
  setCluster([ingress('other', 'taken', {})], grants);
  setCanI([{ as: 'alice', verb: 'update', resource: 'ingresses', namespace: 'other', name: 'taken' }]);
  const owners = '{"ownersMayShare": true}';
  assert.equal(review('bob', 'new.example.com').allowed, true);
  const denied = review('bob', 'a.example.com');
  assert.deepEqual([denied.allowed, denied.status.code, denied.message],
    [false, 409, 'host "a.example.com" is already served by ingress other/taken']);
  assert.equal(review('alice', 'a.example.com').allowed, false, 'sharing needs ownersMayShare');
  assert.equal(review('alice', 'a.example.com', owners).allowed, true);
  assert.equal(review('bob', 'a.example.com', owners).allowed, false);
  setCluster([ingress('other', 'taken', {})], [ING]);
  assert.match(review('alice', 'a.example.com', owners).message,
    /^cannot review access to ingress other\/taken: reading authorization.k8s.io\/v1 SubjectAccessReview is not granted/);
  setCluster([], [['v1', 'ConfigMap']]);
  assert.match(review('alice', 'a.example.com').message,
    /^cannot list ingresses: reading networking.k8s.io\/v1 Ingress is not granted/);
  fixture();
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
