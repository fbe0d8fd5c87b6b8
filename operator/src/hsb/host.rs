//! What an HSB host does to a peer over ECB: check the IP version, configure the data plane
//! (the RoCE target of a sensor's frames), program the traffic player, arm the capture RAM,
//! run, and read the captured answers back.
//!
//! QEC syndrome replay (fpga-sim's QEC mode, `hsb::ext::QEC_*`): [`HsbHost::qec_info`] reads
//! what the peer holds, [`HsbHost::set_qec`] turns the replay on with the decoder's rounds per
//! message, [`HsbHost::program_qec_player`] sets shots, syndrome cycle and window (the replay
//! replaces the player RAM template), and [`HsbHost::read_qec_counters`] reads the results.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use rocelink_wire::ecb::Status;
use rocelink_wire::hsb::{ext, reg, CaptureRecord, PlayerRefusal, PLAYER_CLOCK_HZ};

use super::ecb_client::{EcbClient, EcbError};

/// The RoCE target of one sensor ("virtual port") of the peer (PROTOCOLS.md 2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPlaneConfig {
    /// Sensor / virtual port index.
    pub vp: u32,
    /// Data plane (HIF block) index.
    pub data_plane: u32,
    /// Our QP number.
    pub qpn: u32,
    /// R_Key of our RX buffer.
    pub rkey: u32,
    /// Address of RX slot 0.
    pub buffer_addr: u64,
    /// Bytes between slots (a multiple of 128).
    pub page_stride: u32,
    /// Number of slots.
    pub pages: u32,
    /// Frame length in bytes.
    pub frame_len: u32,
    pub host_mac: [u8; 6],
    pub host_ip: Ipv4Addr,
    /// UDP port the host receives RoCE on (4791).
    pub host_port: u16,
    /// UDP source port of the peer's frames (HSB hosts write 12288).
    pub peer_src_port: u16,
    /// Payload bytes per packet (rounded to 128).
    pub packet_size: u32,
}

/// What the traffic player sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayerConfig {
    /// The frame: an RPC request header (CUQR) then the args.
    pub template: Vec<u8>,
    /// Frames to send.
    pub count: u32,
    /// Time between frames in open loop.
    pub interval: Duration,
    /// Closed loop: the next frame leaves when the previous answer is back (extension).
    pub closed_loop: bool,
    /// Stamp the send time into each frame's ptp_timestamp.
    pub stamp: bool,
    /// Scramble each frame's args with its request_id (extension), so every frame differs.
    pub scramble: bool,
    pub first_request_id: u32,
    /// An answer not back by then is lost (extension).
    pub response_timeout: Duration,
    /// The peer's QP (extension; 2 by default).
    pub peer_qpn: u32,
}

/// The peer's counters (a rocelink extension; `None` from a peer without them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PeerStats {
    pub sent: u32,
    pub received: u32,
    pub icrc_failures: u32,
    pub malformed: u32,
    pub stalls: u32,
    pub unexpected: u32,
}

/// The QEC replay a peer holds, as its registers say (QEC_CTRL ..= QEC_MAX_MESSAGE_BYTES).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QecInfo {
    /// QEC_LOADED: shots are loaded.
    pub loaded: bool,
    /// QEC_ENABLE: a run replays them (instead of the player RAM template).
    pub enabled: bool,
    /// QEC_HAS_REFERENCE: a reference prediction is loaded, so disagreements are counted.
    pub has_reference: bool,
    /// QEC_ROUNDS_PER_MESSAGE (0: a whole shot per message).
    pub rounds_per_message: u32,
    pub loaded_shots: u32,
    pub detectors: u32,
    pub observables: u32,
    pub rounds_per_shot: u32,
    /// At the current rounds per message.
    pub messages_per_shot: u32,
    /// Bytes of the largest message at the current rounds per message: the slots must hold
    /// it.
    pub max_message_bytes: u32,
}

/// A QEC run's results, as the peer counts them (`hsb::QecCounters`, the registers' one
/// definition), and its response timeouts (`STAT_TIMEOUTS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QecCounters {
    #[serde(flatten)]
    pub peer: rocelink_wire::hsb::QecCounters,
    /// Messages never answered within the response timeout.
    pub timeouts: u32,
}

impl std::ops::Deref for QecCounters {
    type Target = rocelink_wire::hsb::QecCounters;
    fn deref(&self) -> &Self::Target {
        &self.peer
    }
}

