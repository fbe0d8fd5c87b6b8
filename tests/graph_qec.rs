//! QEC graphs the way a user runs them (`rocelink run graphs/qec_d*.ron --set backend=Cpu`):
//! the peer replays the committed stim shots round by round, the CPU decoder answers in the
//! transceiver loop, and the report's `qec` section is checked against the fixture files read
//! here, independently of rocelink (PyMatching's logical errors = shots where `pred.01` and
//! `obs.01` differ; the CPU stage is exact for any number of defects, so it counts no
//! overflows). Also: a fixed syndrome cycle, two rounds per message, a peer process, and the
//! invalid graphs `check` refuses with their line and column. Runs are small and one at a time (CI has 2 cores).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocelink_operator::graph::{compile, load, GraphErrors, Override};
use serde_json::Value;

#[path = "../operator/tests/support/qec_sets.rs"]
mod qec_sets;

/// One run at a time: each spins three threads.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const FIXTURES: &str = "operator/tests/fixtures/qec";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rocelink() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocelink"));
    c.current_dir(root());
    c
}

fn show(name: &str, out: &Output) -> String {
    let s = format!(
        "{name}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{s}");
    s
}

/// A fixture as this test reads it.
struct Fixture {
    detectors: usize,
    dets: Vec<u8>,
    obs: Vec<String>,
    pred: Vec<String>,
}

impl Fixture {
    fn load(name: &str) -> Fixture {
        let dir = root().join(FIXTURES).join(name);
        let lines =
            |f: &str| std::fs::read_to_string(dir.join(f)).unwrap().lines().map(str::to_string).collect::<Vec<_>>();
        let detectors = if name.starts_with("d3_") { 24 } else { 120 };
        Fixture {
            detectors,
            dets: std::fs::read(dir.join("dets.b8")).unwrap(),
            obs: lines("obs.01"),
            pred: lines("pred.01"),
        }
    }

    /// PyMatching's logical errors on the first `n` shots.
    fn reference_errors(&self, n: usize) -> u64 {
        (0..n).filter(|&k| self.pred[k % self.obs.len()] != self.obs[k % self.obs.len()]).count() as u64
    }

    /// Shots among the first `n` with more than `k` detection events.
    fn above(&self, n: usize, k: u32) -> u64 {
        let bytes = self.detectors.div_ceil(8);
        (0..n)
            .filter(|&s| {
                self.dets[(s % self.obs.len()) * bytes..][..bytes].iter().map(|b| b.count_ones()).sum::<u32>() > k
            })
            .count() as u64
    }
}

/// Runs `rocelink run graphs/<file> --set backend=Cpu` with `sets` (later sets win), its
/// outputs in a fresh folder named `name`; returns the folder, the output and the JSON
/// report, expecting exit status 0.
fn run(name: &str, file: &str, sets: &[&str]) -> (PathBuf, Value) {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("graph_qec").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let mut cmd = rocelink();
    cmd.args(["run", &format!("graphs/{file}"), "--quiet", "--set", "backend=Cpu", "--json"])
        .arg(&json)
        .arg("--set")
        .arg(format!("outputs.dir={}", dir.display()));
    for s in sets {
        cmd.arg("--set").arg(s);
    }
    let out = cmd.output().expect("run rocelink");
    let shown = show(name, &out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("qec: decoder `decoder`") && stdout.contains("reaction latency"), "{shown}");
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}\n{shown}", json.display())),
    )
    .unwrap();
    (dir, report)
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("field {k} missing: {v}"))
}

/// Every shot decoded and checked, nothing lost, the latency figures there.
fn assert_clean_qec(r: &Value, shots: u64, messages_per_shot: u64, warmup: u64) {
    let q = &r["qec"];
    assert_eq!(n(q, "shots_sent"), shots, "{q}");
    assert_eq!(n(q, "shots_decoded"), shots, "{q}");
    assert_eq!(n(q, "messages_per_shot"), messages_per_shot, "{q}");
    assert_eq!(n(q, "rounds_sent"), shots * n(q, "rounds_per_shot"), "{q}");
    for k in ["bad_answers", "unanswered", "unmatchable"] {
        assert_eq!(n(q, k), 0, "{k}: {q}");
    }
    assert!(q["status"].as_object().unwrap().is_empty(), "{q}");
    assert_eq!(n(q, "warmup_shots"), warmup);
    assert_eq!(n(&q["reaction_ns"], "count"), shots - warmup, "{q}");
    assert_eq!(n(&q["final_round_loop_ns"], "count"), shots - warmup, "{q}");
    for k in ["min", "p50", "p90", "p99", "p999", "max"] {
        assert!(n(&q["reaction_ns"], k) > 0, "reaction_ns.{k}: {q}");
    }
    assert!(q["throughput_rounds_per_us"].as_f64().unwrap() > 0.0, "{q}");
    // The decoder's own decode time, from every decode report the peer received.
    let d = &q["decoder_time"];
    assert_eq!(n(d, "count"), shots, "{q}");
    assert!(n(d, "p50_ns") > 0 && n(d, "p50_ns") <= n(d, "p99_ns") && n(d, "p99_ns") <= n(d, "max_ns"), "{q}");
    // The echo fields are there too, in messages.
    assert_eq!(n(r, "sent"), shots * messages_per_shot, "{r}");
    assert_eq!(n(r, "received"), shots * messages_per_shot, "{r}");
    for k in ["lost", "duplicated", "corrupted"] {
        assert_eq!(n(r, k), 0, "{k}: {r}");
    }
    assert_eq!(r["stopped_by"], "count");
    assert_eq!(r["stage_chain"], serde_json::json!(["decoder"]));
}

