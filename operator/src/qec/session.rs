//! The QEC decoder stage as a deterministic state machine over CUQR requests (PROTOCOLS.md
//! 3; docs/qec.md, "Inputs and outputs"): bytes in, bytes out, no I/O, no clock unless
//! [`SessionConfig::measure_time`]. The CPU backend wraps [`QecSession::handle`] in its
//! `Stage` (`Some(n)` is `Outcome::Answer(n)`, `None` is `Outcome::Drop`); the GPU stage
//! implements the same contract.
//!
//! Contract, per decoder id (`0..SessionConfig::decoders`), each with its own state:
//! - `enqueue_syndromes{decoder_id, counter, syndrome_mapping_id, n}` appends `n` detection
//!   bits to the shot being assembled. `counter` is the round index of the first round the
//!   message carries; one message carries [`SessionConfig::rounds_per_message`] rounds, so
//!   the next message must carry `counter + rounds_per_message`. `counter == 0` starts a shot
//!   (abandoning, and counting, an unfinished one). Any other counter out of sequence is a
//!   gap: the unfinished shot is discarded and the answer is `SYNDROMES_DROPPED`, as it is for
//!   every later message until the next `counter == 0`.
//! - The message whose bits complete the DEM's detector count (`num_detectors`, stim's
//!   order) is decoded at once. Its answer is status OK with the correction bits
//!   (`correction_len(num_observables)` bytes, as `get_corrections` returns them) followed by
//!   a 16-byte decode report (`rocelink_wire::qec::DecodeReportRepr`: status ok / overflow /
//!   unmatchable, defects, weight, decode ns, shot index). Earlier messages are answered OK
//!   with no result. The CPU decoder ([`QecSession::new`]: `rocelink_qec::MatchingDecoder`)
//!   is exact for any number of defects and works on each round as it arrives (grows its
//!   defects' balls, solves and proves the shot so far), so the final round re-solves only
//!   the clusters its own defects touch. [`QecSession::with_table`] runs
//!   the GPU stage's table decoder instead (the bit-exact model the GPU kernel is tested
//!   against, exact too); a shot it cannot decode (a cluster over the GPU scratch's edge
//!   cap) is answered with report status 1 (overflow), no correction, and counted.
//! - The correction of every decoded shot is XORed into the decoder's accumulated
//!   corrections. `get_corrections{decoder_id, return_size, reset}` answers them (return_size
//!   bits, LSB first, zero-padded to a multiple of 8 bytes; bits past the observables are 0),
//!   then clears them when `reset != 0`; `NOT_READY` while a shot is being assembled (its
//!   correction is not in yet).
//! - `reset_decoder{decoder_id}` drops any unfinished shot and the accumulated corrections;
//!   the next shot starts at counter 0. Counters are monotonic and survive it.
//! - Status codes: `INVALID_DECODER` for an id out of range; `BAD_REQUEST` for arguments that
//!   do not parse (short, negative or too many bits for the shot, a different
//!   `syndrome_mapping_id` when one is configured, return_size outside 0..=512) — a bad
//!   enqueue also discards the unfinished shot; `INTERNAL_ERROR` when the output buffer cannot
//!   hold the answer (checked before any state changes); `BUSY` is never sent by this
//!   synchronous stage.
//! - Requests that are not CUQR (bad magic, short header) or name another function are not
//!   answered (`None`), so a dispatcher can route them elsewhere; the answer echoes
//!   `request_id` and `ptp_timestamp`.
//!
//! Nothing allocates per request after [`QecSession::new`].

use std::sync::Arc;
use std::time::Instant;

use rocelink_wire::qec::{self as wq, DecodeReportRepr, EnqueueSyndromesRepr, GetCorrectionsRepr, ResetDecoderRepr};
use rocelink_wire::rpc::{self, function_id, status, RequestRepr, ResponseRepr};

use rocelink_qec::{MatchingDecoder, SparseGraph};

use super::exact::{ConfigError, ExactDecoder, DEFAULT_MAX_DEFECTS};
use super::graph::{DistanceTable, TableWeight};

/// The most correction bits a `get_corrections` may ask for (64 bytes of answer).
pub const MAX_RETURN_BITS: i64 = 512;

/// How the stage is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// Decoder ids `0..decoders`, each with its own shot state.
    pub decoders: usize,
    /// Rounds one `enqueue_syndromes` carries: the counter advances by this much.
    pub rounds_per_message: u32,
    /// K, the defect cap of the GPU stage's decoder and its model
    /// ([`QecSession::with_table`]); the CPU decoder ([`QecSession::new`]) has none.
    pub max_defects: usize,
    /// When set, `enqueue_syndromes` must name this mapping (else `BAD_REQUEST`).
    pub syndrome_mapping_id: Option<i64>,
    /// Time each decode (the report's decode_ns); off keeps the stage clock-free.
    pub measure_time: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            decoders: 1,
            rounds_per_message: 1,
            max_defects: DEFAULT_MAX_DEFECTS,
            syndrome_mapping_id: None,
            measure_time: false,
        }
    }
}

