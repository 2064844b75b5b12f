//! The cost of CEL rules, as upstream's apiextensions server bounds it:
//!
//! * **when a CRD is written**, every rule's worst-case cost is estimated
//!   from its schema (the sizes `maxItems`, `maxProperties` and
//!   `maxLength` allow, or, without them, what fits in a request of
//!   [`MAX_REQUEST_BYTES`]); a rule over [`STATIC_LIMIT`] is refused, with
//!   upstream's message;
//! * **when an object is validated**, each rule's cost is computed from the
//!   object's actual sizes before it runs: a rule over [`PER_CALL_LIMIT`]
//!   is not run and fails, and once the rules of one object have spent
//!   [`RUNTIME_BUDGET`] the remaining ones are not run. CEL has no loops
//!   beyond comprehensions over the data, so this bounds the work a request
//!   can cause: a runaway rule is stopped before it starts.
//!
//! The model is upstream's in shape (one unit per node, comprehensions
//! multiply by their range's size, string functions cost a tenth of a unit
//! per character traversed, list functions one per element), simplified:
//! it is this server's own estimate, not cel-go's to the unit.

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};
use serde_json::Value;

/// Upstream's `StaticEstimatedCostLimit`: the most one rule may cost.
pub const STATIC_LIMIT: u64 = 10_000_000;
/// Upstream's `PerCallLimit`: the most one evaluation may cost.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// Upstream's `RuntimeCELCostBudget`: the most the rules of one object may cost.
pub const RUNTIME_BUDGET: u64 = 10_000_000;
/// The largest request body: what bounds a list, map or string without a
/// declared maximum (upstream's `maxRequestSizeBytes`).
pub const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;

/// What the estimate knows of a value: its schema (at CRD write), the value
/// itself (at validation), or only a size.
#[derive(Clone, Copy, Debug)]
pub enum Shape<'a> {
    Schema(&'a Value),
    Data(&'a Value),
    Sized(u64),
}

/// The fewest bytes a value of schema `s` serializes to: what bounds how
/// many of them fit in a request.
fn min_bytes(s: &Value) -> u64 {
    match s["type"].as_str() {
        Some("string") => 2,
        Some("boolean") => 4,
        Some("array" | "object") => 2,
        _ => 1,
    }
}

impl<'a> Shape<'a> {
    /// The most elements, entries or characters the value may have.
    pub fn size(&self) -> u64 {
        match *self {
            Shape::Sized(n) => n,
            Shape::Data(v) => match v {
                Value::String(s) => s.len() as u64,
                Value::Array(a) => a.len() as u64,
                Value::Object(m) => m.len() as u64,
                _ => 1,
            },
            Shape::Schema(s) => {
                let declared = |k: &str| s[k].as_u64();
                match s["type"].as_str() {
                    Some("array") => declared("maxItems")
                        .unwrap_or((MAX_REQUEST_BYTES - 2) / (min_bytes(&s["items"]) + 1)),
                    Some("string") => declared("maxLength").unwrap_or(MAX_REQUEST_BYTES - 2),
                    Some("object")
                        if s.get("additionalProperties").is_some_and(Value::is_object) =>
                    {
                        declared("maxProperties").unwrap_or(
                            (MAX_REQUEST_BYTES - 2) / (min_bytes(&s["additionalProperties"]) + 4),
                        )
                    }
                    Some("object") => s["properties"].as_object().map_or(1, |p| p.len() as u64),
                    _ if s.get("x-kubernetes-preserve-unknown-fields").is_some() => {
                        MAX_REQUEST_BYTES / 3
                    }
                    _ => 1,
                }
            }
        }
    }

    /// Whether the value is a list (list functions cost per element,
    /// string functions per character).
    fn is_list(&self) -> bool {
        match self {
            Shape::Schema(s) => s["type"] == "array",
            Shape::Data(v) => v.is_array(),
            Shape::Sized(_) => false,
        }
    }

    /// The shape of field `name` (or of a map's value under that key).
    pub fn field(&self, name: &str) -> Shape<'a> {
        match *self {
            Shape::Schema(s) => match s["properties"].get(name) {
                Some(child) => Shape::Schema(child),
                None if s["additionalProperties"].is_object() => {
                    Shape::Schema(&s["additionalProperties"])
                }
                None => Shape::Sized(1),
            },
            Shape::Data(v) => v.get(name).map_or(Shape::Sized(1), Shape::Data),
            Shape::Sized(_) => Shape::Sized(1),
        }
    }

    /// The shape of the elements (a list's items, a map's values): for data,
    /// the largest element, so that the estimate bounds every iteration.
    pub fn elem(&self) -> Shape<'a> {
        match *self {
            Shape::Schema(s) if s["items"].is_object() => Shape::Schema(&s["items"]),
            Shape::Schema(s) if s["additionalProperties"].is_object() => {
                Shape::Schema(&s["additionalProperties"])
            }
            Shape::Data(Value::Array(a)) => a
                .iter()
                .max_by_key(|v| weight(v))
                .map_or(Shape::Sized(1), Shape::Data),
            Shape::Data(Value::Object(m)) => m
                .values()
                .max_by_key(|v| weight(v))
                .map_or(Shape::Sized(1), Shape::Data),
            _ => Shape::Sized(1),
        }
    }
}

