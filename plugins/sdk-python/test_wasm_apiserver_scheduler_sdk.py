"""Unit tests of the Python scheduler SDK (plain CPython, no bindings):
python3 -m unittest discover -s plugins/sdk-python"""

import json
import unittest

import wasm_apiserver_scheduler_sdk as sched

POD = json.dumps({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})


def node(name, **labels):
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}}


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


class SchedulerSdkTest(unittest.TestCase):
    def test_points_are_the_overridden_methods(self):
        self.assertEqual(Sample().points(), ["pre_filter", "filter", "score"])
        self.assertEqual(Scaled().points(), ["pre_score", "score", "normalize_score"])
        self.assertEqual(sched.SchedulerPlugin().points(), [])

    def test_filter_answers_each_node_in_order(self):
        nodes = [json.dumps(node("a")), json.dumps(node("b", gpu="x")), "not json", json.dumps(node("boom"))]
        out = Sample().run_filter('{"avoid": "gpu"}', "p", POD, nodes)
        self.assertEqual(out[0], None)
        self.assertEqual(out[1], sched.Refusal.unschedulable("p avoids b"))
        self.assertEqual(out[2].code, "error")
        self.assertTrue(out[2].reasons[0].startswith("node is not valid JSON"), out[2])
        self.assertEqual(out[3], sched.Refusal.error("filter failed: exploded"))

    def test_a_bad_configuration_or_pod_refuses_every_node(self):
        nodes = [json.dumps(node("a")), json.dumps(node("b"))]
        self.assertEqual(Sample().run_filter('{"avoid": "bad"}', "", POD, nodes),
                         [sched.Refusal.error("avoid may not be bad")] * 2)
        self.assertTrue(all(r.code == "error" for r in Sample().run_filter("", "", "{", nodes)))
        self.assertIn("unknown field(s): avoyd", Sample().run_pre_filter('{"avoyd": 1}', POD).reasons[0])

    def test_pre_filter_state_and_skip(self):
        self.assertEqual(Sample().run_pre_filter("", POD), "p")
        skipped = json.dumps({"metadata": {"name": "p", "labels": {"skip": "1"}}})
        self.assertIs(Sample().run_pre_filter("", skipped), sched.SKIP)

    def test_score_is_per_node_and_a_refusal_fails_it(self):
        nodes = [json.dumps(node("a", score="7")), json.dumps(node("b", score="1000"))]
        self.assertEqual(Sample().run_score("", "", POD, nodes), [7, 1000])
        nodes = [json.dumps(node("a", score="7")), json.dumps(node("c"))]
        self.assertEqual(Sample().run_score("", "", POD, nodes), sched.Refusal.error("c has no score"))

    def test_unclaimed_points_answer_neutrally(self):
        self.assertEqual(Sample().run_pre_score("", "kept", POD, []), "kept")
        self.assertEqual(Sample().run_normalize_score("", "", POD, [5, 500]), [5, 500])
        plain = sched.SchedulerPlugin()
        self.assertEqual(plain.run_filter("", "", POD, [json.dumps(node("a"))]), [None])
        self.assertEqual(plain.run_score("", "", POD, [json.dumps(node("a"))]), [0])

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
