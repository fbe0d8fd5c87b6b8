//! QEC feed-forward decoding, host side (docs/qec.md; PROTOCOLS.md 3). The decoders themselves
//! live in the `rocelink_qec` crate (no I/O, no GPU); this module puts them behind the RPC
//! session and the files.
//!
//! - [`dem`]: stim detector error model text -> flattened error mechanisms;
//! - [`graph`]: matching graph (PyMatching's construction) and the all-pairs tables the GPU
//!   stage copies (`rocelink_qec::graph`);
//! - [`exact`]: the GPU stage's decoder on the all-pairs table (exact: the subset DP up to K
//!   defects, independent clusters above), the bit-exact model the GPU kernel is tested
//!   against;
//! - [`session`]: the decoder stage as a state machine over CUQR requests
//!   (`enqueue_syndromes`, `get_corrections`, `reset_decoder`), no I/O, no clock unless asked;
//! - [`beside`]: the CPU stage's streaming work on a worker thread beside the transceiver loop;
//! - [`predict`](mod@predict): the offline `pymatching predict` mirror (b8 / 01 files).
//!
//! Guarantees common to the module: nothing on the per-shot path allocates or panics; rich
//! errors (`thiserror`, with DEM line numbers) only where files are loaded.

pub mod beside;
pub mod dem;
pub mod exact;
pub mod predict;
pub mod serve;
pub mod session;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

pub use rocelink_qec::graph;
pub use rocelink_qec::{MatchingDecoder, SparseGraph};

pub use beside::BesideDecoder;
pub use dem::{DemError, DetectorErrorModel};
pub use exact::{DecodeStatus, Decoded, ExactDecoder, DEFAULT_MAX_DEFECTS};
pub use graph::{DistanceTable, GraphError, MatchingGraph, TableWeight};
pub use predict::{predict, predict_on, predict_threads, write_weights, InputFormat, PredictStats, ShotFormat};
pub use session::{QecSession, SessionConfig, SessionDecoder};

/// Any failure of loading a DEM and building its decoder.
#[derive(Debug, Error)]
pub enum QecError {
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The DEM does not parse.
    #[error(transparent)]
    Dem(#[from] DemError),
    /// The graph or its tables cannot be built.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The decoding graph cannot be built.
    #[error(transparent)]
    Sparse(#[from] rocelink_qec::SparseError),
    /// A bad decoder configuration.
    #[error(transparent)]
    Config(#[from] exact::ConfigError),
    /// Detection events that do not fit the DEM.
    #[error("{path}: {reason}")]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong (with the shot or line number).
        reason: String,
    },
}

impl From<rocelink_qec::LoadError> for QecError {
    fn from(e: rocelink_qec::LoadError) -> Self {
        match e {
            rocelink_qec::LoadError::Dem(e) => QecError::Dem(e),
            rocelink_qec::LoadError::Graph(e) => QecError::Graph(e),
            rocelink_qec::LoadError::Sparse(e) => QecError::Sparse(e),
        }
    }
}

impl QecError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        QecError::Io { path: path.to_path_buf(), source }
    }
}

/// Reads and parses a DEM file.
pub fn load_dem(path: &Path) -> Result<DetectorErrorModel, QecError> {
    let text = std::fs::read_to_string(path).map_err(|e| QecError::io(path, e))?;
    Ok(DetectorErrorModel::parse(&text)?)
}

/// The decoding graph of a DEM file (what the CPU stage and `predict` decode on).
pub fn sparse_graph_from_file(path: &Path) -> Result<Arc<SparseGraph>, QecError> {
    Ok(sparse_graph_with(path, graph::GraphOptions::default())?.0)
}

/// [`sparse_graph_from_file`] built with `options`, and what the build did (the components
/// it dropped, say).
pub fn sparse_graph_with(
    path: &Path,
    options: graph::GraphOptions,
) -> Result<(Arc<SparseGraph>, graph::GraphStats), QecError> {
    let dem = load_dem(path)?;
    let graph = MatchingGraph::from_dem(&dem, options)?;
    warn_dropped(path, &graph.stats);
    Ok((Arc::new(SparseGraph::new(&graph)?), graph.stats))
}

/// A DEM's components dropped under `HyperedgePolicy::Ignore` are said on the log: the
/// decode is of the rest.
fn warn_dropped(path: &Path, stats: &graph::GraphStats) {
    if let Some(line) = stats.first_hyperedge_line {
        tracing::warn!(
            "{}: {} error components flip more than 2 detectors and were dropped, as PyMatching \
             drops them (the first at line {line}); decompose the DEM (stim's \
             decompose_errors=True) to decode them",
            path.display(),
            stats.hyperedges_ignored
        );
    }
}

/// The PyMatching-exact table of a DEM file (what the GPU stage and its model use).
pub fn fine_table_from_file(path: &Path) -> Result<Arc<DistanceTable<u32>>, QecError> {
    Ok(fine_table_with(path, graph::GraphOptions::default())?.0)
}

/// [`fine_table_from_file`] built with `options`, and what the build did.
pub fn fine_table_with(
    path: &Path,
    options: graph::GraphOptions,
) -> Result<(Arc<DistanceTable<u32>>, graph::GraphStats), QecError> {
    let dem = load_dem(path)?;
    let graph = MatchingGraph::from_dem(&dem, options)?;
    warn_dropped(path, &graph.stats);
    Ok((Arc::new(graph.fine_table()?), graph.stats))
}
