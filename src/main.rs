//! `rocelink`: the command line. Thin: parses flags and calls the operator crate.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use rocelink_operator::echo::{self, EchoConfig};
use rocelink_operator::gpu::kernels::KernelOptions;
use rocelink_operator::nic::DoorbellMode;
use rocelink_operator::settings::{BackendKind, Cores, GpuChoice, PeerMode, Spin, WireKind};
use rocelink_operator::{graph, report};

#[derive(Debug, Parser)]
#[command(
    name = "rocelink",
    version,
    about = "Real-time RoCEv2 transceiver: software NIC, CPU/GPU transceiver loop, HSB FPGA peer"
)]
struct Cli {
    /// Log filter for stderr (error, warn, info, debug, trace, or tracing directives such as
    /// `rocelink_operator=debug`). Default: warn, and for `run` also the Metrics operator's
    /// lines (`warn,rocelink::metrics=info`).
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

/// `decode --hyperedges`: an error component that flips more than 2 detectors.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Hyperedges {
    /// Dropped, with a warning, as PyMatching drops them.
    Drop,
    /// The DEM refused, naming the line.
    Refuse,
}

/// `bench-qec --cpu-settle`: where the CPU stage does each round's streaming work.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CpuSettle {
    InLoop,
    Idle,
    Beside,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a graph file: operators, flows, backend, NIC and peer as the file says (see
    /// graphs/*.ron). Prints the summary; writes the files the graph's operators write.
    ///
    /// Exit status: 0 when every message came back intact; 2 when some were lost, duplicated
    /// or corrupted; 130 when interrupted (SIGINT/SIGTERM: the run stops, joins its threads
    /// and still writes its reports); 1 on an invalid graph, a start failure, a fault (a
    /// flow with policy Fault overflowed, the transceiver loop died) or a thread that did not
    /// stop.
    Run {
        /// The graph file (RON).
        graph: PathBuf,
        /// Change a setting of the file before it is checked, as `path=value` in RON
        /// (repeatable): `run.stop=Count(5000)`, `run.load=Rate(20000)`, `nic.wire=Udp()`,
        /// `peer.address=10.0.0.2:8192`, `outputs.dir=/tmp/r`, `operators.records.path=r.jsonl`.
        /// Strings may be given without quotes.
        #[arg(long = "set", value_name = "PATH=VALUE")]
        sets: Vec<String>,
        /// Write the run report as JSON here (overrides the graph's outputs.json).
        #[arg(long)]
        json: Option<PathBuf>,
        /// No progress line on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// Check a graph file and print its compiled plan: operators, threads and cores, rings
    /// and flows, the fused stage chain. Exit status 1 when the graph is invalid.
    Check {
        graph: PathBuf,
        /// As for `run`.
        #[arg(long = "set", value_name = "PATH=VALUE")]
        sets: Vec<String>,
    },
    /// Print a graph file as a picture description.
    Graph {
        graph: PathBuf,
        /// Graphviz `dot` (the only format so far, and the default): `rocelink graph g.ron
        /// --dot | dot -Tsvg > g.svg`.
        #[arg(long)]
        dot: bool,
        /// As for `run`.
        #[arg(long = "set", value_name = "PATH=VALUE")]
        sets: Vec<String>,
    },
    /// Echo round trip: the peer (fpga-sim, or an FPGA) sends RDMA WRITE with immediate
    /// frames, the transceiver answers each with a SEND, the peer measures the round trip.
    Echo {
        /// The wire carrying the RoCEv2 frames: `inproc` (lock-free rings, no kernel) or `udp`
        /// (real datagrams on port 4791 through the kernel).
        #[arg(long, value_enum, default_value = "inproc")]
        wire: WireKind,
        /// Messages to send.
        #[arg(long, default_value_t = 10_000)]
        count: u32,
        /// Bytes per message: the 24-byte RPC header plus the args (24..=4096).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Open loop at this many messages per second (up to 64 in flight); without it the
        /// run is closed loop (one message in flight).
        #[arg(long)]
        rate: Option<f64>,
        /// Messages at the start left out of the latency figures.
        #[arg(long, default_value_t = 0)]
        warmup: u32,
        /// Run fpga-sim as a separate process (needs --wire udp).
        #[arg(long)]
        peer_process: bool,
        /// Talk to a peer already running: a real HSB FPGA or a standalone fpga-sim, given by
        /// its ECB address (its RoCE address is the same IP, port 4791 unless --peer-roce).
        #[arg(long, value_name = "IP:PORT", conflicts_with = "peer_process")]
        peer: Option<SocketAddrV4>,
        /// The remote peer's RoCE address.
        #[arg(long, value_name = "IP:PORT", requires = "peer")]
        peer_roce: Option<SocketAddrV4>,
        /// Our IP on the UDP wire (default: a fresh loopback address).
        #[arg(long)]
        host_ip: Option<Ipv4Addr>,
        #[command(flatten)]
        threads: ThreadArgs,
        /// Where the transceiver loop runs: `auto` (the GPU when a CUDA driver and device
        /// exist, else the CPU), `cpu`, `gpu` or `gpu:N` (the persistent kernel), or the
        /// baseline `gpu-launch[:N]` (the CPU loop launching one kernel per message).
        #[arg(long, default_value = "auto")]
        backend: BackendKind,
        /// Give up after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        /// Write the report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// No progress line on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// Latency benchmark: each path beside its floor measured in the same run (docs/perf.md),
    /// written as Markdown + JSON + SVG into --out.
    Bench {
        /// Wires to measure.
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["inproc", "udp"])]
        wires: Vec<WireKind>,
        /// Message sizes in bytes (RPC header included).
        #[arg(long, value_delimiter = ',', default_values_t = [64usize, 1024])]
        sizes: Vec<usize>,
        /// Measured round trips per row (warm-up not included).
        #[arg(long, default_value_t = 100_000)]
        count: u32,
        /// Round trips made first and discarded.
        #[arg(long, default_value_t = 1_000)]
        warmup: u32,
        #[command(flatten)]
        threads: ThreadArgs,
        /// Folder for the report files.
        #[arg(long, default_value = "latency-reports")]
        out: PathBuf,
        /// Base name of the report files.
        #[arg(long, default_value = "bench")]
        name: String,
        /// Also measure the GPU paths: `auto` (GPU 0 when a GPU is usable), `none`, or a GPU
        /// (`gpu`, `gpu:N` or the number alone).
        #[arg(long, default_value = "auto")]
        gpu: GpuChoice,
    },
    /// QEC benchmark: per (distance, p, wire), the echo floor of the QEC messages'
    /// size, the QEC decoder graph on the CPU and the GPU backend (reaction latency, logical
    /// errors against PyMatching's, disagreements, overflows, throughput, in-loop decode
    /// time) and PyMatching's single-shot decode() latency, written as Markdown + JSON.
    BenchQec {
        /// Code distances (fixtures d<d>_p<p> under --fixtures).
        #[arg(long, value_delimiter = ',', default_values_t = [3u32, 5])]
        distances: Vec<u32>,
        /// Physical error rates, as the fixtures name them.
        #[arg(long, value_delimiter = ',', default_values = ["0.001", "0.003"])]
        ps: Vec<String>,
        /// Wires to measure.
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["inproc", "udp"])]
        wires: Vec<WireKind>,
        /// Backends: `cpu`, `gpu` or `gpu:N` (skipped with a note when no GPU is usable).
        #[arg(long, value_delimiter = ',', default_values = ["cpu", "gpu"], value_parser = BackendKind::parse_cpu_or_gpu)]
        backends: Vec<BackendKind>,
        /// Shots per QEC run (and echo round trips), warm-up not included.
        #[arg(long, default_value_t = 20_000)]
        shots: u32,
        /// Shots (and round trips) made first and left out of the latency figures.
        #[arg(long, default_value_t = 500)]
        warmup: u32,
        /// The QEC fixture folder.
        #[arg(long, default_value = "operator/tests/fixtures/qec")]
        fixtures: PathBuf,
        /// Python with pymatching for the single-shot decode() row; `none` to skip it.
        #[arg(long, default_value = "python3")]
        python: String,
        /// Folder for the report files.
        #[arg(long, default_value = "latency-reports")]
        out: PathBuf,
        /// Base name of the report files.
        #[arg(long, default_value = "bench-qec")]
        name: String,
        /// Fixture folders of the fixed-cycle runs (each beside the echo at its message rate);
        /// default: d5_p0.001 and d11_p0.001 where --fixtures has them; `none`: no such runs.
        #[arg(long, value_delimiter = ',')]
        cycle_fixtures: Option<Vec<String>>,
        /// Rounds per message of the fixed-cycle runs.
        #[arg(long, value_delimiter = ',', default_values_t = [1u32])]
        cycle_rounds: Vec<u32>,
        /// Microseconds per syndrome round of the fixed-cycle runs.
        #[arg(long, default_value_t = 1.0)]
        cycle_us: f64,
        /// Where the CPU stage does each round's streaming work: `in-loop` (before the
        /// acknowledgement), `idle` (after it, while no message waits) or `beside` (a worker
        /// thread; the QecDecoder's `settle`).
        #[arg(long, value_enum, default_value = "in-loop")]
        cpu_settle: CpuSettle,
        /// The core of the CPU stage's worker thread with `--cpu-settle beside`.
        #[arg(long)]
        settle_core: Option<usize>,
        #[command(flatten)]
        threads: ThreadArgs,
    },
    /// Decode detection events offline with the exact-matching decoder, like
    /// `pymatching predict`: one prediction (the flipped logical observables) per shot.
    /// PyMatching's spellings of the options (`--in_format`, `--out_format`,
    /// `--in_includes_appended_observables`) are accepted too.
    Decode {
        /// stim detector error model (flattened or not; `repeat` blocks are flattened).
        #[arg(long)]
        dem: PathBuf,
        /// Detection events, one shot per record.
        #[arg(long = "in", required_unless_present = "serve")]
        input: Option<PathBuf>,
        /// stim's result format of the input: `b8` (bit-packed, LSB first), `01` (a line of
        /// 0/1 per shot), `r8` (run lengths), `hits` (the 1 bits' indices) or `dets`
        /// (`shot D<i> ...`).
        #[arg(long, alias = "in_format", default_value = "b8")]
        in_format: rocelink_operator::qec::ShotFormat,
        /// Each input shot holds the DEM's observables after its detectors (ignored), as
        /// `stim detect --append_observables` writes them.
        #[arg(long, alias = "in_includes_appended_observables")]
        in_includes_appended_observables: bool,
        /// An error component of the DEM that flips more than 2 detectors (a DEM not
        /// decomposed for matching): `drop` it with a warning, as PyMatching does, or
        /// `refuse` the DEM.
        #[arg(long, value_enum, default_value = "drop")]
        hyperedges: Hyperedges,
        /// Where the predictions go.
        #[arg(long, required_unless_present = "serve")]
        out: Option<PathBuf>,
        /// The predictions' format: `01`, `b8`, `r8`, `hits` or `dets` (`shot L<k> ...`).
        #[arg(long, alias = "out_format", default_value = "01")]
        out_format: rocelink_operator::qec::ShotFormat,
        /// The shots the input must hold: a b8 file of any other size is refused before
        /// decoding (a b8 file written for another DEM reads as valid shots otherwise).
        #[arg(long, alias = "num_shots")]
        num_shots: Option<u64>,
        /// GPU backend only: its subset DP's defect cap (above it, the clusters proved by
        /// their duals; both exact). The CPU decoder has no cap.
        #[arg(long, default_value_t = 12)]
        max_defects: usize,
        /// Where to decode: `cpu` (the reference), or `gpu` / `gpu:N` (GPU N): the device
        /// stage the transceiver kernel runs (graphs/qec_*.ron), over every shot in a batch
        /// kernel; same predictions, byte for byte; the times are the in-kernel decode times.
        #[arg(long, default_value = "cpu", value_parser = BackendKind::parse_cpu_or_gpu)]
        backend: BackendKind,
        /// Also write each shot's matching weight, one a line (`inf`: no perfect matching),
        /// in PyMatching's units (`decode(..., return_weight=True)`): a prediction that differs
        /// from another decoder's is a tie when its weight is the same.
        #[arg(long)]
        weights_out: Option<PathBuf>,
        /// CPU backend: decoder threads (0: one a core the process may use). The predictions,
        /// weights and statistics are one thread's, byte for byte; the times stay each shot's
        /// own on its thread.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Instead of files: decode request after request on stdin, each an 8-byte
        /// little-endian shot count and that many b8 shots, answering each with its
        /// predictions in b8 on stdout, the DEM (and the GPU) set up once, until stdin ends
        /// (what `python/rocelink_sinter.py` runs for sinter's `compile_decoder_for_dem`).
        #[arg(long, conflicts_with_all = ["input", "out", "num_shots", "weights_out", "in_includes_appended_observables"])]
        serve: bool,
    },
    /// Run the software FPGA peer (the same program as the `fpga-sim` binary; see
    /// `rocelink fpga-sim --help`).
    #[command(name = "fpga-sim", disable_help_flag = true)]
    FpgaSim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// The spinning threads' cores and spin policy, as `echo`, `bench` and `bench-qec` take them.
