"""The Python SDK for wasm-apiserver controllers (componentize-py).

The same concepts as the Rust controller SDK (``plugins/controller-sdk``): a
controller is a subclass of :class:`Controller` with a configuration schema
(the admission SDK's :func:`wasm_apiserver_sdk.parse_config` rules) and a
``reconcile`` method, exported with :func:`export`::

    import wasm_apiserver_controller_sdk as ctl

    class Defaults(ctl.Controller):
        config = {"label": "tenant"}

        def reconcile(self, config, req):
            ns = req.get()
            if ns is None:
                return
            ctl.apply({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "defaults", "namespace": req.name},
                       "data": {"label": config.label}})

    Controller = ctl.export(Defaults)    # what componentize-py looks up

``reconcile`` returns ``None`` (done) or a number of milliseconds after
which to look again; raising is an error the server retries with backoff.
Reads (:func:`get`, :func:`list_objects`) and writes (:func:`apply` and
:func:`apply_all`, the default: server-side apply with ownership forced; :func:`create`,
:func:`update`, :func:`patch`, :func:`delete`) are requests the server makes
as the controller's ServiceAccount; a refused write raises :class:`ApiError`
with the status code.

Build with ``componentize-py -d wit -w controller-plugin -p <this folder>
componentize app``. Natively (plain CPython, for tests) the same calls
answer from fixtures: :func:`set_cluster`, then :func:`writes`.

Versioning: SDK 0.4.x binds ``wasm-apiserver:plugin@0.4.0``.
"""

import json

from wasm_apiserver_sdk import parse_config

__version__ = "0.4.0"

REASONS = ["initial", "changed", "deleted", "owned", "watched", "resync", "requeued", "retry"]


class ApiError(Exception):
    """A refused write: the ``Status`` a client would get."""

    def __init__(self, code, reason, message):
        super().__init__(f"{reason} ({code}): {message}")
        self.code, self.reason, self.message = code, reason, message


class Request:
    """One key to reconcile."""

    def __init__(self, group, version, resource, namespace, name, reason="changed", retries=0):
        self.group, self.version, self.resource = group, version, resource
        self.namespace, self.name = namespace, name
        self.reason, self.retries = reason, retries

    def get(self):
        """The primary object, or ``None`` when it is gone."""
        return _host().get_resource(self.group, self.version, self.resource, self.namespace, self.name)


class Controller:
    """Subclass with ``config`` (field -> default) and ``reconcile``."""

    config = {}

    def reconcile(self, config, req):
        raise NotImplementedError


def owner_reference(owner):
    """An ownerReference making ``owner`` the controlling owner."""
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"].get("uid"),
            "controller": True}


def get(api_version, kind, namespace, name):
    """One object, or ``None``."""
    return _host().get(api_version, kind, namespace, name)


def list_objects(api_version, kind, namespace=None, label_selector=None):
    """Every object of ``kind`` in ``namespace`` (all when ``None``)."""
    return _host().list(api_version, kind, namespace, label_selector)


def apply(configuration):
    """Server-side apply, ownership forced: creates when absent."""
    return _host().write("apply", configuration)


def apply_all(configurations):
    """Several applies at once (the server runs them concurrently): one
    result per configuration, in order, each the object or an
    :class:`ApiError`."""
    return _host().apply_all(configurations)


def create(obj):
    return _host().write("create", obj)


def update(obj, subresource=None):
    return _host().write("update", obj, subresource)


def patch(api_version, kind, namespace, name, merge_patch, subresource=None):
    """A merge patch (RFC 7386)."""
    return _host().patch(api_version, kind, namespace, name, merge_patch, subresource)


def delete(api_version, kind, namespace, name):
    """Deletes an object; ``False`` when it was already gone."""
    return _host().delete(api_version, kind, namespace, name)


def event(regarding, warning, reason, note):
    """Records an Event about ``regarding``; never fails."""
    _host().event(regarding, warning, reason, note)


# --- hosts -------------------------------------------------------------------


