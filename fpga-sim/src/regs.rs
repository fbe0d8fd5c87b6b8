//! The peer's register model: every register a host reaches over ECB (PROTOCOLS.md 2.1,
//! 2.2, and the rocelink extensions of `rocelink_wire::hsb::ext`).
//!
//! Guarantees:
//! - Deterministic and free of I/O: a read or write touches only this struct and the atomics
//!   it shares with the data plane ([`PeerShared`]). Starting the player is returned as an
//!   [`Effect`] for the caller (the ECB server) to deliver.
//! - Total: every address either names a register or is [`InvalidAddress`]; nothing panics.
//! - The HSB address map by region (PROTOCOLS.md 2.2, `hsb::reg::REGIONS`): "a write
//!   anywhere inside a region is stored and read back; outside every region the reply is
//!   status 0x03". Registers with a meaning here keep it; every other word of a region (the
//!   APB sequencer RAM, sensor-TX enable, the control/event words 0x200-0x22C, ...) is kept
//!   in a sparse store and read back. The store holds [`STORED_WORDS`] non-zero words at
//!   most; past that a write of a new non-zero word is refused with 0x03 (writing 0 frees a
//!   word, and a word never written reads 0).
//! - Address bits 1:0 are ignored (PROTOCOLS.md 2.1, "address bits 1:0 are ignored").
//! - Read-only registers (version, date, sync status, capture status/count/RAM, stats, QEC
//!   counters, PLAYER_START_ERROR) accept writes with status OK and ignore them, as an APB
//!   write to a read-only register of the RTL completes without error and changes nothing;
//!   a read returns the live value.
//! - A player start that cannot play is refused: the run bit reads 0,
//!   `ext::PLAYER_START_ERROR` and its detail words say why ([`PlayerRefusal`]), and the
//!   ECB server answers the write with `Status::Refused` (the convention is defined at
//!   `hsb::ext::PLAYER_START_ERROR`).
//!
//! Conventions this peer defines (the host side follows them):
//! - Player RAM holds bytes; word `i` at `PLAYER_RAM + 4 * i` is bytes `4i .. 4i + 4` in
//!   **little-endian** order, so the little-endian RPC header fields (PROTOCOLS.md 3) read as
//!   their values (word 0 of a request template is `0x4355_5152`).
//! - DP_HOST_MAC_HIGH holds MAC bytes 0-1 (`mac[0] << 8 | mac[1]`), DP_HOST_MAC_LOW bytes
//!   2-5 (`mac[2] << 24 | .. | mac[5]`); DP_HOST_IP holds the address big-endian
//!   (`a.b.c.d` = `a << 24 | b << 16 | c << 8 | d`), as HSB hosts write them.
//! - VP `n` is enabled when bit `n` of DP_VP_MASK of either HIF block is set; the player
//!   uses the lowest enabled VP and the UDP source port of the HIF block that enabled it.
//! - QEC replay (`ext::QEC_*`): with shots loaded ([`Registers::with_qec`]) QEC_ENABLE is
//!   set at power-on, and the run bit then plays PLAYER_WINDOW_COUNT shots of
//!   QEC_MESSAGES_PER_SHOT messages each: the player RAM template, PLAYER_WINDOW_SIZE and the
//!   STAMP_PTP / SCRAMBLE bits are not used (every message is stamped), and the capture
//!   holds one record per message. Clearing QEC_ENABLE gives template runs back. The
//!   messages are laid out when the run bit is set, not per packet.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use rocelink_wire::hsb::{ext, reg, PlayerRefusal, PLAYER_CLOCK_HZ};
use rocelink_wire::roce::{Endpoints, PMTU};
use rocelink_wire::rpc;

use crate::capture::{self, CaptureRam};
use crate::player::{RunConfig, MAX_IN_FLIGHT};
use crate::qec::{QecPlan, QecReplay};
use crate::stats::Stats;

/// What HSB_IP_VERSION reads (hosts need at least `MIN_ROCE_IP_VERSION` = 0x2602).
pub const IP_VERSION: u32 = 0x2607;
/// What FPGA_DATE reads (BCD date of this model).
pub const FPGA_DATE: u32 = 0x2025_1130;
/// Player RAM size: the frame template.
pub const PLAYER_RAM_BYTES: usize = 64 * 1024;
/// The immediate carries 12 bits of slot number (PROTOCOLS.md 2.3).
pub const MAX_SLOTS: u32 = 1 << 12;
/// Spare capture records beyond the window count, for duplicates and strays.
const CAPTURE_SLACK: usize = 64;

/// VP blocks of the VP region (PROTOCOLS.md 2.2: "64 blocks of 0x40"), all stored.
const VP_BLOCKS: u32 = 64;
/// VPs a DP_VP_MASK can enable (its 32 bits).
const VP_ENABLE_BITS: u32 = 32;
const HIF_COUNT: u32 = 2;
/// Non-zero words the sparse store of region words holds at most (a bound on what a host
/// can make the peer allocate).
pub const STORED_WORDS: usize = 1 << 16;
const PTP_FIRST: u32 = 0x104;
const PTP_LAST: u32 = 0x11C;
const PTP_WORDS: usize = ((PTP_LAST - PTP_FIRST) / 4 + 1) as usize;
/// Words of a VP block (0x40 bytes).
const VP_WORDS: usize = 16;
/// Words 0x00-0x0C of a HIF block (the registers of PROTOCOLS.md 2.2 and word 0).
const HIF_WORDS: usize = 4;
const STAT_WORDS: u32 = 7;

/// The address is outside every region (or the sparse store is full): ECB status 0x03.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidAddress;

/// What a write asks of the world outside the register model.
#[derive(Debug)]
pub enum Effect {
    None,
    /// The reset bit: the caller resets the ECB latched sequence and sends no reply.
    Reset,
    /// The run bit: hand this to the data plane.
    Start(Box<RunConfig>),
    /// The run bit was set but the configuration cannot play (PLAYER_START_ERROR says why).
    Refused(PlayerRefusal),
}

