//! The ring a CUDA-Q Realtime dispatcher reads requests from and writes responses to
//! (PROTOCOLS.md 5): `slots` RX slots and `slots` TX slots of `slot_size` bytes, and one
//! 64-bit flag per slot and direction, all in one allocation.
//!
//! Memory: pinned host memory mapped into the GPU ([`RingMemory::Gpu`], the operator's
//! `Gpu::host_alloc`), so a dispatch kernel polls the device views and a host loop the host
//! views of the same bytes; or, where there is no CUDA driver, plain page-aligned host memory,
//! whose device views are its host views (a GPU cannot use them).
//!
//! The contract, word by word:
//! - `rx_flags[i]`: written by the provider (the NIC engine thread), polled by the dispatcher.
//!   The engine writes a whole request (the 24-byte `RPCHeader`, then its `arg_len` argument
//!   bytes) into RX slot `i`, then stores the slot's host address with Release; the dispatcher
//!   loads it with Acquire, so it sees the whole request, and stores 0 when it is done with the
//!   slot. Slots are filled strictly in FIFO order (0, 1, .., slots - 1, 0, ..).
//! - `tx_flags[i]`: written by the dispatcher, polled by the engine. The dispatcher writes the
//!   response (the 24-byte `RPCResponse`, then `result_len` bytes) into TX slot `i` and stores
//!   that slot's address (host or device view) with Release; the engine loads it with Acquire,
//!   copies the response out and stores 0. [`CUDAQ_TX_FLAG_IN_FLIGHT`] means "being computed",
//!   an error-tagged value a response that failed: neither is sent.
//! - Slot `i` is free for the next request when both flags are 0. A dispatcher that answers
//!   stores `tx_flags[i]` before it clears `rx_flags[i]`, so a slot whose answer is still
//!   unsent never looks free.
//!
//! The CPU data plane ([`Ring::rx_poll`], [`Ring::tx_publish`], one dispatcher thread) drives
//! the same flags: `rx_poll` hands out the next slot in FIFO order whose request is published;
//! the slot stays the dispatcher's (its RX flag set) until `tx_publish` stores its TX flag and
//! clears the RX flag, or, for a request the dispatcher answers with nothing (an unknown
//! function id), until its next `rx_poll`.
//!
//! Every access to the memory goes through `SharedMem`'s bounds-checked accessors, with
//! offsets computed here from the geometry: nothing is written past a slot.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::Mutex;

use rocelink_operator::gpu::driver::{self, Gpu};
use rocelink_operator::mem::{Carver, SharedMem, PAGE};

use crate::abi::{cudaq_ringbuffer_t, CUDAQ_ERR_INTERNAL, CUDAQ_ERR_INVALID_ARG};

/// Flags of one direction share lines with each other, never with the other direction's.
const LINE: usize = 128;

/// Most slots a ring may have.
pub const MAX_SLOTS: u32 = 4096;
/// Slot sizes are multiples of this (every slot, and so every header, 8-byte aligned).
pub const SLOT_ALIGN: u32 = 64;
/// Largest slot: a request arrives, and a response leaves, in one RoCE packet.
pub const MAX_SLOT_SIZE: u32 = rocelink_wire::roce::PMTU as u32;

/// Slots and their size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub slots: u32,
    pub slot_size: u32,
}

impl Geometry {
    pub fn validate(&self) -> Result<(), String> {
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return Err(format!("--slots {}: must be 1..={MAX_SLOTS}", self.slots));
        }
        let s = self.slot_size;
        if !(SLOT_ALIGN..=MAX_SLOT_SIZE).contains(&s) || !s.is_multiple_of(SLOT_ALIGN) {
            return Err(format!(
                "--slot-size {s}: must be a multiple of {SLOT_ALIGN} in {SLOT_ALIGN}..={MAX_SLOT_SIZE} (a request and its answer each fit one RoCE packet)"
            ));
        }
        Ok(())
    }
}

