//! The GPU floor: the raw mapped-memory ping-pong (docs/perf.md, "How to report a figure").
//! A persistent one-thread kernel polls one word of pinned host memory and writes each new
//! value back to another; a host thread writes, spins until the answer is back, and times
//! it. Every GPU path of the data plane crosses PCIe this way at least twice per message.
//!
//! It is measured every way it can be made ([`MAPPED_VARIANTS`]), one after the other on one
//! context, and the floor is the best ([`super::floors::best_of`]): with and without a fence
//! after the kernel's store (without one, the next poll's read can reach host memory before
//! the host's next write, and each round trip then waits for a second read), in host memory
//! from cuMemHostAlloc and in malloc'd memory registered with cuMemHostRegister (the data
//! path's rings are registered; the two map differently on some hosts).

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocelink_link::affinity::pin_current_thread;
use rocelink_link::clock::monotonic_ns;

use super::floors::{Floor, Variant};
use crate::gpu::driver::{Gpu, Stream, StreamState};
use crate::gpu::{kernels, nvrtc};
use crate::latency::Counts;
use crate::mem::{SharedMem, PAGE};

/// Where the ping-pong's two words live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMemory {
    /// Pinned, mapped host memory from cuMemHostAlloc (DEVICEMAP).
    HostAlloc,
    /// Page-aligned heap memory registered with cuMemHostRegister (DEVICEMAP), as the GPU
    /// backend maps its rings.
    Registered,
}

impl HostMemory {
    pub fn as_str(self) -> &'static str {
        match self {
            HostMemory::HostAlloc => "cuMemHostAlloc",
            HostMemory::Registered => "malloc + cuMemHostRegister",
        }
    }
}

/// One way of making the mapped ping-pong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedVariant {
    pub memory: HostMemory,
    /// `__threadfence_system()` after the kernel's store (`rl_probe_pingpong_fenced`).
    pub fence_after_store: bool,
}

impl MappedVariant {
    /// The variant's name in reports: `cuMemHostAlloc, fence after the store`.
    pub fn name(self) -> String {
        format!(
            "{}, {}",
            self.memory.as_str(),
            if self.fence_after_store { "fence after the store" } else { "no fence" }
        )
    }

    fn kernel(self) -> usize {
        usize::from(self.fence_after_store)
    }
}

/// Every variant the floor is the best of, in the order they are measured.
pub const MAPPED_VARIANTS: [MappedVariant; 4] = [
    MappedVariant { memory: HostMemory::HostAlloc, fence_after_store: false },
    MappedVariant { memory: HostMemory::HostAlloc, fence_after_store: true },
    MappedVariant { memory: HostMemory::Registered, fence_after_store: false },
    MappedVariant { memory: HostMemory::Registered, fence_after_store: true },
];

/// The kernels, by [`MappedVariant::kernel`].
const KERNELS: [&str; 2] = ["rl_probe_pingpong", "rl_probe_pingpong_fenced"];

/// The mapped-memory ping-pong on GPU `ordinal`, every one of [`MAPPED_VARIANTS`]: `iters`
/// measured round trips after `warmup` each. The host side runs on its own thread, pinned to
/// `core` (the caller's thread stays as it was).
pub fn mapped_pingpong_variants(
    ordinal: usize,
    iters: u32,
    warmup: u32,
    core: Option<usize>,
) -> Result<Vec<Variant>, String> {
    std::thread::Builder::new()
        .name("rocelink-floor-gpu".into())
        .spawn(move || {
            pin_current_thread(core);
            mapped_pingpong_here(ordinal, iters, warmup)
        })
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|_| "the mapped ping-pong thread panicked".to_string())?
}

/// How one variant's run ended badly.
enum RunError {
    /// The kernel may still run: its memory must stay mapped and the context retained.
    Stuck(String),
    /// The kernel is not running.
    Failed(String),
}