/// Per-decoder counters (monotonic): `struct rl_qec_counters` of kernels/abi.h, the one
/// definition the GPU stage's records hold too (field docs there).
pub type SessionCounters = crate::abi::rl_qec_counters;

/// One decoded shot, as the session reports it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ShotOutcome {
    /// The correction.
    pub observables: u64,
    /// Matching weight, ln((1-p)/p) units.
    pub weight: f64,
    /// Defects in the shot.
    pub defects: u32,
    /// The wire report's status (`rocelink_wire::qec::REPORT_*`).
    pub report: u8,
}

/// What the session needs of a decoder: it is told of each message's bits as they arrive
/// (a streaming decoder starts work then) and asked for the result when the shot is
/// complete.
pub trait SessionDecoder: Send {
    /// A new shot starts (any unfinished one is dropped).
    fn begin(&mut self);
    /// Bits `first..first + n` of `shot` (the shot assembled so far, b8 order) arrived. Work
    /// the answer does not need (a streaming decoder's settle) is given up once `waiting()`
    /// says the next message came.
    fn round(&mut self, shot: &[u8], first: usize, n: usize, waiting: &mut dyn FnMut() -> bool);
    /// The shot is complete (`shot` holds all its bits): decode it.
    fn finish(&mut self, shot: &[u8]) -> ShotOutcome;
    /// No message is waiting: optional work on the shot so far, given up once `waiting()`
    /// says one came.
    fn idle(&mut self, _waiting: &mut dyn FnMut() -> bool) {}
}

impl SessionDecoder for MatchingDecoder {
    fn begin(&mut self) {
        self.begin_shot();
    }

    fn round(&mut self, shot: &[u8], first: usize, n: usize, waiting: &mut dyn FnMut() -> bool) {
        self.add_events(shot, first, first + n);
        // Not after the final round: finish() does that work on the answer's path anyway.
        // In a closed loop nothing waits while a round is settled, and the settle is whole; a
        // loop behind a fixed cycle gives it up and catches up, and finish() does the rest.
        match round_left(first, n, self.graph().num_detectors()) {
            RoundLeft::Final => {}
            RoundLeft::LastButOne => self.settle_last_unless(waiting),
            RoundLeft::More => self.settle_unless(waiting),
        }
    }

    fn finish(&mut self, _shot: &[u8]) -> ShotOutcome {
        ShotOutcome::from(MatchingDecoder::finish(self))
    }
}

/// Where a round leaves its shot (bits `first..first + n` of `total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RoundLeft {
    /// The shot is complete.
    Final,
    /// What is left fits in a message no longer than this one: most likely the next message
    /// ends the shot, so the settle after this one is complete (`MatchingDecoder::settle_last`)
    /// and a final round that adds no defect costs nothing. A guess: were more messages to
    /// come, that settle only did early what later ones would.
    LastButOne,
    /// More rounds follow.
    More,
}

pub(super) fn round_left(first: usize, n: usize, total: usize) -> RoundLeft {
    let end = first + n;
    if end >= total {
        RoundLeft::Final
    } else if total - end <= n {
        RoundLeft::LastButOne
    } else {
        RoundLeft::More
    }
}

/// The CPU decoder with each round's settle left for the loop's idle time (`settle: idle`):
/// a round adds its defects (and grows their first balls) on the answer's path, and the
/// settle runs after the acknowledgement went out, while no message waits
/// ([`SessionDecoder::idle`], given up when one comes); the final round finishes what is left.
#[derive(Debug)]
pub struct IdleSettled {
    decoder: MatchingDecoder,
    /// A round ended since the last settle, and where it left the shot.
    due: Option<RoundLeft>,
}

impl SessionDecoder for IdleSettled {
    fn begin(&mut self) {
        self.decoder.begin_shot();
        self.due = None;
    }

    fn round(&mut self, shot: &[u8], first: usize, n: usize, _waiting: &mut dyn FnMut() -> bool) {
        self.decoder.add_events(shot, first, first + n);
        self.due = Some(round_left(first, n, self.decoder.graph().num_detectors())).filter(|&l| l != RoundLeft::Final);
    }

    fn finish(&mut self, _shot: &[u8]) -> ShotOutcome {
        self.due = None;
        ShotOutcome::from(self.decoder.finish())
    }

    fn idle(&mut self, waiting: &mut dyn FnMut() -> bool) {
        match self.due.take() {
            Some(RoundLeft::LastButOne) => self.decoder.settle_last_unless(waiting),
            Some(_) => self.decoder.settle_unless(waiting),
            None => {}
        }
    }
}

impl QecSession<IdleSettled> {
    /// The CPU stage with each round's settle in the loop's idle time ([`IdleSettled`]).
    pub fn idle_settled(graph: Arc<SparseGraph>, config: SessionConfig) -> Result<Self, ConfigError> {
        let (n, obs) = (graph.num_detectors(), graph.num_observables());
        Self::with_decoders(config, n, obs, || {
            Ok(IdleSettled { decoder: MatchingDecoder::new(Arc::clone(&graph)), due: None })
        })
    }
}

