//! One UC queue pair of the software NIC: the receive and send rules, over the shared rings.
//!
//! Receive rules (IBTA vol 1 ch. 9; RoCEv2 annex A17; PROTOCOLS.md 1-2): a frame is parsed and
//! its ICRC verified ([`roce::parse_frame`], against the IPv4 header the link hands on: as
//! received on a raw or in-process wire, rebuilt behind a plain UDP socket), then checked in
//! this order, each failure counted under its own [`DropReason`] and nothing written: size,
//! BTH TVer 0 (IBTA 9.6), opcode (UC only), destination QP, IPv4 source = the connected
//! peer's (IBTA 9.6; PROTOCOLS.md 1.2: a ConnectX drops the rest), P_Key, PSN (IBTA vol 1 9.7, unreliable connected: an ONLY or FIRST packet is accepted
//! with any PSN and resynchronises the expected PSN, a gap is counted, not dropped; MIDDLE and
//! LAST must follow in sequence, else the message is abandoned), R_Key and access, VA + DMA length inside the region, DMA
//! length against the payload, a posted receive WQE for packets that consume one. Only then
//! is the payload written and the CQE produced.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

use rocelink_link::{clock::monotonic_ns, Link};
use rocelink_wire::bth::Opcode;
use rocelink_wire::reth::RethRepr;
use rocelink_wire::roce::{self, Endpoints, RoceRepr};

use super::counters::{add_single_writer, DropReason, NicCounters};
use super::mr::{Access, MrTable};
use crate::abi::{self, CqeFields, SendWqe, WqeData, CQE, RECV_WQE, WQEBB};
use crate::rings::QpMemory;

/// How long the NIC re-reads, by default, a checked doorbell's range whose bytes do not give
/// the doorbell's check before it completes its WQEs in error. The data path's stores land
/// within microseconds of its doorbell (PCIe posted writes); a millisecond only ends a wait on
/// a writer that died mid-WQE, or one whose check is wrong.
pub const WQE_CHECK_DEADLINE: std::time::Duration = std::time::Duration::from_millis(1);

/// Addressing of the queue pair: who we are and who the connected peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttrs {
    /// Our QP number (the BTH DestQP of frames we accept).
    pub qpn: u32,
    /// Our partition key (full member when bit 15 is set; 0xFFFF in HSB).
    pub pkey: u16,
    /// Source = us, destination = the peer: MACs, IPs and UDP ports of frames we send. The
    /// destination IP is also the only source we accept frames from (IBTA 9.6).
    pub endpoints: Endpoints,
    /// The peer's QP (2 for an HSB FPGA).
    pub peer_qpn: u32,
}

/// Behaviour switches of the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicOptions {
    /// Scatter receives of up to 32 bytes into the CQE as well (mlx5 "CQE inline scatter").
    /// For RDMA WRITE with immediate this is a software-NIC extension (a ConnectX scatters only
    /// SEND payloads); the CQE says so with RL_CQE_INLINE_SCATTER_32, and the data path falls
    /// back to the slot when the flag is absent.
    pub cqe_inline_scatter: bool,
    /// Largest payload of one packet (the RoCE path MTU).
    pub pmtu: usize,
    /// How long a checked doorbell's range is re-read while its bytes do not give the
    /// doorbell's check before its WQEs complete in error ([`WQE_CHECK_DEADLINE`]).
    pub wqe_check_deadline: std::time::Duration,
    /// After each receive completion, ask for the next receive's CQE line and the next
    /// WRITE's first two lines (the slot after the last, predicted from the last two targets)
    /// for writing (`PREFETCHW`), while the wire is quiet: the data path's poison stores (or
    /// its reads) took them out of this core, and the next completion's stores, whose order
    /// ends with the CQE's owner byte, then need not fetch them first. A hint: nothing the
    /// program sees changes. On by default for the GPU path's round trip
    /// (`latency-reports/decisions.md`).
    pub prefetch_next_receive: bool,
    /// How the data path tells the NIC to send: the CPU-proxy word (the default) or the
    /// doorbell a ConnectX has ([`DoorbellMode::Mmio`]).
    pub doorbell: DoorbellMode,
}

/// Which doorbell the NIC answers to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DoorbellMode {
    /// The CPU-proxy word (abi.h `rl_proxy_doorbell`, checked or not): GPUNetIO's
    /// CPU-assisted mode, and the CPU backend's.
    #[default]
    Proxy,
    /// A ConnectX's: the doorbell record's send counter, then 8 bytes (the last WQE's control
    /// segment's first 8) written to the UAR register, which the NIC watches here as a word of
    /// memory (`QpLayout::uar`). For a kernel built with `RL_DOORBELL_MMIO` (the CPU backend
    /// rings the proxy word only).
    Mmio,
}

