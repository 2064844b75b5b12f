//! Request bodies as the server decodes them
//! (`wasm_apiserver_api::request::decode_body`): JSON and YAML (aliases
//! included) into the JSON object handlers work on.

use wasm_apiserver_api::request::decode_body;

/// The media types the first input byte picks from (the rest is the body).
const MEDIA: &[&str] = &["application/json", "application/yaml", "text/yaml", ""];

/// A body decodes or is refused with a 400 without panicking or overflowing
/// the server's stack (deep nesting, alias bombs); what decodes is an object
/// that survives a round trip through its JSON text, and a YAML body decodes
/// as JSON to the same object.
pub fn decode(data: &[u8]) {
    let Some((&m, body)) = data.split_first() else {
        return;
    };
    let media = MEDIA[usize::from(m) % MEDIA.len()];
    crate::on_server_stack(|| {
        let obj = match decode_body(media, body) {
            Ok(obj) => obj,
            Err(e) => {
                assert_eq!(e.code(), 400, "{media}: {e}");
                return;
            }
        };
        assert!(obj.is_object(), "{media}: {obj}");
        let text = serde_json::to_vec(&obj).expect("the result serializes");
        let again = decode_body("application/json", &text)
            .unwrap_or_else(|e| panic!("{media}: its JSON text does not decode: {e}"));
        assert_eq!(
            obj, again,
            "{media}: the JSON round trip changed the object"
        );
    });
}
