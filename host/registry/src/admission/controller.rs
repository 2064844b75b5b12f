//! The admission controller: follows `AdmissionPlugin` objects and webhook
//! configurations (through storage watches, so every replica runs the same
//! chain), loads their modules into the [`Admission`] chain and records the
//! outcome in each object's status; and the static plugins of
//! `--admission-control-config-file`.

use crate::admission::chain::{Active, Admission, Backend};
use crate::admission::policy::{self, Kind};
use crate::admission::shadow;
use crate::resources::Resource;
use crate::store::Objects;
use crate::webhook::{self, Webhook};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_api::admission::{FailurePolicy, Mode, Phase, PluginSpec, Rule, Selector};
use wasm_apiserver_api::admission_policy as vap;
use wasm_apiserver_api::meta;

fn plugin_info(objects: &Objects) -> Arc<Resource> {
    use wasm_apiserver_api::admission::{GROUP, PLURAL, VERSION};
    objects.resources.builtin(GROUP, VERSION, PLURAL)
}

/// Brings the chain in line with one `AdmissionPlugin` object and records
/// the outcome in its status. Idempotent: an object whose generation is
/// already active is left alone.
pub async fn reconcile(objects: &Objects, obj: &Value) {
    let Some(admission) = objects.admission.clone() else {
        return;
    };
    let name = meta::name(obj).unwrap_or_default().to_string();
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    let uid = meta::str_field(obj, "uid").unwrap_or_default().to_string();
    if meta::str_field(obj, "deletionTimestamp").is_some() {
        admission.remove(&name, &uid);
        return;
    }
    if admission.superseded(&name, &uid, generation) {
        // A stale event: the newer generation's own reconcile recorded it.
        return;
    }
    let (phase, message, digest) = match admission.loaded(&name) {
        Some((g, digest)) if g == generation => ("Active", String::new(), digest),
        _ => match PluginSpec::parse(&obj["spec"]) {
            Err(e) => ("Failed", e, String::new()),
            Ok(spec) => match admission.load(&name, spec, generation).await {
                Ok(mut active) => {
                    let annotations: std::collections::BTreeMap<String, String> =
                        serde_json::from_value(obj["metadata"]["annotations"].clone())
                            .unwrap_or_default();
                    active.set_report_annotations(&annotations);
                    active.uid = uid.clone();
                    let digest = active.digest();
                    admission.install(active);
                    tracing::info!(plugin = %name, generation, %digest, "admission plugin active");
                    ("Active", String::new(), digest)
                }
                Err(e) => {
                    tracing::warn!(plugin = %name, generation, error = %e, "admission plugin failed to load");
                    ("Failed", e, String::new())
                }
            },
        },
    };
    let mut status = json!({"phase": phase, "observedGeneration": generation});
    // What the background audit and the shadow versions record.
    for kept in ["audit", "shadow"] {
        if let Some(v) = obj["status"].get(kept) {
            status[kept] = v.clone();
        }
    }
    if !message.is_empty() {
        status["message"] = json!(message);
    }
    if phase == "Active" {
        status["digest"] = json!(format!("sha256:{digest}"));
    } else if let Some((g, d)) = admission.loaded(&name) {
        status["activeGeneration"] = json!(g);
        status["digest"] = json!(format!("sha256:{d}"));
    }
    objects
        .record_status(&plugin_info(objects), obj, status, "admission-controller")
        .await;
}

/// Applies one webhook configuration object (or its deletion) to the chain.
pub fn reconcile_webhooks(objects: &Objects, resource: &str, obj: &Value, deleted: bool) {
    let Some(admission) = &objects.admission else {
        return;
    };
    let mutating = resource == webhook::MUTATING;
    let key = format!(
        "{}/{}",
        if mutating { "mutating" } else { "validating" },
        meta::name(obj).unwrap_or_default()
    );
    if deleted || meta::str_field(obj, "deletionTimestamp").is_some() {
        admission.set_webhooks(&key, None);
        return;
    }
    match webhook_entries(obj, mutating) {
        Ok(entries) => admission.set_webhooks(&key, Some(entries)),
        Err(e) => {
            tracing::warn!(config = %key, error = %e, "webhook configuration rejected; previous version stays")
        }
    }
}

