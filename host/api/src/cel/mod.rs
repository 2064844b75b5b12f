//! CEL validation rules of custom resource schemas
//! (`x-kubernetes-validations`: `rule`, `message`, `messageExpression`,
//! `fieldPath`, `reason`, transition rules with `oldSelf`), on the `cel`
//! crate (cel-rust) with its strings and lists extensions and the
//! Kubernetes libraries ([`library`]). Rules compile once (cached by
//! source) when a CRD is written: one that does not compile, or whose
//! estimated cost exceeds upstream's limit ([`cost`]), refuses the CRD with
//! a 422 naming it. At validation each rule's cost is computed from the
//! object before it runs, so a runaway rule never runs.

/// Implements `Val` for an opaque value type named `$name`.
macro_rules! opaque {
    ($ty:ident, $name:literal) => {
        impl cel::common::value::Val for $ty {
            fn get_type(&self) -> &cel::common::types::Type {
                <Self as cel::common::value::Val>::cel_type()
            }

            fn cel_type() -> &'static cel::common::types::Type {
                static TYPE: std::sync::LazyLock<cel::common::types::Type> =
                    std::sync::LazyLock::new(|| cel::common::types::Type::new_opaque_type($name));
                &TYPE
            }

            fn equals(&self, other: &dyn cel::common::value::Val) -> bool {
                other.downcast_ref::<Self>().is_some_and(|o| o == self)
            }

            fn clone_as_boxed<'v>(&self) -> Box<dyn cel::common::value::Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }

            fn as_any(&self) -> Option<&dyn std::any::Any> {
                Some(self)
            }
        }

        impl cel::common::value::StaticVal for $ty {}
    };
}

pub mod authz;
pub mod cost;
mod library;
mod structs;

pub(crate) use structs::children;

pub use library::{Quantity, parse_quantity};

use crate::error::Cause;
use cel::{Context, Env, Program};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The environment of every expression: the stdlib, cel-rust's strings
/// and lists extensions, the Kubernetes libraries, and the struct types
/// mutating admission policies construct ([`register_structs`]).
fn build_env(structs: &std::collections::BTreeSet<String>) -> Arc<Env> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .expect("the strings extension loads");
    env.add_extension(cel::extensions::lists)
        .expect("the lists extension loads");
    env.add_extension(library::extension)
        .expect("the Kubernetes libraries load");
    env.add_extension(authz::extension)
        .expect("the authorizer library loads");
    for name in structs {
        // A name cel-rust refuses stays unknown: the expression that
        // constructs it fails to evaluate with cel-rust's error.
        let _ = env.add_type(structs::MapStruct::new(name));
    }
    Arc::new(env)
}

struct Envs {
    current: Arc<Env>,
    structs: std::collections::BTreeSet<String>,
}

fn envs() -> &'static std::sync::RwLock<Envs> {
    static ENVS: OnceLock<std::sync::RwLock<Envs>> = OnceLock::new();
    ENVS.get_or_init(|| {
        let structs = Default::default();
        std::sync::RwLock::new(Envs {
            current: build_env(&structs),
            structs,
        })
    })
}

fn env() -> Arc<Env> {
    envs().read().expect("CEL env lock").current.clone()
}

/// Makes the struct type names an expression constructs (`Object{...}`,
/// `Object.spec{...}`, `JSONPatch{...}`) known: each builds a map of its
/// fields. Names only ever accumulate; the environment is rebuilt when a
/// new one appears (a policy write, not a request).
pub(crate) fn register_structs(source: &str) {
    let names = match env().parser().parse(source) {
        Ok(ast) => structs::names(&ast),
        Err(_) => return,
    };
    let new: Vec<String> = {
        let e = envs().read().expect("CEL env lock");
        names
            .into_iter()
            .filter(|n| !e.structs.contains(n))
            .collect()
    };
    if new.is_empty() {
        return;
    }
    let mut e = envs().write().expect("CEL env lock");
    e.structs.extend(new);
    e.current = build_env(&e.structs);
}

/// A JSON value as CEL sees it: integers are `int` (as upstream reads
/// JSON numbers of integer type), other numbers `double`.
pub(crate) fn from_json(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(from_json).collect())),
        Value::Object(m) => cel::Value::Map(cel::objects::Map {
            map: Arc::new(
                m.iter()
                    .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), from_json(v)))
                    .collect(),
            ),
        }),
    }
}

/// A compiled rule and its syntax tree (macros expanded), for cost
/// estimates.
pub struct Rule {
    program: Program,
    ast: cel::IdedExpr,
}

