//! The settings every layer shares: the wire, the cores, how polling threads spin, where the
//! peer runs, where the transceiver loop runs (as asked, and as resolved on this machine) and
//! what a full flow does.
//!
//! Each setting has one type, parsed one way ([`FromStr`]; with the `clap` feature also
//! `clap::ValueEnum` for the enums) and written one way (`Display`, and serde where a graph
//! file or a report holds it). The command line, graph files, the runners and the reports
//! all use these types, so a value means the same everywhere.
//!
//! Guarantee: this module imports nothing from the rest of the crate; every module may use it.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::str::FromStr;

use rocelink_link::SpinMode;
use serde::{Deserialize, Serialize};

/// Which wire carries the RoCEv2 frames of the software NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum WireKind {
    /// Lock-free rings between threads of this process (no kernel).
    Inproc,
    /// UDP datagrams on port 4791, through the kernel.
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

impl fmt::Display for WireKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WireKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "inproc" => Ok(WireKind::Inproc),
            "udp" => Ok(WireKind::Udp),
            _ => Err(format!("`{s}` is not a wire (inproc, udp)")),
        }
    }
}

/// Cores to pin the spinning threads to; a thread without one runs unpinned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cores {
    pub nic: Option<usize>,
    pub backend: Option<usize>,
    pub peer: Option<usize>,
}

impl FromStr for Cores {
    type Err = String;
    /// `nic[,backend[,peer]]`: up to three core numbers, the threads not named unpinned.
    fn from_str(s: &str) -> Result<Self, String> {
        let cores = s
            .split(',')
            .map(|c| {
                c.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("`{c}` is not a core number (cores are `nic,backend,peer`)"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if cores.len() > 3 {
            return Err(format!("at most three cores, `nic,backend,peer` (got {}: {cores:?})", cores.len()));
        }
        Ok(Cores { nic: cores.first().copied(), backend: cores.get(1).copied(), peer: cores.get(2).copied() })
    }
}

impl fmt::Display for Cores {
    /// The form [`FromStr`] reads, `-` for an unpinned thread before a pinned one; `unpinned`
    /// when none is pinned.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all = [self.nic, self.backend, self.peer];
        let Some(last) = all.iter().rposition(Option::is_some) else { return f.write_str("unpinned") };
        let parts: Vec<String> = all[..=last].iter().map(|c| c.map_or("-".to_string(), |c| c.to_string())).collect();
        f.write_str(&parts.join(","))
    }
}

/// How the spinning threads (NIC engine, transceiver loop, peer) use their cores. Graph files
/// write it as `cores.spin: Auto | Dedicated | Shared`, the command line as `--spin auto`.
/// With it goes whether a dedicated spinner executes PAUSE between polls (`cores.spin_pause:
/// true`, `--spin-pause`; off by default). A run turns the two into the [`SpinMode`] its
/// threads run with ([`Spin::mode`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Spin {
    /// `Dedicated` when every spinning thread has a core, `Shared` otherwise.
    #[default]
    Auto,
    /// Spin without ever yielding (needs a core per spinner).
    Dedicated,
    /// Spin briefly, then yield (fewer cores than spinners).
    Shared,
}

impl Spin {
    /// The mode `spinners` spinning threads run with on this machine; a dedicated one with
    /// PAUSE between polls when `pause`.
    pub fn mode(self, spinners: usize, pause: bool) -> SpinMode {
        let mode = match self {
            Spin::Auto => SpinMode::for_spinners(spinners),
            Spin::Dedicated => SpinMode::Dedicated { pause: false },
            Spin::Shared => SpinMode::Shared,
        };
        mode.with_pause(pause)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Spin::Auto => "auto",
            Spin::Dedicated => "dedicated",
            Spin::Shared => "shared",
        }
    }
}

