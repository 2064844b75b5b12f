// Unit tests of the JavaScript scheduler SDK (plain Node, no bindings):
//   node --test plugins/sdk-js/
import test from 'node:test';
import assert from 'node:assert/strict';
import {
  checkCase, clampScore, cycle, CycleFailed, exportScheduler, KubeObject, parseInteger, Refusal, runner, SKIP,
} from './wasm-apiserver-scheduler-sdk.js';

const POD = JSON.stringify({ kind: 'Pod', metadata: { name: 'p', namespace: 'ns' } });
const node = (name, labels = {}) => ({ kind: 'Node', metadata: { name, labels } });

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

test('points are the functions the plugin has', () => {
  assert.deepEqual(runner(sample).points(), ['preFilter', 'filter', 'score']);
  assert.deepEqual(runner(scaled).points(), ['preScore', 'score', 'normalizeScore']);
  assert.deepEqual(exportScheduler(sample).extensionPoints(''),
    { preFilter: true, filter: true, preScore: false, score: true, normalizeScore: false });
});

test('filter answers each node in order', () => {
  const nodes = [node('a'), node('b', { gpu: 'x' })].map((n) => JSON.stringify(n));
  const out = runner(sample).filter('{"avoid": "gpu"}', 'p', POD, [...nodes, 'not json', JSON.stringify(node('boom'))]);
  assert.equal(out[0], undefined);
  assert.deepEqual(out[1].toWit(), { code: 'unschedulable', reasons: ['p avoids b'] });
  assert.equal(out[2].code, 'error');
  assert.match(out[2].reasons[0], /^node is not valid JSON/);
  assert.deepEqual(out[3].toWit(), { code: 'error', reasons: ['filter failed: exploded'] });
});

test('a bad configuration or pod refuses every node with error', () => {
  const nodes = [node('a'), node('b')].map((n) => JSON.stringify(n));
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
  const nodes = [node('a', { score: '7' }), node('b', { score: '1000' })].map((n) => JSON.stringify(n));
  assert.deepEqual(s.score('', '', POD, nodes), [7n, 1000n]);
  const bad = [node('a', { score: '7' }), node('c')].map((n) => JSON.stringify(n));
  assert.throws(() => s.score('', '', POD, bad), (e) => e.code === 'error' && e.reasons[0] === 'c has no score');
  const fraction = [node('a', { score: '1.5' })].map((n) => JSON.stringify(n));
  assert.throws(() => s.score('', '', POD, fraction), (e) => /must return safe integers/.test(e.reasons[0]));
});

test('unclaimed points answer neutrally', () => {
  const s = exportScheduler(sample);
  assert.deepEqual(s.preScore('', 'kept', POD, []), { tag: 'proceed', val: 'kept' });
  assert.deepEqual(s.normalizeScore('', '', POD, [5n, 500n]), [5n, 500n]);
  assert.deepEqual(s.normalizeScore('', '', POD, BigInt64Array.from([5n, 500n])), [5n, 500n]);
  assert.deepEqual(exportScheduler(scaled).normalizeScore('', '', POD, BigInt64Array.from([5n, 10n])), [50n, 100n]);
  const plain = exportScheduler({});
  assert.deepEqual(plain.filter('', '', POD, [JSON.stringify(node('a'))]), [undefined]);
  assert.deepEqual(plain.score('', '', POD, [JSON.stringify(node('a'))]), [0n]);
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
