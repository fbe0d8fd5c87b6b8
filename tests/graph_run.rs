//! The graph files, the way a user runs them: every file in `graphs/` passes `rocelink check`
//! and draws as Graphviz; `echo.ron` and `echo_udp.ron` run end to end with zero loss and
//! write their reports; `fpga_echo.ron` runs against a standalone `fpga-sim` process at the
//! address given with `--set`; SIGINT stops a run within 2 s and the report of what ran is
//! still written, as it is when the peer dies in the middle of a run (a fault, exit 1). Runs are small (20,000 messages) and one at a time (CI has 2 cores).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const COUNT: u32 = 20_000;

/// One run at a time: each spins three threads.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn rocelink() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocelink"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn out_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("graph_run").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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

/// Runs `rocelink run graphs/<file>` for [`COUNT`] messages with `sets` (later sets win), its
/// outputs in a fresh folder named `name`; returns the folder, the output (shown) and the
/// JSON report.
fn run_named(name: &str, file: &str, sets: &[String]) -> (PathBuf, Output, String, serde_json::Value) {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = out_dir(name);
    let json = dir.join("run.json");
    let mut cmd = rocelink();
    cmd.args(["run", &format!("graphs/{file}"), "--quiet", "--json"])
        .arg(&json)
        .arg("--set")
        .arg(format!("outputs.dir={}", dir.display()))
        .arg("--set")
        .arg(format!("run.stop=Count({COUNT})"));
    for s in sets {
        cmd.arg("--set").arg(s);
    }
    let out = cmd.output().expect("run rocelink");
    let shown = show(name, &out);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("run.json: {e}\n{shown}")))
            .expect("JSON");
    (dir, out, shown, report)
}

/// [`run_named`] in a folder of the test's own (`name`: tests run in parallel, and one test's
/// fresh folder must not remove another's reports while it reads them), expecting exit status 0.
fn run_graph(name: &str, file: &str, sets: &[String]) -> (PathBuf, serde_json::Value) {
    let (dir, out, shown, report) = run_named(name, file, sets);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    (dir, report)
}

fn assert_clean(r: &serde_json::Value, count: u32) {
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("report field {k} missing: {r}"));
    assert_eq!(n("sent"), u64::from(count), "{r}");
    assert_eq!(n("received"), u64::from(count), "{r}");
    for k in ["lost", "duplicated", "corrupted", "reordered"] {
        assert_eq!(n(k), 0, "{k} in {r}");
    }
    let drops: u64 = r["nic_drops"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(drops, 0, "{r}");
    for k in ["min", "p50", "p90", "p99", "p999", "max"] {
        assert!(r["rtt_ns"][k].as_u64().unwrap() > 0, "rtt_ns.{k} in {r}");
    }
    for k in ["host", "cpu", "kernel", "backend", "wire", "payload_size", "cores"] {
        assert!(!r["env"][k].is_null(), "env.{k} missing in {r}");
    }
    assert_eq!(r["stopped_by"], "count", "{r}");
    assert_eq!(r["stage_chain"], serde_json::json!(["echo"]), "{r}");
}

/// The tap delivered every record to every flow.
fn assert_tap_complete(r: &serde_json::Value, count: u32) {
    let tap = &r["tap"];
    assert_eq!(tap["records"].as_u64(), Some(u64::from(count)), "{r}");
    assert_eq!(tap["overflow"].as_u64(), Some(0), "{r}");
    for f in tap["flows"].as_array().unwrap() {
        assert_eq!(f["dropped"].as_u64(), Some(0), "{f}");
        assert_eq!(f["offered"].as_u64(), Some(u64::from(count)), "{f}");
    }
}

