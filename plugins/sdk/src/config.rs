//! A policy's configuration: the `spec.config` of its AdmissionPlugin.

use std::fmt;

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};

/// Parses the configuration text into the policy's type; empty text is
/// `T::default()`. The error reads `invalid configuration: ...` with
/// serde's position and field names, which is what `check-config` (and so
/// `kubectl apply` of the AdmissionPlugin) reports.
///
/// Put `#[serde(deny_unknown_fields)]` on the type to refuse misspelled
/// fields, and `#[serde(default)]` to make fields optional.
pub fn parse_config<T: DeserializeOwned + Default>(text: &str) -> Result<T, String> {
    if text.trim().is_empty() {
        return Ok(T::default());
    }
    serde_json::from_str(text).map_err(|e| format!("invalid configuration: {e}"))
}

/// A regular expression in a configuration, compiled when the
/// configuration is parsed (so a bad pattern is a `check-config` error).
/// The syntax is `regex-lite`'s (Rust `regex` without Unicode classes);
/// [`Pattern::is_match`] searches (as Python's `re.search` and JavaScript's
/// `RegExp.test` do).
#[derive(Clone)]
pub struct Pattern {
    source: String,
    regex: regex_lite::Regex,
}

impl Pattern {
    /// Compiles `source`.
    pub fn new(source: &str) -> Result<Self, String> {
        regex_lite::Regex::new(source)
            .map(|regex| Self {
                source: source.to_owned(),
                regex,
            })
            .map_err(|e| format!("invalid pattern {source:?}: {e}"))
    }

    /// True when the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As the source string: `{pattern:?}` quotes it as JSON would.
        write!(f, "{:?}", self.source)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Pattern::new(&s).map_err(D::Error::custom)
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Default, Debug)]
    #[serde(deny_unknown_fields, rename_all = "camelCase", default)]
    struct Config {
        labels: Vec<String>,
        name_pattern: Option<Pattern>,
    }

    #[test]
    fn empty_text_is_the_default() {
        let c: Config = parse_config("  ").unwrap();
        assert!(c.labels.is_empty() && c.name_pattern.is_none());
    }

    #[test]
    fn fields_and_patterns_parse() {
        let c: Config = parse_config(r#"{"labels": ["team"], "namePattern": "^tmp-"}"#).unwrap();
        assert_eq!(c.labels, ["team"]);
        let p = c.name_pattern.unwrap();
        assert!(p.is_match("tmp-1") && !p.is_match("a-tmp-1"));
        assert_eq!(p.as_str(), "^tmp-");
    }

    #[test]
    fn errors_name_the_problem() {
        let e = parse_config::<Config>(r#"{"lables": []}"#).unwrap_err();
        assert!(
            e.starts_with("invalid configuration: unknown field `lables`"),
            "{e}"
        );
        let e = parse_config::<Config>(r#"{"namePattern": "("}"#).unwrap_err();
        assert!(e.contains("invalid pattern \"(\""), "{e}");
        let e = parse_config::<Config>(r#"{"labels": "team"}"#).unwrap_err();
        assert!(
            e.contains("invalid type: string \"team\", expected a sequence"),
            "{e}"
        );
    }
}
