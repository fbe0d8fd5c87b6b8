//! What the software NIC counts. Every frame it refuses is counted under exactly one
//! [`DropReason`]; nothing on the receive path allocates or panics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Why a received frame was dropped. Small and `Copy`: the data path returns it by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// Shorter than its headers or lengths say.
    Truncated,
    /// Not IPv4/UDP to port 4791.
    NotRoce,
    /// BTH TVer other than 0 (IBTA 9.6; PROTOCOLS.md 1.2).
    BadTver,
    /// IPv4 header checksum wrong.
    BadChecksum,
    /// A header field the protocol forbids (pad count, lengths, IPv4 fragments).
    Malformed,
    /// ICRC wrong.
    BadIcrc,
    /// Payload larger than the path MTU, or frame larger than the NIC's receive buffer.
    Oversized,
    /// An opcode this UC queue pair does not accept (RC, ACK, unknown).
    UnsupportedOpcode,
    /// Destination QP is not ours.
    UnknownQp,
    /// From an IPv4 source other than the connected QP's peer (IBTA 9.6: a UC/RC QP
    /// accepts only the path it was connected to; PROTOCOLS.md 1.2).
    WrongSource,
    /// P_Key does not match the QP's.
    BadPkey,
    /// R_Key names no memory region, or one without remote-write access.
    BadRkey,
    /// VA + DMA length outside the memory region.
    OutOfBounds,
    /// DMA length disagrees with the payload (ONLY packets), or a multi-packet write's pieces
    /// do not add up to its DMA length.
    LengthMismatch,
    /// No receive WQE posted for a packet that consumes one.
    RqEmpty,
    /// A receive WQE's buffer is smaller than the SEND's payload.
    RecvBufferTooSmall,
    /// MIDDLE/LAST packet out of sequence, or with no message in progress.
    PsnError,
}

impl DropReason {
    pub const ALL: [DropReason; 17] = [
        DropReason::Truncated,
        DropReason::NotRoce,
        DropReason::BadTver,
        DropReason::BadChecksum,
        DropReason::Malformed,
        DropReason::BadIcrc,
        DropReason::Oversized,
        DropReason::UnsupportedOpcode,
        DropReason::UnknownQp,
        DropReason::WrongSource,
        DropReason::BadPkey,
        DropReason::BadRkey,
        DropReason::OutOfBounds,
        DropReason::LengthMismatch,
        DropReason::RqEmpty,
        DropReason::RecvBufferTooSmall,
        DropReason::PsnError,
    ];

    /// The name used in reports (`nic_drops`).
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::NotRoce => "not_roce",
            DropReason::BadTver => "bad_tver",
            DropReason::BadChecksum => "bad_ip_checksum",
            DropReason::Malformed => "malformed",
            DropReason::BadIcrc => "bad_icrc",
            DropReason::Oversized => "oversized",
            DropReason::UnsupportedOpcode => "unsupported_opcode",
            DropReason::UnknownQp => "unknown_qp",
            DropReason::WrongSource => "wrong_source",
            DropReason::BadPkey => "bad_pkey",
            DropReason::BadRkey => "bad_rkey",
            DropReason::OutOfBounds => "out_of_bounds",
            DropReason::LengthMismatch => "length_mismatch",
            DropReason::RqEmpty => "rq_empty",
            DropReason::RecvBufferTooSmall => "recv_buffer_too_small",
            DropReason::PsnError => "psn_error",
        }
    }

    fn index(self) -> usize {
        DropReason::ALL.iter().position(|r| *r == self).expect("ALL lists every reason")
    }
}

impl From<rocelink_wire::Error> for DropReason {
    fn from(e: rocelink_wire::Error) -> Self {
        use rocelink_wire::Error as E;
        match e {
            E::Truncated => DropReason::Truncated,
            E::NotRoce => DropReason::NotRoce,
            E::BadChecksum => DropReason::BadChecksum,
            E::BadIcrc => DropReason::BadIcrc,
            _ => DropReason::Malformed,
        }
    }
}

