//! The unreliable-connected queue pair on the device, its state changes, its memory
//! registrations and its mlx5 rings.

use std::fmt;
use std::net::Ipv4Addr;
use std::os::raw::c_int;
use std::ptr::{null_mut, NonNull};

use rdma_sys::*;

use super::device::{Device, VerbsError};
use super::mlx5dv;

/// The FPGA's side of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its queue pair number (HSB FPGAs: set by the host over ECB; fpga-sim's default 2).
    pub qpn: u32,
    /// Its IPv4 address (its GID is ::ffff:ip).
    pub ip: Ipv4Addr,
    /// The first PSN it sends (our receive PSN) and the first we send (its receive PSN).
    pub psn: u32,
}

/// Queue sizes.
#[derive(Debug, Clone, Copy)]
pub struct QpConfig {
    pub send_wrs: u32,
    pub recv_wrs: u32,
    pub cq_entries: u32,
    /// Bytes a SEND may carry inline in its WQE (the kernel's RL_MAX_INLINE must not exceed
    /// what the device grants: the created QP reports it).
    pub max_inline: u32,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig { send_wrs: 128, recv_wrs: 256, cq_entries: 512, max_inline: 44 }
    }
}

/// ::ffff:a.b.c.d: a RoCEv2 peer's GID from its IPv4 address.
pub fn gid_of_ipv4(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// RESET -> INIT: the port, P_Key index 0, remote writes allowed (the FPGA's WRITE with
/// immediate lands in our memory).
pub(crate) fn init_attr(port: u8) -> (ibv_qp_attr, c_int) {
    // SAFETY: ibv_qp_attr is plain data; zero is every field's "unset".
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = (ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0 | ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0) as _;
    let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
        | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
        | ibv_qp_attr_mask::IBV_QP_PORT.0
        | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
    (a, mask as c_int)
}

/// INIT -> RTR: the path to the peer (a global route: its GID from its IPv4 address, our
/// GID index, hop limit 64), the path MTU, its QPN and the PSN it starts at. UC needs no
/// RDMA-read or retry settings.
pub(crate) fn rtr_attr(peer: &Peer, port: u8, gid_index: u8, mtu: ibv_mtu::Type) -> (ibv_qp_attr, c_int) {
    // SAFETY: as above.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qpn & 0xff_ffff;
    a.rq_psn = peer.psn & 0xff_ffff;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = port;
    a.ah_attr.grh.dgid.raw = gid_of_ipv4(peer.ip);
    a.ah_attr.grh.sgid_index = gid_index;
    a.ah_attr.grh.hop_limit = 64;
    let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
        | ibv_qp_attr_mask::IBV_QP_AV.0
        | ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
        | ibv_qp_attr_mask::IBV_QP_DEST_QPN.0
        | ibv_qp_attr_mask::IBV_QP_RQ_PSN.0;
    (a, mask as c_int)
}

/// RTR -> RTS: the PSN our sends start at.
pub(crate) fn rts_attr(psn: u32) -> (ibv_qp_attr, c_int) {
    // SAFETY: as above.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_RTS;
    a.sq_psn = psn & 0xff_ffff;
    let mask = ibv_qp_attr_mask::IBV_QP_STATE.0 | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0;
    (a, mask as c_int)
}

/// The queue pair's mlx5 rings as the device laid them out (`mlx5dv_init_obj`): what a data
/// path that writes WQEs and rings the doorbell itself needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlxRings {
    pub sq_buf: usize,
    pub sq_wqe_cnt: u32,
    pub sq_stride: u32,
    pub rq_buf: usize,
    pub rq_wqe_cnt: u32,
    pub rq_stride: u32,
    /// The doorbell record (dbrec[0] receive, dbrec[1] send: PROTOCOLS.md 4).
    pub dbrec: usize,
    /// The UAR's BlueFlame register the 8-byte doorbell goes to, and its size.
    pub bf_reg: usize,
    pub bf_size: u32,
    pub scq_buf: usize,
    pub scq_cqe_cnt: u32,
    pub scq_cqe_size: u32,
    pub rcq_buf: usize,
    pub rcq_cqe_cnt: u32,
    pub rcq_cqe_size: u32,
}

