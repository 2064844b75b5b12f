//! Targets over short strings of a request's query: selectors, quantities,
//! resourceVersions and continue tokens.

use wasm_apiserver_api::cel::parse_quantity;
use wasm_apiserver_api::meta::{decode_continue, encode_continue, parse_resource_version};
use wasm_apiserver_api::selector::{FieldSelector, LabelSelector, Requirement};
use wasm_apiserver_api::validation::path_segment_error;

/// Selector text as upstream writes it (`labels.Selector.String()`).
fn label_text(sel: &LabelSelector) -> String {
    let parts: Vec<String> = sel
        .0
        .iter()
        .map(|r| match r {
            Requirement::Equals(k, v) => format!("{k}={v}"),
            Requirement::NotEquals(k, v) => format!("{k}!={v}"),
            Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
            Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
            Requirement::Exists(k) => k.clone(),
            Requirement::DoesNotExist(k) => format!("!{k}"),
        })
        .collect();
    parts.join(",")
}

/// A label selector that parses prints as text that parses to the same
/// selector; and the printed form is a fixed point.
pub fn label_selector(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sel) = LabelSelector::parse(s) else {
        return;
    };
    let printed = label_text(&sel);
    let again = LabelSelector::parse(&printed)
        .unwrap_or_else(|e| panic!("{s:?} parsed, its text {printed:?} does not: {e}"));
    assert_eq!(sel, again, "{s:?} -> {printed:?}");
    assert_eq!(label_text(&again), printed);
    // Matching needs nothing the parse did not check.
    let labels = sel
        .0
        .iter()
        .filter_map(|r| match r {
            Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => {
                Some((k.clone(), v.clone()))
            }
            _ => None,
        })
        .collect();
    sel.matches(&labels);
}

/// The kinds with extra selectable fields, and one without.
/// The kinds whose selectable fields the target parses by; `*` is any
/// field path, as plugins' cluster reads parse (`FieldSelector::parse_any`).
const FIELD_KINDS: &[&str] = &["ConfigMap", "Secret", "Namespace", "Event", "*"];

fn parse_field_selector(s: &str, kind: &str) -> Result<FieldSelector, String> {
    match kind {
        "*" => FieldSelector::parse_any(s),
        kind => FieldSelector::parse(s, kind),
    }
}

/// A field selector that parses prints as text that parses to the same
/// selector, and matches the object it describes.
pub fn field_selector(data: &[u8]) {
    let Some((&k, rest)) = data.split_first() else {
        return;
    };
    let kind = FIELD_KINDS[usize::from(k) % FIELD_KINDS.len()];
    let Ok(s) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(sel) = parse_field_selector(s, kind) else {
        return;
    };
    let printed: Vec<String> = sel
        .0
        .iter()
        .map(|r| {
            let op = if r.negate { "!=" } else { "==" };
            format!("{}{op}{}", r.path, r.value)
        })
        .collect();
    let printed = printed.join(",");
    let again = parse_field_selector(&printed, kind)
        .unwrap_or_else(|e| panic!("{s:?} parsed, its text {printed:?} does not: {e}"));
    assert_eq!(sel, again, "{s:?} -> {printed:?}");
    // An object with exactly the selected values matches a selector
    // without negations whose paths are distinct.
    let mut obj = serde_json::json!({});
    let mut seen = std::collections::HashSet::new();
    // (No path inside another: `a` and `a.b` cannot both hold a string.)
    let inside = |a: &str, b: &str| b.strip_prefix(a).is_some_and(|rest| rest.starts_with('.'));
    let simple = sel
        .0
        .iter()
        .all(|r| !r.negate && seen.insert(r.path.clone()))
        && sel
            .0
            .iter()
            .all(|a| sel.0.iter().all(|b| !inside(&a.path, &b.path)));
    if simple {
        for r in &sel.0 {
            let mut at = &mut obj;
            for seg in r.path.split('.') {
                at = &mut at[seg];
            }
            *at = serde_json::json!(r.value);
        }
        assert!(sel.matches(&obj), "{s:?} does not match {obj}");
    }
}

/// The exact value of a quantity in nano-units (the parser's `Quantity`
/// keeps it private; its `Debug` form shows it).
fn nanos(q: &impl std::fmt::Debug) -> i128 {
    let text = format!("{q:?}");
    text.trim_start_matches("Quantity(")
        .trim_end_matches(')')
        .parse()
        .unwrap_or_else(|_| panic!("unexpected Debug form {text}"))
}

