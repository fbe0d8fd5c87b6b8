//! One whole echo run, the way a user runs it: a peer (fpga-sim in this process, fpga-sim as
//! another process, or a real FPGA), the software NIC on a wire, the CPU transceiver loop, and
//! the HSB host client that configures the peer over ECB, runs its player and reads back its
//! capture.
//!
//! Start order: memory and NIC, peer, backend; the host client then configures and runs the
//! peer. Stop order is the reverse; every thread is joined.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocelink_link::{inproc, Link, SpinMode, UdpLink};
use rocelink_wire::roce::{self, Endpoints};
use rocelink_wire::rpc::{self, RequestRepr};

use crate::backend::{spawn_backend, BackendKind, CpuBackendConfig};
use crate::env::Environment;
use crate::hsb::{DataPlaneConfig, EcbClient, HsbHost, PeerStats, PlayerConfig};
use crate::latency::{analyze, Analysis, Counts, Summary};
use crate::mem::SharedMem;
use crate::nic::{Access, MrTable, NicCounters, NicEngine, NicEngineConfig, NicOptions, NicStats, QpAttrs, SoftNic};
use crate::rings::{QpMemory, QpSizes};
use crate::stage::StageSpec;

/// Which wire carries the RoCEv2 frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireKind {
    Inproc,
    Udp,
}

impl WireKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WireKind::Inproc => "inproc",
            WireKind::Udp => "udp",
        }
    }
}

/// Where the peer runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerMode {
    /// fpga-sim on threads of this process.
    InProcess,
    /// fpga-sim as a separate process (`program` followed by `args`, then the peer's flags).
    Process { program: PathBuf, args: Vec<String> },
    /// A peer already running at these addresses (a real FPGA, or a standalone fpga-sim).
    Remote { ecb: SocketAddrV4, roce: SocketAddrV4 },
}

/// Cores to pin the spinning threads to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cores {
    pub nic: Option<usize>,
    pub backend: Option<usize>,
    pub peer: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct EchoConfig {
    pub wire: WireKind,
    /// Messages to send.
    pub count: u32,
    /// Bytes per message written into the slot: the 24-byte RPC header and the args.
    pub size: usize,
    /// Messages per second (open loop, up to 64 in flight); `None`: closed loop.
    pub rate: Option<f64>,
    /// Messages at the start left out of the latency distribution.
    pub warmup: u32,
    pub peer: PeerMode,
    /// Our address on the UDP wire (default: a fresh loopback address per run).
    pub host_ip: Option<Ipv4Addr>,
    /// The peer's address (default: a fresh loopback address per run).
    pub peer_ip: Option<Ipv4Addr>,
    pub cores: Cores,
    /// Spin policy (default: `dedicated` when every spinner has a core).
    pub spin: Option<SpinMode>,
    /// Give up waiting for the peer's capture after this long (default: from the count).
    pub timeout: Option<Duration>,
    /// Print progress on stderr a few times a second.
    pub progress: bool,
    /// RX slots (DP_MAX_BUFF + 1).
    pub slots: u32,
    /// Where the transceiver loop runs.
    pub backend: BackendKind,
    /// The device stages between receive and send.
    pub chain: Vec<StageSpec>,
}

