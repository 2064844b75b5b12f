//! Plugin modules published as OCI artifacts (`spec.module.image`): the
//! wasm layer of an image, as Kubewarden (`kwctl push`), wasm-to-oci and
//! the CNCF wasm OCI artifact layout publish them, pulled with
//! **oci-client** (the OCI distribution API: token auth, manifest and blob
//! digests checked). Anonymous pulls only; HTTPS, or plain HTTP for the
//! registries the server names insecure (a registry on loopback in tests).

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// Layer media types of a wasm module.
const WASM_LAYERS: &[&str] = &[
    // wasm-to-oci and Kubewarden's policies.
    "application/vnd.wasm.content.layer.v1+wasm",
    // The CNCF TAG runtime's wasm OCI artifact layout (wkg, oci-wasm).
    "application/wasm",
    "application/vnd.bytecodealliance.wasm.component.layer.v0+wasm",
];

/// Most bytes of a pulled module.
const MAX_MODULE_BYTES: usize = 256 << 20;

/// Pulls the wasm module of `image`; the error says what failed.
pub async fn pull(image: &str, insecure: &[String]) -> Result<Vec<u8>, String> {
    let reference: Reference = image
        .parse()
        .map_err(|e| format!("spec.module.image {image:?}: {e}"))?;
    // reqwest's rustls takes the process's default provider: ring, as the
    // rest of the server uses (a second install is refused harmlessly).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(insecure.to_vec()),
        ..Default::default()
    });
    let data = client
        .pull(&reference, &RegistryAuth::Anonymous, WASM_LAYERS.to_vec())
        .await
        .map_err(|e| format!("spec.module.image {image:?}: pulling: {e}"))?;
    let mut layers = data.layers.into_iter();
    match (layers.next(), layers.next()) {
        (Some(layer), None) if layer.data.len() <= MAX_MODULE_BYTES => Ok(layer.data.to_vec()),
        (Some(layer), None) => Err(format!(
            "spec.module.image {image:?}: the module is {} bytes, more than {MAX_MODULE_BYTES}",
            layer.data.len()
        )),
        (None, _) => Err(format!(
            "spec.module.image {image:?}: the image has no wasm layer"
        )),
        (Some(_), Some(_)) => Err(format!(
            "spec.module.image {image:?}: the image has more than one wasm layer"
        )),
    }
}
