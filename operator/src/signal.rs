//! SIGINT/SIGTERM: a run stops early, joins its threads and still reports what ran.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM (once, from the CLI).
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, handler) };
    }
}

/// Has SIGINT or SIGTERM arrived?
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}
