//! Memory shared between the data path (CPU backend thread or GPU kernel) and the NIC engine.
//!
//! [`SharedMem`] owns one zeroed, page-aligned allocation. On the CPU backend it is ordinary
//! host memory; the GPU backend allocates pinned host memory mapped into the GPU and wraps it
//! the same way, so every ring has one layout whoever polls it. Offsets into it are handed out
//! by [`Carver`] with the alignment each layout needs.
//!
//! Accessors are the only `unsafe` here; each says which ordering contract of
//! `kernels/abi.h` it implements. Several threads (and the GPU) access the same bytes: words
//! that are polled are accessed atomically, bulk data is copied only after the acquire that
//! the contract names.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

/// Who frees the memory.
enum Owner {
    Std(Layout),
    /// Freed by a closure (for example `cuMemFreeHost`).
    Foreign(Option<Box<dyn FnOnce(*mut u8) + Send + Sync>>),
}

/// One zeroed, page-aligned region shared by the data path and the NIC.
pub struct SharedMem {
    ptr: NonNull<u8>,
    len: usize,
    /// The address the GPU uses for byte 0 (equal to the host address on the CPU backend).
    device_base: u64,
    owner: Owner,
}

// SAFETY: the region is plain memory; all concurrent access goes through the atomic
// accessors below or through copies ordered by them (module docs).
unsafe impl Send for SharedMem {}
unsafe impl Sync for SharedMem {}

pub const PAGE: usize = 4096;

/// `_mm_prefetch` hints (x86 T0 and ET0; unused elsewhere).
const PREFETCH_READ: i32 = 3;
const PREFETCH_WRITE: i32 = 7;

impl SharedMem {
    /// Allocates `len` zeroed bytes aligned to a page.
    pub fn new(len: usize) -> SharedMem {
        let layout = Layout::from_size_align(len.max(PAGE), PAGE).expect("valid layout");
        // SAFETY: layout has non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        SharedMem { ptr, len, device_base: ptr.as_ptr() as u64, owner: Owner::Std(layout) }
    }

    /// Wraps memory allocated elsewhere (pinned, mapped).
    ///
    /// # Safety
    /// `ptr` must point to `len` zeroed bytes, page-aligned, valid until `free` is called
    /// with it; `device_base` is the address device code uses for `ptr`.
    pub unsafe fn from_foreign(
        ptr: NonNull<u8>,
        len: usize,
        device_base: u64,
        free: Box<dyn FnOnce(*mut u8) + Send + Sync>,
    ) -> SharedMem {
        SharedMem { ptr, len, device_base, owner: Owner::Foreign(Some(free)) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte.
    pub fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Host address of byte `off`.
    pub fn host_addr(&self, off: usize) -> u64 {
        self.ptr.as_ptr() as u64 + off as u64
    }

    /// Device address of byte `off` (what the data path dereferences).
    pub fn device_addr(&self, off: usize) -> u64 {
        self.device_base + off as u64
    }

    /// Offset of a host address inside the region, if it lies inside with `len` bytes.
    pub fn offset_of_host(&self, addr: u64, len: usize) -> Option<usize> {
        let base = self.ptr.as_ptr() as u64;
        let off = addr.checked_sub(base)?;
        let end = off.checked_add(len as u64)?;
        (end <= self.len as u64).then_some(off as usize)
    }

    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len) && off.is_multiple_of(align),
            "shared-memory access {off}+{len} (align {align}) outside a region of {}",
            self.len
        );
    }

    /// The word at `off` as an atomic.
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: in bounds and aligned (checked); AtomicU32 has u32's layout; the region lives
        // as long as &self.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU32) }
    }

    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: as atomic_u32.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }

    pub fn atomic_u8(&self, off: usize) -> &AtomicU8 {
        self.check(off, 1, 1);
        // SAFETY: as atomic_u32.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU8) }
    }

    /// Copies `src` into the region at `off`. The caller publishes it afterwards with a
    /// Release store of the word the consumer polls (the contract of that word).
    pub fn write(&self, off: usize, src: &[u8]) {
        self.check(off, src.len(), 1);
        // SAFETY: in bounds (checked). The consumer of these bytes does not read them until
        // the caller's later Release store is observed by its Acquire load.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len()) }
    }

    /// Copies bytes out of the region at `off`. The caller has done the Acquire load of the
    /// word that published them.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len(), 1);
        // SAFETY: in bounds (checked); ordered after the producer's writes by the caller's
        // Acquire.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Asks the CPU to start loading the cache line of byte `off` (a hint: no read happens
    /// where the architecture has no prefetch, and none is needed for correctness). Lets the
    /// NIC's miss on a WQE's second line overlap the first's instead of following it.
    pub fn prefetch(&self, off: usize) {
        self.prefetch_hint::<{ PREFETCH_READ }>(off);
    }

    /// The same for a line about to be written (x86 `PREFETCHW`: fetched for ownership).
    pub fn prefetch_write(&self, off: usize) {
        self.prefetch_hint::<{ PREFETCH_WRITE }>(off);
    }

    fn prefetch_hint<const HINT: i32>(&self, off: usize) {
        self.check(off, 1, 1);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: in bounds (checked); a prefetch reads nothing into the program and cannot fault.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<HINT>(self.ptr.as_ptr().add(off) as *const i8);
        }
    }

    /// Hints the CPU to move the cache lines of `[off, off + len)` out of this core's private
    /// caches into the shared last-level cache (x86 `CLDEMOTE`; it decodes as a NOP where the
    /// CPU lacks it, and does nothing elsewhere). For lines a device reads next across PCIe
    /// (the GPU polling a CQE the NIC just wrote): its read then need not snoop them out of
    /// this core. Moves no data in or out of the program: contents and ordering unchanged.
    pub fn demote(&self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        self.check(off, len, 1);
        // SAFETY: in bounds (checked): inside this mapping.
        unsafe { rocelink_link::cache::demote(self.ptr.as_ptr().add(off), len) }
    }

    /// Reads a `Copy` value (an abi.h struct) at `off`.
    pub fn read_struct<T: Copy>(&self, off: usize) -> T {
        self.check(off, std::mem::size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: in bounds and aligned (checked); T is a plain C struct valid for any bytes
        // (all abi.h types are integers and arrays of integers).
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off) as *const T) }
    }

    /// Writes a `Copy` value (an abi.h struct) at `off`.
    pub fn write_struct<T: Copy>(&self, off: usize, v: T) {
        self.check(off, std::mem::size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: in bounds and aligned (checked).
        unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(off) as *mut T, v) }
    }

    /// A view of `len` bytes at `off` for reading without copying.
    ///
    /// # Safety
    /// Nobody may write those bytes while the slice lives (the caller holds the slot by the
    /// ring protocol: it has consumed its CQE and not yet re-posted it).
    pub unsafe fn slice(&self, off: usize, len: usize) -> &[u8] {
        self.check(off, len, 1);
        std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len)
    }

    /// A mutable view of `len` bytes at `off`.
    ///
    /// # Safety
    /// Nobody else may access those bytes while the slice lives (the caller owns the slot by
    /// the ring protocol).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        self.check(off, len, 1);
        std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len)
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        match &mut self.owner {
            // SAFETY: allocated in `new` with this layout.
            Owner::Std(layout) => unsafe { dealloc(self.ptr.as_ptr(), *layout) },
            Owner::Foreign(free) => {
                if let Some(f) = free.take() {
                    f(self.ptr.as_ptr())
                }
            }
        }
    }
}