pub use rocelink_wire::hsb::DecoderTime;

/// How a QEC run plays its shots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QecPlayerConfig {
    /// Shots (PLAYER_WINDOW_COUNT: one window per shot).
    pub shots: u32,
    /// Player clocks (156.25 MHz) per round; 0: no cycle.
    pub interval_clocks: u32,
    /// One message in flight (PLAYER_MAX_OUTSTANDING 1); else up to 64.
    pub closed_loop: bool,
    pub first_request_id: u32,
    /// A message not answered by then is given up on (and counted).
    pub response_timeout: Duration,
    pub peer_qpn: u32,
}

/// A host talking to one peer.
pub struct HsbHost {
    ecb: EcbClient,
    /// Extension registers the peer refused (a real FPGA): their effect is missing.
    pub missing_extensions: Vec<&'static str>,
}

impl HsbHost {
    pub fn new(ecb: EcbClient) -> HsbHost {
        HsbHost { ecb, missing_extensions: Vec::new() }
    }

    pub fn ecb(&mut self) -> &mut EcbClient {
        &mut self.ecb
    }

    /// Reads HSB_IP_VERSION and refuses a peer too old for RoCE (PROTOCOLS.md 2.1).
    pub fn check_version(&mut self) -> Result<u32, String> {
        let v = self.ecb.read(reg::HSB_IP_VERSION).map_err(|e| e.to_string())?;
        if v < reg::MIN_ROCE_IP_VERSION {
            return Err(format!(
                "peer HSB IP version {v:#06x} is below {:#06x}, the first with RoCE transmit",
                reg::MIN_ROCE_IP_VERSION
            ));
        }
        Ok(v)
    }

