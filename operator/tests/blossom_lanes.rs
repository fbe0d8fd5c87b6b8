//! The GPU stage's warp matcher (`kernels/stages/blossom.cuh`) equals the CPU matcher it
//! mirrors (`rocelink_qec::matching::PerfectMatching`) on random instances, ties included:
//! the same total, the same partner for every vertex, the same duals. It runs on the host,
//! a thread a lane (`kernels/host/warp_lanes.h`), so every CI run checks the device code's
//! logic without a GPU; the GPU machine's `qec_gpu_match` checks it on the device.
//!
//! Needs a C++20 compiler (`$CXX`, else `c++`): CI installs one; elsewhere the test says it
//! skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rocelink_qec::matching::PerfectMatching;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// Builds `kernels/host/blossom_lanes.cpp`; None (the test skips) without a compiler
/// outside CI.
fn build() -> Option<PathBuf> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("blossom_lanes");
    let src = repo().join("kernels/host/blossom_lanes.cpp");
    let out = Command::new(&cxx)
        .args(["-std=c++20", "-O1", "-pthread", "-Wall", "-Wno-unknown-pragmas", "-o"])
        .arg(&exe)
        .arg(&src)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("{cxx} does not build {}:\n{}", src.display(), String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI must provide a C++20 compiler ({cxx}: {e})");
            eprintln!("SKIPPED the warp matcher on the host: no C++ compiler ({cxx}: {e})");
            None
        }
    }
}

/// A matching instance: vertex count and edges `(u, v, weight)`.
type Instance = (usize, Vec<(u32, u32, i64)>);

struct Rng(u64);

impl Rng {
    fn below(&mut self, k: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % k.max(1)
    }
}

/// An instance: `n` vertices and simple edges, of random weights from a small range (many
/// ties) or a large one, or distances between random points (a metric, as clusters are).
fn instance(rng: &mut Rng) -> Instance {
    let n = match rng.below(3) {
        0 => rng.below(9),
        1 => 4 + rng.below(20),
        _ => 20 + rng.below(30),
    } as usize;
    // Mostly even: an odd instance has no perfect matching, which setup finds at once.
    let n = if rng.below(4) == 0 { n } else { n & !1 };
    let density = [100, 50, 20, 8][rng.below(4) as usize];
    let wmax = [1, 3, 20, 1_000_000][rng.below(4) as usize];
    let metric = rng.below(3) == 0;
    let points: Vec<(i64, i64)> = (0..n).map(|_| (rng.below(30) as i64, rng.below(30) as i64)).collect();
    let mut edges = Vec::new();
    for u in 0..n {
        for v in u + 1..n {
            if rng.below(100) < density {
                let w = if metric {
                    (points[u].0 - points[v].0).abs() + (points[u].1 - points[v].1).abs()
                } else {
                    rng.below(wmax + 1) as i64
                };
                let (a, b) = if rng.below(2) == 0 { (u, v) } else { (v, u) };
                edges.push((a as u32, b as u32, w));
            }
        }
    }
    // Any edge order: the matchers must agree on the order they are given.
    for i in (1..edges.len()).rev() {
        edges.swap(i, rng.below(i as u64 + 1) as usize);
    }
    (n, edges)
}

#[test]
fn the_warp_matcher_equals_the_cpu_matcher() {
    let Some(exe) = build() else { return };
    let mut rng = Rng(0x5DEE_CE66_D1CE_5EED);
    let cases: Vec<Instance> = (0..400).map(|_| instance(&mut rng)).collect();
    let mut input = String::new();
    for (n, edges) in &cases {
        input += &format!("{n} {}\n", edges.len());
        for (u, v, w) in edges {
            input += &format!("{u} {v} {w}\n");
        }
    }
    let mut child = Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("blossom_lanes");
    let mut stdin = child.stdin.take().expect("stdin");
    let feed = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("blossom_lanes output");
    feed.join().expect("feeder").expect("the instances written");
    assert!(out.status.success(), "blossom_lanes failed: {:?}", out.status);
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).expect("text").lines().collect();
    assert_eq!(lines.len(), cases.len(), "an answer an instance");

    let (mut pm, mut mate) = (PerfectMatching::new(), Vec::new());
    let (mut solved, mut none) = (0, 0);
    for (i, ((n, edges), got)) in cases.iter().zip(&lines).enumerate() {
        let want = match pm.solve(*n, edges, &mut mate) {
            None => {
                none += 1;
                "none".to_string()
            }
            Some(total) => {
                solved += 1;
                let mates: String = mate.iter().map(|m| format!(" {m}")).collect();
                let duals: String = (0..*n).map(|v| format!(" {}", pm.vertex_dual_doubled(v))).collect();
                format!("{total} |{mates} |{duals}")
            }
        };
        assert_eq!(*got, want, "instance {i}: n = {n}, edges {edges:?}");
    }
    // Both outcomes were exercised.
    assert!(solved > 200 && none > 40, "{solved} solved, {none} without a perfect matching");
}