impl MlxRings {
    /// The rings must be what `kernels/abi.h` describes: 64-byte WQE basic blocks, 64-byte
    /// CQEs, power-of-two rings, a receive WQE of at least one 16-byte data segment.
    pub fn check(&self) -> Result<(), VerbsError> {
        let bad = |what: String| Err(VerbsError::Rings(what));
        if self.sq_stride != 64 {
            return bad(format!("send WQE basic blocks of {} bytes, not 64", self.sq_stride));
        }
        if self.scq_cqe_size != 64 || self.rcq_cqe_size != 64 {
            return bad(format!("CQEs of {} / {} bytes, not 64", self.scq_cqe_size, self.rcq_cqe_size));
        }
        for (what, n) in [
            ("send queue", self.sq_wqe_cnt),
            ("receive queue", self.rq_wqe_cnt),
            ("send CQ", self.scq_cqe_cnt),
            ("receive CQ", self.rcq_cqe_cnt),
        ] {
            if n == 0 || !n.is_power_of_two() {
                return bad(format!("a {what} of {n} entries (not a power of two)"));
            }
        }
        if self.rq_stride < 16 {
            return bad(format!("receive WQEs of {} bytes (one data segment is 16)", self.rq_stride));
        }
        if self.sq_buf == 0 || self.rq_buf == 0 || self.dbrec == 0 || self.scq_buf == 0 || self.rcq_buf == 0 {
            return bad("a ring without an address".into());
        }
        Ok(())
    }
}

impl fmt::Display for MlxRings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rings: SQ {} x {} B at {:#x}, RQ {} x {} B at {:#x}, doorbell record at {:#x}, UAR register {:#x} ({} B), send CQ {} x {} B, receive CQ {} x {} B",
            self.sq_wqe_cnt, self.sq_stride, self.sq_buf, self.rq_wqe_cnt, self.rq_stride, self.rq_buf, self.dbrec, self.bf_reg, self.bf_size, self.scq_cqe_cnt, self.scq_cqe_size, self.rcq_cqe_cnt, self.rcq_cqe_size
        )
    }
}

/// A UC queue pair with its protection domain, completion queues and memory registrations,
/// all released on drop. It borrows the [`Device`] (its context must outlive them) and the
/// buffers it registered (a registration must not outlive its memory).
pub struct VerbsQp<'d> {
    pd: NonNull<ibv_pd>,
    scq: NonNull<ibv_cq>,
    rcq: NonNull<ibv_cq>,
    qp: Option<NonNull<ibv_qp>>,
    mrs: Vec<NonNull<ibv_mr>>,
    /// Inline bytes the device granted.
    pub max_inline: u32,
    _borrows: std::marker::PhantomData<&'d Device>,
}

// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for VerbsQp<'_> {}

