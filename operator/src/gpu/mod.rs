//! The GPU side: the CUDA driver (through cudarc with dynamic loading, so the binary builds
//! and starts on machines without CUDA), run-time kernel compilation with NVRTC (cached on
//! disk), the kernel sources, and the persistent transceiver kernel's host half.
//!
//! Every CUDA call of a running backend happens on one host thread that owns the context
//! (see [`crate::backend::gpu`]); while the persistent kernel runs, nothing here synchronises
//! the context or touches the default stream (docs/perf.md, "GPU habits").

pub mod driver;
pub mod kernels;
pub mod nvrtc;
pub mod qec_batch;
pub mod qec_state;

pub use driver::{Gpu, GpuError, GpuInfo};
