//! The data path's side of the queue pair, in Rust: what `kernels/verbs.cuh` does on the GPU,
//! for the CPU backend. Names follow GPUNetIO's device verbs (poll a CQ at an index, post
//! receive, prepare a SEND, submit with the CPU-proxy doorbell).
//!
//! Every access is one of the ordering contracts of `kernels/abi.h`: poll the CQE owner byte
//! (Acquire) before reading the entry; write WQEs, then the doorbell record, then the proxy
//! word with Release.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::abi::{self, Cqe, CQE, RECV_WQE, WQEBB};
use crate::nic::DoorbellMode;
use crate::rings::QpMemory;

/// The data path's indices into the queue pair's rings.
pub struct HostVerbs {
    q: QpMemory,
    qpn: u32,
    tx_lkey: u32,
    rcq_ci: u32,
    scq_ci: u32,
    rq_pi: u32,
    sq_pi: u32,
    /// WQEBBs known to be executed (from signaled send CQEs).
    sq_done: u32,
    /// Send CQEs with an error status seen.
    pub send_errors: u64,
    /// How sends are rung: the proxy word (the default), or the doorbell record and the UAR
    /// ([`HostVerbs::with_doorbell`], matching the NIC's `NicOptions::doorbell`).
    doorbell: DoorbellMode,
    /// The last WQE's first 8 bytes (what an MMIO doorbell writes to the UAR).
    last_ctrl: u64,
}

/// A receive completion, with where its bytes are.
#[derive(Debug, Clone, Copy)]
pub struct RecvCompletion {
    pub cqe: Cqe,
    /// Offset of the CQE in the shared memory (its first 32 bytes hold inline-scattered data).
    pub cqe_offset: usize,
}

impl HostVerbs {
    pub fn new(q: QpMemory, qpn: u32, tx_lkey: u32) -> HostVerbs {
        HostVerbs {
            q,
            qpn,
            tx_lkey,
            rcq_ci: 0,
            scq_ci: 0,
            rq_pi: 0,
            sq_pi: 0,
            sq_done: 0,
            send_errors: 0,
            doorbell: DoorbellMode::Proxy,
            last_ctrl: 0,
        }
    }

    /// Rings sends with `d` (the NIC must answer to the same: `NicOptions::doorbell`).
    pub fn with_doorbell(mut self, d: DoorbellMode) -> HostVerbs {
        self.doorbell = d;
        self
    }

    pub fn memory(&self) -> &QpMemory {
        &self.q
    }

    /// Posts `n` receive WQEs. RDMA WRITE with immediate lands where its RETH points, so the
    /// WQEs carry no buffer (byte_count 0): they only pace completions.
    pub fn post_recv(&mut self, n: u32) {
        let entries = self.q.layout.sizes.rq_entries;
        for _ in 0..n {
            let at = self.q.layout.rq + (self.rq_pi & (entries - 1)) as usize * RECV_WQE;
            self.q.mem.write(at, &abi::recv_wqe(0, 0, 0));
            self.rq_pi = self.rq_pi.wrapping_add(1);
        }
        // Release: the NIC reads the WQEs below the counter after its Acquire load.
        self.q.mem.atomic_u32(self.q.layout.rq_dbrec_counter()).store((self.rq_pi & 0xffff).to_be(), Release);
    }

    /// Polls the receive CQ once: one load of the owner byte.
    #[inline]
    /// Whether a receive completion is waiting (what `poll_recv` would return), without
    /// consuming it.
    pub fn recv_pending(&self) -> bool {
        let entries = self.q.layout.sizes.rq_entries;
        let at = self.q.layout.rcq + (self.rcq_ci & (entries - 1)) as usize * CQE;
        abi::cqe_valid(self.q.mem.atomic_u8(at + abi::CQE_OP_OWN).load(Acquire), self.rcq_ci, entries)
    }

    pub fn poll_recv(&mut self) -> Option<RecvCompletion> {
        let entries = self.q.layout.sizes.rq_entries;
        let at = self.q.layout.rcq + (self.rcq_ci & (entries - 1)) as usize * CQE;
        let op_own = self.q.mem.atomic_u8(at + abi::CQE_OP_OWN).load(Acquire);
        if !abi::cqe_valid(op_own, self.rcq_ci, entries) {
            return None;
        }
        let raw: abi::rl_cqe64 = self.q.mem.read_struct(at);
        self.rcq_ci = self.rcq_ci.wrapping_add(1);
        // The consumer index tells the NIC how far the CQ is consumed (mlx5 cq dbrec set_ci).
        self.q.mem.atomic_u32(self.q.layout.rcq_dbrec).store((self.rcq_ci & 0xff_ffff).to_be(), Relaxed);
        Some(RecvCompletion { cqe: Cqe::decode(&raw), cqe_offset: at })
    }