impl From<rocelink_qec::Decoded> for ShotOutcome {
    fn from(d: rocelink_qec::Decoded) -> Self {
        let report = match d.status {
            rocelink_qec::DecodeStatus::Ok => wq::REPORT_OK,
            _ => wq::REPORT_UNMATCHABLE,
        };
        ShotOutcome { observables: d.observables, weight: d.weight, defects: d.defects, report }
    }
}

impl<W: TableWeight> SessionDecoder for ExactDecoder<W> {
    fn begin(&mut self) {}

    fn round(&mut self, _shot: &[u8], _first: usize, _n: usize, _waiting: &mut dyn FnMut() -> bool) {}

    fn finish(&mut self, shot: &[u8]) -> ShotOutcome {
        let d = self.decode_b8(shot);
        ShotOutcome { observables: d.observables, weight: d.weight, defects: d.defects, report: d.status.report_code() }
    }
}

#[derive(Debug)]
struct Slot<D> {
    decoder: D,
    shot: Vec<u8>,
    bits: usize,
    in_shot: bool,
    next_counter: i64,
    corrections: u64,
    counters: SessionCounters,
}

impl<D> Slot<D> {
    fn discard(&mut self) {
        self.in_shot = false;
        self.bits = 0;
    }
}

/// The decoder stage (module docs).
#[derive(Debug)]
pub struct QecSession<D = MatchingDecoder> {
    config: SessionConfig,
    num_detectors: usize,
    num_observables: usize,
    slots: Vec<Slot<D>>,
    invalid_decoder: u64,
}

/// Appends the low `n` bits of `src` (LSB first) at bit `at` of `dst`, whose bits from `at`
/// on are zero. Out-of-range writes are skipped (callers check the lengths).
fn append_bits(dst: &mut [u8], at: usize, src: &[u8], n: usize) {
    let (base, sh) = (at / 8, at % 8);
    for (k, &byte) in src.iter().enumerate().take(wq::packed_len(n)) {
        let left = n - 8 * k;
        let v = if left < 8 { byte & ((1u8 << left) - 1) } else { byte };
        if let Some(d) = dst.get_mut(base + k) {
            *d |= v << sh;
        }
        if sh != 0 {
            if let Some(d) = dst.get_mut(base + k + 1) {
                *d |= v >> (8 - sh);
            }
        }
    }
}

impl QecSession<MatchingDecoder> {
    /// The CPU stage: shots of `graph`'s DEM decoded exactly, streamed round by round.
    pub fn new(graph: Arc<SparseGraph>, config: SessionConfig) -> Result<Self, ConfigError> {
        let (n, obs) = (graph.num_detectors(), graph.num_observables());
        Self::with_decoders(config, n, obs, || Ok(MatchingDecoder::new(Arc::clone(&graph))))
    }
}

impl<W: TableWeight> QecSession<ExactDecoder<W>> {
    /// The GPU stage's model: `table`'s DEM decoded by the table decoder (the subset DP up
    /// to `config.max_defects`, clusters above).
    pub fn with_table(table: Arc<DistanceTable<W>>, config: SessionConfig) -> Result<Self, ConfigError> {
        let (n, obs) = (table.num_detectors, table.num_observables);
        Self::with_decoders(config, n, obs, || ExactDecoder::new(Arc::clone(&table), config.max_defects))
    }

    /// [`Self::with_table`] with stream thresholds (exact.rs [`ExactDecoder::set_stream`]):
    /// the model of a GPU stage built with the same (`QecState::build_streamed`).
    pub fn with_table_streamed(
        table: Arc<DistanceTable<W>>,
        config: SessionConfig,
        stream: &[u32],
    ) -> Result<Self, ConfigError> {
        let (n, obs) = (table.num_detectors, table.num_observables);
        Self::with_decoders(config, n, obs, || {
            let mut d = ExactDecoder::new(Arc::clone(&table), config.max_defects)?;
            d.set_stream(stream);
            Ok(d)
        })
    }
}

