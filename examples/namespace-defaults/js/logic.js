// The controller's logic, apart from the component's imports, so plain
// Node tests run it over fixtures (plugins/sdk-js/sdk.test.js). It
// imports nothing: everything comes through `ctx`.

const MANAGED_BY = 'app.kubernetes.io/managed-by';
const GENERATED = [
  ['networking.k8s.io/v1', 'NetworkPolicy', 'default-deny'],
  ['v1', 'ResourceQuota', 'default-quota'],
  ['rbac.authorization.k8s.io/v1', 'RoleBinding', 'tenant-admins'],
];

function desired(config, ns, tenant, ctx) {
  const metadata = (name) => ({
    name, namespace: ns.metadata.name, labels: { [MANAGED_BY]: config.manager },
    ownerReferences: [ctx.ownerReference(ns)],
  });
  return [
    { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: metadata('default-deny'),
      spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'] } },
    { apiVersion: 'v1', kind: 'ResourceQuota', metadata: metadata('default-quota'), spec: { hard: config.quota } },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: metadata('tenant-admins'),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'admin' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: `tenant:${tenant}` }] },
  ];
}

export const namespaceDefaults = {
  config: { label: 'tenant', quota: { pods: '20' }, manager: 'namespace-defaults' },

  reconcile(config, req, ctx) {
    const ns = ctx.getPrimary(req);
    if (!ns || ns.metadata.deletionTimestamp) return undefined;
    const tenant = (ns.metadata.labels ?? {})[config.label];
    if (tenant !== undefined) {
      // The three at once: one round trip, one storage commit.
      const objects = desired(config, ns, tenant, ctx);
      const results = ctx.applyAll(objects);
      for (const [i, r] of results.entries()) {
        if (r instanceof Error) {
          const what = `${objects[i].kind} ${objects[i].metadata.name}`;
          ctx.event(ns, true, 'GenerateFailed', `could not apply ${what}: ${r.message}`);
          throw new Error(`applying ${what}: ${r.message}`);
        }
      }
      return undefined;
    }
    // No longer asked for: remove what was generated.
    for (const [apiVersion, kind, name] of GENERATED) {
      const generated = ctx.list(apiVersion, kind, req.name, `${MANAGED_BY}=${config.manager}`);
      if (generated.some((o) => o.metadata.name === name)) ctx.delete(apiVersion, kind, req.name, name);
    }
    return undefined;
  },
};