class _WitHost:
    """The server, through the component's imports."""

    def __init__(self):
        from wit_world.imports import cluster, events, writes
        from componentize_py_types import Err
        self.cluster, self.writes, self.events, self.Err = cluster, writes, events, Err

    def _kind(self, api_version, kind):
        return self.cluster.Target_Kind(self.cluster.KindRef(api_version, kind))

    def _call(self, f, *args):
        try:
            return f(*args)
        except self.Err as e:
            s = e.value
            if isinstance(s, str):
                raise ApiError(500, "InternalError", s) from None
            raise ApiError(s.code, s.reason, s.message) from None

    def get_resource(self, group, version, resource, namespace, name):
        from wit_world.imports.types import GroupVersionResource
        target = self.cluster.Target_Resource(GroupVersionResource(group, version, resource))
        o = self._call(self.cluster.get, target, namespace, name)
        return None if o is None else json.loads(o.json)

    def get(self, api_version, kind, namespace, name):
        o = self._call(self.cluster.get, self._kind(api_version, kind), namespace, name)
        return None if o is None else json.loads(o.json)

    def list(self, api_version, kind, namespace, label_selector):
        out, token = [], None
        while True:
            page = self._call(self.cluster.list, self._kind(api_version, kind),
                              self.cluster.ListOptions(namespace, label_selector, None, None, token))
            out.extend(json.loads(o.json) for o in page.items)
            token = page.continue_token
            if token is None:
                return out

    def write(self, verb, obj, subresource=None):
        target, text = self._kind(obj["apiVersion"], obj["kind"]), json.dumps(obj)
        if verb == "apply":
            o = self._call(self.writes.apply, target, text, True, subresource)
        elif verb == "create":
            o = self._call(self.writes.create, target, None, text)
        else:
            o = self._call(self.writes.update, target, text, subresource)
        return json.loads(o.json)

    def apply_all(self, configurations):
        from componentize_py_types import Ok
        out = []
        for r in self.writes.apply_all([json.dumps(c) for c in configurations], True):
            if isinstance(r, Ok):
                out.append(json.loads(r.value.json))
            else:
                s = r.value
                out.append(ApiError(s.code, s.reason, s.message))
        return out

    def patch(self, api_version, kind, namespace, name, merge_patch, subresource):
        o = self._call(self.writes.patch, self._kind(api_version, kind), namespace, name,
                       self.writes.PatchType.MERGE, json.dumps(merge_patch), subresource)
        return json.loads(o.json)

    def delete(self, api_version, kind, namespace, name):
        try:
            self._call(self.writes.delete, self._kind(api_version, kind), namespace, name,
                       self.writes.DeleteOptions(None, None, None))
            return True
        except ApiError as e:
            if e.code == 404:
                return False
            raise

    def event(self, regarding, warning, reason, note):
        t = self.events.EventType.WARNING if warning else self.events.EventType.NORMAL
        self.events.publish(json.dumps(regarding), t, reason, note)


