//! ECB over UDP, the host side (PROTOCOLS.md 2.1): one request outstanding, replies matched
//! on the sequence, sequence checking on after the first exchange, retries on timeout.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use rocelink_wire::ecb::{self, flags, Command, Reply, Status};

#[derive(Debug, thiserror::Error)]
pub enum EcbError {
    #[error("no ECB reply from {peer} for {what} at {addr:#010x} after {tries} tries ({timeout:?} each): is the peer running and reachable?")]
    Timeout { peer: SocketAddrV4, what: &'static str, addr: u32, tries: u32, timeout: Duration },
    #[error("ECB {what} at {addr:#010x} refused by {peer}: status {status:?}")]
    Status { peer: SocketAddrV4, what: &'static str, addr: u32, status: Status },
    #[error("ECB socket: {0}")]
    Io(#[from] std::io::Error),
}

impl EcbError {
    /// The peer said the address does not exist (a real FPGA for rocelink's extensions).
    pub fn is_invalid_address(&self) -> bool {
        matches!(self, EcbError::Status { status: Status::InvalidAddress, .. })
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
    fn transact(&mut self, command: Command, pairs: &[(u32, u32)], what: &'static str) -> Result<Vec<(u32, u32)>, EcbError> {
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
                Some((Status::Ok, latched, pairs)) => {
                    self.checked = true;
                    self.next_seq = latched.wrapping_add(1);
                    return Ok(pairs);
                }
                Some((Status::SequenceCheckFailed, latched, _)) if tries < self.tries => {
                    // Resynchronise on the latched sequence the peer reports (PROTOCOLS.md 2.1).
                    self.next_seq = latched.wrapping_add(1);
                }
                Some((status, latched, _)) => {
                    // The reply's latched sequence is the peer's truth, whether the request
                    // moved it or not (an invalid address does not).
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
                return Err(EcbError::Status { peer: self.peer, what: "block read (short reply)", addr: chunk[0], status: Status::Unknown(0xff) });
            }
            out.extend(pairs[..chunk.len()].iter().map(|p| p.1));
        }
        Ok(())
    }
}
