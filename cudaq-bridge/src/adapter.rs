//! The ring's provider side, run by the NIC engine thread once a turn
//! (`NicEngine::spawn_with_data_path`): between the queue pair (whose receives land in staging
//! slots, as the peer writes them) and the ring the dispatcher reads (`crate::ring`).
//!
//! Receive: each receive completion names a staging slot (its immediate, PROTOCOLS.md 2.3)
//! and the bytes written there. The request in it ([`request_len`]) is copied into the next
//! ring slot in FIFO order and published; then the receive WQE is posted again. Dropped before
//! the ring, each counted: a completion that is no RDMA WRITE with immediate into a staging
//! slot, a frame that is no whole CUQR request, a request longer than a ring slot, and a
//! request whose FIFO slot is still in use after [`RING_FULL_GRACE`] (the dispatcher is
//! behind). While a request waits for its slot, the ones after it wait behind it (FIFO), in the
//! receive queue; nothing waits longer than the grace.
//!
//! Send: every TX flag holding its slot's address names a response. The response (its
//! `RPCResponse` header as the dispatcher wrote it, then `result_len` bytes, at most a slot)
//! is copied into the queue pair's TX slot and posted as a UC SEND to the peer; then the flag
//! is cleared. The doorbell rings once a turn, after the turn's sends. Responses leave in ring
//! order: a turn looks at the slots from the one after the last response sent and stops at a
//! request not answered yet (its RX flag set, its TX flag 0 or "in flight"), so an answer the
//! dispatcher wrote out of order waits for the ones before it, or for their requests to be
//! dropped (RX flag cleared without an answer).

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocelink_operator::abi;
use rocelink_operator::rings::QpMemory;
use rocelink_operator::verbs::{HostVerbs, RecvCompletion};
use rocelink_wire::rpc::{self, RequestRepr, ResponseRepr};

use crate::abi::{CUDAQ_TX_FLAG_ERROR_TAG, CUDAQ_TX_FLAG_IN_FLIGHT};
use crate::ring::Ring;

/// How long a request waits for its FIFO slot to be released before it is dropped as "ring
/// full". Covers a dispatcher descheduled between its two stores (TX flag, then RX flag); a
/// dispatcher that is really behind loses the request.
pub const RING_FULL_GRACE: Duration = Duration::from_millis(10);

/// Receive completions taken in one turn.
const RX_BURST: usize = 16;

/// Why a staged frame does not go into the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a whole CUQR request.
    NotRpc,
    /// Header and arguments do not fit a ring slot.
    TooLong,
}

/// The length of the request at the start of `staged` (its header and `arg_len` arguments),
/// if it is a whole CUQR request that fits a ring slot of `slot_size` bytes. Bytes after the
/// arguments (a peer's padding) are not part of it.
pub fn request_len(staged: &[u8], slot_size: usize) -> Result<usize, Refusal> {
    let h = RequestRepr::parse(staged).map_err(|_| Refusal::NotRpc)?;
    let n = h.message_len();
    if n > staged.len() {
        return Err(Refusal::NotRpc);
    }
    if n > slot_size {
        return Err(Refusal::TooLong);
    }
    Ok(n)
}

/// The length of the response at the start of a TX slot of `slot_size` bytes whose first
/// [`rpc::HEADER_LEN`] bytes are `header`: `None` when it is no CUQS response or does not fit.
pub fn response_len(header: &[u8], slot_size: usize) -> Option<usize> {
    let r = ResponseRepr::parse(header).ok()?;
    Some(r.message_len()).filter(|&n| n <= slot_size)
}

/// What a TX flag's value asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxFlag {
    Empty,
    /// The dispatcher is still computing it.
    InFlight,
    /// The dispatcher failed it.
    Error,
    /// Send it.
    Send,
    /// A value that is no address of this slot.
    Bad,
}

/// Classifies TX flag `v` of a slot whose addresses are `addrs` (host, device).
pub fn tx_flag(v: u64, addrs: (u64, u64)) -> TxFlag {
    match v {
        0 => TxFlag::Empty,
        CUDAQ_TX_FLAG_IN_FLIGHT => TxFlag::InFlight,
        v if v == addrs.0 || v == addrs.1 => TxFlag::Send,
        v if v >> 48 == CUDAQ_TX_FLAG_ERROR_TAG => TxFlag::Error,
        _ => TxFlag::Bad,
    }
}

