//! The C layouts of a CUDA-Q Realtime bridge provider, interface version 3 (PROTOCOLS.md 5),
//! as `#[repr(C)]` Rust types with the C names. `include/rocelink_cudaq_bridge.h` declares the
//! same layouts for C; the layout test (`tests/c_dispatcher.rs`) holds the two equal, field by
//! field, with sizes and offsets printed by a C program compiled against the header.
//!
//! Every function of the interface returns a `cudaq_status_t` (a C `int`); enums are C `int`s.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `cudaq_status_t`.
pub type cudaq_status_t = c_int;
pub const CUDAQ_OK: cudaq_status_t = 0;
pub const CUDAQ_ERR_INVALID_ARG: cudaq_status_t = 1;
pub const CUDAQ_ERR_INTERNAL: cudaq_status_t = 2;
pub const CUDAQ_ERR_CUDA: cudaq_status_t = 3;
pub const CUDAQ_ERR_UNSUPPORTED: cudaq_status_t = 4;

/// `cudaq_realtime_transport_context_t`: what `get_transport_context` fills.
pub type cudaq_realtime_transport_context_t = c_int;
/// A [`cudaq_ringbuffer_t`].
pub const RING_BUFFER: cudaq_realtime_transport_context_t = 0;
/// A [`cudaq_unified_dispatch_ctx_t`].
pub const UNIFIED: cudaq_realtime_transport_context_t = 1;

/// `cudaq_rx_status_t`: what `rx_poll` returns.
pub type cudaq_rx_status_t = c_int;
/// A whole request is in the slot written to `*out_slot`.
pub const CUDAQ_RX_READY: cudaq_rx_status_t = 0;
/// Nothing ready.
pub const CUDAQ_RX_EMPTY: cudaq_rx_status_t = 1;

/// `cudaq_dispatch_mode_t` of a function-table entry.
pub const CUDAQ_DISPATCH_DEVICE_CALL: u8 = 0;
pub const CUDAQ_DISPATCH_GRAPH_LAUNCH: u8 = 1;
pub const CUDAQ_DISPATCH_HOST_CALL: u8 = 2;

/// The interface version this provider implements: the loader reads the fields past
/// `disconnect` only from version 2 on, `set_function_table` only from version 3 on.
pub const CUDAQ_REALTIME_BRIDGE_INTERFACE_VERSION: c_int = 3;

/// What a host dispatcher stores in `tx_flags[i]` while a response it launched (a CUDA graph)
/// is still being computed: not a slot address, nothing to send yet.
pub const CUDAQ_TX_FLAG_IN_FLIGHT: u64 = 0xEEEE_EEEE_EEEE_EEEE;
/// `tx_flags[i] >> 48` of a response the dispatcher failed to compute (the low bits hold its
/// error): nothing to send.
pub const CUDAQ_TX_FLAG_ERROR_TAG: u64 = 0xDEAD;

/// Opaque: what `create` hands out and every other entry takes.
pub type cudaq_realtime_bridge_handle_t = *mut c_void;

/// The ring: RX and TX flag and data arrays, device views first, then the host views of the
/// same arrays (one allocation). Flag `i` is 0 when slot `i` is empty, else the address of
/// slot `i`'s data (the ring contract, PROTOCOLS.md 5 and `crate::ring`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaq_ringbuffer_t {
    pub rx_flags: *mut u64,
    pub tx_flags: *mut u64,
    pub rx_data: *mut u8,
    pub tx_data: *mut u8,
    /// Bytes per RX slot.
    pub rx_stride_sz: usize,
    /// Bytes per TX slot.
    pub tx_stride_sz: usize,
    pub rx_flags_host: *mut u64,
    pub tx_flags_host: *mut u64,
    pub rx_data_host: *mut u8,
    pub tx_data_host: *mut u8,
}

impl cudaq_ringbuffer_t {
    pub const fn null() -> cudaq_ringbuffer_t {
        let n = std::ptr::null_mut();
        cudaq_ringbuffer_t {
            rx_flags: n,
            tx_flags: n,
            rx_data: n.cast(),
            tx_data: n.cast(),
            rx_stride_sz: 0,
            tx_stride_sz: 0,
            rx_flags_host: n,
            tx_flags_host: n,
            rx_data_host: n.cast(),
            tx_data_host: n.cast(),
        }
    }
}

/// `rx_poll(ctx, out_slot)`: non-blocking; [`CUDAQ_RX_READY`] with the slot of a whole request,
/// or [`CUDAQ_RX_EMPTY`].
pub type cudaq_cpu_rx_poll_fn_t = unsafe extern "C" fn(ctx: *mut c_void, out_slot: *mut u32) -> cudaq_rx_status_t;
/// `tx_publish(ctx, slot)`: send the response in TX slot `slot`.
pub type cudaq_cpu_tx_publish_fn_t = unsafe extern "C" fn(ctx: *mut c_void, slot: u32) -> cudaq_status_t;

/// The ring and the two host-callable hooks a CPU dispatch loop drives it with.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaq_cpu_dataplane_t {
    pub ctx: *mut c_void,
    pub ring: cudaq_ringbuffer_t,
    pub rx_poll: Option<cudaq_cpu_rx_poll_fn_t>,
    pub tx_publish: Option<cudaq_cpu_tx_publish_fn_t>,
}

/// What `get_transport_context(UNIFIED)` fills: a launch function of the provider's and its
/// state. This provider has none (NULL): its data plane is the CPU one.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaq_unified_dispatch_ctx_t {
    pub launch_fn: *mut c_void,
    pub transport_ctx: *mut c_void,
}

