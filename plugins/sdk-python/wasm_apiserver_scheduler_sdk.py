"""The Python SDK for wasm-apiserver scheduler plugins (componentize-py).

The same concepts as the Rust SDK's ``scheduler`` module (``plugins/sdk``):
a plugin is a subclass of :class:`SchedulerPlugin` with a configuration
schema (the admission SDK's :func:`wasm_apiserver_sdk.parse_config` rules)
and methods for one pod and one node at a time, exported with
:func:`export`::

    import wasm_apiserver_scheduler_sdk as sched

    class ByLabel(sched.SchedulerPlugin):
        config = {"label": "rank"}

        def filter(self, config, pod, node):
            if node.label("maintenance") == "true":
                return sched.Refusal.unschedulable("node in maintenance")

        def score(self, config, pod, node):
            return sched.clamp_score(sched.parse_int(node.label(config.label)) or 0)

    Scheduler = sched.export(ByLabel)    # what componentize-py looks up

The host passes every candidate node of a scheduling cycle in one call; the
SDK parses the pod once per call, calls the method for each node and
answers in the nodes' order. The nodes arrive packed (the WIT ``nodes``
record: one UTF-8 ``text`` holding every string of every node, one list of
every label, one of every taint, and each node as spans of those), and the
SDK unpacks them (:func:`unpack`) into :class:`Node` objects, cheaply and
lazily: a node's ``name`` and ``unschedulable`` at once, its ``labels``
(``label(key)`` looks one up without decoding the others), ``taints`` and
``object`` when first read. A plugin that needs more of the object
(status, allocatable, annotations) sets ``node_objects = True`` (it claims
``node-objects``): the host then sends every node's whole object too,
which :attr:`Node.object` parses on first use (``None`` without the
claim). Claim it only when needed: the host serializes and the plugin
parses each node's object on every call. A span outside the text, or text
that is not UTF-8, answers a refusal with code ``error`` for that node (for
the call, in ``pre_score`` and ``score``), never a trap.

The extension points a plugin claims (``extension-points``) are exactly
the methods the subclass overrides: ``pre_filter(config, pod)``,
``filter(config, pod, node)``, ``pre_score(config, pod, nodes)``,
``score(config, pod, node)`` and ``normalize_score(config, pod, scores)``.
``filter`` returns ``None`` when the node fits, or a :class:`Refusal`;
``score`` an ``int``; ``normalize_score`` the list brought to 0-100;
``pre_filter`` and ``pre_score`` a state string (or :data:`SKIP`, or a
:class:`Refusal`), which the later points read as ``pod.state``.
``check(config)`` raises ``ValueError`` for a configuration the plugin
cannot use.

Failures never trap: a bad configuration, a pod (or a claimed node object)
that does not parse, or an exception raised by a method answers a refusal
with code ``error``. Scores are not clamped: out of 0-100 without
``normalize_score`` fails the cycle, as upstream's framework does
(:func:`clamp_score` brings one into range).

Build with ``componentize-py -d wit -w scheduler-plugin -p <this folder>
componentize app``. Natively (plain CPython, for tests) :func:`cycle` runs a
plugin as the server's scheduler would, and :func:`run_cases` runs a case
table of ``wasm-apiserver plugin test``; they pack the case's node objects
as the host does (:func:`pack`, with the objects only when the plugin
claims ``node_objects``) and give the plugin what :func:`unpack` makes of
them, the path a component's calls take.

Versioning: SDK 0.4.x binds ``wasm-apiserver:plugin@0.4.0``.
"""

import json
import re
from collections import namedtuple

from wasm_apiserver_sdk import parse_config

__version__ = "0.4.0"

MIN_SCORE = 0
"""The lowest score a node may get (upstream's ``MinNodeScore``)."""
MAX_SCORE = 100
"""The highest score a node may get (upstream's ``MaxNodeScore``)."""

POINTS = ["pre_filter", "filter", "pre_score", "score", "normalize_score"]
"""The extension points, by method name, in the WIT flags' order."""

FLAGS = POINTS + ["node_objects"]
"""The members of the WIT flags ``extension-point-set``, in order: the
extension points, then ``node_objects`` (not a point: the plugin reads
whole node objects)."""

