"""unique-ingress-host in Python: the context-aware policy of
plugins/unique-ingress-host (Rust), on the Python SDK's ``cluster``
helpers (see ../README.md).

An Ingress may not name a host that another Ingress, in any namespace,
already serves (409 Conflict, the Rust plugin's message). With
``{"ownersMayShare": true}`` a user who may update the Ingress already
serving the host (a SubjectAccessReview through the server's authorizers,
``cluster.can_i``) may reuse it: a team splitting its routes over two
Ingresses.

Grants (``spec.contextAwareResources``): ``networking.k8s.io/v1 Ingress``,
and ``authorization.k8s.io/v1 SubjectAccessReview`` for ``ownersMayShare``.
Without them the read fails and the policy denies with the host's error.
"""
import json

from wasm_apiserver_sdk import ClusterError, Policy, Response, cluster, export


def hosts(ingress):
    """The hosts an Ingress's rules name."""
    rules = ((ingress or {}).get("spec") or {}).get("rules") or []
    return {r["host"] for r in rules if isinstance(r, dict) and isinstance(r.get("host"), str)}


class UniqueIngressHost(Policy):
    config = {"ownersMayShare": False}

    def validate(self, config, req):
        wanted = hosts(req.object)
        if not wanted:
            return Response.allow()
        try:
            # Only the Ingresses naming a wanted host (a field selector the
            # server answers from its field index), not every Ingress.
            others = [o for host in sorted(wanted)
                      for o in cluster.list("networking.k8s.io/v1", "Ingress",
                                            field_selector=f"spec.rules.host={host}")]
        except ClusterError as e:
            return Response.deny(f"cannot list ingresses: {e.message}")
        me = (req.namespace, req.name)
        for other in others:
            meta = other.get("metadata") or {}
            namespace, name = meta.get("namespace"), meta.get("name")
            shared = sorted(hosts(other) & wanted)
            if (namespace, name) == me or not shared:
                continue
            if config.ownersMayShare:
                try:
                    if cluster.can_i(req.user, "update", "networking.k8s.io", "ingresses",
                                     namespace=namespace, name=name):
                        continue
                except ClusterError as e:
                    return Response.deny(f"cannot review access to ingress {namespace}/{name}: {e.message}")
            return Response.deny(f"host {json.dumps(shared[0])} is already served by ingress {namespace}/{name}",
                                 409, "Conflict")
        return Response.allow()


Admission = export(UniqueIngressHost)
