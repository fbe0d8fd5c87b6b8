//! Reading a graph file: `--set` overrides applied to its text, `ron` for syntax and the
//! shape of every setting (errors at `ron`'s line:column), then the position scanner for the
//! line:column of each operator, flow and parameter, so later checks can point at them.

use std::path::Path;
use std::sync::Arc;

use super::error::{At, GraphError, GraphErrors, SourceFile};
use super::model::{FlowDef, Graph, GraphFile, OperatorDef, ParamDef, Places};
use super::set::{self, Origin, Override, Patched};
use super::source::{self, Atom, Body, Node, NodeKind};
use crate::ops::ParamValue;

/// RON as graph files are read: optional fields without `Some(..)`.
fn options() -> ron::Options {
    ron::Options::default().with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
}

/// Reads and parses the graph file at `path` with `sets` applied.
pub fn load_file(path: &Path, sets: &[Override]) -> Result<Graph, GraphErrors> {
    let cannot = |e: &dyn std::fmt::Display| {
        GraphError::new(At::Nowhere, format!("cannot read graph file {}: {e}", path.display()))
    };
    // Not read at all when it is too big (a file that grows meanwhile is caught below).
    if let Ok(m) = std::fs::metadata(path) {
        if m.is_file() && m.len() > MAX_FILE_BYTES as u64 {
            return Err(too_big(&path.display().to_string(), m.len()).into());
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| cannot(&e))?;
    load_str(&path.display().to_string(), &text, sets)
}

/// Largest graph file read (16 MiB: hundreds of thousands of operators).
pub const MAX_FILE_BYTES: usize = 16 << 20;
/// Most operators, and most flows, a graph may have.
pub const MAX_ENTRIES: usize = 100_000;

fn too_big(file: &str, len: u64) -> GraphError {
    GraphError::new(
        At::Nowhere,
        format!("graph file {file} is {len} bytes; graph files are read up to {} MiB", MAX_FILE_BYTES >> 20),
    )
}

/// Maps offsets of the edited text back to the file (or to a `--set`).
struct Locator<'a> {
    original: &'a Arc<SourceFile>,
    patched: &'a Patched,
    sets: &'a [Override],
}

impl Locator<'_> {
    fn at(&self, offset: usize) -> At {
        self.at_origin(self.patched.origin(offset))
    }

    fn at_origin(&self, origin: Origin) -> At {
        match origin {
            Origin::File(o) => At::file(self.original, o),
            Origin::Set(i) => At::Set(self.sets.get(i).map_or_else(String::new, |s| format!("{}={}", s.path, s.value))),
        }
    }

    fn ron_error(&self, e: &ron::error::SpannedError) -> GraphError {
        GraphError::new(self.at_origin(self.patched.blame(ron_offset(&self.patched.text, e))), e.code.to_string())
    }
}

/// The offset `ron` points at, moved over whitespace to the token it is about (ron's spans
/// can start at the blank before a value).
fn ron_offset(text: &str, e: &ron::error::SpannedError) -> usize {
    let off = source::offset_of(text, e.span.start.line, e.span.start.col);
    let blank = text.get(off..).map_or(0, |rest| rest.len() - rest.trim_start().len());
    if off + blank < text.len() {
        off + blank
    } else {
        off
    }
}

