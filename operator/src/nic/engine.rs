//! The NIC engine thread: polls the link for frames and the proxy doorbell for WQEs, and
//! runs [`SoftNic`] on both. It spins on a pinned core, or spins briefly and yields when the
//! machine has fewer cores than spinning threads ([`SpinMode`]).
//!
//! A data path that lives beside the NIC rather than in a backend (the CUDA-Q bridge's ring
//! adapter) can run on the same thread ([`NicEngine::spawn_with_data_path`]): once a turn,
//! after the frames received and before the doorbell is read, so a request received in a turn
//! is handed on in that turn and an answer posted in it is sent in it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rocelink_link::{affinity, Backoff, Link, SpinMode, MAX_FRAME};

use super::counters::NicCounters;
use super::qp::SoftNic;

/// Where and how the engine thread runs.
#[derive(Debug, Clone, Copy)]
pub struct NicEngineConfig {
    pub core: Option<usize>,
    pub spin: SpinMode,
}

/// A running NIC engine. Stops and joins on [`NicEngine::stop`] or drop.
pub struct NicEngine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<NicCounters>,
    link: String,
}

/// Frames taken from the link before the engine looks at the doorbell again, so a burst of
/// arrivals cannot starve the send side.
const RX_BURST: usize = 16;

/// Work the engine thread does once a turn beside the NIC ([`NicEngine::spawn_with_data_path`]):
/// returns whether it did any (an idle turn backs off). It must not block: every turn it
/// delays delays the NIC.
pub type DataPath = Box<dyn FnMut() -> bool + Send>;

impl NicEngine {
    pub fn spawn(nic: SoftNic, link: Box<dyn Link>, cfg: NicEngineConfig) -> std::io::Result<NicEngine> {
        Self::spawn_inner(nic, link, cfg, None)
    }

    /// [`NicEngine::spawn`], running `data_path` on the engine thread each turn, between the
    /// receive burst and the send side (module docs).
    pub fn spawn_with_data_path(
        nic: SoftNic,
        link: Box<dyn Link>,
        cfg: NicEngineConfig,
        data_path: DataPath,
    ) -> std::io::Result<NicEngine> {
        Self::spawn_inner(nic, link, cfg, Some(data_path))
    }

    fn spawn_inner(
        mut nic: SoftNic,
        mut link: Box<dyn Link>,
        cfg: NicEngineConfig,
        mut data_path: Option<DataPath>,
    ) -> std::io::Result<NicEngine> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = nic.counters().clone();
        let describe = link.describe();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new().name("rocelink-nic".into()).spawn(move || {
                affinity::pin_current_thread(cfg.core);
                let mut buf = vec![0u8; MAX_FRAME];
                let mut backoff = Backoff::new(cfg.spin);
                while !stop.load(Ordering::Relaxed) {
                    let mut worked = false;
                    for _ in 0..RX_BURST {
                        match link.try_recv(&mut buf) {
                            Ok(Some(n)) => {
                                worked = true;
                                // Refusals are counted inside; the engine keeps serving.
                                let _ = nic.receive(&buf[..n]);
                            }
                            Ok(None) => break,
                            Err(e) => {
                                nic.counters().link_errors.fetch_add(1, Ordering::Relaxed);
                                tracing::debug!("link receive error: {e}");
                                break;
                            }
                        }
                    }
                    if let Some(d) = data_path.as_mut() {
                        if d() {
                            worked = true;
                        }
                    }
                    if nic.poll_send(link.as_mut()) > 0 {
                        worked = true;
                    }
                    if worked {
                        backoff.reset();
                    } else {
                        backoff.idle();
                    }
                }
            })?
        };
        Ok(NicEngine { stop, thread: Some(thread), counters, link: describe })
    }

    pub fn counters(&self) -> &Arc<NicCounters> {
        &self.counters
    }

    pub fn link(&self) -> &str {
        &self.link
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("NIC engine thread panicked");
            }
        }
    }
}

impl Drop for NicEngine {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
