//! rocelink's host side: graphs and operators, the software NIC, the execution backends, the
//! HSB host client, latency statistics and reports (DESIGN.md).

pub mod abi;
pub mod backend;
pub mod bench;
pub mod chart;
pub mod echo;
pub mod env;
pub mod gpu;
pub mod graph;
pub mod hsb;
pub mod latency;
pub mod mem;
pub mod nic;
pub mod ops;
pub mod peer;
pub mod qec;
pub mod report;
pub mod rings;
pub mod settings;
pub mod signal;
pub mod stage;
pub mod tap;
pub mod verbs;

pub use signal::interrupted;