impl std::str::FromStr for DoorbellMode {
    type Err = String;
    /// `proxy` or `mmio` (the command line reads it from `ROCELINK_DOORBELL`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "proxy" => Ok(DoorbellMode::Proxy),
            "mmio" => Ok(DoorbellMode::Mmio),
            _ => Err(format!("`{s}` is not a doorbell (proxy, mmio)")),
        }
    }
}

impl Default for NicOptions {
    /// The defaults, the proxy doorbell among them; nothing is read from the environment.
    fn default() -> Self {
        NicOptions {
            cqe_inline_scatter: true,
            pmtu: roce::PMTU,
            wqe_check_deadline: WQE_CHECK_DEADLINE,
            prefetch_next_receive: true,
            doorbell: DoorbellMode::Proxy,
        }
    }
}

/// What an accepted frame did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Payload written, no CQE yet (FIRST/MIDDLE/LAST without immediate, WRITE ONLY).
    Written,
    /// A receive CQE was produced.
    Completed,
}

/// A multi-packet RDMA WRITE in progress.
#[derive(Debug, Clone, Copy)]
struct WriteInProgress {
    /// Offset in the shared memory of the write's first byte.
    offset: usize,
    dma_len: usize,
    written: usize,
}

/// mlx5 error-CQE syndromes used here.
mod syndrome {
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
}

/// The software NIC's deterministic core for one queue pair.
pub struct SoftNic {
    attrs: QpAttrs,
    opts: NicOptions,
    mrs: MrTable,
    q: QpMemory,
    counters: Arc<NicCounters>,
    expected_psn: Option<u32>,
    write: Option<WriteInProgress>,
    rq_ci: u32,
    /// The receive doorbell record's counter as last read: WQEs below it are posted, so the
    /// record (written by the data path, a cache miss each time it moved) is read again only
    /// when `rq_ci` reaches this.
    rq_posted: u16,
    rcq_pi: u32,
    sq_ci: u32,
    scq_pi: u32,
    send_psn: u32,
    /// One WQE, or a checked doorbell's range (up to 16 WQEBBs), copied out of the ring,
    /// contiguous.
    wqe_buf: Box<[u8; 16 * WQEBB]>,
    /// Where in `wqe_buf` the WQE being executed starts.
    wqe_at: usize,
    /// The bytes a checked range's WQE gathers, copied out for its check.
    gather_buf: Box<[u8]>,
    /// The last checked range run: (its first WQEBB, the WQEBB after its last, the check of
    /// its WQEs), so that a later doorbell of the same range (more WQEs, no fence between)
    /// checks only the new ones.
    checked: Option<(u16, u16, u64)>,
    /// The frame being built for the link.
    frame_buf: Box<[u8]>,
    /// `RoceRepr::uc_send_only` to the peer with PSN 0 and no payload: a SEND's Repr is
    /// this with its PSN and payload length set (building the whole Repr per packet cost
    /// store-forwarding stalls).
    send_only: RoceRepr,
    /// When each WQE's frame left, for the report's breakdown (`set_send_trace`).
    send_trace: Option<Arc<super::trace::SendTrace>>,
    /// The last completed WRITE's target offset ([`NicOptions::prefetch_next_receive`]).
    last_write_at: usize,
    /// [`DoorbellMode::Mmio`]: the UAR word last seen, and the producer index the doorbell
    /// record said then.
    last_uar: u64,
    mmio_pi: u16,
}

const PSN_MASK: u32 = 0xff_ffff;

impl SoftNic {
    /// Panics if `counters` already belongs to another live SoftNic: its per-packet counters
    /// have a single writer ([`NicCounters`]).
    pub fn new(attrs: QpAttrs, opts: NicOptions, mrs: MrTable, q: QpMemory, counters: Arc<NicCounters>) -> SoftNic {
        counters.claim_single_writer();
        SoftNic {
            attrs,
            opts,
            mrs,
            q,
            counters,
            expected_psn: None,
            write: None,
            rq_ci: 0,
            rq_posted: 0,
            rcq_pi: 0,
            sq_ci: 0,
            scq_pi: 0,
            send_psn: 0,
            wqe_buf: Box::new([0; 16 * WQEBB]),
            wqe_at: 0,
            gather_buf: vec![0; abi::RL_DB_GATHER_MAX as usize].into_boxed_slice(),
            checked: None,
            frame_buf: vec![0; rocelink_link::MAX_FRAME].into_boxed_slice(),
            send_only: RoceRepr::uc_send_only(&attrs.endpoints, attrs.peer_qpn, 0, 0),
            send_trace: None,
            last_write_at: 0,
            last_uar: 0,
            mmio_pi: 0,
        }
    }

    pub fn counters(&self) -> &Arc<NicCounters> {
        &self.counters
    }

