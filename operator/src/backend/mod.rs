//! Execution backends: where the transceiver loop runs. The CPU backend is always built; the
//! GPU backend (cudarc, dynamic loading) runs the same loop as a persistent CUDA kernel over
//! the same rings.
//!
//! A [`BackendKind`] is resolved once per run ([`resolve`], when the graph is compiled) into a
//! [`Backend`]: the CPU, or a GPU by number and name. That one value is what `check` prints,
//! what [`spawn_backend`] starts and what the reports name.
//!
//! [`spawn_backend`] is the one entry point the runners use: it takes the fused stage chain
//! (as [`StageSpec`]s, so each backend builds it its own way: Rust stages on the CPU, generated
//! device code on the GPU) and returns a [`RunningBackend`].

pub mod cpu;
pub mod gpu;

use std::time::Duration;

pub use crate::settings::{Backend, BackendKind, GpuDevice};
pub use cpu::{CpuBackend, LoopConfig};

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

/// A [`BackendKind`] resolved on this machine for a stage chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// What the graph or the command line asked for.
    pub asked: BackendKind,
    /// What runs the transceiver loop, or why what was asked cannot run here.
    pub backend: Result<Backend, String>,
    /// `Auto` took the CPU: why not the GPU.
    pub fallback: Option<String>,
}

/// Decides where `asked` runs `chain` on this machine. `Auto` takes GPU 0 when a CUDA driver,
/// a device and NVRTC are here and the GPU runs every stage of `chain`, else the CPU (saying
/// why in [`Resolved::fallback`]); an explicit GPU that cannot run `chain` here is an `Err`.
pub fn resolve(asked: BackendKind, chain: &[StageSpec]) -> Resolved {
    let gpu = |ordinal: usize| -> Result<GpuDevice, String> {
        if let Some(why) = gpu::unavailable_reason().or_else(|| crate::gpu::kernels::gpu_unsupported(chain)) {
            return Err(why);
        }
        let name = crate::gpu::driver::device_name(ordinal).map_err(|e| e.to_string())?;
        Ok(GpuDevice { ordinal, name })
    };
    let (backend, fallback) = match asked {
        BackendKind::Cpu => (Ok(Backend::Cpu), None),
        BackendKind::Gpu(n) => (gpu(n).map(Backend::Gpu), None),
        BackendKind::GpuLaunchPerMessage(n) => (gpu(n).map(Backend::GpuLaunchPerMessage), None),
        BackendKind::Auto => match gpu(0) {
            Ok(d) => (Ok(Backend::Gpu(d)), None),
            Err(why) => (Ok(Backend::Cpu), Some(why)),
        },
    };
    Resolved { asked, backend, fallback }
}

/// Starts the transceiver loop on `backend` (as [`resolve`] decided it) over the queue pair
/// `q`, running `chain`.
pub fn spawn_backend(
    backend: &Backend,
    q: QpMemory,
    chain: &[StageSpec],
    cfg: LoopConfig,
) -> Result<Box<dyn RunningBackend>, BackendError> {
    match backend {
        Backend::Gpu(d) => Ok(Box::new(gpu::GpuBackend::spawn(q, chain, d.ordinal, cfg)?)),
        Backend::GpuLaunchPerMessage(d) => {
            let stage = gpu::LaunchPerMessage::new(q.clone(), chain, d.ordinal).map_err(BackendError::Gpu)?;
            Ok(Box::new(CpuBackend::spawn(q, Box::new(stage), cfg).map_err(BackendError::Cpu)?))
        }
        Backend::Cpu => {
            let stage = Box::new(Chain::from_specs(chain).map_err(BackendError::Stage)?);
            Ok(Box::new(CpuBackend::spawn(q, stage, cfg).map_err(BackendError::Cpu)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_resolves_everywhere_and_auto_says_why_it_took_it() {
        let r = resolve(BackendKind::Cpu, &[StageSpec::Echo]);
        assert_eq!((r.backend, r.fallback), (Ok(Backend::Cpu), None));
        let auto = resolve(BackendKind::Auto, &[StageSpec::Echo]);
        match (&auto.backend, gpu::unavailable_reason()) {
            (Ok(Backend::Cpu), Some(why)) => assert_eq!(auto.fallback, Some(why)),
            (Ok(Backend::Gpu(d)), None) => assert!(d.ordinal == 0 && !d.name.is_empty() && auto.fallback.is_none()),
            other => panic!("Auto resolved to {other:?}"),
        }
        let explicit = resolve(BackendKind::Gpu(0), &[StageSpec::Echo]);
        assert_eq!(explicit.backend.is_ok(), gpu::unavailable_reason().is_none(), "{explicit:?}");
        assert!(explicit.fallback.is_none());
    }
}
