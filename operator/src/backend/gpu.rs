//! The GPU backend: the persistent transceiver kernel, and the launch-per-message baseline.
//!
//! Persistent kernel lifecycle (docs/perf.md, "GPU habits"): on one host thread that owns the
//! context, compile (NVRTC, cached) and load everything, register the queue pair's memory
//! (pinned, mapped into the GPU), launch once on a non-blocking stream, and wait for the
//! kernel to report RUNNING. Then a watchdog loop watches the stream and the kernel's
//! heartbeat. Stop: set the exit flag, wait for the stream to go idle; a kernel that does not
//! stop in time, or a failed launch, ends in a clear error and the thread is abandoned rather
//! than joined, so the process never hangs on a stuck kernel.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::abi;
use crate::backend::{BackendError, LoopConfig, RunningBackend};
use crate::gpu::driver::{DeviceBuffer, Gpu, StreamState};
use crate::gpu::qec_state::{self, QecState};
use crate::gpu::{kernels, nvrtc};
use crate::rings::QpMemory;
use crate::stage::StageSpec;
use crate::verbs::HostVerbs;

/// How long the kernel may take to report RUNNING after its launch.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// A running kernel whose heartbeat and message count both stand still this long is stuck.
const WATCHDOG: Duration = Duration::from_secs(2);

/// Why the GPU cannot be used here (for `Auto`'s log line), or `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    match crate::gpu::driver::device_count() {
        Err(e) => Some(e.to_string()),
        Ok(0) => Some("the CUDA driver reports no device".into()),
        Ok(_) if !nvrtc::nvrtc_present() => {
            Some("libnvrtc (CUDA's run-time compiler) is not on the loader path".into())
        }
        Ok(_) => None,
    }
}