/// Brings the admission policies in line with one admission-policy object
/// (a Validating- or MutatingAdmissionPolicy or a binding) and records a
/// policy's status.
pub async fn reconcile_policy(objects: &Objects, kind: Kind, obj: &Value, deleted: bool) {
    let Some(admission) = &objects.admission else {
        return;
    };
    let name = meta::name(obj).unwrap_or_default();
    if deleted || meta::str_field(obj, "deletionTimestamp").is_some() {
        admission.policies.remove(kind, name);
        return;
    }
    if kind.is_binding() {
        admission.policies.apply_binding(obj, kind.is_mutating());
        return;
    }
    let compiled = admission.policies.apply_policy(obj, kind.is_mutating());
    if kind.is_mutating() {
        // MutatingAdmissionPolicy (v1beta1) has no status; a policy that
        // does not compile is logged, and requests follow its failurePolicy.
        return;
    }
    let info = objects
        .resources
        .builtin(vap::GROUP, kind.version(), kind.plural());
    objects
        .record_status(
            &info,
            obj,
            policy::policy_status(
                &compiled,
                &type_check(objects, &admission.policies, name),
                obj,
            ),
            "admission-policy-controller",
        )
        .await;
}

/// The expression warnings of a compiled validating policy, checked
/// against the schemas of the kinds its rules name exactly.
fn type_check(objects: &Objects, policies: &policy::Policies, name: &str) -> Vec<(String, String)> {
    let Some(p) = policies.validating(name) else {
        return Vec::new();
    };
    let resources: Vec<Arc<Resource>> = p
        .matcher
        .exact_resources()
        .into_iter()
        .filter_map(|(g, v, r)| objects.resources.get(&g, &v, &r))
        .collect();
    let kinds: Vec<_> = resources
        .iter()
        .map(|r| {
            (
                format!("{}/{}, Kind={}", r.info.group, r.info.version, r.info.kind),
                crate::store::merge_schema(&r.info),
            )
        })
        .collect();
    p.type_check(&kinds)
}

/// Follows `AdmissionPlugin` objects and webhook configurations through
/// storage watches, so every replica runs the same chain.
pub fn spawn_controller(objects: Objects) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Some(admission) = objects.admission.clone() else {
            return;
        };
        let kinds = [
            plugin_info(&objects),
            objects
                .resources
                .builtin(webhook::GROUP, "v1", webhook::VALIDATING),
            objects
                .resources
                .builtin(webhook::GROUP, "v1", webhook::MUTATING),
        ]
        .into_iter()
        .chain(
            [
                Kind::Policy,
                Kind::Binding,
                Kind::MutatingPolicy,
                Kind::MutatingBinding,
            ]
            .map(|k| {
                objects
                    .resources
                    .builtin(vap::GROUP, k.version(), k.plural())
            }),
        );
        let loops = kinds.into_iter().map(|info| {
            let objects = objects.clone();
            let admission = admission.clone();
            async move {
                let plugins = info.group == wasm_apiserver_api::admission::GROUP;
                objects
                    .follow(
                        &info,
                        |listed| {
                            let names: Vec<&str> = listed.iter().filter_map(meta::name).collect();
                            if let Some(kind) = Kind::of(&info.plural) {
                                admission.policies.retain(kind, &names);
                                return;
                            }
                            if !plugins {
                                return;
                            }
                            let stale: Vec<(String, String)> = admission
                                .snapshot()
                                .dynamic
                                .iter()
                                .filter(|(n, _)| !names.contains(&n.as_str()))
                                .map(|(n, a)| (n.clone(), a.uid.clone()))
                                .collect();
                            for (name, uid) in stale {
                                admission.remove(&name, &uid);
                            }
                        },
                        |obj, deleted| {
                            let (objects, info) = (objects.clone(), info.clone());
                            async move { apply(&objects, &info, &obj, deleted).await }
                        },
                    )
                    .await
            }
        });
        let shadows = record_shadows(objects.clone(), admission.clone());
        tokio::join!(futures::future::join_all(loops), shadows);
    })
}

/// How often each replica adds its shadow counts to the plugins' status.
const SHADOW_STATUS_PERIOD: Duration = Duration::from_secs(2);