/// Counters written by the NIC engine thread and read by anyone (Relaxed: they are
/// statistics, not synchronisation).
///
/// Single writer: one [`SoftNic`](super::SoftNic) claims a `NicCounters` when it is made
/// (a second claim panics) and gives it back when dropped. While it holds the claim it is
/// the only writer of `rx_packets`, `rx_bytes`, `rx_cqes`, `tx_packets`, `tx_bytes` and
/// `tx_cqes`, and it adds to them with a plain load and store ([`add_single_writer`]): no
/// locked instruction per packet. Nobody else may write those six; readers still see each
/// one grow monotonically. The other counters are added to with `fetch_add`.
#[derive(Debug, Default)]
pub struct NicCounters {
    drops: [AtomicU64; DropReason::ALL.len()],
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub rx_cqes: AtomicU64,
    /// ONLY/FIRST packets whose PSN was not the expected one (accepted: UC resynchronises).
    pub psn_gaps: AtomicU64,
    /// BTH byte 4 reserved bits set, or PSN wrapping at 2^20: accepted, counted (PROTOCOLS.md 1.2).
    pub unusual: AtomicU64,
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub tx_cqes: AtomicU64,
    /// Send WQEs that completed in error (bad WQE, bad lkey, link failure).
    pub tx_errors: AtomicU64,
    /// Errors of the link itself (socket errors on receive).
    pub link_errors: AtomicU64,
    /// Checked doorbells (abi.h `rl_proxy_doorbell`) whose range was read more than once before
    /// its bytes gave the doorbell's check: the data path's stores were still landing.
    pub tx_wqe_rereads: AtomicU64,
    /// Checked doorbells whose range never gave the check in time (its WQEs completed in
    /// error, also counted in `tx_errors`).
    pub tx_wqe_check_failures: AtomicU64,
    /// Set while a SoftNic holds the single-writer claim.
    claimed: AtomicBool,
}

/// Adds `n` to `counter`, which has one writer: the caller (see [`NicCounters`]). A load and
/// a store, both Relaxed, instead of a locked read-modify-write: with no other writer no
/// update can be lost, and a reader sees the old or the new value, never anything else.
#[inline]
pub(crate) fn add_single_writer(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

/// A snapshot of [`NicCounters`] for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct NicStats {
    pub drops: BTreeMap<String, u64>,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_cqes: u64,
    pub psn_gaps: u64,
    pub unusual: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_cqes: u64,
    pub tx_errors: u64,
    pub link_errors: u64,
    pub tx_wqe_rereads: u64,
    pub tx_wqe_check_failures: u64,
}

impl NicCounters {
    /// Makes the caller the single writer of the per-packet counters (see [`NicCounters`]).
    /// Panics if another SoftNic holds the claim: two writers would lose counts.
    pub(crate) fn claim_single_writer(&self) {
        // Acquire pairs with the Release of a previous holder's release_single_writer: its
        // last stores happen before our first load.
        let taken = self.claimed.swap(true, std::sync::atomic::Ordering::Acquire);
        assert!(!taken, "a NicCounters is written by one SoftNic only; this one already has a writer");
    }

    /// Gives the claim back (the writer is going away).
    pub(crate) fn release_single_writer(&self) {
        self.claimed.store(false, std::sync::atomic::Ordering::Release);
    }

    pub fn count_drop(&self, r: DropReason) {
        self.drops[r.index()].fetch_add(1, Relaxed);
    }

    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops[r.index()].load(Relaxed)
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(|d| d.load(Relaxed)).sum()
    }

    pub fn snapshot(&self) -> NicStats {
        NicStats {
            drops: DropReason::ALL.iter().map(|r| (r.name().to_string(), self.drops(*r))).collect(),
            rx_packets: self.rx_packets.load(Relaxed),
            rx_bytes: self.rx_bytes.load(Relaxed),
            rx_cqes: self.rx_cqes.load(Relaxed),
            psn_gaps: self.psn_gaps.load(Relaxed),
            unusual: self.unusual.load(Relaxed),
            tx_packets: self.tx_packets.load(Relaxed),
            tx_bytes: self.tx_bytes.load(Relaxed),
            tx_cqes: self.tx_cqes.load(Relaxed),
            tx_errors: self.tx_errors.load(Relaxed),
            link_errors: self.link_errors.load(Relaxed),
            tx_wqe_rereads: self.tx_wqe_rereads.load(Relaxed),
            tx_wqe_check_failures: self.tx_wqe_check_failures.load(Relaxed),
        }
    }
}
