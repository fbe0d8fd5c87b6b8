//! "No allocation per shot", checked with a counting global allocator on every d=5 p=0.3%
//! fixture shot:
//! - the exact decoder (`rocelink_qec::MatchingDecoder`, behind the CPU stage's RPC session)
//!   grows its buffers to the largest shot seen: after one pass over the shots, a second
//!   pass allocates nothing;
//! - the GPU stage's table model (`ExactDecoder`: its DP, and above the cap its clusters,
//!   with K = 12 and K = 4) likewise: after one pass, a second allocates nothing.
//!
//! One test in this binary, so no other test allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rocelink_operator::qec::exact::{DecodeStatus, ExactDecoder, DEFAULT_MAX_DEFECTS};
use rocelink_operator::qec::graph::{GraphOptions, MatchingGraph};
use rocelink_operator::qec::{load_dem, QecSession, SessionConfig};
use rocelink_wire::qec::EnqueueSyndromesRepr;
use rocelink_wire::rpc::{self, function_id, RequestRepr};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decoding_allocates_nothing_per_shot() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec/d5_p0.003");
    let dem = load_dem(&dir.join("model.dem")).unwrap();
    let table = Arc::new(MatchingGraph::from_dem(&dem, GraphOptions::default()).unwrap().fine_table().unwrap());
    let dets = std::fs::read(dir.join("dets.b8")).unwrap();
    let per_shot = dem.num_detectors.div_ceil(8);

    let mut decoder = ExactDecoder::new(Arc::clone(&table), DEFAULT_MAX_DEFECTS).unwrap();
    // K = 4: many shots above the cap, some with a cluster above it too (the matcher)
    let mut small = ExactDecoder::new(Arc::clone(&table), 4).unwrap();
    // Every request prepared up front: one enqueue carrying a whole shot.
    let requests: Vec<Vec<u8>> = dets
        .chunks(per_shot)
        .enumerate()
        .map(|(i, shot)| {
            let e = EnqueueSyndromesRepr {
                decoder_id: 0,
                counter: 0,
                syndrome_mapping_id: 0,
                num_syndromes: dem.num_detectors as i64,
            };
            let mut b = vec![0u8; rpc::HEADER_LEN + e.buffer_len()];
            RequestRepr {
                function_id: function_id::ENQUEUE_SYNDROMES,
                arg_len: e.buffer_len() as u32,
                request_id: i as u32,
                ptp_timestamp: 0,
            }
            .emit(&mut b)
            .unwrap();
            e.emit_with(shot, &mut b[rpc::HEADER_LEN..]).unwrap();
            b
        })
        .collect();
    let graph = rocelink_operator::qec::sparse_graph_from_file(&dir.join("model.dem")).unwrap();
    let mut session = QecSession::new(graph, SessionConfig { measure_time: true, ..SessionConfig::default() }).unwrap();
    let mut out = vec![0u8; 256];
    // Warm-up: the decoders' buffers grow to the largest shot.
    for r in &requests {
        assert!(session.handle(r, &mut out).is_some());
    }
    let k = |shot: &[u8]| shot.iter().map(|b| b.count_ones() as usize).sum::<usize>();
    let (mut above, mut above_small) = (0, 0);
    for shot in dets.chunks(per_shot) {
        assert_eq!(decoder.decode_b8(shot).status, DecodeStatus::Ok);
        assert_eq!(small.decode_b8(shot).status, DecodeStatus::Ok);
        above += usize::from(k(shot) > DEFAULT_MAX_DEFECTS);
        above_small += usize::from(k(shot) > 4);
    }

    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for shot in dets.chunks(per_shot) {
        let _ = decoder.decode_b8(shot);
        let _ = small.decode_b8(shot);
    }
    for r in &requests {
        assert!(session.handle(r, &mut out).is_some());
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert!(above > 0 && above_small > above, "the clusters were not exercised: {above}, {above_small}");
    assert_eq!(after - before, 0, "allocations while decoding {} shots", requests.len());
}
