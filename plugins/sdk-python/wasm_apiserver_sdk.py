"""The Python SDK for wasm-apiserver admission policies (componentize-py).

The same concepts as the Rust SDK (``plugins/sdk``): a policy is a subclass
of :class:`Policy` with a configuration schema and ``validate``/``mutate``
methods, exported with :func:`export`::

    import wasm_apiserver_sdk as sdk

    class RequireTeam(sdk.Policy):
        config = {"labels": ["team"]}             # defaults, and the schema

        def validate(self, config, req):
            missing = [k for k in config.labels if req.label(k) is None]
            return sdk.Response.deny(f"missing {missing}") if missing else sdk.Response.allow()

    Admission = sdk.export(RequireTeam)           # what componentize-py looks up

A context-aware policy reads the cluster through :data:`cluster`
(``cluster.get``, ``cluster.list``, ``cluster.can_i``; the kinds it reads
listed in its AdmissionPlugin's ``spec.contextAwareResources``); natively
those calls answer from :func:`set_cluster` and :func:`set_can_i`.

Build with ``componentize-py -d wit -w admission-plugin -p <this folder>
componentize app`` (or copy this file into the policy's folder). The module
imports the generated bindings (``wit_world``) only in :func:`export` and
on the first :data:`cluster` call, so it runs and is tested in plain
CPython too.

Versioning: SDK 0.4.x binds ``wasm-apiserver:plugin@0.4.0``.
"""

import json
import re

__version__ = "0.4.0"

# --- configuration ----------------------------------------------------------


class pattern:
    """A configuration field holding a regular expression (``re``), compiled
    when the configuration is parsed; ``None`` when it is absent."""

    def __init__(self, default=None):
        self.default = default


