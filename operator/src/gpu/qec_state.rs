//! The device state of the QEC decoder stage (`kernels/stages/qec.cuh`; docs/qec.md, "The
//! table decoder": the distance table D[i][j] and the observable parity P[i][j] that
//! Dijkstra from every detector gives, once per DEM, on the host): one flat blob, built here
//! from a [`StageSpec::QecDecoder`], copied to device memory before the persistent kernel
//! starts, and passed to the stage as `rl_transceiver_desc.stage_state`.
//!
//! Layout (little-endian; sections on 128-byte boundaries; `struct rl_qec_header` and
//! `struct rl_qec_decoder` are defined once, in `kernels/abi.h`, and [`QecHeader`] and
//! [`QecDecoderRecord`] are the bindings `scripts/abi-gen` generates from it, with bindgen's
//! layout tests; `operator/tests/qec_gpu_state.rs` also checks them with NVRTC):
//!
//! ```text
//! 0              QecHeader (256 bytes): sizes, the table scale, section offsets, the
//!                device-written invalid-decoder counter, a token (below), and the
//!                stream thresholds (exact.rs "Streaming")
//! distances_off  u32 D[(n+1)^2]   the CPU's `fine_table()` (PyMatching's integer weights),
//!                                 row-major, boundary = row/column n, u32::MAX = no path
//! parities_off   u32 P[(n+1)^2]   `parities_u32()`: observables flipped along that path
//! decoders_off   QecDecoderRecord[decoders]   per decoder id: shot assembly and counters
//!                                             (session.rs `Slot` and `SessionCounters`)
//! shots_off      u32 shot[decoders][ceil(n/32)]  the shot being assembled, LSB first
//! scratch_off    scratch_blocks x scratch_stride  each block's work space for a shot of
//!                                 more than K defects (device memory only: allocated with
//!                                 the blob, never uploaded; [`QecState::device_bytes`])
//! ```
//!
//! Why 32-bit distances: the CPU stage decodes on `DistanceTable<u32>` (`QecSession<u32>`),
//! so the device decodes on the very same entries; the 16-bit `compact_table()` rounds edge
//! weights at another scale and is not proven to take the same decisions on every input.
//!
//! Why the device's 32-bit sums equal the CPU's 64-bit ones: every DP value is a sum of at
//! most K entries, so the builder requires `K * max_finite_entry <= u32::MAX - 1`; then no
//! sum overflows and none reaches u32::MAX, the device's "infinite". When a DEM's table
//! breaks that bound, the builder first replaces by "no path" every pair entry that is longer
//! than both of its detectors going to the boundary (`D[a][b] > D[a][n] + D[b][n]`, both
//! finite), which changes no decision of exact.rs: in the DP, for a mask holding `a` (its
//! lowest) and `b`, the boundary option of `a` is evaluated first and costs
//! `dp[mask\a] + D[a][n] <= dp[mask\{a,b}] + D[b][n] + D[a][n] < dp[mask\{a,b}] + D[a][b]`
//! (the DP is the exact minimum over matchings, and `b` to the boundary is one of them), so
//! the pair never strictly wins; and above K such a pair is never linked (`linked()` needs
//! `D[a][b] < D[a][n] + D[b][n]`), so the clusters and their matchings are the same. The same "never" entries
//! are what `compact_table()` uses (graph.rs `useful`). If the bound still fails, the build
//! fails with [`QecStateError::SumOverflow`].
//!
//! The token: nonzero and random per build ([`new_token`]). The stage keeps a per-block
//! shared-memory copy of the header and a mirror of the last-used decoder across requests
//! (qec.cuh module docs), trusted only while the blob address, the launch's `%gridid` and this
//! token are the ones it was filled from, so that shared memory left by an earlier kernel is
//! never taken for this blob's state.
//!
//! The scratch: a shot of more than K defects is split into clusters and a cluster above K
//! is matched exactly with its boundary (kernels/stages/blossom.cuh), in per-block
//! scratch of global memory sized for the largest cluster (every defect) with
//! [`scratch_edges`] edges; a cluster with more linked pairs is answered
//! OVERFLOW (no decode), as the model (exact.rs) does with the same cap.
//!
//! Capacities (qec.cuh): K <= 12 (the DP's 2^K weights and parities, 32 KiB of shared
//! memory), at most 3584 detectors (a shot's defect list shares those 32 KiB), at most 32
//! observables (32-bit parities). Larger configurations are refused with a clear error and
//! run on the CPU backend.

