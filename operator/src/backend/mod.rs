//! Execution backends: where the transceiver loop runs. The CPU backend is always built; the
//! GPU backend (cudarc, dynamic loading) runs the same loop as a persistent CUDA kernel over
//! the same rings.
//!
//! [`spawn_backend`] is the one entry point the runners use: it takes the fused stage chain
//! (as [`StageSpec`]s, so each backend builds it its own way: Rust stages on the CPU, generated
//! device code on the GPU) and returns a [`RunningBackend`].

pub mod cpu;
pub mod gpu;

use std::time::Duration;

pub use cpu::{CpuBackend, CpuBackendConfig};
pub use crate::settings::BackendKind;

use crate::rings::QpMemory;
use crate::stage::{Chain, StageSpec};

/// A transceiver loop that is running.
pub trait RunningBackend: Send {
    /// "cpu", or "gpu 0 (NVIDIA H200)".
    fn name(&self) -> String;
    /// Messages answered so far.
    fn processed(&self) -> u64;
    /// Messages refused by the data path so far.
    fn dropped(&self) -> u32;
    /// Why the loop died while running (a failed or stuck kernel), if it did.
    fn failure(&self) -> Option<String> {
        None
    }
    /// Stops the loop (exit flag, then join or watchdog) within `timeout`.
    fn stop(self: Box<Self>, timeout: Duration) -> Result<(), String>;
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("GPU backend: {0}")]
    Gpu(String),
    #[error("cannot start the CPU backend: {0}")]
    Cpu(std::io::Error),
    #[error("cannot build the stage chain: {0}")]
    Stage(String),
}

impl RunningBackend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }
    fn processed(&self) -> u64 {
        CpuBackend::processed(self)
    }
    fn dropped(&self) -> u32 {
        CpuBackend::dropped(self)
    }
    fn stop(self: Box<Self>, timeout: Duration) -> Result<(), String> {
        CpuBackend::stop(*self, timeout)
    }
}

/// Starts the transceiver loop of `kind` over the queue pair `q`, running `chain`.
pub fn spawn_backend(kind: BackendKind, q: QpMemory, chain: &[StageSpec], cfg: CpuBackendConfig) -> Result<Box<dyn RunningBackend>, BackendError> {
    if matches!(kind, BackendKind::Gpu(_) | BackendKind::GpuLaunchPerMessage(_)) {
        if let Some(why) = crate::gpu::kernels::gpu_unsupported(chain) {
            return Err(BackendError::Gpu(why));
        }
    }
    match kind {
        BackendKind::Gpu(n) => Ok(Box::new(gpu::GpuBackend::spawn(q, chain, n, cfg)?)),
        BackendKind::GpuLaunchPerMessage(n) => {
            let stage = gpu::LaunchPerMessage::new(q.clone(), chain, n).map_err(BackendError::Gpu)?;
            Ok(Box::new(CpuBackend::spawn(q, Box::new(stage), cfg).map_err(BackendError::Cpu)?))
        }
        BackendKind::Auto => match gpu::unavailable_reason().or_else(|| crate::gpu::kernels::gpu_unsupported(chain)) {
            None => Ok(Box::new(gpu::GpuBackend::spawn(q, chain, 0, cfg)?)),
            Some(why) => {
                // The one line saying why (shown at the default log level: a user who
                // expected the GPU learns at once why it is not used).
                tracing::warn!("backend Auto: using the CPU backend because {why}");
                spawn_backend(BackendKind::Cpu, q, chain, cfg)
            }
        },
        BackendKind::Cpu => {
            let stage = Box::new(Chain::from_specs(chain).map_err(BackendError::Stage)?);
            Ok(Box::new(CpuBackend::spawn(q, stage, cfg).map_err(BackendError::Cpu)?))
        }
    }
}
