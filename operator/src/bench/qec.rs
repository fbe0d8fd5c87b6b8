//! The QEC benchmark (docs/qec.md; DESIGN.md "Measuring"): for every (code distance,
//! physical error rate, wire), in one process and one run, side by side:
//! 1. the plain echo round trip of the QEC messages' size on the same backend (the transport
//!    floor),
//! 2. the QEC decoder graph on the CPU backend,
//! 3. the same graph on the GPU backend (when a GPU is usable),
//!
//! each in closed loop (reaction latency, logical errors against PyMatching's on the same
//! shots, disagreements, overflows, throughput, the in-loop time of the final message), and
//! 4. PyMatching's own single-shot `decode()` latency on the same shots, when Python has it;
//!
//! and, at the fixtures `cycle_fixtures` names, the graph at a fixed syndrome cycle (open loop,
//! `cycle_rounds` rounds a message), each beside its floor: the echo of the same size at the
//! same message rate on the same backend and wire (what the transport alone keeps up with).
//!
//! The graphs are built in memory (the text of graphs/qec_d*.ron, compiled through the
//! library). Targets are data: the report says whether each holds; nothing fails on them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{utc_timestamp, Target};
use crate::backend::BackendKind;
use crate::echo::{run_echo, EchoConfig};
use crate::env::Environment;
use crate::graph::{self, qec::QecReport};
use crate::latency::Summary;
use crate::settings::{Cores, Spin, WireKind};

/// What to measure.
#[derive(Debug, Clone)]
pub struct QecBenchConfig {
    /// Code distances (fixtures `d<d>_p<p>` must exist).
    pub distances: Vec<u32>,
    /// Physical error rates as the fixtures spell them (`0.001`, `0.003`).
    pub ps: Vec<String>,
    pub wires: Vec<WireKind>,
    /// Backends to run the QEC graph on (the echo floor runs on each too). A GPU backend
    /// is skipped, with a note, when no GPU is usable.
    pub backends: Vec<BackendKind>,
    /// Shots per QEC run (after the warm-up); the echo floor makes as many round trips.
    pub shots: u32,
    /// Shots (and echo round trips) made first and left out of the latency figures.
    pub warmup: u32,
    /// The fixture folder (`<fixtures>/d<d>_p<p>/{model.dem,dets.b8,obs.01,pred.01}`).
    pub fixtures: PathBuf,
    /// The Python interpreter for the PyMatching row (`None`: skip it).
    pub python: Option<String>,
    pub out_dir: PathBuf,
    /// File name stem: `<name>.md`, `<name>.json`.
    pub name: String,
    /// Cores of the NIC engine, the transceiver loop and the peer, for every run (echo and
    /// QEC alike); a thread without one runs unpinned.
    pub cores: Cores,
    /// Spin policy of the polling threads (`Auto`: dedicated when every spinner has a core).
    pub spin: Spin,
    /// Dedicated spinners execute PAUSE between polls.
    pub spin_pause: bool,
    /// How the runs ring sends (`graph::RunOptions::doorbell`).
    pub doorbell: crate::nic::DoorbellMode,
    /// How the GPU runs' kernel is built (`graph::RunOptions::kernel`).
    pub kernel: crate::gpu::kernels::KernelOptions,
    /// Fixture folders (`d11_p0.001`) of the fixed-cycle runs, each on every backend and wire;
    /// empty: none.
    pub cycle_fixtures: Vec<String>,
    /// Rounds per message of the fixed-cycle runs.
    pub cycle_rounds: Vec<u32>,
    /// Microseconds per syndrome round of the fixed-cycle runs.
    pub cycle_us: f64,
    /// Where the CPU stage does its streaming work (the QecDecoder's `settle`, with the
    /// worker's core).
    pub cpu_settle: crate::stage::Settle,
}

impl Default for QecBenchConfig {
    fn default() -> Self {
        QecBenchConfig {
            distances: vec![3, 5],
            ps: vec!["0.001".into(), "0.003".into()],
            wires: vec![WireKind::Inproc, WireKind::Udp],
            backends: vec![BackendKind::Cpu, BackendKind::Gpu(0)],
            shots: 20_000,
            warmup: 500,
            fixtures: PathBuf::from("operator/tests/fixtures/qec"),
            python: Some("python3".into()),
            out_dir: PathBuf::from("latency-reports"),
            name: "bench-qec".into(),
            cores: Cores::default(),
            spin: Spin::Auto,
            spin_pause: false,
            doorbell: crate::nic::DoorbellMode::Proxy,
            kernel: crate::gpu::kernels::KernelOptions::default(),
            cycle_fixtures: Vec::new(),
            cycle_rounds: vec![1],
            cycle_us: 1.0,
            cpu_settle: crate::stage::Settle::InLoop,
        }
    }
}

/// Path names of the rows.
pub mod paths {
    pub const ECHO: &str = "echo (transport floor)";
    pub const QEC_CPU: &str = "qec decoder, cpu backend";
    pub const QEC_GPU: &str = "qec decoder, gpu backend";
}

/// One measured path for one (d, p, wire, backend).
#[derive(Debug, Clone, serde::Serialize)]
pub struct QecRow {
    pub distance: u32,
    pub p: String,
    pub wire: String,
    pub backend: String,
    pub path: String,
    /// Bytes per message (the largest QEC message; the echo uses that size).
    pub message_bytes: usize,
    /// Echo: full round trip; QEC: reaction latency (final round sent to correction back).
    pub latency_ns: Summary,
    /// For a QEC row: its p50 minus the echo p50 of the same wire and backend (ns).
    pub p50_over_echo_ns: Option<i64>,
    /// Shots decoded (QEC) or round trips received (echo).
    pub count: u64,
    pub lost: u64,
    pub qec: Option<QecFigures>,
    /// For a QEC row: the reaction latency plot (histogram + CDF), a file in the report's folder.
    pub svg: Option<String>,
    pub detail: String,
}

