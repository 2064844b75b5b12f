//! Server-side apply as a registry call ([`Objects::apply`]), shared by the
//! REST handler (`PATCH` with `application/apply-patch+yaml`) and the
//! controllers' clients, so both merge, check conflicts and create absent
//! objects the same way.

use crate::options::WriteOptions;
use crate::resources::Resource;
use crate::store::{Objects, manager, merge_schema};
use serde_json::{Value, json};
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::managed::typed::Schema;
use wasm_apiserver_api::{ApiError, Cause, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// What an apply did.
pub enum Applied {
    /// The object existed and was patched (200).
    Patched(Value),
    /// The object did not exist and was created (201).
    Created(Value),
}

impl Applied {
    pub fn into_object(self) -> Value {
        match self {
            Applied::Patched(o) | Applied::Created(o) => o,
        }
    }
}

/// A 422 naming a required `PatchOptions` field.
pub fn required(field: &str, message: &str) -> ApiError {
    ApiError::Invalid(
        Target::new("meta.k8s.io", "PatchOptions", ""),
        vec![Cause {
            reason: "FieldValueRequired".into(),
            field: field.into(),
            message: message.into(),
        }],
    )
}

impl Objects {
    /// Applies `config` (an applied configuration: a partial object with
    /// `apiVersion` and `kind`) to the object `name` (or its
    /// `subresource`) by `opts.field_manager`, creating the object when it
    /// is absent. `force` takes over fields other managers own; without it
    /// such fields are a 409 `Conflict` naming them.
    #[allow(clippy::too_many_arguments)]
    pub async fn apply(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        config: &Value,
        force: bool,
        opts: &mut WriteOptions,
    ) -> Result<Applied> {
        if opts.field_manager.is_empty() {
            return Err(required(
                "fieldManager",
                "Required value: is required for apply patch",
            ));
        }
        if !config.is_object() {
            return Err(ApiError::BadRequest(
                "the applied configuration must be an object".into(),
            ));
        }
        let (api_version, kind) = (info.api_version(), info.kind.clone());
        // A subresource with its own kind (`scale`: autoscaling/v1 Scale) is
        // applied in that kind, with its schema.
        let own_kind = subresource
            .and_then(|s| info.find_subresource(s))
            .filter(|s| s.kind != kind);
        let (want_version, want_kind) = match own_kind {
            Some(s) if s.group.is_empty() => (s.version.clone(), s.kind.clone()),
            Some(s) => (format!("{}/{}", s.group, s.version), s.kind.clone()),
            None => (api_version.clone(), kind.clone()),
        };
        for (field, want) in [("apiVersion", want_version.as_str()), ("kind", &want_kind)] {
            match config.get(field).and_then(Value::as_str) {
                None => {
                    return Err(required(
                        field,
                        "Required value: must be set in an applied configuration",
                    ));
                }
                Some(got) if got != want => {
                    return Err(ApiError::BadRequest(format!(
                        "{field} {got:?} does not match the resource's {want:?}"
                    )));
                }
                Some(_) => {}
            }
        }
        if let Some(n) = meta::name(config).filter(|n| *n != name) {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        opts.patching = true;
        opts.applying = true;
        opts.forcing = force;
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let schema = match own_kind {
            Some(s) => {
                let group = if s.group.is_empty() {
                    "core"
                } else {
                    s.group.as_str()
                };
                let def = format!("io.k8s.api.{group}.{}.{}", s.version, s.kind);
                Schema(wasm_apiserver_api::openapi::definitions::builtin().get(&def)).resolved()
            }
            None => merge_schema(info),
        };
        // An applied configuration naming one list item twice has no
        // single merge (upstream: "duplicate entries for key"): a 422
        // naming each, never a silent pick of one of them.
        let duplicates = wasm_apiserver_api::managed::typed::duplicates(config, schema);
        if !duplicates.is_empty() {
            let kind = config["kind"].as_str().unwrap_or_default();
            return Err(ApiError::Invalid(
                Target::new(&info.group, kind, name),
                duplicates
                    .into_iter()
                    .map(|(field, message)| Cause {
                        reason: "FieldValueDuplicate".into(),
                        field: field.trim_start_matches('.').to_string(),
                        message,
                    })
                    .collect(),
            ));
        }
        let conflict = |c: wasm_apiserver_api::managed::Conflicts| ApiError::Custom {
            code: 409,
            reason: "Conflict".into(),
            message: c.message(),
            causes: c.0,
        };
        let apply = |cur: &Value| -> Result<Value> {
            let m = manager(info, subresource, opts, &api_version, &now);
            wasm_apiserver_api::managed::apply(Some(cur), config, schema, &m, force)
                .map_err(conflict)
        };
        let patched = self.patch(info, ns, name, subresource, &apply, opts).await;
        match patched {
            Ok(obj) => Ok(Applied::Patched(obj)),
            Err(ApiError::NotFound(_)) if subresource.is_none() => {
                opts.patching = false;
                let m = manager(info, None, opts, &api_version, &now);
                let mut obj = wasm_apiserver_api::managed::apply(None, config, schema, &m, force)
                    .map_err(conflict)?;
                meta::metadata_mut(&mut obj).insert("name".into(), json!(name));
                Ok(Applied::Created(self.create(info, ns, obj, opts).await?))
            }
            Err(e) => Err(e),
        }
    }
}
