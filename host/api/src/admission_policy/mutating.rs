//! `MutatingAdmissionPolicy` and `MutatingAdmissionPolicyBinding`
//! (`admissionregistration.k8s.io/v1beta1`): the same matching, params,
//! variables and match conditions as validating policies, with `mutations`
//! in place of validations:
//!
//! * `patchType: ApplyConfiguration`: the expression builds the fields to
//!   set (`Object{spec: Object.spec{replicas: 3}}`), merged into the object
//!   as server-side apply merges (maps field by field, lists per their
//!   `x-kubernetes-list-type`; the merge is the caller's, over the
//!   resource's schema);
//! * `patchType: JSONPatch`: the expression builds a list of operations
//!   (`[JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}]`;
//!   `jsonpatch.escapeKey(k)` escapes a key for a path).
//!
//! Mutations apply in order, each seeing the object as the previous ones
//! left it. `reinvocationPolicy` is read but a policy runs once
//! (`Never`): this server has no reinvocation pass.

use super::{Common, Expression, Input, Matcher, NULL, ParamRef, Run, binding_targets, items};
use crate::cel::authz::Authorizer;
use crate::error::Cause;
use crate::meta;
use serde_json::Value;

pub const VERSION: &str = "v1beta1";
pub const POLICIES: &str = "mutatingadmissionpolicies";
pub const BINDINGS: &str = "mutatingadmissionpolicybindings";

enum Mutation {
    Apply(Expression),
    JsonPatch(Expression),
}

/// A compiled `MutatingAdmissionPolicy`.
pub struct MutatingPolicy {
    common: Common,
    mutations: Vec<Mutation>,
}

impl std::ops::Deref for MutatingPolicy {
    type Target = Common;
    fn deref(&self) -> &Common {
        &self.common
    }
}

/// What a mutation needs besides the object: the request's other variables
/// and how to merge an apply configuration.
pub struct MutationInput<'a> {
    pub old_object: Option<&'a Value>,
    pub request: &'a Value,
    pub namespace_object: Option<&'a Value>,
    pub authorizer: Option<Authorizer>,
    pub params: Option<&'a Value>,
    /// Merges an apply configuration into the object (server-side apply's
    /// merge over the resource's schema).
    pub merge: &'a (dyn Fn(&Value, &Value) -> Value + Sync),
}

impl MutatingPolicy {
    /// Checks and compiles a policy object (causes with upstream's paths).
    pub fn compile(obj: &Value) -> Result<MutatingPolicy, Vec<Cause>> {
        let mut causes = Vec::new();
        let common = Common::parse(obj, &mut causes);
        let spec = &obj["spec"];
        let mut mutations = Vec::new();
        if items(&spec["mutations"]).is_empty() {
            causes.push(Cause::required(
                "spec.mutations",
                "mutations must contain at least one item",
            ));
        }
        for (i, m) in items(&spec["mutations"]).iter().enumerate() {
            let field = format!("spec.mutations[{i}]");
            let (key, make): (&str, fn(Expression) -> Mutation) = match m["patchType"].as_str() {
                Some("ApplyConfiguration") => ("applyConfiguration", Mutation::Apply),
                Some("JSONPatch") => ("jsonPatch", Mutation::JsonPatch),
                None => {
                    causes.push(Cause::missing(&format!("{field}.patchType")));
                    continue;
                }
                Some(other) => {
                    causes.push(Cause {
                            reason: "FieldValueNotSupported".into(),
                            field: format!("{field}.patchType"),
                            message: format!(
                                "Unsupported value: {other:?}: supported values: \"ApplyConfiguration\", \"JSONPatch\""
                            ),
                        });
                    continue;
                }
            };
            let source = m[key]["expression"].as_str().unwrap_or_default();
            if let Some(e) =
                Expression::compile(source, &format!("{field}.{key}.expression"), &mut causes)
            {
                crate::cel::register_structs(source);
                mutations.push(make(e));
            }
        }
        if let Some(r) = spec["reinvocationPolicy"].as_str()
            && !matches!(r, "Never" | "IfNeeded")
        {
            causes.push(Cause {
                reason: "FieldValueNotSupported".into(),
                field: "spec.reinvocationPolicy".into(),
                message: format!(
                    "Unsupported value: {r:?}: supported values: \"IfNeeded\", \"Never\""
                ),
            });
        }
        if !causes.is_empty() {
            return Err(causes);
        }
        Ok(MutatingPolicy { common, mutations })
    }

    /// Whether evaluating it needs the request's namespace object.
    pub fn needs_namespace(&self) -> bool {
        let more: Vec<&Expression> = self
            .mutations
            .iter()
            .map(|(Mutation::Apply(e) | Mutation::JsonPatch(e))| e)
            .collect();
        self.common.needs_namespace(&more)
    }

