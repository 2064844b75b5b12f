"""Unit tests of the Python scheduler SDK (plain CPython, no bindings):
python3 -m unittest discover -s plugins/sdk-python"""

import enum
import json
import sys
import types
import unittest
from dataclasses import dataclass
from typing import List, Optional

import wasm_apiserver_scheduler_sdk as sched

POD = json.dumps({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})


def node(name, **labels):
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}}


def record(name, **labels):
    """The node a plugin gets for node(name, **labels), without its object:
    packed as the host packs it, unpacked as the export does."""
    return sched.unpack(sched.pack([node(name, **labels)]))[0]


# The records as componentize-py's bindings hand them (wit_world.exports.scheduler).
@dataclass
class WitSpan:
    start: int
    len: int


@dataclass
class WitLabel:
    key: WitSpan
    value: WitSpan


@dataclass
class WitTaint:
    key: WitSpan
    value: WitSpan
    effect: WitSpan


@dataclass
class WitNode:
    name: WitSpan
    labels: WitSpan
    taints: WitSpan
    unschedulable: bool
    object: Optional[WitSpan]


@dataclass
class WitNodes:
    text: bytes
    labels: List[WitLabel]
    taints: List[WitTaint]
    items: List[WitNode]


class Packer:
    """Builds a WitNodes by hand: ``put`` appends text and answers its span."""

    def __init__(self):
        self.text, self.labels, self.taints, self.items = b"", [], [], []

    def put(self, s):
        b = s if isinstance(s, bytes) else s.encode()
        span = WitSpan(len(self.text), len(b))
        self.text += b
        return span

    def node(self, name, labels=(), taints=(), unschedulable=False, obj=None):
        ls = WitSpan(len(self.labels), len(labels))
        self.labels += [WitLabel(self.put(k), self.put(v)) for k, v in labels]
        ts = WitSpan(len(self.taints), len(taints))
        self.taints += [WitTaint(*map(self.put, t)) for t in taints]
        name = self.put(name) if isinstance(name, (str, bytes)) else name
        obj = self.put(obj) if isinstance(obj, (str, bytes)) else obj
        self.items.append(WitNode(name, ls, ts, unschedulable, obj))
        return self

    def nodes(self):
        return WitNodes(self.text, self.labels, self.taints, self.items)


def packed(*names_and_objects):
    """A WitNodes of nodes with just a name and an object text."""
    p = Packer()
    for name, obj in names_and_objects:
        p.node(name, obj=obj)
    return p.nodes()


class ExtensionPointSet(enum.Flag):
    """The flags as componentize-py generates them, in the WIT order."""
    PRE_FILTER = enum.auto()
    FILTER = enum.auto()
    PRE_SCORE = enum.auto()
    SCORE = enum.auto()
    NORMALIZE_SCORE = enum.auto()
    NODE_OBJECTS = enum.auto()


class Code(enum.Enum):
    UNSCHEDULABLE = 0
    UNSCHEDULABLE_AND_UNRESOLVABLE = 1
    ERROR = 2


@dataclass
class WitRefusal:
    code: Code
    reasons: List[str]


def exported(plugin_class, call):
    """``call(export)`` on the export of ``plugin_class``, against stand-in bindings."""
    saved = {m: sys.modules.get(m) for m in ("wit_world", "wit_world.exports", "wit_world.exports.scheduler",
                                             "componentize_py_types")}
    bindings = types.ModuleType("wit_world.exports.scheduler")
    bindings.ExtensionPointSet, bindings.Code, bindings.Refusal = ExtensionPointSet, Code, WitRefusal
    results = types.ModuleType("componentize_py_types")
    results.Err = type("Err", (Exception,), {})
    sys.modules.update({"wit_world": types.ModuleType("wit_world"),
                        "wit_world.exports": types.ModuleType("wit_world.exports"),
                        "wit_world.exports.scheduler": bindings, "componentize_py_types": results})
    try:
        return call(sched.export(plugin_class)())
    finally:
        for m, module in saved.items():
            if module is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = module


