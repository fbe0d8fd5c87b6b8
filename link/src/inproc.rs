//! The in-process wire: two lock-free single-producer single-consumer rings of fixed-size
//! frame slots, one per direction. No kernel, no allocation per frame.
//!
//! Ordering contract (per ring): every slot carries its own sequence word, in the same
//! 128-byte line as the frame's first bytes (a bounded queue after D. Vyukov's). Slot `i`
//! starts at `seq = i`. The producer of position `t` waits for `seq == t` (Acquire: the
//! consumer is done with the slot), writes length and bytes, and publishes `seq = t + 1`
//! (Release); the consumer of position `h` takes the slot when `seq == h + 1` (Acquire), and
//! hands it back with `seq = h + capacity` (Release). Each side keeps its position in its own
//! registers, so a hand-off moves the slot's lines and nothing else: no shared head or tail
//! line, one cache miss fewer per frame than a head/tail ring.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{Link, LinkError, MAX_FRAME};

/// One frame slot; `seq` and `len` share the first line with the frame's first 112 bytes
/// (128-byte alignment: the adjacent-line prefetcher pulls pairs of 64-byte lines).
#[repr(C, align(128))]
struct Slot {
    seq: AtomicUsize,
    len: UnsafeCell<usize>,
    data: UnsafeCell<[u8; MAX_FRAME]>,
}

struct Ring {
    slots: Box<[Slot]>,
    mask: usize,
}

// SAFETY: a slot's `len` and `data` are written only by the producer whose position `t`
// matches `seq == t` and read only by the consumer whose position `h` matches `seq == h + 1`;
// the Acquire/Release pairs on `seq` order those accesses (module docs), so no two threads
// touch them at once. Each ring has exactly one producer and one consumer because
// `InprocLink` is not `Clone` and `Link::send`/`try_recv` take `&mut self`.
unsafe impl Sync for Ring {}
unsafe impl Send for Ring {}

impl Ring {
    fn new(slots: usize) -> Arc<Ring> {
        let n = slots.max(2).next_power_of_two();
        let slots = (0..n)
            .map(|i| Slot { seq: AtomicUsize::new(i), len: UnsafeCell::new(0), data: UnsafeCell::new([0; MAX_FRAME]) })
            .collect();
        Arc::new(Ring { slots, mask: n - 1 })
    }
}

/// One end of an in-process wire.
pub struct InprocLink {
    tx: Arc<Ring>,
    rx: Arc<Ring>,
    /// Next position this end produces into `tx`.
    tx_pos: usize,
    /// Next position this end consumes from `rx`.
    rx_pos: usize,
}

/// Makes a wire: what one end sends, the other receives. `slots` frames fit in each
/// direction (rounded up to a power of two).
pub fn pair(slots: usize) -> (InprocLink, InprocLink) {
    let a = Ring::new(slots);
    let b = Ring::new(slots);
    (
        InprocLink { tx: a.clone(), rx: b.clone(), tx_pos: 0, rx_pos: 0 },
        InprocLink { tx: b, rx: a, tx_pos: 0, rx_pos: 0 },
    )
}

impl InprocLink {
    fn peer_gone(&self) -> bool {
        Arc::strong_count(&self.tx) == 1
    }
}

