// The JavaScript SDK for wasm-apiserver controllers (componentize-js).
//
// The same concepts as the Rust controller SDK (plugins/controller-sdk): a
// controller is an object with a configuration schema and a reconcile
// function, exported with exportController. Reads and writes go through a
// `ctx` handed to reconcile, made from the component's imports by witHost
// (or from fixture objects by fixtureHost, in plain Node tests):
//
//   import * as cluster from 'wasm-apiserver:plugin/cluster@0.4.0';
//   import * as writes from 'wasm-apiserver:plugin/writes@0.4.0';
//   import * as events from 'wasm-apiserver:plugin/events@0.4.0';
//   import { exportController, witHost } from './wasm-apiserver-controller-sdk.js';
//
//   export const controller = exportController({
//     config: { label: 'tenant' },
//     reconcile(config, req, ctx) {
//       const ns = ctx.getPrimary(req);
//       if (!ns) return;
//       ctx.apply({ apiVersion: 'v1', kind: 'ConfigMap',
//                   metadata: { name: 'defaults', namespace: req.name }, data: { label: config.label } });
//     },
//   }, witHost({ cluster, writes, events }));
//
// reconcile returns undefined (done) or milliseconds to requeue after, and
// throws to fail (the server retries with backoff). ctx.apply is
// server-side apply with ownership forced (idempotent; a hand edit of an
// owned field is put back), ctx.applyAll several at once (run concurrently
// by the server; one result per object, an ApiError for a refused one); a
// refused write throws an ApiError with the status code. Build with
// `componentize-js --wit wit -n controller-plugin -d http -d fetch-event app.js`
// from a folder holding app.js, this file and wasm-apiserver-sdk.js.
//
// Versioning: SDK 0.4.x binds wasm-apiserver:plugin@0.4.0.

import { parseConfig } from './wasm-apiserver-sdk.js';

export const VERSION = '0.4.0';

const REASONS = ['initial', 'changed', 'deleted', 'owned', 'watched', 'resync', 'requeued', 'retry'];

/** A refused write: the Status a client would get. */
export class ApiError extends Error {
  constructor(code, reason, message) {
    super(`${reason} (${code}): ${message}`);
    Object.assign(this, { code, reason, status: message });
  }
}

/** An ownerReference making `owner` the controlling owner. */
export const ownerReference = (owner) => ({
  apiVersion: owner.apiVersion, kind: owner.kind, name: owner.metadata.name,
  uid: owner.metadata.uid, controller: true,
});

const copy = (v) => (v === undefined || v === null ? v : JSON.parse(JSON.stringify(v)));

/** The host made of the component's imports (cluster, writes, events). */
export function witHost({ cluster, writes, events }) {
  const kind = (apiVersion, k) => ({ tag: 'kind', val: { apiVersion, kind: k } });
  const call = (f) => {
    try {
      return f();
    } catch (e) {
      const s = e?.payload ?? e;
      if (typeof s === 'string') throw new ApiError(500, 'InternalError', s);
      if (s && typeof s.code === 'number') throw new ApiError(s.code, s.reason, s.message);
      throw e;
    }
  };
  const parse = (o) => (o === undefined || o === null ? undefined : JSON.parse(o.json));
  return {
    getResource(group, version, resource, namespace, name) {
      return parse(call(() => cluster.get({ tag: 'resource', val: { group, version, resource } }, namespace, name)));
    },
    get(apiVersion, k, namespace, name) {
      return parse(call(() => cluster.get(kind(apiVersion, k), namespace, name)));
    },
    list(apiVersion, k, namespace, labelSelector) {
      const out = [];
      let continueToken;
      do {
        const page = call(() => cluster.list(kind(apiVersion, k),
          { namespace, labelSelector, fieldSelector: undefined, limit: undefined, continueToken }));
        for (const o of page.items) out.push(JSON.parse(o.json));
        continueToken = page.continueToken;
      } while (continueToken);
      return out;
    },
    write(verb, obj, subresource) {
      const target = kind(obj.apiVersion, obj.kind);
      const text = JSON.stringify(obj);
      const o = call(() => (verb === 'apply' ? writes.apply(target, text, true, subresource)
        : verb === 'create' ? writes.create(target, undefined, text)
          : writes.update(target, text, subresource)));
      return JSON.parse(o.json);
    },
    applyAll(configurations) {
      return writes.applyAll(configurations.map((c) => JSON.stringify(c)), true).map((r) => (r.tag === 'ok'
        ? JSON.parse(r.val.json) : new ApiError(r.val.code, r.val.reason, r.val.message)));
    },
    patch(apiVersion, k, namespace, name, mergePatch, subresource) {
      return JSON.parse(call(() => writes.patch(kind(apiVersion, k), namespace, name, 'merge',
        JSON.stringify(mergePatch), subresource)).json);
    },
    delete(apiVersion, k, namespace, name) {
      try {
        call(() => writes.delete(kind(apiVersion, k), namespace, name,
          { propagationPolicy: undefined, uid: undefined, resourceVersion: undefined }));
        return true;
      } catch (e) {
        if (e instanceof ApiError && e.code === 404) return false;
        throw e;
      }
    },
    event(regarding, warning, reason, note) {
      events.publish(JSON.stringify(regarding), warning ? 'warning' : 'normal', reason, note);
    },
  };
}

