//! Upstream's `ServiceAccount` admission plugin, compiled in (it runs
//! before mutating admission policies, plugins and webhooks, as upstream
//! orders it): a Pod created without `serviceAccountName` gets `default`;
//! the ServiceAccount it names must exist (the `default` one is waited for
//! a little, since the service-account controller creates it just after
//! its namespace); and unless `automountServiceAccountToken` says no, the
//! Pod gets the projected `kube-api-access-<suffix>` volume (a bound token,
//! the cluster CA from `kube-root-ca.crt`, its namespace) mounted read-only
//! at `/var/run/secrets/kubernetes.io/serviceaccount` in every container
//! and init container that does not mount something there already.

use crate::admission::policy::Lookup;
use serde_json::{Value, json};
use std::time::Duration;
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::{ApiError, meta};

pub const DEFAULT: &str = "default";
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const VOLUME_PREFIX: &str = "kube-api-access-";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// How many times the `default` ServiceAccount is looked for (upstream's
/// 10, 100–200 ms apart: the moment between a namespace's creation and the
/// service-account controller's first pass).
const DEFAULT_TRIES: u32 = 10;

/// Mutates a Pod on create. `name` is the Pod's (possibly generated) name.
pub async fn admit(
    objects: &dyn Lookup,
    ns: &str,
    name: &str,
    pod: &mut Value,
) -> Result<(), ApiError> {
    if pod["metadata"]["annotations"]
        .get(MIRROR_ANNOTATION)
        .is_some()
    {
        // Mirror pods come from a kubelet's static manifests: upstream
        // refuses them any service-account reference.
        return refuse_mirror(name, &pod["spec"]);
    }
    let spec = &mut pod["spec"];
    let sa_name = match spec["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        Some(s) => s.to_string(),
        None => {
            let s = spec["serviceAccount"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or(DEFAULT)
                .to_string();
            spec["serviceAccountName"] = json!(s);
            s
        }
    };
    // The deprecated alias follows the real field, as upstream's defaulting.
    spec["serviceAccount"] = json!(sa_name);
    let sa = match lookup(objects, ns, &sa_name).await {
        Ok(sa) => sa,
        Err(e) => {
            let why = match e {
                ApiError::NotFound(_) => format!("serviceaccount {sa_name:?} not found"),
                other => other.to_string(),
            };
            return Err(ApiError::Forbidden(
                Target::new("", "pods", name),
                format!("error looking up service account {ns}/{sa_name}: {why}"),
            ));
        }
    };
    if automount(&pod["spec"], &sa) {
        mount_token(&mut pod["spec"]);
    }
    // The ServiceAccount's image pull secrets, unless the Pod has its own.
    let pull = &sa["imagePullSecrets"];
    if pull.as_array().is_some_and(|a| !a.is_empty())
        && pod["spec"]["imagePullSecrets"]
            .as_array()
            .is_none_or(Vec::is_empty)
    {
        pod["spec"]["imagePullSecrets"] = pull
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| json!({"name": s["name"]}))
            .collect();
    }
    Ok(())
}

