//! JSON exactly as Go's `encoding/json` writes it for the types upstream's operator hashes.
//!
//! Upstream's worker hash is the SHA-256 of `json.Marshal` of a Go struct that embeds
//! `corev1.PodTemplateSpec`. Go writes struct fields in declaration order (not sorted), writes
//! zero values of fields without `omitempty` (`"containers":null`, `"resources":{}`), drops
//! fields its types do not know, sorts map keys, escapes `<`, `>` and `&`, and writes quantities
//! in canonical form. To reproduce those bytes, [`encode`] walks a JSON value (as our types
//! serialize it) along a **layout**: per Go struct, its fields in order with their JSON names,
//! types and options.
//!
//! - `core.json`: the Kubernetes types reachable from `PodTemplateSpec` and `EnvVar`, generated
//!   from the Go types by `go run .` in `xtask/golayout` (k8s.io/api v0.34.3, the version upstream's
//!   operator builds with).
//! - `dynamo.json`: upstream's own types inside the hash input, written from their Go
//!   declarations.
//!
//! Type references: `string`, `bool`, `int`, `float`, `quantity`, `intorstring`, `time`,
//! `raw`, `bytes`, `*T` (pointer), `[]T` (slice), `mapT` (string-keyed map), `struct:Name`.

mod quantity;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

const CORE: &str = include_str!("core.json");
const DYNAMO: &str = include_str!("dynamo.json");

#[derive(Deserialize)]
struct LayoutFile {
    types: HashMap<String, Vec<FieldRow>>,
}

#[derive(Deserialize)]
struct FieldRow {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    opts: String,
}

/// A Go type as `encoding/json` sees it.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    String,
    Bool,
    Int,
    Float,
    Quantity,
    IntOrString,
    Time,
    Raw,
    Bytes,
    Ptr(Box<Ty>),
    Slice(Box<Ty>),
    Map(Box<Ty>),
    Struct(String),
}

impl Ty {
    fn parse(s: &str) -> Ty {
        if let Some(rest) = s.strip_prefix('*') {
            return Ty::Ptr(Box::new(Ty::parse(rest)));
        }
        if let Some(rest) = s.strip_prefix("[]") {
            return Ty::Slice(Box::new(Ty::parse(rest)));
        }
        if let Some(rest) = s.strip_prefix("map") {
            return Ty::Map(Box::new(Ty::parse(rest)));
        }
        if let Some(name) = s.strip_prefix("struct:") {
            return Ty::Struct(name.to_string());
        }
        match s {
            "string" => Ty::String,
            "bool" => Ty::Bool,
            "int" => Ty::Int,
            "float" => Ty::Float,
            "quantity" => Ty::Quantity,
            "intorstring" => Ty::IntOrString,
            "time" => Ty::Time,
            "raw" => Ty::Raw,
            "bytes" => Ty::Bytes,
            other => panic!("gojson layout: unknown type {other:?}"),
        }
    }
}

struct Field {
    name: String,
    ty: Ty,
    omitempty: bool,
    omitzero: bool,
}

type Layout = HashMap<String, Vec<Field>>;

fn layout() -> &'static Layout {
    static LAYOUT: OnceLock<Layout> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        let mut out = Layout::new();
        for text in [CORE, DYNAMO] {
            let file: LayoutFile = serde_json::from_str(text).expect("gojson layout parses");
            for (name, rows) in file.types {
                let fields = rows
                    .into_iter()
                    .map(|r| Field {
                        omitempty: r.opts.split(',').any(|o| o == "omitempty"),
                        omitzero: r.opts.split(',').any(|o| o == "omitzero"),
                        ty: Ty::parse(&r.ty),
                        name: r.name,
                    })
                    .collect();
                assert!(
                    out.insert(name.clone(), fields).is_none(),
                    "gojson: {name} twice"
                );
            }
        }
        out
    })
}

/// `json.Marshal` of `value` read as the Go type `ty` (a type reference, e.g.
/// `struct:PodTemplateSpec` or `[]struct:EnvVar`). Keys the Go type does not have are dropped,
/// as Go's decoder drops them; `null` and absent fields are Go zero values.
pub fn encode(ty: &str, value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, &Ty::parse(ty), Some(value));
    out
}

/// Whether Go's `omitempty` drops this value.
fn is_empty(ty: &Ty, value: Option<&Value>) -> bool {
    let value = match value {
        None | Some(Value::Null) => {
            return !matches!(
                ty,
                Ty::Struct(_) | Ty::Quantity | Ty::IntOrString | Ty::Time
            );
        }
        Some(v) => v,
    };
    match ty {
        Ty::String | Ty::Bytes => value.as_str().is_some_and(str::is_empty),
        Ty::Bool => value == &Value::Bool(false),
        Ty::Int | Ty::Float => value.as_f64() == Some(0.0),
        Ty::Slice(_) => value.as_array().is_some_and(Vec::is_empty),
        Ty::Map(_) => value.as_object().is_some_and(serde_json::Map::is_empty),
        Ty::Raw => false,
        // Pointers are empty only when nil; Go never omits a struct for omitempty.
        Ty::Ptr(_) | Ty::Struct(_) | Ty::Quantity | Ty::IntOrString | Ty::Time => false,
    }
}