class Config:
    """A parsed configuration: fields as attributes (``config.labels``)."""

    def __init__(self, fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return f"Config({self.__dict__!r})"


def parse_config(text, schema):
    """Parses configuration text against ``schema`` (field -> default).

    A default's type is the field's type (a list, dict, str, bool, int or
    float; ``None`` accepts anything; :class:`pattern` compiles a regular
    expression). Empty text is all defaults. Raises ``ValueError`` reading
    ``invalid configuration: ...``.
    """
    raw = {}
    if text.strip():
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid configuration: not JSON: {e}") from None
        if not isinstance(raw, dict):
            raise ValueError("invalid configuration: expected a JSON object")
    unknown = sorted(set(raw) - set(schema))
    if unknown:
        raise ValueError(f"invalid configuration: unknown field(s): {', '.join(unknown)}")
    fields = {}
    for name, default in schema.items():
        value = raw.get(name)
        if isinstance(default, pattern):
            if value is None:
                value = default.default
            if value is not None:
                if not isinstance(value, str):
                    raise ValueError(f"invalid configuration: {name} must be a string")
                try:
                    value = Pattern(value)
                except re.error as e:
                    raise ValueError(f"invalid configuration: invalid pattern {json.dumps(value)}: {e}") from None
        elif name not in raw:
            value = json.loads(json.dumps(default))  # a copy
        elif default is not None and not _same_type(value, default):
            raise ValueError(f"invalid configuration: {name} must be {_type_name(default)}")
        fields[name] = value
    return Config(fields)


def _same_type(value, default):
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def _type_name(default):
    return {list: "a list", dict: "an object", str: "a string", bool: "a boolean"}.get(type(default), "a number")


class Pattern:
    """A compiled regular expression that remembers its source."""

    def __init__(self, source):
        self.source = source
        self.regex = re.compile(source)

    def is_match(self, text):
        """True when the pattern matches somewhere in ``text`` (``re.search``)."""
        return self.regex.search(text) is not None

    def __str__(self):
        return self.source


# --- the request ------------------------------------------------------------


class Request:
    """An admission request with its object parsed once.

    Build it from the host's record (:meth:`from_wit`, done by
    :func:`export`) or from an ``admission.k8s.io/v1`` AdmissionReview
    (:meth:`from_review`, for tests and captured requests).
    """

    def __init__(self, request):
        self.raw = request
        self.operation = request.get("operation", "CREATE")
        self.kind = request.get("kind", {}).get("kind", "")
        self.gvk = request.get("kind", {})
        self.resource = request.get("resource", {}).get("resource", "")
        self.sub_resource = request.get("subResource")
        self.namespace = request.get("namespace")
        self.user = request.get("userInfo", {})
        self.dry_run = bool(request.get("dryRun", False))
        self.object = request.get("object")
        self.old_object = request.get("oldObject")

    @classmethod
    def from_review(cls, review):
        """From an AdmissionReview (or its bare ``request``) as a dict."""
        return cls(review.get("request", review))

    @classmethod
    def from_wit(cls, r):
        """From the bindings' ``AdmissionRequest``; raises ``ValueError`` on bad JSON."""

        def gv(x, last):
            return None if x is None else {"group": x.group, "version": x.version, last: getattr(x, last)}

        def parsed(text, what):
            if text is None:
                return None
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{what} is not valid JSON: {e}") from None

        u = r.user_info
        return cls({
            "uid": r.uid,
            "kind": gv(r.kind, "kind"),
            "resource": gv(r.resource, "resource"),
            "subResource": r.sub_resource,
            "name": r.name,
            "namespace": r.namespace,
            "operation": r.operation.name,
            "userInfo": {"username": u.username, "uid": u.uid, "groups": list(u.groups),
                         "extra": {k: list(v) for k, v in u.extra}},
            "dryRun": r.dry_run,
            "object": parsed(r.object, "object"),
            "oldObject": parsed(r.old_object, "oldObject"),
            "options": parsed(r.options, "options"),
        })

    @property
    def is_create(self):
        return self.operation == "CREATE"

    @property
    def is_update(self):
        return self.operation == "UPDATE"

    @property
    def is_delete(self):
        return self.operation == "DELETE"

    @property
    def subject(self):
        """The object, or the old object when there is none (a delete)."""
        return self.object if self.object is not None else self.old_object

    def _metadata(self, field):
        meta = (self.subject or {}).get("metadata")
        value = meta.get(field) if isinstance(meta, dict) else None
        return value if isinstance(value, dict) else {}

    @property
    def name(self):
        """``metadata.name``, else the request's name, else ``""``."""
        meta = (self.subject or {}).get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name or self.raw.get("name") or ""

    @property
    def labels(self):
        return self._metadata("labels")

    def label(self, key):
        return self.labels.get(key)

    def missing_labels(self, required):
        """The keys of ``required`` the object has no label for, in order."""
        return [k for k in required if self.label(k) is None]

    def patch(self):
        """A :class:`Patch` of the object (empty when there is none)."""
        return Patch.on(self.object if self.object is not None else {})

    @property
    def annotations(self):
        return self._metadata("annotations")

    def annotation(self, key):
        return self.annotations.get(key)


# --- the response -----------------------------------------------------------


class Response:
    """A policy's decision, built fluently:
    ``Response.deny("too many").code(422).reason("Invalid").cause("spec.replicas", "FieldValueInvalid", "at most 5")``.
    """

    def __init__(self, allowed, status=None):
        self.allowed = allowed
        self.status = status
        self.patch = Patch()
        self.warnings = []
        self.audit_annotations = []

    @classmethod
    def allow(cls):
        return cls(True)

    @classmethod
    def deny(cls, message, code=403, reason="Forbidden"):
        return cls(False, {"code": code, "reason": reason, "message": message, "causes": []})

    @classmethod
    def invalid(cls, message):
        return cls.deny(message, 422, "Invalid")

    @classmethod
    def patched(cls, patch):
        return cls.allow().with_patch(patch)

    def code(self, code):
        if self.status is not None:
            self.status["code"] = code
        return self

    def reason(self, reason):
        if self.status is not None:
            self.status["reason"] = reason
        return self

    def cause(self, field, reason, message):
        if self.status is not None:
            self.status["causes"].append({"field": field, "reason": reason, "message": message})
        return self

    def warn(self, warning):
        self.warnings.append(warning)
        return self

    def annotate(self, key, value):
        self.audit_annotations.append((key, value))
        return self

    def with_patch(self, patch):
        self.patch = patch
        return self

    def when(self, condition):
        """This answer when ``condition`` holds, else a plain allow."""
        return self if condition else Response.allow()

    @property
    def message(self):
        return self.status["message"] if self.status and not self.allowed else ""

    def to_wit(self):
        """The bindings' ``AdmissionResponse``."""
        from wit_world.exports.admission import AdmissionResponse
        from wit_world.imports.types import FieldCause, Status

        status = None
        if not self.allowed and self.status is not None:
            s = self.status
            causes = [FieldCause(field=c["field"], reason=c["reason"], message=c["message"]) for c in s["causes"]]
            status = Status(code=s["code"], reason=s["reason"], message=s["message"], causes=causes)
        return AdmissionResponse(
            allowed=self.allowed,
            status=status,
            patch=None if not self.patch.ops else self.patch.to_json(),
            warnings=list(self.warnings),
            audit_annotations=list(self.audit_annotations),
        )


class Violations:
    """The problems a validation finds, each tied to a field: one denial
    naming them all (``into_response``), or an allow when there is none."""

    def __init__(self):
        self.causes = []

    def add(self, field, reason, message):
        self.causes.append({"field": field, "reason": reason, "message": message})

    def invalid(self, field, message):
        self.add(field, "FieldValueInvalid", message)

    def required(self, field, message):
        self.add(field, "FieldValueRequired", message)

    def forbidden(self, field, message):
        self.add(field, "FieldValueForbidden", message)

    def __bool__(self):
        return bool(self.causes)

    def into_response(self, prefix):
        """Allow when empty; else a 403 ``"{prefix}: {first}; {second}..."`` with one cause each."""
        if not self.causes:
            return Response.allow()
        response = Response.deny(f"{prefix}: {'; '.join(c['message'] for c in self.causes)}")
        response.status["causes"] = list(self.causes)
        return response


# --- JSON Patch -------------------------------------------------------------


def pointer(segments):
    """The JSON Pointer (RFC 6901) of ``segments``."""
    return "".join("/" + s.replace("~", "~0").replace("/", "~1") for s in segments)


class Patch:
    """A JSON Patch (RFC 6902) under construction.

    ``Patch()`` collects raw operations; ``Patch.on(obj)`` also keeps a copy
    of the object, so the path helpers create missing parents, skip no-op
    changes and see the effect of the operations before them.
    """

    def __init__(self, doc=None):
        self.ops = []
        self._doc = doc

    @classmethod
    def on(cls, obj):
        return cls(json.loads(json.dumps(obj)))

    def add(self, path, value):
        self.ops.append({"op": "add", "path": path, "value": value})
        return self

    def replace(self, path, value):
        self.ops.append({"op": "replace", "path": path, "value": value})
        return self

    def remove_pointer(self, path):
        self.ops.append({"op": "remove", "path": path})
        return self

    def test(self, path, value):
        self.ops.append({"op": "test", "path": path, "value": value})
        return self

    def _root(self):
        if self._doc is None:
            self._doc = {}
        return self._doc

    def get(self, path):
        at = self._doc
        for seg in path:
            if not isinstance(at, dict) or seg not in at:
                return None
            at = at[seg]
        return at

    def set(self, path, value):
        """Sets the member at ``path``, adding missing parents; nothing when unchanged."""
        if not path:
            return self
        at = self._root()
        for i, seg in enumerate(path[:-1]):
            if not isinstance(at, dict):
                return self
            if not isinstance(at.get(seg), dict):
                nested = value
                for s in reversed(path[i + 1:]):
                    nested = {s: nested}
                replacing = seg in at
                at[seg] = json.loads(json.dumps(nested))
                return self.replace(pointer(path[: i + 1]), nested) if replacing else self.add(pointer(path[: i + 1]), nested)
            at = at[seg]
        if not isinstance(at, dict) or (path[-1] in at and at[path[-1]] == value):
            return self
        at[path[-1]] = value
        return self.add(pointer(path), value)  # `add` on a member replaces it

    def set_default(self, path, value):
        """Sets the member at ``path`` only when it is missing."""
        return self if self.get(path) is not None else self.set(path, value)

    def remove(self, path):
        """Removes the member at ``path``; nothing when it is missing."""
        parent = self.get(path[:-1]) if path else None
        if not isinstance(parent, dict) or path[-1] not in parent:
            return self
        del parent[path[-1]]
        return self.remove_pointer(pointer(path))

    def set_label(self, key, value):
        return self.set(["metadata", "labels", key], value)

    def default_label(self, key, value):
        return self.set_default(["metadata", "labels", key], value)

    def remove_label(self, key):
        return self.remove(["metadata", "labels", key])

    def set_annotation(self, key, value):
        return self.set(["metadata", "annotations", key], value)

    def default_annotation(self, key, value):
        return self.set_default(["metadata", "annotations", key], value)

    def remove_annotation(self, key):
        return self.remove(["metadata", "annotations", key])

    def default_annotations(self, annotations):
        """Sets each annotation the object does not have yet, in key order."""
        for key, value in sorted(annotations.items()):
            self.default_annotation(key, value)
        return self

    def default_labels(self, labels):
        """Sets each label the object does not have yet, in key order."""
        for key, value in sorted(labels.items()):
            self.default_label(key, value)
        return self

    def to_json(self):
        return json.dumps(self.ops, separators=(",", ":"))


# --- reading the cluster ----------------------------------------------------


class ClusterError(Exception):
    """A refused :data:`cluster` call, with the host's message (``message``):
    a kind the plugin is not granted (``reading v1 Secret is not granted:
    ...``), a read budget spent, a bad selector."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


SUBJECT_ACCESS_REVIEW = ("authorization.k8s.io/v1", "SubjectAccessReview")


class Cluster:
    """Reads of the cluster (the ``cluster`` import, since package 0.3.0), as
    :data:`cluster`: objects of the kinds the plugin's
    ``spec.contextAwareResources`` grants, from the server's own store
    within the plugin's read budget, and SubjectAccessReviews. Objects are
    parsed JSON (dicts); a refusal raises :class:`ClusterError`.

    In a component the calls go to the host; in plain CPython they answer
    from fixtures (:func:`set_cluster`, :func:`set_can_i`)::

        ns = sdk.cluster.get("v1", "Namespace", None, req.namespace)
        others = sdk.cluster.list("networking.k8s.io/v1", "Ingress")
        if not sdk.cluster.can_i(req.user, "delete", "", "pods", namespace="prod"): ...
    """

    def get(self, api_version: str, kind: str, namespace: "str | None", name: str) -> "dict | None":
        """One object of ``kind`` in ``api_version`` (as objects spell them:
        ``v1``, ``Namespace``; ``namespace`` ``None`` for a cluster-scoped
        kind), or ``None`` when there is none."""
        return _cluster_host().get(api_version, kind, namespace, name)

    def list(self, api_version: str, kind: str, namespace: "str | None" = None,
             label_selector: "str | None" = None, field_selector: "str | None" = None) -> "list[dict]":
        """Every object of ``kind`` in ``namespace`` (every namespace for
        ``None``) matching ``label_selector`` (``app=web,tier in (a,b)``)
        and ``field_selector`` (``path=value``, ``path!=value`` on any field
        path, a list on the way matching when one of its items does:
        ``spec.rules.host=a.example.com``; the server answers a ``path=value``
        on a field other than the name and namespace from a field index),
        following continue tokens."""
        return _cluster_host().list(api_version, kind, namespace, label_selector, field_selector)

    def can_i(self, user: "dict | str", verb: str, group: str, resource: str, *,
              namespace: "str | None" = None, name: "str | None" = None,
              subresource: "str | None" = None) -> bool:
        """Whether ``user`` (a request's ``req.user`` dict, or a username)
        may ``verb`` the ``resource`` of API ``group`` (``""`` for the core
        group): a SubjectAccessReview through the server's authorizers. Needs
        the grant ``authorization.k8s.io/v1`` ``SubjectAccessReview``. The
        user's ``extra`` is not part of the review."""
        if isinstance(user, str):
            user = {"username": user}
        user = {"username": user.get("username", ""), "uid": user.get("uid") or "",
                "groups": list(user.get("groups") or []),
                "extra": {k: list(v) for k, v in (user.get("extra") or {}).items()}}
        attributes = {"verb": verb, "group": group, "resource": resource, "subresource": subresource,
                      "namespace": namespace, "name": name}
        return _cluster_host().can_i(user, attributes)


cluster = Cluster()


class _WitCluster:
    """The server, through the component's ``cluster`` import."""

    def __init__(self):
        from wit_world.imports import cluster as imports
        from wit_world.imports.types import UserInfo
        from componentize_py_types import Err
        self.imports, self.UserInfo, self.Err = imports, UserInfo, Err

    def _call(self, f, *args):
        try:
            return f(*args)
        except self.Err as e:
            raise ClusterError(str(e.value)) from None

    def _kind(self, api_version, kind):
        return self.imports.Target_Kind(self.imports.KindRef(api_version, kind))

    def get(self, api_version, kind, namespace, name):
        o = self._call(self.imports.get, self._kind(api_version, kind), namespace, name)
        return None if o is None else json.loads(o.json)

    def list(self, api_version, kind, namespace, label_selector, field_selector=None):
        out, token = [], None
        while True:
            page = self._call(self.imports.list, self._kind(api_version, kind),
                              self.imports.ListOptions(namespace, label_selector, field_selector, None, token))
            out.extend(json.loads(o.json) for o in page.items)
            token = page.continue_token
            if token is None:
                return out

    def can_i(self, user, attributes):
        u = self.UserInfo(user["username"], user["uid"], user["groups"], list(user["extra"].items()))
        a = self.imports.ResourceAttributes(attributes["verb"], attributes["group"], attributes["resource"],
                                            attributes["subresource"], attributes["namespace"],
                                            attributes["name"])
        return bool(self._call(self.imports.can_i, u, a))


class _FixtureCluster:
    """Plain CPython: the calls answer from fixtures."""

    def __init__(self):
        self.objects, self.grants, self.answer = [], None, False

    def granted(self, api_version, kind):
        if self.grants is not None and (api_version, kind) not in self.grants:
            raise ClusterError(f"reading {api_version} {kind} is not granted: "
                               "it is not in the plugin's spec.contextAwareResources")

    def _of(self, api_version, kind):
        self.granted(api_version, kind)
        return [o for o in self.objects if o.get("apiVersion") == api_version and o.get("kind") == kind]

    def get(self, api_version, kind, namespace, name):
        for o in self._of(api_version, kind):
            m = o.get("metadata") or {}
            if m.get("name") == name and m.get("namespace") == namespace:
                return json.loads(json.dumps(o))
        return None

    def list(self, api_version, kind, namespace, label_selector, field_selector=None):
        requirements = _parse_selector(label_selector or "")
        fields = _parse_field_selector(field_selector or "")
        return [json.loads(json.dumps(o)) for o in self._of(api_version, kind)
                if (namespace is None or (o.get("metadata") or {}).get("namespace") == namespace)
                and _selector_matches(requirements, (o.get("metadata") or {}).get("labels") or {})
                and all(_field_matches(o, *f) for f in fields)]

    def can_i(self, user, attributes):
        self.granted(*SUBJECT_ACCESS_REVIEW)
        answer = self.answer
        if callable(answer):
            return bool(answer(user, attributes))
        if isinstance(answer, bool):
            return answer
        if isinstance(answer, dict):
            answer = [answer]
        return any(_rule_allows(rule, user, attributes) for rule in answer)


def _rule_allows(rule, user, attributes):
    def admits(key, values):
        want = rule.get(key, "*")
        want = [want] if isinstance(want, str) else list(want)
        return "*" in want or any(v in want for v in values)

    return admits("as", [user["username"]]) and admits("asGroup", user["groups"]) and \
        all(admits(k, [attributes[k]]) for k in ("verb", "group", "resource", "subresource", "namespace", "name"))


def _parse_field_selector(selector):
    """A field selector's requirements, as ``(path, value, negate)``; raises
    :class:`ClusterError` on a malformed one."""
    out = []
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        for op, negate in (("!=", True), ("==", False), ("=", False)):
            if op in term:
                path, value = term.split(op, 1)
                break
        else:
            raise ClusterError(f"invalid selector: '{selector}'; can't understand '{term}'")
        path = path.strip().split(".")
        if not all(path):
            raise ClusterError(f"invalid selector: '{selector}'; '{term}' names no field path")
        out.append((path, value.strip(), negate))
    return out


def _field_matches(obj, path, value, negate):
    """As the server: some value at ``path`` is ``value`` (lists fan out; a
    missing field reads as "")."""
    found = []

    def walk(v, rest):
        if isinstance(v, list):
            for item in v:
                walk(item, rest)
        elif rest and isinstance(v, dict):
            if rest[0] in v:
                walk(v[rest[0]], rest[1:])
        elif not rest and isinstance(v, bool):
            found.append("true" if v else "false")
        elif not rest and isinstance(v, (str, int, float)):
            found.append(str(v))

    walk(obj, path)
    hit = value in found if found else value == ""
    return hit != negate


def _parse_selector(selector):
    """A label selector's requirements, as ``(key, op, values)``; raises
    :class:`ClusterError` on a malformed one."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    out = []
    for term in (t.strip() for t in terms):
        if not term:
            continue
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", term)
        if term.startswith("!"):
            out.append((term[1:].strip(), "!", ()))
        elif m:
            out.append((m[1], m[2], tuple(v.strip() for v in m[3].split(","))))
        elif "!=" in term:
            key, value = term.split("!=", 1)
            out.append((key.strip(), "!=", (value.strip(),)))
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            out.append((key.strip(), "=", (value.strip(),)))
        elif re.fullmatch(r"[^\s()]+", term):
            out.append((term, "exists", ()))
        else:
            raise ClusterError(f"invalid label selector {json.dumps(selector)}")
    return out


def _selector_matches(requirements, labels):
    for key, op, values in requirements:
        value = labels.get(key)
        ok = {"!": value is None, "exists": value is not None, "=": value in values,
              "in": value in values, "!=": value not in values, "notin": value not in values}[op]
        if not ok:
            return False
    return True


_cluster_current = None


def _cluster_host():
    global _cluster_current
    if _cluster_current is None:
        try:
            _cluster_current = _WitCluster()
        except ImportError:
            _cluster_current = _FixtureCluster()
    return _cluster_current


def _fixture_cluster():
    global _cluster_current
    if not isinstance(_cluster_current, _FixtureCluster):
        _cluster_current = _FixtureCluster()
    return _cluster_current


def set_cluster(objects, grants=None):
    """Natively: :data:`cluster` reads answer from ``objects`` (copied).
    ``grants`` (``[(apiVersion, kind)]`` or ``spec.contextAwareResources``
    entries), when given, are the kinds the plugin may read as on the
    server: any other raises the host's "not granted" :class:`ClusterError`,
    and :meth:`Cluster.can_i` needs ``SUBJECT_ACCESS_REVIEW``. ``None``
    grants every kind. Keeps :func:`set_can_i`'s answer."""
    fixture = _fixture_cluster()
    fixture.objects = [json.loads(json.dumps(o)) for o in objects]
    fixture.grants = None if grants is None else [
        (g["apiVersion"], g["kind"]) if isinstance(g, dict) else tuple(g) for g in grants]


def set_can_i(answer):
    """Natively: what :meth:`Cluster.can_i` answers (``False`` until set).
    ``answer`` is a bool, a function ``(user, attributes) -> bool`` (both
    dicts: ``username``, ``uid``, ``groups``, ``extra``; ``verb``, ``group``,
    ``resource``, ``subresource``, ``namespace``, ``name``), or a list of
    allow rules, each a dict of those attribute keys plus ``as`` (a username)
    and ``asGroup`` (one of the user's groups), every value a string or a
    list of strings, ``"*"`` or a missing key matching anything::

        sdk.set_can_i([{"as": "alice", "verb": ["get", "list"], "resource": "pods"},
                       {"asGroup": "system:masters"}])
    """
    _fixture_cluster().answer = answer


# --- the policy -------------------------------------------------------------


class Policy:
    """Subclass it: set ``config`` (field -> default) and override
    ``check``, ``validate`` and/or ``mutate``; both phases allow by default."""

    config = {}

    def check(self, config):
        """Checks a parsed configuration beyond its schema; raise ``ValueError``."""

    def validate(self, config, request):
        return Response.allow()

    def mutate(self, config, request):
        return Response.allow()

    def configure(self, text):
        config = parse_config(text, type(self).config)
        self.check(config)
        return config

    def run(self, phase, text, request):
        """One phase: a bad configuration is a 500 denial, bad request JSON a 400."""
        try:
            config = self.configure(text)
        except ValueError as e:
            return Response.deny(str(e), 500, "InternalError")
        try:
            req = request if isinstance(request, Request) else Request.from_wit(request)
        except ValueError as e:
            return Response.deny(str(e), 400, "BadRequest")
        return getattr(self, phase)(config, req)


def export(policy_class):
    """The ``Admission`` class componentize-py exports for ``policy_class``."""
    import wit_world.exports
    from componentize_py_types import Err

    policy = policy_class()

    class Admission(wit_world.exports.Admission):
        def check_config(self, config):
            try:
                policy.configure(config)
            except ValueError as e:
                raise Err(str(e))

        def validate(self, config, request):
            return policy.run("validate", config, request).to_wit()

        def mutate(self, config, request):
            return policy.run("mutate", config, request).to_wit()

    return Admission