CODES = ["unschedulable", "unschedulable-and-unresolvable", "error"]
"""The refusal codes, in the WIT enum's order."""

SKIP = object()
"""What ``pre_filter`` or ``pre_score`` returns to skip this pod."""

_INTEGER = re.compile(r"[+-]?[0-9]+")


def clamp_score(score):
    """Brings ``score`` into 0-100."""
    return max(MIN_SCORE, min(MAX_SCORE, score))


def parse_int(text):
    """An integer as the scheduler SDKs read one alike: an optional sign and
    ASCII digits, nothing else; ``None`` otherwise (and for ``None``). A
    value past 64 bits saturates, as in Rust."""
    if not isinstance(text, str) or not _INTEGER.fullmatch(text):
        return None
    return max(-(2**63), min(2**63 - 1, int(text)))


class Refusal(Exception):
    """Why a pod cannot go to a node, or why the plugin failed: a code
    (``unschedulable``, ``unschedulable-and-unresolvable``, ``error``) and
    reasons. Return it from ``filter`` (or ``pre_filter``/``pre_score``), or
    raise it anywhere."""

    def __init__(self, code, *reasons):
        if code not in CODES:
            raise ValueError(f"unknown refusal code {code!r}: one of {', '.join(CODES)}")
        super().__init__(f"{code}: {'; '.join(reasons)}")
        self.code, self.reasons = code, list(reasons)

    @classmethod
    def unschedulable(cls, *reasons):
        """The node does not fit now; preempting pods might change that."""
        return cls("unschedulable", *reasons)

    @classmethod
    def unschedulable_and_unresolvable(cls, *reasons):
        """The node does not fit, and preemption cannot change that."""
        return cls("unschedulable-and-unresolvable", *reasons)

    @classmethod
    def error(cls, *reasons):
        """The plugin failed."""
        return cls("error", *reasons)

    def __eq__(self, other):
        return isinstance(other, Refusal) and (self.code, self.reasons) == (other.code, other.reasons)

    def __repr__(self):
        return f"Refusal({self.code!r}, {', '.join(map(repr, self.reasons))})"

    def to_wit(self):
        from wit_world.exports.scheduler import Code, Refusal as WitRefusal
        return WitRefusal(Code(CODES.index(self.code)), list(self.reasons))


class Object:
    """A Pod as the host sent it (``kubectl get -o json``), parsed once (or
    any object, natively). ``json`` is the whole dict; ``state`` (on the
    pod) is the cycle state the plugin's ``pre_filter`` or ``pre_score``
    returned (``""`` without one)."""

    def __init__(self, obj, state=""):
        self.json = obj if isinstance(obj, dict) else {}
        self.state = state

    @classmethod
    def parse(cls, text, what):
        try:
            obj = json.loads(text)
        except (TypeError, ValueError) as e:
            raise Refusal.error(f"{what} is not valid JSON: {e}") from None
        return cls(obj)

    def _metadata(self, field):
        m = self.json.get("metadata")
        v = m.get(field) if isinstance(m, dict) else None
        return v if isinstance(v, dict) else {}

    @property
    def name(self):
        """``metadata.name`` (``""`` when absent)."""
        m = self.json.get("metadata")
        n = m.get("name") if isinstance(m, dict) else None
        return n if isinstance(n, str) else ""

    @property
    def namespace(self):
        """``metadata.namespace`` (``None`` for a node)."""
        m = self.json.get("metadata")
        n = m.get("namespace") if isinstance(m, dict) else None
        return n if isinstance(n, str) else None

    @property
    def labels(self):
        """``metadata.labels`` (string values only)."""
        return {k: v for k, v in self._metadata("labels").items() if isinstance(v, str)}

    def label(self, key):
        """One label's value, or ``None``."""
        return self.labels.get(key)

    def annotation(self, key):
        """One annotation's value, or ``None``."""
        v = self._metadata("annotations").get(key)
        return v if isinstance(v, str) else None


Pod = Object


Taint = namedtuple("Taint", ["key", "value", "effect"])
Taint.__doc__ = """A taint of a node (``spec.taints[]``): ``key``, ``value`` (``""``
when the taint has none) and ``effect`` (``NoSchedule``,
``PreferNoSchedule`` or ``NoExecute``)."""

