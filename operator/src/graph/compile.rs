//! Checking a graph and compiling it into a [`Plan`]: everything the runner needs, decided
//! before anything starts.
//!
//! Refused, each error naming the operator, port or setting and where it is written:
//! unknown kinds, bad or duplicate names, unknown or ill-typed parameters, output file names
//! with folders in them, flows naming operators or ports that do not exist or going the wrong
//! way, a flow written twice, device stages fed by host
//! operators, host operators fed from inside the fused chain, port type mismatches, cycles
//! (among device stages, and among host operators, which could never drain), required ports
//! left unconnected, and a device chain that is not one path from the transceiver's `rx` to
//! its `tx`. Settings are checked too (addresses, sizes, rates, a wire that cannot reach the
//! peer), and the QEC side of a graph with a `QecDecoder` (`graph::qec`: replay and decoder
//! together, the same rounds per message, files that exist and load).
//!
//! Compiled: the stage chain (one `Vec<StageSpec>` for `spawn_backend`), the backend resolved
//! on this machine for that chain (`backend::resolve`), the tap and host flows with their
//! capacities and policies, host operators with their resolved parameters and cores, the peer
//! and wire, the run's control, the output paths, the QEC replay.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use rocelink_link::SpinMode;
use rocelink_wire::{roce, rpc};

use super::error::{At, GraphError, GraphErrors};
use super::model::{Graph, Load, NicSpec, OperatorDef, PeerSpec, Policy, SimMode, Stop, WireSpec};
use super::qec::{self, QecRun};
use crate::backend::Resolved;
use crate::ops::{self, roce::TransceiverConfig, Build, Domain, OperatorDecl, Params, PortDecl, PortDir};
use crate::settings::{Backend, Cores, PeerMode, Spin, WireKind};
use crate::stage::{Settle, StageSpec};

/// Capacity of a host flow whose entry gives none.
pub const DEFAULT_CAPACITY: usize = 65_536;
/// Largest capacity accepted (messages are 48 bytes: 768 MiB).
pub const MAX_CAPACITY: usize = 1 << 24;

