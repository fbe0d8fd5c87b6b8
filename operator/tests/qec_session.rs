//! The decoder stage end to end over RPC bytes: fixture shots replayed round by round as
//! `enqueue_syndromes` (what fpga-sim's QEC mode sends; PROTOCOLS.md 3). The stage streams
//! (each round's defects are worked on as the round arrives), so its matching weights must
//! equal the whole-shot decode's exactly, and its corrections the whole shot's and
//! PyMatching's but for ties; on a DEM with negative edge weights too (each round's events
//! flipped where the negative edges end), and wherever the stage settles (in the loop, in its
//! idle form, beside it on a worker).

use std::path::Path;
use std::sync::Arc;

use rocelink_operator::qec::{
    load_dem, sparse_graph_from_file, MatchingDecoder, QecSession, SessionConfig, SessionDecoder,
};
use rocelink_wire::qec::{self as wq, DecodeReportRepr, EnqueueSyndromesRepr, GetCorrectionsRepr, REPORT_OK};
use rocelink_wire::rpc::{self, function_id, status, RequestRepr, ResponseRepr};

fn request(function: u32, id: u32, args: &[u8], buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(rpc::HEADER_LEN + args.len(), 0);
    RequestRepr {
        function_id: function,
        arg_len: args.len() as u32,
        request_id: id,
        ptp_timestamp: u64::from(id) << 8,
    }
    .emit(buf)
    .unwrap();
    buf[rpc::HEADER_LEN..].copy_from_slice(args);
}

/// Where the CPU stage settles (its `settle` setting).
#[derive(Debug, Clone, Copy)]
enum Settle {
    InLoop,
    Idle,
    Beside,
}

/// Replays every shot of a fixture, `rounds_per_message` time slices per message, and
/// checks the final answers against pred.01, with the stage settling in the loop.
fn replay(fixture: &str, rounds_per_message: usize) {
    replay_settled(fixture, rounds_per_message, Settle::InLoop);
}

fn replay_settled(fixture: &str, rounds_per_message: usize, settle: Settle) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec").join(fixture);
    let graph = sparse_graph_from_file(&dir.join("model.dem")).unwrap();
    let cfg = SessionConfig { rounds_per_message: rounds_per_message as u32, ..SessionConfig::default() };
    let g = Arc::clone(&graph);
    match settle {
        Settle::InLoop => replay_on(&dir, fixture, rounds_per_message, QecSession::new(g, cfg).unwrap(), graph),
        Settle::Idle => replay_on(&dir, fixture, rounds_per_message, QecSession::idle_settled(g, cfg).unwrap(), graph),
        Settle::Beside => {
            replay_on(&dir, fixture, rounds_per_message, QecSession::beside(g, cfg, None).unwrap(), graph)
        }
    }
}

