//! HorizontalPodAutoscalers, served as `autoscaling/v1` and `autoscaling/v2`
//! from one stored form (v2, upstream's storage version), converted as
//! upstream converts them: v1's `targetCPUUtilizationPercentage` is v2's
//! CPU `Utilization` resource metric, and v1's `currentCPUUtilizationPercentage`
//! the matching current metric. What v1 cannot say (other metrics,
//! `behavior`, conditions, other current metrics) travels in the
//! annotations upstream uses for it (`autoscaling.alpha.kubernetes.io/...`),
//! so a v2 object read and written back through v1 loses nothing.

use crate::strategy::Strategy;
use serde_json::{Map, Value, json};
use wasm_apiserver_api::{ApiError, ResourceInfo};

type Result<T> = std::result::Result<T, ApiError>;

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";

/// The HPA strategy (both versions).
pub struct Hpa;

fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && m["resource"]["target"]["type"] == "Utilization"
}

fn annotations(obj: &mut Value) -> &mut Map<String, Value> {
    let meta = obj
        .as_object_mut()
        .expect("an object")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    let ann = meta
        .as_object_mut()
        .expect("metadata is an object")
        .entry("annotations")
        .or_insert_with(|| json!({}));
    ann.as_object_mut().expect("annotations are an object")
}

/// Moves `value` (if any and not empty) into annotation `key` as JSON.
fn stash(obj: &mut Value, key: &str, value: Option<Value>) {
    match value.filter(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty())) {
        Some(v) => {
            annotations(obj).insert(key.into(), json!(v.to_string()));
        }
        None => {
            annotations(obj).remove(key);
        }
    }
}

/// Takes annotation `key` back as JSON.
fn unstash(obj: &mut Value, key: &str) -> Option<Value> {
    // `get_mut`, not indexing: indexing would insert nulls.
    let text = obj
        .get_mut("metadata")?
        .get_mut("annotations")?
        .as_object_mut()?
        .remove(key)?;
    serde_json::from_str(text.as_str()?).ok()
}

fn tidy_annotations(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
}

/// The fields `keys` of `v` that it has, as a new object.
fn pick(v: &Value, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| Some((k.to_string(), v.get(*k)?.clone())))
        .collect()
}

const SPEC_KEYS: &[&str] = &["scaleTargetRef", "minReplicas", "maxReplicas"];
const STATUS_KEYS: &[&str] = &[
    "observedGeneration",
    "lastScaleTime",
    "currentReplicas",
    "desiredReplicas",
];

/// The v1 form of a v2 HPA.
pub fn to_v1(v2: &Value) -> Value {
    let mut out = v2.clone();
    out["apiVersion"] = json!("autoscaling/v1");
    let spec = v2["spec"].clone();
    let metrics: Vec<Value> = spec["metrics"].as_array().cloned().unwrap_or_default();
    let (cpu, others): (Vec<Value>, Vec<Value>) = metrics.into_iter().partition(is_cpu_utilization);
    let mut s = pick(&spec, SPEC_KEYS);
    if let Some(u) = cpu
        .first()
        .map(|m| m["resource"]["target"]["averageUtilization"].clone())
    {
        s.insert("targetCPUUtilizationPercentage".into(), u);
    }
    out["spec"] = Value::Object(s);
    stash(&mut out, METRICS, Some(Value::Array(others)));
    stash(&mut out, BEHAVIOR, spec.get("behavior").cloned());
    if let Some(status) = v2.get("status").filter(|s| s.is_object()) {
        let current: Vec<Value> = status["currentMetrics"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let (cpu, others): (Vec<Value>, Vec<Value>) = current
            .into_iter()
            .partition(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu");
        let mut st = pick(status, STATUS_KEYS);
        if let Some(u) = cpu
            .first()
            .map(|m| m["resource"]["current"]["averageUtilization"].clone())
            .filter(|u| !u.is_null())
        {
            st.insert("currentCPUUtilizationPercentage".into(), u);
        }
        out["status"] = Value::Object(st);
        stash(&mut out, CURRENT_METRICS, Some(Value::Array(others)));
        stash(&mut out, CONDITIONS, status.get("conditions").cloned());
    }
    tidy_annotations(&mut out);
    out
}

/// The v2 form of a v1 HPA.
pub fn to_v2(v1: &Value) -> Value {
    let mut out = v1.clone();
    out["apiVersion"] = json!("autoscaling/v2");
    let spec = v1["spec"].clone();
    let mut s = pick(&spec, SPEC_KEYS);
    let mut metrics = Vec::new();
    if let Some(u) = spec
        .get("targetCPUUtilizationPercentage")
        .filter(|u| !u.is_null())
    {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": u}}}));
    }
    if let Some(Value::Array(more)) = unstash(&mut out, METRICS) {
        metrics.extend(more);
    }
    if !metrics.is_empty() {
        s.insert("metrics".into(), Value::Array(metrics));
    }
    if let Some(b) = unstash(&mut out, BEHAVIOR) {
        s.insert("behavior".into(), b);
    }
    out["spec"] = Value::Object(s);
    let current_more = unstash(&mut out, CURRENT_METRICS);
    let conditions = unstash(&mut out, CONDITIONS);
    if let Some(status) = v1.get("status").filter(|s| s.is_object()) {
        let mut st = pick(status, STATUS_KEYS);
        let mut current = Vec::new();
        if let Some(u) = status
            .get("currentCPUUtilizationPercentage")
            .filter(|u| !u.is_null())
        {
            current.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": u}}}));
        }
        if let Some(Value::Array(more)) = current_more {
            current.extend(more);
        }
        if !current.is_empty() {
            st.insert("currentMetrics".into(), Value::Array(current));
        }
        if let Some(c) = conditions {
            st.insert("conditions".into(), c);
        }
        out["status"] = Value::Object(st);
    }
    tidy_annotations(&mut out);
    out
}

#[async_trait::async_trait]
impl Strategy for Hpa {
    async fn present(&self, info: &ResourceInfo, objs: &mut [Value]) -> Result<()> {
        for obj in objs {
            let stored = obj["apiVersion"].as_str().unwrap_or_default().to_string();
            *obj = match (info.version.as_str(), stored.as_str()) {
                ("v1", "autoscaling/v2") => to_v1(obj),
                ("v2", "autoscaling/v1") => to_v2(obj),
                _ => continue,
            };
        }
        Ok(())
    }

    async fn to_storage(&self, info: &ResourceInfo, obj: &Value) -> Result<Option<Value>> {
        Ok((info.version == "v1").then(|| to_v2(obj)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_round_trips_through_v1() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}},
            "status": {"currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40}}}]}});
        let v1 = to_v1(&v2);
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert!(v1["spec"].get("metrics").is_none());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 40);
        assert!(
            v1["metadata"]["annotations"][METRICS]
                .as_str()
                .unwrap()
                .contains("memory")
        );
        assert_eq!(to_v2(&v1), v2);
    }

    #[test]
    fn v1_without_a_target_has_no_metrics() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "a"}, "spec": {"maxReplicas": 3,
                "scaleTargetRef": {"kind": "Deployment", "name": "a"}}});
        let v2 = to_v2(&v1);
        assert!(v2["spec"].get("metrics").is_none());
        assert_eq!(to_v1(&v2), v1);
    }
}
