//! The exact decoder against fusion-blossom (an independent exact minimum-weight perfect
//! matching solver, MIT, crates.io), in Rust, without Python: on the committed and fresh
//! stim fixtures and on random graphs, every shot's matching weight must equal
//! fusion-blossom's (both exact over the same integer weights), and the observables must be
//! equal but for ties (equal weight, another matching), which are counted and must stay rare.
//!
//! fusion-blossom's graph: the detectors, plus one virtual vertex per boundary edge (its
//! boundary); edge weights twice our integer weights (it needs even weights). Its minimum
//! weight is its dual objective (`sum_dual_variables`, equal to the primal at the optimum);
//! its correction is the subgraph it returns. `clear()` before every shot.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fusion_blossom::mwpm_solver::{PrimalDualSolver, SolverSerial};
use fusion_blossom::util::{SolverInitializer, SyndromePattern};
use rocelink_qec::graph::BOUNDARY;
use rocelink_qec::{DecodeStatus, MatchingDecoder, MatchingGraph, SparseGraph};

struct Oracle {
    solver: SolverSerial,
    observables: Vec<u64>,
}

impl Oracle {
    fn new(graph: &MatchingGraph) -> Oracle {
        let units = graph.integer_weights();
        let n = graph.num_detectors;
        let mut edges = Vec::new();
        let mut virtuals = Vec::new();
        let mut observables = Vec::new();
        for (e, &w) in graph.edges.iter().zip(&units) {
            let b = if e.b == BOUNDARY {
                virtuals.push(n + virtuals.len());
                *virtuals.last().unwrap()
            } else {
                e.b as usize
            };
            edges.push((e.a as usize, b, 2 * w as isize));
            observables.push(e.observables);
        }
        let init = SolverInitializer::new(n + virtuals.len(), edges, virtuals);
        Oracle { solver: SolverSerial::new(&init), observables }
    }

    /// (weight in our integer units, observables) of the minimum-weight matching.
    fn decode(&mut self, defects: &[u32]) -> (u64, u64) {
        self.solver.clear();
        self.solver.solve(&SyndromePattern::new_vertices(defects.iter().map(|&d| d as usize).collect()));
        let weight = self.solver.sum_dual_variables();
        let obs = self.solver.subgraph().iter().fold(0u64, |m, &e| m ^ self.observables[e]);
        (weight as u64 / 2, obs)
    }
}

fn defects_of(shot: &[u8], n: usize) -> Vec<u32> {
    (0..n).filter(|&i| shot[i / 8] >> (i % 8) & 1 == 1).map(|i| i as u32).collect()
}

/// Every shot of a fixture folder (at most `limit`); returns (shots, ties).
fn check_fixture(dir: &Path, limit: usize) -> (usize, usize) {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let text = fs::read_to_string(dir.join("model.dem")).unwrap();
    let graph = MatchingGraph::from_dem_text(&text).unwrap();
    let sparse = Arc::new(SparseGraph::new(&graph).unwrap());
    let n = graph.num_detectors;
    let mut ours = MatchingDecoder::new(sparse);
    let mut oracle = Oracle::new(&graph);
    let bytes = fs::read(dir.join("dets.b8")).unwrap();
    let (mut shots, mut ties) = (0, 0);
    for (i, shot) in bytes.chunks(n.div_ceil(8)).take(limit).enumerate() {
        let defects = defects_of(shot, n);
        let got = ours.decode_defects(&defects);
        let (w, obs) = oracle.decode(&defects);
        assert_eq!(got.status, DecodeStatus::Ok, "{name} shot {i}");
        assert_eq!(got.weight_units, w, "{name} shot {i}: weight, fusion-blossom {w} ({} defects)", defects.len());
        ties += usize::from(got.observables != obs);
        shots += 1;
    }
    println!("{name}: {shots} shots, weights equal fusion-blossom's, {ties} ties");
    assert!(ties * 100 <= shots, "{name}: {ties} ties in {shots} shots");
    (shots, ties)
}

fn fixture_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.dem").is_file() && p.join("dets.b8").is_file())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn committed_fixtures_equal_fusion_blossom() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/tests/fixtures/qec");
    let dirs = fixture_dirs(&root);
    assert!(dirs.len() >= 4);
    for d in dirs {
        check_fixture(&d, usize::MAX);
    }
}

/// The fresh fixtures CI generates (ROCELINK_QEC_FIXTURES), the first 1,000 shots of each:
/// fusion-blossom is slow at the larger distances.
#[test]
fn fresh_fixtures_equal_fusion_blossom() {
    let Some(root) = std::env::var_os("ROCELINK_QEC_FIXTURES") else {
        println!("ROCELINK_QEC_FIXTURES is not set: no fresh fixtures checked");
        return;
    };
    let dirs = fixture_dirs(Path::new(&root));
    assert!(!dirs.is_empty());
    for d in dirs {
        check_fixture(&d, 1000);
    }
}

/// Random graphs (a grid with random weights, observables and boundary edges, some without
/// boundary) and random shots of up to 24 defects.
#[test]
fn random_graphs_equal_fusion_blossom() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut checked = 0;
    for round in 0..40 {
        let (w, h) = (3 + (next() % 8) as usize, 2 + (next() % 6) as usize);
        let boundary = round % 5 != 0;
        let mut text = String::new();
        let p = |r: u64| 0.0005 + (r % 1000) as f64 / 1000.0 * 0.3;
        for i in 0..w * h {
            let (r, c) = (i / w, i % w);
            let obs = |v: u64| if v.is_multiple_of(4) { " L0" } else { "" };
            if c + 1 < w {
                text += &format!("error({}) D{} D{}{}\n", p(next()), i, i + 1, obs(next()));
            }
            if r + 1 < h {
                text += &format!("error({}) D{} D{}{}\n", p(next()), i, i + w, obs(next()));
            }
            if r + 1 < h && c + 1 < w && next() % 3 == 0 {
                text += &format!("error({}) D{} D{}\n", p(next()), i, i + w + 1);
            }
            if boundary && (c == 0 || c + 1 == w) {
                text += &format!("error({}) D{}{}\n", p(next()), i, obs(next()));
            }
        }
        let graph = MatchingGraph::from_dem_text(&text).unwrap();
        let n = graph.num_detectors as u64;
        let mut ours = MatchingDecoder::new(Arc::new(SparseGraph::new(&graph).unwrap()));
        let mut oracle = Oracle::new(&graph);
        for _ in 0..50 {
            let mut k = 1 + (next() % 24.min(n)) as usize;
            if !boundary {
                k &= !1; // even: a perfect matching exists in a connected graph without boundary
                k = k.max(2);
            }
            let mut defects: Vec<u32> = Vec::new();
            while defects.len() < k {
                let d = (next() % n) as u32;
                if !defects.contains(&d) {
                    defects.push(d);
                }
            }
            defects.sort_unstable();
            let got = ours.decode_defects(&defects);
            let (wt, _) = oracle.decode(&defects);
            assert_eq!(got.status, DecodeStatus::Ok, "round {round}: {defects:?}");
            assert_eq!(got.weight_units, wt, "round {round}: {defects:?}\n{text}");
            checked += 1;
        }
    }
    assert_eq!(checked, 2000);
}