/// Where the ring lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingMemory {
    /// Pinned, mapped memory of GPU 0 where a CUDA driver and a device exist, else host memory.
    Auto,
    /// Plain host memory (device views = host views).
    Host,
    /// Pinned host memory mapped into GPU `n`.
    Gpu(usize),
}

/// What the provider counted (written by the engine thread and the CPU data plane, read by
/// anyone). Every request that reached the NIC's receive queue ends in exactly one `rx_*`
/// counter; every TX flag the engine took in exactly one `tx_*` counter.
#[derive(Debug, Default)]
pub struct RingCounters {
    /// Requests written into the ring and published.
    pub rx_requests: AtomicU64,
    /// Requests dropped because their FIFO slot was still in use after the grace period.
    pub rx_ring_full: AtomicU64,
    /// Requests longer than a slot (header and arguments), dropped.
    pub rx_too_long: AtomicU64,
    /// Frames that are no whole CUQR request (shorter than a header, another magic, fewer
    /// argument bytes than `arg_len` says), dropped.
    pub rx_not_rpc: AtomicU64,
    /// Receive completions that are no RDMA WRITE with immediate into a staging slot, dropped.
    pub rx_bad_completion: AtomicU64,
    /// Responses sent.
    pub tx_responses: AtomicU64,
    /// TX flags whose value is no address of their slot, or whose slot holds no CUQS response
    /// that fits it: cleared, nothing sent.
    pub tx_bad_responses: AtomicU64,
    /// TX flags the dispatcher tagged as failed (`CUDAQ_TX_FLAG_ERROR_TAG`): cleared, nothing
    /// sent.
    pub tx_dispatch_errors: AtomicU64,
    /// CPU data plane: requests handed out by `rx_poll` and released without a `tx_publish`.
    pub cpu_unanswered: AtomicU64,
}

impl RingCounters {
    /// `key=value` pairs, space-separated.
    pub fn text(&self) -> String {
        let v = |c: &AtomicU64| c.load(Relaxed);
        format!(
            "rx_requests={} rx_ring_full={} rx_too_long={} rx_not_rpc={} rx_bad_completion={} tx_responses={} tx_bad_responses={} tx_dispatch_errors={} cpu_unanswered={}",
            v(&self.rx_requests),
            v(&self.rx_ring_full),
            v(&self.rx_too_long),
            v(&self.rx_not_rpc),
            v(&self.rx_bad_completion),
            v(&self.tx_responses),
            v(&self.tx_bad_responses),
            v(&self.tx_dispatch_errors),
            v(&self.cpu_unanswered)
        )
    }
}

/// The ring's memory and its state.
pub struct Ring {
    /// First: dropped before the GPU context its pinned memory belongs to.
    mem: SharedMem,
    geometry: Geometry,
    rx_flags: usize,
    tx_flags: usize,
    rx_data: usize,
    tx_data: usize,
    pub counters: RingCounters,
    /// CPU data plane: the next slot `rx_poll` looks at (one dispatcher thread).
    cursor: AtomicU32,
    /// CPU data plane: 1 + the slot `rx_poll` handed out last and no `tx_publish` answered
    /// yet (0: none).
    claimed: AtomicU32,
    /// The NIC engine runs (between launch and disconnect): `tx_publish` has someone to send.
    running: AtomicBool,
    memory: String,
    /// The context of a GPU ring's memory; after `mem`, so it outlives it.
    _gpu: Mutex<Option<Gpu>>,
}

