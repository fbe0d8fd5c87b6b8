//! rocelink as a CUDA-Q Realtime transport: a bridge provider (PROTOCOLS.md 5, interface
//! version 3) that NVIDIA's dispatcher loads (`dlopen`, `CUDAQ_REALTIME_BRIDGE_LIB`), over the
//! operator's software NIC and wires, with fpga-sim or an HSB FPGA as the peer.
//!
//! The library exports `cudaq_realtime_get_bridge_interface()`, which returns a static
//! interface with every entry filled, and two rocelink extensions
//! (`include/rocelink_cudaq_bridge.h`): `rocelink_cudaq_bridge_counters` (what the provider
//! counted) and `rocelink_cudaq_bridge_run_peer` (drives the peer's traffic player through a
//! run and reports the answers the peer checked).
//!
//! - `args`: what `create` takes; `bridge`: the lifecycle; `ring`: the ring and its contract;
//!   `adapter`: the NIC engine thread's side of it; `abi`: the C layouts.
//!
//! Guarantees at the boundary: no entry unwinds into its caller or exits the process (each
//! runs under `catch_unwind`; a panic is an `INTERNAL` status and a line on stderr); every
//! pointer is checked for NULL before use and every length against its buffer; a handle is
//! looked up in the table of live bridges before use, so an entry given a destroyed (or any
//! other) handle refuses it (`INVALID_ARG`) instead of touching freed memory, and `destroy`
//! of a destroyed or NULL handle does nothing. Errors are logged with their reason through
//! `tracing` (`--log-level`), and on stderr while no subscriber is installed.

pub mod abi;
pub mod adapter;
pub mod args;
pub mod bridge;
pub mod ring;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use abi::*;
use bridge::{Bridge, Error};
use ring::Ring;

/// Logs `message` as an error: through `tracing`, and on stderr while this process has no
/// `tracing` subscriber (the usual case for a library loaded by a C++ program).
pub(crate) fn log_error(message: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::error!("{message}");
    } else {
        eprintln!("rocelink-cudaq-bridge: error: {message}");
    }
}

/// The live bridges, by handle. A handle is the address of its bridge, used as a key only:
/// never dereferenced.
static BRIDGES: Mutex<Vec<(usize, Arc<Bridge>)>> = Mutex::new(Vec::new());

fn bridges() -> std::sync::MutexGuard<'static, Vec<(usize, Arc<Bridge>)>> {
    BRIDGES.lock().unwrap_or_else(|p| p.into_inner())
}

fn lookup(handle: cudaq_realtime_bridge_handle_t, what: &str) -> Result<Arc<Bridge>, Error> {
    let key = handle as usize;
    bridges()
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, b)| b.clone())
        .ok_or_else(|| Error::arg(format!("{what}: {handle:p} is no live bridge handle")))
}

/// Runs an entry: a panic becomes `INTERNAL`, an error its status, each logged.
fn entry(what: &str, f: impl FnOnce() -> Result<(), Error>) -> cudaq_status_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDAQ_OK,
        Ok(Err(e)) => {
            log_error(&e.message);
            e.status
        }
        Err(_) => {
            log_error(&format!("{what}: internal error (a panic, reported above)"));
            CUDAQ_ERR_INTERNAL
        }
    }
}

