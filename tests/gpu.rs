//! GPU tests: the persistent transceiver kernel end to end. They need an NVIDIA GPU, so they
//! are ignored in CI and run on the GPU machine with one command (README, "GPU tests"):
//!
//!   bash scripts/gpu-tests.sh build      # here: builds the test binaries into .carry/
//!   bash scripts/gpu-tests.sh run        # there: runs them (device tool, carry .carry)
//!
//! Every answer is checked byte for byte by the peer against the request it sent (flag
//! PAYLOAD_OK in each capture record; `corrupted` counts the others), for the GPU and the
//! CPU backend alike, so "zero corrupted" on both means both gave the same, expected bytes.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../operator/tests/support/qec_sets.rs"]
mod qec_sets;
#[path = "../operator/tests/support/tree.rs"]
mod tree;

/// `$ROCELINK_BIN`, else the binary cargo built (when it is still there), else the tree's
/// `.carry/rocelink` (what `scripts/gpu-tests.sh build` carries).
fn rocelink() -> PathBuf {
    if let Some(p) = std::env::var_os("ROCELINK_BIN") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_rocelink"));
    if built.is_file() {
        return built;
    }
    tree::repo_root().join(".carry/rocelink")
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn echo(name: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, serde_json::Value, String) {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let json = std::env::temp_dir().join(format!("rocelink-gpu-{name}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let mut cmd = Command::new(rocelink());
    cmd.arg("echo").args(args).args(["--quiet", "--json"]).arg(&json);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run rocelink");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{name}:\n{text}");
    let report = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    (out.status.success(), report, text)
}

fn assert_clean(r: &serde_json::Value, count: u64) {
    for (k, v) in
        [("sent", count), ("received", count), ("lost", 0), ("duplicated", 0), ("corrupted", 0), ("reordered", 0)]
    {
        assert_eq!(r[k].as_u64(), Some(v), "{k} in {r}");
    }
    let drops: u64 = r["nic_drops"].as_object().expect("nic_drops").values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(drops, 0, "{r}");
    assert!(r["env"]["backend"].as_str().unwrap_or("").starts_with("gpu"), "{r}");
    // every WQE the kernel wrote went out: none failed, none failed its doorbell's check
    // (checked doorbells: the NIC re-reads a WQE still landing, and that is all)
    for k in ["tx_errors", "tx_wqe_check_failures"] {
        assert_eq!(r["nic"][k].as_u64(), Some(0), "{k} in {r}");
    }
    assert_eq!(r["nic"]["tx_packets"].as_u64(), Some(count), "{r}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_echo_inproc_100k_messages() {
    let (ok, r, _) =
        echo("inproc", &["--backend", "gpu", "--wire", "inproc", "--count", "100000", "--size", "64"], &[]);
    assert!(ok);
    assert_clean(&r, 100_000);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_echo_udp_100k_messages() {
    let (ok, r, _) = echo("udp", &["--backend", "gpu", "--wire", "udp", "--count", "100000", "--size", "1024"], &[]);
    assert!(ok);
    assert_clean(&r, 100_000);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_echo_every_answer_path() {
    // 32 B: request inline in the CQE; 44/45 B around the one-WQEBB inline limit; 256 B: an
    // inline answer over several WQEBBs; 257 and 4096 B: gathered from the TX slot.
    for size in ["24", "32", "44", "45", "256", "257", "1000", "4096"] {
        let (ok, r, _) = echo(&format!("size{size}"), &["--backend", "gpu", "--count", "5000", "--size", size], &[]);
        assert!(ok, "size {size}");
        assert_clean(&r, 5000);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_echo_open_loop_with_64_in_flight() {
    // Messages queue at 200,000/s: the pre-poll (warp 1) runs; 200 B: the poll reads the slot
    // too; 1000 B: the block loads each message after warp 0 hands it over.
    for (size, count) in [("64", 100_000u64), ("200", 50_000), ("1000", 50_000)] {
        let (ok, r, _) = echo(
            &format!("open{size}"),
            &["--backend", "gpu", "--count", &count.to_string(), "--size", size, "--rate", "200000"],
            &[],
        );
        assert!(ok, "size {size}");
        assert_clean(&r, count);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_and_cpu_backends_answer_the_same_stream_identically() {
    for wire in ["inproc", "udp"] {
        let mut reports = Vec::new();
        for backend in ["cpu", "gpu"] {
            let (ok, r, _) = echo(
                &format!("same-{wire}-{backend}"),
                &["--backend", backend, "--wire", wire, "--count", "100000", "--size", "200"],
                &[],
            );
            assert!(ok, "{backend} on {wire}");
            for (k, v) in [("sent", 100_000), ("received", 100_000), ("lost", 0), ("corrupted", 0), ("duplicated", 0)] {
                assert_eq!(r[k].as_u64(), Some(v), "{backend} {wire} {k}: {r}");
            }
            reports.push(r);
        }
        // Same stream: the player's request ids and scrambled args are a function of the
        // run's configuration, and each answer was checked against them.
        assert_eq!(reports[0]["sent"], reports[1]["sent"]);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_launch_per_message_baseline_runs() {
    let (ok, r, _) = echo("launch", &["--backend", "gpu-launch", "--count", "5000", "--size", "64"], &[]);
    assert!(ok);
    for (k, v) in [("received", 5000), ("lost", 0), ("corrupted", 0)] {
        assert_eq!(r[k].as_u64(), Some(v), "{k}: {r}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn a_stuck_kernel_ends_the_run_with_a_clear_error_not_a_hang() {
    let t0 = Instant::now();
    let (ok, _, text) =
        echo("stall", &["--backend", "gpu", "--count", "1000", "--size", "64"], &[("ROCELINK_TEST_STALL_KERNEL", "1")]);
    assert!(!ok, "a stalled kernel must fail the run");
    assert!(t0.elapsed() < Duration::from_secs(30), "took {:?}", t0.elapsed());
    assert!(text.contains("watchdog") || text.contains("stuck") || text.contains("did not stop"), "{text}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_backend_stops_cleanly_on_sigint() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(rocelink())
        .args(["echo", "--backend", "gpu", "--count", "100000000", "--size", "64", "--quiet"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill(2) on our child.
    unsafe { libc_kill(child.id() as i32, 2) };
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(t0.elapsed() < Duration::from_secs(5), "stopped after {:?}", t0.elapsed());
            // Interrupted runs report what ran and exit 130, like `rocelink run`.
            assert_eq!(status.code(), Some(130), "{status}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// `rocelink decode --backend gpu` (the device stage of the transceiver kernel, in a batch
/// kernel) writes the very predictions file `--backend cpu` writes, on every committed QEC
/// fixture; prints the GPU's summary line (in-kernel decode time p50/p99/max).
#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_decode_equals_cpu_decode_on_every_fixture() {
    let root = std::env::var_os("ROCELINK_QEC_FIXTURE_DIR").map(PathBuf::from).unwrap_or_else(tree::qec_fixtures);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.dem").exists() && p.join("dets.b8").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 4, "fixtures under {}: {dirs:?}", root.display());
    let tmp = std::env::temp_dir().join(format!("rocelink-gpu-decode-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        for format in ["01", "b8"] {
            let mut files = Vec::new();
            for backend in ["cpu", "gpu"] {
                let out = tmp.join(format!("{name}.{backend}.{format}"));
                let o = Command::new(rocelink())
                    .args(["decode", "--backend", backend, "--dem"])
                    .arg(dir.join("model.dem"))
                    .arg("--in")
                    .arg(dir.join("dets.b8"))
                    .args(["--in-format", "b8", "--out-format", format, "--out"])
                    .arg(&out)
                    .output()
                    .expect("run rocelink");
                let err = String::from_utf8_lossy(&o.stderr).to_string();
                assert!(o.status.success(), "{name} {backend}: {err}");
                if format == "01" {
                    eprintln!("{name} {backend}: {}", err.trim_end());
                }
                files.push(std::fs::read(&out).unwrap());
            }
            assert!(!files[0].is_empty(), "{name}");
            assert!(files[0] == files[1], "{name} ({format}): the GPU's predictions differ from the CPU's");
        }
    }
    // stim's other formats on the GPU backend too: PyMatching's own predictions, byte for byte.
    let formats = tree::qec_fixtures().join("formats");
    let out = tmp.join("formats.r8");
    let o = Command::new(rocelink())
        .args(["decode", "--backend", "gpu", "--dem"])
        .arg(formats.join("model.dem"))
        .arg("--in")
        .arg(formats.join("shots_obs.dets"))
        .args(["--in_format", "dets", "--in_includes_appended_observables", "--out_format", "r8", "--out"])
        .arg(&out)
        .output()
        .expect("run rocelink");
    assert!(o.status.success(), "formats: {}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(formats.join("pred.r8")).unwrap(), "formats: GPU r8");
}

/// The d=5 QEC graph through the persistent kernel at p = 0.3%: most answers come from warp 0
/// alone, the shots of more than RL_QEC_WARP_K (9) defects from the block, after warp 0 hands
/// the request over (RL_STAGE_TO_BLOCK), and those above K = 12 from the block's fallback.
/// Every count of the run's QEC report equals the CPU backend's on the same shots.
#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn gpu_qec_graph_answers_as_the_cpu_does_including_block_decodes() {
    // The graph's and the fixture's paths are relative to the tree's root, where rocelink runs.
    let root = tree::repo_root();
    let d = "operator/tests/fixtures/qec/d5_p0.003";
    let shots = 2000u64;
    // shots of this run with more than 9 defects (120 detectors: 15 bytes per shot)
    let dets = std::fs::read(root.join(d).join("dets.b8")).unwrap_or_else(|e| panic!("{}/{d}: {e}", root.display()));
    let many =
        dets.chunks(15).take(shots as usize).filter(|s| s.iter().map(|b| b.count_ones()).sum::<u32>() > 9).count();
    assert!(many > 10, "the fixture has shots for the block: {many}");
    let run = |backend: &str| -> serde_json::Value {
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let dir = std::env::temp_dir().join(format!("rocelink-gpu-qec-{backend}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let json = dir.join("report.json");
        let mut cmd = Command::new(rocelink());
        cmd.current_dir(&root).args(["run", "graphs/qec_d5.ron", "--quiet", "--json"]).arg(&json);
        let mut sets = vec![format!("backend={backend}")];
        sets.extend(qec_sets::fixture_sets(d));
        sets.extend([format!("run.stop=Count({shots})"), format!("outputs.dir={}", dir.display())]);
        for s in sets {
            cmd.arg("--set").arg(s);
        }
        let out = cmd.output().expect("run rocelink");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        eprintln!("qec {backend}:\n{text}");
        assert!(out.status.success(), "{text}");
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
    };
    let (gpu, cpu) = (run("Gpu(0)"), run("Cpu"));
    assert!(gpu["env"]["backend"].as_str().unwrap_or("").starts_with("gpu"), "{gpu}");
    let (g, c) = (&gpu["qec"], &cpu["qec"]);
    assert_eq!(g["shots_decoded"].as_u64(), Some(shots), "{g}");
    for k in [
        "shots_decoded",
        "logical_errors",
        "reference_logical_errors",
        "disagreements",
        "disagreements_on_overflow",
        "overflows",
        "bad_answers",
        "unanswered",
        "unmatchable",
    ] {
        assert_eq!(g[k], c[k], "{k}: gpu {g} cpu {c}");
    }
    assert_eq!(g["bad_answers"].as_u64(), Some(0), "{g}");
    for k in ["lost", "corrupted"] {
        assert_eq!(gpu[k].as_u64(), Some(0), "{k}: {gpu}");
    }
}
