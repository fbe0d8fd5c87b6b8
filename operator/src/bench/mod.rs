//! The latency benchmark (docs/perf.md, DESIGN.md "Measuring"): for every wire and payload size,
//! the wire's floor measured in this process, then the CPU-backend echo run (closed loop)
//! right after it, side by side with their ratio, written as Markdown, JSON and SVG.
//!
//! A report is a list of rows, one per (path, wire, size). A path is what carried the round
//! trip: a floor (`floor: ...`), the CPU backend, and later the GPU paths (the mapped-memory
//! ping-pong kernel as their floor, a kernel launch per message, the persistent kernel).
//! A floor row names the path it bounds in `floor_of`; a measured row gives its ratio to its
//! floor in `vs_floor`. Targets are data: the report says whether each holds, and nothing
//! here fails because one does not.
//!
//! A floor measured several ways is the best of them (`floors::best_of`); the report lists
//! every variant's figures in `floor_variants` and names the chosen one. A measured path whose
//! p50 is below its floor's is a floor error (`vs_floor.floor_error`, `floor_errors`, and in
//! words at the top of the Markdown): the floor is wrong, not the path fast.

pub mod floors;
pub mod gpu;
pub mod qec;
pub mod write;

use std::path::PathBuf;

use rocelink_link::SpinMode;

use crate::echo::{run_echo, EchoConfig, EchoError};
pub use crate::env::utc_timestamp;
use crate::env::Environment;
use crate::latency::{Counts, Summary};
use crate::settings::Spin;
pub use crate::settings::{Cores, WireKind};
pub use write::write_reports;

/// The path names rows carry.
pub mod paths {
    /// Floor of the inproc wire: two threads bouncing one cache line.
    pub const FLOOR_CACHELINE: &str = "floor: cache-line ping-pong";
    /// Floor of the udp wire: a spinning UDP ping-pong over loopback.
    pub const FLOOR_UDP: &str = "floor: UDP ping-pong (spinning)";
    /// The CPU transceiver loop behind the software NIC.
    pub const CPU_BACKEND: &str = "cpu backend";
    /// The raw mapped-memory ping-pong: a one-thread kernel and a host thread bouncing a word
    /// of pinned host memory across PCIe.
    pub const FLOOR_MAPPED: &str = "floor: mapped-memory ping-pong";
    /// The GPU paths' floor: the same hops with no protocol work, the mapped-memory ping-pong
    /// plus the wire's floor (round trips added pairwise), each the best of its variants.
    pub const FLOOR_GPU: &str = "floor: mapped ping-pong + wire floor";
    /// The CPU loop launching one kernel per message (the approach the GPU path replaces).
    pub const GPU_LAUNCH: &str = "gpu: kernel launch per message";
    /// The persistent transceiver kernel.
    pub const GPU_PERSISTENT: &str = "gpu: persistent kernel";
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub wires: Vec<WireKind>,
    /// Payload bytes per message (the RPC header and the args), 24..=4096.
    pub sizes: Vec<usize>,
    /// Measured round trips per run (and per floor), warm-up excluded.
    pub count: u32,
    /// Round trips made first and left out of every distribution (floors and runs).
    pub warmup: u32,
    /// Cores for the run's threads; the floors use the peer's (initiator) and the NIC's
    /// (responder).
    pub cores: Cores,
    /// Spin policy for runs and floors alike (`Auto`: `Dedicated` when every one of the
    /// run's three spinners has a core).
    pub spin: Spin,
    /// Dedicated spinners (floors too) execute PAUSE between polls.
    pub spin_pause: bool,
    /// Where the reports go (created if missing).
    pub out_dir: PathBuf,
    /// File name stem of the reports: `<name>.md`, `<name>.json`, `<name>-<wire>-<size>.svg`.
    pub name: String,
    /// Also measure the GPU paths (and their floors) on this GPU.
    pub gpu: Option<usize>,
    /// How the runs ring sends (`graph::RunOptions::doorbell`).
    pub doorbell: crate::nic::DoorbellMode,
    /// How the GPU runs' kernel is built (`graph::RunOptions::kernel`).
    pub kernel: crate::gpu::kernels::KernelOptions,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            wires: vec![WireKind::Inproc, WireKind::Udp],
            sizes: vec![64],
            count: 100_000,
            warmup: 1_000,
            cores: Cores::default(),
            spin: Spin::Auto,
            spin_pause: false,
            out_dir: PathBuf::from("latency-reports"),
            name: "bench".into(),
            gpu: None,
            doorbell: crate::nic::DoorbellMode::Proxy,
            kernel: crate::gpu::kernels::KernelOptions::default(),
        }
    }
}