/// Parses graph text; `file` names it in errors; the graph's name defaults to the file's
/// stem.
pub fn load_str(file: &str, text: &str, sets: &[Override]) -> Result<Graph, GraphErrors> {
    if text.len() > MAX_FILE_BYTES {
        return Err(too_big(file, text.len() as u64).into());
    }
    let original = Arc::new(SourceFile::new(file, text));
    // Overrides need the file's structure; a file that is not RON is reported as `ron` sees it.
    match source::parse(text) {
        Err(scan) => {
            let unpatched = Patched::new(text);
            let loc = Locator { original: &original, patched: &unpatched, sets };
            return Err(match options().from_str::<ron::Value>(text) {
                Err(e) => loc.ron_error(&e).into(),
                Ok(_) => GraphError::new(loc.at(scan.offset), format!("cannot follow the file here: {}", scan.message))
                    .into(),
            });
        }
        // Too many entries are refused before `ron` reads them all.
        Ok(tree) => too_many(&tree, &|o| At::file(&original, o))?,
    }

    // Values given without quotes (`--set peer.address=10.0.0.2:8192`) are retried as
    // strings when they do not parse as written.
    let mut tried: Vec<Option<GraphError>> = vec![None; sets.len()];
    let mut effective = sets.to_vec();
    let (parsed, patched) = loop {
        let patched = set::apply(text, &effective).map_err(|e| GraphError::new(At::Nowhere, e))?;
        let loc = Locator { original: &original, patched: &patched, sets };
        match options().from_str::<GraphFile>(&patched.text) {
            Ok(g) => break (g, patched),
            Err(e) => {
                let err = loc.ron_error(&e);
                let off = ron_offset(&patched.text, &e);
                match patched.blame(off) {
                    Origin::Set(i) if tried[i].is_none() && !effective[i].is_quoted() => {
                        tried[i] = Some(err);
                        effective[i] = effective[i].quoted();
                    }
                    // Quoting did not help either: report what was wrong as written.
                    Origin::Set(i) => return Err(tried[i].take().unwrap_or(err).into()),
                    Origin::File(_) => return Err(err.into()),
                }
            }
        }
    };
    let loc = Locator { original: &original, patched: &patched, sets };
    let tree = source::parse(&patched.text)
        .map_err(|e| GraphError::new(loc.at(e.offset), format!("cannot follow the file here: {}", e.message)))?;
    too_many(&tree, &|o| loc.at(o))?;
    build(file, parsed, &tree, &loc)
}

/// Refuses more than [`MAX_ENTRIES`] operators or flows, at the first one too many.
fn too_many(tree: &Node, at: &dyn Fn(usize) -> At) -> Result<(), GraphError> {
    for list in ["operators", "flows"] {
        if let Some(extra) = tree.field(list).and_then(|f| f.value.unwrap_some().items().get(MAX_ENTRIES)) {
            return Err(GraphError::new(
                at(extra.span.start),
                format!("more than {MAX_ENTRIES} {list}: a graph has at most {MAX_ENTRIES}"),
            ));
        }
    }
    Ok(())
}

/// The typed graph, with positions from `tree`.
fn build(file: &str, g: GraphFile, tree: &Node, loc: &Locator<'_>) -> Result<Graph, GraphErrors> {
    let mut places = Places::new(loc.at(tree.span.start));
    record_places(tree, "", &mut places, loc);
    let name = g.name.clone().unwrap_or_else(|| {
        Path::new(file).file_stem().map_or_else(|| "graph".into(), |s| s.to_string_lossy().into_owned())
    });
    let mut errors = Vec::new();

    let op_nodes = tree.field("operators").map_or(&[][..], |f| f.value.items());
    let mut operators = Vec::with_capacity(g.operators.len());
    for (i, e) in g.operators.into_iter().enumerate() {
        let node = op_nodes.get(i);
        let at = node.map_or(At::Nowhere, |n| loc.at(n.span.start));
        let kind_at = node.and_then(|n| n.field("kind")).map_or(at.clone(), |f| loc.at(f.value.span.start));
        let mut params = Vec::new();
        if let Some(p) = node.and_then(|n| n.field("params")) {
            match params_of(&p.value, loc) {
                Ok(ps) => params = ps,
                Err(err) => errors.push(GraphError::new(err.0, format!("operator `{}`: {}", e.name, err.1))),
            }
        }
        operators.push(OperatorDef { name: e.name, kind: e.kind, params, core: e.core, at, kind_at });
    }

    let flow_nodes = tree.field("flows").map_or(&[][..], |f| f.value.items());
    let flows = g
        .flows
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let node = flow_nodes.get(i);
            let at = node.map_or(At::Nowhere, |n| loc.at(n.span.start));
            let value_at = |k: &str| node.and_then(|n| n.field(k)).map_or(at.clone(), |f| loc.at(f.value.span.start));
            FlowDef {
                from_at: value_at("from"),
                to_at: value_at("to"),
                from: f.from,
                to: f.to,
                capacity: f.capacity,
                policy: f.policy,
                at,
            }
        })
        .collect();

    if !errors.is_empty() {
        return Err(GraphErrors(errors));
    }
    let (peer, qec) = g.peer.split();
    Ok(Graph {
        name,
        file: Some(file.to_string()),
        backend: g.backend,
        nic: g.nic,
        peer,
        qec,
        cores: g.cores,
        run: g.run,
        outputs: g.outputs,
        operators,
        flows,
        places,
    })
}

