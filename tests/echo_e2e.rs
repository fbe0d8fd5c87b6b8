//! End to end, the way a user runs it: the `rocelink echo` command over both wires, with
//! fpga-sim in this process and as a separate process, closed and open loop, 100,000 messages
//! each. Zero loss; every answer byte-equal to what was sent (the peer checks each answer's
//! header and payload against the request it sent and flags the capture record; `corrupted`
//! counts the ones that differ).

use std::path::PathBuf;
use std::process::Command;

const COUNT: u32 = 100_000;

fn report_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.json"))
}

/// One run at a time: each run spins three threads, and CI has two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `rocelink echo` with `args` and returns its JSON report.
fn echo(name: &str, args: &[&str]) -> serde_json::Value {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let json = report_path(name);
    let _ = std::fs::remove_file(&json);
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .arg("echo")
        .args(args)
        .args(["--quiet", "--json"])
        .arg(&json)
        .output()
        .expect("run rocelink");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{name}:\n{stdout}{stderr}");
    assert!(out.status.success(), "rocelink echo {args:?} failed: {}", out.status);
    let text = std::fs::read_to_string(&json).expect("report written");
    serde_json::from_str(&text).expect("report is JSON")
}

fn assert_clean(r: &serde_json::Value, count: u32) {
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("report field {k} missing: {r}"));
    assert_eq!(n("sent"), u64::from(count), "{r}");
    assert_eq!(n("received"), u64::from(count), "{r}");
    assert_eq!(n("lost"), 0, "{r}");
    assert_eq!(n("duplicated"), 0, "{r}");
    assert_eq!(n("corrupted"), 0, "{r}");
    assert_eq!(n("reordered"), 0, "{r}");
    let drops: u64 = r["nic_drops"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(drops, 0, "{r}");
    for k in ["min", "p50", "p90", "p99", "p999", "max"] {
        assert!(r["rtt_ns"][k].as_u64().unwrap() > 0, "rtt_ns.{k} in {r}");
    }
    assert!(r["rtt_ns"]["min"].as_u64() <= r["rtt_ns"]["p50"].as_u64());
    assert!(r["rtt_ns"]["p50"].as_u64() <= r["rtt_ns"]["max"].as_u64());
    for k in ["host", "cpu", "kernel", "backend", "wire", "payload_size", "cores"] {
        assert!(!r["env"][k].is_null(), "env.{k} missing in {r}");
    }
}

/// Open loop at a rate the CPU keeps up with on 2 shared cores.
const RATE: &str = "20000";

#[test]
fn inproc_closed_loop() {
    let r = echo("inproc_closed", &["--wire", "inproc", "--count", &COUNT.to_string(), "--size", "64"]);
    assert_clean(&r, COUNT);
    assert_eq!(r["mode"], "closed-loop");
}

#[test]
fn inproc_open_loop() {
    let r = echo("inproc_open", &["--wire", "inproc", "--count", &COUNT.to_string(), "--size", "256", "--rate", RATE]);
    assert_clean(&r, COUNT);
    assert_eq!(r["mode"], "open-loop");
}

#[test]
fn udp_closed_loop() {
    let r = echo("udp_closed", &["--wire", "udp", "--count", &COUNT.to_string(), "--size", "1024"]);
    assert_clean(&r, COUNT);
}

#[test]
fn udp_open_loop() {
    let r = echo("udp_open", &["--wire", "udp", "--count", &COUNT.to_string(), "--size", "64", "--rate", RATE]);
    assert_clean(&r, COUNT);
}

#[test]
fn udp_peer_process_closed_loop() {
    let r =
        echo("udp_process_closed", &["--wire", "udp", "--peer-process", "--count", &COUNT.to_string(), "--size", "64"]);
    assert_clean(&r, COUNT);
}

#[test]
fn udp_peer_process_open_loop() {
    let r = echo(
        "udp_process_open",
        &["--wire", "udp", "--peer-process", "--count", &COUNT.to_string(), "--size", "1024", "--rate", RATE],
    );
    assert_clean(&r, COUNT);
}

#[test]
fn inproc_wire_with_a_separate_peer_is_refused_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .args(["echo", "--wire", "inproc", "--peer-process", "--count", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--wire udp"), "{err}");
}

#[test]
fn bad_sizes_are_refused_clearly() {
    for size in ["8", "5000"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rocelink"))
            .args(["echo", "--count", "10", "--size", size])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--size"), "{err}");
    }
}
