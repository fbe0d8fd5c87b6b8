//! The provider's arguments (`create(argc, argv)`): a graph file, or the few flags of
//! `rocelink echo` that say where the peer is and how the NIC runs. A dispatcher forwards its
//! whole argument list, so arguments that are not ours are ignored; ours with a bad value are
//! refused with the reason. `--flag value` and `--flag=value` are the same.
//!
//! | argument | meaning | default |
//! |---|---|---|
//! | `--graph FILE` | wire, peer, cores, spin and slots from a graph file (`graphs/*.ron`); later flags override it | |
//! | `--wire udp\|inproc` | the wire carrying the RoCEv2 frames; `inproc` needs `--peer sim` | `udp` |
//! | `--peer sim\|IP:PORT` | fpga-sim started in this process, or a peer already running at this ECB address (an HSB FPGA, a standalone fpga-sim) | `sim` |
//! | `--peer-roce IP:PORT` | the remote peer's RoCE address | the peer's IP, port 4791 |
//! | `--host-ip IP` | our address on the UDP wire (port 4791) | a fresh loopback address |
//! | `--cores NIC[,PEER]` | cores for the NIC engine thread and fpga-sim's data plane | unpinned |
//! | `--spin auto\|dedicated\|shared` | how the polling threads spin | `auto` |
//! | `--spin-pause` (no value) | dedicated spinners execute PAUSE between polls (else `ROCELINK_SPIN_PAUSE`, read by `create`) | back to back |
//! | `--slots N` (`--num-slots`) | ring slots (each way) | 64 |
//! | `--slot-size BYTES` | bytes per slot, a multiple of 64 up to 4096 | 4096 |
//! | `--ring-memory auto\|host\|gpu[:N]` | pinned memory mapped into GPU N, or host memory | `auto` (GPU 0 where there is one) |
//! | `--log-level LEVEL` | a `tracing` filter for this library's logs on stderr | errors only |

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use rocelink_link::SpinMode;
use rocelink_operator::graph::compile::NicPlan;
use rocelink_operator::settings::{GpuDevice, PeerMode, Spin, WireKind};
use rocelink_wire::roce;

use crate::ring::{Geometry, RingMemory};

/// What `create` was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub wire: WireKind,
    /// `InProcess` or `Remote`.
    pub peer: PeerMode,
    pub host_ip: Option<Ipv4Addr>,
    pub nic_core: Option<usize>,
    pub peer_core: Option<usize>,
    /// `Auto`: decided from the cores there are.
    pub spin: Spin,
    /// Dedicated spinners execute PAUSE between polls.
    pub spin_pause: bool,
    pub geometry: Geometry,
    pub ring_memory: RingMemory,
    pub log_level: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            wire: WireKind::Udp,
            peer: PeerMode::InProcess { ip: None },
            host_ip: None,
            nic_core: None,
            peer_core: None,
            spin: Spin::Auto,
            spin_pause: false,
            geometry: Geometry { slots: 64, slot_size: 4096 },
            ring_memory: RingMemory::Auto,
            log_level: None,
        }
    }
}

impl Config {
    /// The NIC's wire as the operator's peer starter takes it.
    pub fn nic_plan(&self) -> NicPlan {
        NicPlan::Soft { wire: self.wire, bind: self.bind() }
    }

    /// The host's RoCE address on the UDP wire, when `--host-ip` names one.
    pub fn bind(&self) -> Option<SocketAddrV4> {
        self.host_ip.map(|ip| SocketAddrV4::new(ip, roce::UDP_PORT))
    }

    /// The spin policy: the NIC engine and the dispatcher spin, and fpga-sim when it runs here.
    pub fn spin_mode(&self) -> SpinMode {
        let spinners = if matches!(self.peer, PeerMode::InProcess { .. }) { 3 } else { 2 };
        self.spin.mode(spinners, self.spin_pause)
    }
}