use std::mem::{offset_of, size_of};

use thiserror::Error;

use crate::qec::exact::MAX_MAX_DEFECTS;
use crate::qec::graph::DistanceTable;
use crate::qec::session::{SessionConfig, SessionCounters};
use crate::stage::StageSpec;

/// `RL_QEC_MAGIC`: "QEC1".
pub const MAGIC: u32 = crate::abi::RL_QEC_MAGIC;
/// `RL_QEC_MAX_K`: the largest defect cap the device DP holds.
pub const MAX_K: usize = 12;
/// `RL_QEC_MAX_DETECTORS`: the shared defect list's capacity.
pub const MAX_DETECTORS: usize = 3584;
/// `RL_QEC_MAX_OBSERVABLES`: 32-bit parity masks.
pub const MAX_OBSERVABLES: usize = 32;
/// Section alignment.
pub const SECTION_ALIGN: usize = 128;
/// `RL_QEC_INF`: no path, and an infinite sum.
pub const INF: u32 = u32::MAX;

/// `struct rl_qec_header` (kernels/abi.h; Rust bindings generated from it), the first 256
/// bytes of the blob.
pub type QecHeader = crate::abi::rl_qec_header;

/// `struct rl_qec_decoder` (kernels/abi.h): one decoder id's shot assembly and counters.
pub type QecDecoderRecord = crate::abi::rl_qec_decoder;

// The layout abi.h asserts too (and tests/qec_gpu_state.rs checks every offset with NVRTC).
const _: () = assert!(size_of::<QecHeader>() == 256);
const _: () = assert!(size_of::<QecDecoderRecord>() == 128);
const _: () = assert!(offset_of!(QecHeader, mapping_id) == 40);
const _: () = assert!(offset_of!(QecHeader, scale) == 48);
const _: () = assert!(offset_of!(QecHeader, invalid_decoder) == 96);
const _: () = assert!(offset_of!(QecHeader, token) == 104);
const _: () = assert!(offset_of!(QecDecoderRecord, next_counter) == 8);
const _: () = assert!(offset_of!(QecDecoderRecord, counters) + offset_of!(SessionCounters, bad_requests) == 80);

/// Why a QEC decoder cannot run as a device stage.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum QecStateError {
    /// The DEM does not load or its table does not build.
    #[error("QEC decoder: {0}")]
    Load(String),
    /// K above [`MAX_K`].
    #[error(
        "QEC decoder max_defects = {0}: the GPU decoder holds the subset DP of at most K = {MAX_K} defects in \
         shared memory (2^K weights and parities, 32 KiB); use max_defects <= {MAX_K}, or the CPU backend"
    )]
    MaxDefects(usize),
    /// More detectors than the defect list holds.
    #[error(
        "QEC decoder: the DEM has {0} detectors; the GPU decoder holds at most {MAX_DETECTORS} \
         (use the CPU backend)"
    )]
    TooManyDetectors(usize),
    /// More observables than 32-bit parities hold.
    #[error(
        "QEC decoder: the DEM has {0} observables; the GPU decoder keeps at most {MAX_OBSERVABLES} (32-bit parities)"
    )]
    TooManyObservables(usize),
    /// A setting the CPU session refuses too.
    #[error("QEC decoder: {0}")]
    Config(&'static str),
    /// Sums of K entries do not fit the device's 32-bit arithmetic (module docs).
    #[error(
        "QEC decoder: distance-table entries up to {max_entry} summed over K = {k} defects do not fit the GPU \
         decoder's 32-bit sums; lower max_defects or use the CPU backend"
    )]
    SumOverflow {
        /// The largest finite entry after dropping never-matched pairs.
        max_entry: u32,
        /// K.
        k: usize,
    },
    /// The blob would not be addressable.
    #[error("QEC decoder: the device state would be larger than the address space")]
    TooLarge,
}

