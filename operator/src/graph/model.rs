//! The graph model: what a graph file says, field by field (the `graphs/*.ron` files are
//! commented the same way).
//!
//! ```ron
//! Graph(
//!     name: "echo",
//!     backend: Auto,                         // Auto | Gpu(0) | Cpu
//!     nic: Soft(wire: Inproc),               // Soft(wire: Inproc | Udp(bind: "ip:port")) | Verbs(device: "mlx5_0", port: 1, gid_index: 3)
//!     peer: FpgaSim(mode: InProcess),        // FpgaSim(mode: InProcess | Process, ip: "127.0.0.9", qec: (..)) | Fpga(address: "ip:8192", roce: "ip:4791")
//!     cores: (nic: 0, backend: 1, peer: 2, host: 3, spin: Auto, spin_pause: false),
//!     run: (stop: Count(20000), warmup: 0, load: ClosedLoop, size: 64, timeout: 30.0), // load: ClosedLoop | Rate(msg/s) | RoundCycle(us per round)
//!     outputs: (dir: "reports/echo", json: "run.json"),
//!     operators: [ (name: "roce", kind: "RoceTransceiver"), (name: "echo", kind: "Echo"), .. ],
//!     flows: [ (from: "roce.rx", to: "echo.in"), (from: "echo.out", to: "roce.tx"), .. ],
//! )
//! ```
//!
//! Optional fields take their value without `Some(..)` (RON's `implicit_some`), and every
//! field but `operators` and `flows` has a default.
//!
//! A QEC graph (graphs/qec_d5.ron) gives the software peer a syndrome replay,
//! `peer: FpgaSim(mode: InProcess, qec: (dem: "..", dets: "..", obs: "..", pred: "..",
//! rounds_per_message: 1))`, and puts a `QecDecoder` on the stage chain; `run.stop: Count(n)`
//! and `run.warmup` then count shots, and `run.load` is `ClosedLoop` (one message in flight)
//! or `RoundCycle(us)` (a fixed syndrome cycle, microseconds per round). The replay is kept
//! apart from [`PeerSpec`] (in [`Graph::qec`]) so that code building a `PeerSpec` with every
//! field named keeps compiling; the file still writes it inside the peer, where it belongs.

use serde::{Deserialize, Serialize};

use super::error::At;
use crate::ops::ParamValue;
pub use crate::settings::Policy;
use crate::settings::{BackendKind, Spin};

/// A graph file as written (serde's view; positions are kept apart, see `load`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename = "Graph")]
pub struct GraphFile {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default = "default_backend")]
    pub backend: BackendKind,
    #[serde(default)]
    pub nic: NicSpec,
    #[serde(default)]
    pub peer: PeerFile,
    #[serde(default)]
    pub cores: CoreSpec,
    #[serde(default)]
    pub run: RunSpec,
    #[serde(default)]
    pub outputs: OutputSpec,
    #[serde(default)]
    pub operators: Vec<OperatorEntry>,
    #[serde(default)]
    pub flows: Vec<FlowEntry>,
}

fn default_backend() -> BackendKind {
    BackendKind::Auto
}

/// The NIC that owns the queue pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum NicSpec {
    /// The software NIC engine (always built), on a wire.
    Soft { wire: WireSpec },
    /// A real ConnectX through rdma-core (reserved: needs the `verbs` feature and the device).
    Verbs { device: String, port: u8, gid_index: u32 },
}

impl Default for NicSpec {
    fn default() -> Self {
        NicSpec::Soft { wire: WireSpec::Inproc }
    }
}

/// What carries the RoCEv2 frames of the software NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum WireSpec {
    /// Lock-free rings between threads of this process (no kernel).
    Inproc,
    /// UDP datagrams on a socket bound to `bind` (default: a fresh loopback address, port
    /// 4791).
    Udp {
        #[serde(default)]
        bind: Option<String>,
    },
}

/// The peer that sends the requests and measures the round trips.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum PeerSpec {
    /// The software FPGA peer.
    FpgaSim {
        #[serde(default)]
        mode: SimMode,
        /// Its IP (default: a fresh loopback address).
        #[serde(default)]
        ip: Option<String>,
    },
    /// An HSB FPGA (or a standalone fpga-sim) already running: its ECB address, and its
    /// RoCE address (default: the same IP, port 4791).
    Fpga {
        address: String,
        #[serde(default)]
        roce: Option<String>,
    },
}

impl Default for PeerSpec {
    fn default() -> Self {
        PeerSpec::FpgaSim { mode: SimMode::InProcess, ip: None }
    }
}