/// Records where every setting is (by the position of its value), looking through variant
/// names (`nic.wire.bind`, `run.stop`); `operators` and `flows` only as a whole.
fn record_places(node: &Node, prefix: &str, places: &mut Places, loc: &Locator<'_>) {
    if let NodeKind::Group { body: Body::Fields(fields), .. } = &node.unwrap_some().kind {
        for f in fields {
            let path = if prefix.is_empty() { f.key.clone() } else { format!("{prefix}.{}", f.key) };
            places.insert(&path, loc.at(f.value.span.start));
            // Operators and flows keep their own positions (see `build`).
            if !(prefix.is_empty() && (f.key == "operators" || f.key == "flows")) {
                record_places(&f.value, &path, places, loc);
            }
        }
    }
}

/// `params: (name: value, ..)` (or a map with string keys), each with where it is.
fn params_of(node: &Node, loc: &Locator<'_>) -> Result<Vec<ParamDef>, (At, String)> {
    let node = node.unwrap_some();
    let mut out = Vec::new();
    match &node.kind {
        NodeKind::Group { body: Body::Fields(fields), name: None, .. } => {
            for f in fields {
                let value = param_value(&f.value)
                    .map_err(|e| (loc.at(f.value.span.start), format!("parameter `{}`: {e}", f.key)))?;
                if let Some(value) = value {
                    out.push(ParamDef { name: f.key.clone(), value, at: loc.at(f.key_span.start) });
                }
            }
        }
        NodeKind::Group { body: Body::Items(items), name: None, .. } if items.is_empty() => {}
        NodeKind::Map(entries) => {
            for (k, v) in entries {
                let key =
                    k.as_str().ok_or_else(|| (loc.at(k.span.start), "parameter names are strings".to_string()))?;
                let value = param_value(v).map_err(|e| (loc.at(v.span.start), format!("parameter `{key}`: {e}")))?;
                if let Some(value) = value {
                    out.push(ParamDef { name: key, value, at: loc.at(k.span.start) });
                }
            }
        }
        NodeKind::Atom(Atom::Ident(n)) if n == "None" => {}
        _ => return Err((loc.at(node.span.start), "params must be written `(name: value, ..)`".into())),
    }
    Ok(out)
}