impl Ring {
    /// Allocates a ring of `geometry` in `memory`, every flag 0.
    pub fn new(geometry: Geometry, memory: RingMemory) -> Result<Ring, String> {
        geometry.validate()?;
        let n = geometry.slots as usize;
        let size = geometry.slot_size as usize;
        let mut c = Carver::new();
        let rx_flags = c.take(n * 8, LINE);
        let tx_flags = c.take(n * 8, LINE);
        let rx_data = c.take(n * size, PAGE);
        let tx_data = c.take(n * size, PAGE);
        let total = c.take(0, PAGE);
        let (mem, gpu, what) = match memory {
            RingMemory::Host => (SharedMem::new(total), None, host_memory()),
            RingMemory::Gpu(ordinal) => gpu_memory(ordinal, total)?,
            RingMemory::Auto => match driver::device_count() {
                Ok(count) if count > 0 => match gpu_memory(0, total) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!("ring: GPU 0 memory unavailable ({e}); using host memory");
                        (SharedMem::new(total), None, host_memory())
                    }
                },
                _ => (SharedMem::new(total), None, host_memory()),
            },
        };
        if mem.len() < total {
            return Err(format!("ring: got {} bytes of memory, need {total}", mem.len()));
        }
        if gpu.is_some() && mem.device_addr(0) != mem.host_addr(0) {
            // The flags carry host addresses; a device dispatcher reading them needs unified
            // addressing (every 64-bit CUDA platform has it).
            tracing::warn!("ring: the GPU maps the ring at another address than the host: flags carry host addresses");
        }
        Ok(Ring {
            mem,
            geometry,
            rx_flags,
            tx_flags,
            rx_data,
            tx_data,
            counters: RingCounters::default(),
            cursor: AtomicU32::new(0),
            claimed: AtomicU32::new(0),
            running: AtomicBool::new(false),
            memory: what,
            _gpu: Mutex::new(gpu),
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Where the ring lives, in words (`host` or `gpu0`).
    pub fn memory(&self) -> &str {
        &self.memory
    }

    /// The ring as `get_transport_context(RING_BUFFER)` gives it.
    pub fn ringbuffer(&self) -> cudaq_ringbuffer_t {
        let m = &self.mem;
        let size = self.geometry.slot_size as usize;
        cudaq_ringbuffer_t {
            rx_flags: m.device_addr(self.rx_flags) as *mut u64,
            tx_flags: m.device_addr(self.tx_flags) as *mut u64,
            rx_data: m.device_addr(self.rx_data) as *mut u8,
            tx_data: m.device_addr(self.tx_data) as *mut u8,
            rx_stride_sz: size,
            tx_stride_sz: size,
            rx_flags_host: m.host_addr(self.rx_flags) as *mut u64,
            tx_flags_host: m.host_addr(self.tx_flags) as *mut u64,
            rx_data_host: m.host_addr(self.rx_data) as *mut u8,
            tx_data_host: m.host_addr(self.tx_data) as *mut u8,
        }
    }

    pub fn rx_flag(&self, i: u32) -> &AtomicU64 {
        self.mem.atomic_u64(self.rx_flags + self.index(i) * 8)
    }

    pub fn tx_flag(&self, i: u32) -> &AtomicU64 {
        self.mem.atomic_u64(self.tx_flags + self.index(i) * 8)
    }

    fn index(&self, i: u32) -> usize {
        assert!(i < self.geometry.slots, "slot {i} of a ring of {}", self.geometry.slots);
        i as usize
    }

    fn rx_slot(&self, i: u32) -> usize {
        self.rx_data + self.index(i) * self.geometry.slot_size as usize
    }

    fn tx_slot(&self, i: u32) -> usize {
        self.tx_data + self.index(i) * self.geometry.slot_size as usize
    }

    /// The value `rx_flags[i]` carries: RX slot `i`'s host address.
    pub fn rx_slot_addr(&self, i: u32) -> u64 {
        self.mem.host_addr(self.rx_slot(i))
    }

    /// TX slot `i`'s host and device addresses: a TX flag carries one of them.
    pub fn tx_slot_addrs(&self, i: u32) -> (u64, u64) {
        let off = self.tx_slot(i);
        (self.mem.host_addr(off), self.mem.device_addr(off))
    }

    /// Slot `i` may take the next request: both its flags are 0.
    pub fn slot_free(&self, i: u32) -> bool {
        self.rx_flag(i).load(Acquire) == 0 && self.tx_flag(i).load(Acquire) == 0
    }

    /// Writes `request` (header and arguments, at most a slot: the caller checked) into RX slot
    /// `i`, then publishes it: the flag last, with Release.
    pub fn publish_request(&self, i: u32, request: &[u8]) {
        assert!(request.len() <= self.geometry.slot_size as usize, "a request longer than a slot");
        self.mem.write(self.rx_slot(i), request);
        self.rx_flag(i).store(self.rx_slot_addr(i), Release);
    }

    /// Copies the first `dst.len()` bytes of TX slot `i` out (at most a slot). The caller
    /// loaded its flag with Acquire.
    pub fn read_response(&self, i: u32, dst: &mut [u8]) {
        assert!(dst.len() <= self.geometry.slot_size as usize, "a read past a slot");
        self.mem.read(self.tx_slot(i), dst);
    }

    /// TX slot `i`'s bytes, for copying out without a buffer between.
    ///
    /// # Safety
    /// The dispatcher does not write the slot meanwhile: its flag holds the slot's address
    /// (loaded with Acquire) and the caller clears it only after the slice is gone.
    pub unsafe fn response_slice(&self, i: u32, len: usize) -> &[u8] {
        assert!(len <= self.geometry.slot_size as usize, "a read past a slot");
        self.mem.slice(self.tx_slot(i), len)
    }

    pub fn set_running(&self, running: bool) {
        self.running.store(running, Release);
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Acquire)
    }

    /// CPU data plane, `rx_poll`: the next slot in FIFO order whose request is published, now
    /// the dispatcher's (module docs). Releases first the slot handed out by the last call if
    /// no `tx_publish` answered it.
    pub fn rx_poll(&self) -> Option<u32> {
        let prev = self.claimed.swap(0, Relaxed);
        if prev != 0 {
            self.rx_flag(prev - 1).store(0, Release);
            self.counters.cpu_unanswered.fetch_add(1, Relaxed);
        }
        let c = self.cursor.load(Relaxed);
        // Acquire pairs with the engine's Release in `publish_request`: the request is whole.
        if self.rx_flag(c).load(Acquire) == 0 {
            return None;
        }
        self.claimed.store(c + 1, Relaxed);
        self.cursor.store((c + 1) % self.geometry.slots, Relaxed);
        Some(c)
    }

    /// CPU data plane, `tx_publish`: hands the response in TX slot `slot` to the engine (its
    /// TX flag, Release) and releases the slot's request (its RX flag, after). Refused: a slot
    /// outside the ring, or one whose previous response is not sent yet (`INVALID_ARG`); no
    /// engine running (`INTERNAL`, the request released all the same).
    pub fn tx_publish(&self, slot: u32) -> Result<(), (i32, String)> {
        if slot >= self.geometry.slots {
            return Err((
                CUDAQ_ERR_INVALID_ARG,
                format!("tx_publish: slot {slot} of a ring of {}", self.geometry.slots),
            ));
        }
        let _ = self.claimed.compare_exchange(slot + 1, 0, Relaxed, Relaxed);
        if !self.is_running() {
            self.rx_flag(slot).store(0, Release);
            return Err((CUDAQ_ERR_INTERNAL, "tx_publish: the provider is not launched (or disconnected)".into()));
        }
        if self.tx_flag(slot).load(Acquire) != 0 {
            return Err((
                CUDAQ_ERR_INVALID_ARG,
                format!("tx_publish: slot {slot} still holds a response not yet sent"),
            ));
        }
        self.tx_flag(slot).store(self.tx_slot_addrs(slot).0, Release);
        self.rx_flag(slot).store(0, Release);
        Ok(())
    }
}

