//! The latency benchmark (PERF.md, DESIGN.md "Measuring"): for every wire and payload size,
//! the wire's floor measured in this process, then the CPU-backend echo run (closed loop)
//! right after it, side by side with their ratio, written as Markdown, JSON and SVG.
//!
//! A report is a list of rows, one per (path, wire, size). A path is what carried the round
//! trip: a floor (`floor: ...`), the CPU backend, and later the GPU paths (the mapped-memory
//! ping-pong kernel as their floor, a kernel launch per message, the persistent kernel).
//! A floor row names the path it bounds in `floor_of`; a measured row gives its ratio to its
//! floor in `vs_floor`. Targets are data: the report says whether each holds, and nothing
//! here fails because one does not.

pub mod floors;
pub mod gpu;
pub mod qec;
pub mod write;

use std::path::PathBuf;

use rocelink_link::SpinMode;

pub use crate::echo::{Cores, WireKind};
use crate::echo::{run_echo, EchoConfig, EchoError};
use crate::env::Environment;
use crate::latency::{Counts, Summary};
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
    /// plus the wire's floor (round trips added pairwise).
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
    /// Spin policy for runs and floors alike (default: `dedicated` when every one of the
    /// run's three spinners has a core).
    pub spin: Option<SpinMode>,
    /// Where the reports go (created if missing).
    pub out_dir: PathBuf,
    /// File name stem of the reports: `<name>.md`, `<name>.json`, `<name>-<wire>-<size>.svg`.
    pub name: String,
    /// Also measure the GPU paths (and their floors) on this GPU.
    pub gpu: Option<usize>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            wires: vec![WireKind::Inproc, WireKind::Udp],
            sizes: vec![64],
            count: 100_000,
            warmup: 1_000,
            cores: Cores::default(),
            spin: None,
            out_dir: PathBuf::from("latency-reports"),
            name: "bench".into(),
            gpu: None,
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
    /// p50 / floor p50.
    pub p50: f64,
    /// p99 / floor p99.
    pub p99: f64,
}

/// One of the targets and whether this run meets it.
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

/// `path`'s figures against `floor`'s.
pub fn vs_floor(path: &Summary, floor_path: &str, floor: &Summary) -> VsFloor {
    VsFloor { floor: floor_path.into(), p50: ratio(path.p50, floor.p50), p99: ratio(path.p99, floor.p99) }
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
    let spin = cfg.spin.unwrap_or_else(|| SpinMode::for_spinners(RUN_SPINNERS));
    let date_utc = utc_timestamp(std::time::SystemTime::now());
    let floor_cores = (cfg.cores.peer, cfg.cores.nic);

    let wires: Vec<String> = cfg.wires.iter().map(|w| w.as_str().to_string()).collect();
    let mut machine = Environment::here("cpu", &wires.join(", "), if cfg.sizes.len() == 1 { cfg.sizes[0] } else { 0 }, spin.as_str());
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
    let mut interrupted = false;
    'all: for &wire in &cfg.wires {
        for &size in &cfg.sizes {
            if crate::interrupted() {
                interrupted = true;
                break 'all;
            }
            tracing::info!(wire = wire.as_str(), size, "measuring the floor");
            let (floor_path, floor, floor_detail) = match wire {
                WireKind::Inproc => (
                    paths::FLOOR_CACHELINE,
                    floors::cacheline_pingpong(cfg.count, cfg.warmup, floor_cores, spin),
                    "two threads, one 128-byte-aligned AtomicU64".to_string(),
                ),
                WireKind::Udp => (
                    paths::FLOOR_UDP,
                    floors::udp_pingpong(cfg.count, cfg.warmup, size, floor_cores, spin)
                        .map_err(|source| BenchError::Io { what: format!("UDP ping-pong floor, {size} B"), source })?,
                    format!("two threads, {size}-byte datagrams over loopback, non-blocking sockets polled"),
                ),
            };
            tracing::info!(wire = wire.as_str(), size, "running the CPU backend");
            let echo_cfg = EchoConfig { wire, count: cfg.count + cfg.warmup, size, warmup: cfg.warmup, cores: cfg.cores, spin: Some(spin), backend: crate::backend::BackendKind::Cpu, ..EchoConfig::default() };
            let run = run_echo(&echo_cfg).map_err(|source| BenchError::Echo { wire: wire.as_str(), size, source })?;

            let floor_sum = Summary::of(&floor.rtt);
            let vs = vs_floor(&run.rtt_ns, floor_path, &floor_sum);
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
                detail: format!("{}, peer fpga-sim in this process, {} answered by the backend", run.env.wire, run.backend_processed),
                breakdown_ns: run.breakdown_ns.clone(),
            });
            samples.push(run.analysis.map(|a| a.samples).unwrap_or_default());

            if let Some(ordinal) = cfg.gpu {
                let wire_floor_samples = samples[samples.len() - 2].clone();
                let gpu_rows = measure_gpu(cfg, ordinal, wire, size, spin, floor_cores, &wire_floor_samples)?;
                for (row, s, t) in gpu_rows {
                    rows.push(row);
                    samples.push(s);
                    targets.extend(t);
                }
            }
        }
    }
    interrupted |= crate::interrupted();

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
        targets,
        interrupted,
        samples,
        files: Vec::new(),
    };
    let files = write_reports(&report, &report.samples, &cfg.out_dir, &cfg.name)
        .map_err(|source| BenchError::Io { what: format!("writing the reports into {}", cfg.out_dir.display()), source })?;
    report.files = files;
    Ok(report)
}