/// A quantity that parses equals its value written in nano-units and as a
/// plain decimal; a sign and the equivalent decimal suffixes agree.
pub fn quantity(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(q) = parse_quantity(s) else {
        return;
    };
    let n = nanos(&q);
    let as_nanos = format!("{n}n");
    assert_eq!(
        parse_quantity(&as_nanos).ok(),
        Some(q),
        "{s:?} vs {as_nanos}"
    );
    let sign = if n < 0 { "-" } else { "" };
    let (whole, frac) = (
        n.unsigned_abs() / 1_000_000_000,
        n.unsigned_abs() % 1_000_000_000,
    );
    let decimal = format!("{sign}{whole}.{frac:09}");
    assert_eq!(parse_quantity(&decimal).ok(), Some(q), "{s:?} vs {decimal}");
    if !s.starts_with(['+', '-']) {
        assert_eq!(parse_quantity(&format!("+{s}")).ok(), Some(q), "+{s:?}");
        if let Ok(neg) = parse_quantity(&format!("-{s}")) {
            assert_eq!(nanos(&neg), -n, "-{s:?}");
        }
    }
    // `k` = `e3` = `000` for a plain number.
    if s.bytes().all(|b| b.is_ascii_digit()) && s.len() < 20 {
        let k = parse_quantity(&format!("{s}k"));
        assert_eq!(k.ok(), parse_quantity(&format!("{s}e3")).ok(), "{s}k");
        assert_eq!(
            parse_quantity(&format!("{s}k")).ok(),
            parse_quantity(&format!("{s}000")).ok(),
            "{s}k"
        );
    }
}

/// A resourceVersion that parses is a decimal number, as upstream's
/// `strconv.ParseUint` reads it, and prints back to itself without its
/// leading zeros.
pub fn resource_version(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match parse_resource_version(s) {
        Ok(None) => assert!(s.is_empty(), "{s:?} read as no resourceVersion"),
        Ok(Some(rv)) => {
            assert!(
                s.bytes().all(|b| b.is_ascii_digit()),
                "{s:?} accepted as resourceVersion {rv}"
            );
            let trimmed = s.trim_start_matches('0');
            let want = if trimmed.is_empty() { "0" } else { trimmed };
            assert_eq!(rv.to_string(), want);
        }
        Err(_) => assert!(
            !s.is_empty() && (!s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 19),
            "{s:?} rejected"
        ),
    }
}

/// Continue tokens. An input starting with an even byte is a token a
/// client sent: decoding never panics, refuses with a 400 that says the
/// key is not valid, and what it accepts encodes to a token that decodes
/// the same (a start key that stays below the list's prefix). An odd first
/// byte makes a token the server could send: the next 8 bytes its revision,
/// the rest its start key (`<name>` or `<namespace>/<name>`, each a name
/// the server accepts); it must decode to the same position.
pub fn continue_token(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let Ok(token) = std::str::from_utf8(rest) else {
            return;
        };
        match decode_continue(token) {
            Ok((rv, start)) => {
                assert!(rv > 0, "{token:?} decoded to revision 0");
                assert!(
                    !start.starts_with('/') && !start.split('/').any(|s| s == ".."),
                    "{token:?} decoded to {start:?}, outside the list's prefix"
                );
                let again = encode_continue(rv, &start);
                assert_eq!(
                    decode_continue(&again).ok(),
                    Some((rv, start.clone())),
                    "{token:?} -> ({rv}, {start:?}) -> {again:?}"
                );
            }
            Err(e) => {
                assert_eq!(e.code(), 400, "{token:?}: {e}");
                assert!(
                    e.to_string().starts_with("continue key is not valid"),
                    "{token:?}: {e}"
                );
            }
        }
        return;
    }
    if rest.len() < 8 {
        return;
    }
    let (rv, start) = rest.split_at(8);
    let rv = u64::from_le_bytes(rv.try_into().expect("8 bytes")).max(1);
    let Ok(start) = std::str::from_utf8(start) else {
        return;
    };
    let segments: Vec<&str> = start.split('/').collect();
    let a_name = |s: &&str| !s.is_empty() && path_segment_error(s).is_none();
    if segments.len() > 2 || !segments.iter().all(a_name) {
        return;
    }
    let token = encode_continue(rv, start);
    match decode_continue(&token) {
        Ok(decoded) => assert_eq!(decoded, (rv, start.to_string()), "{token:?}"),
        Err(e) => panic!("the server's token for ({rv}, {start:?}) does not decode: {e}"),
    }
}
