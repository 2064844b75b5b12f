// The JavaScript SDK for wasm-apiserver admission policies (componentize-js).
//
// The same concepts as the Rust SDK (plugins/sdk): a policy is an object
// with a configuration schema and validate/mutate functions, exported with
// exportPolicy:
//
//   import { exportPolicy, Response } from './wasm-apiserver-sdk.js';
//   export const admission = exportPolicy({
//     config: { labels: ['team'] },               // defaults, and the schema
//     validate(config, req) {
//       const missing = config.labels.filter((k) => req.label(k) === undefined);
//       return missing.length ? Response.deny(`missing ${missing}`) : Response.allow();
//     },
//   });
//
// A context-aware policy reads the cluster with `cluster.get`, `cluster.list`
// and `cluster.canI` (the kinds it reads listed in its AdmissionPlugin's
// spec.contextAwareResources), handing the component's import to the SDK:
//
//   import * as clusterImport from 'wasm-apiserver:plugin/cluster@0.4.0';
//   import { cluster, exportPolicy, Response } from './wasm-apiserver-sdk.js';
//   export const admission = exportPolicy({
//     validate(config, req) {
//       const ns = cluster.get('v1', 'Namespace', undefined, req.namespace);
//       return ns?.metadata.labels?.team ? Response.allow() : Response.deny('the namespace has no team');
//     },
//   }, { cluster: clusterImport });
//
// In tests setCluster and setCanI answer those calls from fixtures.
//
// componentize-js collects the policy's imports when it pre-initializes the
// component, so this file sits next to the policy (copy it, or build from a
// folder that contains both). It imports no WIT interface (the policy hands
// it the ones it uses), so it runs and is tested in plain Node too
// (sdk.test.js).
//
// Versioning: SDK 0.4.x binds wasm-apiserver:plugin@0.4.0.

export const VERSION = '0.4.0';

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const copy = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

// --- configuration ----------------------------------------------------------

/** A configuration field holding a regular expression, compiled at parse time. */
export const pattern = (fallback = undefined) => ({ [PATTERN]: true, fallback });
const PATTERN = Symbol('pattern');

/** A compiled regular expression that remembers its source. */
export class Pattern {
  constructor(source) {
    this.source = source;
    this.regex = new RegExp(source);
  }

  /** True when the pattern matches somewhere in `text`. */
  isMatch(text) {
    return this.regex.test(text);
  }

  toString() {
    return this.source;
  }
}

const typeName = (v) => (Array.isArray(v) ? 'a list' : isObject(v) ? 'an object'
  : typeof v === 'string' ? 'a string' : typeof v === 'boolean' ? 'a boolean' : 'a number');

/**
 * Parses configuration text against `schema` (field -> default). A default's
 * type is the field's type (`null` accepts anything; `pattern()` compiles a
 * RegExp). Empty text is all defaults. Throws an Error reading
 * `invalid configuration: ...`.
 */
export function parseConfig(text, schema) {
  let raw = {};
  if (text.trim() !== '') {
    try {
      raw = JSON.parse(text);
    } catch (e) {
      throw new Error(`invalid configuration: not JSON: ${e.message}`);
    }
    if (!isObject(raw)) throw new Error('invalid configuration: expected a JSON object');
  }
  const unknown = Object.keys(raw).filter((k) => !(k in schema)).sort();
  if (unknown.length > 0) {
    throw new Error(`invalid configuration: unknown field(s): ${unknown.join(', ')}`);
  }
  const config = {};
  for (const [name, fallback] of Object.entries(schema)) {
    let value = raw[name];
    if (isObject(fallback) && fallback[PATTERN]) {
      value = value ?? fallback.fallback;
      if (value !== undefined && value !== null) {
        if (typeof value !== 'string') throw new Error(`invalid configuration: ${name} must be a string`);
        try {
          value = new Pattern(value);
        } catch (e) {
          throw new Error(`invalid configuration: invalid pattern ${JSON.stringify(value)}: ${e.message}`);
        }
      }
    } else if (!(name in raw)) {
      value = copy(fallback);
    } else if (fallback !== null && typeName(value) !== typeName(fallback)) {
      throw new Error(`invalid configuration: ${name} must be ${typeName(fallback)}`);
    }
    config[name] = value;
  }
  return config;
}

// --- the request ------------------------------------------------------------

