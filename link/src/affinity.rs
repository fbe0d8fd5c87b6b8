//! Pinning spinning threads to cores.

/// Pins the calling thread to `core` (an index into the machine's cores). `None` does
/// nothing and returns true. Returns false, with a warning, when the core does not exist
/// or the OS refuses: the thread then runs unpinned, which is slower but still correct.
pub fn pin_current_thread(core: Option<usize>) -> bool {
    let Some(core) = core else { return true };
    // Not `core_affinity::get_core_ids()`: it lists the cores of the *calling thread's* mask,
    // so a thread spawned by a pinned thread could never be pinned anywhere else.
    if core >= configured_cores() {
        tracing::warn!(core, cores = configured_cores(), "no such core; running unpinned");
        return false;
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        true
    } else {
        tracing::warn!(core, "could not pin thread to core (outside this process's cpuset?); running unpinned");
        false
    }
}

/// Cores the machine has (online or not), by index: the range a core index may name.
fn configured_cores() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        if n > 0 {
            return n as usize;
        }
    }
    available_cores()
}

/// Cores this process may run on.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_spawned_by_a_pinned_thread_can_be_pinned_elsewhere() {
        // two cores this process may use (the test thread has the process's mask)
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        let (Some(first), Some(last)) = (ids.first().map(|c| c.id), ids.last().map(|c| c.id)) else { return };
        if first == last {
            return; // nothing to move between
        }
        let moved = std::thread::spawn(move || {
            assert!(pin_current_thread(Some(first)));
            // the child inherits the mask {first}; pinning it to another core must still work
            std::thread::spawn(move || {
                let ok = pin_current_thread(Some(last));
                // SAFETY: sched_getcpu has no preconditions.
                (ok, unsafe { libc::sched_getcpu() })
            })
            .join()
            .unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(moved, (true, last as i32));
    }

    #[test]
    fn a_core_past_the_machine_is_refused() {
        assert!(!pin_current_thread(Some(100_000)));
        assert!(pin_current_thread(None));
    }
}
