//! Decodes a stim b8 detection-event file with the exact decoder and prints the time per
//! shot and what the decoder did (a measurement tool, not a test):
//!
//!     cargo run --release -p rocelink-qec --example decode_file -- model.dem dets.b8 [repeat]

use std::time::Instant;

use rocelink_qec::{sparse_graph_from_dem_text, MatchingDecoder};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: decode_file model.dem dets.b8 [repeat]");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("DEM");
    let repeat: usize = args.get(3).map_or(1, |r| r.parse().expect("repeat"));
    let t = Instant::now();
    let graph = sparse_graph_from_dem_text(&text).expect("graph");
    let load = t.elapsed();
    let per = graph.num_detectors().div_ceil(8);
    let bytes = std::fs::read(&args[2]).expect("b8");
    let shots: Vec<&[u8]> = bytes.chunks(per).collect();
    let mut d = MatchingDecoder::new(graph.clone());
    let mut times = Vec::with_capacity(shots.len() * repeat);
    let mut flips = 0u64;
    let t = Instant::now();
    for _ in 0..repeat {
        for s in &shots {
            let t0 = Instant::now();
            flips += d.decode_b8(s).observables & 1;
            times.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let total = t.elapsed();
    times.sort_unstable();
    let q = |f: f64| times[((times.len() - 1) as f64 * f) as usize] as f64 / 1000.0;
    let c = d.counters();
    println!(
        "{} detectors, {} edges, graph {:.1} ms, {} KB; {} shots x {repeat}: {:.2} us/shot mean, p50 {:.2} p99 {:.2} max {:.2} us; \
         blossom clusters {}, regrown balls {}, extra rounds {}; predicted flips {flips}",
        graph.num_detectors(),
        graph.num_edges(),
        load.as_secs_f64() * 1e3,
        graph.memory_bytes() / 1024,
        shots.len(),
        total.as_secs_f64() * 1e6 / times.len() as f64,
        q(0.5),
        q(0.99),
        q(1.0),
        c.blossom_clusters,
        c.regrown_balls,
        c.extra_rounds
    );
}
