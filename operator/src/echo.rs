//! The echo run (`rocelink echo`, the benchmarks): a built-in graph ([`GRAPH`]: a
//! RoceTransceiver and an `Echo` stage between its rx and tx, no host operators) with its
//! flags as `--set` overrides ([`overrides`]), loaded, compiled and run by the same code as
//! `rocelink run graph.ron --set ...`: see `crate::graph` for the lifecycle (peer, NIC,
//! backend; stop in reverse; every thread joined or reported). What it checks, reports and
//! how it fails are therefore those of `rocelink run`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use rocelink_wire::roce;
use rocelink_wire::rpc;

use crate::backend::BackendKind;
use crate::gpu::kernels::KernelOptions;
use crate::graph::{compile, load, Graph, GraphErrors, Override, RunOptions};
use crate::nic::DoorbellMode;
pub use crate::peer::fresh_loopback_pair;
use crate::settings::Spin;
pub use crate::settings::{Cores, PeerMode, WireKind};
pub use crate::stage::{echo_template, request_template};
use crate::stage::{Settle, StageSpec};

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
    /// Where the peer runs (a software peer's address: default a fresh loopback address per
    /// run).
    pub peer: PeerMode,
    /// Our address on the UDP wire (default: a fresh loopback address per run).
    pub host_ip: Option<Ipv4Addr>,
    pub cores: Cores,
    /// Spin policy (`Auto`, the default: `Dedicated` when every spinner has a core).
    pub spin: Spin,
    /// Dedicated spinners execute PAUSE between polls.
    pub spin_pause: bool,
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
    /// How a GPU backend's kernel is built ([`RunOptions::kernel`]).
    pub kernel: KernelOptions,
    /// Where the run writes its report as JSON, as a graph's `outputs.json` (a file that
    /// cannot be written is one of the report's problems).
    pub json: Option<PathBuf>,
}

impl Default for EchoConfig {
    fn default() -> Self {
        EchoConfig {
            wire: WireKind::Inproc,
            count: 10_000,
            size: 64,
            rate: None,
            warmup: 0,
            peer: PeerMode::InProcess { ip: None },
            host_ip: None,
            cores: Cores::default(),
            spin: Spin::Auto,
            spin_pause: false,
            timeout: None,
            progress: false,
            slots: crate::rings::DEFAULT_RX_SLOTS,
            backend: BackendKind::Auto,
            chain: vec![StageSpec::Echo],
            doorbell: DoorbellMode::Proxy,
            kernel: KernelOptions::default(),
            json: None,
        }
    }
}

/// What an echo run measured: the graph runner's report.
pub type EchoReport = crate::graph::RunReport;
/// Why an echo run failed: the graph runner's error.
pub type EchoError = crate::graph::RunError;

/// The built-in echo graph: the transceiver and one `Echo` stage between its rx and tx, no
/// host operators. [`graph`] sets every setting from the flags, the way `rocelink run` takes
/// `--set`.
pub const GRAPH: &str = r#"Graph(
    name: "echo",
    operators: [
        (name: "roce", kind: "RoceTransceiver"),
        (name: "stage0", kind: "Echo"),
    ],
    flows: [
        (from: "roce.rx", to: "stage0.in"),
        (from: "stage0.out", to: "roce.tx"),
    ],
)"#;

