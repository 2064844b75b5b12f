"""namespace-defaults as a kopf operator: the same logic as the wasm
controller (plugins/namespace-defaults), for the wasm-controllers bench.

A labelled Namespace gets a NetworkPolicy, a ResourceQuota and a
RoleBinding (create, or patch when it exists: what a kopf operator does with
the official client); when the label goes, they go. Run with
``kopf run --standalone --all-namespaces namespace_defaults.py``.
"""

import logging

import kopf
import kubernetes

LABEL = "tenant"
MANAGED_BY = "app.kubernetes.io/managed-by"
ME = "namespace-defaults-kopf"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    # As quiet as the wasm controller: no Events for handled changes.
    settings.posting.level = logging.WARNING
    kubernetes.config.load_kube_config()


def desired(ns, uid, tenant):
    meta = lambda name: {"name": name, "namespace": ns, "labels": {MANAGED_BY: ME},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": ns,
                                              "uid": uid, "controller": True}]}
    return [
        ("networking", {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                        "metadata": meta("default-deny"),
                        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}),
        ("core", {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("default-quota"),
                  "spec": {"hard": {"pods": "20"}}}),
        ("rbac", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                  "metadata": meta("tenant-admins"),
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                "name": f"tenant:{tenant}"}]}),
    ]


def write(api, obj):
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    create, patch = {
        "NetworkPolicy": ("create_namespaced_network_policy", "patch_namespaced_network_policy"),
        "ResourceQuota": ("create_namespaced_resource_quota", "patch_namespaced_resource_quota"),
        "RoleBinding": ("create_namespaced_role_binding", "patch_namespaced_role_binding"),
    }[obj["kind"]]
    try:
        getattr(api, create)(ns, obj)
    except kubernetes.client.ApiException as e:
        if e.status != 409:
            raise
        getattr(api, patch)(name, ns, obj)


APIS = {}


def apis():
    if not APIS:
        APIS.update(networking=kubernetes.client.NetworkingV1Api(), core=kubernetes.client.CoreV1Api(),
                    rbac=kubernetes.client.RbacAuthorizationV1Api())
    return APIS


@kopf.on.resume("namespaces")
@kopf.on.create("namespaces")
@kopf.on.update("namespaces")
def reconcile(name, meta, labels, **_):
    tenant = labels.get(LABEL)
    if tenant is not None:
        for api, obj in desired(name, meta["uid"], tenant):
            write(apis()[api], obj)
        return
    selector = f"{MANAGED_BY}={ME}"
    a = apis()
    for obj in a["networking"].list_namespaced_network_policy(name, label_selector=selector).items:
        a["networking"].delete_namespaced_network_policy(obj.metadata.name, name)
    for obj in a["core"].list_namespaced_resource_quota(name, label_selector=selector).items:
        a["core"].delete_namespaced_resource_quota(obj.metadata.name, name)
    for obj in a["rbac"].list_namespaced_role_binding(name, label_selector=selector).items:
        a["rbac"].delete_namespaced_role_binding(obj.metadata.name, name)
