//! The table decoder (`qec::exact`, the GPU stage's bit-exact model) against PyMatching on
//! the committed fixtures (scripts/qec_fixtures.py, operator/tests/fixtures/qec/) and, when
//! ROCELINK_QEC_FIXTURES names a folder, on the fresh fixtures CI generated there with a new
//! seed up to d = 5 (docs/qec.md, "Oracles"); and `predict` (`rocelink decode`), which runs the
//! exact decoder, on the same files.
//!
//! What is checked, per fixture:
//! - every shot (the DP up to K = 12 defects, its clusters above): observables equal PyMatching's prediction, or the
//!   shot is an equal-weight tie (same weight within 1e-9 relative, another matching), which
//!   is counted and printed, not failed; ties must stay a small fraction;
//! - weights within 1e-4 relative of PyMatching's where not tied;
//! - shots not decoded (status overflow: a cluster over the matcher's edge cap) are counted;
//! - the 16-bit GPU table and the float table give the same observables as the
//!   PyMatching-exact table on those shots, except on ties (equal weight within the table's
//!   rounding: 1e-3 relative for 16 bits, 1e-6 for the float table against PyMatching's
//!   integers), which are counted and printed (the float table decodes up to K defects
//!   only: the clusters' proof needs integer duals);
//! - `predict()` writes exactly PyMatching's predictions (01 and b8) on those shots.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rocelink_operator::qec::exact::{DecodeStatus, ExactDecoder, DEFAULT_MAX_DEFECTS};
use rocelink_operator::qec::graph::{DistanceTable, MatchingGraph, TableWeight};
use rocelink_operator::qec::predict::{predict, ShotFormat};
use rocelink_operator::qec::{load_dem, DetectorErrorModel};

/// Ties are rare (a few per thousand shots at most on these codes).
const MAX_TIE_FRACTION: f64 = 0.01;

struct Fixture {
    dir: PathBuf,
    dem: DetectorErrorModel,
    shots: Vec<Vec<u8>>,
    predictions: Vec<u64>,
    weights: Vec<f64>,
    truth: Vec<u64>,
}

fn read_01(path: &Path) -> Vec<u64> {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.bytes().enumerate().fold(0u64, |m, (k, c)| m | u64::from(c == b'1') << k))
        .collect()
}

fn load(dir: &Path) -> Fixture {
    let dem = load_dem(&dir.join("model.dem")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let bytes = fs::read(dir.join("dets.b8")).unwrap();
    let per_shot = dem.num_detectors.div_ceil(8);
    assert_eq!(bytes.len() % per_shot, 0, "{}: dets.b8 is not whole shots", dir.display());
    let shots: Vec<Vec<u8>> = bytes.chunks(per_shot).map(<[u8]>::to_vec).collect();
    let predictions = read_01(&dir.join("pred.01"));
    let truth = read_01(&dir.join("obs.01"));
    let weights: Vec<f64> =
        fs::read_to_string(dir.join("weights.txt")).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(predictions.len(), shots.len(), "{}", dir.display());
    assert_eq!(weights.len(), shots.len(), "{}", dir.display());
    assert_eq!(truth.len(), shots.len(), "{}", dir.display());
    Fixture { dir: dir.to_path_buf(), dem, shots, predictions, weights, truth }
}

/// Folders under `root` that hold a decoder fixture (a model.dem and its dets.b8), sorted.
fn fixture_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.dem").is_file() && p.join("dets.b8").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn committed_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec")
}

#[derive(Debug, Default)]
struct Agreement {
    shots: usize,
    within_cap: usize,
    agree: usize,
    ties: usize,
    overflows: usize,
    unmatchable: usize,
    max_weight_rel_err: f64,
    /// Shots within the cap where the observables are PyMatching's (agreements, not ties).
    agreeing: Vec<bool>,
    logical_errors: usize,
    compact_disagree: usize,
    compact_ties: usize,
    float_disagree: usize,
    float_ties: usize,
    /// Shots above K, which the float table does not decode (its duals need integers).
    float_above_k: usize,
}