    /// Records in `trace` when each executed WQE's frame left (the clock read after the send,
    /// by the WQE's first WQEBB index).
    pub fn set_send_trace(&mut self, trace: Arc<super::trace::SendTrace>) {
        self.send_trace = Some(trace);
    }

    pub fn attrs(&self) -> &QpAttrs {
        &self.attrs
    }

    /// Handles one received frame (Ethernet first). Every refusal is counted.
    pub fn receive(&mut self, frame: &[u8]) -> Result<Delivery, DropReason> {
        let r = self.receive_inner(frame);
        if let Err(reason) = r {
            self.counters.count_drop(reason);
        }
        r
    }

    fn pkey_matches(&self, pkey: u16) -> bool {
        // IBTA 10.9.3: keys match when the low 15 bits are equal and not both limited members.
        let key = pkey & 0x7fff;
        key != 0 && key == self.attrs.pkey & 0x7fff && (pkey & 0x8000 != 0 || self.attrs.pkey & 0x8000 != 0)
    }

    fn rq_has_wqe(&mut self) -> bool {
        if self.rq_posted != self.rq_ci as u16 {
            return true;
        }
        // Acquire pairs with the data path's release of the record: the WQEs below it are
        // written (and stay so until consumed).
        let counter = u32::from_be(self.q.mem.atomic_u32(self.q.layout.rq_dbrec_counter()).load(Acquire));
        self.rq_posted = counter as u16;
        self.rq_posted != self.rq_ci as u16
    }

