//! Test helpers: a small ECB client (what a host does over UDP) and the player/capture
//! register sequence a latency client runs.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddrV4, UdpSocket};
use std::process::{Child, Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rocelink_link::{Backoff, Link};

use rocelink_wire::ecb::{self, flags, Command, Reply, Status};
use rocelink_wire::hsb::{ext, reg, CaptureRecord};
use rocelink_wire::rpc;

/// Starts `fpga-sim` as `cmd` says, with a stdin pipe (for `--exit-on-stdin-close`), and
/// waits for its ready line: the process, its ECB and its RoCE address.
pub fn spawn_ready(cmd: &mut Process) -> (Child, SocketAddrV4, SocketAddrV4) {
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn fpga-sim");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("ready line");
    let (ecb, roce) = rocelink_fpga_sim::cli::parse_ready_line(&line).unwrap_or_else(|| panic!("ready line: {line:?}"));
    (child, ecb, roce)
}

/// A test responder's next frame on `link`, into `buf`: polls (idling with `backoff`) until
/// one comes, or `None` once `stop` is set.
pub fn next_frame(link: &mut dyn Link, buf: &mut [u8], backoff: &mut Backoff, stop: &AtomicBool) -> Option<usize> {
    while !stop.load(Ordering::Relaxed) {
        match link.try_recv(buf) {
            Ok(Some(n)) => {
                backoff.reset();
                return Some(n);
            }
            Ok(None) => backoff.idle(),
            Err(e) => panic!("link: {e}"),
        }
    }
    None
}

/// Keeps a responder's first errors (20: enough to see what went wrong).
pub fn note_error(errors: &mut Vec<String>, e: String) {
    if errors.len() < 20 {
        errors.push(e);
    }
}

/// A host's ECB client: one request outstanding, replies matched on the sequence.
pub struct EcbClient {
    socket: UdpSocket,
    sequence: u16,
}

impl EcbClient {
    pub fn connect(server: SocketAddrV4) -> Self {
        let socket = UdpSocket::bind("127.0.0.2:0").expect("bind ECB client");
        socket.connect(server).expect("connect");
        socket.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        EcbClient { socket, sequence: 0 }
    }

    /// Sends raw bytes; returns the reply, if one comes within `wait`.
    pub fn raw(&self, request: &[u8], wait: Duration) -> Option<Vec<u8>> {
        self.socket.send(request).expect("send");
        self.socket.set_read_timeout(Some(wait)).expect("timeout");
        let mut buf = [0u8; 8192];
        let got = self.socket.recv(&mut buf).ok().map(|n| buf[..n].to_vec());
        self.socket.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        got
    }

    /// Sends one command with sequence checking and ACK; returns the reply pairs.
    pub fn transact(&mut self, command: Command, pairs: &[(u32, u32)]) -> Result<Vec<(u32, u32)>, Status> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut req = [0u8; 4200];
        let n = ecb::emit_request(command, flags::ACK_REQUEST | flags::SEQUENCE_CHECK, self.sequence, pairs, &mut req)
            .expect("request");
        self.socket.send(&req[..n]).expect("send");
        let mut buf = [0u8; 8192];
        loop {
            let n = self.socket.recv(&mut buf).expect("ECB reply within 2 s");
            let rep = Reply::new_checked(&buf[..n]).expect("reply parses");
            if rep.sequence() != self.sequence {
                continue; // a late reply to an earlier request
            }
            return match rep.status() {
                Status::Ok => Ok(rep.pairs().collect()),
                s => {
                    // A rejected request does not move the peer's latched sequence: resync.
                    self.sequence = rep.latched_sequence();
                    Err(s)
                }
            };
        }
    }

    pub fn write(&mut self, addr: u32, value: u32) {
        self.transact(Command::WrDword, &[(addr, value)]).unwrap_or_else(|s| panic!("write {addr:#x}: {s:?}"));
    }

    pub fn read(&mut self, addr: u32) -> u32 {
        let p = self.transact(Command::RdDword, &[(addr, 0)]).unwrap_or_else(|s| panic!("read {addr:#x}: {s:?}"));
        p[0].1
    }

    pub fn write_block(&mut self, pairs: &[(u32, u32)]) {
        for chunk in pairs.chunks(ecb::MAX_PAIRS) {
            self.transact(Command::WrBlock, chunk).unwrap_or_else(|s| panic!("write block: {s:?}"));
        }
    }

    /// Reads `count` consecutive words from `base`.
    pub fn read_words(&mut self, base: u32, count: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(count);
        let addrs: Vec<(u32, u32)> = (0..count as u32).map(|i| (base + 4 * i, 0)).collect();
        for chunk in addrs.chunks(ecb::MAX_PAIRS) {
            let p = self.transact(Command::RdBlock, chunk).unwrap_or_else(|s| panic!("read block: {s:?}"));
            out.extend(p.into_iter().map(|(_, v)| v));
        }
        out
    }

    pub fn stat(&mut self, offset: u32) -> u32 {
        self.read(ext::STATS_BASE + offset)
    }
}

