// Unit tests of the JavaScript scheduler SDK (plain Node, no bindings):
//   node --test plugins/sdk-js/
import test from 'node:test';
import assert from 'node:assert/strict';
import {
  checkCase, clampScore, cycle, CycleFailed, exportScheduler, KubeObject, Node, parseInteger, Refusal, runner, SKIP,
} from './wasm-apiserver-scheduler-sdk.js';

const POD = JSON.stringify({ kind: 'Pod', metadata: { name: 'p', namespace: 'ns' } });
const node = (name, labels = {}) => ({ kind: 'Node', metadata: { name, labels } });
// The record the host sends for node(name, labels), as the bindings hand it
// (tuples as arrays, `none` as undefined), without its object.
const record = (name, labels = {}) => ({
  name, labels: Object.entries(labels).sort(), taints: [], unschedulable: false, object: undefined,
});

// Refuses nodes with the configured label, scores by the `score` label.
const sample = {
  config: { avoid: '' },
  check(config) { if (config.avoid === 'bad') throw new Error('avoid may not be bad'); },
  preFilter(config, pod) { return pod.label('skip') ? SKIP : pod.name; },
  filter(config, pod, n) {
    if (n.label(config.avoid) !== undefined) return Refusal.unschedulable(`${pod.state} avoids ${n.name}`);
    if (n.name === 'boom') throw new Error('exploded');
    return undefined;
  },
  score(config, pod, n) {
    if (n.label('score') === undefined) throw Refusal.error(`${n.name} has no score`);
    return Number(n.label('score'));
  },
};

const scaled = {
  preScore(config, pod, nodes) { return String(nodes.length); },
  score(config, pod, n) { return parseInteger(n.label('raw')) ?? 0; },
  normalizeScore(config, pod, scores) {
    const top = Math.max(1, ...scores);
    return scores.map((s) => Math.floor((s * 100) / top));
  },
};

// Records the nodes its filter and score see; refuses a node annotated `off`.
const seen = [];
const watcher = {
  filter(config, pod, n) {
    seen.push(n);
    return n.annotation('off') ? Refusal.unschedulable(`${n.name} is off`) : undefined;
  },
  score(config, pod, n) { return n.taints.length; },
};
const FULL = {
  kind: 'Node',
  metadata: { name: 'n', labels: { zone: 'b', arch: 'arm', odd: 1 }, annotations: { off: 'yes' } },
  spec: { unschedulable: true, taints: [{ key: 'gpu', effect: 'NoSchedule' }, { key: 'a', value: 'b', effect: 'NoExecute' }] },
};

test('points are the functions the plugin has', () => {
  assert.deepEqual(runner(sample).points(), ['preFilter', 'filter', 'score']);
  assert.deepEqual(runner(scaled).points(), ['preScore', 'score', 'normalizeScore']);
  assert.deepEqual(exportScheduler(sample).extensionPoints(''),
    { preFilter: true, filter: true, preScore: false, score: true, normalizeScore: false, nodeObjects: false });
});

test('filter answers each node in order', () => {
  const out = runner(sample).filter('{"avoid": "gpu"}', 'p', POD, [record('a'), record('b', { gpu: 'x' }), record('boom')]);
  assert.equal(out[0], undefined);
  assert.deepEqual(out[1].toWit(), { code: 'unschedulable', reasons: ['p avoids b'] });
  assert.deepEqual(out[2].toWit(), { code: 'error', reasons: ['filter failed: exploded'] });
});

test('a bad configuration or pod refuses every node with error', () => {
  const nodes = [record('a'), record('b')];
  assert.deepEqual(exportScheduler(sample).filter('{"avoid": "bad"}', '', POD, nodes),
    [{ code: 'error', reasons: ['avoid may not be bad'] }, { code: 'error', reasons: ['avoid may not be bad'] }]);
  assert.ok(runner(sample).filter('', '', '{', nodes).every((r) => r.code === 'error'));
  const p = exportScheduler(sample).preFilter('{"avoyd": 1}', POD);
  assert.equal(p.tag, 'refuse');
  assert.match(p.val.reasons[0], /unknown field\(s\): avoyd/);
  assert.throws(() => exportScheduler(sample).checkConfig('{"avoid": "bad"}'), (e) => e === 'avoid may not be bad');
});

