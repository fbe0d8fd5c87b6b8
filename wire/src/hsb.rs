//! The HSB register map (PROTOCOLS.md 2.1-2.2) and rocelink's peer conventions, in one place.
//!
//! Guarantees: every address a host or the peer touches is a named constant here; the
//! capture record layout is defined once ([`CaptureRecord`]); [`scramble_args`] is a pure,
//! deterministic involution, so the host can predict the exact bytes an echo returns.

/// ECB register addresses and bits. Values from HSB 2.7 hosts and the FPGA emulators.
pub mod reg {
    /// Write bit 3 for a reset (no reply; the latched sequence becomes 0).
    pub const RESET: u32 = 0x04;
    /// Bit of [`RESET`] that resets the FPGA.
    pub const RESET_BIT: u32 = 1 << 3;
    /// IP version; hosts refuse RoCE setup below [`MIN_ROCE_IP_VERSION`].
    pub const HSB_IP_VERSION: u32 = 0x80;
    /// Build date.
    pub const FPGA_DATE: u32 = 0x84;
    /// Low nibble 0xF = PTP synchronized.
    pub const FPGA_PTP_SYNC_STAT: u32 = 0x188;
    /// Mask of [`FPGA_PTP_SYNC_STAT`] that reads 0xF when synchronized.
    pub const PTP_SYNCED_MASK: u32 = 0xF;
    /// Lowest HSB_IP_VERSION that supports RoCE.
    pub const MIN_ROCE_IP_VERSION: u32 = 0x2602;

    /// Per-sensor "VP" block: `VP_BASE + VP_STRIDE * n`.
    pub const VP_BASE: u32 = 0x1000;
    /// Distance between VP blocks.
    pub const VP_STRIDE: u32 = 0x40;
    /// Host QP number (24 bits).
    pub const DP_QP: u32 = 0x00;
    /// rkey of the host's receive buffer.
    pub const DP_RKEY: u32 = 0x04;
    /// Low 32 bits of the buffer address.
    pub const DP_PAGE_LSB: u32 = 0x08;
    /// High 32 bits of the buffer address.
    pub const DP_PAGE_MSB: u32 = 0x0C;
    /// Slot stride in 128-byte units.
    pub const DP_PAGE_INC: u32 = 0x10;
    /// Number of slots - 1.
    pub const DP_MAX_BUFF: u32 = 0x14;
    /// Frame length in bytes.
    pub const DP_BUFFER_LENGTH: u32 = 0x18;
    /// Host MAC, low 32 bits.
    pub const DP_HOST_MAC_LOW: u32 = 0x20;
    /// Host MAC, high 16 bits.
    pub const DP_HOST_MAC_HIGH: u32 = 0x24;
    /// Host IPv4 address.
    pub const DP_HOST_IP: u32 = 0x28;
    /// Bits 15:0 the host's UDP port (4791); bit 16 disables metadata.
    pub const DP_HOST_UDP_PORT: u32 = 0x2C;
    /// Bit of [`DP_HOST_UDP_PORT`] that disables metadata.
    pub const METADATA_DISABLE: u32 = 1 << 16;
    /// Unit of [`DP_PAGE_INC`].
    pub const PAGE_INC_UNIT: u64 = 128;

    /// Address of register `off` in VP block `n` (wrapping, so any input is defined).
    pub const fn vp(n: u32, off: u32) -> u32 {
        VP_BASE.wrapping_add(VP_STRIDE.wrapping_mul(n)).wrapping_add(off)
    }

    /// HIF block of data plane `dp`: `HIF_BASE + HIF_STRIDE * dp`.
    pub const HIF_BASE: u32 = 0x0200_0300;
    /// Distance between HIF blocks.
    pub const HIF_STRIDE: u32 = 0x10000;
    /// Payload bytes per packet / 128.
    pub const DP_PACKET_SIZE: u32 = 0x04;
    /// Source UDP port of data-plane packets (hosts write 12288).
    pub const DP_PACKET_UDP_PORT: u32 = 0x08;
    /// Enable mask of VP blocks. Write order: clear, configure, set.
    pub const DP_VP_MASK: u32 = 0x0C;

    /// Address of register `off` in the HIF block of data plane `dp` (wrapping).
    pub const fn hif(dp: u32, off: u32) -> u32 {
        HIF_BASE.wrapping_add(HIF_STRIDE.wrapping_mul(dp)).wrapping_add(off)
    }

    /// Traffic player block.
    pub const PLAYER_BASE: u32 = 0x5000_0000;
    /// Enable bits: [`PLAYER_RUN`], [`PLAYER_STAMP_PTP`], [`PLAYER_SCRAMBLE`].
    pub const PLAYER_ENABLE: u32 = 0x5000_0004;
    /// Run the player.
    pub const PLAYER_RUN: u32 = 1;
    /// Stamp the PTP time into each frame (RPC bytes 16-23).
    pub const PLAYER_STAMP_PTP: u32 = 2;
    /// rocelink extension: XOR each message's arguments with [`super::scramble_args`].
    pub const PLAYER_SCRAMBLE: u32 = 4;
    /// Interval between frames in FPGA clocks ([`super::PLAYER_CLOCK_HZ`]).
    pub const PLAYER_INTERVAL: u32 = 0x5000_0008;
    /// Window (frame) size in bytes.
    pub const PLAYER_WINDOW_SIZE: u32 = 0x5000_000C;
    /// Number of windows.
    pub const PLAYER_WINDOW_COUNT: u32 = 0x5000_0010;
    /// Player RAM (the frames to send).
    pub const PLAYER_RAM: u32 = 0x5010_0000;