/// How much there is to traverse in a value: elements and characters.
fn weight(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.len() as u64 + 1,
        Value::Array(a) => 1 + a.iter().map(weight).sum::<u64>(),
        Value::Object(m) => 1 + m.values().map(weight).sum::<u64>(),
        _ => 1,
    }
}

/// Characters traversed at a tenth of a unit each, as upstream.
fn traversal(chars: u64) -> u64 {
    chars.div_ceil(10)
}

/// Functions whose cost is a traversal of their string receiver, or one
/// unit per element of a list receiver.
const TRAVERSING: &[&str] = &[
    "contains",
    "matches",
    "find",
    "findAll",
    "lowerAscii",
    "upperAscii",
    "split",
    "replace",
    "trim",
    "indexOf",
    "lastIndexOf",
    "charAt",
    "substring",
    "join",
    "reverse",
    "format",
    "isSorted",
    "sum",
    "min",
    "max",
    "sort",
    "distinct",
    "flatten",
    "slice",
];

/// Estimates one expression, with variables bound to shapes.
pub struct Estimator<'a> {
    vars: Vec<(String, Shape<'a>)>,
}

impl<'a> Estimator<'a> {
    pub fn new(vars: Vec<(String, Shape<'a>)>) -> Self {
        Estimator { vars }
    }

    fn var(&self, name: &str) -> Shape<'a> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or(Shape::Sized(1), |(_, s)| *s)
    }

