//! The `fpga-sim` command line: parses flags, binds the UDP data plane, starts the peer,
//! prints one ready line and waits for a signal. Used by the `fpga-sim` binary and by
//! `rocelink fpga-sim`.

use std::io::{IsTerminal, Read, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::{start_with_qec, QecReplay, QecReplayConfig, SimConfig};
use anyhow::Context;
use clap::Parser;
use rocelink_link::{SpinMode, UdpLink};

/// The line printed on stdout once the peer serves (a parent waits for it):
/// `fpga-sim: ECB on <ip:port>, RoCE on <ip:port>`.
pub fn ready_line(ecb: SocketAddrV4, roce: SocketAddrV4) -> String {
    format!("{READY_ECB}{ecb}{READY_ROCE}{roce}")
}

/// The ECB and RoCE addresses of a [`ready_line`] (surrounding white space allowed).
pub fn parse_ready_line(line: &str) -> Option<(SocketAddrV4, SocketAddrV4)> {
    let (ecb, roce) = line.trim().strip_prefix(READY_ECB)?.split_once(READY_ROCE)?;
    Some((ecb.parse().ok()?, roce.parse().ok()?))
}

const READY_ECB: &str = "fpga-sim: ECB on ";
const READY_ROCE: &str = ", RoCE on ";

/// Spinning threads when the peer and a host share the machine: the peer's data plane and
/// the host's receive loop.
const SPINNERS: usize = 2;

#[derive(Debug, Parser)]
#[command(
    name = "fpga-sim",
    version,
    about = "Software FPGA peer speaking the Holoscan Sensor Bridge (HSB) protocols",
    long_about = "Software FPGA peer speaking the Holoscan Sensor Bridge (HSB) protocols.\n\n\
        A host configures it exactly as it would configure an HSB FPGA: over ECB (register \
        reads and writes in UDP datagrams) it sets the data-plane registers (host QP, rkey, \
        buffer address, page stride, host MAC/IP/port), writes a request template into the \
        player RAM, arms the capture RAM and starts the traffic player. The peer then sends \
        RoCEv2 RDMA WRITE with immediate frames to the host, checks every UC SEND answer, and \
        records its echoed and arrival timestamps in the capture RAM, which the host reads \
        back over ECB.\n\n\
        When ready it prints one line to stdout:\n  \
        fpga-sim: ECB on <addr>, RoCE on <addr>\n\
        and runs until SIGINT or SIGTERM (or until stdin closes, with --exit-on-stdin-close). \
        Logs go to stderr.\n\n\
        QEC syndrome replay (--qec-dets with --qec-dem and --qec-obs): the shots are loaded at \
        start and each player window becomes one shot, sent round by round as \
        enqueue_syndromes messages (the player interval is the time per round; \
        PLAYER_MAX_OUTSTANDING 1 is closed loop). Each correction is checked against the true \
        observables and the reference prediction; results are in the QEC_* extension \
        registers and the capture flags (FINAL_ROUND, LOGICAL_OK, MATCHES_REFERENCE, \
        OVERFLOW)."
)]
struct Args {
    /// UDP address of the ECB control server (the host's register reads and writes). Port 0
    /// picks a free port; the ready line tells which.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.2:8192")]
    ecb: SocketAddrV4,

    /// UDP address of the RoCEv2 data plane: answers arrive here, and frames leave from this
    /// IP (the peer's source IP, covered by the ICRC). Port 0 picks a free port.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.2:4791")]
    roce: SocketAddrV4,

    /// The peer's MAC address (source MAC of the frames it sends), as aa:bb:cc:dd:ee:ff.
    #[arg(long, value_name = "MAC", default_value = "02:00:00:00:00:02", value_parser = parse_mac)]
    mac: [u8; 6],

    /// The peer's queue pair number, to which the host sends its answers (24 bits). The host
    /// may override it at run time through the PLAYER_FPGA_QP extension register.
    #[arg(long, value_name = "QPN", default_value_t = crate::DEFAULT_QP)]
    qp: u32,

