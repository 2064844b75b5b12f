// unique-ingress-host in JavaScript: the policy of
// plugins/unique-ingress-host (Rust) and ../python, on the JavaScript SDK's
// `cluster` helpers (see ../README.md).
//
// An Ingress may not name a host that another Ingress, in any namespace,
// already serves (409 Conflict, the Rust plugin's message). With
// `{"ownersMayShare": true}` a user who may update the Ingress already
// serving the host (a SubjectAccessReview through the server's
// authorizers, `cluster.canI`) may reuse it.
//
// Grants (spec.contextAwareResources): networking.k8s.io/v1 Ingress, and
// authorization.k8s.io/v1 SubjectAccessReview for ownersMayShare. Without
// them the read fails and the policy denies with the host's error.
//
// This file imports nothing (the SDK is handed in), so plain Node tests
// run the policy over fixtures (plugins/sdk-js/sdk.test.js); app.js binds
// it to the component's `cluster` import.

/** The hosts an Ingress's rules name. */
const hosts = (ingress) => new Set((ingress?.spec?.rules ?? [])
  .filter((r) => typeof r?.host === 'string').map((r) => r.host));

export function uniqueIngressHost({ cluster, ClusterError, Response }) {
  // A refusal of the host (ClusterError) becomes a denial; anything else is a bug.
  const refused = (e, what) => {
    if (e instanceof ClusterError) return Response.deny(`${what}: ${e.message}`);
    throw e;
  };
  return {
    config: { ownersMayShare: false },

    validate(config, req) {
      const wanted = hosts(req.object);
      if (wanted.size === 0) return Response.allow();
      let others;
      try {
        // Only the Ingresses naming a wanted host (a field selector the
        // server answers from its field index), not every Ingress.
        others = [...wanted].flatMap((host) => cluster.list('networking.k8s.io/v1', 'Ingress',
          undefined, undefined, `spec.rules.host=${host}`));
      } catch (e) {
        return refused(e, 'cannot list ingresses');
      }
      for (const other of others) {
        const { namespace, name } = other.metadata ?? {};
        const shared = [...hosts(other)].filter((h) => wanted.has(h)).sort();
        if ((namespace === req.namespace && name === req.name) || shared.length === 0) continue;
        if (config.ownersMayShare) {
          try {
            if (cluster.canI(req.user, { verb: 'update', group: 'networking.k8s.io', resource: 'ingresses', namespace, name })) continue;
          } catch (e) {
            return refused(e, `cannot review access to ingress ${namespace}/${name}`);
          }
        }
        return Response.deny(`host ${JSON.stringify(shared[0])} is already served by ingress ${namespace}/${name}`,
          409, 'Conflict');
      }
      return Response.allow();
    },
  };
}