    /// The cost of `e` and the shape of its result.
    pub fn cost(&mut self, e: &IdedExpr) -> (u64, Shape<'a>) {
        match &e.expr {
            Expr::Unspecified => (0, Shape::Sized(1)),
            Expr::Literal(LiteralValue::String(s)) => (0, Shape::Sized(s.len() as u64)),
            Expr::Literal(_) => (0, Shape::Sized(1)),
            Expr::Ident(name) => (1, self.var(name)),
            Expr::Select(sel) => {
                let (c, s) = self.cost(&sel.operand);
                (c.saturating_add(1), s.field(&sel.field))
            }
            Expr::List(list) => {
                let c = self.sum(list.elements.iter());
                (
                    c.saturating_add(1),
                    Shape::Sized(list.elements.len() as u64),
                )
            }
            Expr::Map(map) => {
                let mut c = 1u64;
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        c = c
                            .saturating_add(self.cost(&m.key).0)
                            .saturating_add(self.cost(&m.value).0);
                    }
                }
                (c, Shape::Sized(map.entries.len() as u64))
            }
            Expr::Struct(st) => {
                let mut c = 1u64;
                for entry in &st.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        c = c.saturating_add(self.cost(&f.value).0);
                    }
                }
                (c, Shape::Sized(1))
            }
            Expr::Comprehension(comp) => {
                let (c_range, range) = self.cost(&comp.iter_range);
                let n = range.size();
                let (c_init, _) = self.cost(&comp.accu_init);
                self.vars.push((comp.iter_var.clone(), range.elem()));
                if let Some(v2) = &comp.iter_var2 {
                    self.vars.push((v2.clone(), range.elem()));
                }
                self.vars.push((comp.accu_var.clone(), Shape::Sized(n)));
                let per_iteration = self
                    .cost(&comp.loop_cond)
                    .0
                    .saturating_add(self.cost(&comp.loop_step).0);
                let (c_result, _) = self.cost(&comp.result);
                self.vars
                    .truncate(self.vars.len() - 2 - usize::from(comp.iter_var2.is_some()));
                let total = c_range
                    .saturating_add(c_init)
                    .saturating_add(n.saturating_mul(per_iteration))
                    .saturating_add(c_result);
                (total, Shape::Sized(n))
            }
            Expr::Call(call) => {
                let target = call.target.as_ref().map(|t| self.cost(t));
                let args: Vec<(u64, Shape<'a>)> = call.args.iter().map(|a| self.cost(a)).collect();
                let mut c = target.map_or(0, |t| t.0);
                let name = call.func_name.as_str();
                if name == operators::CONDITIONAL && args.len() == 3 {
                    // Only one branch runs.
                    return (
                        c.saturating_add(args[0].0)
                            .saturating_add(args[1].0.max(args[2].0))
                            .saturating_add(1),
                        args[1].1,
                    );
                }
                c = args.iter().fold(c, |acc, a| acc.saturating_add(a.0));
                let (own, shape) = match (name, target, args.as_slice()) {
                    // Logical operators cost only their operands, as in cel-go.
                    (
                        operators::LOGICAL_AND
                        | operators::LOGICAL_OR
                        | operators::LOGICAL_NOT
                        | operators::NOT_STRICTLY_FALSE,
                        _,
                        _,
                    ) => (0, Shape::Sized(1)),
                    (operators::INDEX | operators::OPT_INDEX, _, [(_, on), _]) => (1, on.elem()),
                    (operators::IN, _, [_, (_, list)]) => (list.size().max(1), Shape::Sized(1)),
                    (operators::EQUALS | operators::NOT_EQUALS, _, [(_, a), (_, b)]) => {
                        (1 + traversal(a.size().min(b.size())), Shape::Sized(1))
                    }
                    (operators::ADD, _, [(_, a), (_, b)]) => (
                        1 + traversal(a.size() + b.size()),
                        Shape::Sized(a.size() + b.size()),
                    ),
                    ("startsWith" | "endsWith", _, [(_, arg)]) => {
                        (1 + traversal(arg.size()), Shape::Sized(1))
                    }
                    ("split", Some((_, on)), _) => {
                        (1 + traversal(on.size()), Shape::Sized(on.size()))
                    }
                    (f, Some((_, on)), _) if TRAVERSING.contains(&f) => {
                        let own = if on.is_list() {
                            on.size()
                        } else {
                            traversal(on.size())
                        };
                        (
                            1 + own,
                            if on.is_list() {
                                on
                            } else {
                                Shape::Sized(on.size())
                            },
                        )
                    }
                    (
                        "url" | "ip" | "cidr" | "quantity" | "isURL" | "isIP" | "isCIDR"
                        | "isQuantity",
                        None,
                        [(_, arg)],
                    ) => (1 + traversal(arg.size()), Shape::Sized(1)),
                    _ => (1, Shape::Sized(1)),
                };
                (c.saturating_add(own), shape)
            }
        }
    }

    fn sum<'e>(&mut self, exprs: impl Iterator<Item = &'e IdedExpr>) -> u64 {
        exprs.fold(0u64, |acc, e| acc.saturating_add(self.cost(e).0))
    }
}

/// The message upstream gives a rule whose estimate exceeds the limit.
pub fn over_budget(cost: u64, limit: u64) -> String {
    format!(
        "estimated rule cost exceeds budget by factor of {:.1}x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
        cost as f64 / limit as f64
    )
}
