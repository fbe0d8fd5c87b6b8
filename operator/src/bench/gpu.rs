//! The GPU floor: the raw mapped-memory ping-pong (PERF.md's first floor). A persistent
//! one-thread kernel polls one word of pinned host memory and writes each new value back to
//! another; a host thread writes, spins until the answer is back, and times it. Every GPU
//! path of the data plane crosses PCIe this way at least twice per message.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocelink_link::affinity::pin_current_thread;
use rocelink_link::clock::monotonic_ns;

use super::floors::Floor;
use crate::gpu::driver::{Gpu, StreamState};
use crate::gpu::{kernels, nvrtc};
use crate::latency::Counts;
use crate::mem::{SharedMem, PAGE};

/// The mapped-memory ping-pong on GPU `ordinal`: `iters` measured round trips after `warmup`.
/// The host side runs on its own thread, pinned to `core` (the caller's thread stays as it was).
pub fn mapped_pingpong(ordinal: usize, iters: u32, warmup: u32, core: Option<usize>) -> Result<Floor, String> {
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

fn mapped_pingpong_here(ordinal: usize, iters: u32, warmup: u32) -> Result<Floor, String> {
    let gpu = Gpu::open(ordinal).map_err(|e| e.to_string())?;
    let (main, headers, options) = kernels::probe_program();
    let compiled = nvrtc::compile(&main, &headers, &gpu.info.arch(), &options, true).map_err(|e| e.to_string())?;
    let module = gpu.load(&compiled.cubin, &["rl_probe_pingpong"]).map_err(|e| e.to_string())?;
    let stream = gpu.stream().map_err(|e| e.to_string())?;
    let mem = SharedMem::new(PAGE);
    // ping and pong on separate 128-byte lines.
    let (ping, pong) = (0usize, 128usize);
    // SAFETY: `mem` is page-aligned and outlives the kernel (we wait for it below).
    let dbase = unsafe { gpu.register(mem.base(), PAGE) }.map_err(|e| e.to_string())?;
    let (mut ping_d, mut pong_d) = (dbase + ping as u64, dbase + pong as u64);
    let mut params = [&mut ping_d as *mut u64 as *mut c_void, &mut pong_d as *mut u64 as *mut c_void];
    // SAFETY: rl_probe_pingpong(uint32_t*, uint32_t*): two device addresses of the registered
    // page; the kernel exits when ping becomes 0xffffffff, which we always write below.
    unsafe { stream.launch(module.function(0), 1, &mut params) }.map_err(|e| e.to_string())?;

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
                return Err(format!("the ping-pong kernel failed: {e}"));
            }
            if lost >= 3 {
                mem.atomic_u32(ping).store(u32::MAX, Ordering::Release);
                // The kernel may still run: its page stays registered and allocated, the
                // context retained (Gpu::abandon), until the process exits.
                std::mem::forget(mem);
                gpu.abandon();
                return Err("the ping-pong kernel stopped answering (3 round trips lost)".into());
            }
            continue;
        }
        if k > warmup {
            samples.push(t1 - t0);
        }
    }
    mem.atomic_u32(ping).store(u32::MAX, Ordering::Release);
    let t0 = Instant::now();
    while stream.query() == StreamState::Running {
        if t0.elapsed() > Duration::from_secs(2) {
            std::mem::forget(mem);
            gpu.abandon();
            return Err("the ping-pong kernel did not exit within 2 s".into());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    // SAFETY: the kernel exited.
    unsafe {
        let _ = gpu.unregister(mem.base());
    }
    module.unload();
    let counts = Counts { sent: u64::from(total), received: u64::from(total) - lost, lost, ..Default::default() };
    Ok(Floor::from_samples(samples, counts))
}
