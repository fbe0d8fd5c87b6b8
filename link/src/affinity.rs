//! Pinning spinning threads to cores.

/// Pins the calling thread to `core` (an index into the machine's cores). `None` does
/// nothing and returns true. Returns false, with a warning, when the core does not exist
/// or the OS refuses: the thread then runs unpinned, which is slower but still correct.
pub fn pin_current_thread(core: Option<usize>) -> bool {
    let Some(core) = core else { return true };
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    match ids.into_iter().find(|c| c.id == core) {
        Some(id) if core_affinity::set_for_current(id) => true,
        Some(_) => {
            tracing::warn!(core, "could not pin thread to core; running unpinned");
            false
        }
        None => {
            tracing::warn!(core, cores = available_cores(), "no such core; running unpinned");
            false
        }
    }
}

/// Cores this process may run on.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
