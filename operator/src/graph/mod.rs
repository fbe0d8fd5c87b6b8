//! Graphs (DESIGN.md "Graphs"): RON files that declare operators, the flows between their
//! ports, the backend, the NIC, the peer, cores, the run and its outputs.
//!
//! - `load`: the file (with `--set` overrides) into a [`Graph`], every entry with its
//!   line:column;
//! - `compile`: checks and compiles it into a [`Plan`] before anything starts; every error
//!   names the operator, port or setting and where it is written;
//! - `run`: runs a plan (peer, NIC, backend, host operators), stops it, reports;
//! - `qec`: the QEC side of a graph (replay and decoder) and of its report;
//! - `dot`: Graphviz.

pub mod compile;
pub mod dot;
pub mod drive;
pub mod error;
pub mod load;
pub mod model;
pub mod qec;
pub mod run;
pub mod set;
pub mod source;

use std::path::Path;

pub use compile::{compile, Plan};
pub use error::{At, GraphError, GraphErrors, RunError};
pub use model::Graph;
pub use run::{run, RunOptions, RunReport};
pub use set::Override;

/// Reads, checks and compiles the graph file at `path` with `sets` applied.
pub fn plan_file(path: &Path, sets: &[Override]) -> Result<Plan, GraphErrors> {
    compile(load::load_file(path, sets)?)
}
