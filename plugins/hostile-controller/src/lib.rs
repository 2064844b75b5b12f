//! `hostile-controller` (test fixture): reconciles ConfigMaps by name.
//! `loop-*` spins forever, `bomb-*` allocates until its memory limit kills
//! it, `trap-*` panics, `fail-*` answers an error, `flood-*` applies 10,000
//! ConfigMaps (`made-<name>-<i>`) in one `apply-all` and fails with how many
//! the server made and its first refusal; any other ConfigMap gets
//! the annotation `reconciled-by: <config.mark>` (default `hostile`) by
//! server-side apply, so a test can see which keys were reconciled and by
//! which version.

use wasm_apiserver_controller_sdk::{
    Action, Controller, Request, apply, apply_all, export_controller, json,
};

#[derive(serde::Deserialize)]
struct Config {
    #[serde(default = "mark")]
    mark: String,
}

fn mark() -> String {
    "hostile".into()
}

impl Default for Config {
    fn default() -> Self {
        Config { mark: mark() }
    }
}

struct Hostile;

impl Controller for Hostile {
    type Config = Config;

    fn reconcile(config: &Config, req: &Request) -> Result<Action, String> {
        let name = req.name.as_str();
        if name.starts_with("loop-") {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        if name.starts_with("bomb-") {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        if name.starts_with("trap-") {
            panic!("trapping on purpose for {name}");
        }
        if name.starts_with("fail-") {
            return Err(format!("failing on purpose for {name}"));
        }
        if req.get()?.is_none() {
            return Ok(Action::Done);
        }
        if name.starts_with("flood-") {
            let flood: Vec<_> = (0..10_000)
                .map(|i| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("made-{name}-{i}"), "namespace": req.namespace}})
                })
                .collect();
            let results = apply_all(&flood);
            let made = results.iter().filter(|r| r.is_ok()).count();
            let refused = results
                .iter()
                .find_map(|r| r.as_ref().err().map(|e| e.to_string()));
            return Err(format!(
                "flooded: {made} made; first refusal: {}",
                refused.unwrap_or_default()
            ));
        }
        apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": req.namespace,
                "annotations": {"reconciled-by": config.mark}},
        }))?;
        Ok(Action::Done)
    }
}

export_controller!(Hostile);