fn replay_on<D: SessionDecoder>(
    dir: &Path,
    fixture: &str,
    rounds_per_message: usize,
    mut session: QecSession<D>,
    graph: Arc<rocelink_operator::qec::SparseGraph>,
) {
    let dem = load_dem(&dir.join("model.dem")).unwrap();
    let rounds = dem.detectors_per_round().unwrap();
    let mut whole = MatchingDecoder::new(graph);
    let n = dem.num_detectors;
    let shots = if dir.join("dets.b8").exists() { "dets.b8" } else { "shots.b8" };
    let dets = std::fs::read(dir.join(shots)).unwrap();
    let preds: Vec<u8> =
        std::fs::read_to_string(dir.join("pred.01")).unwrap().lines().map(|l| u8::from(l == "1")).collect();
    let per_shot = n.div_ceil(8);

    // Message boundaries in bits: groups of `rounds_per_message` time slices.
    let mut cuts = vec![0usize];
    for group in rounds.chunks(rounds_per_message) {
        cuts.push(cuts.last().unwrap() + group.iter().sum::<usize>());
    }
    assert_eq!(*cuts.last().unwrap(), n);

    let (mut req, mut out, mut args, mut bits) = (Vec::new(), vec![0u8; 512], Vec::new(), Vec::new());
    let (mut agree, mut ties, mut stream_ties, mut id) = (0usize, 0usize, 0usize, 0u32);
    for (s, shot) in dets.chunks(per_shot).enumerate() {
        for (m, w) in cuts.windows(2).enumerate() {
            let (from, to) = (w[0], w[1]);
            bits.clear();
            bits.resize(wq::packed_len(to - from), 0);
            for i in from..to {
                wq::set_bit(&mut bits, i - from, wq::bit(shot, i));
            }
            let e = EnqueueSyndromesRepr {
                decoder_id: 0,
                counter: (m * rounds_per_message) as i64,
                syndrome_mapping_id: 0,
                num_syndromes: (to - from) as i64,
            };
            args.clear();
            args.resize(e.buffer_len(), 0);
            e.emit_with(&bits, &mut args).unwrap();
            id += 1;
            request(function_id::ENQUEUE_SYNDROMES, id, &args, &mut req);
            let len = session.handle(&req, &mut out).expect("answered");
            // The idle form's settle, as the loop runs it between messages.
            session.idle(&mut || false);
            let resp = ResponseRepr::parse(&out[..len]).unwrap();
            assert_eq!((resp.status, resp.request_id, resp.ptp_timestamp), (status::OK, id, u64::from(id) << 8));
            let result = &out[rpc::HEADER_LEN..len];
            if to < n {
                assert!(result.is_empty(), "shot {s}: answer before the final round");
                continue;
            }
            assert_eq!(result.len(), session.final_result_len());
            let correction = wq::parse_corrections(result, 1) as u8;
            let report = DecodeReportRepr::parse(&result[wq::correction_len(1)..]).unwrap();
            assert_eq!(report.shot as usize, s);
            assert_eq!(report.status, REPORT_OK, "shot {s}");
            let w = whole.decode_b8(shot);
            // The same minimum weight; another equal-weight matching would be a tie.
            assert_eq!(report.weight, w.weight as f32, "shot {s}: streamed weight differs from the whole shot's");
            assert_eq!(u32::from(report.defects), w.defects, "shot {s}");
            stream_ties += usize::from(u64::from(correction) != w.observables);
            if correction == preds[s] {
                agree += 1;
            } else {
                ties += 1;
            }
        }
    }
    let c = session.counters(0).unwrap();
    assert_eq!(c.shots as usize, agree + ties);
    assert_eq!(c.overflows + c.unmatchable, 0);
    assert_eq!(c.dropped_messages + c.dropped_shots + c.abandoned_shots + c.bad_requests, 0);
    // Ties with PyMatching (equal weight, another matching; qec/tests/pymatching_fixtures.rs
    // checks the weights) are rare.
    assert!(ties * 100 <= agree, "{ties} corrections differ from PyMatching's");
    assert!(stream_ties * 100 <= agree, "{stream_ties} streamed corrections differ from the whole shot's");
    println!(
        "{fixture}, {rounds_per_message} round(s) per message ({} messages a shot), {}: {agree} corrections \
         equal PyMatching's, {ties} ties",
        cuts.len() - 1,
        std::any::type_name::<D>().rsplit("::").next().unwrap_or("?")
    );

    // The accumulated corrections are the XOR of all shots' corrections.
    let mut g = [0u8; wq::GET_CORRECTIONS_LEN];
    GetCorrectionsRepr { decoder_id: 0, return_size: 1, reset: 1 }.emit(&mut g).unwrap();
    request(function_id::GET_CORRECTIONS, 0, &g, &mut req);
    let len = session.handle(&req, &mut out).unwrap();
    assert_eq!(ResponseRepr::parse(&out[..len]).unwrap().result_len, 8);
}

#[test]
fn d3_round_by_round() {
    replay("d3_p0.003", 1);
}

#[test]
fn d5_round_by_round() {
    replay("d5_p0.001", 1);
}

#[test]
fn d5_two_rounds_per_message() {
    replay("d5_p0.003", 2);
}

#[test]
fn d5_whole_shot_in_one_message() {
    replay("d5_p0.001", 6);
}

#[test]
fn negative_weights_round_by_round() {
    replay("negative", 1);
}

#[test]
fn idle_and_beside_settles_answer_as_in_the_loop() {
    for settle in [Settle::Idle, Settle::Beside] {
        replay_settled("d5_p0.003", 1, settle);
        replay_settled("negative", 2, settle);
    }
}
