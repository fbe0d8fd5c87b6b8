//! The exact decoder against PyMatching 2.4 on stim surface-code shots: the committed
//! fixtures (operator/tests/fixtures/qec/, scripts/qec_fixtures.py) and, when
//! ROCELINK_QEC_FIXTURES names a folder, the fresh ones CI generates there with a new seed.
//!
//! Per fixture: every shot's matching weight equals PyMatching's (both are exact minima of
//! the same integer objective, so they differ only by float rounding: 1e-6 relative); the
//! observables equal PyMatching's prediction except on ties (equal weight, another
//! matching), which are counted and must stay rare; the logical errors are printed beside
//! PyMatching's. Each shot is also decoded streamed, round by round as the decoder stage
//! receives it: the same weight on every shot.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rocelink_qec::{sparse_graph_from_dem_text, DecodeStatus, MatchingDecoder};

/// Ties are rare: a few per thousand shots at most on these codes.
const MAX_TIE_FRACTION: f64 = 0.01;
const WEIGHT_REL_TOL: f64 = 1e-6;

fn read_01(path: &Path) -> Vec<u64> {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.bytes().enumerate().fold(0u64, |m, (k, c)| m | u64::from(c == b'1') << k))
        .collect()
}

fn fixture_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.dem").is_file() && p.join("dets.b8").is_file() && p.join("weights.txt").is_file())
        .collect();
    dirs.sort();
    dirs
}

struct Outcome {
    shots: usize,
    ties: usize,
    logical_errors: usize,
    pymatching_logical_errors: usize,
    us_per_shot: f64,
}

fn check(dir: &Path) -> Outcome {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let text = fs::read_to_string(dir.join("model.dem")).unwrap();
    let graph = sparse_graph_from_dem_text(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let per_shot = graph.num_detectors().div_ceil(8);
    let bytes = fs::read(dir.join("dets.b8")).unwrap();
    assert_eq!(bytes.len() % per_shot, 0, "{name}: dets.b8 is not whole shots");
    let predictions = read_01(&dir.join("pred.01"));
    let truth = read_01(&dir.join("obs.01"));
    let weights: Vec<f64> =
        fs::read_to_string(dir.join("weights.txt")).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
    let shots: Vec<&[u8]> = bytes.chunks(per_shot).collect();
    assert_eq!(predictions.len(), shots.len(), "{name}");
    assert_eq!(weights.len(), shots.len(), "{name}");

    let mut decoder = MatchingDecoder::new(Arc::clone(&graph));
    let t = Instant::now();
    let results: Vec<_> = shots.iter().map(|s| decoder.decode_b8(s)).collect();
    let us_per_shot = t.elapsed().as_secs_f64() * 1e6 / shots.len() as f64;

    // Streamed round by round (stim's time coordinate), settled after every round but the
    // last, as the decoder stage runs: the same weight on every shot, ties rare.
    let dem = rocelink_qec::dem::DetectorErrorModel::parse(&text).unwrap();
    let rounds = dem.detectors_per_round().expect("stim's coordinates give rounds");
    let mut streamed = MatchingDecoder::new(graph);
    let mut stream_ties = 0;
    for (i, shot) in shots.iter().enumerate() {
        streamed.begin_shot();
        let mut first = 0usize;
        for (r, &len) in rounds.iter().enumerate() {
            for det in first..first + len {
                if shot[det / 8] >> (det % 8) & 1 == 1 {
                    streamed.add_defect(det as u32);
                }
            }
            first += len;
            if r + 1 < rounds.len() {
                streamed.settle();
            }
        }
        let got = streamed.finish();
        assert_eq!(got.weight_units, results[i].weight_units, "{name} shot {i}: streamed weight");
        stream_ties += usize::from(got.observables != results[i].observables);
    }
    assert!(stream_ties as f64 <= MAX_TIE_FRACTION * shots.len() as f64, "{name}: {stream_ties} streamed ties");

    let mut ties = 0;
    let mut failures = Vec::new();
    let mut logical_errors = 0;
    let mut pymatching_logical_errors = 0;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.status, DecodeStatus::Ok, "{name} shot {i}: {r:?}");
        let rel = (r.weight - weights[i]).abs() / weights[i].abs().max(1e-9);
        if rel > WEIGHT_REL_TOL && (r.weight - weights[i]).abs() > 1e-9 {
            failures
                .push(format!("shot {i}: weight {} vs PyMatching {} ({} defects)", r.weight, weights[i], r.defects));
        } else if r.observables != predictions[i] {
            ties += 1;
        }
        logical_errors += usize::from(r.observables != truth[i]);
        pymatching_logical_errors += usize::from(predictions[i] != truth[i]);
    }
    println!(
        "{name}: {} shots, weights equal PyMatching's, {ties} ties, logical errors {logical_errors} (PyMatching {pymatching_logical_errors}), {us_per_shot:.2} us/shot",
        shots.len()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} shots off PyMatching's weight:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    assert!((ties as f64) <= MAX_TIE_FRACTION * shots.len() as f64, "{name}: {ties} ties");
    Outcome { shots: shots.len(), ties, logical_errors, pymatching_logical_errors, us_per_shot }
}

fn check_root(root: &Path) -> usize {
    let dirs = fixture_dirs(root);
    for d in &dirs {
        let o = check(d);
        assert!(o.shots > 0 && o.ties <= o.shots && o.us_per_shot > 0.0);
        let _ = (o.logical_errors, o.pymatching_logical_errors);
    }
    dirs.len()
}

#[test]
fn committed_fixtures_match_pymatching() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/tests/fixtures/qec");
    assert!(check_root(&root) >= 4, "the committed fixtures are missing");
}

/// CI points ROCELINK_QEC_FIXTURES at fresh fixtures (scripts/qec_fixtures.py --seed ...).
#[test]
fn fresh_fixtures_match_pymatching() {
    let Some(root) = std::env::var_os("ROCELINK_QEC_FIXTURES") else {
        println!("ROCELINK_QEC_FIXTURES is not set: no fresh fixtures checked");
        return;
    };
    let n = check_root(Path::new(&root));
    assert!(n > 0, "ROCELINK_QEC_FIXTURES holds no fixture");
}
