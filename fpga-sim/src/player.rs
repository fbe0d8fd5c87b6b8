//! The traffic player and the answer checker: the deterministic core of the data plane.
//!
//! No clock and no link here (quinn style): the caller passes `now` in nanoseconds and the
//! bytes of each received frame, and gets the bytes of each frame to send. So every rule
//! below is unit-tested without threads.
//!
//! Transmit (PROTOCOLS.md 2.3): frame `k` of a run is a single-packet UC RDMA WRITE ONLY
//! with immediate (0x2B) to DP_QP, PSN incremented per packet (24-bit wrap), slot
//! `k mod (DP_MAX_BUFF + 1)`, RETH VA = buffer address + slot * DP_PAGE_INC * 128, rkey =
//! DP_RKEY, DMA length = window size, immediate = `psn[19:0] << 12 | slot[11:0]`. Its payload
//! is the player RAM window with the RPC header's `request_id` = first request id + `k`, its
//! `ptp_timestamp` = send time when PLAYER_STAMP_PTP is set, and its args scrambled with
//! `scramble_args(request_id, ..)` when PLAYER_SCRAMBLE is set.
//!
//! In flight: frames from the oldest one neither answered nor timed out up to the newest.
//! At most `max_in_flight` (<= 64, <= slots) are in flight, so a slot is never reused while
//! the host may still be working on it. Closed loop is `max_in_flight == 1`.
//!
//! Receive: UC SEND ONLY (0x24, and 0x25 with its immediate ignored, PROTOCOLS.md 1.2) to the
//! peer's QP carries a CUQS response (PROTOCOLS.md 3). Each one becomes a capture record.
//! A frame neither answered within the response timeout is retired and counted
//! (`Stats::timeouts`); a late answer still gets its record.
//!
//! QEC replay ([`RunConfig::qec`], see [`crate::qec`]): frames are the plan's
//! `enqueue_syndromes` messages instead of the template (always stamped with the send time,
//! never scrambled), each shot's messages in order; framing, slots, PSN, immediate and the
//! in-flight limit are the same. Timing is a fixed syndrome cycle: the interval is the time
//! per round, and a message carrying `r` rounds is due `r` intervals after the one before it,
//! on a schedule that does not slip when a message leaves late (the syndrome cycle does not
//! wait for the decoder; a held-back message leaves as soon as the window allows and counts
//! as a stall). Closed loop is `max_in_flight == 1` and interval 0. Answers are checked by
//! [`QecPlan::check_answer`].
//!
//! Send time: each frame is built ahead ([`Player::prepare`], called by the data plane while it
//! waits: after a send, before a due time), everything but its send time and ICRC; when it is
//! sent, [`Player::poll_transmit`] writes `now` into the RPC header and updates the ICRC for
//! those 8 bytes alone (`icrc::FieldPatch`: 8 table lookups, not a hash of the frame; the
//! tables are built once per frame length and stamp place, off the send), as a hardware
//! generator stamps a frame on its way to the MAC. So the round trip a capture record measures
//! holds the frame's last step (the stamp) and nothing of its building.
//!
//! Guarantees: no allocation and no panic per frame; all scratch space is allocated in
//! [`Player::new`].

use std::sync::Arc;

use rocelink_wire::bth::Opcode;
use rocelink_wire::hsb::{capture_flags, scramble_args, CaptureRecord};
use rocelink_wire::icrc::FieldPatch;
use rocelink_wire::reth::RethRepr;
use rocelink_wire::roce::{self, Endpoints, RoceRepr};
use rocelink_wire::{ethernet, icrc, rpc, Error as WireError};

use crate::capture::CaptureRam;
use crate::qec::QecPlan;
use crate::stats::Stats;

/// Requests the player keeps in flight at most: the slots the reference transceiver posts
/// receive WQEs for (PROTOCOLS.md 2.3). The register file clamps the host's window to it.
pub const MAX_IN_FLIGHT: usize = rocelink_wire::hsb::ext::MAX_IN_FLIGHT as usize;

// RPC header offsets the player rewrites.
use rocelink_wire::rpc::{REQUEST_ID_AT, TIMESTAMP_AT};
const PSN_MASK: u32 = 0x00FF_FFFF;

/// Everything one run needs, snapshotted from the registers when the run bit is set.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Identifies the run for aborts (`PeerShared::abort_generation`).
    pub generation: u32,
    /// src = the peer, dst = the host (DP_HOST_*, DP_PACKET_UDP_PORT).
    pub endpoints: Endpoints,
    pub dest_qp: u32,
    pub rkey: u32,
    pub buffer_va: u64,
    /// Bytes between slots (DP_PAGE_INC * 128).
    pub page_stride: u64,
    /// DP_MAX_BUFF + 1, at most 4096.
    pub slots: u32,
    pub max_in_flight: usize,
    /// The player RAM window (window size bytes), starting with a CUQR header.
    pub template: Vec<u8>,
    /// The template header's arg_len (args are `template[24 .. 24 + arg_len]`).
    pub arg_len: usize,
    pub stamp_ptp: bool,
    pub scramble: bool,
    pub interval_ns: u64,
    /// Window count: frames in this run.
    pub frames: u32,
    /// The peer's QP: answers must be addressed to it.
    pub fpga_qp: u32,
    pub first_request_id: u32,
    pub response_timeout_ns: u64,
    /// Where records go; `None` when the capture is not armed.
    pub capture: Option<Arc<CaptureRam>>,
    /// QEC replay: send these messages instead of the template (`frames` of them).
    pub qec: Option<Arc<QecPlan>>,
}

