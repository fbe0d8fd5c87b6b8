//! The ECB register server (PROTOCOLS.md 2.1): a deterministic core, [`EcbServer::handle`]
//! (request bytes in, reply bytes out), and a thin I/O shell, [`spawn`], that serves it on
//! a UDP socket.
//!
//! Rules implemented (PROTOCOLS.md 2.1, "Details from the HSB RTL"), each tagged with the test
//! that proves it:
//! - a write without the ACK flag gets no reply, a read always gets one (`write_without_ack_is_silent`);
//! - write replies carry value 0, not the written value (`write_reply_carries_zero`);
//! - a DWORD reply is 18 bytes: pair, latched sequence, 2 pad bytes (`dword_read_reply_layout`);
//!   a block reply of n pairs is 6 + 8n + 2 bytes, unpadded (`block_reply_lengths`);
//! - an unknown command is answered with the raw command byte | 0x80 and status 0x04
//!   (`unknown_command`);
//! - flags other than bits 0-1 give 0x06 (`bad_flags`);
//! - with sequence checking (flag bit 1) the sequence must be latched + 1, else 0x0B
//!   (`sequence_check`);
//! - status priority 0x04 > 0x06 > 0x0B > 0x03 (`status_priority`);
//! - the latched sequence updates on every accepted request, checked or not, and does not
//!   move on an invalid address (`latched_sequence_moves_only_on_success`);
//! - a block stops at its first bad address (`block_stops_at_first_bad_address`);
//! - address bits 1:0 are ignored (`address_low_bits_ignored`);
//! - the reset write (0x4 bit 3) gets no reply and sets the latched sequence to 0 (`reset`);
//! - requests shorter than a header and one address (or a write without a whole pair) are
//!   dropped and counted (`short_requests_dropped`).
//!
//! The address map (PROTOCOLS.md 2.2, by region) is the register model's
//! ([`Registers`]): every region stores and reads back, outside them 0x03
//! (`every_region_reads_back_and_nothing_outside`).
//!
//! Choices where the sources are silent: an error (any status other than 0x00) is always
//! answered, even for a write without ACK, so a host can see why nothing happened; error
//! replies echo the request's addresses with value 0 (an unknown command echoes only its
//! first); a reset inside a block ends the block; a request with more than 511 pairs is
//! served for its first 511.
//!
//! A player start that cannot play (rocelink's convention, `hsb::ext::PLAYER_START_ERROR`):
//! the write is stored and accepted (the latched sequence moves), but the reply's status is
//! `Status::Refused` (0x02), sent even without the ACK flag; the rest of a block is still
//! written, and a later bad address makes it 0x03 as usual (`player_start_refusal`).
//!
//! Guarantees: `handle` never panics and never allocates; the shell keeps serving after any
//! request, good or bad, and exits within its poll interval of shutdown.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rocelink_wire::ecb::{self, flags, Command, Reply, Request, Status};
use rocelink_wire::hsb::PlayerRefusal;

use crate::dataplane::Command as DataPlaneCommand;
use crate::regs::{Effect, PeerShared, Registers};

/// Largest reply: 511 pairs (RTL layout).
pub const MAX_REPLY_LEN: usize = ecb::reply_len(ecb::MAX_PAIRS);
/// Largest request the shell reads (511 pairs; longer datagrams are served for 511).
pub const MAX_REQUEST_LEN: usize = ecb::request_len(ecb::MAX_PAIRS) + 64;
/// How often the shell looks at the shutdown flag while no request arrives.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The ECB protocol state of one peer.
#[derive(Debug)]
pub struct EcbServer {
    regs: Registers,
    latched: u16,
    short_requests: u64,
    /// Where player runs go; `None` in tests of the register server alone.
    data_plane: Option<Sender<DataPlaneCommand>>,
}

impl EcbServer {
    pub fn new(regs: Registers, data_plane: Option<Sender<DataPlaneCommand>>) -> Self {
        EcbServer { regs, latched: 0, short_requests: 0, data_plane }
    }

    pub fn registers(&self) -> &Registers {
        &self.regs
    }

    /// The sequence number of the last accepted request (0 after reset).
    pub fn latched_sequence(&self) -> u16 {
        self.latched
    }

    /// Requests dropped because they were too short to answer.
    pub fn short_requests(&self) -> u64 {
        self.short_requests
    }