/// The distances with every pair entry longer than both of its detectors going to the
/// boundary (`D[a][b] > D[a][n] + D[b][n]`, both finite) replaced by "no path", and how many
/// were: a table on which exact.rs takes the same decisions (module docs), with smaller
/// sums. The builder uses it only when the verbatim table's sums would not fit 32 bits.
pub fn drop_never_pairs(table: &DistanceTable<u32>) -> (Vec<u32>, usize) {
    let n = table.num_detectors;
    let s = n + 1;
    let d = &table.distances;
    let mut out = d.clone();
    let mut dropped = 0;
    if d.len() != s * s {
        return (out, 0);
    }
    for i in 0..n {
        for j in 0..n {
            let (v, ib, jb) = (d[i * s + j], d[i * s + n], d[j * s + n]);
            if i != j && v != INF && ib != INF && jb != INF && u64::from(v) > u64::from(ib) + u64::from(jb) {
                out[i * s + j] = INF;
                dropped += 1;
            }
        }
    }
    (out, dropped)
}

/// The blob and what went into it.
#[derive(Debug, Clone)]
pub struct QecState {
    bytes: Vec<u8>,
    header: QecHeader,
    never_pairs: usize,
}

fn align(v: usize) -> Option<usize> {
    v.checked_add(SECTION_ALIGN - 1).map(|x| x / SECTION_ALIGN * SECTION_ALIGN)
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?))
}

/// The largest finite entry.
fn max_finite(d: &[u32]) -> u32 {
    d.iter().copied().filter(|&v| v != INF).max().unwrap_or(0)
}

/// Whether every sum of at most `k` entries up to `max` stays below [`INF`].
fn sums_fit(max: u32, k: usize) -> bool {
    u64::from(max).saturating_mul(k as u64) < u64::from(INF)
}

impl QecState {
    /// The blob for `table` (the CPU stage's `fine_table()`) under `config` (as the CPU
    /// session takes it; `measure_time` is ignored: the device always times its decodes).
    pub fn build(table: &DistanceTable<u32>, config: &SessionConfig) -> Result<QecState, QecStateError> {
        Self::build_streamed(table, config, &[])
    }