/// The peer as a file writes it: [`PeerSpec`] and, for the software peer, its QEC replay
/// (split apart by [`PeerFile::split`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename = "PeerSpec")]
pub enum PeerFile {
    FpgaSim {
        #[serde(default)]
        mode: SimMode,
        #[serde(default)]
        ip: Option<String>,
        #[serde(default)]
        qec: Option<QecSpec>,
    },
    Fpga {
        address: String,
        #[serde(default)]
        roce: Option<String>,
    },
}

impl Default for PeerFile {
    fn default() -> Self {
        PeerFile::FpgaSim { mode: SimMode::InProcess, ip: None, qec: None }
    }
}

impl PeerFile {
    /// The peer, and the replay it is started with.
    pub fn split(self) -> (PeerSpec, Option<QecSpec>) {
        match self {
            PeerFile::FpgaSim { mode, ip, qec } => (PeerSpec::FpgaSim { mode, ip }, qec),
            PeerFile::Fpga { address, roce } => (PeerSpec::Fpga { address, roce }, None),
        }
    }
}

/// The software peer's QEC syndrome replay (fpga-sim's `--qec-*` flags): stim detection
/// events played round by round to the `QecDecoder`, each correction checked against the true
/// observables and a reference prediction. Paths are relative to the working directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QecSpec {
    /// The detector error model (stim .dem) of the shots: detector and observable counts, and
    /// the split into rounds (by the detectors' time coordinate). Normally the decoder's own.
    pub dem: String,
    /// Detection events, stim b8 (`stim detect --out_format b8`).
    pub dets: String,
    /// True observable flips, stim 01: corrections that differ are logical errors.
    pub obs: String,
    /// A reference prediction, stim 01 (`pymatching predict --out_format 01`): corrections
    /// that differ are disagreements, and its own logical errors are reported beside ours.
    #[serde(default)]
    pub pred: Option<String>,
    /// Rounds per `enqueue_syndromes` message; must equal the decoder's `rounds_per_message`
    /// (a value at or above the rounds of a shot sends the whole shot in one message).
    #[serde(default = "one")]
    pub rounds_per_message: u32,
    /// Detectors per round, for a DEM without detector coordinates (default: from the DEM).
    #[serde(default)]
    pub detectors_per_round: Option<Vec<usize>>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SimMode {
    /// On threads of this process.
    #[default]
    InProcess,
    /// As a separate process (this binary's `fpga-sim` command).
    Process,
}

/// Cores for the threads, and how spinning threads use them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreSpec {
    #[serde(default)]
    pub nic: Option<usize>,
    #[serde(default)]
    pub backend: Option<usize>,
    #[serde(default)]
    pub peer: Option<usize>,
    /// Host operator threads and the tap reader (each operator may override with its own
    /// `core`).
    #[serde(default)]
    pub host: Option<usize>,
    #[serde(default)]
    pub spin: Spin,
    /// Dedicated spinners execute PAUSE between polls (off: back to back; [`Spin`]).
    #[serde(default)]
    pub spin_pause: bool,
}

/// How long and how hard the peer drives the transceiver.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    #[serde(default)]
    pub stop: Stop,
    /// Messages (shots, in a QEC graph) at the start left out of the latency figures (still
    /// counted).
    #[serde(default)]
    pub warmup: u32,
    #[serde(default)]
    pub load: Load,
    /// Bytes per message: the 24-byte RPC header and the args (24..=4096). In a QEC graph the
    /// replay decides the messages; the RX slots are then at least this big and big enough
    /// for the replay's largest message.
    #[serde(default = "default_size")]
    pub size: usize,
    /// Give up after this many seconds (default: none; the run gives up when no answer has
    /// come back for 10 s).
    #[serde(default)]
    pub timeout: Option<f64>,
}

