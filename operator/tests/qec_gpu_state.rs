//! The QEC decoder's device stage, what can be checked without a GPU (docs/qec.md,
//! "The table decoder"): the state blob of `gpu::qec_state` on the committed fixtures (sizes,
//! offsets, tables equal to the CPU's), its refusals, the 32-bit-sum transform against the
//! CPU decoder, the C layout of `kernels/stages/qec.cuh` against the Rust mirror (NVRTC), and
//! the transceiver compiled for sm_90 with QEC chains (NVRTC). The GPU run itself is
//! `tests/qec_gpu_match.rs`.

use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocelink_operator::gpu::qec_state::{self, QecDecoderRecord, QecHeader, QecState, QecStateError};
use rocelink_operator::gpu::{kernels, nvrtc};
use rocelink_operator::qec::graph::{DistanceTable, MatchingGraph};
use rocelink_operator::qec::session::SessionCounters;
use rocelink_operator::qec::{fine_table_from_file, ExactDecoder, SessionConfig};
use rocelink_operator::stage::StageSpec;

const FIXTURES: [&str; 5] = ["d3_p0.001", "d3_p0.003", "d3_r8_p0.001_repeat", "d5_p0.001", "d5_p0.003"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec").join(name)
}

fn nvrtc_or_skip() -> bool {
    nvrtc::present_or_skip("this kernel compile test")
}

fn spec(dem: &Path, k: u32, decoders: u32) -> StageSpec {
    StageSpec::QecDecoder {
        dem: dem.to_path_buf(),
        rounds_per_message: 1,
        max_defects: k,
        decoders,
        settle: Default::default(),
    }
}

#[test]
fn blob_of_every_fixture_holds_the_cpu_tables() {
    for name in FIXTURES {
        let dem = fixture(name).join("model.dem");
        let table = fine_table_from_file(&dem).unwrap();
        let state = QecState::from_spec(&spec(&dem, 12, 3)).unwrap().expect("a QEC stage has state");
        let h = *state.header();
        let n = table.num_detectors;
        let s = n + 1;
        assert_eq!((h.magic, h.header_bytes), (qec_state::MAGIC, 256), "{name}");
        assert_eq!((h.num_detectors as usize, h.num_observables as usize), (n, table.num_observables), "{name}");
        assert_eq!((h.max_defects, h.decoders, h.rounds_per_message), (12, 3, 1));
        assert_eq!(h.shot_words as usize, n.div_ceil(32));
        assert_eq!((h.has_mapping, h.mapping_id), (0, 0));
        assert_eq!(h.scale.to_bits(), table.scale.to_bits());
        // Sections: in order, 128-byte aligned, each as long as it must be, inside the blob.
        let sections = [h.distances_off, h.parities_off, h.decoders_off, h.shots_off, h.scratch_off, h.total_bytes];
        assert!(sections.iter().all(|&o| o % 128 == 0), "{name}: {sections:?}");
        assert_eq!(h.distances_off, 256);
        // The stream: the ends of every round's message but the last (one round a message).
        let rounds = rocelink_operator::qec::load_dem(&dem).unwrap().detectors_per_round().unwrap();
        let want = rocelink_operator::qec::exact::stream_thresholds(&rounds, 1);
        assert_eq!(&h.stream[..h.stream_count as usize], &want[..], "{name}");
        assert_eq!(want.len(), rounds.len() - 1, "{name}");
        assert!(h.parities_off >= h.distances_off + (4 * s * s) as u64);
        assert!(h.decoders_off >= h.parities_off + (4 * s * s) as u64);
        assert!(h.shots_off >= h.decoders_off + 3 * 128);
        assert!(h.scratch_off >= h.shots_off + 3 * 4 * u64::from(h.shot_words));
        // The scratch: one per decoder id (each block's), for every defect and the edge cap;
        // allocated on the device, never uploaded.
        assert_eq!(h.scratch_blocks, 3);
        assert_eq!(h.scratch_edges as usize, qec_state::scratch_edges(n));
        assert_eq!(Some(h.scratch_stride as usize), qec_state::scratch_stride(n, h.scratch_edges as usize));
        assert_eq!(h.total_bytes, h.scratch_off + 3 * u64::from(h.scratch_stride));
        assert_eq!(state.bytes().len() as u64, h.scratch_off);
        assert_eq!(state.device_bytes() as u64, h.total_bytes);
        // The tables are the CPU stage's, verbatim (the fixtures' sums fit 32 bits as they are).
        assert_eq!(state.never_pairs(), 0, "{name}");
        assert_eq!(state.distances(), table.distances, "{name}");
        assert_eq!(state.parities(), table.parities_u32().unwrap(), "{name}");
        // Decoders start idle, as QecSession::new leaves them; the shots are zero.
        for i in 0..3 {
            assert_eq!(qec_state::decoder_record(state.bytes(), i), Some(QecDecoderRecord::default()));
        }
        assert_eq!(qec_state::decoder_record(state.bytes(), 3), None);
        assert_eq!(qec_state::invalid_decoder_requests(state.bytes()), Some(0));
        assert!(state.bytes()[h.shots_off as usize..].iter().all(|&b| b == 0));
        println!(
            "{name}: n = {n}, {} bytes of state, largest entry {} (x12 = {})",
            h.total_bytes,
            table.max_entry().unwrap(),
            u64::from(table.max_entry().unwrap()) * 12
        );
    }
}