impl<D: SessionDecoder> QecSession<D> {
    pub(super) fn with_decoders(
        config: SessionConfig,
        num_detectors: usize,
        num_observables: usize,
        mut make: impl FnMut() -> Result<D, ConfigError>,
    ) -> Result<Self, ConfigError> {
        if config.decoders == 0 {
            return Err(ConfigError::Session("a QEC session needs at least one decoder"));
        }
        if config.rounds_per_message == 0 {
            return Err(ConfigError::Session("rounds_per_message must be at least 1"));
        }
        if num_observables > 64 {
            return Err(ConfigError::Session("more than 64 observables"));
        }
        let slots = (0..config.decoders)
            .map(|_| {
                Ok(Slot {
                    decoder: make()?,
                    shot: vec![0; wq::packed_len(num_detectors)],
                    bits: 0,
                    in_shot: false,
                    next_counter: 0,
                    corrections: 0,
                    counters: SessionCounters::default(),
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(QecSession { config, num_detectors, num_observables, slots, invalid_decoder: 0 })
    }

    /// The decoders' idle work ([`SessionDecoder::idle`]), while no message is waiting.
    pub fn idle(&mut self, waiting: &mut dyn FnMut() -> bool) {
        for slot in self.slots.iter_mut().filter(|s| s.in_shot) {
            if waiting() {
                return;
            }
            slot.decoder.idle(waiting);
        }
    }

    /// Detection bits in one shot.
    pub fn num_detectors(&self) -> usize {
        self.num_detectors
    }

    /// Observables (correction bits).
    pub fn num_observables(&self) -> usize {
        self.num_observables
    }

    /// Result bytes of the answer that completes a shot: corrections plus the report.
    pub fn final_result_len(&self) -> usize {
        wq::correction_len(self.num_observables) + wq::DECODE_REPORT_LEN
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// Counters of one decoder.
    pub fn counters(&self, decoder_id: usize) -> Option<SessionCounters> {
        self.slots.get(decoder_id).map(|s| s.counters)
    }

    /// Requests naming a decoder id that does not exist.
    pub fn invalid_decoder_requests(&self) -> u64 {
        self.invalid_decoder
    }

    /// Handles one request (header + arguments) and writes the answer (header + result)
    /// into `out`: `Some(length)`, or `None` when the request is not answered (module docs).
    pub fn handle(&mut self, request: &[u8], out: &mut [u8]) -> Option<usize> {
        self.handle_polled(request, out, &mut || false)
    }

    /// [`handle`](Self::handle) where `waiting()` says whether the next message is already
    /// waiting: the decoder's streaming work for this round is given up then
    /// ([`SessionDecoder::round`]); the answer is the same.
    pub fn handle_polled(
        &mut self,
        request: &[u8],
        out: &mut [u8],
        waiting: &mut dyn FnMut() -> bool,
    ) -> Option<usize> {
        let req = RequestRepr::parse(request).ok()?;
        if !matches!(
            req.function_id,
            function_id::ENQUEUE_SYNDROMES | function_id::GET_CORRECTIONS | function_id::RESET_DECODER
        ) {
            return None;
        }
        let (head, body) = out.split_at_mut_checked(rpc::HEADER_LEN)?;
        let args =
            (req.arg_len as usize).checked_add(rpc::HEADER_LEN).and_then(|end| request.get(rpc::HEADER_LEN..end));
        let (st, len) = match args {
            None => (status::BAD_REQUEST, 0),
            Some(args) => match req.function_id {
                function_id::ENQUEUE_SYNDROMES => self.enqueue(args, body, waiting),
                function_id::GET_CORRECTIONS => self.get_corrections(args, body),
                _ => self.reset(args),
            },
        };
        ResponseRepr {
            status: st,
            result_len: len as u32,
            request_id: req.request_id,
            ptp_timestamp: req.ptp_timestamp,
        }
        .emit(head)
        .ok()?;
        Some(rpc::HEADER_LEN + len)
    }

    fn slot_index(&mut self, decoder_id: i64) -> Option<usize> {
        let i = usize::try_from(decoder_id).ok().filter(|&i| i < self.slots.len());
        if i.is_none() {
            self.invalid_decoder += 1;
        }
        i
    }

    fn enqueue(&mut self, args: &[u8], body: &mut [u8], waiting: &mut dyn FnMut() -> bool) -> (i32, usize) {
        let Ok(m) = EnqueueSyndromesRepr::parse(args) else {
            // Without a parsed id there is no slot to charge; the session counter covers it.
            return (status::BAD_REQUEST, 0);
        };
        let Some(i) = self.slot_index(m.decoder_id) else {
            return (status::INVALID_DECODER, 0);
        };
        let final_len = self.final_result_len();
        let (num_detectors, rounds, mapping, measure) = (
            self.num_detectors,
            i64::from(self.config.rounds_per_message),
            self.config.syndrome_mapping_id,
            self.config.measure_time,
        );
        let slot = &mut self.slots[i];
        if body.len() < final_len {
            return (status::INTERNAL_ERROR, 0);
        }
        if mapping.is_some_and(|id| id != m.syndrome_mapping_id) {
            slot.counters.bad_requests += 1;
            return (status::BAD_REQUEST, 0);
        }
        if m.counter == 0 {
            if slot.in_shot {
                slot.counters.abandoned_shots += 1;
            }
            slot.shot.fill(0);
            slot.bits = 0;
            slot.in_shot = true;
            slot.decoder.begin();
        } else if !slot.in_shot || m.counter != slot.next_counter {
            if slot.in_shot {
                slot.counters.dropped_shots += 1;
            }
            slot.discard();
            slot.counters.dropped_messages += 1;
            return (status::SYNDROMES_DROPPED, 0);
        }
        // parse() bounded num_syndromes to a non-negative usable count.
        let n = usize::try_from(m.num_syndromes).unwrap_or(usize::MAX);
        let next = m.counter.checked_add(rounds);
        if n > num_detectors - slot.bits || next.is_none() {
            slot.counters.bad_requests += 1;
            slot.counters.dropped_shots += 1;
            slot.discard();
            return (status::BAD_REQUEST, 0);
        }
        let syndromes = args.get(wq::ENQUEUE_SYNDROMES_FIXED_LEN..).unwrap_or(&[]);
        append_bits(&mut slot.shot, slot.bits, syndromes, n);
        slot.decoder.round(&slot.shot, slot.bits, n, waiting);
        slot.bits += n;
        slot.next_counter = next.unwrap_or(0);
        slot.counters.messages += 1;
        if slot.bits < num_detectors {
            return (status::OK, 0);
        }

        // The final round: decode now, so the correction is back before the next conditional
        // operation (docs/qec.md, "Inputs and outputs").
        let started = measure.then(Instant::now);
        let d = slot.decoder.finish(&slot.shot);
        let decode_ns = started.map_or(0, |t| u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX));
        slot.in_shot = false;
        slot.bits = 0;
        slot.corrections ^= d.observables;
        let shot_index = slot.counters.shots as u32;
        slot.counters.shots += 1;
        match d.report {
            wq::REPORT_OVERFLOW => slot.counters.overflows += 1,
            wq::REPORT_UNMATCHABLE => slot.counters.unmatchable += 1,
            _ => {}
        }
        let Ok(c) = wq::emit_corrections(d.observables, self.num_observables, body) else {
            return (status::INTERNAL_ERROR, 0);
        };
        let report = DecodeReportRepr {
            status: d.report,
            reserved: 0,
            defects: d.defects.min(u16::MAX as u32) as u16,
            weight: d.weight as f32,
            decode_ns,
            shot: shot_index,
        };
        match body.get_mut(c..).map(|b| report.emit(b)) {
            Some(Ok(())) => (status::OK, c + wq::DECODE_REPORT_LEN),
            _ => (status::INTERNAL_ERROR, 0),
        }
    }

    fn get_corrections(&mut self, args: &[u8], body: &mut [u8]) -> (i32, usize) {
        let Ok(g) = GetCorrectionsRepr::parse(args) else {
            return (status::BAD_REQUEST, 0);
        };
        let Some(i) = self.slot_index(g.decoder_id) else {
            return (status::INVALID_DECODER, 0);
        };
        let slot = &mut self.slots[i];
        if !(0..=MAX_RETURN_BITS).contains(&g.return_size) {
            slot.counters.bad_requests += 1;
            return (status::BAD_REQUEST, 0);
        }
        if slot.in_shot {
            return (status::NOT_READY, 0);
        }
        let Ok(len) = wq::emit_corrections(slot.corrections, g.return_size as usize, body) else {
            return (status::INTERNAL_ERROR, 0);
        };
        if g.reset() {
            slot.corrections = 0;
        }
        (status::OK, len)
    }

    fn reset(&mut self, args: &[u8]) -> (i32, usize) {
        let Ok(r) = ResetDecoderRepr::parse(args) else {
            return (status::BAD_REQUEST, 0);
        };
        let Some(i) = self.slot_index(r.decoder_id) else {
            return (status::INVALID_DECODER, 0);
        };
        let slot = &mut self.slots[i];
        slot.discard();
        slot.corrections = 0;
        slot.next_counter = 0;
        (status::OK, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qec::graph::MatchingGraph;
    use rocelink_wire::qec::{parse_corrections, REPORT_OK};

    /// Repetition code with 6 detectors; the left boundary edge flips L0.
    fn session(cfg: SessionConfig) -> QecSession {
        let mut s = String::from("error(0.1) D0 L0\n");
        for i in 0..5 {
            s += &format!("error(0.1) D{} D{}\n", i, i + 1);
        }
        s += "error(0.1) D5\n";
        QecSession::new(rocelink_qec::sparse_graph_from_dem_text(&s).unwrap(), cfg).unwrap()
    }

    fn table_session(cfg: SessionConfig) -> QecSession<ExactDecoder> {
        let mut s = String::from("error(0.1) D0 L0\n");
        for i in 0..5 {
            s += &format!("error(0.1) D{} D{}\n", i, i + 1);
        }
        s += "error(0.1) D5\n";
        let g = MatchingGraph::from_dem_text(&s).unwrap();
        QecSession::with_table(Arc::new(g.fine_table().unwrap()), cfg).unwrap()
    }

    fn request(function: u32, id: u32, args: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; rpc::HEADER_LEN + args.len()];
        RequestRepr { function_id: function, arg_len: args.len() as u32, request_id: id, ptp_timestamp: 0xABCD }
            .emit(&mut b)
            .unwrap();
        b[rpc::HEADER_LEN..].copy_from_slice(args);
        b
    }

    fn enqueue(decoder: i64, counter: i64, n: i64, bits: &[u8]) -> Vec<u8> {
        let r = EnqueueSyndromesRepr { decoder_id: decoder, counter, syndrome_mapping_id: 0, num_syndromes: n };
        let mut a = vec![0u8; r.buffer_len()];
        r.emit_with(bits, &mut a).unwrap();
        request(function_id::ENQUEUE_SYNDROMES, counter as u32, &a)
    }

    fn get(decoder: i64, size: i64, reset: u8) -> Vec<u8> {
        let mut a = [0u8; 17];
        GetCorrectionsRepr { decoder_id: decoder, return_size: size, reset }.emit(&mut a).unwrap();
        request(function_id::GET_CORRECTIONS, 100, &a)
    }

    fn call(s: &mut QecSession, req: &[u8]) -> (ResponseRepr, Vec<u8>) {
        let mut out = [0u8; 256];
        let n = s.handle(req, &mut out).expect("answered");
        let r = ResponseRepr::parse(&out[..n]).unwrap();
        assert_eq!(r.message_len(), n);
        assert_eq!(r.ptp_timestamp, 0xABCD);
        (r, out[rpc::HEADER_LEN..n].to_vec())
    }

    #[test]
    fn three_rounds_then_correction() {
        let mut s = session(SessionConfig::default());
        // Shot: defect at D0 only -> boundary, L0 flips. Rounds of 2 bits each.
        let (r, res) = call(&mut s, &enqueue(0, 0, 2, &[0b01]));
        assert_eq!((r.status, r.result_len, r.request_id), (0, 0, 0));
        assert!(res.is_empty());
        let (r, _) = call(&mut s, &enqueue(0, 1, 2, &[0b00]));
        assert_eq!((r.status, r.result_len), (0, 0));
        let (r, res) = call(&mut s, &enqueue(0, 2, 2, &[0b00]));
        assert_eq!((r.status, r.result_len), (0, 24));
        assert_eq!(parse_corrections(&res[..8], 1), 1);
        let rep = DecodeReportRepr::parse(&res[8..]).unwrap();
        assert_eq!((rep.status, rep.defects, rep.decode_ns, rep.shot), (REPORT_OK, 1, 0, 0));
        assert!((rep.weight - 9f32.ln()).abs() < 1e-4);
        // Accumulated corrections: L0; reset clears them.
        let (r, res) = call(&mut s, &get(0, 1, 1));
        assert_eq!((r.status, r.result_len), (0, 8));
        assert_eq!(res, [1, 0, 0, 0, 0, 0, 0, 0]);
        let (_, res) = call(&mut s, &get(0, 1, 0));
        assert_eq!(res[0], 0);
        assert_eq!(s.counters(0).unwrap().shots, 1);
    }

    #[test]
    fn unaligned_rounds_assemble_in_order() {
        // 6 detectors as 1 + 3 + 2 bits: defects D2, D3, D4.
        let mut s = session(SessionConfig::default());
        call(&mut s, &enqueue(0, 0, 1, &[0b1111_1110])); // high junk bits are masked
        call(&mut s, &enqueue(0, 1, 3, &[0b110]));
        let (r, res) = call(&mut s, &enqueue(0, 2, 2, &[0b01]));
        assert_eq!(r.status, 0);
        let rep = DecodeReportRepr::parse(&res[8..]).unwrap();
        assert_eq!(rep.defects, 3); // D2, D3, D4
                                    // D2-D3 (w) + D4 to the right boundary (2w) beats D3-D4 + D2 to the left (w + 3w, L0).
        assert_eq!(parse_corrections(&res, 1), 0);
    }

    #[test]
    fn gaps_drop_the_shot_until_the_next_start() {
        let cfg = SessionConfig { rounds_per_message: 2, ..SessionConfig::default() };
        let mut s = session(cfg);
        assert_eq!(call(&mut s, &enqueue(0, 0, 2, &[0])).0.status, 0);
        // Expected counter 2; 4 is a gap.
        assert_eq!(call(&mut s, &enqueue(0, 4, 2, &[0])).0.status, status::SYNDROMES_DROPPED);
        assert_eq!(call(&mut s, &enqueue(0, 6, 2, &[0])).0.status, status::SYNDROMES_DROPPED);
        // A new shot recovers.
        assert_eq!(call(&mut s, &enqueue(0, 0, 2, &[0])).0.status, 0);
        assert_eq!(call(&mut s, &enqueue(0, 2, 2, &[0])).0.status, 0);
        // A restart mid-shot abandons the unfinished one.
        assert_eq!(call(&mut s, &enqueue(0, 0, 2, &[0])).0.status, 0);
        assert_eq!(call(&mut s, &enqueue(0, 2, 2, &[0])).0.status, 0);
        let (r, _) = call(&mut s, &enqueue(0, 4, 2, &[0]));
        assert_eq!((r.status, r.result_len), (0, 24));
        let c = s.counters(0).unwrap();
        assert_eq!((c.dropped_messages, c.dropped_shots, c.abandoned_shots, c.shots), (2, 1, 1, 1));
    }

    #[test]
    fn not_ready_while_assembling_and_reset() {
        let mut s = session(SessionConfig::default());
        call(&mut s, &enqueue(0, 0, 3, &[0b001]));
        assert_eq!(call(&mut s, &get(0, 1, 0)).0.status, status::NOT_READY);
        let (r, _) = call(&mut s, &request(function_id::RESET_DECODER, 1, &0i64.to_le_bytes()));
        assert_eq!((r.status, r.result_len), (0, 0));
        assert_eq!(call(&mut s, &get(0, 1, 0)).0.status, 0);
        // After reset the next shot starts at 0; counter 1 is a gap.
        assert_eq!(call(&mut s, &enqueue(0, 1, 3, &[0])).0.status, status::SYNDROMES_DROPPED);
    }

    #[test]
    fn decoders_are_independent_and_ids_checked() {
        let cfg = SessionConfig { decoders: 2, ..SessionConfig::default() };
        let mut s = session(cfg);
        call(&mut s, &enqueue(1, 0, 6, &[0b000001]));
        assert_eq!(call(&mut s, &get(1, 1, 0)).1[0], 1);
        assert_eq!(call(&mut s, &get(0, 1, 0)).1[0], 0);
        assert_eq!(call(&mut s, &enqueue(2, 0, 6, &[0])).0.status, status::INVALID_DECODER);
        assert_eq!(call(&mut s, &enqueue(-1, 0, 6, &[0])).0.status, status::INVALID_DECODER);
        assert_eq!(call(&mut s, &get(7, 1, 0)).0.status, status::INVALID_DECODER);
        assert_eq!(
            call(&mut s, &request(function_id::RESET_DECODER, 1, &9i64.to_le_bytes())).0.status,
            status::INVALID_DECODER
        );
        assert_eq!(s.invalid_decoder_requests(), 4);
    }

    #[test]
    fn bad_requests() {
        let cfg = SessionConfig { syndrome_mapping_id: Some(7), ..SessionConfig::default() };
        let mut s = session(cfg);
        // Wrong mapping id.
        assert_eq!(call(&mut s, &enqueue(0, 0, 6, &[0])).0.status, status::BAD_REQUEST);
        let mut s = session(SessionConfig::default());
        // More bits than the shot holds.
        assert_eq!(call(&mut s, &enqueue(0, 0, 7, &[0])).0.status, status::BAD_REQUEST);
        // Truncated arguments, negative bit count, short get/reset, arg_len beyond the buffer.
        assert_eq!(call(&mut s, &request(function_id::ENQUEUE_SYNDROMES, 1, &[0; 20])).0.status, status::BAD_REQUEST);
        let mut neg = enqueue(0, 0, 1, &[0]);
        neg[rpc::HEADER_LEN + 24..rpc::HEADER_LEN + 32].copy_from_slice(&(-1i64).to_le_bytes());
        assert_eq!(call(&mut s, &neg).0.status, status::BAD_REQUEST);
        assert_eq!(call(&mut s, &request(function_id::GET_CORRECTIONS, 1, &[0; 16])).0.status, status::BAD_REQUEST);
        assert_eq!(call(&mut s, &get(0, 513, 0)).0.status, status::BAD_REQUEST);
        assert_eq!(call(&mut s, &get(0, -1, 0)).0.status, status::BAD_REQUEST);
        assert_eq!(call(&mut s, &request(function_id::RESET_DECODER, 1, &[0; 7])).0.status, status::BAD_REQUEST);
        let mut long = get(0, 1, 0);
        long[8..12].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(call(&mut s, &long).0.status, status::BAD_REQUEST);
        // Larger return sizes are zero-padded.
        let (r, res) = call(&mut s, &get(0, 65, 0));
        assert_eq!((r.status, res.len()), (0, 16));
    }

    #[test]
    fn small_output_and_foreign_requests() {
        let mut s = session(SessionConfig::default());
        let mut out = [0u8; 30];
        let n = s.handle(&enqueue(0, 0, 6, &[1]), &mut out).unwrap();
        assert_eq!(ResponseRepr::parse(&out[..n]).unwrap().status, status::INTERNAL_ERROR);
        // No state changed: the same shot still decodes.
        let (r, _) = call(&mut s, &enqueue(0, 0, 6, &[1]));
        assert_eq!((r.status, r.result_len), (0, 24));
        assert_eq!(s.handle(&enqueue(0, 0, 6, &[1]), &mut [0u8; 23]), None);
        assert_eq!(s.handle(&request(function_id::ECHO, 1, b"hi"), &mut [0u8; 64]), None);
        assert_eq!(s.handle(&[0u8; 10], &mut [0u8; 64]), None);
    }

    #[test]
    fn above_k_the_table_session_decodes_exactly() {
        // Three defects over K = 2: the clusters, exact, status OK (an overflow would be a
        // cluster over the GPU scratch's edge cap: exact.rs tests that path).
        let cfg = SessionConfig { max_defects: 2, ..SessionConfig::default() };
        let mut s = table_session(cfg);
        let mut out = [0u8; 256];
        let n = s.handle(&enqueue(0, 0, 6, &[0b111]), &mut out).expect("answered");
        let (r, res) = (ResponseRepr::parse(&out[..n]).unwrap(), out[rpc::HEADER_LEN..n].to_vec());
        assert_eq!(r.status, 0);
        let rep = DecodeReportRepr::parse(&res[8..]).unwrap();
        assert_eq!((rep.status, rep.defects), (REPORT_OK, 3));
        assert_eq!(s.counters(0).unwrap().overflows, 0);
    }

    #[test]
    fn no_panic_on_random_requests() {
        let mut s = session(SessionConfig { decoders: 2, measure_time: true, ..SessionConfig::default() });
        let mut state = 99u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        let functions = [function_id::ENQUEUE_SYNDROMES, function_id::GET_CORRECTIONS, function_id::RESET_DECODER];
        let mut out = [0u8; 128];
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut args: Vec<u8> = (0..len).map(|_| (next() % 4) as u8).collect();
            if len >= 32 && next() % 2 == 0 {
                args[24..32].copy_from_slice(&i64::from(next() % 10).to_le_bytes());
            }
            let mut req = request(functions[(next() % 3) as usize], 1, &args);
            if next() % 8 == 0 {
                let cut = (next() as usize) % (req.len() + 1);
                req.truncate(cut);
            }
            let olen = (next() as usize) % 129;
            let _ = s.handle(&req, &mut out[..olen]);
        }
    }

    /// The idle-settled stage, and the in-loop one told that a message waits, answer as the
    /// in-loop one left alone, whatever their time: settles run whole, given up after a few
    /// clusters, or never (the final round does what is left).
    #[test]
    fn cut_settles_answer_as_whole_ones() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec/d5_p0.003");
        let graph = crate::qec::sparse_graph_from_file(&dir.join("model.dem")).unwrap();
        let dets = std::fs::read(dir.join("dets.b8")).unwrap();
        let n = graph.num_detectors();
        let bytes = n.div_ceil(8);
        let mut inloop = QecSession::new(Arc::clone(&graph), SessionConfig::default()).unwrap();
        let mut idle = QecSession::idle_settled(Arc::clone(&graph), SessionConfig::default()).unwrap();
        let mut polled = QecSession::new(graph, SessionConfig::default()).unwrap();
        let (mut a, mut b, mut c) = ([0u8; 256], [0u8; 256], [0u8; 256]);
        let (mut weights, mut ties) = (0usize, 0usize);
        for s in 0..2000 {
            let shot = &dets[s * bytes..(s + 1) * bytes];
            for (m, first) in (0..n).step_by(24).enumerate() {
                let len = 24.min(n - first);
                let mut bits = vec![0u8; 3];
                for i in 0..len {
                    if shot[(first + i) / 8] >> ((first + i) % 8) & 1 == 1 {
                        bits[i / 8] |= 1 << (i % 8);
                    }
                }
                let req = enqueue(0, m as i64, len as i64, &bits);
                let la = inloop.handle(&req, &mut a).unwrap();
                let lb = idle.handle(&req, &mut b).unwrap();
                // Time for `allow` questions (3: all it wants).
                let allow = (s + m) % 4;
                let cut = |asked: &mut usize| {
                    *asked += 1;
                    allow != 3 && *asked > allow
                };
                let mut asked = 0;
                idle.idle(&mut || cut(&mut asked));
                let mut asked = 0;
                let lc = polled.handle_polled(&req, &mut c, &mut || cut(&mut asked)).unwrap();
                assert_eq!((la, la), (lb, lc));
                if first + len < n {
                    assert_eq!(a[..la], b[..lb], "shot {s} message {m}");
                    assert_eq!(a[..la], c[..lc], "shot {s} message {m}");
                    continue;
                }
                let ra = DecodeReportRepr::parse(&a[la - 16..la]).unwrap();
                for other in [&b[..lb], &c[..lc]] {
                    let r = DecodeReportRepr::parse(&other[other.len() - 16..]).unwrap();
                    assert_eq!((ra.status, ra.defects, ra.weight), (r.status, r.defects, r.weight), "shot {s}");
                    ties += usize::from(a[..la] != *other);
                }
                weights += 1;
            }
        }
        assert_eq!(weights, 2000);
        assert!(ties <= 40, "{ties} corrections differ (only ties may)");
        assert_eq!(inloop.counters(0), idle.counters(0));
        assert_eq!(inloop.counters(0), polled.counters(0));
    }

    #[test]
    fn append_bits_at_any_offset() {
        for at in 0..16 {
            for n in 0..=16 {
                let mut dst = [0u8; 5];
                append_bits(&mut dst, at, &[0xFF, 0xFF], n);
                let ones: u64 = dst.iter().rev().fold(0, |a, &b| a << 8 | b as u64);
                let want = if n == 0 { 0 } else { ((1u64 << n) - 1) << at };
                assert_eq!(ones, want, "at {at} n {n}");
            }
        }
    }
}
