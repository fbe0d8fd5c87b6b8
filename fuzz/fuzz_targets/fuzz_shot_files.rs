//! `rocelink decode`'s shot files (`rocelink_operator::qec::predict::predict_stream`): the
//! input in any of stim's formats (b8, 01, r8, hits, dets; with the observables appended or
//! not), decoded on a 20-detector repetition code with a negative edge, the predictions in
//! any format.
//!
//! The first byte picks the input format (bits 0-2), the output format (bits 3-5) and the
//! appended observables (bit 6); the rest is the file.
//!
//! Checked: no panic; a read that fails names the file; one that succeeds wrote one
//! prediction a shot (b8: one byte each; 01, hits, dets: one line each; r8: one byte more
//! than the run bytes before it, ending each shot).
#![no_main]

use std::path::Path;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rocelink_operator::qec::predict::predict_stream;
use rocelink_operator::qec::{InputFormat, MatchingDecoder, ShotFormat, SparseGraph};

fn graph() -> Arc<SparseGraph> {
    static GRAPH: OnceLock<Arc<SparseGraph>> = OnceLock::new();
    GRAPH
        .get_or_init(|| {
            let mut s = String::from("error(0.1) D0 L0\n");
            for i in 0..19 {
                let p = if i == 7 { 0.7 } else { 0.1 };
                s.push_str(&format!("error({p}) D{i} D{}\n", i + 1));
            }
            s.push_str("error(0.1) D19\n");
            rocelink_qec::sparse_graph_from_dem_text(&s).unwrap()
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else {
        return;
    };
    let format = |k: u8| ShotFormat::ALL[usize::from(k) % ShotFormat::ALL.len()];
    let input = InputFormat { format: format(pick & 7), appended_observables: pick & 64 != 0 };
    let output = format(pick >> 3 & 7);
    let mut decoder = MatchingDecoder::new(graph());
    let mut out = Vec::new();
    match predict_stream(&mut decoder, file, input, &mut out, output, Path::new("in"), Path::new("out")) {
        Err(e) => assert!(e.to_string().starts_with("in: "), "{e}"),
        Ok(stats) => {
            let shots = stats.shots as usize;
            match output {
                ShotFormat::B8 => assert_eq!(out.len(), shots),
                ShotFormat::R8 => assert!(out.len() >= shots && out.len() <= 2 * shots),
                _ => assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), shots),
            }
        }
    }
});