    /// Applies the mutations to `object` in order. `Ok(false)`: a match
    /// condition is false, or nothing changed. `Err`: an expression failed
    /// or built no valid patch (counts per `failurePolicy`).
    pub fn mutate(&self, object: &mut Value, m: &MutationInput<'_>) -> Result<bool, String> {
        let mut changed = false;
        for (i, mutation) in self.mutations.iter().enumerate() {
            let next = {
                let input = Input::new(
                    Some(&*object),
                    m.old_object,
                    m.request,
                    m.namespace_object,
                    m.authorizer.clone(),
                )?;
                let mut run = Run::new(&input, m.params.unwrap_or(&NULL));
                // Match conditions decide once, on the object as it came.
                let scope = match self.common.begin(&input, &mut run)? {
                    Some(scope) => scope,
                    None if i == 0 => return Ok(false),
                    None => break,
                };
                let (Mutation::Apply(e) | Mutation::JsonPatch(e)) = mutation;
                let result = run.eval(&scope.ctx, e).map_err(|err| {
                    format!(
                        "expression '{}' resulted in error: {}",
                        e.source,
                        scope.explain(&e.source, err)
                    )
                })?;
                let built = result.json().map_err(|err| {
                    format!("expression '{}' built no JSON value: {err:?}", e.source)
                })?;
                match mutation {
                    Mutation::JsonPatch(_) => {
                        if !built.is_array() {
                            return Err(format!(
                                "expression '{}' must build a list of JSONPatch operations",
                                e.source
                            ));
                        }
                        crate::patch::apply_json_patch(object, &built).map_err(|err| {
                            format!("JSON patch of expression '{}': {err}", e.source)
                        })?
                    }
                    Mutation::Apply(_) => {
                        if !built.is_object() {
                            return Err(format!(
                                "expression '{}' must build an Object{{...}} apply configuration",
                                e.source
                            ));
                        }
                        (m.merge)(object, &built)
                    }
                }
            };
            if next != *object {
                *object = next;
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// A checked `MutatingAdmissionPolicyBinding`.
pub struct MutatingBinding {
    pub name: String,
    pub policy_name: String,
    pub param_ref: Option<ParamRef>,
    pub matcher: Option<Matcher>,
}

impl MutatingBinding {
    pub fn parse(obj: &Value) -> Result<MutatingBinding, Vec<Cause>> {
        let spec = &obj["spec"];
        let mut causes = Vec::new();
        let policy_name = spec["policyName"].as_str().unwrap_or_default().to_string();
        if policy_name.is_empty() {
            causes.push(Cause::missing("spec.policyName"));
        }
        let (param_ref, matcher) = binding_targets(spec, &mut causes);
        if !causes.is_empty() {
            return Err(causes);
        }
        Ok(MutatingBinding {
            name: meta::name(obj).unwrap_or_default().to_string(),
            policy_name,
            param_ref,
            matcher,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(mutations: Value) -> MutatingPolicy {
        MutatingPolicy::compile(&json!({"metadata": {"name": "m"}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
            "matchConditions": [{"name": "unlabelled", "expression": "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"}],
            "mutations": mutations,
        }}))
        .unwrap_or_else(|c| panic!("{c:?}"))
    }

    fn run(p: &MutatingPolicy, obj: &mut Value) -> Result<bool, String> {
        let request = json!({"operation": "CREATE"});
        // A shallow merge is enough to see the configuration handed over.
        let merge = |live: &Value, config: &Value| {
            let mut out = live.clone();
            json_patch::merge(&mut out, config);
            out
        };
        p.mutate(
            obj,
            &MutationInput {
                old_object: None,
                request: &request,
                namespace_object: None,
                authorizer: None,
                params: None,
                merge: &merge,
            },
        )
    }

    #[test]
    fn apply_configurations_and_json_patches_apply_in_order() {
        let p = policy(json!([
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{spec: Object.spec{replicas: object.spec.replicas + 1}}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/metadata/labels', value: {}}, JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('example.com/replicas'), value: string(object.spec.replicas)}]"}},
        ]));
        let mut obj = json!({"metadata": {"name": "d"}, "spec": {"replicas": 2, "paused": false}});
        assert!(run(&p, &mut obj).unwrap());
        assert_eq!(
            obj,
            json!({"metadata": {"name": "d", "labels": {"example.com/replicas": "3"}}, "spec": {"replicas": 3, "paused": false}})
        );
        let mut skipped = json!({"metadata": {"labels": {"skip": "1"}}, "spec": {"replicas": 2}});
        assert!(!run(&p, &mut skipped).unwrap());
        assert_eq!(skipped["spec"]["replicas"], 2);
    }

    #[test]
    fn errors_and_bad_specs() {
        let p = policy(
            json!([{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'remove', path: '/nothing/here'}]"}}]),
        );
        let mut obj = json!({"metadata": {}, "spec": {}});
        let before = obj.clone();
        assert!(run(&p, &mut obj).is_err());
        assert_eq!(obj, before, "a failed mutation changes nothing");
        let bad = MutatingPolicy::compile(&json!({"spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "mutations": [{"patchType": "Strategic"}, {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{"}}],
        }}))
        .err()
        .unwrap();
        let fields: Vec<_> = bad.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.mutations[0].patchType",
                "spec.mutations[1].jsonPatch.expression"
            ]
        );
    }
}
