//! The software NIC: a CPU engine that does exactly what a ConnectX does for one UC queue
//! pair, over the mlx5-format rings of `kernels/abi.h` (DESIGN.md, "NIC backends").
//!
//! - Receive (PROTOCOLS.md 4, data path step 2): validate the frame, write the payload where
//!   the RETH points, consume a posted receive WQE and write a CQE, ordered by a release store
//!   of the owner byte.
//! - Send (step 4): pick up the CPU-proxy doorbell, execute the WQEs, emit UC SEND/WRITE
//!   frames with a correct ICRC on the link, write send CQEs where asked.
//!
//! [`SoftNic`] is the deterministic core (frames and ring memory in, frames and CQEs out, no
//! threads, no clock except the CQE timestamp and, when asked for one, the [`trace`] of when
//! each answer left); [`engine`] runs it on a spinning thread.

pub mod counters;
pub mod engine;
pub mod mr;
pub mod qp;
pub mod trace;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use counters::{DropReason, NicCounters, NicStats};
pub use engine::{DataPath, NicEngine, NicEngineConfig};
pub use mr::{Access, MemoryRegion, MrTable, QpRegions};
pub use qp::{DoorbellMode, NicOptions, QpAttrs, SoftNic};
pub use trace::SendTrace;
