//! The controller world (package 0.3.0) on real components: a reconcile's
//! reads and writes reach the host's `Cluster` and `Writes`, a refused
//! write's status reaches the guest, the per-reconcile write budget holds,
//! hostile reconciles fail alone with the right error, and components of
//! other worlds are refused.

use crate::common;

use common::{access, wasm};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use wasm_apiserver_plugins::writes::{DeleteOptions, PatchKind, WriteAccess, WriteError, Writes};
use wasm_apiserver_plugins::{
    Gvr, Limits, Outcome, PluginError, ReconcileReason, ReconcileRequest, Runtime, RuntimeConfig,
    Target,
};

/// Records every write; refuses kinds listed in `refuse` with 403.
#[derive(Default)]
struct Recorder {
    writes: Mutex<Vec<(String, String, Value)>>,
    refuse: Vec<&'static str>,
}

fn kind(t: &Target) -> String {
    match t {
        Target::Kind { kind, .. } => kind.clone(),
        Target::Resource { resource, .. } => resource.clone(),
    }
}

#[async_trait::async_trait]
impl Writes for Recorder {
    async fn create(&self, t: &Target, _ns: Option<&str>, o: Value) -> Result<Value, WriteError> {
        self.record("create", t, o)
    }
    async fn update(&self, t: &Target, o: Value, _s: Option<&str>) -> Result<Value, WriteError> {
        self.record("update", t, o)
    }
    async fn patch(
        &self,
        t: &Target,
        _ns: Option<&str>,
        _n: &str,
        _k: PatchKind,
        p: Value,
        _s: Option<&str>,
    ) -> Result<Value, WriteError> {
        self.record("patch", t, p)
    }
    async fn apply(
        &self,
        t: &Target,
        o: Value,
        force: bool,
        _s: Option<&str>,
    ) -> Result<Value, WriteError> {
        assert!(force, "the SDK applies with ownership forced");
        self.record("apply", t, o)
    }
    async fn delete(
        &self,
        t: &Target,
        _ns: Option<&str>,
        n: &str,
        _o: &DeleteOptions,
    ) -> Result<(), WriteError> {
        self.record("delete", t, json!({"name": n})).map(drop)
    }
    async fn event(&self, regarding: &Value, warning: bool, reason: &str, note: &str) {
        let _ = self.record(
            "event",
            &Target::Kind { api_version: "v1".into(), kind: "Event".into() },
            json!({"regarding": regarding["metadata"]["name"], "warning": warning, "reason": reason, "note": note}),
        );
    }
}

impl Recorder {
    fn record(&self, verb: &str, t: &Target, o: Value) -> Result<Value, WriteError> {
        let k = kind(t);
        if self.refuse.contains(&k.as_str()) {
            return Err(WriteError::new(
                403,
                "Forbidden",
                format!("{k} is forbidden to this controller"),
            ));
        }
        self.writes
            .lock()
            .unwrap()
            .push((verb.into(), k, o.clone()));
        Ok(o)
    }

    fn verbs(&self) -> Vec<(String, String)> {
        self.writes
            .lock()
            .unwrap()
            .iter()
            .map(|(v, k, _)| (v.clone(), k.clone()))
            .collect()
    }
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        max_instances: 16,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn namespace(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "uid": "u1", "labels": labels}})
}

fn key(resource: &str, ns: Option<&str>, name: &str) -> ReconcileRequest {
    ReconcileRequest {
        uid: "t".into(),
        resource: Gvr {
            group: String::new(),
            version: "v1".into(),
            resource: resource.into(),
        },
        namespace: ns.map(String::from),
        name: name.into(),
        reason: ReconcileReason::Changed,
        retries: 0,
    }
}

async fn load(
    runtime: &Runtime,
    name: &str,
    fixtures: Vec<Value>,
    writes: Arc<Recorder>,
    max_writes: u32,
    limits: Limits,
) -> Result<wasm_apiserver_plugins::ControllerPlugin, PluginError> {
    let mut cluster = access(fixtures, &[], 64, 1 << 20);
    cluster.all_kinds = true;
    runtime
        .load_controller(
            name,
            &wasm(name),
            "",
            limits,
            cluster,
            WriteAccess { writes, max_writes },
        )
        .await
}

