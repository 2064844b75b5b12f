// Unit tests of the JavaScript scheduler SDK (plain Node, no bindings):
//   node --test plugins/sdk-js/
import test from 'node:test';
import assert from 'node:assert/strict';
import {
  checkCase, clampScore, cycle, CycleFailed, exportScheduler, KubeObject, Node, pack, parseInteger, Refusal, runner, SKIP,
  unpack,
} from './wasm-apiserver-scheduler-sdk.js';

const POD = JSON.stringify({ kind: 'Pod', metadata: { name: 'p', namespace: 'ns' } });
const node = (name, labels = {}) => ({ kind: 'Node', metadata: { name, labels } });
// The node a plugin gets for node(name, labels), without its object: packed
// as the host packs it, unpacked as the export does.
const record = (name, labels = {}) => unpack(pack([node(name, labels)]))[0];
// A packed `nodes` as the bindings hand it (`none` as undefined), built by
// hand: `put` appends text and answers its span.
const packer = () => {
  const parts = [];
  let size = 0;
  const put = (s) => {
    const bytes = typeof s === 'string' ? new TextEncoder().encode(s) : Uint8Array.from(s);
    parts.push(bytes);
    size += bytes.length;
    return { start: size - bytes.length, len: bytes.length };
  };
  const p = {
    labels: [],
    taints: [],
    items: [],
    put,
    node(name, labels = [], taints = [], unschedulable = false, object = undefined) {
      const ls = { start: p.labels.length, len: labels.length };
      for (const [k, v] of labels) p.labels.push({ key: put(k), value: put(v) });
      const ts = { start: p.taints.length, len: taints.length };
      for (const [k, v, e] of taints) p.taints.push({ key: put(k), value: put(v), effect: put(e) });
      const span = (x) => (typeof x === 'string' || Array.isArray(x) ? put(x) : x);
      p.items.push({ name: span(name), labels: ls, taints: ts, unschedulable, object: span(object) });
      return p;
    },
    nodes() {
      const text = new Uint8Array(size);
      let at = 0;
      for (const b of parts) { text.set(b, at); at += b.length; }
      return { text, labels: p.labels, taints: p.taints, items: p.items };
    },
  };
  return p;
};

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
  assert.deepEqual(exportScheduler(sample).filter('{"avoid": "bad"}', '', POD, pack([node('a'), node('b')])),
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
  const nodes = pack([node('a', { score: '7' }), node('b', { score: '1000' })]);
  assert.deepEqual(s.score('', '', POD, nodes), [7n, 1000n]);
  const bad = pack([node('a', { score: '7' }), node('c')]);
  assert.throws(() => s.score('', '', POD, bad), (e) => e.code === 'error' && e.reasons[0] === 'c has no score');
  const fraction = pack([node('a', { score: '1.5' })]);
  assert.throws(() => s.score('', '', POD, fraction), (e) => /must return safe integers/.test(e.reasons[0]));
});