test('pre-filter state and skip', () => {
  assert.deepEqual(exportScheduler(sample).preFilter('', POD), { tag: 'proceed', val: 'p' });
  const skipped = JSON.stringify({ metadata: { name: 'p', labels: { skip: '1' } } });
  assert.deepEqual(exportScheduler(sample).preFilter('', skipped), { tag: 'skip' });
});

test('score is per node, in BigInt, and a refusal is thrown as the record', () => {
  const s = exportScheduler(sample);
  const nodes = [record('a', { score: '7' }), record('b', { score: '1000' })];
  assert.deepEqual(s.score('', '', POD, nodes), [7n, 1000n]);
  const bad = [record('a', { score: '7' }), record('c')];
  assert.throws(() => s.score('', '', POD, bad), (e) => e.code === 'error' && e.reasons[0] === 'c has no score');
  const fraction = [record('a', { score: '1.5' })];
  assert.throws(() => s.score('', '', POD, fraction), (e) => /must return safe integers/.test(e.reasons[0]));
});

test('unclaimed points answer neutrally', () => {
  const s = exportScheduler(sample);
  assert.deepEqual(s.preScore('', 'kept', POD, []), { tag: 'proceed', val: 'kept' });
  assert.deepEqual(s.normalizeScore('', '', POD, [5n, 500n]), [5n, 500n]);
  assert.deepEqual(s.normalizeScore('', '', POD, BigInt64Array.from([5n, 500n])), [5n, 500n]);
  assert.deepEqual(exportScheduler(scaled).normalizeScore('', '', POD, BigInt64Array.from([5n, 10n])), [50n, 100n]);
  const plain = exportScheduler({});
  assert.deepEqual(plain.filter('', '', POD, [record('a')]), [undefined]);
  assert.deepEqual(plain.score('', '', POD, [record('a')]), [0n]);
});

test('a cycle filters, then scores what fits', () => {
  const pod = JSON.parse(POD);
  assert.deepEqual(cycle(scaled, '', pod, [node('a', { raw: '500' }), node('b', { raw: '1000' }), node('c')]),
    { refused: {}, scores: { a: 50, b: 100, c: 0 } });
  const got = cycle(sample, { avoid: 'off' }, pod, [node('a', { score: '5' }), node('c', { off: '1' })]);
  assert.deepEqual(Object.keys(got.refused), ['c']);
  assert.deepEqual(got.scores, { a: 5 });
  assert.throws(() => cycle(sample, {}, pod, [node('a', { score: '1000' })]),
    (e) => e instanceof CycleFailed && /out of 0-100/.test(e.message));
});

test('a wrong expectation fails its case', () => {
  const table = { config: { avoid: 'off' }, nodes: [node('a', { score: '5' }), node('b', { off: '1', score: '1' })] };
  assert.deepEqual(checkCase(sample, table, { name: 'ok', expect: { refused: { b: 'avoids b' }, scores: { a: 5 } } }), []);
  const problems = checkCase(sample, table, { name: 'bad', expect: { scores: { a: 6 } } });
  assert.deepEqual(problems, ['b: expected to fit, refused unschedulable: p avoids b', 'a: expected score 6, got 5']);
});

test('nodes read the record', () => {
  // The object says otherwise: name, labels, taints and unschedulable come from the record.
  const n = new Node({
    name: 'a', labels: [['arch', 'amd'], ['zone', 'x']], taints: [{ key: 'gpu', value: '', effect: 'NoSchedule' }],
    unschedulable: true, object: JSON.stringify(node('other', { zone: 'y' })),
  });
  assert.deepEqual([n.name, n.label('zone'), n.label('none'), n.label('constructor'), n.unschedulable],
    ['a', 'x', undefined, undefined, true]);
  assert.deepEqual(n.labels, { arch: 'amd', zone: 'x' });
  assert.deepEqual(n.taints, [{ key: 'gpu', value: '', effect: 'NoSchedule' }]);
  assert.equal(n.object.metadata.name, 'other');
  assert.equal(n.object, n.object);
  const bare = new Node({ name: 'b', labels: [], taints: [], unschedulable: false, object: undefined });
  assert.deepEqual([bare.labels, bare.taints, bare.unschedulable, bare.object, bare.annotation('x')],
    [{}, [], false, undefined, undefined]);
});

