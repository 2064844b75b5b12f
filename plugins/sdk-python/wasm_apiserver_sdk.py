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

Build with ``componentize-py -d wit -w admission-plugin -p <this folder>
componentize app`` (or copy this file into the policy's folder). The module
imports the generated bindings (``wit_world``) only in :func:`export`, so
its builders run and are tested in plain CPython too.

Versioning: SDK 0.3.x binds ``wasm-apiserver:plugin@0.3.0``.
"""

import json
import re

__version__ = "0.3.0"

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
