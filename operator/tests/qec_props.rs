//! Properties: the DEM loader never panics on token soup; the decoder never panics on any
//! shot bytes, the clusters matched with their boundary (K = 0) weigh what the DP of the
//! whole shot does, and the observables use only the DEM's observable bits.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use rocelink_operator::qec::exact::{DecodeStatus, ExactDecoder};
use rocelink_operator::qec::graph::{DistanceTable, GraphOptions, MatchingGraph};
use rocelink_operator::qec::{load_dem, DetectorErrorModel};

fn d5_table() -> Arc<DistanceTable<u32>> {
    static TABLE: OnceLock<Arc<DistanceTable<u32>>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec/d5_p0.003");
            let dem = load_dem(&dir.join("model.dem")).unwrap();
            Arc::new(MatchingGraph::from_dem(&dem, GraphOptions::default()).unwrap().fine_table().unwrap())
        })
        .clone()
}

fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "error",
        "error(0.1)",
        "error(",
        ")",
        "(0.5)",
        "detector",
        "detector(1,2,3)",
        "logical_observable",
        "shift_detectors",
        "shift_detectors(0,1)",
        "repeat",
        "repeat 3",
        "{",
        "}",
        "D0",
        "D7",
        "D99999999999",
        "L0",
        "L63",
        "L64",
        "^",
        "#",
        "\n",
        " ",
        "[tag]",
        "0.3",
        "1e-3",
        "-1",
        "nan",
        "x",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn dem_parser_never_panics(tokens in prop::collection::vec(token(), 0..40)) {
        let text = tokens.join(" ");
        if let Ok(dem) = DetectorErrorModel::parse(&text) {
            // Whatever parses builds a graph or refuses it with an error, without panicking.
            if dem.num_detectors <= 64 {
                if let Ok(g) = MatchingGraph::from_dem(&dem, GraphOptions::default()) {
                    let _ = g.compact_table();
                }
            }
        }
    }

    #[test]
    fn decoder_never_panics_and_the_clusters_are_exact(
        bytes in prop::collection::vec(any::<u8>(), 0..20),
        density in 0u32..8,
    ) {
        let table = d5_table();
        // Thin the random bits so that most shots fall within the DP's cap.
        let shot: Vec<u8> = bytes.iter().enumerate().map(|(i, &b)| {
            let mask = (0..density).fold(0xFFu8, |m, k| m & (0x5Au8.rotate_left(i as u32 + k) | (b >> k)));
            b & mask
        }).collect();
        // K = 14: the whole shot by the DP (up to 14 defects); K = 0: every cluster by the
        // matcher with its boundary. Equal weights wherever both decode.
        let mut dp = ExactDecoder::new(Arc::clone(&table), 14).unwrap();
        let mut matcher = ExactDecoder::new(Arc::clone(&table), 0).unwrap();
        let e = dp.decode_b8(&shot);
        let g = matcher.decode_b8(&shot);
        prop_assert!(e.observables >> table.num_observables == 0);
        prop_assert!(g.observables >> table.num_observables == 0);
        prop_assert_eq!(e.defects, g.defects);
        prop_assert_eq!(g.status, DecodeStatus::Ok);
        prop_assert_eq!(e.status, DecodeStatus::Ok);
        let tol = 1e-9 * e.weight.max(1.0);
        prop_assert!((e.weight - g.weight).abs() <= tol, "dp {} matcher {}", e.weight, g.weight);
    }
}
