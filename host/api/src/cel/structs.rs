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
    match &e.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                walk(t, out);
            }
            c.args.iter().for_each(|a| walk(a, out));
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                walk(x, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, out)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    walk(&me.key, out);
                    walk(&me.value, out);
                }
            }
        }
        Expr::Select(s) => walk(&s.operand, out),
        Expr::Struct(s) => {
            out.push(s.type_name.clone());
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    walk(&f.value, out);
                }
            }
        }
    }
}