    /// Serves one request. Returns the reply length in `reply` (which should hold
    /// [`MAX_REPLY_LEN`] bytes), or `None` when no reply is due.
    pub fn handle(&mut self, request: &[u8], reply: &mut [u8]) -> Option<usize> {
        let Ok(req) = Request::new_checked(request) else {
            self.short_requests += 1;
            return None;
        };
        let command = req.command();
        let flag_bits = req.flags();
        let sequence = req.sequence();
        // Addresses present (a read may omit its value word) vs whole pairs (a write needs both).
        let addresses = req.pair_count();
        let whole_pairs = (req.len() - ecb::HEADER_LEN) / ecb::PAIR_LEN;
        let available = if command.is_read() { addresses } else { whole_pairs };
        let pairs = match command {
            Command::Unknown(_) => 1,
            c if c.is_block() => available.min(ecb::MAX_PAIRS),
            _ => available.min(1),
        };
        if pairs == 0 {
            self.short_requests += 1;
            return None;
        }

        // Request-level checks in the RTL's priority order: 0x04 > 0x06 > 0x0B.
        let check = if matches!(command, Command::Unknown(_)) {
            Status::InvalidCommand
        } else if flag_bits & !(flags::ACK_REQUEST | flags::SEQUENCE_CHECK) != 0 {
            Status::InvalidFlags
        } else if flag_bits & flags::SEQUENCE_CHECK != 0 && sequence != self.latched.wrapping_add(1) {
            Status::SequenceCheckFailed
        } else {
            Status::Ok
        };

        let len = ecb::reply_len(pairs);
        let out = reply.get_mut(..len)?;
        out.fill(0);
        let mut rep = Reply::new_unchecked(out);

        let mut status = check;
        let mut answered = pairs;
        let mut refused = false;
        if check == Status::Ok {
            for i in 0..pairs {
                let address = req.address(i);
                let result = if command.is_read() {
                    self.regs.read(address)
                } else {
                    let value = req.value(i).unwrap_or(0);
                    match self.regs.write(address, value) {
                        Ok(Effect::Reset) => {
                            // "the reset write (0x4 bit 3) gets no reply and sets the
                            // latched sequence to 0"
                            self.latched = 0;
                            self.deliver(DataPlaneCommand::Reset);
                            return None;
                        }
                        Ok(effect) => {
                            refused |= !self.apply(effect);
                            Ok(0) // "write replies carry value 0"
                        }
                        Err(e) => Err(e),
                    }
                };
                match result {
                    Ok(v) => rep.set_pair(i, address, v),
                    Err(_) => {
                        // "a block stops at its first bad address"
                        rep.set_pair(i, address, 0);
                        status = Status::InvalidAddress;
                        answered = i + 1;
                        break;
                    }
                }
            }
            if status == Status::Ok {
                // "the latched sequence updates on every accepted request, checked or not,
                // and does not move on an invalid address"
                self.latched = sequence;
                if refused {
                    status = Status::Refused;
                }
            }
        } else {
            for i in 0..pairs {
                rep.set_pair(i, req.address(i), 0);
            }
        }

        // "a write without the ACK flag gets no reply, a read always gets one"
        let reply_due = command.is_read() || flag_bits & flags::ACK_REQUEST != 0 || status != Status::Ok;
        if !reply_due {
            return None;
        }
        let len = ecb::reply_len(answered);
        let out = reply.get_mut(..len)?;
        let mut rep = Reply::new_unchecked(out);
        // "an unknown command is answered with the raw command byte"
        rep.set_command_byte(u8::from(command) | ecb::REPLY_BIT);
        rep.set_flags(flag_bits);
        rep.set_sequence(sequence);
        rep.set_status(status);
        rep.set_reserved(0);
        rep.set_latched_sequence(self.latched);
        // The 2 pad bytes after the latched sequence were zeroed above.
        Some(len)
    }

    /// Delivers a write's effect; false when it was a player start that cannot play.
    fn apply(&mut self, effect: Effect) -> bool {
        match effect {
            Effect::None | Effect::Reset => true,
            Effect::Start(cfg) => {
                let frames = cfg.frames;
                if self.deliver(DataPlaneCommand::Start(cfg)) {
                    tracing::debug!(frames, "player started");
                    true
                } else {
                    self.regs.refuse_start(PlayerRefusal::NoDataPlane);
                    tracing::warn!("player run refused: no data plane");
                    false
                }
            }
            Effect::Refused(e) => {
                tracing::warn!(error = %e, "player run refused");
                false
            }
        }
    }

    /// Hands a command to the data plane; false when there is none.
    fn deliver(&mut self, command: DataPlaneCommand) -> bool {
        match &self.data_plane {
            Some(tx) => tx.send(command).is_ok(),
            None => false,
        }
    }
}

