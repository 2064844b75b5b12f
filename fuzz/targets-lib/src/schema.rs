//! Structural schemas of custom resources: the structural check a CRD's
//! schema passes, and pruning, defaulting and validation of objects.

use serde_json::Value;
use wasm_apiserver_api::schema::{Schema, structural_errors};

/// `[schema, object]` or `[schema, object, old]`: the structural check
/// runs without panicking; over a structural schema, pruning and
/// defaulting are idempotent (a pruned object prunes to itself, defaults
/// applied twice equal once) and validation of the pruned, defaulted
/// object runs and gives the same verdict twice.
pub fn prune_default_validate(data: &[u8]) {
    let Some(Value::Array(items)) = crate::json(data) else {
        return;
    };
    let (schema, mut obj, old) = match items.as_slice() {
        [s, o] => (s.clone(), o.clone(), None),
        [s, o, old] => (s.clone(), o.clone(), Some(old.clone())),
        _ => return,
    };
    crate::on_server_stack(move || {
        let base = "spec.versions[0].schema.openAPIV3Schema";
        if !structural_errors(&schema, base).is_empty() {
            return;
        }
        if !wasm_apiserver_api::cel::compile_errors(&schema, base).is_empty() {
            return;
        }
        let schema = Schema::new(schema);
        schema.prune(&mut obj);
        let pruned = obj.clone();
        let again = schema.prune(&mut obj);
        assert!(again.is_empty(), "a pruned object lost {again:?}");
        assert_eq!(obj, pruned);
        schema.default(&mut obj);
        let defaulted = obj.clone();
        schema.default(&mut obj);
        assert_eq!(obj, defaulted, "defaulting is not idempotent");
        let verdict = schema.validate(&obj, old.as_ref());
        assert_eq!(verdict, schema.validate(&obj, old.as_ref()));
    });
}