type GpuRows = Vec<(BenchRow, Vec<u64>, Vec<Target>)>;

/// The GPU rows of one (wire, size): the mapped-memory ping-pong, the composite floor, the
/// launch-per-message baseline and the persistent kernel, with the GPU targets.
fn measure_gpu(cfg: &BenchConfig, ordinal: usize, wire: WireKind, size: usize, spin: SpinMode, floor_cores: (Option<usize>, Option<usize>), wire_floor: &[u64]) -> Result<GpuRows, BenchError> {
    let gpu_err = |what: &str, e: String| BenchError::Io { what: what.to_string(), source: std::io::Error::other(e) };
    tracing::info!(wire = wire.as_str(), size, "measuring the mapped-memory ping-pong");
    let mapped = gpu::mapped_pingpong(ordinal, cfg.count, cfg.warmup, floor_cores.1).map_err(|e| gpu_err("GPU mapped-memory ping-pong", e))?;
    let composite: Vec<u64> = mapped.samples.iter().zip(wire_floor).map(|(a, b)| a + b).collect();
    let composite_sum = Summary::of(&floors::histogram_of(&composite));
    let mapped_sum = Summary::of(&mapped.rtt);
    let w = wire.as_str().to_string();
    let mut out: GpuRows = Vec::new();
    out.push((
        BenchRow {
            path: paths::FLOOR_MAPPED.into(),
            wire: w.clone(),
            size,
            floor_of: Some(paths::GPU_PERSISTENT.into()),
            rtt_ns: mapped_sum,
            counts: mapped.counts,
            vs_floor: None,
            detail: "a one-thread kernel polls one word of pinned host memory and writes it back; a host thread times it".into(),
            breakdown_ns: None,
        },
        mapped.samples.clone(),
        vec![],
    ));
    out.push((
        BenchRow {
            path: paths::FLOOR_GPU.into(),
            wire: w.clone(),
            size,
            floor_of: Some(paths::GPU_PERSISTENT.into()),
            rtt_ns: composite_sum,
            counts: mapped.counts,
            vs_floor: None,
            detail: format!("mapped-memory ping-pong + {} round trips, added pairwise", if wire == WireKind::Inproc { "cache-line ping-pong" } else { "UDP ping-pong" }),
            breakdown_ns: None,
        },
        composite,
        vec![],
    ));
    let mut p50s = Vec::new();
    for (path, backend) in [
        (paths::GPU_LAUNCH, crate::backend::BackendKind::GpuLaunchPerMessage(ordinal)),
        (paths::GPU_PERSISTENT, crate::backend::BackendKind::Gpu(ordinal)),
    ] {
        tracing::info!(wire = wire.as_str(), size, "running {path}");
        let echo_cfg = EchoConfig { wire, count: cfg.count + cfg.warmup, size, warmup: cfg.warmup, cores: cfg.cores, spin: Some(spin), backend, ..EchoConfig::default() };
        let run = run_echo(&echo_cfg).map_err(|source| BenchError::Echo { wire: wire.as_str(), size, source })?;
        let vs = vs_floor(&run.rtt_ns, paths::FLOOR_GPU, &composite_sum);
        let mut targets = Vec::new();
        if path == paths::GPU_PERSISTENT {
            let t = |what: String, max: f64, value: f64| Target { path: path.into(), wire: w.clone(), size, what, max_ratio: max, ratio: value.is_finite().then_some(value), met: value.is_finite() && value <= max };
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
                targets.push(t("p50 <= 1/3 of the launch-per-message p50 (value: persistent / launch)".into(), 1.0 / 3.0, r));
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
            BenchRow { path: path.into(), wire: w.clone(), size, floor_of: None, rtt_ns: run.rtt_ns, counts: run.counts, vs_floor: Some(vs), detail, breakdown_ns: run.breakdown_ns.clone() },
            run.analysis.map(|a| a.samples).unwrap_or_default(),
            targets,
        ));
    }
    Ok(out)
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn utc_timestamp(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723)), "2000-02-29T01:02:03Z");
        assert_eq!(utc_timestamp(UNIX_EPOCH + Duration::from_secs(1_767_225_599)), "2025-12-31T23:59:59Z");
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
        let dir = std::env::temp_dir().join(format!("rocelink-bench-test-{}-{}", std::process::id(), rocelink_link::clock::monotonic_ns()));
        let cfg = BenchConfig { wires: vec![WireKind::Inproc, WireKind::Udp], sizes: vec![64], count: 300, warmup: 30, out_dir: dir.clone(), name: "tiny".into(), ..BenchConfig::default() };
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
        for f in ["tiny.md", "tiny.json", "tiny-inproc-64.svg", "tiny-udp-64.svg"] {
            let p = dir.join(f);
            assert!(p.is_file(), "{} missing", p.display());
            assert!(r.files.contains(&p));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
