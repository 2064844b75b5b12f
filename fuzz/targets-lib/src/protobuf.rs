//! The Kubernetes protobuf request decoder (`k8s\0` + `runtime.Unknown`).

use wasm_apiserver_api::protobuf;

/// A body decodes or is refused without panicking or overflowing the
/// server's stack; what decodes is an object of a kind protobuf supports,
/// its `apiVersion` and `kind` those of the envelope.
pub fn decode(data: &[u8]) {
    crate::on_server_stack(|| {
        let Ok(obj) = protobuf::decode(data) else {
            return;
        };
        let api_version = obj["apiVersion"].as_str().expect("apiVersion is set");
        let kind = obj["kind"].as_str().expect("kind is set");
        assert!(
            protobuf::supports(api_version, kind),
            "{api_version} {kind}"
        );
        serde_json::to_vec(&obj).expect("the result serializes");
    });
}
