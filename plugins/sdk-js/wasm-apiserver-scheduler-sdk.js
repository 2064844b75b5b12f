// The JavaScript SDK for wasm-apiserver scheduler plugins (componentize-js).
//
// The same concepts as the Rust SDK's scheduler module (plugins/sdk): a
// plugin is an object with a configuration schema (the admission SDK's
// parseConfig rules) and functions for one pod and one node at a time,
// exported with exportScheduler:
//
//   import { clampScore, exportScheduler, parseInteger, Refusal } from './wasm-apiserver-scheduler-sdk.js';
//   export const scheduler = exportScheduler({
//     config: { label: 'rank' },
//     filter(config, pod, node) {
//       if (node.label('maintenance') === 'true') return Refusal.unschedulable('node in maintenance');
//     },
//     score(config, pod, node) {
//       return clampScore(parseInteger(node.label(config.label)) ?? 0);
//     },
//   });
//
// The host passes every candidate node of a scheduling cycle in one call;
// the SDK parses the pod once per call, calls the function for each node
// and answers in the nodes' order. The nodes arrive packed (the WIT `nodes`
// record: one UTF-8 `text`, a Uint8Array, holding every string of every
// node, one array of every label, one of every taint, and each node as
// spans of those), and the SDK unpacks them (unpack) into Node objects,
// cheaply and lazily: a node's `name` and `unschedulable` at once, its
// `labels` (`label(key)` looks one up without decoding the others), `taints`
// and `object` when first read. A plugin that needs more of the object
// (status, allocatable, annotations) sets `nodeObjects: true` (it claims
// `node-objects`): the host then sends every node's whole object too, which
// `node.object` parses on first use (undefined without the claim). Claim it
// only when needed: the host serializes and the plugin parses each node's
// object on every call. A span outside the text, or text that is not UTF-8,
// answers a refusal with code `error` for that node (for the call, in
// preScore and score), never a trap.
//
// The extension points a plugin claims (`extension-points`) are exactly the
// functions the plugin object has: preFilter(config, pod),
// filter(config, pod, node), preScore(config, pod, nodes),
// score(config, pod, node) and normalizeScore(config, pod, scores). filter
// returns undefined when the node fits, or a Refusal; score a number;
// normalizeScore the array brought to 0-100; preFilter and preScore a state
// string (or SKIP, or a Refusal), which later points read as `pod.state`.
// check(config) throws for a configuration the plugin cannot use.
//
// Failures never trap: a bad configuration, a pod (or a claimed node object)
// that does not parse, or an exception thrown by a function answers a
// refusal with code `error`. Scores are not clamped: out of 0-100 without
// normalizeScore fails the cycle, as upstream's framework does (clampScore
// brings one into range).
//
// Build with `componentize-js --wit wit -n scheduler-plugin -d http -d
// fetch-event app.js` from a folder holding app.js, this file and
// wasm-apiserver-sdk.js. It imports no WIT interface, so it runs and is
// tested in plain Node too (scheduler-sdk.test.js); there `cycle` runs a
// plugin as the server's scheduler would and `checkCase` checks one case of
// a `wasm-apiserver plugin test` case table; they pack the case's node
// objects as the host does (pack, with the objects only when the plugin
// claims `nodeObjects`) and give the plugin what unpack makes of them, the
// path a component's calls take.
//
// Versioning: SDK 0.4.x binds wasm-apiserver:plugin@0.4.0.

import { parseConfig } from './wasm-apiserver-sdk.js';

export const VERSION = '0.4.0';

/** The lowest score a node may get (upstream's MinNodeScore). */
export const MIN_SCORE = 0;
/** The highest score a node may get (upstream's MaxNodeScore). */
export const MAX_SCORE = 100;

/** The extension points, by function name, in the WIT flags' order. */
export const POINTS = ['preFilter', 'filter', 'preScore', 'score', 'normalizeScore'];

/**
 * The members of the WIT flags `extension-point-set`, in order: the
 * extension points, then `nodeObjects` (not a point: the plugin reads whole
 * node objects).
 */
export const FLAGS = [...POINTS, 'nodeObjects'];

/** The refusal codes, as the WIT enum names them. */
export const CODES = ['unschedulable', 'unschedulable-and-unresolvable', 'error'];

/** What preFilter or preScore returns to skip this pod. */
export const SKIP = Symbol('skip');

/** Brings `score` into 0-100. */
export const clampScore = (score) => Math.max(MIN_SCORE, Math.min(MAX_SCORE, score));

