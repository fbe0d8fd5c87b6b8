//! The in-process wire: two lock-free single-producer single-consumer rings of fixed-size
//! frame slots, one per direction. No kernel, no allocation per frame.
//!
//! Ordering contract (per ring): the producer writes the slot, then publishes `tail` with a
//! Release store; the consumer reads `tail` with Acquire before reading the slot, and hands
//! the slot back by publishing `head` with Release; the producer reads `head` with Acquire
//! before overwriting. `head` and `tail` sit on separate 128-byte lines so the two threads do
//! not false-share (the adjacent-line prefetcher pulls pairs of 64-byte lines).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{Link, LinkError, MAX_FRAME};

#[repr(align(128))]
struct Line(AtomicUsize);

struct Slot {
    len: UnsafeCell<usize>,
    data: UnsafeCell<[u8; MAX_FRAME]>,
}

struct Ring {
    /// Next slot the consumer reads. Written by the consumer only.
    head: Line,
    /// Next slot the producer writes. Written by the producer only.
    tail: Line,
    slots: Box<[Slot]>,
    mask: usize,
}

// SAFETY: a slot is accessed by the producer only while `tail - head < capacity` says it is
// free, and by the consumer only while `head < tail` says it is full; the Acquire/Release
// pairs on `head` and `tail` order those accesses (module docs). Each ring has exactly one
// producer and one consumer because `InprocLink` is not `Clone` and `Link::send`/`try_recv`
// take `&mut self`.
unsafe impl Sync for Ring {}
unsafe impl Send for Ring {}

impl Ring {
    fn new(slots: usize) -> Arc<Ring> {
        let n = slots.max(2).next_power_of_two();
        let slots = (0..n)
            .map(|_| Slot { len: UnsafeCell::new(0), data: UnsafeCell::new([0; MAX_FRAME]) })
            .collect();
        Arc::new(Ring { head: Line(AtomicUsize::new(0)), tail: Line(AtomicUsize::new(0)), slots, mask: n - 1 })
    }
}

/// One end of an in-process wire.
pub struct InprocLink {
    tx: Arc<Ring>,
    rx: Arc<Ring>,
    /// Producer's copy of `tx.head`, refreshed only when the ring looks full, so the
    /// producer does not pull the consumer's line on every send.
    tx_head_cache: usize,
    /// Consumer's copy of `rx.tail`, refreshed only when the ring looks empty.
    rx_tail_cache: usize,
}

/// Makes a wire: what one end sends, the other receives. `slots` frames fit in each
/// direction (rounded up to a power of two).
pub fn pair(slots: usize) -> (InprocLink, InprocLink) {
    let a = Ring::new(slots);
    let b = Ring::new(slots);
    (
        InprocLink { tx: a.clone(), rx: b.clone(), tx_head_cache: 0, rx_tail_cache: 0 },
        InprocLink { tx: b, rx: a, tx_head_cache: 0, rx_tail_cache: 0 },
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
        let head = ring.head.0.load(Ordering::Relaxed);
        if head == self.rx_tail_cache {
            self.rx_tail_cache = ring.tail.0.load(Ordering::Acquire);
            if head == self.rx_tail_cache {
                return Ok(None);
            }
        }
        let slot = &ring.slots[head & ring.mask];
        // SAFETY: head < tail (checked above, Acquire): the producer has finished this slot
        // and will not touch it until we publish head + 1.
        let n = unsafe {
            let len = *slot.len.get();
            let n = len.min(buf.len());
            let data: &[u8; MAX_FRAME] = &*slot.data.get();
            buf[..n].copy_from_slice(&data[..n]);
            n
        };
        ring.head.0.store(head + 1, Ordering::Release);
        Ok(Some(n))
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        if frame.len() > MAX_FRAME {
            return Err(LinkError::FrameTooLarge(frame.len()));
        }
        let ring = &*self.tx;
        let tail = ring.tail.0.load(Ordering::Relaxed);
        let capacity = ring.mask + 1;
        let mut spins = 0u32;
        while tail - self.tx_head_cache >= capacity {
            self.tx_head_cache = ring.head.0.load(Ordering::Acquire);
            if tail - self.tx_head_cache < capacity {
                break;
            }
            if self.peer_gone() {
                return Err(LinkError::Disconnected);
            }
            // The consumer is behind: let it run (it may share our core).
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let slot = &ring.slots[tail & ring.mask];
        // SAFETY: tail - head < capacity (Acquire above): the consumer is done with this slot
        // and will not read it until we publish tail + 1.
        unsafe {
            *slot.len.get() = frame.len();
            let data: &mut [u8; MAX_FRAME] = &mut *slot.data.get();
            data[..frame.len()].copy_from_slice(frame);
        }
        ring.tail.0.store(tail + 1, Ordering::Release);
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
