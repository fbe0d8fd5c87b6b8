//! Decodes a stim b8 detection-event file several times over and keeps each shot's fastest
//! time (a measurement tool, not a test): on a shared or noisy machine the best of a few
//! passes is the decoder's own time, where one pass mixes in the machine's pauses. Each shot
//! is streamed as the decoder stage streams it (round by round, `settle` after each round,
//! `settle_last` after the last but one, `finish` on the last), then decoded whole by a
//! second decoder of the same graph:
//!
//!     cargo run --release -p rocelink-qec --example decode_best_of -- model.dem dets.b8 [passes]
//!
//! It prints, over the shots' best times in microseconds: the final round, the rounds before
//! it together (a shot's streaming work before its final round), and the whole shot.

use std::time::Instant;

use rocelink_qec::{sparse_graph_from_dem_text, MatchingDecoder};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: decode_best_of model.dem dets.b8 [passes]");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("DEM");
    let passes: usize = args.get(3).map_or(5, |r| r.parse().expect("passes"));
    let graph = sparse_graph_from_dem_text(&text).expect("graph");
    let dem = rocelink_qec::dem::DetectorErrorModel::parse(&text).expect("DEM");
    let rounds = dem.detectors_per_round().expect("the DEM's detectors have a time coordinate");
    let bytes = std::fs::read(&args[2]).expect("b8");
    let shots: Vec<&[u8]> = bytes.chunks(graph.num_detectors().div_ceil(8)).collect();
    let (mut streamed, mut whole) = (MatchingDecoder::new(graph.clone()), MatchingDecoder::new(graph.clone()));
    let n = shots.len();
    let (mut last, mut before, mut all) = (vec![u64::MAX; n], vec![u64::MAX; n], vec![u64::MAX; n]);
    for _ in 0..passes {
        for (i, shot) in shots.iter().enumerate() {
            streamed.begin_shot();
            let (mut first, mut early) = (0usize, 0u64);
            for (r, &len) in rounds.iter().enumerate() {
                let t = Instant::now();
                streamed.add_events(shot, first, first + len);
                first += len;
                if r + 1 == rounds.len() {
                    let _ = streamed.finish();
                    last[i] = last[i].min(t.elapsed().as_nanos() as u64);
                } else {
                    if r + 2 == rounds.len() {
                        streamed.settle_last();
                    } else {
                        streamed.settle();
                    }
                    early += t.elapsed().as_nanos() as u64;
                }
            }
            before[i] = before[i].min(early);
            let t = Instant::now();
            let _ = whole.decode_b8(shot);
            all[i] = all[i].min(t.elapsed().as_nanos() as u64);
        }
    }
    let summary = |v: &mut Vec<u64>| {
        v.sort_unstable();
        let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize] as f64 / 1000.0;
        let mean = v.iter().sum::<u64>() as f64 / v.len() as f64 / 1000.0;
        format!("mean {mean:.2} p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2}", q(0.5), q(0.99), q(0.999), q(1.0))
    };
    println!(
        "{n} shots, best of {passes}: final round {} | rounds before it, a shot {} | whole shot {} | \
         balls read from the cache {} ({} KB kept)",
        summary(&mut last),
        summary(&mut before),
        summary(&mut all),
        whole.counters().balls_read + streamed.counters().balls_read,
        graph.balls().memory_bytes() / 1024
    );
}