    /// Pin the data-plane thread to this core (an index as the OS numbers cores).
    #[arg(long, value_name = "N")]
    core: Option<usize>,

    /// How the data-plane thread busy-polls during a run: `dedicated` never yields its core
    /// (lowest latency, needs a free core), `shared` yields after a short spin (for machines
    /// with fewer cores than spinning threads), `auto` picks `dedicated` when the machine has
    /// more than 2 cores.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["dedicated", "shared", "auto"])]
    spin: String,

    /// A `dedicated` data-plane thread executes PAUSE between polls that found nothing
    /// (default: back to back). Without the flag, `ROCELINK_SPIN_PAUSE` set to anything but
    /// `0` asks for it.
    #[arg(long)]
    spin_pause: bool,

    /// Log filter for stderr: error, warn, info, debug, trace, or tracing directives such as
    /// `rocelink_fpga_sim=debug`.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    log_level: String,

    /// Exit when stdin reaches end of file, so that a parent that dies takes the peer along
    /// (give the peer a pipe as stdin and keep its write end open).
    #[arg(long)]
    exit_on_stdin_close: bool,

    /// Detection events to replay, stim b8 format (`stim detect --out_format b8`): turns on
    /// the QEC syndrome replay. Needs --qec-dem and --qec-obs.
    #[arg(long, value_name = "FILE.b8", requires_all = ["qec_dem", "qec_obs"], help_heading = "QEC syndrome replay")]
    qec_dets: Option<PathBuf>,

    /// The detector error model of the shots (stim .dem): detector and observable counts, and
    /// the split into rounds (detectors grouped by their time coordinate).
    #[arg(long, value_name = "FILE.dem", requires = "qec_dets", help_heading = "QEC syndrome replay")]
    qec_dem: Option<PathBuf>,

    /// True observable flips of the shots, stim 01 format: corrections that differ are
    /// logical errors.
    #[arg(long, value_name = "FILE.01", requires = "qec_dets", help_heading = "QEC syndrome replay")]
    qec_obs: Option<PathBuf>,

    /// Reference predictions, stim 01 format (`pymatching predict --out_format 01`):
    /// corrections that differ are disagreements.
    #[arg(long, value_name = "FILE.01", requires = "qec_dets", help_heading = "QEC syndrome replay")]
    qec_pred: Option<PathBuf>,

    /// Rounds per enqueue_syndromes message, or `all` for a whole shot per message (the
    /// power-on value of the QEC_ROUNDS_PER_MESSAGE register).
    #[arg(long, value_name = "N|all", default_value = "1", value_parser = parse_rounds_per_message, help_heading = "QEC syndrome replay")]
    qec_rounds_per_message: u32,

    /// Detectors per round, e.g. `12,24,24,24,24,12`, instead of the DEM's coordinates (for
    /// a DEM without detector coordinates).
    #[arg(
        long,
        value_name = "N,N,..",
        value_delimiter = ',',
        requires = "qec_dets",
        help_heading = "QEC syndrome replay"
    )]
    qec_detectors_per_round: Option<Vec<usize>>,

    /// decoder_id of every enqueue_syndromes message.
    #[arg(
        long,
        value_name = "ID",
        default_value_t = 0,
        allow_negative_numbers = true,
        help_heading = "QEC syndrome replay"
    )]
    qec_decoder_id: i64,

    /// syndrome_mapping_id of every enqueue_syndromes message.
    #[arg(
        long,
        value_name = "ID",
        default_value_t = 0,
        allow_negative_numbers = true,
        help_heading = "QEC syndrome replay"
    )]
    qec_syndrome_mapping_id: i64,
}