/// A benchmark's result: the environment header, one row per (path, wire, size), the
/// targets. Serialized as the JSON report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub env: BenchEnv,
    /// Two clock reads back to back: what one timestamp costs (p50), for reading the
    /// figures' resolution.
    pub clock_overhead_ns: Summary,
    pub rows: Vec<BenchRow>,
    /// The floors measured several ways: which variant each floor row is, and every variant's
    /// figures.
    pub floor_variants: Vec<FloorVariants>,
    /// Every measured row whose p50 beat its floor's, in words (as in its
    /// `vs_floor.floor_error`). Empty when every floor held.
    pub floor_errors: Vec<String>,
    pub targets: Vec<Target>,
    /// Whether the run was cut short by an interrupt (rows then cover what was measured).
    pub interrupted: bool,
    /// Round trips (ns, warm-up excluded, in the order made) of each row, for plots.
    #[serde(skip)]
    pub samples: Vec<Vec<u64>>,
    /// The files [`run_bench`] wrote.
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

/// Where and how the figures were measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchEnv {
    /// Host, CPU, kernel, cores, backend, wires, spin mode, pinned cores, rocelink version,
    /// GPU. Its `payload_size` is the size when there is one, 0 when there are several
    /// (see `sizes`).
    #[serde(flatten)]
    pub machine: Environment,
    /// When the benchmark started, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date_utc: String,
    pub wires: Vec<String>,
    pub sizes: Vec<usize>,
    /// `closed-loop`: the next request leaves when the previous answer arrived.
    pub mode: String,
    pub count: u32,
    pub warmup: u32,
    /// What the figures are: always `full round trip`.
    pub figures: String,
}

/// One path's round trips on one wire at one payload size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    /// What carried the round trip: [`paths::FLOOR_CACHELINE`], [`paths::CPU_BACKEND`], ...
    pub path: String,
    /// `inproc` or `udp`.
    pub wire: String,
    /// Payload bytes per message.
    pub size: usize,
    /// For a floor: the path it is the floor of. `None` for a measured path.
    pub floor_of: Option<String>,
    /// Full round trips, ns, warm-up excluded.
    pub rtt_ns: Summary,
    /// Messages sent (warm-up included), received, lost, ...
    pub counts: Counts,
    /// For a measured path: its ratio to its floor measured just before it.
    pub vs_floor: Option<VsFloor>,
    /// How it ran: addresses, threads.
    pub detail: String,
    /// For a measured path whose peer shares this host's clock: the round trip split by the
    /// data path's own timestamps (wire and NIC in, data-path turnaround, the rest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakdown_ns: Option<crate::latency::Breakdown>,
}

impl BenchRow {
    pub fn is_floor(&self) -> bool {
        self.floor_of.is_some()
    }
}

/// A path's figures divided by its floor's.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VsFloor {
    /// The floor's path.
    pub floor: String,
    /// The floor's variant, when it was the best of several (`FloorVariants::chosen`).
    pub floor_variant: Option<String>,
    /// p50 / floor p50.
    pub p50: f64,
    /// p99 / floor p99.
    pub p99: f64,
    /// Set when the path's p50 is below the floor's (`p50` < 1): the floor is not a lower
    /// bound of this path, so it is wrong (docs/perf.md, "How to report a figure"), in words.
    pub floor_error: Option<String>,
}

/// One floor row measured several ways (`floors::best_of`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct FloorVariants {
    /// The floor row's path, wire and size.
    pub path: String,
    pub wire: String,
    pub size: usize,
    /// The variant the row is (the least p50), or for a composite floor the variants it was
    /// built from.
    pub chosen: String,
    /// Every variant's figures, the chosen one marked (empty for a composite floor).
    pub variants: Vec<floors::VariantSummary>,
}