impl From<SpinMode> for Spin {
    fn from(m: SpinMode) -> Spin {
        match m {
            SpinMode::Dedicated { .. } => Spin::Dedicated,
            SpinMode::Shared => Spin::Shared,
        }
    }
}

impl fmt::Display for Spin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Spin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Spin::Auto),
            "dedicated" => Ok(Spin::Dedicated),
            "shared" => Ok(Spin::Shared),
            _ => Err(format!("`{s}` is not a spin policy (auto, dedicated, shared)")),
        }
    }
}

/// Where the peer runs: what a graph's `peer` compiles to, and what `rocelink echo` and the
/// CUDA-Q provider ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerMode {
    /// fpga-sim on threads of this process, at `ip` (default: a fresh loopback address).
    InProcess { ip: Option<Ipv4Addr> },
    /// fpga-sim as a separate process at `ip`: `program` followed by `args`, then the peer's
    /// flags (default: this program's `fpga-sim` command).
    Process { program: Option<PathBuf>, args: Vec<String>, ip: Option<Ipv4Addr> },
    /// A peer already running at these addresses (a real FPGA, or a standalone fpga-sim).
    Remote { ecb: SocketAddrV4, roce: SocketAddrV4 },
}

/// Where the transceiver loop should run, as a graph file (`backend: Gpu(0)`) or the command
/// line (`--backend gpu:0`) asks; [`Backend`] is what it resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackendKind {
    /// The GPU when a CUDA driver and a device exist (and it can run the stage chain),
    /// otherwise the CPU (with one line saying why).
    Auto,
    /// GPU number `n`; an error when there is none.
    Gpu(usize),
    Cpu,
    /// A baseline for benchmarks: the CPU loop launches one kernel per message on GPU `n`.
    GpuLaunchPerMessage(usize),
}

impl BackendKind {
    /// `cpu`, `gpu` or `gpu:N` only: for the commands that compute on a device directly
    /// (`decode`, `bench-qec`), where `auto` and the launch baseline mean nothing.
    pub fn parse_cpu_or_gpu(s: &str) -> Result<BackendKind, String> {
        match s.parse() {
            Ok(k @ (BackendKind::Cpu | BackendKind::Gpu(_))) => Ok(k),
            _ => Err(format!("`{s}` is not a device backend (cpu, gpu, gpu:N)")),
        }
    }
}

impl fmt::Display for BackendKind {
    /// The command line's form, with the GPU's number always written: `auto`, `cpu`,
    /// `gpu:0`, `gpu-launch:0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendKind::Auto => f.write_str("auto"),
            BackendKind::Cpu => f.write_str("cpu"),
            BackendKind::Gpu(n) => write!(f, "gpu:{n}"),
            BackendKind::GpuLaunchPerMessage(n) => write!(f, "gpu-launch:{n}"),
        }
    }
}

impl FromStr for BackendKind {
    type Err = String;
    /// `auto`, `cpu`, `gpu` or `gpu:N`, `gpu-launch` or `gpu-launch:N` (no number: GPU 0).
    fn from_str(s: &str) -> Result<Self, String> {
        let kind = match s {
            "auto" => Some(BackendKind::Auto),
            "cpu" => Some(BackendKind::Cpu),
            _ => match s.strip_prefix("gpu-launch") {
                Some(rest) => ordinal_after(rest).map(BackendKind::GpuLaunchPerMessage),
                None => GpuDevice::parse_ordinal(s).map(BackendKind::Gpu),
            },
        };
        kind.ok_or_else(|| format!("`{s}` is not a backend (auto, cpu, gpu, gpu:N, gpu-launch, gpu-launch:N)"))
    }
}

/// A GPU by its number and its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDevice {
    pub ordinal: usize,
    /// As the driver names it (`NVIDIA H200`).
    pub name: String,
}

impl GpuDevice {
    /// The number of the GPU that `gpu` (GPU 0) or `gpu:N` names: how every command and
    /// argument names one.
    pub fn parse_ordinal(s: &str) -> Option<usize> {
        s.strip_prefix("gpu").and_then(ordinal_after)
    }
}