Span = namedtuple("Span", ["start", "len"])
Span.__doc__ = """A piece of a packed ``nodes`` record: ``len`` items from ``start``,
bytes of ``text`` for a string, entries of ``labels`` or ``taints`` for a
node's labels or taints."""

LabelRecord = namedtuple("LabelRecord", ["key", "value"])
LabelRecord.__doc__ = """The WIT ``label``: key and value, spans of the text."""

TaintRecord = namedtuple("TaintRecord", ["key", "value", "effect"])
TaintRecord.__doc__ = """The WIT ``taint``: key, value and effect, spans of the text."""

NodeRecord = namedtuple("NodeRecord", ["name", "labels", "taints", "unschedulable", "object"])
NodeRecord.__doc__ = """The WIT ``node``: ``name`` a span of the text, ``labels`` a span of the
labels (sorted by key), ``taints`` a span of the taints, ``unschedulable``,
and ``object``, a span of the text holding the whole Node's JSON, or
``None``."""

NodesRecord = namedtuple("NodesRecord", ["text", "labels", "taints", "items"])
NodesRecord.__doc__ = """The WIT ``nodes`` in plain Python (what :func:`pack` makes;
componentize-py hands the plugin its own classes with the same fields):
``text`` (``bytes``, UTF-8), ``labels``, ``taints`` and ``items``."""

_UNPARSED = object()


def _bytes(text, span, what):
    start, end = span.start, span.start + span.len
    if end > len(text):
        raise Refusal.error(f"{what}: bytes {start}..{end} are outside the text ({len(text)} bytes)")
    return text[start:end]


def _decode(text, span, what):
    try:
        return _bytes(text, span, what).decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refusal.error(f"{what} is not UTF-8: {e}") from None


def _entries(entries, span, what):
    start, end = span.start, span.start + span.len
    if end > len(entries):
        raise Refusal.error(f"{what}: entries {start}..{end} are outside the list ({len(entries)} entries)")
    return start, end


class Node:
    """A candidate node: ``name`` (``metadata.name``), ``labels`` and
    ``label(key)`` (``metadata.labels``), ``taints`` (``spec.taints``, a
    list of :class:`Taint`) and ``unschedulable`` (``spec.unschedulable``)
    from the host's packed record, without parsing; ``object``, the whole
    Node as a dict, only when the plugin claims ``node_objects`` (``None``
    otherwise), parsed on first access.

    Made by :func:`unpack` from the host's ``nodes``, or natively from a
    whole object (:meth:`from_object`)."""

    __slots__ = ("name", "unschedulable", "_error", "_text", "_all_labels", "_label_span", "_labels",
                 "_all_taints", "_taint_span", "_taints", "_object_span", "_object")

    def __init__(self, nodes, item):
        # Built by unpack: `nodes` is the packed record, `item` one of its nodes.
        text = self._text = nodes.text
        self._all_labels, self._label_span, self._labels = nodes.labels, item.labels, None
        self._all_taints, self._taint_span, self._taints = nodes.taints, item.taints, None
        self.unschedulable = bool(item.unschedulable)
        self._error = None
        try:
            self.name = _decode(text, item.name, "a node's name")
        except Refusal as r:
            self.name, self._error = "", r
        self._object_span = item.object
        self._object = None if item.object is None else _UNPARSED

    @classmethod
    def from_object(cls, obj):
        """The node the host would send for the whole object ``obj`` (a
        dict), with the object kept: labels that are not strings are left
        out, taints are those of ``spec.taints``."""
        node = unpack(pack([obj]))[0]
        node._object = obj if isinstance(obj, dict) else {}
        return node

    def without_object(self):
        """The same node without its object (what a plugin that does not
        claim ``node_objects`` receives)."""
        node = Node.__new__(Node)
        for f in Node.__slots__:
            setattr(node, f, getattr(self, f))
        node._object_span = node._object = None
        return node

    @property
    def labels(self):
        """``metadata.labels`` as a dict (built once)."""
        if self._labels is None:
            text, what = self._text, f"node {self.name} labels"
            start, end = _entries(self._all_labels, self._label_span, what)
            self._labels = {_decode(text, l.key, what): _decode(text, l.value, what)
                            for l in self._all_labels[start:end]}
        return self._labels

    def label(self, key):
        """One label's value, or ``None``. Until :attr:`labels` is read, it
        looks the key up among the sorted keys' bytes, decoding one value."""
        if self._labels is not None:
            return self._labels.get(key)
        try:
            want = key.encode("utf-8")
        except (AttributeError, UnicodeEncodeError):
            return None
        text, labels, what = self._text, self._all_labels, f"node {self.name} labels"
        lo, hi = _entries(labels, self._label_span, what)
        while lo < hi:
            mid = (lo + hi) // 2
            got = _bytes(text, labels[mid].key, what)
            if got < want:
                lo = mid + 1
            elif got > want:
                hi = mid
            else:
                return _decode(text, labels[mid].value, what)
        return None

    @property
    def taints(self):
        """``spec.taints``, in order, as :class:`Taint` tuples."""
        if self._taints is None:
            text, what = self._text, f"node {self.name} taints"
            start, end = _entries(self._all_taints, self._taint_span, what)
            self._taints = [Taint(_decode(text, t.key, what), _decode(text, t.value, what),
                                  _decode(text, t.effect, what)) for t in self._all_taints[start:end]]
        return self._taints

    @property
    def object(self):
        """The whole Node as a dict when the plugin claims ``node_objects``,
        else ``None``. A text that does not parse raises a :class:`Refusal`
        with code ``error`` (the node's answer, as any raised refusal)."""
        if self._object is _UNPARSED:
            text = _decode(self._text, self._object_span, f"node {self.name} object")
            try:
                obj = json.loads(text)
            except ValueError as e:
                raise Refusal.error(f"node {self.name} object is not valid JSON: {e}") from None
            self._object = obj if isinstance(obj, dict) else {}
        return self._object

    def annotation(self, key):
        """One annotation's value, from :attr:`object`: ``None`` without it."""
        obj = self.object
        if obj is None:
            return None
        v = _field(_field(obj, "metadata"), "annotations").get(key)
        return v if isinstance(v, str) else None

    def __repr__(self):
        return f"Node({self.name!r})"