fn mapped_pingpong_here(ordinal: usize, iters: u32, warmup: u32) -> Result<Vec<Variant>, String> {
    let gpu = Gpu::open(ordinal).map_err(|e| e.to_string())?;
    let (main, headers, options) = kernels::probe_program();
    let compiled = nvrtc::compile(&main, &headers, &gpu.info.arch(), &options, true).map_err(|e| e.to_string())?;
    let module = gpu.load(&compiled.cubin, &KERNELS).map_err(|e| e.to_string())?;
    let stream = gpu.stream().map_err(|e| e.to_string())?;
    // Declared after `gpu`, so dropped before it: cuMemFreeHost while the context lives.
    let alloc = gpu.host_alloc(PAGE).map_err(|e| e.to_string())?;
    let registered = SharedMem::new(PAGE);
    // SAFETY: `registered` is page-aligned and outlives the registration (unregistered below,
    // or leaked with the context when a kernel may still run).
    let reg_base = unsafe { gpu.register(registered.base(), PAGE) }.map_err(|e| e.to_string())?;

    let mut out = Vec::with_capacity(MAPPED_VARIANTS.len());
    let mut failure = None;
    for v in MAPPED_VARIANTS {
        let (mem, dbase) = match v.memory {
            HostMemory::HostAlloc => (&alloc, alloc.device_addr(0)),
            HostMemory::Registered => (&registered, reg_base),
        };
        match run_variant(&stream, module.function(v.kernel()), mem, dbase, iters, warmup) {
            Ok(floor) => out.push(Variant { name: v.name(), floor }),
            Err(RunError::Failed(e)) => {
                failure = Some(format!("{}: {e}", v.name()));
                break;
            }
            Err(RunError::Stuck(e)) => {
                // The kernel may still run: its pages stay allocated and registered, the
                // context retained (Gpu::abandon), until the process exits.
                std::mem::forget(alloc);
                std::mem::forget(registered);
                gpu.abandon();
                return Err(format!("{}: {e}", v.name()));
            }
        }
    }
    // SAFETY: no kernel runs (every variant's kernel exited).
    unsafe {
        let _ = gpu.unregister(registered.base());
    }
    module.unload();
    match failure {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// One variant: launches `kernel` on the words at bytes 0 (ping) and 128 (pong) of `mem`
/// (device address `dbase`), makes `warmup + iters` round trips, stops the kernel.
fn run_variant(
    stream: &Stream,
    kernel: cudarc::driver::sys::CUfunction,
    mem: &SharedMem,
    dbase: u64,
    iters: u32,
    warmup: u32,
) -> Result<Floor, RunError> {
    // ping and pong on separate 128-byte lines.
    let (ping, pong) = (0usize, 128usize);
    // The kernel starts from 0 and the last variant left the exit value in ping.
    mem.atomic_u32(ping).store(0, Ordering::Release);
    mem.atomic_u32(pong).store(0, Ordering::Release);
    let (mut ping_d, mut pong_d) = (dbase + ping as u64, dbase + pong as u64);
    let mut params = [&mut ping_d as *mut u64 as *mut c_void, &mut pong_d as *mut u64 as *mut c_void];
    // SAFETY: rl_probe_pingpong[_fenced](uint32_t*, uint32_t*): two device addresses of the
    // mapped page; the kernel exits when ping becomes 0xffffffff, which we always write below.
    unsafe { stream.launch(kernel, 1, &mut params) }.map_err(|e| RunError::Failed(e.to_string()))?;

    let total = warmup + iters;
    let mut samples = Vec::with_capacity(iters as usize);
    let mut lost = 0u64;
    for k in 1..=total {
        let t0 = monotonic_ns();
        mem.atomic_u32(ping).store(k, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut ok = true;
        while mem.atomic_u32(pong).load(Ordering::Acquire) != k {
            std::hint::spin_loop();
            if Instant::now() > deadline {
                ok = false;
                break;
            }
        }
        let t1 = monotonic_ns();
        if !ok {
            lost += 1;
            if let StreamState::Failed(e) = stream.query() {
                return Err(RunError::Failed(format!("the ping-pong kernel failed: {e}")));
            }
            if lost >= 3 {
                mem.atomic_u32(ping).store(u32::MAX, Ordering::Release);
                return Err(RunError::Stuck("the ping-pong kernel stopped answering (3 round trips lost)".into()));
            }
            continue;
        }
        if k > warmup {
            samples.push(t1 - t0);
        }
    }
    mem.atomic_u32(ping).store(u32::MAX, Ordering::Release);
    let t0 = Instant::now();
    loop {
        match stream.query() {
            StreamState::Running if t0.elapsed() > Duration::from_secs(2) => {
                return Err(RunError::Stuck("the ping-pong kernel did not exit within 2 s".into()))
            }
            StreamState::Running => std::thread::sleep(Duration::from_micros(100)),
            StreamState::Idle => break,
            StreamState::Failed(e) => return Err(RunError::Failed(format!("the ping-pong kernel failed: {e}"))),
        }
    }
    let counts = Counts { sent: u64::from(total), received: u64::from(total) - lost, lost, ..Default::default() };
    Ok(Floor::from_samples(samples, counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_is_measured_once_and_named_apart() {
        let mut names: Vec<String> = MAPPED_VARIANTS.iter().map(|v| v.name()).collect();
        assert_eq!(names[1], "cuMemHostAlloc, fence after the store");
        assert_eq!(names[2], "malloc + cuMemHostRegister, no fence");
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 4);
        for memory in [HostMemory::HostAlloc, HostMemory::Registered] {
            for fence_after_store in [false, true] {
                assert!(MAPPED_VARIANTS.contains(&MappedVariant { memory, fence_after_store }));
            }
        }
        assert_eq!(
            KERNELS[MappedVariant { memory: HostMemory::Registered, fence_after_store: true }.kernel()],
            "rl_probe_pingpong_fenced"
        );
        assert_eq!(KERNELS[MAPPED_VARIANTS[0].kernel()], "rl_probe_pingpong");
    }
}
