//! The QEC decoder stage (`rocelink_operator::qec::QecSession::handle`), fed a conversation
//! of CUQR requests (records, see the crate docs) over a 6-detector repetition code.
//!
//! Record tag: bits 0-1 pick how the bytes become a request (0: the bytes are the whole
//! request; 1, 2, 3: a header for enqueue_syndromes, get_corrections or reset_decoder is
//! put in front, its arg_len the bytes' length, plus bits 2-3 when bit 4 is set); bits 5-6
//! pick the answer buffer (full, one byte short of a shot's answer, header only, none).
//! The first byte of the input picks the session: 1-3 decoders, 1-3 rounds per message, a
//! mapping id or none.
//!
//! Checked: no panic; an answer fits its buffer and parses, echoes request_id and
//! ptp_timestamp, and has the result length its status and function allow (module docs of
//! `qec::session`); a CUQR request for one of the three functions is always answered.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rocelink_fuzz::records;
use rocelink_operator::qec::graph::MatchingGraph;
use rocelink_operator::qec::{QecSession, SessionConfig, SparseGraph};
use rocelink_wire::qec::{correction_len, GetCorrectionsRepr};
use rocelink_wire::rpc::{self, function_id, status, RequestRepr, ResponseRepr};

fn table() -> Arc<SparseGraph> {
    static GRAPH: OnceLock<Arc<SparseGraph>> = OnceLock::new();
    GRAPH
        .get_or_init(|| {
            let mut s = String::from("error(0.1) D0 L0\n");
            for i in 0..5 {
                s += &format!("error(0.1) D{} D{}\n", i, i + 1);
            }
            s += "error(0.1) D5 L1\n";
            let g = MatchingGraph::from_dem_text(&s).expect("repetition code");
            Arc::new(SparseGraph::new(&g).expect("graph"))
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, data)) = data.split_first() else {
        return;
    };
    let config = SessionConfig {
        decoders: 1 + usize::from(cfg % 3),
        rounds_per_message: 1 + u32::from(cfg / 3 % 3),
        syndrome_mapping_id: (cfg & 0x80 != 0).then_some(0),
        ..SessionConfig::default()
    };
    let mut s = QecSession::new(table(), config).expect("a valid config");
    let final_len = s.final_result_len();
    let mut request = Vec::with_capacity(rpc::HEADER_LEN + 4096);
    let mut out = vec![0u8; rpc::HEADER_LEN + 128];
    for (k, r) in records(data).enumerate() {
        request.clear();
        let function = match r.tag & 3 {
            0 => None,
            1 => Some(function_id::ENQUEUE_SYNDROMES),
            2 => Some(function_id::GET_CORRECTIONS),
            _ => Some(function_id::RESET_DECODER),
        };
        if let Some(f) = function {
            let extra = if r.tag & 0x10 != 0 { u32::from(r.tag >> 2 & 3) } else { 0 };
            let h = RequestRepr {
                function_id: f,
                arg_len: r.bytes.len() as u32 + extra,
                request_id: k as u32,
                ptp_timestamp: 0x1122_3344_5566_7788 ^ k as u64,
            };
            request.resize(rpc::HEADER_LEN, 0);
            h.emit(&mut request).expect("header fits");
        }
        request.extend_from_slice(r.bytes);
        let out_len = match r.tag >> 5 & 3 {
            0 => out.len(),
            1 => rpc::HEADER_LEN + final_len - 1,
            2 => rpc::HEADER_LEN,
            _ => 0,
        };
        let answer = s.handle(&request, &mut out[..out_len]);
        let head = RequestRepr::parse(&request).ok();
        let ours = head.filter(|h| {
            matches!(
                h.function_id,
                function_id::ENQUEUE_SYNDROMES | function_id::GET_CORRECTIONS | function_id::RESET_DECODER
            )
        });
        let Some(n) = answer else {
            assert!(ours.is_none() || out_len < rpc::HEADER_LEN, "a request for the stage went unanswered");
            continue;
        };
        let req = ours.expect("only the stage's requests are answered");
        assert!(n <= out_len);
        let resp = ResponseRepr::parse(&out[..n]).expect("the answer parses");
        assert_eq!(resp.message_len(), n);
        assert_eq!(resp.request_id, req.request_id);
        assert_eq!(resp.ptp_timestamp, req.ptp_timestamp);
        let result = resp.result_len as usize;
        if resp.status != status::OK {
            assert_eq!(result, 0, "status {} with a result", resp.status);
            continue;
        }
        let args = &request[rpc::HEADER_LEN..];
        match req.function_id {
            function_id::ENQUEUE_SYNDROMES => assert!(result == 0 || result == final_len),
            function_id::GET_CORRECTIONS => {
                let g = GetCorrectionsRepr::parse(args).expect("answered OK, so it parsed");
                assert_eq!(result, correction_len(g.return_size as usize));
            }
            _ => assert_eq!(result, 0),
        }
    }
    for d in 0..config.decoders {
        let c = s.counters(d).expect("a decoder");
        assert!(c.overflows + c.unmatchable <= c.shots);
    }
});
