//! The DEM loader through the public API: stim's files load, flattening matches stim's,
//! and malformed files are refused with the line and the reason.

use std::path::Path;

use rocelink_operator::qec::dem::DemErrorKind;
use rocelink_operator::qec::graph::{GraphError, GraphOptions, HyperedgePolicy, MatchingGraph};
use rocelink_operator::qec::{load_dem, DetectorErrorModel, QecError};

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec").join(name).join("model.dem")
}

#[test]
fn stim_dems_load() {
    let d5 = load_dem(&fixture("d5_p0.001")).unwrap();
    // Five rounds plus the final data readout give 120 detectors (docs/qec.md, "Inputs and
    // outputs").
    assert_eq!((d5.num_detectors, d5.num_observables), (120, 1));
    assert_eq!(d5.detectors_per_round(), Some(vec![12, 24, 24, 24, 24, 12]));
    let g = MatchingGraph::from_dem(&d5, GraphOptions::default()).unwrap();
    assert!(g.stats.merged > 0, "stim's decomposed DEMs repeat edges");
    assert_eq!(g.stats.observable_conflicts, 0);
    assert_eq!(g.stats.hyperedges_ignored, 0);
    let d3 = load_dem(&fixture("d3_p0.003")).unwrap();
    assert_eq!((d3.num_detectors, d3.num_observables), (24, 1));
    assert_eq!(d3.detectors_per_round(), Some(vec![4, 8, 8, 4]));
}

#[test]
fn repeat_blocks_flatten_to_the_rounds() {
    // stim keeps rounds 3..7 of the 8-round d=3 circuit as `repeat 2 { ... }` with
    // `shift_detectors`; flattened, the detectors and their time coordinates are contiguous.
    let text = std::fs::read_to_string(fixture("d3_r8_p0.001_repeat")).unwrap();
    assert!(text.contains("repeat 2 {"));
    let dem = DetectorErrorModel::parse(&text).unwrap();
    assert_eq!(dem.num_detectors, 64);
    assert_eq!(dem.detectors_per_round(), Some(vec![4, 8, 8, 8, 8, 8, 8, 8, 4]));
    // stim's block covers two rounds per iteration: the edges starting in time slice 3 are
    // those starting in slice 5, shifted by 16 detectors (slice s >= 1 holds detectors
    // 4 + 8(s-1) .. 4 + 8s).
    let g = MatchingGraph::from_dem(&dem, GraphOptions::default()).unwrap();
    let slice_edges = |s: u32| {
        let lo = 4 + 8 * (s - 1);
        let mut v: Vec<(u32, u32, u64, i64)> = g
            .edges
            .iter()
            .filter(|e| (lo..lo + 8).contains(&e.a))
            .map(|e| {
                let b = if e.b == u32::MAX { u32::MAX } else { e.b - lo };
                (e.a - lo, b, e.observables, (e.weight * 1e9).round() as i64)
            })
            .collect();
        v.sort();
        v
    };
    let (s3, s5) = (slice_edges(3), slice_edges(5));
    assert!(!s3.is_empty());
    assert_eq!(s3, s5);
}

#[test]
fn malformed_files_report_line_and_reason() {
    let cases: &[(&str, usize, &str)] = &[
        ("error(0.1) D0\nerror(0.1) D1 Z2\n", 2, "bad target `Z2` for `error`"),
        ("# header\n\nerror(2) D0\n", 3, "error probability 2 is not in [0, 1]"),
        ("detector(0, 0) D0\nrepeat 3 {\n  error(0.1) D0\n", 2, "`repeat` block is never closed"),
        ("error(0.1) D0\n}\n", 2, "`}` without an open `repeat` block"),
        ("error(0.1) D0 ^\n", 1, "empty component (misplaced `^`)"),
        ("frobnicate D0\n", 1, "unknown instruction `frobnicate`"),
        ("error(0.1) L99\n", 1, "observable L99 is beyond L63 (observables are 64-bit masks)"),
        ("repeat 0 {\n}\n", 1, "bad repeat: count must be at least 1"),
        ("error(a) D0\n", 1, "bad arguments: `a` is not a number"),
    ];
    for (text, line, reason) in cases {
        let e = DetectorErrorModel::parse(text).unwrap_err();
        assert_eq!(e.line, *line, "{text:?}");
        assert_eq!(e.kind.to_string(), *reason, "{text:?}");
        assert_eq!(e.to_string(), format!("DEM line {line}: {reason}"));
    }
    let e = DetectorErrorModel::parse("repeat 100000 {\n repeat 100000 {\n  shift_detectors 0\n }\n}\n").unwrap_err();
    assert_eq!(e.kind, DemErrorKind::TooLarge);
}

#[test]
fn matching_needs_decomposed_errors() {
    let dem = DetectorErrorModel::parse("error(0.01) D0 D1\n\nerror(0.01) D0 D1 D2\n").unwrap();
    let e = MatchingGraph::from_dem(&dem, GraphOptions::default()).unwrap_err();
    assert_eq!(e, GraphError::Hyperedge { line: 3, detectors: 3 });
    let msg = e.to_string();
    assert!(msg.contains("line 3") && msg.contains("decompose_errors=True"), "{msg}");
    let g = MatchingGraph::from_dem(&dem, GraphOptions { hyperedges: HyperedgePolicy::Ignore }).unwrap();
    assert_eq!(g.stats.hyperedges_ignored, 1);
}

#[test]
fn missing_file_names_the_path() {
    let e = load_dem(Path::new("/nonexistent/model.dem")).unwrap_err();
    assert!(matches!(e, QecError::Io { .. }));
    assert!(e.to_string().starts_with("/nonexistent/model.dem: "), "{e}");
}