def unpack(nodes):
    """The :class:`Node` list of the host's packed ``nodes`` (the WIT record
    as the bindings hand it, or a :class:`NodesRecord`), in order. Nothing
    is copied: each node decodes its name now, the rest when read. A node
    whose name cannot be decoded (a span outside the text, or not UTF-8)
    answers a refusal with code ``error``."""
    return [Node(nodes, item) for item in nodes.items]


def pack(nodes, objects=False):
    """The packed ``nodes`` record the host would send for ``nodes``
    (whole objects as dicts, or :class:`Node` objects), as a :class:`NodesRecord`:
    labels sorted by key, repeated strings stored once, and each node's
    whole object (as the JSON the host sends) only when ``objects`` is
    true (the plugin claims ``node_objects``)."""
    text, labels, taints, items, spans = bytearray(), [], [], [], {}

    def put(s, keep=True):
        span = spans.get(s) if keep else None
        if span is None:
            b = s.encode("utf-8")
            span = Span(len(text), len(b))
            text.extend(b)
            if keep:
                spans[s] = span
        return span

    for n in nodes:
        if isinstance(n, Node):
            name, pairs, ts, unschedulable = n.name, n.labels.items(), n.taints, n.unschedulable
            obj = n.object if objects else None
        else:
            n = n if isinstance(n, dict) else {}
            metadata, spec = _field(n, "metadata"), _field(n, "spec")
            name = _str(metadata, "name")
            pairs = [(k, v) for k, v in _field(metadata, "labels").items() if isinstance(v, str)]
            t = spec.get("taints")
            ts = [Taint(_str(x, "key"), _str(x, "value"), _str(x, "effect"))
                  for x in (t if isinstance(t, list) else []) if isinstance(x, dict)]
            unschedulable, obj = spec.get("unschedulable") is True, n
        label_span = Span(len(labels), 0)
        for k, v in sorted(pairs):
            labels.append(LabelRecord(put(k), put(v)))
        label_span = label_span._replace(len=len(labels) - label_span.start)
        taint_span = Span(len(taints), len(ts))
        taints.extend(TaintRecord(put(t.key), put(t.value), put(t.effect)) for t in ts)
        object_span = None
        if objects and obj is not None:
            object_span = put(json.dumps(obj, ensure_ascii=False, separators=(",", ":")), keep=False)
        items.append(NodeRecord(put(name), label_span, taint_span, unschedulable, object_span))
    return NodesRecord(bytes(text), labels, taints, items)


