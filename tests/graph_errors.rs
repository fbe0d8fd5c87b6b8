//! Invalid graphs are refused before anything starts, each error naming the operator, port or
//! setting and pointing at the line and column of the offending entry. One test per class of
//! error (the issue's list and a few more), through the library; the last ones go through
//! `rocelink check` the way a user meets them.

use std::process::Command;

use rocelink_operator::graph::{compile, load, GraphErrors, Override};

/// A valid graph; `{ops}` and `{flows}` are replaced by each case's entries.
const BASE: &str = r#"// a test graph
Graph(
    name: "t",
    nic: Soft(wire: Inproc),
    peer: FpgaSim(mode: InProcess),
    run: (stop: Count(100), size: 64),
    operators: [
        (name: "roce", kind: "RoceTransceiver"),
{ops}
    ],
    flows: [
{flows}
    ],
)
"#;

const ECHO_OP: &str = r#"        (name: "echo", kind: "Echo"),"#;
const ECHO_FLOWS: &str =
    "        (from: \"roce.rx\", to: \"echo.in\"),\n        (from: \"echo.out\", to: \"roce.tx\"),";

fn graph(ops: &str, flows: &str) -> String {
    BASE.replace("{ops}", ops).replace("{flows}", flows)
}

/// `t.ron:LINE:COL` of the first occurrence of `needle` in `text` (columns in characters).
fn loc(text: &str, needle: &str) -> String {
    let at = text.find(needle).unwrap_or_else(|| panic!("`{needle}` not in the test graph"));
    let line = 1 + text[..at].matches('\n').count();
    let col = 1 + text[..at].chars().rev().take_while(|&c| c != '\n').count();
    format!("t.ron:{line}:{col}")
}

fn check(text: &str, sets: &[&str]) -> Result<(), GraphErrors> {
    let sets: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
    compile(load::load_str("t.ron", text, &sets)?).map(|_| ())
}

/// Asserts `text` is refused with an error at `needle`'s position whose message contains
/// every one of `says`.
fn refused(text: &str, needle: &str, says: &[&str]) {
    let e = check(text, &[]).expect_err("the graph should be refused");
    let first = e.first();
    let shown = e.to_string();
    assert_eq!(first.location(), Some(loc(text, needle)), "wrong place:\n{shown}\n--- in ---\n{text}");
    for s in says {
        assert!(first.message.contains(s), "message should say `{s}`:\n{shown}");
    }
    // The error shows the line with a caret under the column.
    assert!(shown.contains(" | ") && shown.contains('^'), "{shown}");
}

#[test]
fn the_base_graph_is_valid() {
    check(&graph(ECHO_OP, ECHO_FLOWS), &[]).unwrap();
}

#[test]
fn ron_syntax_error() {
    let text = graph(ECHO_OP, ECHO_FLOWS).replace("(stop: Count(100), size: 64)", "(stop: Count(100) size: 64)");
    let e = check(&text, &[]).unwrap_err();
    assert_eq!(e.first().location(), Some(loc(&text, "size: 64)")), "{e}");
    assert!(e.first().message.contains("Expected"), "{e}");
}

#[test]
fn unknown_field_and_unknown_variant_are_ron_errors_at_their_position() {
    let text = graph(ECHO_OP, ECHO_FLOWS).replace("name: \"t\",", "name: \"t\",\n    colour: 3,");
    refused(&text, "colour", &["Unexpected field named `colour`"]);
    let text = graph(ECHO_OP, ECHO_FLOWS).replace("Soft(wire: Inproc)", "Soft(wire: Infiniband)");
    refused(&text, "Infiniband", &["Infiniband"]);
}