/// State shared between the ECB thread and the data-plane thread. Every field documents
/// its writer and ordering.
#[derive(Debug, Default)]
pub struct PeerShared {
    pub stats: Stats,
    /// True from the run bit until the run ends. Set by the ECB thread before it sends the
    /// run to the data plane; cleared by the data plane (Release) after `done`.
    pub running: AtomicBool,
    /// CAPTURE_STATUS done bit. Cleared by the ECB thread (arm, start, reset); set by the
    /// data plane (Release) after its last capture record was published.
    pub done: AtomicBool,
    /// Generation of the most recent run the ECB thread started.
    pub generation: AtomicU32,
    /// A run whose generation equals this stops. Written by the ECB thread (run bit cleared,
    /// reset); polled by the data plane (Relaxed: it publishes nothing).
    pub abort_generation: AtomicU32,
    /// Set by `FpgaSim::stop`: every thread exits.
    pub shutdown: AtomicBool,
}

/// The peer's identity on the wire (fixed at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerIdentity {
    pub mac: [u8; 6],
    pub ip: [u8; 4],
    /// Power-on value of `ext::PLAYER_FPGA_QP`.
    pub qp: u32,
}

#[derive(Debug, Clone, Copy)]
struct PlayerRegs {
    enable: u32,
    interval: u32,
    window_size: u32,
    window_count: u32,
    max_outstanding: u32,
    fpga_qp: u32,
    first_request_id: u32,
    response_timeout_us: u32,
}

impl PlayerRegs {
    fn power_on(qp: u32) -> Self {
        PlayerRegs {
            enable: 0,
            interval: 0,
            window_size: 0,
            window_count: 0,
            max_outstanding: 0,
            fpga_qp: qp,
            first_request_id: 0,
            response_timeout_us: ext::DEFAULT_RESPONSE_TIMEOUT_US,
        }
    }
}

/// A decoded register address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reg {
    Reset,
    Reset8,
    IpVersion,
    FpgaDate,
    Ptp(usize),
    PtpSyncStat,
    Vp {
        n: usize,
        word: usize,
    },
    Hif {
        dp: usize,
        word: usize,
    },
    PlayerEnable,
    PlayerInterval,
    PlayerWindowSize,
    PlayerWindowCount,
    MaxOutstanding,
    FpgaQp,
    FirstRequestId,
    ResponseTimeout,
    PlayerStartError,
    /// Detail word 0 or 1 of PLAYER_START_ERROR.
    PlayerStartDetail(usize),
    PlayerRam(usize),
    CaptureCtrl,
    CaptureStatus,
    CaptureCount,
    CaptureRam(usize),
    Stat(usize),
    /// QEC_CTRL ..= QEC_MAX_MESSAGE_BYTES, by address.
    QecConfig(u32),
    /// QEC counters and times, by address ([`crate::stats::QecStats::read_register`]).
    QecCounter(u32),
    /// Any other word of a region: stored and read back.
    Stored(u32),
}

fn in_window(addr: u32, base: u32, len: u32) -> Option<u32> {
    addr.checked_sub(base).filter(|off| *off < len)
}

fn decode(addr: u32) -> Option<Reg> {
    let addr = addr & !3;
    let r = match addr {
        reg::RESET => Reg::Reset,
        0x08 => Reg::Reset8,
        reg::HSB_IP_VERSION => Reg::IpVersion,
        reg::FPGA_DATE => Reg::FpgaDate,
        PTP_FIRST..=PTP_LAST => Reg::Ptp(((addr - PTP_FIRST) / 4) as usize),
        reg::FPGA_PTP_SYNC_STAT => Reg::PtpSyncStat,
        reg::PLAYER_ENABLE => Reg::PlayerEnable,
        reg::PLAYER_INTERVAL => Reg::PlayerInterval,
        reg::PLAYER_WINDOW_SIZE => Reg::PlayerWindowSize,
        reg::PLAYER_WINDOW_COUNT => Reg::PlayerWindowCount,
        ext::PLAYER_MAX_OUTSTANDING => Reg::MaxOutstanding,
        ext::PLAYER_FPGA_QP => Reg::FpgaQp,
        ext::PLAYER_FIRST_REQUEST_ID => Reg::FirstRequestId,
        ext::PLAYER_RESPONSE_TIMEOUT_US => Reg::ResponseTimeout,
        ext::PLAYER_START_ERROR => Reg::PlayerStartError,
        a if a == ext::PLAYER_START_DETAIL || a == ext::PLAYER_START_DETAIL + 4 => {
            Reg::PlayerStartDetail(((a - ext::PLAYER_START_DETAIL) / 4) as usize)
        }
        reg::CAPTURE_CTRL => Reg::CaptureCtrl,
        reg::CAPTURE_STATUS => Reg::CaptureStatus,
        reg::CAPTURE_COUNT => Reg::CaptureCount,
        _ => return decode_block(addr),
    };
    Some(r)
}

