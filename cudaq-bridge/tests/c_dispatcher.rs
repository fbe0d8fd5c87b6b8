//! The provider as a CUDA-Q Realtime dispatcher meets it: `tests/dispatcher.c`, compiled here
//! with the system C compiler against `include/rocelink_cudaq_bridge.h`, `dlopen`s the built
//! `librocelink_cudaq_bridge.so`, checks the interface and serves fpga-sim's requests with an
//! FNV-1a-keyed handler table (echo, increment) through the CPU data plane or the RING_BUFFER
//! context's host views; fpga-sim checks every answer against its request.
//!
//! The runs that load the machine go one at a time ([`SERIAL`]): CI has 2 cores.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rocelink_cudaq_bridge::abi::*;
use std::mem::{offset_of, size_of};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The built library: next to this test's executable (`target/<profile>/deps`), or one folder
/// up; built with cargo when it is in neither (a test binary run on its own).
fn library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let name = "librocelink_cudaq_bridge.so";
        let exe = std::env::current_exe().expect("test executable");
        let deps = exe.parent().expect("its folder");
        for dir in [deps, deps.parent().unwrap_or(deps)] {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "rocelink-cudaq-bridge"]).current_dir(env!("CARGO_MANIFEST_DIR"));
        if deps.components().any(|c| c.as_os_str() == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo build");
        assert!(status.success(), "cargo build -p rocelink-cudaq-bridge failed");
        let p = deps.parent().unwrap_or(deps).join(name);
        assert!(p.is_file(), "{} not found after building it", p.display());
        p
    })
    .clone()
}

/// `tests/dispatcher.c`, compiled once into the test's scratch folder.
fn dispatcher() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudaq-bridge-dispatcher");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let o = Command::new(&cc)
            .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
            .arg(manifest.join("include"))
            .arg(manifest.join("tests/dispatcher.c"))
            .args(["-ldl", "-o"])
            .arg(&out)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
        assert!(o.status.success(), "compiling tests/dispatcher.c failed:\n{}", String::from_utf8_lossy(&o.stderr));
        out
    })
    .clone()
}

/// What one run of the C program printed.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    seconds: f64,
}

impl Ran {
    /// The `key=value` pairs of the first line starting with `prefix`.
    fn line(&self, prefix: &str) -> HashMap<String, String> {
        let l = self
            .stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{}", self.stdout));
        pairs(l)
    }

    /// The reports of every run, in order.
    fn runs(&self) -> Vec<HashMap<String, String>> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with("run: "))
            .map(|l| pairs(l.split(" => ").nth(1).unwrap_or("")))
            .collect()
    }
}

