//! `--set path=value`: changes to a graph file made on the command line, applied to its text
//! before it is parsed, so that a value set this way is checked exactly like one written in
//! the file.
//!
//! A path names a field through structs and variants (`run.stop`, `nic.wire`,
//! `peer.address`), an operator by name in the `operators` list (`operators.recorder.params.path`,
//! or `operators.recorder.path` for short), or a list item by index (`flows.2.capacity`). A
//! field the file leaves out is inserted (with the structs above it, if they are missing too).
//!
//! Guarantees: the edited text keeps a map from each of its bytes to where it came from (a
//! byte of the file, or the n-th `--set`), so errors still point into the file, or name the
//! `--set` they come from.

use super::source::{self, Body, Node, NodeKind, Span};

/// One `--set path=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub path: String,
    /// RON text of the value.
    pub value: String,
}

impl Override {
    /// Parses `path=value`.
    pub fn parse(s: &str) -> Result<Override, String> {
        let (path, value) = s
            .split_once('=')
            .ok_or_else(|| format!("--set {s}: expected path=value (for example run.stop=Count(1000))"))?;
        let (path, value) = (path.trim(), value.trim());
        if path.is_empty() || path.split('.').any(str::is_empty) {
            return Err(format!("--set {s}: `{path}` is not a path (fields separated by dots, for example run.size)"));
        }
        if value.is_empty() {
            return Err(format!("--set {s}: no value after `=`"));
        }
        Ok(Override { path: path.into(), value: value.into() })
    }

    /// The value as a RON string literal (for values like `127.0.0.5:8192` or `/tmp/out`
    /// that users write without quotes).
    pub fn quoted(&self) -> Override {
        let value = ron::to_string(&self.value).unwrap_or_else(|_| format!("{:?}", self.value));
        Override { path: self.path.clone(), value }
    }

    /// Whether the value already is a string literal.
    pub fn is_quoted(&self) -> bool {
        self.value.starts_with('"') || self.value.starts_with("r#") || self.value.starts_with("r\"")
    }
}

/// Where a byte of the edited text came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Byte offset in the original file.
    File(usize),
    /// The `--set` with this index.
    Set(usize),
}

#[derive(Debug, Clone, Copy)]
struct Piece {
    len: usize,
    /// `File(start)`: the piece is the file's bytes from `start`.
    from: Origin,
}

/// A file's text with overrides applied.
#[derive(Debug, Clone)]
pub struct Patched {
    pub text: String,
    pieces: Vec<Piece>,
}

impl Patched {
    /// The text unchanged.
    pub fn new(text: &str) -> Patched {
        Patched { text: text.to_string(), pieces: vec![Piece { len: text.len(), from: Origin::File(0) }] }
    }

    /// Where byte `offset` of [`Self::text`] came from (the end of the text maps to the end
    /// of the file).
    pub fn origin(&self, offset: usize) -> Origin {
        let mut at = 0;
        for p in &self.pieces {
            if offset < at + p.len {
                return match p.from {
                    Origin::File(start) => Origin::File(start + offset - at),
                    set => set,
                };
            }
            at += p.len;
        }
        // Past the end: the end of the last file piece.
        let end = self.pieces.iter().rev().find_map(|p| match p.from {
            Origin::File(start) => Some(start + p.len),
            Origin::Set(_) => None,
        });
        Origin::File(end.unwrap_or(0))
    }

    /// Where an error at `offset` comes from: like [`Self::origin`], except that an error
    /// right after a `--set` value (a parser that wanted more, like `Udp` for `Udp()`) is
    /// that value's.
    pub fn blame(&self, offset: usize) -> Origin {
        if let Some(before) = offset.checked_sub(1) {
            if let o @ Origin::Set(_) = self.origin(before) {
                return o;
            }
        }
        self.origin(offset)
    }

    /// Replaces `span` of the current text with `with`, which came from `--set` number `set`.
    fn splice(&mut self, span: Span, with: &str, set: usize) {
        let mut out = Vec::with_capacity(self.pieces.len() + 2);
        let mut at = 0;
        let mut inserted = false;
        for p in &self.pieces {
            let (s, e) = (at, at + p.len);
            at = e;
            // The part of this piece before the span.
            if s < span.start {
                let keep = span.start.min(e) - s;
                out.push(Piece { len: keep, from: p.from });
            }
            if !inserted && e >= span.start && (s <= span.start) {
                out.push(Piece { len: with.len(), from: Origin::Set(set) });
                inserted = true;
            }
            // The part after the span.
            if e > span.end {
                let skip = span.end.max(s) - s;
                let from = match p.from {
                    Origin::File(start) => Origin::File(start + skip),
                    o => o,
                };
                out.push(Piece { len: p.len - skip, from });
            }
        }
        if !inserted {
            out.push(Piece { len: with.len(), from: Origin::Set(set) });
        }
        out.retain(|p| p.len > 0);
        self.pieces = out;
        self.text.replace_range(span.start..span.end, with);
    }
}

