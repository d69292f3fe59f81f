//! CEL as Kubernetes uses it (custom resources' `x-kubernetes-validations`, admission
//! webhooks' `matchConditions`, ValidatingAdmissionPolicies), through the `cel` crate: one
//! environment with the standard library and the strings, lists and math extensions, plus
//! the Kubernetes libraries rules commonly call (`lib`): list `isSorted`/`sum`, regex
//! `find`/`findAll`, `url`, `quantity`, `ip`/`cidr`.
//!
//! Cost is bounded as upstream bounds it, in our own terms: an expression is at most
//! [`MAX_SOURCE`] bytes, nests comprehensions at most [`MAX_NESTING`] deep (counted on the
//! compiled tree, so however the macros are spelled), builds no lists from nothing
//! (`lists.range`) and grows no string quadratically (`replace('', …)`); and before a rule
//! runs, (the values it sees, long strings by their length) ^ (its nesting + 1) must stay
//! under [`COST_BUDGET`] — so no rule can run away whatever the object holds.

pub mod lib;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value as Cel};

/// A CEL value, as evaluations return them.
pub use cel::Value as CelValue;
use serde_json::Value;

/// The longest expression accepted.
pub const MAX_SOURCE: usize = 16 * 1024;
/// The deepest nesting of comprehensions (`all`, `exists`, `map`, `filter`, …).
pub const MAX_NESTING: usize = 3;
/// The estimated work one evaluation may do: (values seen) ^ (nesting + 1).
pub const COST_BUDGET: f64 = 10_000_000.0;

fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        for ext in [
            cel::extensions::strings as fn(&mut Env) -> Result<(), cel::DeclarationError>,
            cel::extensions::lists,
            cel::extensions::math,
        ] {
            if let Err(e) = env.add_extension(ext) {
                tracing::warn!(error = %e, "CEL extension not loaded");
            }
        }
        Arc::new(env)
    })
    .clone()
}

/// A compiled expression.
pub struct Expr {
    program: Program,
    nesting: usize,
    pub source: String,
}