#[derive(Debug, clap::Args)]
struct ThreadArgs {
    /// Cores for the NIC engine, the transceiver loop and the peer (of every run), as
    /// `nic,backend,peer` (the threads not named run unpinned).
    #[arg(long, value_name = "NIC[,BACKEND[,PEER]]")]
    cores: Option<Cores>,
    /// Spin policy of the polling threads.
    #[arg(long, value_enum, default_value = "auto")]
    spin: Spin,
    /// Dedicated spinners execute PAUSE between polls that found nothing (default: back
    /// to back). Without the flag, ROCELINK_SPIN_PAUSE set to anything but 0 asks for it.
    #[arg(long)]
    spin_pause: bool,
}

impl ThreadArgs {
    /// The cores, the policy, and PAUSE as `--spin-pause` or else the environment asks.
    fn settings(&self) -> (Cores, Spin, bool) {
        (self.cores.unwrap_or_default(), self.spin, self.spin_pause || rocelink_link::pause_asked_by_env())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::FpgaSim { args } = cli.command {
        let argv = std::iter::once("fpga-sim".to_string()).chain(args);
        return match rocelink_fpga_sim::cli::main_with_args(argv) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fpga-sim: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let level = cli.log_level.clone().unwrap_or_else(|| {
        if matches!(cli.command, Cmd::Run { .. }) {
            "warn,rocelink::metrics=info".into()
        } else {
            "warn".into()
        }
    });
    let filter =
        tracing_subscriber::EnvFilter::try_new(&level).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colours only on a terminal: logs captured to a file stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    rocelink_operator::signal::install();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rocelink: error: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `: `-separated, leaving out a cause whose text the message
/// already holds (many of ours put their source's text in their own).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.is_empty() {
            text = c;
        } else if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

/// How a run that got under way ends, for `run` and `echo` alike: its fault and problems
/// said on stderr (what did not stop cleanly is an error even when every answer came back),
/// and its exit status.
fn ended(r: &graph::RunReport) -> ExitCode {
    if let Some(f) = &r.fault {
        eprintln!("rocelink: error: the run failed: {f}");
    }
    for p in &r.problems {
        eprintln!("rocelink: error: {p}");
    }
    ExitCode::from(graph::run::exit_code(r))
}

/// `ROCELINK_DOORBELL` (`proxy`, the default, or `mmio`): an experiment switch read here, at
/// the edge, and passed down to every run (`graph::RunOptions::doorbell`).
fn doorbell() -> anyhow::Result<DoorbellMode> {
    match std::env::var("ROCELINK_DOORBELL") {
        Err(std::env::VarError::NotPresent) => Ok(DoorbellMode::Proxy),
        Ok(v) => v.parse().map_err(|e| anyhow::anyhow!("ROCELINK_DOORBELL: {e}")),
        Err(e) => anyhow::bail!("ROCELINK_DOORBELL: {e}"),
    }
}

/// How a GPU backend's persistent kernel is built, from the environment (docs/gpu.md), read
/// here, at the edge, and passed down to every run (`graph::RunOptions::kernel`):
/// `ROCELINK_KERNEL_THREADS` (the block size, a multiple of 32 up to 1024; default 128),
/// `ROCELINK_KERNEL_DEFINES` (more `-D` options, whitespace-separated: the kernel's kept
/// switches), `ROCELINK_TEST_STALL_KERNEL` (set: the watchdog's test, a kernel that stalls).
fn kernel_options() -> anyhow::Result<KernelOptions> {
    let mut k = KernelOptions::default();
    match std::env::var("ROCELINK_KERNEL_THREADS") {
        Err(std::env::VarError::NotPresent) => {}
        Ok(v) => {
            k.threads = v
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("ROCELINK_KERNEL_THREADS `{v}`: want a number of threads"))?;
            k.check().map_err(|e| anyhow::anyhow!("ROCELINK_KERNEL_THREADS: {e}"))?;
        }
        Err(e) => anyhow::bail!("ROCELINK_KERNEL_THREADS: {e}"),
    }
    match std::env::var("ROCELINK_KERNEL_DEFINES") {
        Err(std::env::VarError::NotPresent) => {}
        Ok(v) => k.defines = v.split_whitespace().map(String::from).collect(),
        Err(e) => anyhow::bail!("ROCELINK_KERNEL_DEFINES: {e}"),
    }
    k.test_stall = std::env::var_os("ROCELINK_TEST_STALL_KERNEL").is_some();
    Ok(k)
}

/// A graph's plan, with ROCELINK_SPIN_PAUSE (read here, at the edge) asking for PAUSE where
/// the file does not.
fn plan_file(graph: &std::path::Path, sets: &[String]) -> anyhow::Result<graph::Plan> {
    let mut plan = graph::plan_file(graph, &overrides(sets)?)?;
    plan.spin_pause |= rocelink_link::pause_asked_by_env();
    Ok(plan)
}

fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    let doorbell = doorbell()?;
    let kernel = kernel_options()?;
    match cmd {
        Cmd::Run { graph, sets, json, quiet } => {
            let mut plan = plan_file(&graph, &sets)?;
            if let Some(j) = json {
                plan.json = Some(j);
            }
            let r = graph::run(&plan, &graph::RunOptions { progress: !quiet, doorbell, kernel })?;
            print!("{}", graph::run::summary_text(&r));
            Ok(ended(&r))
        }
        Cmd::Check { graph, sets } => {
            let plan = plan_file(&graph, &sets)?;
            println!("{plan}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Graph { graph, dot: _, sets } => {
            let plan = plan_file(&graph, &sets)?;
            print!("{}", graph::dot::dot(&plan));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Echo {
            wire,
            count,
            size,
            rate,
            warmup,
            peer_process,
            peer,
            peer_roce,
            host_ip,
            threads,
            backend,
            timeout,
            json,
            quiet,
        } => {
            let (cores, spin, spin_pause) = threads.settings();
            let peer_mode = if let Some(ecb) = peer {
                PeerMode::Remote { ecb, roce: peer_roce.unwrap_or(SocketAddrV4::new(*ecb.ip(), 4791)) }
            } else if peer_process {
                // this program's `fpga-sim` command
                PeerMode::Process { program: None, args: Vec::new(), ip: None }
            } else {
                PeerMode::InProcess { ip: None }
            };
            let cfg = EchoConfig {
                wire,
                count,
                size,
                rate,
                warmup,
                peer: peer_mode,
                host_ip,
                cores,
                spin,
                spin_pause,
                timeout: timeout.map(Duration::from_secs_f64),
                progress: !quiet,
                backend,
                doorbell,
                kernel,
                json: json.clone(),
                ..EchoConfig::default()
            };
            if let Some(dir) = json.as_deref().and_then(|p| p.parent()).filter(|d| !d.as_os_str().is_empty()) {
                // before the run, not after it: a report that cannot be written is known now
                std::fs::create_dir_all(dir)
                    .map_err(|e| anyhow::anyhow!("--json: cannot make the folder {}: {e}", dir.display()))?;
            }
            let r = echo::run_echo(&cfg)?;
            print!("{}", report::echo_text(&r));
            if let Some(p) = json.filter(|p| r.files.contains(p)) {
                eprintln!("report written to {}", p.display());
            }
            Ok(ended(&r))
        }
        Cmd::Bench { wires, sizes, count, warmup, threads, out, name, gpu } => {
            let (cores, spin, spin_pause) = threads.settings();
            let gpu = match gpu {
                GpuChoice::None => None,
                GpuChoice::Auto => match rocelink_operator::backend::gpu::unavailable_reason() {
                    None => Some(0),
                    Some(why) => {
                        eprintln!("rocelink bench: no GPU rows: {why}");
                        None
                    }
                },
                GpuChoice::Gpu(n) => Some(n),
            };
            let cfg = rocelink_operator::bench::BenchConfig {
                wires,
                sizes,
                count,
                warmup,
                cores,
                spin,
                spin_pause,
                out_dir: out,
                name,
                gpu,
                doorbell,
                kernel,
            };
            let r = rocelink_operator::bench::run_bench(&cfg)?;
            print!("{}", rocelink_operator::bench::write::markdown(&r, &cfg.name));
            for f in &r.files {
                eprintln!("wrote {}", f.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::BenchQec {
            distances,
            ps,
            wires,
            backends,
            shots,
            warmup,
            fixtures,
            python,
            out,
            name,
            cycle_fixtures,
            cycle_rounds,
            cycle_us,
            cpu_settle,
            settle_core,
            threads,
        } => {
            let (cores, spin, spin_pause) = threads.settings();
            use rocelink_operator::bench::qec;
            let cycle_fixtures = match cycle_fixtures {
                None => ["d5_p0.001", "d11_p0.001"]
                    .into_iter()
                    .filter(|f| fixtures.join(f).join("dets.b8").is_file())
                    .map(String::from)
                    .collect(),
                Some(v) if v.iter().any(|f| f == "none") => Vec::new(),
                Some(v) => v,
            };
            let cfg = qec::QecBenchConfig {
                distances,
                ps,
                wires,
                backends,
                shots,
                warmup,
                fixtures,
                python: (python != "none").then_some(python),
                out_dir: out,
                name,
                cores,
                spin,
                spin_pause,
                doorbell,
                kernel,
                cycle_fixtures,
                cycle_rounds,
                cycle_us,
                cpu_settle: match cpu_settle {
                    CpuSettle::InLoop => rocelink_operator::stage::Settle::InLoop,
                    CpuSettle::Idle => rocelink_operator::stage::Settle::Idle,
                    CpuSettle::Beside => rocelink_operator::stage::Settle::Beside { core: settle_core },
                },
            };
            let r = qec::run_bench_qec(&cfg)?;
            print!("{}", qec::markdown(&r, &cfg.name));
            for s in &r.env.skipped {
                eprintln!("rocelink bench-qec: skipped {s}");
            }
            for f in &r.files {
                eprintln!("wrote {}", f.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Decode {
            dem,
            input,
            in_format,
            in_includes_appended_observables,
            hyperedges,
            out,
            out_format,
            num_shots,
            max_defects,
            backend,
            weights_out,
            threads,
            serve,
        } => {
            let in_format = rocelink_operator::qec::InputFormat {
                format: in_format,
                appended_observables: in_includes_appended_observables,
            };
            use rocelink_operator::qec::graph::{GraphOptions, HyperedgePolicy};
            let options = GraphOptions {
                hyperedges: match hyperedges {
                    Hyperedges::Drop => HyperedgePolicy::Ignore,
                    Hyperedges::Refuse => HyperedgePolicy::Refuse,
                },
            };
            let threads =
                if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
            if serve {
                return serve_decode(&dem, options, backend, threads, max_defects);
            }
            let (Some(input), Some(out)) = (input, out) else {
                anyhow::bail!("--in and --out name the files to decode (or --serve decodes stdin)");
            };
            // `parse_cpu_or_gpu` leaves `cpu` and `gpu:N` only.
            let (st, timed, cap) = match backend {
                BackendKind::Gpu(_) if threads != 1 => {
                    anyhow::bail!("--threads is the CPU backend's: the GPU decodes its batch in parallel blocks");
                }
                BackendKind::Gpu(n) => {
                    let r = rocelink_operator::gpu::qec_batch::decode_file(
                        n,
                        &dem,
                        &input,
                        in_format,
                        &out,
                        out_format,
                        max_defects,
                        num_shots,
                        options,
                    )?;
                    let cap = format!(" {} over the GPU decoder's scratch (decoded on the CPU),", r.stats.overflows);
                    (
                        r.stats,
                        format!(
                            "GPU {} {} ({} blocks, {} launches, {:.1} ms), in-kernel decode time per shot",
                            r.gpu.ordinal, r.gpu.name, r.decoders, r.launches, r.gpu_ms
                        ),
                        cap,
                    )
                }
                _ => (
                    rocelink_operator::qec::predict_on(
                        rocelink_operator::qec::sparse_graph_with(&dem, options)?.0,
                        &input,
                        in_format,
                        &out,
                        out_format,
                        num_shots,
                        threads,
                    )?,
                    if threads == 1 {
                        "CPU exact decoder, decode time per shot".to_string()
                    } else {
                        format!("CPU exact decoder on {threads} threads, decode time per shot")
                    },
                    String::new(),
                ),
            };
            if let Some(path) = &weights_out {
                rocelink_operator::qec::write_weights(path, &st.weights)?;
            }
            eprintln!(
                "decoded {} shots:{cap} {} unmatchable; {timed} mean {:.0} ns, p50 {} ns, p99 {} ns, max {} ns",
                st.shots,
                st.unmatchable,
                st.mean_decode_ns(),
                st.decode_ns_p50,
                st.decode_ns_p99,
                st.decode_ns_max
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::FpgaSim { .. } => unreachable!("handled before logging starts"),
    }
}

/// `rocelink decode --serve` (`rocelink_operator::qec::serve`): stdin to stdout until stdin
/// ends, then a line of what was done on stderr.
fn serve_decode(
    dem: &std::path::Path,
    options: rocelink_operator::qec::graph::GraphOptions,
    backend: BackendKind,
    threads: usize,
    max_defects: usize,
) -> anyhow::Result<ExitCode> {
    let (input, output) = (std::io::stdin().lock(), std::io::BufWriter::new(std::io::stdout().lock()));
    let (stats, on) = match backend {
        BackendKind::Gpu(_) if threads != 1 => {
            anyhow::bail!("--threads is the CPU backend's: the GPU decodes its batch in parallel blocks");
        }
        BackendKind::Gpu(n) => {
            let (stats, run) = rocelink_operator::gpu::qec_batch::serve(n, dem, max_defects, options, input, output)?;
            (
                stats,
                format!("GPU {} {} ({} launches, {:.1} ms)", run.gpu.ordinal, run.gpu.name, run.launches, run.gpu_ms),
            )
        }
        _ => {
            let graph = rocelink_operator::qec::sparse_graph_with(dem, options)?.0;
            (
                rocelink_operator::qec::serve::serve_cpu(graph, threads, input, output)?,
                format!("CPU exact decoder on {threads} thread(s)"),
            )
        }
    };
    eprintln!(
        "served {} requests, {} shots ({} over the GPU decoder's scratch, decoded on the CPU; {} unmatchable), {on}",
        stats.requests, stats.shots, stats.overflows, stats.unmatchable
    );
    Ok(ExitCode::SUCCESS)
}

fn overrides(sets: &[String]) -> anyhow::Result<Vec<graph::Override>> {
    sets.iter().map(|s| graph::Override::parse(s).map_err(anyhow::Error::msg)).collect()
}