/// Registers that come in blocks or RAM windows; any other word of a region is stored.
fn decode_block(addr: u32) -> Option<Reg> {
    // The whole VP region is 64 blocks of 16 words, kept as such.
    if let Some(off) = in_window(addr, reg::VP_BASE, reg::VP_STRIDE * VP_BLOCKS) {
        let (n, o) = (off / reg::VP_STRIDE, off % reg::VP_STRIDE);
        return Some(Reg::Vp { n: n as usize, word: (o / 4) as usize });
    }
    for dp in 0..HIF_COUNT {
        if let Some(o) = in_window(addr, reg::hif(dp, 0), 4 * HIF_WORDS as u32) {
            return Some(Reg::Hif { dp: dp as usize, word: (o / 4) as usize });
        }
    }
    if let Some(off) = in_window(addr, reg::PLAYER_RAM, PLAYER_RAM_BYTES as u32) {
        return Some(Reg::PlayerRam((off / 4) as usize));
    }
    if let Some(off) = in_window(addr, reg::CAPTURE_RAM, capture::WINDOW_BYTES) {
        return Some(Reg::CaptureRam((off / 4) as usize));
    }
    if let Some(off) = in_window(addr, ext::STATS_BASE, 4 * STAT_WORDS) {
        return Some(Reg::Stat((off / 4) as usize));
    }
    if (ext::QEC_CTRL..=ext::QEC_MAX_MESSAGE_BYTES).contains(&addr) {
        return Some(Reg::QecConfig(addr));
    }
    let counters = ext::QEC_SHOTS_SENT..=ext::QEC_LAST_CORRECTION_HI;
    let status = ext::QEC_STATUS_COUNTS..ext::QEC_STATUS_COUNTS + 4 * ext::QEC_STATUS_WORDS;
    let decode = ext::QEC_DECODE_COUNT..=ext::QEC_DECODE_MAX_NS;
    if counters.contains(&addr) || status.contains(&addr) || decode.contains(&addr) {
        return Some(Reg::QecCounter(addr));
    }
    reg::region_of(addr).map(|_| Reg::Stored(addr))
}

/// The register file. Owned by the ECB thread.
#[derive(Debug)]
pub struct Registers {
    identity: PeerIdentity,
    shared: Arc<PeerShared>,
    reset: u32,
    reset8: u32,
    ptp: [u32; PTP_WORDS],
    vp: [[u32; VP_WORDS]; VP_BLOCKS as usize],
    hif: [[u32; HIF_WORDS]; HIF_COUNT as usize],
    player: PlayerRegs,
    player_ram: Box<[u8]>,
    capture_ctrl: u32,
    capture: Arc<CaptureRam>,
    /// Shots to replay, when the peer was started with them.
    qec: Option<Arc<QecReplay>>,
    /// QEC_ENABLE (only ever set while `qec` is some).
    qec_enabled: bool,
    /// QEC_ROUNDS_PER_MESSAGE.
    qec_rounds_per_message: u32,
    /// The last plan made, reused while QEC_ROUNDS_PER_MESSAGE stays the same.
    qec_plan: Option<Arc<QecPlan>>,
    /// Why the last player start was refused (PLAYER_START_ERROR); `None` after a start.
    start_error: Option<PlayerRefusal>,
    /// Every other non-zero word of a region, by address (bits 1:0 clear).
    stored: BTreeMap<u32, u32>,
}

impl Registers {
    /// Power-on state, without a QEC replay.
    pub fn new(identity: PeerIdentity, shared: Arc<PeerShared>) -> Self {
        Self::with_qec(identity, shared, None)
    }

    /// Power-on state; with `qec`, QEC_ENABLE is set and QEC_ROUNDS_PER_MESSAGE is the
    /// replay's `rounds_per_message`.
    pub fn with_qec(identity: PeerIdentity, shared: Arc<PeerShared>, qec: Option<Arc<QecReplay>>) -> Self {
        Registers {
            identity,
            shared,
            reset: 0,
            reset8: 0,
            ptp: [0; PTP_WORDS],
            vp: [[0; VP_WORDS]; VP_BLOCKS as usize],
            hif: [[0; HIF_WORDS]; HIF_COUNT as usize],
            player: PlayerRegs::power_on(identity.qp),
            player_ram: vec![0; PLAYER_RAM_BYTES].into_boxed_slice(),
            capture_ctrl: 0,
            capture: Arc::new(CaptureRam::with_capacity(0)),
            qec_enabled: qec.is_some(),
            qec_rounds_per_message: qec.as_ref().map_or(0, |q| q.rounds_per_message),
            qec_plan: None,
            qec,
            start_error: None,
            stored: BTreeMap::new(),
        }
    }

    /// The QEC replay, when a run would play it (loaded and QEC_ENABLE set).
    fn qec_active(&self) -> Option<&Arc<QecReplay>> {
        self.qec.as_ref().filter(|_| self.qec_enabled)
    }

    fn read_qec_config(&self, addr: u32) -> u32 {
        let Some(q) = &self.qec else { return 0 };
        let rpm = self.qec_rounds_per_message;
        let sat = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        match addr {
            ext::QEC_CTRL => {
                let mut v = ext::QEC_LOADED;
                if self.qec_enabled {
                    v |= ext::QEC_ENABLE;
                }
                if q.has_reference() {
                    v |= ext::QEC_HAS_REFERENCE;
                }
                v
            }
            ext::QEC_ROUNDS_PER_MESSAGE => rpm,
            ext::QEC_LOADED_SHOTS => sat(q.shots()),
            ext::QEC_DETECTORS => sat(q.num_detectors()),
            ext::QEC_OBSERVABLES => sat(q.num_observables()),
            ext::QEC_ROUNDS_PER_SHOT => q.rounds_per_shot(),
            ext::QEC_MESSAGES_PER_SHOT => q.messages_per_shot(rpm),
            ext::QEC_MAX_MESSAGE_BYTES => sat(q.max_message_len(rpm)),
            _ => 0,
        }
    }

    fn write_qec_config(&mut self, addr: u32, value: u32) {
        match addr {
            // Enabling needs shots to play.
            ext::QEC_CTRL => self.qec_enabled = self.qec.is_some() && value & ext::QEC_ENABLE != 0,
            ext::QEC_ROUNDS_PER_MESSAGE => self.qec_rounds_per_message = value,
            _ => {}
        }
    }

    /// The plan for the current QEC_ROUNDS_PER_MESSAGE, made now if the last one was for
    /// another value.
    fn qec_plan(&mut self, replay: &Arc<QecReplay>) -> Arc<QecPlan> {
        let rpm = self.qec_rounds_per_message;
        match &self.qec_plan {
            Some(p) if p.setting() == rpm => Arc::clone(p),
            _ => {
                let p = Arc::new(replay.plan(rpm));
                self.qec_plan = Some(Arc::clone(&p));
                p
            }
        }
    }

    pub fn shared(&self) -> &Arc<PeerShared> {
        &self.shared
    }