/// The engine thread's state.
pub struct Adapter {
    verbs: HostVerbs,
    q: QpMemory,
    ring: Arc<Ring>,
    /// The ring slot the next request goes to.
    next: u32,
    /// A request waiting for its slot, since when.
    waiting: Option<(RecvCompletion, Instant)>,
    /// The TX flag a turn looks at first: the one after the last response sent, so responses
    /// the dispatcher wrote in ring order leave in that order across the ring's wrap.
    tx_from: u32,
}

enum Placed {
    /// In the ring, or dropped: the receive is done with.
    Done,
    /// Its slot is in use.
    Busy,
}

impl Adapter {
    /// Posts the whole receive queue (`HostVerbs` over the queue pair `q`, our QP `qpn`, the
    /// TX region's `tx_lkey`).
    pub fn new(q: QpMemory, qpn: u32, tx_lkey: u32, ring: Arc<Ring>) -> Adapter {
        let mut verbs = HostVerbs::new(q.clone(), qpn, tx_lkey);
        verbs.post_recv(q.layout.sizes.rq_entries);
        Adapter { verbs, q, ring, next: 0, waiting: None, tx_from: 0 }
    }

    /// One turn: receive, then send. Whether it did anything.
    pub fn turn(&mut self) -> bool {
        let rx = self.receive();
        let tx = self.send();
        rx || tx
    }

    fn receive(&mut self) -> bool {
        let mut worked = false;
        for _ in 0..RX_BURST {
            let (rc, since) = match self.waiting.take() {
                Some((rc, since)) => (rc, Some(since)),
                None => match self.verbs.poll_recv() {
                    Some(rc) => (rc, None),
                    None => break,
                },
            };
            match self.place(&rc) {
                Placed::Done => {}
                Placed::Busy => {
                    let since = since.unwrap_or_else(Instant::now);
                    if since.elapsed() < RING_FULL_GRACE {
                        self.waiting = Some((rc, since));
                        break;
                    }
                    self.ring.counters.rx_ring_full.fetch_add(1, Relaxed);
                }
            }
            worked = true;
            self.verbs.post_recv(1);
        }
        worked
    }

    fn place(&mut self, rc: &RecvCompletion) -> Placed {
        let c = &self.ring.counters;
        let l = &self.q.layout;
        let staged_slot = rc.cqe.imm & 0xfff;
        let len = rc.cqe.byte_cnt as usize;
        if u32::from(rc.cqe.opcode) != abi::RL_CQE_RESP_WR_IMM
            || staged_slot >= l.sizes.rx_slots
            || len > l.sizes.rx_slot_stride as usize
        {
            c.rx_bad_completion.fetch_add(1, Relaxed);
            return Placed::Done;
        }
        // SAFETY: the staging slot is ours until its receive WQE is posted again (after this
        // returns): the peer keeps at most one message per slot in flight (PROTOCOLS.md 2.3).
        let staged = unsafe { self.q.mem.slice(l.rx_slot(staged_slot), len) };
        let n = match request_len(staged, self.ring.geometry().slot_size as usize) {
            Ok(n) => n,
            Err(Refusal::NotRpc) => {
                c.rx_not_rpc.fetch_add(1, Relaxed);
                return Placed::Done;
            }
            Err(Refusal::TooLong) => {
                c.rx_too_long.fetch_add(1, Relaxed);
                return Placed::Done;
            }
        };
        if !self.ring.slot_free(self.next) {
            return Placed::Busy;
        }
        self.ring.publish_request(self.next, &staged[..n]);
        self.next = (self.next + 1) % self.ring.geometry().slots;
        c.rx_requests.fetch_add(1, Relaxed);
        Placed::Done
    }

