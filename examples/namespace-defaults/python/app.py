"""namespace-defaults in Python: the same controller as
plugins/namespace-defaults (Rust), on the Python controller SDK; see
../README.md."""

from wasm_apiserver_controller_sdk import (
    ApiError, Controller, apply_all, delete, event, export, list_objects, owner_reference)

MANAGED_BY = "app.kubernetes.io/managed-by"
ME = "namespace-defaults"
GENERATED = [
    ("networking.k8s.io/v1", "NetworkPolicy", "default-deny"),
    ("v1", "ResourceQuota", "default-quota"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "tenant-admins"),
]


def desired(config, ns, tenant):
    name = ns["metadata"]["name"]

    def metadata(obj):
        return {"name": obj, "namespace": name, "labels": {MANAGED_BY: config.manager},
                "ownerReferences": [owner_reference(ns)]}

    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata("default-deny"),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata("default-quota"),
         "spec": {"hard": config.quota}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata("tenant-admins"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": f"tenant:{tenant}"}]},
    ]


class NamespaceDefaults(Controller):
    config = {"label": "tenant", "quota": {"pods": "20"}, "manager": ME}

    def reconcile(self, config, req):
        ns = req.get()
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return None
        tenant = ns["metadata"].get("labels", {}).get(config.label)
        if tenant is not None:
            # The three at once: one round trip, one storage commit.
            objects = desired(config, ns, tenant)
            for obj, result in zip(objects, apply_all(objects)):
                if isinstance(result, ApiError):
                    what = f"{obj['kind']} {obj['metadata']['name']}"
                    event(ns, True, "GenerateFailed", f"could not apply {what}: {result}")
                    raise RuntimeError(f"applying {what}: {result}")
            return None
        # No longer asked for: remove what was generated.
        for api_version, kind, name in GENERATED:
            generated = list_objects(api_version, kind, req.name, f"{MANAGED_BY}={config.manager}")
            if any(o["metadata"]["name"] == name for o in generated):
                delete(api_version, kind, req.name, name)
        return None


Controller = export(NamespaceDefaults)