/**
 * An integer as the scheduler SDKs read one alike: an optional sign and ASCII
 * digits, nothing else; undefined otherwise (and for undefined). Beyond 2^53
 * it is the nearest number (clampScore gives what the other SDKs give).
 */
export function parseInteger(text) {
  return typeof text === 'string' && /^[+-]?[0-9]+$/.test(text) ? Number(text) : undefined;
}

/**
 * Why a pod cannot go to a node, or why the plugin failed: a code and
 * reasons. Return it from filter (or preFilter/preScore), or throw it.
 */
export class Refusal extends Error {
  constructor(code, ...reasons) {
    if (!CODES.includes(code)) throw new Error(`unknown refusal code ${JSON.stringify(code)}: one of ${CODES.join(', ')}`);
    super(`${code}: ${reasons.join('; ')}`);
    this.name = 'Refusal';
    this.code = code;
    this.reasons = reasons;
  }

  /** The node does not fit now; preempting pods might change that. */
  static unschedulable(...reasons) { return new Refusal('unschedulable', ...reasons); }

  /** The node does not fit, and preemption cannot change that. */
  static unschedulableAndUnresolvable(...reasons) { return new Refusal('unschedulable-and-unresolvable', ...reasons); }

  /** The plugin failed. */
  static error(...reasons) { return new Refusal('error', ...reasons); }

  /** The record the host reads. */
  toWit() { return { code: this.code, reasons: [...this.reasons] }; }
}

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A Pod as the host sent it (`kubectl get -o json`), parsed once (or any
 * object, in Node.js). `json` is the whole object; `state` (on the pod) is the
 * cycle state the plugin's preFilter or preScore returned ('' without one).
 */
export class KubeObject {
  constructor(json, state = '') {
    this.json = isObject(json) ? json : {};
    this.state = state;
  }

  static parse(text, what) {
    try {
      return new KubeObject(JSON.parse(text));
    } catch (e) {
      throw Refusal.error(`${what} is not valid JSON: ${e.message}`);
    }
  }

