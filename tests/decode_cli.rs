//! `rocelink decode` mirrors `pymatching predict`: on the committed stim/PyMatching fixtures,
//! its predictions (the exact decoder's) equal PyMatching's on every shot; it reads every
//! input format stim writes and writes every prediction format PyMatching writes, byte for
//! byte as PyMatching's command line does, under PyMatching's option spellings; a DEM with
//! negative edge weights (probabilities above 0.5) decodes to PyMatching's predictions and
//! weights; components of more than 2 detectors are dropped as PyMatching drops them, or
//! refused;
//! `--num-shots` refuses a file of another size and leaves no predictions behind.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("operator/tests/fixtures/qec").join(name)
}

/// `rocelink decode --dem DEM --in INPUT --out OUT ARGS...`, run to its end.
fn rocelink_decode(dem: &Path, input: &Path, out: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .arg("decode")
        .arg("--dem")
        .arg(dem)
        .arg("--in")
        .arg(input)
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .unwrap()
}

fn decode(dir: &Path, out: &Path, out_format: &str) -> String {
    let o = rocelink_decode(
        &dir.join("model.dem"),
        &dir.join("dets.b8"),
        out,
        &["--in-format", "b8", "--out-format", out_format],
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    err
}

#[test]
fn predictions_equal_pymatching_on_every_shot() {
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for name in ["d3_p0.001", "d3_p0.003", "d5_p0.001", "d5_p0.003"] {
        let dir = fixture(name);
        let out = tmp.join(format!("{name}.01"));
        let report = decode(&dir, &out, "01");
        assert!(report.contains("0 unmatchable"), "{name}: {report}");
        let ours = std::fs::read_to_string(&out).unwrap();
        let theirs = std::fs::read_to_string(dir.join("pred.01")).unwrap();
        let (ours, theirs): (Vec<_>, Vec<_>) = (ours.lines().collect(), theirs.lines().collect());
        assert_eq!(ours.len(), theirs.len(), "{name}: shot count");
        // Both decoders are exact; these fixtures have no equal-weight ties.
        let differ = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{name}: {differ} predictions differ, {report}");
    }
}

/// `operator/tests/fixtures/qec/formats` (scripts/format_vectors.py): stim wrote the shots in
/// each format, with and without the observables appended, and PyMatching's command line
/// wrote its predictions in each format. Every input, every output format, the bytes equal.
#[test]
fn every_format_pymatching_reads_and_writes_byte_for_byte() {
    let dir = fixture("formats");
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-formats-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let formats = ["b8", "01", "r8", "hits", "dets"];
    let mut runs = 0;
    for (shots, appended) in [("shots", false), ("shots_obs", true)] {
        for input in formats {
            for output in formats {
                let out = tmp.join(format!("{shots}.{input}.{output}"));
                let mut args = vec!["--in_format", input, "--out_format", output];
                if appended {
                    args.push("--in_includes_appended_observables");
                }
                let o = rocelink_decode(&dir.join("model.dem"), &dir.join(format!("{shots}.{input}")), &out, &args);
                assert!(o.status.success(), "{shots}.{input} -> {output}: {}", String::from_utf8_lossy(&o.stderr));
                let want = std::fs::read(dir.join(format!("pred.{output}"))).unwrap();
                assert_eq!(std::fs::read(&out).unwrap(), want, "{shots}.{input} -> {output}");
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 50);
}

/// `operator/tests/fixtures/qec/negative` (scripts/negative_vectors.py): 239 of the DEM's 502
/// edges negative. Every prediction is PyMatching's, every weight too; the GPU backend (its
/// all-pairs table) refuses the DEM in one line.
#[test]
fn negative_weights_decode_as_pymatching_does() {
    let dir = fixture("negative");
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-negative-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (out, weights) = (tmp.join("pred.01"), tmp.join("weights.txt"));
    let (dem, shots) = (dir.join("model.dem"), dir.join("shots.b8"));
    let o = rocelink_decode(&dem, &shots, &out, &["--weights-out", weights.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(dir.join("pred.01")).unwrap(), "predictions");
    let read =
        |p: &Path| -> Vec<f64> { std::fs::read_to_string(p).unwrap().lines().map(|l| l.parse().unwrap()).collect() };
    let (ours, theirs) = (read(&weights), read(&dir.join("weights.txt")));
    assert_eq!(ours.len(), 600);
    assert!(theirs.iter().any(|&w| w < 0.0), "some shots weigh less than nothing");
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "shot {i}: weight {a} against PyMatching's {b}");
    }
    let o = rocelink_decode(&dem, &shots, &tmp.join("gpu.01"), &["--backend", "gpu"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("negative weight") && err.contains("decode on the CPU"), "{err}");
}

/// A DEM not decomposed for matching: its components of more than 2 detectors are dropped
/// with a warning, as PyMatching drops them (the predictions are those of the DEM without
/// them), or, with `--hyperedges refuse`, the DEM is refused naming the line.
#[test]
fn hyperedges_are_dropped_as_pymatching_drops_them_or_refused() {
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-hyper-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let plain = "error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.2) D1 D2\nerror(0.1) D2\n";
    std::fs::write(tmp.join("plain.dem"), plain).unwrap();
    std::fs::write(tmp.join("hyper.dem"), format!("{plain}error(0.3) D0 D1 D2 L0 ^ D2\n")).unwrap();
    // the last component, D2 alone, stays: as an edge merged into D2's boundary edge
    std::fs::write(tmp.join("plain2.dem"), format!("{plain}error(0.3) D2\n")).unwrap();
    std::fs::write(tmp.join("in.01"), "100\n110\n011\n111\n001\n").unwrap();
    let run = |dem: &str, extra: &[&str]| {
        let out = tmp.join(format!("{dem}.out"));
        let args: Vec<&str> = ["--in-format", "01"].iter().chain(extra).copied().collect();
        let o = rocelink_decode(&tmp.join(dem), &tmp.join("in.01"), &out, &args);
        (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string(), std::fs::read(&out).unwrap_or_default())
    };
    let (ok, err, dropped) = run("hyper.dem", &[]);
    assert!(ok && err.contains("1 error components flip more than 2 detectors") && err.contains("line 5"), "{err}");
    assert_eq!(dropped, run("plain2.dem", &[]).2);
    assert_ne!(dropped, run("plain.dem", &[]).2, "the D2 component is kept");
    let (ok, err, _) = run("hyper.dem", &["--hyperedges", "refuse"]);
    assert!(!ok && err.contains("DEM line 5: an error component flips 3 detectors"), "{err}");
}

#[test]
fn num_shots_refuses_a_file_of_another_size_and_writes_nothing() {
    let dir = fixture("d5_p0.001");
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-n-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let out = tmp.join("p.01");
    let _ = std::fs::remove_file(&out);
    let o = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .args(["decode", "--dem"])
        .arg(dir.join("model.dem"))
        .arg("--in")
        .arg(dir.join("dets.b8"))
        .args(["--num-shots", "4999", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("but 4999 shots of the DEM's 120 detectors are 74985 bytes (5000 shots of 120 detectors)"),
        "{err}"
    );
    assert!(!out.exists() && !tmp.join("p.01.partial").exists());
}

#[test]
fn b8_output_is_the_same_predictions_bit_packed() {
    let dir = fixture("d3_p0.003");
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-b8-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (a, b) = (tmp.join("p.01"), tmp.join("p.b8"));
    decode(&dir, &a, "01");
    decode(&dir, &b, "b8");
    let text = std::fs::read_to_string(&a).unwrap();
    let bytes = std::fs::read(&b).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let per_shot = lines[0].len().div_ceil(8);
    assert_eq!(bytes.len(), lines.len() * per_shot);
    for (i, l) in lines.iter().enumerate() {
        for (k, c) in l.chars().enumerate() {
            let bit = (bytes[i * per_shot + k / 8] >> (k % 8)) & 1;
            assert_eq!(bit == 1, c == '1', "shot {i} observable {k}");
        }
    }
}

#[test]
fn a_malformed_dem_is_refused_with_its_line() {
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-bad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let dem = tmp.join("bad.dem");
    std::fs::write(&dem, "error(0.1) D0 D1\nerror(zebra) D1\n").unwrap();
    std::fs::write(tmp.join("dets.b8"), [0u8]).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .args(["decode", "--dem"])
        .arg(&dem)
        .arg("--in")
        .arg(tmp.join("dets.b8"))
        .arg("--out")
        .arg(tmp.join("p.01"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 2") || err.contains(":2"), "{err}");
}

/// Whether a CUDA driver is loadable here (then the GPU may really be present).
fn cuda_driver_here() -> bool {
    ["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"]
        .iter()
        .any(|p| Path::new(p).exists())
        || std::env::var_os("LD_LIBRARY_PATH")
            .is_some_and(|v| std::env::split_paths(&v).any(|d| d.join("libcuda.so.1").exists()))
}

#[test]
fn gpu_backend_without_a_gpu_is_a_one_line_error() {
    let dir = fixture("d3_p0.001");
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-gpu-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let out = tmp.join("p.01");
    for backend in ["gpu", "gpu:3"] {
        let o = Command::new(env!("CARGO_BIN_EXE_rocelink"))
            .args(["decode", "--backend", backend, "--dem"])
            .arg(dir.join("model.dem"))
            .arg("--in")
            .arg(dir.join("dets.b8"))
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        if o.status.success() {
            // A GPU is here: the GPU decode ran (tests/gpu.rs compares it with the CPU's).
            assert!(cuda_driver_here(), "succeeded without a CUDA driver: {err}");
            assert!(err.contains("in-kernel decode time"), "{err}");
            continue;
        }
        if cuda_driver_here() && !err.contains("no CUDA device") {
            eprintln!("a CUDA driver is here; not asserting the no-GPU error: {err}");
            continue;
        }
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.starts_with("rocelink: error: GPU decoder: "), "{err}");
        assert!(err.contains("CUDA") && !err.contains("panicked"), "{err}");
        assert!(!out.exists(), "no output file without a GPU");
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .args(["decode", "--backend", "tpu", "--dem", "m", "--in", "i", "--out", "o"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cpu, gpu, gpu:N"));
}

/// `--threads` decodes on several threads and writes one thread's predictions and weights,
/// byte for byte; 0 takes the machine's cores; the GPU backend refuses it.
#[test]
fn threads_write_one_threads_predictions() {
    let dir = fixture("d5_p0.003");
    let tmp = std::env::temp_dir().join(format!("rocelink-decode-threads-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |threads: &str| -> (Vec<u8>, String, String) {
        let (out, weights) = (tmp.join(format!("p{threads}.01")), tmp.join(format!("w{threads}.txt")));
        let o = Command::new(env!("CARGO_BIN_EXE_rocelink"))
            .args(["decode", "--threads", threads, "--dem"])
            .arg(dir.join("model.dem"))
            .arg("--in")
            .arg(dir.join("dets.b8"))
            .arg("--out")
            .arg(&out)
            .arg("--weights-out")
            .arg(&weights)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        (std::fs::read(&out).unwrap(), std::fs::read_to_string(&weights).unwrap(), err)
    };
    let (one, w1, _) = run("1");
    let (three, w3, report) = run("3");
    assert!(report.contains("on 3 threads"), "{report}");
    assert_eq!(one, three, "predictions");
    assert_eq!(w1, w3, "weights");
    assert_eq!(one, std::fs::read(dir.join("pred.01")).unwrap(), "PyMatching's");
    let (all, _, _) = run("0");
    assert_eq!(one, all);
    let o = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .args(["decode", "--backend", "gpu", "--threads", "2", "--dem"])
        .arg(dir.join("model.dem"))
        .arg("--in")
        .arg(dir.join("dets.b8"))
        .arg("--out")
        .arg(tmp.join("g.01"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--threads is the CPU backend's"), "{err}");
}
