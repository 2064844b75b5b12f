//! Upstream's `OwnerReferencesPermissionEnforcement` admission plugin,
//! compiled in (validating): changing an object's `ownerReferences` needs
//! `delete` on the object (a creator may set them: it could delete what it
//! makes), and a reference that newly sets `blockOwnerDeletion` needs
//! `update` on the owner's `finalizers` subresource, since it holds the
//! owner's foreground deletion.

use crate::admission::Attributes;
use crate::resources::Resources;
use serde_json::Value;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::cel::authz::Authorize;
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::rbac::Attributes as Access;
use wasm_apiserver_plugins::{Operation, UserInfo};

fn refs(obj: Option<&Value>) -> &[Value] {
    obj.and_then(|o| o["metadata"]["ownerReferences"].as_array())
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// References in `new` that block their owner's deletion and did not in
/// `old` (matched by uid).
fn newly_blocking<'a>(new: &'a [Value], old: &[Value]) -> Vec<&'a Value> {
    new.iter()
        .filter(|r| r["blockOwnerDeletion"] == true)
        .filter(|r| {
            !old.iter()
                .any(|o| o["uid"] == r["uid"] && o["blockOwnerDeletion"] == true)
        })
        .collect()
}

pub fn validate(
    authorize: Option<&dyn Authorize>,
    resources: &Resources,
    a: &Attributes<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    user: &UserInfo,
) -> Result<(), ApiError> {
    let Some(authorize) = authorize else {
        return Ok(());
    };
    if !matches!(a.operation, Operation::Create | Operation::Update)
        || (a.info.group.is_empty() && a.info.plural == "pods" && a.subresource == Some("status"))
    {
        return Ok(());
    }
    let (new_refs, old_refs) = (refs(obj), refs(old));
    if new_refs == old_refs {
        return Ok(());
    }
    let groups: Vec<&str> = user.groups.iter().map(String::as_str).collect();
    let target = || {
        let plural = match a.subresource {
            Some(s) => format!("{}/{s}", a.info.plural),
            None => a.info.plural.clone(),
        };
        Target::new(&a.info.group, &plural, a.name)
    };
    let decide = |attrs: Access| authorize.authorize(&attrs);
    if a.operation == Operation::Update {
        let mut delete = Access::resource(
            &user.username,
            &groups,
            "delete",
            &a.info.group,
            &a.info.plural,
        )
        .named(a.name);
        if let Some(ns) = a.namespace {
            delete = delete.in_namespace(ns);
        }
        if let Some(s) = a.subresource {
            delete = delete.with_subresource(s);
        }
        let d = decide(delete);
        if !d.is_allowed() {
            return Err(ApiError::Forbidden(
                target(),
                format!(
                    "cannot set an ownerRef on a resource you can't delete: {}, <nil>",
                    d.reason()
                ),
            ));
        }
    }
    let blocking = newly_blocking(new_refs, old_refs);
    if blocking.is_empty() {
        return Ok(());
    }
    let anything = Access::resource(&user.username, &groups, "update", "*", "*")
        .with_subresource("finalizers");
    if decide(anything).is_allowed() {
        return Ok(());
    }
    let snapshot = resources.snapshot();
    for r in blocking {
        let api_version = r["apiVersion"].as_str().unwrap_or_default();
        let kind = r["kind"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let owners: Vec<_> = snapshot
            .all()
            .filter(|res| res.group == group && res.version == version && res.kind == kind)
            .collect();
        if owners.is_empty() {
            return Err(ApiError::Forbidden(
                target(),
                format!(
                    "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}: no matches for kind {kind:?} in version {api_version:?}"
                ),
            ));
        }
        for owner in owners {
            let mut check =
                Access::resource(&user.username, &groups, "update", group, &owner.plural)
                    .with_subresource("finalizers")
                    .named(r["name"].as_str().unwrap_or_default());
            if let Some(ns) = a.namespace.filter(|_| owner.namespaced) {
                check = check.in_namespace(ns);
            }
            let d = decide(check);
            if !d.is_allowed() {
                return Err(ApiError::Forbidden(
                    target(),
                    format!(
                        "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {}, <nil>",
                        d.reason()
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_references_that_start_blocking_count() {
        let a = json!({"uid": "a", "blockOwnerDeletion": true});
        let b = json!({"uid": "b", "blockOwnerDeletion": false});
        let b_blocking = json!({"uid": "b", "blockOwnerDeletion": true});
        assert!(newly_blocking(&[a.clone(), b.clone()], std::slice::from_ref(&a)).is_empty());
        assert_eq!(
            newly_blocking(&[a.clone(), b_blocking.clone()], &[a.clone(), b]),
            vec![&b_blocking]
        );
        assert_eq!(newly_blocking(std::slice::from_ref(&a), &[]), vec![&a]);
    }
}
