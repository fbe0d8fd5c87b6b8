//! `rocelink bench-qec` with tiny counts (d=3, p=0.1%, inproc, CPU backend, 200 shots): the
//! Markdown and JSON reports and the reaction-latency SVG are written, every row is there, and the CPU decoder agrees with
//! PyMatching on every shot.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[test]
fn bench_qec_tiny_run_writes_reports_without_disagreements() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench_qec");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .current_dir(root)
        .args([
            "bench-qec",
            "--distances",
            "3",
            "--ps",
            "0.001",
            "--wires",
            "inproc",
            "--backends",
            "cpu",
            "--shots",
            "200",
            "--warmup",
            "20",
            "--name",
            "tiny",
        ])
        .args(["--cycle-fixtures", "d3_p0.001", "--cycle-rounds", "1,4", "--cycle-us", "4", "--out"])
        .arg(&dir)
        .output()
        .expect("run rocelink");
    let shown = format!(
        "{}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{shown}");

    let md = std::fs::read_to_string(dir.join("tiny.md")).unwrap_or_else(|e| panic!("tiny.md: {e}\n{shown}"));
    for s in [
        "## Environment",
        "## Latency (us)",
        "## Decoding",
        "## Offline decode on the same shots (CPU, one core)",
        "## Keeping up with a fixed syndrome cycle",
        "echo (transport floor)",
        "qec decoder, cpu backend",
    ] {
        assert!(md.contains(s), "{s} missing from tiny.md:\n{md}");
    }
    let r: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tiny.json")).unwrap()).unwrap();
    assert!(r["env"]["host"].is_string(), "{r}");
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{r}");
    assert_eq!(rows[0]["path"], "echo (transport floor)");
    assert_eq!(rows[0]["latency_ns"]["count"], 200, "{r}");
    assert_eq!(rows[0]["lost"], 0, "{r}");
    let q = &rows[1]["qec"];
    assert_eq!(rows[1]["path"], "qec decoder, cpu backend");
    assert_eq!(rows[1]["latency_ns"]["count"], 200, "{r}");
    assert_eq!(q["shots_decoded"], 220, "{r}");
    assert_eq!(q["disagreements"], 0, "{r}");
    assert_eq!(q["logical_errors"], q["pymatching_logical_errors"], "{r}");
    assert!(q["throughput_rounds_per_us"].as_f64().unwrap() > 0.0, "{r}");
    assert!(q["final_round_loop_ns"]["p50"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(rows[1]["svg"], "tiny-d3_p0.001-inproc-cpu.svg", "{r}");
    assert!(dir.join("tiny-d3_p0.001-inproc-cpu.svg").is_file(), "{shown}");
    // The offline row: PyMatching's, measured or "not available", and rocelink's exact CPU
    // decoder on every one of the fixture's shots, timed.
    let off = &r["offline"][0];
    assert!(off["available"].as_bool().unwrap() || off["note"].as_str().unwrap().starts_with("not available"), "{r}");
    if off["available"].as_bool().unwrap() {
        assert!(off["batch_ns_per_shot"].as_f64().unwrap() > 0.0, "{r}");
    }
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("operator/tests/fixtures/qec/d3_p0.001/meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(off["cpu_shots"], meta["shots"], "{r}");
    assert!(off["cpu_mean_ns"].as_f64().unwrap() > 0.0, "{r}");
    // logical errors with their 95% intervals
    assert!(md.contains(&format!("| {} (", q["logical_errors"])), "{md}");
    // The fixed-cycle runs (4 us a round: slow enough for any machine), each with its floor:
    // the echo of the same size at the same message rate, both measured.
    let cycles = r["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 2, "{r}");
    for (c, rounds) in cycles.iter().zip([1, 4]) {
        assert_eq!(
            (c["fixture"].as_str(), c["distance"].as_u64(), c["rounds_per_message"].as_u64()),
            (Some("d3_p0.001"), Some(3), Some(rounds)),
            "{c}"
        );
        assert_eq!(c["shots_decoded"], c["shots_sent"], "{c}");
        assert_eq!(c["shots_decoded"], 220, "{c}");
        let offered = c["offered_rounds_per_us"].as_f64().unwrap();
        assert!((offered - 0.25).abs() < 0.01, "{c}");
        for k in ["rounds_per_us", "echo_rounds_per_us"] {
            let v = c[k].as_f64().unwrap_or_else(|| panic!("{k}: {c}"));
            assert!(v > 0.0 && v <= offered * 1.05, "{k} {v} against {offered} offered: {c}");
        }
        assert_eq!((c["echo_lost"].as_u64(), c["echo_corrupted"].as_u64()), (Some(0), Some(0)), "{c}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
