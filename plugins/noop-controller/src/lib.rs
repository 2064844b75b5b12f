//! `noop-controller` (benchmark fixture): reconciles without reading or
//! writing anything, so what a reconcile costs is the host's own work
//! (queue, sandbox, call).

use wasm_apiserver_controller_sdk::{Action, Controller, Request, export_controller};

#[derive(serde::Deserialize, Default)]
struct Config {}

struct Noop;

impl Controller for Noop {
    type Config = Config;

    fn reconcile(_config: &Config, _req: &Request) -> Result<Action, String> {
        Ok(Action::Done)
    }
}

export_controller!(Noop);