impl Expr {
    /// The compiled tree (what type checking walks).
    pub fn tree(&self) -> &cel::IdedExpr {
        self.program.expression()
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

/// How deeply comprehensions nest in a compiled expression (macros expand to
/// comprehension nodes, however they were spelled), and the first call it refuses: list
/// ranges (`lists.range`, which build lists from nothing) and `replace` with an empty
/// literal pattern (which grows a string quadratically).
fn shape(e: &cel::IdedExpr, depth: usize, deepest: &mut usize, refused: &mut Option<String>) {
    use cel::common::ast::{EntryExpr, Expr as E, LiteralValue};
    if depth > 64 {
        *refused = Some("expression nests too deeply".into());
        return;
    }
    *deepest = (*deepest).max(depth);
    match &e.expr {
        E::Call(c) => {
            let empty_literal = |x: &cel::IdedExpr| matches!(&x.expr, E::Literal(LiteralValue::String(s)) if s.is_empty());
            if c.func_name.ends_with("range") {
                *refused = Some(format!("{} is not supported", c.func_name));
            }
            if c.func_name == "replace" && c.args.first().is_some_and(empty_literal) {
                *refused = Some("replace with an empty pattern is not supported".into());
            }
            if let Some(t) = &c.target {
                shape(t, depth, deepest, refused);
            }
            for a in &c.args {
                shape(a, depth, deepest, refused);
            }
        }
        E::Comprehension(c) => {
            shape(&c.iter_range, depth, deepest, refused);
            shape(&c.accu_init, depth, deepest, refused);
            for body in [&c.loop_cond, &c.loop_step, &c.result] {
                shape(body, depth + 1, deepest, refused);
            }
        }
        E::List(l) => l
            .elements
            .iter()
            .for_each(|x| shape(x, depth, deepest, refused)),
        E::Map(m) => m.entries.iter().for_each(|x| match &x.expr {
            EntryExpr::MapEntry(m) => {
                shape(&m.key, depth, deepest, refused);
                shape(&m.value, depth, deepest, refused);
            }
            EntryExpr::StructField(f) => shape(&f.value, depth, deepest, refused),
        }),
        E::Struct(st) => st.entries.iter().for_each(|x| {
            if let EntryExpr::StructField(f) = &x.expr {
                shape(&f.value, depth, deepest, refused)
            }
        }),
        E::Select(sel) => shape(&sel.operand, depth, deepest, refused),
        E::Ident(_) | E::Literal(_) | E::Unspecified => {}
    }
}

/// Compiles `source`; the error is what upstream's `compilation failed: …` carries.
pub fn compile(source: &str) -> Result<Expr, String> {
    if source.len() > MAX_SOURCE {
        return Err(format!("expression is longer than {MAX_SOURCE} bytes"));
    }
    let program = env()
        .compile(source)
        .map_err(|e| format!("ERROR: <input>: {}", e.to_string().trim()))?;
    let (mut nesting, mut refused) = (0, None);
    shape(program.expression(), 0, &mut nesting, &mut refused);
    if let Some(why) = refused {
        return Err(why);
    }
    if nesting > MAX_NESTING {
        return Err(format!(
            "estimated rule cost exceeds budget: comprehensions nest {nesting} deep (at most {MAX_NESTING})"
        ));
    }
    Ok(Expr {
        program,
        nesting,
        source: source.to_string(),
    })
}

/// Compiled expressions by source, shared by everything built from one object (a CRD's
/// rules, a policy's validations).
#[derive(Default)]
pub struct Cache(HashMap<String, Result<Arc<Expr>, String>>);

impl Cache {
    pub fn get(&mut self, source: &str) -> Result<Arc<Expr>, String> {
        self.0
            .entry(source.to_string())
            .or_insert_with(|| compile(source).map(Arc::new))
            .clone()
    }
}

/// How many values `v` holds (itself, list items and map entries, recursively, bounded).
fn values_in(v: &Value, limit: usize) -> usize {
    let mut n = 1;
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        if n >= limit {
            return n;
        }
        match x {
            Value::Array(a) => {
                n += a.len();
                stack.extend(a.iter());
            }
            Value::Object(m) => {
                n += m.len();
                stack.extend(m.values());
            }
            // Long strings cost as their length does (a comparison reads them whole).
            Value::String(s) => n += s.len() / 16,
            _ => {}
        }
    }
    n
}

/// A JSON value as CEL sees it: integers as `int` (or `double` when they do not fit),
/// objects as maps with string keys.
pub fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<Key, Cel> = m
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            Cel::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A CEL value as JSON (what variables hold between expressions); values JSON cannot
/// hold print as text.
pub fn to_json(v: &Cel) -> Value {
    match v {
        Cel::Null => Value::Null,
        Cel::Bool(b) => Value::Bool(*b),
        Cel::Int(i) => Value::from(*i),
        Cel::UInt(u) => Value::from(*u),
        Cel::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Cel::String(s) => Value::String(s.to_string()),
        Cel::List(l) => Value::Array(l.iter().map(to_json).collect()),
        Cel::Map(m) => Value::Object(
            m.map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Key::String(s) => s.to_string(),
                        Key::Int(i) => i.to_string(),
                        Key::Uint(u) => u.to_string(),
                        Key::Bool(b) => b.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        other => Value::String(format!("{other:?}")),
    }
}

/// Evaluates `expr` with `vars` bound; the error is the evaluation's message (a missing key,
/// a type mismatch, the cost budget).
pub fn eval(expr: &Expr, vars: &[(&str, &Value)]) -> Result<Cel, String> {
    let size: usize = vars
        .iter()
        .map(|(_, v)| values_in(v, COST_BUDGET as usize))
        .sum::<usize>()
        .max(1);
    // The work inside the innermost loop may itself be linear (`x in self.items`).
    let cost = (size as f64).powi(expr.nesting as i32 + 1);
    if cost > COST_BUDGET {
        return Err(format!(
            "operation cancelled: actual cost limit exceeded (about {cost:.0} for a budget of {COST_BUDGET:.0})"
        ));
    }
    let mut ctx = Context::with_env(env());
    lib::register(&mut ctx);
    for (name, v) in vars {
        ctx.add_variable_from_value(*name, to_cel(v));
    }
    expr.program.execute(&ctx).map_err(|e| e.to_string())
}

/// Evaluates to a bool (what rules and conditions must be).
pub fn eval_bool(expr: &Expr, vars: &[(&str, &Value)]) -> Result<bool, String> {
    match eval(expr, vars)? {
        Cel::Bool(b) => Ok(b),
        other => Err(format!(
            "expression must evaluate to bool, got {:?}",
            other.type_of()
        )),
    }
}

/// Evaluates to a string (message expressions).
pub fn eval_string(expr: &Expr, vars: &[(&str, &Value)]) -> Result<String, String> {
    match eval(expr, vars)? {
        Cel::String(s) => Ok(s.to_string()),
        other => Err(format!(
            "expression must evaluate to string, got {:?}",
            other.type_of()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(src: &str, this: Value) -> Result<bool, String> {
        eval_bool(&compile(src)?, &[("self", &this)])
    }

    #[test]
    fn evaluates_rules_over_json() {
        let obj = json!({"replicas": 3, "min": 1, "name": "web-1", "tags": ["a", "b"], "labels": {"app": "x"}});
        assert_eq!(run("self.replicas >= self.min", obj.clone()), Ok(true));
        assert_eq!(
            run(
                "self.name.startsWith('web') && self.name.matches('^[a-z]+-[0-9]$')",
                obj.clone()
            ),
            Ok(true)
        );
        assert_eq!(
            run(
                "self.tags.all(t, t.size() == 1) && 'app' in self.labels",
                obj.clone()
            ),
            Ok(true)
        );
        assert_eq!(run("has(self.missing)", obj.clone()), Ok(false));
        assert_eq!(
            run("self.name.lowerAscii() == 'web-1'", obj.clone()),
            Ok(true)
        );
        assert!(run("self.missing == 1", obj.clone()).is_err());
        assert!(run("self.replicas", obj).is_err());
        assert!(compile("self.a.all(x, x.b.all(y, y.c.all(z, z.d.all(w, true))))").is_err());
        assert!(compile("self.(").is_err());
    }

    #[test]
    fn a_rule_cannot_run_away() {
        let big = json!((0..5000).collect::<Vec<_>>());
        let e = run("self.all(x, self.all(y, x + y >= 0))", big).unwrap_err();
        assert!(e.contains("cost limit exceeded"), "{e}");
        assert!(
            compile("self.all (x, self.all (y, self.all (z, self.existsOne (w, true))))").is_err()
        );
        assert!(compile("lists.range(1000000).all(x, true)").is_err());
        assert!(compile("self.s.replace('', self.s) == ''").is_err());
        assert_eq!(
            compile("self.map(x, 'a(b').filter(y, true)")
                .unwrap()
                .nesting,
            1
        );
    }
}