/**
 * An admission request with its object parsed once. Build it from the host's
 * record (`Request.fromWit`, done by exportPolicy) or from an
 * admission.k8s.io/v1 AdmissionReview (`Request.fromReview`).
 */
export class Request {
  constructor(request) {
    this.raw = request;
    this.operation = request.operation ?? 'CREATE';
    this.gvk = request.kind ?? {};
    this.kind = this.gvk.kind ?? '';
    this.resource = request.resource?.resource ?? '';
    this.subResource = request.subResource;
    this.namespace = request.namespace;
    this.user = request.userInfo ?? {};
    this.dryRun = Boolean(request.dryRun);
    this.object = request.object ?? undefined;
    this.oldObject = request.oldObject ?? undefined;
  }

  static fromReview(review) {
    return new Request(review.request ?? review);
  }

  /** From the bindings' record; throws an Error on bad JSON. */
  static fromWit(r) {
    const parsed = (text, what) => {
      if (text === undefined || text === null) return undefined;
      try {
        return JSON.parse(text);
      } catch (e) {
        throw new Error(`${what} is not valid JSON: ${e.message}`);
      }
    };
    const u = r.userInfo;
    return new Request({
      uid: r.uid,
      kind: r.kind,
      resource: r.resource,
      subResource: r.subResource,
      name: r.name,
      namespace: r.namespace,
      operation: String(r.operation).toUpperCase(),
      userInfo: { username: u.username, uid: u.uid, groups: u.groups, extra: Object.fromEntries(u.extra) },
      dryRun: r.dryRun,
      object: parsed(r.object, 'object'),
      oldObject: parsed(r.oldObject, 'oldObject'),
      options: parsed(r.options, 'options'),
    });
  }

  get isCreate() { return this.operation === 'CREATE'; }

  get isUpdate() { return this.operation === 'UPDATE'; }

  get isDelete() { return this.operation === 'DELETE'; }

  /** The object, or the old object when there is none (a delete). */
  get subject() { return this.object ?? this.oldObject; }