    /// Capture control: [`CAPTURE_ARM`].
    pub const CAPTURE_CTRL: u32 = 0x4000_0000;
    /// Arm the capture.
    pub const CAPTURE_ARM: u32 = 1;
    /// Capture status: [`CAPTURE_DONE`].
    pub const CAPTURE_STATUS: u32 = 0x4000_0080;
    /// Capture finished.
    pub const CAPTURE_DONE: u32 = 2;
    /// Number of records captured.
    pub const CAPTURE_COUNT: u32 = 0x4000_0084;
    /// Capture RAM: a ring of [`CAPTURE_RAM_RECORDS`] records; record `i` (counted from the
    /// arm, as CAPTURE_COUNT counts) at `CAPTURE_RAM + 32 * (i % CAPTURE_RAM_RECORDS)` (see
    /// [`super::CaptureRecord`]).
    pub const CAPTURE_RAM: u32 = 0x4010_0000;
    /// Records the capture RAM holds: its region of the HSB map (0x4010_0000-0x401F_FFFF,
    /// PROTOCOLS.md 2.2) of 32-byte records. Record `i` overwrites record
    /// `i - CAPTURE_RAM_RECORDS`: a host that reads the capture while the run goes on keeps
    /// any number of answers in constant memory on both sides.
    pub const CAPTURE_RAM_RECORDS: u32 = 0x10_0000 / 32;

    /// One region of the HSB address map: `first ..= last`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Region {
        /// The region's name in PROTOCOLS.md 2.2.
        pub name: &'static str,
        /// First byte address.
        pub first: u32,
        /// Last byte address.
        pub last: u32,
    }

    /// The HSB address map, by region (PROTOCOLS.md 2.2): "a write anywhere inside a region
    /// is stored and read back; outside every region the reply is status 0x03, as an
    /// unmapped APB access is on the FPGA".
    pub const REGIONS: [Region; 11] = [
        Region { name: "global", first: 0x0000_0000, last: 0x0000_00FF },
        Region { name: "PTP", first: 0x0000_0100, last: 0x0000_01FF },
        Region { name: "control/events", first: 0x0000_0200, last: 0x0000_02FF },
        Region { name: "VP blocks", first: 0x0000_1000, last: 0x0000_1FFF },
        Region { name: "APB sequencer RAM", first: 0x0000_2000, last: 0x0000_3FFF },
        Region { name: "sensor interfaces", first: 0x0100_0000, last: 0x01FF_FFFF },
        Region { name: "HIF blocks", first: 0x0200_0000, last: 0x02FF_FFFF },
        Region { name: "capture", first: 0x4000_0000, last: 0x4000_0FFF },
        Region { name: "capture RAM", first: 0x4010_0000, last: 0x401F_FFFF },
        Region { name: "player", first: 0x5000_0000, last: 0x5000_0FFF },
        Region { name: "player RAM", first: 0x5010_0000, last: 0x501F_FFFF },
    ];

    /// The region holding `addr`, if any.
    pub fn region_of(addr: u32) -> Option<&'static Region> {
        REGIONS.iter().find(|r| (r.first..=r.last).contains(&addr))
    }

    /// Sensor-TX enable, which HSB hosts write during configuration.
    pub const SENSOR_TX_ENABLE: u32 = 0x0120_0000;
    /// APB sequencer RAM (hosts write a null sequence there).
    pub const APB_SEQUENCER_RAM: u32 = 0x2000;
    /// Control/event registers HSB hosts write at start: `CONTROL_EVENTS ..= 0x22C`.
    pub const CONTROL_EVENTS: u32 = 0x200;
}

/// rocelink peer extensions. They lie inside the capture and player regions, so a real HSB
/// FPGA stores them and reads them back (or reads 0) without acting on them: a host detects
/// them by content, or by status 0x03 from a peer that maps less.
pub mod ext {
    /// 0 = open loop, bounded at [`MAX_IN_FLIGHT`] messages in flight; 1 = closed loop.
    pub const PLAYER_MAX_OUTSTANDING: u32 = 0x5000_0014;
    /// The peer's own QP (default [`DEFAULT_FPGA_QP`]).
    pub const PLAYER_FPGA_QP: u32 = 0x5000_0018;
    /// request_id of the first message.
    pub const PLAYER_FIRST_REQUEST_ID: u32 = 0x5000_001C;
    /// An answer not back within this many microseconds counts as lost (default
    /// [`DEFAULT_RESPONSE_TIMEOUT_US`]); the player moves on.
    pub const PLAYER_RESPONSE_TIMEOUT_US: u32 = 0x5000_0020;
    /// Counter block.
    pub const STATS_BASE: u32 = 0x4000_0100;
    /// Frames sent (offset from [`STATS_BASE`]).
    pub const STAT_SENT: u32 = 0x00;
    /// Frames received.
    pub const STAT_RECEIVED: u32 = 0x04;
    /// Frames dropped for a bad ICRC.
    pub const STAT_ICRC_FAILURES: u32 = 0x08;
    /// Frames dropped as malformed.
    pub const STAT_MALFORMED: u32 = 0x0C;
    /// Times the player waited for a free slot.
    pub const STAT_STALLS: u32 = 0x10;
    /// Frames that matched no outstanding request.
    pub const STAT_UNEXPECTED: u32 = 0x14;