    /// Configures the data plane in the HSB order: clear the enable mask, write the
    /// registers, set the mask (PROTOCOLS.md 2.2).
    pub fn configure(&mut self, c: &DataPlaneConfig) -> Result<(), EcbError> {
        let vp = |off| reg::vp(c.vp, off);
        let hif = |off| reg::hif(c.data_plane, off);
        let mac = c.host_mac;
        self.ecb.write(hif(reg::DP_VP_MASK), 0)?;
        let pairs = [
            (vp(reg::DP_QP), c.qpn & 0xff_ffff),
            (vp(reg::DP_RKEY), c.rkey),
            (vp(reg::DP_PAGE_LSB), c.buffer_addr as u32),
            (vp(reg::DP_PAGE_MSB), (c.buffer_addr >> 32) as u32),
            (vp(reg::DP_PAGE_INC), c.page_stride / 128),
            (vp(reg::DP_MAX_BUFF), c.pages.saturating_sub(1)),
            (vp(reg::DP_BUFFER_LENGTH), c.frame_len),
            (vp(reg::DP_HOST_MAC_LOW), u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]])),
            (vp(reg::DP_HOST_MAC_HIGH), u32::from(mac[0]) << 8 | u32::from(mac[1])),
            (vp(reg::DP_HOST_IP), u32::from(c.host_ip)),
            (vp(reg::DP_HOST_UDP_PORT), u32::from(c.host_port)),
            (hif(reg::DP_PACKET_SIZE), c.packet_size.div_ceil(128)),
            (hif(reg::DP_PACKET_UDP_PORT), u32::from(c.peer_src_port)),
        ];
        for (a, v) in pairs {
            self.ecb.write(a, v)?;
        }
        self.ecb.write(hif(reg::DP_VP_MASK), 1 << c.vp)
    }

    /// Undoes [`Self::configure`]: mask cleared, registers zeroed.
    pub fn unconfigure(&mut self, vp_index: u32, data_plane: u32) -> Result<(), EcbError> {
        self.ecb.write(reg::hif(data_plane, reg::DP_VP_MASK), 0)?;
        for off in (0..=reg::DP_HOST_UDP_PORT).step_by(4) {
            if off == 0x1C {
                continue;
            }
            self.ecb.write(reg::vp(vp_index, off), 0)?;
        }
        Ok(())
    }

    fn write_ext(&mut self, addr: u32, value: u32, name: &'static str) -> Result<(), EcbError> {
        match self.ecb.write(addr, value) {
            Err(e) if e.is_invalid_address() => {
                tracing::warn!("peer has no {name} register ({addr:#x}); continuing without it");
                self.missing_extensions.push(name);
                Ok(())
            }
            r => r,
        }
    }

    /// Loads the frame template and the player's settings; does not start it.
    pub fn program_player(&mut self, p: &PlayerConfig) -> Result<(), EcbError> {
        self.ecb.write(reg::PLAYER_ENABLE, 0)?;
        // Player RAM word i = template bytes 4i..4i+4, little-endian (the peer convention
        // documented in fpga-sim's register model).
        let words: Vec<(u32, u32)> = p
            .template
            .chunks(4)
            .enumerate()
            .map(|(i, c)| {
                let mut w = [0u8; 4];
                w[..c.len()].copy_from_slice(c);
                (reg::PLAYER_RAM + 4 * i as u32, u32::from_le_bytes(w))
            })
            .collect();
        self.ecb.write_block(&words)?;
        self.ecb.write(reg::PLAYER_WINDOW_SIZE, p.template.len() as u32)?;
        self.ecb.write(reg::PLAYER_WINDOW_COUNT, p.count)?;
        let clocks = (p.interval.as_nanos() * u128::from(PLAYER_CLOCK_HZ) / 1_000_000_000).min(u32::MAX as u128) as u32;
        self.ecb.write(reg::PLAYER_INTERVAL, clocks)?;
        self.write_ext(ext::PLAYER_MAX_OUTSTANDING, u32::from(p.closed_loop), "closed-loop")?;
        self.write_ext(ext::PLAYER_FPGA_QP, p.peer_qpn, "peer QP")?;
        self.write_ext(ext::PLAYER_FIRST_REQUEST_ID, p.first_request_id, "first request id")?;
        let timeout_us = p.response_timeout.as_micros().min(u32::MAX as u128) as u32;
        self.write_ext(ext::PLAYER_RESPONSE_TIMEOUT_US, timeout_us, "response timeout")?;
        Ok(())
    }

    /// Arms the capture RAM (clearing what it held).
    pub fn arm_capture(&mut self) -> Result<(), EcbError> {
        self.ecb.write(reg::CAPTURE_CTRL, 0)?;
        self.ecb.write(reg::CAPTURE_CTRL, reg::CAPTURE_ARM)
    }

    /// Starts the player. A peer whose player cannot play answers the start with
    /// `Status::Refused`: the error is then [`EcbError::PlayerRefused`], with the reason
    /// from its PLAYER_START_ERROR (the convention of `hsb::ext::PLAYER_START_ERROR`).
    pub fn start_player(&mut self, p: &PlayerConfig) -> Result<(), EcbError> {
        let mut en = reg::PLAYER_RUN;
        if p.stamp {
            en |= reg::PLAYER_STAMP_PTP;
        }
        if p.scramble {
            en |= reg::PLAYER_SCRAMBLE;
        }
        self.start(en)
    }

    /// Writes the run bit; a refusal becomes [`EcbError::PlayerRefused`] with its reason.
    fn start(&mut self, enable: u32) -> Result<(), EcbError> {
        match self.ecb.write(reg::PLAYER_ENABLE, enable) {
            Err(EcbError::Status { peer, status: Status::Refused, .. }) => {
                let mut w = Vec::new();
                let reason = match self.ecb.read_block(
                    &[ext::PLAYER_START_ERROR, ext::PLAYER_START_DETAIL, ext::PLAYER_START_DETAIL + 4],
                    &mut w,
                ) {
                    Ok(()) => PlayerRefusal::from_words(w[0], [w[1], w[2]]),
                    // A peer without the register (0x03, or another status): no reason.
                    Err(EcbError::Status { .. }) => None,
                    Err(e) => return Err(e),
                };
                Err(EcbError::PlayerRefused { peer, reason })
            }
            r => r,
        }
    }

    pub fn stop_player(&mut self) -> Result<(), EcbError> {
        self.ecb.write(reg::PLAYER_ENABLE, 0)
    }

    /// Records captured so far.
    pub fn capture_count(&mut self) -> Result<u32, EcbError> {
        self.ecb.read(reg::CAPTURE_COUNT)
    }

    pub fn capture_done(&mut self) -> Result<bool, EcbError> {
        Ok(self.ecb.read(reg::CAPTURE_STATUS)? & reg::CAPTURE_DONE != 0)
    }

    /// Polls until the capture is done, `deadline` passes, or `keep_going` says stop.
    /// `progress` sees the record count at each poll.
    pub fn wait_capture_done(
        &mut self,
        deadline: Instant,
        poll: Duration,
        mut progress: impl FnMut(u32) -> bool,
    ) -> Result<bool, EcbError> {
        loop {
            if self.capture_done()? {
                return Ok(true);
            }
            let n = self.capture_count()?;
            if !progress(n) || Instant::now() > deadline {
                return Ok(false);
            }
            std::thread::sleep(poll);
        }
    }

    /// Reads records `0..count` of the capture RAM.
    pub fn read_capture(&mut self, count: u32) -> Result<Vec<CaptureRecord>, EcbError> {
        let addrs: Vec<u32> = (0..count)
            .flat_map(|i| (0..CaptureRecord::WORDS as u32).map(move |w| CaptureRecord::address(i) + 4 * w))
            .collect();
        let mut words = Vec::with_capacity(addrs.len());
        self.ecb.read_block(&addrs, &mut words)?;
        Ok(words
            .chunks_exact(CaptureRecord::WORDS)
            .map(|c| CaptureRecord::from_words(c.try_into().expect("8 words")))
            .collect())
    }

    /// The peer's QEC replay (`None`: a peer without the QEC registers, such as a real FPGA).
    pub fn qec_info(&mut self) -> Result<Option<QecInfo>, EcbError> {
        let addrs: Vec<u32> = (ext::QEC_CTRL..=ext::QEC_MAX_MESSAGE_BYTES).step_by(4).collect();
        let mut v = Vec::new();
        match self.ecb.read_block(&addrs, &mut v) {
            Ok(()) => {}
            Err(e) if e.is_invalid_address() => return Ok(None),
            Err(e) => return Err(e),
        }
        let word = |a: u32| v.get(((a - ext::QEC_CTRL) / 4) as usize).copied().unwrap_or(0);
        let ctrl = word(ext::QEC_CTRL);
        Ok(Some(QecInfo {
            loaded: ctrl & ext::QEC_LOADED != 0,
            enabled: ctrl & ext::QEC_ENABLE != 0,
            has_reference: ctrl & ext::QEC_HAS_REFERENCE != 0,
            rounds_per_message: word(ext::QEC_ROUNDS_PER_MESSAGE),
            loaded_shots: word(ext::QEC_LOADED_SHOTS),
            detectors: word(ext::QEC_DETECTORS),
            observables: word(ext::QEC_OBSERVABLES),
            rounds_per_shot: word(ext::QEC_ROUNDS_PER_SHOT),
            messages_per_shot: word(ext::QEC_MESSAGES_PER_SHOT),
            max_message_bytes: word(ext::QEC_MAX_MESSAGE_BYTES),
        }))
    }

    /// Turns the replay on (or off, for template runs) with `rounds_per_message` rounds per
    /// message, and reads back what the peer then holds (messages per shot and their size
    /// depend on it).
    pub fn set_qec(&mut self, enable: bool, rounds_per_message: u32) -> Result<Option<QecInfo>, EcbError> {
        self.ecb.write(ext::QEC_ROUNDS_PER_MESSAGE, rounds_per_message)?;
        self.ecb.write(ext::QEC_CTRL, if enable { ext::QEC_ENABLE } else { 0 })?;
        self.qec_info()
    }

    /// Programs a QEC run: shots, syndrome cycle, window. The player RAM is not written (the
    /// replay's messages replace its template); the run starts with [`Self::start_qec_player`].
    pub fn program_qec_player(&mut self, p: &QecPlayerConfig) -> Result<(), EcbError> {
        self.ecb.write(reg::PLAYER_ENABLE, 0)?;
        self.ecb.write(reg::PLAYER_WINDOW_COUNT, p.shots)?;
        self.ecb.write(reg::PLAYER_INTERVAL, p.interval_clocks)?;
        // The QEC registers answered, so the peer has these extensions too.
        self.ecb.write(ext::PLAYER_MAX_OUTSTANDING, u32::from(p.closed_loop))?;
        self.ecb.write(ext::PLAYER_FPGA_QP, p.peer_qpn)?;
        self.ecb.write(ext::PLAYER_FIRST_REQUEST_ID, p.first_request_id)?;
        self.ecb.write(ext::PLAYER_RESPONSE_TIMEOUT_US, p.response_timeout.as_micros().min(u128::from(u32::MAX)) as u32)
    }

    /// Starts a QEC run (messages always carry their send time); a refusal as in
    /// [`Self::start_player`].
    pub fn start_qec_player(&mut self) -> Result<(), EcbError> {
        self.start(reg::PLAYER_RUN | reg::PLAYER_STAMP_PTP)
    }

    /// The QEC run's results (`None`: a peer without the QEC registers).
    pub fn read_qec_counters(&mut self) -> Result<Option<QecCounters>, EcbError> {
        let mut addrs: Vec<u32> = (ext::QEC_SHOTS_SENT..=ext::QEC_LAST_CORRECTION_HI).step_by(4).collect();
        let counters = addrs.len();
        addrs.extend((0..ext::QEC_STATUS_WORDS).map(|i| ext::QEC_STATUS_COUNTS + 4 * i));
        let mut v = Vec::new();
        match self.ecb.read_block(&addrs, &mut v) {
            Ok(()) => {}
            Err(e) if e.is_invalid_address() => return Ok(None),
            Err(e) => return Err(e),
        }
        let word = |a: u32| v.get(((a - ext::QEC_SHOTS_SENT) / 4) as usize).copied().unwrap_or(0);
        let time = |lo: u32| u64::from(word(lo)) | u64::from(word(lo + 4)) << 32;
        let mut status = [0u32; 8];
        for (s, w) in status.iter_mut().zip(v.iter().skip(counters)) {
            *s = *w;
        }
        let timeouts = match self.ecb.read(ext::STATS_BASE + ext::STAT_TIMEOUTS) {
            Ok(t) => t,
            Err(e) if e.is_invalid_address() => 0,
            Err(e) => return Err(e),
        };
        let mut decode = Vec::new();
        match self.ecb.read_block(
            &[ext::QEC_DECODE_COUNT, ext::QEC_DECODE_P50_NS, ext::QEC_DECODE_P99_NS, ext::QEC_DECODE_MAX_NS],
            &mut decode,
        ) {
            Ok(()) => {}
            Err(e) if e.is_invalid_address() => decode.clear(),
            Err(e) => return Err(e),
        }
        let dw = |i: usize| decode.get(i).copied().unwrap_or(0);
        Ok(Some(QecCounters {
            peer: rocelink_wire::hsb::QecCounters {
                shots_sent: word(ext::QEC_SHOTS_SENT),
                shots_decoded: word(ext::QEC_SHOTS_DECODED),
                logical_errors: word(ext::QEC_LOGICAL_ERRORS),
                disagreements: word(ext::QEC_DISAGREEMENTS),
                overflows: word(ext::QEC_OVERFLOWS),
                unmatchable: word(ext::QEC_UNMATCHABLE),
                rounds_sent: word(ext::QEC_ROUNDS_SENT),
                bad_answers: word(ext::QEC_BAD_ANSWERS),
                first_send_ns: time(ext::QEC_FIRST_SEND_LO),
                last_send_ns: time(ext::QEC_LAST_SEND_LO),
                last_correction_ns: time(ext::QEC_LAST_CORRECTION_LO),
                status,
                decode: DecoderTime { count: dw(0), p50_ns: dw(1), p99_ns: dw(2), max_ns: dw(3) },
            },
            timeouts,
        }))
    }

    /// The peer's counters, if it has the extension block.
    pub fn read_stats(&mut self) -> Result<Option<PeerStats>, EcbError> {
        let addrs: Vec<u32> = [
            ext::STAT_SENT,
            ext::STAT_RECEIVED,
            ext::STAT_ICRC_FAILURES,
            ext::STAT_MALFORMED,
            ext::STAT_STALLS,
            ext::STAT_UNEXPECTED,
        ]
        .iter()
        .map(|o| ext::STATS_BASE + o)
        .collect();
        let mut v = Vec::new();
        match self.ecb.read_block(&addrs, &mut v) {
            Ok(()) => Ok(Some(PeerStats {
                sent: v[0],
                received: v[1],
                icrc_failures: v[2],
                malformed: v[3],
                stalls: v[4],
                unexpected: v[5],
            })),
            Err(e) if e.is_invalid_address() => Ok(None),
            Err(e) => Err(e),
        }
    }
}
