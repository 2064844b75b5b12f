// js-policy: a mutating and validating admission plugin for wasm-apiserver,
// in JavaScript, built into a WebAssembly component with componentize-js
// (see README.md).
//
// Configuration (JSON, every field optional):
//
//   {"checkedBy": "js", "forbiddenLabels": {"env": "forbidden"}}
//
// * mutate: returns a JSON Patch (RFC 6902) setting the annotation
//   `policy.example.com/checked-by` to `checkedBy` (default "js"); it adds
//   `metadata` or `metadata.annotations` when they are missing and returns
//   no patch when the annotation already has that value.
// * validate: denies an object carrying any label of `forbiddenLabels`
//   with the given value (default: `env=forbidden`).
//
// Deletes and requests without an object are allowed unchanged.

import { log } from 'wasm-apiserver:plugin/log@0.4.0';

const PLUGIN = 'js-policy';
const ANNOTATION = 'policy.example.com/checked-by';
const DEFAULTS = { checkedBy: 'js', forbiddenLabels: { env: 'forbidden' } };

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses and checks the configuration; throws an Error with a readable message. */
function parseConfig(text) {
  if (text.trim() === '') return DEFAULTS;
  let raw;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`invalid configuration: not JSON: ${e.message}`);
  }
  if (!isObject(raw)) throw new Error('invalid configuration: expected a JSON object');
  const unknown = Object.keys(raw).filter((k) => !(k in DEFAULTS)).sort();
  if (unknown.length > 0) {
    throw new Error(`invalid configuration: unknown field(s): ${unknown.join(', ')}`);
  }
  const config = { ...DEFAULTS, ...raw };
  if (typeof config.checkedBy !== 'string') {
    throw new Error('invalid configuration: checkedBy must be a string');
  }
  if (!isObject(config.forbiddenLabels) ||
      !Object.values(config.forbiddenLabels).every((v) => typeof v === 'string')) {
    throw new Error('invalid configuration: forbiddenLabels must map label keys to string values');
  }
  return config;
}

const allow = (patch) => ({
  allowed: true,
  status: undefined,
  patch,
  warnings: [],
  auditAnnotations: [],
});

const deny = (code, reason, message, auditAnnotations = []) => ({
  allowed: false,
  status: { code, reason, message, causes: [] },
  patch: undefined,
  warnings: [],
  auditAnnotations,
});

/** Escapes a map key as one JSON Pointer (RFC 6901) segment. */
const pointerSegment = (key) => key.replaceAll('~', '~0').replaceAll('/', '~1');

/** The JSON Patch operations that set the annotation on `object`. */
function patchFor(object, value) {
  const metadata = object.metadata;
  if (!isObject(metadata)) {
    return [{ op: 'add', path: '/metadata', value: { annotations: { [ANNOTATION]: value } } }];
  }
  const annotations = metadata.annotations;
  if (!isObject(annotations)) {
    return [{ op: 'add', path: '/metadata/annotations', value: { [ANNOTATION]: value } }];
  }
  if (annotations[ANNOTATION] === value) return [];
  // `add` on an existing member replaces it (RFC 6902, 4.1).
  return [{ op: 'add', path: `/metadata/annotations/${pointerSegment(ANNOTATION)}`, value }];
}

/** The request's object, parsed; `undefined` when there is none. */
function objectOf(request) {
  if (request.object === undefined || request.object === null) return undefined;
  const object = JSON.parse(request.object);
  if (!isObject(object)) throw new Error('object is not a JSON object');
  return object;
}

export const admission = {
  checkConfig(config) {
    // A thrown value becomes the `err` case of `result<_, string>`.
    try {
      parseConfig(config);
    } catch (e) {
      throw e.message;
    }
  },

  validate(configText, request) {
    let config;
    try {
      config = parseConfig(configText);
    } catch (e) {
      return deny(500, 'InternalError', e.message);
    }
    let object;
    try {
      object = objectOf(request);
    } catch (e) {
      return deny(400, 'BadRequest', `invalid object: ${e.message}`);
    }
    if (object === undefined) return allow(undefined);

    const labels = isObject(object.metadata?.labels) ? object.metadata.labels : {};
    const offending = Object.entries(config.forbiddenLabels)
      .filter(([key, value]) => labels[key] === value)
      .map(([key, value]) => `${key}=${value}`)
      .sort();
    if (offending.length === 0) return allow(undefined);

    const kind = request.kind.kind;
    const name = object.metadata?.name ?? request.name ?? '';
    const reason = `forbidden label(s): ${offending.join(', ')}`;
    log('info', 'denied', [['name', name], ['kind', kind]]);
    return deny(403, 'Forbidden', `${kind} ${JSON.stringify(name)} denied by ${PLUGIN}: ${reason}`,
      [['reason', reason]]);
  },

  mutate(configText, request) {
    let config;
    try {
      config = parseConfig(configText);
    } catch (e) {
      return deny(500, 'InternalError', e.message);
    }
    let object;
    try {
      object = objectOf(request);
    } catch (e) {
      return deny(400, 'BadRequest', `invalid object: ${e.message}`);
    }
    if (object === undefined) return allow(undefined);
    const patch = patchFor(object, config.checkedBy);
    return allow(patch.length === 0 ? undefined : JSON.stringify(patch));
  },
};