    /// Why the last player start was refused (read-only): a [`super::PlayerRefusal`] code,
    /// 0 after a start that played (and at power-on). A start that cannot play (no valid
    /// CUQR template, a window of 0 or larger than a packet, the slot or DP_BUFFER_LENGTH,
    /// no VP enabled, no host address, no data plane) is answered with
    /// `ecb::Status::Refused` (0x02), whether or not the write asked for an ACK, and its
    /// run bit reads 0; the host then reads this word and the two detail words after it
    /// ([`PLAYER_START_DETAIL`]) to say why. This is the one place the convention is
    /// defined.
    pub const PLAYER_START_ERROR: u32 = 0x5000_0024;
    /// Two detail words of [`PLAYER_START_ERROR`] (at this address and + 4), as
    /// [`super::PlayerRefusal`] documents per code.
    pub const PLAYER_START_DETAIL: u32 = 0x5000_0028;

    /// Default of [`PLAYER_FPGA_QP`] (PROTOCOLS.md 2.3).
    pub const DEFAULT_FPGA_QP: u32 = 2;
    /// The host's QP number, where the peer's writes go (`RDMA_QP`; any 24-bit value: an HSB
    /// host gets its own from `ibv_create_qp`, rocelink's software NIC uses this one).
    pub const DEFAULT_HOST_QP: u32 = 0x000_0101;
    /// QP number that means control-over-RoCE (PROTOCOLS.md 2.3).
    pub const CONTROL_QP: u32 = 0x1000;
    /// Default of [`PLAYER_RESPONSE_TIMEOUT_US`].
    pub const DEFAULT_RESPONSE_TIMEOUT_US: u32 = 10_000;
    /// Slots in flight at most (the reference transceiver posts 64 receive WQEs).
    pub const MAX_IN_FLIGHT: u32 = 64;

    /// Messages whose answer never came: retired after [`PLAYER_RESPONSE_TIMEOUT_US`]
    /// (offset from [`STATS_BASE`]).
    pub const STAT_TIMEOUTS: u32 = 0x18;

    // QEC syndrome replay (fpga-sim's QEC mode, docs/qec.md; messages of PROTOCOLS.md 3).
    // With QEC_ENABLE set, each player window is one shot: its detector groups (rounds) go
    // out as `enqueue_syndromes` messages, QEC_ROUNDS_PER_MESSAGE rounds each, and the
    // answer to a shot's last message is checked against the true observables and the
    // reference prediction. Counters reset when the run bit is set; 64-bit times are
    // nanoseconds of the peer's clock (the capture's clock), low word first.

    /// Bit 0 [`QEC_ENABLE`] (read/write); bits 8-9 read-only: [`QEC_LOADED`],
    /// [`QEC_HAS_REFERENCE`].
    pub const QEC_CTRL: u32 = 0x4000_0200;
    /// Runs replay shots instead of the player RAM template (power-on: set when shots
    /// are loaded; cannot be set when none are).
    pub const QEC_ENABLE: u32 = 1;
    /// Shots are loaded (read-only).
    pub const QEC_LOADED: u32 = 1 << 8;
    /// A reference prediction (PyMatching's) is loaded, so disagreements are counted
    /// (read-only).
    pub const QEC_HAS_REFERENCE: u32 = 1 << 9;
    /// Rounds per `enqueue_syndromes` message; 0 = all rounds of a shot in one message.
    pub const QEC_ROUNDS_PER_MESSAGE: u32 = 0x4000_0204;
    /// Shots loaded (read-only); window `k` of a run replays shot `k mod` this.
    pub const QEC_LOADED_SHOTS: u32 = 0x4000_0208;
    /// Detectors per shot (read-only).
    pub const QEC_DETECTORS: u32 = 0x4000_020C;
    /// Observables (correction bits) per shot (read-only).
    pub const QEC_OBSERVABLES: u32 = 0x4000_0210;
    /// Rounds (detector groups, one per DEM time step) per shot (read-only).
    pub const QEC_ROUNDS_PER_SHOT: u32 = 0x4000_0214;
    /// Messages per shot at the current [`QEC_ROUNDS_PER_MESSAGE`] (read-only).
    pub const QEC_MESSAGES_PER_SHOT: u32 = 0x4000_0218;
    /// Bytes of the largest message (RPC header + arguments) at the current
    /// [`QEC_ROUNDS_PER_MESSAGE`]: the slot stride must hold it (read-only).
    pub const QEC_MAX_MESSAGE_BYTES: u32 = 0x4000_021C;
    /// Shots whose messages were all sent.
    pub const QEC_SHOTS_SENT: u32 = 0x4000_0240;
    /// Shots whose last message was answered OK with correction bits and a decode report.
    pub const QEC_SHOTS_DECODED: u32 = 0x4000_0244;
    /// Decoded shots whose correction differs from the true observables.
    pub const QEC_LOGICAL_ERRORS: u32 = 0x4000_0248;
    /// Decoded shots whose correction differs from the reference prediction.
    pub const QEC_DISAGREEMENTS: u32 = 0x4000_024C;
    /// Decoded shots whose report says overflow (not decoded).
    pub const QEC_OVERFLOWS: u32 = 0x4000_0250;
    /// Decoded shots whose report says unmatchable.
    pub const QEC_UNMATCHABLE: u32 = 0x4000_0254;
    /// Rounds sent.
    pub const QEC_ROUNDS_SENT: u32 = 0x4000_0258;
    /// OK answers of the wrong form: a result on a non-final message, or a final answer
    /// too short for correction bits and report.
    pub const QEC_BAD_ANSWERS: u32 = 0x4000_025C;
    /// Send time of the run's first message, bits 31:0 (bits 63:32 at + 4).
    pub const QEC_FIRST_SEND_LO: u32 = 0x4000_0260;
    /// Bits 63:32 of [`QEC_FIRST_SEND_LO`].
    pub const QEC_FIRST_SEND_HI: u32 = 0x4000_0264;
    /// Send time of the run's last message sent so far, bits 31:0.
    pub const QEC_LAST_SEND_LO: u32 = 0x4000_0268;
    /// Bits 63:32 of [`QEC_LAST_SEND_LO`].
    pub const QEC_LAST_SEND_HI: u32 = 0x4000_026C;
    /// Arrival time of the latest decoded shot's correction, bits 31:0. Throughput in
    /// rounds per microsecond = 1000 * QEC_SHOTS_DECODED * QEC_ROUNDS_PER_SHOT /
    /// (QEC_LAST_CORRECTION - QEC_FIRST_SEND).
    pub const QEC_LAST_CORRECTION_LO: u32 = 0x4000_0270;
    /// Bits 63:32 of [`QEC_LAST_CORRECTION_LO`].
    pub const QEC_LAST_CORRECTION_HI: u32 = 0x4000_0274;
    /// Answers by RPC status, [`QEC_STATUS_WORDS`] words: word 0 every non-OK answer,
    /// word `s` (1..=6) answers with status `s` (`rpc::status`), word 7 any other non-zero
    /// status.
    pub const QEC_STATUS_COUNTS: u32 = 0x4000_0280;
    /// Words of [`QEC_STATUS_COUNTS`].
    pub const QEC_STATUS_WORDS: u32 = 8;
    /// The decoder's own decode time, from the `decode_ns` of every decode report the peer
    /// received (read-only): how many ([`QEC_DECODE_COUNT`]), the median and the 99th
    /// percentile (the upper edge of the histogram bin that holds them, never above the
    /// maximum: [`qec_decode_bin`]) and the maximum, in ns. The
    /// decoder times itself (the GPU stage with %globaltimer, the CPU stage with its clock),
    /// so this is the decode alone, apart from the transport.
    pub const QEC_DECODE_COUNT: u32 = 0x4000_02A0;
    /// See [`QEC_DECODE_COUNT`].
    pub const QEC_DECODE_P50_NS: u32 = 0x4000_02A4;
    /// See [`QEC_DECODE_COUNT`].
    pub const QEC_DECODE_P99_NS: u32 = 0x4000_02A8;
    /// See [`QEC_DECODE_COUNT`].
    pub const QEC_DECODE_MAX_NS: u32 = 0x4000_02AC;
    /// Width of the finest bins of the decode-time histogram behind [`QEC_DECODE_P50_NS`].
    pub const QEC_DECODE_BIN_NS: u32 = 32;
    /// Bins of that histogram: 64 of [`QEC_DECODE_BIN_NS`] (to 2.05 us), then 32 per octave
    /// (3% wide) to 2^32 ns; the last also holds everything above.
    pub const QEC_DECODE_BINS: u32 = 64 + 32 * 21;