/// The decoding figures of a QEC row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QecFigures {
    pub shots_decoded: u64,
    pub logical_errors: u64,
    pub pymatching_logical_errors: Option<u64>,
    pub disagreements: Option<u64>,
    /// Disagreements on shots above the defect cap (the fallback).
    pub disagreements_on_overflow: Option<u64>,
    /// Disagreements of the exact matcher (equal-weight ties), counted not failed.
    pub disagreements_ties: Option<u64>,
    pub overflows: u64,
    pub unmatchable: u64,
    pub unanswered: u64,
    pub bad_answers: u64,
    pub throughput_rounds_per_us: Option<f64>,
    /// The transceiver loop's time for each shot's final message (the in-loop decode).
    pub final_round_loop_ns: Summary,
    pub other_rounds_loop_ns: Summary,
    /// The decoder's own decode time (its reports' decode_ns; %globaltimer in the GPU stage).
    pub decoder_time: Option<crate::hsb::DecoderTime>,
    pub rounds_per_shot: u32,
    pub messages_per_shot: u32,
}

/// One fixed-cycle run and its floor, for one (fixture, wire, backend, rounds per message).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CycleRow {
    pub fixture: String,
    pub distance: Option<u32>,
    pub p: Option<String>,
    pub wire: String,
    pub backend: String,
    pub rounds_per_message: u32,
    pub message_bytes: usize,
    pub cycle_us: f64,
    pub offered_rounds_per_us: Option<f64>,
    /// Decoded rounds per microsecond (first send to last correction, warm-up included).
    pub rounds_per_us: Option<f64>,
    pub keeps_up: Option<bool>,
    /// The floor: the echo of `message_bytes` at the cycle's message rate on the same backend
    /// and wire, as rounds per microsecond (its answers per microsecond times
    /// `rounds_per_message`).
    pub echo_rounds_per_us: Option<f64>,
    pub echo_keeps_up: Option<bool>,
    pub echo_lost: u64,
    pub echo_corrupted: u64,
    /// `rounds_per_us` over `echo_rounds_per_us`.
    pub of_floor: Option<f64>,
    pub reaction_ns: Summary,
    pub final_round_loop_ns: Summary,
    pub other_rounds_loop_ns: Summary,
    pub decoder_time: Option<crate::hsb::DecoderTime>,
    pub shots_sent: u64,
    pub shots_decoded: u64,
    pub logical_errors: u64,
    pub disagreements: Option<u64>,
    pub unanswered: u64,
    /// Answers with a non-OK status, by name.
    pub status: std::collections::BTreeMap<String, u64>,
}