fn decode_all<W: TableWeight>(table: DistanceTable<W>, shots: &[Vec<u8>]) -> Vec<(u64, f64, DecodeStatus)> {
    let mut d = ExactDecoder::new(Arc::new(table), DEFAULT_MAX_DEFECTS).unwrap();
    shots
        .iter()
        .map(|s| {
            let r = d.decode_b8(s);
            (r.observables, r.weight, r.status)
        })
        .collect()
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(1e-12)
}

fn check(fx: &Fixture) -> Agreement {
    let name = fx.dir.file_name().unwrap().to_string_lossy().to_string();
    let graph = MatchingGraph::from_dem(&fx.dem, Default::default()).unwrap();
    let fine = decode_all(graph.fine_table().unwrap(), &fx.shots);
    let compact = decode_all(graph.compact_table().unwrap(), &fx.shots);
    let float = decode_all(graph.float_table().unwrap(), &fx.shots);
    let mut a = Agreement { shots: fx.shots.len(), agreeing: vec![false; fx.shots.len()], ..Agreement::default() };
    let mut failures = Vec::new();
    for (i, &(obs, w, status)) in fine.iter().enumerate() {
        match status {
            DecodeStatus::Overflow => {
                a.overflows += 1;
                continue;
            }
            DecodeStatus::Ok => {}
            _ => {
                a.unmatchable += 1;
                failures.push(format!("shot {i}: {status:?}"));
                continue;
            }
        }
        a.within_cap += 1;
        let (pm_obs, pm_w) = (fx.predictions[i], fx.weights[i]);
        if obs != fx.truth[i] {
            a.logical_errors += 1;
        }
        if obs == pm_obs {
            a.agree += 1;
            a.agreeing[i] = true;
            a.max_weight_rel_err = a.max_weight_rel_err.max(rel(w, pm_w));
            if rel(w, pm_w) > 1e-4 {
                failures.push(format!("shot {i}: weight {w} vs PyMatching {pm_w}"));
            }
        } else if rel(w, pm_w) <= 1e-9 {
            a.ties += 1;
        } else {
            failures.push(format!("shot {i}: observables {obs:#x} weight {w} vs PyMatching {pm_obs:#x} weight {pm_w}"));
        }
        // The GPU's 16-bit table and the float table, against the PyMatching-exact one.
        let (c_obs, c_w, _) = compact[i];
        if c_obs != obs {
            if rel(c_w, w) <= 1e-3 {
                a.compact_ties += 1;
            } else {
                a.compact_disagree += 1;
            }
        }
        // PyMatching's integers round each edge to ~1e-7 of the largest weight: matchings
        // whose float weights differ by less than that are ties in its metric.
        let (f_obs, f_w, f_status) = float[i];
        if f_status == DecodeStatus::Overflow {
            a.float_above_k += 1;
        } else if f_obs != obs {
            if rel(f_w, w) <= 1e-6 {
                a.float_ties += 1;
            } else {
                a.float_disagree += 1;
            }
        }
    }
    println!(
        "{name}: {} shots, {} decoded (K={DEFAULT_MAX_DEFECTS}): {} agree with PyMatching, {} equal-weight ties, \
         {} overflows; max weight error {:.2e}; logical errors {} (PyMatching {}); \
         u16 table: {} disagreements + {} ties; f64 table: {} disagreements + {} ties ({} above K, not decoded)",
        a.shots,
        a.within_cap,
        a.agree,
        a.ties,
        a.overflows,
        a.max_weight_rel_err,
        a.logical_errors,
        fx.predictions.iter().zip(&fx.truth).filter(|(p, t)| p != t).count(),
        a.compact_disagree,
        a.compact_ties,
        a.float_disagree,
        a.float_ties,
        a.float_above_k,
    );
    assert!(failures.is_empty(), "{name}: {} disagreements with PyMatching:\n{}", failures.len(), failures.join("\n"));
    assert!(
        (a.ties as f64) <= MAX_TIE_FRACTION * a.within_cap as f64,
        "{name}: {} ties in {} shots is more than {MAX_TIE_FRACTION}",
        a.ties,
        a.within_cap
    );
    assert_eq!(a.compact_disagree, 0, "{name}: the 16-bit table changes the matching beyond ties");
    assert_eq!(a.float_disagree, 0, "{name}: the float table changes the matching beyond ties");
    a
}

