//! The compiled-in admission plugins by upstream's names, and which are on
//! (`--enable-admission-plugins` / `--disable-admission-plugins`).
//!
//! Upstream's default-on plugins that exist here are on by default, plus
//! `NodeRestriction` (as kubeadm and k3s enable it) and
//! `OwnerReferencesPermissionEnforcement` (off by default upstream, but
//! this server has always enforced it). The webhook and wasm-plugin chain
//! (`MutatingAdmissionWebhook`, `ValidatingAdmissionWebhook`) is one chain
//! here and cannot be turned off: the names are accepted for enabling, and
//! refused for disabling with a message saying so.
//!
//! Upstream's other default-on plugins, which this server does not have
//! ([`NOT_IMPLEMENTED`]: `LimitRanger`, `PodSecurity`,
//! ...), are accepted by name so that a kubeadm or k3s configuration
//! listing them starts; the server logs a warning that they are not
//! implemented here and do nothing. Any other name is refused.

use std::collections::BTreeSet;

pub const NAMESPACE_LIFECYCLE: &str = "NamespaceLifecycle";
pub const SERVICE_ACCOUNT: &str = "ServiceAccount";
pub const NODE_RESTRICTION: &str = "NodeRestriction";
pub const TAINT_NODES_BY_CONDITION: &str = "TaintNodesByCondition";
pub const DEFAULT_TOLERATION_SECONDS: &str = "DefaultTolerationSeconds";
pub const OWNER_REFERENCES: &str = "OwnerReferencesPermissionEnforcement";
pub const CERTIFICATE_APPROVAL: &str = "CertificateApproval";
pub const CERTIFICATE_SIGNING: &str = "CertificateSigning";
pub const CERTIFICATE_SUBJECT_RESTRICTION: &str = "CertificateSubjectRestriction";
pub const VALIDATING_ADMISSION_POLICY: &str = "ValidatingAdmissionPolicy";
pub const MUTATING_ADMISSION_POLICY: &str = "MutatingAdmissionPolicy";
pub const MUTATING_WEBHOOK: &str = "MutatingAdmissionWebhook";
pub const VALIDATING_WEBHOOK: &str = "ValidatingAdmissionWebhook";
pub const RESOURCE_QUOTA: &str = "ResourceQuota";

/// Every plugin this server has, in upstream's order.
pub const KNOWN: &[&str] = &[
    NAMESPACE_LIFECYCLE,
    SERVICE_ACCOUNT,
    NODE_RESTRICTION,
    TAINT_NODES_BY_CONDITION,
    OWNER_REFERENCES,
    CERTIFICATE_APPROVAL,
    CERTIFICATE_SIGNING,
    CERTIFICATE_SUBJECT_RESTRICTION,
    DEFAULT_TOLERATION_SECONDS,
    MUTATING_ADMISSION_POLICY,
    MUTATING_WEBHOOK,
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_WEBHOOK,
    RESOURCE_QUOTA,
];

/// Upstream's default-on plugins this server does not implement: accepted
/// by name (a configuration listing them still starts), with a warning.
pub const NOT_IMPLEMENTED: &[&str] = &[
    "LimitRanger",
    "PodSecurity",
    "Priority",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "ClusterTrustBundleAttest",
    "DefaultIngressClass",
];

/// Plugins that cannot be disabled here.
const ALWAYS_ON: &[&str] = &[MUTATING_WEBHOOK, VALIDATING_WEBHOOK];

/// Which compiled-in plugins run, and their settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enabled {
    on: BTreeSet<&'static str>,
    /// Names of [`NOT_IMPLEMENTED`] plugins the flags enabled.
    unimplemented: Vec<&'static str>,
    /// `DefaultTolerationSeconds`' `tolerationSeconds` for
    /// `node.kubernetes.io/not-ready` (`--default-not-ready-toleration-seconds`).
    pub not_ready_toleration_seconds: i64,
    /// ... and for `node.kubernetes.io/unreachable`
    /// (`--default-unreachable-toleration-seconds`).
    pub unreachable_toleration_seconds: i64,
}

impl Default for Enabled {
    /// All of them (every plugin here is on by default); upstream's 300 s
    /// default tolerations.
    fn default() -> Self {
        Enabled {
            on: KNOWN.iter().copied().collect(),
            unimplemented: Vec::new(),
            not_ready_toleration_seconds: 300,
            unreachable_toleration_seconds: 300,
        }
    }
}