/// The offline decoders on one fixture's shots, on this machine's CPU, one core each, one
/// after the other: PyMatching's single-shot `decode()` and its `decode_batch` (timed in
/// Python), and rocelink's exact CPU decoder on the whole shots (in this process, the path of
/// `rocelink decode`): the CPU decoder's time per shot beside PyMatching's in the same run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OfflineRow {
    pub distance: u32,
    pub p: String,
    pub available: bool,
    /// Why not, or the version.
    pub note: String,
    /// `decode()` calls timed (the fixture's shots in turn, as many as the run's shots).
    pub shots: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    /// PyMatching's `decode_batch` over the fixture's shots (`batch_shots`), the best of two
    /// passes, per shot.
    pub batch_shots: u64,
    pub batch_ns_per_shot: Option<f64>,
    /// rocelink's exact CPU decoder on the fixture's shots, each decoded whole: its own time
    /// per shot (no I/O), or why not.
    pub cpu_shots: u64,
    pub cpu_mean_ns: Option<f64>,
    pub cpu_p50_ns: Option<u64>,
    pub cpu_p99_ns: Option<u64>,
    pub cpu_note: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QecBenchEnv {
    #[serde(flatten)]
    pub machine: Environment,
    pub date_utc: String,
    pub mode: String,
    pub shots: u32,
    pub warmup: u32,
    pub distances: Vec<u32>,
    pub ps: Vec<String>,
    pub wires: Vec<String>,
    pub backends: Vec<String>,
    /// Backends asked for and skipped, with why.
    pub skipped: Vec<String>,
    /// Where the CPU stage does its streaming work: `in the loop`, or `beside the loop`.
    pub cpu_settle: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QecBenchReport {
    pub env: QecBenchEnv,
    pub rows: Vec<QecRow>,
    /// The offline decoders on each fixture's shots (CPU).
    pub offline: Vec<OfflineRow>,
    /// The fixed-cycle runs, each with its echo floor.
    pub cycles: Vec<CycleRow>,
    /// Targets at d=5 and d=11, p=0.1% (value in `ratio`, limit in `max_ratio`).
    pub targets: Vec<Target>,
    pub interrupted: bool,
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum QecBenchError {
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("{what}: {why}")]
    Run { what: String, why: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// The QEC graph of one fixture, as text (graphs/qec_d*.ron without the comments).
/// `load`: the graph's `run.load` (`ClosedLoop`, `RoundCycle(1.0)`); `rounds`: rounds per message.
#[allow(clippy::too_many_arguments)]
fn graph_text(
    fixture: &Path,
    label: &str,
    wire: WireKind,
    backend: BackendKind,
    cfg: &QecBenchConfig,
    outputs: &Path,
    load: &str,
    rounds: u32,
) -> String {
    let (shots, warmup) = (cfg.shots, cfg.warmup);
    let core = |c: Option<usize>| c.map_or("None".to_string(), |c| format!("Some({c})"));
    let (spin, spin_pause) = (format!("{:?}", cfg.spin), cfg.spin_pause);
    let (settle, settle_core) = match (backend, cfg.cpu_settle) {
        (BackendKind::Cpu, crate::stage::Settle::Beside { core: c }) => {
            ("beside", c.map_or(String::new(), |c| format!(", core: Some({c})")))
        }
        (BackendKind::Cpu, crate::stage::Settle::Idle) => ("idle", String::new()),
        _ => ("in_loop", String::new()),
    };
    let backend = format!("{backend:?}");
    let f = |name: &str| fixture.join(name).display().to_string().replace('\\', "/");
    let wire = match wire {
        WireKind::Inproc => "Inproc",
        WireKind::Udp => "Udp()",
    };
    format!(
        r#"Graph(
    name: "bench_qec_{name}",
    backend: {backend},
    nic: Soft(wire: {wire}),
    peer: FpgaSim(
        mode: InProcess,
        qec: (dem: "{dem}", dets: "{dets}", obs: "{obs}", pred: "{pred}", rounds_per_message: {rounds}),
    ),
    cores: (nic: {nic_core}, backend: {backend_core}, peer: {peer_core}, host: None, spin: {spin}, spin_pause: {spin_pause}),
    run: (stop: Count({count}), warmup: {warmup}, load: {load}, size: 64, timeout: None),
    outputs: (dir: "{out}"),
    operators: [
        (name: "roce", kind: "RoceTransceiver", params: (slots: {slots}, tap_ring: 131072)),
        (name: "decoder", kind: "QecDecoder"{settle_core}, params: (dem: "{dem}", rounds_per_message: {rounds}, max_defects: 12, decoders: 1, settle: {settle})),
        (name: "report", kind: "LatencyReport"),
    ],
    flows: [
        (from: "roce.rx", to: "decoder.in"),
        (from: "decoder.out", to: "roce.tx"),
        (from: "roce.tap", to: "report.in"),
    ],
)
"#,
        name = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect::<String>(),
        dem = f("model.dem"),
        dets = f("dets.b8"),
        obs = f("obs.01"),
        pred = f("pred.01"),
        count = shots + warmup,
        slots = crate::rings::DEFAULT_RX_SLOTS,
        nic_core = core(cfg.cores.nic),
        backend_core = core(cfg.cores.backend),
        peer_core = core(cfg.cores.peer),
        out = outputs.display().to_string().replace('\\', "/"),
    )
}

fn run_qec_graph(
    text: &str,
    label: &str,
    opts: &graph::RunOptions,
) -> Result<(QecReport, Vec<PathBuf>), QecBenchError> {
    let err = |why: String| QecBenchError::Run { what: label.to_string(), why };
    let g = graph::load::load_str(&format!("{label}.ron"), text, &[]).map_err(|e| err(e.to_string()))?;
    let plan = graph::compile(g).map_err(|e| err(e.to_string()))?;
    let r = graph::run(&plan, opts).map_err(|e| err(e.to_string()))?;
    if let Some(f) = &r.fault {
        return Err(err(format!("the run failed: {f}")));
    }
    let files = r.files.clone();
    r.qec.map(|q| (q, files)).ok_or_else(|| err("the run has no qec section".into()))
}

/// Runs every (d, p, wire, backend) and writes `<out>/<name>.md` and `.json`.
pub fn run_bench_qec(cfg: &QecBenchConfig) -> Result<QecBenchReport, QecBenchError> {
    if cfg.distances.is_empty() || cfg.ps.is_empty() || cfg.wires.is_empty() || cfg.backends.is_empty() {
        return Err(QecBenchError::Config("at least one distance, p, wire and backend".into()));
    }
    if cfg.shots == 0 {
        return Err(QecBenchError::Config("--shots must be at least 1".into()));
    }
    if cfg.name.is_empty() || cfg.name.contains(['/', '\\']) {
        return Err(QecBenchError::Config(format!("report name `{}` must be a non-empty file name", cfg.name)));
    }
    for &d in &cfg.distances {
        for p in &cfg.ps {
            let dir = cfg.fixtures.join(format!("d{d}_p{p}"));
            if !dir.join("dets.b8").is_file() {
                return Err(QecBenchError::Config(format!("no fixture {} (d={d}, p={p})", dir.display())));
            }
        }
    }
    for f in &cfg.cycle_fixtures {
        if !cfg.fixtures.join(f).join("dets.b8").is_file() {
            return Err(QecBenchError::Config(format!(
                "no fixture {} for the fixed-cycle runs",
                cfg.fixtures.join(f).display()
            )));
        }
    }
    if !cfg.cycle_fixtures.is_empty() {
        if cfg.cycle_rounds.is_empty() || cfg.cycle_rounds.contains(&0) {
            return Err(QecBenchError::Config("--cycle-rounds: at least one, each at least 1 round a message".into()));
        }
        if !(cfg.cycle_us > 0.0 && cfg.cycle_us.is_finite()) {
            return Err(QecBenchError::Config(format!(
                "--cycle-us {} must be a positive number of microseconds",
                cfg.cycle_us
            )));
        }
    }
    let date_utc = utc_timestamp(std::time::SystemTime::now());
    let mut skipped = Vec::new();
    let mut backends = Vec::new();
    for &b in &cfg.backends {
        if !matches!(b, BackendKind::Cpu | BackendKind::Gpu(_)) {
            return Err(QecBenchError::Config(format!("backend {b}: bench-qec runs cpu or gpu:N")));
        }
        match crate::backend::resolve(b, &[]).backend {
            Ok(_) => backends.push(b),
            Err(why) => skipped.push(format!("{b}: {why}")),
        }
    }
    let wires: Vec<String> = cfg.wires.iter().map(|w| w.as_str().to_string()).collect();
    let backend_names: Vec<String> = backends.iter().map(ToString::to_string).collect();
    // the policy as asked (each run resolves `auto` itself), with the PAUSE choice as run modes name it
    let spin = format!("{}{}", cfg.spin, if cfg.spin_pause { "+pause" } else { "" });
    let mut machine = Environment::here(&backend_names.join(", "), &wires.join(", "), 0, &spin);
    let settle_core = match cfg.cpu_settle {
        crate::stage::Settle::Beside { core } => core,
        crate::stage::Settle::InLoop | crate::stage::Settle::Idle => None,
    };
    for (role, core) in [
        ("nic", cfg.cores.nic),
        ("backend", cfg.cores.backend),
        ("peer", cfg.cores.peer),
        ("cpu settle worker", settle_core),
    ] {
        if let Some(core) = core {
            machine.pinned.insert(role.to_string(), core.to_string());
        }
    }
    if let Some(&BackendKind::Gpu(n)) = backends.iter().find(|b| matches!(b, BackendKind::Gpu(_))) {
        if let Ok(gpu) = crate::gpu::Gpu::open(n) {
            machine.gpu = Some(gpu.info.describe());
        }
    }
    let scratch = std::env::temp_dir().join(format!(
        "rocelink-bench-qec-{}-{}",
        std::process::id(),
        rocelink_link::clock::monotonic_ns()
    ));

    let mut rows = Vec::new();
    let mut offline = Vec::new();
    let mut interrupted = false;
    let mut svgs = Vec::new();
    'all: for &d in &cfg.distances {
        for p in &cfg.ps {
            let fixture = cfg.fixtures.join(format!("d{d}_p{p}"));
            for &wire in &cfg.wires {
                for &backend in &backends {
                    if crate::interrupted() {
                        interrupted = true;
                        break 'all;
                    }
                    let label = format!("d{d}_p{p}-{}-{}", wire.as_str(), backend.to_string().replace(':', ""));
                    tracing::info!("bench-qec: {label}: qec graph");
                    let text = graph_text(&fixture, &label, wire, backend, cfg, &scratch.join(&label), "ClosedLoop", 1);
                    let (q, run_files) = run_qec_graph(
                        &text,
                        &label,
                        &graph::RunOptions { progress: false, doorbell: cfg.doorbell, kernel: cfg.kernel.clone() },
                    )?;
                    // The graph's LatencyReport drew the reaction latency (histogram + CDF).
                    let mut svg = None;
                    if let Some(f) = run_files.iter().find(|f| f.extension().is_some_and(|e| e == "svg")) {
                        let name = format!("{}-{label}.svg", cfg.name);
                        std::fs::create_dir_all(&cfg.out_dir)
                            .and_then(|_| std::fs::copy(f, cfg.out_dir.join(&name)))
                            .map_err(|source| QecBenchError::Io {
                            what: format!("copying {} into {}", f.display(), cfg.out_dir.display()),
                            source,
                        })?;
                        svgs.push(cfg.out_dir.join(&name));
                        svg = Some(name);
                    }
                    let size = (q.max_message_bytes as usize).clamp(24, 4096);
                    tracing::info!("bench-qec: {label}: echo floor, {size} B");
                    let e = echo_floor(cfg, &label, wire, backend, size, 1, None)?;
                    let echo_p50 = e.rtt_ns.p50;
                    rows.push(QecRow {
                        distance: d,
                        p: p.clone(),
                        wire: wire.as_str().into(),
                        backend: backend.to_string(),
                        path: paths::ECHO.into(),
                        message_bytes: size,
                        latency_ns: e.rtt_ns,
                        p50_over_echo_ns: None,
                        count: e.counts.received,
                        lost: e.counts.lost,
                        qec: None,
                        svg: None,
                        detail: format!("{}, backend {}", e.env.wire, e.env.backend),
                    });
                    let ties = match (q.disagreements, q.disagreements_on_overflow) {
                        (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                        _ => None,
                    };
                    rows.push(QecRow {
                        distance: d,
                        p: p.clone(),
                        wire: wire.as_str().into(),
                        backend: backend.to_string(),
                        path: if backend == BackendKind::Cpu { paths::QEC_CPU.into() } else { paths::QEC_GPU.into() },
                        message_bytes: size,
                        latency_ns: q.reaction_ns,
                        p50_over_echo_ns: Some(q.reaction_ns.p50 as i64 - echo_p50 as i64),
                        count: q.shots_decoded,
                        lost: q.shots_sent.saturating_sub(q.shots_decoded),
                        qec: Some(QecFigures {
                            shots_decoded: q.shots_decoded,
                            logical_errors: q.logical_errors,
                            pymatching_logical_errors: q.reference_logical_errors,
                            disagreements: q.disagreements,
                            disagreements_on_overflow: q.disagreements_on_overflow,
                            disagreements_ties: ties,
                            overflows: q.overflows,
                            unmatchable: q.unmatchable,
                            unanswered: q.unanswered,
                            bad_answers: q.bad_answers,
                            throughput_rounds_per_us: q.throughput_rounds_per_us,
                            final_round_loop_ns: q.final_round_loop_ns,
                            other_rounds_loop_ns: q.other_rounds_loop_ns,
                            decoder_time: q.decoder_time,
                            rounds_per_shot: q.rounds_per_shot,
                            messages_per_shot: q.messages_per_shot,
                        }),
                        svg,
                        detail: format!(
                            "{} detectors, {} rounds per shot, {} message(s) per shot, dem {}",
                            q.detectors, q.rounds_per_shot, q.messages_per_shot, q.dem
                        ),
                    });
                }
            }
            offline.push(offline_row(cfg, d, p, &fixture, &scratch));
        }
    }
    let mut cycles = Vec::new();
    'cycles: for f in &cfg.cycle_fixtures {
        for &wire in &cfg.wires {
            for &backend in &backends {
                for &r in &cfg.cycle_rounds {
                    if interrupted || crate::interrupted() {
                        interrupted = true;
                        break 'cycles;
                    }
                    cycles.push(cycle_row(cfg, f, wire, backend, r, &scratch)?);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    interrupted |= crate::interrupted();
    let targets = targets(&rows, &cycles);
    let mut report = QecBenchReport {
        env: QecBenchEnv {
            machine,
            date_utc,
            mode: "closed-loop".into(),
            shots: cfg.shots,
            warmup: cfg.warmup,
            distances: cfg.distances.clone(),
            ps: cfg.ps.clone(),
            wires,
            backends: backend_names,
            skipped,
            cpu_settle: match cfg.cpu_settle {
                crate::stage::Settle::InLoop => "in the loop".into(),
                crate::stage::Settle::Idle => "in the loop's idle time (after the acknowledgement)".into(),
                crate::stage::Settle::Beside { .. } => "beside the loop (a worker thread)".into(),
            },
        },
        rows,
        offline,
        cycles,
        targets,
        interrupted,
        files: Vec::new(),
    };
    report.files = write(&report, &cfg.out_dir, &cfg.name).map_err(|source| QecBenchError::Io {
        what: format!("writing the reports into {}", cfg.out_dir.display()),
        source,
    })?;
    report.files.extend(svgs);
    Ok(report)
}

/// The echo floor of a QEC run: `size`-byte round trips on the same backend, wire, cores and
/// kernel, as many messages as the run's shots and warm-up make at `per_shot` messages each,
/// closed loop or at `rate` messages per second.
#[allow(clippy::too_many_arguments)]
fn echo_floor(
    cfg: &QecBenchConfig,
    label: &str,
    wire: WireKind,
    backend: BackendKind,
    size: usize,
    per_shot: u32,
    rate: Option<f64>,
) -> Result<crate::echo::EchoReport, QecBenchError> {
    let echo_cfg = EchoConfig {
        wire,
        count: (cfg.shots + cfg.warmup).saturating_mul(per_shot),
        size,
        rate,
        warmup: cfg.warmup.saturating_mul(per_shot),
        backend,
        cores: cfg.cores,
        spin: cfg.spin,
        spin_pause: cfg.spin_pause,
        doorbell: cfg.doorbell,
        kernel: cfg.kernel.clone(),
        ..EchoConfig::default()
    };
    run_echo(&echo_cfg).map_err(|x| QecBenchError::Run { what: format!("{label}: echo floor"), why: x.to_string() })
}

/// `d11_p0.001` as (11, "0.001").
fn fixture_point(name: &str) -> Option<(u32, String)> {
    let (d, p) = name.strip_prefix('d')?.split_once("_p")?;
    Some((d.parse().ok()?, p.to_string()))
}

/// The fixed-cycle run of fixture `f` at `rounds` rounds a message, then its floor: the echo of
/// the same size at the same message rate, as many messages.
fn cycle_row(
    cfg: &QecBenchConfig,
    f: &str,
    wire: WireKind,
    backend: BackendKind,
    rounds: u32,
    scratch: &Path,
) -> Result<CycleRow, QecBenchError> {
    let label = format!("cycle-{f}-{}-{}-r{rounds}", wire.as_str(), backend.to_string().replace(':', ""));
    tracing::info!("bench-qec: {label}: qec graph at {} us a round", cfg.cycle_us);
    let text = graph_text(
        &cfg.fixtures.join(f),
        &label,
        wire,
        backend,
        cfg,
        &scratch.join(&label),
        &format!("RoundCycle({:?})", cfg.cycle_us),
        rounds,
    );
    let (q, _) = run_qec_graph(
        &text,
        &label,
        &graph::RunOptions { progress: false, doorbell: cfg.doorbell, kernel: cfg.kernel.clone() },
    )?;
    let size = (q.max_message_bytes as usize).clamp(24, 4096);
    let per_shot = q.messages_per_shot.max(1);
    let rate = 1e6 / (cfg.cycle_us * f64::from(rounds));
    tracing::info!("bench-qec: {label}: echo floor, {size} B at {rate:.0} messages/s");
    let e = echo_floor(cfg, &label, wire, backend, size, per_shot, Some(rate))?;
    let echo = e.rate_achieved;
    let echo_rounds = echo.map(|a| a.achieved_per_us * f64::from(rounds));
    let point = fixture_point(f);
    Ok(CycleRow {
        fixture: f.to_string(),
        distance: point.as_ref().map(|p| p.0),
        p: point.map(|p| p.1),
        wire: wire.as_str().into(),
        backend: backend.to_string(),
        rounds_per_message: rounds,
        message_bytes: size,
        cycle_us: cfg.cycle_us,
        offered_rounds_per_us: q.offered_rounds_per_us,
        rounds_per_us: q.throughput_rounds_per_us,
        keeps_up: q.keeps_up,
        echo_rounds_per_us: echo_rounds,
        echo_keeps_up: echo.map(|a| a.keeps_up),
        echo_lost: e.counts.lost,
        echo_corrupted: e.counts.corrupted,
        of_floor: match (q.throughput_rounds_per_us, echo_rounds) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        },
        reaction_ns: q.reaction_ns,
        final_round_loop_ns: q.final_round_loop_ns,
        other_rounds_loop_ns: q.other_rounds_loop_ns,
        decoder_time: q.decoder_time,
        shots_sent: q.shots_sent,
        shots_decoded: q.shots_decoded,
        logical_errors: q.logical_errors,
        disagreements: q.disagreements,
        unanswered: q.unanswered,
        status: q.status.clone(),
    })
}

/// The targets, on every backend measured there: at d=5, p=0.1% (decode time, reaction over
/// the echo floor, throughput, agreement with the exact matcher) and at d=11, p=0.1% (the
/// final round's decode p99 within 1 us, reaction within 1 us of the echo, one round per
/// microsecond at a 1 us cycle with a round a message).
fn targets(rows: &[QecRow], cycles: &[CycleRow]) -> Vec<Target> {
    // one target of row `r` (a row at p = 0.1%): met when the value is at most `max`
    let target = |r: &QecRow, what: String, max: f64, value: Option<f64>| Target {
        path: r.path.clone(),
        wire: r.wire.clone(),
        size: r.message_bytes,
        what: format!("d={}, p=0.1%: {what}", r.distance),
        max_ratio: max,
        ratio: value,
        met: value.is_some_and(|v| v.is_finite() && v <= max),
    };
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.distance == 11 && r.p == "0.001") {
        let Some(q) = &r.qec else { continue };
        let t = |what: &str, max: f64, value: Option<f64>| target(r, what.to_string(), max, value);
        out.push(t(
            "final-round decode p99 <= 1 us, the decoder's own time (its reports' decode_ns; value in us)",
            1.0,
            q.decoder_time.map(|d| d.p99_ns as f64 / 1000.0),
        ));
        if r.wire == "inproc" {
            out.push(t(
                "reaction p50 <= echo p50 + 1 us (value: difference in us)",
                1.0,
                r.p50_over_echo_ns.map(|d| d as f64 / 1000.0),
            ));
        }
        let backend = r.backend.clone();
        for c in cycles.iter().filter(|c| {
            c.distance == Some(11)
                && c.p.as_deref() == Some("0.001")
                && c.wire == r.wire
                && c.backend == backend
                && c.rounds_per_message == 1
                && c.cycle_us == 1.0
        }) {
            let floor = c.echo_rounds_per_us.map_or("-".into(), |f| format!("{:.3} us", 1.0 / f));
            out.push(t(&format!("keeps up with a 1 us cycle at a round a message: >= 1 round/us (value: us per round; the echo floor at the same rate {floor})"), 1.0, c.rounds_per_us.filter(|&x| x > 0.0).map(|x| 1.0 / x)));
        }
    }
    for r in rows.iter().filter(|r| r.distance == 5 && r.p == "0.001") {
        let Some(q) = &r.qec else { continue };
        let t = |what: &str, max: f64, value: Option<f64>| target(r, what.to_string(), max, value);
        out.push(t(
            "decode p99 <= 2 us, the decoder's own time (its reports' decode_ns; value in us)",
            2.0,
            q.decoder_time.map(|d| d.p99_ns as f64 / 1000.0),
        ));
        out.push(t(
            "the same with the transceiver loop's own work: final message's loop time p99 <= 2 us (value in us)",
            2.0,
            Some(q.final_round_loop_ns.p99 as f64 / 1000.0),
        ));
        if r.wire == "inproc" {
            out.push(t(
                "reaction p50 <= echo p50 + 1 us (value: difference in us)",
                1.0,
                r.p50_over_echo_ns.map(|d| d as f64 / 1000.0),
            ));
        }
        // keeps one round per us: 1 / throughput <= 1 us per round
        out.push(t("closed-loop throughput >= 1 round/us (value: us per round; one message in flight, so bounded by the round trip: the fixed-cycle runs are the keep-up test)", 1.0, q.throughput_rounds_per_us.filter(|&x| x > 0.0).map(|x| 1.0 / x)));
        out.push(t(
            "disagreements beyond overflows = 0 (value: ties, exact-matcher disagreements)",
            0.0,
            q.disagreements_ties.map(|x| x as f64),
        ));
    }
    out
}

/// PyMatching's single-shot decode() over the fixture's shots and its decode_batch over all of
/// them (best of two passes), timed in Python.
const PY_SNIPPET: &str = r#"
import sys, time
import numpy as np
import pymatching
dem, dets, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = pymatching.Matching.from_detector_error_model_file(dem)
nd = m.num_detectors
nb = (nd + 7) // 8
raw = np.fromfile(dets, dtype=np.uint8)
shots = np.unpackbits(raw.reshape(-1, nb), axis=1, bitorder="little")[:, :nd]
for k in range(min(200, len(shots))):
    m.decode(shots[k])
ts = []
for k in range(n):
    s = shots[k % len(shots)]
    t0 = time.perf_counter_ns()
    m.decode(s)
    ts.append(time.perf_counter_ns() - t0)
ts.sort()
q = lambda f: ts[min(len(ts) - 1, int(f * len(ts)))]
best = None
for _ in range(2):
    t0 = time.perf_counter_ns()
    m.decode_batch(shots)
    t = time.perf_counter_ns() - t0
    best = t if best is None else min(best, t)
print(pymatching.__version__, len(ts), q(0.5), q(0.99), len(shots), best)
"#;

fn offline_row(cfg: &QecBenchConfig, d: u32, p: &str, fixture: &Path, scratch: &Path) -> OfflineRow {
    let mut row = OfflineRow {
        distance: d,
        p: p.into(),
        available: false,
        note: "not available".into(),
        shots: 0,
        p50_ns: None,
        p99_ns: None,
        batch_shots: 0,
        batch_ns_per_shot: None,
        cpu_shots: 0,
        cpu_mean_ns: None,
        cpu_p50_ns: None,
        cpu_p99_ns: None,
        cpu_note: String::new(),
    };
    // rocelink's exact decoder first, alone on the machine (the graphs' threads are gone)
    let out = scratch.join(format!("offline-d{d}_p{p}.01"));
    let decoded = std::fs::create_dir_all(scratch).map_err(|e| e.to_string()).and_then(|_| {
        crate::qec::predict(
            &fixture.join("model.dem"),
            &fixture.join("dets.b8"),
            crate::qec::ShotFormat::B8,
            &out,
            crate::qec::ShotFormat::Zero1,
            None,
        )
        .map_err(|e| e.to_string())
    });
    let _ = std::fs::remove_file(&out);
    match decoded {
        Ok(st) => {
            row.cpu_shots = st.shots;
            row.cpu_mean_ns = Some(st.mean_decode_ns());
            row.cpu_p50_ns = Some(st.decode_ns_p50);
            row.cpu_p99_ns = Some(st.decode_ns_p99);
            row.cpu_note = "rocelink exact CPU decoder, whole shots, its own time per shot".into();
        }
        Err(why) => row.cpu_note = format!("not measured ({why})"),
    }
    let Some(py) = &cfg.python else {
        row.note = "not available (skipped)".into();
        return row;
    };
    let probe = std::process::Command::new(py).args(["-c", "import pymatching"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        row.note = format!("not available (`{py} -c 'import pymatching'` failed)");
        return row;
    }
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(PY_SNIPPET)
        .arg(fixture.join("model.dem"))
        .arg(fixture.join("dets.b8"))
        .arg(cfg.shots.max(1).to_string())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let f: Vec<&str> = text.split_whitespace().collect();
            if f.len() == 6 {
                row.available = true;
                row.note = format!(
                    "pymatching {}, Matching.decode per shot and decode_batch (best of two), time.perf_counter_ns",
                    f[0]
                );
                row.shots = f[1].parse().unwrap_or(0);
                row.p50_ns = f[2].parse().ok();
                row.p99_ns = f[3].parse().ok();
                row.batch_shots = f[4].parse().unwrap_or(0);
                row.batch_ns_per_shot =
                    f[5].parse::<f64>().ok().filter(|_| row.batch_shots > 0).map(|t| t / row.batch_shots as f64);
            } else {
                row.note = format!("not available (unexpected output `{}`)", text.trim());
            }
        }
        Ok(o) => {
            row.note =
                format!("not available ({})", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("failed"))
        }
        Err(e) => row.note = format!("not available ({e})"),
    }
    row
}

/// The 95% Wilson score interval of `k` events in `n` trials.
pub fn wilson95(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (z, n, ph) = (1.96f64, n as f64, k as f64 / n as f64);
    let den = 1.0 + z * z / n;
    let centre = (ph + z * z / (2.0 * n)) / den;
    let half = z * (ph * (1.0 - ph) / n + z * z / (4.0 * n * n)).sqrt() / den;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// `k` with its rate's 95% interval, as the Decoding table shows it.
fn with_interval(k: u64, n: u64) -> String {
    let (lo, hi) = wilson95(k, n);
    let e = |x: f64| if x == 0.0 { "0".to_string() } else { format!("{x:.1e}") };
    format!("{k} ({}-{})", e(lo), e(hi))
}

use crate::latency::us;

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |x| x.to_string())
}

/// The Markdown report.
pub fn markdown(r: &QecBenchReport, name: &str) -> String {
    let e = &r.env;
    let m = &e.machine;
    let mut s = String::new();
    let _ = writeln!(s, "# rocelink QEC benchmark: {name}\n");
    let _ = writeln!(
        s,
        "Closed loop, {} shots per QEC run after {} warm-up shots; the echo floor makes as many full round trips of the \
         QEC messages' size on the same backend and wire, right after. QEC latency is the **reaction latency** (final round \
         sent to correction back, a full round trip), in microseconds.\n",
        e.shots, e.warmup
    );
    if r.interrupted {
        let _ = writeln!(s, "**Interrupted**: the rows cover what was measured before the interrupt.\n");
    }
    let rows = [
        ("backends", e.backends.join(", ")),
        ("skipped", if e.skipped.is_empty() { "none".into() } else { e.skipped.join("; ") }),
        ("wires", e.wires.join(", ")),
        ("distances", e.distances.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        ("p", e.ps.join(", ")),
        ("cpu stage's streaming work", e.cpu_settle.clone()),
        ("spin mode", m.spin_mode.clone()),
        ("pinned cores", m.pinned_text()),
    ];
    crate::env::write_markdown(&mut s, &e.date_utc, m, &rows);

    let _ = writeln!(s, "\n## Latency (us)\n");
    let _ = writeln!(s, "| d | p | wire | backend | path | size (B) | count | min | p50 | p90 | p99 | p99.9 | max | p50 - echo p50 | lost |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in &r.rows {
        let l = &row.latency_ns;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.distance,
            row.p,
            row.wire,
            row.backend,
            row.path,
            row.message_bytes,
            l.count,
            us(l.min),
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            us(l.max),
            row.p50_over_echo_ns.map_or("-".into(), |d| format!("{:+.2}", d as f64 / 1000.0)),
            row.lost
        );
    }

    let _ = writeln!(s, "\n## Decoding\n");
    let _ = writeln!(s, "Logical errors: against the shots' true observables, rocelink's and PyMatching's on the same shots, each with its rate's 95% (Wilson) interval. Decode time: the decoder's own for the final round (its decode reports' decode_ns: %globaltimer inside the GPU stage, the clock in the CPU stage; every decoded shot). In-loop: the transceiver loop's time for the message (CQE seen to doorbell), the decode plus the loop's own work: for a shot's final message, and for each other message (a round's streaming work, per round at a round a message).\n");
    let _ = writeln!(s, "| d | p | wire | backend | shots | logical errors | PyMatching's | disagreements | on overflow | ties | overflows | throughput (rounds/us) | decode time p50 / p99 / max (us) | in-loop final msg p50 / p99 (us) | in-loop other msgs p50 / p99 (us) |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in &r.rows {
        let Some(q) = &row.qec else { continue };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
            row.distance,
            row.p,
            row.wire,
            row.backend,
            q.shots_decoded,
            with_interval(q.logical_errors, q.shots_decoded),
            q.pymatching_logical_errors.map_or("-".into(), |k| with_interval(k, q.shots_decoded)),
            opt(&q.disagreements),
            opt(&q.disagreements_on_overflow),
            opt(&q.disagreements_ties),
            q.overflows,
            q.throughput_rounds_per_us.map_or("-".into(), |t| format!("{t:.3}")),
            q.decoder_time.map_or("-".into(), |d| format!(
                "{} / {} / {}",
                us(d.p50_ns.into()),
                us(d.p99_ns.into()),
                us(d.max_ns.into())
            )),
            us(q.final_round_loop_ns.p50),
            us(q.final_round_loop_ns.p99),
            us(q.other_rounds_loop_ns.p50),
            us(q.other_rounds_loop_ns.p99)
        );
    }

    let _ = writeln!(s, "\n## Offline decode on the same shots (CPU, one core)\n");
    let _ = writeln!(
        s,
        "Each fixture's shots decoded whole, one decoder after the other on this machine's CPU: PyMatching's single-shot \
         `decode()` from Python and its `decode_batch` (the best of two passes, per shot), and rocelink's exact CPU decoder \
         (`rocelink decode`'s path, its own time per shot, no I/O). In us.\n"
    );
    let _ = writeln!(
        s,
        "| d | p | PyMatching decode() shots | p50 | p99 | PyMatching decode_batch shots | per shot | rocelink cpu shots | mean | p50 | p99 | rocelink mean / decode_batch | note |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let f2 = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2}", v / 1000.0));
    for o in &r.offline {
        let ratio = match (o.cpu_mean_ns, o.batch_ns_per_shot) {
            (Some(c), Some(b)) if b > 0.0 => format!("{:.2}x", c / b),
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}; {} |",
            o.distance,
            o.p,
            o.shots,
            o.p50_ns.map_or("-".into(), us),
            o.p99_ns.map_or("-".into(), us),
            o.batch_shots,
            f2(o.batch_ns_per_shot),
            o.cpu_shots,
            f2(o.cpu_mean_ns),
            o.cpu_p50_ns.map_or("-".into(), us),
            o.cpu_p99_ns.map_or("-".into(), us),
            ratio,
            o.note,
            o.cpu_note
        );
    }

    let plots: Vec<&QecRow> = r.rows.iter().filter(|row| row.svg.is_some()).collect();
    if !plots.is_empty() {
        let _ = writeln!(s, "\n## Reaction latency plots\n");
        for row in plots {
            let _ = writeln!(
                s,
                "- d={} p={} {} {}: ![reaction latency]({})",
                row.distance,
                row.p,
                row.wire,
                row.backend,
                row.svg.as_deref().unwrap_or_default()
            );
        }
    }

    if !r.cycles.is_empty() {
        let _ = writeln!(s, "\n## Keeping up with a fixed syndrome cycle\n");
        let _ = writeln!(
            s,
            "Open loop: the peer sends a message every rounds-per-message x cycle, up to 64 in flight; rounds per us are the \
             decoded rounds over the first send to the last correction (warm-up included; keeping up means 95% of the offered). \
             The floor is the echo of the same size at the same message rate on the same backend and wire, right after: \
             its answers per us times the rounds a message. Loop times: the transceiver loop's (CQE seen to doorbell), in us.\n"
        );
        let _ = writeln!(s, "| fixture | wire | backend | rounds/msg | size (B) | offered rounds/us | rounds/us | keeps up | echo floor rounds/us | floor keeps up | of floor | loop, other msgs p50 / p99 | loop, final msg p50 / p99 | decode p50 / p99 | reaction p50 | shots decoded / sent | non-OK answers |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let f3 = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
        let yn = |v: Option<bool>| v.map_or("-", |k| if k { "yes" } else { "**no**" });
        // a message a shot has no other messages: no zeros that read like figures
        let pair = |l: &Summary| if l.count == 0 { "-".to_string() } else { format!("{} / {}", us(l.p50), us(l.p99)) };
        for c in &r.cycles {
            let status: Vec<String> = c.status.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
                c.fixture,
                c.wire,
                c.backend,
                c.rounds_per_message,
                c.message_bytes,
                f3(c.offered_rounds_per_us),
                f3(c.rounds_per_us),
                yn(c.keeps_up),
                f3(c.echo_rounds_per_us),
                yn(c.echo_keeps_up),
                c.of_floor.map_or("-".into(), |v| format!("{v:.2}")),
                pair(&c.other_rounds_loop_ns),
                pair(&c.final_round_loop_ns),
                c.decoder_time.map_or("-".into(), |d| format!("{} / {}", us(d.p50_ns.into()), us(d.p99_ns.into()))),
                us(c.reaction_ns.p50),
                c.shots_decoded,
                c.shots_sent,
                if status.is_empty() { "none".into() } else { status.join(", ") }
            );
        }
    }

    let _ = writeln!(s, "\n## Targets (data, not assertions)\n");
    if r.targets.is_empty() {
        let _ = writeln!(s, "None measured (neither d=5 nor d=11 at p=0.001 in this run).");
    } else {
        let _ = writeln!(s, "| path | wire | target | value | met |\n|---|---|---|---|---|");
        for t in &r.targets {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                t.path,
                t.wire,
                t.what,
                t.ratio.map_or("-".into(), |v| format!("{v:.3}")),
                if t.met { "yes" } else { "**no**" }
            );
        }
    }
    s
}

