//! Starting the peer and the wire between it and the NIC: fpga-sim on threads of this
//! process (inproc or UDP wire), fpga-sim as a separate process (UDP), or a peer that is
//! already running (an HSB FPGA or a standalone fpga-sim, UDP).
//!
//! A QEC graph's replay goes to the software peer as it was loaded when the graph was
//! checked (in this process), or as the same files in `--qec-*` flags (a peer process, which
//! loads them itself before its ready line, so a file that changed since is still an error
//! at start). A peer already running has its own replay.
//!
//! Guarantees: a peer started here is stopped by [`RunningPeer::stop`] (threads joined; a
//! process sent SIGTERM, then killed if it lingers past 2 s); a peer process also exits on
//! its own if this process dies (its stdin is a pipe we hold, `--exit-on-stdin-close`), and
//! runs in its own process group, so a terminal's Ctrl-C reaches rocelink only.

use std::fmt;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocelink_fpga_sim::{QecReplay, QecReplayConfig};
use rocelink_link::{inproc, Link, SpinMode, UdpLink};
use rocelink_wire::hsb::ext::{DEFAULT_FPGA_QP, DEFAULT_HOST_QP};
use rocelink_wire::roce::{self, Endpoints};

use crate::nic::QpAttrs;
use crate::settings::{PeerMode, WireKind};

/// MAC addresses on the wire (the software NIC does not filter on them; a real FPGA learns
/// ours from the data-plane registers).
pub const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// A loopback address no other run of this machine is using now: 127.0.0.0/8 is all
/// loopback on Linux, so parallel runs (tests) get disjoint addresses and can all use the
/// standard ports.
pub fn fresh_loopback_pair() -> (Ipv4Addr, Ipv4Addr) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let a = 10 + (pid % 200) as u8;
    let b = ((pid / 200) % 250) as u8;
    let c = (n % 120) as u8 * 2 + 2;
    (Ipv4Addr::new(127, a, b, c), Ipv4Addr::new(127, a, b, c + 1))
}

/// A replay loaded at check time (so its errors come before anything runs), handed to the
/// peer in this process as is, or to a peer process as the same files.
#[derive(Clone)]
pub struct Replay {
    pub config: QecReplayConfig,
    pub loaded: Arc<QecReplay>,
}

impl fmt::Debug for Replay {
    // The shots themselves are not worth printing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replay").field("config", &self.config).field("shots", &self.loaded.shots()).finish()
    }
}

/// Why the peer or its wire did not start.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("cannot start {what}: {detail}")]
    Start { what: String, detail: String },
}

/// A peer we started and must stop.
pub enum RunningPeer {
    InProcess(rocelink_fpga_sim::FpgaSim),
    Process(Child),
    /// Not ours: nothing to stop.
    Remote,
}

