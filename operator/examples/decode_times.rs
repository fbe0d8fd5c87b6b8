//! The CPU exact matcher's decode time by defect count, over a stim b8 file with its DEM
//! (for tuning `qec::exact`; the GPU stage's counterpart is `qec_gpu_stage_timing`):
//!
//! ```text
//! cargo run --release -p rocelink-operator --example decode_times -- \
//!     operator/tests/fixtures/qec/d5_p0.001/model.dem operator/tests/fixtures/qec/d5_p0.001/dets.b8
//! ```
//!
//! Each shot is decoded 5 times (the first pass left out as warm-up); p50 and p99 in ns of
//! the wall clock around `decode_b8`, with K = 12.
use rocelink_operator::qec::exact::ExactDecoder;
use rocelink_operator::qec::fine_table_from_file;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dem, dets] = &args[..] else {
        eprintln!("usage: decode_times MODEL.dem DETS.b8");
        std::process::exit(2);
    };
    let table = fine_table_from_file(std::path::Path::new(dem)).unwrap_or_else(|e| panic!("{dem}: {e}"));
    let bytes = table.num_detectors.div_ceil(8).max(1);
    let shots = std::fs::read(dets).unwrap_or_else(|e| panic!("{dets}: {e}"));
    let mut decoder = ExactDecoder::new(table, 12).unwrap_or_else(|e| panic!("{e}"));
    let mut by_defects: std::collections::BTreeMap<u32, Vec<u128>> = Default::default();
    for pass in 0..5 {
        for shot in shots.chunks(bytes) {
            let t0 = std::time::Instant::now();
            let d = decoder.decode_b8(shot);
            let ns = t0.elapsed().as_nanos();
            if pass > 0 {
                by_defects.entry(d.defects).or_default().push(ns);
            }
        }
    }
    for (k, mut v) in by_defects {
        v.sort_unstable();
        println!(
            "{k:>3} defects: {:>6} decodes, p50 {:>7} ns, p99 {:>7} ns",
            v.len(),
            v[v.len() / 2],
            v[(v.len() * 99 / 100).min(v.len() - 1)]
        );
    }
}