fn refuse_mirror(name: &str, spec: &Value) -> Result<(), ApiError> {
    let forbidden = |why: &str| {
        Err(ApiError::Forbidden(
            Target::new("", "pods", name),
            why.to_string(),
        ))
    };
    if spec["serviceAccountName"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return forbidden("a mirror pod may not reference service accounts");
    }
    let projects_token = spec["volumes"].as_array().into_iter().flatten().any(|v| {
        v["projected"]["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s.get("serviceAccountToken").is_some())
    });
    if projects_token {
        return forbidden("a mirror pod may not use ServiceAccountToken volume projections");
    }
    Ok(())
}

/// The ServiceAccount `ns/name`; `default` is waited for a little.
async fn lookup(objects: &dyn Lookup, ns: &str, name: &str) -> Result<Value, ApiError> {
    let info = objects.resources().builtin("", "v1", "serviceaccounts");
    let tries = if name == DEFAULT { DEFAULT_TRIES } else { 1 };
    let interval = Duration::from_millis(100 + rand::random_range(0..100));
    let mut last = None;
    for attempt in 0..tries {
        if attempt > 0 {
            tokio::time::sleep(interval).await;
        }
        match objects.get(&info, Some(ns), name).await {
            Ok(sa) => return Ok(sa),
            Err(e @ ApiError::NotFound(_)) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| ApiError::NotFound(Target::new("", "serviceaccounts", name))))
}

/// Whether the Pod gets a token: its own setting wins over its
/// ServiceAccount's; both default to yes.
fn automount(spec: &Value, sa: &Value) -> bool {
    spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// Adds the projected token volume (or reuses one the Pod already has) and
/// mounts it in every init and regular container that mounts nothing at
/// the token's path; a Pod where every container brings its own gets no
/// volume, as upstream.
fn mount_token(spec: &mut Value) {
    let existing: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(String::from))
        .collect();
    let reused = existing.iter().find(|n| n.starts_with(VOLUME_PREFIX));
    let name = reused
        .cloned()
        .unwrap_or_else(|| meta::generate_name(VOLUME_PREFIX));
    let mut mounted = false;
    for key in ["initContainers", "containers"] {
        for c in spec
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let mounts_path = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == MOUNT_PATH);
            if mounts_path {
                continue;
            }
            let mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH});
            match c["volumeMounts"].as_array_mut() {
                Some(mounts) => mounts.push(mount),
                None => c["volumeMounts"] = json!([mount]),
            }
            mounted = true;
        }
    }
    if reused.is_some() || !mounted {
        return;
    }
    let volume = json!({
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
            "defaultMode": 420,
        },
    });
    match spec["volumes"].as_array_mut() {
        Some(v) => v.push(volume),
        None => spec["volumes"] = json!([volume]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_volume_is_mounted_in_every_container_once() {
        let mut spec = json!({
            "initContainers": [{"name": "init", "image": "i"}],
            "containers": [{"name": "a", "image": "a",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}],
        });
        mount_token(&mut spec);
        let volumes = spec["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 2);
        let name = volumes[1]["name"].as_str().unwrap();
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5);
        for c in [&spec["initContainers"][0], &spec["containers"][0]] {
            let last = c["volumeMounts"].as_array().unwrap().last().unwrap();
            assert_eq!(last["name"], name);
            assert_eq!(last["mountPath"], MOUNT_PATH);
            assert_eq!(last["readOnly"], true);
        }
    }

    #[test]
    fn containers_with_their_own_token_mount_are_left_alone() {
        let own = json!({"name": "a", "image": "a",
            "volumeMounts": [{"name": "mine", "mountPath": MOUNT_PATH}]});
        let mut spec = json!({"containers": [own]});
        let before = spec.clone();
        mount_token(&mut spec);
        assert_eq!(spec, before, "no container needs the volume");
        let mut spec = json!({"containers": [own, {"name": "b", "image": "b"}]});
        mount_token(&mut spec);
        assert_eq!(spec["containers"][0], own);
        assert_eq!(spec["volumes"].as_array().unwrap().len(), 1);
        assert_eq!(
            spec["containers"][1]["volumeMounts"][0]["name"],
            spec["volumes"][0]["name"]
        );
        // A second pass reuses the volume.
        let once = spec.clone();
        spec["containers"][1]["volumeMounts"] = json!([]);
        mount_token(&mut spec);
        assert_eq!(spec, once);
    }

    #[test]
    fn the_pod_setting_wins_over_the_service_account() {
        let sa_off = json!({"automountServiceAccountToken": false});
        assert!(!automount(&json!({}), &sa_off));
        assert!(automount(
            &json!({"automountServiceAccountToken": true}),
            &sa_off
        ));
        assert!(!automount(
            &json!({"automountServiceAccountToken": false}),
            &json!({})
        ));
        assert!(automount(&json!({}), &json!({})));
    }
}