/// The flags that take a value (everything else is ignored).
const OURS: &[&str] = &[
    "graph",
    "wire",
    "peer",
    "peer-roce",
    "host-ip",
    "cores",
    "spin",
    "slots",
    "num-slots",
    "slot-size",
    "ring-memory",
    "log-level",
];

/// Parses `args` (without a program name: a provider's argv holds only arguments).
pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Config, String> {
    let mut c = Config::default();
    let mut peer_roce: Option<SocketAddrV4> = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_ref();
        i += 1;
        let Some(flag) = arg.strip_prefix("--") else { continue };
        let (key, inline) = match flag.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (flag, None),
        };
        if key == "spin-pause" && inline.is_none() {
            c.spin_pause = true;
            continue;
        }
        if !OURS.contains(&key) {
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let Some(v) = args.get(i) else { return Err(format!("--{key} needs a value")) };
                i += 1;
                v.as_ref().to_string()
            }
        };
        let bad = |what: &str| format!("--{key} {value:?}: {what}");
        match key {
            "graph" => from_graph(&mut c, Path::new(&value)).map_err(|e| format!("--graph {value}: {e}"))?,
            "wire" => c.wire = value.parse().map_err(|_| bad("want udp or inproc"))?,
            "peer" => {
                c.peer = if value == "sim" {
                    PeerMode::InProcess { ip: None }
                } else {
                    let ecb: SocketAddrV4 =
                        value.parse().map_err(|_| bad("want sim or the peer's ECB address IP:PORT"))?;
                    PeerMode::Remote { ecb, roce: SocketAddrV4::new(*ecb.ip(), roce::UDP_PORT) }
                }
            }
            "peer-roce" => peer_roce = Some(value.parse().map_err(|_| bad("want IP:PORT"))?),
            "host-ip" => c.host_ip = Some(value.parse().map_err(|_| bad("want an IPv4 address"))?),
            "cores" => {
                let cores: Vec<usize> = value
                    .split(',')
                    .map(|s| s.trim().parse())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad("want NIC[,PEER] core numbers"))?;
                if cores.is_empty() || cores.len() > 2 {
                    return Err(bad("want NIC[,PEER] core numbers"));
                }
                c.nic_core = Some(cores[0]);
                c.peer_core = cores.get(1).copied();
            }
            "spin" => c.spin = value.parse::<Spin>().map_err(|_| bad("want auto, dedicated or shared"))?,
            "slots" | "num-slots" => c.geometry.slots = value.parse().map_err(|_| bad("want a number of slots"))?,
            "slot-size" => c.geometry.slot_size = value.parse().map_err(|_| bad("want a number of bytes"))?,
            "ring-memory" => {
                c.ring_memory = match value.as_str() {
                    "auto" => RingMemory::Auto,
                    "host" => RingMemory::Host,
                    v => RingMemory::Gpu(
                        GpuDevice::parse_ordinal(v).ok_or_else(|| bad("want auto, host, gpu or gpu:N"))?,
                    ),
                }
            }
            "log-level" => c.log_level = Some(value),
            _ => unreachable!("every key of OURS is handled"),
        }
    }
    if let Some(r) = peer_roce {
        match &mut c.peer {
            PeerMode::Remote { roce, .. } => *roce = r,
            _ => return Err("--peer-roce needs --peer IP:PORT (a peer already running)".into()),
        }
    }
    c.geometry.validate()?;
    if c.wire == WireKind::Inproc && !matches!(c.peer, PeerMode::InProcess { .. }) {
        return Err("--wire inproc carries frames between threads of this process: it needs --peer sim".into());
    }
    if let (Some(a), Some(b)) = (c.nic_core, c.peer_core) {
        if a == b {
            return Err(format!("--cores {a},{b}: the NIC engine and the peer need cores of their own"));
        }
    }
    Ok(c)
}