    /// The capture RAM the host reads now.
    pub fn capture(&self) -> &Arc<CaptureRam> {
        &self.capture
    }

    fn running(&self) -> bool {
        self.shared.running.load(Ordering::Acquire)
    }

    pub fn read(&self, addr: u32) -> Result<u32, InvalidAddress> {
        let r = decode(addr).ok_or(InvalidAddress)?;
        let p = &self.player;
        Ok(match r {
            Reg::Reset => self.reset,
            Reg::Reset8 => self.reset8,
            Reg::IpVersion => IP_VERSION,
            Reg::FpgaDate => FPGA_DATE,
            Reg::Ptp(i) => self.ptp[i],
            // Synchronised: the peer's clock is the host's CLOCK_MONOTONIC.
            Reg::PtpSyncStat => reg::PTP_SYNCED_MASK,
            Reg::Vp { n, word } => self.vp[n][word],
            Reg::Hif { dp, word } => self.hif[dp][word],
            Reg::PlayerEnable => {
                let run = if self.running() { reg::PLAYER_RUN } else { 0 };
                (p.enable & !reg::PLAYER_RUN) | run
            }
            Reg::PlayerInterval => p.interval,
            Reg::PlayerWindowSize => p.window_size,
            Reg::PlayerWindowCount => p.window_count,
            Reg::MaxOutstanding => p.max_outstanding,
            Reg::FpgaQp => p.fpga_qp,
            Reg::FirstRequestId => p.first_request_id,
            Reg::ResponseTimeout => p.response_timeout_us,
            Reg::PlayerStartError => self.start_error.map_or(0, |e| e.code()),
            Reg::PlayerStartDetail(i) => self.start_error.map_or(0, |e| e.details()[i]),
            Reg::PlayerRam(w) => {
                let b = &self.player_ram[4 * w..4 * w + 4];
                u32::from_le_bytes([b[0], b[1], b[2], b[3]])
            }
            Reg::CaptureCtrl => self.capture_ctrl,
            Reg::CaptureStatus => {
                if self.shared.done.load(Ordering::Acquire) {
                    reg::CAPTURE_DONE
                } else {
                    0
                }
            }
            Reg::CaptureCount => self.capture.count(),
            Reg::CaptureRam(w) => self.capture.read_word(w),
            Reg::Stat(i) => self.shared.stats.counters()[i].load(Ordering::Relaxed),
            Reg::QecConfig(a) => self.read_qec_config(a),
            Reg::QecCounter(a) => self.shared.stats.qec.read_register(a).unwrap_or(0),
            Reg::Stored(a) => self.stored.get(&a).copied().unwrap_or(0),
        })
    }

    pub fn write(&mut self, addr: u32, value: u32) -> Result<Effect, InvalidAddress> {
        let r = decode(addr).ok_or(InvalidAddress)?;
        let p = &mut self.player;
        match r {
            Reg::Reset => {
                if value & reg::RESET_BIT != 0 {
                    self.power_on_reset();
                    return Ok(Effect::Reset);
                }
                self.reset = value;
            }
            Reg::Reset8 => self.reset8 = value,
            Reg::Ptp(i) => self.ptp[i] = value,
            Reg::Vp { n, word } => self.vp[n][word] = value,
            Reg::Hif { dp, word } => self.hif[dp][word] = value,
            Reg::PlayerEnable => return Ok(self.write_enable(value)),
            Reg::PlayerInterval => p.interval = value,
            Reg::PlayerWindowSize => p.window_size = value,
            Reg::PlayerWindowCount => p.window_count = value,
            Reg::MaxOutstanding => p.max_outstanding = value,
            Reg::FpgaQp => p.fpga_qp = value & 0x00FF_FFFF,
            Reg::FirstRequestId => p.first_request_id = value,
            Reg::ResponseTimeout => p.response_timeout_us = value,
            Reg::PlayerRam(w) => self.player_ram[4 * w..4 * w + 4].copy_from_slice(&value.to_le_bytes()),
            Reg::CaptureCtrl => {
                if value & reg::CAPTURE_ARM != 0 {
                    // Arming starts a fresh capture, preallocated for the programmed window.
                    self.capture = Arc::new(CaptureRam::with_capacity(self.capture_records()));
                    self.shared.done.store(false, Ordering::Release);
                }
                self.capture_ctrl = value;
            }
            Reg::QecConfig(a) => self.write_qec_config(a, value),
            Reg::Stored(a) => self.store(a, value)?,
            Reg::IpVersion
            | Reg::QecCounter(_)
            | Reg::FpgaDate
            | Reg::PtpSyncStat
            | Reg::CaptureStatus
            | Reg::CaptureCount
            | Reg::CaptureRam(_)
            | Reg::PlayerStartError
            | Reg::PlayerStartDetail(_)
            | Reg::Stat(_) => {}
        }
        Ok(Effect::None)
    }

    /// Keeps a region word; 0 frees it. A new word past [`STORED_WORDS`] is refused.
    fn store(&mut self, addr: u32, value: u32) -> Result<(), InvalidAddress> {
        if value == 0 {
            self.stored.remove(&addr);
        } else if let Some(w) = self.stored.get_mut(&addr) {
            *w = value;
        } else if self.stored.len() < STORED_WORDS {
            self.stored.insert(addr, value);
        } else {
            return Err(InvalidAddress);
        }
        Ok(())
    }

    /// Records a start that could not play (PLAYER_START_ERROR) and clears the running
    /// flag: the ECB server calls it when the data plane did not take a run this model
    /// started.
    pub fn refuse_start(&mut self, why: PlayerRefusal) {
        self.start_error = Some(why);
        self.shared.running.store(false, Ordering::Release);
    }

    /// Frames (messages) the programmed run sends: one per window, or in QEC mode one per
    /// message of each shot.
    fn run_frames(&self) -> u32 {
        let w = self.player.window_count;
        match self.qec_active() {
            Some(q) => w.saturating_mul(q.messages_per_shot(self.qec_rounds_per_message)),
            None => w,
        }
    }

