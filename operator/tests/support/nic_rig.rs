//! The software-NIC test rig of the operator's NIC tests: one UC queue pair's memory, its
//! regions as the runner registers them (and a region in other memory), the [`SoftNic`] over
//! them, the peer's addressing, the in-process wire, and the frames, WQEs and doorbells the
//! tests write. Each test keeps its own state (PSNs, slots, expectations) on top of it.
//! Included with `#[path]` by the NIC test binaries.
#![allow(dead_code)]

use std::sync::atomic::Ordering::Release;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocelink_link::{inproc, InprocLink, Link, MAX_FRAME};
use rocelink_operator::abi::{self, CQE};
use rocelink_operator::mem::SharedMem;
use rocelink_operator::nic::{Access, MemoryRegion, MrTable, NicCounters, NicOptions, QpAttrs, QpRegions, SoftNic};
use rocelink_operator::rings::{QpMemory, QpSizes};
use rocelink_operator::verbs::HostVerbs;
use rocelink_wire::bth::Opcode;
use rocelink_wire::reth::RethRepr;
use rocelink_wire::roce::{self, Endpoints, RoceRepr};

/// Our queue pair and the peer's.
pub const QPN: u32 = rocelink_wire::hsb::ext::DEFAULT_HOST_QP;
pub const PEER_QPN: u32 = rocelink_wire::hsb::ext::DEFAULT_FPGA_QP;
pub const HOST_MAC: [u8; 6] = rocelink_operator::peer::HOST_MAC;
pub const PEER_MAC: [u8; 6] = rocelink_operator::peer::PEER_MAC;
pub const HOST_IP: [u8; 4] = [192, 168, 0, 101];
pub const PEER_IP: [u8; 4] = [192, 168, 0, 2];
/// The UDP source port of the peer's frames (the port is entropy; the NIC accepts any).
pub const PEER_SRC_PORT: u16 = 12288;
/// Bytes of the region in other memory.
pub const FOREIGN_LEN: usize = 8192;

/// One NIC over one queue pair's memory.
pub struct NicRig {
    pub nic: SoftNic,
    pub q: QpMemory,
    pub counters: Arc<NicCounters>,
    /// RX slots: REMOTE_WRITE | LOCAL_WRITE.
    pub rx: MemoryRegion,
    /// TX slots: LOCAL_READ.
    pub tx: MemoryRegion,
    /// REMOTE_WRITE | LOCAL_WRITE, but in memory other than the queue pair's.
    pub foreign: MemoryRegion,
    /// The NIC's addressing: host -> peer.
    pub host: Endpoints,
    /// The peer's addressing: peer -> host, for the frames the tests hand the NIC.
    pub peer: Endpoints,
}

impl NicRig {
    /// A NIC with options `opts` over a queue pair of `sizes`, its receive queue empty.
    pub fn new(sizes: QpSizes, opts: NicOptions) -> NicRig {
        let q = QpMemory::new(sizes, SharedMem::new).expect("valid sizes");
        let QpRegions { mut table, rx, tx } = MrTable::for_queue_pair(&q);
        let foreign = table.register(
            Arc::new(SharedMem::new(FOREIGN_LEN)),
            0,
            FOREIGN_LEN,
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        );
        let host = Endpoints {
            src_mac: HOST_MAC,
            dst_mac: PEER_MAC,
            src_ip: HOST_IP,
            dst_ip: PEER_IP,
            src_port: roce::UDP_PORT,
            dst_port: roce::UDP_PORT,
        };
        let peer = Endpoints { src_port: PEER_SRC_PORT, dst_port: roce::UDP_PORT, ..host.reversed() };
        let counters = Arc::new(NicCounters::default());
        let attrs = QpAttrs { qpn: QPN, pkey: 0xffff, endpoints: host, peer_qpn: PEER_QPN };
        let nic = SoftNic::new(attrs, opts, table, q.clone(), counters.clone());
        NicRig { nic, q, counters, rx, tx, foreign, host, peer }
    }

    /// The data path's host verbs on this queue pair (sends gather with the TX region's key).
    pub fn host_verbs(&self) -> HostVerbs {
        HostVerbs::new(self.q.clone(), QPN, self.tx.lkey)
    }

    /// Virtual address of byte 0 of RX slot `slot`.
    pub fn slot_va(&self, slot: u32) -> u64 {
        self.rx.addr + u64::from(slot) * u64::from(self.q.layout.sizes.rx_slot_stride)
    }

