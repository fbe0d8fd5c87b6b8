//! ECB over UDP, the host side (PROTOCOLS.md 2.1): one request outstanding, replies matched
//! on the sequence, sequence checking on after the first exchange, retries on timeout.
//!
//! Replies are accepted in both layouts a host meets ("a host must accept both reply
//! lengths"): the RTL's (18 bytes for one pair, `6 + 8n + 2` for a block of n pairs, the
//! latched sequence last) and NVIDIA's emulator's (the pairs, then 4 zero bytes, no latched
//! sequence). After an accepted request the next sequence is the request's + 1, which the
//! RTL's latched sequence equals; the emulator's reads 0 and is not used then.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use rocelink_wire::ecb::{self, flags, Command, Reply, Status};
use rocelink_wire::hsb::PlayerRefusal;

#[derive(Debug, thiserror::Error)]
pub enum EcbError {
    #[error("no ECB reply from {peer} for {what} at {addr:#010x} after {tries} tries ({timeout:?} each): is the peer running and reachable?")]
    Timeout { peer: SocketAddrV4, what: &'static str, addr: u32, tries: u32, timeout: Duration },
    #[error("ECB {what} at {addr:#010x} refused by {peer}: status {status:?}")]
    Status { peer: SocketAddrV4, what: &'static str, addr: u32, status: Status },
    /// The peer answered a player start with `Status::Refused`: the run cannot play.
    /// `reason` is what its PLAYER_START_ERROR says (`None`: it has no such register).
    #[error("peer {peer} cannot start its traffic player: {}", refusal_words(reason))]
    PlayerRefused { peer: SocketAddrV4, reason: Option<PlayerRefusal> },
    #[error("ECB socket: {0}")]
    Io(#[from] std::io::Error),
}

fn refusal_words(reason: &Option<PlayerRefusal>) -> String {
    match reason {
        Some(r) => r.to_string(),
        None => "it answered status 0x02 (refused) and its PLAYER_START_ERROR gives no reason".into(),
    }
}

impl EcbError {
    /// The peer said the address does not exist (a real FPGA for rocelink's extensions).
    pub fn is_invalid_address(&self) -> bool {
        matches!(self, EcbError::Status { status: Status::InvalidAddress, .. })
    }

    /// The peer took the write but refused what it starts (`Status::Refused`).
    pub fn is_refused(&self) -> bool {
        matches!(self, EcbError::Status { status: Status::Refused, .. } | EcbError::PlayerRefused { .. })
    }
}

pub struct EcbClient {
    sock: UdpSocket,
    peer: SocketAddrV4,
    next_seq: u16,
    checked: bool,
    timeout: Duration,
    tries: u32,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl EcbClient {
    /// A client for the peer's ECB port. `local_ip` picks the interface (unspecified: any).
    pub fn connect(peer: SocketAddrV4) -> std::io::Result<EcbClient> {
        let sock = UdpSocket::bind(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0))?;
        let c = EcbClient {
            sock,
            peer,
            next_seq: 1,
            checked: false,
            timeout: Duration::from_millis(200),
            tries: 5,
            tx: vec![0; ecb::request_len(ecb::MAX_PAIRS)],
            rx: vec![0; 2 * ecb::reply_len(ecb::MAX_PAIRS)],
        };
        c.sock.set_read_timeout(Some(c.timeout))?;
        Ok(c)
    }

    pub fn peer(&self) -> SocketAddrV4 {
        self.peer
    }

    /// Sets the per-try reply timeout and the number of tries.
    pub fn set_timeout(&mut self, timeout: Duration, tries: u32) -> std::io::Result<()> {
        self.timeout = timeout;
        self.tries = tries.max(1);
        self.sock.set_read_timeout(Some(timeout))
    }

    /// One request/reply exchange. Returns the reply's pairs.
    fn transact(
        &mut self,
        command: Command,
        pairs: &[(u32, u32)],
        what: &'static str,
    ) -> Result<Vec<(u32, u32)>, EcbError> {
        let addr0 = pairs.first().map(|p| p.0).unwrap_or(0);
        let mut tries = 0;
        loop {
            tries += 1;
            let seq = self.next_seq;
            let fl = flags::ACK_REQUEST | if self.checked { flags::SEQUENCE_CHECK } else { 0 };
            let n = ecb::emit_request(command, fl, seq, pairs, &mut self.tx).expect("request fits its buffer");
            // A signal (SIGINT) interrupts the call, not the exchange: make it again.
            while let Err(e) = self.sock.send_to(&self.tx[..n], self.peer) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
            let deadline = Instant::now() + self.timeout;
            let reply = loop {
                if Instant::now() > deadline {
                    break None;
                }
                match self.sock.recv_from(&mut self.rx) {
                    Ok((len, from)) => {
                        if from != SocketAddr::V4(self.peer) {
                            continue;
                        }
                        let Ok(r) = Reply::new_checked(&self.rx[..len]) else { continue };
                        if r.sequence() != seq {
                            continue; // a late reply to an earlier try
                        }
                        break Some((r.status(), r.latched_sequence(), r.pairs().collect::<Vec<_>>()));
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        break None;
                    }
                    // A signal cut the wait short: wait again, until the same deadline.
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            match reply {
                Some((Status::Ok, _, pairs)) => {
                    // The RTL latched this request's sequence; the emulator reports 0.
                    self.checked = true;
                    self.next_seq = seq.wrapping_add(1);
                    return Ok(pairs);
                }
                Some((Status::SequenceCheckFailed, latched, _)) if tries < self.tries => {
                    // Resynchronise on the latched sequence the peer reports (PROTOCOLS.md 2.1),
                    // and try unchecked: another master talking to the peer moves its latched
                    // sequence between our tries, and an unchecked request is taken whatever it
                    // is (the next accepted one turns checking on again).
                    self.next_seq = latched.wrapping_add(1);
                    self.checked = false;
                }
                Some((status, latched, _)) => {
                    // The reply's latched sequence is the peer's truth, whether the request
                    // moved it or not (an invalid address does not, a refusal does).
                    self.next_seq = latched.wrapping_add(1);
                    return Err(EcbError::Status { peer: self.peer, what, addr: addr0, status });
                }
                None if tries < self.tries => {
                    // Lost request or reply: the peer may have latched it; try unchecked.
                    self.checked = false;
                    self.next_seq = self.next_seq.wrapping_add(1);
                }
                None => {
                    return Err(EcbError::Timeout { peer: self.peer, what, addr: addr0, tries, timeout: self.timeout });
                }
            }
        }
    }

    pub fn read(&mut self, addr: u32) -> Result<u32, EcbError> {
        let pairs = self.transact(Command::RdDword, &[(addr, 0)], "read")?;
        Ok(pairs.first().map(|p| p.1).unwrap_or(0))
    }

    pub fn write(&mut self, addr: u32, value: u32) -> Result<(), EcbError> {
        self.transact(Command::WrDword, &[(addr, value)], "write").map(|_| ())
    }

    /// Writes many registers, `MAX_PAIRS` per request.
    pub fn write_block(&mut self, pairs: &[(u32, u32)]) -> Result<(), EcbError> {
        for chunk in pairs.chunks(ecb::MAX_PAIRS) {
            self.transact(Command::WrBlock, chunk, "block write")?;
        }
        Ok(())
    }

    /// Reads many registers, `MAX_PAIRS` per request, appending the values to `out`.
    pub fn read_block(&mut self, addrs: &[u32], out: &mut Vec<u32>) -> Result<(), EcbError> {
        let mut req = Vec::with_capacity(ecb::MAX_PAIRS);
        for chunk in addrs.chunks(ecb::MAX_PAIRS) {
            req.clear();
            req.extend(chunk.iter().map(|a| (*a, 0)));
            let pairs = self.transact(Command::RdBlock, &req, "block read")?;
            if pairs.len() < chunk.len() {
                return Err(EcbError::Status {
                    peer: self.peer,
                    what: "block read (short reply)",
                    addr: chunk[0],
                    status: Status::Unknown(0xff),
                });
            }
            out.extend(pairs[..chunk.len()].iter().map(|p| p.1));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocelink_wire::ecb::Request;
    use std::net::Ipv4Addr;

    /// A peer answering `requests` requests in the RTL's or the emulator's reply layout:
    /// a read of `a` gives `!a`, a write gives value 0. Returns the reply lengths it sent.
    fn fake_peer(emulator: bool, requests: usize) -> (SocketAddrV4, std::thread::JoinHandle<Vec<usize>>) {
        let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("bind");
        sock.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let SocketAddr::V4(addr) = sock.local_addr().expect("addr") else { unreachable!() };
        let peer = std::thread::spawn(move || {
            let (mut req, mut rep) = (vec![0u8; 8192], vec![0u8; 8192]);
            let mut lens = Vec::new();
            for _ in 0..requests {
                let Ok((n, from)) = sock.recv_from(&mut req) else { break };
                let r = Request::new_checked(&req[..n]).expect("request");
                let pairs: Vec<(u32, u32)> =
                    r.pairs().map(|(a, _)| (a, if r.command().is_read() { !a } else { 0 })).collect();
                let cmd = u8::from(r.command()) | ecb::REPLY_BIT;
                let len = if emulator {
                    // Header, pairs, 4 zero bytes (PROTOCOLS.md 2.1).
                    let len = ecb::emulator_reply_len(pairs.len());
                    rep[..len].fill(0);
                    let n =
                        ecb::emit_reply(cmd, r.flags(), r.sequence(), Status::Ok, &pairs, 0, &mut rep).expect("fits");
                    rep[n - 2..len].fill(0);
                    len
                } else {
                    ecb::emit_reply(cmd, r.flags(), r.sequence(), Status::Ok, &pairs, r.sequence(), &mut rep)
                        .expect("fits")
                };
                sock.send_to(&rep[..len], from).expect("send");
                lens.push(len);
            }
            lens
        });
        (addr, peer)
    }

    #[test]
    fn both_reply_layouts_are_accepted() {
        for emulator in [false, true] {
            let (addr, peer) = fake_peer(emulator, 4);
            let mut c = EcbClient::connect(addr).expect("client");
            assert_eq!(c.read(0x80).expect("read"), !0x80);
            c.write(0x104, 5).expect("write");
            let mut v = Vec::new();
            c.read_block(&[0x80, 0x84, 0x188], &mut v).expect("3 pairs");
            assert_eq!(v, [!0x80, !0x84, !0x188]);
            let addrs: Vec<u32> = (0..511).map(|i| 0x5010_0000 + 4 * i).collect();
            v.clear();
            c.read_block(&addrs, &mut v).expect("511 pairs");
            assert!(v.iter().zip(&addrs).all(|(v, a)| *v == !a));
            let lens = peer.join().expect("peer");
            let want = if emulator { [18, 18, 34, 6 + 8 * 511 + 4] } else { [18, 18, 32, 4096] };
            assert_eq!(lens, want, "emulator {emulator}");
        }
    }

    #[test]
    fn refusals_read_as_such() {
        let peer = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8192);
        let e = EcbError::PlayerRefused { peer, reason: Some(PlayerRefusal::WindowTooSmall { window: 0 }) };
        assert!(e.is_refused() && !e.is_invalid_address());
        assert_eq!(e.to_string(), "peer 127.0.0.1:8192 cannot start its traffic player: the window size is 0 bytes, smaller than the 24-byte RPC header");
        let e = EcbError::PlayerRefused { peer, reason: None };
        assert!(e.to_string().ends_with("its PLAYER_START_ERROR gives no reason"));
    }

    /// The host API against fpga-sim in this process: a start that cannot play fails at
    /// once with the peer's reason, not after the ECB timeout.
    #[test]
    fn hsb_host_reports_a_player_that_cannot_play() {
        use crate::hsb::{DataPlaneConfig, HsbHost, PlayerConfig, QecPlayerConfig};
        let (_nic, wire) = rocelink_link::inproc::pair(16);
        let config =
            rocelink_fpga_sim::SimConfig { ecb_bind: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), ..Default::default() };
        let sim = rocelink_fpga_sim::start(config, Box::new(wire)).expect("fpga-sim");
        // A lost reply would take 5 s: an answer within 1 s is the peer's, not a timeout.
        let mut client = EcbClient::connect(sim.ecb_addr()).expect("client");
        client.set_timeout(Duration::from_secs(5), 1).expect("timeout");
        let mut host = HsbHost::new(client);
        host.check_version().expect("version");
        let template = crate::stage::echo_template(64);
        let player = PlayerConfig {
            template: vec![0; 64],
            count: 10,
            interval: Duration::ZERO,
            closed_loop: true,
            stamp: true,
            scramble: false,
            first_request_id: 1,
            response_timeout: Duration::from_millis(100),
            peer_qpn: rocelink_wire::hsb::ext::DEFAULT_FPGA_QP,
        };
        let start = |host: &mut HsbHost, p: &PlayerConfig| {
            let t0 = Instant::now();
            let r = host.start_player(p);
            assert!(t0.elapsed() < Duration::from_secs(1), "answered, not timed out");
            r
        };
        let reason = |r: Result<(), EcbError>| match r {
            Err(EcbError::PlayerRefused { reason, .. }) => reason,
            other => panic!("not refused: {other:?}"),
        };

        // Nothing configured: no VP.
        host.program_player(&player).expect("program");
        assert_eq!(reason(start(&mut host, &player)), Some(PlayerRefusal::NoVpEnabled));
        host.configure(&DataPlaneConfig {
            vp: 0,
            data_plane: 0,
            qpn: 0x101,
            rkey: 7,
            buffer_addr: 0x1000_0000,
            page_stride: 128,
            pages: 64,
            frame_len: 64,
            host_mac: [2, 0, 0, 0, 0, 1],
            host_ip: Ipv4Addr::LOCALHOST,
            host_port: 4791,
            peer_src_port: 12288,
            packet_size: 64,
        })
        .expect("configure");
        // No CUQR template in player RAM: the error says so, in words.
        let err = start(&mut host, &player).expect_err("refused");
        assert!(err.to_string().contains("player RAM holds no CUQR request template"), "{err}");
        assert_eq!(reason(Err(err)), Some(PlayerRefusal::BadTemplate { first_word: 0 }));
        // A template larger than the slot.
        let big = PlayerConfig { template: crate::stage::echo_template(200), ..player.clone() };
        host.program_player(&big).expect("program");
        assert_eq!(reason(start(&mut host, &big)), Some(PlayerRefusal::FrameBeyondSlot { bytes: 200, slot: 128 }));
        // A QEC start on a peer with no replay is a template run with window 0.
        host.program_qec_player(&QecPlayerConfig {
            shots: 1,
            interval_clocks: 0,
            closed_loop: true,
            first_request_id: 1,
            response_timeout: Duration::from_millis(100),
            peer_qpn: 2,
        })
        .expect("program");
        host.ecb().write(rocelink_wire::hsb::reg::PLAYER_WINDOW_SIZE, 0).expect("window");
        let t0 = Instant::now();
        let r = host.start_qec_player();
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert_eq!(reason(r), Some(PlayerRefusal::WindowTooSmall { window: 0 }));
        // And a run that can play starts.
        let good = PlayerConfig { template, ..player };
        host.program_player(&good).expect("program");
        start(&mut host, &good).expect("plays");
        host.stop_player().expect("stop");
        sim.stop();
    }
}