test('a node from an object is what the host sends', () => {
  const n = Node.fromObject(FULL);
  assert.deepEqual([n.name, n.unschedulable, n.label('odd')], ['n', true, undefined]);
  assert.deepEqual(Object.entries(n.labels), [['arch', 'arm'], ['zone', 'b']]);
  assert.deepEqual(n.taints, [{ key: 'gpu', value: '', effect: 'NoSchedule' }, { key: 'a', value: 'b', effect: 'NoExecute' }]);
  assert.equal(n.object, FULL);
  assert.equal(n.annotation('off'), 'yes');
  const bare = n.withoutObject();
  assert.deepEqual([bare.name, bare.labels, bare.taints, bare.unschedulable], ['n', n.labels, n.taints, true]);
  assert.deepEqual([bare.object, bare.annotation('off')], [undefined, undefined]);
  const empty = Node.fromObject({});
  assert.deepEqual([empty.name, empty.labels, empty.taints, empty.unschedulable], ['', {}, [], false]);
});

test('a node object that does not parse is an error refusal', () => {
  const bad = { name: 'bad', labels: [], taints: [], unschedulable: false, object: '{not json' };
  const good = { name: 'good', labels: [], taints: [], unschedulable: false, object: JSON.stringify(node('good')) };
  const out = runner({ ...watcher, nodeObjects: true }).filter('', '', POD, [good, bad]);
  assert.equal(out[0], undefined);
  assert.equal(out[1].code, 'error');
  assert.match(out[1].reasons[0], /^node bad object is not valid JSON/);
  // Not read, not parsed: a plugin that never reads the object never fails on it.
  assert.deepEqual(exportScheduler(sample).score('', '', POD, [{ ...record('a', { score: '3' }), object: '{' }]), [3n]);
});

test('without nodeObjects a plugin sees no objects', () => {
  assert.deepEqual(exportScheduler(watcher).extensionPoints(''),
    { preFilter: false, filter: true, preScore: false, score: true, normalizeScore: false, nodeObjects: false });
  seen.length = 0;
  // Its annotation would refuse it: the plugin cannot see it.
  assert.deepEqual(cycle(watcher, '', JSON.parse(POD), [FULL]), { refused: {}, scores: { n: 2 } });
  assert.deepEqual(seen.map((n) => [n.object, n.annotation('off'), n.label('zone'), n.unschedulable]),
    [[undefined, undefined, 'b', true]]);
});

test('with nodeObjects a plugin sees them', () => {
  const claiming = { ...watcher, nodeObjects: true };
  assert.deepEqual(exportScheduler(claiming).extensionPoints(''),
    { preFilter: false, filter: true, preScore: false, score: true, normalizeScore: false, nodeObjects: true });
  seen.length = 0;
  const other = { kind: 'Node', metadata: { name: 'm' } };
  const got = cycle(claiming, '', JSON.parse(POD), [FULL, other]);
  assert.deepEqual([Object.keys(got.refused), got.refused.n.reasons, got.scores], [['n'], ['n is off'], { m: 0 }]);
  assert.deepEqual(seen.map((n) => n.object), [FULL, other]);
  assert.notEqual(seen[0].object, FULL);
});

test('objects read names and labels', () => {
  const n = new KubeObject(node('a', { x: '1', n: 2 }));
  assert.deepEqual([n.name, n.namespace, n.label('x'), n.label('n'), n.labels], ['a', undefined, '1', undefined, { x: '1' }]);
  const p = KubeObject.parse(POD, 'pod');
  assert.deepEqual([p.name, p.namespace, p.state], ['p', 'ns', '']);
});

test('clamp and parse integers as the other SDKs do', () => {
  assert.deepEqual([-5, 42, 1000].map(clampScore), [0, 42, 100]);
  assert.deepEqual(['42', '+7', '-5'].map(parseInteger), [42, 7, -5]);
  assert.equal(clampScore(parseInteger('99999999999999999999')), 100);
  for (const bad of [undefined, '', '-', ' 7', '7 ', '1.5', '1e3', '0x10', 'high', '1_0', '٣']) {
    assert.equal(parseInteger(bad), undefined, bad);
  }
});

test('refusal codes are the WIT ones', () => {
  assert.throws(() => new Refusal('nope', 'x'));
  assert.deepEqual(Refusal.unschedulableAndUnresolvable('a', 'b').toWit(),
    { code: 'unschedulable-and-unresolvable', reasons: ['a', 'b'] });
});
