//! Operator parameters: declared with a kind, a range and a default; given in a graph file as
//! `params: (name: value, ..)`; resolved (defaults filled in, every value checked) before
//! anything starts.

use std::fmt;

/// A parameter value as written.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    /// A bare name, such as `Csv` (accepted where a choice is expected).
    Ident(String),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Float(v) => write!(f, "{v}"),
            ParamValue::Str(s) => write!(f, "{s:?}"),
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Ident(s) => write!(f, "{s}"),
        }
    }
}

/// What values a parameter takes.
#[derive(Debug, Clone, Copy)]
pub enum ParamKind {
    /// An integer in `min..=max`.
    Int {
        min: i64,
        max: i64,
    },
    /// An integer in `min..=max` that is 0 or a power of two.
    Pow2 {
        min: i64,
        max: i64,
    },
    /// A number (integers accepted) in `min..=max`.
    Float {
        min: f64,
        max: f64,
    },
    Str,
    /// A file or folder path; relative paths are relative to the graph's `outputs.dir`.
    Path,
    /// One of these names, as a string or a bare name, any case.
    Choice(&'static [&'static str]),
    Bool,
}

impl ParamKind {
    /// Checks `v` and returns it normalised (floats as `Float`, choices in their declared
    /// spelling).
    pub fn check(&self, v: &ParamValue) -> Result<ParamValue, String> {
        match (self, v) {
            (ParamKind::Int { min, max }, ParamValue::Int(n)) => {
                if n < min || n > max {
                    Err(format!("{n} is out of range {min}..={max}"))
                } else {
                    Ok(v.clone())
                }
            }
            (ParamKind::Pow2 { min, max }, ParamValue::Int(n)) => {
                if n < min || n > max || (*n != 0 && (*n as u64).count_ones() != 1) {
                    Err(format!("{n} must be 0 or a power of two in {min}..={max}"))
                } else {
                    Ok(v.clone())
                }
            }
            (ParamKind::Float { min, max }, ParamValue::Int(n)) => {
                ParamKind::Float { min: *min, max: *max }.check(&ParamValue::Float(*n as f64))
            }
            (ParamKind::Float { min, max }, ParamValue::Float(x)) => {
                if !x.is_finite() || x < min || x > max {
                    Err(format!("{x} is out of range {min}..={max}"))
                } else {
                    Ok(v.clone())
                }
            }
            (ParamKind::Str | ParamKind::Path, ParamValue::Str(s)) => {
                if matches!(self, ParamKind::Path) && s.is_empty() {
                    Err("an empty path".into())
                } else {
                    Ok(v.clone())
                }
            }
            (ParamKind::Choice(names), ParamValue::Str(s) | ParamValue::Ident(s)) => names
                .iter()
                .find(|n| n.eq_ignore_ascii_case(s))
                .map(|n| ParamValue::Str((*n).to_string()))
                .ok_or_else(|| format!("`{s}` is not one of {}", names.join(", "))),
            (ParamKind::Bool, ParamValue::Bool(_)) => Ok(v.clone()),
            (kind, v) => Err(format!("expected {}, found {v}", kind.describe())),
        }
    }

    /// In words, for messages and `rocelink check`.
    pub fn describe(&self) -> String {
        match self {
            ParamKind::Int { min, max } => format!("an integer in {min}..={max}"),
            ParamKind::Pow2 { min, max } => format!("0 or a power of two in {min}..={max}"),
            ParamKind::Float { min, max } => format!("a number in {min}..={max}"),
            ParamKind::Str => "a string".into(),
            ParamKind::Path => "a path (a string)".into(),
            ParamKind::Choice(names) => format!("one of {}", names.join(", ")),
            ParamKind::Bool => "true or false".into(),
        }
    }
}

/// A parameter's default.
#[derive(Debug, Clone, Copy)]
pub enum ParamDefault {
    /// The graph must give it.
    Required,
    /// Absent unless given (the operator decides what that means, as its doc says).
    Unset,
    Int(i64),
    Float(f64),
    Str(&'static str),
    Bool(bool),
}

impl ParamDefault {
    pub fn value(&self) -> Option<ParamValue> {
        match *self {
            ParamDefault::Required | ParamDefault::Unset => None,
            ParamDefault::Int(v) => Some(ParamValue::Int(v)),
            ParamDefault::Float(v) => Some(ParamValue::Float(v)),
            ParamDefault::Str(s) => Some(ParamValue::Str(s.into())),
            ParamDefault::Bool(b) => Some(ParamValue::Bool(b)),
        }
    }
}

pub struct ParamDecl {
    pub name: &'static str,
    pub kind: ParamKind,
    pub default: ParamDefault,
    pub doc: &'static str,
}

/// An operator's parameters after resolution: every declared parameter with a value (given
/// or default), except `Unset` ones not given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    values: Vec<(&'static str, ParamValue)>,
}

/// Why a parameter was refused: the index of the given parameter (or `None` for one that is
/// missing) and the message.
pub type ParamError = (Option<usize>, String);