    fn receive_inner(&mut self, frame: &[u8]) -> Result<Delivery, DropReason> {
        if frame.len() > rocelink_link::MAX_FRAME {
            return Err(DropReason::Oversized);
        }
        let f = match roce::parse_frame(frame) {
            Ok(f) => f,
            // parse_frame refuses a payload over roce::PMTU as Malformed, before it checks the
            // ICRC: for the NIC that is a packet over the path MTU.
            Err(rocelink_wire::Error::Malformed) if carried_payload(frame).is_some_and(|n| n > self.opts.pmtu) => {
                return Err(DropReason::Oversized);
            }
            Err(e) => return Err(e.into()),
        };
        let bth = f.repr.bth;
        let payload = f.payload;
        if payload.len() > self.opts.pmtu {
            return Err(DropReason::Oversized);
        }
        // IBTA 9.6: a transport header version other than 0 is dropped.
        if bth.tver != 0 {
            return Err(DropReason::BadTver);
        }
        let op = bth.opcode;
        let supported = matches!(
            op,
            Opcode::UcWriteOnly
                | Opcode::UcWriteOnlyImm
                | Opcode::UcWriteFirst
                | Opcode::UcWriteMiddle
                | Opcode::UcWriteLast
                | Opcode::UcWriteLastImm
                | Opcode::UcSendOnly
                | Opcode::UcSendOnlyImm
        );
        if !supported {
            return Err(DropReason::UnsupportedOpcode);
        }
        if bth.dest_qp != self.attrs.qpn {
            return Err(DropReason::UnknownQp);
        }
        // IBTA 9.6: a connected QP accepts packets of the path it was connected to only
        // (here: the peer's IPv4 address; the UDP source port is the sender's entropy).
        if f.repr.ipv4.src_addr != self.attrs.endpoints.dst_ip {
            return Err(DropReason::WrongSource);
        }
        if !self.pkey_matches(bth.pkey) {
            return Err(DropReason::BadPkey);
        }
        if bth.fecn || bth.becn || bth.resv6 != 0 {
            // NVIDIA's HSB emulator sends byte 4 as 0xFF; the ICRC masks it. Accept, count.
            self.counters.unusual.fetch_add(1, Relaxed);
        }
        let psn = bth.psn & PSN_MASK;
        let starts_message = matches!(
            op,
            Opcode::UcWriteOnly
                | Opcode::UcWriteOnlyImm
                | Opcode::UcWriteFirst
                | Opcode::UcSendOnly
                | Opcode::UcSendOnlyImm
        );
        if starts_message {
            if let Some(e) = self.expected_psn {
                if e != psn {
                    self.counters.psn_gaps.fetch_add(1, Relaxed);
                }
            }
            // A new message abandons one in progress (UC: the rest of it was lost).
            self.write = None;
        } else if self.write.is_none() || self.expected_psn != Some(psn) {
            self.write = None;
            self.expected_psn = Some((psn + 1) & PSN_MASK);
            return Err(DropReason::PsnError);
        }

        let delivery = match op {
            Opcode::UcWriteOnly | Opcode::UcWriteOnlyImm | Opcode::UcWriteFirst => {
                let reth = f.repr.reth.ok_or(DropReason::Malformed)?;
                let offset = self.resolve_remote_write(&reth)?;
                let dma_len = reth.dma_len as usize;
                let only = op != Opcode::UcWriteFirst;
                if (only && dma_len != payload.len()) || (!only && payload.len() > dma_len) {
                    return Err(DropReason::LengthMismatch);
                }
                let imm = op == Opcode::UcWriteOnlyImm;
                if imm && !self.rq_has_wqe() {
                    return Err(DropReason::RqEmpty);
                }
                self.q.mem.write(offset, payload);
                if imm {
                    let immdt = f.repr.immdt.ok_or(DropReason::Malformed)?;
                    self.complete_recv(abi::RL_CQE_RESP_WR_IMM, immdt, dma_len as u32, Some(payload));
                    // the data path reads the slot next (with the CQE, RL_SPEC_BYTES of it)
                    self.q.mem.demote(offset, payload.len());
                    if self.opts.prefetch_next_receive {
                        // peers cycle their slots in order: the next target is as far past this
                        // one as this one was past the last (none across the ring's wrap)
                        let next = offset.wrapping_add(offset.wrapping_sub(self.last_write_at));
                        if next > offset && next.checked_add(128).is_some_and(|end| end <= self.q.mem.len()) {
                            self.q.mem.prefetch_write(next);
                            self.q.mem.prefetch_write(next + 64);
                        }
                        self.last_write_at = offset;
                    }
                    Delivery::Completed
                } else {
                    if !only {
                        self.write = Some(WriteInProgress { offset, dma_len, written: payload.len() });
                    }
                    Delivery::Written
                }
            }
            Opcode::UcWriteMiddle | Opcode::UcWriteLast | Opcode::UcWriteLastImm => {
                let w = self.write.take().ok_or(DropReason::PsnError)?;
                let written = w.written + payload.len();
                let last = op != Opcode::UcWriteMiddle;
                if written > w.dma_len || (last && written != w.dma_len) {
                    return Err(DropReason::LengthMismatch);
                }
                let imm = op == Opcode::UcWriteLastImm;
                if imm && !self.rq_has_wqe() {
                    return Err(DropReason::RqEmpty);
                }
                self.q.mem.write(w.offset + w.written, payload);
                if imm {
                    let immdt = f.repr.immdt.ok_or(DropReason::Malformed)?;
                    self.complete_recv(abi::RL_CQE_RESP_WR_IMM, immdt, w.dma_len as u32, None);
                    Delivery::Completed
                } else {
                    if !last {
                        self.write = Some(WriteInProgress { written, ..w });
                    }
                    Delivery::Written
                }
            }
            Opcode::UcSendOnly | Opcode::UcSendOnlyImm => {
                if !self.rq_has_wqe() {
                    return Err(DropReason::RqEmpty);
                }
                let idx = (self.rq_ci & (self.q.layout.sizes.rq_entries - 1)) as usize;
                let wqe: abi::rl_wqe_data_seg = self.q.mem.read_struct(self.q.layout.rq + idx * RECV_WQE);
                let capacity = u32::from_be(wqe.byte_count) as usize;
                if payload.len() > capacity {
                    return Err(DropReason::RecvBufferTooSmall);
                }
                if !payload.is_empty() {
                    let mr = self.mrs.by_lkey(u32::from_be(wqe.lkey)).ok_or(DropReason::BadRkey)?;
                    // Regions live in the queue pair's memory; a key of another memory is refused.
                    if !mr.access.contains(Access::LOCAL_WRITE) || !Arc::ptr_eq(&mr.mem, &self.q.mem) {
                        return Err(DropReason::BadRkey);
                    }
                    let off =
                        mr.resolve(u64::from_be(wqe.addr), payload.len() as u64).ok_or(DropReason::OutOfBounds)?;
                    self.q.mem.write(off, payload);
                }
                let (opcode, imm) = match f.repr.immdt {
                    Some(i) => (abi::RL_CQE_RESP_SEND_IMM, i),
                    None => (abi::RL_CQE_RESP_SEND, 0),
                };
                self.complete_recv(opcode, imm, payload.len() as u32, Some(payload));
                Delivery::Completed
            }
            _ => return Err(DropReason::UnsupportedOpcode),
        };
        self.expected_psn = Some((psn + 1) & PSN_MASK);
        add_single_writer(&self.counters.rx_packets, 1);
        add_single_writer(&self.counters.rx_bytes, payload.len() as u64);
        Ok(delivery)
    }

    /// Offset of the RETH's target, checked against the region named by its R_Key.
    fn resolve_remote_write(&self, reth: &RethRepr) -> Result<usize, DropReason> {
        let mr = self.mrs.by_rkey(reth.rkey).ok_or(DropReason::BadRkey)?;
        if !mr.access.contains(Access::REMOTE_WRITE) {
            return Err(DropReason::BadRkey);
        }
        if !Arc::ptr_eq(&mr.mem, &self.q.mem) {
            // Regions live in the queue pair's memory; anything else is a setup error.
            return Err(DropReason::BadRkey);
        }
        mr.resolve(reth.va, u64::from(reth.dma_len)).ok_or(DropReason::OutOfBounds)
    }

