//! The graph as Graphviz (`rocelink graph <file> --dot`): the fused device chain in one box
//! (it is one loop on the backend), host operators outside it, each flow an edge labelled
//! with its ports and, for host flows, its queue.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::compile::Plan;
use crate::ops::{self, Domain};

/// A DOT string literal; line breaks become DOT's `\n`.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))
}

/// Graphviz `digraph` text of `plan`.
pub fn dot(plan: &Plan) -> String {
    let g = &plan.graph;
    let mut s = String::new();
    let _ = writeln!(s, "digraph {} {{", quote(&g.name));
    let _ = writeln!(s, "  rankdir=LR;\n  node [shape=box, style=rounded, fontname=\"sans-serif\"];\n  edge [fontname=\"sans-serif\", fontsize=10];");
    // Looked up by name (a checked graph's names are unique), not searched for each flow.
    let by_name: HashMap<&str, &str> = g.operators.iter().map(|o| (o.name.as_str(), o.kind.as_str())).collect();
    let domain = |name: &str| by_name.get(name).and_then(|k| ops::lookup(k)).map(|d| d.domain());
    let label = |name: &str| {
        let kind = by_name.get(name).copied().unwrap_or("");
        quote(&format!("{name}\n{kind}"))
    };
    let _ = writeln!(
        s,
        "  subgraph cluster_data_path {{\n    label={};\n    style=dashed;",
        quote(&format!("data path: one transceiver loop ({:?} backend)", plan.backend.asked))
    );
    for o in &g.operators {
        match domain(&o.name) {
            Some(Domain::Transceiver) => {
                let _ = writeln!(s, "    {} [label={}, shape=box3d];", quote(&o.name), label(&o.name));
            }
            Some(Domain::Device) => {
                let _ = writeln!(s, "    {} [label={}];", quote(&o.name), label(&o.name));
            }
            _ => {}
        }
    }
    let _ = writeln!(s, "  }}");
    for h in &plan.host_ops {
        let _ = writeln!(
            s,
            "  {} [label={}, style=\"rounded,filled\", fillcolor=\"#eef3fb\"];",
            quote(&h.name),
            label(&h.name)
        );
    }
    let host_flows: HashMap<(&str, &str, &str, &str), _> =
        plan.host_flows.iter().map(|x| ((x.from.0.as_str(), x.from.1, x.to.0.as_str(), x.to.1), x)).collect();
    for f in &g.flows {
        let (Some((a, ap)), Some((b, bp))) = (f.from.split_once('.'), f.to.split_once('.')) else { continue };
        let host = domain(b) == Some(Domain::Host);
        let queue = if host {
            let fl = host_flows.get(&(a, ap, b, bp));
            fl.map(|x| format!("\n{} msgs, {}", x.capacity, x.policy.as_str())).unwrap_or_default()
        } else {
            String::new()
        };
        let style = if host { ", style=dashed" } else { ", penwidth=2" };
        let _ =
            writeln!(s, "  {} -> {} [label={}{style}];", quote(a), quote(b), quote(&format!("{ap} -> {bp}{queue}")));
    }
    let _ = writeln!(s, "}}");
    s
}