/// The report files of the graph's LatencyReport, with the QEC section.
fn assert_report_files(dir: &Path, stem: &str) {
    for ext in ["md", "json", "svg"] {
        let p = dir.join(format!("{stem}.{ext}"));
        assert!(std::fs::metadata(&p).is_ok_and(|m| m.len() > 200), "{}", p.display());
    }
    let md = std::fs::read_to_string(dir.join(format!("{stem}.md"))).unwrap();
    assert!(md.contains("## QEC decoding") && md.contains("reaction latency") && md.contains("Throughput:"), "{md}");
    assert!(std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap().contains("reaction latency"));
}

#[test]
fn qec_d3_ron_closed_loop_agrees_with_pymatching() {
    let fx = Fixture::load("d3_p0.001");
    let shots = 5000;
    let (dir, r) = run("d3", "qec_d3.ron", &[]);
    assert_clean_qec(&r, shots, 4, 100);
    let q = &r["qec"];
    assert_eq!(q["load"], "closed-loop");
    assert!(q["keeps_up"].is_null() && q["round_cycle_ns"].is_null(), "{q}");
    assert_eq!(n(q, "disagreements"), 0, "{q}");
    assert_eq!(n(q, "overflows"), 0, "{q}");
    let reference = fx.reference_errors(shots as usize);
    assert!(reference > 0, "the fixture has PyMatching errors to compare");
    assert_eq!(n(q, "reference_logical_errors"), reference, "{q}");
    assert_eq!(n(q, "logical_errors"), reference, "{q}");
    assert_eq!(n(q, "max_message_bytes"), 57);
    assert_report_files(&dir, "qec_d3");
}

#[test]
fn qec_d5_ron_closed_loop_agrees_with_pymatching() {
    let fx = Fixture::load("d5_p0.001");
    // The first 1000 shots are all within the default cap of 12 defects.
    let (dir, r) = run("d5", "qec_d5.ron", &["run.stop=Count(1000)", "run.warmup=10"]);
    assert_eq!(fx.above(1000, 12), 0);
    assert_clean_qec(&r, 1000, 6, 10);
    let q = &r["qec"];
    assert_eq!((n(q, "disagreements"), n(q, "overflows")), (0, 0), "{q}");
    assert_eq!(n(q, "logical_errors"), n(q, "reference_logical_errors"), "{q}");
    assert_eq!(n(q, "reference_logical_errors"), fx.reference_errors(1000), "{q}");
    assert_eq!((n(q, "detectors"), n(q, "rounds_per_shot"), n(q, "loaded_shots")), (120, 6, 5000), "{q}");
    assert_report_files(&dir, "qec_d5");

    // All 5000 shots with a cap above the largest (14 defects): exact everywhere, so every
    // correction is PyMatching's (its 2 logical errors included).
    let (_, r) = run("d5_k14", "qec_d5.ron", &["operators.decoder.max_defects=14"]);
    assert_clean_qec(&r, 5000, 6, 100);
    let q = &r["qec"];
    assert_eq!((n(q, "disagreements"), n(q, "overflows")), (0, 0), "{q}");
    assert_eq!(n(q, "reference_logical_errors"), fx.reference_errors(5000), "{q}");
    assert_eq!(n(q, "logical_errors"), fx.reference_errors(5000), "{q}");
}

#[test]
fn a_fixed_two_microsecond_round_cycle_paces_the_peer_and_reports_keeping_up() {
    let (_, r) = run("cycle", "qec_d5.ron", &["run.load=RoundCycle(2.0)", "run.stop=Count(2000)"]);
    assert_clean_qec(&r, 2000, 6, 100);
    let q = &r["qec"];
    assert_eq!(q["load"], "round-cycle");
    assert_eq!(r["mode"], "open-loop");
    // 313 player clocks of 6.4 ns.
    assert!((q["round_cycle_ns"].as_f64().unwrap() - 2003.2).abs() < 0.01, "{q}");
    let (thr, offered) =
        (q["throughput_rounds_per_us"].as_f64().unwrap(), q["offered_rounds_per_us"].as_f64().unwrap());
    // The peer never sends faster than the cycle. Whether this machine keeps up is a
    // measurement (on 2 busy cores it may not: three spinning threads share them), so the
    // test checks the verdict follows the rule, not that it is "yes".
    assert!(thr > 0.0 && thr <= offered * 1.01, "{q}");
    assert_eq!(q["keeps_up"].as_bool().unwrap(), thr >= 0.95 * offered, "{q}");
    assert_eq!(n(q, "disagreements"), n(q, "disagreements_on_overflow"), "{q}");
}