#[test]
fn unknown_kind() {
    let text = graph(r#"        (name: "echo", kind: "Ecko"),"#, ECHO_FLOWS);
    refused(&text, "\"Ecko\"", &["operator `echo`", "unknown kind `Ecko`", "Echo, QecDecoder, Recorder"]);
    let text = graph(r#"        (name: "echo", kind: "echo"),"#, ECHO_FLOWS);
    refused(&text, "\"echo\")", &["did you mean `Echo`"]);
}

#[test]
fn duplicate_name() {
    let ops = format!("{ECHO_OP}\n        (name: \"echo\", kind: \"Sink\"),");
    let text = graph(&ops, ECHO_FLOWS);
    refused(&text, "(name: \"echo\", kind: \"Sink\")", &["duplicate operator name `echo`", "first on line 9"]);
}

#[test]
fn bad_operator_name() {
    let text = graph(r#"        (name: "e.1", kind: "Echo"),"#, ECHO_FLOWS);
    refused(&text, "(name: \"e.1\"", &["operator name `e.1`"]);
}

#[test]
fn unknown_operator_in_a_flow_is_dangling() {
    let flows = ECHO_FLOWS.replace("to: \"echo.in\"", "to: \"ech.in\"");
    let text = graph(ECHO_OP, &flows);
    refused(&text, "\"ech.in\"", &["flow to `ech.in`", "dangling", "no operator named `ech`"]);
}

#[test]
fn unknown_port_is_dangling() {
    let flows = ECHO_FLOWS.replace("from: \"echo.out\"", "from: \"echo.output\"");
    let text = graph(ECHO_OP, &flows);
    refused(
        &text,
        "\"echo.output\"",
        &["dangling", "operator `echo` (Echo) has no port `output`", "its ports: in, out"],
    );
}

#[test]
fn flow_in_the_wrong_direction() {
    let flows = ECHO_FLOWS.replace("(from: \"echo.out\", to: \"roce.tx\")", "(from: \"echo.in\", to: \"roce.tx\")");
    let text = graph(ECHO_OP, &flows);
    refused(&text, "\"echo.in\", to: \"roce.tx\"", &["port `in` of `echo` is an input port"]);
}

#[test]
fn unknown_parameter() {
    let text = graph(r#"        (name: "echo", kind: "Echo", params: (gain: 2)),"#, ECHO_FLOWS);
    refused(&text, "gain", &["operator `echo` (Echo)", "unknown parameter `gain`", "it takes none"]);
    let ops =
        format!("{ECHO_OP}\n        (name: \"rec\", kind: \"Recorder\", params: (path: \"r.csv\", colour: \"red\")),");
    let flows = format!("{ECHO_FLOWS}\n        (from: \"roce.tap\", to: \"rec.in\"),");
    let text = graph(&ops, &flows);
    refused(
        &text,
        "colour",
        &["operator `rec` (Recorder)", "unknown parameter `colour`", "it takes path, format, max_records"],
    );
}

#[test]
fn parameter_of_the_wrong_type_or_range() {
    let text = BASE
        .replace(
            "(name: \"roce\", kind: \"RoceTransceiver\")",
            "(name: \"roce\", kind: \"RoceTransceiver\", params: (slots: 5000))",
        )
        .replace("{ops}", ECHO_OP)
        .replace("{flows}", ECHO_FLOWS);
    refused(&text, "slots", &["operator `roce`", "parameter `slots`", "out of range 1..=4096"]);
    let text = BASE
        .replace(
            "(name: \"roce\", kind: \"RoceTransceiver\")",
            "(name: \"roce\", kind: \"RoceTransceiver\", params: (tap_ring: \"big\"))",
        )
        .replace("{ops}", ECHO_OP)
        .replace("{flows}", ECHO_FLOWS);
    refused(&text, "tap_ring", &["parameter `tap_ring`", "expected 0 or a power of two"]);
}

#[test]
fn required_port_left_unconnected() {
    let ops = format!("{ECHO_OP}\n        (name: \"rec\", kind: \"Recorder\"),");
    let text = graph(&ops, ECHO_FLOWS);
    refused(&text, "(name: \"rec\"", &["operator `rec` (Recorder)", "required input port `in`", "not connected"]);
}

#[test]
fn port_type_mismatch() {
    // Two echo stages in a row: the first answers (Response), the second takes a request.
    let ops = format!("{ECHO_OP}\n        (name: \"echo2\", kind: \"Echo\"),");
    let flows = "        (from: \"roce.rx\", to: \"echo.in\"),\n        (from: \"echo.out\", to: \"echo2.in\"),\n        (from: \"echo2.out\", to: \"roce.tx\"),";
    let text = graph(&ops, flows);
    refused(
        &text,
        "(from: \"echo.out\", to: \"echo2.in\")",
        &["port type mismatch", "`echo.out` sends Response", "`echo2.in` takes Request"],
    );
}

#[test]
fn cycle_among_device_stages() {
    let ops = format!("{ECHO_OP}\n        (name: \"echo2\", kind: \"Echo\"),");
    let flows = "        (from: \"roce.rx\", to: \"echo.in\"),\n        (from: \"echo.out\", to: \"echo2.in\"),\n        (from: \"echo2.out\", to: \"echo.in\"),";
    let text = graph(&ops, flows);
    refused(
        &text,
        "(from: \"echo2.out\", to: \"echo.in\")",
        &["closes a cycle among device stages", "echo -> echo2 -> echo"],
    );
}

#[test]
fn cycle_among_host_operators() {
    let ops =
        format!("{ECHO_OP}\n        (name: \"m\", kind: \"Metrics\"),\n        (name: \"rec\", kind: \"Recorder\"),");
    let flows = format!("{ECHO_FLOWS}\n        (from: \"roce.tap\", to: \"m.in\"),\n        (from: \"m.out\", to: \"rec.in\"),\n        (from: \"rec.out\", to: \"m.in\"),");
    let text = graph(&ops, &flows);
    refused(&text, "(from: \"rec.out\", to: \"m.in\")", &["cycle among host operators", "m -> rec -> m"]);
}

#[test]
fn device_stage_fed_by_a_host_operator() {
    let ops = format!("{ECHO_OP}\n        (name: \"m\", kind: \"Metrics\"),");
    let flows = "        (from: \"roce.rx\", to: \"echo.in\"),\n        (from: \"echo.out\", to: \"roce.tx\"),\n        (from: \"roce.tap\", to: \"m.in\"),\n        (from: \"m.out\", to: \"echo.in\"),";
    let text = graph(&ops, flows);
    refused(&text, "(from: \"m.out\", to: \"echo.in\")", &["device stage `echo` is fed by host operator `m`"]);
}

#[test]
fn host_operator_fed_from_inside_the_chain() {
    let ops = format!("{ECHO_OP}\n        (name: \"sink\", kind: \"Sink\"),");
    let flows = format!("{ECHO_FLOWS}\n        (from: \"echo.out\", to: \"sink.in\"),");
    let text = graph(&ops, &flows);
    refused(
        &text,
        "(from: \"echo.out\", to: \"sink.in\")",
        &["host operator `sink` is fed from inside the fused chain", "tap port"],
    );
}

#[test]
fn queue_settings_on_a_fused_flow() {
    let flows = ECHO_FLOWS
        .replace("(from: \"roce.rx\", to: \"echo.in\")", "(from: \"roce.rx\", to: \"echo.in\", capacity: 16)");
    let text = graph(ECHO_OP, &flows);
    refused(&text, "(from: \"roce.rx\"", &["fused into the device stage chain", "capacity and policy do not apply"]);
}

#[test]
fn chain_that_forks() {
    let ops = format!("{ECHO_OP}\n        (name: \"echo2\", kind: \"Echo\"),");
    let flows = format!(
        "{ECHO_FLOWS}\n        (from: \"roce.rx\", to: \"echo2.in\"),\n        (from: \"echo2.out\", to: \"roce.tx\"),"
    );
    let text = graph(&ops, &flows);
    refused(&text, "(from: \"roce.rx\", to: \"echo2.in\")", &["`roce.rx` feeds 2 device flows", "single path"]);
}

#[test]
fn no_transceiver_or_two() {
    let text = BASE
        .replace("        (name: \"roce\", kind: \"RoceTransceiver\"),\n", "")
        .replace("{ops}", r#"        (name: "s", kind: "Sink"),"#)
        .replace("{flows}", "");
    refused(&text, "[\n        (name: \"s\"", &["the graph has no RoceTransceiver"]);
    let ops = format!("{ECHO_OP}\n        (name: \"roce2\", kind: \"RoceTransceiver\"),");
    let text = graph(&ops, ECHO_FLOWS);
    refused(&text, "(name: \"roce2\"", &["operator `roce2`", "one RoceTransceiver", "`roce` is the first"]);
}

#[test]
fn settings_are_checked_where_they_are_written() {
    let ok = graph(ECHO_OP, ECHO_FLOWS);
    let text = ok.replace("size: 64", "size: 5000");
    refused(&text, "5000", &["run.size 5000 must be 24..=4096"]);
    let text = ok.replace("FpgaSim(mode: InProcess)", "Fpga(address: \"127.0.0.1:8192\")");
    refused(&text, "Fpga(", &["inproc wire", "Udp"]);
    let text = ok
        .replace("Soft(wire: Inproc)", "Soft(wire: Udp())")
        .replace("FpgaSim(mode: InProcess)", "Fpga(address: \"10.0.0.300:8192\")");
    refused(&text, "\"10.0.0.300:8192\"", &["peer.address", "not an IPv4 address"]);
    let text = ok.replace("Count(100)", "Count(0)");
    refused(&text, "Count(0)", &["at least 1"]);
}

#[test]
fn set_overrides_are_checked_and_named() {
    let ok = graph(ECHO_OP, ECHO_FLOWS);
    check(&ok, &["run.stop=Count(5)", "run.size=1024", "outputs.dir=/tmp/some where"]).unwrap();
    let e = check(&ok, &["run.size=lots"]).unwrap_err();
    assert_eq!(e.to_string().lines().next().unwrap(), "--set run.size=lots: Expected integer", "{e}");
    let e = check(&ok, &["run.size=9999"]).unwrap_err();
    assert!(e.to_string().starts_with("--set run.size=9999: run.size 9999 must be 24..=4096"), "{e}");
    // A value the parser wanted more of is still the --set's fault.
    let e = check(&ok, &["nic.wire=Udp"]).unwrap_err();
    assert_eq!(e.first().at, rocelink_operator::graph::At::Set("nic.wire=Udp".into()), "{e}");
    let e = check(&ok, &["operators.nobody.path=x"]).unwrap_err();
    assert!(e.to_string().contains("no entry named \"nobody\""), "{e}");
    // An error elsewhere still points into the file, at its own line.
    let text = ok.replace("(name: \"echo\", kind: \"Echo\")", "(name: \"echo\", kind: \"Ecko\")");
    let e = check(&text, &["run.warmup=3"]).unwrap_err();
    assert_eq!(e.first().location(), Some(loc(&text, "\"Ecko\"")), "{e}");
}

#[test]
fn cores_the_machine_lacks_are_a_warning_not_an_error() {
    let text = graph(ECHO_OP, ECHO_FLOWS).replace("run: (", "cores: (nic: 0, backend: 4095),\n    run: (");
    let plan = compile(load::load_str("t.ron", &text, &[]).unwrap()).unwrap();
    assert!(
        plan.warnings.iter().any(|w| w.contains("cores.backend asks for core 4095") && w.contains("runs unpinned")),
        "{:?}",
        plan.warnings
    );
    assert!(plan.to_string().contains("warning: cores.backend asks for core 4095"), "{plan}");
}

#[test]
fn several_errors_are_reported_together() {
    let text = graph("        (name: \"a\", kind: \"Nope\"),\n        (name: \"b\", kind: \"Nada\"),", "");
    let e = check(&text, &[]).unwrap_err();
    assert_eq!(e.0.len(), 2, "{e}");
    assert!(e.to_string().ends_with("(2 errors)"), "{e}");
}

/// What a user sees: `rocelink check` exits 1 and prints the file, line, column and caret.
#[test]
fn rocelink_check_prints_the_position_and_fails() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("graph_errors");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.ron");
    let text = graph(r#"        (name: "echo", kind: "Ecko"),"#, ECHO_FLOWS);
    std::fs::write(&path, &text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink")).arg("check").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = loc(&text, "\"Ecko\"").replacen("t.ron", &path.display().to_string(), 1);
    assert!(err.contains(&format!("{want}: operator `echo`: unknown kind `Ecko`")), "{err}");
    assert!(err.contains("9 |         (name: \"echo\", kind: \"Ecko\"),"), "{err}");
    // `rocelink run` refuses it the same way, before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink")).arg("run").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&want));
    // A file that does not exist, a bad --set.
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink")).args(["check", "no/such/graph.ron"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read graph file no/such/graph.ron"));
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .args(["check", "graphs/echo.ron", "--set", "run.size"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected path=value"));
}

/// A graph naming the verbs NIC is valid (the plan says what it needs) and refused clearly at
/// run time.
#[test]
fn verbs_nic_is_validated_then_refused_at_run_time() {
    let text = graph(ECHO_OP, ECHO_FLOWS)
        .replace("Soft(wire: Inproc)", "Verbs(device: \"mlx5_0\", port: 1, gid_index: 3)")
        .replace("FpgaSim(mode: InProcess)", "Fpga(address: \"127.0.0.1:8192\")");
    let plan = compile(load::load_str("t.ron", &text, &[]).unwrap()).unwrap();
    assert!(plan.to_string().contains("verbs: mlx5_0 port 1 GID index 3"), "{plan}");
    // `check` says so too, before anything runs
    assert!(plan.warnings.iter().any(|w| w.contains("`run` refuses this graph")), "{:?}", plan.warnings);
    let e = rocelink_operator::graph::run(&plan, &Default::default()).unwrap_err().to_string();
    assert!(e.contains("`verbs` feature") && e.contains("ConnectX"), "{e}");
    let bad = text.replace("port: 1", "port: 0");
    refused(&bad, "0, gid_index", &["ports are numbered from 1"]);
}