    /// [`Self::build`] with stream thresholds (exact.rs [`crate::qec::exact::ExactDecoder::set_stream`], which
    /// the model session takes the same way: [`crate::qec::QecSession::with_table_streamed`]).
    pub fn build_streamed(
        table: &DistanceTable<u32>,
        config: &SessionConfig,
        stream: &[u32],
    ) -> Result<QecState, QecStateError> {
        // What QecSession::new and ExactDecoder::new refuse, refused the same way.
        if config.decoders == 0 {
            return Err(QecStateError::Config("a QEC session needs at least one decoder"));
        }
        if config.rounds_per_message == 0 {
            return Err(QecStateError::Config("rounds_per_message must be at least 1"));
        }
        if config.max_defects > MAX_MAX_DEFECTS || config.max_defects > MAX_K {
            return Err(QecStateError::MaxDefects(config.max_defects));
        }
        let n = table.num_detectors;
        if n > MAX_DETECTORS {
            return Err(QecStateError::TooManyDetectors(n));
        }
        if table.num_observables > MAX_OBSERVABLES {
            return Err(QecStateError::TooManyObservables(table.num_observables));
        }
        let s = n + 1;
        if table.distances.len() != s * s || table.parities.len() != s * s {
            return Err(QecStateError::Config("distance table arrays have the wrong length"));
        }
        let decoders = u32::try_from(config.decoders).map_err(|_| QecStateError::TooLarge)?;
        let k = config.max_defects;

        // Distances, with never-matched pairs dropped only when the sums need it (module docs).
        let mut dist = table.distances.clone();
        let mut never_pairs = 0;
        if !sums_fit(max_finite(&dist), k) {
            (dist, never_pairs) = drop_never_pairs(table);
            let max_entry = max_finite(&dist);
            if !sums_fit(max_entry, k) {
                return Err(QecStateError::SumOverflow { max_entry, k });
            }
        }
        let parities = table.parities_u32().ok_or(QecStateError::TooManyObservables(table.num_observables))?;

        let shot_words = n.div_ceil(32);
        let table_bytes = s * s * 4;
        let hdr = size_of::<QecHeader>();
        let distances_off = hdr;
        let parities_off = align(distances_off + table_bytes).ok_or(QecStateError::TooLarge)?;
        let decoders_off = align(parities_off + table_bytes).ok_or(QecStateError::TooLarge)?;
        let records = config.decoders.checked_mul(size_of::<QecDecoderRecord>()).ok_or(QecStateError::TooLarge)?;
        let shots_off =
            align(decoders_off.checked_add(records).ok_or(QecStateError::TooLarge)?).ok_or(QecStateError::TooLarge)?;
        let shot_bytes = config.decoders.checked_mul(shot_words * 4).ok_or(QecStateError::TooLarge)?;
        let upload =
            align(shots_off.checked_add(shot_bytes).ok_or(QecStateError::TooLarge)?).ok_or(QecStateError::TooLarge)?;
        let edges = scratch_edges(n);
        let stride = scratch_stride(n, edges).ok_or(QecStateError::TooLarge)?;
        let scratch = config.decoders.checked_mul(stride).ok_or(QecStateError::TooLarge)?;
        let total = upload.checked_add(scratch).ok_or(QecStateError::TooLarge)?;

        let header = QecHeader {
            magic: MAGIC,
            header_bytes: hdr as u32,
            num_detectors: n as u32,
            num_observables: table.num_observables as u32,
            max_defects: k as u32,
            decoders,
            rounds_per_message: config.rounds_per_message,
            shot_words: shot_words as u32,
            has_mapping: u32::from(config.syndrome_mapping_id.is_some()),
            scratch_edges: u32::try_from(edges).map_err(|_| QecStateError::TooLarge)?,
            mapping_id: config.syndrome_mapping_id.unwrap_or(0),
            scale: table.scale,
            distances_off: distances_off as u64,
            parities_off: parities_off as u64,
            decoders_off: decoders_off as u64,
            shots_off: shots_off as u64,
            total_bytes: total as u64,
            invalid_decoder: 0,
            token: new_token(),
            scratch_off: upload as u64,
            scratch_stride: u32::try_from(stride).map_err(|_| QecStateError::TooLarge)?,
            scratch_blocks: decoders,
            stream_count: 0,
            rsvd: [0; 3],
            stream: [0; crate::qec::exact::MAX_STREAM],
        };
        let mut header = header;
        let kept = crate::qec::exact::normalize_stream(stream, n);
        header.stream_count = kept.len() as u32;
        header.stream[..kept.len()].copy_from_slice(&kept);
        // Zero everywhere else: every decoder starts idle (no shot, next counter 0, no
        // corrections, zero counters), as QecSession::new leaves its slots.
        let mut bytes = vec![0u8; upload];
        write_header(&mut bytes, &header);
        for (i, v) in dist.iter().enumerate() {
            put(&mut bytes, distances_off + 4 * i, &v.to_le_bytes());
        }
        for (i, v) in parities.iter().enumerate() {
            put(&mut bytes, parities_off + 4 * i, &v.to_le_bytes());
        }
        Ok(QecState { bytes, header, never_pairs })
    }