/// A parameter value from its text; `None` (the RON value) leaves the parameter unset.
fn param_value(node: &Node) -> Result<Option<ParamValue>, String> {
    let n = node.unwrap_some();
    let bad = || "expected a number, a string, true, false or a name".to_string();
    Ok(Some(match &n.kind {
        NodeKind::Atom(Atom::Str(t)) | NodeKind::Atom(Atom::Char(t)) => ParamValue::Str(
            ron::from_str::<String>(t)
                .or_else(|_| ron::from_str::<char>(t).map(String::from))
                .map_err(|e| e.to_string())?,
        ),
        NodeKind::Atom(Atom::Number(t)) => match ron::from_str::<i64>(t) {
            Ok(v) => ParamValue::Int(v),
            Err(_) => {
                ParamValue::Float(ron::from_str::<f64>(t).map_err(|_| format!("`{t}` is not a number rocelink reads"))?)
            }
        },
        NodeKind::Atom(Atom::Ident(s)) => match s.as_str() {
            "true" => ParamValue::Bool(true),
            "false" => ParamValue::Bool(false),
            "None" => return Ok(None),
            _ => ParamValue::Ident(s.clone()),
        },
        _ => return Err(bad()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = r#"// test graph
Graph(
    run: (stop: Count(100), size: 128),
    operators: [
        (name: "roce", kind: "RoceTransceiver", params: (slots: 32)),
        (name: "rec", kind: "Recorder", params: (path: "r.csv", format: Csv, x: 1.5, y: None)),
    ],
    flows: [
        (from: "roce.tap", to: "rec.in", capacity: 10, policy: Reject),
    ],
)
"#;

    fn at(line: usize, col: usize) -> (usize, usize) {
        (line, col)
    }

    fn pos(a: &At) -> (usize, usize) {
        match a {
            At::File { line, col, .. } => (*line, *col),
            other => panic!("not in the file: {other:?}"),
        }
    }

    #[test]
    fn reads_settings_operators_flows_and_their_positions() {
        let g = load_str("t.ron", G, &[]).unwrap();
        assert_eq!(g.name, "t");
        assert_eq!(g.run.size, 128);
        assert_eq!(pos(&g.operators[1].at), at(6, 9));
        assert_eq!(pos(&g.operators[1].kind_at), at(6, 29));
        let p = &g.operators[1].params;
        assert_eq!(p.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["path", "format", "x"]);
        assert_eq!(p[1].value, ParamValue::Ident("Csv".into()));
        assert_eq!(p[2].value, ParamValue::Float(1.5));
        assert_eq!(pos(&p[2].at), at(6, 78));
        assert_eq!(g.flows[0].capacity, Some(10));
        assert_eq!(pos(&g.flows[0].to_at), at(9, 32));
        assert_eq!(pos(&g.places.at("run.size")), at(3, 35));
        assert_eq!(pos(&g.places.at("run.stop.nothing")), at(3, 17));
    }

    #[test]
    fn syntax_and_shape_errors_point_at_ron_positions() {
        let e = load_str("t.ron", "Graph(\n  run: (stop: Count(1),,\n)", &[]).unwrap_err();
        assert_eq!(e.first().location().as_deref(), Some("t.ron:2:24"), "{e}");
        let e = load_str("t.ron", "Graph(\n  bogus: 1,\n)", &[]).unwrap_err();
        assert!(e.to_string().contains("t.ron:2:3: Unexpected field named `bogus`"), "{e}");
        let e =
            load_str("t.ron", "Graph(\n  operators: [(name: \"a\", kind: \"K\", params: [1])],\n)", &[]).unwrap_err();
        assert!(e.to_string().contains("t.ron:2:46: operator `a`: params must be written"), "{e}");
    }

    #[test]
    fn huge_files_and_too_many_entries_are_refused() {
        let big = format!("Graph(name: \"{}\")", "x".repeat(MAX_FILE_BYTES));
        let e = load_str("t.ron", &big, &[]).unwrap_err();
        assert!(e.to_string().contains("graph files are read up to 16 MiB"), "{e}");
        let path = std::env::temp_dir().join(format!("rocelink-huge-{}.ron", std::process::id()));
        std::fs::write(&path, &big).unwrap();
        let e = load_file(&path, &[]).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert!(e.to_string().contains("graph files are read up to 16 MiB"), "{e}");

        let many = |n: usize| format!("Graph(operators: [\n{}])", "(name: \"s\", kind: \"Sink\"),\n".repeat(n));
        assert!(load_str("t.ron", &many(MAX_ENTRIES), &[]).is_ok());
        let e = load_str("t.ron", &many(MAX_ENTRIES + 1), &[]).unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.first().location().as_deref(), Some(&*format!("t.ron:{}:1", MAX_ENTRIES + 2)), "{e}");
        assert!(e.first().message.contains("more than 100000 operators"), "{e}");
    }

    #[test]
    fn sets_apply_quote_when_needed_and_are_named_in_errors() {
        let s = |t: &str| Override::parse(t).unwrap();
        let g =
            load_str("t.ron", G, &[s("run.size=256"), s("outputs.dir=/tmp/x y"), s("operators.rec.path=out.jsonl")])
                .unwrap();
        assert_eq!(g.run.size, 256);
        assert_eq!(g.outputs.dir, "/tmp/x y");
        assert_eq!(g.operators[1].params[0].value, ParamValue::Str("out.jsonl".into()));
        let e = load_str("t.ron", G, &[s("run.size=big")]).unwrap_err();
        assert_eq!(e.first().at, At::Set("run.size=big".into()), "{e}");
        // Positions after an edit still point into the file.
        let g = load_str("t.ron", G, &[s("run.warmup=5")]).unwrap();
        assert_eq!(pos(&g.operators[1].at), at(6, 9));
    }
}