/// A checked graph, ready to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub graph: Graph,
    /// `graph.backend` resolved on this machine for the chain, once: what `check` prints,
    /// what `run` starts (or refuses before starting anything) and what the reports name.
    pub backend: Resolved,
    pub nic: NicPlan,
    pub peer: PeerMode,
    pub cores: Cores,
    /// Core of host threads (tap reader, operators without their own).
    pub host_core: Option<usize>,
    /// `Auto` is decided at start from the number of spinners ([`Plan::spin_mode`]).
    pub spin: Spin,
    /// Dedicated spinners execute PAUSE between polls.
    pub spin_pause: bool,
    pub run: RunPlan,
    /// The transceiver operator's name and its queue pair's sizes.
    pub transceiver: (String, TransceiverConfig),
    /// The fused chain: each device stage's name and spec, in data order.
    pub chain: Vec<(String, StageSpec)>,
    pub host_ops: Vec<HostOpPlan>,
    pub host_flows: Vec<HostFlowPlan>,
    /// Where relative output paths go.
    pub out_dir: PathBuf,
    /// The run report as JSON.
    pub json: Option<PathBuf>,
    /// A QEC graph's replay and decoder (`None`: not a QEC graph).
    pub qec: Option<QecRun>,
    /// Things that run, but not as asked.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NicPlan {
    Soft { wire: WireKind, bind: Option<SocketAddrV4> },
    Verbs { device: String, port: u8, gid_index: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunPlan {
    /// `Count` and `warmup` are shots in a QEC graph.
    pub stop: Stop,
    pub warmup: u32,
    /// Messages per second; `None`: closed loop (or a QEC round cycle).
    pub rate: Option<f64>,
    /// QEC graphs: microseconds per syndrome round (`RoundCycle`); `None`: closed loop.
    pub round_cycle_us: Option<f64>,
    pub size: usize,
    pub timeout: Option<Duration>,
    /// The function the requests call (`rpc::function_id::ECHO` in graphs; the peer checks
    /// the answers of `echo` and `increment`).
    pub function_id: u32,
}

#[derive(Debug, Clone)]
pub struct HostOpPlan {
    pub name: String,
    pub decl: &'static OperatorDecl,
    pub params: Params,
    pub core: Option<usize>,
    /// Indices into `Plan::host_flows`.
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct HostFlowPlan {
    /// `op.port` of each end.
    pub from: (String, &'static str),
    pub to: (String, &'static str),
    pub capacity: usize,
    pub policy: Policy,
    /// Fed by the transceiver's tap (rather than by a host operator).
    pub from_tap: bool,
}

impl HostFlowPlan {
    pub fn name(&self) -> String {
        format!("{}.{} -> {}.{}", self.from.0, self.from.1, self.to.0, self.to.1)
    }
}

/// A resolved operator.
struct Op<'g> {
    name: &'g str,
    decl: &'static OperatorDecl,
    params: Params,
    at: &'g At,
}

/// A resolved flow end.
#[derive(Clone, Copy)]
struct End {
    op: usize,
    port: &'static PortDecl,
}

/// Checks `g` and compiles it.
pub fn compile(g: Graph) -> Result<Plan, GraphErrors> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let settings = settings(&g, &mut errors, &mut warnings);
    let ops = operators(&g, &mut errors);
    if !errors.is_empty() {
        return Err(GraphErrors(errors));
    }
    let (ops, settings) = (ops.unwrap_or_default(), settings.expect("no errors, so settings resolved"));

    let ends = flow_ends(&g, &ops, &mut errors);
    if !errors.is_empty() {
        return Err(GraphErrors(errors));
    }
    structure(&g, &ops, &ends, &mut errors);
    if !errors.is_empty() {
        return Err(GraphErrors(errors));
    }
    let chain = chain(&g, &ops, &ends)?;

    let transceiver = ops.iter().find(|o| o.decl.domain() == Domain::Transceiver).expect("checked: one transceiver");
    let Build::Transceiver(build_t) = transceiver.decl.build else { unreachable!("domain is Transceiver") };
    let tcfg = build_t(&transceiver.params)
        .map_err(|e| GraphError::new(transceiver.at.clone(), format!("operator `{}`: {e}", transceiver.name)))?;
    let mut specs = Vec::new();
    for &i in &chain {
        let o = &ops[i];
        let Build::Stage(build_s) = o.decl.build else { unreachable!("chain holds device stages") };
        let mut spec =
            build_s(&o.params).map_err(|e| GraphError::new(o.at.clone(), format!("operator `{}`: {e}", o.name)))?;
        // A device stage's helper thread (the CPU decoder's settle worker) takes the entry's core.
        if let StageSpec::QecDecoder { settle: Settle::Beside { core }, .. } = &mut spec {
            *core = g.operators[i].core;
        }
        specs.push((o.name.to_string(), spec));
    }

    // Host flows: every flow ending at a host operator.
    let mut host_flows = Vec::new();
    let mut host_ops: Vec<HostOpPlan> = Vec::new();
    // Index in `host_ops` of each operator that is one.
    let mut host_index: Vec<Option<usize>> = vec![None; ops.len()];
    for (i, o) in ops.iter().enumerate().filter(|(_, o)| o.decl.domain() == Domain::Host) {
        host_index[i] = Some(host_ops.len());
        host_ops.push(HostOpPlan {
            name: o.name.to_string(),
            decl: o.decl,
            params: o.params.clone(),
            core: g.operators[i].core.or(g.cores.host),
            inputs: Vec::new(),
            outputs: Vec::new(),
        });
    }
    for (fi, f) in g.flows.iter().enumerate() {
        let (a, b) = ends[fi];
        if ops[b.op].decl.domain() != Domain::Host {
            continue;
        }
        let idx = host_flows.len();
        host_flows.push(HostFlowPlan {
            from: (ops[a.op].name.to_string(), a.port.name),
            to: (ops[b.op].name.to_string(), b.port.name),
            capacity: f.capacity.unwrap_or(DEFAULT_CAPACITY),
            policy: f.policy.unwrap_or(Policy::Pop),
            from_tap: ops[a.op].decl.domain() == Domain::Transceiver,
        });
        if let Some(h) = host_index[b.op] {
            host_ops[h].inputs.push(idx);
        }
        if let Some(h) = host_index[a.op] {
            host_ops[h].outputs.push(idx);
        }
    }
    if tcfg.tap_ring == 0 && host_flows.iter().any(|f| f.from_tap) {
        return Err(GraphError::new(
            transceiver.at.clone(),
            format!("operator `{}`: tap_ring is 0 but its tap port feeds host operators", transceiver.name),
        )
        .into());
    }

    let (nic, peer, cores, spin, run, out_dir, json) = settings;
    let qec = qec::check(&g, &specs, &mut warnings)?;
    let chain_specs: Vec<StageSpec> = specs.iter().map(|(_, s)| s.clone()).collect();
    let backend = crate::backend::resolve(g.backend, &chain_specs);
    // The persistent kernel posts one receive per slot (QpSizes::posted_receives) and re-posts
    // them behind a fence every few messages: an open-loop peer's window wants that many more.
    let open_loop = run.rate.is_some() || run.round_cycle_us.is_some();
    let want = super::drive::OPEN_LOOP_WINDOW as u32 + 8;
    if open_loop && tcfg.slots < want && matches!(backend.backend, Ok(crate::settings::Backend::Gpu(_))) {
        warnings.push(format!(
            "operator `{}`: slots {} with an open-loop peer ({} messages in flight) on the persistent kernel: the receive queue can run empty (drops counted as rq_empty); {want} or more slots avoid it",
            transceiver.name,
            tcfg.slots,
            super::drive::OPEN_LOOP_WINDOW
        ));
    }
    for (name, spec) in &specs {
        let StageSpec::QecDecoder { settle, .. } = spec else { continue };
        let gpu = matches!(backend.backend, Ok(crate::settings::Backend::Gpu(_)));
        if gpu && *settle != Settle::InLoop {
            warnings.push(format!(
                "operator `{name}`: settle: {settle:?} is the CPU stage's; the GPU stage settles in its kernel"
            ));
        } else if matches!(settle, Settle::Beside { core: None }) {
            warnings.push(format!(
                "operator `{name}`: settle: beside without a `core`: the worker thread runs unpinned and yields between polls; give it a core of its own (`core: Some(n)` on the operator) for the fixed-cycle throughput it is for"
            ));
        }
    }
    Ok(Plan {
        backend,
        nic,
        peer,
        cores,
        host_core: g.cores.host,
        spin,
        spin_pause: g.cores.spin_pause,
        run,
        transceiver: (transceiver.name.to_string(), tcfg),
        chain: specs,
        host_ops,
        host_flows,
        out_dir,
        json,
        qec,
        warnings,
        graph: g,
    })
}

type Settings = (NicPlan, PeerMode, Cores, Spin, RunPlan, PathBuf, Option<PathBuf>);

/// `ip:port`, or `ip` alone with `default_port`.
fn socket(s: &str, default_port: u16) -> Result<SocketAddrV4, String> {
    if let Ok(a) = s.parse::<SocketAddrV4>() {
        return Ok(a);
    }
    s.parse::<Ipv4Addr>()
        .map(|ip| SocketAddrV4::new(ip, default_port))
        .map_err(|_| format!("`{s}` is not an IPv4 address with an optional port (like 192.168.0.2:8192)"))
}

fn settings(g: &Graph, errors: &mut Vec<GraphError>, warnings: &mut Vec<String>) -> Option<Settings> {
    let n0 = errors.len();
    let mut err = |path: &str, msg: String| errors.push(GraphError::new(g.places.at(path), msg));
    if g.name.is_empty() {
        err("name", "the graph's name is empty".into());
    }
    let nic = match &g.nic {
        NicSpec::Soft { wire: WireSpec::Inproc } => NicPlan::Soft { wire: WireKind::Inproc, bind: None },
        NicSpec::Soft { wire: WireSpec::Udp { bind } } => {
            let bind = bind.as_deref().map(|b| socket(b, roce::UDP_PORT)).transpose().unwrap_or_else(|e| {
                err("nic.wire.bind", format!("nic.wire.bind: {e}"));
                None
            });
            NicPlan::Soft { wire: WireKind::Udp, bind }
        }
        NicSpec::Verbs { device, port, gid_index } => {
            if device.is_empty() {
                err("nic.device", "nic: Verbs needs a device name, like \"mlx5_0\"".into());
            }
            if *port == 0 {
                err("nic.port", "nic: Verbs ports are numbered from 1".into());
            }
            // valid, but not runnable here: said by `check` too, not first by `run`
            warnings.push(if cfg!(feature = "verbs") {
                format!("nic: Verbs(device: \"{device}\", port: {port}): this version of the verbs NIC brings the device up but does not run the data path on it: `run` refuses this graph (after bringing it up)")
            } else {
                format!("nic: Verbs(device: \"{device}\", port: {port}) needs a ConnectX NIC with rdma-core and rocelink's `verbs` feature, which this build does not have: `run` refuses this graph")
            });
            NicPlan::Verbs { device: device.clone(), port: *port, gid_index: *gid_index }
        }
    };
    let ip = |s: &Option<String>, err: &mut dyn FnMut(&str, String)| -> Option<Ipv4Addr> {
        s.as_deref().and_then(|s| match s.parse::<Ipv4Addr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                err("peer.ip", format!("peer.ip: `{s}` is not an IPv4 address"));
                None
            }
        })
    };
    let peer = match &g.peer {
        PeerSpec::FpgaSim { mode: SimMode::InProcess, ip: i } => PeerMode::InProcess { ip: ip(i, &mut err) },
        PeerSpec::FpgaSim { mode: SimMode::Process, ip: i } => {
            PeerMode::Process { program: None, args: Vec::new(), ip: ip(i, &mut err) }
        }
        PeerSpec::Fpga { address, roce } => {
            let ecb = socket(address, rocelink_wire::ecb::PORT).unwrap_or_else(|e| {
                err("peer.address", format!("peer.address: {e}"));
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)
            });
            let roce = match roce {
                Some(r) => socket(r, roce::UDP_PORT).unwrap_or_else(|e| {
                    err("peer.roce", format!("peer.roce: {e}"));
                    SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)
                }),
                None => SocketAddrV4::new(*ecb.ip(), roce::UDP_PORT),
            };
            PeerMode::Remote { ecb, roce }
        }
    };
    if matches!(nic, NicPlan::Soft { wire: WireKind::Inproc, .. }) && !matches!(peer, PeerMode::InProcess { .. }) {
        err("peer", "the inproc wire carries frames between threads of this process; a peer in another process or on hardware needs `nic: Soft(wire: Udp())`".into());
    }

    let r = &g.run;
    if r.size < rpc::HEADER_LEN || r.size > roce::PMTU {
        err(
            "run.size",
            format!(
                "run.size {} must be {}..={} (an RPC header, then args, in one packet)",
                r.size,
                rpc::HEADER_LEN,
                roce::PMTU
            ),
        );
    }
    match r.stop {
        Stop::Count(0) => err("run.stop", "run.stop: Count must be at least 1".into()),
        Stop::Count(n) if r.warmup >= n => {
            warnings.push(format!("run.warmup {} is not below the count {n}: nothing will be measured", r.warmup))
        }
        Stop::Duration(s) if !(s > 0.0 && s.is_finite() && s < 1e7) => {
            err("run.stop", format!("run.stop: Duration({s}) must be a positive number of seconds"))
        }
        _ => {}
    }
    let (rate, round_cycle_us) = match r.load {
        Load::ClosedLoop => (None, None),
        Load::Rate(x) if x > 0.0 && x.is_finite() && x <= 1e9 => (Some(x), None),
        Load::Rate(x) => {
            err(
                "run.load",
                format!("run.load: Rate({x}) must be a number of messages per second above 0 and at most 1e9"),
            );
            (None, None)
        }
        // Whether the graph is a QEC graph is checked with the chain (`qec::check`).
        Load::RoundCycle(us) => {
            let clocks = qec::cycle_clocks(us);
            if !(us >= 0.0 && us.is_finite() && clocks <= f64::from(u32::MAX)) {
                err("run.load", format!("run.load: RoundCycle({us}) must be microseconds per round, 0 (as fast as 64 messages in flight allow) up to {:.0}", f64::from(u32::MAX) / 156.25));
            } else if us > 0.0 && clocks < 1.0 {
                err("run.load", format!("run.load: RoundCycle({us}) is shorter than one player clock (0.0064 us)"));
            }
            (None, Some(us))
        }
    };
    let timeout = match r.timeout {
        None => None,
        Some(t) if t > 0.0 && t.is_finite() && t < 1e7 => Some(Duration::from_secs_f64(t)),
        Some(t) => {
            err("run.timeout", format!("run.timeout {t} must be a positive number of seconds"));
            None
        }
    };
    if g.outputs.dir.is_empty() {
        err("outputs.dir", "outputs.dir is empty (use \".\" for the current directory)".into());
    }
    let out_dir = PathBuf::from(&g.outputs.dir);
    let json = g.outputs.json.as_ref().map(|j| out_dir.join(j));

    let c = &g.cores;
    let cores = Cores { nic: c.nic, backend: c.backend, peer: c.peer };
    let available = rocelink_link::affinity::available_cores();
    let mut asked: Vec<(String, usize)> = [("nic", c.nic), ("backend", c.backend), ("peer", c.peer), ("host", c.host)]
        .iter()
        .filter_map(|(n, c)| c.map(|c| (n.to_string(), c)))
        .collect();
    asked.extend(g.operators.iter().filter_map(|o| o.core.map(|c| (format!("operator {}", o.name), c))));
    for (who, core) in &asked {
        if *core >= available {
            warnings.push(format!("cores.{who} asks for core {core}, but this machine lets rocelink use {available} cores: that thread runs unpinned"));
        }
    }
    (errors.len() == n0).then_some((
        nic,
        peer,
        cores,
        c.spin,
        RunPlan {
            stop: r.stop,
            warmup: r.warmup,
            rate,
            round_cycle_us,
            size: r.size,
            timeout,
            function_id: rpc::function_id::ECHO,
        },
        out_dir,
        json,
    ))
}