impl std::ops::Deref for Rule {
    type Target = Program;
    fn deref(&self) -> &Program {
        &self.program
    }
}

impl Rule {
    /// The syntax tree, macros expanded.
    pub(crate) fn ast(&self) -> &cel::IdedExpr {
        &self.ast
    }

    /// The expression's cost with variables bound to shapes.
    pub(crate) fn cost_with(&self, vars: Vec<(String, cost::Shape<'_>)>) -> u64 {
        cost::Estimator::new(vars).cost(&self.ast).0
    }

    /// The rule's cost with `self` (and `oldSelf`) of shape `this`.
    fn cost(&self, this: cost::Shape<'_>, old: Option<cost::Shape<'_>>) -> u64 {
        let mut vars = vec![("self".to_owned(), this)];
        vars.extend(old.map(|o| ("oldSelf".to_owned(), o)));
        cost::Estimator::new(vars).cost(&self.ast).0
    }
}

/// A compiled rule; `Err` holds the compiler's message.
type Compiled = Result<Arc<Rule>, String>;

/// Compiles an expression (cached by source); `Err` holds the
/// compiler's message.
pub(crate) fn compile_rule(source: &str) -> Compiled {
    compile(source)
}

/// An empty evaluation context with the Kubernetes libraries.
pub(crate) fn new_context() -> Context<'static, 'static> {
    Context::with_env(env())
}

fn compile(source: &str) -> Compiled {
    static CACHE: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().expect("CEL cache").get(source) {
        return hit.clone();
    }
    let env = env();
    let message = |e: cel::ParseErrors| e.to_string().replace('\n', " ");
    let compiled = env.compile(source).map_err(message).and_then(|program| {
        let ast = env.parser().parse(source).map_err(message)?;
        Ok(Arc::new(Rule { program, ast }))
    });
    cache
        .lock()
        .expect("CEL cache")
        .insert(source.to_string(), compiled.clone());
    compiled
}

/// The compile errors of every rule in a schema, with upstream's paths
/// (`...openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`).
pub fn compile_errors(schema: &Value, base: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    walk_schema(schema, base, &mut out);
    out
}

fn walk_schema(s: &Value, path: &str, out: &mut Vec<Cause>) {
    for (i, r) in rules(s).iter().enumerate() {
        let rule_path = format!("{path}.x-kubernetes-validations[{i}]");
        let source = r["rule"].as_str().unwrap_or_default();
        if source.is_empty() {
            out.push(Cause {
                reason: "FieldValueRequired".into(),
                field: format!("{rule_path}.rule"),
                message: "Required value".into(),
            });
            continue;
        }
        match compile(source) {
            Err(e) => out.push(Cause {
                reason: "FieldValueInvalid".into(),
                field: format!("{rule_path}.rule"),
                message: format!("Invalid value: {source:?}: compilation failed: {e}"),
            }),
            Ok(rule) => {
                let shape = cost::Shape::Schema(s);
                let estimate = rule.cost(shape, Some(shape));
                if estimate > cost::STATIC_LIMIT {
                    out.push(Cause {
                        reason: "FieldValueForbidden".into(),
                        field: format!("{rule_path}.rule"),
                        message: format!(
                            "Forbidden: {}",
                            cost::over_budget(estimate, cost::STATIC_LIMIT)
                        ),
                    });
                }
            }
        }
        if let Some(m) = r["messageExpression"].as_str()
            && let Err(e) = compile(m)
        {
            out.push(Cause {
                reason: "FieldValueInvalid".into(),
                field: format!("{rule_path}.messageExpression"),
                message: format!("Invalid value: {m:?}: messageExpression compilation failed: {e}"),
            });
        }
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            walk_schema(v, &format!("{path}.properties[{k}]"), out);
        }
    }
    if let Some(items) = s.get("items") {
        walk_schema(items, &format!("{path}.items"), out);
    }
    if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
        walk_schema(ap, &format!("{path}.additionalProperties"), out);
    }
}

