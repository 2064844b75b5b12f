"""labels-policy in Python: the same policy as ../rust and ../js (see ../README.md)."""
import json

from wasm_apiserver_sdk import Policy, Response, Violations, export, pattern


class LabelsPolicy(Policy):
    config = {"labels": [], "denyNamePattern": pattern(), "defaultAnnotations": {}}

    def validate(self, config, req):
        v, name = Violations(), req.name
        if config.denyNamePattern and config.denyNamePattern.is_match(name):
            v.forbidden("metadata.name", f"name matches the forbidden pattern {json.dumps(str(config.denyNamePattern))}")
        missing = ", ".join(req.missing_labels(config.labels))
        if missing:
            v.required("metadata.labels", f"missing required label(s): {missing}")
        return v.into_response(f"{req.kind} {json.dumps(name)} denied").when(not req.is_delete)

    def mutate(self, config, req):
        patch = req.patch().default_annotations(config.defaultAnnotations)
        return Response.patched(patch).when(req.is_create)


Admission = export(LabelsPolicy)