impl Link for InprocLink {
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<Option<usize>, LinkError> {
        let ring = &*self.rx;
        let h = self.rx_pos;
        let slot = &ring.slots[h & ring.mask];
        if slot.seq.load(Ordering::Acquire) != h.wrapping_add(1) {
            return Ok(None);
        }
        // SAFETY: `seq == h + 1` (Acquire) says the producer published this slot and will not
        // touch it again until we hand it back below (Ring's Sync contract).
        let n = unsafe {
            let len = *slot.len.get();
            let n = len.min(buf.len());
            let data: &[u8; MAX_FRAME] = &*slot.data.get();
            buf[..n].copy_from_slice(&data[..n]);
            n
        };
        slot.seq.store(h.wrapping_add(ring.mask + 1), Ordering::Release);
        self.rx_pos = h.wrapping_add(1);
        Ok(Some(n))
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        if frame.len() > MAX_FRAME {
            return Err(LinkError::FrameTooLarge(frame.len()));
        }
        let ring = &*self.tx;
        let t = self.tx_pos;
        let slot = &ring.slots[t & ring.mask];
        let mut spins = 0u32;
        while slot.seq.load(Ordering::Acquire) != t {
            // Full: the consumer has not handed this slot back yet.
            if self.peer_gone() {
                return Err(LinkError::Disconnected);
            }
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: `seq == t` (Acquire) says the consumer handed the slot back; nobody else
        // touches it until we publish it below.
        unsafe {
            *slot.len.get() = frame.len();
            let data: &mut [u8; MAX_FRAME] = &mut *slot.data.get();
            data[..frame.len()].copy_from_slice(frame);
        }
        slot.seq.store(t.wrapping_add(1), Ordering::Release);
        // The consumer reads these lines next, from another core: let its misses find them in
        // the shared cache rather than snoop them out of this core's.
        // SAFETY: the slot's first 16 + len bytes (seq, len, the frame) are inside the slot.
        unsafe { crate::cache::demote(slot as *const Slot as *const u8, 16 + frame.len()) };
        self.tx_pos = t.wrapping_add(1);
        Ok(())
    }

    fn describe(&self) -> String {
        "inproc".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_arrive_in_order_and_intact() {
        let (mut a, mut b) = pair(4);
        let mut buf = vec![0u8; MAX_FRAME];
        assert!(b.try_recv(&mut buf).unwrap().is_none());
        for i in 0..4u8 {
            a.send(&[i; 100][..(i as usize + 1) * 10]).unwrap();
        }
        for i in 0..4u8 {
            let n = b.try_recv(&mut buf).unwrap().unwrap();
            assert_eq!(n, (i as usize + 1) * 10);
            assert!(buf[..n].iter().all(|&x| x == i));
        }
        assert!(b.try_recv(&mut buf).unwrap().is_none());
        b.send(b"back").unwrap();
        assert_eq!(a.try_recv(&mut buf).unwrap(), Some(4));
    }

    #[test]
    fn a_full_ring_takes_frames_again_once_the_consumer_hands_a_slot_back() {
        let (mut a, mut b) = pair(2);
        let mut buf = vec![0u8; MAX_FRAME];
        // many laps of a two-slot ring, filled to the brim each time
        for lap in 0..1000u32 {
            a.send(&lap.to_le_bytes()).unwrap();
            a.send(&(lap + 1_000_000).to_le_bytes()).unwrap();
            assert_eq!(b.try_recv(&mut buf).unwrap(), Some(4));
            assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), lap);
            a.send(&(lap + 2_000_000).to_le_bytes()).unwrap();
            for want in [lap + 1_000_000, lap + 2_000_000] {
                assert_eq!(b.try_recv(&mut buf).unwrap(), Some(4));
                assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), want);
            }
            assert!(b.try_recv(&mut buf).unwrap().is_none());
        }
    }

    #[test]
    fn oversized_frame_is_refused() {
        let (mut a, _b) = pair(2);
        assert!(matches!(a.send(&vec![0; MAX_FRAME + 1]), Err(LinkError::FrameTooLarge(_))));
    }

    #[test]
    fn full_ring_with_gone_peer_reports_disconnected() {
        let (mut a, b) = pair(2);
        a.send(b"1").unwrap();
        a.send(b"2").unwrap();
        drop(b);
        assert!(matches!(a.send(b"3"), Err(LinkError::Disconnected)));
    }

    #[test]
    fn threads_exchange_many_frames() {
        let (mut a, mut b) = pair(8);
        let t = std::thread::spawn(move || {
            let mut buf = vec![0u8; MAX_FRAME];
            let mut got = 0u32;
            while got < 10_000 {
                if let Some(n) = b.try_recv(&mut buf).unwrap() {
                    assert_eq!(n, 4);
                    assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), got);
                    got += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        for i in 0..10_000u32 {
            a.send(&i.to_le_bytes()).unwrap();
        }
        t.join().unwrap();
    }
}