/// Outcome of [`Player::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transmit {
    /// A frame of this many bytes is in the buffer: send it.
    Frame(usize),
    /// The interval has not passed yet.
    NotDue,
    /// Due, but the in-flight limit holds it back.
    Stalled,
    /// Every frame of the run has been sent.
    AllSent,
}

#[derive(Debug, Clone, Copy, Default)]
struct InFlight {
    frame: u32,
    sent_ns: u64,
    answered: bool,
}

/// Frames in flight, oldest first: a fixed ring, frame numbers consecutive.
#[derive(Debug)]
struct Window {
    ring: [InFlight; MAX_IN_FLIGHT],
    head: usize,
    len: usize,
}

impl Window {
    fn new() -> Self {
        Window { ring: [InFlight::default(); MAX_IN_FLIGHT], head: 0, len: 0 }
    }

    fn push(&mut self, frame: u32, sent_ns: u64) {
        if self.len < MAX_IN_FLIGHT {
            self.ring[(self.head + self.len) % MAX_IN_FLIGHT] = InFlight { frame, sent_ns, answered: false };
            self.len += 1;
        }
    }

    fn mark_answered(&mut self, frame: u32) {
        if self.len == 0 {
            return;
        }
        let first = self.ring[self.head].frame;
        let k = frame.wrapping_sub(first) as usize;
        if k < self.len {
            self.ring[(self.head + k) % MAX_IN_FLIGHT].answered = true;
        }
    }

    /// Drops answered and timed-out frames from the front; returns how many timed out.
    fn retire(&mut self, now: u64, timeout_ns: u64) -> u32 {
        let mut timed_out = 0;
        while self.len > 0 {
            let e = self.ring[self.head];
            if !e.answered {
                if now.saturating_sub(e.sent_ns) < timeout_ns {
                    break;
                }
                timed_out += 1;
            }
            self.head = (self.head + 1) % MAX_IN_FLIGHT;
            self.len -= 1;
        }
        timed_out
    }
}

/// One run of the player and its answer checker.
#[derive(Debug)]
pub struct Player {
    cfg: RunConfig,
    /// Frames sent so far (= number of the next frame).
    sent: u32,
    psn: u32,
    next_due_ns: u64,
    /// The frame now due was already counted as a stall.
    stall_counted: bool,
    window: Window,
    /// One bit per frame of the last [`ANSWERED_WINDOW`] sent (frame `f` at bit
    /// `f % ANSWERED_WINDOW`, cleared when `f` is sent): answered at least once. Constant
    /// memory for a run of any length; an answer to a frame older than the window is far
    /// past its response timeout and is not flagged as a duplicate.
    answered: Vec<u64>,
    /// Payload being built (room for the template and for the largest QEC message).
    payload: Vec<u8>,
    /// Args the answer to one request must echo.
    expected: Vec<u8>,
    /// The template calls `increment`: an answer carries the args each plus one
    /// (`rpc::increment`), not the args.
    increment: bool,
    /// `RoceRepr::uc_write_imm` to the host with PSN 0, a zero RETH and immediate and no
    /// payload: a frame's Repr is this with those set (building the whole Repr per frame
    /// cost store-forwarding stalls).
    write_imm: RoceRepr,
    /// The next frame, built ahead into `frame_buf` ([`Player::prepare`]).
    prepared: Option<Prepared>,
    /// Holds the prepared frame (roce::MAX_FRAME_LEN bytes).
    frame_buf: Box<[u8]>,
    /// ICRC patches for the send time, by frame length and stamp place (a run has few).
    stamp_patches: Vec<FieldPatch>,
}

/// Frames whose answers the duplicate check remembers (a multiple of 64, far above the 64 in
/// flight).
const ANSWERED_WINDOW: u32 = 1 << 16;

/// Distinct (frame length, stamp place) pairs a run keeps ICRC patches for; past them a
/// stamped frame's ICRC is hashed again (as before the patches).
const MAX_STAMP_PATCHES: usize = 64;

/// The frame built ahead (always the next one: frame number `sent`, which only
/// `poll_transmit` moves, after it took this), all but its send time and ICRC.
#[derive(Debug, Clone, Copy)]
struct Prepared {
    /// Its length, or `None` when it could not be built (it is skipped when due, counted as
    /// malformed, as before: the run moves on instead of retrying forever).
    len: Option<usize>,
    /// Where in the frame the 8-byte send time goes (`None`: not stamped).
    stamp_at: Option<usize>,
    /// Its ICRC patch for the send time in `Player::stamp_patches` (`None`: hash it again).
    patch: Option<usize>,
}