#[test]
fn two_rounds_per_message_on_both_sides() {
    let fx = Fixture::load("d5_p0.001");
    let (_, r) = run(
        "rpm2",
        "qec_d5.ron",
        &["peer.qec.rounds_per_message=2", "operators.decoder.rounds_per_message=2", "run.stop=Count(1000)"],
    );
    // 6 rounds: 3 messages of 2.
    assert_clean_qec(&r, 1000, 3, 100);
    let q = &r["qec"];
    assert_eq!(n(q, "rounds_per_message"), 2);
    assert_eq!(n(q, "disagreements"), 0, "{q}");
    assert_eq!(n(q, "logical_errors"), fx.reference_errors(1000), "{q}");
}

#[test]
fn a_peer_process_gets_the_replay_as_flags() {
    let (_, r) =
        run("process", "qec_d3.ron", &["nic.wire=Udp()", "peer.mode=Process", "run.stop=Count(500)", "run.warmup=0"]);
    assert_clean_qec(&r, 500, 4, 0);
    assert!(r["env"]["wire"].as_str().unwrap().starts_with("udp "), "{r}");
    assert_eq!(n(&r["qec"], "disagreements"), 0);
}

/// d=5 at p = 0.3%: some shots have more than 12 defects, the old table decoder's cap. The
/// CPU stage's exact decoder has no cap: every shot decoded exactly, none an overflow, and
/// every correction equal to PyMatching's.
#[test]
fn shots_over_the_old_defect_cap_are_decoded_exactly() {
    let fx = Fixture::load("d5_p0.003");
    let shots = 1000;
    let want = fx.above(shots as usize, 12);
    assert!(want > 0, "the fixture has shots over the cap");
    let d = "operator/tests/fixtures/qec/d5_p0.003";
    let mut sets = qec_sets::fixture_sets(d);
    sets.push(format!("run.stop=Count({shots})"));
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let (_, r) = run("overflow", "qec_d5.ron", &sets);
    assert_clean_qec(&r, shots, 6, 100);
    let q = &r["qec"];
    assert_eq!(n(q, "overflows"), 0, "{q}");
    assert_eq!(n(q, "unmatchable"), 0, "{q}");
    assert_eq!(n(q, "disagreements"), 0, "every shot agrees with PyMatching, {want} of them over 12 defects: {q}");
    assert_eq!(n(q, "logical_errors"), n(q, "reference_logical_errors"), "{q}");
}