/// What follows `gpu` in a GPU's name: nothing (GPU 0) or `:N`.
fn ordinal_after(rest: &str) -> Option<usize> {
    match rest {
        "" => Some(0),
        _ => rest.strip_prefix(':').and_then(|n| n.parse().ok()),
    }
}

/// The GPU a command that also measures without one uses (`rocelink bench --gpu`): `auto`
/// (GPU 0 when one is usable), `none`, or GPU N (`gpu`, `gpu:N`, or the number alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuChoice {
    Auto,
    None,
    Gpu(usize),
}

impl FromStr for GpuChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(GpuChoice::Auto),
            "none" => Ok(GpuChoice::None),
            _ => GpuDevice::parse_ordinal(s)
                .or_else(|| s.parse().ok())
                .map(GpuChoice::Gpu)
                .ok_or_else(|| format!("`{s}` is not a GPU choice (auto, none, gpu, gpu:N, N)")),
        }
    }
}

impl fmt::Display for GpuChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuChoice::Auto => f.write_str("auto"),
            GpuChoice::None => f.write_str("none"),
            GpuChoice::Gpu(n) => write!(f, "gpu:{n}"),
        }
    }
}

/// Where the transceiver loop runs: a [`BackendKind`] resolved on this machine once
/// (`backend::resolve`), then what `check` prints, what `run` starts and what reports name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Backend {
    /// The CPU loop.
    Cpu,
    /// The persistent kernel on this GPU.
    Gpu(GpuDevice),
    /// The CPU loop launching one kernel per message on this GPU (a baseline).
    GpuLaunchPerMessage(GpuDevice),
}

impl Backend {
    /// The GPU it uses, if any.
    pub fn gpu(&self) -> Option<&GpuDevice> {
        match self {
            Backend::Cpu => None,
            Backend::Gpu(d) | Backend::GpuLaunchPerMessage(d) => Some(d),
        }
    }

    /// The transceiver loop runs on the CPU (and stamps its records with CLOCK_MONOTONIC).
    pub fn loop_on_cpu(&self) -> bool {
        matches!(self, Backend::Cpu | Backend::GpuLaunchPerMessage(_))
    }

    /// The kind that names this backend exactly.
    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Cpu => BackendKind::Cpu,
            Backend::Gpu(d) => BackendKind::Gpu(d.ordinal),
            Backend::GpuLaunchPerMessage(d) => BackendKind::GpuLaunchPerMessage(d.ordinal),
        }
    }
}

impl fmt::Display for Backend {
    /// `cpu`, `gpu 0 (NVIDIA H200)`, `gpu-launch 0 (NVIDIA H200)`: reports' `env.backend`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Cpu => f.write_str("cpu"),
            Backend::Gpu(d) => write!(f, "gpu {} ({})", d.ordinal, d.name),
            Backend::GpuLaunchPerMessage(d) => write!(f, "gpu-launch {} ({})", d.ordinal, d.name),
        }
    }
}