/// predict() (`rocelink decode`: the exact decoder) in both output formats writes the exact
/// decoder's prediction for every shot (qec/tests/pymatching_fixtures.rs holds that decoder
/// to PyMatching's weights), and PyMatching's wherever the table decoder agreed with
/// PyMatching, but for ties between the two exact decoders (counted, rare).
fn check_predict(fx: &Fixture, agreeing: &[bool]) {
    let name = fx.dir.file_name().unwrap().to_string_lossy().to_string();
    // Unique per call: the committed and the fresh fixture sets have folders of the same
    // names and are checked by tests running in parallel.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!("rocelink-qec-{}-{call}-{name}", std::process::id()));
    fs::create_dir_all(&tmp).unwrap();
    let out01 = tmp.join("pred.01");
    let stats = predict(
        &fx.dir.join("model.dem"),
        &fx.dir.join("dets.b8"),
        ShotFormat::B8,
        &out01,
        ShotFormat::Zero1,
        Some(fx.shots.len() as u64),
    )
    .unwrap();
    let graph = rocelink_operator::qec::sparse_graph_from_file(&fx.dir.join("model.dem")).unwrap();
    let mut exact = rocelink_operator::qec::MatchingDecoder::new(graph);
    let direct: Vec<u64> = fx.shots.iter().map(|s| exact.decode_b8(s).observables).collect();
    assert_eq!(stats.shots as usize, fx.shots.len());
    assert_eq!(stats.defect_histogram.iter().sum::<u64>(), stats.shots);
    let ours = fs::read_to_string(&out01).unwrap();
    let theirs = fs::read_to_string(fx.dir.join("pred.01")).unwrap();
    let (ours, theirs): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), theirs.lines().collect());
    assert_eq!(ours.len(), theirs.len());
    let mut compared = 0;
    let mut ties = 0;
    for (i, ok) in agreeing.iter().enumerate() {
        let bits = ours[i].bytes().enumerate().fold(0u64, |m, (k, c)| m | u64::from(c == b'1') << k);
        assert_eq!(bits, direct[i], "{name}: predict() shot {i}");
        if *ok {
            if ours[i] == theirs[i] {
                compared += 1;
            } else {
                ties += 1;
            }
        }
    }
    assert!(ties * 100 <= compared.max(1), "{name}: {ties} predict() shots differ from PyMatching's");
    // The same through 01 input and b8 output.
    let in01 = tmp.join("dets.01");
    let n = fx.dem.num_detectors;
    let text: String = fx
        .shots
        .iter()
        .map(|s| {
            let mut l: String = (0..n).map(|i| if s[i / 8] >> (i % 8) & 1 == 1 { '1' } else { '0' }).collect();
            l.push('\n');
            l
        })
        .collect();
    fs::write(&in01, text).unwrap();
    let outb8 = tmp.join("pred.b8");
    predict(&fx.dir.join("model.dem"), &in01, ShotFormat::Zero1, &outb8, ShotFormat::B8, None).unwrap();
    let b8 = fs::read(&outb8).unwrap();
    let per = fx.dem.num_observables.div_ceil(8);
    assert_eq!(b8.len(), per * fx.shots.len());
    for (i, want) in direct.iter().enumerate() {
        let got = b8[i * per..(i + 1) * per].iter().rev().fold(0u64, |m, &b| m << 8 | u64::from(b));
        assert_eq!(got, *want, "{name}: predict() b8 shot {i}");
    }
    println!(
        "{name}: predict() equals PyMatching on {compared} shots; {:.0} ns/shot mean, p50 {} ns, p99 {} ns, max {} ns",
        stats.mean_decode_ns(),
        stats.decode_ns_p50,
        stats.decode_ns_p99,
        stats.decode_ns_max
    );
    let _ = fs::remove_dir_all(&tmp);
}