    /// Consumes the receive WQE at `rq_ci` and writes its CQE: everything but the owner byte,
    /// then the owner byte with a Release store (abi.h, rl_cqe64).
    fn complete_recv(&mut self, opcode: u32, imm: u32, byte_cnt: u32, payload: Option<&[u8]>) {
        let inline = match payload {
            Some(p) if self.opts.cqe_inline_scatter && p.len() <= abi::RL_CQE_INLINE_MAX as usize => {
                let mut d = [0u8; 32];
                d[..p.len()].copy_from_slice(p);
                Some((d, p.len()))
            }
            _ => None,
        };
        let fields = CqeFields {
            opcode: opcode as u8,
            imm,
            byte_cnt,
            timestamp: monotonic_ns(),
            qpn: self.attrs.qpn,
            wqe_counter: self.rq_ci as u16,
            inline,
            syndrome: 0,
        };
        let entries = self.q.layout.sizes.rq_entries;
        let at = self.q.layout.rcq + (self.rcq_pi & (entries - 1)) as usize * CQE;
        publish_cqe(&self.q, at, &fields.encode(self.rcq_pi / entries));
        // the data path polls this line: let its next read find it in the shared cache
        self.q.mem.demote(at, CQE);
        self.rcq_pi = self.rcq_pi.wrapping_add(1);
        if self.opts.prefetch_next_receive {
            self.q.mem.prefetch_write(self.q.layout.rcq + (self.rcq_pi & (entries - 1)) as usize * CQE);
        }
        self.rq_ci = self.rq_ci.wrapping_add(1);
        add_single_writer(&self.counters.rx_cqes, 1);
    }

    fn complete_send(&mut self, wqe: Option<&SendWqe>, wqe_index: u16, byte_cnt: u32, error: Option<u8>) {
        let signaled = wqe.is_some_and(|w| w.fm_ce_se & abi::RL_WQE_CTRL_CQ_UPDATE as u8 != 0);
        if error.is_none() && !signaled {
            return;
        }
        let fields = CqeFields {
            opcode: if error.is_some() { abi::RL_CQE_REQ_ERR as u8 } else { abi::RL_CQE_REQ as u8 },
            imm: 0,
            byte_cnt,
            timestamp: monotonic_ns(),
            qpn: self.attrs.qpn,
            wqe_counter: wqe_index,
            inline: None,
            syndrome: error.unwrap_or(0),
        };
        let entries = self.q.layout.sizes.sq_entries;
        let at = self.q.layout.scq + (self.scq_pi & (entries - 1)) as usize * CQE;
        publish_cqe(&self.q, at, &fields.encode(self.scq_pi / entries));
        self.scq_pi = self.scq_pi.wrapping_add(1);
        add_single_writer(&self.counters.tx_cqes, 1);
    }

    /// Executes every send WQE below the CPU-proxy doorbell's producer index. Returns how
    /// many WQEs ran.
    ///
    /// A checked doorbell (abi.h `rl_proxy_doorbell`) was stored without a fence in front: the
    /// WQEs of its range (those written since the writer's last fence) are executed only once
    /// the range's bytes give the doorbell's check (re-read until they do, for up to
    /// [`NicOptions::wqe_check_deadline`]; then they complete in error). Every WQE before the
    /// range is complete, as every WQE below an unchecked doorbell.
    pub fn poll_send(&mut self, link: &mut dyn Link) -> usize {
        // Acquire pairs with the data path's store of the doorbell: Release (or after a
        // system-scope release fence) for an unchecked one.
        let db = match self.opts.doorbell {
            DoorbellMode::Proxy => {
                abi::ProxyDoorbell::decode(self.q.mem.atomic_u64(self.q.layout.proxy_doorbell).load(Acquire))
            }
            DoorbellMode::Mmio => self.mmio_doorbell(),
        };
        if self.sq_ci as u16 == db.pi {
            // Nothing new: ask for the next WQE's lines meanwhile (a hint; two: an inline
            // answer of 45..108 bytes takes two WQEBBs). The data path's stores to them come
            // before its doorbell, so when the doorbell moves they are often here already: one
            // miss after the doorbell's instead of two in a row.
            self.q.mem.prefetch(self.wqebb_at(self.sq_ci));
            self.q.mem.prefetch(self.wqebb_at(self.sq_ci.wrapping_add(1)));
            return 0;
        }
        let mut ran = 0;
        while self.sq_ci as u16 != db.pi && !db.range.is_some_and(|r| r.contains(self.sq_ci as u16)) {
            let outstanding = u32::from(db.pi.wrapping_sub(self.sq_ci as u16));
            let bbs = self.read_wqe();
            ran += 1;
            if bbs > outstanding {
                // its size runs past the doorbell: nothing after it can be trusted to start
                // where it says
                self.fail_to(db.pi);
                return ran;
            }
            self.run_wqe(0, bbs, link);
            // outside any checked range: the check kept of the last one no longer describes
            // the WQEBBs before sq_ci (after 2^16 of them its indices would match again)
            self.checked = None;
        }
        if let Some(r) = db.range {
            if self.sq_ci as u16 != db.pi {
                ran += self.run_checked_range(&r, link);
            }
        }
        ran
    }