#[test]
fn the_header_is_little_endian_at_the_c_offsets() {
    let table = fine_table_from_file(&fixture("d3_p0.001").join("model.dem")).unwrap();
    let cfg = SessionConfig {
        decoders: 2,
        rounds_per_message: 3,
        max_defects: 7,
        syndrome_mapping_id: Some(-5),
        measure_time: false,
    };
    let st = QecState::build(&table, &cfg).unwrap();
    let b = st.bytes();
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    assert_eq!(u32_at(0), 0x3143_4551);
    assert_eq!(&b[0..4], b"QEC1");
    assert_eq!(u32_at(8), 24);
    assert_eq!(u32_at(16), 7);
    assert_eq!(u32_at(20), 2);
    assert_eq!(u32_at(24), 3);
    assert_eq!(u32_at(32), 1);
    assert_eq!(u64_at(40) as i64, -5);
    assert_eq!(f64::from_bits(u64_at(48)), table.scale);
    assert_eq!(u64_at(56), st.header().distances_off);
    assert_eq!(u64_at(88), st.header().total_bytes);
    // The token (keys the stage's shared-memory copy): nonzero, another one every build.
    assert_eq!(u64_at(104), st.header().token);
    assert_ne!(st.header().token, 0);
    let again = QecState::build(&table, &cfg).unwrap();
    assert_ne!(again.header().token, st.header().token);
    assert_eq!(again.bytes()[..104], b[..104]);
    assert_eq!(again.bytes()[112..], b[112..]);
    // Entry (i, j) of D at distances_off + 4 (i (n+1) + j).
    let s = 25;
    let at = st.header().distances_off as usize + 4 * (3 * s + 24);
    assert_eq!(u32_at(at), table.distance(3, 24));
}

#[test]
fn configurations_the_device_cannot_hold_are_refused_clearly() {
    let dem = fixture("d3_p0.001").join("model.dem");
    let e = QecState::from_spec(&spec(&dem, 13, 1)).unwrap_err();
    assert_eq!(e, QecStateError::MaxDefects(13));
    assert!(e.to_string().contains("max_defects <= 12"), "{e}");
    assert!(kernels::gpu_unsupported(&[spec(&dem, 13, 1)]).unwrap().contains("CPU backend"));
    assert_eq!(kernels::gpu_unsupported(&[spec(&dem, 12, 1)]), None);
    assert_eq!(kernels::gpu_unsupported(&[StageSpec::Echo, spec(&dem, 12, 1)]), None);
    assert!(kernels::gpu_unsupported(&[spec(&dem, 12, 1), spec(&dem, 12, 1)])
        .unwrap()
        .contains("one stage with device state"));
    let missing = kernels::gpu_unsupported(&[spec(Path::new("/nonexistent/model.dem"), 12, 1)]).unwrap();
    assert!(missing.contains("/nonexistent/model.dem"), "{missing}");

    let cfg = SessionConfig::default();
    let table = |text: &str| MatchingGraph::from_dem_text(text).unwrap().fine_table().unwrap();
    assert_eq!(QecState::build(&table("error(0.1) D3600\n"), &cfg).unwrap_err(), QecStateError::TooManyDetectors(3601));
    assert_eq!(
        QecState::build(&table("error(0.1) D0 L32\n"), &cfg).unwrap_err(),
        QecStateError::TooManyObservables(33)
    );
    assert!(QecState::build(&table("error(0.1) D3583 L31\n"), &cfg).is_ok());
    let zero = SessionConfig { decoders: 0, ..cfg };
    assert!(matches!(QecState::build(&table("error(0.1) D0\n"), &zero), Err(QecStateError::Config(_))));
    let zero = SessionConfig { rounds_per_message: 0, ..cfg };
    assert!(matches!(QecState::build(&table("error(0.1) D0\n"), &zero), Err(QecStateError::Config(_))));

    // A chain of 100 detectors with the boundary at one end only: boundary distances near
    // 100 edge weights (2^24 - 1 each in PyMatching units), so 12 of them overflow 32 bits
    // and no pair can be dropped to help.
    let mut text = String::from("error(0.1) D0\n");
    for i in 0..99 {
        text += &format!("error(0.1) D{i} D{}\n", i + 1);
    }
    let e = QecState::build(&table(&text), &cfg).unwrap_err();
    assert!(matches!(e, QecStateError::SumOverflow { k: 12, .. }), "{e:?}");
    assert!(e.to_string().contains("32-bit sums"), "{e}");
    // With K = 2 the same sums fit.
    assert!(QecState::build(&table(&text), &SessionConfig { max_defects: 2, ..cfg }).is_ok());
}