class _Fixtures:
    """Plain CPython: reads answer from fixture objects; writes are
    recorded and applied to them."""

    def __init__(self, objects=()):
        self.objects = [json.loads(json.dumps(o)) for o in objects]
        self.writes = []

    @staticmethod
    def _same(o, api_version, kind, namespace, name):
        m = o.get("metadata", {})
        return (o.get("apiVersion"), o.get("kind"), m.get("namespace"), m.get("name")) == \
            (api_version, kind, namespace, name)

    def get_resource(self, group, version, resource, namespace, name):
        api_version = f"{group}/{version}" if group else version
        for o in self.objects:
            kind = o.get("kind", "").lower()
            plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
            if o.get("apiVersion") == api_version and plural == resource and \
                    self._same(o, api_version, o["kind"], namespace, name):
                return json.loads(json.dumps(o))
        return None

    def get(self, api_version, kind, namespace, name):
        for o in self.objects:
            if self._same(o, api_version, kind, namespace, name):
                return json.loads(json.dumps(o))
        return None

    def list(self, api_version, kind, namespace, label_selector):
        terms = [t.split("=", 1) for t in (label_selector or "").split(",") if t]
        return [json.loads(json.dumps(o)) for o in self.objects
                if o.get("apiVersion") == api_version and o.get("kind") == kind
                and (namespace is None or o["metadata"].get("namespace") == namespace)
                and all(o["metadata"].get("labels", {}).get(k) == v for k, v in terms)]

    def _record(self, verb, kind, namespace, name):
        self.writes.append((verb, kind, namespace, name))

    def write(self, verb, obj, subresource=None):
        m = obj["metadata"]
        self._record(verb, obj["kind"], m.get("namespace"), m["name"])
        for i, o in enumerate(self.objects):
            if self._same(o, obj["apiVersion"], obj["kind"], m.get("namespace"), m["name"]):
                if verb == "create":
                    raise ApiError(409, "AlreadyExists", f"{obj['kind']} {m['name']!r} already exists")
                self.objects[i] = _merge(o, obj) if verb == "apply" else obj
                return self.objects[i]
        if verb == "update":
            raise ApiError(404, "NotFound", f"{obj['kind']} {m['name']!r} not found")
        self.objects.append(obj)
        return obj

    def apply_all(self, configurations):
        out = []
        for c in configurations:
            try:
                out.append(self.write("apply", c))
            except ApiError as e:
                out.append(e)
        return out

    def patch(self, api_version, kind, namespace, name, merge_patch, subresource):
        cur = self.get(api_version, kind, namespace, name)
        if cur is None:
            raise ApiError(404, "NotFound", f"{kind} {name!r} not found")
        return self.write("update", _merge(cur, merge_patch))

    def delete(self, api_version, kind, namespace, name):
        before = len(self.objects)
        self.objects = [o for o in self.objects if not self._same(o, api_version, kind, namespace, name)]
        if len(self.objects) == before:
            return False
        self._record("delete", kind, namespace, name)
        return True

    def event(self, regarding, warning, reason, note):
        self._record("event", reason, regarding["metadata"].get("namespace"), regarding["metadata"].get("name"))


def _merge(target, patch):
    if not isinstance(target, dict) or not isinstance(patch, dict):
        return patch
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


_current = None


def _host():
    global _current
    if _current is None:
        try:
            _current = _WitHost()
        except ImportError:
            _current = _Fixtures()
    return _current


def set_cluster(objects):
    """Natively: answer reads from ``objects`` and forget recorded writes."""
    global _current
    _current = _Fixtures(objects)


def writes():
    """Natively: the writes since :func:`set_cluster`, as
    ``(verb, kind, namespace, name)``."""
    return list(_host().writes)


def objects():
    """Natively: the fixture objects after the writes so far."""
    return list(_host().objects)


def reconcile(controller_class, config_text, req):
    """Runs a reconcile (what :func:`export` and tests share): the
    configuration parsed against the class's schema; ``None`` or
    milliseconds."""
    controller = controller_class()
    return controller.reconcile(parse_config(config_text, controller_class.config), req)


def export(controller_class):
    """The ``Controller`` class componentize-py exports for ``controller_class``."""
    import wit_world.exports
    from wit_world.exports.controller import ReconcileResult_Done, ReconcileResult_RequeueAfter
    from componentize_py_types import Err

    class Exported(wit_world.exports.Controller):
        def check_config(self, config):
            try:
                parse_config(config, controller_class.config)
            except ValueError as e:
                raise Err(str(e))

        def reconcile(self, config, request):
            r = request.resource
            req = Request(r.group, r.version, r.resource, request.namespace, request.name,
                          REASONS[request.reason.value], request.retries)
            try:
                after = reconcile(controller_class, config, req)
            except Exception as e:  # the server retries with backoff
                raise Err(str(e))
            if after is None:
                return ReconcileResult_Done()
            return ReconcileResult_RequeueAfter(int(after))

    return Exported
