"""The shared case table (tests/fixtures/plugin-cases/node-label-score.yaml)
run natively on the Python plugin, in plain CPython with the SDK on the path:
PYTHONPATH=plugins/sdk-python python3 -m unittest discover -s examples/node-label-score/python"""

import os
import unittest

import wasm_apiserver_scheduler_sdk as sched
from app import NodeLabelScore, Scheduler

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, "..", "..", "..", "tests", "fixtures", "plugin-cases", "node-label-score.yaml")


class NodeLabelScoreTest(unittest.TestCase):
    def test_the_shared_case_table(self):
        self.assertEqual(sched.run_cases(NodeLabelScore, TABLE), [])

    def test_it_claims_filter_and_score_only(self):
        self.assertEqual(NodeLabelScore().points(), ["filter", "score"])
        # It reads labels only, which every node's record carries: no node-objects.
        self.assertEqual(NodeLabelScore().flags(), ["filter", "score"])

    def test_check_config_wants_an_object_with_a_string_label(self):
        plugin = NodeLabelScore()
        plugin.configure('{"label": "score", "avoidLabel": "avoid"}')
        plugin.configure('{"label": "score"}')
        for bad in ["", "{}", "[]", "5", '{"label": 5}', '{"label": "s", "avoidLabel": true}']:
            with self.assertRaises(ValueError, msg=bad):
                plugin.configure(bad)

    def test_the_export_is_a_class(self):
        self.assertTrue(callable(Scheduler().filter))


if __name__ == "__main__":
    unittest.main()