/// The `--set` overrides of [`GRAPH`] that say what `cfg` says: backend, NIC and wire, peer,
/// cores, spin, the run, the transceiver's slots, and (for a chain other than one `Echo`)
/// the stage operators named `stage0`, `stage1`, ... in order between rx and tx. A peer
/// program of its own, which the graph model has no words for, [`plan`] sets on the plan.
pub fn overrides(cfg: &EchoConfig) -> Vec<Override> {
    let quote = |s: &str| ron::to_string(s).unwrap_or_else(|_| format!("{s:?}"));
    let set = |path: &str, value: String| Override { path: path.into(), value };
    let mut sets = vec![set("backend", format!("{:?}", cfg.backend))];
    sets.push(set(
        "nic",
        match (cfg.wire, cfg.host_ip) {
            (WireKind::Inproc, _) => "Soft(wire: Inproc)".into(),
            (WireKind::Udp, None) => "Soft(wire: Udp())".into(),
            (WireKind::Udp, Some(ip)) => {
                format!("Soft(wire: Udp(bind: {}))", quote(&SocketAddrV4::new(ip, roce::UDP_PORT).to_string()))
            }
        },
    ));
    let ip = |ip: &Option<Ipv4Addr>| ip.map_or(String::new(), |ip| format!(", ip: {}", quote(&ip.to_string())));
    sets.push(set(
        "peer",
        match &cfg.peer {
            PeerMode::InProcess { ip: i } => format!("FpgaSim(mode: InProcess{})", ip(i)),
            PeerMode::Process { ip: i, .. } => format!("FpgaSim(mode: Process{})", ip(i)),
            PeerMode::Remote { ecb, roce } => {
                format!("Fpga(address: {}, roce: {})", quote(&ecb.to_string()), quote(&roce.to_string()))
            }
        },
    ));
    let core = |c: Option<usize>| c.map_or("None".to_string(), |c| format!("Some({c})"));
    sets.push(set("cores.nic", core(cfg.cores.nic)));
    sets.push(set("cores.backend", core(cfg.cores.backend)));
    sets.push(set("cores.peer", core(cfg.cores.peer)));
    sets.push(set("cores.spin", format!("{:?}", cfg.spin)));
    sets.push(set("cores.spin_pause", cfg.spin_pause.to_string()));
    sets.push(set("run.stop", format!("Count({})", cfg.count)));
    sets.push(set("run.warmup", cfg.warmup.to_string()));
    sets.push(set("run.load", cfg.rate.map_or("ClosedLoop".to_string(), |r| format!("Rate({r:?})"))));
    sets.push(set("run.size", cfg.size.to_string()));
    sets.push(set("run.timeout", cfg.timeout.map_or("None".to_string(), |t| format!("Some({:?})", t.as_secs_f64()))));
    if cfg.chain != [StageSpec::Echo] {
        let mut ops = vec![r#"(name: "roce", kind: "RoceTransceiver")"#.to_string()];
        let mut flows = Vec::new();
        let mut from = "roce.rx".to_string();
        for (i, spec) in cfg.chain.iter().enumerate() {
            let name = format!("stage{i}");
            ops.push(match spec {
                StageSpec::Echo => format!(r#"(name: "{name}", kind: "Echo")"#),
                StageSpec::QecDecoder { dem, rounds_per_message, max_defects, decoders, settle } => {
                    let (settle, core) = match settle {
                        Settle::InLoop => ("in_loop", String::new()),
                        Settle::Idle => ("idle", String::new()),
                        Settle::Beside { core } => ("beside", core.map_or(String::new(), |c| format!(", core: Some({c})"))),
                    };
                    format!(
                        r#"(name: "{name}", kind: "QecDecoder"{core}, params: (dem: {}, rounds_per_message: {rounds_per_message}, max_defects: {max_defects}, decoders: {decoders}, settle: {settle}))"#,
                        quote(&dem.display().to_string())
                    )
                }
            });
            flows.push(format!(r#"(from: "{from}", to: "{name}.in")"#));
            from = format!("{name}.out");
        }
        flows.push(format!(r#"(from: "{from}", to: "roce.tx")"#));
        sets.push(set("operators", format!("[{}]", ops.join(", "))));
        sets.push(set("flows", format!("[{}]", flows.join(", "))));
    }
    sets.push(set("operators.roce.slots", cfg.slots.to_string()));
    sets
}

/// The echo graph of `cfg`: [`GRAPH`] with [`overrides`], loaded as `rocelink run` loads a
/// graph file with `--set`.
pub fn graph(cfg: &EchoConfig) -> Result<Graph, GraphErrors> {
    let mut g = load::load_str("echo (built in)", GRAPH, &overrides(cfg))?;
    // Built in, not read from a file.
    g.file = None;
    Ok(g)
}

/// The compiled echo graph of `cfg`, ready for [`crate::graph::run()`].
pub fn plan(cfg: &EchoConfig) -> Result<crate::graph::Plan, EchoError> {
    let mut plan = graph(cfg).and_then(compile).map_err(|e| EchoError::Config(e.to_string()))?;
    if let PeerMode::Process { .. } = &cfg.peer {
        plan.peer = cfg.peer.clone();
    }
    plan.json.clone_from(&cfg.json);
    Ok(plan)
}

/// Runs the echo loop end to end and returns what it measured. A run that failed once it
/// was under way (a dying peer, a failed transceiver loop) returns its report, with the
/// fault in [`EchoReport::fault`], exactly as `rocelink run` does.
pub fn run_echo(cfg: &EchoConfig) -> Result<EchoReport, EchoError> {
    if cfg.size < rpc::HEADER_LEN || cfg.size > roce::PMTU {
        return Err(EchoError::Config(format!(
            "--size {} must be {}..={} (an RPC header, then args, in one packet)",
            cfg.size,
            rpc::HEADER_LEN,
            roce::PMTU
        )));
    }
    if cfg.count == 0 {
        return Err(EchoError::Config("--count must be at least 1".into()));
    }
    if cfg.wire == WireKind::Inproc && !matches!(cfg.peer, PeerMode::InProcess { .. }) {
        return Err(EchoError::Config(
            "the inproc wire needs the peer in this process; use --wire udp with a separate peer".into(),
        ));
    }
    if let Some(r) = cfg.rate {
        if !(r > 0.0 && r.is_finite()) {
            return Err(EchoError::Config(format!("--rate {r} must be a positive number of messages per second")));
        }
    }
    if cfg.chain.is_empty() {
        return Err(EchoError::Config("the stage chain is empty: the transceiver would answer nothing".into()));
    }
    crate::graph::run(
        &plan(cfg)?,
        &RunOptions { progress: cfg.progress, doorbell: cfg.doorbell, kernel: cfg.kernel.clone() },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::model::{Load, NicSpec, PeerSpec, SimMode, Stop, WireSpec};

    #[test]
    fn the_flags_become_the_settings_a_graph_file_would_have() {
        let cfg = EchoConfig {
            wire: WireKind::Udp,
            count: 1234,
            size: 256,
            rate: Some(20_000.5),
            warmup: 7,
            host_ip: Some(Ipv4Addr::new(127, 0, 0, 5)),
            peer: PeerMode::Process {
                program: Some("/bin/fpga-sim".into()),
                args: vec!["--x".into()],
                ip: Some(Ipv4Addr::new(127, 0, 0, 6)),
            },
            cores: Cores { nic: Some(1), backend: None, peer: Some(3) },
            spin: Spin::Dedicated,
            spin_pause: true,
            timeout: Some(Duration::from_millis(1500)),
            slots: 32,
            backend: BackendKind::GpuLaunchPerMessage(2),
            ..EchoConfig::default()
        };
        let g = graph(&cfg).expect("the built-in graph with the flags");
        assert_eq!(g.backend, BackendKind::GpuLaunchPerMessage(2));
        assert_eq!(g.nic, NicSpec::Soft { wire: WireSpec::Udp { bind: Some("127.0.0.5:4791".into()) } });
        assert_eq!(g.peer, PeerSpec::FpgaSim { mode: SimMode::Process, ip: Some("127.0.0.6".into()) });
        assert_eq!(
            (g.cores.nic, g.cores.backend, g.cores.peer, g.cores.spin, g.cores.spin_pause),
            (Some(1), None, Some(3), Spin::Dedicated, true)
        );
        assert_eq!(
            (g.run.stop, g.run.warmup, g.run.load, g.run.size, g.run.timeout),
            (Stop::Count(1234), 7, Load::Rate(20_000.5), 256, Some(1.5))
        );
        let roce = g.operators.iter().find(|o| o.name == "roce").expect("the transceiver");
        assert!(
            roce.params.iter().any(|p| p.name == "slots" && p.value == crate::ops::ParamValue::Int(32)),
            "{:?}",
            roce.params
        );
        assert_eq!(g.file, None);

        let remote = EchoConfig {
            wire: WireKind::Udp,
            peer: PeerMode::Remote { ecb: "10.0.0.2:8192".parse().unwrap(), roce: "10.0.0.2:4791".parse().unwrap() },
            ..EchoConfig::default()
        };
        let g = graph(&remote).expect("remote");
        assert_eq!(g.peer, PeerSpec::Fpga { address: "10.0.0.2:8192".into(), roce: Some("10.0.0.2:4791".into()) });
    }

    #[test]
    fn the_echo_plan_is_the_graph_runners_plan() {
        let p = plan(&EchoConfig { backend: BackendKind::Cpu, ..EchoConfig::default() }).expect("plan");
        assert_eq!(p.chain, vec![("stage0".to_string(), StageSpec::Echo)]);
        assert!(p.host_ops.is_empty() && p.host_flows.is_empty());
        assert_eq!(p.backend.backend, Ok(crate::settings::Backend::Cpu));
        // Another chain is written as the operators it is, and checked as a file's would be.
        let g = graph(&EchoConfig { chain: vec![StageSpec::Echo, StageSpec::Echo], ..EchoConfig::default() })
            .expect("graph");
        assert_eq!(g.operators.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["roce", "stage0", "stage1"]);
        let e = plan(&EchoConfig { chain: vec![StageSpec::Echo, StageSpec::Echo], ..EchoConfig::default() })
            .unwrap_err()
            .to_string();
        assert!(e.contains("port type mismatch"), "{e}");
        let p = plan(&EchoConfig {
            wire: WireKind::Udp,
            peer: PeerMode::Process { program: Some("/bin/x".into()), args: vec![], ip: None },
            ..EchoConfig::default()
        })
        .expect("plan");
        assert!(
            matches!(p.peer, PeerMode::Process { program: Some(ref x), .. } if x.as_os_str() == "/bin/x"),
            "{:?}",
            p.peer
        );
        // What the graph refuses, the echo run refuses the same way.
        let e = plan(&EchoConfig { size: 8, ..EchoConfig::default() }).unwrap_err().to_string();
        assert!(e.contains("run.size 8 must be 24..=4096"), "{e}");
    }
}