def _field(obj, key):
    v = obj.get(key)
    return v if isinstance(v, dict) else {}


def _str(obj, key):
    v = obj.get(key)
    return v if isinstance(v, str) else ""


class SchedulerPlugin:
    """Subclass it: set ``config`` (field -> default), override ``check``
    and the points the plugin implements (only those are claimed), and set
    ``node_objects = True`` to read :attr:`Node.object`."""

    config = {}
    node_objects = False
    """Whether the plugin reads whole node objects (claims ``node-objects``):
    without it every :attr:`Node.object` is ``None``, which spares the host
    serializing and the plugin parsing each node."""

    def check(self, config):
        """Checks a parsed configuration beyond its schema; raise ``ValueError``."""

    def pre_filter(self, config, pod):
        """Once per pod, before any ``filter``: a state string, :data:`SKIP` or a :class:`Refusal`."""
        return ""

    def filter(self, config, pod, node):
        """Whether ``node`` can run ``pod``: ``None`` when it fits, else a :class:`Refusal`."""
        return None

    def pre_score(self, config, pod, nodes):
        """Once per pod, with the nodes that fit, before ``score``: as ``pre_filter``."""
        return pod.state

    def score(self, config, pod, node):
        """The node's raw score (0-100 unless ``normalize_score`` is overridden)."""
        return MIN_SCORE

    def normalize_score(self, config, pod, scores):
        """The raw scores, in order, brought to 0-100."""
        return scores

    def points(self):
        """The points this plugin claims: the methods its class overrides."""
        return [p for p in POINTS if getattr(type(self), p) is not getattr(SchedulerPlugin, p)]

    def flags(self):
        """What ``extension-points`` answers, as :data:`FLAGS` names: the
        points, and ``node_objects`` when the plugin claims it."""
        return self.points() + (["node_objects"] if type(self).node_objects else [])

    def configure(self, text):
        """Parses and checks a configuration: what ``check-config`` answers."""
        config = parse_config(text, type(self).config)
        self.check(config)
        return config

    def _prepare(self, text, pod, state=""):
        try:
            config = self.configure(text)
        except ValueError as e:
            raise Refusal.error(str(e)) from None
        pod = Object.parse(pod, "pod")
        pod.state = state
        return config, pod

    def _prepared(self, answer):
        if answer is SKIP:
            return SKIP
        if isinstance(answer, Refusal):
            return answer
        if not isinstance(answer, str):
            return Refusal.error(f"the state must be a string, got {type(answer).__name__}")
        return answer

    # What the SDK answers for each point, in plain Python (no bindings):
    # a state string, SKIP or a Refusal; a list of None or Refusal; a list of
    # ints or a Refusal. `nodes` are Nodes (what `unpack` makes of the host's
    # packed record). A node that could not be unpacked answers its refusal
    # (`filter`) or refuses the call (`pre_score`, `score`).

    def run_pre_filter(self, text, pod):
        try:
            config, pod = self._prepare(text, pod)
            return self._prepared(self.pre_filter(config, pod))
        except Refusal as r:
            return r
        except Exception as e:  # noqa: BLE001 - a plugin's failure is a refusal, not a trap
            return Refusal.error(f"pre_filter failed: {e}")

    def run_filter(self, text, state, pod, nodes):
        try:
            config, pod = self._prepare(text, pod, state)
        except Refusal as r:
            return [r for _ in nodes]
        out = []
        for n in nodes:
            try:
                answer = n._error or self.filter(config, pod, n)
            except Refusal as r:
                answer = r
            except Exception as e:  # noqa: BLE001
                answer = Refusal.error(f"filter failed: {e}")
            if answer is not None and not isinstance(answer, Refusal):
                answer = Refusal.error(f"filter must return None or a Refusal, got {type(answer).__name__}")
            out.append(answer)
        return out

    def run_pre_score(self, text, state, pod, nodes):
        try:
            config, pod = self._prepare(text, pod, state)
            _unpacked(nodes)
            return self._prepared(self.pre_score(config, pod, list(nodes)))
        except Refusal as r:
            return r
        except Exception as e:  # noqa: BLE001
            return Refusal.error(f"pre_score failed: {e}")

    def run_score(self, text, state, pod, nodes):
        try:
            config, pod = self._prepare(text, pod, state)
            scores = [self.score(config, pod, n) for n in _unpacked(nodes)]
            return _ints(scores, "score")
        except Refusal as r:
            return r
        except Exception as e:  # noqa: BLE001
            return Refusal.error(f"score failed: {e}")

    def run_normalize_score(self, text, state, pod, scores):
        try:
            config, pod = self._prepare(text, pod, state)
            out = self.normalize_score(config, pod, list(scores))
            if not isinstance(out, list) or len(out) != len(scores):
                return Refusal.error("normalize_score must return one score per node")
            return _ints(out, "normalize_score")
        except Refusal as r:
            return r
        except Exception as e:  # noqa: BLE001
            return Refusal.error(f"normalize_score failed: {e}")