    /// [`DoorbellMode::Mmio`]: a new value in the UAR word rings the doorbell: the send
    /// counter of the doorbell record (written, then fenced, before the UAR) is the producer
    /// index. The value is the last WQE's control segment's first 8 bytes; one that names
    /// another queue pair rings nothing here (counted as unusual). Every WQE below the index
    /// is complete (the writer fenced before the record): an unchecked doorbell.
    fn mmio_doorbell(&mut self) -> abi::ProxyDoorbell {
        let uar = self.q.mem.atomic_u64(self.q.layout.uar).load(Acquire);
        if uar != self.last_uar {
            self.last_uar = uar;
            // bytes 4..7 of the control segment: qpn_ds, big-endian (qpn << 8 | ds)
            let qpn = u32::from_be_bytes(uar.to_le_bytes()[4..8].try_into().expect("4 bytes")) >> 8;
            if qpn == self.attrs.qpn {
                self.mmio_pi =
                    u32::from_be(self.q.mem.atomic_u32(self.q.layout.sq_dbrec_counter()).load(Acquire)) as u16;
            } else {
                self.counters.unusual.fetch_add(1, Relaxed);
            }
        }
        abi::ProxyDoorbell { pi: self.mmio_pi, range: None }
    }

    /// WQEBB `i`'s offset in the shared memory.
    fn wqebb_at(&self, i: u32) -> usize {
        self.q.layout.sq + (i & (self.q.layout.sizes.sq_entries - 1)) as usize * WQEBB
    }

    /// Completes everything from `sq_ci` to `pi` with one error (a local QP operation error)
    /// and moves past it.
    fn fail_to(&mut self, pi: u16) {
        self.counters.tx_errors.fetch_add(1, Relaxed);
        self.complete_send(None, self.sq_ci as u16, 0, Some(syndrome::LOCAL_QP_OP_ERR));
        self.sq_ci = self.sq_ci.wrapping_add(u32::from(pi.wrapping_sub(self.sq_ci as u16)));
        self.checked = None;
    }

    /// Executes the WQE of `bbs` WQEBBs at byte `at` of `wqe_buf` (the one at `sq_ci`) and
    /// moves past it.
    fn run_wqe(&mut self, at: usize, bbs: u32, link: &mut dyn Link) {
        let wqe_index = u16::from_be_bytes([self.wqe_buf[at + 1], self.wqe_buf[at + 2]]);
        self.wqe_at = at;
        match abi::decode_send_wqe(&self.wqe_buf[at..at + bbs as usize * WQEBB]) {
            Ok(w) => match self.execute(&w, link) {
                Ok(len) => {
                    if let Some(t) = &self.send_trace {
                        // after the frame left: nothing added in front of it
                        t.record(self.sq_ci, monotonic_ns());
                    }
                    self.complete_send(Some(&w), wqe_index, len, None)
                }
                Err(s) => {
                    self.counters.tx_errors.fetch_add(1, Relaxed);
                    self.complete_send(Some(&w), wqe_index, 0, Some(s));
                }
            },
            Err(_) => {
                self.counters.tx_errors.fetch_add(1, Relaxed);
                self.complete_send(None, wqe_index, 0, Some(syndrome::LOCAL_QP_OP_ERR));
            }
        }
        self.sq_ci = self.sq_ci.wrapping_add(bbs);
    }

    /// Reads the complete WQE at `sq_ci` into `wqe_buf`; returns its WQEBBs (from its `ds`).
    fn read_wqe(&mut self) -> u32 {
        // The WQE's size is in its first line; its second line (an inline answer over 44
        // bytes) is loaded meanwhile rather than after: one memory miss, not two in a row.
        self.q.mem.prefetch(self.wqebb_at(self.sq_ci.wrapping_add(1)));
        self.q.mem.read(self.wqebb_at(self.sq_ci), &mut self.wqe_buf[..WQEBB]);
        let bbs = abi::wqebbs(self.wqe_buf[7] & 0x3f).min(16);
        for k in 1..bbs {
            let at = self.wqebb_at(self.sq_ci.wrapping_add(k));
            self.q.mem.read(at, &mut self.wqe_buf[k as usize * WQEBB..(k as usize + 1) * WQEBB]);
        }
        bbs
    }

