//! The peer's register model: every register a host reaches over ECB (PROTOCOLS.md 2.1,
//! 2.2, and the rocelink extensions of `rocelink_wire::hsb::ext`).
//!
//! Guarantees:
//! - Deterministic and free of I/O: a read or write touches only this struct and the atomics
//!   it shares with the data plane ([`PeerShared`]). Starting the player is returned as an
//!   [`Effect`] for the caller (the ECB server) to deliver.
//! - Total: every address either names a register or is [`InvalidAddress`]; nothing panics.
//! - Address bits 1:0 are ignored (PROTOCOLS.md 2.1, "address bits 1:0 are ignored").
//! - Read-only registers (version, date, sync status, capture status/count/RAM, stats)
//!   accept writes and ignore them, as the RTL's read-only registers do.
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

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use rocelink_wire::hsb::{ext, reg, PLAYER_CLOCK_HZ};
use rocelink_wire::roce::{Endpoints, PMTU};
use rocelink_wire::rpc;

use crate::capture::{self, CaptureRam};
use crate::player::RunConfig;
use crate::qec::{QecPlan, QecReplay};
use crate::stats::Stats;

/// What HSB_IP_VERSION reads (hosts need at least `MIN_ROCE_IP_VERSION` = 0x2602).
pub const IP_VERSION: u32 = 0x2607;
/// What FPGA_DATE reads (BCD date of this model).
pub const FPGA_DATE: u32 = 0x2025_1130;
/// Player RAM size: the frame template.
pub const PLAYER_RAM_BYTES: usize = 64 * 1024;
/// Slots the reference transceiver posts receive WQEs for (PROTOCOLS.md 2.3).
pub const MAX_IN_FLIGHT: usize = ext::MAX_IN_FLIGHT as usize;
/// The immediate carries 12 bits of slot number (PROTOCOLS.md 2.3).
pub const MAX_SLOTS: u32 = 1 << 12;
/// Spare capture records beyond the window count, for duplicates and strays.
const CAPTURE_SLACK: usize = 64;

const VP_COUNT: u32 = 16;
const HIF_COUNT: u32 = 2;
const PTP_FIRST: u32 = 0x104;
const PTP_LAST: u32 = 0x11C;
const PTP_WORDS: usize = ((PTP_LAST - PTP_FIRST) / 4 + 1) as usize;
/// Word offsets (byte offset / 4) of the VP registers of PROTOCOLS.md 2.2.
const VP_WORDS: usize = 16;
/// Byte offsets of the HIF registers of PROTOCOLS.md 2.2.
const HIF_WORDS: usize = 4;
const STAT_WORDS: u32 = 7;

/// The address names no register (ECB status 0x03).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidAddress;

/// Why the player refused to start (the run bit then reads 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    #[error("no VP is enabled in DP_VP_MASK")]
    NoVpEnabled,
    #[error("window size {0} is smaller than the 24-byte RPC header")]
    WindowTooSmall(u32),
    #[error("window size {0} exceeds the single-packet limit (PMTU {PMTU})")]
    WindowTooLarge(u32),
    #[error("player RAM does not start with a CUQR request header")]
    BadTemplate,
    #[error("template arg_len {arg_len} does not fit in the {window}-byte window")]
    ArgsBeyondWindow { arg_len: u32, window: u32 },
    #[error("QEC messages of {0} bytes exceed the single-packet limit (PMTU {PMTU}); send fewer rounds per message")]
    QecMessageTooLarge(usize),
}

/// What a write asks of the world outside the register model.
#[derive(Debug)]
pub enum Effect {
    None,
    /// The reset bit: the caller resets the ECB latched sequence and sends no reply.
    Reset,
    /// The run bit: hand this to the data plane.
    Start(Box<RunConfig>),
    /// The run bit was set but the configuration is unusable.
    Refused(StartError),
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
        reg::CAPTURE_CTRL => Reg::CaptureCtrl,
        reg::CAPTURE_STATUS => Reg::CaptureStatus,
        reg::CAPTURE_COUNT => Reg::CaptureCount,
        _ => return decode_block(addr),
    };
    Some(r)
}