impl RunningPeer {
    pub fn stop(self) {
        match self {
            RunningPeer::InProcess(s) => s.stop(),
            RunningPeer::Process(mut c) => {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
                let deadline = Instant::now() + Duration::from_secs(2);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = c.try_wait() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
            RunningPeer::Remote => {}
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            RunningPeer::InProcess(_) => "fpga-sim in this process",
            RunningPeer::Process(_) => "fpga-sim as a separate process",
            RunningPeer::Remote => "a peer already running",
        }
    }
}

/// The peer running and the NIC's end of the wire.
pub struct PeerAndWire {
    pub peer: RunningPeer,
    pub nic_link: Box<dyn Link>,
    pub ecb: SocketAddrV4,
    pub peer_roce: SocketAddrV4,
    pub peer_ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    pub host_port: u16,
    /// For reports: `inproc`, or `udp <host> <-> <peer>`.
    pub wire: String,
}

impl PeerAndWire {
    /// The software NIC's queue pair on this wire: our QP, addressed from our end of the wire
    /// to the peer's RoCE address, connected to the peer's QP.
    pub fn host_qp(&self) -> QpAttrs {
        QpAttrs {
            qpn: DEFAULT_HOST_QP,
            pkey: 0xffff,
            endpoints: Endpoints {
                src_mac: HOST_MAC,
                dst_mac: PEER_MAC,
                src_ip: self.host_ip.octets(),
                dst_ip: self.peer_ip.octets(),
                src_port: self.host_port,
                dst_port: self.peer_roce.port(),
            },
            peer_qpn: DEFAULT_FPGA_QP,
        }
    }
}

/// Binds the software NIC's `wire` (the UDP wire at `bind`, default a fresh loopback address)
/// and starts `peer` on it, replaying `qec` if given.
pub fn start(
    wire: WireKind,
    bind: Option<SocketAddrV4>,
    peer: &PeerMode,
    qec: Option<&Replay>,
    core: Option<usize>,
    spin: SpinMode,
) -> Result<PeerAndWire, PeerError> {
    let (def_host, def_peer) = fresh_loopback_pair();
    let sim = |ip: Ipv4Addr, link: Box<dyn Link>| {
        let config = rocelink_fpga_sim::SimConfig {
            ecb_bind: SocketAddrV4::new(ip, 0),
            mac: PEER_MAC,
            ip: ip.octets(),
            qp: DEFAULT_FPGA_QP,
            core,
            spin,
        };
        // The replay is immutable; the peer takes its own copy (a few hundred kilobytes).
        rocelink_fpga_sim::start_with_qec(config, qec.map(|r| (*r.loaded).clone()), link)
            .map_err(|e| PeerError::Start { what: "fpga-sim".into(), detail: e.to_string() })
    };
    match (wire, peer) {
        (WireKind::Inproc, PeerMode::InProcess { ip }) => {
            let peer_ip = ip.unwrap_or(def_peer);
            let (a, b) = inproc::pair(256);
            let s = sim(peer_ip, Box::new(b))?;
            Ok(PeerAndWire {
                ecb: s.ecb_addr(),
                peer: RunningPeer::InProcess(s),
                nic_link: Box::new(a),
                peer_roce: SocketAddrV4::new(peer_ip, roce::UDP_PORT),
                peer_ip,
                host_ip: def_host,
                host_port: roce::UDP_PORT,
                wire: "inproc".into(),
            })
        }
        (WireKind::Inproc, _) => Err(PeerError::Config(
            "the inproc wire needs the peer in this process; use the UDP wire with a separate peer".into(),
        )),
        (WireKind::Udp, p) => {
            let local = bind.unwrap_or(SocketAddrV4::new(def_host, roce::UDP_PORT));
            let udp = UdpLink::bind(local)
                .map_err(|e| PeerError::Start { what: "the UDP wire".into(), detail: format!("{local}: {e}") })?;
            let host = udp.local_addr();
            let (peer, ecb, peer_roce) = match p {
                PeerMode::InProcess { ip } => {
                    let peer_ip = ip.unwrap_or(def_peer);
                    let link = UdpLink::bind(SocketAddrV4::new(peer_ip, roce::UDP_PORT)).map_err(|e| {
                        PeerError::Start { what: "the peer's UDP wire".into(), detail: format!("{peer_ip}: {e}") }
                    })?;
                    let peer_roce = link.local_addr();
                    let s = sim(peer_ip, Box::new(link))?;
                    let ecb = s.ecb_addr();
                    (RunningPeer::InProcess(s), ecb, peer_roce)
                }
                PeerMode::Process { program, args, ip } => {
                    let peer_ip = ip.unwrap_or(def_peer);
                    let (program, args) = match program {
                        Some(p) => (p.clone(), args.clone()),
                        None => (
                            std::env::current_exe().map_err(|e| PeerError::Start {
                                what: "the fpga-sim process".into(),
                                detail: format!("cannot find this program: {e}"),
                            })?,
                            vec!["fpga-sim".to_string()],
                        ),
                    };
                    let mut args = args;
                    if let Some(r) = qec {
                        args.extend(qec_flags(r));
                    }
                    let (child, ecb, roce_addr) = spawn_process(
                        &program,
                        &args,
                        SocketAddrV4::new(peer_ip, 0),
                        SocketAddrV4::new(peer_ip, roce::UDP_PORT),
                        spin,
                        core,
                    )?;
                    (RunningPeer::Process(child), ecb, roce_addr)
                }
                PeerMode::Remote { ecb, roce } => (RunningPeer::Remote, *ecb, *roce),
            };
            Ok(PeerAndWire {
                peer,
                nic_link: Box::new(udp),
                ecb,
                peer_ip: *peer_roce.ip(),
                peer_roce,
                host_ip: *host.ip(),
                host_port: host.port(),
                wire: format!("udp {host} <-> {peer_roce}"),
            })
        }
    }
}

/// The `fpga-sim` flags of a replay (paths as the graph gives them: the process shares our
/// working directory).
pub fn qec_flags(r: &Replay) -> Vec<String> {
    let c = &r.config;
    let path = |p: &Path| p.display().to_string();
    let mut f =
        vec!["--qec-dets".into(), path(&c.dets), "--qec-dem".into(), path(&c.dem), "--qec-obs".into(), path(&c.obs)];
    if let Some(p) = &c.pred {
        f.extend(["--qec-pred".into(), path(p)]);
    }
    f.extend(["--qec-rounds-per-message".into(), c.rounds_per_message.to_string()]);
    if let Some(d) = &c.detectors_per_round {
        f.extend(["--qec-detectors-per-round".into(), d.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")]);
    }
    f.extend([
        "--qec-decoder-id".into(),
        c.decoder_id.to_string(),
        "--qec-syndrome-mapping-id".into(),
        c.syndrome_mapping_id.to_string(),
    ]);
    f
}

/// Starts `fpga-sim` as a process and waits for its ready line; returns its ECB and RoCE
/// addresses.
fn spawn_process(
    program: &Path,
    args: &[String],
    ecb: SocketAddrV4,
    roce: SocketAddrV4,
    spin: SpinMode,
    core: Option<usize>,
) -> Result<(Child, SocketAddrV4, SocketAddrV4), PeerError> {
    let fail = |detail: String| PeerError::Start { what: "the fpga-sim process".into(), detail };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg("--ecb")
        .arg(ecb.to_string())
        .arg("--roce")
        .arg(roce.to_string())
        .arg("--mac")
        .arg("02:00:00:00:00:02")
        .arg("--spin")
        .arg(spin.as_str())
        .arg("--log-level")
        .arg("warn")
        .arg("--exit-on-stdin-close")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(c) = core {
        cmd.arg("--core").arg(c.to_string());
    }
    if spin.pause() {
        cmd.arg("--spin-pause");
    }
    // Its own process group: Ctrl-C in a terminal interrupts rocelink, which still needs the
    // peer to stop the player and read the capture; rocelink stops the peer itself.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| fail(format!("{}: {e}", program.display())))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        return Err(fail("no stdout pipe".into()));
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        // Keep draining so the peer never blocks on a full pipe.
        for _ in lines {}
    });
    let line = match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            return Err(fail(format!("no ready line within 10 s (exit status {status:?})")));
        }
    };
    match rocelink_fpga_sim::cli::parse_ready_line(&line) {
        Some((e, r)) => Ok((child, e, r)),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(fail(format!("unexpected ready line `{line}`")))
        }
    }
}
