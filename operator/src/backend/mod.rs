//! Execution backends: where the transceiver loop runs. The CPU backend is always built; the
//! GPU backend (cudarc, dynamic loading) runs the same loop as a persistent CUDA kernel.

pub mod cpu;

pub use cpu::{CpuBackend, CpuBackendConfig};