def extension_points(plugin_class):
    """What the export answers from ``extension-points``, against stand-in bindings."""
    return exported(plugin_class, lambda e: e.extension_points(""))


class Sample(sched.SchedulerPlugin):
    """Refuses nodes with the configured label, scores by the `score` label."""

    config = {"avoid": ""}

    def check(self, config):
        if config.avoid == "bad":
            raise ValueError("avoid may not be bad")

    def pre_filter(self, config, pod):
        return sched.SKIP if pod.label("skip") else pod.name

    def filter(self, config, pod, node):
        if node.label(config.avoid) is not None:
            return sched.Refusal.unschedulable(f"{pod.state} avoids {node.name}")
        if node.name == "boom":
            raise RuntimeError("exploded")
        return None

    def score(self, config, pod, node):
        if node.label("score") is None:
            raise sched.Refusal.error(f"{node.name} has no score")
        return int(node.label("score"))


class Scaled(sched.SchedulerPlugin):
    def pre_score(self, config, pod, nodes):
        return str(len(nodes))

    def score(self, config, pod, node):
        return sched.parse_int(node.label("raw")) or 0

    def normalize_score(self, config, pod, scores):
        top = max(scores + [1])
        return [s * 100 // top for s in scores]


class Seen(sched.SchedulerPlugin):
    """Records the nodes its filter and score see; refuses a node annotated `off`."""

    seen = []

    def filter(self, config, pod, node):
        Seen.seen.append(node)
        if node.annotation("off"):
            return sched.Refusal.unschedulable(f"{node.name} is off")
        return None

    def score(self, config, pod, node):
        return len(node.taints)


class SeenObjects(Seen):
    node_objects = True


FULL = {"kind": "Node",
        "metadata": {"name": "n", "labels": {"zone": "b", "arch": "arm", "odd": 1}, "annotations": {"off": "yes"}},
        "spec": {"unschedulable": True, "taints": [{"key": "gpu", "effect": "NoSchedule"},
                                                   {"key": "a", "value": "b", "effect": "NoExecute"}]}}


class SchedulerSdkTest(unittest.TestCase):
    def test_points_are_the_overridden_methods(self):
        self.assertEqual(Sample().points(), ["pre_filter", "filter", "score"])
        self.assertEqual(Scaled().points(), ["pre_score", "score", "normalize_score"])
        self.assertEqual(sched.SchedulerPlugin().points(), [])

    def test_filter_answers_each_node_in_order(self):
        nodes = [record("a"), record("b", gpu="x"), record("boom")]
        out = Sample().run_filter('{"avoid": "gpu"}', "p", POD, nodes)
        self.assertEqual(out, [None, sched.Refusal.unschedulable("p avoids b"),
                               sched.Refusal.error("filter failed: exploded")])

    def test_a_bad_configuration_or_pod_refuses_every_node(self):
        nodes = [record("a"), record("b")]
        self.assertEqual(Sample().run_filter('{"avoid": "bad"}', "", POD, nodes),
                         [sched.Refusal.error("avoid may not be bad")] * 2)
        self.assertTrue(all(r.code == "error" for r in Sample().run_filter("", "", "{", nodes)))
        self.assertIn("unknown field(s): avoyd", Sample().run_pre_filter('{"avoyd": 1}', POD).reasons[0])

    def test_pre_filter_state_and_skip(self):
        self.assertEqual(Sample().run_pre_filter("", POD), "p")
        skipped = json.dumps({"metadata": {"name": "p", "labels": {"skip": "1"}}})
        self.assertIs(Sample().run_pre_filter("", skipped), sched.SKIP)

    def test_score_is_per_node_and_a_refusal_fails_it(self):
        nodes = [record("a", score="7"), record("b", score="1000")]
        self.assertEqual(Sample().run_score("", "", POD, nodes), [7, 1000])
        nodes = [record("a", score="7"), record("c")]
        self.assertEqual(Sample().run_score("", "", POD, nodes), sched.Refusal.error("c has no score"))

    def test_unclaimed_points_answer_neutrally(self):
        self.assertEqual(Sample().run_pre_score("", "kept", POD, []), "kept")
        self.assertEqual(Sample().run_normalize_score("", "", POD, [5, 500]), [5, 500])
        plain = sched.SchedulerPlugin()
        self.assertEqual(plain.run_filter("", "", POD, [record("a")]), [None])
        self.assertEqual(plain.run_score("", "", POD, [record("a")]), [0])

    def test_a_cycle_filters_then_scores_what_fits(self):
        nodes = [node("a", raw="500"), node("b", raw="1000"), node("c", off="1")]
        refused, scores = sched.cycle(Scaled, "", json.loads(POD), nodes)
        self.assertEqual((refused, scores), ({}, {"a": 50, "b": 100, "c": 0}))
        refused, scores = sched.cycle(Sample, {"avoid": "off"}, json.loads(POD),
                                      [node("a", score="5"), node("c", off="1")])
        self.assertEqual(list(refused), ["c"])
        self.assertEqual(scores, {"a": 5})

    def test_out_of_range_scores_fail_the_cycle(self):
        with self.assertRaisesRegex(sched.CycleFailed, "out of 0-100"):
            sched.cycle(Sample, {}, json.loads(POD), [node("a", score="1000")])

    def test_a_wrong_expectation_fails_its_case(self):
        table = {"config": {"avoid": "off"}, "nodes": [node("a", score="5"), node("b", off="1", score="1")]}
        good = {"name": "ok", "expect": {"refused": {"b": "avoids b"}, "scores": {"a": 5}}}
        bad = {"name": "bad", "expect": {"scores": {"a": 6}}}
        self.assertEqual(sched.check_case(Sample, table, good), [])
        problems = sched.check_case(Sample, table, bad)
        self.assertIn("b: expected to fit, refused Refusal('unschedulable', 'p avoids b')", problems)
        self.assertIn("a: expected score 6, got 5", problems)

    def test_nodes_read_the_packed_record(self):
        # The object says otherwise: name, labels, taints and unschedulable come from the record.
        nodes = Packer().node("a", [("arch", "amd"), ("zone", "x")], [("gpu", "", "NoSchedule")], True,
                              json.dumps(node("other", zone="y"))).node("b").nodes()
        n, bare = sched.unpack(nodes)
        self.assertEqual((n.name, n.label("zone"), n.label("none"), n.unschedulable), ("a", "x", None, True))
        self.assertEqual((n.label("arch"), n.label("aaa"), n.label("zzz"), n.label(5)), ("amd", None, None, None))
        self.assertEqual(n.labels, {"arch": "amd", "zone": "x"})
        self.assertEqual((n.label("zone"), n.label("none")), ("x", None))
        self.assertEqual(n.taints, [sched.Taint("gpu", "", "NoSchedule")])
        self.assertEqual((n.taints[0].key, n.taints[0].value, n.taints[0].effect), ("gpu", "", "NoSchedule"))
        self.assertEqual(n.object["metadata"]["name"], "other")
        self.assertIs(n.object, n.object)
        self.assertEqual((bare.name, bare.labels, bare.taints, bare.unschedulable, bare.object,
                          bare.annotation("x")), ("b", {}, [], False, None, None))

    def test_a_node_from_an_object_is_what_the_host_sends(self):
        n = sched.Node.from_object(FULL)
        self.assertEqual((n.name, n.unschedulable, n.label("odd")), ("n", True, None))
        self.assertEqual(list(n.labels.items()), [("arch", "arm"), ("zone", "b")])
        self.assertEqual(n.taints, [("gpu", "", "NoSchedule"), ("a", "b", "NoExecute")])
        self.assertIs(n.object, FULL)
        self.assertEqual(n.annotation("off"), "yes")
        bare = n.without_object()
        self.assertEqual((bare.name, bare.labels, bare.taints, bare.unschedulable), ("n", n.labels, n.taints, True))
        self.assertEqual((bare.object, bare.annotation("off")), (None, None))
        self.assertIs(n.object, FULL)
        empty = sched.Node.from_object({})
        self.assertEqual((empty.name, empty.labels, empty.taints, empty.unschedulable), ("", {}, [], False))

    def test_pack_then_unpack_gives_the_nodes_back(self):
        zurich = {"kind": "Node", "metadata": {"name": "z\u00fcrich-1", "labels": {"city": "z\u00fcrich", "b": "\u00e9",
                                                                          "a": "x"}}}
        nodes = [FULL, zurich, {"kind": "Node", "metadata": {"name": "m"}}]
        for objects in (False, True):
            record = sched.pack(nodes, objects)
            self.assertIsInstance(record.text, bytes)
            self.assertEqual([i.object is not None for i in record.items], [objects] * 3)
            n, z, m = sched.unpack(record)
            self.assertEqual([x.name for x in (n, z, m)], ["n", "z\u00fcrich-1", "m"])
            self.assertEqual((n.unschedulable, z.unschedulable), (True, False))
            self.assertEqual(list(n.labels.items()), [("arch", "arm"), ("zone", "b")])
            self.assertEqual(n.taints, [("gpu", "", "NoSchedule"), ("a", "b", "NoExecute")])
            self.assertEqual(z.label("city"), "z\u00fcrich")
            self.assertEqual(z.label("b"), "\u00e9")
            self.assertEqual(list(z.labels.items()), [("a", "x"), ("b", "\u00e9"), ("city", "z\u00fcrich")])
            self.assertEqual((m.labels, m.taints), ({}, []))
            self.assertEqual([x.object for x in (n, z, m)], nodes if objects else [None] * 3)
            # Byte offsets: the text is UTF-8, and the spans count bytes.
            self.assertEqual(record.items[1].name.len, 9)
            city = next(lab for lab in record.labels if record.text[lab.key.start:][:4] == b"city")
            self.assertEqual((city.value.len, record.text[city.value.start:][:city.value.len].decode()),
                             (7, "z\u00fcrich"))
        # Nodes pack as the objects they were made from; repeated strings are stored once.
        again = sched.pack([sched.Node.from_object(x) for x in nodes], True)
        self.assertEqual(again, sched.pack(nodes, True))
        self.assertEqual(sched.pack([node("a", k="v"), node("b", k="v")]).text, b"kvab")

    def test_a_span_outside_the_text_or_not_utf8_is_an_error_for_that_node(self):
        p = Packer().node("good", [("score", "3")])
        p.node(sched.Span(1000, 4))                                  # its name outside the text
        p.node("labels", [("score", "1")])
        p.labels[-1].value = WitSpan(2, 10**6)                       # a label's value past the end
        p.node(b"\xff\xfe")                                         # not UTF-8
        p.node("taints", taints=[("k", "v", "NoSchedule")])
        p.taints[-1].effect = WitSpan(0, 10**6)
        p.node("counts")
        p.items[-1].labels = WitSpan(0, 100)                         # more labels than the list has
        p.node("object", obj=WitSpan(3, 10**6))
        nodes = p.nodes()

        class Reader(sched.SchedulerPlugin):
            node_objects = True

            def filter(self, config, pod, n):
                n.label("score"), n.taints, n.object

            def score(self, config, pod, n):
                return len(n.labels)

        out = exported(Reader, lambda e: e.filter("", "", POD, nodes))
        self.assertEqual([r is None or r.code for r in out], [True] + [Code.ERROR] * 6)
        self.assertIn("outside the text", out[1].reasons[0])
        self.assertIn("node labels labels: bytes", out[2].reasons[0])
        self.assertIn("not UTF-8", out[3].reasons[0])
        self.assertIn("node taints taints", out[4].reasons[0])
        self.assertIn("outside the list", out[5].reasons[0])
        self.assertIn("node object object", out[6].reasons[0])
        # A node that cannot be read refuses score as a whole; the others score.
        self.assertEqual(Reader().run_score("", "", POD, sched.unpack(nodes)[:1]), [1])
        self.assertEqual(Reader().run_score("", "", POD, sched.unpack(nodes)[1:2]).code, "error")
        self.assertEqual(Reader().run_pre_score("", "", POD, sched.unpack(nodes)[3:4]).code, "error")

    def test_the_export_unpacks_the_nodes(self):
        nodes = sched.pack([node("a", score="7"), node("b", gpu="x", score="1")])
        out = exported(Sample, lambda e: e.filter('{"avoid": "gpu"}', "p", POD, nodes))
        self.assertEqual(out, [None, WitRefusal(Code.UNSCHEDULABLE, ["p avoids b"])])
        self.assertEqual(exported(Sample, lambda e: e.score("", "", POD, nodes)), [7, 1])

    def test_a_node_object_that_does_not_parse_is_an_error_refusal(self):
        nodes = sched.unpack(packed(("good", json.dumps(node("good"))), ("bad", "{not json")))
        out = SeenObjects().run_filter("", "", POD, nodes)
        self.assertIsNone(out[0])
        self.assertEqual(out[1].code, "error")
        self.assertTrue(out[1].reasons[0].startswith("node bad object is not valid JSON"), out[1])
        # Not read, not parsed: a plugin that never reads the object never fails on it.
        nodes = sched.unpack(Packer().node("a", [("score", "3")], obj="{").nodes())
        self.assertEqual(Sample().run_score("", "", POD, nodes), [3])

    def test_without_node_objects_a_plugin_sees_none(self):
        self.assertFalse(Seen.node_objects)
        self.assertEqual(Seen().flags(), ["filter", "score"])
        self.assertEqual(extension_points(Seen), ExtensionPointSet.FILTER | ExtensionPointSet.SCORE)
        Seen.seen = []
        refused, scores = sched.cycle(Seen, "", json.loads(POD), [FULL])
        # Its annotation would refuse it: the plugin cannot see it.
        self.assertEqual((refused, scores), ({}, {"n": 2}))
        self.assertEqual([(n.object, n.annotation("off"), n.label("zone"), n.unschedulable) for n in Seen.seen],
                         [(None, None, "b", True)])

    def test_with_node_objects_a_plugin_sees_them(self):
        self.assertEqual(SeenObjects().flags(), ["filter", "score", "node_objects"])
        self.assertEqual(extension_points(SeenObjects),
                         ExtensionPointSet.FILTER | ExtensionPointSet.SCORE | ExtensionPointSet.NODE_OBJECTS)
        Seen.seen = []
        other = {"kind": "Node", "metadata": {"name": "m"}}
        refused, scores = sched.cycle(SeenObjects, "", json.loads(POD), [FULL, other])
        self.assertEqual((list(refused), refused["n"].reasons, scores), (["n"], ["n is off"], {"m": 0}))
        self.assertEqual([n.object for n in Seen.seen], [FULL, other])
        self.assertIsNot(Seen.seen[0].object, FULL)

    def test_objects_read_names_and_labels(self):
        n = sched.Object(node("a", x="1"))
        n.json["metadata"]["labels"]["n"] = 2
        self.assertEqual((n.name, n.namespace, n.label("x"), n.label("n")), ("a", None, "1", None))
        self.assertEqual(n.labels, {"x": "1"})
        p = sched.Object.parse(POD, "pod")
        self.assertEqual((p.name, p.namespace, p.state), ("p", "ns", ""))

    def test_clamp_and_parse_int(self):
        self.assertEqual([sched.clamp_score(v) for v in (-5, 42, 1000)], [0, 42, 100])
        self.assertEqual(sched.parse_int("42"), 42)
        self.assertEqual(sched.parse_int("+7"), 7)
        self.assertEqual(sched.parse_int("-5"), -5)
        self.assertEqual(sched.parse_int("99999999999999999999"), 2**63 - 1)
        for bad in [None, "", "-", " 7", "7 ", "1.5", "1e3", "0x10", "high", "1_0", "٣"]:
            self.assertIsNone(sched.parse_int(bad), bad)

    def test_refusal_codes_are_the_wit_ones(self):
        with self.assertRaises(ValueError):
            sched.Refusal("nope", "x")
        r = sched.Refusal.unschedulable_and_unresolvable("a", "b")
        self.assertEqual((r.code, r.reasons), ("unschedulable-and-unresolvable", ["a", "b"]))


if __name__ == "__main__":
    unittest.main()