  #metadata(field) {
    const value = this.subject?.metadata?.[field];
    return isObject(value) ? value : {};
  }

  /** `metadata.name`, else the request's name, else ''. */
  get name() { return this.subject?.metadata?.name || this.raw.name || ''; }

  get labels() { return this.#metadata('labels'); }

  label(key) { return this.labels[key]; }

  /** The keys of `required` the object has no label for, in order. */
  missingLabels(required) { return required.filter((k) => this.label(k) === undefined); }

  /** A Patch of the object (empty when there is none). */
  patch() { return Patch.on(this.object ?? {}); }

  get annotations() { return this.#metadata('annotations'); }

  annotation(key) { return this.annotations[key]; }
}

// --- the response -----------------------------------------------------------

/**
 * A policy's decision, built fluently:
 * `Response.deny('too many').code(422).reason('Invalid').cause('spec.replicas', 'FieldValueInvalid', 'at most 5')`.
 */
export class Response {
  constructor(allowed, status = undefined) {
    this.allowed = allowed;
    this.status = status;
    this.patch = new Patch();
    this.warnings = [];
    this.auditAnnotations = [];
  }

  static allow() { return new Response(true); }

  static deny(message, code = 403, reason = 'Forbidden') {
    return new Response(false, { code, reason, message, causes: [] });
  }

  static invalid(message) { return Response.deny(message, 422, 'Invalid'); }

  static patched(patch) { return Response.allow().withPatch(patch); }

  code(code) {
    if (this.status) this.status.code = code;
    return this;
  }

  reason(reason) {
    if (this.status) this.status.reason = reason;
    return this;
  }

  cause(field, reason, message) {
    if (this.status) this.status.causes.push({ field, reason, message });
    return this;
  }

  warn(warning) {
    this.warnings.push(warning);
    return this;
  }

  annotate(key, value) {
    this.auditAnnotations.push([key, value]);
    return this;
  }

  withPatch(patch) {
    this.patch = patch;
    return this;
  }

  /** This answer when `condition` holds, else a plain allow. */
  when(condition) { return condition ? this : Response.allow(); }

  get message() { return !this.allowed && this.status ? this.status.message : ''; }

  /** The record the bindings expect. */
  toWit() {
    return {
      allowed: this.allowed,
      status: this.allowed ? undefined : this.status,
      patch: this.patch.ops.length === 0 ? undefined : this.patch.toJson(),
      warnings: [...this.warnings],
      auditAnnotations: [...this.auditAnnotations],
    };
  }
}

/**
 * The problems a validation finds, each tied to a field: one denial naming
 * them all (`intoResponse`), or an allow when there is none.
 */
export class Violations {
  constructor() { this.causes = []; }

  add(field, reason, message) { this.causes.push({ field, reason, message }); }

  invalid(field, message) { this.add(field, 'FieldValueInvalid', message); }

  required(field, message) { this.add(field, 'FieldValueRequired', message); }

  forbidden(field, message) { this.add(field, 'FieldValueForbidden', message); }

  get isEmpty() { return this.causes.length === 0; }

  /** Allow when empty; else a 403 `"{prefix}: {first}; {second}..."` with one cause each. */
  intoResponse(prefix) {
    if (this.isEmpty) return Response.allow();
    const response = Response.deny(`${prefix}: ${this.causes.map((c) => c.message).join('; ')}`);
    response.status.causes = [...this.causes];
    return response;
  }
}

// --- JSON Patch -------------------------------------------------------------

/** The JSON Pointer (RFC 6901) of `segments`. */
export const pointer = (segments) =>
  segments.map((s) => `/${s.replaceAll('~', '~0').replaceAll('/', '~1')}`).join('');

const equal = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/**
 * A JSON Patch (RFC 6902) under construction. `new Patch()` collects raw
 * operations; `Patch.on(obj)` also keeps a copy of the object, so the path
 * helpers create missing parents, skip no-op changes and see the effect of
 * the operations before them.
 */
export class Patch {
  constructor(doc = undefined) {
    this.ops = [];
    this.doc = doc;
  }

  static on(object) { return new Patch(copy(object)); }

  add(path, value) { this.ops.push({ op: 'add', path, value }); return this; }

  replace(path, value) { this.ops.push({ op: 'replace', path, value }); return this; }

  removePointer(path) { this.ops.push({ op: 'remove', path }); return this; }

  test(path, value) { this.ops.push({ op: 'test', path, value }); return this; }

  get(path) {
    let at = this.doc;
    for (const seg of path) {
      if (!isObject(at) || !(seg in at)) return undefined;
      at = at[seg];
    }
    return at;
  }

  /** Sets the member at `path`, adding missing parents; nothing when unchanged. */
  set(path, value) {
    if (path.length === 0) return this;
    if (this.doc === undefined) this.doc = {};
    let at = this.doc;
    for (let i = 0; i < path.length - 1; i += 1) {
      if (!isObject(at)) return this;
      const seg = path[i];
      if (!isObject(at[seg])) {
        let nested = value;
        for (const s of path.slice(i + 1).reverse()) nested = { [s]: nested };
        const replacing = seg in at;
        at[seg] = copy(nested);
        const ptr = pointer(path.slice(0, i + 1));
        return replacing ? this.replace(ptr, nested) : this.add(ptr, nested);
      }
      at = at[seg];
    }
    const last = path[path.length - 1];
    if (!isObject(at) || (last in at && equal(at[last], value))) return this;
    at[last] = copy(value);
    return this.add(pointer(path), value); // `add` on a member replaces it
  }

  /** Sets the member at `path` only when it is missing. */
  setDefault(path, value) {
    return this.get(path) !== undefined ? this : this.set(path, value);
  }

  /** Removes the member at `path`; nothing when it is missing. */
  remove(path) {
    const parent = path.length ? this.get(path.slice(0, -1)) : undefined;
    const last = path[path.length - 1];
    if (!isObject(parent) || !(last in parent)) return this;
    delete parent[last];
    return this.removePointer(pointer(path));
  }

  setLabel(key, value) { return this.set(['metadata', 'labels', key], value); }

  defaultLabel(key, value) { return this.setDefault(['metadata', 'labels', key], value); }

  removeLabel(key) { return this.remove(['metadata', 'labels', key]); }

  setAnnotation(key, value) { return this.set(['metadata', 'annotations', key], value); }

  defaultAnnotation(key, value) { return this.setDefault(['metadata', 'annotations', key], value); }

  removeAnnotation(key) { return this.remove(['metadata', 'annotations', key]); }

  /** Sets each annotation the object does not have yet, in key order. */
  defaultAnnotations(annotations) {
    for (const [k, v] of Object.entries(annotations).sort()) this.defaultAnnotation(k, v);
    return this;
  }

  /** Sets each label the object does not have yet, in key order. */
  defaultLabels(labels) {
    for (const [k, v] of Object.entries(labels).sort()) this.defaultLabel(k, v);
    return this;
  }

  toJson() { return JSON.stringify(this.ops); }
}

// --- reading the cluster ----------------------------------------------------

/**
 * A refused `cluster` call, with the host's message: a kind the plugin is not
 * granted (`reading v1 Secret is not granted: ...`), a read budget spent, a
 * bad selector.
 */
export class ClusterError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ClusterError';
  }
}

