//! The protobuf form of the OpenAPI v2 document
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), which
//! kubectl 1.27 and 1.28 ask `/openapi/v2` for and accept nothing else in
//! place of. The messages are gnostic's `openapi.v2.Document` (field numbers
//! from its `OpenAPIv2.proto`); extensions and defaults travel as YAML text
//! (`Any.yaml`), for which JSON text serves, YAML being a superset of it.
//! Only what the JSON document holds is encoded.

use serde_json::{Map, Value};

/// The media type kubectl asks for (`@` is not valid in a Content-Type).
pub const MEDIA_TYPE: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The Content-Type of the answer, as upstream writes it.
pub const CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }

    fn key(&mut self, tag: u32, wire: u64) {
        self.varint(u64::from(tag) << 3 | wire);
    }

    fn bytes(&mut self, tag: u32, b: &[u8]) {
        self.key(tag, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn str(&mut self, tag: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(tag, s.as_bytes());
        }
    }

    fn msg(&mut self, tag: u32, m: Msg) {
        self.bytes(tag, &m.0);
    }

    fn bool(&mut self, tag: u32, b: bool) {
        if b {
            self.key(tag, 0);
            self.varint(1);
        }
    }

    fn int(&mut self, tag: u32, v: i64) {
        self.key(tag, 0);
        self.varint(v as u64);
    }

    fn double(&mut self, tag: u32, v: f64) {
        self.key(tag, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

/// `Any { yaml = 2 }`.
fn any(v: &Value) -> Msg {
    let mut m = Msg::default();
    m.str(2, &v.to_string());
    m
}

/// `NamedAny { name = 1; value = 2 }` for each `x-` key of `obj`.
fn vendor_extensions(m: &mut Msg, tag: u32, obj: &Map<String, Value>) {
    for (k, v) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Msg::default();
        named.str(1, k);
        named.msg(2, any(v));
        m.msg(tag, named);
    }
}

fn strings(m: &mut Msg, tag: u32, v: Option<&Value>) {
    for s in v.and_then(Value::as_array).into_iter().flatten() {
        if let Some(s) = s.as_str() {
            m.bytes(tag, s.as_bytes());
        }
    }
}

/// `Schema`.
fn schema(v: &Value) -> Msg {
    let mut m = Msg::default();
    let Some(obj) = v.as_object() else {
        return m;
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
    m.str(1, text("$ref"));
    m.str(2, text("format"));
    m.str(3, text("title"));
    m.str(4, text("description"));
    if let Some(d) = obj.get("default") {
        m.msg(5, any(d));
    }
    for (k, tag) in [("multipleOf", 6), ("maximum", 7), ("minimum", 9)] {
        if let Some(n) = obj.get(k).and_then(Value::as_f64) {
            m.double(tag, n);
        }
    }
    for (k, tag) in [("exclusiveMaximum", 8), ("exclusiveMinimum", 10)] {
        m.bool(tag, obj.get(k).and_then(Value::as_bool).unwrap_or(false));
    }
    for (k, tag) in [
        ("maxLength", 11),
        ("minLength", 12),
        ("maxItems", 14),
        ("minItems", 15),
        ("maxProperties", 17),
        ("minProperties", 18),
    ] {
        if let Some(n) = obj.get(k).and_then(Value::as_i64) {
            m.int(tag, n);
        }
    }
    m.str(13, text("pattern"));
    m.bool(
        16,
        obj.get("uniqueItems").and_then(Value::as_bool) == Some(true),
    );
    strings(&mut m, 19, obj.get("required"));
    for e in obj
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.msg(20, any(e));
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut item = Msg::default();
            item.key(2, 0);
            item.varint(u64::from(*b));
            m.msg(21, item);
        }
        Some(s @ Value::Object(_)) => {
            let mut item = Msg::default();
            item.msg(1, schema(s));
            m.msg(21, item);
        }
        _ => {}
    }
    match obj.get("type") {
        Some(Value::String(t)) => {
            let mut item = Msg::default();
            item.str(1, t);
            m.msg(22, item);
        }
        Some(types @ Value::Array(_)) => {
            let mut item = Msg::default();
            strings(&mut item, 1, Some(types));
            m.msg(22, item);
        }
        _ => {}
    }
    if let Some(items) = obj.get("items") {
        let mut item = Msg::default();
        match items {
            Value::Array(list) => list.iter().for_each(|s| item.msg(1, schema(s))),
            s => item.msg(1, schema(s)),
        }
        m.msg(23, item);
    }
    for s in obj
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.msg(24, schema(s));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        let mut p = Msg::default();
        for (name, s) in props {
            p.msg(1, named(name, schema(s)));
        }
        m.msg(25, p);
    }
    m.bool(
        27,
        obj.get("readOnly").and_then(Value::as_bool) == Some(true),
    );
    vendor_extensions(&mut m, 31, obj);
    m
}

fn named(name: &str, value: Msg) -> Msg {
    let mut m = Msg::default();
    m.str(1, name);
    m.msg(2, value);
    m
}

/// `ParametersItem { parameter = 1 }` for a query, path or body parameter.
fn parameter(p: &Value) -> Msg {
    let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
    let required = p.get("required").and_then(Value::as_bool) == Some(true);
    let mut param = Msg::default();
    if text("in") == "body" {
        let mut body = Msg::default();
        body.str(1, text("description"));
        body.str(2, text("name"));
        body.str(3, "body");
        body.bool(4, required);
        if let Some(s) = p.get("schema") {
            body.msg(5, schema(s));
        }
        param.msg(1, body);
    } else {
        // Query (3) and path (4) sub-schemas share their first fields;
        // `type` and `uniqueItems` sit one number apart.
        let path = text("in") == "path";
        let mut sub = Msg::default();
        sub.bool(1, required);
        sub.str(2, text("in"));
        sub.str(3, text("description"));
        sub.str(4, text("name"));
        let unique = p.get("uniqueItems").and_then(Value::as_bool) == Some(true);
        if path {
            sub.str(5, text("type"));
            sub.bool(19, unique);
        } else {
            sub.str(6, text("type"));
            sub.bool(20, unique);
        }
        let mut non_body = Msg::default();
        non_body.msg(if path { 4 } else { 3 }, sub);
        param.msg(2, non_body);
    }
    let mut item = Msg::default();
    item.msg(1, param);
    item
}