    fn send(&mut self) -> bool {
        let ring = self.ring.clone();
        let size = ring.geometry().slot_size as usize;
        let slots = ring.geometry().slots;
        let mut posted = 0;
        let from = self.tx_from;
        for k in 0..slots {
            let j = (from + k) % slots;
            let flag = ring.tx_flag(j);
            // The RX flag first: a dispatcher stores the TX flag before it clears the RX flag,
            // so a cleared RX flag seen here means its TX flag, loaded next, is as final.
            let pending = ring.rx_flag(j).load(Acquire) != 0;
            // Acquire pairs with the dispatcher's Release: the response is whole.
            match tx_flag(flag.load(Acquire), ring.tx_slot_addrs(j)) {
                // a request still being answered: the answers after it wait (in order)
                TxFlag::Empty if pending => break,
                TxFlag::Empty => continue,
                TxFlag::InFlight => break,
                TxFlag::Error => {
                    ring.counters.tx_dispatch_errors.fetch_add(1, Relaxed);
                    flag.store(0, Release);
                    continue;
                }
                TxFlag::Bad => {
                    ring.counters.tx_bad_responses.fetch_add(1, Relaxed);
                    flag.store(0, Release);
                    continue;
                }
                TxFlag::Send => {}
            }
            let mut header = [0u8; rpc::HEADER_LEN];
            ring.read_response(j, &mut header);
            let Some(n) = response_len(&header, size) else {
                ring.counters.tx_bad_responses.fetch_add(1, Relaxed);
                flag.store(0, Release);
                continue;
            };
            if self.verbs.sq_free() == 0 {
                self.verbs.poll_send_completions();
                if self.verbs.sq_free() == 0 {
                    // the NIC sends what is posted later this turn; the rest waits a turn
                    break;
                }
            }
            let dst = self.verbs.tx_slot(self.verbs.next_send_index());
            // SAFETY: the flag holds the slot's address, so the dispatcher leaves the slot
            // alone until the flag is cleared, below, after the copy.
            self.q.mem.write(dst, unsafe { ring.response_slice(j, n) });
            self.verbs.prepare_send_from_slot(n);
            flag.store(0, Release);
            ring.counters.tx_responses.fetch_add(1, Relaxed);
            posted += 1;
            self.tx_from = (j + 1) % slots;
        }
        if posted > 0 {
            self.verbs.ring_send_doorbell();
        }
        posted > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(arg_len: u32, bytes: usize) -> Vec<u8> {
        let mut b = vec![0u8; bytes.max(rpc::HEADER_LEN)];
        RequestRepr { function_id: rpc::function_id::ECHO, arg_len, request_id: 1, ptp_timestamp: 2 }
            .emit(&mut b[..rpc::HEADER_LEN])
            .expect("header");
        b.truncate(bytes);
        b
    }

    #[test]
    fn requests_are_measured_by_their_header() {
        assert_eq!(request_len(&request(40, 64), 128), Ok(64));
        assert_eq!(request_len(&request(40, 100), 128), Ok(64), "padding after the args is not copied");
        assert_eq!(request_len(&request(104, 128), 128), Ok(128), "exactly a slot");
        assert_eq!(request_len(&request(105, 129), 128), Err(Refusal::TooLong));
        assert_eq!(request_len(&request(41, 64), 128), Err(Refusal::NotRpc), "fewer arguments than arg_len");
        assert_eq!(request_len(&request(u32::MAX, 64), 128), Err(Refusal::NotRpc));
        assert_eq!(request_len(&request(0, 23), 128), Err(Refusal::NotRpc), "shorter than a header");
        let mut other = request(4, 28);
        other[0] ^= 1;
        assert_eq!(request_len(&other, 128), Err(Refusal::NotRpc), "another magic");
    }

    #[test]
    fn responses_are_measured_by_their_header_and_must_fit() {
        let mut h = [0u8; rpc::HEADER_LEN];
        ResponseRepr { status: 0, result_len: 40, request_id: 1, ptp_timestamp: 2 }.emit(&mut h).expect("header");
        assert_eq!(response_len(&h, 64), Some(64));
        assert_eq!(response_len(&h, 63), None);
        h[0] ^= 1;
        assert_eq!(response_len(&h, 64), None, "no CUQS");
    }

    #[test]
    fn tx_flags_are_classified() {
        let addrs = (0x7000_1000, 0x7000_1000);
        assert_eq!(tx_flag(0, addrs), TxFlag::Empty);
        assert_eq!(tx_flag(CUDAQ_TX_FLAG_IN_FLIGHT, addrs), TxFlag::InFlight);
        assert_eq!(tx_flag(0x7000_1000, addrs), TxFlag::Send);
        assert_eq!(tx_flag(0xDEAD << 48 | 700, addrs), TxFlag::Error);
        assert_eq!(tx_flag(0x7000_1080, addrs), TxFlag::Bad, "the next slot's address");
        assert_eq!(tx_flag(0x9000_0000, (0x7000_1000, 0x9000_0000)), TxFlag::Send, "the device view");
    }
}
