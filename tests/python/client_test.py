"""The official Kubernetes Python client against wasm-apiserver.

Run by tests/tests/e2e/python_client.rs with the server's admin kubeconfig as
argv[1]. Exits non-zero (an AssertionError or an ApiException) when the
server answers anything but what kube-apiserver would.
"""

import base64
import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
coord = client.CoordinationV1Api()
ns = "py-client"


def expect_error(status, reason, call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ApiException as e:
        assert e.status == status, f"{call.__name__}: status {e.status}, want {status}: {e.body}"
        body = client.ApiClient().deserialize(
            type("R", (), {"data": e.body})(), "V1Status"
        )
        assert body.reason == reason, f"{call.__name__}: reason {body.reason}, want {reason}"
        return body
    raise AssertionError(f"{call.__name__} succeeded, want {status} {reason}")


# Discovery and version.
version = client.VersionApi().get_code()
assert version.major == "1", version
groups = {g.name for g in client.ApisApi().get_api_versions().groups}
assert "coordination.k8s.io" in groups, groups

# Namespace, then typed objects in it.
core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
assert core.read_namespace(ns).status.phase == "Active"

cm = core.create_namespaced_config_map(
    ns,
    client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="a", labels={"app": "py", "tier": "one"}),
        data={"k": "v"},
    ),
)
assert cm.metadata.uid and cm.metadata.resource_version, cm.metadata
assert cm.metadata.creation_timestamp is not None
expect_error(409, "AlreadyExists", core.create_namespaced_config_map, ns,
             client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a")))
expect_error(404, "NotFound", core.read_namespaced_config_map, "missing", ns)
# A group this server does not serve: upstream's 404 Status.
unserved = expect_error(404, "NotFound", client.ResourceV1beta1Api().list_namespaced_resource_claim, ns)
assert unserved.message == "the server could not find the requested resource", unserved.message
invalid = expect_error(422, "Invalid", core.create_namespaced_config_map, ns,
                       client.V1ConfigMap(metadata=client.V1ObjectMeta(name="Not_A_Name")))
assert invalid.details.causes[0].field == "metadata.name", invalid.details

for name, tier in [("b", "two"), ("c", "two")]:
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"app": "py", "tier": tier})))

# Lists: selectors, paging with continue.
# Every namespace also holds the root CA ConfigMap (as on any cluster).
names = lambda items: sorted(i.metadata.name for i in items if i.metadata.name != "kube-root-ca.crt")
assert names(core.list_namespaced_config_map(ns, label_selector="tier=two").items) == ["b", "c"]
assert names(core.list_namespaced_config_map(ns, label_selector="tier notin (two)").items) == ["a"]
assert names(core.list_namespaced_config_map(ns, field_selector="metadata.name=b").items) == ["b"]
page = core.list_namespaced_config_map(ns, limit=2)
assert len(page.items) == 2 and page.metadata._continue, page.metadata
rest = core.list_namespaced_config_map(ns, limit=2, _continue=page.metadata._continue)
assert names(page.items + rest.items) == ["a", "b", "c"]

# Updates: strategic merge patch, replace, optimistic concurrency.
patched = core.patch_namespaced_config_map("a", ns, {"data": {"k2": "v2"}})
assert patched.data == {"k": "v", "k2": "v2"}, patched.data
stale = cm  # the resourceVersion from before the patch
stale.data = {"k": "stale"}
expect_error(409, "Conflict", core.replace_namespaced_config_map, "a", ns, stale)
patched.data["k"] = "new"
replaced = core.replace_namespaced_config_map("a", ns, patched)
assert replaced.data["k"] == "new"
assert int(replaced.metadata.resource_version) > int(patched.metadata.resource_version)

# Secrets: base64 data, stringData folded in.
secret = core.create_namespaced_secret(ns, client.V1Secret(
    metadata=client.V1ObjectMeta(name="s"), string_data={"password": "hunter2"}))
assert base64.b64decode(secret.data["password"]) == b"hunter2", secret.data

# Another group: coordination.k8s.io Leases.
lease = coord.create_namespaced_lease(ns, client.V1Lease(
    metadata=client.V1ObjectMeta(name="leader"),
    spec=client.V1LeaseSpec(holder_identity="py", lease_duration_seconds=15)))
assert coord.read_namespaced_lease("leader", ns).spec.holder_identity == "py"

# Watch from a resourceVersion: the client's stream decoding of events.
start_rv = core.list_namespaced_config_map(ns).metadata.resource_version
seen = []


def writer():
    time.sleep(0.3)
    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="w")))
    core.patch_namespaced_config_map("w", ns, {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_config_map("w", ns)


t = threading.Thread(target=writer)
t.start()
w = watch.Watch()
for event in w.stream(core.list_namespaced_config_map, ns, resource_version=start_rv,
                      field_selector="metadata.name=w", timeout_seconds=10):
    seen.append((event["type"], event["object"].metadata.name))
    if event["type"] == "DELETED":
        w.stop()
t.join()
assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")], seen

# Custom resources: a CRD through ApiextensionsV1Api, its objects through
# CustomObjectsApi.
ext = client.ApiextensionsV1Api()
ext.create_custom_resource_definition({
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "notes.py.example"},
    "spec": {"group": "py.example", "scope": "Namespaced",
             "names": {"plural": "notes", "kind": "Note"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"spec": {"type": "object", "required": ["text"],
                     "properties": {"text": {"type": "string", "maxLength": 10}}}}}}}]}})