fn host_memory() -> String {
    "host".into()
}

fn gpu_memory(ordinal: usize, len: usize) -> Result<(SharedMem, Option<Gpu>, String), String> {
    let gpu = Gpu::open(ordinal).map_err(|e| format!("ring on GPU {ordinal}: {e}"))?;
    let mem = gpu.host_alloc(len).map_err(|e| format!("ring on GPU {ordinal}: {e}"))?;
    Ok((mem, Some(gpu), format!("gpu{ordinal}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(slots: u32) -> Ring {
        Ring::new(Geometry { slots, slot_size: 128 }, RingMemory::Host).expect("ring")
    }

    #[test]
    fn geometry_is_checked() {
        for (slots, slot_size) in [(0, 128), (MAX_SLOTS + 1, 128), (8, 0), (8, 100), (8, 8192)] {
            assert!(Geometry { slots, slot_size }.validate().is_err(), "{slots} x {slot_size}");
        }
        assert!(Geometry { slots: 64, slot_size: 4096 }.validate().is_ok());
    }

    #[test]
    fn views_of_host_memory_agree_and_slots_do_not_overlap() {
        let r = ring(4);
        let b = r.ringbuffer();
        assert_eq!(b.rx_flags, b.rx_flags_host);
        assert_eq!(b.tx_data, b.tx_data_host);
        assert_eq!((b.rx_stride_sz, b.tx_stride_sz), (128, 128));
        assert_eq!(r.rx_slot_addr(1), b.rx_data_host as u64 + 128);
        assert!(b.tx_flags_host as u64 >= b.rx_flags_host as u64 + 4 * 8);
        assert!(b.rx_data_host as u64 >= b.tx_flags_host as u64 + 4 * 8);
        assert!(b.tx_data_host as u64 >= b.rx_data_host as u64 + 4 * 128);
        assert_eq!(r.memory(), "host");
    }

    #[test]
    fn a_request_is_published_after_its_bytes() {
        let r = ring(2);
        assert!(r.slot_free(1));
        r.publish_request(1, &[7; 100]);
        assert_eq!(r.rx_flag(1).load(Acquire), r.rx_slot_addr(1));
        assert!(!r.slot_free(1));
        // SAFETY: the flag says the slot holds the request; nobody writes it now.
        let bytes = unsafe { std::slice::from_raw_parts(r.rx_slot_addr(1) as *const u8, 100) };
        assert_eq!(bytes, &[7; 100]);
        let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.publish_request(0, &[0; 129])));
        assert!(past.is_err(), "never past a slot");
    }

    #[test]
    fn the_cpu_plane_hands_out_fifo_and_releases_on_publish_or_next_poll() {
        let r = ring(3);
        r.set_running(true);
        assert_eq!(r.rx_poll(), None);
        r.publish_request(0, &[1; 24]);
        r.publish_request(1, &[2; 24]);
        assert_eq!(r.rx_poll(), Some(0));
        assert!(!r.slot_free(0), "the dispatcher's until answered");
        r.tx_publish(0).expect("publish");
        assert_eq!(r.rx_flag(0).load(Acquire), 0);
        assert_eq!(r.tx_flag(0).load(Acquire), r.tx_slot_addrs(0).0);
        assert_eq!(r.tx_publish(0).map_err(|e| e.0), Err(CUDAQ_ERR_INVALID_ARG), "its response is not sent yet");
        assert_eq!(r.rx_poll(), Some(1));
        // slot 1 is not answered: the next poll releases it
        assert_eq!(r.rx_poll(), None);
        assert_eq!(r.rx_flag(1).load(Acquire), 0);
        assert_eq!(r.counters.cpu_unanswered.load(Relaxed), 1);
        assert_eq!(r.tx_publish(3).map_err(|e| e.0), Err(CUDAQ_ERR_INVALID_ARG));
        r.set_running(false);
        assert_eq!(r.tx_publish(1).map_err(|e| e.0), Err(CUDAQ_ERR_INTERNAL));
    }
}