    fn capture_records(&self) -> usize {
        (self.run_frames() as usize).saturating_add(CAPTURE_SLACK).min(capture::MAX_RECORDS)
    }

    /// Back to power-on values; a running player is stopped. The QEC replay stays loaded
    /// (it is the peer's configuration, not a register).
    fn power_on_reset(&mut self) {
        self.abort_run();
        let shared = Arc::clone(&self.shared);
        let plan = self.qec_plan.take();
        *self = Registers::with_qec(self.identity, shared, self.qec.take());
        self.qec_plan = plan;
        self.shared.done.store(false, Ordering::Release);
    }

    fn abort_run(&self) {
        if self.running() {
            let g = self.shared.generation.load(Ordering::Relaxed);
            self.shared.abort_generation.store(g, Ordering::Release);
        }
    }

    fn write_enable(&mut self, value: u32) -> Effect {
        self.player.enable = value;
        if value & reg::PLAYER_RUN == 0 {
            self.abort_run();
            return Effect::None;
        }
        if self.running() {
            // A run is in progress: the host must wait for the run bit to read 0.
            return Effect::None;
        }
        match self.run_config() {
            Ok(cfg) => {
                self.start_error = None;
                Effect::Start(Box::new(cfg))
            }
            Err(e) => {
                self.start_error = Some(e);
                Effect::Refused(e)
            }
        }
    }

    /// Lowest enabled VP and the HIF block that enabled it.
    fn enabled_vp(&self) -> Option<(usize, usize)> {
        let mask_word = (reg::DP_VP_MASK / 4) as usize;
        (0..VP_ENABLE_BITS as usize)
            .find_map(|n| (0..HIF_COUNT as usize).find(|&dp| self.hif[dp][mask_word] & (1 << n) != 0).map(|dp| (n, dp)))
    }

    /// Snapshots the configuration for one run (PROTOCOLS.md 2.2, 2.3) and, on success,
    /// marks the player running: new generation, done cleared, stats reset, capture ready.
    /// Refused, in this order: no VP enabled, no host address, no valid template (or a QEC
    /// message too large for a packet), frames that overrun the slot or DP_BUFFER_LENGTH.
    fn run_config(&mut self) -> Result<RunConfig, PlayerRefusal> {
        let (n, dp) = self.enabled_vp().ok_or(PlayerRefusal::NoVpEnabled)?;
        let p = self.player;
        let vp = self.vp[n];
        let v = |off: u32| vp[(off / 4) as usize];
        for (off, unset) in [
            (reg::DP_HOST_IP, v(reg::DP_HOST_IP) == 0),
            (reg::DP_HOST_UDP_PORT, v(reg::DP_HOST_UDP_PORT) & 0xFFFF == 0),
        ] {
            if unset {
                return Err(PlayerRefusal::HostUnset { vp: n as u32, register: off });
            }
        }
        let (template, arg_len, qec) = match self.qec_active().cloned() {
            Some(replay) => {
                let plan = self.qec_plan(&replay);
                if plan.max_message_len() > PMTU {
                    return Err(PlayerRefusal::QecMessageTooLarge {
                        bytes: sat_u32(plan.max_message_len()),
                        limit: PMTU as u32,
                    });
                }
                (Vec::new(), 0, Some(plan))
            }
            None => {
                let (template, arg_len) = self.template()?;
                (template, arg_len, None)
            }
        };
        // Each frame's payload lands in one slot of DP_PAGE_INC * 128 bytes (PROTOCOLS.md
        // 2.3), at most DP_BUFFER_LENGTH bytes when the host set one.
        let bytes = sat_u32(qec.as_ref().map_or(template.len(), |q| q.max_message_len()));
        let slot = v(reg::DP_PAGE_INC).saturating_mul(reg::PAGE_INC_UNIT as u32);
        if bytes > slot {
            return Err(PlayerRefusal::FrameBeyondSlot { bytes, slot });
        }
        let buffer_length = v(reg::DP_BUFFER_LENGTH);
        if buffer_length != 0 && bytes > buffer_length {
            return Err(PlayerRefusal::FrameBeyondBufferLength { bytes, buffer_length });
        }
        let mac_hi = v(reg::DP_HOST_MAC_HIGH).to_be_bytes();
        let mac_lo = v(reg::DP_HOST_MAC_LOW).to_be_bytes();
        let endpoints = Endpoints {
            src_mac: self.identity.mac,
            dst_mac: [mac_hi[2], mac_hi[3], mac_lo[0], mac_lo[1], mac_lo[2], mac_lo[3]],
            src_ip: self.identity.ip,
            dst_ip: v(reg::DP_HOST_IP).to_be_bytes(),
            src_port: self.hif[dp][(reg::DP_PACKET_UDP_PORT / 4) as usize] as u16,
            dst_port: v(reg::DP_HOST_UDP_PORT) as u16,
        };
        let slots = v(reg::DP_MAX_BUFF).saturating_add(1).min(MAX_SLOTS);
        let limit = match p.max_outstanding {
            0 => MAX_IN_FLIGHT,
            m => (m as usize).min(MAX_IN_FLIGHT),
        };

        let capture = if self.capture_ctrl & reg::CAPTURE_ARM != 0 {
            let needed = self.capture_records();
            if self.capture.count() != 0 || self.capture.capacity() < needed {
                self.capture = Arc::new(CaptureRam::with_capacity(needed));
            }
            Some(Arc::clone(&self.capture))
        } else {
            None
        };

        let generation = self.shared.generation.load(Ordering::Relaxed).wrapping_add(1);
        self.shared.generation.store(generation, Ordering::Relaxed);
        self.shared.stats.reset();
        self.shared.done.store(false, Ordering::Release);
        self.shared.running.store(true, Ordering::Release);

        Ok(RunConfig {
            generation,
            endpoints,
            dest_qp: v(reg::DP_QP) & 0x00FF_FFFF,
            rkey: v(reg::DP_RKEY),
            buffer_va: (u64::from(v(reg::DP_PAGE_MSB)) << 32) | u64::from(v(reg::DP_PAGE_LSB)),
            page_stride: u64::from(v(reg::DP_PAGE_INC)) * 128,
            slots,
            max_in_flight: limit.min(slots as usize),
            template,
            arg_len,
            stamp_ptp: qec.is_some() || p.enable & reg::PLAYER_STAMP_PTP != 0,
            scramble: qec.is_none() && p.enable & reg::PLAYER_SCRAMBLE != 0,
            interval_ns: u64::from(p.interval) * 1_000_000_000 / PLAYER_CLOCK_HZ,
            frames: self.run_frames(),
            fpga_qp: p.fpga_qp,
            first_request_id: p.first_request_id,
            response_timeout_ns: u64::from(p.response_timeout_us) * 1_000,
            capture,
            qec,
        })
    }