    /// The decode-time histogram's bin of `ns` (log-linear, [`QEC_DECODE_BINS`]): exact to
    /// 32 ns below 2.05 us, within 3% above, so that percentiles of decoders taking
    /// milliseconds are as meaningful as those of decoders taking nanoseconds.
    pub const fn qec_decode_bin(ns: u32) -> u32 {
        let v = ns / QEC_DECODE_BIN_NS;
        if v < 64 {
            return v;
        }
        let e = 31 - v.leading_zeros() - 5; // v in [2^(e+5), 2^(e+6)), e >= 1
        let bin = 64 + (e - 1) * 32 + ((v >> e) - 32);
        if bin < QEC_DECODE_BINS {
            bin
        } else {
            QEC_DECODE_BINS - 1
        }
    }

    /// The upper edge (exclusive), in ns, of bin `bin` of [`qec_decode_bin`] (saturating).
    pub const fn qec_decode_bin_edge(bin: u32) -> u32 {
        let v = if bin < 64 {
            bin as u64 + 1
        } else {
            let e = (bin - 64) / 32 + 1;
            ((33 + (bin - 64) % 32) as u64) << e
        };
        let ns = v * QEC_DECODE_BIN_NS as u64;
        if ns > u32::MAX as u64 {
            u32::MAX
        } else {
            ns as u32
        }
    }
}

/// A QEC replay's results as the peer counts them: the values of the registers
/// [`ext::QEC_SHOTS_SENT`] ..= [`ext::QEC_STATUS_COUNTS`] and [`ext::QEC_DECODE_COUNT`] ..
/// (fpga-sim writes them, the host reads them over ECB; one definition for both). Times are
/// nanoseconds of the peer's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QecCounters {
    /// Shots whose every message was sent ([`ext::QEC_SHOTS_SENT`]).
    pub shots_sent: u32,
    /// Shots whose correction came back ([`ext::QEC_SHOTS_DECODED`]).
    pub shots_decoded: u32,
    /// Corrections that disagree with the shot's true observables.
    pub logical_errors: u32,
    /// Corrections that differ from the reference decoder's prediction.
    pub disagreements: u32,
    /// Decode reports with status overflow (not decoded).
    pub overflows: u32,
    /// Decode reports with status unmatchable.
    pub unmatchable: u32,
    /// Syndrome rounds sent.
    pub rounds_sent: u32,
    /// Answers that were not a valid response to a request of the replay.
    pub bad_answers: u32,
    /// When the first message was sent.
    pub first_send_ns: u64,
    /// When the last message was sent.
    pub last_send_ns: u64,
    /// When the last correction arrived.
    pub last_correction_ns: u64,
    /// Word 0: every non-OK answer; word `s` (1..=6): status `s`; word 7: other statuses.
    pub status: [u32; ext::QEC_STATUS_WORDS as usize],
    /// The decoder's own decode time from its decode reports; all 0 from a peer without
    /// these registers.
    pub decode: DecoderTime,
}

