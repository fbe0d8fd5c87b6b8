//! stim DEM text (`rocelink_wire::dem`), and what the decoder builds from it: the parse never
//! panics and what it accepts keeps the module's guarantees (ids in range, each detector once
//! per component, probabilities in [0, 1], coordinates per detector); fpga-sim's `DemLayout`
//! agrees with it; a small accepted DEM also goes through the matching graph, the distance
//! tables (CPU and GPU) and one decode of every single-defect shot.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use rocelink_fpga_sim::qec::DemLayout;
use rocelink_operator::qec::exact::ExactDecoder;
use rocelink_operator::qec::graph::{GraphOptions, HyperedgePolicy, MatchingGraph};
use rocelink_wire::dem::{DetectorErrorModel, MAX_DETECTORS, MAX_OBSERVABLES};

/// Detectors up to which the all-pairs table is built (it is `(n+1)^2`).
const SMALL: usize = 48;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = DetectorErrorModel::parse(text);
    let layout = DemLayout::parse(text);
    let dem = match parsed {
        Ok(d) => d,
        Err(e) => {
            assert!(
                e.line >= 1 && e.line <= text.lines().count().max(1),
                "line {} of {}",
                e.line,
                text.lines().count()
            );
            assert_eq!(layout.map_err(|(line, _)| line), Err(e.line));
            return;
        }
    };
    assert!(dem.num_detectors <= MAX_DETECTORS);
    assert!(dem.num_observables <= MAX_OBSERVABLES);
    assert_eq!(dem.detector_coords.len(), dem.num_detectors);
    for e in &dem.errors {
        assert!((0.0..=1.0).contains(&e.probability));
        assert!(e.line >= 1);
        for c in &e.components {
            let mut seen = c.detectors.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), c.detectors.len(), "a detector twice in one component");
            assert!(c.detectors.iter().all(|&d| (d as usize) < dem.num_detectors));
            assert!(dem.num_observables == 64 || c.observables >> dem.num_observables == 0);
        }
    }
    let layout = layout.expect("DemLayout parses what the loader parses");
    assert_eq!(layout.num_detectors, dem.num_detectors);
    assert_eq!(layout.num_observables, dem.num_observables);
    if let Some(rounds) = dem.detectors_per_round() {
        assert_eq!(rounds.iter().sum::<usize>(), dem.num_detectors);
    }

    if dem.num_detectors > SMALL {
        return;
    }
    let options = GraphOptions { hyperedges: HyperedgePolicy::Ignore };
    let Ok(graph) = MatchingGraph::from_dem(&dem, options) else {
        return;
    };
    let _ = graph.compact_table();
    let Ok(table) = graph.fine_table() else {
        return;
    };
    let Ok(mut decoder) = ExactDecoder::new(Arc::new(table), 8) else {
        return;
    };
    // The exact decoder on the sparse graph, where the graph fits it: one and two defects,
    // against the table decoder (exact there too): the same status and weight.
    let mut sparse =
        rocelink_qec::SparseGraph::new(&graph).ok().map(|g| rocelink_qec::MatchingDecoder::new(Arc::new(g)));
    let mut shot = vec![0u8; dem.num_detectors.div_ceil(8)];
    let n = dem.num_detectors;
    for i in 0..n {
        for j in [i, (i * 7 + 3) % n] {
            shot.fill(0);
            shot[i / 8] |= 1 << (i % 8);
            shot[j / 8] |= 1 << (j % 8);
            let d = decoder.decode_b8(&shot);
            assert_eq!(d.defects, 1 + u32::from(i != j));
            assert!(dem.num_observables == 64 || d.observables >> dem.num_observables == 0);
            if let Some(m) = sparse.as_mut() {
                let e = m.decode_b8(&shot);
                assert_eq!(e.defects, d.defects);
                let unmatchable = d.status == rocelink_operator::qec::DecodeStatus::Unmatchable;
                assert_eq!(e.status == rocelink_qec::DecodeStatus::Unmatchable, unmatchable, "{i} {j}");
                if !unmatchable {
                    let tol = 1e-9 * d.weight.abs().max(1.0);
                    assert!((e.weight - d.weight).abs() <= tol, "{i} {j}: {} vs {}", e.weight, d.weight);
                }
            }
        }
    }
});