fn pairs(line: &str) -> HashMap<String, String> {
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn num(m: &HashMap<String, String>, key: &str) -> u64 {
    m.get(key).unwrap_or_else(|| panic!("no `{key}` in {m:?}")).parse().unwrap_or_else(|_| panic!("`{key}` in {m:?}"))
}

/// Runs `dispatcher LIB args..`, killed after `limit`.
fn run(args: &[&str], limit: Duration) -> Ran {
    let started = Instant::now();
    let mut child = Command::new(dispatcher())
        .arg(library())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the dispatcher");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the dispatcher ({args:?}) did not end within {limit:?}:\n{}\n{}",
                o.join().unwrap_or_default(),
                e.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let ran = Ran {
        code,
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
        seconds: started.elapsed().as_secs_f64(),
    };
    eprintln!("dispatcher {args:?}: {:.2} s\n{}", ran.seconds, ran.stdout);
    ran
}

fn assert_ok(r: &Ran) {
    assert_eq!(r.code, Some(0), "the dispatcher failed:\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
}

#[test]
fn layouts_agree_with_the_c_header_and_the_interface_is_version_3() {
    let r = run(&["layout"], Duration::from_secs(30));
    assert_ok(&r);
    let l = r.line("layout:");
    let expect: &[(&str, usize)] = &[
        ("ringbuffer", size_of::<cudaq_ringbuffer_t>()),
        ("rb_rx_stride_sz", offset_of!(cudaq_ringbuffer_t, rx_stride_sz)),
        ("rb_rx_flags_host", offset_of!(cudaq_ringbuffer_t, rx_flags_host)),
        ("rb_tx_data_host", offset_of!(cudaq_ringbuffer_t, tx_data_host)),
        ("dataplane", size_of::<cudaq_cpu_dataplane_t>()),
        ("dp_ring", offset_of!(cudaq_cpu_dataplane_t, ring)),
        ("dp_rx_poll", offset_of!(cudaq_cpu_dataplane_t, rx_poll)),
        ("dp_tx_publish", offset_of!(cudaq_cpu_dataplane_t, tx_publish)),
        ("unified", size_of::<cudaq_unified_dispatch_ctx_t>()),
        ("type_desc", size_of::<cudaq_type_desc_t>()),
        ("schema", size_of::<cudaq_handler_schema_t>()),
        ("entry", size_of::<cudaq_function_entry_t>()),
        ("entry_function_id", offset_of!(cudaq_function_entry_t, function_id)),
        ("entry_dispatch_mode", offset_of!(cudaq_function_entry_t, dispatch_mode)),
        ("entry_schema", offset_of!(cudaq_function_entry_t, schema)),
        ("entry_routing_key", offset_of!(cudaq_function_entry_t, routing_key)),
        ("table", size_of::<cudaq_function_table_t>()),
        ("table_count", offset_of!(cudaq_function_table_t, count)),
        ("interface", size_of::<cudaq_realtime_bridge_interface_t>()),
        ("if_create", offset_of!(cudaq_realtime_bridge_interface_t, create)),
        ("if_disconnect", offset_of!(cudaq_realtime_bridge_interface_t, disconnect)),
        ("if_get_cpu_dataplane", offset_of!(cudaq_realtime_bridge_interface_t, get_cpu_dataplane)),
        ("if_get_endpoint_info", offset_of!(cudaq_realtime_bridge_interface_t, get_endpoint_info)),
        ("if_get_ring_geometry", offset_of!(cudaq_realtime_bridge_interface_t, get_ring_geometry)),
        ("if_set_function_table", offset_of!(cudaq_realtime_bridge_interface_t, set_function_table)),
        ("rpc_header", rocelink_wire::rpc::HEADER_LEN),
        ("rpc_response", rocelink_wire::rpc::HEADER_LEN),
    ];
    for (key, rust) in expect {
        assert_eq!(num(&l, key) as usize, *rust, "{key}: C says {}, Rust {rust}", l[*key]);
    }
    assert_eq!(num(&l, "version"), CUDAQ_REALTIME_BRIDGE_INTERFACE_VERSION as u64);
}

#[test]
fn bad_arguments_are_refused_with_a_reason_and_the_process_lives_on() {
    let r = run(&["bad-args"], Duration::from_secs(60));
    assert_ok(&r);
    assert_eq!(num(&r.line("bad-args:"), "refused"), 14);
    for reason in [
        "--wire \"tcp\": want udp or inproc",
        "--slots 0: must be 1..=4096",
        "--slots needs a value",
        "needs --peer sim",
        "no live bridge handle",
    ] {
        assert!(r.stderr.contains(reason), "stderr lacks `{reason}`:\n{}", r.stderr);
    }
}

#[test]
fn a_peer_that_is_not_there_fails_connect_with_a_status_in_bounded_time() {
    // a UDP port that is bound, so nothing answers and nothing refuses
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr").to_string();
    let r = run(&["no-peer", "--", "--peer", &addr], Duration::from_secs(30));
    assert_ok(&r);
    let l = r.line("no-peer:");
    assert_eq!(num(&l, "connect_status"), CUDAQ_ERR_INTERNAL as u64);
    let took: f64 = l["seconds"].parse().expect("seconds");
    assert!(took < 5.0, "connect took {took} s");
    assert!(r.stderr.contains("no ECB reply"), "{}", r.stderr);
}

/// 100,000 requests: echo and increment, open loop at two sizes and closed loop.
const RUNS_100K: [&str; 3] = [
    "function=echo count=50000 size=64 rate=400000",
    "function=increment count=48000 size=512 rate=400000",
    "function=increment count=2000 size=64",
];

fn serve_100k(plane: &str, provider: &[&str]) {
    let _one = serial();
    let mut args = vec!["serve", "--plane", plane];
    for spec in RUNS_100K {
        args.extend(["--run", spec]);
    }
    args.push("--");
    args.extend(provider);
    let r = run(&args, Duration::from_secs(240));
    assert_ok(&r);
    if r.line("endpoint:")["ring_memory"] == "host" {
        assert_eq!(r.line("views:")["device_is_host"], "1", "host memory: the device views are the host views");
    }
    let runs = r.runs();
    assert_eq!(runs.len(), RUNS_100K.len());
    for (report, spec) in runs.iter().zip(RUNS_100K) {
        let count: u64 =
            spec.split_whitespace().find_map(|kv| kv.strip_prefix("count=")).expect("count").parse().expect("count");
        for (key, want) in
            [("sent", count), ("answered", count), ("ok", count), ("lost", 0), ("duplicated", 0), ("corrupted", 0)]
        {
            assert_eq!(num(report, key), want, "{spec}: {key} in {report:?}");
        }
        assert_eq!(report["stopped_by"], "count", "{spec}");
    }
    let d = r.line("dispatcher:");
    assert_eq!((num(&d, "served"), num(&d, "unknown"), num(&d, "refused"), num(&d, "bad_flags")), (100_000, 0, 0, 0));
    let c = r.line("counters:");
    for (key, want) in [
        ("rx_requests", 100_000),
        ("tx_responses", 100_000),
        ("rx_ring_full", 0),
        ("rx_too_long", 0),
        ("rx_not_rpc", 0),
        ("nic_drops", 0),
    ] {
        assert_eq!(num(&c, key), want, "{key} in {c:?}");
    }
}

#[test]
fn cpu_data_plane_udp_wire_100k_answers_checked_by_fpga_sim() {
    serve_100k("cpu", &["--wire", "udp"]);
}

#[test]
fn cpu_data_plane_inproc_wire_100k_answers_checked_by_fpga_sim() {
    serve_100k("cpu", &["--wire", "inproc"]);
}

#[test]
fn the_cpu_data_plane_serves_without_launch_as_nvidia_unified_consumers_drive_it() {
    // get_cpu_dataplane, then connect, and no launch: the provider launches itself.
    let _one = serial();
    let r = run(
        &[
            "serve",
            "--plane",
            "cpu",
            "--no-launch",
            "--run",
            "function=increment count=5000 size=64",
            "--",
            "--wire",
            "udp",
        ],
        Duration::from_secs(60),
    );
    assert_ok(&r);
    let runs = r.runs();
    assert_eq!((num(&runs[0], "sent"), num(&runs[0], "ok"), num(&runs[0], "lost")), (5000, 5000, 0), "{runs:?}");
}

#[test]
fn ring_buffer_host_views_udp_wire_100k_answers_checked_by_fpga_sim() {
    serve_100k("ring", &["--wire", "udp"]);
}

#[test]
fn ring_buffer_host_views_inproc_wire_100k_answers_checked_by_fpga_sim() {
    serve_100k("ring", &["--wire=inproc", "--slots=16", "--slot-size=1024"]);
}

#[test]
fn a_full_ring_drops_and_counts_and_the_ring_serves_again() {
    let _one = serial();
    // the dispatcher holds off during the first run: 8 slots fill, the other 32 requests are
    // dropped after the grace; then it answers the 8 and the next run goes through whole
    let r = run(
        &[
            "serve",
            "--pause-first-run",
            "--run",
            "count=40 size=64 rate=1000000 timeout_s=10",
            "--run",
            "count=1000 size=64 rate=100000",
            "--",
            "--wire",
            "inproc",
            "--slots",
            "8",
        ],
        Duration::from_secs(60),
    );
    assert_ok(&r);
    let runs = r.runs();
    assert_eq!((num(&runs[0], "sent"), num(&runs[0], "answered"), num(&runs[0], "lost")), (40, 0, 40));
    assert_eq!((num(&runs[1], "ok"), num(&runs[1], "lost")), (1000, 0));
    let c = r.line("counters:");
    assert_eq!((num(&c, "rx_ring_full"), num(&c, "rx_requests"), num(&c, "tx_responses")), (32, 1008, 1008));
}

#[test]
fn a_request_longer_than_a_slot_is_counted_and_dropped_before_the_ring() {
    let _one = serial();
    let r = run(
        &[
            "serve",
            "--run",
            "count=4 size=256 rate=100000 timeout_s=10",
            "--run",
            "count=1000 size=128 rate=100000",
            "--",
            "--wire",
            "udp",
            "--slot-size",
            "128",
        ],
        Duration::from_secs(60),
    );
    assert_ok(&r);
    let runs = r.runs();
    assert_eq!((num(&runs[0], "sent"), num(&runs[0], "answered")), (4, 0));
    assert_eq!((num(&runs[1], "ok"), num(&runs[1], "lost")), (1000, 0), "a request of exactly a slot goes through");
    let c = r.line("counters:");
    assert_eq!((num(&c, "rx_too_long"), num(&c, "rx_requests"), num(&c, "rx_ring_full")), (4, 1000, 0));
}

#[test]
fn disconnect_under_load_stops_the_data_path_and_ends_the_run() {
    let _one = serial();
    let r = run(&["disconnect-under-load", "--", "--wire", "udp"], Duration::from_secs(90));
    assert_ok(&r);
    let d = r.line("disconnect:");
    let took: f64 = d["seconds"].parse().expect("seconds");
    let ended: f64 = d["run_ended_after"].parse().expect("seconds");
    assert!(took < 5.0 && ended < 15.0, "disconnect {took} s, the run ended {ended} s after it");
    let load = r.line("run: load");
    let answered = num(&load, "answered");
    // the dispatcher had answered 5000 when the disconnect came; the answers the engine had
    // not sent yet (at most a ring and a send queue of them) never leave
    assert!((4000..2_000_000).contains(&answered), "{load:?}");
    assert!(num(&load, "lost") > 0, "the run was cut short: {load:?}");
    assert_eq!(num(&load, "corrupted") + num(&load, "duplicated"), 0, "{load:?}");
}

#[test]
fn a_peer_in_another_process_over_udp() {
    let _one = serial();
    // fpga-sim here, the provider in the C program's process: the wire between them is real
    let (host_ip, peer_ip) = rocelink_operator::echo::fresh_loopback_pair();
    let link =
        rocelink_link::UdpLink::bind(SocketAddrV4::new(peer_ip, rocelink_wire::roce::UDP_PORT)).expect("peer link");
    let config = rocelink_fpga_sim::SimConfig {
        ecb_bind: SocketAddrV4::new(peer_ip, 0),
        mac: rocelink_operator::peer::PEER_MAC,
        ip: peer_ip.octets(),
        ..rocelink_fpga_sim::SimConfig::default()
    };
    let sim = rocelink_fpga_sim::start(config, Box::new(link)).expect("fpga-sim");
    let ecb = sim.ecb_addr().to_string();
    let host = host_ip.to_string();
    let r = run(
        &[
            "serve",
            "--run",
            "function=increment count=20000 size=64 rate=400000",
            "--",
            "--peer",
            &ecb,
            "--host-ip",
            &host,
        ],
        Duration::from_secs(120),
    );
    assert_ok(&r);
    let e = r.line("endpoint:");
    assert_eq!((e["peer"].as_str(), e["peer_ecb"].as_str()), ("remote", ecb.as_str()));
    assert_eq!(e["host"], format!("{host}:4791"));
    let run0 = &r.runs()[0];
    assert_eq!((num(run0, "ok"), num(run0, "lost")), (20_000, 0));
    assert!(sim.stats().sent >= 20_000);
    sim.stop();
}

#[test]
fn a_graph_file_gives_the_wire_peer_and_slots() {
    let _one = serial();
    let graph = Path::new(env!("CARGO_MANIFEST_DIR")).join("../graphs/echo.ron");
    let graph = graph.to_str().expect("path");
    let r =
        run(&["serve", "--run", "count=2000 size=128 rate=100000", "--", "--graph", graph], Duration::from_secs(60));
    assert_ok(&r);
    let e = r.line("endpoint:");
    // graphs/echo.ron: inproc wire, fpga-sim here, 128 slots, 64-byte messages in 128-byte slots
    assert_eq!(
        (e["wire"].as_str(), e["peer"].as_str(), e["slots"].as_str(), e["slot_size"].as_str()),
        ("inproc", "sim", "128", "128")
    );
    assert_eq!(num(&r.runs()[0], "ok"), 2000);
}