/// `Operation`.
fn operation(op: &Value) -> Msg {
    let mut m = Msg::default();
    let text = |k: &str| op.get(k).and_then(Value::as_str).unwrap_or_default();
    strings(&mut m, 1, op.get("tags"));
    m.str(3, text("description"));
    m.str(5, text("operationId"));
    strings(&mut m, 6, op.get("produces"));
    strings(&mut m, 7, op.get("consumes"));
    for p in op
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.msg(8, parameter(p));
    }
    if let Some(responses) = op.get("responses").and_then(Value::as_object) {
        let mut rs = Msg::default();
        for (code, r) in responses {
            let mut response = Msg::default();
            response.str(
                1,
                r.get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            );
            if let Some(s) = r.get("schema") {
                let mut item = Msg::default();
                item.msg(1, schema(s));
                response.msg(2, item);
            }
            let mut value = Msg::default();
            value.msg(1, response);
            rs.msg(1, named(code, value));
        }
        m.msg(9, rs);
    }
    if let Some(obj) = op.as_object() {
        vendor_extensions(&mut m, 13, obj);
    }
    m
}

/// Encodes a swagger 2.0 JSON document as gnostic's `openapi.v2.Document`.
pub fn encode_v2(doc: &Value) -> Vec<u8> {
    let mut m = Msg::default();
    m.str(1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Msg::default();
    info.str(1, doc["info"]["title"].as_str().unwrap_or_default());
    info.str(2, doc["info"]["version"].as_str().unwrap_or_default());
    m.msg(2, info);
    let mut paths = Msg::default();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let mut p = Msg::default();
        for (verb, tag) in [
            ("get", 2),
            ("put", 3),
            ("post", 4),
            ("delete", 5),
            ("patch", 8),
        ] {
            if let Some(op) = item.get(verb) {
                p.msg(tag, operation(op));
            }
        }
        paths.msg(2, named(path, p));
    }
    m.msg(8, paths);
    let mut defs = Msg::default();
    for (name, s) in doc["definitions"].as_object().into_iter().flatten() {
        defs.msg(1, named(name, schema(s)));
    }
    m.msg(9, defs);
    m.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Reads the length-delimited fields of one message: `(tag, bytes)`.
    fn fields(mut b: &[u8]) -> Vec<(u32, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let mut out = 0;
            for shift in (0..64).step_by(7) {
                let byte = b[0];
                *b = &b[1..];
                out |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            out
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            match key & 7 {
                0 => {
                    varint(&mut b);
                }
                1 => b = &b[8..],
                _ => {
                    let n = varint(&mut b) as usize;
                    out.push(((key >> 3) as u32, b[..n].to_vec()));
                    b = &b[n..];
                }
            }
        }
        out
    }

    fn field(b: &[u8], tag: u32) -> Vec<u8> {
        fields(b)
            .into_iter()
            .find(|(t, _)| *t == tag)
            .unwrap_or_else(|| panic!("no field {tag}"))
            .1
    }

    #[test]
    fn patch_parameters_and_extensions_are_where_kubectl_reads_them() {
        let doc = json!({
            "swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": {"/api/v1/namespaces/{namespace}/pods/{name}": {"patch": {
                "operationId": "patchPod",
                "parameters": [{"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true}],
                "x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Pod"},
            }}},
            "definitions": {"io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                "containers": {"type": "array", "items": {"$ref": "#/definitions/io.k8s.api.core.v1.Container"},
                    "x-kubernetes-patch-merge-key": "name"}}}},
        });
        let b = encode_v2(&doc);
        assert_eq!(field(&b, 1), b"2.0");
        // paths.path[0].value.patch.parameters[0].parameter.non_body.query.name
        let path = field(&field(&b, 8), 2);
        assert_eq!(
            field(&path, 1),
            b"/api/v1/namespaces/{namespace}/pods/{name}"
        );
        let patch = field(&field(&path, 2), 8);
        let query = field(&field(&field(&field(&patch, 8), 1), 2), 3);
        assert_eq!(field(&query, 4), b"fieldValidation");
        assert_eq!(field(&query, 2), b"query");
        let ext = field(&patch, 13);
        assert_eq!(field(&ext, 1), b"x-kubernetes-group-version-kind");
        let yaml = field(&field(&ext, 2), 2);
        let v: Value = serde_json::from_slice(&yaml).unwrap();
        assert_eq!(v["kind"], "Pod");
        // definitions[0].value.properties[0].value: items and the merge key.
        let def = field(&field(&b, 9), 1);
        let containers = field(&field(&field(&field(&def, 2), 25), 1), 2);
        assert_eq!(
            field(&field(&field(&containers, 23), 1), 1),
            b"#/definitions/io.k8s.api.core.v1.Container"
        );
        assert_eq!(field(&field(&containers, 22), 1), b"array");
        let merge = field(&containers, 31);
        assert_eq!(field(&merge, 1), b"x-kubernetes-patch-merge-key");
        assert_eq!(field(&field(&merge, 2), 2), b"\"name\"");
    }
}