/// One of the benchmark's targets (docs/perf.md, "How to report a figure") and whether this
/// run meets it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    pub path: String,
    pub wire: String,
    pub size: usize,
    /// The target in words: `p50 <= 3x floor p50`.
    pub what: String,
    pub max_ratio: f64,
    /// The measured p50 / floor p50 (`None` when there was nothing to compare).
    pub ratio: Option<f64>,
    pub met: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("{wire} wire, {size} B: {source}")]
    Echo { wire: &'static str, size: usize, source: EchoError },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// The target ratio p50 / floor p50 of the CPU backend on `wire`.
pub fn target_ratio(wire: WireKind) -> f64 {
    match wire {
        WireKind::Inproc => 3.0,
        WireKind::Udp => 1.5,
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

/// `path`'s figures (`path_name`'s) against `floor`'s (`floor_path`'s, variant
/// `floor_variant` when it is the best of several), with the floor error when it beat it.
pub fn vs_floor(
    path_name: &str,
    path: &Summary,
    floor_path: &str,
    floor_variant: Option<&str>,
    floor: &Summary,
) -> VsFloor {
    VsFloor {
        floor: floor_path.into(),
        floor_variant: floor_variant.map(str::to_string),
        p50: ratio(path.p50, floor.p50),
        p99: ratio(path.p99, floor.p99),
        floor_error: floors::floor_error(path_name, path, floor_path, floor),
    }
}

/// Spinners of a CPU-backend run with its peer in this process: the peer, the NIC engine,
/// the backend.
const RUN_SPINNERS: usize = 3;

/// Measures every (wire, size): its floor, then the CPU-backend echo run right after, and
/// writes the reports into `cfg.out_dir` (see [`write_reports`]). Losses and missed targets
/// are reported, not errors; an interrupt (Ctrl-C) stops after the current run and the
/// report covers what was measured.
pub fn run_bench(cfg: &BenchConfig) -> Result<BenchReport, BenchError> {
    if cfg.wires.is_empty() || cfg.sizes.is_empty() {
        return Err(BenchError::Config("at least one wire and one size".into()));
    }
    if cfg.count == 0 {
        return Err(BenchError::Config("--count must be at least 1".into()));
    }
    if cfg.name.is_empty() || cfg.name.contains(['/', '\\']) {
        return Err(BenchError::Config(format!("report name `{}` must be a non-empty file name", cfg.name)));
    }
    let spin = cfg.spin.mode(RUN_SPINNERS, cfg.spin_pause);
    let date_utc = utc_timestamp(std::time::SystemTime::now());
    let floor_cores = (cfg.cores.peer, cfg.cores.nic);

    let wires: Vec<String> = cfg.wires.iter().map(|w| w.as_str().to_string()).collect();
    let mut machine = Environment::here(
        "cpu",
        &wires.join(", "),
        if cfg.sizes.len() == 1 { cfg.sizes[0] } else { 0 },
        &spin.to_string(),
    );
    let pin = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| c.to_string());
    for (name, core) in [
        ("nic", cfg.cores.nic),
        ("backend", cfg.cores.backend),
        ("peer", cfg.cores.peer),
        ("floor initiator", floor_cores.0),
        ("floor responder", floor_cores.1),
    ] {
        machine.pinned.insert(name.into(), pin(core));
    }

    if let Some(ord) = cfg.gpu {
        let gpu = crate::gpu::Gpu::open(ord).map_err(|e| BenchError::Config(format!("--gpu {ord}: {e}")))?;
        machine.gpu = Some(gpu.info.describe());
        machine.backend = "cpu; gpu (persistent kernel, kernel launch per message)".into();
    }
    let clock = floors::clock_overhead(cfg.count.clamp(10_000, 1_000_000), 1_000);
    let mut rows = Vec::new();
    let mut samples = Vec::new();
    let mut targets = Vec::new();
    let mut floor_variants = Vec::new();
    let mut interrupted = false;
    'all: for &wire in &cfg.wires {
        for &size in &cfg.sizes {
            if crate::interrupted() {
                interrupted = true;
                break 'all;
            }
            tracing::info!(wire = wire.as_str(), size, "measuring the floor");
            let (floor_path, floor, floor_variant, floor_detail) = match wire {
                WireKind::Inproc => (
                    paths::FLOOR_CACHELINE,
                    floors::cacheline_pingpong(cfg.count, cfg.warmup, floor_cores, spin),
                    None,
                    "two threads, one 128-byte-aligned AtomicU64".to_string(),
                ),
                WireKind::Udp => {
                    let variants = floors::udp_pingpong_variants(cfg.count, cfg.warmup, size, floor_cores, spin)
                        .map_err(|source| BenchError::Io { what: format!("UDP ping-pong floor, {size} B"), source })?;
                    let best = floors::best_of(variants).ok_or_else(|| BenchError::Io {
                        what: format!("UDP ping-pong floor, {size} B"),
                        source: std::io::Error::other("every variant lost every round trip"),
                    })?;
                    let (chosen, summaries) = best.into_floor();
                    floor_variants.push(FloorVariants {
                        path: paths::FLOOR_UDP.into(),
                        wire: wire.as_str().into(),
                        size,
                        chosen: chosen.name.clone(),
                        variants: summaries,
                    });
                    (
                        paths::FLOOR_UDP,
                        chosen.floor,
                        Some(chosen.name.clone()),
                        format!("two threads, {size}-byte datagrams over loopback, non-blocking sockets polled; the best of {} variants: {}", floors::UdpSockets::ALL.len(), chosen.name),
                    )
                }
            };
            tracing::info!(wire = wire.as_str(), size, "running the CPU backend");
            let echo_cfg = EchoConfig {
                wire,
                count: cfg.count + cfg.warmup,
                size,
                warmup: cfg.warmup,
                cores: cfg.cores,
                spin: spin.into(),
                spin_pause: spin.pause(),
                backend: crate::backend::BackendKind::Cpu,
                doorbell: cfg.doorbell,
                kernel: cfg.kernel.clone(),
                ..EchoConfig::default()
            };
            let run = run_echo(&echo_cfg).map_err(|source| BenchError::Echo { wire: wire.as_str(), size, source })?;

            let floor_sum = Summary::of(&floor.rtt);
            let vs = vs_floor(paths::CPU_BACKEND, &run.rtt_ns, floor_path, floor_variant.as_deref(), &floor_sum);
            let max_ratio = target_ratio(wire);
            targets.push(Target {
                path: paths::CPU_BACKEND.into(),
                wire: wire.as_str().into(),
                size,
                what: format!("p50 <= {max_ratio}x floor p50"),
                max_ratio,
                ratio: vs.p50.is_finite().then_some(vs.p50),
                met: vs.p50.is_finite() && vs.p50 <= max_ratio,
            });
            rows.push(BenchRow {
                path: floor_path.into(),
                wire: wire.as_str().into(),
                size,
                floor_of: Some(paths::CPU_BACKEND.into()),
                rtt_ns: floor_sum,
                counts: floor.counts,
                vs_floor: None,
                detail: floor_detail,
                breakdown_ns: None,
            });
            samples.push(floor.samples);
            rows.push(BenchRow {
                path: paths::CPU_BACKEND.into(),
                wire: wire.as_str().into(),
                size,
                floor_of: None,
                rtt_ns: run.rtt_ns,
                counts: run.counts,
                vs_floor: Some(vs),
                detail: format!(
                    "{}, peer fpga-sim in this process, {} answered by the backend",
                    run.env.wire, run.backend_processed
                ),
                breakdown_ns: run.breakdown_ns.clone(),
            });
            samples.push(run.analysis.map(|a| a.samples).unwrap_or_default());

            if let Some(ordinal) = cfg.gpu {
                let wire_floor_samples = samples[samples.len() - 2].clone();
                let wire_floor =
                    WireFloor { path: floor_path, variant: floor_variant.as_deref(), samples: &wire_floor_samples };
                let gpu = measure_gpu(cfg, ordinal, wire, size, spin, floor_cores, &wire_floor)?;
                for (row, s, t) in gpu.rows {
                    rows.push(row);
                    samples.push(s);
                    targets.extend(t);
                }
                floor_variants.extend(gpu.floor_variants);
            }
        }
    }
    interrupted |= crate::interrupted();
    let floor_errors: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.vs_floor
                .as_ref()
                .and_then(|v| v.floor_error.as_ref())
                .map(|e| format!("{} wire, {} B: {e}", r.wire, r.size))
        })
        .collect();
    for e in &floor_errors {
        tracing::warn!("{e}");
    }

    let mut report = BenchReport {
        env: BenchEnv {
            machine,
            date_utc,
            wires,
            sizes: cfg.sizes.clone(),
            mode: "closed-loop".into(),
            count: cfg.count,
            warmup: cfg.warmup,
            figures: "full round trip".into(),
        },
        clock_overhead_ns: Summary::of(&clock.rtt),
        rows,
        floor_variants,
        floor_errors,
        targets,
        interrupted,
        samples,
        files: Vec::new(),
    };
    let files = write_reports(&report, &report.samples, &cfg.out_dir, &cfg.name).map_err(|source| BenchError::Io {
        what: format!("writing the reports into {}", cfg.out_dir.display()),
        source,
    })?;
    report.files = files;
    Ok(report)
}