/// Applies `sets` in order to `text`. Each set sees the text left by the ones before it, so a
/// later set of the same path wins.
pub fn apply(text: &str, sets: &[Override]) -> Result<Patched, String> {
    let mut p = Patched::new(text);
    for (i, set) in sets.iter().enumerate() {
        // A value that is not one RON value (`127.0.0.5:8192`, `/tmp/out`) is a string
        // written without quotes.
        let set = if source::parse(&set.value).is_err() { set.quoted() } else { set.clone() };
        let tree = source::parse(&p.text).map_err(|e| {
            let (l, c) = source::line_col(&p.text, e.offset);
            format!("--set {}={}: the text cannot be followed at {l}:{c}: {}", set.path, set.value, e.message)
        })?;
        let segs: Vec<&str> = set.path.split('.').collect();
        let (span, with) =
            edit(&tree, &segs, &set.value).map_err(|e| format!("--set {}={}: {e}", set.path, set.value))?;
        p.splice(span, &with, i);
    }
    Ok(p)
}

/// The span to replace and its replacement for setting `segs` under `node` to `value`.
fn edit(node: &Node, segs: &[&str], value: &str) -> Result<(Span, String), String> {
    let Some((&seg, rest)) = segs.split_first() else {
        return Ok((node.span, value.to_string()));
    };
    let inner = node.unwrap_some();
    match &inner.kind {
        NodeKind::List(items) => {
            let item = match seg.parse::<usize>() {
                Ok(i) => items
                    .get(i)
                    .ok_or_else(|| format!("the list has {} entries; there is no entry {i}", items.len()))?,
                Err(_) => items
                    .iter()
                    .find(|it| it.field("name").and_then(|f| f.value.as_str()).as_deref() == Some(seg))
                    .ok_or_else(|| format!("no entry named \"{seg}\" in the list"))?,
            };
            // `operators.NAME.PARAM` is short for `operators.NAME.params.PARAM`.
            if let Some((&next, _)) = rest.split_first() {
                const ENTRY_FIELDS: [&str; 4] = ["name", "kind", "params", "core"];
                if item.field("kind").is_some() && !ENTRY_FIELDS.contains(&next) {
                    let mut longer = vec!["params"];
                    longer.extend_from_slice(rest);
                    return edit(item, &longer, value);
                }
            }
            edit(item, rest, value)
        }
        NodeKind::Group { body, open, .. } => match body {
            Body::Fields(fields) => match fields.iter().find(|f| f.key == seg) {
                Some(f) => edit(&f.value, rest, value),
                None => Ok(insertion(*open, segs, value)),
            },
            Body::Items(items) if items.is_empty() => Ok(insertion(*open, segs, value)),
            Body::Items(_) => Err(format!("`{seg}` cannot be set inside a tuple; set the whole value instead")),
        },
        NodeKind::Map(_) | NodeKind::Atom(_) => {
            Err(format!("`{seg}` cannot be set inside a value that is not a struct; set the whole value instead"))
        }
    }
}

/// Inserts `a: (b: (c: value)), ` right after the `(` at `open`.
fn insertion(open: usize, segs: &[&str], value: &str) -> (Span, String) {
    let mut text = value.to_string();
    for seg in segs[1..].iter().rev() {
        text = format!("({seg}: {text})");
    }
    let at = open + 1;
    (Span { start: at, end: at }, format!("{}: {text}, ", segs[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> Override {
        Override::parse(s).unwrap()
    }

    const G: &str = "Graph(\n  run: (stop: Count(10), size: 64),\n  operators: [\n    (name: \"rec\", kind: \"Recorder\", params: (path: \"a.csv\")),\n    (name: \"m\", kind: \"Metrics\"),\n  ],\n)";

    #[test]
    fn replaces_inserts_and_maps_back() {
        let p = apply(
            G,
            &[
                set("run.stop=Count(5)"),
                set("operators.rec.path=\"b.csv\""),
                set("operators.m.period_ms=10"),
                set("outputs.dir=\"x\""),
            ],
        )
        .unwrap();
        assert!(p.text.contains("stop: Count(5)"), "{}", p.text);
        assert!(p.text.contains("path: \"b.csv\""), "{}", p.text);
        assert!(p.text.contains("(params: (period_ms: 10), name: \"m\""), "{}", p.text);
        assert!(p.text.starts_with("Graph(outputs: (dir: \"x\"), \n"), "{}", p.text);
        // A byte of the file maps to itself, shifted; a byte of a set to that set.
        let at = p.text.find("size").unwrap();
        assert_eq!(p.origin(at), Origin::File(G.find("size").unwrap()));
        assert_eq!(p.origin(p.text.find("Count(5)").unwrap()), Origin::Set(0));
        assert_eq!(p.origin(p.text.find("period_ms").unwrap()), Origin::Set(2));
        assert_eq!(p.origin(p.text.len()), Origin::File(G.len()));
    }

    #[test]
    fn later_sets_win_and_missing_parents_are_created() {
        let p =
            apply(G, &[set("peer.mode=Process"), set("peer.ip=\"1.2.3.4\""), set("run.size=128"), set("run.size=256")])
                .unwrap();
        assert!(p.text.contains("peer: (ip: \"1.2.3.4\", mode: Process)"), "{}", p.text);
        assert!(p.text.contains("size: 256"), "{}", p.text);
    }

    #[test]
    fn bad_paths_say_why() {
        assert!(Override::parse("novalue").is_err());
        assert!(Override::parse("a..b=1").is_err());
        assert!(Override::parse("a=").is_err());
        let e = apply(G, &[set("operators.nobody.path=1")]).unwrap_err();
        assert!(e.contains("no entry named \"nobody\""), "{e}");
        let e = apply(G, &[set("run.stop.n=1")]).unwrap_err();
        assert!(e.contains("inside a tuple"), "{e}");
        assert_eq!(set("x=127.0.0.1:9").quoted().value, "\"127.0.0.1:9\"");
    }
}