/// Names, kinds and parameters; exactly one transceiver.
fn operators<'g>(g: &'g Graph, errors: &mut Vec<GraphError>) -> Option<Vec<Op<'g>>> {
    let mut ops = Vec::new();
    let mut seen: HashMap<&str, &At> = HashMap::new();
    for o in &g.operators {
        let valid_name =
            !o.name.is_empty() && o.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            errors.push(GraphError::new(
                o.at.clone(),
                format!(
                    "operator name `{}` must be letters, digits, `_` or `-` (flows name ports as `operator.port`)",
                    o.name
                ),
            ));
        } else if let Some(first) = seen.get(o.name.as_str()) {
            let first = match first {
                At::File { line, .. } => format!(" (first on line {line})"),
                _ => String::new(),
            };
            errors.push(GraphError::new(o.at.clone(), format!("duplicate operator name `{}`{first}", o.name)));
        } else {
            seen.insert(&o.name, &o.at);
        }
        let Some(decl) = ops::lookup(&o.kind) else {
            let hint = ops::kind_names()
                .into_iter()
                .find(|k| k.eq_ignore_ascii_case(&o.kind))
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default();
            errors.push(GraphError::new(
                o.kind_at.clone(),
                format!(
                    "operator `{}`: unknown kind `{}` (known kinds: {}){hint}",
                    o.name,
                    o.kind,
                    ops::kind_names().join(", ")
                ),
            ));
            continue;
        };
        let given: Vec<(String, ops::ParamValue)> =
            o.params.iter().map(|p| (p.name.clone(), p.value.clone())).collect();
        match Params::resolve(decl.params, &given) {
            Ok(params) => {
                if let Err((at, msg)) = output_names(g, o, decl, &params) {
                    errors.push(GraphError::new(at, format!("operator `{}` ({}): {msg}", o.name, o.kind)));
                }
                ops.push(Op { name: &o.name, decl, params, at: &o.at })
            }
            Err((i, msg)) => {
                let at = i.and_then(|i| o.params.get(i)).map_or(o.at.clone(), |p| p.at.clone());
                errors.push(GraphError::new(at, format!("operator `{}` ({}): {msg}", o.name, o.kind)));
            }
        }
    }
    if !errors.is_empty() {
        return None;
    }
    let transceivers: Vec<&Op> = ops.iter().filter(|o| o.decl.domain() == Domain::Transceiver).collect();
    match transceivers.len() {
        0 => errors.push(GraphError::new(
            g.places.at("operators"),
            "the graph has no RoceTransceiver: add `(name: \"roce\", kind: \"RoceTransceiver\")`",
        )),
        1 => {}
        _ => errors.push(GraphError::new(
            transceivers[1].at.clone(),
            format!(
                "operator `{}`: a graph has one RoceTransceiver (this build drives one queue pair); `{}` is the first",
                transceivers[1].name, transceivers[0].name
            ),
        )),
    }
    Some(ops)
}