const merge = (target, patch) => {
  if (typeof target !== 'object' || target === null || Array.isArray(target)
    || typeof patch !== 'object' || patch === null || Array.isArray(patch)) return copy(patch);
  const out = { ...target };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
};

/** Plain Node: reads answer from `objects`; writes are recorded and applied. */
export function fixtureHost(objects = []) {
  const state = { objects: copy(objects), writes: [] };
  const same = (o, apiVersion, k, namespace, name) => o.apiVersion === apiVersion && o.kind === k
    && (o.metadata.namespace ?? undefined) === (namespace ?? undefined) && o.metadata.name === name;
  const record = (verb, k, namespace, name) => state.writes.push([verb, k, namespace, name]);
  const plural = (k) => { const l = k.toLowerCase(); return l.endsWith('y') ? `${l.slice(0, -1)}ies` : `${l}s`; };
  return {
    state,
    getResource(group, version, resource, namespace, name) {
      const apiVersion = group ? `${group}/${version}` : version;
      return copy(state.objects.find((o) => o.apiVersion === apiVersion && plural(o.kind) === resource
        && same(o, apiVersion, o.kind, namespace, name)));
    },
    get: (apiVersion, k, namespace, name) => copy(state.objects.find((o) => same(o, apiVersion, k, namespace, name))),
    list(apiVersion, k, namespace, labelSelector) {
      const terms = (labelSelector ?? '').split(',').filter(Boolean).map((t) => t.split('='));
      return copy(state.objects.filter((o) => o.apiVersion === apiVersion && o.kind === k
        && (namespace === undefined || o.metadata.namespace === namespace)
        && terms.every(([key, v]) => (o.metadata.labels ?? {})[key] === v)));
    },
    write(verb, obj) {
      const m = obj.metadata;
      record(verb, obj.kind, m.namespace, m.name);
      const i = state.objects.findIndex((o) => same(o, obj.apiVersion, obj.kind, m.namespace, m.name));
      if (i >= 0) {
        if (verb === 'create') throw new ApiError(409, 'AlreadyExists', `${obj.kind} "${m.name}" already exists`);
        state.objects[i] = verb === 'apply' ? merge(state.objects[i], obj) : copy(obj);
        return copy(state.objects[i]);
      }
      if (verb === 'update') throw new ApiError(404, 'NotFound', `${obj.kind} "${m.name}" not found`);
      state.objects.push(copy(obj));
      return copy(obj);
    },
    applyAll(configurations) {
      return configurations.map((c) => {
        try {
          return this.write('apply', c);
        } catch (e) {
          return e;
        }
      });
    },
    patch(apiVersion, k, namespace, name, mergePatch) {
      const cur = this.get(apiVersion, k, namespace, name);
      if (!cur) throw new ApiError(404, 'NotFound', `${k} "${name}" not found`);
      return this.write('update', merge(cur, mergePatch));
    },
    delete(apiVersion, k, namespace, name) {
      const before = state.objects.length;
      state.objects = state.objects.filter((o) => !same(o, apiVersion, k, namespace, name));
      if (state.objects.length === before) return false;
      record('delete', k, namespace, name);
      return true;
    },
    event(regarding, warning, reason) {
      record('event', reason, regarding.metadata.namespace, regarding.metadata.name);
    },
  };
}

/** What reconcile gets to read and write with. */
export function context(host) {
  return {
    getPrimary: (req) => host.getResource(req.group, req.version, req.resource, req.namespace, req.name),
    get: (apiVersion, kind, namespace, name) => host.get(apiVersion, kind, namespace, name),
    list: (apiVersion, kind, namespace, labelSelector) => host.list(apiVersion, kind, namespace, labelSelector),
    apply: (obj) => host.write('apply', obj),
    applyAll: (objs) => host.applyAll(objs),
    create: (obj) => host.write('create', obj),
    update: (obj, subresource) => host.write('update', obj, subresource),
    patch: (apiVersion, kind, namespace, name, mergePatch, subresource) =>
      host.patch(apiVersion, kind, namespace, name, mergePatch, subresource),
    delete: (apiVersion, kind, namespace, name) => host.delete(apiVersion, kind, namespace, name),
    event: (regarding, warning, reason, note) => host.event(regarding, warning, reason, note),
    ownerReference,
  };
}

/** Runs a reconcile (what exportController and tests share). */
export function reconcile(controller, text, req, host) {
  const config = parseConfig(text, controller.config ?? {});
  return controller.reconcile(config, req, context(host));
}

/** The `controller` export for `controller` ({ config, reconcile }) over `host`. */
export function exportController(controller, host) {
  return {
    checkConfig(text) {
      try {
        parseConfig(text, controller.config ?? {});
      } catch (e) {
        throw e.message ?? String(e);
      }
    },
    reconcile(text, request) {
      const req = {
        group: request.resource.group, version: request.resource.version, resource: request.resource.resource,
        namespace: request.namespace, name: request.name, reason: request.reason, retries: request.retries,
      };
      let after;
      try {
        after = reconcile(controller, text, req, host);
      } catch (e) {
        throw e.message ?? String(e);
      }
      return after === undefined || after === null ? { tag: 'done' } : { tag: 'requeue-after', val: after };
    },
  };
}

export { REASONS };