/// A running persistent kernel.
pub struct GpuBackend {
    q: QpMemory,
    name: String,
    stop: Arc<AtomicBool>,
    /// 0 running, 1 exited cleanly, 2 failed.
    outcome: Arc<AtomicU32>,
    failure: Arc<std::sync::Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

struct Started {
    name: String,
}

impl GpuBackend {
    /// Compiles, loads and launches the persistent kernel for `chain` on GPU `ordinal`.
    pub fn spawn(
        q: QpMemory,
        chain: &[StageSpec],
        ordinal: usize,
        cfg: LoopConfig,
    ) -> Result<GpuBackend, BackendError> {
        // The host posts the receive queue before the launch (the kernel re-posts), one
        // receive per RX slot at most (QpSizes::posted_receives: what keeps a slot's poison
        // ahead of its next message).
        let mut verbs = HostVerbs::new(q.clone(), cfg.qpn, cfg.tx_lkey);
        verbs.post_recv(q.layout.sizes.posted_receives());
        let stop = Arc::new(AtomicBool::new(false));
        let outcome = Arc::new(AtomicU32::new(0));
        let failure = Arc::new(std::sync::Mutex::new(None));
        let (tx, rx) = mpsc::channel::<Result<Started, String>>();
        let thread = {
            let (q, stop, outcome, failure) = (q.clone(), stop.clone(), outcome.clone(), failure.clone());
            let chain = chain.to_vec();
            std::thread::Builder::new()
                .name("rocelink-gpu".into())
                .spawn(move || {
                    let r = host_thread(&q, &chain, ordinal, cfg, &stop, &tx, &failure);
                    let code = if r.is_ok() { 1 } else { 2 };
                    if let Err(e) = r {
                        // Reported once, by whoever started or runs the backend (the start's
                        // error, or the run's fault): not logged here too.
                        tracing::debug!("GPU backend: {e}");
                        *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                        let _ = tx.send(Err(e));
                    }
                    outcome.store(code, Ordering::Release);
                })
                .map_err(|e| BackendError::Gpu(format!("cannot start the GPU host thread: {e}")))?
        };
        match rx.recv_timeout(START_TIMEOUT + Duration::from_secs(120)) {
            Ok(Ok(s)) => Ok(GpuBackend { q, name: s.name, stop, outcome, failure, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(BackendError::Gpu(e))
            }
            Err(_) => {
                stop.store(true, Ordering::Release);
                Err(BackendError::Gpu("the GPU backend did not start in time (compilation or launch hung)".into()))
            }
        }
    }

    /// The failure that ended the kernel, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The stages' device state: the QEC decoder's blob (`crate::gpu::qec_state`), if the chain
/// has that stage (`kernels::gpu_unsupported` allows at most one stage with state).
fn stage_state(chain: &[StageSpec]) -> Result<Option<QecState>, String> {
    for spec in chain {
        if let Some(s) = QecState::from_spec(spec).map_err(|e| e.to_string())? {
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// Copies the state blob to new device memory.
fn upload_state(gpu: &Gpu, state: &QecState) -> Result<DeviceBuffer, String> {
    let buf = gpu.alloc(state.device_bytes()).map_err(|e| e.to_string())?;
    if let Err(e) = gpu.upload(&buf, 0, state.bytes()) {
        // SAFETY: no kernel has been given the buffer.
        let _ = unsafe { gpu.free(buf) };
        return Err(e.to_string());
    }
    Ok(buf)
}

/// After the kernel stopped: logs the QEC decoders' device counters and frees the state.
fn release_state(gpu: &Gpu, buf: DeviceBuffer) {
    let mut blob = vec![0u8; buf.len()];
    if gpu.download(&buf, 0, &mut blob).is_ok() {
        let mut i = 0;
        while let Some(r) = qec_state::decoder_record(&blob, i) {
            tracing::info!(decoder = i, counters = ?r.counters(), "GPU QEC decoder");
            i += 1;
        }
        if let Some(n) = qec_state::invalid_decoder_requests(&blob).filter(|&n| n > 0) {
            tracing::info!("GPU QEC decoder: {n} requests named a decoder id out of range");
        }
    }
    // SAFETY: the caller saw the kernel's stream idle: nothing uses the buffer.
    let _ = unsafe { gpu.free(buf) };
}

fn host_thread(
    q: &QpMemory,
    chain: &[StageSpec],
    ordinal: usize,
    cfg: LoopConfig,
    stop: &AtomicBool,
    started: &mpsc::Sender<Result<Started, String>>,
    early_failure: &std::sync::Mutex<Option<String>>,
) -> Result<(), String> {
    // The stages' state is built (DEM loaded, tables made) before anything touches the GPU.
    let state = stage_state(chain)?;
    let gpu = Gpu::open(ordinal).map_err(|e| e.to_string())?;
    cfg.kernel.check()?;
    let (main, headers, mut options) = kernels::transceiver_program_with(chain, &cfg.kernel);
    if cfg.doorbell == crate::nic::DoorbellMode::Mmio {
        // the NIC watches the UAR (NicOptions::doorbell): the kernel rings it the way a
        // ConnectX's doorbell is rung
        options.push("-DRL_DOORBELL_MMIO=1".into());
    }
    let compiled = nvrtc::compile(&main, &headers, &gpu.info.arch(), &options, true).map_err(|e| e.to_string())?;
    tracing::info!(
        from_cache = compiled.from_cache,
        ms = compiled.millis,
        "transceiver kernel compiled for {}",
        gpu.info.arch()
    );
    let module = gpu.load(&compiled.cubin, &["rl_transceiver"]).map_err(|e| e.to_string())?;
    let stream = gpu.stream().map_err(|e| e.to_string())?;
    // Device memory for the stages' state, allocated and filled before the launch (docs/perf.md,
    // "GPU habits": nothing is allocated or copied while the persistent kernel runs); freed after
    // it stopped.
    let state_buf = match &state {
        Some(s) => Some(upload_state(&gpu, s)?),
        None => None,
    };
    let free_state = |buf: Option<DeviceBuffer>| {
        if let Some(b) = buf {
            // SAFETY: only called where no kernel was launched.
            let _ = unsafe { gpu.free(b) };
        }
    };
    // SAFETY: the queue pair's memory is page-aligned and lives in `q` (an Arc) until after
    // the kernel stopped and the memory is unregistered below.
    let dbase = match unsafe { gpu.register(q.mem.base(), q.mem.len()) } {
        Ok(d) => d,
        Err(e) => {
            free_state(state_buf);
            return Err(e.to_string());
        }
    };
    let mut desc = q.transceiver_desc_at(dbase, cfg.qpn, cfg.tx_lkey);
    desc.stage_state = state_buf.as_ref().map_or(0, DeviceBuffer::device_ptr);
    let m = &q.mem;
    let l = q.layout;
    m.atomic_u32(l.state()).store(abi::RL_STATE_LAUNCHED, Ordering::Release);
    m.atomic_u32(l.exit_flag()).store(0, Ordering::Release);
    let mut params = [&mut desc as *mut abi::rl_transceiver_desc as *mut c_void];
    // The QEC stage keeps its table in shared memory when it fits, else works on a shot's
    // clusters there (dynamic shared memory; one block, so all of it).
    let shared = match state.as_ref().map(|s| s.dynamic_shared(&gpu, &module, 0, usize::MAX)).transpose() {
        Ok(v) => v.unwrap_or(0),
        Err(e) => {
            free_state(state_buf);
            return Err(e.to_string());
        }
    };
    if state.is_some() {
        let table = state.as_ref().is_some_and(|s| shared as usize == s.shared_table_bytes());
        tracing::info!(
            bytes = shared,
            "QEC table in shared memory: {}",
            if table { "yes" } else { "no (too large: read from global memory; the bytes hold the clusters' work)" }
        );
    }
    // SAFETY: rl_transceiver takes one `struct rl_transceiver_desc` by value (abi.h, the same
    // definition bindgen made `desc` from); every address in it points into the registered
    // memory or the state buffer, which outlive the kernel (unregistered and freed only after
    // the stream is idle); `shared` bytes were allowed for the function (dynamic_shared).
    if let Err(e) = unsafe { stream.launch_shared(module.function(0), cfg.kernel.threads, shared, &mut params) } {
        free_state(state_buf);
        return Err(e.to_string());
    }

    // Wait for RUNNING.
    let t0 = Instant::now();
    loop {
        if m.atomic_u32(l.state()).load(Ordering::Acquire) == abi::RL_STATE_RUNNING {
            break;
        }
        if let StreamState::Failed(e) = stream.query() {
            return Err(format!("the transceiver kernel failed at launch: {e}"));
        }
        if t0.elapsed() > START_TIMEOUT {
            m.atomic_u32(l.exit_flag()).store(1, Ordering::Release);
            // It may still start: leave what it may touch (see the stop below).
            std::mem::forget(q.mem.clone());
            gpu.abandon();
            return Err("the transceiver kernel did not report RUNNING within 10 s".into());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let name = format!("gpu {} ({})", ordinal, gpu.info.name);
    tracing::debug!(stall_test = cfg.kernel.test_stall, "transceiver kernel running");
    let _ = started.send(Ok(Started { name }));

    // Watchdog.
    let mut last =
        (m.atomic_u64(l.heartbeat()).load(Ordering::Relaxed), m.atomic_u64(l.processed()).load(Ordering::Relaxed));
    let mut last_change = Instant::now();
    let mut error = None;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(2));
        match stream.query() {
            StreamState::Running => {}
            StreamState::Idle => {
                error = Some("the transceiver kernel exited on its own".to_string());
                break;
            }
            StreamState::Failed(e) => {
                error = Some(format!("the transceiver kernel failed: {e}"));
                break;
            }
        }
        let now =
            (m.atomic_u64(l.heartbeat()).load(Ordering::Relaxed), m.atomic_u64(l.processed()).load(Ordering::Relaxed));
        tracing::trace!(heartbeat = now.0, processed = now.1, "watchdog");
        if now != last {
            last = now;
            last_change = Instant::now();
        } else if last_change.elapsed() > WATCHDOG {
            error = Some(format!("watchdog: the transceiver kernel's heartbeat stood still for {WATCHDOG:?}"));
            tracing::error!(heartbeat = now.0, processed = now.1, "{}", error.as_deref().unwrap_or(""));
            if let Ok(mut f) = early_failure.lock() {
                // Published now, not after the stop below: the run stops with a fault at once.
                f.get_or_insert_with(|| error.clone().unwrap_or_default());
            }
            break;
        }
    }
    // Stop: exit flag, then wait for the stream without blocking on it.
    m.atomic_u32(l.exit_flag()).store(1, Ordering::Release);
    let t0 = Instant::now();
    loop {
        match stream.query() {
            StreamState::Idle => break,
            StreamState::Failed(e) => {
                error.get_or_insert(format!("the transceiver kernel failed: {e}"));
                break;
            }
            StreamState::Running if t0.elapsed() > Duration::from_secs(2) => {
                // Leave the memory registered, the module loaded and the context retained
                // (Gpu::abandon: releasing it may wait for the kernel), and the queue pair's
                // memory allocated (a reference left behind: the kernel may still write its
                // state, WQEs and poison there). The process can exit; the driver and the OS
                // reclaim everything then.
                std::mem::forget(q.mem.clone());
                gpu.abandon();
                return Err(
                    error.unwrap_or_else(|| "the transceiver kernel did not stop within 2 s of the exit flag".into())
                );
            }
            StreamState::Running => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    // SAFETY: the kernel has finished (stream idle); nothing uses the registration now.
    let _ = unsafe { gpu.unregister(q.mem.base()) };
    if let Some(b) = state_buf {
        release_state(&gpu, b);
    }
    module.unload();
    if m.atomic_u32(l.state()).load(Ordering::Acquire) == abi::RL_STATE_FAILED {
        // the kernel's own error, after the watchdog's if that spoke first
        let said = format!(
            "the transceiver kernel reported {}",
            kernel_error_text(m.atomic_u32(l.error()).load(Ordering::Relaxed))
        );
        error = Some(match error {
            Some(e) => format!("{e}; {said}"),
            None => said,
        });
    }
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What `rl_control.error` (abi.h `RL_ERR_*`) says, in words.
fn kernel_error_text(code: u32) -> String {
    let what = match code {
        abi::RL_ERR_NONE => "no error code",
        abi::RL_ERR_BAD_SLOT => "a request named a slot outside the RX buffer",
        abi::RL_ERR_CQE_ERROR => "the NIC completed a send in error",
        abi::RL_ERR_SQ_FULL => "send queue full: no send completion came back (the NIC stopped executing sends)",
        _ => "an unknown error code",
    };
    format!("error {code} ({what})")
}

impl RunningBackend for GpuBackend {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn processed(&self) -> u64 {
        self.q.mem.atomic_u64(self.q.layout.processed()).load(Ordering::Relaxed)
    }
    fn dropped(&self) -> u32 {
        self.q.mem.atomic_u32(self.q.layout.dropped()).load(Ordering::Relaxed)
    }
    fn failure(&self) -> Option<String> {
        GpuBackend::failure(self)
    }
    fn stop(mut self: Box<Self>, timeout: Duration) -> Result<(), String> {
        self.stop.store(true, Ordering::Release);
        let t0 = Instant::now();
        while self.outcome.load(Ordering::Acquire) == 0 {
            if t0.elapsed() > timeout + Duration::from_secs(3) {
                // Abandon the host thread: it is waiting on a kernel that does not stop.
                return Err(format!(
                    "the GPU backend did not stop within {:?}: the kernel looks stuck; abandoning it",
                    timeout + Duration::from_secs(3)
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        match self.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The launch-per-message baseline: the CPU transceiver loop polls the CQ, and for each
/// message launches `rl_echo_once` on the request in mapped memory, waits for it, and sends
/// the answer the kernel wrote. It is what the persistent kernel replaces: a launch and a
/// synchronise per message (its row in `latency-reports/gpu-echo.md`).
pub struct LaunchPerMessage {
    gpu: Gpu,
    module: Option<crate::gpu::driver::Module>,
    stream: crate::gpu::driver::Stream,
    q: QpMemory,
    dbase: u64,
    out_len: crate::mem::SharedMem,
    out_len_d: u64,
    current: bool,
}

impl LaunchPerMessage {
    pub fn new(q: QpMemory, chain: &[StageSpec], ordinal: usize) -> Result<LaunchPerMessage, String> {
        if chain != [StageSpec::Echo] {
            return Err("the launch-per-message baseline runs the echo stage only".into());
        }
        let gpu = Gpu::open(ordinal).map_err(|e| e.to_string())?;
        let (main, headers, options) = kernels::probe_program();
        let compiled = nvrtc::compile(&main, &headers, &gpu.info.arch(), &options, true).map_err(|e| e.to_string())?;
        let module = gpu.load(&compiled.cubin, &["rl_echo_once"]).map_err(|e| e.to_string())?;
        let stream = gpu.stream().map_err(|e| e.to_string())?;
        // SAFETY: page-aligned allocations that live in `self` until Drop unregisters them.
        let dbase = unsafe { gpu.register(q.mem.base(), q.mem.len()) }.map_err(|e| e.to_string())?;
        let out_len = crate::mem::SharedMem::new(crate::mem::PAGE);
        let out_len_d =
            unsafe { gpu.register(out_len.base(), out_len.len().max(crate::mem::PAGE)) }.map_err(|e| e.to_string())?;
        Ok(LaunchPerMessage { gpu, module: Some(module), stream, q, dbase, out_len, out_len_d, current: false })
    }

    fn dev(&self, p: *const u8) -> u64 {
        self.dbase + (p as u64 - self.q.mem.host_addr(0))
    }
}

impl crate::stage::Stage for LaunchPerMessage {
    fn name(&self) -> &'static str {
        "echo (a kernel launch per message)"
    }

    fn process(&mut self, request: &[u8], out: &mut [u8]) -> crate::stage::Outcome {
        if !self.current {
            if self.gpu.make_current().is_err() {
                return crate::stage::Outcome::Drop;
            }
            self.current = true;
        }
        // Requests from the CQE's inline bytes are not in the registered region: the
        // baseline reads every request from its slot, like a CPU-driven pipeline would.
        if self.q.mem.offset_of_host(request.as_ptr() as u64, request.len()).is_none() {
            return crate::stage::Outcome::Drop;
        }
        let mut req = self.dev(request.as_ptr());
        let mut len = request.len() as u32;
        let mut resp = self.dev(out.as_ptr());
        let mut cap = out.len() as u32;
        let mut out_len = self.out_len_d;
        self.out_len.atomic_u32(0).store(u32::MAX, Ordering::Relaxed);
        let mut params = [
            &mut req as *mut u64 as *mut c_void,
            &mut len as *mut u32 as *mut c_void,
            &mut resp as *mut u64 as *mut c_void,
            &mut cap as *mut u32 as *mut c_void,
            &mut out_len as *mut u64 as *mut c_void,
        ];
        let Some(module) = &self.module else { return crate::stage::Outcome::Drop };
        // SAFETY: rl_echo_once(const uint8_t*, uint32_t, uint8_t*, uint32_t, int32_t*): the
        // pointers are device addresses of registered memory that outlives the launch, which
        // is synchronised before returning.
        let launched = unsafe { self.stream.launch(module.function(0), kernels::TRANSCEIVER_THREADS, &mut params) };
        if launched.is_err() || self.stream.synchronize().is_err() {
            return crate::stage::Outcome::Drop;
        }
        let n = self.out_len.atomic_u32(0).load(Ordering::Acquire) as i32;
        if n < 0 {
            crate::stage::Outcome::Drop
        } else {
            crate::stage::Outcome::Answer(n as usize)
        }
    }
}

impl Drop for LaunchPerMessage {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        if let Some(m) = self.module.take() {
            m.unload();
        }
        // SAFETY: no kernel runs (synchronised above).
        unsafe {
            let _ = self.gpu.unregister(self.q.mem.base());
            let _ = self.gpu.unregister(self.out_len.base());
        }
    }
}