  #metadata(field) {
    const v = isObject(this.json.metadata) ? this.json.metadata[field] : undefined;
    return isObject(v) ? v : {};
  }

  /** metadata.name ('' when absent). */
  get name() {
    const n = this.json.metadata?.name;
    return typeof n === 'string' ? n : '';
  }

  /** metadata.namespace (undefined for a node). */
  get namespace() {
    const n = this.json.metadata?.namespace;
    return typeof n === 'string' ? n : undefined;
  }

  /** metadata.labels (string values only). */
  get labels() {
    return Object.fromEntries(Object.entries(this.#metadata('labels')).filter(([, v]) => typeof v === 'string'));
  }

  /** One label's value, or undefined. */
  label(key) {
    const v = this.#metadata('labels')[key];
    return typeof v === 'string' ? v : undefined;
  }

  /** One annotation's value, or undefined. */
  annotation(key) {
    const v = this.#metadata('annotations')[key];
    return typeof v === 'string' ? v : undefined;
  }
}

const str = (v) => (typeof v === 'string' ? v : '');
const UNPARSED = Symbol('unparsed');
const utf8 = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

// The bytes of `span` in `text`, a Refusal when it lies outside.
function bytesOf(text, span, what) {
  const end = span.start + span.len;
  if (end > text.length) throw Refusal.error(`${what}: bytes ${span.start}..${end} are outside the text (${text.length} bytes)`);
  return text.subarray(span.start, end);
}

function decode(text, span, what) {
  const bytes = bytesOf(text, span, what);
  try {
    return utf8.decode(bytes);
  } catch (e) {
    throw Refusal.error(`${what} is not UTF-8: ${e?.message ?? String(e)}`);
  }
}

// [start, end) of `span` in `entries`, a Refusal when it lies outside.
function range(entries, span, what) {
  const end = span.start + span.len;
  if (end > entries.length) {
    throw Refusal.error(`${what}: entries ${span.start}..${end} are outside the list (${entries.length} entries)`);
  }
  return [span.start, end];
}

// Compares the bytes of `span` in `text` with `want`, as the host sorts keys.
function compareBytes(text, span, want) {
  const n = Math.min(span.len, want.length);
  for (let i = 0; i < n; i += 1) {
    const d = text[span.start + i] - want[i];
    if (d !== 0) return d;
  }
  return span.len - want.length;
}

// The refusal a node answers when it could not be unpacked (undefined when it could).
let nodeError;

// Throws the refusal of the first node that could not be unpacked.
function unpacked(nodes) {
  for (const n of nodes) {
    const e = nodeError(n);
    if (e !== undefined) throw e;
  }
  return nodes;
}

/**
 * A candidate node: `name` (metadata.name), `labels` and `label(key)`
 * (metadata.labels), `taints` (spec.taints, objects with `key`, `value`,
 * `effect`) and `unschedulable` (spec.unschedulable) from the host's packed
 * record, without parsing; `object`, the whole Node, only when the plugin
 * claims `nodeObjects` (undefined otherwise), parsed on first access.
 *
 * Made by unpack from the host's `nodes`, or in Node.js from a whole object
 * (Node.fromObject).
 */
export class Node {
  #nodes;
  #item;
  #labels;
  #taints;
  #object;
  #error;

  /** Built by unpack: `nodes` is the packed record, `item` one of its nodes. */
  constructor(nodes, item) {
    this.#nodes = nodes;
    this.#item = item;
    /** spec.unschedulable (cordoned). */
    this.unschedulable = item.unschedulable === true;
    try {
      /** metadata.name. */
      this.name = decode(nodes.text, item.name, "a node's name");
    } catch (e) {
      this.name = '';
      this.#error = e;
    }
    this.#object = item.object === undefined || item.object === null ? undefined : UNPARSED;
  }

  /**
   * The node the host would send for the whole object `obj`, with the
   * object kept: labels that are not strings are left out, taints are those
   * of spec.taints.
   */
  static fromObject(obj) {
    const node = unpack(pack([obj]))[0];
    node.#object = isObject(obj) ? obj : {};
    return node;
  }

  /** The same node without its object (what a plugin that does not claim nodeObjects receives). */
  withoutObject() {
    const node = new Node(this.#nodes, { ...this.#item, object: undefined });
    node.#labels = this.#labels;
    node.#taints = this.#taints;
    return node;
  }

  static {
    nodeError = (node) => node.#error;
  }

  /** metadata.labels as an object (built once). */
  get labels() {
    if (this.#labels === undefined) {
      const { text, labels } = this.#nodes;
      const what = `node ${this.name} labels`;
      const [start, end] = range(labels, this.#item.labels, what);
      const out = {};
      for (let i = start; i < end; i += 1) out[decode(text, labels[i].key, what)] = decode(text, labels[i].value, what);
      this.#labels = out;
    }
    return this.#labels;
  }

  /**
   * One label's value, or undefined. Until `labels` is read, it looks the
   * key up among the sorted keys' bytes, decoding one value.
   */
  label(key) {
    if (this.#labels !== undefined) return Object.hasOwn(this.#labels, key) ? this.#labels[key] : undefined;
    if (typeof key !== 'string') return undefined;
    const want = encoder.encode(key);
    const { text, labels } = this.#nodes;
    const what = `node ${this.name} labels`;
    let [lo, hi] = range(labels, this.#item.labels, what);
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      bytesOf(text, labels[mid].key, what);
      const d = compareBytes(text, labels[mid].key, want);
      if (d < 0) lo = mid + 1;
      else if (d > 0) hi = mid;
      else return decode(text, labels[mid].value, what);
    }
    return undefined;
  }

  /** spec.taints, in order: objects with `key`, `value` ('' when none) and `effect`. */
  get taints() {
    if (this.#taints === undefined) {
      const { text, taints } = this.#nodes;
      const what = `node ${this.name} taints`;
      const [start, end] = range(taints, this.#item.taints, what);
      this.#taints = taints.slice(start, end).map((t) => ({
        key: decode(text, t.key, what), value: decode(text, t.value, what), effect: decode(text, t.effect, what),
      }));
    }
    return this.#taints;
  }

  /**
   * The whole Node when the plugin claims nodeObjects, else undefined. A
   * text that does not parse throws a Refusal with code `error` (the node's
   * answer, as any thrown refusal).
   */
  get object() {
    if (this.#object === UNPARSED) {
      const text = decode(this.#nodes.text, this.#item.object, `node ${this.name} object`);
      let obj;
      try {
        obj = JSON.parse(text);
      } catch (e) {
        throw Refusal.error(`node ${this.name} object is not valid JSON: ${e.message}`);
      }
      this.#object = isObject(obj) ? obj : {};
    }
    return this.#object;
  }

  /** One annotation's value, from `object`: undefined without it. */
  annotation(key) {
    const a = this.object?.metadata?.annotations;
    return isObject(a) && Object.hasOwn(a, key) && typeof a[key] === 'string' ? a[key] : undefined;
  }
}

/**
 * The Node array of the host's packed `nodes` (the WIT record as the
 * bindings hand it, or what pack makes), in order. Nothing is copied: each
 * node decodes its name now, the rest when read. A node whose name cannot be
 * decoded (a span outside the text, or not UTF-8) answers a refusal with
 * code `error`.
 */
export function unpack(nodes) {
  return Array.from(nodes.items, (item) => new Node(nodes, item));
}

/**
 * The packed `nodes` record the host would send for `nodes` (whole objects,
 * or Nodes): `{ text, labels, taints, items }` with `text` a Uint8Array,
 * spans as `{ start, len }`, labels sorted by key, repeated strings stored
 * once, and each node's whole object (as the JSON the host sends) only when
 * `objects` is true (the plugin claims nodeObjects).
 */
export function pack(nodes, objects = false) {
  const chunks = [];
  let size = 0;
  const spans = new Map();
  const put = (s, keep = true) => {
    let span = keep ? spans.get(s) : undefined;
    if (span === undefined) {
      const bytes = encoder.encode(s);
      span = { start: size, len: bytes.length };
      chunks.push(bytes);
      size += bytes.length;
      if (keep) spans.set(s, span);
    }
    return span;
  };
  const labels = [];
  const taints = [];
  const items = nodes.map((n) => {
    let name;
    let pairs;
    let ts;
    let unschedulable;
    let obj;
    if (n instanceof Node) {
      ({ name, unschedulable } = n);
      pairs = Object.entries(n.labels);
      ts = n.taints;
      obj = objects ? n.object : undefined;
    } else {
      obj = isObject(n) ? n : {};
      const metadata = isObject(obj.metadata) ? obj.metadata : {};
      const spec = isObject(obj.spec) ? obj.spec : {};
      name = str(metadata.name);
      pairs = Object.entries(isObject(metadata.labels) ? metadata.labels : {}).filter(([, v]) => typeof v === 'string');
      ts = (Array.isArray(spec.taints) ? spec.taints : []).filter(isObject)
        .map((t) => ({ key: str(t.key), value: str(t.value), effect: str(t.effect) }));
      unschedulable = spec.unschedulable === true;
    }
    // By the keys' UTF-8 bytes, as the host sorts them (UTF-16 order differs past U+FFFF).
    const keyed = pairs.map(([k, v]) => [encoder.encode(k), k, v]);
    keyed.sort(([a], [b]) => compareBytes(a, { start: 0, len: a.length }, b));
    const labelSpan = { start: labels.length, len: keyed.length };
    for (const [, k, v] of keyed) labels.push({ key: put(k), value: put(v) });
    const taintSpan = { start: taints.length, len: ts.length };
    for (const t of ts) taints.push({ key: put(t.key), value: put(t.value), effect: put(t.effect) });
    const object = objects && obj !== undefined ? put(JSON.stringify(obj), false) : undefined;
    return { name: put(name), labels: labelSpan, taints: taintSpan, unschedulable, object };
  });
  const text = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    text.set(c, at);
    at += c.length;
  }
  return { text, labels, taints, items };
}

const asRefusal = (e, what) => (e instanceof Refusal ? e : Refusal.error(`${what} failed: ${e?.message ?? String(e)}`));

function prepared(answer) {
  if (answer === SKIP || answer instanceof Refusal) return answer;
  if (typeof answer !== 'string') return Refusal.error(`the state must be a string, got ${typeof answer}`);
  return answer;
}

function ints(scores, what) {
  for (const s of scores) {
    if (!Number.isSafeInteger(s)) throw Refusal.error(`${what} must return safe integers, got ${String(s)}`);
  }
  return scores;
}

/**
 * The plain-JavaScript answers of each point for `plugin` (no bindings): a
 * state string, SKIP or a Refusal; an array of undefined or Refusal; an
 * array of integers or a Refusal. `nodes` are Nodes (what unpack makes of the
 * host's packed record); a node that could not be unpacked answers its
 * refusal (filter) or refuses the call (preScore, score).
 */
export function runner(plugin) {
  const configure = (text) => {
    const config = parseConfig(text, plugin.config ?? {});
    plugin.check?.(config);
    return config;
  };
  const prepare = (text, pod, state = '') => {
    let config;
    try {
      config = configure(text);
    } catch (e) {
      throw Refusal.error(e?.message ?? String(e));
    }
    const p = KubeObject.parse(pod, 'pod');
    p.state = state;
    return [config, p];
  };
  return {
    configure,
    points: () => POINTS.filter((p) => typeof plugin[p] === 'function'),
    /** What extension-points answers, as FLAGS names: the points, and nodeObjects when claimed. */
    flags: () => FLAGS.filter((f) => (f === 'nodeObjects'
      ? plugin.nodeObjects === true : typeof plugin[f] === 'function')),
    preFilter(text, pod) {
      try {
        const [config, p] = prepare(text, pod);
        return plugin.preFilter ? prepared(plugin.preFilter(config, p)) : '';
      } catch (e) {
        return asRefusal(e, 'preFilter');
      }
    },
    filter(text, state, pod, nodes) {
      let config;
      let p;
      try {
        [config, p] = prepare(text, pod, state);
      } catch (e) {
        return nodes.map(() => asRefusal(e, 'filter'));
      }
      return nodes.map((n) => {
        let answer;
        try {
          answer = nodeError(n) ?? (plugin.filter ? plugin.filter(config, p, n) : undefined);
        } catch (e) {
          return asRefusal(e, 'filter');
        }
        if (answer === undefined || answer === null) return undefined;
        if (answer instanceof Refusal) return answer;
        return Refusal.error(`filter must return undefined or a Refusal, got ${typeof answer}`);
      });
    },
    preScore(text, state, pod, nodes) {
      try {
        const [config, p] = prepare(text, pod, state);
        unpacked(nodes);
        return plugin.preScore ? prepared(plugin.preScore(config, p, [...nodes])) : state;
      } catch (e) {
        return asRefusal(e, 'preScore');
      }
    },
    score(text, state, pod, nodes) {
      try {
        const [config, p] = prepare(text, pod, state);
        return ints(unpacked(nodes).map((n) => (plugin.score ? plugin.score(config, p, n) : MIN_SCORE)), 'score');
      } catch (e) {
        return asRefusal(e, 'score');
      }
    },
    normalizeScore(text, state, pod, scores) {
      try {
        const [config, p] = prepare(text, pod, state);
        if (!plugin.normalizeScore) return scores;
        const out = plugin.normalizeScore(config, p, [...scores]);
        if (!Array.isArray(out) || out.length !== scores.length) {
          return Refusal.error('normalizeScore must return one score per node');
        }
        return ints(out, 'normalizeScore');
      } catch (e) {
        return asRefusal(e, 'normalizeScore');
      }
    },
  };
}

const witPrepared = (answer) => {
  if (answer === SKIP) return { tag: 'skip' };
  if (answer instanceof Refusal) return { tag: 'refuse', val: answer.toWit() };
  return { tag: 'proceed', val: answer };
};

// A result's err is what the export throws (a record, not an Error).
const witScores = (answer) => {
  if (answer instanceof Refusal) throw answer.toWit();
  return answer.map((s) => BigInt(s));
};

/** The `scheduler` interface componentize-js exports for `plugin`. */
export function exportScheduler(plugin) {
  const run = runner(plugin);
  return {
    checkConfig(text) {
      try {
        run.configure(text);
      } catch (e) {
        throw e?.message ?? String(e);
      }
    },
    extensionPoints() {
      const claimed = run.flags();
      return Object.fromEntries(FLAGS.map((f) => [f, claimed.includes(f)]));
    },
    preFilter: (config, pod) => witPrepared(run.preFilter(config, pod)),
    filter: (config, state, pod, nodes) => run.filter(config, state, pod, unpack(nodes)).map((r) => r?.toWit()),
    preScore: (config, state, pod, nodes) => witPrepared(run.preScore(config, state, pod, unpack(nodes))),
    score: (config, state, pod, nodes) => witScores(run.score(config, state, pod, unpack(nodes))),
    // list<s64> may arrive as a BigInt64Array, whose map keeps BigInts:
    // Array.from makes plain numbers.
    normalizeScore: (config, state, pod, scores) => witScores(run.normalizeScore(config, state, pod, Array.from(scores, Number))),
  };
}

// --- running natively ---------------------------------------------------------

/** The pod of a case that names none. */
export const DEFAULT_POD = {
  apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'default' },
  spec: { containers: [{ name: 'c', image: 'nginx' }] },
};

/** A scheduling cycle the plugin failed (as the server would see it). */
export class CycleFailed extends Error {}

/**
 * Runs one scheduling cycle as the server's scheduler does: the
 * configuration checked, then only the points the plugin claims. `config` is
 * text or a JSON-able value; `pod` and `nodes` are objects (whole objects:
 * each call packs them with pack, their objects only when the plugin claims
 * nodeObjects, and unpacks them with unpack, as a component's calls go).
 * Returns
 * `{ refused, scores }`: node name -> Refusal, and node name -> final score of
 * the nodes that fit. Throws CycleFailed for what fails a cycle.
 */
export function cycle(plugin, config, pod, nodes) {
  const run = runner(plugin);
  const text = typeof config === 'string' ? config : config === undefined || config === null ? '' : JSON.stringify(config);
  try {
    run.configure(text);
  } catch (e) {
    throw new CycleFailed(`check-config: ${e.message}`);
  }
  const points = run.points();
  const podText = JSON.stringify(pod);
  // What a call gets: the objects packed as the host packs them (the objects
  // themselves only when claimed), unpacked as the export does.
  const given = (objs) => unpack(pack(objs, plugin.nodeObjects === true));
  const names = nodes.map((n) => Node.fromObject(n).name);
  const refused = {};
  const scores = {};
  let state = '';
  let filtering = points.includes('filter');
  if (points.includes('preFilter')) {
    const answer = run.preFilter(text, podText);
    if (answer === SKIP) filtering = false;
    else if (answer instanceof Refusal) return { refused: Object.fromEntries(names.map((n) => [n, answer])), scores };
    else state = answer;
  }
  if (filtering) {
    run.filter(text, state, podText, given(nodes)).forEach((r, i) => { if (r) refused[names[i]] = r; });
  }
  if (!points.includes('score')) return { refused, scores };
  const fit = names.map((n, i) => [n, nodes[i]]).filter(([n]) => !(n in refused));
  const fitNodes = fit.map(([, n]) => n);
  let scoreState = '';
  if (points.includes('preScore')) {
    const answer = run.preScore(text, state, podText, given(fitNodes));
    if (answer === SKIP) return { refused, scores };
    if (answer instanceof Refusal) throw new CycleFailed(`pre-score refused: ${answer.message}`);
    scoreState = answer;
  }
  let raw = run.score(text, scoreState, podText, given(fitNodes));
  if (raw instanceof Refusal) throw new CycleFailed(`score refused: ${raw.message}`);
  if (points.includes('normalizeScore')) {
    raw = run.normalizeScore(text, scoreState, podText, raw);
    if (raw instanceof Refusal) throw new CycleFailed(`normalize-score refused: ${raw.message}`);
  }
  fit.forEach(([name], i) => {
    if (raw[i] < MIN_SCORE || raw[i] > MAX_SCORE) throw new CycleFailed(`node "${name}" scored ${raw[i]}, out of 0-100`);
    scores[name] = raw[i];
  });
  return { refused, scores };
}

/**
 * The problems of one case of a case table (parsed, the format of
 * tests/fixtures/plugin-cases/node-label-score.yaml); empty when it passes.
 */
export function checkCase(plugin, table, c) {
  const config = 'config' in c ? c.config : table.config;
  const nodes = c.nodes ?? table.nodes ?? [];
  const wantRefused = c.expect?.refused ?? {};
  const wantScores = c.expect?.scores ?? {};
  let got;
  try {
    got = cycle(plugin, config, c.pod ?? DEFAULT_POD, nodes);
  } catch (e) {
    if (e instanceof CycleFailed) return [`the cycle failed: ${e.message}`];
    throw e;
  }
  const problems = [];
  const names = nodes.map((n) => Node.fromObject(n).name);
  for (const name of names) {
    const want = wantRefused[name];
    const r = got.refused[name];
    if (want !== undefined && !r) problems.push(`${name}: expected refused (${JSON.stringify(want)}), it fits`);
    else if (want === undefined && r) problems.push(`${name}: expected to fit, refused ${r.message}`);
    else if (want !== undefined && !r.reasons.some((x) => x.includes(want))) {
      problems.push(`${name}: expected a reason containing ${JSON.stringify(want)}, got ${r.message}`);
    }
  }
  for (const name of Object.keys(wantRefused)) {
    if (!names.includes(name)) problems.push(`${name}: expected refused, but there is no such node`);
  }
  for (const [name, want] of Object.entries(wantScores)) {
    if (got.scores[name] !== want) problems.push(`${name}: expected score ${want}, got ${got.scores[name]}`);
  }
  return problems;
}
