//! Reads of the cluster (the `cluster` import of package 0.3.0): objects
//! of the kinds the plugin's `spec.contextAwareResources` grants, straight
//! from the server's store, within the plugin's read budget. Natively (in
//! `cargo test`) the reads answer from [`crate::testing::set_cluster`]'s
//! fixture objects.

use serde_json::Value;

/// The raw interface (records and functions) for plugins that want it.
pub mod raw {
    pub use crate::wasm_apiserver::plugin::cluster::*;
}

/// One object of `kind` in `api_version` (as objects spell them: `v1`,
/// `Namespace`), or `None` when there is none.
pub fn get(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let target = raw::Target::Kind(raw::KindRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
        let found = raw::get(&target, namespace, name)?;
        found
            .map(|o| serde_json::from_str(&o.json).map_err(|e| e.to_string()))
            .transpose()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Ok(crate::testing::fixtures(api_version, kind, namespace)
            .into_iter()
            .find(|o| o["metadata"]["name"] == name))
    }
}

/// Every object of `kind` in `namespace` (every namespace for `None`)
/// matching `label_selector`, following `continue` tokens.
pub fn list(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let target = raw::Target::Kind(raw::KindRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = raw::list(
                &target,
                &raw::ListOptions {
                    namespace: namespace.map(String::from),
                    label_selector: label_selector.map(String::from),
                    field_selector: None,
                    limit: None,
                    continue_token: token.take(),
                },
            )?;
            for o in page.items {
                out.push(serde_json::from_str(&o.json).map_err(|e| e.to_string())?);
            }
            match page.continue_token {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = label_selector;
        Ok(crate::testing::fixtures(api_version, kind, namespace))
    }
}
