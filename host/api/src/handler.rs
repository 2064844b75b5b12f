//! `ResourceHandler` objects (`apiextensions.wasm-apiserver.io/v1alpha1`):
//! a wasm component of the `resource-handler-plugin` world bound to custom
//! resources, to convert their objects between served versions (what a
//! CRD's conversion webhook does upstream), and to default and validate
//! them beyond their schema.
//!
//! ```yaml
//! apiVersion: apiextensions.wasm-apiserver.io/v1alpha1
//! kind: ResourceHandler
//! metadata: {name: widgets}
//! spec:
//!   module: {file: widget_converter.wasm}   # in --plugin-dir, or {wasm: <base64>}
//!   resources: [{group: example.com, resource: widgets}]
//!   operations: [Convert, Default, Validate]   # the default: all three
//!   limits: {timeoutMillis: 500}
//!   contextAwareResources: [{apiVersion: v1, kind: Namespace}]  # reads (package 0.3.0)
//!   config: {sizeStep: 2}
//! ```

use crate::admission::{Module, PluginLimits, valid_file_name};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const GROUP: &str = "apiextensions.wasm-apiserver.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "ResourceHandler";
pub const PLURAL: &str = "resourcehandlers";

/// A custom resource a handler is bound to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandledResource {
    pub group: String,
    /// The CRD's plural name.
    pub resource: String,
}

/// What the server asks of a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operation {
    /// Convert objects between versions (reads and writes in a version
    /// other than the storage version).
    Convert,
    /// Default objects on create and update, after the schema's defaults.
    Default,
    /// Validate objects on create and update, after the schema.
    Validate,
}

/// `spec` of a `ResourceHandler`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HandlerSpec {
    pub module: Module,
    pub resources: Vec<HandledResource>,
    #[serde(default = "all_operations")]
    pub operations: Vec<Operation>,
    #[serde(default)]
    pub limits: PluginLimits,
    /// The kinds the handler may read of the cluster (read-only).
    #[serde(default)]
    pub context_aware_resources: Vec<crate::admission::ContextAwareResource>,
    /// Opaque configuration; a string is passed as is, anything else as JSON.
    #[serde(default)]
    pub config: Value,
}

fn all_operations() -> Vec<Operation> {
    vec![Operation::Convert, Operation::Default, Operation::Validate]
}

impl HandlerSpec {
    /// Parses and checks `spec`; the error says what is wrong.
    pub fn parse(spec: &Value) -> Result<Self, String> {
        let s: HandlerSpec =
            serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
        s.module.check()?;
        if s.module.format != crate::admission::ModuleFormat::Component {
            return Err("spec.module.format: resource handlers are components".into());
        }
        if s.resources.is_empty() {
            return Err("spec.resources: at least one resource is required".into());
        }
        Ok(s)
    }

    /// Whether the handler is asked for `op`.
    pub fn does(&self, op: Operation) -> bool {
        self.operations.contains(&op)
    }

    /// The configuration string handed to the handler.
    pub fn config_string(&self) -> String {
        crate::admission::config_string(&self.config)
    }
}

impl Module {
    /// Checks that exactly one source is set, and that a file is a plain
    /// name in the plugin directory.
    pub fn check(&self) -> Result<(), String> {
        let set = [
            self.wasm.is_some(),
            self.file.is_some(),
            self.image.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return Err("spec.module: exactly one of wasm, file and image must be set".into());
        }
        match (&self.file, &self.image) {
            (Some(f), _) if !valid_file_name(f) => Err(format!(
                "spec.module.file: {f:?} must be a plain file name ending in .wasm"
            )),
            (_, Some(i))
                if i.is_empty() || i.chars().any(|c| c.is_whitespace() || c.is_control()) =>
            {
                Err(format!(
                    "spec.module.image: {i:?} is not an image reference"
                ))
            }
            _ => Ok(()),
        }?;
        match &self.pull_secret {
            Some(_) if self.image.is_none() => {
                Err("spec.module.pullSecret: only with spec.module.image".into())
            }
            Some(p) if p.namespace.is_empty() || p.name.is_empty() => {
                Err("spec.module.pullSecret: needs namespace and name".into())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn specs_are_checked() {
        let s = HandlerSpec::parse(&json!({"module": {"file": "c.wasm"},
            "resources": [{"group": "example.com", "resource": "widgets"}]}))
        .unwrap();
        assert!(s.does(Operation::Convert) && s.does(Operation::Validate));
        assert!(
            HandlerSpec::parse(&json!({"module": {"file": "c.wasm"}, "resources": []}))
                .unwrap_err()
                .contains("spec.resources")
        );
        assert!(
            HandlerSpec::parse(&json!({"module": {"file": "../c.wasm"},
                "resources": [{"group": "g", "resource": "r"}]}))
            .unwrap_err()
            .contains("plain file name")
        );
        let only = HandlerSpec::parse(
            &json!({"module": {"wasm": "AA=="}, "operations": ["Convert"],
            "resources": [{"group": "g", "resource": "r"}]}),
        )
        .unwrap();
        assert!(!only.does(Operation::Default));
    }

    #[test]
    fn pull_secrets_go_with_images() {
        let r = |module| {
            HandlerSpec::parse(&json!({"module": module,
            "resources": [{"group": "g", "resource": "r"}]}))
        };
        let ok = r(json!({"image": "r.example/m:v1",
            "pullSecret": {"namespace": "ns", "name": "creds"}}))
        .unwrap();
        assert_eq!(ok.module.pull_secret.unwrap().name, "creds");
        let e = r(json!({"file": "c.wasm", "pullSecret": {"namespace": "ns", "name": "creds"}}));
        assert!(e.unwrap_err().contains("only with spec.module.image"));
        let e = r(json!({"image": "r.example/m:v1", "pullSecret": {"namespace": "", "name": "x"}}));
        assert!(e.unwrap_err().contains("needs namespace and name"));
        let e = r(json!({"image": "r.example/m:v1", "pullSecret": {"name": "x", "key": "y"}}));
        assert!(e.is_err());
    }
}
