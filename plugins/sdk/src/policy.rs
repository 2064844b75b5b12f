//! The `Policy` trait and its export.

use serde::de::DeserializeOwned;

use crate::admission::{AdmissionRequest, AdmissionResponse};
use crate::{Request, Response, parse_config};

/// An admission policy: its configuration type and its two phases.
///
/// Both phases default to allowing, so a validating policy writes only
/// `validate` and a mutating one only `mutate`. The server runs `mutate`
/// (of every mutating plugin) first, then `validate` on the result.
pub trait Policy {
    /// The configuration (`spec.config` of the AdmissionPlugin), parsed
    /// with [`parse_config`]: empty text is `Default`.
    type Config: DeserializeOwned + Default;

    /// Checks a parsed configuration beyond what its type says; runs at
    /// load time (`check-config`).
    fn check(_config: &Self::Config) -> Result<(), String> {
        Ok(())
    }

    /// The validating phase (a patch here is an error).
    fn validate(_config: &Self::Config, _request: &Request) -> Response {
        Response::allow()
    }

    /// The mutating phase.
    fn mutate(_config: &Self::Config, _request: &Request) -> Response {
        Response::allow()
    }
}

/// Parses and checks a configuration: what `check-config` answers.
pub fn configure<P: Policy>(config: &str) -> Result<P::Config, String> {
    let c = parse_config::<P::Config>(config)?;
    P::check(&c)?;
    Ok(c)
}

/// Runs one phase, turning a bad configuration or a request whose JSON
/// does not parse into a denial (500 and 400) instead of a trap.
pub fn run<P: Policy>(
    config: &str,
    request: AdmissionRequest,
    phase: fn(&P::Config, &Request) -> Response,
) -> Response {
    let config = match configure::<P>(config) {
        Ok(c) => c,
        Err(e) => return Response::deny(e).code(500).reason("InternalError"),
    };
    match Request::new(request) {
        Ok(req) => phase(&config, &req),
        Err(e) => Response::deny(e).code(400).reason("BadRequest"),
    }
}

#[doc(hidden)]
pub fn guest_validate<P: Policy>(config: String, request: AdmissionRequest) -> AdmissionResponse {
    let r = run::<P>(&config, request, P::validate);
    r.into_wit()
}

#[doc(hidden)]
pub fn guest_mutate<P: Policy>(config: String, request: AdmissionRequest) -> AdmissionResponse {
    run::<P>(&config, request, P::mutate).into_wit()
}

/// Exports a [`Policy`] as the component's `admission` interface.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[allow(dead_code)] // natively (tests) nothing is exported
        struct __WasmApiserverPolicyGuest;
        impl $crate::admission::Guest for __WasmApiserverPolicyGuest {
            fn check_config(
                config: ::std::string::String,
            ) -> ::std::result::Result<(), ::std::string::String> {
                $crate::policy::configure::<$policy>(&config).map(|_| ())
            }
            fn validate(
                config: ::std::string::String,
                request: $crate::admission::AdmissionRequest,
            ) -> $crate::admission::AdmissionResponse {
                $crate::policy::guest_validate::<$policy>(config, request)
            }
            fn mutate(
                config: ::std::string::String,
                request: $crate::admission::AdmissionRequest,
            ) -> $crate::admission::AdmissionResponse {
                $crate::policy::guest_mutate::<$policy>(config, request)
            }
        }
        // Component exports only in the wasm build: the native build (the
        // policy's own `cargo test`) links no `wasm-apiserver:plugin/...`
        // symbols.
        #[cfg(target_arch = "wasm32")]
        $crate::export_admission!(__WasmApiserverPolicyGuest);
    };
}
