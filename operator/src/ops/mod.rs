//! Operators: the kinds a graph file can name, each with its ports (direction, message type,
//! required or not), its parameters (type, range, default) and its constructor.
//!
//! Three domains:
//! - the **transceiver** (`RoceTransceiver`): the queue pair, its receive and send ports, and
//!   the tap where the data path leaves a record of every message it answered;
//! - **device stages** (`Echo`, `QecDecoder`): fused, in flow order, into the one stage
//!   chain the transceiver loop runs (Rust stages on the CPU backend, one persistent kernel
//!   on the GPU);
//! - **host operators** (`Recorder`, `LatencyReport`, `Metrics`, `Sink`): threads that get
//!   copies of messages through the tap and bounded channels, never on the data path.
//!
//! Adding an operator is one file here (its [`OperatorDecl`]) and one line in [`REGISTRY`].

pub mod echo;
pub mod host;
pub mod latency_report;
pub mod metrics;
pub mod params;
pub mod qec_decoder;
pub mod recorder;
pub mod roce;
pub mod sink;

pub use host::{Finished, HostContext, HostOperator, Live, Message, MsgRecord, Outputs};
pub use params::{ParamDecl, ParamDefault, ParamKind, ParamValue, Params};

use crate::stage::StageSpec;

/// Every operator kind a graph may name.
pub static REGISTRY: &[&OperatorDecl] = &[
    &roce::DECL,
    &echo::DECL,
    &qec_decoder::DECL,
    &recorder::DECL,
    &latency_report::DECL,
    &metrics::DECL,
    &sink::DECL,
];

/// The operator kind named `kind`.
pub fn lookup(kind: &str) -> Option<&'static OperatorDecl> {
    REGISTRY.iter().copied().find(|d| d.kind == kind)
}

/// The kinds, for error messages.
pub fn kind_names() -> Vec<&'static str> {
    REGISTRY.iter().map(|d| d.kind).collect()
}

/// What an operator is: its ports, parameters and how to build it.
pub struct OperatorDecl {
    pub kind: &'static str,
    /// One line for `rocelink check` and the docs.
    pub doc: &'static str,
    pub ports: &'static [PortDecl],
    pub params: &'static [ParamDecl],
    pub build: Build,
}

impl std::fmt::Debug for OperatorDecl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind)
    }
}

impl OperatorDecl {
    pub fn domain(&self) -> Domain {
        match self.build {
            Build::Transceiver(_) => Domain::Transceiver,
            Build::Stage(_) => Domain::Device,
            Build::Host(_) => Domain::Host,
        }
    }

    pub fn port(&self, name: &str) -> Option<&'static PortDecl> {
        self.ports.iter().find(|p| p.name == name)
    }
}

/// How an operator is built from its resolved parameters.
pub enum Build {
    /// The queue pair's sizes.
    Transceiver(fn(&Params) -> Result<roce::TransceiverConfig, String>),
    /// A device stage, as the backends build it.
    Stage(fn(&Params) -> Result<StageSpec, String>),
    /// A host operator; called by the runner before anything starts (so a file that cannot
    /// be created fails the run before the peer sends anything).
    Host(HostConstructor),
}

/// Builds a host operator from its parameters.
pub type HostConstructor = fn(&Params, &HostContext) -> Result<Box<dyn HostOperator>, String>;

/// Where an operator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    Transceiver,
    Device,
    Host,
}

impl Domain {
    /// Device stages and the transceiver live on the data path.
    pub fn on_data_path(self) -> bool {
        matches!(self, Domain::Transceiver | Domain::Device)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Domain::Transceiver => "transceiver",
            Domain::Device => "device stage",
            Domain::Host => "host operator",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortDir {
    In,
    Out,
}

/// What travels on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgType {
    /// An RPC request (CUQR header and args) in an RX slot: device side.
    Request,
    /// An RPC response (CUQS header and result) in a TX slot: device side.
    Response,
    /// A per-message record of the data path (`rl_msg_timestamp`): host side, from the tap.
    MsgRecord,
    /// Anything (a `Sink`).
    Any,
}

impl MsgType {
    pub fn as_str(self) -> &'static str {
        match self {
            MsgType::Request => "Request",
            MsgType::Response => "Response",
            MsgType::MsgRecord => "MsgRecord",
            MsgType::Any => "Any",
        }
    }

    /// Whether a port sending `self` may feed a port taking `to`.
    pub fn feeds(self, to: MsgType) -> bool {
        self == to || to == MsgType::Any || self == MsgType::Any
    }
}

pub struct PortDecl {
    pub name: &'static str,
    pub dir: PortDir,
    pub ty: MsgType,
    /// A graph must connect it.
    pub required: bool,
    pub doc: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_consistent() {
        let mut kinds = kind_names();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), REGISTRY.len(), "duplicate kind");
        for d in REGISTRY {
            let mut ports: Vec<_> = d.ports.iter().map(|p| p.name).collect();
            ports.sort_unstable();
            ports.dedup();
            assert_eq!(ports.len(), d.ports.len(), "{}: duplicate port", d.kind);
            for p in d.params {
                // Every default is a value of its own kind.
                if let Some(v) = p.default.value() {
                    p.kind.check(&v).unwrap_or_else(|e| panic!("{}.{}: default {e}", d.kind, p.name));
                }
            }
            assert!(!d.ports.iter().any(|p| p.name.contains('.')), "{}: port names have no dots", d.kind);
        }
        assert!(lookup("Echo").is_some() && lookup("echo").is_none());
    }
}