impl QecCounters {
    /// Rounds decoded per microsecond: rounds of the decoded shots over the time from the
    /// first message sent to the last correction received (`None` before any).
    pub fn rounds_per_us(&self, rounds_per_shot: u32) -> Option<f64> {
        let span = self.last_correction_ns.checked_sub(self.first_send_ns)?;
        (span > 0 && self.shots_decoded > 0)
            .then(|| 1_000.0 * f64::from(self.shots_decoded) * f64::from(rounds_per_shot) / span as f64)
    }
}

/// The decoder's own decode times as the peer counts them ([`ext::QEC_DECODE_COUNT`] ..):
/// reports counted, median, 99th percentile and maximum in ns (percentiles to the peer's
/// bins, [`ext::qec_decode_bin`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DecoderTime {
    /// Decode reports counted.
    pub count: u32,
    /// Their decode_ns median.
    pub p50_ns: u32,
    /// 99th percentile.
    pub p99_ns: u32,
    /// Maximum.
    pub max_ns: u32,
}

/// Why a peer refused to start its traffic player: the code in [`ext::PLAYER_START_ERROR`]
/// and its two detail words ([`ext::PLAYER_START_DETAIL`]). Total: every code maps to a
/// variant and back ([`PlayerRefusal::from_words`], [`PlayerRefusal::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PlayerRefusal {
    /// Code 1: no VP is enabled in any HIF block's DP_VP_MASK.
    #[error("no VP is enabled in DP_VP_MASK: the data plane is not configured")]
    NoVpEnabled,
    /// Code 2: PLAYER_WINDOW_SIZE (detail 0) is smaller than the RPC header (0 included).
    #[error("the window size is {window} bytes, smaller than the 24-byte RPC header")]
    WindowTooSmall {
        /// PLAYER_WINDOW_SIZE.
        window: u32,
    },
    /// Code 3: PLAYER_WINDOW_SIZE (detail 0) exceeds the single-packet limit (detail 1).
    #[error("the window size is {window} bytes, more than one packet carries ({limit})")]
    WindowTooLarge {
        /// PLAYER_WINDOW_SIZE.
        window: u32,
        /// The peer's payload limit (its PMTU).
        limit: u32,
    },
    /// Code 4: player RAM does not start with a CUQR request header (detail 0: its first
    /// word, as read over ECB).
    #[error("player RAM holds no CUQR request template (its first word is {first_word:#010x}, not 0x43555152)")]
    BadTemplate {
        /// Word 0 of player RAM.
        first_word: u32,
    },
    /// Code 5: the template's arg_len (detail 0) does not fit the window (detail 1).
    #[error("the template's arg_len {arg_len} does not fit its {window}-byte window")]
    ArgsBeyondWindow {
        /// arg_len of the template's RPC header.
        arg_len: u32,
        /// PLAYER_WINDOW_SIZE.
        window: u32,
    },
    /// Code 6: a QEC message of detail 0 bytes exceeds the single-packet limit (detail 1).
    #[error("QEC messages of {bytes} bytes exceed one packet ({limit}); send fewer rounds per message")]
    QecMessageTooLarge {
        /// Bytes of the largest message.
        bytes: u32,
        /// The peer's payload limit (its PMTU).
        limit: u32,
    },
    /// Code 7: a frame of detail 0 bytes does not fit a slot of the VP (detail 1:
    /// DP_PAGE_INC * 128).
    #[error("frames of {bytes} bytes do not fit the host's {slot}-byte slots (DP_PAGE_INC)")]
    FrameBeyondSlot {
        /// Bytes of the largest frame payload.
        bytes: u32,
        /// The slot stride.
        slot: u32,
    },
    /// Code 8: a frame of detail 0 bytes is longer than the VP's DP_BUFFER_LENGTH (detail 1).
    #[error("frames of {bytes} bytes are longer than DP_BUFFER_LENGTH ({buffer_length})")]
    FrameBeyondBufferLength {
        /// Bytes of the largest frame payload.
        bytes: u32,
        /// DP_BUFFER_LENGTH.
        buffer_length: u32,
    },
    /// Code 9: the enabled VP (detail 0) has no host address: detail 1 is the offset of the
    /// register left 0 (`reg::DP_HOST_IP` or `reg::DP_HOST_UDP_PORT`).
    #[error("VP {vp}'s {} is 0: the data plane is not configured", register_name(*register))]
    HostUnset {
        /// The VP.
        vp: u32,
        /// Offset of the register in the VP block.
        register: u32,
    },
    /// Code 10: the peer's data plane is not running, so nothing can play.
    #[error("the peer's data plane is not running")]
    NoDataPlane,
    /// Any other code (a newer peer).
    #[error("refusal code {code} (details {:#x}, {:#x})", details[0], details[1])]
    Unknown {
        /// PLAYER_START_ERROR.
        code: u32,
        /// The detail words.
        details: [u32; 2],
    },
}

fn register_name(offset: u32) -> &'static str {
    match offset {
        reg::DP_HOST_IP => "DP_HOST_IP",
        reg::DP_HOST_UDP_PORT => "DP_HOST_UDP_PORT bits 15:0",
        _ => "host register",
    }
}

