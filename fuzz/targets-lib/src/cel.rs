//! CEL rules of a CRD schema: compile, cost estimation and, for a rule the
//! estimate admits, evaluation.

use serde_json::{Value, json};
use wasm_apiserver_api::cel::compile_errors;
use wasm_apiserver_api::schema::Schema;

/// Rules longer than this are not tried (a CRD's rules are short; the
/// bound keeps each run fast).
const MAX_RULE: usize = 4096;

/// A schema node with bounded sizes, so costs are finite, carrying `rule`
/// as its rule and its message expression.
fn schema(rule: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 64},
                "replicas": {"type": "integer"},
                "ratio": {"type": "number"},
                "enabled": {"type": "boolean"},
                "memory": {"type": "string", "maxLength": 16},
                "items": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 16}},
                "labels": {
                    "type": "object", "maxProperties": 8,
                    "additionalProperties": {"type": "string", "maxLength": 32}
                }
            },
            "x-kubernetes-validations": [{"rule": rule, "messageExpression": rule}]
        }}
    })
}

/// A rule compiles or is refused without panicking or overflowing the
/// server's stack; the verdict is the same twice (compiled rules are
/// cached); and a rule that compiles within the cost limit evaluates on an
/// object within the schema's bounds (a run that does not finish is a
/// libFuzzer timeout: the estimate let a runaway rule through).
pub fn compile_and_cost(data: &[u8]) {
    if data.len() > MAX_RULE {
        return;
    }
    let Ok(rule) = std::str::from_utf8(data) else {
        return;
    };
    crate::on_server_stack(|| {
        let schema = schema(rule);
        let base = "spec.validation.openAPIV3Schema";
        let errors = compile_errors(&schema, base);
        assert_eq!(errors, compile_errors(&schema, base), "{rule:?}");
        if !errors.is_empty() {
            return;
        }
        let schema = Schema::new(schema);
        let obj = json!({"spec": {
            "name": "web-0123456789", "replicas": 3, "ratio": 0.5, "enabled": true,
            "memory": "1Gi", "items": ["a", "b", "c", "a"],
            "labels": {"app": "web", "tier": "front"}
        }});
        let old = json!({"spec": {"name": "web", "replicas": 1, "items": [], "labels": {}}});
        schema.validate(&obj, Some(&old));
        schema.validate(&old, None);
    });
}