/// What a full host flow does with one more message. Nothing ever blocks the data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    /// Drop the oldest queued message (counted).
    Pop,
    /// Drop the new message (counted).
    Reject,
    /// Fail the run.
    Fault,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Pop => "Pop",
            Policy::Reject => "Reject",
            Policy::Fault => "Fault",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_kinds_parse_and_print_the_same_way() {
        for (text, kind) in [
            ("auto", BackendKind::Auto),
            ("cpu", BackendKind::Cpu),
            ("gpu", BackendKind::Gpu(0)),
            ("gpu:3", BackendKind::Gpu(3)),
            ("gpu-launch", BackendKind::GpuLaunchPerMessage(0)),
            ("gpu-launch:2", BackendKind::GpuLaunchPerMessage(2)),
        ] {
            assert_eq!(text.parse::<BackendKind>(), Ok(kind), "{text}");
            assert_eq!(kind.to_string().parse::<BackendKind>(), Ok(kind), "{kind}");
        }
        for bad in ["", "gpu:", "gpu:x", "gpu0", "gpu-launch:", "GPU", "tpu", "cpu:0"] {
            assert!(bad.parse::<BackendKind>().unwrap_err().contains("is not a backend"), "{bad}");
        }
        assert_eq!(BackendKind::parse_cpu_or_gpu("gpu:1"), Ok(BackendKind::Gpu(1)));
        assert_eq!(BackendKind::parse_cpu_or_gpu("cpu"), Ok(BackendKind::Cpu));
        assert!(BackendKind::parse_cpu_or_gpu("auto").is_err());
        assert!(BackendKind::parse_cpu_or_gpu("gpu-launch").is_err());
    }

    #[test]
    fn gpus_are_named_one_way() {
        assert_eq!((GpuDevice::parse_ordinal("gpu"), GpuDevice::parse_ordinal("gpu:2")), (Some(0), Some(2)));
        for bad in ["gpu:", "gpux", "2", "cpu"] {
            assert_eq!(GpuDevice::parse_ordinal(bad), None, "{bad}");
        }
        for (text, choice) in [
            ("auto", GpuChoice::Auto),
            ("none", GpuChoice::None),
            ("gpu", GpuChoice::Gpu(0)),
            ("gpu:1", GpuChoice::Gpu(1)),
            ("3", GpuChoice::Gpu(3)),
        ] {
            assert_eq!(text.parse(), Ok(choice), "{text}");
            assert_eq!(choice.to_string().parse(), Ok(choice), "{choice}");
        }
        assert!("gpu:x".parse::<GpuChoice>().unwrap_err().contains("not a GPU choice"));
    }

    #[test]
    fn cores_take_one_to_three_numbers() {
        assert_eq!("3".parse(), Ok(Cores { nic: Some(3), backend: None, peer: None }));
        assert_eq!("1,2,3".parse(), Ok(Cores { nic: Some(1), backend: Some(2), peer: Some(3) }));
        assert!("1,2,3,4".parse::<Cores>().unwrap_err().contains("at most three"));
        assert!("1,x".parse::<Cores>().is_err());
        assert!("".parse::<Cores>().is_err());
        assert_eq!(Cores { nic: None, backend: Some(2), peer: None }.to_string(), "-,2");
        assert_eq!(Cores::default().to_string(), "unpinned");
    }

    #[test]
    fn spin_resolves_auto_from_the_spinners_only() {
        assert_eq!(Spin::Dedicated.mode(1_000_000, false), SpinMode::Dedicated { pause: false });
        assert_eq!(Spin::Dedicated.mode(1, true), SpinMode::Dedicated { pause: true });
        assert_eq!(Spin::Shared.mode(1, true), SpinMode::Shared);
        assert_eq!(Spin::Auto.mode(1_000_000, true), SpinMode::Shared);
        assert_eq!("dedicated".parse::<Spin>(), Ok(Spin::Dedicated));
        assert!("fast".parse::<Spin>().is_err());
        assert_eq!(Spin::from(SpinMode::Shared), Spin::Shared);
    }

    #[test]
    fn resolved_backends_name_their_gpu() {
        let d = GpuDevice { ordinal: 1, name: "NVIDIA H200".into() };
        assert_eq!(Backend::Gpu(d.clone()).to_string(), "gpu 1 (NVIDIA H200)");
        assert_eq!(Backend::Cpu.to_string(), "cpu");
        assert!(Backend::GpuLaunchPerMessage(d.clone()).loop_on_cpu() && !Backend::Gpu(d.clone()).loop_on_cpu());
        assert_eq!(Backend::GpuLaunchPerMessage(d).kind(), BackendKind::GpuLaunchPerMessage(1));
    }
}