/// Whether Go's `omitzero` drops this value (the zero value of its type).
fn is_zero(ty: &Ty, value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(v) => match ty {
            Ty::Struct(name) => v.as_object().is_some_and(|o| {
                layout()[name]
                    .iter()
                    .all(|f| is_zero(&f.ty, o.get(&f.name)))
            }),
            Ty::Ptr(_) => false,
            _ => is_empty(ty, Some(v)),
        },
    }
}

fn write_value(out: &mut String, ty: &Ty, value: Option<&Value>) {
    let value = value.filter(|v| !v.is_null());
    match ty {
        Ty::String => write_string(out, value.and_then(Value::as_str).unwrap_or("")),
        Ty::Bytes => match value.and_then(Value::as_str) {
            Some(s) => write_string(out, s),
            None => out.push_str("null"),
        },
        Ty::Bool => out.push_str(if value == Some(&Value::Bool(true)) {
            "true"
        } else {
            "false"
        }),
        Ty::Int | Ty::Float => match value {
            Some(Value::Number(n)) => write_number(out, n),
            _ => out.push('0'),
        },
        Ty::Quantity => match value {
            Some(Value::String(s)) => write_string(out, &quantity::canonical(s)),
            Some(Value::Number(n)) => write_string(out, &quantity::canonical(&n.to_string())),
            _ => out.push_str("\"0\""),
        },
        Ty::IntOrString => match value {
            Some(Value::String(s)) => write_string(out, s),
            Some(Value::Number(n)) => write_number(out, n),
            _ => out.push('0'),
        },
        Ty::Time => match value.and_then(Value::as_str) {
            Some(s) => write_string(out, s),
            None => out.push_str("null"),
        },
        Ty::Raw => match value {
            Some(v) => write_any(out, v),
            None => out.push_str("null"),
        },
        Ty::Ptr(inner) => match value {
            Some(v) => write_value(out, inner, Some(v)),
            None => out.push_str("null"),
        },
        Ty::Slice(inner) => match value.and_then(Value::as_array) {
            Some(items) if !items.is_empty() => {
                write_joined(out, ('[', ']'), items, |out, item| {
                    write_value(out, inner, Some(item))
                })
            }
            // Our types cannot tell an absent required list from an empty one (both
            // serialize as `[]`); Go's nil slice is the common case.
            _ => out.push_str("null"),
        },
        Ty::Map(inner) => match value.and_then(Value::as_object) {
            Some(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                write_joined(out, ('{', '}'), keys, |out, k| {
                    write_string(out, k);
                    out.push(':');
                    write_value(out, inner, Some(&map[k]));
                });
            }
            None => out.push_str("null"),
        },
        Ty::Struct(name) => write_struct(out, name, value.and_then(Value::as_object)),
    }
}

fn write_struct(out: &mut String, name: &str, object: Option<&serde_json::Map<String, Value>>) {
    let fields = layout()
        .get(name)
        .unwrap_or_else(|| panic!("gojson layout has no type {name}"));
    let written = fields.iter().filter_map(|f| {
        let v = object.and_then(|o| o.get(&f.name));
        let omitted = (f.omitempty && is_empty(&f.ty, v)) || (f.omitzero && is_zero(&f.ty, v));
        (!omitted).then_some((f, v))
    });
    write_joined(out, ('{', '}'), written, |out, (f, v)| {
        write_string(out, &f.name);
        out.push(':');
        write_value(out, &f.ty, v);
    });
}

/// A value of no known Go type (`raw`): compact, map keys as they come.
fn write_any(out: &mut String, value: &Value) {
    match value {
        Value::String(s) => write_string(out, s),
        Value::Number(n) => write_number(out, n),
        Value::Array(items) => write_joined(out, ('[', ']'), items, write_any),
        Value::Object(map) => write_joined(out, ('{', '}'), map, |out, (k, v)| {
            write_string(out, k);
            out.push(':');
            write_any(out, v);
        }),
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        let _ = write!(out, "{}", go_float(n.as_f64().unwrap_or(0.0)));
    }
}

/// `strconv.FormatFloat` as `encoding/json` calls it: shortest digits, `'f'` format unless the
/// magnitude is below 1e-6 or at least 1e21, then `'e'` with a two-digit exponent at least.
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let s = format!("{f}");
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    }
}

/// A JSON string as Go writes it (HTML-safe: `<`, `>`, `&`, U+2028 and U+2029 escaped).
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `open`, the items separated by commas (each written by `write`), `close`.
fn write_joined<T>(
    out: &mut String,
    (open, close): (char, char),
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut String, T),
) {
    out.push(open);
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write(out, item);
    }
    out.push(close);
}

#[cfg(test)]
mod tests;