fn assert_reports(dir: &Path, stem: &str) {
    for ext in ["md", "json", "svg"] {
        let p = dir.join(format!("{stem}.{ext}"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(text.len() > 200, "{} is too short", p.display());
    }
    let md = std::fs::read_to_string(dir.join(format!("{stem}.md"))).unwrap();
    assert!(md.contains("## Round trips (us)") && md.contains(&format!("{stem}.svg")), "{md}");
    assert!(std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap().starts_with("<svg"));
}

/// The recorder's CSV: a header and one row per request, every one `ok` with its round trip.
fn assert_csv_records(path: &Path, count: u32) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
    let (id, status, rtt, loop_ns) = (col("request_id"), col("status"), col("rtt_ns"), col("loop_ns"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), count as usize);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[id], (i + 1).to_string());
        assert_eq!(r[status], "ok", "{r:?}");
        assert!(r[rtt].parse::<u64>().unwrap() > 0, "{r:?}");
        assert!(!r[loop_ns].is_empty(), "every message has its loop timestamps: {r:?}");
        // the software NIC's stamps: the CQE written before the data path saw it, the frame
        // sent after its doorbell; where the peer shares the NIC's clock, the splits fit in
        // the round trip
        let num = |c: &str| r[col(c)].parse::<i64>().unwrap_or_else(|e| panic!("{c} in {r:?}: {e}"));
        let (cqe, sent) = (num("nic_cqe_ns"), num("nic_sent_ns"));
        assert!(cqe > 0 && sent > cqe, "{r:?}");
        if !r[col("wire_nic_in_ns")].is_empty() {
            let (into, out) = (num("wire_nic_in_ns"), num("wire_out_ns"));
            // (the NIC reads its clock after its send returned, the data path after it rang:
            // a preempted stamp can come after the next step's, so only these orders hold)
            assert!(into > 0 && into < num("rtt_ns") && out < num("rtt_ns"), "{r:?}");
            if !r[col("peer_to_host_ns")].is_empty() {
                assert!(into <= num("peer_to_host_ns"), "the CQE is written before it is seen: {r:?}");
            }
        }
    }
}

#[test]
fn every_graph_file_passes_check_and_draws() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("graphs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ron"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for f in &files {
        let out = rocelink().arg("check").arg(f).output().unwrap();
        let shown = show(&f.display().to_string(), &out);
        assert!(out.status.success(), "{shown}");
        let plan = String::from_utf8_lossy(&out.stdout);
        for want in [": valid", "fused stage chain", "threads", "rings:", "tap ring", "host operators:"] {
            assert!(plan.contains(want), "`{want}` missing from the plan of {}:\n{plan}", f.display());
        }
        let out = rocelink().args(["graph", "--dot"]).arg(f).output().unwrap();
        assert!(out.status.success());
        let dot = String::from_utf8_lossy(&out.stdout);
        // The transceiver feeds the first device stage (echo, or a QEC graph's decoder).
        let first_stage = dot.contains("\"roce\" -> \"echo\"") || dot.contains("\"roce\" -> \"decoder\"");
        assert!(dot.starts_with("digraph ") && first_stage && dot.trim_end().ends_with('}'), "{dot}");
    }
}

#[test]
fn echo_ron_end_to_end() {
    let (dir, r) = run_graph("echo", "echo.ron", &[]);
    assert_clean(&r, COUNT);
    assert_eq!(r["env"]["wire"], "inproc");
    assert_eq!(r["mode"], "closed-loop");
    assert_eq!(r["graph"], "echo");
    assert_tap_complete(&r, COUNT);
    assert_reports(&dir, "echo");
    assert_csv_records(&dir.join("records.csv"), COUNT);
    let files: Vec<&str> = r["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(
        files.iter().any(|f| f.ends_with("records.csv")) && files.iter().any(|f| f.ends_with("echo.svg")),
        "{files:?}"
    );
}

#[test]
fn echo_udp_ron_end_to_end() {
    let (dir, out, shown, r) = run_named("echo_udp", "echo_udp.ron", &[]);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    // The Metrics operator logs through tracing (shown by default for `rocelink run`).
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rocelink::metrics") && err.contains(&format!("messages={COUNT}")), "{err}");
    assert_clean(&r, COUNT);
    assert!(r["env"]["wire"].as_str().unwrap().starts_with("udp 127."), "{r}");
    assert_eq!(r["mode"], "open-loop");
    assert_tap_complete(&r, COUNT);
    assert_reports(&dir, "echo_udp");
    // JSON lines: one object per request.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), COUNT as usize);
    assert!(lines.iter().all(|l| l["status"] == "ok" && l["rtt_ns"].as_u64().unwrap() > 0));
}

