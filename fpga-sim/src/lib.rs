//! `fpga-sim`: a software FPGA peer speaking the Holoscan Sensor Bridge protocols
//! (PROTOCOLS.md 2 and 3).
//!
//! A host configures it exactly as it would configure an HSB FPGA: over ECB (UDP, port 8192
//! by default) it writes the data-plane registers (host QP, rkey, buffer address, page
//! stride, host MAC/IP/port), the frame template into player RAM, the player's interval and
//! window count; it arms the capture and sets the player's run bit. The peer then sends
//! RDMA WRITE with immediate frames over its [`Link`], checks each UC SEND answer against the
//! request it answers, records one [`CaptureRecord`](rocelink_wire::hsb::CaptureRecord) per
//! answer with the echoed and arrival timestamps, and sets the capture's done bit. The host
//! reads the capture back over ECB.
//!
//! QEC syndrome replay ([`qec`]): started with [`start_with_qec`] (or the
//! `--qec-*` flags of the binary), the peer loads a stim detection-event file once and each
//! player window becomes one shot, sent round by round as `enqueue_syndromes` messages; the
//! corrections that come back are checked against the true observables and a reference
//! prediction, and counted in the `hsb::ext::QEC_*` registers.
//!
//! Threads: one ECB server thread ([`ecb_server`]) and one data-plane thread
//! ([`dataplane`]). They share only atomics ([`regs::PeerShared`], [`capture`], [`stats`]).
//!
//! ```no_run
//! use rocelink_fpga_sim::{start, SimConfig};
//! let (peer_end, _nic_end) = rocelink_link::inproc::pair(256);
//! let sim = start(SimConfig::default(), Box::new(peer_end)).expect("sim");
//! println!("ECB on {}", sim.ecb_addr());
//! sim.stop();
//! ```

pub mod capture;
pub mod cli;
pub mod dataplane;
pub mod ecb_server;
pub mod player;
pub mod qec;
pub mod regs;
pub mod stats;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use rocelink_link::{Link, SpinMode};

use crate::dataplane::DataPlane;
use crate::ecb_server::EcbServer;
pub use crate::qec::{QecError, QecReplay, QecReplayConfig};
use crate::regs::{PeerIdentity, PeerShared, Registers};
pub use crate::stats::{QecStatsSnapshot, StatsSnapshot};

/// The peer's QP by default (PROTOCOLS.md 2.3: "to the FPGA's QP (2 by default)").
pub const DEFAULT_QP: u32 = rocelink_wire::hsb::ext::DEFAULT_FPGA_QP;
/// Where the ECB server listens by default.
pub const DEFAULT_ECB: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), rocelink_wire::ecb::PORT);

/// How to run the peer.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// ECB server address (port 0 picks a free port; [`FpgaSim::ecb_addr`] tells which).
    pub ecb_bind: SocketAddrV4,
    /// The peer's MAC: source MAC of the frames it sends.
    pub mac: [u8; 6],
    /// The peer's IPv4 address: source IP of the frames it sends (the ICRC covers it, so
    /// over UDP it must be the address the link is bound to).
    pub ip: [u8; 4],
    /// The peer's QP, where answers go (power-on value of `hsb::ext::PLAYER_FPGA_QP`).
    pub qp: u32,
    /// Core to pin the data-plane thread to.
    pub core: Option<usize>,
    /// How the data-plane thread busy-polls during a run.
    pub spin: SpinMode,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            ecb_bind: DEFAULT_ECB,
            // Locally administered, unicast.
            mac: [0x02, 0x00, 0x00, 0x00, 0x00, 0x02],
            ip: [127, 0, 0, 2],
            qp: DEFAULT_QP,
            core: None,
            spin: SpinMode::Shared,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot bind the ECB server to {addr}: {source}")]
    EcbBind { addr: SocketAddrV4, source: std::io::Error },
    #[error("cannot set up the ECB socket: {0}")]
    EcbSocket(std::io::Error),
    #[error("cannot start the {what} thread: {source}")]
    Spawn { what: &'static str, source: std::io::Error },
}

/// A running peer. Dropping it stops it (as [`FpgaSim::stop`] does).
pub struct FpgaSim {
    ecb_addr: SocketAddrV4,
    link: String,
    shared: Arc<PeerShared>,
    threads: Vec<JoinHandle<()>>,
}

/// Starts the peer: binds the ECB server and starts its thread and the data-plane thread,
/// which owns `link`.
pub fn start(config: SimConfig, link: Box<dyn Link>) -> Result<FpgaSim, SimError> {
    start_with_qec(config, None, link)
}

/// [`start`], with shots to replay in QEC mode (QEC_ENABLE set at power-on). The replay is
/// an argument rather than a [`SimConfig`] field so that code building a `SimConfig` with
/// every field named keeps compiling.
pub fn start_with_qec(config: SimConfig, qec: Option<QecReplay>, link: Box<dyn Link>) -> Result<FpgaSim, SimError> {
    let socket =
        UdpSocket::bind(config.ecb_bind).map_err(|source| SimError::EcbBind { addr: config.ecb_bind, source })?;
    let ecb_addr = match socket.local_addr().map_err(SimError::EcbSocket)? {
        std::net::SocketAddr::V4(a) => a,
        std::net::SocketAddr::V6(_) => config.ecb_bind,
    };
    let shared = Arc::new(PeerShared::default());
    let identity = PeerIdentity { mac: config.mac, ip: config.ip, qp: config.qp & 0x00FF_FFFF };
    let (tx, rx) = mpsc::channel();
    let link_name = link.describe();

    let mut sim = FpgaSim { ecb_addr, link: link_name, shared: Arc::clone(&shared), threads: Vec::new() };
    let dp = DataPlane {
        link,
        shared: Arc::clone(&shared),
        commands: rx,
        spin: config.spin,
        core: config.core,
        qp: identity.qp,
    };
    // On an error below, dropping `sim` stops what already started.
    sim.threads.push(dp.spawn().map_err(|source| SimError::Spawn { what: "data-plane", source })?);
    let regs = Registers::with_qec(identity, Arc::clone(&shared), qec.map(Arc::new));
    let server = EcbServer::new(regs, Some(tx));
    let ecb = ecb_server::spawn(socket, server, shared).map_err(|source| SimError::Spawn { what: "ECB", source })?;
    sim.threads.push(ecb);
    tracing::info!(ecb = %ecb_addr, link = %sim.link, "fpga-sim started");
    Ok(sim)
}

impl FpgaSim {
    /// Where the ECB server listens.
    pub fn ecb_addr(&self) -> SocketAddrV4 {
        self.ecb_addr
    }

    /// The data-plane link, as it describes itself.
    pub fn link_description(&self) -> &str {
        &self.link
    }

    /// The data-plane counters now.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// The QEC replay counters now (what the `hsb::ext::QEC_*` registers read).
    pub fn qec_stats(&self) -> QecStatsSnapshot {
        self.shared.stats.qec.snapshot()
    }

    /// Stops both threads and waits for them (each exits within about 20 ms).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!("an fpga-sim thread panicked");
            }
        }
    }
}

impl Drop for FpgaSim {
    fn drop(&mut self) {
        self.shutdown();
    }
}