impl Player {
    /// A run starting now with `psn` as its first PSN. A configuration the register model
    /// would not produce is made safe rather than trusted: the template is padded to hold
    /// the RPC header, `arg_len` clamped to the window, the limits to 1..=64 in flight and
    /// at least one slot.
    pub fn new(mut cfg: RunConfig, psn: u32, now: u64) -> Self {
        if cfg.template.len() < rpc::HEADER_LEN {
            cfg.template.resize(rpc::HEADER_LEN, 0);
        }
        cfg.arg_len = cfg.arg_len.min(cfg.template.len() - rpc::HEADER_LEN);
        cfg.max_in_flight = cfg.max_in_flight.clamp(1, MAX_IN_FLIGHT);
        cfg.slots = cfg.slots.max(1);
        let room = cfg.qec.as_ref().map_or(0, |q| q.max_message_len()).max(cfg.template.len());
        let write_imm =
            RoceRepr::uc_write_imm(&cfg.endpoints, cfg.dest_qp, 0, RethRepr { va: 0, rkey: 0, dma_len: 0 }, 0, 0);
        let increment = rpc::Request::new_unchecked(&cfg.template[..]).function_id() == rpc::function_id::INCREMENT;
        Player {
            write_imm,
            payload: vec![0; room],
            expected: vec![0; cfg.arg_len],
            increment,
            answered: vec![0; ANSWERED_WINDOW as usize / 64],
            cfg,
            sent: 0,
            psn: psn & PSN_MASK,
            next_due_ns: now,
            stall_counted: false,
            window: Window::new(),
            prepared: None,
            frame_buf: vec![0; roce::MAX_FRAME_LEN].into_boxed_slice(),
            stamp_patches: Vec::new(),
        }
    }

    pub fn config(&self) -> &RunConfig {
        &self.cfg
    }

    /// The PSN the next frame gets (the data plane carries it into the next run).
    pub fn psn(&self) -> u32 {
        self.psn
    }

    pub fn frames_sent(&self) -> u32 {
        self.sent
    }

    /// Every frame was sent and each was answered or timed out.
    pub fn is_done(&self) -> bool {
        self.sent >= self.cfg.frames && self.window.len == 0
    }