/// A chain of `n` detectors, each also with its own boundary edge: pairs far apart are far
/// longer than both going to the boundary.
pub fn long_chain(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        text += &format!("error(0.01) D{i}{}\n", if i % 7 == 0 { " L0" } else { "" });
        if i + 1 < n {
            text += &format!("error(0.01) D{i} D{}\n", i + 1);
        }
    }
    text
}

fn lcg(state: &mut u64) -> u64 {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *state >> 33
}

/// The CPU decoder on the table with never-matched pairs dropped decides exactly as on the
/// verbatim table (the proof in qec_state's module docs), through both the DP and the clusters.
fn assert_same_decisions(table: &DistanceTable<u32>, shots: &[Vec<u8>]) -> usize {
    let (dropped_dist, dropped) = qec_state::drop_never_pairs(table);
    let dropped_table = DistanceTable { distances: dropped_dist, ..table.clone() };
    for k in [12, 5, 0] {
        let mut a = ExactDecoder::new(Arc::new(table.clone()), k).unwrap();
        let mut b = ExactDecoder::new(Arc::new(dropped_table.clone()), k).unwrap();
        for (i, shot) in shots.iter().enumerate() {
            let (x, y) = (a.decode_b8(shot), b.decode_b8(shot));
            assert_eq!(
                (x.observables, x.weight.to_bits(), x.defects, x.status),
                (y.observables, y.weight.to_bits(), y.defects, y.status),
                "K {k}, shot {i}"
            );
        }
    }
    dropped
}

#[test]
fn dropping_never_matched_pairs_changes_no_decision() {
    // The d=5 fixtures, every shot.
    for name in ["d5_p0.001", "d5_p0.003", "d3_r8_p0.001_repeat"] {
        let dir = fixture(name);
        let table = fine_table_from_file(&dir.join("model.dem")).unwrap();
        let per = table.num_detectors.div_ceil(8);
        let shots: Vec<Vec<u8>> = std::fs::read(dir.join("dets.b8")).unwrap().chunks(per).map(<[u8]>::to_vec).collect();
        let dropped = assert_same_decisions(&table, &shots);
        assert!(dropped > 0, "{name}");
    }
    // A long chain, random shots of 0..30 defects.
    let table = MatchingGraph::from_dem_text(&long_chain(200)).unwrap().fine_table().unwrap();
    let mut rng = 7u64;
    let shots: Vec<Vec<u8>> = (0..3000)
        .map(|_| {
            let mut b = vec![0u8; 25];
            for _ in 0..lcg(&mut rng) % 30 {
                let i = (lcg(&mut rng) % 200) as usize;
                b[i / 8] |= 1 << (i % 8);
            }
            b
        })
        .collect();
    assert!(assert_same_decisions(&table, &shots) > 0);
}

#[test]
fn a_table_whose_sums_overflow_is_stored_without_never_pairs() {
    let table = MatchingGraph::from_dem_text(&long_chain(200)).unwrap().fine_table().unwrap();
    assert!(u64::from(table.max_entry().unwrap()) * 12 > u64::from(u32::MAX), "the chain must need the transform");
    let st = QecState::build(&table, &SessionConfig::default()).unwrap();
    assert!(st.never_pairs() > 0);
    assert_eq!(st.distances(), qec_state::drop_never_pairs(&table).0);
    let max = st.distances().into_iter().filter(|&d| d != u32::MAX).max().unwrap();
    assert!(u64::from(max) * 12 < u64::from(u32::MAX));
}