/// Registers that come in blocks or RAM windows.
fn decode_block(addr: u32) -> Option<Reg> {
    if let Some(off) = in_window(addr, reg::VP_BASE, reg::VP_STRIDE * VP_COUNT) {
        let (n, o) = (off / reg::VP_STRIDE, off % reg::VP_STRIDE);
        // Only the registers of PROTOCOLS.md 2.2 exist (0x1C and 0x30.. do not).
        let known = matches!(o, 0x00..=0x18 | 0x20..=0x2C);
        return known.then_some(Reg::Vp {
            n: n as usize,
            word: (o / 4) as usize,
        });
    }
    for dp in 0..HIF_COUNT {
        if let Some(o) = in_window(addr, reg::hif(dp, 0), reg::HIF_STRIDE) {
            let known = matches!(
                o,
                reg::DP_PACKET_SIZE | reg::DP_PACKET_UDP_PORT | reg::DP_VP_MASK
            );
            return known.then_some(Reg::Hif {
                dp: dp as usize,
                word: (o / 4) as usize,
            });
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
    None
}

/// The register file. Owned by the ECB thread.
#[derive(Debug)]
pub struct Registers {
    identity: PeerIdentity,
    shared: Arc<PeerShared>,
    reset: u32,
    reset8: u32,
    ptp: [u32; PTP_WORDS],
    vp: [[u32; VP_WORDS]; VP_COUNT as usize],
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
}

impl Registers {
    /// Power-on state, without a QEC replay.
    pub fn new(identity: PeerIdentity, shared: Arc<PeerShared>) -> Self {
        Self::with_qec(identity, shared, None)
    }

    /// Power-on state; with `qec`, QEC_ENABLE is set and QEC_ROUNDS_PER_MESSAGE is the
    /// replay's `rounds_per_message`.
    pub fn with_qec(
        identity: PeerIdentity,
        shared: Arc<PeerShared>,
        qec: Option<Arc<QecReplay>>,
    ) -> Self {
        Registers {
            identity,
            shared,
            reset: 0,
            reset8: 0,
            ptp: [0; PTP_WORDS],
            vp: [[0; VP_WORDS]; VP_COUNT as usize],
            hif: [[0; HIF_WORDS]; HIF_COUNT as usize],
            player: PlayerRegs::power_on(identity.qp),
            player_ram: vec![0; PLAYER_RAM_BYTES].into_boxed_slice(),
            capture_ctrl: 0,
            capture: Arc::new(CaptureRam::with_capacity(0)),
            qec_enabled: qec.is_some(),
            qec_rounds_per_message: qec.as_ref().map_or(0, |q| q.rounds_per_message),
            qec_plan: None,
            qec,
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
            Reg::PlayerRam(w) => {
                self.player_ram[4 * w..4 * w + 4].copy_from_slice(&value.to_le_bytes())
            }
            Reg::CaptureCtrl => {
                if value & reg::CAPTURE_ARM != 0 {
                    // Arming starts a fresh capture, preallocated for the programmed window.
                    self.capture = Arc::new(CaptureRam::with_capacity(self.capture_records()));
                    self.shared.done.store(false, Ordering::Release);
                }
                self.capture_ctrl = value;
            }
            Reg::QecConfig(a) => self.write_qec_config(a, value),
            Reg::IpVersion
            | Reg::QecCounter(_)
            | Reg::FpgaDate
            | Reg::PtpSyncStat
            | Reg::CaptureStatus
            | Reg::CaptureCount
            | Reg::CaptureRam(_)
            | Reg::Stat(_) => {}
        }
        Ok(Effect::None)
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
        (self.run_frames() as usize)
            .saturating_add(CAPTURE_SLACK)
            .min(capture::MAX_RECORDS)
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
            Ok(cfg) => Effect::Start(Box::new(cfg)),
            Err(e) => Effect::Refused(e),
        }
    }

    /// Lowest enabled VP and the HIF block that enabled it.
    fn enabled_vp(&self) -> Option<(usize, usize)> {
        let mask_word = (reg::DP_VP_MASK / 4) as usize;
        (0..VP_COUNT as usize).find_map(|n| {
            (0..HIF_COUNT as usize)
                .find(|&dp| self.hif[dp][mask_word] & (1 << n) != 0)
                .map(|dp| (n, dp))
        })
    }

    /// Snapshots the configuration for one run (PROTOCOLS.md 2.2, 2.3) and, on success,
    /// marks the player running: new generation, done cleared, stats reset, capture ready.
    fn run_config(&mut self) -> Result<RunConfig, StartError> {
        let (n, dp) = self.enabled_vp().ok_or(StartError::NoVpEnabled)?;
        let p = self.player;
        let (template, arg_len, qec) = match self.qec_active().cloned() {
            Some(replay) => {
                let plan = self.qec_plan(&replay);
                if plan.max_message_len() > PMTU {
                    return Err(StartError::QecMessageTooLarge(plan.max_message_len()));
                }
                (Vec::new(), 0, Some(plan))
            }
            None => {
                let (template, arg_len) = self.template()?;
                (template, arg_len, None)
            }
        };
        let vp = &self.vp[n];
        let v = |off: u32| vp[(off / 4) as usize];
        let mac_hi = v(reg::DP_HOST_MAC_HIGH).to_be_bytes();
        let mac_lo = v(reg::DP_HOST_MAC_LOW).to_be_bytes();
        let endpoints = Endpoints {
            src_mac: self.identity.mac,
            dst_mac: [
                mac_hi[2], mac_hi[3], mac_lo[0], mac_lo[1], mac_lo[2], mac_lo[3],
            ],
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

        let generation = self
            .shared
            .generation
            .load(Ordering::Relaxed)
            .wrapping_add(1);
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
    fn template(&self) -> Result<(Vec<u8>, usize), StartError> {
        let window = self.player.window_size;
        if (window as usize) < rpc::HEADER_LEN {
            return Err(StartError::WindowTooSmall(window));
        }
        if window as usize > PMTU {
            return Err(StartError::WindowTooLarge(window));
        }
        let template = self.player_ram[..window as usize].to_vec();
        let header = rpc::RequestRepr::parse(&template).map_err(|_| StartError::BadTemplate)?;
        if header.arg_len as usize > window as usize - rpc::HEADER_LEN {
            return Err(StartError::ArgsBeyondWindow {
                arg_len: header.arg_len,
                window,
            });
        }
        Ok((template, header.arg_len as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> Registers {
        let id = PeerIdentity {
            mac: [2, 0, 0, 0, 0, 2],
            ip: [127, 0, 0, 2],
            qp: 2,
        };
        Registers::new(id, Arc::new(PeerShared::default()))
    }

    fn w(r: &mut Registers, addr: u32, value: u32) {
        assert!(
            matches!(r.write(addr, value), Ok(Effect::None)),
            "{addr:#x}"
        );
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
        let Ok(Effect::Start(cfg)) =
            r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN | reg::PLAYER_SCRAMBLE)
        else {
            panic!("run refused")
        };
        assert_eq!(
            cfg.template[..4],
            *b"RQUC",
            "player RAM words are little-endian"
        );
        assert_eq!(cfg.template[24..], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(cfg.arg_len, 8);
        assert_eq!(cfg.dest_qp, 0xA7, "24 bits");
        assert_eq!(cfg.buffer_va, 0x7F_8000_0000);
        assert_eq!(cfg.page_stride, 4096);
        assert_eq!(
            cfg.slots, MAX_SLOTS,
            "the immediate carries 12 bits of slot"
        );
        assert_eq!(cfg.max_in_flight, 1);
        assert_eq!(cfg.endpoints.dst_mac, [0x11, 0x22, 0x33, 0x44, 0x55, 0x66]);
        assert_eq!(cfg.endpoints.dst_ip, [10, 0, 0, 1]);
        assert_eq!(
            (cfg.endpoints.src_port, cfg.endpoints.dst_port),
            (12288, 4791)
        );
        assert_eq!(cfg.interval_ns, 100_000, "15625 clocks of 156.25 MHz");
        assert!(cfg.scramble && !cfg.stamp_ptp);
        assert_eq!(cfg.capture.as_ref().map(|c| c.capacity() >= 5), Some(true));
        assert_eq!(
            r.read(reg::PLAYER_ENABLE),
            Ok(reg::PLAYER_RUN | reg::PLAYER_SCRAMBLE)
        );
        // A second run bit while running changes nothing.
        assert!(matches!(
            r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN),
            Ok(Effect::None)
        ));
        // Clearing it aborts this generation.
        w(&mut r, reg::PLAYER_ENABLE, 0);
        assert_eq!(
            r.shared().abort_generation.load(Ordering::Relaxed),
            cfg.generation
        );
    }

    fn qec_regs() -> Registers {
        let id = PeerIdentity {
            mac: [2, 0, 0, 0, 0, 2],
            ip: [127, 0, 0, 2],
            qp: 2,
        };
        // 2 shots of rounds [3, 5, 4] (12 detectors, 2 bytes each).
        let mut replay =
            QecReplay::new(vec![3, 5, 4], 1, vec![0; 4], vec![0, 1], None).expect("replay");
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
        assert_eq!(r.read(ext::QEC_DECODE_MAX_NS + 4), Err(InvalidAddress));
        assert_eq!(rd(&r, ext::STATS_BASE + ext::STAT_TIMEOUTS), 0);
        assert_eq!(
            r.read(0x4000_0220),
            Err(InvalidAddress),
            "a hole in the block"
        );
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
        let Ok(Effect::Start(cfg)) =
            r.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN | reg::PLAYER_SCRAMBLE)
        else {
            panic!("QEC run refused")
        };
        assert_eq!(cfg.frames, 5 * 3, "5 shots of 3 messages");
        assert!(
            cfg.stamp_ptp && !cfg.scramble,
            "always stamped, never scrambled"
        );
        assert_eq!(cfg.qec.as_ref().map(|p| p.messages_per_shot()), Some(3));
        assert!(cfg.capture.as_ref().is_some_and(|c| c.capacity() >= 15));
        w(&mut r, reg::PLAYER_ENABLE, 0);
        r.shared().running.store(false, Ordering::Release);

        // Reset keeps the replay and its power-on settings.
        assert!(matches!(
            r.write(reg::RESET, reg::RESET_BIT),
            Ok(Effect::Reset)
        ));
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

    #[test]
    fn bad_player_configurations_are_refused() {
        let mut r = regs();
        assert!(matches!(
            r.write(reg::PLAYER_ENABLE, 1),
            Ok(Effect::Refused(StartError::NoVpEnabled))
        ));
        program(&mut r);
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 20);
        assert!(matches!(
            r.write(reg::PLAYER_ENABLE, 1),
            Ok(Effect::Refused(StartError::WindowTooSmall(20)))
        ));
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 5000);
        assert!(matches!(
            r.write(reg::PLAYER_ENABLE, 1),
            Ok(Effect::Refused(StartError::WindowTooLarge(5000)))
        ));
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 28);
        assert!(matches!(
            r.write(reg::PLAYER_ENABLE, 1),
            Ok(Effect::Refused(StartError::ArgsBeyondWindow { .. }))
        ));
        w(&mut r, reg::PLAYER_RAM, 0);
        w(&mut r, reg::PLAYER_WINDOW_SIZE, 32);
        assert!(matches!(
            r.write(reg::PLAYER_ENABLE, 1),
            Ok(Effect::Refused(StartError::BadTemplate))
        ));
        assert_eq!(
            r.read(reg::PLAYER_ENABLE).map(|v| v & reg::PLAYER_RUN),
            Ok(0)
        );
    }
}