    /// The player RAM window, checked (PROTOCOLS.md 3): the template and its arg_len.
    fn template(&self) -> Result<(Vec<u8>, usize), PlayerRefusal> {
        let window = self.player.window_size;
        if (window as usize) < rpc::HEADER_LEN {
            return Err(PlayerRefusal::WindowTooSmall { window });
        }
        if window as usize > PMTU {
            return Err(PlayerRefusal::WindowTooLarge { window, limit: PMTU as u32 });
        }
        let template = self.player_ram[..window as usize].to_vec();
        let header = rpc::RequestRepr::parse(&template).map_err(|_| {
            let w = &self.player_ram[..4];
            PlayerRefusal::BadTemplate { first_word: u32::from_le_bytes([w[0], w[1], w[2], w[3]]) }
        })?;
        if header.arg_len as usize > window as usize - rpc::HEADER_LEN {
            return Err(PlayerRefusal::ArgsBeyondWindow { arg_len: header.arg_len, window });
        }
        Ok((template, header.arg_len as usize))
    }
}

fn sat_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> Registers {
        let id = PeerIdentity { mac: [2, 0, 0, 0, 0, 2], ip: [127, 0, 0, 2], qp: 2 };
        Registers::new(id, Arc::new(PeerShared::default()))
    }

    fn w(r: &mut Registers, addr: u32, value: u32) {
        assert!(matches!(r.write(addr, value), Ok(Effect::None)), "{addr:#x}");
    }

    fn program(r: &mut Registers) {
        let t = [0x4355_5152u32, 0xAB, 8, 0, 0, 0, 0x0403_0201, 0x0807_0605];
        for (i, word) in t.into_iter().enumerate() {
            w(r, reg::PLAYER_RAM + 4 * i as u32, word);
        }
        let vp = |off| reg::vp(3, off);
        for (a, v) in [
            (vp(reg::DP_QP), 0x0100_00A7),
            (vp(reg::DP_RKEY), 0x77),
            (vp(reg::DP_PAGE_LSB), 0x8000_0000),
            (vp(reg::DP_PAGE_MSB), 0x7F),
            (vp(reg::DP_PAGE_INC), 32),
            (vp(reg::DP_MAX_BUFF), 9999),
            (vp(reg::DP_HOST_MAC_LOW), 0x3344_5566),
            (vp(reg::DP_HOST_MAC_HIGH), 0x1122),
            (vp(reg::DP_HOST_IP), 0x0A00_0001),
            (vp(reg::DP_HOST_UDP_PORT), reg::METADATA_DISABLE | 4791),
            (reg::hif(1, reg::DP_PACKET_UDP_PORT), 12288),
            (reg::hif(1, reg::DP_VP_MASK), 1 << 3),
            (reg::PLAYER_INTERVAL, 15625),
            (reg::PLAYER_WINDOW_SIZE, 32),
            (reg::PLAYER_WINDOW_COUNT, 5),
            (ext::PLAYER_MAX_OUTSTANDING, 1),
        ] {
            w(r, a, v);
        }
    }

    #[test]
    fn run_bit_snapshots_the_configuration() {
        let mut r = regs();
        program(&mut r);
        w(&mut r, reg::CAPTURE_CTRL, reg::CAPTURE_ARM);
        let Ok(Effect::Start(cfg)) = r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN | reg::PLAYER_SCRAMBLE) else {
            panic!("run refused")
        };
        assert_eq!(cfg.template[..4], *b"RQUC", "player RAM words are little-endian");
        assert_eq!(cfg.template[24..], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(cfg.arg_len, 8);
        assert_eq!(cfg.dest_qp, 0xA7, "24 bits");
        assert_eq!(cfg.buffer_va, 0x7F_8000_0000);
        assert_eq!(cfg.page_stride, 4096);
        assert_eq!(cfg.slots, MAX_SLOTS, "the immediate carries 12 bits of slot");
        assert_eq!(cfg.max_in_flight, 1);
        assert_eq!(cfg.endpoints.dst_mac, [0x11, 0x22, 0x33, 0x44, 0x55, 0x66]);
        assert_eq!(cfg.endpoints.dst_ip, [10, 0, 0, 1]);
        assert_eq!((cfg.endpoints.src_port, cfg.endpoints.dst_port), (12288, 4791));
        assert_eq!(cfg.interval_ns, 100_000, "15625 clocks of 156.25 MHz");
        assert!(cfg.scramble && !cfg.stamp_ptp);
        assert_eq!(cfg.capture.as_ref().map(|c| c.capacity() >= 5), Some(true));
        assert_eq!(r.read(reg::PLAYER_ENABLE), Ok(reg::PLAYER_RUN | reg::PLAYER_SCRAMBLE));
        // A second run bit while running changes nothing.
        assert!(matches!(r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN), Ok(Effect::None)));
        // Clearing it aborts this generation.
        w(&mut r, reg::PLAYER_ENABLE, 0);
        assert_eq!(r.shared().abort_generation.load(Ordering::Relaxed), cfg.generation);
    }

    fn qec_regs() -> Registers {
        let id = PeerIdentity { mac: [2, 0, 0, 0, 0, 2], ip: [127, 0, 0, 2], qp: 2 };
        // 2 shots of rounds [3, 5, 4] (12 detectors, 2 bytes each).
        let mut replay = QecReplay::new(vec![3, 5, 4], 1, vec![0; 4], vec![0, 1], None).expect("replay");
        replay.rounds_per_message = 2;
        Registers::with_qec(id, Arc::new(PeerShared::default()), Some(Arc::new(replay)))
    }

    #[test]
    fn qec_registers_and_runs() {
        let mut r = qec_regs();
        let rd = |r: &Registers, a| r.read(a).expect("register");
        assert_eq!(rd(&r, ext::QEC_CTRL), ext::QEC_ENABLE | ext::QEC_LOADED);
        assert_eq!(rd(&r, ext::QEC_ROUNDS_PER_MESSAGE), 2);
        assert_eq!(rd(&r, ext::QEC_LOADED_SHOTS), 2);
        assert_eq!(rd(&r, ext::QEC_DETECTORS), 12);
        assert_eq!(rd(&r, ext::QEC_OBSERVABLES), 1);
        assert_eq!(rd(&r, ext::QEC_ROUNDS_PER_SHOT), 3);
        assert_eq!(rd(&r, ext::QEC_MESSAGES_PER_SHOT), 2);
        assert_eq!(rd(&r, ext::QEC_MAX_MESSAGE_BYTES), 24 + 32 + 1);
        assert_eq!(rd(&r, ext::QEC_STATUS_COUNTS + 28), 0);
        assert_eq!(rd(&r, ext::QEC_DECODE_COUNT), 0);
        assert_eq!(rd(&r, ext::QEC_DECODE_MAX_NS), 0);
        assert_eq!(rd(&r, ext::STATS_BASE + ext::STAT_TIMEOUTS), 0);
        // Words of the capture region without a meaning are stored, as on the FPGA.
        for hole in [ext::QEC_DECODE_MAX_NS + 4, 0x4000_0220] {
            w(&mut r, hole, 0x5A);
            assert_eq!(rd(&r, hole), 0x5A, "{hole:#x}");
        }
        w(&mut r, ext::QEC_ROUNDS_PER_MESSAGE, 0);
        assert_eq!(rd(&r, ext::QEC_MESSAGES_PER_SHOT), 1);
        assert_eq!(rd(&r, ext::QEC_MAX_MESSAGE_BYTES), 24 + 32 + 2);
        w(&mut r, ext::QEC_SHOTS_SENT, 5);
        assert_eq!(rd(&r, ext::QEC_SHOTS_SENT), 0, "counters are read-only");

        // No template in player RAM: a QEC run does not need one.
        program(&mut r);
        w(&mut r, reg::PLAYER_RAM, 0);
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 0);
        w(&mut r, ext::QEC_ROUNDS_PER_MESSAGE, 1);
        w(&mut r, reg::CAPTURE_CTRL, reg::CAPTURE_ARM);
        let Ok(Effect::Start(cfg)) = r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN | reg::PLAYER_SCRAMBLE) else {
            panic!("QEC run refused")
        };
        assert_eq!(cfg.frames, 5 * 3, "5 shots of 3 messages");
        assert!(cfg.stamp_ptp && !cfg.scramble, "always stamped, never scrambled");
        assert_eq!(cfg.qec.as_ref().map(|p| p.messages_per_shot()), Some(3));
        assert!(cfg.capture.as_ref().is_some_and(|c| c.capacity() >= 15));
        w(&mut r, reg::PLAYER_ENABLE, 0);
        r.shared().running.store(false, Ordering::Release);

        // Reset keeps the replay and its power-on settings.
        assert!(matches!(r.write(reg::RESET, reg::RESET_BIT), Ok(Effect::Reset)));
        assert_eq!(rd(&r, ext::QEC_ROUNDS_PER_MESSAGE), 2);
        assert_eq!(rd(&r, ext::QEC_CTRL) & ext::QEC_ENABLE, ext::QEC_ENABLE);

        // QEC_ENABLE cleared: a template run again (and it needs its template).
        w(&mut r, ext::QEC_CTRL, 0);
        assert_eq!(rd(&r, ext::QEC_CTRL), ext::QEC_LOADED);
        program(&mut r);
        let Ok(Effect::Start(cfg)) = r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN) else {
            panic!("template run refused")
        };
        assert!(cfg.qec.is_none());
        assert_eq!(cfg.frames, 5);

        // Without shots, QEC_ENABLE cannot be set and the block reads 0.
        let mut plain = regs();
        w(&mut plain, ext::QEC_CTRL, ext::QEC_ENABLE);
        assert_eq!(rd(&plain, ext::QEC_CTRL), 0);
        assert_eq!(rd(&plain, ext::QEC_LOADED_SHOTS), 0);
    }

    /// A refused start: the run bit reads 0 and PLAYER_START_ERROR holds the reason.
    fn refused(r: &mut Registers) -> PlayerRefusal {
        let Ok(Effect::Refused(why)) = r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN) else {
            panic!("start not refused")
        };
        assert_eq!(r.read(reg::PLAYER_ENABLE).map(|v| v & reg::PLAYER_RUN), Ok(0));
        let word = |a| r.read(a).expect("register");
        let details = [word(ext::PLAYER_START_DETAIL), word(ext::PLAYER_START_DETAIL + 4)];
        assert_eq!(
            PlayerRefusal::from_words(word(ext::PLAYER_START_ERROR), details),
            Some(why),
            "PLAYER_START_ERROR says why"
        );
        why
    }

    #[test]
    fn bad_player_configurations_are_refused() {
        let mut r = regs();
        assert_eq!(refused(&mut r), PlayerRefusal::NoVpEnabled);
        program(&mut r);
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 0);
        assert_eq!(refused(&mut r), PlayerRefusal::WindowTooSmall { window: 0 });
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 20);
        assert_eq!(refused(&mut r), PlayerRefusal::WindowTooSmall { window: 20 });
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 5000);
        assert_eq!(refused(&mut r), PlayerRefusal::WindowTooLarge { window: 5000, limit: PMTU as u32 });
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 28);
        assert_eq!(refused(&mut r), PlayerRefusal::ArgsBeyondWindow { arg_len: 8, window: 28 });
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 32);
        // The window larger than the slot, then than DP_BUFFER_LENGTH.
        w(&mut r, reg::vp(3, reg::DP_PAGE_INC), 0);
        assert_eq!(refused(&mut r), PlayerRefusal::FrameBeyondSlot { bytes: 32, slot: 0 });
        w(&mut r, reg::vp(3, reg::DP_PAGE_INC), 1);
        w(&mut r, reg::vp(3, reg::DP_BUFFER_LENGTH), 31);
        assert_eq!(refused(&mut r), PlayerRefusal::FrameBeyondBufferLength { bytes: 32, buffer_length: 31 });
        w(&mut r, reg::vp(3, reg::DP_BUFFER_LENGTH), 32);
        // The data plane without its host address.
        w(&mut r, reg::vp(3, reg::DP_HOST_IP), 0);
        assert_eq!(refused(&mut r), PlayerRefusal::HostUnset { vp: 3, register: reg::DP_HOST_IP });
        w(&mut r, reg::vp(3, reg::DP_HOST_IP), 0x0A00_0001);
        w(&mut r, reg::vp(3, reg::DP_HOST_UDP_PORT), reg::METADATA_DISABLE);
        assert_eq!(refused(&mut r), PlayerRefusal::HostUnset { vp: 3, register: reg::DP_HOST_UDP_PORT });
        w(&mut r, reg::vp(3, reg::DP_HOST_UDP_PORT), 4791);
        // No CUQR template in player RAM.
        w(&mut r, reg::PLAYER_RAM, 0x1234);
        assert_eq!(refused(&mut r), PlayerRefusal::BadTemplate { first_word: 0x1234 });
        // Fixed: the start plays and PLAYER_START_ERROR reads 0 again.
        w(&mut r, reg::PLAYER_RAM, 0x4355_5152);
        assert!(matches!(r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN), Ok(Effect::Start(_))));
        assert_eq!(r.read(ext::PLAYER_START_ERROR), Ok(0));
        assert_eq!(r.read(ext::PLAYER_START_DETAIL), Ok(0));
        // The data plane did not take it: the server records that.
        r.refuse_start(PlayerRefusal::NoDataPlane);
        assert_eq!(r.read(ext::PLAYER_START_ERROR), Ok(10));
        assert_eq!(r.read(reg::PLAYER_ENABLE).map(|v| v & reg::PLAYER_RUN), Ok(0));
        // PLAYER_START_ERROR is read-only; a reset clears it.
        w(&mut r, ext::PLAYER_START_ERROR, 0);
        assert_eq!(r.read(ext::PLAYER_START_ERROR), Ok(10));
        assert!(matches!(r.write(reg::RESET, reg::RESET_BIT), Ok(Effect::Reset)));
        assert_eq!(r.read(ext::PLAYER_START_ERROR), Ok(0));
    }

    #[test]
    fn qec_message_beyond_the_slot_is_refused() {
        let mut r = qec_regs();
        program(&mut r);
        w(&mut r, ext::QEC_ROUNDS_PER_MESSAGE, 0);
        // 58-byte messages (QEC_MAX_MESSAGE_BYTES) into a 32-byte DP_BUFFER_LENGTH.
        w(&mut r, reg::vp(3, reg::DP_BUFFER_LENGTH), 32);
        assert_eq!(refused(&mut r), PlayerRefusal::FrameBeyondBufferLength { bytes: 58, buffer_length: 32 });
    }

    #[test]
    fn every_region_stores_and_reads_back() {
        let mut r = regs();
        let capture_ram = reg::CAPTURE_RAM..reg::CAPTURE_RAM + capture::WINDOW_BYTES;
        assert_eq!(
            reg::region_of(capture_ram.end - 1).map(|r| (r.first, r.last)),
            Some((capture_ram.start, capture_ram.end - 1)),
            "capture RAM is its region"
        );
        let edges = |region: &reg::Region| [region.first, region.last & !3];
        for region in reg::REGIONS {
            for a in edges(&region) {
                w(&mut r, a, 0x00C0_FFEE ^ a);
            }
        }
        for region in reg::REGIONS {
            for a in edges(&region) {
                // Capture RAM keeps its meaning: read-only, no record captured yet.
                let want = if capture_ram.contains(&a) { 0 } else { 0x00C0_FFEE ^ a };
                assert_eq!(r.read(a), Ok(want), "{} {a:#x}", region.name);
            }
            for a in [region.first.wrapping_sub(4), region.last.wrapping_add(1)] {
                if reg::region_of(a).is_none() {
                    assert_eq!(r.read(a), Err(InvalidAddress), "{a:#x}");
                    assert!(r.write(a, 1).is_err(), "{a:#x}");
                }
            }
        }
    }

    #[test]
    fn the_sparse_store_is_bounded() {
        let mut r = regs();
        let base = reg::REGIONS[5].first; // sensor interfaces: 4 Mi words
        for i in 0..STORED_WORDS as u32 {
            w(&mut r, base + 4 * i, i + 1);
        }
        let next = base + 4 * STORED_WORDS as u32;
        assert_eq!(r.write(next, 1).map(|_| ()), Err(InvalidAddress), "full");
        assert!(r.write(next, 0).is_ok(), "a 0 needs no room");
        w(&mut r, base, 7);
        assert_eq!(r.read(base), Ok(7), "a stored word can change");
        w(&mut r, base, 0);
        w(&mut r, next, 9);
        assert_eq!(r.read(next), Ok(9), "writing 0 freed a word");
        assert!(matches!(r.write(reg::RESET, reg::RESET_BIT), Ok(Effect::Reset)));
        assert_eq!(r.read(next), Ok(0), "reset empties the store");
    }
}