impl PlayerRefusal {
    /// The [`ext::PLAYER_START_ERROR`] code (never 0).
    pub fn code(&self) -> u32 {
        match *self {
            PlayerRefusal::NoVpEnabled => 1,
            PlayerRefusal::WindowTooSmall { .. } => 2,
            PlayerRefusal::WindowTooLarge { .. } => 3,
            PlayerRefusal::BadTemplate { .. } => 4,
            PlayerRefusal::ArgsBeyondWindow { .. } => 5,
            PlayerRefusal::QecMessageTooLarge { .. } => 6,
            PlayerRefusal::FrameBeyondSlot { .. } => 7,
            PlayerRefusal::FrameBeyondBufferLength { .. } => 8,
            PlayerRefusal::HostUnset { .. } => 9,
            PlayerRefusal::NoDataPlane => 10,
            PlayerRefusal::Unknown { code, .. } => code,
        }
    }

    /// The two detail words ([`ext::PLAYER_START_DETAIL`]).
    pub fn details(&self) -> [u32; 2] {
        match *self {
            PlayerRefusal::NoVpEnabled | PlayerRefusal::NoDataPlane => [0, 0],
            PlayerRefusal::WindowTooSmall { window } => [window, 0],
            PlayerRefusal::WindowTooLarge { window, limit } => [window, limit],
            PlayerRefusal::BadTemplate { first_word } => [first_word, 0],
            PlayerRefusal::ArgsBeyondWindow { arg_len, window } => [arg_len, window],
            PlayerRefusal::QecMessageTooLarge { bytes, limit } => [bytes, limit],
            PlayerRefusal::FrameBeyondSlot { bytes, slot } => [bytes, slot],
            PlayerRefusal::FrameBeyondBufferLength { bytes, buffer_length } => [bytes, buffer_length],
            PlayerRefusal::HostUnset { vp, register } => [vp, register],
            PlayerRefusal::Unknown { details, .. } => details,
        }
    }

    /// The refusal the three words describe; `None` for code 0 (the last start played).
    pub fn from_words(code: u32, details: [u32; 2]) -> Option<Self> {
        let [a, b] = details;
        Some(match code {
            0 => return None,
            1 => PlayerRefusal::NoVpEnabled,
            2 => PlayerRefusal::WindowTooSmall { window: a },
            3 => PlayerRefusal::WindowTooLarge { window: a, limit: b },
            4 => PlayerRefusal::BadTemplate { first_word: a },
            5 => PlayerRefusal::ArgsBeyondWindow { arg_len: a, window: b },
            6 => PlayerRefusal::QecMessageTooLarge { bytes: a, limit: b },
            7 => PlayerRefusal::FrameBeyondSlot { bytes: a, slot: b },
            8 => PlayerRefusal::FrameBeyondBufferLength { bytes: a, buffer_length: b },
            9 => PlayerRefusal::HostUnset { vp: a, register: b },
            10 => PlayerRefusal::NoDataPlane,
            code => PlayerRefusal::Unknown { code, details },
        })
    }
}

/// Clock of the player, the unit of [`reg::PLAYER_INTERVAL`].
pub const PLAYER_CLOCK_HZ: u64 = 156_250_000;

/// Bits of [`CaptureRecord::flags`].
pub mod capture_flags {
    /// The result bytes were what the player expected.
    pub const PAYLOAD_OK: u32 = 1;
    /// The response header (magic, request_id, timestamp echo) was right.
    pub const HEADER_OK: u32 = 2;
    /// A second answer for the same request.
    pub const DUPLICATE: u32 = 4;
    /// QEC replay: the answer to the last message of a shot (its round trip is the reaction
    /// latency). In QEC mode [`PAYLOAD_OK`] means the answer has the form its message
    /// calls for: OK with no result before the last message, OK with correction bits and a
    /// decode report on it.
    pub const FINAL_ROUND: u32 = 8;
    /// QEC replay: the correction equals the true observables.
    pub const LOGICAL_OK: u32 = 16;
    /// QEC replay: the correction equals the reference prediction (only when one is loaded).
    pub const MATCHES_REFERENCE: u32 = 32;
    /// QEC replay: the decode report says overflow (not decoded).
    pub const OVERFLOW: u32 = 64;
    /// QEC replay: the decode report says unmatchable.
    pub const UNMATCHABLE: u32 = 128;
}

/// One captured answer, as the peer stores it in capture RAM and a host reads it over ECB.
///
/// Word layout (8 u32 words at `reg::CAPTURE_RAM + 32 * i`, each read with one RD_DWORD or
/// as part of a RD_BLOCK, so each word is a host-order u32; 64-bit times are split low word
/// first):
///
/// | word | field |
/// |---|---|
/// | 0 | request_id |
/// | 1 | echoed_timestamp bits 31:0 |
/// | 2 | echoed_timestamp bits 63:32 |
/// | 3 | arrival_timestamp bits 31:0 |
/// | 4 | arrival_timestamp bits 63:32 |
/// | 5 | flags ([`capture_flags`]) |
/// | 6 | result_len |
/// | 7 | rpc_status as u32 (two's complement) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CaptureRecord {
    /// request_id of the answer.
    pub request_id: u32,
    /// The PTP timestamp the answer echoed (the request's send time).
    pub echoed_timestamp: u64,
    /// PTP time the answer arrived at the peer.
    pub arrival_timestamp: u64,
    /// [`capture_flags`] bits.
    pub flags: u32,
    /// result_len of the answer.
    pub result_len: u32,
    /// status of the answer.
    pub rpc_status: i32,
}

impl CaptureRecord {
    /// Words per record.
    pub const WORDS: usize = 8;
    /// Bytes per record in capture RAM.
    pub const STRIDE: u32 = 32;

    /// ECB address of record `i` of a capture (counted from the arm): its place in the ring.
    pub const fn address(i: u32) -> u32 {
        reg::CAPTURE_RAM + Self::STRIDE * (i % reg::CAPTURE_RAM_RECORDS)
    }