test('unclaimed points answer neutrally', () => {
  const s = exportScheduler(sample);
  assert.deepEqual(s.preScore('', 'kept', POD, pack([])), { tag: 'proceed', val: 'kept' });
  assert.deepEqual(s.normalizeScore('', '', POD, [5n, 500n]), [5n, 500n]);
  assert.deepEqual(s.normalizeScore('', '', POD, BigInt64Array.from([5n, 500n])), [5n, 500n]);
  assert.deepEqual(exportScheduler(scaled).normalizeScore('', '', POD, BigInt64Array.from([5n, 10n])), [50n, 100n]);
  const plain = exportScheduler({});
  assert.deepEqual(plain.filter('', '', POD, pack([node('a')])), [undefined]);
  assert.deepEqual(plain.score('', '', POD, pack([node('a')])), [0n]);
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

test('nodes read the packed record', () => {
  // The object says otherwise: name, labels, taints and unschedulable come from the record.
  const nodes = packer().node('a', [['arch', 'amd'], ['zone', 'x']], [['gpu', '', 'NoSchedule']], true,
    JSON.stringify(node('other', { zone: 'y' }))).node('b').nodes();
  const [n, bare] = unpack(nodes);
  assert.deepEqual([n.name, n.label('zone'), n.label('none'), n.label('constructor'), n.unschedulable],
    ['a', 'x', undefined, undefined, true]);
  assert.deepEqual([n.label('arch'), n.label('aaa'), n.label('zzz'), n.label(5)], ['amd', undefined, undefined, undefined]);
  assert.deepEqual(n.labels, { arch: 'amd', zone: 'x' });
  assert.deepEqual([n.label('zone'), n.label('none'), n.label('constructor')], ['x', undefined, undefined]);
  assert.deepEqual(n.taints, [{ key: 'gpu', value: '', effect: 'NoSchedule' }]);
  assert.equal(n.object.metadata.name, 'other');
  assert.equal(n.object, n.object);
  assert.deepEqual([bare.name, bare.labels, bare.taints, bare.unschedulable, bare.object, bare.annotation('x')],
    ['b', {}, [], false, undefined, undefined]);
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

test('pack then unpack gives the nodes back', () => {
  const zurich = { kind: 'Node', metadata: { name: 'zürich-1', labels: { city: 'zürich', b: 'é', a: 'x', '𝔸': 'astral', 'ｚ': 'bmp' } } };
  const nodes = [FULL, zurich, { kind: 'Node', metadata: { name: 'm' } }];
  for (const objects of [false, true]) {
    const record = pack(nodes, objects);
    assert.ok(record.text instanceof Uint8Array);
    assert.deepEqual(record.items.map((i) => i.object !== undefined), [objects, objects, objects]);
    const [n, z, m] = unpack(record);
    assert.deepEqual([n.name, z.name, m.name], ['n', 'zürich-1', 'm']);
    assert.deepEqual([n.unschedulable, z.unschedulable], [true, false]);
    assert.deepEqual(Object.entries(n.labels), [['arch', 'arm'], ['zone', 'b']]);
    assert.deepEqual(n.taints, [{ key: 'gpu', value: '', effect: 'NoSchedule' }, { key: 'a', value: 'b', effect: 'NoExecute' }]);
    // Sorted by the keys' UTF-8 bytes (U+FF5A before U+1D538), which the lookup relies on.
    assert.deepEqual([z.label('city'), z.label('b'), z.label('𝔸'), z.label('ｚ')], ['zürich', 'é', 'astral', 'bmp']);
    assert.deepEqual(Object.keys(z.labels), ['a', 'b', 'city', 'ｚ', '𝔸']);
    assert.deepEqual([m.labels, m.taints], [{}, []]);
    assert.deepEqual([n.object, z.object, m.object], objects ? nodes : [undefined, undefined, undefined]);
    // Byte offsets: the text is UTF-8, and the spans count bytes.
    assert.equal(record.items[1].name.len, 9);
    const city = record.labels.find((l) => new TextDecoder().decode(record.text.subarray(l.key.start, l.key.start + l.key.len)) === 'city');
    assert.equal(city.value.len, 7);
  }
  // Nodes pack as the objects they were made from; repeated strings are stored once.
  assert.deepEqual(pack(nodes.map((x) => Node.fromObject(x)), true), pack(nodes, true));
  assert.equal(new TextDecoder().decode(pack([node('a', { k: 'v' }), node('b', { k: 'v' })]).text), 'kvab');
});

test('a span outside the text or not UTF-8 is an error for that node', () => {
  const p = packer().node('good', [['score', '3']]);
  p.node({ start: 1000, len: 4 }); // its name outside the text
  p.node('labels', [['score', '1']]);
  p.labels.at(-1).value = { start: 2, len: 1e6 }; // a label's value past the end
  p.node([0xff, 0xfe]); // not UTF-8
  p.node('taints', [], [['k', 'v', 'NoSchedule']]);
  p.taints.at(-1).effect = { start: 0, len: 1e6 };
  p.node('counts');
  p.items.at(-1).labels = { start: 0, len: 100 }; // more labels than the array has
  p.node('object', [], [], false, { start: 3, len: 1e6 });
  const nodes = p.nodes();
  const reader = {
    nodeObjects: true,
    filter(config, pod, n) { return [n.label('score'), n.taints, n.object] && undefined; },
    score(config, pod, n) { return Object.keys(n.labels).length; },
  };
  const out = exportScheduler(reader).filter('', '', POD, nodes);
  assert.deepEqual(out.map((r) => r?.code), [undefined, 'error', 'error', 'error', 'error', 'error', 'error']);
  assert.match(out[1].reasons[0], /outside the text/);
  assert.match(out[2].reasons[0], /^node labels labels: bytes/);
  assert.match(out[3].reasons[0], /not UTF-8/);
  assert.match(out[4].reasons[0], /^node taints taints/);
  assert.match(out[5].reasons[0], /outside the list/);
  assert.match(out[6].reasons[0], /^node object object/);
  // A node that cannot be read refuses score as a whole; the others score.
  assert.deepEqual(runner(reader).score('', '', POD, unpack(nodes).slice(0, 1)), [1]);
  assert.equal(runner(reader).score('', '', POD, unpack(nodes).slice(1, 2)).code, 'error');
  assert.equal(runner(reader).preScore('', '', POD, unpack(nodes).slice(3, 4)).code, 'error');
});

test('a node object that does not parse is an error refusal', () => {
  const nodes = packer().node('good', [], [], false, JSON.stringify(node('good'))).node('bad', [], [], false, '{not json').nodes();
  const out = runner({ ...watcher, nodeObjects: true }).filter('', '', POD, unpack(nodes));
  assert.equal(out[0], undefined);
  assert.equal(out[1].code, 'error');
  assert.match(out[1].reasons[0], /^node bad object is not valid JSON/);
  // Not read, not parsed: a plugin that never reads the object never fails on it.
  assert.deepEqual(exportScheduler(sample).score('', '', POD, packer().node('a', [['score', '3']], [], false, '{').nodes()), [3n]);
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