    /// A WRITE_IMM from the peer with PSN `psn` into `va` (the RX region's rkey), carrying
    /// `len` payload bytes.
    pub fn write_imm_repr(&self, psn: u32, va: u64, dma_len: u32, imm: u32, len: usize) -> RoceRepr {
        RoceRepr::uc_write_imm(&self.peer, QPN, psn, RethRepr { va, rkey: self.rx.rkey, dma_len }, imm, len)
    }

    /// The frame of the peer's WRITE_IMM of `payload` into RX slot `slot`, with the HSB
    /// immediate (PSN and slot).
    pub fn write_imm_to_slot(&self, psn: u32, slot: u32, payload: &[u8]) -> Vec<u8> {
        let imm = rocelink_wire::immdt::hsb_imm(psn, slot);
        emit(&self.write_imm_repr(psn, self.slot_va(slot), payload.len() as u32, imm, payload.len()), payload)
    }

    /// Offset in the shared memory of send WQEBB `index`.
    pub fn sq_wqe(&self, index: u32) -> usize {
        self.q.layout.sq + (index & (self.q.layout.sizes.sq_entries - 1)) as usize * abi::WQEBB
    }

    /// Send CQE number `n` as raw bytes (valid: owner parity of the first pass, not INVALID).
    pub fn send_cqe(&self, n: u32) -> [u8; CQE] {
        let mut c = [0u8; CQE];
        self.q.mem.read(self.q.layout.scq + n as usize * CQE, &mut c);
        assert!(abi::cqe_valid(c[abi::CQE_OP_OWN], n, self.q.layout.sizes.sq_entries), "send CQE {n} not written");
        c
    }

    /// Stores an unchecked CPU-proxy doorbell at `pi` (as after a fence: every WQE below is
    /// whole).
    pub fn ring_unchecked(&self, pi: u32) {
        self.q.mem.atomic_u64(self.q.layout.proxy_doorbell).store(abi::ProxyDoorbell::unchecked(pi), Release);
    }

    /// Stores a checked CPU-proxy doorbell (abi.h `rl_proxy_doorbell`, as the GPU data path
    /// does: no fence in front) whose range is `range` (whole WQEBBs), just below `pi`; every
    /// WQE of it that gathers gathers `gathered`.
    pub fn ring_checked(&self, pi: u32, range: &[u8], gathered: &[u8]) {
        let check =
            abi::range_check(range, 0, |_, first| Some(abi::gather_check(gathered, first))).expect("well-formed WQEs");
        self.q
            .mem
            .atomic_u64(self.q.layout.proxy_doorbell)
            .store(abi::ProxyDoorbell::checked(pi, (range.len() / abi::WQEBB) as u32, check), Release);
    }
}

/// `repr` with `payload`, as a frame.
pub fn emit(repr: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(payload, &mut buf).expect("a consistent Repr emits");
    buf.truncate(n);
    buf
}

/// The in-process wire between the NIC and the peer.
pub struct Wire {
    pub nic_end: InprocLink,
    pub peer_end: InprocLink,
    buf: Vec<u8>,
}

impl Wire {
    /// A wire whose rings hold `depth` frames each way.
    pub fn new(depth: usize) -> Wire {
        let (nic_end, peer_end) = inproc::pair(depth);
        Wire { nic_end, peer_end, buf: vec![0; MAX_FRAME] }
    }

    /// Runs `nic`'s send side until `want` frames came out at the peer's end or `wait` passed
    /// (at least one look either way), returning them.
    pub fn frames_out(&mut self, nic: &mut SoftNic, want: usize, wait: Duration) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        let t0 = Instant::now();
        loop {
            nic.poll_send(&mut self.nic_end);
            while frames.len() < want {
                match self.peer_end.try_recv(&mut self.buf).expect("the wire") {
                    Some(n) => frames.push(self.buf[..n].to_vec()),
                    None => break,
                }
            }
            if frames.len() >= want || t0.elapsed() > wait {
                return frames;
            }
        }
    }

    /// The frames the peer's end holds now.
    pub fn sent(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(n) = self.peer_end.try_recv(&mut self.buf).expect("the wire") {
            out.push(self.buf[..n].to_vec());
        }
        out
    }

    /// The payloads of the frames the peer's end holds now, each a UC SEND ONLY.
    pub fn sent_payloads(&mut self) -> Vec<Vec<u8>> {
        self.sent().iter().map(|f| send_payload(f).to_vec()).collect()
    }
}

/// The payload of `frame`, which must be a valid UC SEND ONLY.
pub fn send_payload(frame: &[u8]) -> &[u8] {
    let f = roce::parse_frame(frame).unwrap_or_else(|e| panic!("not a valid RoCEv2 frame: {e:?}"));
    assert_eq!(f.repr.bth.opcode, Opcode::UcSendOnly, "a SEND ONLY");
    f.payload
}