fn rules(s: &Value) -> &[Value] {
    s.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Whether a schema node carries rules (cheap check for the walker).
pub fn has_rules(s: &Value) -> bool {
    !rules(s).is_empty()
}

/// A JSON value's schema type name, as validation messages name it.
pub(crate) fn type_word(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

enum Outcome {
    Pass,
    Fail(String),
    OutOfBudget,
}

/// The variables of one node's rules (`self`, and `oldSelf` on updates),
/// converted once for all of them.
fn context(this: &Value, old: Option<&Value>) -> Result<Context<'static, 'static>, String> {
    let mut ctx = Context::with_env(env());
    let to = |v: &Value| Ok::<_, String>(from_json(v));
    ctx.add_variable("self", to(this)?)
        .map_err(|e| format!("{e:?}"))?;
    if let Some(old) = old {
        ctx.add_variable("oldSelf", to(old)?)
            .map_err(|e| format!("{e:?}"))?;
    }
    Ok(ctx)
}

thread_local! {
    /// The cost the rules of the object being validated have spent (see
    /// [`begin_object`]): validation of one object runs on one thread.
    static SPENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Starts the runtime budget of one object's rules.
pub(crate) fn begin_object() {
    SPENT.with(|s| s.set(0));
}

/// The message for rules skipped once an object's budget is spent (upstream's).
const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

fn evaluate(rule: &Value, ctx: &Context, this: &Value, old: Option<&Value>) -> Option<Outcome> {
    let source = rule["rule"].as_str()?;
    let program = match compile(source) {
        Ok(p) => p,
        Err(e) => return Some(Outcome::Fail(format!("compilation failed: {e}"))),
    };
    // Transition rules only run on updates, where an old value exists.
    if old.is_none() && program.references().has_variable("oldSelf") {
        return None;
    }
    // The cost from the actual sizes, before running: a rule over the
    // per-call limit, or past the object's budget, does not run.
    let cost = program.cost(cost::Shape::Data(this), old.map(cost::Shape::Data));
    if cost > cost::PER_CALL_LIMIT {
        return Some(Outcome::Fail(
            "operation cancelled: actual cost limit exceeded".into(),
        ));
    }
    let spent = SPENT.with(|s| {
        let spent = s.get().saturating_add(cost);
        s.set(spent);
        spent
    });
    if spent > cost::RUNTIME_BUDGET {
        return Some(Outcome::OutOfBudget);
    }
    match program.execute(ctx) {
        Ok(cel::Value::Bool(true)) => Some(Outcome::Pass),
        Ok(cel::Value::Bool(false)) => {
            let from_expression = rule["messageExpression"]
                .as_str()
                .and_then(|m| compile(m).ok())
                .and_then(|p| match p.execute(ctx) {
                    Ok(cel::Value::String(s)) if !s.trim().is_empty() => Some(s.to_string()),
                    _ => None,
                });
            let message = from_expression
                .or_else(|| rule["message"].as_str().map(String::from))
                .unwrap_or_else(|| format!("failed rule: {source}"));
            Some(Outcome::Fail(message))
        }
        // The type, not the value: a map's entries print in hash order, so
        // the same object would be refused with a different message.
        Ok(other) => Some(Outcome::Fail(format!(
            "rule did not evaluate to a bool but to a {}",
            other.type_of()
        ))),
        Err(e) => Some(Outcome::Fail(e.to_string())),
    }
}

/// Evaluates the rules of schema node `s` on `this` (at `path`), with
/// `old` the same node's previous value on updates.
pub fn check(s: &Value, this: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    let ctx = match context(this, old) {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            out.push(Cause {
                reason: "FieldValueInvalid".into(),
                field: path.to_string(),
                message: format!("Invalid value: {:?}: {e}", type_word(this)),
            });
            None
        }
    };
    let Some(ctx) = ctx else { return };
    for rule in rules(s) {
        let outcome = evaluate(rule, &ctx, this, old);
        if let Some(Outcome::OutOfBudget) = outcome {
            // Reported once per object, on the rule that ran out.
            if !out.iter().any(|c| c.message.ends_with(OUT_OF_BUDGET)) {
                out.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    field: path.to_string(),
                    message: format!("Invalid value: {:?}: {OUT_OF_BUDGET}", type_word(this)),
                });
            }
            return;
        }
        if let Some(Outcome::Fail(message)) = outcome {
            let field = match rule["fieldPath"].as_str() {
                Some(fp) if !fp.is_empty() => {
                    let fp = fp.trim_start_matches('.');
                    if path.is_empty() {
                        fp.to_string()
                    } else {
                        format!("{path}.{fp}")
                    }
                }
                _ => path.to_string(),
            };
            out.push(Cause {
                reason: rule["reason"]
                    .as_str()
                    .unwrap_or("FieldValueInvalid")
                    .to_string(),
                field,
                message: format!("Invalid value: {:?}: {message}", type_word(this)),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Evaluates `rule` with `self` bound to `this`: `Ok(passed)` or the error.
    fn eval(rule: &str, this: Value) -> Result<bool, String> {
        let ctx = context(&this, None)?;
        let program = compile(rule)?;
        match program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("not a bool: {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn rules_over_budget_are_refused_when_the_crd_is_written() {
        let schema = |max_items: Option<u64>, rule: &str| {
            let mut list = json!({"type": "array", "items": {"type": "object",
                "properties": {"name": {"type": "string", "maxLength": 63}}}});
            if let Some(n) = max_items {
                list["maxItems"] = json!(n);
            }
            json!({"type": "object", "properties": {"spec": {"type": "object",
                "properties": {"items": list}, "x-kubernetes-validations": [{"rule": rule}]}}})
        };
        let nested = "self.items.all(a, self.items.all(b, a.name != b.name || a == b))";
        let errs = compile_errors(
            &schema(None, nested),
            "spec.versions[0].schema.openAPIV3Schema",
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
        );
        assert_eq!(errs[0].reason, "FieldValueForbidden");
        assert!(
            errs[0]
                .message
                .starts_with("Forbidden: estimated rule cost exceeds budget by factor of")
                && errs[0].message.contains("adding maxItems"),
            "{errs:?}"
        );
        // Bounded, the same rule fits; an unbounded single pass fits too.
        assert!(compile_errors(&schema(Some(100), nested), "s").is_empty());
        assert!(
            compile_errors(
                &schema(None, "self.items.all(a, a.name.startsWith('x'))"),
                "s"
            )
            .is_empty()
        );
    }

    #[test]
    fn a_runaway_rule_is_stopped_before_it_runs() {
        // Schemaless data escapes the static estimate; its actual size does not.
        let s = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-validations": [
                {"rule": "self.items.all(a, self.items.all(b, self.items.all(c, a + b + c >= 0)))"}]});
        assert!(compile_errors(&s, "s").is_empty());
        let small = json!({"items": [1, 2, 3]});
        let mut out = Vec::new();
        begin_object();
        check(&s, &small, None, "spec", &mut out);
        assert!(out.is_empty(), "{out:?}");
        let big = json!({"items": (0..500).collect::<Vec<i64>>()});
        let start = std::time::Instant::now();
        begin_object();
        check(&s, &big, None, "spec", &mut out);
        assert!(
            start.elapsed() < std::time::Duration::from_millis(100),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].message.contains("actual cost limit exceeded"),
            "{out:?}"
        );

        // Many affordable rules exhaust the object's budget.
        let rule = json!({"rule": "self.items.all(a, self.items.all(b, a + b >= 0))"});
        let many = json!({"x-kubernetes-validations": vec![rule; 40]});
        let data = json!({"items": (0..300).collect::<Vec<i64>>()});
        let mut out = Vec::new();
        begin_object();
        check(&many, &data, None, "spec", &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].message.contains("running out of cost budget"),
            "{out:?}"
        );
    }

    #[test]
    fn the_kubernetes_libraries_evaluate_as_upstream() {
        let obj = json!({"ports": [80, 443, 8080], "names": ["a", "b", "c"], "weights": [3, 1, 2],
            "url": "https://example.com:8443/a%20b?x=1&x=2&y=z", "ip": "10.0.0.7",
            "cidr": "10.0.0.0/8", "memory": "1Gi", "cpu": "500m", "image": "registry.io/app:v1.2.3"});
        let passing = [
            // lists
            "self.ports.isSorted() && !self.weights.isSorted() && self.names.isSorted()",
            "self.ports.sum() == 8603 && [].sum() == 0 && [1.5, 2.5].sum() == 4.0",
            "self.weights.min() == 1 && self.weights.max() == 3 && self.names.max() == 'c'",
            "self.names.indexOf('b') == 1 && self.names.indexOf('z') == -1 && [1, 2, 1].lastIndexOf(1) == 2",
            // strings (cel-rust's extension) and regex
            "self.image.split(':')[1] == 'v1.2.3' && 'ABC'.lowerAscii() == 'abc'",
            "self.image.find('[0-9]+') == '1' && self.image.findAll('[0-9]+') == ['1', '2', '3']",
            "self.image.findAll('[0-9]+', 2) == ['1', '2'] && 'abc'.find('z') == ''",
            "self.image.matches('^registry[.]io/')",
            // URLs
            "url(self.url).getScheme() == 'https' && url(self.url).getHost() == 'example.com:8443'",
            "url(self.url).getHostname() == 'example.com' && url(self.url).getPort() == '8443'",
            "url(self.url).getEscapedPath() == '/a%20b' && url(self.url).getQuery()['x'] == ['1', '2']",
            "url('https://[::1]:80/').getHostname() == '::1' && url('/just/a/path').getHost() == ''",
            "isURL('https://example.com') && !isURL('not a url') && !isURL('example.com:a:b')",
            // IPs and CIDRs
            "ip(self.ip).family() == 4 && ip('::1').family() == 6 && ip('::1').isLoopback()",
            "isIP('10.0.0.1') && !isIP('10.0.0.256') && !isIP('::ffff:1.2.3.4') && ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:db8:0::1')",
            "ip('0.0.0.0').isUnspecified() && ip('169.254.1.1').isLinkLocalUnicast() && ip('224.0.0.5').isLinkLocalMulticast()",
            "ip('8.8.8.8').isGlobalUnicast() && !ip('127.0.0.1').isGlobalUnicast() && string(ip('10.0.0.7')) == '10.0.0.7'",
            "cidr(self.cidr).containsIP(ip(self.ip)) && cidr(self.cidr).containsIP('10.200.0.1') && !cidr(self.cidr).containsIP('11.0.0.1')",
            "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && !cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')",
            "cidr('10.1.2.3/8').masked() == cidr('10.0.0.0/8') && cidr('10.1.2.3/8').ip() == ip('10.1.2.3') && cidr('10.0.0.0/8').prefixLength() == 8",
            "isCIDR('fd00::/64') && !isCIDR('10.0.0.0/33') && string(cidr('fd00::/64')) == 'fd00::/64'",
            // quantities
            "quantity(self.memory) == quantity('1024Mi') && quantity(self.memory).isGreaterThan(quantity('1G'))",
            "quantity(self.cpu).isLessThan(quantity('1')) && quantity(self.cpu).compareTo(quantity('0.5')) == 0",
            "quantity('1.5').isInteger() == false && quantity('2k').asInteger() == 2000 && quantity('250m').asApproximateFloat() == 0.25",
            "quantity('-3').sign() == -1 && quantity('1').add(quantity('500m')) == quantity('1.5') && quantity('2').sub(1) == quantity('1')",
            "isQuantity('10Gi') && !isQuantity('10GB') && !isQuantity('')",
        ];
        for rule in passing {
            assert_eq!(eval(rule, obj.clone()), Ok(true), "{rule}");
        }
        for (rule, error) in [
            ("[].min() == 0", "empty list"),
            ("url('relative/path') == url('x')", "URL parse error"),
            ("ip('nope').family() == 4", "parse error"),
            ("quantity('1.5').asInteger() == 1", "cannot convert"),
            ("'abc'.find('(') == ''", "invalid regex"),
        ] {
            let e = eval(rule, obj.clone()).unwrap_err();
            assert!(e.contains(error), "{rule}: {e}");
        }
    }

    #[test]
    fn rules_pass_fail_and_name_their_message() {
        let s = json!({"x-kubernetes-validations": [
            {"rule": "self.replicas <= self.max", "message": "replicas must not exceed max"},
            {"rule": "self.name.lowerAscii().startsWith('a')", "fieldPath": ".name", "reason": "FieldValueForbidden"},
            {"rule": "self.replicas >= oldSelf.replicas", "messageExpression": "'cannot scale down from ' + string(oldSelf.replicas)"},
        ]});
        let mut out = Vec::new();
        check(
            &s,
            &json!({"replicas": 3, "max": 5, "name": "Abc"}),
            None,
            "spec",
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
        check(
            &s,
            &json!({"replicas": 6, "max": 5, "name": "zed"}),
            None,
            "spec",
            &mut out,
        );
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].field, "spec");
        assert_eq!(
            out[0].message,
            "Invalid value: \"object\": replicas must not exceed max"
        );
        assert_eq!(out[1].field, "spec.name");
        assert_eq!(out[1].reason, "FieldValueForbidden");
        assert_eq!(
            out[1].message,
            "Invalid value: \"object\": failed rule: self.name.lowerAscii().startsWith('a')"
        );
        let mut out = Vec::new();
        let old = json!({"replicas": 4, "max": 5, "name": "a"});
        check(
            &s,
            &json!({"replicas": 2, "max": 5, "name": "a"}),
            Some(&old),
            "spec",
            &mut out,
        );
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(
            out[0].message,
            "Invalid value: \"object\": cannot scale down from 4"
        );
    }

    #[test]
    fn rules_that_do_not_compile_are_named() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.replicas +"}]}}});
        let errs = compile_errors(&schema, "spec.versions[0].schema.openAPIV3Schema");
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
        );
        assert!(
            errs[0].message.contains("compilation failed"),
            "{}",
            errs[0].message
        );
    }
}