/// Serves `server` on `socket` on a new thread until `shared.shutdown` is set. The socket
/// gets a read timeout so the thread notices shutdown.
pub fn spawn(socket: UdpSocket, mut server: EcbServer, shared: Arc<PeerShared>) -> std::io::Result<JoinHandle<()>> {
    socket.set_read_timeout(Some(POLL_INTERVAL))?;
    std::thread::Builder::new().name("fpga-sim-ecb".into()).spawn(move || {
        let mut request = vec![0u8; MAX_REQUEST_LEN];
        let mut reply = vec![0u8; MAX_REPLY_LEN];
        while !shared.shutdown.load(Ordering::Acquire) {
            let (n, from): (usize, SocketAddr) = match socket.recv_from(&mut request) {
                Ok(x) => x,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(e) => {
                    // ICMP errors from earlier replies surface here on Linux; keep serving.
                    tracing::debug!(error = %e, "ECB receive error");
                    continue;
                }
            };
            if let Some(len) = server.handle(&request[..n], &mut reply) {
                if let Err(e) = socket.send_to(&reply[..len], from) {
                    tracing::debug!(error = %e, %from, "ECB reply not sent");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::PeerIdentity;
    use rocelink_wire::hsb::reg;

    const WR: Command = Command::WrDword;
    const RD: Command = Command::RdDword;
    const ACK: u8 = flags::ACK_REQUEST;
    const SEQ: u8 = flags::SEQUENCE_CHECK;
    const BAD: u32 = 0x0000_0F00; // no register there

    fn server() -> EcbServer {
        let id = PeerIdentity { mac: [2, 0, 0, 0, 0, 2], ip: [127, 0, 0, 2], qp: 2 };
        EcbServer::new(Registers::new(id, Arc::new(PeerShared::default())), None)
    }

    /// Sends a request built from `pairs`; returns the reply bytes, if any.
    fn send(s: &mut EcbServer, cmd: Command, fl: u8, seq: u16, pairs: &[(u32, u32)]) -> Option<Vec<u8>> {
        let mut req = [0u8; MAX_REQUEST_LEN];
        let n = ecb::emit_request(cmd, fl, seq, pairs, &mut req).expect("request fits");
        send_raw(s, &req[..n])
    }

    fn send_raw(s: &mut EcbServer, req: &[u8]) -> Option<Vec<u8>> {
        let mut rep = [0u8; MAX_REPLY_LEN];
        s.handle(req, &mut rep).map(|n| rep[..n].to_vec())
    }

    fn status(r: &[u8]) -> Status {
        Reply::new_checked(r).expect("reply").status()
    }

    fn read(s: &mut EcbServer, addr: u32) -> u32 {
        let r = send(s, RD, 0, 0, &[(addr, 0)]).expect("reads always reply");
        assert_eq!(status(&r), Status::Ok, "read {addr:#x}");
        Reply::new_checked(&r[..]).expect("reply").pair(0).1
    }

    #[test]
    fn dword_read_reply_layout() {
        let mut s = server();
        let r = send(&mut s, RD, 0, 0x1234, &[(reg::HSB_IP_VERSION, 0)]).expect("reply");
        assert_eq!(r.len(), 18);
        assert_eq!(
            r,
            [0x94, 0x00, 0x12, 0x34, 0x00, 0x00, 0, 0, 0, 0x80, 0, 0, 0x26, 0x07, 0x12, 0x34, 0, 0],
            "cmd|0x80, flags, seq, status, rsvd, (addr, value), latched seq, 2 pad bytes"
        );
        assert!(read(&mut s, reg::HSB_IP_VERSION) >= reg::MIN_ROCE_IP_VERSION);
        assert_eq!(read(&mut s, reg::FPGA_PTP_SYNC_STAT) & 0xF, 0xF);
    }

    #[test]
    fn ten_byte_read_is_served() {
        let mut s = server();
        let req = [0x14, 0, 0, 1, 0, 0, 0, 0, 0, 0x80];
        let r = send_raw(&mut s, &req).expect("reply");
        assert_eq!(r.len(), 18);
        assert_eq!(Reply::new_checked(&r[..]).expect("reply").pair(0), (0x80, 0x2607));
    }

    #[test]
    fn write_without_ack_is_silent() {
        let mut s = server();
        assert_eq!(send(&mut s, WR, 0, 1, &[(0x104, 5)]), None);
        assert_eq!(read(&mut s, 0x104), 5, "the write still happened");
        assert!(send(&mut s, WR, ACK, 2, &[(0x104, 6)]).is_some());
    }

    #[test]
    fn write_reply_carries_zero() {
        let mut s = server();
        let r = send(&mut s, WR, ACK, 7, &[(0x108, 0xDEAD_BEEF)]).expect("ack");
        let rep = Reply::new_checked(&r[..]).expect("reply");
        assert_eq!(r.len(), 18);
        assert_eq!(rep.command_byte(), 0x84);
        assert_eq!(rep.pair(0), (0x108, 0));
        assert_eq!(rep.latched_sequence(), 7);
        assert_eq!(read(&mut s, 0x108), 0xDEAD_BEEF);
    }

    #[test]
    fn unknown_command() {
        let mut s = server();
        let r = send(&mut s, Command::Unknown(0x33), 0, 9, &[(0x80, 0)]).expect("answered");
        let rep = Reply::new_checked(&r[..]).expect("reply");
        assert_eq!(rep.command_byte(), 0xB3);
        assert_eq!(rep.status(), Status::InvalidCommand);
        assert_eq!(rep.sequence(), 9);
        assert_eq!(s.latched_sequence(), 0, "not accepted");
    }

    #[test]
    fn bad_flags() {
        let mut s = server();
        let r = send(&mut s, RD, 0x04, 1, &[(0x80, 0)]).expect("answered");
        assert_eq!(status(&r), Status::InvalidFlags);
        let r = send(&mut s, WR, 0x81, 1, &[(0x104, 1)]).expect("errors are answered");
        assert_eq!(status(&r), Status::InvalidFlags);
        assert_eq!(read(&mut s, 0x104), 0, "rejected write not applied");
    }

    #[test]
    fn sequence_check() {
        let mut s = server();
        // Unchecked requests latch their sequence too.
        send(&mut s, WR, ACK, 10, &[(0x104, 1)]).expect("ack");
        assert_eq!(s.latched_sequence(), 10);
        let r = send(&mut s, WR, ACK | SEQ, 12, &[(0x104, 2)]).expect("answered");
        assert_eq!(status(&r), Status::SequenceCheckFailed);
        assert_eq!(Reply::new_checked(&r[..]).expect("reply").latched_sequence(), 10);
        assert_eq!(read(&mut s, 0x104), 1, "rejected write not applied");
        // read() above latched sequence 0: next checked must be 1.
        let r = send(&mut s, RD, SEQ, 1, &[(0x104, 0)]).expect("answered");
        assert_eq!(status(&r), Status::Ok);
        // Wraps at 16 bits.
        send(&mut s, RD, 0, 0xFFFF, &[(0x104, 0)]).expect("reply");
        let r = send(&mut s, RD, SEQ, 0, &[(0x104, 0)]).expect("reply");
        assert_eq!(status(&r), Status::Ok);
    }

    #[test]
    fn status_priority() {
        let mut s = server();
        send(&mut s, RD, 0, 5, &[(0x80, 0)]);
        // Unknown command beats bad flags, wrong sequence and bad address.
        let r = send(&mut s, Command::Unknown(0x01), 0x06, 9, &[(BAD, 0)]).expect("reply");
        assert_eq!(status(&r), Status::InvalidCommand);
        // Bad flags beat a wrong sequence and a bad address.
        let r = send(&mut s, RD, 0x06, 9, &[(BAD, 0)]).expect("reply");
        assert_eq!(status(&r), Status::InvalidFlags);
        // A wrong sequence beats a bad address.
        let r = send(&mut s, RD, SEQ, 9, &[(BAD, 0)]).expect("reply");
        assert_eq!(status(&r), Status::SequenceCheckFailed);
        let r = send(&mut s, RD, SEQ, 6, &[(BAD, 0)]).expect("reply");
        assert_eq!(status(&r), Status::InvalidAddress);
    }

    #[test]
    fn latched_sequence_moves_only_on_success() {
        let mut s = server();
        send(&mut s, RD, 0, 40, &[(0x80, 0)]);
        assert_eq!(s.latched_sequence(), 40);
        let r = send(&mut s, RD, 0, 41, &[(BAD, 0)]).expect("reply");
        assert_eq!(status(&r), Status::InvalidAddress);
        assert_eq!(s.latched_sequence(), 40);
        assert_eq!(Reply::new_checked(&r[..]).expect("reply").latched_sequence(), 40);
        send(&mut s, WR, 0, 42, &[(0x104, 0)]);
        assert_eq!(s.latched_sequence(), 42, "a silent write is accepted too");
    }

    /// An RTL DWORD reply, written out field by field (PROTOCOLS.md 2.1): command | 0x80,
    /// flags, sequence, status, reserved, the pair, the latched sequence, 2 pad bytes.
    fn dword_reply(cmd: u8, fl: u8, seq: u16, st: u8, pair: (u32, u32), latched: u16) -> Vec<u8> {
        let mut b = vec![cmd | 0x80, fl];
        b.extend(seq.to_be_bytes());
        b.extend([st, 0]);
        b.extend(pair.0.to_be_bytes());
        b.extend(pair.1.to_be_bytes());
        b.extend(latched.to_be_bytes());
        b.extend([0, 0]);
        b
    }

    #[test]
    fn every_region_reads_back_and_nothing_outside() {
        // (address, what it is): one word inside each region of PROTOCOLS.md 2.2, the
        // registers HSB hosts write during configuration among them.
        let inside = [
            (0x0000_00FC, "global"),
            (0x0000_0100, "PTP"),
            (0x0000_01FC, "PTP status"),
            (0x0000_0200, "control/events (hosts write 0x200-0x22C)"),
            (0x0000_022C, "control/events"),
            (0x0000_1FFC, "VP block 63, last word"),
            (0x0000_101C, "VP block 0, word 0x1C"),
            (0x0000_2000, "APB sequencer RAM"),
            (0x0000_3FFC, "APB sequencer RAM, last word"),
            (0x0100_0000, "sensor interfaces"),
            (0x0120_0000, "sensor-TX enable"),
            (0x0200_0000, "HIF blocks"),
            (0x0200_0300, "HIF block 0, word 0"),
            (0x02FF_FFFC, "HIF blocks, last word"),
            (0x4000_0FFC, "capture, last word"),
            (0x5000_0000, "player base"),
            (0x5000_0FFC, "player, last word"),
            (0x5010_0000, "player RAM"),
            (0x501F_FFFC, "player RAM, last word"),
        ];
        // One word just outside each region.
        let outside = [
            0x0000_0300,
            0x0000_0FFC,
            0x0000_4000,
            0x00FF_FFFC,
            0x0300_0000,
            0x3FFF_FFFC,
            0x4000_1000,
            0x400F_FFFC,
            0x4020_0000,
            0x4FFF_FFFC,
            0x5000_1000,
            0x500F_FFFC,
            0x5020_0000,
            0xFFFF_FFFC,
        ];
        let mut s = server();
        let mut seq = 0u16;
        for (i, &(addr, what)) in inside.iter().enumerate() {
            let value = 0xA500_0000 | i as u32;
            seq += 1;
            let r = send(&mut s, WR, ACK, seq, &[(addr, value)]).expect("ack");
            assert_eq!(r, dword_reply(0x04, 1, seq, 0x00, (addr, 0), seq), "write {what}");
            seq += 1;
            let r = send(&mut s, RD, 0, seq, &[(addr, 0)]).expect("reply");
            assert_eq!(r, dword_reply(0x14, 0, seq, 0x00, (addr, value), seq), "read {what}");
        }
        let latched = seq;
        for addr in outside {
            seq += 1;
            let r = send(&mut s, WR, ACK, seq, &[(addr, 1)]).expect("reply");
            assert_eq!(r, dword_reply(0x04, 1, seq, 0x03, (addr, 0), latched), "write {addr:#x}");
            let r = send(&mut s, RD, 0, seq, &[(addr, 0)]).expect("reply");
            assert_eq!(r, dword_reply(0x14, 0, seq, 0x03, (addr, 0), latched), "read {addr:#x}");
        }
        // Registers with a meaning keep it: capture RAM is read-only (status OK, no effect).
        send(&mut s, WR, 0, 0, &[(reg::CAPTURE_RAM, 5)]);
        assert_eq!(read(&mut s, reg::CAPTURE_RAM), 0);
        // A block write through several regions, then a block read of them.
        let pairs: Vec<(u32, u32)> = inside.iter().map(|&(a, _)| (a, !a)).collect();
        let r = send(&mut s, Command::WrBlock, ACK, 1, &pairs).expect("ack");
        assert_eq!(status(&r), Status::Ok);
        let reads: Vec<(u32, u32)> = pairs.iter().map(|&(a, _)| (a, 0)).collect();
        let r = send(&mut s, Command::RdBlock, 0, 2, &reads).expect("reply");
        assert_eq!(Reply::new_checked(&r[..]).expect("reply").pairs().collect::<Vec<_>>(), pairs);
    }

    #[test]
    fn block_reply_lengths() {
        // PROTOCOLS.md 2.1: "a DWORD reply is 18 bytes (2 pad bytes after the latched
        // sequence; only a reply of at most one pair is padded, a block reply of n pairs is
        // 6 + 8n + 2 bytes)".
        let mut s = server();
        let r = send(&mut s, Command::RdBlock, 0, 0x0102, &[(reg::HSB_IP_VERSION, 0)]).expect("reply");
        assert_eq!(r, dword_reply(0x19, 0, 0x0102, 0, (0x80, 0x2607), 0x0102), "1 pair: 18 bytes");
        let three = [(reg::HSB_IP_VERSION, 0), (reg::FPGA_DATE, 0), (reg::FPGA_PTP_SYNC_STAT, 0)];
        let r = send(&mut s, Command::RdBlock, 0, 0x0304, &three).expect("reply");
        #[rustfmt::skip]
        let want = [
            0x99, 0x00, 0x03, 0x04, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x26, 0x07,
            0x00, 0x00, 0x00, 0x84, 0x20, 0x25, 0x11, 0x30,
            0x00, 0x00, 0x01, 0x88, 0x00, 0x00, 0x00, 0x0F,
            0x03, 0x04,
        ];
        assert_eq!(r, want, "3 pairs: 32 bytes, the latched sequence last");
        let r = send(&mut s, Command::WrBlock, ACK, 0x0305, &[(0x104, 1), (0x108, 2), (0x10C, 3)]).expect("ack");
        #[rustfmt::skip]
        let want = [
            0x89, 0x01, 0x03, 0x05, 0x00, 0x00,
            0x00, 0x00, 0x01, 0x04, 0, 0, 0, 0,
            0x00, 0x00, 0x01, 0x08, 0, 0, 0, 0,
            0x00, 0x00, 0x01, 0x0C, 0, 0, 0, 0,
            0x03, 0x05,
        ];
        assert_eq!(r, want, "write replies carry value 0");
        let reads: Vec<(u32, u32)> = (0..511).map(|i| (reg::PLAYER_RAM + 4 * i, 0)).collect();
        let writes: Vec<(u32, u32)> = reads.iter().map(|&(a, _)| (a, a ^ 0x5555)).collect();
        send(&mut s, Command::WrBlock, 0, 0x0306, &writes);
        let r = send(&mut s, Command::RdBlock, 0, 0x0307, &reads).expect("reply");
        assert_eq!(r.len(), 6 + 8 * 511 + 2);
        assert_eq!(r[..6], [0x99, 0, 0x03, 0x07, 0, 0]);
        for (i, &(a, v)) in writes.iter().enumerate() {
            let at = 6 + 8 * i;
            assert_eq!(r[at..at + 4], a.to_be_bytes());
            assert_eq!(r[at + 4..at + 8], v.to_be_bytes());
        }
        assert_eq!(r[4094..], [0x03, 0x07], "511 pairs: 4096 bytes, no pad");
        // A block that stops at a bad address after 2 pairs: 2 pairs + latched, no pad.
        let r = send(&mut s, Command::RdBlock, 0, 9, &[(0x80, 0), (BAD, 0), (0x84, 0)]).expect("reply");
        assert_eq!(r.len(), 6 + 16 + 2);
        assert_eq!((r[4], &r[22..]), (0x03, &[0x03, 0x07][..]), "latched unmoved");
    }

    /// Writes a playable template run for VP 0 (PROTOCOLS.md 2.2, 3).
    fn program_player(s: &mut EcbServer) {
        let template = [0x4355_5152u32, 0xAB, 0, 0, 0, 0];
        let mut pairs: Vec<(u32, u32)> =
            template.iter().enumerate().map(|(i, &w)| (reg::PLAYER_RAM + 4 * i as u32, w)).collect();
        pairs.extend([
            (reg::vp(0, reg::DP_QP), 0xA7),
            (reg::vp(0, reg::DP_PAGE_INC), 1),
            (reg::vp(0, reg::DP_MAX_BUFF), 63),
            (reg::vp(0, reg::DP_HOST_IP), 0x7F00_0001),
            (reg::vp(0, reg::DP_HOST_UDP_PORT), 4791),
            (reg::hif(0, reg::DP_VP_MASK), 1),
            (reg::PLAYER_WINDOW_SIZE, 24),
            (reg::PLAYER_WINDOW_COUNT, 1),
        ]);
        let r = send(s, Command::WrBlock, ACK, 1, &pairs).expect("ack");
        assert_eq!(status(&r), Status::Ok);
    }

    #[test]
    fn player_start_refusal() {
        use rocelink_wire::hsb::ext;
        let run = (reg::PLAYER_ENABLE, reg::PLAYER_RUN);
        let mut s = server();
        // No VP enabled: status 0x02 (Refused), the latched sequence moves, value 0.
        let r = send(&mut s, WR, ACK, 5, &[run]).expect("answered");
        assert_eq!(r, dword_reply(0x04, 1, 5, 0x02, (reg::PLAYER_ENABLE, 0), 5));
        // Without the ACK flag the refusal is still answered.
        let r = send(&mut s, WR, 0, 6, &[run]).expect("answered");
        assert_eq!(r, dword_reply(0x04, 0, 6, 0x02, (reg::PLAYER_ENABLE, 0), 6));
        assert_eq!(read(&mut s, reg::PLAYER_ENABLE) & reg::PLAYER_RUN, 0);
        let why = |s: &mut EcbServer| {
            let r = send(
                s,
                Command::RdBlock,
                0,
                0,
                &[(ext::PLAYER_START_ERROR, 0), (ext::PLAYER_START_DETAIL, 0), (ext::PLAYER_START_DETAIL + 4, 0)],
            )
            .expect("reply");
            let v: Vec<u32> = Reply::new_checked(&r[..]).expect("reply").pairs().map(|p| p.1).collect();
            PlayerRefusal::from_words(v[0], [v[1], v[2]])
        };
        assert_eq!(why(&mut s), Some(PlayerRefusal::NoVpEnabled));

        // Configured, but player RAM holds no CUQR template.
        program_player(&mut s);
        send(&mut s, WR, 0, 0, &[(reg::PLAYER_RAM, 0)]);
        let r = send(&mut s, WR, ACK, 7, &[run]).expect("answered");
        assert_eq!(r[4], 0x02);
        assert_eq!(why(&mut s), Some(PlayerRefusal::BadTemplate { first_word: 0 }));
        // A playable run but no data plane to take it.
        send(&mut s, WR, 0, 0, &[(reg::PLAYER_RAM, 0x4355_5152)]);
        let r = send(&mut s, WR, ACK, 8, &[run]).expect("answered");
        assert_eq!(r[4], 0x02);
        assert_eq!(why(&mut s), Some(PlayerRefusal::NoDataPlane));
        assert_eq!(read(&mut s, reg::PLAYER_ENABLE) & reg::PLAYER_RUN, 0);
        // In a block, the refusal does not stop the block; a later bad address is 0x03.
        let r = send(&mut s, Command::WrBlock, ACK, 9, &[run, (0x104, 4), (BAD, 1)]).expect("reply");
        assert_eq!((r[4], r.len()), (0x03, 6 + 24 + 2));
        assert_eq!(read(&mut s, 0x104), 4);
        let r = send(&mut s, Command::WrBlock, ACK, 10, &[run, (0x104, 5)]).expect("reply");
        assert_eq!((r[4], s.latched_sequence()), (0x02, 10));

        // With a data plane the same start plays: status OK, PLAYER_START_ERROR 0.
        let id = PeerIdentity { mac: [2, 0, 0, 0, 0, 2], ip: [127, 0, 0, 2], qp: 2 };
        let (tx, rx) = std::sync::mpsc::channel();
        let mut s = EcbServer::new(Registers::new(id, Arc::new(PeerShared::default())), Some(tx));
        program_player(&mut s);
        let r = send(&mut s, WR, ACK, 2, &[run]).expect("ack");
        assert_eq!(r, dword_reply(0x04, 1, 2, 0x00, (reg::PLAYER_ENABLE, 0), 2));
        assert!(matches!(rx.try_recv(), Ok(DataPlaneCommand::Start(_))));
        assert_eq!(why(&mut s), None);
        drop(rx);
    }

    #[test]
    fn block_reads_and_writes() {
        let mut s = server();
        let pairs: Vec<(u32, u32)> = (0..16).map(|i| (reg::PLAYER_RAM + 4 * i, 0x0101_0101 * i)).collect();
        let r = send(&mut s, Command::WrBlock, ACK, 3, &pairs).expect("ack");
        let rep = Reply::new_checked(&r[..]).expect("reply");
        assert_eq!(rep.command_byte(), 0x89);
        assert_eq!(rep.pair_count(), 16);
        assert!(rep.pairs().all(|(_, v)| v == 0));
        let reads: Vec<(u32, u32)> = pairs.iter().map(|&(a, _)| (a, 0)).collect();
        let r = send(&mut s, Command::RdBlock, 0, 4, &reads).expect("reply");
        let rep = Reply::new_checked(&r[..]).expect("reply");
        assert_eq!(rep.status(), Status::Ok);
        assert_eq!(r.len(), ecb::reply_len(16));
        assert_eq!(rep.pairs().collect::<Vec<_>>(), pairs);
        // Largest block.
        let reads: Vec<(u32, u32)> = (0..511).map(|i| (reg::PLAYER_RAM + 4 * i, 0)).collect();
        let r = send(&mut s, Command::RdBlock, 0, 5, &reads).expect("reply");
        assert_eq!(Reply::new_checked(&r[..]).expect("reply").pair_count(), 511);
    }

    #[test]
    fn block_stops_at_first_bad_address() {
        let mut s = server();
        let pairs = [(0x104, 1), (0x108, 2), (BAD, 3), (0x10C, 4)];
        let r = send(&mut s, Command::WrBlock, ACK, 8, &pairs).expect("reply");
        let rep = Reply::new_checked(&r[..]).expect("reply");
        assert_eq!(rep.status(), Status::InvalidAddress);
        assert_eq!(rep.pair_count(), 3, "up to and including the bad address");
        assert_eq!(rep.pair(2), (BAD, 0));
        assert_eq!((read(&mut s, 0x104), read(&mut s, 0x108), read(&mut s, 0x10C)), (1, 2, 0));
    }

    #[test]
    fn address_low_bits_ignored() {
        let mut s = server();
        send(&mut s, WR, 0, 0, &[(0x10B, 77)]);
        assert_eq!(read(&mut s, 0x108), 77);
        assert_eq!(read(&mut s, 0x81), 0x2607);
    }

    #[test]
    fn reset() {
        let mut s = server();
        send(&mut s, WR, 0, 0, &[(0x104, 9)]);
        send(&mut s, RD, 0, 300, &[(0x80, 0)]);
        assert_eq!(send(&mut s, WR, ACK, 301, &[(reg::RESET, 0x8)]), None, "no reply to a reset");
        assert_eq!(s.latched_sequence(), 0);
        let r = send(&mut s, RD, SEQ, 1, &[(0x104, 0)]).expect("reply");
        assert_eq!(status(&r), Status::Ok, "sequence restarts after reset");
        assert_eq!(read(&mut s, 0x104), 0, "registers back to power-on");
        // Other bits of 0x4 are a plain register.
        send(&mut s, WR, 0, 0, &[(reg::RESET, 0x3)]);
        assert_eq!(read(&mut s, reg::RESET), 0x3);
    }

    #[test]
    fn short_requests_dropped() {
        let mut s = server();
        for req in [&[][..], &[0x14], &[0x14, 0, 0, 1, 0, 0, 0, 0, 0], &[0x04, 1, 0, 1, 0, 0, 0, 0, 0, 0x80]] {
            assert_eq!(send_raw(&mut s, req), None, "{req:?}");
        }
        assert_eq!(s.short_requests(), 4);
        assert_eq!(read(&mut s, 0x80), 0x2607, "still serving");
    }

    #[test]
    fn registers_read_back() {
        let mut s = server();
        let rw = [
            0x11C,
            reg::vp(0, reg::DP_QP),
            reg::vp(15, reg::DP_HOST_UDP_PORT),
            reg::hif(1, reg::DP_VP_MASK),
            reg::PLAYER_INTERVAL,
            reg::PLAYER_WINDOW_SIZE,
            reg::PLAYER_WINDOW_COUNT,
            reg::PLAYER_RAM + 0xFFFC,
            rocelink_wire::hsb::ext::PLAYER_FIRST_REQUEST_ID,
        ];
        for (i, a) in rw.into_iter().enumerate() {
            send(&mut s, WR, 0, 0, &[(a, 0x100 + i as u32)]);
            assert_eq!(read(&mut s, a), 0x100 + i as u32, "{a:#x}");
        }
        assert_eq!(read(&mut s, rocelink_wire::hsb::ext::PLAYER_FPGA_QP), 2);
        assert_eq!(read(&mut s, rocelink_wire::hsb::ext::PLAYER_RESPONSE_TIMEOUT_US), 10_000);
        assert_eq!(read(&mut s, reg::CAPTURE_COUNT), 0);
        assert_eq!(read(&mut s, reg::CAPTURE_RAM), 0);
        // Read-only: writes are ignored.
        send(&mut s, WR, 0, 0, &[(reg::HSB_IP_VERSION, 1)]);
        assert_eq!(read(&mut s, reg::HSB_IP_VERSION), 0x2607);
    }

    #[test]
    fn run_refused_without_vp() {
        let mut s = server();
        send(&mut s, WR, 0, 0, &[(reg::PLAYER_ENABLE, reg::PLAYER_RUN)]);
        assert_eq!(read(&mut s, reg::PLAYER_ENABLE) & reg::PLAYER_RUN, 0);
    }
}
