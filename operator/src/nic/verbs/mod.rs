//! The verbs NIC (cargo feature `verbs`, DESIGN.md "NIC backends"): a ConnectX, through
//! libibverbs (`rdma-sys`) and the mlx5 direct verbs (`mlx5dv`, bindgen at build time), in
//! place of the software NIC.
//!
//! What this version does, up to the hardware boundary: find and open the device by name,
//! check the port (active, Ethernet: RoCE) and the GID (RoCEv2 with IPv4 is usually index 3),
//! make a protection domain, two completion queues and an unreliable-connected queue pair,
//! move it to ready-to-send against the FPGA's queue pair (its QPN, its IPv4 as a GID, the
//! path MTU the port runs), register the host memory the FPGA writes into, and read the
//! queue pair's mlx5 rings (send and receive queue buffers, strides, doorbell record, UAR
//! register, completion queues) with `mlx5dv_init_obj`: what a data path that rings the
//! ConnectX's doorbell itself (the kernel's `rl_dev_verbs_ring_db_mmio`) needs. What it does
//! not do yet: hand those rings to the transceiver loop (the GPU needs them mapped, the UAR
//! through `cuMemHostRegister` with `CU_MEMHOSTREGISTER_IOMEMORY`); `rocelink run` says so
//! after bringing the device up. Every failure says what was asked and what the machine has;
//! without any RDMA device, [`Device::open`] says that.

mod device;
pub mod mlx5dv;
mod qp;

pub use device::{check_port, mtu_bytes, Device, VerbsError};
pub use qp::{gid_of_ipv4, MlxRings, Peer, QpConfig, VerbsQp};

/// Brings the device up for a run against the FPGA `peer` and describes what it made: the
/// part of a verbs run this version does (the module's doc).
pub fn bring_up(device: &str, port: u8, gid_index: u8, peer: Peer, buffer: &mut [u8]) -> Result<String, VerbsError> {
    let dev = Device::open(device, port, gid_index)?;
    let mut qp = VerbsQp::create(&dev, &QpConfig::default())?;
    qp.connect(&dev, &peer)?;
    let len = buffer.len();
    let (lkey, rkey) = qp.register(buffer, true)?;
    let rings = qp.rings()?;
    Ok(format!(
        "{} port {} (GID {}, MTU {} B): UC QP {:#x} ready to send to QP {:#x} at {}, {} B registered (lkey {lkey:#x}, rkey {rkey:#x}); {}",
        dev.name,
        dev.port,
        device::gid_text(&dev.gid),
        dev.mtu,
        qp.qpn(),
        peer.qpn,
        peer.ip,
        len,
        rings
    ))
}