/// `N` (at least 1) or `all` (0 in the register).
fn parse_rounds_per_message(s: &str) -> Result<u32, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(0);
    }
    match s.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{s}` is not a round count (want N >= 1 or `all`)")),
    }
}

impl Args {
    /// The QEC replay the flags ask for, if any.
    fn qec_config(&self) -> Option<QecReplayConfig> {
        let dets = self.qec_dets.clone()?;
        Some(QecReplayConfig {
            dem: self.qec_dem.clone().unwrap_or_default(),
            dets,
            obs: self.qec_obs.clone().unwrap_or_default(),
            pred: self.qec_pred.clone(),
            detectors_per_round: self.qec_detectors_per_round.clone(),
            rounds_per_message: self.qec_rounds_per_message,
            decoder_id: self.qec_decoder_id,
            syndrome_mapping_id: self.qec_syndrome_mapping_id,
        })
    }
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(format!("`{s}` is not a MAC address (want aa:bb:cc:dd:ee:ff)"));
    }
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("`{s}` is not a MAC address (bad byte `{p}`)"))?;
    }
    Ok(mac)
}

/// Set by SIGINT/SIGTERM or by the end of stdin.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C"` function that only stores to an atomic,
        // which is async-signal-safe; `signal` has no other preconditions.
        unsafe { libc::signal(sig, handler) };
    }
}

fn watch_stdin() -> std::io::Result<()> {
    std::thread::Builder::new().name("fpga-sim-stdin".into()).spawn(|| {
        let mut buf = [0u8; 256];
        let mut stdin = std::io::stdin();
        loop {
            match stdin.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        STOP.store(true, Ordering::SeqCst);
    })?;
    Ok(())
}

/// Runs the peer with command-line arguments (`argv[0]` first) until a signal, or the end of
/// stdin with `--exit-on-stdin-close`.
pub fn main_with_args<I, T>(argv: I) -> anyhow::Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = Args::parse_from(argv);
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .with_context(|| format!("bad --log-level `{}`", args.log_level))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let spin = SpinMode::parse(&args.spin, SPINNERS)
        .context("bad --spin")?
        .with_pause(args.spin_pause || rocelink_link::pause_asked_by_env());
    // Loaded before anything binds, so a bad file fails fast and names itself.
    let qec = args.qec_config().map(|c| QecReplay::load(&c)).transpose().context("cannot load the QEC replay")?;
    if let Some(q) = &qec {
        tracing::info!(
            shots = q.shots(),
            detectors = q.num_detectors(),
            rounds = q.rounds_per_shot(),
            observables = q.num_observables(),
            reference = q.has_reference(),
            "QEC replay loaded"
        );
    }
    let link = UdpLink::bind(args.roce).with_context(|| format!("cannot bind the RoCE data plane to {}", args.roce))?;
    let roce_addr = link.local_addr();
    let config = SimConfig {
        ecb_bind: args.ecb,
        mac: args.mac,
        ip: roce_addr.ip().octets(),
        qp: args.qp,
        core: args.core,
        spin,
    };
    install_signal_handlers();
    if args.exit_on_stdin_close {
        watch_stdin().context("cannot watch stdin")?;
    }
    let sim = start_with_qec(config, qec, Box::new(link))?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", ready_line(sim.ecb_addr(), roce_addr))?;
    out.flush()?;
    drop(out);
    tracing::info!(spin = %spin, qp = args.qp, "ready");

    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    tracing::info!("stopping");
    sim.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_line_reads_back() {
        let (ecb, roce) = ("127.0.0.2:8192".parse().unwrap(), "127.0.0.2:4791".parse().unwrap());
        let line = ready_line(ecb, roce);
        assert_eq!(line, "fpga-sim: ECB on 127.0.0.2:8192, RoCE on 127.0.0.2:4791");
        assert_eq!(parse_ready_line(&format!("{line}\n")), Some((ecb, roce)));
        assert_eq!(parse_ready_line("fpga-sim: ECB on 127.0.0.2:8192"), None);
    }
}