    /// A record of all zeros is no record: what a peer without capture RAM reads back
    /// (PROTOCOLS.md 2.2: a register it lacks may read 0 with status OK).
    pub fn is_blank(&self) -> bool {
        *self == CaptureRecord::default()
    }

    /// The 8 words, in the documented order.
    pub fn to_words(&self) -> [u32; 8] {
        [
            self.request_id,
            self.echoed_timestamp as u32,
            (self.echoed_timestamp >> 32) as u32,
            self.arrival_timestamp as u32,
            (self.arrival_timestamp >> 32) as u32,
            self.flags,
            self.result_len,
            self.rpc_status as u32,
        ]
    }

    /// The record from its 8 words.
    pub fn from_words(w: &[u32; 8]) -> Self {
        CaptureRecord {
            request_id: w[0],
            echoed_timestamp: u64::from(w[1]) | u64::from(w[2]) << 32,
            arrival_timestamp: u64::from(w[3]) | u64::from(w[4]) << 32,
            flags: w[5],
            result_len: w[6],
            rpc_status: w[7] as i32,
        }
    }

    /// Round-trip time in PTP ticks (ns), wrapping.
    pub fn round_trip(&self) -> u64 {
        self.arrival_timestamp.wrapping_sub(self.echoed_timestamp)
    }
}