/// Adds this replica's shadow counts and disagreements to each plugin's
/// `status.shadow`, every [`SHADOW_STATUS_PERIOD`] when there are any
/// (read-modify-write, so replicas add up rather than overwrite).
async fn record_shadows(objects: Objects, admission: Arc<crate::admission::Admission>) {
    let info = plugin_info(&objects);
    let ctx = crate::options::WriteOptions::system("admission-controller");
    loop {
        tokio::time::sleep(SHADOW_STATUS_PERIOD).await;
        for (name, stats, digest) in admission.shadows() {
            let pending = stats.take();
            if pending.is_empty() {
                continue;
            }
            let result = objects
                .guaranteed_update(&info, None, &name, Some("status"), &ctx, |cur| {
                    let digest = digest.clone().unwrap_or_else(|| {
                        cur["status"]["shadow"]["digest"]
                            .as_str()
                            .unwrap_or_default()
                            .trim_start_matches("sha256:")
                            .to_string()
                    });
                    let mut new = cur.clone();
                    new["status"]["shadow"] =
                        shadow::merged_status(&cur["status"]["shadow"], &pending, &digest);
                    Ok(new)
                })
                .await;
            match result {
                Ok(_) | Err(wasm_apiserver_api::ApiError::NotFound(_)) => {}
                Err(e) => {
                    tracing::debug!(plugin = %name, error = %e, "could not record shadow status");
                    stats.give_back(pending);
                }
            }
        }
    }
}

async fn apply(objects: &Objects, info: &Resource, obj: &Value, deleted: bool) {
    let Some(admission) = &objects.admission else {
        return;
    };
    if let Some(kind) = Kind::of(&info.plural).filter(|_| info.group == vap::GROUP) {
        reconcile_policy(objects, kind, obj, deleted).await;
    } else if info.group == webhook::GROUP {
        reconcile_webhooks(objects, &info.plural, obj, deleted);
    } else if deleted {
        admission.remove(
            meta::name(obj).unwrap_or_default(),
            meta::str_field(obj, "uid").unwrap_or_default(),
        );
    } else {
        reconcile(objects, obj).await;
    }
}

/// Loads the plugins of `--admission-control-config-file`: YAML documents
/// (or a `List`) of `AdmissionPlugin` objects.
pub async fn load_config_file(
    admission: &Admission,
    path: &std::path::Path,
) -> anyhow::Result<usize> {
    use serde::Deserialize;
    let text = tokio::fs::read_to_string(path).await?;
    let mut count = 0;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc)?;
        let items = match v.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None if v.is_null() => continue,
            None => vec![v],
        };
        for item in items {
            let name = meta::name(&item).ok_or_else(|| {
                anyhow::anyhow!("{}: a plugin without metadata.name", path.display())
            })?;
            let spec = PluginSpec::parse(&item["spec"])
                .map_err(|e| anyhow::anyhow!("{}: plugin {name}: {e}", path.display()))?;
            let active = admission
                .load(name, spec, 0)
                .await
                .map_err(|e| anyhow::anyhow!("{}: plugin {name}: {e}", path.display()))?;
            admission.install_static(active);
            count += 1;
        }
    }
    Ok(count)
}

/// Turns one webhook configuration object into chain entries.
pub fn webhook_entries(config: &Value, mutating: bool) -> Result<Vec<Active>, String> {
    let config_name = wasm_apiserver_api::meta::name(config).unwrap_or_default();
    let mut out = Vec::new();
    for (i, w) in config["webhooks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let name = w["name"]
            .as_str()
            .ok_or_else(|| format!("webhooks[{i}].name is required"))?;
        let url = w["clientConfig"]["url"].as_str().ok_or_else(|| {
            format!(
                "webhooks[{i}].clientConfig.url is required (service references are not supported)"
            )
        })?;
        let timeout = Duration::from_secs(w["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30));
        let hook = Webhook::new(
            url,
            w["clientConfig"]["caBundle"].as_str().unwrap_or(""),
            timeout,
        )
        .map_err(|e| format!("webhooks[{i}]: {e}"))?;
        let parse = |k: &str| -> Result<Option<Selector>, String> {
            match w.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => serde_json::from_value(v.clone())
                    .map(Some)
                    .map_err(|e| format!("webhooks[{i}].{k}: {e}")),
            }
        };
        let rules: Vec<Rule> = serde_json::from_value(w["rules"].clone()).unwrap_or_default();
        let failure_policy = match w["failurePolicy"].as_str() {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        };
        out.push(Active::new(
            format!("{config_name}/{name}"),
            vec![if mutating {
                Phase::Mutating
            } else {
                Phase::Validating
            }],
            i as i32,
            rules,
            parse("namespaceSelector")?,
            parse("objectSelector")?,
            failure_policy,
            Mode::Deny,
            0,
            Backend::Webhook(Arc::new(hook)),
        )?);
    }
    Ok(out)
}