    /// The blob of a [`StageSpec::QecDecoder`], with the DEM and settings the CPU stage uses
    /// (`StageSpec::cpu_stage`); `None` for a stage without device state.
    pub fn from_spec(spec: &StageSpec) -> Result<Option<QecState>, QecStateError> {
        let StageSpec::QecDecoder { dem, rounds_per_message, max_defects, decoders, .. } = spec else {
            return Ok(None);
        };
        // Refuse K before the (slower) DEM load.
        if *max_defects as usize > MAX_K {
            return Err(QecStateError::MaxDefects(*max_defects as usize));
        }
        let table = crate::qec::fine_table_from_file(dem).map_err(|e| QecStateError::Load(e.to_string()))?;
        // The stream: the ends of the messages a round-by-round replay of the DEM sends
        // (none when the DEM has no round structure: then shots decode whole).
        let rounds = crate::qec::load_dem(dem)
            .map_err(|e| QecStateError::Load(e.to_string()))?
            .detectors_per_round()
            .unwrap_or_default();
        let stream = crate::qec::exact::stream_thresholds(&rounds, *rounds_per_message);
        let config = SessionConfig {
            decoders: *decoders as usize,
            rounds_per_message: *rounds_per_message,
            max_defects: *max_defects as usize,
            syndrome_mapping_id: None,
            measure_time: true,
        };
        QecState::build_streamed(&table, &config, &stream).map(Some)
    }

    /// The bytes to copy to the device: the blob up to its scratch.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The device memory the blob takes, scratch included (at least [`Self::bytes`]).
    pub fn device_bytes(&self) -> usize {
        self.header.total_bytes as usize
    }

    /// The header as written.
    pub fn header(&self) -> &QecHeader {
        &self.header
    }

    /// Pair entries replaced by "no path" to keep sums in 32 bits (module docs); 0 when the
    /// table went in verbatim.
    pub fn never_pairs(&self) -> usize {
        self.never_pairs
    }

    /// Bytes of the table as the stage keeps it in shared memory: (distance, parity) pairs,
    /// (n + 1)^2 of them (kernels/stages/qec.cuh, "the table in shared memory").
    pub fn shared_table_bytes(&self) -> usize {
        let s = self.header.num_detectors as usize + 1;
        s * s * 8
    }

    /// The dynamic shared memory to launch function `i` of `module` with, for a kernel that
    /// runs the QEC stage on this state, at most `cap` bytes: [`Self::shared_table_bytes`]
    /// when that fits beside the function's static shared memory (the function is allowed
    /// that much), and the stage reads the table there; else all the room there is (up to
    /// `cap`), and the stage reads the table from global memory and works on a shot's
    /// clusters there (qec.cuh rl_qec_clusters). A d=5 memory experiment of 6 rounds (120
    /// detectors) takes 117 KiB for its table; Hopper gives a block up to 227 KiB.
    pub fn dynamic_shared(
        &self,
        gpu: &super::driver::Gpu,
        module: &super::driver::Module,
        i: usize,
        cap: usize,
    ) -> Result<u32, super::driver::GpuError> {
        let room = module.dynamic_shared_room(gpu, i).min(cap);
        let want = self.shared_table_bytes();
        let bytes = if want <= room { want } else { room & !15 };
        if bytes > 0 {
            module.allow_dynamic_shared(i, bytes)?;
        }
        Ok(bytes as u32)
    }

    /// The distance section.
    pub fn distances(&self) -> Vec<u32> {
        self.u32_section(self.header.distances_off as usize)
    }

    /// The parity section.
    pub fn parities(&self) -> Vec<u32> {
        self.u32_section(self.header.parities_off as usize)
    }

    fn u32_section(&self, off: usize) -> Vec<u32> {
        let s = self.header.num_detectors as usize + 1;
        (0..s * s).map(|i| u32_at(&self.bytes, off + 4 * i).unwrap_or(INF)).collect()
    }
}

fn write_header(b: &mut [u8], h: &QecHeader) {
    macro_rules! w {
        ($f:ident) => {
            put(b, offset_of!(QecHeader, $f), &h.$f.to_le_bytes())
        };
    }
    w!(magic);
    w!(header_bytes);
    w!(num_detectors);
    w!(num_observables);
    w!(max_defects);
    w!(decoders);
    w!(rounds_per_message);
    w!(shot_words);
    w!(has_mapping);
    w!(scratch_edges);
    w!(mapping_id);
    w!(scale);
    w!(distances_off);
    w!(parities_off);
    w!(decoders_off);
    w!(shots_off);
    w!(total_bytes);
    w!(invalid_decoder);
    w!(token);
    w!(scratch_off);
    w!(scratch_stride);
    w!(scratch_blocks);
    w!(stream_count);
    for (i, t) in h.stream.iter().enumerate() {
        put(b, offset_of!(QecHeader, stream) + 4 * i, &t.to_le_bytes());
    }
}