/// XORs `args` with a keystream from splitmix64 seeded with `request_id`.
///
/// The player applies it when [`reg::PLAYER_SCRAMBLE`] is set so that every message's
/// bytes differ (a stale slot can then never look like a fresh echo). Keystream: `state =
/// request_id as u64`; for each 8-byte chunk, `state += 0x9E3779B97F4A7C15`, mix (Steele,
/// Lea, Flood 2014), XOR the chunk with the little-endian bytes of the result (a short
/// last chunk uses the leading bytes). XOR makes it an involution: applying it twice
/// restores the input.
pub fn scramble_args(request_id: u32, args: &mut [u8]) {
    let mut state = u64::from(request_id);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    // Whole chunks as one 64-bit XOR each (little-endian, as the keystream is defined).
    let mut chunks = args.chunks_exact_mut(8);
    for chunk in &mut chunks {
        if let Ok(c) = <&mut [u8; 8]>::try_from(chunk) {
            *c = (u64::from_le_bytes(*c) ^ next()).to_le_bytes();
        }
    }
    let last = chunks.into_remainder();
    if !last.is_empty() {
        for (b, k) in last.iter_mut().zip(next().to_le_bytes()) {
            *b ^= k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static RECORD_WORDS: [u32; 8] = [7, 0x0506_0708, 0x0102_0304, 0x0506_1708, 0x0102_0304, 3, 64, 0xFFFF_FFFE];

    fn record() -> CaptureRecord {
        CaptureRecord {
            request_id: 7,
            echoed_timestamp: 0x0102_0304_0506_0708,
            arrival_timestamp: 0x0102_0304_0506_1708,
            flags: capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK,
            result_len: 64,
            rpc_status: -2,
        }
    }

    #[test]
    fn test_deconstruct() {
        let r = CaptureRecord::from_words(&RECORD_WORDS);
        assert_eq!(r.request_id, 7);
        assert_eq!(r.rpc_status, -2);
        assert_eq!(r.round_trip(), 0x1000);
    }

    #[test]
    fn test_construct() {
        assert_eq!(record().to_words(), RECORD_WORDS);
    }

    #[test]
    fn test_parse() {
        assert_eq!(CaptureRecord::from_words(&RECORD_WORDS), record());
    }

    #[test]
    fn test_emit() {
        let r = record();
        assert_eq!(CaptureRecord::from_words(&r.to_words()), r);
        let extremes = CaptureRecord {
            request_id: u32::MAX,
            echoed_timestamp: u64::MAX,
            arrival_timestamp: 0,
            flags: u32::MAX,
            result_len: 0,
            rpc_status: i32::MIN,
        };
        assert_eq!(CaptureRecord::from_words(&extremes.to_words()), extremes);
    }

    #[test]
    fn register_addresses() {
        assert_eq!(reg::vp(0, reg::DP_QP), 0x1000);
        assert_eq!(reg::vp(2, reg::DP_HOST_UDP_PORT), 0x10AC);
        assert_eq!(reg::hif(0, reg::DP_VP_MASK), 0x0200_030C);
        assert_eq!(reg::hif(1, reg::DP_PACKET_SIZE), 0x0201_0304);
        assert_eq!(CaptureRecord::address(2), 0x4010_0040);
        // the ring: record CAPTURE_RAM_RECORDS + 2 overwrites record 2
        assert_eq!(CaptureRecord::address(reg::CAPTURE_RAM_RECORDS + 2), 0x4010_0040);
        assert_eq!(CaptureRecord::address(reg::CAPTURE_RAM_RECORDS - 1), 0x401F_FFE0);
        assert!(CaptureRecord::default().is_blank());
        assert!(!CaptureRecord { request_id: 1, ..Default::default() }.is_blank());
        assert_eq!(reg::vp(u32::MAX, u32::MAX), reg::vp(u32::MAX, u32::MAX));
        assert_eq!(CaptureRecord::WORDS * 4, CaptureRecord::STRIDE as usize);
    }

    #[test]
    fn regions_are_ordered_and_disjoint() {
        for w in reg::REGIONS.windows(2) {
            assert!(w[0].first <= w[0].last && w[0].last < w[1].first, "{w:?}");
        }
        for a in [reg::SENSOR_TX_ENABLE, reg::APB_SEQUENCER_RAM, 0x22C, reg::hif(1, reg::DP_VP_MASK)] {
            assert!(reg::region_of(a).is_some(), "{a:#x}");
        }
        assert_eq!(reg::region_of(0x0000_0F00), None);
        assert_eq!(reg::region_of(0x5000_1000), None);
        assert_eq!(reg::region_of(ext::PLAYER_START_DETAIL + 4).map(|r| r.name), Some("player"));
        assert_eq!(reg::region_of(ext::QEC_DECODE_MAX_NS).map(|r| r.name), Some("capture"));
    }

    #[test]
    fn player_refusals_round_trip_their_words() {
        let all = [
            PlayerRefusal::NoVpEnabled,
            PlayerRefusal::WindowTooSmall { window: 0 },
            PlayerRefusal::WindowTooLarge { window: 5000, limit: 4096 },
            PlayerRefusal::BadTemplate { first_word: 0 },
            PlayerRefusal::ArgsBeyondWindow { arg_len: 9, window: 28 },
            PlayerRefusal::QecMessageTooLarge { bytes: 9000, limit: 4096 },
            PlayerRefusal::FrameBeyondSlot { bytes: 200, slot: 128 },
            PlayerRefusal::FrameBeyondBufferLength { bytes: 200, buffer_length: 64 },
            PlayerRefusal::HostUnset { vp: 3, register: reg::DP_HOST_IP },
            PlayerRefusal::NoDataPlane,
            PlayerRefusal::Unknown { code: 77, details: [1, 2] },
        ];
        for (i, r) in all.iter().enumerate() {
            assert_eq!(PlayerRefusal::from_words(r.code(), r.details()), Some(*r));
            if i < 10 {
                assert_eq!(r.code(), i as u32 + 1);
            }
        }
        assert_eq!(PlayerRefusal::from_words(0, [5, 5]), None);
        assert_eq!(
            PlayerRefusal::BadTemplate { first_word: 0 }.to_string(),
            "player RAM holds no CUQR request template (its first word is 0x00000000, not 0x43555152)"
        );
        assert_eq!(
            PlayerRefusal::HostUnset { vp: 0, register: reg::DP_HOST_IP }.to_string(),
            "VP 0's DP_HOST_IP is 0: the data plane is not configured"
        );
    }

    #[test]
    fn scramble_matches_its_bytewise_definition() {
        // The keystream as the docs define it, one byte at a time.
        fn reference(request_id: u32, args: &mut [u8]) {
            let mut state = u64::from(request_id);
            for chunk in args.chunks_mut(8) {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                for (b, k) in chunk.iter_mut().zip(z.to_le_bytes()) {
                    *b ^= k;
                }
            }
        }
        for len in 0..=70 {
            for id in [0, 1, 42, 0xFFFF_FFFF] {
                let original: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
                let mut a = original.clone();
                let mut b = original.clone();
                scramble_args(id, &mut a);
                reference(id, &mut b);
                assert_eq!(a, b, "len {len} id {id}");
            }
        }
        // A pinned value: the first keystream word for request id 0 (splitmix64 of seed 0).
        let mut z = [0u8; 8];
        scramble_args(0, &mut z);
        assert_eq!(u64::from_le_bytes(z), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn scramble_is_an_involution_and_depends_on_request_id() {
        let original: Vec<u8> = (0..=255u8).cycle().take(1037).collect();
        let mut a = original.clone();
        scramble_args(42, &mut a);
        assert_ne!(a, original);
        let mut b = original.clone();
        scramble_args(43, &mut b);
        assert_ne!(a, b);
        scramble_args(42, &mut a);
        assert_eq!(a, original);
        // Deterministic: a short buffer gets the leading bytes of the same stream.
        let mut long = [0u8; 16];
        scramble_args(42, &mut long);
        let mut short = [0u8; 5];
        scramble_args(42, &mut short);
        assert_eq!(&long[..5], &short[..]);
        scramble_args(1, &mut []);
    }

    #[test]
    fn scramble_keystream_is_splitmix64() {
        // splitmix64 with seed 0: first output 0xE220A8397B1DCDAF (reference implementation).
        let mut zeros = [0u8; 8];
        scramble_args(0, &mut zeros);
        assert_eq!(u64::from_le_bytes(zeros), 0xE220_A839_7B1D_CDAF);
    }
}

#[cfg(test)]
mod decode_bin_tests {
    use super::ext::{qec_decode_bin, qec_decode_bin_edge, QEC_DECODE_BINS};

    #[test]
    fn decode_bins_are_monotonic_cover_every_value_and_stay_within_3_percent() {
        let mut prev = 0;
        let mut ns = 0u32;
        while ns < u32::MAX - ns / 97 - 1 {
            let b = qec_decode_bin(ns);
            assert!(b >= prev && b < QEC_DECODE_BINS, "{ns}");
            let hi = qec_decode_bin_edge(b);
            let lo = if b == 0 { 0 } else { qec_decode_bin_edge(b - 1) };
            assert!(lo <= ns && (ns < hi || b == QEC_DECODE_BINS - 1), "{ns}: bin {b} [{lo}, {hi})");
            if ns >= 2048 && b < QEC_DECODE_BINS - 1 {
                assert!(f64::from(hi - lo) <= 0.032 * f64::from(lo), "{ns}: bin {b} [{lo}, {hi})");
            }
            prev = b;
            ns += 1 + ns / 97;
        }
        assert_eq!(qec_decode_bin(31), 0);
        assert_eq!(qec_decode_bin(2047), 63);
        assert_eq!(qec_decode_bin(2048), 64);
        assert_eq!(qec_decode_bin(u32::MAX), QEC_DECODE_BINS - 1);
    }
}