impl<'d> VerbsQp<'d> {
    /// Creates the PD, the two CQs and the UC queue pair (RESET), then moves it to INIT.
    pub fn create(dev: &'d Device, cfg: &QpConfig) -> Result<VerbsQp<'d>, VerbsError> {
        // SAFETY: an open context.
        let pd = NonNull::new(unsafe { ibv_alloc_pd(dev.ctx()) }).ok_or_else(|| VerbsError::null("ibv_alloc_pd"))?;
        let cq = |what| {
            // SAFETY: an open context; no completion channel (the data path polls).
            NonNull::new(unsafe { ibv_create_cq(dev.ctx(), cfg.cq_entries as c_int, null_mut(), null_mut(), 0) })
                .ok_or_else(|| VerbsError::null(what))
        };
        let mut made = VerbsQp {
            pd,
            scq: NonNull::dangling(),
            rcq: NonNull::dangling(),
            qp: None,
            mrs: Vec::new(),
            max_inline: 0,
            _borrows: std::marker::PhantomData,
        };
        // (dangling CQs are never destroyed: `qp` None and the CQs set before it is made)
        let scq = match cq("ibv_create_cq (send)") {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: the PD just allocated, unused.
                unsafe { ibv_dealloc_pd(pd.as_ptr()) };
                std::mem::forget(made);
                return Err(e);
            }
        };
        made.scq = scq;
        let rcq = match cq("ibv_create_cq (receive)") {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: made above, unused.
                unsafe {
                    ibv_destroy_cq(scq.as_ptr());
                    ibv_dealloc_pd(pd.as_ptr());
                }
                std::mem::forget(made);
                return Err(e);
            }
        };
        made.rcq = rcq;
        // SAFETY: plain data; the CQs and PD are live.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = scq.as_ptr();
        init.recv_cq = rcq.as_ptr();
        init.qp_type = ibv_qp_type::IBV_QPT_UC;
        init.sq_sig_all = 0;
        init.cap = ibv_qp_cap {
            max_send_wr: cfg.send_wrs,
            max_recv_wr: cfg.recv_wrs,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: cfg.max_inline,
        };
        // SAFETY: a live PD and a filled init attribute.
        let qp = unsafe { ibv_create_qp(pd.as_ptr(), &mut init) };
        made.qp = Some(NonNull::new(qp).ok_or_else(|| VerbsError::null("ibv_create_qp (UC)"))?);
        made.max_inline = init.cap.max_inline_data;
        let (mut a, mask) = init_attr(dev.port);
        made.modify("ibv_modify_qp (INIT)", &mut a, mask)?;
        Ok(made)
    }

    fn qp_ptr(&self) -> *mut ibv_qp {
        self.qp.expect("the queue pair is made in create").as_ptr()
    }

    /// Its queue pair number (what the FPGA is told over ECB).
    pub fn qpn(&self) -> u32 {
        // SAFETY: a live queue pair; qp_num is set at creation.
        unsafe { (*self.qp_ptr()).qp_num }
    }

    fn modify(&mut self, call: &'static str, a: &mut ibv_qp_attr, mask: c_int) -> Result<(), VerbsError> {
        // SAFETY: a live queue pair and attribute.
        let rc = unsafe { ibv_modify_qp(self.qp_ptr(), a, mask) };
        if rc != 0 {
            return Err(VerbsError::call(call, rc));
        }
        Ok(())
    }

    /// INIT -> RTR -> RTS against `peer`, at the port's MTU.
    pub fn connect(&mut self, dev: &Device, peer: &Peer) -> Result<(), VerbsError> {
        let (mut a, mask) = rtr_attr(peer, dev.port, dev.gid_index, dev.mtu_enum);
        self.modify("ibv_modify_qp (RTR)", &mut a, mask)?;
        let (mut a, mask) = rts_attr(peer.psn);
        self.modify("ibv_modify_qp (RTS)", &mut a, mask)
    }

    /// Registers `buf` (remote-writable when `remote_write`: the FPGA's target); (lkey, rkey).
    pub fn register(&mut self, buf: &'d mut [u8], remote_write: bool) -> Result<(u32, u32), VerbsError> {
        let mut access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if remote_write {
            access |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        // SAFETY: `buf` is valid for its length and stays borrowed while the queue pair
        // exists (it is deregistered on drop).
        let mr = unsafe { ibv_reg_mr(self.pd.as_ptr(), buf.as_mut_ptr().cast(), buf.len(), access as c_int) };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::null("ibv_reg_mr"))?;
        self.mrs.push(mr);
        // SAFETY: a live registration.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Ok((lkey, rkey))
    }

    /// The rings, from `mlx5dv_init_obj` (an mlx5 device only), checked against abi.h.
    pub fn rings(&self) -> Result<MlxRings, VerbsError> {
        let mut dq = mlx5dv::mlx5dv_qp::default();
        let mut dscq = mlx5dv::mlx5dv_cq::default();
        let mut drcq = mlx5dv::mlx5dv_cq::default();
        let mut obj = mlx5dv::mlx5dv_obj::default();
        obj.qp.in_ = self.qp_ptr();
        obj.qp.out = &mut dq;
        // SAFETY: a live mlx5 queue pair; `dq` receives the description.
        let rc = unsafe { mlx5dv::mlx5dv_init_obj(&mut obj, mlx5dv::mlx5dv_obj_type::MLX5DV_OBJ_QP as u64) };
        if rc != 0 {
            return Err(VerbsError::call("mlx5dv_init_obj (QP: is this an mlx5 device?)", rc));
        }
        for (cq, out) in [(self.scq, &mut dscq), (self.rcq, &mut drcq)] {
            let mut obj = mlx5dv::mlx5dv_obj::default();
            obj.cq.in_ = cq.as_ptr();
            obj.cq.out = out;
            // SAFETY: a live CQ of the same device.
            let rc = unsafe { mlx5dv::mlx5dv_init_obj(&mut obj, mlx5dv::mlx5dv_obj_type::MLX5DV_OBJ_CQ as u64) };
            if rc != 0 {
                return Err(VerbsError::call("mlx5dv_init_obj (CQ)", rc));
            }
        }
        let r = MlxRings {
            sq_buf: dq.sq.buf as usize,
            sq_wqe_cnt: dq.sq.wqe_cnt,
            sq_stride: dq.sq.stride,
            rq_buf: dq.rq.buf as usize,
            rq_wqe_cnt: dq.rq.wqe_cnt,
            rq_stride: dq.rq.stride,
            dbrec: dq.dbrec as usize,
            bf_reg: dq.bf.reg as usize,
            bf_size: dq.bf.size,
            scq_buf: dscq.buf as usize,
            scq_cqe_cnt: dscq.cqe_cnt,
            scq_cqe_size: dscq.cqe_size,
            rcq_buf: drcq.buf as usize,
            rcq_cqe_cnt: drcq.cqe_cnt,
            rcq_cqe_size: drcq.cqe_size,
        };
        r.check()?;
        Ok(r)
    }
}