    /// Runs the WQEs of a checked doorbell's range from `sq_ci` on, once the range's bytes and
    /// the bytes its WQEs gather give its check: reads them (and, unless [`Self::checked`] holds the check of the range's
    /// WQEs before `sq_ci`, those too) until they do, and `sq_ci` is one of its WQEs' first
    /// WQEBB. Returns the WQEs run (or 1 for a range that never agreed within
    /// [`NicOptions::wqe_check_deadline`]: a writer that died mid-WQE, or one whose check is
    /// wrong; completed in error, never executed, never waited on for longer).
    fn run_checked_range(&mut self, r: &abi::CheckedRange, link: &mut dyn Link) -> usize {
        let pi = r.start.wrapping_add(r.wqebbs as u16);
        let here = u32::from((self.sq_ci as u16).wrapping_sub(r.start));
        // the range's WQEs before sq_ci were checked with an earlier doorbell of this range
        let (from, prefix) = match self.checked {
            Some((start, end, acc)) if start == r.start && end == self.sq_ci as u16 => (here, acc),
            _ => (0, 0),
        };
        let first = self.sq_ci.wrapping_sub(here - from); // WQEBB `from` of the range
        let n = (r.wqebbs - from) as usize;
        let mut deadline = None;
        let mut expired = false;
        let check = loop {
            for k in 1..n {
                self.q.mem.prefetch(self.wqebb_at(first.wrapping_add(k as u32)));
            }
            for k in 0..n {
                let at = self.wqebb_at(first.wrapping_add(k as u32));
                self.q.mem.read(at, &mut self.wqe_buf[k * WQEBB..(k + 1) * WQEBB]);
            }
            // the bytes each WQE gathers are part of the check (they, too, may still be
            // landing); one that does not resolve gives none, as execute() would refuse it
            let (mrs, mem, gbuf) = (&self.mrs, &self.q.mem, &mut self.gather_buf);
            let gathered = |g: abi::Gather, first: u32| {
                let mr = mrs.by_lkey(g.lkey)?;
                let off = mr.resolve(g.addr, u64::from(g.len))?;
                if !Arc::ptr_eq(&mr.mem, mem) {
                    return None;
                }
                let b = &mut gbuf[..g.len as usize];
                mem.read(off, b);
                Some(abi::gather_check(b, first))
            };
            if let Some(c) = abi::range_check(&self.wqe_buf[..n * WQEBB], from, gathered) {
                let c = c ^ prefix;
                if c >> abi::RL_DB_CHECK_SHIFT == r.check && self.is_wqe_start(from, here) {
                    break c;
                }
            }
            let now = std::time::Instant::now();
            match deadline {
                None => {
                    deadline = Some(now + self.opts.wqe_check_deadline);
                    self.counters.tx_wqe_rereads.fetch_add(1, Relaxed);
                }
                // fails on a read that began after the deadline (not on one this thread was
                // descheduled after)
                Some(_) if expired => {
                    self.counters.tx_wqe_check_failures.fetch_add(1, Relaxed);
                    self.fail_to(pi);
                    return 1;
                }
                Some(d) => expired = now >= d,
            }
            std::hint::spin_loop();
        };
        let mut ran = 0;
        let mut pos = here;
        while pos < r.wqebbs {
            let at = (pos - from) as usize * WQEBB;
            let bbs = abi::wqebbs(self.wqe_buf[at + 7] & 0x3f);
            self.run_wqe(at, bbs, link);
            pos += bbs;
            ran += 1;
        }
        self.checked = Some((r.start, pi, check));
        ran
    }

    /// Whether WQEBB `here` of a range is one of its WQEs' first, walking `wqe_buf` (the
    /// range's WQEBBs from `from`, a WQE's first).
    fn is_wqe_start(&self, from: u32, here: u32) -> bool {
        let mut pos = from;
        while pos < here {
            pos += abi::wqebbs(self.wqe_buf[(pos - from) as usize * WQEBB + 7] & 0x3f);
        }
        pos == here
    }

