//! SIGINT/SIGTERM: a run stops early, joins its threads and still reports what ran.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM (once, first thing in the CLI), then unblocks
/// both: a launcher that blocked them across `exec` (so that a signal sent while the program
/// starts is neither lost nor fatal) has it delivered to the handler now.
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, handler) };
    }
    // SAFETY: a zeroed sigset_t is valid storage for sigemptyset, which initialises it;
    // sigprocmask reads it and writes no old set (null).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Has SIGINT or SIGTERM arrived?
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}