/// Writes `line` into the C buffer `buf` of `len` bytes, NUL-terminated; a line that does not
/// fit is cut (still terminated) and refused.
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
unsafe fn write_line(buf: *mut c_char, len: usize, line: &str, what: &str) -> Result<(), Error> {
    if buf.is_null() || len == 0 {
        return Err(Error::arg(format!("{what}: no buffer (NULL or 0 bytes)")));
    }
    let n = line.len().min(len - 1);
    // SAFETY: n + 1 <= len bytes at buf are writable (the caller's contract).
    unsafe {
        std::ptr::copy_nonoverlapping(line.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    if n < line.len() {
        return Err(Error::arg(format!("{what}: the line needs {} bytes, the buffer has {len}", line.len() + 1)));
    }
    Ok(())
}

/// Installs a stderr `tracing` subscriber with `filter`, unless the process has one.
fn init_logging(filter: &str) {
    match tracing_subscriber::EnvFilter::try_new(filter) {
        Ok(f) => {
            let _ =
                tracing_subscriber::fmt().with_env_filter(f).with_writer(std::io::stderr).with_ansi(false).try_init();
        }
        Err(e) => log_error(&format!("create: --log-level {filter:?}: {e}")),
    }
}

unsafe extern "C" fn create(
    out: *mut cudaq_realtime_bridge_handle_t,
    argc: c_int,
    argv: *mut *mut c_char,
) -> cudaq_status_t {
    entry("create", || {
        if out.is_null() {
            return Err(Error::arg("create: the handle pointer is NULL"));
        }
        // SAFETY: `out` is a writable handle (checked non-NULL; the caller's contract).
        unsafe { *out = std::ptr::null_mut() };
        if argc < 0 || (argc > 0 && argv.is_null()) {
            return Err(Error::arg(format!("create: argc {argc} with argv {argv:p}")));
        }
        let mut args = Vec::with_capacity(argc as usize);
        for i in 0..argc as usize {
            // SAFETY: argv holds argc pointers (the C contract of an argument vector), each
            // NULL or a NUL-terminated string.
            let p = unsafe { *argv.add(i) };
            if !p.is_null() {
                // SAFETY: a NUL-terminated string (as above).
                args.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
            }
        }
        let mut config = args::parse(&args).map_err(|e| Error::arg(format!("create: {e}")))?;
        // the provider's edge: the environment's PAUSE choice, where the arguments make none
        config.spin_pause |= rocelink_link::pause_asked_by_env();
        if let Some(level) = &config.log_level {
            init_logging(level);
        }
        let bridge = Arc::new(Bridge::create(config)?);
        let handle = Arc::as_ptr(&bridge) as cudaq_realtime_bridge_handle_t;
        bridges().push((handle as usize, bridge));
        // SAFETY: as above.
        unsafe { *out = handle };
        Ok(())
    })
}

unsafe extern "C" fn destroy(handle: cudaq_realtime_bridge_handle_t) -> cudaq_status_t {
    entry("destroy", || {
        let key = handle as usize;
        let bridge = {
            let mut all = bridges();
            all.iter().position(|(k, _)| *k == key).map(|i| all.swap_remove(i).1)
        };
        match bridge {
            Some(b) => b.shutdown(),
            None => tracing::debug!("destroy: {handle:p} is no live bridge (NULL, or destroyed): nothing to do"),
        }
        Ok(())
    })
}

unsafe extern "C" fn get_transport_context(
    handle: cudaq_realtime_bridge_handle_t,
    kind: cudaq_realtime_transport_context_t,
    out: *mut c_void,
) -> cudaq_status_t {
    entry("get_transport_context", || {
        let b = lookup(handle, "get_transport_context")?;
        if out.is_null() {
            return Err(Error::arg("get_transport_context: the output pointer is NULL"));
        }
        match kind {
            // SAFETY: for RING_BUFFER the caller passes a cudaq_ringbuffer_t (its contract).
            RING_BUFFER => unsafe { out.cast::<cudaq_ringbuffer_t>().write_unaligned(b.ring().ringbuffer()) },
            // SAFETY: for UNIFIED a cudaq_unified_dispatch_ctx_t. No launch function of ours:
            // the consumer drives the CPU data plane (get_cpu_dataplane).
            UNIFIED => unsafe {
                b.want_cpu_plane()?;
                out.cast::<cudaq_unified_dispatch_ctx_t>().write_unaligned(cudaq_unified_dispatch_ctx_t {
                    launch_fn: std::ptr::null_mut(),
                    transport_ctx: Arc::as_ptr(b.ring()) as *mut c_void,
                })
            },
            k => return Err(Error::arg(format!("get_transport_context: unknown context kind {k}"))),
        }
        Ok(())
    })
}

unsafe extern "C" fn connect(handle: cudaq_realtime_bridge_handle_t) -> cudaq_status_t {
    entry("connect", || lookup(handle, "connect")?.connect())
}

unsafe extern "C" fn launch(handle: cudaq_realtime_bridge_handle_t) -> cudaq_status_t {
    entry("launch", || lookup(handle, "launch")?.launch())
}

unsafe extern "C" fn disconnect(handle: cudaq_realtime_bridge_handle_t) -> cudaq_status_t {
    entry("disconnect", || lookup(handle, "disconnect")?.disconnect())
}

/// `rx_poll` of the CPU data plane (`Ring::rx_poll`). `ctx` is the ring `get_cpu_dataplane`
/// handed out, valid until its bridge is destroyed (the dispatcher stops polling first).
unsafe extern "C" fn rx_poll(ctx: *mut c_void, out_slot: *mut u32) -> cudaq_rx_status_t {
    if ctx.is_null() || out_slot.is_null() {
        return CUDAQ_RX_EMPTY;
    }
    // SAFETY: ctx is the Ring of a live bridge (above).
    let ring = unsafe { &*(ctx as *const Ring) };
    match catch_unwind(AssertUnwindSafe(|| ring.rx_poll())) {
        Ok(Some(slot)) => {
            // SAFETY: out_slot is a writable u32 (checked non-NULL; the caller's contract).
            unsafe { *out_slot = slot };
            CUDAQ_RX_READY
        }
        Ok(None) => CUDAQ_RX_EMPTY,
        Err(_) => {
            log_error("rx_poll: internal error (a panic, reported above)");
            CUDAQ_RX_EMPTY
        }
    }
}

/// `tx_publish` of the CPU data plane (`Ring::tx_publish`); `ctx` as for [`rx_poll`].
unsafe extern "C" fn tx_publish(ctx: *mut c_void, slot: u32) -> cudaq_status_t {
    if ctx.is_null() {
        return CUDAQ_ERR_INVALID_ARG;
    }
    // SAFETY: as in rx_poll.
    let ring = unsafe { &*(ctx as *const Ring) };
    entry("tx_publish", || ring.tx_publish(slot).map_err(|(status, message)| Error { status, message }))
}

unsafe extern "C" fn get_cpu_dataplane(
    handle: cudaq_realtime_bridge_handle_t,
    out: *mut cudaq_cpu_dataplane_t,
) -> cudaq_status_t {
    entry("get_cpu_dataplane", || {
        let b = lookup(handle, "get_cpu_dataplane")?;
        if out.is_null() {
            return Err(Error::arg("get_cpu_dataplane: the output pointer is NULL"));
        }
        b.want_cpu_plane()?;
        let dp = cudaq_cpu_dataplane_t {
            ctx: Arc::as_ptr(b.ring()) as *mut c_void,
            ring: b.ring().ringbuffer(),
            rx_poll: Some(rx_poll),
            tx_publish: Some(tx_publish),
        };
        // SAFETY: out points to a cudaq_cpu_dataplane_t (checked non-NULL; the contract).
        unsafe { out.write_unaligned(dp) };
        Ok(())
    })
}

unsafe extern "C" fn get_endpoint_info(
    handle: cudaq_realtime_bridge_handle_t,
    buf: *mut c_char,
    len: usize,
) -> cudaq_status_t {
    entry("get_endpoint_info", || {
        let b = lookup(handle, "get_endpoint_info")?;
        // SAFETY: buf is NULL or holds len bytes (the caller's contract).
        unsafe { write_line(buf, len, &b.endpoint_info(), "get_endpoint_info") }
    })
}

unsafe extern "C" fn get_ring_geometry(
    handle: cudaq_realtime_bridge_handle_t,
    slots: *mut u32,
    slot_size: *mut u32,
) -> cudaq_status_t {
    entry("get_ring_geometry", || {
        let b = lookup(handle, "get_ring_geometry")?;
        if slots.is_null() || slot_size.is_null() {
            return Err(Error::arg("get_ring_geometry: an output pointer is NULL"));
        }
        let g = b.ring().geometry();
        // SAFETY: both are writable u32s (checked non-NULL; the caller's contract).
        unsafe {
            *slots = g.slots;
            *slot_size = g.slot_size;
        }
        Ok(())
    })
}

/// Most entries a function table may have.
const MAX_FUNCTIONS: u32 = 1 << 16;

unsafe extern "C" fn set_function_table(
    handle: cudaq_realtime_bridge_handle_t,
    table: *const cudaq_function_table_t,
) -> cudaq_status_t {
    entry("set_function_table", || {
        let b = lookup(handle, "set_function_table")?;
        if table.is_null() {
            return Err(Error::arg("set_function_table: the table pointer is NULL"));
        }
        // SAFETY: table points to a cudaq_function_table_t (checked non-NULL; the contract).
        // Its entries are not read: they may be in device memory.
        let t = unsafe { table.read_unaligned() };
        if t.count > MAX_FUNCTIONS || (t.count > 0 && t.entries.is_null()) {
            return Err(Error::arg(format!("set_function_table: {} entries at {:p}", t.count, t.entries)));
        }
        b.set_function_table(t.entries as usize, t.count);
        Ok(())
    })
}

/// The interface `cudaq_realtime_get_bridge_interface` returns: version 3, every entry filled.
static INTERFACE: cudaq_realtime_bridge_interface_t = cudaq_realtime_bridge_interface_t {
    version: CUDAQ_REALTIME_BRIDGE_INTERFACE_VERSION,
    create: Some(create),
    destroy: Some(destroy),
    get_transport_context: Some(get_transport_context),
    connect: Some(connect),
    launch: Some(launch),
    disconnect: Some(disconnect),
    get_cpu_dataplane: Some(get_cpu_dataplane),
    get_endpoint_info: Some(get_endpoint_info),
    get_ring_geometry: Some(get_ring_geometry),
    set_function_table: Some(set_function_table),
};

/// The provider's interface (PROTOCOLS.md 5): a static the caller reads and never writes or
/// frees.
#[no_mangle]
pub extern "C" fn cudaq_realtime_get_bridge_interface() -> *mut cudaq_realtime_bridge_interface_t {
    &INTERFACE as *const cudaq_realtime_bridge_interface_t as *mut cudaq_realtime_bridge_interface_t
}

/// rocelink extension: what the provider counted (`Bridge::counters`), one `key=value` line.
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rocelink_cudaq_bridge_counters(
    handle: cudaq_realtime_bridge_handle_t,
    buf: *mut c_char,
    len: usize,
) -> cudaq_status_t {
    entry("rocelink_cudaq_bridge_counters", || {
        let b = lookup(handle, "rocelink_cudaq_bridge_counters")?;
        // SAFETY: the caller's contract (above).
        unsafe { write_line(buf, len, &b.counters(), "rocelink_cudaq_bridge_counters") }
    })
}

/// rocelink extension: runs the peer's traffic player through one run (`Bridge::run_peer`:
/// `spec` is `function=NAME count=N size=BYTES [rate=PER_SECOND] [timeout_s=S]`) and writes
/// what the peer captured into `report` as one `key=value` line. Blocks until the run is over;
/// the other entries may be called meanwhile from other threads (`disconnect` ends the run).
///
/// # Safety
/// `spec` is NULL or a NUL-terminated string; `report` is NULL or points to `len` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn rocelink_cudaq_bridge_run_peer(
    handle: cudaq_realtime_bridge_handle_t,
    spec: *const c_char,
    report: *mut c_char,
    len: usize,
) -> cudaq_status_t {
    entry("rocelink_cudaq_bridge_run_peer", || {
        let b = lookup(handle, "rocelink_cudaq_bridge_run_peer")?;
        if spec.is_null() || report.is_null() || len == 0 {
            return Err(Error::arg("rocelink_cudaq_bridge_run_peer: spec or report is NULL"));
        }
        // SAFETY: a NUL-terminated string (the caller's contract).
        let spec = unsafe { CStr::from_ptr(spec) }.to_string_lossy().into_owned();
        let line = b.run_peer(&spec)?;
        // SAFETY: the caller's contract (above).
        unsafe { write_line(report, len, &line, "rocelink_cudaq_bridge_run_peer") }
    })
}

/// The live bridge behind `handle`, for Rust callers of the C entries (tests).
pub fn bridge_of(handle: cudaq_realtime_bridge_handle_t) -> Option<Arc<Bridge>> {
    lookup(handle, "bridge_of").ok()
}