/// File names that operators build from their parameters (or from the graph's name), checked
/// here so that `check` refuses what the operator would refuse when the run starts, after
/// other operators have already written their files. `Err`: where, and why.
fn output_names(g: &Graph, o: &OperatorDef, decl: &OperatorDecl, params: &Params) -> Result<(), (At, String)> {
    // LatencyReport writes `<name>.md`, `.json` and `.svg` in outputs.dir; `name` defaults to
    // the graph's name (the rule of `ops::latency_report`).
    if decl.kind != ops::latency_report::DECL.kind {
        return Ok(());
    }
    let (name, at, what) = match params.str("name") {
        Some(n) => (
            n,
            o.params.iter().find(|p| p.name == "name").map_or_else(|| o.at.clone(), |p| p.at.clone()),
            "parameter `name`",
        ),
        None => (
            g.name.as_str(),
            if g.places.has("name") { g.places.at("name") } else { o.at.clone() },
            "the graph's name (the default of its parameter `name`)",
        ),
    };
    if !ops::latency_report::valid_name(name) {
        return Err((at, format!("{what} is `{name}`, but it names the report files (<name>.md, .json, .svg in outputs.dir): it must be a file name without folders")));
    }
    Ok(())
}

/// Each flow's two ends, checked for existence and direction; a flow written twice is
/// refused at its second entry.
fn flow_ends(g: &Graph, ops: &[Op<'_>], errors: &mut Vec<GraphError>) -> Vec<(End, End)> {
    let by_name: HashMap<&str, usize> = ops.iter().enumerate().map(|(i, o)| (o.name, i)).collect();
    let mut seen: HashMap<(usize, &str, usize, &str), &At> = HashMap::new();
    let mut out = Vec::new();
    for f in &g.flows {
        let a = end(ops, &by_name, &f.from, &f.from_at, PortDir::Out, errors);
        let b = end(ops, &by_name, &f.to, &f.to_at, PortDir::In, errors);
        if let (Some(a), Some(b)) = (a, b) {
            match seen.entry((a.op, a.port.name, b.op, b.port.name)) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    let first = match first.get() {
                        At::File { line, col, .. } => format!(" (first at line {line}, column {col})"),
                        _ => String::new(),
                    };
                    errors.push(GraphError::new(
                        f.at.clone(),
                        format!("duplicate flow {} -> {}{first}: each connection is written once", f.from, f.to),
                    ));
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(&f.at);
                }
            }
            out.push((a, b));
        }
    }
    out
}