/// Writes `<dir>/<name>.md` and `<dir>/<name>.json`; returns the paths.
pub fn write(r: &QecBenchReport, dir: &Path, name: &str) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let md = dir.join(format!("{name}.md"));
    std::fs::write(&md, markdown(r, name))?;
    let json = dir.join(format!("{name}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(r).map_err(std::io::Error::other)? + "\n")?;
    Ok(vec![md, json])
}

#[cfg(test)]
mod tests {
    use super::wilson95;

    #[test]
    fn wilson_intervals_as_the_decoder_benchmark_prints_them() {
        // scripts/bench_decoders.py's figures for the same counts (qec-decoders.md)
        let (lo, hi) = wilson95(12, 10_000);
        assert_eq!((format!("{lo:.1e}"), format!("{hi:.1e}")), ("6.9e-4".into(), "2.1e-3".into()));
        let (lo, hi) = wilson95(0, 5000);
        assert_eq!((lo, format!("{hi:.1e}")), (0.0, "7.7e-4".into()));
        // no trials: nothing known
        assert_eq!(wilson95(0, 0), (0.0, 1.0));
        // the interval holds the rate
        let (lo, hi) = wilson95(445, 100_000);
        assert!(lo < 445e-5 && 445e-5 < hi && hi - lo < 1e-3);
    }
}