/// The CPU stage's streaming work on its worker thread (`settle: beside`) and in the loop's
/// idle time (`settle: idle`), closed loop and at a fixed cycle: every shot decoded, every
/// correction PyMatching's (d = 5, p = 0.3%: shots of up to 18 defects, settled round by
/// round), the worker in the plan's threads and the report's pinned cores.
#[test]
fn settling_beside_the_loop_answers_as_in_it() {
    let d = "operator/tests/fixtures/qec/d5_p0.003";
    for (name, settle, load) in [
        ("beside", "beside", "run.load=ClosedLoop"),
        ("beside_cycle", "beside", "run.load=RoundCycle(4.0)"),
        ("idle", "idle", "run.load=ClosedLoop"),
        ("idle_cycle", "idle", "run.load=RoundCycle(4.0)"),
    ] {
        let mut sets = qec_sets::fixture_sets(d);
        sets.extend([
            "run.stop=Count(600)".to_string(),
            format!("operators.decoder.settle={settle}"),
            load.to_string(),
        ]);
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let (_, r) = run(name, "qec_d5.ron", &sets);
        assert_clean_qec(&r, 600, 6, 100);
        let q = &r["qec"];
        assert_eq!((n(q, "overflows"), n(q, "unmatchable"), n(q, "disagreements")), (0, 0, 0), "{q}");
        assert_eq!(n(q, "logical_errors"), n(q, "reference_logical_errors"), "{q}");
        if settle == "beside" {
            assert_eq!(r["env"]["pinned"]["settle:decoder"], "unpinned", "{r}");
        }
    }
    let out = rocelink()
        .args(["check", "graphs/qec_d5.ron", "--set", "backend=Cpu", "--set", "operators.decoder.settle=beside"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("qec-settle") && text.contains("settle: beside without a `core`"), "{text}");
}

fn check_text(text: &str, sets: &[&str]) -> Result<(), GraphErrors> {
    let sets: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
    compile(load::load_str("q.ron", text, &sets)?).map(|_| ())
}

/// `q.ron:LINE:COL` of the first occurrence of `needle` in `text`.
fn loc(text: &str, needle: &str) -> String {
    let at = text.find(needle).unwrap_or_else(|| panic!("`{needle}` not in the graph"));
    let line = 1 + text[..at].matches('\n').count();
    let col = 1 + text[..at].chars().rev().take_while(|&c| c != '\n').count();
    format!("q.ron:{line}:{col}")
}

fn refused(text: &str, needle: &str, says: &[&str]) {
    let e = check_text(text, &[]).expect_err("the graph should be refused");
    assert_eq!(e.first().location(), Some(loc(text, needle)), "{e}");
    for s in says {
        assert!(e.first().message.contains(s), "should say `{s}`: {e}");
    }
}

#[test]
fn invalid_qec_graphs_are_refused_with_line_and_column() {
    let text = std::fs::read_to_string(root().join("graphs/qec_d5.ron")).unwrap();
    check_text(&text, &[]).expect("qec_d5.ron is valid");

    // A replay without a decoder: the chain is an Echo.
    let decoder = "kind: \"QecDecoder\", params: (\n            dem: \"operator/tests/fixtures/qec/d5_p0.001/model.dem\",\n            rounds_per_message: 1,\n            max_defects: 12,\n            decoders: 1,\n            settle: in_loop,\n        )";
    assert!(text.contains(decoder));
    let echo = text.replace(decoder, "kind: \"Echo\"");
    refused(&echo, "(\n            // The detector error model", &["peer.qec", "no", "QecDecoder"]);

    // A decoder without a replay.
    let start = text.find("        qec: (").unwrap();
    let end = start + text[start..].find("        ),\n").unwrap() + "        ),\n".len();
    let bare = format!("{}{}", &text[..start], &text[end..]);
    refused(&bare, "(name: \"decoder\"", &["operator `decoder` (QecDecoder)", "the peer has none to send"]);

    // Rounds per message that differ.
    let mismatched = text.replacen(
        "rounds_per_message: 1,\n            // detectors",
        "rounds_per_message: 3,\n            // detectors",
        1,
    );
    assert_ne!(mismatched, text);
    refused(
        &mismatched,
        "3,\n            // detectors",
        &["peer.qec.rounds_per_message is 3", "decoder `decoder` takes 1", "line"],
    );

    // A place to settle that is not one.
    let sideways = text.replace("settle: in_loop,", "settle: sideways,");
    assert_ne!(sideways, text);
    refused(&sideways, "settle: sideways", &["parameter `settle`", "in_loop, idle, beside"]);

    // A file that is not there.
    let missing = text.replace("d5_p0.001/obs.01", "d5_p0.001/nothere.01");
    refused(&missing, "\"operator/tests/fixtures/qec/d5_p0.001/nothere.01\"", &["peer.qec.obs", "no file at"]);

    // Loads that do not fit: Rate in a QEC graph, RoundCycle in an echo graph.
    let rate = text.replace("load: ClosedLoop,", "load: Rate(1000),");
    refused(&rate, "Rate(1000)", &["ClosedLoop", "RoundCycle"]);
    let echo_graph = std::fs::read_to_string(root().join("graphs/echo.ron"))
        .unwrap()
        .replace("load: ClosedLoop,", "load: RoundCycle(1.0),");
    refused(&echo_graph, "RoundCycle(1.0)", &["QEC graph"]);

    // Through --set, the error names the --set; a different DEM file is only a warning.
    let e = check_text(&text, &["operators.decoder.rounds_per_message=2"]).unwrap_err();
    assert!(e.first().location().is_some_and(|l| l == loc(&text, "1,\n            // detectors")), "{e}");
    let plan = compile(
        load::load_str(
            "q.ron",
            &text.replace(
                "qec/d5_p0.001/model.dem\",\n            // Detection",
                "qec/d5_p0.003/model.dem\",\n            // Detection",
            ),
            &[],
        )
        .unwrap(),
    )
    .unwrap();
    assert!(plan.warnings.iter().any(|w| w.contains("is not the decoder's DEM")), "{:?}", plan.warnings);

    // What a user sees from `rocelink check`.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("graph_qec");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mismatched.ron");
    std::fs::write(&path, &mismatched).unwrap();
    let out = rocelink().arg("check").arg(&path).output().unwrap();
    let shown = show("check mismatched", &out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let want = loc(&mismatched, "3,\n            // detectors").replacen("q.ron", &path.display().to_string(), 1);
    assert!(shown.contains(&format!("{want}: peer.qec.rounds_per_message is 3")), "{shown}");
}