/// The host side of the data-plane setup (PROTOCOLS.md 2.2).
#[derive(Debug, Clone, Copy)]
pub struct HostSetup {
    pub qp: u32,
    pub rkey: u32,
    pub buffer_va: u64,
    /// In 128-byte units.
    pub page_inc: u32,
    pub slots: u32,
    pub mac: [u8; 6],
    pub ip: [u8; 4],
    pub src_port: u16,
}

pub const HOST: HostSetup = HostSetup {
    qp: 0x0000_00A7,
    rkey: 0x1234_5678,
    buffer_va: 0x0000_7F00_1000_0000,
    page_inc: 4096 / 128,
    slots: 64,
    mac: [0x02, 0, 0, 0, 0, 0x01],
    ip: [127, 0, 0, 1],
    src_port: 12288,
};

/// Configures VP 0 in the order HSB hosts use: clear the mask, write, set the mask.
pub fn configure_vp(c: &mut EcbClient, h: &HostSetup) {
    assert!(c.read(reg::HSB_IP_VERSION) >= reg::MIN_ROCE_IP_VERSION);
    c.write(reg::hif(0, reg::DP_VP_MASK), 0);
    let mac_high = u32::from(h.mac[0]) << 8 | u32::from(h.mac[1]);
    let mac_low = u32::from_be_bytes([h.mac[2], h.mac[3], h.mac[4], h.mac[5]]);
    c.write_block(&[
        (reg::vp(0, reg::DP_QP), h.qp),
        (reg::vp(0, reg::DP_RKEY), h.rkey),
        (reg::vp(0, reg::DP_PAGE_LSB), h.buffer_va as u32),
        (reg::vp(0, reg::DP_PAGE_MSB), (h.buffer_va >> 32) as u32),
        (reg::vp(0, reg::DP_PAGE_INC), h.page_inc),
        (reg::vp(0, reg::DP_MAX_BUFF), h.slots - 1),
        (reg::vp(0, reg::DP_BUFFER_LENGTH), 4096),
        (reg::vp(0, reg::DP_HOST_MAC_LOW), mac_low),
        (reg::vp(0, reg::DP_HOST_MAC_HIGH), mac_high),
        (reg::vp(0, reg::DP_HOST_IP), u32::from_be_bytes(h.ip)),
        (reg::vp(0, reg::DP_HOST_UDP_PORT), 4791),
        (reg::hif(0, reg::DP_PACKET_UDP_PORT), u32::from(h.src_port)),
    ]);
    c.write(reg::hif(0, reg::DP_VP_MASK), 1);
}

/// An echo request template of `arg_len` bytes of arguments.
pub fn echo_template(arg_len: usize) -> Vec<u8> {
    let args: Vec<u8> = (0..arg_len).map(|i| i as u8).collect();
    rpc::request(rpc::function_id::ECHO, 0, 0, &args)
}

/// A player run as a latency client programs it.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub frames: u32,
    pub max_outstanding: u32,
    pub interval_clocks: u32,
    pub first_request_id: u32,
    pub timeout_us: u32,
    pub enable: u32,
}

/// Writes the template (little-endian words, the peer's player RAM convention), programs
/// the player, arms the capture and sets the run bit.
pub fn start_run(c: &mut EcbClient, template: &[u8], run: &Run) {
    let mut padded = template.to_vec();
    padded.resize(template.len().div_ceil(4) * 4, 0);
    let words: Vec<(u32, u32)> = padded
        .chunks(4)
        .enumerate()
        .map(|(i, w)| (reg::PLAYER_RAM + 4 * i as u32, u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    c.write_block(&words);
    c.write_block(&[
        (reg::PLAYER_INTERVAL, run.interval_clocks),
        (reg::PLAYER_WINDOW_SIZE, template.len() as u32),
        (reg::PLAYER_WINDOW_COUNT, run.frames),
        (ext::PLAYER_MAX_OUTSTANDING, run.max_outstanding),
        (ext::PLAYER_FIRST_REQUEST_ID, run.first_request_id),
        (ext::PLAYER_RESPONSE_TIMEOUT_US, run.timeout_us),
    ]);
    c.write(reg::CAPTURE_CTRL, reg::CAPTURE_ARM);
    c.write(reg::PLAYER_ENABLE, run.enable | reg::PLAYER_RUN);
}

/// Polls CAPTURE_STATUS until done; panics after `limit`.
pub fn wait_done(c: &mut EcbClient, limit: Duration) {
    let t0 = Instant::now();
    while c.read(reg::CAPTURE_STATUS) & reg::CAPTURE_DONE == 0 {
        assert!(t0.elapsed() < limit, "capture not done after {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The data plane sets done just before it clears the run bit.
    while c.read(reg::PLAYER_ENABLE) & reg::PLAYER_RUN != 0 {
        assert!(t0.elapsed() < limit, "run bit still set after {limit:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Reads the whole capture back.
pub fn read_capture(c: &mut EcbClient) -> Vec<CaptureRecord> {
    let count = c.read(reg::CAPTURE_COUNT) as usize;
    let words = c.read_words(reg::CAPTURE_RAM, count * CaptureRecord::WORDS);
    words.chunks(CaptureRecord::WORDS).map(|w| CaptureRecord::from_words(w.try_into().expect("8 words"))).collect()
}