/// Takes the wire, peer, cores, spin and slots of a graph file.
fn from_graph(c: &mut Config, path: &Path) -> Result<(), String> {
    let plan = rocelink_operator::graph::plan_file(path, &[]).map_err(|e| e.to_string())?;
    match plan.nic {
        NicPlan::Soft { wire, bind } => {
            c.wire = wire;
            c.host_ip = bind.map(|b| *b.ip());
        }
        NicPlan::Verbs { .. } => return Err("a verbs NIC: this provider drives the software NIC only".into()),
    }
    c.peer = match &plan.peer {
        p @ (PeerMode::InProcess { .. } | PeerMode::Remote { .. }) => p.clone(),
        PeerMode::Process { .. } => {
            return Err("a peer process: a provider has no program of its own to start fpga-sim with; use FpgaSim(mode: InProcess) or Fpga(address: ..)".into())
        }
    };
    c.nic_core = plan.cores.nic;
    c.peer_core = plan.cores.peer;
    c.spin = plan.spin;
    c.spin_pause = plan.spin_pause;
    c.geometry = Geometry { slots: plan.transceiver.1.slots, slot_size: plan.slot_stride() };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_both_flag_forms() {
        assert_eq!(parse::<&str>(&[]), Ok(Config::default()));
        let c =
            parse(&["--wire=inproc", "--slots", "8", "--slot-size=256", "--cores", "0,1", "--spin", "shared"]).unwrap();
        assert!(!c.spin_pause);
        assert!(parse(&["--spin", "dedicated", "--spin-pause"]).unwrap().spin_pause);
        assert_eq!(c.wire, WireKind::Inproc);
        assert_eq!(c.geometry, Geometry { slots: 8, slot_size: 256 });
        assert_eq!((c.nic_core, c.peer_core, c.spin), (Some(0), Some(1), Spin::Shared));
    }

    #[test]
    fn arguments_of_others_are_ignored() {
        let c = parse(&["--port=0", "--unified", "positional", "--num-slots=8", "-x", "--pinned-rings"]).unwrap();
        assert_eq!(c.geometry.slots, 8);
    }

    #[test]
    fn a_remote_peer_and_its_roce_address() {
        let c = parse(&["--peer", "10.0.0.2:8192", "--peer-roce=10.0.0.3:4800", "--host-ip", "10.0.0.1"]).unwrap();
        assert_eq!(
            c.peer,
            PeerMode::Remote { ecb: "10.0.0.2:8192".parse().unwrap(), roce: "10.0.0.3:4800".parse().unwrap() }
        );
        assert_eq!(c.nic_plan(), NicPlan::Soft { wire: WireKind::Udp, bind: Some("10.0.0.1:4791".parse().unwrap()) });
        let c = parse(&["--peer=10.0.0.2:8192"]).unwrap();
        assert_eq!(
            c.peer,
            PeerMode::Remote { ecb: "10.0.0.2:8192".parse().unwrap(), roce: "10.0.0.2:4791".parse().unwrap() }
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        for (args, says) in [
            (&["--wire", "tcp"][..], "want udp or inproc"),
            (&["--slots"][..], "needs a value"),
            (&["--slots", "0"][..], "1..=4096"),
            (&["--slot-size", "100"][..], "multiple of 64"),
            (&["--slot-size", "8192"][..], "multiple of 64"),
            (&["--peer", "nowhere"][..], "ECB address"),
            (&["--wire", "inproc", "--peer", "10.0.0.2:8192"][..], "needs --peer sim"),
            (&["--peer-roce", "10.0.0.2:4791"][..], "needs --peer IP:PORT"),
            (&["--cores", "1,1"][..], "cores of their own"),
            (&["--cores", "a"][..], "core numbers"),
            (&["--ring-memory", "gpu:x"][..], "gpu:N"),
            (&["--graph", "/nonexistent.ron"][..], "--graph"),
        ] {
            let e = parse(args).expect_err(&format!("{args:?}"));
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }
}