impl Enabled {
    /// From the two flags' lists (upstream: a name may not be in both).
    pub fn from_flags(enable: &[String], disable: &[String]) -> Result<Self, String> {
        // A known name, `None` for one upstream has on by default and
        // this server does not implement.
        let known = |flag: &str, name: &str| -> Result<Option<&'static str>, String> {
            if let Some(k) = KNOWN.iter().copied().find(|k| *k == name) {
                return Ok(Some(k));
            }
            if NOT_IMPLEMENTED.contains(&name) {
                return Ok(None);
            }
            Err(format!(
                "{flag}: unknown admission plugin {name:?}; known plugins: {} (and, accepted but not implemented here: {})",
                KNOWN.join(", "),
                NOT_IMPLEMENTED.join(", ")
            ))
        };
        let mut on = Enabled::default();
        let names = |l: &[String]| -> Vec<String> {
            l.iter()
                .flat_map(|s| s.split(','))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        let (enable, disable) = (names(enable), names(disable));
        for name in &enable {
            match known("--enable-admission-plugins", name)? {
                Some(k) => {
                    on.on.insert(k);
                }
                None => {
                    if let Some(n) = NOT_IMPLEMENTED.iter().copied().find(|n| n == name)
                        && !on.unimplemented.contains(&n)
                    {
                        on.unimplemented.push(n);
                    }
                }
            }
        }
        for name in &disable {
            let k = known("--disable-admission-plugins", name)?;
            if enable.contains(name) {
                return Err(format!(
                    "admission plugin {name:?} is both enabled and disabled"
                ));
            }
            let Some(k) = k else {
                // Not implemented here: off already.
                continue;
            };
            if ALWAYS_ON.contains(&k) {
                return Err(format!(
                    "--disable-admission-plugins: {name} cannot be disabled on this server (webhooks and wasm admission plugins are one chain; remove their configurations instead)"
                ));
            }
            on.on.remove(k);
        }
        Ok(on)
    }

    pub fn is_on(&self, name: &str) -> bool {
        self.on.contains(name)
    }

    /// Upstream plugins the flags enabled that this server does not
    /// implement (for the start-up warning).
    pub fn unimplemented(&self) -> &[&'static str] {
        &self.unimplemented
    }

    pub fn names(&self) -> Vec<&'static str> {
        KNOWN
            .iter()
            .copied()
            .filter(|k| self.on.contains(k))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn flags() {
        assert!(Enabled::default().is_on(NODE_RESTRICTION));
        let e = Enabled::from_flags(
            &v("NodeRestriction"),
            &v("ServiceAccount,NamespaceLifecycle"),
        )
        .unwrap();
        assert!(!e.is_on(SERVICE_ACCOUNT) && !e.is_on(NAMESPACE_LIFECYCLE));
        assert!(e.is_on(NODE_RESTRICTION));
        let err = Enabled::from_flags(&v("NodeRestrictio"), &[]).unwrap_err();
        assert!(
            err.contains("unknown admission plugin \"NodeRestrictio\""),
            "{err}"
        );
        assert!(
            err.contains("NamespaceLifecycle, ServiceAccount, NodeRestriction"),
            "{err}"
        );
        assert!(Enabled::from_flags(&v("NodeRestriction"), &v("NodeRestriction")).is_err());
        assert!(Enabled::from_flags(&[], &v("ValidatingAdmissionWebhook")).is_err());
    }

    #[test]
    fn upstream_default_plugins_not_implemented_here_are_accepted_and_named() {
        // kubeadm's and k3s's lists.
        let e = Enabled::from_flags(
            &v("NodeRestriction,LimitRanger,ResourceQuota,PodSecurity,DefaultTolerationSeconds,Priority"),
            &v("DefaultStorageClass"),
        )
        .unwrap();
        assert_eq!(
            e.unimplemented(),
            ["LimitRanger", "PodSecurity", "Priority"]
        );
        assert!(e.is_on(RESOURCE_QUOTA));
        let off = Enabled::from_flags(&[], &v("ResourceQuota")).unwrap();
        assert!(!off.is_on(RESOURCE_QUOTA) && Enabled::default().is_on(RESOURCE_QUOTA));
        assert!(e.is_on(DEFAULT_TOLERATION_SECONDS) && e.is_on(TAINT_NODES_BY_CONDITION));
        assert!(!e.names().contains(&"LimitRanger"));
        // Names upstream does not have on by default, and typos, still stop
        // start-up.
        for bad in ["AlwaysPullImages", "LimitRange", "EventRateLimit"] {
            let err = Enabled::from_flags(&v(bad), &[]).unwrap_err();
            assert!(err.contains("unknown admission plugin"), "{err}");
        }
        assert!(Enabled::default().unimplemented().is_empty());
    }
}