impl Default for EchoConfig {
    fn default() -> Self {
        EchoConfig {
            wire: WireKind::Inproc,
            count: 10_000,
            size: 64,
            rate: None,
            warmup: 0,
            peer: PeerMode::InProcess,
            host_ip: None,
            peer_ip: None,
            cores: Cores::default(),
            spin: None,
            timeout: None,
            progress: false,
            slots: 64,
            backend: BackendKind::Auto,
            chain: vec![StageSpec::Echo],
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EchoReport {
    #[serde(flatten)]
    pub counts: Counts,
    pub rtt_ns: Summary,
    pub nic_drops: std::collections::BTreeMap<String, u64>,
    pub nic: NicStats,
    pub peer: Option<PeerStats>,
    /// Messages the transceiver loop answered / refused.
    pub backend_processed: u64,
    pub backend_dropped: u32,
    /// Where the round trip went (only when the peer stamps with this host's clock).
    pub breakdown_ns: Option<crate::latency::Breakdown>,
    /// Extension registers the peer lacked (a real FPGA).
    pub peer_missing_extensions: Vec<&'static str>,
    pub mode: String,
    pub rate: Option<f64>,
    pub warmup: u32,
    pub env: Environment,
    #[serde(skip)]
    pub analysis: Option<Analysis>,
}

#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("cannot start {what}: {detail}")]
    Start { what: &'static str, detail: String },
    #[error("peer control (ECB): {0}")]
    Ecb(#[from] crate::hsb::EcbError),
    #[error("{0}")]
    Peer(String),
}

/// The host's QP number (any 24-bit value; HSB hosts get theirs from ibv_create_qp).
const HOST_QPN: u32 = 0x000_0101;
const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// UDP source port of the peer's frames (HSB hosts write 12288 into DP_PACKET_UDP_PORT).
const PEER_SRC_PORT: u16 = 12288;

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

/// A peer we started and must stop.
enum RunningPeer {
    InProcess(rocelink_fpga_sim::FpgaSim),
    Process(Child),
    Remote,
}

impl RunningPeer {
    fn stop(self) {
        match self {
            RunningPeer::InProcess(s) => s.stop(),
            RunningPeer::Process(mut c) => {
                // SIGTERM, then wait; kill if it lingers.
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
}

/// Starts `fpga-sim` as a process and waits for its ready line.
fn spawn_peer_process(program: &PathBuf, args: &[String], ecb: SocketAddrV4, roce: SocketAddrV4, spin: SpinMode, core: Option<usize>) -> Result<(Child, SocketAddrV4, SocketAddrV4), EchoError> {
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
    let mut child = cmd.spawn().map_err(|e| EchoError::Start { what: "the fpga-sim process", detail: format!("{}: {e}", program.display()) })?;
    let stdout = child.stdout.take().expect("piped stdout");
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
            return Err(EchoError::Start { what: "the fpga-sim process", detail: format!("no ready line within 10 s (exit status {status:?})") });
        }
    };
    // "fpga-sim: ECB on <addr>, RoCE on <addr>"
    let parse = |key: &str| -> Option<SocketAddrV4> {
        let rest = line.split(key).nth(1)?;
        rest.split([',', ' ']).find(|s| !s.is_empty())?.parse().ok()
    };
    match (parse("ECB on "), parse("RoCE on ")) {
        (Some(e), Some(r)) => Ok((child, e, r)),
        _ => {
            let _ = child.kill();
            Err(EchoError::Start { what: "the fpga-sim process", detail: format!("unexpected ready line `{line}`") })
        }
    }
}

/// Builds the request the player sends: an RPC header (function `echo`) and `size - 24`
/// argument bytes (a fixed pattern; the player scrambles it per request).
pub fn echo_template(size: usize) -> Vec<u8> {
    let mut t = vec![0u8; size];
    let args = size - rpc::HEADER_LEN;
    RequestRepr { function_id: rpc::function_id::ECHO, arg_len: args as u32, request_id: 0, ptp_timestamp: 0 }
        .emit(&mut t[..rpc::HEADER_LEN])
        .expect("header fits");
    for (i, b) in t[rpc::HEADER_LEN..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    t
}

/// Runs the echo loop end to end and returns what it measured.
pub fn run_echo(cfg: &EchoConfig) -> Result<EchoReport, EchoError> {
    if cfg.size < rpc::HEADER_LEN || cfg.size > roce::PMTU {
        return Err(EchoError::Config(format!("--size {} must be {}..={} (an RPC header, then args, in one packet)", cfg.size, rpc::HEADER_LEN, roce::PMTU)));
    }
    if cfg.count == 0 {
        return Err(EchoError::Config("--count must be at least 1".into()));
    }
    if cfg.wire == WireKind::Inproc && cfg.peer != PeerMode::InProcess {
        return Err(EchoError::Config("the inproc wire needs the peer in this process; use --wire udp with a separate peer".into()));
    }
    if let Some(r) = cfg.rate {
        if !(r > 0.0 && r.is_finite()) {
            return Err(EchoError::Config(format!("--rate {r} must be a positive number of messages per second")));
        }
    }
    let spinners = if matches!(cfg.peer, PeerMode::Remote { .. }) { 2 } else { 3 };
    let spin = cfg.spin.unwrap_or_else(|| SpinMode::for_spinners(spinners));

    // Memory: one slot per page, stride rounded up to 128 (DP_PAGE_INC units).
    let stride = (cfg.size.div_ceil(128) * 128) as u32;
    let sizes = QpSizes { rx_slots: cfg.slots, rx_slot_stride: stride, tx_slot_stride: stride.max(64), ..QpSizes::default() };
    let q = QpMemory::new(sizes, SharedMem::new).map_err(EchoError::Config)?;
    let mut mrs = MrTable::default();
    let rx_mr = mrs.register(q.mem.clone(), q.layout.rx_buffer, q.layout.rx_buffer_len(), Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    let tx_mr = mrs.register(q.mem.clone(), q.layout.tx_buffer, q.layout.tx_buffer_len(), Access::LOCAL_READ);

    // Addresses and links.
    let (def_host, def_peer) = fresh_loopback_pair();
    let host_ip = cfg.host_ip.unwrap_or(def_host);
    let mut peer_ip = cfg.peer_ip.unwrap_or(def_peer);
    let (nic_link, peer): (Box<dyn Link>, RunningPeer);
    let (ecb_addr, peer_roce): (SocketAddrV4, SocketAddrV4);
    let host_port;
    match (&cfg.wire, &cfg.peer) {
        (WireKind::Inproc, _) => {
            let (a, b) = inproc::pair(256);
            let sim = rocelink_fpga_sim::start(
                rocelink_fpga_sim::SimConfig {
                    ecb_bind: SocketAddrV4::new(peer_ip, 0),
                    mac: PEER_MAC,
                    ip: peer_ip.octets(),
                    qp: rocelink_fpga_sim::DEFAULT_QP,
                    core: cfg.cores.peer,
                    spin,
                },
                Box::new(b),
            )
            .map_err(|e| EchoError::Start { what: "fpga-sim", detail: e.to_string() })?;
            ecb_addr = sim.ecb_addr();
            peer_roce = SocketAddrV4::new(peer_ip, roce::UDP_PORT);
            host_port = roce::UDP_PORT;
            nic_link = Box::new(a);
            peer = RunningPeer::InProcess(sim);
        }
        (WireKind::Udp, mode) => {
            let udp = UdpLink::bind(SocketAddrV4::new(host_ip, roce::UDP_PORT)).map_err(|e| EchoError::Start { what: "the UDP wire", detail: format!("{host_ip}: {e}") })?;
            host_port = udp.local_addr().port();
            nic_link = Box::new(udp);
            match mode {
                PeerMode::InProcess => {
                    let link = UdpLink::bind(SocketAddrV4::new(peer_ip, roce::UDP_PORT)).map_err(|e| EchoError::Start { what: "the peer's UDP wire", detail: format!("{peer_ip}: {e}") })?;
                    peer_roce = link.local_addr();
                    let sim = rocelink_fpga_sim::start(
                        rocelink_fpga_sim::SimConfig {
                            ecb_bind: SocketAddrV4::new(peer_ip, 0),
                            mac: PEER_MAC,
                            ip: peer_ip.octets(),
                            qp: rocelink_fpga_sim::DEFAULT_QP,
                            core: cfg.cores.peer,
                            spin,
                        },
                        Box::new(link),
                    )
                    .map_err(|e| EchoError::Start { what: "fpga-sim", detail: e.to_string() })?;
                    ecb_addr = sim.ecb_addr();
                    peer = RunningPeer::InProcess(sim);
                }
                PeerMode::Process { program, args } => {
                    let (child, e, r) = spawn_peer_process(program, args, SocketAddrV4::new(peer_ip, 0), SocketAddrV4::new(peer_ip, roce::UDP_PORT), spin, cfg.cores.peer)?;
                    ecb_addr = e;
                    peer_roce = r;
                    peer = RunningPeer::Process(child);
                }
                PeerMode::Remote { ecb, roce } => {
                    ecb_addr = *ecb;
                    peer_roce = *roce;
                    peer_ip = *roce.ip();
                    peer = RunningPeer::Remote;
                }
            }
        }
    }

    // The NIC, connected to the peer's QP.
    let counters = Arc::new(NicCounters::default());
    let attrs = QpAttrs {
        qpn: HOST_QPN,
        pkey: 0xffff,
        endpoints: Endpoints {
            src_mac: HOST_MAC,
            dst_mac: PEER_MAC,
            src_ip: host_ip.octets(),
            dst_ip: peer_ip.octets(),
            src_port: host_port,
            dst_port: peer_roce.port(),
        },
        peer_qpn: rocelink_fpga_sim::DEFAULT_QP,
    };
    let nic = SoftNic::new(attrs, NicOptions::default(), mrs, q.clone(), counters.clone());
    let engine = NicEngine::spawn(nic, nic_link, NicEngineConfig { core: cfg.cores.nic, spin })
        .map_err(|e| EchoError::Start { what: "the NIC engine", detail: e.to_string() })?;
    let backend = spawn_backend(cfg.backend, q.clone(), &cfg.chain, CpuBackendConfig { qpn: HOST_QPN, tx_lkey: tx_mr.lkey, core: cfg.cores.backend, spin })
        .map_err(|e| EchoError::Start { what: "the backend", detail: e.to_string() })?;
    let backend_name = backend.name();

    let result = drive_peer(cfg, ecb_addr, &rx_mr, host_ip, host_port, stride, &*backend);

    // Stop in reverse order.
    let backend_processed = backend.processed();
    let backend_dropped = backend.dropped();
    let stop = backend.stop(Duration::from_secs(2));
    let nic_stats = counters.snapshot();
    engine.stop();
    peer.stop();
    stop.map_err(EchoError::Peer)?;
    let (analysis, peer_stats, missing, records) = result?;
    let same_clock = !matches!(cfg.peer, PeerMode::Remote { .. });
    let breakdown = same_clock.then(|| crate::latency::breakdown(&records, &read_timestamps(&q, backend_processed), 1, u64::from(cfg.warmup)));

    let wire = match cfg.wire {
        WireKind::Inproc => "inproc".to_string(),
        WireKind::Udp => format!("udp {host_ip}:{host_port} <-> {peer_roce}"),
    };
    let mut env = Environment::here(&backend_name, &wire, cfg.size, spin.as_str());
    for (name, core) in [("nic", cfg.cores.nic), ("backend", cfg.cores.backend), ("peer", cfg.cores.peer)] {
        env.pinned.insert(name.into(), core.map_or("unpinned".into(), |c| c.to_string()));
    }
    Ok(EchoReport {
        counts: analysis.counts,
        rtt_ns: Summary::of(&analysis.rtt),
        nic_drops: nic_stats.drops.clone(),
        nic: nic_stats,
        peer: peer_stats,
        backend_processed,
        backend_dropped,
        breakdown_ns: breakdown,
        peer_missing_extensions: missing,
        mode: if cfg.rate.is_some() { "open-loop".into() } else { "closed-loop".into() },
        rate: cfg.rate,
        warmup: cfg.warmup,
        env,
        analysis: Some(analysis),
    })
}

type Driven = (Analysis, Option<PeerStats>, Vec<&'static str>, Vec<rocelink_wire::hsb::CaptureRecord>);

/// The data path's per-message timestamp records still in the ring (the last
/// `timestamp_entries` of `processed`), oldest first. Only after the data path stopped.
fn read_timestamps(q: &QpMemory, processed: u64) -> Vec<crate::abi::rl_msg_timestamp> {
    let l = q.layout;
    let entries = u64::from(l.sizes.timestamp_entries);
    if entries == 0 {
        return Vec::new();
    }
    let first = processed.saturating_sub(entries);
    (first..processed).map(|i| q.mem.read_struct(l.timestamps + (i % entries) as usize * crate::abi::TIMESTAMP)).collect()
}

/// The host client's part: configure the peer, run its player, read its capture.
fn drive_peer(cfg: &EchoConfig, ecb_addr: SocketAddrV4, rx_mr: &crate::nic::MemoryRegion, host_ip: Ipv4Addr, host_port: u16, stride: u32, backend: &dyn crate::backend::RunningBackend) -> Result<Driven, EchoError> {
    let mut host = HsbHost::new(EcbClient::connect(ecb_addr).map_err(|e| EchoError::Start { what: "the ECB client", detail: e.to_string() })?);
    host.check_version().map_err(EchoError::Peer)?;
    host.configure(&DataPlaneConfig {
        vp: 0,
        data_plane: 0,
        qpn: HOST_QPN,
        rkey: rx_mr.rkey,
        buffer_addr: rx_mr.addr,
        page_stride: stride,
        pages: cfg.slots,
        frame_len: cfg.size as u32,
        host_mac: HOST_MAC,
        host_ip,
        host_port,
        peer_src_port: PEER_SRC_PORT,
        packet_size: cfg.size as u32,
    })?;
    let interval = cfg.rate.map_or(Duration::ZERO, |r| Duration::from_secs_f64(1.0 / r));
    let player = PlayerConfig {
        template: echo_template(cfg.size),
        count: cfg.count,
        interval,
        closed_loop: cfg.rate.is_none(),
        stamp: true,
        scramble: true,
        first_request_id: 1,
        response_timeout: Duration::from_millis(500),
        peer_qpn: rocelink_fpga_sim::DEFAULT_QP,
    };
    host.program_player(&player)?;
    host.arm_capture()?;
    host.start_player(&player)?;

    let started = Instant::now();
    let expected = interval.mul_f64(f64::from(cfg.count)) + Duration::from_micros(200) * cfg.count;
    let deadline = started + cfg.timeout.unwrap_or(expected + Duration::from_secs(10));
    let mut last_print = Instant::now();
    let done = host.wait_capture_done(deadline, Duration::from_millis(20), |n| {
        if cfg.progress && last_print.elapsed() > Duration::from_millis(250) {
            last_print = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            eprint!("\r  {n}/{} answered, {:.0} msg/s   ", cfg.count, f64::from(n) / secs.max(1e-9));
        }
        !crate::interrupted() && backend.failure().is_none()
    })?;
    if cfg.progress {
        eprintln!();
    }
    host.stop_player()?;
    if let Some(f) = backend.failure() {
        return Err(EchoError::Peer(format!("the transceiver loop failed during the run: {f}")));
    }
    if !done {
        tracing::warn!("the peer did not finish its capture in time; reporting what it captured");
    }
    let n = host.capture_count()?;
    let records = host.read_capture(n)?;
    let stats = host.read_stats()?;
    let sent = stats.map_or(u64::from(cfg.count), |s| u64::from(s.sent));
    let analysis = analyze(&records, sent, player.first_request_id, u64::from(cfg.warmup));
    Ok((analysis, stats, host.missing_extensions.clone(), records))
}