type GpuRows = Vec<(BenchRow, Vec<u64>, Vec<Target>)>;

/// The wire's floor of one (wire, size), as the composite GPU floor is built on it.
struct WireFloor<'a> {
    path: &'static str,
    /// Its variant when it was the best of several.
    variant: Option<&'a str>,
    /// Its round trips, in the order made.
    samples: &'a [u64],
}

/// What [`measure_gpu`] gives: rows with their samples and targets, the floors' variants.
struct GpuMeasured {
    rows: GpuRows,
    floor_variants: Vec<FloorVariants>,
}

/// The composite floor of a GPU path: `mapped` and `wire` round trips added pairwise (as
/// many as the shorter has).
fn composite(mapped: &[u64], wire: &[u64]) -> Vec<u64> {
    mapped.iter().zip(wire).map(|(a, b)| a + b).collect()
}

/// The GPU rows of one (wire, size): the mapped-memory ping-pong (the best of its variants),
/// the composite floor built on it, the launch-per-message baseline and the persistent
/// kernel, with the GPU targets.
fn measure_gpu(
    cfg: &BenchConfig,
    ordinal: usize,
    wire: WireKind,
    size: usize,
    spin: SpinMode,
    floor_cores: (Option<usize>, Option<usize>),
    wire_floor: &WireFloor<'_>,
) -> Result<GpuMeasured, BenchError> {
    let gpu_err = |what: &str, e: String| BenchError::Io { what: what.to_string(), source: std::io::Error::other(e) };
    tracing::info!(
        wire = wire.as_str(),
        size,
        "measuring the mapped-memory ping-pong ({} variants)",
        gpu::MAPPED_VARIANTS.len()
    );
    let variants = gpu::mapped_pingpong_variants(ordinal, cfg.count, cfg.warmup, floor_cores.1)
        .map_err(|e| gpu_err("GPU mapped-memory ping-pong", e))?;
    let best = floors::best_of(variants)
        .ok_or_else(|| gpu_err("GPU mapped-memory ping-pong", "every variant lost every round trip".into()))?;
    let (mapped, mapped_variants) = best.into_floor();
    let composite_samples = composite(&mapped.floor.samples, wire_floor.samples);
    let composite_sum = Summary::of(&floors::histogram_of(&composite_samples));
    let mapped_sum = Summary::of(&mapped.floor.rtt);
    let wire_floor_name = match wire_floor.variant {
        Some(v) => format!("{} ({v})", wire_floor.path),
        None => wire_floor.path.to_string(),
    };
    let composite_variant = format!("mapped: {}; wire: {wire_floor_name}", mapped.name);
    let w = wire.as_str().to_string();
    let floor_variants = vec![
        FloorVariants {
            path: paths::FLOOR_MAPPED.into(),
            wire: w.clone(),
            size,
            chosen: mapped.name.clone(),
            variants: mapped_variants,
        },
        FloorVariants {
            path: paths::FLOOR_GPU.into(),
            wire: w.clone(),
            size,
            chosen: composite_variant.clone(),
            variants: Vec::new(),
        },
    ];
    let mut out: GpuRows = Vec::new();
    out.push((
        BenchRow {
            path: paths::FLOOR_MAPPED.into(),
            wire: w.clone(),
            size,
            floor_of: Some(paths::GPU_PERSISTENT.into()),
            rtt_ns: mapped_sum,
            counts: mapped.floor.counts,
            vs_floor: None,
            detail: format!(
                "a one-thread kernel polls one word of pinned host memory and writes it back; a host thread times it; the best of {} variants: {}",
                gpu::MAPPED_VARIANTS.len(),
                mapped.name
            ),
            breakdown_ns: None,
        },
        mapped.floor.samples.clone(),
        vec![],
    ));
    out.push((
        BenchRow {
            path: paths::FLOOR_GPU.into(),
            wire: w.clone(),
            size,
            floor_of: Some(paths::GPU_PERSISTENT.into()),
            rtt_ns: composite_sum,
            counts: mapped.floor.counts,
            vs_floor: None,
            detail: format!(
                "mapped-memory ping-pong ({}) + {wire_floor_name} round trips, added pairwise",
                mapped.name
            ),
            breakdown_ns: None,
        },
        composite_samples,
        vec![],
    ));
    let mut p50s = Vec::new();
    for (path, backend) in [
        (paths::GPU_LAUNCH, crate::backend::BackendKind::GpuLaunchPerMessage(ordinal)),
        (paths::GPU_PERSISTENT, crate::backend::BackendKind::Gpu(ordinal)),
    ] {
        tracing::info!(wire = wire.as_str(), size, "running {path}");
        let echo_cfg = EchoConfig {
            wire,
            count: cfg.count + cfg.warmup,
            size,
            warmup: cfg.warmup,
            cores: cfg.cores,
            spin: spin.into(),
            spin_pause: spin.pause(),
            backend,
            doorbell: cfg.doorbell,
            kernel: cfg.kernel.clone(),
            ..EchoConfig::default()
        };
        let run = run_echo(&echo_cfg).map_err(|source| BenchError::Echo { wire: wire.as_str(), size, source })?;
        let vs = vs_floor(path, &run.rtt_ns, paths::FLOOR_GPU, Some(&composite_variant), &composite_sum);
        let mut targets = Vec::new();
        if path == paths::GPU_PERSISTENT {
            let t = |what: String, max: f64, value: f64| Target {
                path: path.into(),
                wire: w.clone(),
                size,
                what,
                max_ratio: max,
                ratio: value.is_finite().then_some(value),
                met: value.is_finite() && value <= max,
            };
            if wire == WireKind::Inproc {
                targets.push(t("p50 <= 1.3x floor p50".into(), 1.3, vs.p50));
                targets.push(t("p50 <= 2.7 us (value in us)".into(), 2.7, run.rtt_ns.p50 as f64 / 1000.0));
                targets.push(t("p99 <= 2x floor p99".into(), 2.0, vs.p99));
            } else {
                targets.push(t("p50 <= 7 us (value in us)".into(), 7.0, run.rtt_ns.p50 as f64 / 1000.0));
            }
            if let Some(launch_p50) = p50s.first() {
                // at least 3x faster than a launch per message: persistent / launch <= 1/3
                let r = run.rtt_ns.p50 as f64 / *launch_p50 as f64;
                targets.push(t(
                    "p50 <= 1/3 of the launch-per-message p50 (value: persistent / launch)".into(),
                    1.0 / 3.0,
                    r,
                ));
            }
        }
        p50s.push(run.rtt_ns.p50);
        let detail = format!(
            "{}, backend {}, {} answered, {} refused; NIC drops {}",
            run.env.wire,
            run.env.backend,
            run.backend_processed,
            run.backend_dropped,
            run.nic_drops.values().sum::<u64>()
        );
        out.push((
            BenchRow {
                path: path.into(),
                wire: w.clone(),
                size,
                floor_of: None,
                rtt_ns: run.rtt_ns,
                counts: run.counts,
                vs_floor: Some(vs),
                detail,
                breakdown_ns: run.breakdown_ns.clone(),
            },
            run.analysis.map(|a| a.samples).unwrap_or_default(),
            targets,
        ));
    }
    Ok(GpuMeasured { rows: out, floor_variants })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_composite_floor_adds_round_trips_pairwise() {
        assert_eq!(composite(&[1_600, 1_580, 1_590], &[290, 300]), vec![1_890, 1_880]);
        assert!(composite(&[], &[1]).is_empty());
        // Built on the best mapped variant, the composite is the lower one, and a path it
        // bounds that beats it is flagged.
        let best = Summary::of(&floors::histogram_of(&composite(&[1_580; 100], &[290; 100])));
        let slow = Summary::of(&floors::histogram_of(&composite(&[2_250; 100], &[290; 100])));
        assert!(best.p50 < slow.p50);
        let path = Summary::of(&floors::histogram_of(&[2_000; 100]));
        let v = vs_floor(paths::GPU_PERSISTENT, &path, paths::FLOOR_GPU, Some("mapped: x; wire: y"), &best);
        assert!(v.p50 > 1.0 && v.floor_error.is_none(), "{v:?}");
        let v = vs_floor(paths::GPU_PERSISTENT, &path, paths::FLOOR_GPU, Some("mapped: x; wire: y"), &slow);
        assert!(v.p50 < 1.0, "{v:?}");
        assert!(
            v.floor_error.as_deref().is_some_and(|e| e.contains(paths::GPU_PERSISTENT) && e.contains(paths::FLOOR_GPU)),
            "{v:?}"
        );
        assert_eq!(v.floor_variant.as_deref(), Some("mapped: x; wire: y"));
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = BenchConfig { count: 10, warmup: 0, out_dir: std::env::temp_dir(), ..BenchConfig::default() };
        assert!(matches!(run_bench(&BenchConfig { wires: vec![], ..base.clone() }), Err(BenchError::Config(_))));
        assert!(matches!(run_bench(&BenchConfig { count: 0, ..base.clone() }), Err(BenchError::Config(_))));
        assert!(matches!(run_bench(&BenchConfig { name: "a/b".into(), ..base }), Err(BenchError::Config(_))));
    }

    /// The whole benchmark for real, with tiny counts.
    #[test]
    fn run_bench_writes_every_report() {
        let dir = std::env::temp_dir().join(format!(
            "rocelink-bench-test-{}-{}",
            std::process::id(),
            rocelink_link::clock::monotonic_ns()
        ));
        let cfg = BenchConfig {
            wires: vec![WireKind::Inproc, WireKind::Udp],
            sizes: vec![64],
            count: 300,
            warmup: 30,
            out_dir: dir.clone(),
            name: "tiny".into(),
            ..BenchConfig::default()
        };
        let r = run_bench(&cfg).expect("bench");
        assert_eq!(r.rows.len(), 4);
        assert_eq!(r.samples.len(), 4);
        for (row, s) in r.rows.iter().zip(&r.samples) {
            assert_eq!(row.counts.lost, 0, "{row:?}");
            assert_eq!(row.rtt_ns.count, 300, "{row:?}");
            assert_eq!(s.len(), 300, "{row:?}");
            assert_eq!(row.is_floor(), row.vs_floor.is_none());
        }
        assert_eq!(r.targets.len(), 2);
        assert!(r.targets.iter().all(|t| t.ratio.is_some()));
        // The UDP floor is the best of its socket variants, and the row divided by it says which.
        assert_eq!(r.floor_variants.len(), 1);
        let fv = &r.floor_variants[0];
        assert_eq!((fv.path.as_str(), fv.wire.as_str(), fv.size), (paths::FLOOR_UDP, "udp", 64));
        assert_eq!(fv.variants.len(), floors::UdpSockets::ALL.len());
        assert_eq!(fv.variants.iter().filter(|v| v.chosen).count(), 1);
        let chosen = fv.variants.iter().find(|v| v.chosen).expect("chosen");
        assert_eq!(chosen.name, fv.chosen);
        assert!(fv.variants.iter().all(|v| v.rtt_ns.p50 >= chosen.rtt_ns.p50), "{fv:?}");
        let udp_floor = r.rows.iter().find(|row| row.path == paths::FLOOR_UDP).expect("udp floor row");
        assert_eq!(udp_floor.rtt_ns, chosen.rtt_ns);
        let udp_cpu =
            r.rows.iter().find(|row| row.path == paths::CPU_BACKEND && row.wire == "udp").expect("udp cpu row");
        assert_eq!(udp_cpu.vs_floor.as_ref().and_then(|v| v.floor_variant.as_deref()), Some(fv.chosen.as_str()));
        let inproc_cpu =
            r.rows.iter().find(|row| row.path == paths::CPU_BACKEND && row.wire == "inproc").expect("inproc cpu row");
        assert_eq!(inproc_cpu.vs_floor.as_ref().and_then(|v| v.floor_variant.as_deref()), None);
        // Every row's floor error is in the report's list (on this machine there may be none).
        let row_errors =
            r.rows.iter().filter(|row| row.vs_floor.as_ref().is_some_and(|v| v.floor_error.is_some())).count();
        assert_eq!(r.floor_errors.len(), row_errors);
        for row in &r.rows {
            if let Some(v) = &row.vs_floor {
                assert_eq!(v.floor_error.is_some(), v.p50 < 1.0, "{row:?}");
            }
        }
        for f in ["tiny.md", "tiny.json", "tiny-inproc-64.svg", "tiny-udp-64.svg"] {
            let p = dir.join(f);
            assert!(p.is_file(), "{} missing", p.display());
            assert!(r.files.contains(&p));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