def _unpacked(nodes):
    for n in nodes:
        if n._error is not None:
            raise n._error
    return nodes


def _ints(scores, what):
    for s in scores:
        if isinstance(s, bool) or not isinstance(s, int):
            raise Refusal.error(f"{what} must return integers, got {s!r}")
        if not -(2**63) <= s < 2**63:
            raise Refusal.error(f"{what} returned {s}, past 64 bits")
    return scores


def _wit_prepared(answer):
    from wit_world.exports.scheduler import Prepared_Proceed, Prepared_Refuse, Prepared_Skip
    if answer is SKIP:
        return Prepared_Skip()
    if isinstance(answer, Refusal):
        return Prepared_Refuse(answer.to_wit())
    return Prepared_Proceed(answer)


def _wit_scores(answer):
    from componentize_py_types import Err
    if isinstance(answer, Refusal):
        raise Err(answer.to_wit())
    return answer


def export(plugin_class):
    """The ``Scheduler`` class componentize-py exports for ``plugin_class``.
    The bindings (``wit_world``) are imported on the first call, so a
    plugin module that exports stays importable in plain CPython."""
    plugin = plugin_class()

    class Scheduler:
        def check_config(self, config):
            from componentize_py_types import Err
            try:
                plugin.configure(config)
            except ValueError as e:
                raise Err(str(e))

        def extension_points(self, config):
            from wit_world.exports.scheduler import ExtensionPointSet
            flags = ExtensionPointSet(0)
            for f in plugin.flags():
                flags |= ExtensionPointSet[f.upper()]
            return flags

        def pre_filter(self, config, pod):
            return _wit_prepared(plugin.run_pre_filter(config, pod))

        def filter(self, config, state, pod, nodes):
            return [None if r is None else r.to_wit()
                    for r in plugin.run_filter(config, state, pod, unpack(nodes))]

        def pre_score(self, config, state, pod, nodes):
            return _wit_prepared(plugin.run_pre_score(config, state, pod, unpack(nodes)))

        def score(self, config, state, pod, nodes):
            return _wit_scores(plugin.run_score(config, state, pod, unpack(nodes)))

        def normalize_score(self, config, state, pod, scores):
            return _wit_scores(plugin.run_normalize_score(config, state, pod, scores))

    return Scheduler


# --- running natively -------------------------------------------------------


DEFAULT_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
"""The pod of a case that names none."""


class CycleFailed(Exception):
    """A scheduling cycle the plugin failed (as the server would see it)."""


