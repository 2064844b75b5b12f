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

use std::collections::BTreeSet;

pub const NAMESPACE_LIFECYCLE: &str = "NamespaceLifecycle";
pub const SERVICE_ACCOUNT: &str = "ServiceAccount";
pub const NODE_RESTRICTION: &str = "NodeRestriction";
pub const OWNER_REFERENCES: &str = "OwnerReferencesPermissionEnforcement";
pub const CERTIFICATE_APPROVAL: &str = "CertificateApproval";
pub const CERTIFICATE_SIGNING: &str = "CertificateSigning";
pub const CERTIFICATE_SUBJECT_RESTRICTION: &str = "CertificateSubjectRestriction";
pub const VALIDATING_ADMISSION_POLICY: &str = "ValidatingAdmissionPolicy";
pub const MUTATING_ADMISSION_POLICY: &str = "MutatingAdmissionPolicy";
pub const MUTATING_WEBHOOK: &str = "MutatingAdmissionWebhook";
pub const VALIDATING_WEBHOOK: &str = "ValidatingAdmissionWebhook";

/// Every plugin this server has, in upstream's order.
pub const KNOWN: &[&str] = &[
    NAMESPACE_LIFECYCLE,
    SERVICE_ACCOUNT,
    NODE_RESTRICTION,
    OWNER_REFERENCES,
    CERTIFICATE_APPROVAL,
    CERTIFICATE_SIGNING,
    CERTIFICATE_SUBJECT_RESTRICTION,
    MUTATING_ADMISSION_POLICY,
    MUTATING_WEBHOOK,
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_WEBHOOK,
];

/// Plugins that cannot be disabled here.
const ALWAYS_ON: &[&str] = &[MUTATING_WEBHOOK, VALIDATING_WEBHOOK];

/// Which compiled-in plugins run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enabled(BTreeSet<&'static str>);

impl Default for Enabled {
    /// All of them (every plugin here is on by default).
    fn default() -> Self {
        Enabled(KNOWN.iter().copied().collect())
    }
}

impl Enabled {
    /// From the two flags' lists (upstream: a name may not be in both).
    pub fn from_flags(enable: &[String], disable: &[String]) -> Result<Self, String> {
        let known = |flag: &str, name: &str| {
            KNOWN.iter().copied().find(|k| *k == name).ok_or_else(|| {
                format!(
                    "{flag}: unknown admission plugin {name:?}; known plugins: {}",
                    KNOWN.join(", ")
                )
            })
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
            let k = known("--enable-admission-plugins", name)?;
            on.0.insert(k);
        }
        for name in &disable {
            let k = known("--disable-admission-plugins", name)?;
            if enable.contains(name) {
                return Err(format!(
                    "admission plugin {name:?} is both enabled and disabled"
                ));
            }
            if ALWAYS_ON.contains(&k) {
                return Err(format!(
                    "--disable-admission-plugins: {name} cannot be disabled on this server (webhooks and wasm admission plugins are one chain; remove their configurations instead)"
                ));
            }
            on.0.remove(k);
        }
        Ok(on)
    }

    pub fn is_on(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        KNOWN
            .iter()
            .copied()
            .filter(|k| self.0.contains(k))
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
}