impl Drop for VerbsQp<'_> {
    fn drop(&mut self) {
        // SAFETY: each object made by `create`/`register`, released once, dependents first.
        unsafe {
            for mr in self.mrs.drain(..) {
                ibv_dereg_mr(mr.as_ptr());
            }
            if let Some(qp) = self.qp.take() {
                ibv_destroy_qp(qp.as_ptr());
            }
            ibv_destroy_cq(self.scq.as_ptr());
            ibv_destroy_cq(self.rcq.as_ptr());
            ibv_dealloc_pd(self.pd.as_ptr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_gid_is_its_ipv4_mapped() {
        assert_eq!(gid_of_ipv4(Ipv4Addr::new(10, 0, 0, 2)), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
    }

    #[test]
    fn the_state_changes_set_what_uc_needs() {
        let (a, mask) = init_attr(1);
        assert_eq!((a.qp_state, a.port_num, a.pkey_index), (ibv_qp_state::IBV_QPS_INIT, 1, 0));
        assert_ne!(a.qp_access_flags & ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0, 0);
        assert_eq!(
            mask as u32,
            ibv_qp_attr_mask::IBV_QP_STATE.0
                | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
                | ibv_qp_attr_mask::IBV_QP_PORT.0
                | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0
        );

        let peer = Peer { qpn: 0x1_000_002, ip: Ipv4Addr::new(192, 168, 0, 2), psn: 0x1_234_567 };
        let (a, mask) = rtr_attr(&peer, 1, 3, ibv_mtu::IBV_MTU_4096);
        assert_eq!(a.qp_state, ibv_qp_state::IBV_QPS_RTR);
        assert_eq!(a.dest_qp_num, 0x2, "24-bit QPN");
        assert_eq!(a.rq_psn, 0x234_567, "24-bit PSN");
        assert_eq!(a.path_mtu, ibv_mtu::IBV_MTU_4096);
        assert_eq!(
            (a.ah_attr.is_global, a.ah_attr.port_num, a.ah_attr.grh.sgid_index, a.ah_attr.grh.hop_limit),
            (1, 1, 3, 64)
        );
        // SAFETY: plain bytes.
        assert_eq!(unsafe { a.ah_attr.grh.dgid.raw }, gid_of_ipv4(peer.ip));
        // UC: no RDMA-read, timeout or retry attributes in the masks
        assert_eq!(
            mask as u32
                & (ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
                    | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
                    | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0),
            0
        );
        assert_ne!(mask as u32 & ibv_qp_attr_mask::IBV_QP_AV.0, 0);

        let (a, mask) = rts_attr(0x1_000_005);
        assert_eq!((a.qp_state, a.sq_psn), (ibv_qp_state::IBV_QPS_RTS, 5));
        assert_eq!(mask as u32, ibv_qp_attr_mask::IBV_QP_STATE.0 | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0);
    }

    fn rings() -> MlxRings {
        MlxRings {
            sq_buf: 0x1000,
            sq_wqe_cnt: 128,
            sq_stride: 64,
            rq_buf: 0x3000,
            rq_wqe_cnt: 256,
            rq_stride: 16,
            dbrec: 0x5000,
            bf_reg: 0x7000_0800,
            bf_size: 256,
            scq_buf: 0x6000,
            scq_cqe_cnt: 512,
            scq_cqe_size: 64,
            rcq_buf: 0x8000,
            rcq_cqe_cnt: 512,
            rcq_cqe_size: 64,
        }
    }

    #[test]
    fn rings_must_be_the_layout_the_data_path_writes() {
        assert!(rings().check().is_ok());
        assert!(rings().to_string().contains("SQ 128 x 64 B"));
        let e = |r: MlxRings| r.check().unwrap_err().to_string();
        assert!(e(MlxRings { sq_stride: 128, ..rings() }).contains("not 64"));
        assert!(e(MlxRings { rcq_cqe_size: 128, ..rings() }).contains("CQEs of 64 / 128"));
        assert!(e(MlxRings { rq_wqe_cnt: 100, ..rings() }).contains("receive queue of 100"));
        assert!(e(MlxRings { dbrec: 0, ..rings() }).contains("without an address"));
    }
}