/// `static_assert`s of every offset and size of the Rust types (bindgen's, from abi.h) against
/// the C structs as qec.cuh sees them, compiled by the host C++ compiler (NVRTC has no
/// `offsetof`), and the sizes and capacities also by NVRTC.
#[test]
fn c_and_rust_layouts_agree() {
    let mut offsets = String::new();
    let mut sizes = String::new();
    macro_rules! off {
        ($c:literal, $t:ty, $($f:ident),+) => {
            $( offsets += &format!("static_assert(offsetof(struct {}, {}) == {}, \"{}.{}\");\n", $c, stringify!($f), offset_of!($t, $f), $c, stringify!($f)); )+
            sizes += &format!("static_assert(sizeof(struct {}) == {}, \"{}\");\n", $c, size_of::<$t>(), $c);
        };
    }
    off!(
        "rl_qec_header",
        QecHeader,
        magic,
        header_bytes,
        num_detectors,
        num_observables,
        max_defects,
        decoders,
        rounds_per_message,
        shot_words,
        has_mapping,
        scratch_edges,
        mapping_id,
        scale,
        distances_off,
        parities_off,
        decoders_off,
        shots_off,
        total_bytes,
        invalid_decoder,
        token,
        scratch_off,
        scratch_stride,
        scratch_blocks,
        stream_count,
        rsvd,
        stream
    );
    off!("rl_qec_decoder", QecDecoderRecord, bits, in_shot, next_counter, corrections, counters, rsvd);
    off!(
        "rl_qec_counters",
        SessionCounters,
        messages,
        shots,
        overflows,
        unmatchable,
        dropped_messages,
        dropped_shots,
        abandoned_shots,
        bad_requests
    );
    sizes += &format!(
        "static_assert(RL_QEC_MAX_K == {}, \"K\");\nstatic_assert(RL_QEC_MAX_DETECTORS == {}, \"n\");\nstatic_assert(RL_QEC_MAX_OBSERVABLES == {}, \"obs\");\nstatic_assert(RL_QEC_MAGIC == {}u, \"magic\");\n",
        qec_state::MAX_K,
        qec_state::MAX_DETECTORS,
        qec_state::MAX_OBSERVABLES,
        qec_state::MAGIC
    );

    // Host C++ compiler: offsets and sizes.
    let kernels_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
    let dir = std::env::temp_dir().join(format!("rocelink-qec-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("layout.cpp");
    std::fs::write(
        &file,
        format!("#include \"stages/qec.cuh\"\n#include <cstddef>\n{offsets}{sizes}int main() {{ return 0; }}\n"),
    )
    .unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    match std::process::Command::new(&cxx)
        .arg("-std=c++17")
        .arg("-fsyntax-only")
        .arg("-I")
        .arg(&kernels_dir)
        .arg(&file)
        .output()
    {
        Ok(o) => assert!(
            o.status.success(),
            "qec.cuh and qec_state.rs disagree ({cxx}):\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "no C++ compiler ({cxx}): {e}");
            eprintln!("SKIPPED the offset checks: no C++ compiler ({cxx}: {e})");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    // NVRTC: the sizes and capacities, as the device code sees them.
    if !nvrtc_or_skip() {
        return;
    }
    let text = format!("#include \"stages/qec.cuh\"\n{sizes}extern \"C\" __global__ void rl_layout_probe() {{}}\n");
    let headers: Vec<nvrtc::Source> =
        kernels::FILES.iter().map(|(n, t)| nvrtc::Source { name: (*n).into(), text: (*t).into() }).collect();
    let main = nvrtc::Source { name: "qec_layout.cu".into(), text };
    if let Err(e) = nvrtc::compile(&main, &headers, "sm_90", &[], false) {
        panic!("qec.cuh and qec_state.rs disagree:\n{e}");
    }
}

#[test]
fn transceiver_with_qec_chains_compiles_for_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    let dem = fixture("d5_p0.001").join("model.dem");
    let q = spec(&dem, 12, 1);
    for chain in [vec![q.clone()], vec![StageSpec::Echo, q.clone()], vec![q.clone(), StageSpec::Echo]] {
        let header = kernels::chain_header(&chain);
        assert!(header.contains("rl_stage_qec(") && header.contains(", state);"), "{header}");
        for defs in [&[][..], &["-DRL_THREADS=32"], &["-DRL_PROFILE"]] {
            let (main, headers, mut options) = kernels::transceiver_program(&chain);
            options.extend(defs.iter().map(|d| d.to_string()));
            let c = match nvrtc::compile(&main, &headers, "sm_90", &options, false) {
                Ok(c) => c,
                Err(e) => panic!("chain {chain:?} {defs:?} does not compile:\n{e}"),
            };
            assert_eq!(&c.cubin[..4], b"\x7fELF");
        }
    }
}
