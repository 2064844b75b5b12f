"""node-label-score in Python: the same scheduler plugin as ../rust and ../js (see ../README.md)."""
from wasm_apiserver_scheduler_sdk import Refusal, SchedulerPlugin, clamp_score, export, parse_int


class NodeLabelScore(SchedulerPlugin):
    config = {"label": "", "avoidLabel": ""}

    def check(self, config):
        if not config.label:
            raise ValueError("invalid configuration: label must be a non-empty string")

    def filter(self, config, pod, node):
        if config.avoidLabel and node.label(config.avoidLabel) == "true":
            return Refusal.unschedulable_and_unresolvable(f"node has label {config.avoidLabel}=true")
        return None

    def score(self, config, pod, node):
        return clamp_score(parse_int(node.label(config.label)) or 0)


Scheduler = export(NodeLabelScore)