/// Hands out aligned offsets inside a region being laid out.
#[derive(Debug, Default)]
pub struct Carver {
    next: usize,
}

impl Carver {
    pub fn new() -> Self {
        Carver { next: 0 }
    }
    /// Reserves `len` bytes aligned to `align` (a power of two); returns the offset.
    pub fn take(&mut self, len: usize, align: usize) -> usize {
        let off = (self.next + align - 1) & !(align - 1);
        self.next = off + len;
        off
    }
    /// Bytes needed so far.
    pub fn len(&self) -> usize {
        self.next
    }
    pub fn is_empty(&self) -> bool {
        self.next == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn carve_aligns_and_accessors_round_trip() {
        let mut c = Carver::new();
        let a = c.take(10, 1);
        let b = c.take(64, 128);
        assert_eq!((a, b), (0, 128));
        let m = SharedMem::new(c.len());
        m.write(b, &[7; 64]);
        let mut out = [0u8; 64];
        m.read(b, &mut out);
        assert_eq!(out, [7; 64]);
        m.atomic_u32(b).store(0x01020304, Ordering::Release);
        assert_eq!(m.read_struct::<u32>(b), 0x01020304);
        assert_eq!(m.offset_of_host(m.host_addr(b), 64), Some(b));
        assert_eq!(m.offset_of_host(m.host_addr(b), 65), None);
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn out_of_bounds_access_panics_instead_of_writing() {
        let m = SharedMem::new(PAGE);
        m.write(PAGE - 2, &[0; 4]);
    }

    #[test]
    fn prefetch_changes_nothing_and_is_bounds_checked() {
        let m = SharedMem::new(PAGE);
        m.write(64, &[7; 64]);
        m.prefetch(64);
        m.prefetch(PAGE - 1);
        let mut back = [0u8; 64];
        m.read(64, &mut back);
        assert_eq!(back, [7; 64]);
        assert!(
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.prefetch(PAGE))).is_err(),
            "one past the end is refused"
        );
    }

    #[test]
    fn demote_changes_nothing_and_is_bounds_checked() {
        // runs the instruction on this CPU too (a NOP where it lacks CLDEMOTE)
        let m = SharedMem::new(PAGE);
        m.write(60, &[9; 200]);
        m.demote(60, 200);
        m.demote(PAGE - 1, 1);
        m.demote(PAGE, 0);
        let mut back = [0u8; 200];
        m.read(60, &mut back);
        assert_eq!(back, [9; 200]);
        assert!(
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.demote(PAGE - 1, 2))).is_err(),
            "past the end is refused"
        );
    }
}