/** The grant `cluster.canI` needs, as `[apiVersion, kind]`. */
export const SUBJECT_ACCESS_REVIEW = ['authorization.k8s.io/v1', 'SubjectAccessReview'];

const unconnected = {
  fail() {
    throw new ClusterError('the cluster import is not connected: import * as cluster from '
      + "'wasm-apiserver:plugin/cluster@0.4.0' and pass it: exportPolicy(policy, { cluster }) "
      + '(or call setCluster in a test)');
  },
  get() { return this.fail(); },
  list() { return this.fail(); },
  canI() { return this.fail(); },
};
let clusterHost = unconnected;

/** The host made of the component's `cluster` import. */
function witCluster(imports) {
  const target = (apiVersion, kind) => ({ tag: 'kind', val: { apiVersion, kind } });
  const call = (f) => {
    try {
      return f();
    } catch (e) {
      const s = e?.payload ?? e;
      if (typeof s === 'string') throw new ClusterError(s);
      throw e;
    }
  };
  return {
    get(apiVersion, kind, namespace, name) {
      const o = call(() => imports.get(target(apiVersion, kind), namespace, name));
      return o === undefined || o === null ? undefined : JSON.parse(o.json);
    },
    list(apiVersion, kind, namespace, labelSelector, fieldSelector) {
      const out = [];
      let continueToken;
      do {
        const page = call(() => imports.list(target(apiVersion, kind),
          { namespace, labelSelector, fieldSelector, limit: undefined, continueToken }));
        for (const o of page.items) out.push(JSON.parse(o.json));
        continueToken = page.continueToken;
      } while (continueToken);
      return out;
    },
    canI(user, attributes) {
      return Boolean(call(() => imports.canI(
        { ...user, extra: Object.entries(user.extra) }, attributes)));
    },
  };
}

/**
 * Sends `cluster` calls to the component's `cluster` import
 * (`import * as cluster from 'wasm-apiserver:plugin/cluster@0.4.0'`);
 * `exportPolicy(policy, { cluster })` does it.
 */
export function connectCluster(imports) {
  clusterHost = witCluster(imports);
}

/** A label selector's requirements as `[key, op, values]`. */
function parseSelector(selector) {
  const terms = [];
  let [depth, start] = [0, 0];
  for (let i = 0; i < selector.length; i += 1) {
    if (selector[i] === '(') depth += 1;
    else if (selector[i] === ')') depth -= 1;
    else if (selector[i] === ',' && depth === 0) {
      terms.push(selector.slice(start, i));
      start = i + 1;
    }
  }
  terms.push(selector.slice(start));
  const out = [];
  for (const term of terms.map((t) => t.trim()).filter(Boolean)) {
    const set = /^(\S+)\s+(in|notin)\s*\((.*)\)$/.exec(term);
    const split = (sep) => { const i = term.indexOf(sep); return [term.slice(0, i).trim(), term.slice(i + sep.length).trim()]; };
    if (term.startsWith('!')) out.push([term.slice(1).trim(), '!', []]);
    else if (set) out.push([set[1], set[2], set[3].split(',').map((v) => v.trim())]);
    else if (term.includes('!=')) { const [k, v] = split('!='); out.push([k, '!=', [v]]); }
    else if (term.includes('=')) { const [k, v] = split(term.includes('==') ? '==' : '='); out.push([k, '=', [v]]); }
    else if (/^[^\s()]+$/.test(term)) out.push([term, 'exists', []]);
    else throw new ClusterError(`invalid label selector ${JSON.stringify(selector)}`);
  }
  return out;
}