    /// Sends the frame a WQE describes. Returns the payload length, or an mlx5 syndrome.
    fn execute(&mut self, w: &SendWqe, link: &mut dyn Link) -> Result<u32, u8> {
        if u32::from(w.opcode) == abi::RL_OPCODE_NOP {
            return Ok(0);
        }
        if w.qpn != self.attrs.qpn {
            return Err(syndrome::LOCAL_QP_OP_ERR);
        }
        // Where the payload is: inside the WQE copy, or in a registered region.
        let (src_inline, src_mem, len) = match w.data {
            WqeData::None => (None, None, 0usize),
            WqeData::Inline { offset, len } => (Some(offset), None, len),
            WqeData::Gather { addr, lkey, len } => {
                let mr = self.mrs.by_lkey(lkey).ok_or(syndrome::LOCAL_PROT_ERR)?;
                let off = mr.resolve(addr, u64::from(len)).ok_or(syndrome::LOCAL_PROT_ERR)?;
                if !Arc::ptr_eq(&mr.mem, &self.q.mem) {
                    return Err(syndrome::LOCAL_PROT_ERR);
                }
                (None, Some(off), len as usize)
            }
        };
        if len > self.opts.pmtu {
            // Multi-packet sends are not generated; answers fit one packet.
            return Err(syndrome::LOCAL_LENGTH_ERR);
        }
        let psn = self.send_psn;
        let ep = &self.attrs.endpoints;
        let peer = self.attrs.peer_qpn;
        let mut repr = match u32::from(w.opcode) {
            abi::RL_OPCODE_SEND => {
                // = RoceRepr::uc_send_only(ep, peer, psn, len); the PSN is set below.
                let mut r = self.send_only;
                r.set_payload_len(len);
                r
            }
            abi::RL_OPCODE_SEND_IMM => {
                let mut r = RoceRepr::uc_write_imm(ep, peer, psn, RethRepr { va: 0, rkey: 0, dma_len: 0 }, w.imm, len);
                r.bth.opcode = Opcode::UcSendOnlyImm;
                r.reth = None;
                r
            }
            abi::RL_OPCODE_RDMA_WRITE | abi::RL_OPCODE_RDMA_WRITE_IMM => {
                let (va, rkey) = w.raddr.ok_or(syndrome::LOCAL_QP_OP_ERR)?;
                let reth = RethRepr { va, rkey, dma_len: len as u32 };
                let mut r = RoceRepr::uc_write_imm(ep, peer, psn, reth, w.imm, len);
                if u32::from(w.opcode) == abi::RL_OPCODE_RDMA_WRITE {
                    r.bth.opcode = Opcode::UcWriteOnly;
                    r.immdt = None;
                }
                r
            }
            _ => return Err(syndrome::LOCAL_QP_OP_ERR),
        };
        repr.bth.psn = psn;
        let frame_len = {
            let payload: &[u8] = match (src_inline, src_mem) {
                (Some(off), _) => &self.wqe_buf[self.wqe_at + off..self.wqe_at + off + len],
                // SAFETY: the data path does not rewrite a TX slot before this WQE's
                // completion, which is written after this read.
                (None, Some(off)) => unsafe { self.q.mem.slice(off, len) },
                (None, None) => &[],
            };
            repr.emit(payload, &mut self.frame_buf).map_err(|_| syndrome::LOCAL_LENGTH_ERR)?
        };
        link.send(&self.frame_buf[..frame_len]).map_err(|_| syndrome::REMOTE_ACCESS_ERR)?;
        self.send_psn = (psn + 1) & PSN_MASK;
        add_single_writer(&self.counters.tx_packets, 1);
        add_single_writer(&self.counters.tx_bytes, len as u64);
        Ok(len as u32)
    }
}

impl Drop for SoftNic {
    fn drop(&mut self) {
        self.counters.release_single_writer();
    }
}

/// Payload bytes a frame says it carries: its IPv4 total length less the IPv4, UDP and BTH
/// headers, the extension headers its opcode names, its pad count and the ICRC. `None` when
/// those fields are missing or the IPv4 header length is invalid.
fn carried_payload(frame: &[u8]) -> Option<usize> {
    use rocelink_wire::{bth, ethernet, icrc, ipv4, udp};
    let ip = ipv4::Packet::new_unchecked(frame.get(ethernet::HEADER_LEN..)?);
    let ihl = usize::from(ip.header_len());
    if ihl < ipv4::HEADER_LEN || frame.len() < ethernet::HEADER_LEN + ihl + udp::HEADER_LEN + bth::HEADER_LEN {
        return None;
    }
    let b = bth::Packet::new_unchecked(&frame[ethernet::HEADER_LEN + ihl + udp::HEADER_LEN..]);
    let headers = ihl + udp::HEADER_LEN + bth::HEADER_LEN + b.opcode().ext_len();
    usize::from(ip.total_len()).checked_sub(headers + usize::from(b.pad_count()) + icrc::LEN)
}

/// Writes a CQE: bytes 0..63, then the owner byte with Release, so a poller that sees the
/// owner byte (Acquire) sees the whole entry.
fn publish_cqe(q: &QpMemory, at: usize, bytes: &[u8; CQE]) {
    q.mem.write(at, &bytes[..abi::CQE_OP_OWN]);
    q.mem.atomic_u8(at + abi::CQE_OP_OWN).store(bytes[abi::CQE_OP_OWN], Release);
}
