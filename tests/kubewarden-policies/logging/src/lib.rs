//! `kw-logging`: a Kubewarden policy that logs, as Kubewarden's own
//! policies do, through the SDK's slog drain (`KubewardenDrain`, the
//! `kubewarden/tracing/log` host capability) at every level, with
//! structured fields, then accepts. Under a host without that capability
//! the drain's error makes slog's `Fuse` panic, which traps the policy.
//!
//! No settings.

use kubewarden_policy_sdk::logging::KubewardenDrain;
use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{accept_request, protocol_version_guest, validate_settings};
use serde::{Deserialize, Serialize};
use slog::{Logger, debug, error, info, o, warn};

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
struct Settings {}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

fn validate(payload: &[u8]) -> CallResult {
    let log = Logger::root(KubewardenDrain::new(), o!("policy" => "kw-logging"));
    let request = ValidationRequest::<Settings>::new(payload)?;
    let name = request.request.name.clone();
    debug!(log, "debug line"; "object" => &name);
    info!(log, "info line"; "object" => &name);
    warn!(log, "warning line"; "object" => &name);
    error!(log, "error line"; "object" => &name);
    accept_request()
}
