//! Graph checks at scale and the checks `rocelink check` used to leave to the run: big graphs
//! (one line or one entry a line) are checked with bounded output, a LatencyReport whose
//! files would land outside outputs.dir and a flow written twice are refused up front, at
//! their line and column.

use rocelink_operator::graph::error::MAX_SHOWN;
use rocelink_operator::graph::{compile, load, GraphErrors, Plan};

/// A graph with `n` Sinks, each fed by the tap when `connected`; entries on one line, or one
/// a line.
fn sinks(n: usize, connected: bool, one_line: bool) -> String {
    let sep = if one_line { "," } else { ",\n" };
    let mut ops = vec![
        r#"(name:"roce",kind:"RoceTransceiver",params:(tap_ring:1024))"#.to_string(),
        r#"(name:"echo",kind:"Echo")"#.to_string(),
    ];
    ops.extend((0..n).map(|i| format!(r#"(name:"s{i}",kind:"Sink")"#)));
    let mut flows =
        vec![r#"(from:"roce.rx",to:"echo.in")"#.to_string(), r#"(from:"echo.out",to:"roce.tx")"#.to_string()];
    if connected {
        flows.extend((0..n).map(|i| format!(r#"(from:"roce.tap",to:"s{i}.in")"#)));
    }
    format!("Graph(name:\"big\",operators:[{}],flows:[{}])\n", ops.join(sep), flows.join(sep))
}

fn check(text: &str) -> Result<Plan, GraphErrors> {
    compile(load::load_str("t.ron", text, &[])?)
}

/// `t.ron:LINE:COL` of the `nth` occurrence of `needle` (columns in characters).
fn loc(text: &str, needle: &str, nth: usize) -> String {
    let at = text.match_indices(needle).nth(nth).unwrap_or_else(|| panic!("`{needle}` not in the test graph")).0;
    let line = 1 + text[..at].matches('\n').count();
    let col = 1 + text[..at].chars().rev().take_while(|&c| c != '\n').count();
    format!("t.ron:{line}:{col}")
}

#[test]
fn twenty_thousand_operators_check_on_one_line_and_on_many() {
    const N: usize = 20_000;
    for one_line in [true, false] {
        let text = sinks(N, true, one_line);
        let plan = check(&text).unwrap_or_else(|e| panic!("valid graph refused: {e}"));
        assert_eq!(plan.host_ops.len(), N);
        assert_eq!(plan.host_flows.len(), N);
        assert!(plan.host_ops.iter().all(|h| h.inputs.len() == 1), "each Sink has its flow");
    }
}

#[test]
fn many_errors_are_all_found_but_shown_bounded() {
    const N: usize = 20_000;
    for one_line in [true, false] {
        let text = sinks(N, false, one_line);
        let e = check(&text).expect_err("unconnected Sinks are refused");
        assert_eq!(e.0.len(), N, "one error per unconnected Sink");
        assert_eq!(e.first().location(), Some(loc(&text, "(name:\"s0\"", 0)));
        let last = e.0.last().unwrap();
        assert_eq!(last.location(), Some(loc(&text, &format!("(name:\"s{}\"", N - 1), 0)));
        // What is printed: the first errors, each with at most a line's worth of snippet,
        // then a count, whatever the length of the file's lines.
        let shown = e.to_string();
        assert_eq!(shown.matches("is not connected").count(), MAX_SHOWN, "{shown}");
        assert!(shown.contains(&format!("... and {} more errors", N - MAX_SHOWN)), "{shown}");
        assert!(shown.ends_with(&format!("({N} errors)")), "{shown}");
        assert!(shown.len() < MAX_SHOWN * 400, "{} bytes shown for {N} errors (one line: {one_line})", shown.len());
        assert!(shown.lines().all(|l| l.chars().count() < 250), "a line too long:\n{shown}");
    }
}

#[test]
fn a_long_chain_of_host_operators_does_not_overflow_the_stack() {
    // Host operators one after the other: the cycle search walks them without recursion.
    const N: usize = 60_000;
    let mut ops =
        vec![r#"(name:"roce",kind:"RoceTransceiver")"#.to_string(), r#"(name:"echo",kind:"Echo")"#.to_string()];
    ops.extend((0..N).map(|i| format!(r#"(name:"m{i}",kind:"Metrics")"#)));
    let mut flows = vec![
        r#"(from:"roce.rx",to:"echo.in")"#.to_string(),
        r#"(from:"echo.out",to:"roce.tx")"#.to_string(),
        r#"(from:"roce.tap",to:"m0.in")"#.to_string(),
    ];
    flows.extend((1..N).map(|i| format!(r#"(from:"m{}.out",to:"m{i}.in")"#, i - 1)));
    let text = format!("Graph(operators:[{}],flows:[{}])", ops.join(",\n"), flows.join(",\n"));
    let plan = check(&text).unwrap_or_else(|e| panic!("valid graph refused: {e}"));
    assert_eq!(plan.host_ops.len(), N);
    assert!(plan.host_ops[1..]
        .iter()
        .all(|h| h.inputs.len() == 1 && h.outputs.len() == usize::from(h.name != format!("m{}", N - 1))));
    // Closing the chain into a loop is found at the closing flow.
    let closing = format!("(from:\"m{}.out\",to:\"m1.in\")", N - 1);
    let looped = text.replace("])", &format!(",\n{closing}])"));
    let e = check(&looped).expect_err("a cycle among host operators");
    let m = &e.first().message;
    assert!(m.contains(&format!("closes a cycle among host operators (they could never drain): m1 -> m2 -> m3 -> m4 -> m5 -> m6 -> ... ({} more) -> m{} -> m{} -> m1", N - 1 - 8, N - 2, N - 1)), "{m}");
    assert_eq!(e.first().location(), Some(loc(&looped, &closing, 0)));
}

const REPORT: &str = r#"Graph(
    name: "{graph}",
    operators: [
        (name: "roce", kind: "RoceTransceiver"),
        (name: "echo", kind: "Echo"),
        (name: "rec", kind: "Recorder", params: (path: "r.csv")),
        (name: "latency", kind: "LatencyReport"{params}),
    ],
    flows: [
        (from: "roce.rx", to: "echo.in"),
        (from: "echo.out", to: "roce.tx"),
        (from: "roce.tap", to: "rec.in"),
        (from: "roce.tap", to: "latency.in"),
    ],
)
"#;

fn report(graph: &str, params: &str) -> String {
    REPORT.replace("{graph}", graph).replace("{params}", params)
}

#[test]
fn report_names_with_folders_are_refused_by_check() {
    // The `name` parameter, at the parameter.
    let text = report("g", r#", params: (name: "../../etc/x")"#);
    let e = check(&text).expect_err("a report name with folders");
    assert_eq!(e.first().location(), Some(loc(&text, "name: \"../../etc/x\"", 0)), "{e}");
    assert!(
        e.first().message.contains("operator `latency` (LatencyReport)")
            && e.first().message.contains("without folders"),
        "{e}"
    );
    for bad in [r"a\b", "", "/tmp/x"] {
        let text = report("g", &format!(", params: (name: {bad:?})"));
        assert!(check(&text).is_err(), "name {bad:?} accepted");
    }
    // The graph's name, its default, at the graph's name.
    let text = report("../../etc/x", "");
    let e = check(&text).expect_err("a graph name with folders, used as the report's name");
    assert_eq!(e.first().location(), Some(loc(&text, "\"../../etc/x\"", 0)), "{e}");
    assert!(e.first().message.contains("the graph's name"), "{e}");
    // Given its own name, the report does not use the graph's.
    check(&report("../../etc/x", r#", params: (name: "x")"#)).unwrap_or_else(|e| panic!("{e}"));
    check(&report("g", r#", params: (name: "x.y-z")"#)).unwrap_or_else(|e| panic!("{e}"));
    check(&report("g", "")).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_flow_written_twice_is_refused_at_the_second() {
    let dup = r#"(from: "roce.tap", to: "rec.in")"#;
    let text = report("g", "").replace(
        "(from: \"roce.tap\", to: \"latency.in\"),",
        &format!("(from: \"roce.tap\", to: \"latency.in\"),\n        {dup},"),
    );
    let e = check(&text).expect_err("a duplicate flow");
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!(e.first().location(), Some(loc(&text, dup, 1)), "{e}");
    assert!(e.first().message.contains("duplicate flow roce.tap -> rec.in (first at line 12, column 9)"), "{e}");
    // Also with other settings, and on the data path.
    let text = report("g", "").replace("(from: \"roce.tap\", to: \"latency.in\"),", "(from: \"roce.tap\", to: \"latency.in\"),\n        (from: \"roce.tap\", to: \"latency.in\", capacity: 8),\n        (from: \"echo.out\", to: \"roce.tx\"),");
    let e = check(&text).expect_err("duplicate flows");
    assert_eq!(e.0.len(), 2, "{e}");
    assert_eq!(e.0[0].location(), Some(loc(&text, "(from: \"roce.tap\", to: \"latency.in\", capacity: 8)", 0)), "{e}");
    assert_eq!(e.0[1].location(), Some(loc(&text, "(from: \"echo.out\", to: \"roce.tx\")", 1)), "{e}");
}