fn default_size() -> usize {
    64
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec { stop: Stop::default(), warmup: 0, load: Load::default(), size: default_size(), timeout: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Stop {
    /// After this many messages (shots, in a QEC graph).
    Count(u32),
    /// After this many seconds.
    Duration(f64),
}

impl Default for Stop {
    fn default() -> Self {
        Stop::Count(10_000)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub enum Load {
    /// One message in flight: the next leaves when the answer to the previous is back.
    #[default]
    ClosedLoop,
    /// Open loop at this many messages per second, on a fixed schedule (a message the window
    /// holds back leaves late, those after it stay due on time; at most 64 in flight).
    Rate(f64),
    /// QEC graphs: a fixed syndrome cycle of this many microseconds per round (a message of
    /// `r` rounds leaves `r` cycles after the one before it, whatever the decoder does; at
    /// most 64 in flight). `RoundCycle(0)`: as fast as those 64 allow.
    RoundCycle(f64),
}

/// Where files go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// The folder relative output paths (operators' files, `json`) are resolved against;
    /// itself relative to the current directory.
    #[serde(default = "default_dir")]
    pub dir: String,
    /// The run report as JSON (the fields of `rocelink echo --json`), if wanted.
    #[serde(default)]
    pub json: Option<String>,
}

fn default_dir() -> String {
    ".".into()
}

impl Default for OutputSpec {
    fn default() -> Self {
        OutputSpec { dir: default_dir(), json: None }
    }
}

/// An operator as written; its `params` are read with their positions by `load`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorEntry {
    pub name: String,
    pub kind: String,
    #[serde(default)]
    pub params: Option<ron::Value>,
    /// Core for this host operator's thread (default: `cores.host`).
    #[serde(default)]
    pub core: Option<usize>,
}

/// A flow as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowEntry {
    pub from: String,
    pub to: String,
    /// Messages the flow's queue holds (host flows only; default 65,536).
    #[serde(default)]
    pub capacity: Option<usize>,
    /// What happens when the queue is full (host flows only; default `Pop`).
    #[serde(default)]
    pub policy: Option<Policy>,
}

/// A graph ready to be checked: the file's settings, and its operators and flows each with
/// where it was written.
#[derive(Debug, Clone)]
pub struct Graph {
    pub name: String,
    /// The file it came from (`None`: built in memory).
    pub file: Option<String>,
    pub backend: BackendKind,
    pub nic: NicSpec,
    pub peer: PeerSpec,
    /// The software peer's QEC replay (written `peer: FpgaSim(.., qec: (..))`).
    pub qec: Option<QecSpec>,
    pub cores: CoreSpec,
    pub run: RunSpec,
    pub outputs: OutputSpec,
    pub operators: Vec<OperatorDef>,
    pub flows: Vec<FlowDef>,
    /// Where the top-level settings are, for errors about them.
    pub places: Places,
}

/// Positions of settings (each `At::Nowhere` in a graph built in memory).
#[derive(Debug, Clone)]
pub struct Places {
    places: Vec<(String, At)>,
    /// For paths not recorded.
    pub whole: At,
}

impl Places {
    pub fn new(whole: At) -> Places {
        Places { places: Vec::new(), whole }
    }

    pub fn insert(&mut self, path: &str, at: At) {
        self.places.push((path.to_string(), at));
    }

    /// Whether the file writes `path` itself (rather than leaving it to its default).
    pub fn has(&self, path: &str) -> bool {
        self.places.iter().any(|(k, _)| k == path)
    }

    /// Where `path` (like `run.size` or `nic.wire.bind`) is, or the nearest enclosing setting
    /// that is recorded.
    pub fn at(&self, path: &str) -> At {
        let mut p = path;
        loop {
            if let Some((_, at)) = self.places.iter().find(|(k, _)| k == p) {
                return at.clone();
            }
            match p.rsplit_once('.') {
                Some((head, _)) => p = head,
                None => return self.whole.clone(),
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct OperatorDef {
    pub name: String,
    pub kind: String,
    pub params: Vec<ParamDef>,
    pub core: Option<usize>,
    /// The entry, and its `kind` value.
    pub at: At,
    pub kind_at: At,
}

#[derive(Debug, Clone)]
pub struct ParamDef {
    pub name: String,
    pub value: ParamValue,
    pub at: At,
}

#[derive(Debug, Clone)]
pub struct FlowDef {
    pub from: String,
    pub to: String,
    pub capacity: Option<usize>,
    pub policy: Option<Policy>,
    /// The entry, its `from` value and its `to` value.
    pub at: At,
    pub from_at: At,
    pub to_at: At,
}

impl Graph {
    /// A graph with the given settings and no operators, built in memory.
    pub fn new(name: &str) -> Graph {
        Graph {
            name: name.into(),
            file: None,
            backend: BackendKind::Auto,
            nic: NicSpec::default(),
            peer: PeerSpec::default(),
            qec: None,
            cores: CoreSpec::default(),
            run: RunSpec::default(),
            outputs: OutputSpec::default(),
            operators: Vec::new(),
            flows: Vec::new(),
            places: Places::new(At::Nowhere),
        }
    }

    /// Adds an operator (in memory).
    pub fn operator(&mut self, name: &str, kind: &str, params: &[(&str, ParamValue)]) -> &mut Self {
        self.operators.push(OperatorDef {
            name: name.into(),
            kind: kind.into(),
            params: params
                .iter()
                .map(|(n, v)| ParamDef { name: (*n).into(), value: v.clone(), at: At::Nowhere })
                .collect(),
            core: None,
            at: At::Nowhere,
            kind_at: At::Nowhere,
        });
        self
    }

    /// Adds a flow (in memory).
    pub fn flow(&mut self, from: &str, to: &str) -> &mut Self {
        self.flows.push(FlowDef {
            from: from.into(),
            to: to.into(),
            capacity: None,
            policy: None,
            at: At::Nowhere,
            from_at: At::Nowhere,
            to_at: At::Nowhere,
        });
        self
    }
}
