//! The GPU stage's warp matcher (`kernels/stages/blossom.cuh`) equals the CPU matcher it
//! mirrors (`rocelink_qec::matching::PerfectMatching::solve_with_boundary`) on random
//! instances, ties included: the same total, the same partner (or the boundary) for every
//! vertex, the same duals. It runs on the host,
//! a thread a lane (`kernels/host/warp_lanes.h`), so every CI run checks the device code's
//! logic without a GPU; the GPU machine's `qec_gpu_match` checks it on the device.
//!
//! Needs a C++20 compiler (`$CXX`, else `c++`): CI installs one; elsewhere the test says it
//! skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rocelink_qec::matching::{PerfectMatching, BOUNDARY, NO_BOUNDARY};

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

/// A matching instance: vertex count, edges `(u, v, weight)`, boundary costs.
type Instance = (usize, Vec<(u32, u32, i64)>, Vec<i64>);

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
/// ties) or a large one, or distances between random points (a metric, as clusters are,
/// with boundary costs the distance to a side), and boundary costs on none, some or all.
fn instance(rng: &mut Rng) -> Instance {
    let n = match rng.below(3) {
        0 => rng.below(9),
        1 => 4 + rng.below(20),
        _ => 20 + rng.below(30),
    } as usize;
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
    let without = [100, 90, 50, 10, 0][rng.below(5) as usize];
    let caps = (0..n)
        .map(|v| match () {
            _ if rng.below(100) < without => NO_BOUNDARY,
            _ if metric => points[v].0.min(29 - points[v].0) + 1,
            _ => rng.below(wmax + 1) as i64,
        })
        .collect();
    (n, edges, caps)
}

#[test]
fn the_warp_matcher_equals_the_cpu_matcher() {
    let Some(exe) = build() else { return };
    let mut rng = Rng(0x5DEE_CE66_D1CE_5EED);
    let cases: Vec<Instance> = (0..400).map(|_| instance(&mut rng)).collect();
    let mut input = String::new();
    for (n, edges, caps) in &cases {
        input += &format!("{n} {}\n", edges.len());
        for (u, v, w) in edges {
            input += &format!("{u} {v} {w}\n");
        }
        let caps: Vec<String> =
            caps.iter().map(|&c| if c == NO_BOUNDARY { "-1".into() } else { c.to_string() }).collect();
        input += &format!("{}\n", caps.join(" "));
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
    let (mut solved, mut none, mut to_boundary) = (0, 0, 0);
    for (i, ((n, edges, caps), got)) in cases.iter().zip(&lines).enumerate() {
        let want = match pm.solve_with_boundary(*n, edges, caps, &mut mate) {
            None => {
                none += 1;
                "none".to_string()
            }
            Some(total) => {
                solved += 1;
                to_boundary += mate.iter().filter(|&&m| m == BOUNDARY).count();
                let mates: String =
                    mate.iter().map(|&m| if m == BOUNDARY { " B".to_string() } else { format!(" {m}") }).collect();
                let duals: String = (0..*n).map(|v| format!(" {}", pm.vertex_dual_doubled(v))).collect();
                format!("{total} |{mates} |{duals}")
            }
        };
        assert_eq!(*got, want, "instance {i}: n = {n}, edges {edges:?}, boundary {caps:?}");
    }
    // Every outcome was exercised.
    assert!(
        solved > 200 && none > 20 && to_boundary > 500,
        "{solved} solved ({to_boundary} vertices to the boundary), {none} without a perfect matching"
    );
}
