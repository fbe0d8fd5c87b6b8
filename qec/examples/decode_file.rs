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
    // Streamed as the decoder stage runs: round by round (stim's time coordinate), settled
    // after each round but the last; the final round's time is what the loop waits for.
    let dem = rocelink_qec::dem::DetectorErrorModel::parse(&text).expect("DEM");
    if let Some(rounds) = dem.detectors_per_round() {
        let mut s = MatchingDecoder::new(graph.clone());
        if let Some(limit) = std::env::var("SETTLE_MAX_CLUSTER").ok().and_then(|v| v.parse().ok()) {
            s.set_settle_max_cluster(limit);
        }
        if let Some(lag) = std::env::var("SETTLE_LAG").ok().and_then(|v| v.parse().ok()) {
            s.set_settle_lag(lag);
        }
        let (mut early, mut last) = (Vec::new(), Vec::new());
        for shot in &shots {
            s.begin_shot();
            let mut first = 0usize;
            for (r, &len) in rounds.iter().enumerate() {
                let t0 = Instant::now();
                for det in first..first + len {
                    if shot[det / 8] >> (det % 8) & 1 == 1 {
                        s.add_defect(det as u32);
                    }
                }
                first += len;
                if r + 1 < rounds.len() {
                    s.settle();
                    early.push(t0.elapsed().as_nanos() as u64);
                } else {
                    let _ = s.finish();
                    last.push(t0.elapsed().as_nanos() as u64);
                }
            }
        }
        early.sort_unstable();
        last.sort_unstable();
        let q = |v: &[u64], f: f64| v[((v.len() - 1) as f64 * f) as usize] as f64 / 1000.0;
        println!(
            "streamed: final round p50 {:.2} p99 {:.2} us; other rounds p50 {:.2} p99 {:.2} mean {:.2} us",
            q(&last, 0.5),
            q(&last, 0.99),
            q(&early, 0.5),
            q(&early, 0.99),
            early.iter().sum::<u64>() as f64 / early.len() as f64 / 1000.0
        );
    }
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