#[test]
fn a_duration_run_stops_on_time_without_counting_the_last_request_lost() {
    let (_, r) = run_graph("echo-duration", "echo.ron", &["run.stop=Duration(1)".into()]);
    assert_eq!(r["stopped_by"], "duration", "{r}");
    assert_eq!(r["lost"].as_u64(), Some(0), "{r}");
    // It ran (how many it answered in that second is the machine's speed, not the test's: a
    // CI host busy with other work answered 211 once).
    assert!(r["received"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(
        r["sent"].as_u64(),
        Some(r["received"].as_u64().unwrap() + r["in_flight_at_stop"].as_u64().unwrap()),
        "{r}"
    );
    let elapsed = r["elapsed_s"].as_f64().unwrap();
    assert!((1.0..1.5).contains(&elapsed), "{elapsed}");
}

/// A full flow never blocks the data path: `Pop` drops (counted) and the run goes on;
/// `Fault` fails the run, which still writes its report, and exits 1.
#[test]
fn full_flows_follow_their_policy_at_run_time() {
    let (dir, r) =
        run_graph("echo-full-flows", "echo.ron", &["flows.2.capacity=1".into(), "flows.2.policy=Pop".into()]);
    assert_clean(&r, COUNT);
    let flow = &r["tap"]["flows"][0];
    assert_eq!(flow["flow"], "roce.tap -> records.in");
    let dropped = flow["dropped"].as_u64().unwrap();
    assert!(dropped > 0, "{flow}");
    assert_eq!(flow["offered"].as_u64(), Some(u64::from(COUNT)), "{flow}");
    // Every request still has its row; those whose record was dropped lack the loop's times.
    let rows = std::fs::read_to_string(dir.join("records.csv")).unwrap().lines().count() - 1;
    assert_eq!(rows, COUNT as usize);

    let (dir, out, shown, r) =
        run_named("fault", "echo.ron", &["flows.2.capacity=1".into(), "flows.2.policy=Fault".into()]);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("flow roce.tap -> records.in overflowed (capacity 1, policy Fault)"), "{shown}");
    assert_eq!(r["stopped_by"], "fault", "{r}");
    assert!(r["fault"].as_str().unwrap().contains("overflowed"), "{r}");
    assert_reports(&dir, "echo");
}

/// Loopback pair `k` of this test process: 127.250.x.{2+2k, 3+2k} (fresh_loopback_pair uses
/// 127.10-209.x.x, so runs of other test binaries never collide with it; tests that run at the
/// same time take different `k`).
fn test_addresses(k: u8) -> (String, String) {
    let pid = std::process::id();
    let b = pid % 250;
    (format!("127.250.{b}.{}", 2 + 2 * k), format!("127.250.{b}.{}", 3 + 2 * k))
}

/// `rocelink fpga-sim` listening at `ip`, stopped on drop.
struct StandaloneSim(Child);

impl StandaloneSim {
    fn start(ip: &str) -> StandaloneSim {
        let mut child = rocelink()
            .args([
                "fpga-sim",
                "--ecb",
                &format!("{ip}:8192"),
                "--roce",
                &format!("{ip}:4791"),
                "--log-level",
                "warn",
                "--exit-on-stdin-close",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start fpga-sim");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.contains(&format!("ECB on {ip}:8192")), "ready line: {line}");
        StandaloneSim(child)
    }
}

impl Drop for StandaloneSim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn fpga_echo_ron_against_a_standalone_fpga_sim() {
    let (peer, host) = test_addresses(1);
    let _sim = StandaloneSim::start(&peer);
    let (dir, r) = run_graph(
        "fpga_echo",
        "fpga_echo.ron",
        &[format!("peer.address={peer}:8192"), format!("nic.wire.bind={host}:4791")],
    );
    assert_unconfigured(&peer);
    assert_clean(&r, COUNT);
    assert_eq!(r["env"]["wire"], format!("udp {host}:4791 <-> {peer}:4791"), "{r}");
    assert!(r["peer_missing_extensions"].as_array().unwrap().is_empty(), "{r}");
    assert_reports(&dir, "fpga_echo");
    assert_csv_records(&dir.join("records.csv"), COUNT);
}

/// `rocelink run FILE --quiet` with `sets`, its outputs in `dir` and its report at `json`,
/// started (output piped) and left running.
fn spawn_run(file: &str, sets: &[String], dir: &Path, json: &Path) -> Child {
    let mut c = rocelink();
    c.args(["run", file, "--quiet", "--json"]).arg(json);
    for s in sets.iter().cloned().chain([format!("outputs.dir={}", dir.display())]) {
        c.arg("--set").arg(s);
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

#[test]
fn sigint_stops_the_run_within_2_s_and_the_report_is_written() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = out_dir("sigint");
    let json = dir.join("run.json");
    let mut child = spawn_run("graphs/echo.ron", &["run.stop=Count(4000000)".into()], &dir, &json);
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().unwrap().is_none(), "the run ended before the signal");
    let sent_at = Instant::now();
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(sent_at.elapsed() < Duration::from_secs(2), "still running 2 s after SIGINT");
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent_at.elapsed();
    let out = child.wait_with_output().unwrap();
    let shown = show("sigint", &Output { status: exit, ..out });
    assert_eq!(exit.code(), Some(130), "interrupted runs exit with 130: {shown}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("report written")).unwrap();
    assert_eq!(r["stopped_by"], "interrupt", "{r}");
    assert_eq!(r["interrupted"], true);
    let (sent, received) = (r["sent"].as_u64().unwrap(), r["received"].as_u64().unwrap());
    assert!(received > 100 && sent < 4_000_000, "{r}");
    // The one request in flight when the player stopped is not a loss.
    assert_eq!(r["lost"].as_u64(), Some(0), "{r}");
    assert_eq!(sent, received + r["in_flight_at_stop"].as_u64().unwrap(), "{r}");
    assert!(r["problems"].as_array().unwrap().is_empty(), "every thread stopped in time: {r}");
    assert_reports(&dir, "echo");
    let rows = std::fs::read_to_string(dir.join("records.csv")).unwrap().lines().count() - 1;
    assert_eq!(rows as u64, sent, "one row per request sent");
}

#[test]
fn a_peer_that_dies_mid_run_ends_it_with_a_fault_and_the_report_of_what_ran() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (peer, host) = test_addresses(2);
    let mut sim = StandaloneSim::start(&peer);
    let dir = out_dir("peer_dies");
    let json = dir.join("run.json");
    let child = spawn_run(
        "graphs/fpga_echo.ron",
        &["run.stop=Duration(60)".into(), format!("peer.address={peer}:8192"), format!("nic.wire.bind={host}:4791")],
        &dir,
        &json,
    );
    std::thread::sleep(Duration::from_millis(1500));
    // the peer goes away without a word (SIGKILL)
    let _ = sim.0.kill();
    let _ = sim.0.wait();
    let out = child.wait_with_output().unwrap();
    let shown = show("peer_dies", &out);
    assert_eq!(out.status.code(), Some(1), "a fault: {shown}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("rocelink: error:").count(), 1, "said once: {shown}");
    assert!(stderr.contains("peer control (ECB) failed"), "{shown}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("report written")).unwrap();
    assert_eq!(r["stopped_by"], "fault", "{r}");
    assert!(r["fault"].as_str().unwrap().contains("no ECB reply"), "{r}");
    let answered = r["backend_processed"].as_u64().unwrap();
    assert!(answered > 0, "{r}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("transceiver loop: answered {answered}")),
        "{shown}"
    );
    assert_reports(&dir, "fpga_echo");
    // the answers the data path made are in the records, though the peer's capture is gone
    let csv = std::fs::read_to_string(dir.join("records.csv")).unwrap();
    assert!(
        csv.lines().filter(|l| l.split(',').nth(1) == Some("uncaptured")).count() as u64 > 0,
        "{}",
        &csv[..csv.len().min(500)]
    );
}

/// `rocelink` with SIGINT and SIGTERM blocked across `exec`: a signal sent while it starts
/// waits, pending, until its handler is installed (`signal::install` unblocks them), as a
/// signal at any moment of a run must end it the same way.
fn rocelink_signals_held() -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = rocelink();
    // SAFETY: between fork and exec only async-signal-safe calls (sigemptyset, sigaddset,
    // sigprocmask) on a local set.
    unsafe {
        c.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    c
}

/// SIGINT at any moment of a run, start included: every run exits 130 within 2 s, with its
/// summary on stdout and its JSON report, and says nothing is wrong but the interrupt.
#[test]
fn runs_interrupted_at_random_moments_each_exit_130_with_their_summary_and_report() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = out_dir("sigint-random");
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut x = seed | 1;
    let mut delays = Vec::new();
    for k in 0..50 {
        // xorshift: a new set of moments each run, the seed shown on failure
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let delay = Duration::from_millis(x % 501);
        delays.push(delay.as_millis());
        let json = dir.join(format!("run{k}.json"));
        let mut c = rocelink_signals_held();
        c.args(["run", "graphs/echo.ron", "--quiet", "--json"]).arg(&json);
        for s in [
            "backend=Cpu".to_string(),
            "run.stop=Count(4000000)".into(),
            format!("outputs.dir={}", dir.join(format!("run{k}")).display()),
        ] {
            c.arg("--set").arg(s);
        }
        let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(delay);
        // SAFETY: kill(2) on our child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
        let sent_at = Instant::now();
        let exit = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if sent_at.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                panic!("run {k} (SIGINT after {delay:?}, seed {seed}) still running 5 s after SIGINT");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let out = child.wait_with_output().unwrap();
        let shown = format!(
            "run {k}, SIGINT after {delay:?} (seed {seed}): {exit}\n--- stdout\n{}--- stderr\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(exit.code(), Some(130), "{shown}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("rocelink run echo:"), "the summary: {shown}");
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("report: {e}\n{shown}")))
                .unwrap();
        assert_eq!(r["interrupted"], true, "{shown}");
        assert!(r["fault"].is_null() && r["problems"].as_array().unwrap().is_empty(), "{r}\n{shown}");
    }
    eprintln!("50 runs interrupted after {delays:?} ms: each exited 130 with its summary and report");
}

/// The ECB proxy of a peer built as a plain HSB FPGA (PROTOCOLS.md 2.2): between the host and
/// a standalone fpga-sim, it answers every read of the capture RAM and of the counters block
/// with 0 and status OK, as a peer without rocelink's extensions may.
struct PlainFpgaProxy {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PlainFpgaProxy {
    fn start(listen: &str, peer_ecb: &str) -> PlainFpgaProxy {
        use rocelink_wire::hsb::{ext, reg};
        let sock = std::net::UdpSocket::bind(listen).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let up = std::net::UdpSocket::bind((listen.split(':').next().unwrap(), 0)).unwrap();
        up.connect(peer_ecb).unwrap();
        up.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let addr = sock.local_addr().unwrap();
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 9000];
            let zeroed = |a: u32| {
                (reg::CAPTURE_RAM..reg::CAPTURE_RAM + 0x10_0000).contains(&a)
                    || (ext::STATS_BASE..ext::STATS_BASE + 0x40).contains(&a)
            };
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
                up.send(&buf[..n]).unwrap();
                let Ok(m) = up.recv(&mut buf) else { continue };
                // reply: 6 header bytes, then (address, value) pairs, big-endian
                let mut off = 6;
                while off + 8 <= m {
                    let a = u32::from_be_bytes(buf[off..off + 4].try_into().unwrap());
                    if zeroed(a) {
                        buf[off + 4..off + 8].fill(0);
                    }
                    off += 8;
                }
                let _ = sock.send_to(&buf[..m], from);
            }
        });
        PlainFpgaProxy { addr, stop, thread: Some(thread) }
    }
}