#[tokio::test]
async fn a_reconcile_reads_and_writes_through_the_host() {
    let runtime = runtime();
    let rec = Arc::new(Recorder::default());
    let ctl = load(
        &runtime,
        "namespace_defaults",
        vec![namespace(json!({"tenant": "a"}))],
        rec.clone(),
        64,
        Limits::default(),
    )
    .await
    .expect("load");
    let out = ctl
        .reconcile(&key("namespaces", None, "team-a"))
        .await
        .expect("call");
    assert_eq!(out, Ok(Outcome::Done));
    assert_eq!(
        rec.verbs(),
        [
            ("apply".into(), "NetworkPolicy".into()),
            ("apply".into(), "ResourceQuota".into()),
            ("apply".into(), "RoleBinding".into())
        ]
    );
    let writes = rec.writes.lock().unwrap().clone();
    assert_eq!(writes[0].2["metadata"]["ownerReferences"][0]["uid"], "u1");
    // An absent namespace: nothing read, nothing written.
    let rec2 = Arc::new(Recorder::default());
    let ctl = load(
        &runtime,
        "namespace_defaults",
        vec![],
        rec2.clone(),
        64,
        Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        ctl.reconcile(&key("namespaces", None, "gone"))
            .await
            .unwrap(),
        Ok(Outcome::Done)
    );
    assert!(rec2.verbs().is_empty());
}

#[tokio::test]
async fn a_refused_write_reaches_the_guest_as_a_status_and_the_budget_holds() {
    let runtime = runtime();
    let rec = Arc::new(Recorder {
        refuse: vec!["ResourceQuota"],
        ..Default::default()
    });
    let ctl = load(
        &runtime,
        "namespace_defaults",
        vec![namespace(json!({"tenant": "a"}))],
        rec.clone(),
        64,
        Limits::default(),
    )
    .await
    .unwrap();
    let err = ctl
        .reconcile(&key("namespaces", None, "team-a"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        err.contains("Forbidden (403)") && err.contains("ResourceQuota is forbidden"),
        "{err}"
    );
    // The controller recorded a Warning Event about it (an event is a write too).
    let events: Vec<Value> = rec
        .writes
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.0 == "event")
        .map(|w| w.2.clone())
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["reason"], "GenerateFailed");
    assert_eq!(events[0]["warning"], true);

    // Two writes per reconcile: the third is refused by the host.
    let rec = Arc::new(Recorder::default());
    let ctl = load(
        &runtime,
        "namespace_defaults",
        vec![namespace(json!({"tenant": "a"}))],
        rec.clone(),
        2,
        Limits::default(),
    )
    .await
    .unwrap();
    let err = ctl
        .reconcile(&key("namespaces", None, "team-a"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.contains("more than 2 writes in one reconcile"), "{err}");
    assert_eq!(rec.verbs().len(), 2);
}

#[tokio::test]
async fn hostile_reconciles_fail_alone_with_their_own_error() {
    let runtime = runtime();
    let rec = Arc::new(Recorder::default());
    let limits = Limits {
        timeout: std::time::Duration::from_millis(300),
        max_memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let cm = |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "d"}});
    let ctl = load(
        &runtime,
        "hostile_controller",
        vec![cm("ok-1")],
        rec.clone(),
        64,
        limits,
    )
    .await
    .unwrap();
    let run = |name: &'static str| {
        let ctl = ctl.clone();
        async move { ctl.reconcile(&key("configmaps", Some("d"), name)).await }
    };
    let (looped, bombed, trapped, failed, fine) = tokio::join!(
        run("loop-1"),
        run("bomb-1"),
        run("trap-1"),
        run("fail-1"),
        run("ok-1")
    );
    assert!(
        matches!(looped, Err(PluginError::Timeout { .. })),
        "{looped:?}"
    );
    assert!(
        matches!(bombed, Err(PluginError::MemoryExceeded { .. })),
        "{bombed:?}"
    );
    assert!(
        matches!(trapped, Err(PluginError::Trap { .. })),
        "{trapped:?}"
    );
    assert!(failed.unwrap().unwrap_err().contains("failing on purpose"));
    assert_eq!(fine.unwrap(), Ok(Outcome::Done));
    assert_eq!(rec.verbs(), [("apply".into(), "ConfigMap".into())]);
}

#[tokio::test]
async fn components_of_other_worlds_are_refused() {
    let runtime = runtime();
    let err = load(
        &runtime,
        "require_labels",
        vec![],
        Arc::new(Recorder::default()),
        64,
        Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
    let err = runtime
        .load_admission("c", &wasm("noop_controller"), "", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
    // The no-op controller loads and does nothing.
    let rec = Arc::new(Recorder::default());
    let ctl = load(
        &runtime,
        "noop_controller",
        vec![],
        rec.clone(),
        64,
        Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        ctl.reconcile(&key("configmaps", Some("d"), "x"))
            .await
            .unwrap(),
        Ok(Outcome::Done)
    );
    assert!(rec.verbs().is_empty());
}