/** A field selector's requirements as `[path, value, negate]`. */
function parseFieldSelector(selector) {
  const out = [];
  for (const term of selector.split(',').map((t) => t.trim()).filter(Boolean)) {
    const op = ['!=', '==', '='].find((o) => term.includes(o));
    if (!op) throw new ClusterError(`invalid selector: '${selector}'; can't understand '${term}'`);
    const i = term.indexOf(op);
    const path = term.slice(0, i).trim().split('.');
    if (path.some((p) => p === '')) throw new ClusterError(`invalid selector: '${selector}'; '${term}' names no field path`);
    out.push([path, term.slice(i + op.length).trim(), op === '!=']);
  }
  return out;
}

/** As the server: some value at `path` is `value` (lists fan out; a missing field reads as ''). */
function fieldMatches(obj, path, value, negate) {
  const found = [];
  const walk = (v, rest) => {
    if (Array.isArray(v)) v.forEach((item) => walk(item, rest));
    else if (rest.length && v && typeof v === 'object') { if (Object.hasOwn(v, rest[0])) walk(v[rest[0]], rest.slice(1)); }
    else if (!rest.length && ['string', 'number', 'boolean'].includes(typeof v)) found.push(String(v));
  };
  walk(obj, path);
  const hit = found.length ? found.includes(value) : value === '';
  return hit !== negate;
}

const selectorMatches = (requirements, labels) => requirements.every(([key, op, values]) => {
  const value = Object.hasOwn(labels, key) ? labels[key] : undefined;
  switch (op) {
    case '!': return value === undefined;
    case 'exists': return value !== undefined;
    case '=': case 'in': return values.includes(value);
    default: return !values.includes(value); // != and notin: also when absent
  }
});

const ruleAllows = (rule, user, attributes) => {
  const admits = (key, values) => {
    const want = [rule[key] ?? '*'].flat();
    return want.includes('*') || values.some((v) => want.includes(v));
  };
  return admits('as', [user.username]) && admits('asGroup', user.groups)
    && ['verb', 'group', 'resource', 'subresource', 'namespace', 'name'].every((k) => admits(k, [attributes[k]]));
};

/** Plain Node: the calls answer from fixtures. */
function fixtureCluster() {
  const state = { objects: [], grants: undefined, answer: false };
  const granted = (apiVersion, kind) => {
    if (state.grants && !state.grants.some(([a, k]) => a === apiVersion && k === kind)) {
      throw new ClusterError(`reading ${apiVersion} ${kind} is not granted: `
        + "it is not in the plugin's spec.contextAwareResources");
    }
  };
  const of = (apiVersion, kind) => {
    granted(apiVersion, kind);
    return state.objects.filter((o) => o.apiVersion === apiVersion && o.kind === kind);
  };
  return {
    state,
    get(apiVersion, kind, namespace, name) {
      return copy(of(apiVersion, kind).find((o) => o.metadata?.name === name
        && (o.metadata?.namespace ?? undefined) === (namespace ?? undefined)));
    },
    list(apiVersion, kind, namespace, labelSelector, fieldSelector) {
      const requirements = parseSelector(labelSelector ?? '');
      const fields = parseFieldSelector(fieldSelector ?? '');
      return copy(of(apiVersion, kind).filter((o) => (namespace === undefined || namespace === null
        || o.metadata?.namespace === namespace) && selectorMatches(requirements, o.metadata?.labels ?? {})
        && fields.every((f) => fieldMatches(o, ...f))));
    },
    canI(user, attributes) {
      granted(...SUBJECT_ACCESS_REVIEW);
      const { answer } = state;
      if (typeof answer === 'function') return Boolean(answer(user, attributes));
      if (typeof answer === 'boolean') return answer;
      return [answer].flat().some((rule) => ruleAllows(rule, user, attributes));
    },
  };
}

const fixtures = () => {
  if (!clusterHost.state) clusterHost = fixtureCluster();
  return clusterHost.state;
};

/**
 * Plain Node: `cluster` reads answer from `objects` (copied). `grants`
 * (`[[apiVersion, kind]]` or `spec.contextAwareResources` entries), when
 * given, are the kinds the plugin may read, as on the server: any other
 * throws the host's "not granted" ClusterError, and `cluster.canI` needs
 * SUBJECT_ACCESS_REVIEW. Without them every kind is readable. Keeps
 * setCanI's answer.
 */
export function setCluster(objects, grants = undefined) {
  const state = fixtures();
  state.objects = copy(objects);
  state.grants = grants?.map((g) => (Array.isArray(g) ? g : [g.apiVersion, g.kind]));
}

