//! Struct types whose literals build maps: what mutating admission policies
//! construct (`Object{spec: Object.spec{replicas: 3}}` for an apply
//! configuration, `JSONPatch{op: 'add', path: '/x', value: 1}` for a JSON
//! patch). Upstream types them against the object's schema; here a literal
//! is a map of its fields, which the policy then reads as JSON.

use cel::ExecutionError;
use cel::IdedExpr;
use cel::StructType;
use cel::common::ast::{EntryExpr, Expr};
use cel::common::types::Type;
use cel::common::value::{CowVal, Val};
use cel::objects::{Key, Value};
use std::collections::{BTreeMap, HashMap};

pub(crate) struct MapStruct {
    ty: Type,
}

impl MapStruct {
    pub(crate) fn new(name: &str) -> Self {
        MapStruct {
            ty: Type::new_struct(name.to_string()),
        }
    }
}

impl StructType for MapStruct {
    fn get_type(&self) -> &Type {
        &self.ty
    }

    fn new_value<'b, 'v>(
        &self,
        fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let mut map = HashMap::with_capacity(fields.len());
        for (k, v) in fields {
            let value = Value::try_from(v.as_ref()).map_err(|e| {
                ExecutionError::function_error(self.ty.name(), format!("field {k}: {e:?}"))
            })?;
            map.insert(Key::from(k), value);
        }
        Box::<dyn Val>::try_from(Value::from(map))
            .map_err(|e| ExecutionError::function_error(self.ty.name(), format!("{e:?}")))
    }
}

/// The struct type names an expression's literals construct.
pub(crate) fn names(e: &IdedExpr) -> Vec<String> {
    let mut out = Vec::new();
    walk(e, &mut out);
    out.sort();
    out.dedup();
    out
}

fn walk(e: &IdedExpr, out: &mut Vec<String>) {
    if let Expr::Struct(s) = &e.expr {
        out.push(s.type_name.clone());
    }
    for child in children(e) {
        walk(child, out);
    }
}

/// The direct subexpressions of `e`: what a walk over a syntax tree
/// descends into.
pub(crate) fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => Vec::new(),
        Expr::Call(c) => c.target.as_deref().into_iter().chain(&c.args).collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(_) => Vec::new(),
            })
            .collect(),
        Expr::Select(s) => vec![&*s.operand],
        Expr::Struct(s) => s
            .entries
            .iter()
            .filter_map(|entry| match &entry.expr {
                EntryExpr::StructField(f) => Some(&f.value),
                EntryExpr::MapEntry(_) => None,
            })
            .collect(),
    }
}