deadline = time.time() + 10
while True:
    conditions = ext.read_custom_resource_definition("notes.py.example").status.conditions or []
    if any(c.type == "Established" and c.status == "True" for c in conditions):
        break
    assert time.time() < deadline, conditions
    time.sleep(0.1)
custom = client.CustomObjectsApi()
note = {"apiVersion": "py.example/v1", "kind": "Note", "metadata": {"name": "n1"}, "spec": {"text": "hi"}}
custom.create_namespaced_custom_object("py.example", "v1", ns, "notes", note)
assert custom.get_namespaced_custom_object("py.example", "v1", ns, "notes", "n1")["spec"]["text"] == "hi"
custom.patch_namespaced_custom_object("py.example", "v1", ns, "notes", "n1", {"spec": {"text": "bye"}})
listed = custom.list_namespaced_custom_object("py.example", "v1", ns, "notes")
assert [i["spec"]["text"] for i in listed["items"]] == ["bye"], listed
too_long = dict(note, metadata={"name": "n2"}, spec={"text": "x" * 11})
invalid = expect_error(422, "Invalid", custom.create_namespaced_custom_object,
                       "py.example", "v1", ns, "notes", too_long)
assert invalid.details.causes[0].field == "spec.text", invalid
custom.delete_namespaced_custom_object("py.example", "v1", ns, "notes", "n1")
ext.delete_custom_resource_definition("notes.py.example")

# Workloads and services through the typed APIs.
apps, batch = client.AppsV1Api(), client.BatchV1Api()
container = client.V1Container(name="web", image="nginx:1.27",
                               ports=[client.V1ContainerPort(container_port=8080)])
template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "web"}),
                                    spec=client.V1PodSpec(containers=[container]))
dep = apps.create_namespaced_deployment(ns, client.V1Deployment(
    metadata=client.V1ObjectMeta(name="web"),
    spec=client.V1DeploymentSpec(selector=client.V1LabelSelector(match_labels={"app": "web"}),
                                 template=template)))
assert dep.spec.replicas == 1 and dep.spec.strategy.type == "RollingUpdate", dep.spec
assert dep.spec.template.spec.containers[0].image_pull_policy == "IfNotPresent"
scaled = apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 3}})
assert scaled.spec.replicas == 3, scaled
assert apps.read_namespaced_deployment("web", ns).spec.replicas == 3
invalid = expect_error(422, "Invalid", apps.create_namespaced_deployment, ns, client.V1Deployment(
    metadata=client.V1ObjectMeta(name="bad"),
    spec=client.V1DeploymentSpec(selector=client.V1LabelSelector(match_labels={"app": "other"}),
                                 template=template)))
assert invalid.details.causes[0].field == "spec.template.metadata.labels", invalid.details
pod = core.create_namespaced_pod(ns, client.V1Pod(metadata=client.V1ObjectMeta(name="p"),
                                                  spec=client.V1PodSpec(containers=[container])))
assert pod.status.phase == "Pending" and pod.spec.restart_policy == "Always", pod.status
svc = core.create_namespaced_service(ns, client.V1Service(
    metadata=client.V1ObjectMeta(name="web"),
    spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80)])))
assert svc.spec.cluster_ip.startswith("10."), svc.spec
assert svc.spec.ports[0].target_port == 80 and svc.spec.ports[0].protocol == "TCP", svc.spec
job = batch.create_namespaced_job(ns, client.V1Job(
    metadata=client.V1ObjectMeta(name="once"),
    spec=client.V1JobSpec(template=client.V1PodTemplateSpec(spec=client.V1PodSpec(
        restart_policy="Never", containers=[client.V1Container(name="c", image="busybox")])))))
assert job.spec.backoff_limit == 6 and job.spec.completions == 1, job.spec
for delete in (lambda: apps.delete_namespaced_deployment("web", ns),
               lambda: core.delete_namespaced_pod("p", ns),
               lambda: core.delete_namespaced_service("web", ns),
               lambda: batch.delete_namespaced_job("once", ns)):
    delete()

# Deletes and the namespace's lifecycle.
status = core.delete_namespaced_config_map("b", ns)
assert status is not None
expect_error(404, "NotFound", core.delete_namespaced_config_map, "b", ns)
core.delete_collection_namespaced_config_map(ns, label_selector="app=py")
assert names(core.list_namespaced_config_map(ns).items) == []
core.delete_namespace(ns)
deadline = time.time() + 20
while time.time() < deadline:
    try:
        core.read_namespace(ns)
    except ApiException as e:
        assert e.status == 404, e
        break
    time.sleep(0.2)
else:
    raise AssertionError("namespace never went away")

print("python client: all checks passed")
