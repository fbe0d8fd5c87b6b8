//! The echo run (`rocelink echo`, the benchmark): a thin alias of the graph runner. Its
//! flags become the echo graph in memory (a RoceTransceiver and the stage chain between its
//! rx and tx, no host operators), which is compiled and run like a graph file: see
//! `crate::graph` for the lifecycle (peer, NIC, backend; stop in reverse; every thread
//! joined or reported).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use rocelink_wire::roce;
use rocelink_wire::rpc;

use crate::backend::BackendKind;
use crate::graph::compile::PeerPlan;
use crate::graph::model::{Graph, Load, NicSpec, PeerSpec, RunSpec, SimMode, Stop, WireSpec};
use crate::graph::{compile, RunOptions};
use crate::nic::DoorbellMode;
pub use crate::peer::fresh_loopback_pair;
pub use crate::settings::{Cores, PeerMode, WireKind};
use crate::settings::Spin;
pub use crate::stage::echo_template;
use crate::stage::StageSpec;

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
    /// Spin policy (`Auto`, the default: `Dedicated` when every spinner has a core).
    pub spin: Spin,
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
    /// How sends are rung ([`RunOptions::doorbell`]).
    pub doorbell: DoorbellMode,
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
            spin: Spin::Auto,
            timeout: None,
            progress: false,
            slots: 64,
            backend: BackendKind::Auto,
            chain: vec![StageSpec::Echo],
            doorbell: DoorbellMode::Proxy,
        }
    }
}

/// What an echo run measured: the graph runner's report.
pub type EchoReport = crate::graph::RunReport;
/// Why an echo run failed: the graph runner's error.
pub type EchoError = crate::graph::RunError;

/// The echo graph of `cfg`, as a graph file would say it: a RoceTransceiver and one device
/// stage per element of `cfg.chain` (named `stage0`, `stage1`, ...), in order between its rx
/// and tx. What the model has no words for (a peer program of its own, the stages' specs)
/// [`plan`] sets on the compiled plan.
pub fn graph(cfg: &EchoConfig) -> Graph {
    let mut g = Graph::new("echo");
    g.backend = cfg.backend;
    g.nic = NicSpec::Soft {
        wire: match cfg.wire {
            WireKind::Inproc => WireSpec::Inproc,
            WireKind::Udp => WireSpec::Udp { bind: cfg.host_ip.map(|ip| SocketAddrV4::new(ip, roce::UDP_PORT).to_string()) },
        },
    };
    g.peer = match &cfg.peer {
        PeerMode::InProcess => PeerSpec::FpgaSim { mode: SimMode::InProcess, ip: cfg.peer_ip.map(|i| i.to_string()) },
        PeerMode::Process { .. } => PeerSpec::FpgaSim { mode: SimMode::Process, ip: cfg.peer_ip.map(|i| i.to_string()) },
        PeerMode::Remote { ecb, roce } => PeerSpec::Fpga { address: ecb.to_string(), roce: Some(roce.to_string()) },
    };
    g.cores.nic = cfg.cores.nic;
    g.cores.backend = cfg.cores.backend;
    g.cores.peer = cfg.cores.peer;
    g.cores.spin = cfg.spin;
    g.run = RunSpec {
        stop: Stop::Count(cfg.count),
        warmup: cfg.warmup,
        load: cfg.rate.map_or(Load::ClosedLoop, Load::Rate),
        size: cfg.size,
        timeout: cfg.timeout.map(|t| t.as_secs_f64()),
    };
    g.operator("roce", "RoceTransceiver", &[("slots", crate::ops::ParamValue::Int(i64::from(cfg.slots)))]);
    let mut from = "roce.rx".to_string();
    for i in 0..cfg.chain.len() {
        let name = format!("stage{i}");
        g.operator(&name, "Echo", &[]);
        g.flow(&from, &format!("{name}.in"));
        from = format!("{name}.out");
    }
    g.flow(&from, "roce.tx");
    g
}

/// The compiled echo graph of `cfg`, ready for [`crate::graph::run`].
pub fn plan(cfg: &EchoConfig) -> Result<crate::graph::Plan, EchoError> {
    let mut plan = compile(graph(cfg)).map_err(|e| EchoError::Config(e.to_string()))?;
    plan.chain = cfg.chain.iter().enumerate().map(|(i, s)| (format!("stage{i}"), s.clone())).collect();
    if let PeerMode::Process { program, args } = &cfg.peer {
        plan.peer = PeerPlan::Process { program: Some(program.clone()), args: args.clone(), ip: cfg.peer_ip };
    }
    Ok(plan)
}

/// Runs the echo loop end to end and returns what it measured. A run that failed once it
/// was under way (a dying peer, a failed transceiver loop) returns its report, with the
/// fault in [`EchoReport::fault`], exactly as `rocelink run` does.
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
    if cfg.chain.is_empty() {
        return Err(EchoError::Config("the stage chain is empty: the transceiver would answer nothing".into()));
    }
    crate::graph::run(&plan(cfg)?, &RunOptions { progress: cfg.progress, doorbell: cfg.doorbell })
}