fn end(
    ops: &[Op<'_>],
    by_name: &HashMap<&str, usize>,
    text: &str,
    at: &At,
    dir: PortDir,
    errors: &mut Vec<GraphError>,
) -> Option<End> {
    let side = if dir == PortDir::Out { "from" } else { "to" };
    let Some((op, port)) = text.split_once('.').filter(|(o, p)| !o.is_empty() && !p.is_empty() && !p.contains('.'))
    else {
        errors.push(GraphError::new(at.clone(), format!("flow {side} `{text}`: expected `operator.port`")));
        return None;
    };
    let Some(&i) = by_name.get(op) else {
        errors.push(GraphError::new(
            at.clone(),
            format!("flow {side} `{text}`: dangling: there is no operator named `{op}`"),
        ));
        return None;
    };
    let decl = ops[i].decl;
    let Some(p) = decl.port(port) else {
        let ports: Vec<&str> = decl.ports.iter().map(|p| p.name).collect();
        errors.push(GraphError::new(
            at.clone(),
            format!(
                "flow {side} `{text}`: dangling: operator `{op}` ({}) has no port `{port}` (its ports: {})",
                decl.kind,
                ports.join(", ")
            ),
        ));
        return None;
    };
    if p.dir != dir {
        let (is, needs) =
            if dir == PortDir::Out { ("an input", "from an output port") } else { ("an output", "to an input port") };
        errors.push(GraphError::new(
            at.clone(),
            format!("flow {side} `{text}`: port `{port}` of `{op}` is {is} port; a flow goes {needs}"),
        ));
        return None;
    }
    Some(End { op: i, port: p })
}

/// Domains, cycles, types, queue settings, unconnected required ports.
fn structure(g: &Graph, ops: &[Op<'_>], ends: &[(End, End)], errors: &mut Vec<GraphError>) {
    for (f, (a, b)) in g.flows.iter().zip(ends) {
        let (da, db) = (ops[a.op].decl.domain(), ops[b.op].decl.domain());
        let name = format!("{} -> {}", f.from, f.to);
        if da == Domain::Host && db.on_data_path() {
            errors.push(GraphError::new(f.at.clone(), format!("flow {name}: {} `{}` is fed by host operator `{}`; the data path takes messages only from the transceiver and other device stages", db.as_str(), ops[b.op].name, ops[a.op].name)));
        } else if da == Domain::Device && db == Domain::Host {
            errors.push(GraphError::new(f.at.clone(), format!("flow {name}: host operator `{}` is fed from inside the fused chain (`{}`); host operators get copies through the transceiver's tap port", ops[b.op].name, f.from)));
        } else if da == Domain::Transceiver && db == Domain::Host && a.port.ty != ops::MsgType::MsgRecord {
            errors.push(GraphError::new(f.at.clone(), format!("flow {name}: host operator `{}` is fed by the data path port `{}`; host operators get copies through the transceiver's tap port", ops[b.op].name, f.from)));
        } else if da.on_data_path() && db.on_data_path() && (f.capacity.is_some() || f.policy.is_some()) {
            errors.push(GraphError::new(f.at.clone(), format!("flow {name} is fused into the device stage chain: it has no queue, so capacity and policy do not apply")));
        } else if db == Domain::Host {
            if let Some(c) = f.capacity.filter(|c| *c == 0 || *c > MAX_CAPACITY) {
                errors.push(GraphError::new(
                    f.at.clone(),
                    format!("flow {name}: capacity {c} must be 1..={MAX_CAPACITY}"),
                ));
            }
            if da == Domain::Transceiver && f.policy == Some(Policy::Reject) {
                errors.push(GraphError::new(f.at.clone(), format!("flow {name}: the tap ring is written by the data path without looking at its reader, so a full ring always loses its oldest records; use Pop (count them) or Fault (fail the run)")));
            }
        }
    }
    if !errors.is_empty() {
        return;
    }
    cycles(g, ops, ends, Domain::Device, errors);
    cycles(g, ops, ends, Domain::Host, errors);
    if !errors.is_empty() {
        return;
    }
    for (f, (a, b)) in g.flows.iter().zip(ends) {
        if !a.port.ty.feeds(b.port.ty) {
            errors.push(GraphError::new(
                f.at.clone(),
                format!(
                    "flow {} -> {}: port type mismatch: `{}` sends {}, `{}` takes {}",
                    f.from,
                    f.to,
                    f.from,
                    a.port.ty.as_str(),
                    f.to,
                    b.port.ty.as_str()
                ),
            ));
        }
    }
    let connected: HashSet<(usize, &str)> =
        ends.iter().flat_map(|(a, b)| [(a.op, a.port.name), (b.op, b.port.name)]).collect();
    for (i, o) in ops.iter().enumerate() {
        for p in o.decl.ports.iter().filter(|p| p.required) {
            if !connected.contains(&(i, p.name)) {
                let dir = if p.dir == PortDir::In { "input" } else { "output" };
                errors.push(GraphError::new(
                    o.at.clone(),
                    format!(
                        "operator `{}` ({}): required {dir} port `{}` ({}) is not connected",
                        o.name, o.decl.kind, p.name, p.doc
                    ),
                ));
            }
        }
    }
}

/// A cycle among operators of `domain` (the transceiver's rx and tx are the chain's two
/// ends, not a cycle). Depth-first, without recursion (a chain of any length), each flow
/// looked at once.
fn cycles(g: &Graph, ops: &[Op<'_>], ends: &[(End, End)], domain: Domain, errors: &mut Vec<GraphError>) {
    let inside = |i: usize| ops[i].decl.domain() == domain;
    // Flows out of each operator, to operators of `domain`.
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
    for (fi, (a, b)) in ends.iter().enumerate() {
        if inside(a.op) && inside(b.op) {
            next[a.op].push(fi);
        }
    }
    // 0: unvisited, 1: on the stack, 2: done.
    let mut state = vec![0u8; ops.len()];
    // The path: each operator with how many of its flows have been followed.
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for v in 0..ops.len() {
        if !inside(v) || state[v] != 0 {
            continue;
        }
        state[v] = 1;
        stack.push((v, 0));
        while let Some(top) = stack.last_mut() {
            let (u, k) = *top;
            let Some(&fi) = next[u].get(k) else {
                state[u] = 2;
                stack.pop();
                continue;
            };
            top.1 += 1;
            let w = ends[fi].1.op;
            match state[w] {
                1 => {
                    let from = stack.iter().position(|&(x, _)| x == w).unwrap_or(0);
                    let mut names: Vec<&str> = stack[from..].iter().map(|&(x, _)| ops[x].name).collect();
                    names.push(ops[w].name);
                    let what = if domain == Domain::Device {
                        "device stages"
                    } else {
                        "host operators (they could never drain)"
                    };
                    errors.push(GraphError::new(
                        g.flows[fi].at.clone(),
                        format!(
                            "flow {} -> {} closes a cycle among {what}: {}",
                            g.flows[fi].from,
                            g.flows[fi].to,
                            abridged(&names, " -> ")
                        ),
                    ));
                    return;
                }
                0 => {
                    state[w] = 1;
                    stack.push((w, 0));
                }
                _ => {}
            }
        }
    }
}

/// `items` joined by `sep`, the middle left out when there are many (an error stays short
/// whatever the size of the graph).
fn abridged<S: AsRef<str>>(items: &[S], sep: &str) -> String {
    const HEAD: usize = 6;
    const TAIL: usize = 3;
    let join = |part: &[S]| part.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(sep);
    if items.len() <= HEAD + TAIL + 1 {
        return join(items);
    }
    format!(
        "{}{sep}... ({} more){sep}{}",
        join(&items[..HEAD]),
        items.len() - HEAD - TAIL,
        join(&items[items.len() - TAIL..])
    )
}

/// The device stages from the transceiver's rx to its tx, in order: one path, every device
/// stage on it.
fn chain(g: &Graph, ops: &[Op<'_>], ends: &[(End, End)]) -> Result<Vec<usize>, GraphErrors> {
    let t = ops.iter().position(|o| o.decl.domain() == Domain::Transceiver).expect("checked: one transceiver");
    let data_flows: Vec<usize> = (0..ends.len())
        .filter(|&i| ops[ends[i].0.op].decl.domain().on_data_path() && ops[ends[i].1.op].decl.domain().on_data_path())
        .collect();
    let line_of = |fi: usize| match &g.flows[fi].at {
        At::File { line, .. } => format!("line {line}"),
        _ => format!("flow {fi}"),
    };
    // Data flows by the port they leave, and by the port they enter.
    let mut leaving: HashMap<(usize, &str), Vec<usize>> = HashMap::new();
    let mut entering: HashMap<(usize, &str), Vec<usize>> = HashMap::new();
    for &fi in &data_flows {
        let (a, b) = ends[fi];
        leaving.entry((a.op, a.port.name)).or_default().push(fi);
        entering.entry((b.op, b.port.name)).or_default().push(fi);
    }
    let mut order = Vec::new();
    let mut on_chain = vec![false; ops.len()];
    let (mut op, mut port) = (t, "rx");
    loop {
        let out: &[usize] = leaving.get(&(op, port)).map_or(&[], Vec::as_slice);
        if out.len() > 1 {
            let lines: Vec<String> = out.iter().map(|&fi| line_of(fi)).collect();
            return Err(GraphError::new(
                g.flows[out[1]].at.clone(),
                format!(
                    "`{}.{port}` feeds {} device flows ({}); the fused chain is a single path",
                    ops[op].name,
                    out.len(),
                    abridged(&lines, ", ")
                ),
            )
            .into());
        }
        let Some(&fi) = out.first() else {
            // Checked before: every required port is connected, so this is a stage whose
            // output goes nowhere on the data path.
            return Err(GraphError::new(
                ops[op].at.clone(),
                format!("`{}.{port}` does not lead back to `{}` (the transceiver's tx)", ops[op].name, ops[t].name),
            )
            .into());
        };
        let next = ends[fi].1;
        let fan_in: &[usize] = entering.get(&(next.op, next.port.name)).map_or(&[], Vec::as_slice);
        if fan_in.len() > 1 {
            let lines: Vec<String> = fan_in.iter().map(|&f| line_of(f)).collect();
            return Err(GraphError::new(
                g.flows[fan_in[1]].at.clone(),
                format!(
                    "`{}.{}` is fed by {} device flows ({}); the fused chain is a single path",
                    ops[next.op].name,
                    next.port.name,
                    fan_in.len(),
                    abridged(&lines, ", ")
                ),
            )
            .into());
        }
        if next.op == t {
            break;
        }
        if on_chain[next.op] {
            return Err(GraphError::new(
                g.flows[fi].at.clone(),
                format!("device stage `{}` appears twice on the chain", ops[next.op].name),
            )
            .into());
        }
        on_chain[next.op] = true;
        order.push(next.op);
        op = next.op;
        port = match ops[op].decl.ports.iter().find(|p| p.dir == PortDir::Out && p.ty != ops::MsgType::MsgRecord) {
            Some(p) => p.name,
            None => {
                return Err(GraphError::new(
                    ops[op].at.clone(),
                    format!("device stage `{}` has no output port", ops[op].name),
                )
                .into())
            }
        };
    }
    if order.is_empty() {
        let fi = data_flows.first().copied().unwrap_or(0);
        return Err(GraphError::new(g.flows.get(fi).map_or(ops[t].at.clone(), |f| f.at.clone()), format!("no device stage between `{0}.rx` and `{0}.tx`: the transceiver would answer nothing; put a stage such as Echo between them", ops[t].name)).into());
    }
    for (i, o) in ops.iter().enumerate() {
        if o.decl.domain() == Domain::Device && !on_chain[i] {
            return Err(GraphError::new(
                o.at.clone(),
                format!("device stage `{}` is not on the path from `{1}.rx` to `{1}.tx`", o.name, ops[t].name),
            )
            .into());
        }
    }
    Ok(order)
}

impl Plan {
    /// Threads the run will start, with their cores: (thread, what it does, core).
    pub fn threads(&self) -> Vec<(String, String, Option<usize>)> {
        let mut t = Vec::new();
        match &self.peer {
            PeerMode::InProcess { .. } => {
                t.push(("fpga-sim".to_string(), "peer data plane (spins during a run)".to_string(), self.cores.peer));
                t.push(("fpga-sim-ecb".to_string(), "peer ECB register server".to_string(), None));
            }
            PeerMode::Process { .. } => t.push((
                "fpga-sim (process)".to_string(),
                "peer data plane, in its own process (spins during a run)".to_string(),
                self.cores.peer,
            )),
            PeerMode::Remote { .. } => {}
        }
        t.push(("rocelink-nic".into(), "software NIC engine (spins)".into(), self.cores.nic));
        let chain: Vec<&str> = self.chain.iter().map(|(n, _)| n.as_str()).collect();
        t.push((
            "rocelink-cpu".into(),
            format!("transceiver loop running {} (spins; the GPU backend runs it as a kernel)", chain.join(" -> ")),
            self.cores.backend,
        ));
        for (name, core) in self.settle_workers() {
            t.push((
                "qec-settle".into(),
                format!("{name}'s streaming work beside the loop (spins while rounds come; settle: beside)"),
                core,
            ));
        }
        if self.host_flows.iter().any(|f| f.from_tap) {
            t.push(("rocelink-tap".into(), "tap reader (follows the record ring every 1 ms)".into(), self.host_core));
        }
        for h in &self.host_ops {
            t.push((format!("op:{}", h.name), format!("{} ({})", h.decl.kind, h.decl.doc), h.core));
        }
        t.push(("main".into(), "drives the peer over ECB, progress, stop".into(), None));
        t
    }

    /// The CPU decoder stages that settle beside the loop, with their workers' cores (none on
    /// the GPU backend).
    pub fn settle_workers(&self) -> Vec<(&str, Option<usize>)> {
        if matches!(self.backend.backend, Ok(crate::settings::Backend::Gpu(_))) {
            return Vec::new();
        }
        self.chain
            .iter()
            .filter_map(|(n, s)| match s {
                StageSpec::QecDecoder { settle: Settle::Beside { core }, .. } => Some((n.as_str(), *core)),
                _ => None,
            })
            .collect()
    }

    /// Spinning threads sharing the machine during a run.
    pub fn spinners(&self) -> usize {
        let workers = self.settle_workers().len();
        workers
            + match self.peer {
                PeerMode::Remote { .. } => 2,
                _ => 3,
            }
    }

    /// The spin mode the run will use.
    pub fn spin_mode(&self) -> SpinMode {
        self.spin.mode(self.spinners(), self.spin_pause)
    }

    /// Bytes between RX slots: the message size (in a QEC graph, at least the replay's
    /// largest message) rounded up to 128 (DP_PAGE_INC units).
    pub fn slot_stride(&self) -> u32 {
        let size = self.qec.as_ref().and_then(QecRun::max_message_len).map_or(self.run.size, |m| m.max(self.run.size));
        (size.div_ceil(128) * 128) as u32
    }
}

fn core_name(c: Option<usize>) -> String {
    c.map_or("unpinned".into(), |c| format!("core {c}"))
}

impl fmt::Display for Plan {
    /// The plan as `rocelink check` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.graph;
        let mut s = String::new();
        let _ =
            writeln!(s, "graph `{}`{}: valid", g.name, g.file.as_ref().map(|f| format!(" ({f})")).unwrap_or_default());
        let r = &self.backend;
        let backend = match (&r.backend, &r.fallback) {
            (Ok(_), Some(why)) => format!("{:?}: the CPU on this machine ({why})", r.asked),
            (Ok(Backend::Cpu), None) => format!("{:?}", r.asked),
            (Ok(b @ Backend::GpuLaunchPerMessage(_)), None) => {
                format!("{:?}: {b} (a baseline: the CPU loop launches one kernel per message)", r.asked)
            }
            (Ok(b), None) => format!("{:?}: {b} on this machine", r.asked),
            (Err(why), _) => format!("{:?}: cannot run on this machine ({why}); `run` refuses it", r.asked),
        };
        let _ = writeln!(s, "  backend   {backend}");
        let nic = match &self.nic {
            NicPlan::Soft { wire: WireKind::Inproc, .. } => {
                "software NIC, inproc wire (lock-free rings between threads)".to_string()
            }
            NicPlan::Soft { wire: WireKind::Udp, bind } => format!(
                "software NIC, UDP wire on {}",
                bind.map_or("a fresh loopback address, port 4791".into(), |b| b.to_string())
            ),
            NicPlan::Verbs { device, port, gid_index } => {
                format!("verbs: {device} port {port} GID index {gid_index} (needs the `verbs` feature and a ConnectX)")
            }
        };
        let _ = writeln!(s, "  nic       {nic}");
        let qec = if self.qec.as_ref().is_some_and(|q| q.replay.is_some()) { ", replaying QEC syndromes" } else { "" };
        let peer = match &self.peer {
            PeerMode::InProcess { ip } => format!(
                "fpga-sim in this process at {}{qec}",
                ip.map_or("a fresh loopback address".into(), |i| i.to_string())
            ),
            PeerMode::Process { ip, .. } => format!(
                "fpga-sim as a separate process at {}{qec}",
                ip.map_or("a fresh loopback address".into(), |i| i.to_string())
            ),
            PeerMode::Remote { ecb, roce } => format!("an FPGA (or standalone fpga-sim): ECB {ecb}, RoCE {roce}"),
        };
        let _ = writeln!(s, "  peer      {peer}");
        let r = &self.run;
        let unit = if self.qec.is_some() { "shots" } else { "messages" };
        let stop = match r.stop {
            Stop::Count(n) => format!("{n} {unit}"),
            Stop::Duration(d) => format!("{d} s"),
        };
        let load = match (r.rate, r.round_cycle_us) {
            (Some(x), _) => format!("open loop at {x} messages/s (up to 64 in flight)"),
            (None, Some(us)) if us > 0.0 => {
                let clocks = qec::cycle_clocks(us);
                format!("a syndrome cycle of {us} us per round ({clocks} player clocks = {:.4} us; up to 64 messages in flight)", qec::clocks_ns(clocks as u32) / 1000.0)
            }
            (None, Some(_)) => "rounds as fast as 64 messages in flight allow".to_string(),
            (None, None) => "closed loop (one message in flight)".to_string(),
        };
        let size = if self.qec.is_some() {
            format!("RX slots of {} B", self.slot_stride())
        } else {
            format!("{} B per message", r.size)
        };
        let _ = writeln!(
            s,
            "  run       {stop}, {load}, {size}, {} warm-up {unit}, timeout {}",
            r.warmup,
            r.timeout
                .map_or("none (gives up after 10 s without an answer)".into(), |t| format!("{} s", t.as_secs_f64()))
        );
        if let Some(q) = &self.qec {
            match &q.replay {
                Some(rp) => {
                    let l = &rp.loaded;
                    let c = &rp.config;
                    let _ = writeln!(
                        s,
                        "  qec       replay {} ({} shots, {} detectors in {} rounds {:?}, {} observable(s), {}), DEM {}",
                        c.dets.display(),
                        l.shots(),
                        l.num_detectors(),
                        l.rounds_per_shot(),
                        l.detectors_per_round(),
                        l.num_observables(),
                        c.pred.as_ref().map_or("no reference prediction".to_string(), |p| format!("reference {}", p.display())),
                        c.dem.display()
                    );
                    let _ = writeln!(
                        s,
                        "            rounds per message {}: {} messages per shot, up to {} B; decoder `{}` on {}",
                        q.rounds_per_message,
                        l.messages_per_shot(q.rounds_per_message),
                        l.max_message_len(q.rounds_per_message),
                        q.decoder,
                        q.dem.display()
                    );
                }
                None => {
                    let _ = writeln!(s, "  qec       the peer's own replay (checked when the run starts), rounds per message {}; decoder `{}` on {}", q.rounds_per_message, q.decoder, q.dem.display());
                }
            }
        }
        let chain: Vec<String> = self.chain.iter().map(|(n, spec)| format!("{n} ({spec:?})")).collect();
        let t = &self.transceiver.0;
        let _ = writeln!(
            s,
            "\nfused stage chain (one transceiver loop, no queue between stages):\n  {t}.rx -> {} -> {t}.tx",
            chain.join(" -> ")
        );
        let _ = writeln!(s, "  StageSpecs: {:?}", self.chain.iter().map(|(_, s)| s).collect::<Vec<_>>());
        let _ = writeln!(
            s,
            "\nthreads (spin mode {}{}):",
            self.spin_mode(),
            if self.spin == Spin::Auto { ", chosen from the cores available" } else { "" }
        );
        for (name, what, core) in self.threads() {
            let _ = writeln!(s, "  {name:<20} {:<10} {what}", core_name(core));
        }
        let tc = &self.transceiver.1;
        let stride = self.slot_stride();
        let _ = writeln!(s, "\nrings:");
        let _ = writeln!(
            s,
            "  RX slots        {} x {stride} B (the peer writes slot k with RDMA WRITE with immediate)",
            tc.slots
        );
        let _ = writeln!(
            s,
            "  send/receive    128 WQEs each, 128 CQEs each (mlx5 layout), TX slots 128 x {} B",
            stride.max(64)
        );
        let rec = std::mem::size_of::<crate::abi::rl_msg_timestamp>() as u64;
        let _ = writeln!(
            s,
            "  tap ring        {} records x {rec} B ({} KiB), written by the data path without waiting",
            tc.tap_ring,
            u64::from(tc.tap_ring) * rec / 1024
        );
        for fl in &self.host_flows {
            let _ = writeln!(
                s,
                "  flow            {}: channel of {} messages, policy {}{}",
                fl.name(),
                fl.capacity,
                fl.policy.as_str(),
                if fl.from_tap { " (from the tap)" } else { "" }
            );
        }
        let _ = writeln!(s, "\nhost operators:");
        if self.host_ops.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for h in &self.host_ops {
            let params: Vec<String> = h.params.iter().map(|(n, v)| format!("{n}: {v}")).collect();
            let _ = writeln!(
                s,
                "  {} ({}) {}",
                h.name,
                h.decl.kind,
                if params.is_empty() { String::new() } else { format!("({})", params.join(", ")) }
            );
        }
        let _ = writeln!(
            s,
            "\noutputs: folder {}{}",
            self.out_dir.display(),
            self.json.as_ref().map(|j| format!(", run report {}", j.display())).unwrap_or_default()
        );
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {w}");
        }
        f.write_str(s.trim_end())
    }
}