def cycle(plugin_class, config, pod, nodes):
    """Runs one scheduling cycle as the server's scheduler does: the
    configuration checked, then only the points the plugin claims.
    ``config`` is text or a JSON-able value; ``pod`` and ``nodes`` are dicts
    (whole objects: each call packs them with :func:`pack`, their objects
    only when the plugin claims ``node_objects``, and unpacks them with
    :func:`unpack`, as a component's calls go). Returns
    ``(refused, scores)``: node name -> :class:`Refusal`, and node name ->
    final score of the nodes that fit (empty when the plugin does not
    score). Raises :class:`CycleFailed` for what fails a cycle."""
    plugin = plugin_class()
    text = config if isinstance(config, str) else ("" if config is None else json.dumps(config))
    try:
        plugin.configure(text)
    except ValueError as e:
        raise CycleFailed(f"check-config: {e}") from None
    points = plugin.points()
    pod_text = json.dumps(pod)
    claimed = bool(plugin_class.node_objects)

    def given(objs):
        # What a call gets: the objects packed as the host packs them (the
        # objects themselves only when claimed), unpacked as the export does.
        return unpack(pack(objs, claimed))

    names = [Node.from_object(n).name for n in nodes]
    refused, scores = {}, {}
    state, filtering = "", "filter" in points
    if "pre_filter" in points:
        answer = plugin.run_pre_filter(text, pod_text)
        if answer is SKIP:
            filtering = False
        elif isinstance(answer, Refusal):
            return {n: answer for n in names}, {}
        else:
            state = answer
    if filtering:
        for name, answer in zip(names, plugin.run_filter(text, state, pod_text, given(nodes))):
            if answer is not None:
                refused[name] = answer
    if "score" not in points:
        return refused, scores
    fit = [(name, n) for name, n in zip(names, nodes) if name not in refused]
    fit_nodes = [n for _, n in fit]
    score_state = ""
    if "pre_score" in points:
        answer = plugin.run_pre_score(text, state, pod_text, given(fit_nodes))
        if answer is SKIP:
            return refused, scores
        if isinstance(answer, Refusal):
            raise CycleFailed(f"pre-score refused: {answer!r}")
        score_state = answer
    raw = plugin.run_score(text, score_state, pod_text, given(fit_nodes))
    if isinstance(raw, Refusal):
        raise CycleFailed(f"score refused: {raw!r}")
    if "normalize_score" in points:
        raw = plugin.run_normalize_score(text, score_state, pod_text, raw)
        if isinstance(raw, Refusal):
            raise CycleFailed(f"normalize-score refused: {raw!r}")
    for (name, _), s in zip(fit, raw):
        if not MIN_SCORE <= s <= MAX_SCORE:
            raise CycleFailed(f"node {name!r} scored {s}, out of 0-100")
        scores[name] = s
    return refused, scores


def check_case(plugin_class, table, case):
    """The problems of one case of a case table (parsed YAML, the format
    of ``tests/fixtures/plugin-cases/node-label-score.yaml``); empty when
    it passes."""
    config = case["config"] if "config" in case else table.get("config")
    nodes = case["nodes"] if "nodes" in case else table.get("nodes", [])
    expect = case.get("expect") or {}
    want_refused, want_scores = expect.get("refused") or {}, expect.get("scores") or {}
    try:
        refused, scores = cycle(plugin_class, config, case.get("pod") or DEFAULT_POD, nodes)
    except CycleFailed as e:
        return [f"the cycle failed: {e}"]
    problems = []
    names = [Node.from_object(n).name for n in nodes]
    for name in names:
        want, got = want_refused.get(name), refused.get(name)
        if want is not None and got is None:
            problems.append(f"{name}: expected refused ({want!r}), it fits")
        elif want is None and got is not None:
            problems.append(f"{name}: expected to fit, refused {got!r}")
        elif want is not None and not any(want in r for r in got.reasons):
            problems.append(f"{name}: expected a reason containing {want!r}, got {got!r}")
    for name in want_refused:
        if name not in names:
            problems.append(f"{name}: expected refused, but there is no such node")
    for name, want in want_scores.items():
        if scores.get(name) != want:
            problems.append(f"{name}: expected score {want}, got {scores.get(name)}")
    return problems


def run_cases(plugin_class, path):
    """Runs every case of a YAML case table natively (needs PyYAML); prints
    ``PASS``/``FAIL`` per case and returns the failures as
    ``[(name, problems)]``."""
    import yaml

    with open(path, encoding="utf-8") as f:
        table = yaml.safe_load(f)
    failures = []
    for case in table["cases"]:
        problems = check_case(plugin_class, table, case)
        print(f"{'FAIL' if problems else 'PASS'} {case['name']}{': ' + '; '.join(problems) if problems else ''}")
        if problems:
            failures.append((case["name"], problems))
    return failures