impl Params {
    /// Resolves `given` (name, value) pairs against `decls`: unknown names, duplicates,
    /// wrong kinds and missing required parameters are refused, each with the index of the
    /// offending entry.
    pub fn resolve(decls: &'static [ParamDecl], given: &[(String, ParamValue)]) -> Result<Params, ParamError> {
        let mut values = Vec::with_capacity(decls.len());
        for (i, (name, v)) in given.iter().enumerate() {
            if given[..i].iter().any(|(n, _)| n == name) {
                return Err((Some(i), format!("parameter `{name}` is given twice")));
            }
            let Some(d) = decls.iter().find(|d| d.name == name) else {
                let known: Vec<&str> = decls.iter().map(|d| d.name).collect();
                let known = if known.is_empty() {
                    "it takes none".to_string()
                } else {
                    format!("it takes {}", known.join(", "))
                };
                return Err((Some(i), format!("unknown parameter `{name}` ({known})")));
            };
            let v = d.kind.check(v).map_err(|e| (Some(i), format!("parameter `{name}`: {e}")))?;
            values.push((d.name, v));
        }
        for d in decls {
            if values.iter().any(|(n, _)| *n == d.name) {
                continue;
            }
            match d.default {
                ParamDefault::Required => {
                    return Err((None, format!("parameter `{}` is required ({})", d.name, d.doc)))
                }
                ParamDefault::Unset => {}
                _ => values.extend(d.default.value().map(|v| (d.name, v))),
            }
        }
        Ok(Params { values })
    }

    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.values.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn int(&self, name: &str) -> Result<i64, String> {
        match self.get(name) {
            Some(ParamValue::Int(v)) => Ok(*v),
            other => Err(format!("parameter `{name}`: expected an integer, have {other:?}")),
        }
    }

    pub fn float(&self, name: &str) -> Result<f64, String> {
        match self.get(name) {
            Some(ParamValue::Float(v)) => Ok(*v),
            Some(ParamValue::Int(v)) => Ok(*v as f64),
            other => Err(format!("parameter `{name}`: expected a number, have {other:?}")),
        }
    }

    /// A string, path or choice; `None` when an `Unset` parameter was not given.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(ParamValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// Every value, for `rocelink check`.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &ParamValue)> {
        self.values.iter().map(|(n, v)| (*n, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static DECLS: &[ParamDecl] = &[
        ParamDecl { name: "n", kind: ParamKind::Int { min: 1, max: 10 }, default: ParamDefault::Int(3), doc: "" },
        ParamDecl {
            name: "ring",
            kind: ParamKind::Pow2 { min: 0, max: 1024 },
            default: ParamDefault::Int(64),
            doc: "",
        },
        ParamDecl { name: "x", kind: ParamKind::Float { min: 0.0, max: 1.0 }, default: ParamDefault::Unset, doc: "" },
        ParamDecl {
            name: "fmt",
            kind: ParamKind::Choice(&["csv", "jsonl"]),
            default: ParamDefault::Str("csv"),
            doc: "",
        },
        ParamDecl { name: "path", kind: ParamKind::Path, default: ParamDefault::Required, doc: "where" },
    ];

    fn given(v: &[(&str, ParamValue)]) -> Vec<(String, ParamValue)> {
        v.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
    }

    #[test]
    fn defaults_fill_in_and_values_are_normalised() {
        let p = Params::resolve(
            DECLS,
            &given(&[
                ("path", ParamValue::Str("a".into())),
                ("fmt", ParamValue::Ident("JsonL".into())),
                ("x", ParamValue::Int(1)),
            ]),
        )
        .unwrap();
        assert_eq!(p.int("n"), Ok(3));
        assert_eq!(p.str("fmt"), Some("jsonl"));
        assert_eq!(p.float("x"), Ok(1.0));
        assert_eq!(p.int("ring"), Ok(64));
        let p = Params::resolve(DECLS, &given(&[("path", ParamValue::Str("a".into()))])).unwrap();
        assert_eq!(p.get("x"), None);
    }

    #[test]
    fn every_kind_of_bad_parameter_is_refused_with_its_index() {
        let path = ("path", ParamValue::Str("a".into()));
        // (given, index of the refused entry, what the message says)
        type Case<'a> = (Vec<(&'a str, ParamValue)>, Option<usize>, &'a str);
        let cases: Vec<Case> = vec![
            (vec![path.clone(), ("bogus", ParamValue::Int(1))], Some(1), "unknown parameter `bogus`"),
            (vec![path.clone(), ("n", ParamValue::Int(11))], Some(1), "out of range 1..=10"),
            (vec![path.clone(), ("n", ParamValue::Str("3".into()))], Some(1), "expected an integer in 1..=10"),
            (vec![path.clone(), ("ring", ParamValue::Int(100))], Some(1), "power of two"),
            (vec![path.clone(), ("fmt", ParamValue::Str("xml".into()))], Some(1), "not one of csv, jsonl"),
            (vec![path.clone(), path.clone()], Some(1), "given twice"),
            (vec![("x", ParamValue::Float(f64::NAN))], Some(0), "out of range"),
            (vec![], None, "`path` is required"),
        ];
        for (g, at, msg) in cases {
            let (i, e) = Params::resolve(DECLS, &given(&g)).unwrap_err();
            assert_eq!(i, at, "{e}");
            assert!(e.contains(msg), "{e} should say {msg}");
        }
    }
}