impl Drop for PlainFpgaProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A peer whose capture RAM and counters read 0 (status OK) is detected by content: the run
/// says that the peer's figures are missing, gives the host side's own figure, counts nothing
/// as corrupted, and does not pass (exit 2).
#[test]
fn a_peer_without_capture_and_counters_is_detected_by_content_and_the_run_does_not_pass() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (peer, host) = test_addresses(3);
    let _sim = StandaloneSim::start(&peer);
    let proxy = PlainFpgaProxy::start(&format!("{host}:0"), &format!("{peer}:8192"));
    let dir = out_dir("plain_fpga");
    let json = dir.join("echo.json");
    let out = rocelink()
        .args([
            "echo",
            "--wire",
            "udp",
            "--count",
            "2000",
            "--quiet",
            "--backend",
            "cpu",
            "--peer",
            &proxy.addr.to_string(),
            "--peer-roce",
            &format!("{peer}:4791"),
            "--host-ip",
            &host,
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let shown = show("plain_fpga", &out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(shown.contains("NOT VERIFIED: the peer's capture RAM holds no records"), "{shown}");
    assert!(shown.contains("NOT VERIFIED: the peer has no counters"), "{shown}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["corrupted"].as_u64(), Some(0), "blank records are no records, not corrupt ones: {r}");
    assert_eq!(r["backend_processed"].as_u64(), Some(2000), "{r}");
    assert!(r["host_side_ns"]["count"].as_u64().unwrap() > 1000, "the host side's own figure: {r}");
    assert_eq!(r["not_verified"].as_array().unwrap().len(), 2, "{r}");
}

/// A run whose answers all die on the way back (the host sends them to a port nobody
/// listens at) does not pass: no answer came back, said in words, exit 2.
#[test]
fn a_run_whose_answers_all_died_does_not_pass() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (peer, host) = test_addresses(4);
    let _sim = StandaloneSim::start(&peer);
    let dir = out_dir("answers_die");
    let json = dir.join("echo.json");
    let out = rocelink()
        .args([
            "echo",
            "--wire",
            "udp",
            "--count",
            "2000",
            "--quiet",
            "--backend",
            "cpu",
            "--timeout",
            "1.5",
            "--peer",
            &format!("{peer}:8192"),
            "--peer-roce",
            &format!("{peer}:9"),
            "--host-ip",
            &host,
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let shown = show("answers_die", &out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(shown.contains("NOT VERIFIED: no answer came back: 0 of"), "{shown}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["received"].as_u64(), Some(0), "{r}");
    assert!(r["sent"].as_u64().unwrap() >= 1, "{r}");
    let (sent, lost, in_flight) =
        (r["sent"].as_u64().unwrap(), r["lost"].as_u64().unwrap(), r["in_flight_at_stop"].as_u64().unwrap());
    assert_eq!(lost + in_flight, sent, "every request sent and unanswered is lost or was in flight at the stop: {r}");
    assert_unconfigured(&peer);
}

/// The peer at `peer`:8192 as the run left it: unconfigured (PROTOCOLS.md 2.2), player
/// stopped, VP mask clear, the data plane's QP register zeroed.
fn assert_unconfigured(peer: &str) {
    use rocelink_wire::hsb::reg;
    let mut ecb = rocelink_operator::hsb::EcbClient::connect(format!("{peer}:8192").parse().unwrap()).unwrap();
    assert_eq!(ecb.read(reg::PLAYER_ENABLE).unwrap(), 0, "player stopped");
    assert_eq!(ecb.read(reg::hif(0, reg::DP_VP_MASK)).unwrap(), 0, "VP mask cleared");
    assert_eq!(ecb.read(reg::vp(0, reg::DP_QP)).unwrap(), 0, "data plane zeroed");
    assert_eq!(ecb.read(reg::vp(0, reg::DP_HOST_IP)).unwrap(), 0, "data plane zeroed");
}
