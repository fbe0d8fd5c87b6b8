//! rocelink's QEC decoding, on its own: the matching graph of a stim detector error model
//! and an exact minimum-weight perfect matching decoder for any number of defects, with
//! nothing else (no I/O, no GPU, no clock). The operator's decoder stage, `rocelink decode`
//! and the GPU stage's host side use it (docs/qec.md).
//!
//! - [`dem`]: stim DEM text -> flattened error mechanisms (`rocelink_wire::dem`, shared with
//!   fpga-sim's syndrome replay);
//! - [`graph`]: the matching graph as PyMatching builds it (merged edges, observables), and
//!   the all-pairs tables the GPU stage copies for small codes;
//! - [`sparse`]: the decoding graph in PyMatching's integer weights, linear in the DEM;
//! - [`balls`]: the complete balls the decoder regrows, kept with the graph (bounded);
//! - [`matching`]: the dense exact blossom matcher a cluster of defects is solved with;
//! - [`decoder`]: the exact decoder, whole shots or streamed defect by defect.
//!
//! ```
//! use rocelink_qec::{sparse_graph_from_dem_text, DecodeStatus, MatchingDecoder};
//!
//! // A repetition code of two detectors; the left boundary edge flips L0.
//! let graph = sparse_graph_from_dem_text("error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1\n").unwrap();
//! let mut decoder = MatchingDecoder::new(graph);
//!
//! // A whole shot: D0 alone goes to the nearer boundary, across L0.
//! let d = decoder.decode_defects(&[0]);
//! assert_eq!((d.status, d.observables), (DecodeStatus::Ok, 1));
//!
//! // Streamed as rounds arrive: work is done per round, the final round only finishes.
//! decoder.begin_shot();
//! decoder.add_defect(0);
//! decoder.settle();
//! decoder.add_defect(1);
//! let s = decoder.finish();
//! assert_eq!((s.observables, s.defects), (0, 2)); // D0 and D1 matched to each other
//! ```

pub mod balls;
pub mod decoder;
pub mod graph;
pub mod matching;
pub mod sparse;

/// The stim DEM parser (module docs in `rocelink_wire::dem`).
pub mod dem {
    pub use rocelink_wire::dem::*;
}

use std::sync::Arc;

use thiserror::Error;

pub use decoder::{DecodeStatus, Decoded, DecoderCounters, MatchingDecoder};
pub use graph::{GraphError, GraphOptions, MatchingGraph};
pub use sparse::{SparseError, SparseGraph};

/// Why DEM text cannot be turned into a decoder.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The DEM does not parse.
    #[error(transparent)]
    Dem(#[from] dem::DemError),
    /// The matching graph cannot be built.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The decoding graph cannot be built.
    #[error(transparent)]
    Sparse(#[from] SparseError),
}

/// The decoding graph of DEM text (default graph options).
pub fn sparse_graph_from_dem_text(text: &str) -> Result<Arc<SparseGraph>, LoadError> {
    let graph = MatchingGraph::from_dem_text(text)?;
    Ok(Arc::new(SparseGraph::new(&graph)?))
}
