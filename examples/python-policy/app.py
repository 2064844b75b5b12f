"""python-policy: a validating admission plugin for wasm-apiserver, in Python.

Built into a WebAssembly component with componentize-py (see README.md);
the bindings module ``wit_world`` is generated from ``wit/`` at build time.

Configuration (JSON)::

    {"namePattern": "^tmp-", "forbiddenKeys": ["password"], "kinds": ["ConfigMap", "Secret"]}

* ``namePattern`` (optional): a Python regular expression; an object whose
  name matches it (``re.search``) is denied.
* ``forbiddenKeys`` (optional): keys that must not appear in the object's
  ``data``, ``binaryData`` or ``stringData``.
* ``kinds`` (optional, default ``["ConfigMap", "Secret"]``): the kinds the
  policy applies to; any other kind is allowed.

Deletes and requests without an object are allowed. ``mutate`` allows
everything without a patch.
"""

import json
import re

import wit_world
from componentize_py_types import Err
from wit_world.exports.admission import AdmissionRequest, AdmissionResponse
from wit_world.imports import log
from wit_world.imports.types import Status

PLUGIN = "python-policy"
DEFAULT_KINDS = ["ConfigMap", "Secret"]
DATA_FIELDS = ("data", "binaryData", "stringData")


class Config:
    """A parsed, checked configuration."""

    def __init__(self, name_pattern, forbidden_keys, kinds):
        self.name_pattern = name_pattern
        self.forbidden_keys = forbidden_keys
        self.kinds = kinds


def _string_list(raw, field):
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise ValueError(f"{field} must be a list of strings")
    return list(raw)


def parse_config(text):
    """Parses the configuration; raises ValueError with a readable message."""
    if not text.strip():
        return Config(None, [], list(DEFAULT_KINDS))
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid configuration: not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError("invalid configuration: expected a JSON object")
    unknown = sorted(set(raw) - {"namePattern", "forbiddenKeys", "kinds"})
    if unknown:
        raise ValueError(f"invalid configuration: unknown field(s): {', '.join(unknown)}")

    pattern = raw.get("namePattern")
    if pattern is not None:
        if not isinstance(pattern, str):
            raise ValueError("invalid configuration: namePattern must be a string")
        try:
            pattern = (pattern, re.compile(pattern))
        except re.error as e:
            raise ValueError(f"invalid configuration: invalid namePattern {pattern!r}: {e}") from None
    try:
        forbidden = _string_list(raw.get("forbiddenKeys", []), "forbiddenKeys")
        kinds = _string_list(raw.get("kinds", DEFAULT_KINDS), "kinds")
    except ValueError as e:
        raise ValueError(f"invalid configuration: {e}") from None
    return Config(pattern, forbidden, kinds)


def allow():
    return AdmissionResponse(allowed=True, status=None, patch=None, warnings=[], audit_annotations=[])


def deny(code, reason, message, annotations=()):
    return AdmissionResponse(
        allowed=False,
        status=Status(code=code, reason=reason, message=message, causes=[]),
        patch=None,
        warnings=[],
        audit_annotations=list(annotations),
    )


def problems_of(config, obj, name):
    """The reasons `obj` is denied, as a list of sentences (empty: allowed)."""
    problems = []
    if config.name_pattern is not None and name:
        source, regex = config.name_pattern
        if regex.search(name):
            problems.append(f"name {json.dumps(name)} matches the forbidden pattern {json.dumps(source)}")
    found = set()
    for field in DATA_FIELDS:
        data = obj.get(field)
        if isinstance(data, dict):
            found.update(k for k in config.forbidden_keys if k in data)
    if found:
        keys = ", ".join(sorted(found))
        problems.append(f"forbidden data key(s): {keys}")
    return problems


class Admission(wit_world.exports.Admission):
    def check_config(self, config: str) -> None:
        try:
            parse_config(config)
        except ValueError as e:
            raise Err(str(e))

    def validate(self, config: str, request: AdmissionRequest) -> AdmissionResponse:
        try:
            cfg = parse_config(config)
        except ValueError as e:
            return deny(500, "InternalError", str(e))
        kind = request.kind.kind
        if kind not in cfg.kinds or request.object is None:
            return allow()
        try:
            obj = json.loads(request.object)
        except json.JSONDecodeError as e:
            return deny(400, "BadRequest", f"object is not JSON: {e}")
        if not isinstance(obj, dict):
            return deny(400, "BadRequest", "object is not a JSON object")

        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        name = name or request.name or ""

        problems = problems_of(cfg, obj, name)
        if not problems:
            return allow()
        reasons = "; ".join(problems)
        log.log(log.Level.INFO, "denied", [("name", name), ("kind", kind)])
        return deny(403, "Forbidden", f"{kind} {json.dumps(name)} denied by {PLUGIN}: {reasons}", [("reason", reasons)])

    def mutate(self, config: str, request: AdmissionRequest) -> AdmissionResponse:
        return allow()