/// The table decoder (the GPU stage's model) is checked up to d = 5; the exact decoder on
/// every fixture (qec/tests/pymatching_fixtures.rs).
const TABLE_DECODER_MAX_DETECTORS: usize = 200;

fn check_root(root: &Path) -> usize {
    let mut dirs = fixture_dirs(root);
    dirs.retain(|dir| {
        let fx_dem = load_dem(&dir.join("model.dem")).unwrap();
        let keep = fx_dem.num_detectors <= TABLE_DECODER_MAX_DETECTORS;
        if !keep {
            println!("{}: {} detectors, beyond the table decoder's checks here", dir.display(), fx_dem.num_detectors);
        }
        keep
    });
    for dir in &dirs {
        let fx = load(dir);
        let a = check(&fx);
        check_predict(&fx, &a.agreeing);
    }
    dirs.len()
}

#[test]
fn committed_fixtures_agree_with_pymatching() {
    let n = check_root(&committed_root());
    assert_eq!(n, 5, "expected the 4 committed fixtures and the repeat one");
}

/// CI points ROCELINK_QEC_FIXTURES at fresh fixtures (scripts/qec_fixtures.py --seed ...
/// --out-dir DIR). Set but empty or missing is a failure, not a silent pass.
#[test]
fn fresh_fixtures_from_env_agree_with_pymatching() {
    let Some(root) = std::env::var_os("ROCELINK_QEC_FIXTURES") else {
        println!("ROCELINK_QEC_FIXTURES is not set: no fresh fixtures checked");
        return;
    };
    let root = PathBuf::from(root);
    assert!(root.is_dir(), "ROCELINK_QEC_FIXTURES={} is not a folder", root.display());
    let n = check_root(&root);
    assert!(n > 0, "ROCELINK_QEC_FIXTURES={} holds no fixture (no */model.dem)", root.display());
    println!("checked {n} fresh fixtures in {}", root.display());
}

/// The headline case (docs/qec.md, "Inputs and outputs"): decode time per shot at d=5,
/// p=0.1% (a print, not an assertion; `cargo test --release -- --nocapture` shows it).
#[test]
fn timing_d5_p0_001() {
    let fx = load(&committed_root().join("d5_p0.001"));
    let graph = MatchingGraph::from_dem(&fx.dem, Default::default()).unwrap();
    let started = Instant::now();
    let fine = graph.fine_table().unwrap();
    let build = started.elapsed();
    let compact = graph.compact_table().unwrap();
    println!(
        "d5_p0.001 tables: {} edges; u32 scale {:.1} (PyMatching's), largest entry {:?}; u16 scale {:.1}, largest \
         entry {:?}, {} of {} entries 0xFFFF",
        graph.edges.len(),
        fine.scale,
        fine.max_entry(),
        compact.scale,
        compact.max_entry(),
        compact.distances.iter().filter(|&&d| d == u16::MAX).count(),
        compact.distances.len()
    );
    assert_eq!(compact.parities_u32().map(|p| p.len()), Some(compact.distances.len()));
    let mut d = ExactDecoder::new(Arc::new(fine), DEFAULT_MAX_DEFECTS).unwrap();
    let mut per_shot: Vec<u64> = Vec::with_capacity(fx.shots.len() * 5);
    for _ in 0..5 {
        for s in &fx.shots {
            let t = Instant::now();
            std::hint::black_box(d.decode_b8(std::hint::black_box(s)));
            per_shot.push(t.elapsed().as_nanos() as u64);
        }
    }
    per_shot.sort_unstable();
    let q = |p: f64| per_shot[((per_shot.len() - 1) as f64 * p) as usize];
    let mean = per_shot.iter().sum::<u64>() as f64 / per_shot.len() as f64;
    println!(
        "d5_p0.001 decode per shot (CPU, K={DEFAULT_MAX_DEFECTS}, {} decodes, timer included): mean {mean:.0} ns, \
         p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns; tables built in {:.1} ms",
        per_shot.len(),
        q(0.5),
        q(0.99),
        q(0.999),
        per_shot[per_shot.len() - 1],
        build.as_secs_f64() * 1e3
    );
}