    /// Send WQEs that can be posted now.
    pub fn sq_free(&self) -> u32 {
        self.q.layout.sizes.sq_entries - self.sq_pi.wrapping_sub(self.sq_done)
    }

    /// Reaps send completions; returns how many CQEs were consumed.
    pub fn poll_send_completions(&mut self) -> u32 {
        let entries = self.q.layout.sizes.sq_entries;
        let mut n = 0;
        loop {
            let at = self.q.layout.scq + (self.scq_ci & (entries - 1)) as usize * CQE;
            let op_own = self.q.mem.atomic_u8(at + abi::CQE_OP_OWN).load(Acquire);
            if !abi::cqe_valid(op_own, self.scq_ci, entries) {
                break;
            }
            let raw: abi::rl_cqe64 = self.q.mem.read_struct(at);
            let cqe = Cqe::decode(&raw);
            if u32::from(cqe.opcode) != abi::RL_CQE_REQ {
                self.send_errors += 1;
            }
            // wqe_counter is 16 bits: extend it to the 32-bit index just below sq_pi.
            let behind = (self.sq_pi as u16).wrapping_sub(cqe.wqe_counter) as u32;
            self.sq_done = self.sq_pi.wrapping_sub(behind).wrapping_add(1);
            self.scq_ci = self.scq_ci.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            self.q.mem.atomic_u32(self.q.layout.scq_dbrec).store((self.scq_ci & 0xff_ffff).to_be(), Relaxed);
        }
        n
    }

    /// Index of the next send WQE (also the TX slot it may use).
    pub fn next_send_index(&self) -> u32 {
        self.sq_pi
    }

    /// Offset of the TX slot that belongs to send index `i`.
    pub fn tx_slot(&self, i: u32) -> usize {
        self.q.layout.tx_slot(i)
    }

    fn fm_ce_se(&self) -> u8 {
        let every = self.q.layout.sizes.signal_every;
        if self.sq_pi & (every - 1) == every - 1 {
            abi::RL_WQE_CTRL_CQ_UPDATE as u8
        } else {
            0
        }
    }

    fn write_wqe(&mut self, wqe: &[u8; WQEBB]) {
        let entries = self.q.layout.sizes.sq_entries;
        let at = self.q.layout.sq + (self.sq_pi & (entries - 1)) as usize * WQEBB;
        self.q.mem.write(at, wqe);
        self.last_ctrl = u64::from_le_bytes(wqe[..8].try_into().expect("8 bytes"));
        self.sq_pi = self.sq_pi.wrapping_add(1);
    }

    /// Prepares a SEND of `len` bytes of TX slot `sq_pi`: inline when it fits one WQEBB,
    /// else gathered from the slot. The caller checked [`Self::sq_free`].
    pub fn prepare_send_from_slot(&mut self, len: usize) {
        let i = self.sq_pi;
        let slot = self.tx_slot(i);
        let fm = self.fm_ce_se();
        let wqe = if len <= abi::MAX_INLINE_1BB {
            let mut tmp = [0u8; abi::MAX_INLINE_1BB];
            self.q.mem.read(slot, &mut tmp[..len]);
            abi::send_inline_wqe(i as u16, self.qpn, fm, &tmp[..len]).expect("fits inline")
        } else {
            abi::send_gather_wqe(i as u16, self.qpn, fm, self.q.mem.host_addr(slot), self.tx_lkey, len as u32)
        };
        self.write_wqe(&wqe);
    }

    /// Rings the doorbell: the doorbell record, then the CPU-proxy word, Release (an unchecked
    /// doorbell, abi.h `rl_proxy_doorbell`: on the CPU a release store costs nothing).
    pub fn ring_send_doorbell(&mut self) {
        match self.doorbell {
            DoorbellMode::Proxy => {
                self.q.mem.atomic_u32(self.q.layout.sq_dbrec_counter()).store((self.sq_pi & 0xffff).to_be(), Relaxed);
                self.q
                    .mem
                    .atomic_u64(self.q.layout.proxy_doorbell)
                    .store(abi::ProxyDoorbell::unchecked(self.sq_pi), Release);
            }
            DoorbellMode::Mmio => {
                // a ConnectX's order: the record (after the WQE), then the UAR
                self.q.mem.atomic_u32(self.q.layout.sq_dbrec_counter()).store((self.sq_pi & 0xffff).to_be(), Release);
                self.q.mem.atomic_u64(self.q.layout.uar).store(self.last_ctrl, Release);
            }
        }
    }
}