/// One argument or result of a handler's schema.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct cudaq_type_desc_t {
    pub type_id: u8,
    pub reserved: [u8; 3],
    pub size_bytes: u32,
    pub num_elements: u32,
}

/// A handler's signature: 8 argument and 4 result descriptors.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct cudaq_handler_schema_t {
    pub num_args: u8,
    pub num_results: u8,
    pub reserved: u16,
    pub args: [cudaq_type_desc_t; 8],
    pub results: [cudaq_type_desc_t; 4],
}

/// A `HOST_CALL` handler: reads the request (`RPCHeader` then args) at `rx`, writes the
/// response (`RPCResponse` then result) at `tx`, `slot_size` bytes each at most.
pub type cudaq_host_rpc_fn_t = unsafe extern "C" fn(rx: *const c_void, tx: *mut c_void, slot_size: usize);

/// The handler of an entry, by its dispatch mode.
#[repr(C)]
#[derive(Clone, Copy)]
pub union cudaq_function_handler_t {
    pub device_fn_ptr: *mut c_void,
    /// A `cudaGraphExec_t`.
    pub graph_exec: *mut c_void,
    pub host_fn: Option<cudaq_host_rpc_fn_t>,
}

/// One entry of the dispatcher's function table.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cudaq_function_entry_t {
    pub handler: cudaq_function_handler_t,
    /// FNV-1a 32 of the function's name (`rocelink_wire::rpc::fnv1a32`).
    pub function_id: u32,
    /// `CUDAQ_DISPATCH_*`.
    pub dispatch_mode: u8,
    pub reserved: [u8; 3],
    pub schema: cudaq_handler_schema_t,
    pub routing_key: u64,
}

/// The dispatcher's function table.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaq_function_table_t {
    pub entries: *mut cudaq_function_entry_t,
    pub count: u32,
}

pub type create_fn =
    unsafe extern "C" fn(*mut cudaq_realtime_bridge_handle_t, c_int, *mut *mut c_char) -> cudaq_status_t;
pub type handle_fn = unsafe extern "C" fn(cudaq_realtime_bridge_handle_t) -> cudaq_status_t;
pub type get_transport_context_fn = unsafe extern "C" fn(
    cudaq_realtime_bridge_handle_t,
    cudaq_realtime_transport_context_t,
    *mut c_void,
) -> cudaq_status_t;
pub type get_cpu_dataplane_fn =
    unsafe extern "C" fn(cudaq_realtime_bridge_handle_t, *mut cudaq_cpu_dataplane_t) -> cudaq_status_t;
pub type get_endpoint_info_fn =
    unsafe extern "C" fn(cudaq_realtime_bridge_handle_t, *mut c_char, usize) -> cudaq_status_t;
pub type get_ring_geometry_fn =
    unsafe extern "C" fn(cudaq_realtime_bridge_handle_t, *mut u32, *mut u32) -> cudaq_status_t;
pub type set_function_table_fn =
    unsafe extern "C" fn(cudaq_realtime_bridge_handle_t, *const cudaq_function_table_t) -> cudaq_status_t;

/// The interface: the version, then the entries in the order of PROTOCOLS.md 5. A NULL entry
/// makes the loader's call return `CUDAQ_ERR_UNSUPPORTED`; this provider fills every one.
#[repr(C)]
#[derive(Debug)]
pub struct cudaq_realtime_bridge_interface_t {
    pub version: c_int,
    pub create: Option<create_fn>,
    pub destroy: Option<handle_fn>,
    pub get_transport_context: Option<get_transport_context_fn>,
    pub connect: Option<handle_fn>,
    pub launch: Option<handle_fn>,
    pub disconnect: Option<handle_fn>,
    // version 2
    pub get_cpu_dataplane: Option<get_cpu_dataplane_fn>,
    pub get_endpoint_info: Option<get_endpoint_info_fn>,
    pub get_ring_geometry: Option<get_ring_geometry_fn>,
    // version 3
    pub set_function_table: Option<set_function_table_fn>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_on_a_64_bit_target() {
        assert_eq!(size_of::<cudaq_ringbuffer_t>(), 80);
        assert_eq!(offset_of!(cudaq_ringbuffer_t, rx_stride_sz), 32);
        assert_eq!(offset_of!(cudaq_ringbuffer_t, rx_flags_host), 48);
        assert_eq!(offset_of!(cudaq_ringbuffer_t, tx_data_host), 72);
        assert_eq!(size_of::<cudaq_cpu_dataplane_t>(), 104);
        assert_eq!(offset_of!(cudaq_cpu_dataplane_t, ring), 8);
        assert_eq!(offset_of!(cudaq_cpu_dataplane_t, rx_poll), 88);
        assert_eq!(size_of::<cudaq_type_desc_t>(), 12);
        assert_eq!(size_of::<cudaq_handler_schema_t>(), 148);
        assert_eq!(offset_of!(cudaq_function_entry_t, function_id), 8);
        assert_eq!(offset_of!(cudaq_function_entry_t, dispatch_mode), 12);
        assert_eq!(offset_of!(cudaq_function_entry_t, schema), 16);
        assert_eq!(offset_of!(cudaq_function_entry_t, routing_key), 168);
        assert_eq!(size_of::<cudaq_function_entry_t>(), 176);
        assert_eq!(size_of::<cudaq_function_table_t>(), 16);
        assert_eq!(size_of::<cudaq_realtime_bridge_interface_t>(), 88);
        assert_eq!(offset_of!(cudaq_realtime_bridge_interface_t, get_cpu_dataplane), 56);
        assert_eq!(offset_of!(cudaq_realtime_bridge_interface_t, set_function_table), 80);
    }
}