/**
 * Plain Node: what `cluster.canI` answers (false until set): a boolean, a
 * function `(user, attributes) => boolean`, or allow rules, each an object of
 * attribute keys (verb, group, resource, subresource, namespace, name) plus
 * `as` (a username) and `asGroup` (one of the user's groups), every value a
 * string or a list of strings, '*' or a missing key matching anything:
 *
 *   setCanI([{ as: 'alice', verb: ['get', 'list'], resource: 'pods' }, { asGroup: 'system:masters' }]);
 */
export function setCanI(answer) {
  fixtures().answer = answer;
}

/**
 * Reads of the cluster (the `cluster` import, since package 0.3.0): objects of
 * the kinds the plugin's `spec.contextAwareResources` grants, from the
 * server's own store within the plugin's read budget, and
 * SubjectAccessReviews. Objects are parsed JSON; a refusal throws a
 * ClusterError with the host's message. In a component the calls go to the
 * import passed to exportPolicy (or connectCluster); in plain Node they
 * answer from setCluster and setCanI.
 */
export const cluster = {
  /**
   * One object of `kind` in `apiVersion` (as objects spell them: 'v1',
   * 'Namespace'; `namespace` undefined for a cluster-scoped kind), or
   * undefined when there is none.
   */
  get: (apiVersion, kind, namespace, name) => clusterHost.get(apiVersion, kind, namespace ?? undefined, name),

  /**
   * Every object of `kind` in `namespace` (every namespace when undefined)
   * matching `labelSelector` ('app=web,tier in (a,b)') and `fieldSelector`
   * ('path=value', 'path!=value' on any field path, a list on the way
   * matching when one of its items does: 'spec.rules.host=a.example.com';
   * the server answers a 'path=value' on a field other than the name and
   * namespace from a field index), following continue tokens.
   */
  list: (apiVersion, kind, namespace = undefined, labelSelector = undefined, fieldSelector = undefined) =>
    clusterHost.list(apiVersion, kind, namespace ?? undefined, labelSelector ?? undefined, fieldSelector ?? undefined),

  /**
   * Whether `user` (a request's `req.user`, or a username) may do what
   * `attributes` say (`{ verb, group, resource, subresource?, namespace?,
   * name? }`, group '' for the core group): a SubjectAccessReview through the
   * server's authorizers. Needs the grant authorization.k8s.io/v1
   * SubjectAccessReview. The user's `extra` is not part of the review.
   */
  canI(user, { verb, group = '', resource, subresource, namespace, name }) {
    const u = typeof user === 'string' ? { username: user } : user;
    return clusterHost.canI(
      { username: u.username ?? '', uid: u.uid ?? '', groups: [...(u.groups ?? [])], extra: { ...(u.extra ?? {}) } },
      { verb, group, resource, subresource: subresource ?? undefined, namespace: namespace ?? undefined, name: name ?? undefined },
    );
  },
};

// --- the policy -------------------------------------------------------------

/**
 * One phase of `policy`: a bad configuration is a 500 denial, a request whose
 * JSON does not parse a 400 one.
 */
export function run(policy, phase, text, request) {
  let config;
  try {
    config = configure(policy, text);
  } catch (e) {
    return Response.deny(e.message, 500, 'InternalError');
  }
  let req;
  try {
    req = request instanceof Request ? request : Request.fromWit(request);
  } catch (e) {
    return Response.deny(e.message, 400, 'BadRequest');
  }
  const f = policy[phase];
  return f ? f.call(policy, config, req) : Response.allow();
}

/** Parses and checks the configuration (what check-config answers). */
export function configure(policy, text) {
  const config = parseConfig(text, policy.config ?? {});
  if (policy.check) policy.check(config);
  return config;
}

/**
 * The `admission` export for `policy`: `{ config, check?, validate?, mutate? }`,
 * each phase `(config, request) => Response`; missing phases allow. A
 * context-aware policy passes the component's `cluster` import as
 * `imports.cluster` (see `cluster`).
 */
export function exportPolicy(policy, imports = {}) {
  if (imports.cluster) connectCluster(imports.cluster);
  return {
    checkConfig(text) {
      try {
        configure(policy, text);
      } catch (e) {
        // A thrown value becomes the `err` case of `result<_, string>`.
        throw e.message ?? String(e);
      }
    },
    validate: (text, request) => run(policy, 'validate', text, request).toWit(),
    mutate: (text, request) => run(policy, 'mutate', text, request).toWit(),
  };
}