    /// Retires timed-out frames (counted in `stats.timeouts`); call before `poll_transmit`
    /// with the same `now`.
    pub fn expire(&mut self, now: u64, stats: &Stats) {
        let lost = self.window.retire(now, self.cfg.response_timeout_ns);
        if lost > 0 {
            stats.timeouts.fetch_add(lost, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn request_id(&self, frame: u32) -> u32 {
        self.cfg.first_request_id.wrapping_add(frame)
    }

    /// Builds the next frame ahead of its send, when it is not built yet: everything but its
    /// send time and ICRC (module docs). Cheap when it is; the data plane calls it while it
    /// waits, so that [`Player::poll_transmit`] only stamps.
    pub fn prepare(&mut self) {
        if self.prepared.is_some() || self.sent >= self.cfg.frames {
            return;
        }
        let frame = self.sent;
        let request_id = self.request_id(frame);
        let stamped = self.cfg.qec.is_some() || self.cfg.stamp_ptp;
        let len = match &self.cfg.qec {
            // The buffer holds the largest message (Player::new), so this never fails; if it
            // did, the frame is skipped when due like one that cannot be emitted.
            Some(plan) => plan.write_message(frame, request_id, 0, &mut self.payload),
            None => {
                self.build_from_template(request_id, 0);
                Some(self.cfg.template.len())
            }
        };
        let Some(payload) = len.and_then(|n| self.payload.get(..n)) else {
            self.prepared = Some(Prepared { len: None, stamp_at: None, patch: None });
            return;
        };
        let slot = frame % self.cfg.slots;
        let reth = RethRepr {
            va: self.cfg.buffer_va.wrapping_add(u64::from(slot).wrapping_mul(self.cfg.page_stride)),
            rkey: self.cfg.rkey,
            dma_len: payload.len() as u32,
        };
        let imm = ((self.psn & 0xF_FFFF) << 12) | (slot & 0xFFF);
        // = RoceRepr::uc_write_imm(&endpoints, dest_qp, psn, reth, imm, payload.len()).
        let mut repr = self.write_imm;
        repr.bth.psn = self.psn & PSN_MASK;
        repr.reth = Some(reth);
        repr.immdt = Some(imm);
        repr.set_payload_len(payload.len());
        let len = repr.emit(payload, &mut self.frame_buf).ok();
        // The payload's first byte: the frame less its ICRC, pad and payload.
        let stamp_at = len
            .filter(|_| stamped && payload.len() >= TIMESTAMP_AT + 8)
            .map(|n| n - icrc::LEN - usize::from(repr.bth.pad_count) - payload.len() + TIMESTAMP_AT);
        // the ICRC patch for this length and stamp place, made now (off the send) if new
        let patch = len.zip(stamp_at).and_then(|(n, at)| {
            let (ip_len, ip_at) = (n - ethernet::HEADER_LEN, at - ethernet::HEADER_LEN);
            self.stamp_patches.iter().position(|p| p.fits(ip_len, ip_at)).or_else(|| {
                if self.stamp_patches.len() >= MAX_STAMP_PATCHES {
                    return None;
                }
                self.stamp_patches.push(FieldPatch::new(&self.frame_buf[ethernet::HEADER_LEN..n], ip_at)?);
                Some(self.stamp_patches.len() - 1)
            })
        });
        self.prepared = Some(Prepared { len, stamp_at, patch });
    }

    /// Puts the next frame into `out` (at least its length, `roce::MAX_FRAME_LEN` will do) if
    /// one is due: the frame built ahead ([`Player::prepare`], done now if it was not) with
    /// `now`, the send time, written into it and its ICRC computed.
    pub fn poll_transmit(&mut self, now: u64, stats: &Stats, out: &mut [u8]) -> Transmit {
        if self.sent >= self.cfg.frames {
            return Transmit::AllSent;
        }
        if now < self.next_due_ns {
            return Transmit::NotDue;
        }
        if self.window.len >= self.cfg.max_in_flight {
            if !self.stall_counted {
                Stats::bump(&stats.stalls);
                self.stall_counted = true;
            }
            return Transmit::Stalled;
        }
        self.stall_counted = false;

        self.prepare();
        let p = self.prepared.take();
        let frame = self.sent;
        if let Some(plan) = &self.cfg.qec {
            plan.on_sent(frame, now, &stats.qec);
        }
        // The frame counts as sent even if it cannot be built (a buffer the caller made too
        // small): the run then moves on instead of retrying forever.
        let emitted = match p.and_then(|p| p.len.map(|n| (n, p.stamp_at, p.patch))) {
            Some((n, stamp_at, patch)) if n <= out.len() => {
                let f = &mut self.frame_buf[..n];
                let ok = match stamp_at {
                    Some(at) if at + 8 <= n && at >= ethernet::HEADER_LEN => {
                        // the prepared frame's ICRC is right for its bytes (emit computed it):
                        // patched for the send time, or computed again without a patch
                        let ip = &mut f[ethernet::HEADER_LEN..];
                        let ip_at = at - ethernet::HEADER_LEN;
                        match patch.and_then(|i| self.stamp_patches.get(i)) {
                            Some(p) => p.write(ip, now.to_le_bytes()).is_ok(),
                            None => {
                                ip[ip_at..ip_at + 8].copy_from_slice(&now.to_le_bytes());
                                icrc::fill(ip).is_ok()
                            }
                        }
                    }
                    Some(_) => false,
                    None => true,
                };
                out[..n].copy_from_slice(f);
                ok.then_some(n)
            }
            _ => None,
        };
        self.answered[(frame % ANSWERED_WINDOW) as usize / 64] &= !(1u64 << (frame % 64));
        self.sent += 1;
        self.psn = (self.psn + 1) & PSN_MASK;
        // A fixed schedule: the next frame is due an interval after this one's due time, not
        // after its send, so a frame that left late (held by the window) does not delay the
        // ones after it, and the offered rate is the one asked for.
        self.next_due_ns = match &self.cfg.qec {
            // Fixed syndrome cycle: the next message leaves when its last round is measured.
            Some(plan) => {
                self.next_due_ns.saturating_add(u64::from(plan.rounds_of(frame.wrapping_add(1))) * self.cfg.interval_ns)
            }
            None => self.next_due_ns.saturating_add(self.cfg.interval_ns),
        };
        self.window.push(frame, now);
        match emitted {
            Some(len) => Transmit::Frame(len),
            None => {
                Stats::bump(&stats.malformed);
                Transmit::NotDue
            }
        }
    }

    /// The template with this frame's request_id, send time (PLAYER_STAMP_PTP) and
    /// scrambled args (PLAYER_SCRAMBLE), into the first `template.len()` payload bytes.
    fn build_from_template(&mut self, request_id: u32, now: u64) {
        let t = self.cfg.template.len();
        let payload = &mut self.payload[..t];
        payload.copy_from_slice(&self.cfg.template);
        payload[REQUEST_ID_AT..REQUEST_ID_AT + 4].copy_from_slice(&request_id.to_le_bytes());
        if self.cfg.stamp_ptp {
            payload[TIMESTAMP_AT..TIMESTAMP_AT + 8].copy_from_slice(&now.to_le_bytes());
        }
        if self.cfg.scramble {
            scramble_args(request_id, &mut payload[rpc::HEADER_LEN..rpc::HEADER_LEN + self.cfg.arg_len]);
        }
    }

    /// Handles one received frame that arrived at `now`.
    ///
    /// `stats.received` is added to as a single-writer counter ([`Stats::bump_in_run`]):
    /// only the thread that runs this player may write it meanwhile.
    pub fn on_frame(&mut self, frame: &[u8], now: u64, stats: &Stats) {
        let Some(payload) = accept_answer(frame, self.cfg.fpga_qp, Some(self.cfg.endpoints.dst_ip), stats) else {
            return;
        };
        // Single writer: on_frame runs on the data-plane thread during a run only.
        Stats::bump_in_run(&stats.received);
        let mut record = CaptureRecord {
            request_id: 0,
            echoed_timestamp: 0,
            arrival_timestamp: now,
            flags: 0,
            result_len: 0,
            rpc_status: 0,
        };
        match rpc::ResponseRepr::parse(payload) {
            Ok(h) => {
                record.request_id = h.request_id;
                record.echoed_timestamp = h.ptp_timestamp;
                record.result_len = h.result_len;
                record.rpc_status = h.status;
                record.flags = capture_flags::HEADER_OK | self.check_answer(&h, payload, now, stats);
            }
            Err(_) => {
                // Keep what we can tell: the id field, where the bytes reach it.
                Stats::bump(&stats.malformed);
                if let Some(b) = payload.get(REQUEST_ID_AT..REQUEST_ID_AT + 4) {
                    record.request_id = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
        }
        if let Some(c) = &self.cfg.capture {
            // A full ring overwrites its oldest record (the host reads it during the run).
            let _ = c.push(&record);
        }
    }

    /// Flags beyond HEADER_OK for a parsed answer; marks its frame answered.
    fn check_answer(&mut self, h: &rpc::ResponseRepr, payload: &[u8], now: u64, stats: &Stats) -> u32 {
        let frame = h.request_id.wrapping_sub(self.cfg.first_request_id);
        if frame >= self.sent {
            Stats::bump(&stats.unexpected);
            return 0;
        }
        let mut flags = 0;
        if self.sent - frame <= ANSWERED_WINDOW {
            let word = &mut self.answered[(frame % ANSWERED_WINDOW) as usize / 64];
            let bit = 1u64 << (frame % 64);
            if *word & bit != 0 {
                flags |= capture_flags::DUPLICATE;
            }
            *word |= bit;
        }
        self.window.mark_answered(frame);
        if let Some(plan) = &self.cfg.qec {
            if flags & capture_flags::DUPLICATE != 0 {
                // Counted once, on the first answer.
                return flags | if plan.is_final(frame) { capture_flags::FINAL_ROUND } else { 0 };
            }
            return flags | plan.check_answer(frame, h, payload, now, &stats.qec);
        }

        let n = self.cfg.arg_len;
        let result = payload.get(rpc::HEADER_LEN..rpc::HEADER_LEN + n);
        if h.status == rpc::status::OK && h.result_len as usize == n {
            if let Some(result) = result {
                if result == self.expected_args(h.request_id) {
                    flags |= capture_flags::PAYLOAD_OK;
                }
            }
        }
        flags
    }

    /// The result the answer to `request_id` must carry: the args sent with it, recomputed
    /// from the template (no allocation), each plus one for `increment`.
    fn expected_args(&mut self, request_id: u32) -> &[u8] {
        let args = &self.cfg.template[rpc::HEADER_LEN..rpc::HEADER_LEN + self.cfg.arg_len];
        if !self.cfg.scramble && !self.increment {
            return args;
        }
        self.expected.copy_from_slice(args);
        if self.cfg.scramble {
            scramble_args(request_id, &mut self.expected);
        }
        if self.increment {
            rpc::increment(&mut self.expected);
        }
        &self.expected
    }
}

/// Parses a received frame and returns the RPC payload of a SEND to `qp` from `host` (the
/// IPv4 address in DP_HOST_IP; `None`: no run, any source); anything else is counted
/// (PROTOCOLS.md 1.2: unexpected traffic is a counted drop, never a crash; TVer other than 0
/// and a source other than the host are dropped as a ConnectX drops them, IBTA 9.6).
pub fn accept_answer<'a>(frame: &'a [u8], qp: u32, host: Option<[u8; 4]>, stats: &Stats) -> Option<&'a [u8]> {
    match roce::parse_frame(frame) {
        Err(WireError::BadIcrc) => {
            Stats::bump(&stats.icrc_failures);
            None
        }
        Err(_) => {
            Stats::bump(&stats.malformed);
            None
        }
        Ok(f) if f.repr.bth.tver != 0 => {
            Stats::bump(&stats.bad_tver);
            None
        }
        Ok(f) if host.is_some_and(|h| h != f.repr.ipv4.src_addr) => {
            Stats::bump(&stats.wrong_source);
            None
        }
        Ok(f) => {
            let send = matches!(f.repr.bth.opcode, Opcode::UcSendOnly | Opcode::UcSendOnlyImm);
            if send && f.repr.bth.dest_qp == qp {
                Some(f.payload)
            } else {
                Stats::bump(&stats.unexpected);
                None
            }
        }
    }
}

/// Counts a frame that arrived while no run is active.
pub fn count_idle_frame(frame: &[u8], qp: u32, stats: &Stats) {
    if accept_answer(frame, qp, None, stats).is_some() {
        Stats::bump(&stats.unexpected);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocelink_wire::hsb::capture_flags::{DUPLICATE, HEADER_OK, PAYLOAD_OK};

    const HOST_QP: u32 = 0xA7;
    const PEER_QP: u32 = 2;
    const ARGS: usize = 20;

    fn endpoints() -> Endpoints {
        Endpoints {
            src_mac: [2, 0, 0, 0, 0, 2],
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_ip: [127, 0, 0, 2],
            dst_ip: [127, 0, 0, 1],
            src_port: 12288,
            dst_port: roce::UDP_PORT,
        }
    }

    /// The host's end: where the answers come from (to the RoCE port).
    fn host_endpoints() -> Endpoints {
        Endpoints { src_port: 49152, dst_port: roce::UDP_PORT, ..endpoints().reversed() }
    }

    fn config(frames: u32, max_in_flight: usize, slots: u32) -> RunConfig {
        let args: Vec<u8> = (0..ARGS).map(|i| i as u8).collect();
        let template = rpc::request(rpc::function_id::ECHO, 0, 0, &args);
        RunConfig {
            generation: 1,
            endpoints: endpoints(),
            dest_qp: HOST_QP,
            rkey: 0x55,
            buffer_va: 0x1_0000_0000,
            page_stride: 4096,
            slots,
            max_in_flight,
            template,
            arg_len: ARGS,
            stamp_ptp: true,
            scramble: true,
            interval_ns: 0,
            frames,
            fpga_qp: PEER_QP,
            first_request_id: 1000,
            response_timeout_ns: 1_000,
            capture: Some(Arc::new(CaptureRam::with_capacity(frames as usize + 8))),
            qec: None,
        }
    }

    /// Sends one frame at `now`; returns (psn, imm, va, request_id, args).
    fn send(p: &mut Player, now: u64, stats: &Stats) -> (u32, u32, u64, u32, Vec<u8>) {
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        let Transmit::Frame(n) = p.poll_transmit(now, stats, &mut buf) else { panic!("no frame due") };
        let f = roce::parse_frame(&buf[..n]).expect("our frames parse");
        assert_eq!(f.repr.bth.opcode, Opcode::UcWriteOnlyImm);
        assert_eq!(f.repr.bth.dest_qp, HOST_QP);
        assert_eq!(f.repr.bth.pkey, 0xFFFF);
        let reth = f.repr.reth.expect("RETH");
        assert_eq!((reth.rkey, reth.dma_len as usize), (0x55, rpc::HEADER_LEN + ARGS));
        let req = rpc::RequestRepr::parse(f.payload).expect("CUQR");
        assert_eq!(req.ptp_timestamp, now, "stamped at transmission");
        (f.repr.bth.psn, f.repr.immdt.expect("imm"), reth.va, req.request_id, f.payload[rpc::HEADER_LEN..].to_vec())
    }

    /// An echo answer frame.
    fn answer(qp: u32, id: u32, args: &[u8], corrupt_magic: bool) -> Vec<u8> {
        let mut payload = rpc::response(0, id, 7, args);
        if corrupt_magic {
            payload[0] ^= 1;
        }
        send_only(qp, &payload)
    }

    /// A SEND ONLY of `payload` from the host to `qp`.
    fn send_only(qp: u32, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        let n = RoceRepr::uc_send_only(&host_endpoints(), qp, 0, payload.len()).emit(payload, &mut buf).expect("emit");
        buf.truncate(n);
        buf
    }

    #[test]
    fn frames_follow_protocols_2_3() {
        let stats = Stats::default();
        let mut p = Player::new(config(6, 64, 4), PSN_MASK - 1, 0);
        for k in 0..6u32 {
            let (psn, imm, va, id, args) = send(&mut p, 10 + u64::from(k), &stats);
            let slot = k % 4;
            assert_eq!(psn, (PSN_MASK - 1 + k) & PSN_MASK, "24-bit wrap");
            assert_eq!(imm, ((psn & 0xF_FFFF) << 12) | slot);
            assert_eq!(va, 0x1_0000_0000 + u64::from(slot) * 4096);
            assert_eq!(id, 1000 + k);
            let mut expected: Vec<u8> = (0..ARGS as u8).collect();
            scramble_args(id, &mut expected);
            assert_eq!(args, expected);
        }
        assert_eq!(p.poll_transmit(100, &stats, &mut [0u8; 64]), Transmit::AllSent);
    }

    #[test]
    fn frames_built_ahead_carry_the_send_time_and_a_good_icrc() {
        // The data plane builds each frame right after the last send and stamps it when due:
        // the stamp is the send time, not the build time, and the ICRC covers it.
        let stats = Stats::default();
        let mut ahead = Player::new(config(5, 64, 4), 7, 0);
        let mut inline = Player::new(config(5, 64, 4), 7, 0);
        for k in 0..5u64 {
            ahead.prepare();
            ahead.prepare(); // idempotent: still frame k
            let now = 1_000_000 * (k + 1) + 3;
            if k == 2 {
                // no ICRC patch for this frame: its ICRC is hashed again, to the same bytes
                inline.prepare();
                inline.stamp_patches.clear();
            }
            let a = send(&mut ahead, now, &stats);
            let b = send(&mut inline, now, &stats);
            assert_eq!(a, b, "frame {k}: built ahead or at its send, the same frame");
        }
        assert_eq!(stats.snapshot().malformed, 0);
        assert_eq!(ahead.stamp_patches.len(), 1, "one frame length, one stamp place: one patch");
        ahead.prepare(); // nothing left to build
        assert_eq!(ahead.poll_transmit(u64::MAX, &stats, &mut [0u8; 64]), Transmit::AllSent);
    }

    #[test]
    fn a_frame_too_long_for_the_callers_buffer_is_skipped_and_counted() {
        let stats = Stats::default();
        let mut p = Player::new(config(2, 64, 4), 0, 0);
        p.prepare();
        assert_eq!(p.poll_transmit(5, &stats, &mut [0u8; 64]), Transmit::NotDue);
        assert_eq!(stats.snapshot().malformed, 1);
        // the run moves on: the next frame is the second, stamped and whole
        let (psn, _, _, id, _) = send(&mut p, 6, &stats);
        assert_eq!((psn, id), (1, 1001));
    }

    #[test]
    fn in_flight_limit_stalls_once_and_timeouts_free_slots() {
        let stats = Stats::default();
        let mut p = Player::new(config(3, 2, 64), 0, 0);
        send(&mut p, 0, &stats);
        send(&mut p, 1, &stats);
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        assert_eq!(p.poll_transmit(2, &stats, &mut buf), Transmit::Stalled);
        assert_eq!(p.poll_transmit(3, &stats, &mut buf), Transmit::Stalled);
        assert_eq!(stats.snapshot().stalls, 1, "one stall per held-back frame");
        // Frame 0 times out at 1000 ns: its slot is free again.
        p.expire(1_000, &stats);
        send(&mut p, 1_000, &stats);
        assert!(!p.is_done());
        p.expire(5_000, &stats);
        assert!(p.is_done(), "all sent, all timed out");
    }

    #[test]
    fn closed_loop_waits_for_the_answer() {
        let stats = Stats::default();
        let mut p = Player::new(config(2, 1, 64), 0, 0);
        let (_, _, _, id, args) = send(&mut p, 0, &stats);
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        assert_eq!(p.poll_transmit(1, &stats, &mut buf), Transmit::Stalled);
        p.on_frame(&answer(PEER_QP, id, &args, false), 5, &stats);
        p.expire(6, &stats);
        let (_, _, _, id, args) = send(&mut p, 6, &stats);
        p.on_frame(&answer(PEER_QP, id, &args, false), 9, &stats);
        p.expire(9, &stats);
        assert!(p.is_done());
        let cap = p.config().capture.clone().expect("capture");
        assert_eq!(cap.count(), 2);
        let r = cap.record(1).expect("record");
        assert_eq!(
            (r.request_id, r.flags, r.arrival_timestamp, r.echoed_timestamp),
            (1001, PAYLOAD_OK | HEADER_OK, 9, 7)
        );
    }

    #[test]
    fn an_increment_answer_must_carry_the_args_plus_one() {
        let stats = Stats::default();
        let mut cfg = config(2, 1, 64);
        rpc::Request::new_unchecked(&mut cfg.template[..]).set_function_id(rpc::function_id::INCREMENT);
        let mut p = Player::new(cfg, 0, 0);
        // the echo of the args is wrong for `increment`
        let (_, _, _, id, args) = send(&mut p, 0, &stats);
        p.on_frame(&answer(PEER_QP, id, &args, false), 5, &stats);
        p.expire(6, &stats);
        let (_, _, _, id, mut args) = send(&mut p, 6, &stats);
        rpc::increment(&mut args);
        p.on_frame(&answer(PEER_QP, id, &args, false), 9, &stats);
        let cap = p.config().capture.clone().expect("capture");
        let flags: Vec<u32> = (0..2).map(|i| cap.record(i).expect("record").flags).collect();
        assert_eq!(flags, [HEADER_OK, HEADER_OK | PAYLOAD_OK]);
    }

    #[test]
    fn answers_are_checked_and_strays_counted() {
        let stats = Stats::default();
        let mut p = Player::new(config(4, 64, 64), 0, 0);
        let sent: Vec<_> = (0..3).map(|k| send(&mut p, k, &stats)).collect();
        let (_, _, _, id0, args0) = &sent[0];
        let (_, _, _, id1, args1) = &sent[1];
        let (_, _, _, id2, _) = &sent[2];
        p.on_frame(&answer(PEER_QP, *id0, args0, false), 10, &stats);
        p.on_frame(&answer(PEER_QP, *id0, args0, false), 11, &stats); // duplicate
        let mut wrong = args1.clone();
        wrong[0] ^= 1;
        p.on_frame(&answer(PEER_QP, *id1, &wrong, false), 12, &stats); // wrong bytes
        p.on_frame(&answer(PEER_QP, *id2, &args1[..ARGS - 1], false), 13, &stats); // short result
        p.on_frame(&answer(PEER_QP, 1003, args0, false), 14, &stats); // id not sent yet
        p.on_frame(&answer(PEER_QP, *id0, args0, true), 15, &stats); // bad magic
        p.on_frame(&answer(9, *id0, args0, false), 16, &stats); // other QP
        let mut bad_icrc = answer(PEER_QP, *id0, args0, false);
        let last = bad_icrc.len() - 1;
        bad_icrc[last] ^= 0xFF;
        p.on_frame(&bad_icrc, 17, &stats);
        p.on_frame(&[0u8; 10], 18, &stats); // not RoCE at all

        let cap = p.config().capture.clone().expect("capture");
        let flags: Vec<(u32, u32)> = (0..cap.count() as usize)
            .map(|i| cap.record(i).expect("record"))
            .map(|r| (r.request_id, r.flags))
            .collect();
        assert_eq!(
            flags,
            [
                (1000, PAYLOAD_OK | HEADER_OK),
                (1000, PAYLOAD_OK | HEADER_OK | DUPLICATE),
                (1001, HEADER_OK),
                (1002, HEADER_OK),
                (1003, HEADER_OK),
                (1000, 0),
            ]
        );
        let s = stats.snapshot();
        assert_eq!((s.received, s.unexpected, s.malformed, s.icrc_failures), (6, 2, 2, 1));
    }

    #[test]
    fn nonsense_config_is_made_safe() {
        let stats = Stats::default();
        let mut cfg = config(3, 0, 0);
        cfg.template.truncate(3);
        cfg.arg_len = 1000;
        let mut p = Player::new(cfg, 0, 0);
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        assert!(matches!(p.poll_transmit(0, &stats, &mut buf), Transmit::Frame(_)));
        assert_eq!(p.poll_transmit(1, &stats, &mut buf), Transmit::Stalled, "at least 1 in flight");
        p.on_frame(&answer(PEER_QP, 1000, &[], false), 2, &stats);
        p.expire(2, &stats);
        assert!(
            matches!(p.poll_transmit(3, &stats, &mut [0u8; 8]), Transmit::NotDue),
            "tiny buffer: skipped, no panic"
        );
        assert_eq!(stats.snapshot().malformed, 1);
    }

    /// An answer with `result` bytes and `status`.
    fn qec_answer(id: u32, status: i32, result: &[u8]) -> Vec<u8> {
        send_only(PEER_QP, &rpc::response(status, id, 7, result))
    }

    #[test]
    fn qec_messages_follow_the_syndrome_cycle_and_answers_are_checked() {
        use crate::qec::QecReplay;
        use rocelink_wire::hsb::capture_flags::{FINAL_ROUND, LOGICAL_OK};
        use rocelink_wire::qec::{emit_corrections, EnqueueSyndromes};
        let stats = Stats::default();
        // Rounds of 2, 3 and 1 detectors; 2 shots; true observables [1, 0].
        let replay = QecReplay::new(vec![2, 3, 1], 1, vec![0b10_0101, 0b01_1010], vec![1, 0], None).expect("replay");
        let plan = Arc::new(replay).plan(2);
        let mut cfg = config(4, 64, 64);
        cfg.frames = plan.frames(2);
        cfg.qec = Some(Arc::new(plan));
        cfg.interval_ns = 100;
        cfg.scramble = true; // ignored in QEC mode
        let mut p = Player::new(cfg, 0, 0);
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        let mut sent = Vec::new();
        let mut tx = |p: &mut Player, now: u64| match p.poll_transmit(now, &stats, &mut buf) {
            Transmit::Frame(n) => {
                let f = roce::parse_frame(&buf[..n]).expect("parses");
                assert_eq!(f.repr.reth.map(|r| r.dma_len as usize), Some(f.payload.len()));
                let req = rpc::RequestRepr::parse(f.payload).expect("CUQR");
                assert_eq!(req.ptp_timestamp, now);
                let args = &f.payload[rpc::HEADER_LEN..];
                let m = EnqueueSyndromes::new_checked(args).expect("enqueue_syndromes");
                sent.push((req.request_id, m.counter(), m.num_syndromes(), m.syndromes()[0]));
                true
            }
            _ => false,
        };
        // Message 0 (rounds 0-1) at once; message 1 (round 2) one interval later; message 2
        // (next shot, rounds 0-1) two intervals after that, even though message 1 left late.
        assert!(tx(&mut p, 0));
        assert!(!tx(&mut p, 99));
        assert!(tx(&mut p, 150));
        assert!(!tx(&mut p, 299));
        assert!(tx(&mut p, 300));
        assert!(tx(&mut p, 400));
        assert!(!tx(&mut p, 10_000), "all sent");
        assert_eq!(sent, [(1000, 0, 5, 0b0_0101), (1001, 2, 1, 1), (1002, 0, 5, 0b1_1010), (1003, 2, 1, 0)]);
        let s = stats.qec.snapshot();
        assert_eq!((s.shots_sent, s.rounds_sent, s.first_send_ns, s.last_send_ns), (2, 6, 0, 400));

        let mut correction = [0u8; 24];
        emit_corrections(1, 1, &mut correction).expect("fits");
        p.on_frame(&qec_answer(1000, 0, &[]), 500, &stats);
        p.on_frame(&qec_answer(1001, 0, &correction), 510, &stats);
        p.on_frame(&qec_answer(1001, 0, &correction), 511, &stats); // duplicate: not recounted
        p.on_frame(&qec_answer(1002, rpc::status::BUSY, &[]), 520, &stats);
        p.expire(520, &stats);
        p.expire(2_000, &stats);
        assert!(p.is_done());
        let cap = p.config().capture.clone().expect("capture");
        let flags: Vec<u32> = (0..cap.count() as usize).map(|i| cap.record(i).expect("record").flags).collect();
        assert_eq!(
            flags,
            [
                HEADER_OK | PAYLOAD_OK,
                HEADER_OK | PAYLOAD_OK | FINAL_ROUND | LOGICAL_OK,
                HEADER_OK | FINAL_ROUND | DUPLICATE,
                HEADER_OK,
            ]
        );
        let s = stats.qec.snapshot();
        assert_eq!((s.shots_decoded, s.logical_errors, s.last_correction_ns), (1, 0, 510));
        assert_eq!((s.status[0], s.status[5]), (1, 1));
        assert_eq!(stats.snapshot().timeouts, 1, "message 1003 never answered");
    }

    #[test]
    fn interval_spaces_frames() {
        let stats = Stats::default();
        let mut cfg = config(2, 64, 64);
        cfg.interval_ns = 100;
        let mut p = Player::new(cfg, 0, 0);
        send(&mut p, 0, &stats);
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        assert_eq!(p.poll_transmit(99, &stats, &mut buf), Transmit::NotDue);
        send(&mut p, 100, &stats);
    }

    #[test]
    fn a_late_frame_does_not_move_the_schedule() {
        let stats = Stats::default();
        let mut cfg = config(4, 64, 64);
        cfg.interval_ns = 100;
        let mut p = Player::new(cfg, 0, 0);
        send(&mut p, 0, &stats);
        // frame 1, due at 100, leaves at 250; frame 2 was due at 200: it leaves at once
        send(&mut p, 250, &stats);
        send(&mut p, 250, &stats);
        let mut buf = vec![0u8; roce::MAX_FRAME_LEN];
        assert_eq!(p.poll_transmit(299, &stats, &mut buf), Transmit::NotDue, "frame 3 is due at 300");
        send(&mut p, 300, &stats);
    }
}