/// Edges (linked pairs) a block's scratch holds for one cluster's matching on `n` detectors:
/// the model's cap (exact.rs [`crate::qec::exact::matching_edge_cap`]), one definition.
pub fn scratch_edges(n: usize) -> usize {
    crate::qec::exact::matching_edge_cap(n)
}

/// Bytes of one block's scratch (abi.h): the defect arrays, and the matcher for n vertices
/// and `edges` edges, rounded up to the section alignment; the stage checks the matcher's
/// own count against it.
pub fn scratch_stride(n: usize, edges: usize) -> Option<usize> {
    use crate::abi::{RL_PM_EDGE_BYTES, RL_PM_SLACK_BYTES, RL_PM_VERTEX_BYTES, RL_QEC_SCRATCH_DEFECT_BYTES};
    let b = (RL_QEC_SCRATCH_DEFECT_BYTES as usize)
        .checked_mul(n)?
        .checked_add((RL_PM_VERTEX_BYTES as usize).checked_mul(n)?)?
        .checked_add((RL_PM_EDGE_BYTES as usize).checked_mul(edges)?)?
        .checked_add(RL_PM_SLACK_BYTES as usize)?;
    align(b)
}

/// A nonzero token that differs between builds (module docs): the process's random hash keys
/// (std's `RandomState`), a per-process counter and the time, hashed.
pub fn new_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// Requests that named a decoder id out of range, read from a blob (as copied back from the
/// device after the kernel stopped).
pub fn invalid_decoder_requests(blob: &[u8]) -> Option<u64> {
    (u32_at(blob, 0)? == MAGIC).then_some(())?;
    u64_at(blob, offset_of!(QecHeader, invalid_decoder))
}

/// Decoder `i`'s record, read from a blob.
pub fn decoder_record(blob: &[u8], i: usize) -> Option<QecDecoderRecord> {
    (u32_at(blob, 0)? == MAGIC).then_some(())?;
    if i >= u32_at(blob, offset_of!(QecHeader, decoders))? as usize {
        return None;
    }
    let at =
        usize::try_from(u64_at(blob, offset_of!(QecHeader, decoders_off))?).ok()? + i * size_of::<QecDecoderRecord>();
    let u64f = |f: usize| u64_at(blob, at + f);
    Some(QecDecoderRecord {
        bits: u32_at(blob, at + offset_of!(QecDecoderRecord, bits))?,
        in_shot: u32_at(blob, at + offset_of!(QecDecoderRecord, in_shot))?,
        next_counter: u64f(offset_of!(QecDecoderRecord, next_counter))? as i64,
        corrections: u64f(offset_of!(QecDecoderRecord, corrections))?,
        counters: {
            let c = |f: usize| u64f(offset_of!(QecDecoderRecord, counters) + f);
            SessionCounters {
                messages: c(offset_of!(SessionCounters, messages))?,
                shots: c(offset_of!(SessionCounters, shots))?,
                overflows: c(offset_of!(SessionCounters, overflows))?,
                unmatchable: c(offset_of!(SessionCounters, unmatchable))?,
                dropped_messages: c(offset_of!(SessionCounters, dropped_messages))?,
                dropped_shots: c(offset_of!(SessionCounters, dropped_shots))?,
                abandoned_shots: c(offset_of!(SessionCounters, abandoned_shots))?,
                bad_requests: c(offset_of!(SessionCounters, bad_requests))?,
            }
        },
        rsvd: [0; 5],
    })
}

impl QecDecoderRecord {
    /// The counters (the CPU session's type: one definition, kernels/abi.h).
    pub fn counters(&self) -> SessionCounters {
        self.counters
    }
}

/// Whether `spec` can run as a device stage (`Err` says why not): builds its blob.
pub fn check_spec(spec: &StageSpec) -> Result<(), String> {
    QecState::from_spec(spec).map(|_| ()).map_err(|e| e.to_string())
}
