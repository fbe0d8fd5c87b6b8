//! The floors a path is measured against (PERF.md: every figure beside its floor, measured in
//! the same run). Each floor is the cheapest round trip the same kind of hand-off can make on
//! this machine now:
//! - [`cacheline_pingpong`]: two threads bouncing one cache line. The inproc wire's path is
//!   peer thread -> NIC engine thread -> CPU backend thread -> NIC -> peer, a chain of such
//!   cross-core hand-offs, so its round trip is a small multiple of this one.
//! - [`udp_pingpong`]: two threads bouncing a datagram over loopback with spinning,
//!   non-blocking receives: what the kernel's UDP path costs, the udp wire's floor.
//! - [`clock_overhead`]: two timestamps back to back, the cost and resolution of the clock
//!   every figure is taken with.
//!
//! Every figure is a full round trip in nanoseconds, taken with
//! [`monotonic_ns`](rocelink_link::clock::monotonic_ns) like the runs'; the first `warmup`
//! round trips are made but left out. The floors spin with the same [`SpinMode`] as the runs
//! beside them (with fewer cores than spinners: spin briefly, then yield) so that the two
//! are comparable.

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use hdrhistogram::Histogram;
use rocelink_link::affinity::pin_current_thread;
use rocelink_link::clock::monotonic_ns;
use rocelink_link::{Backoff, SpinMode};

use crate::latency::{new_histogram, Counts};

/// What a floor measured.
#[derive(Debug, Clone)]
pub struct Floor {
    /// Round trips (ns), warm-up excluded.
    pub rtt: Histogram<u64>,
    /// The same round trips in the order they were made, for plots.
    pub samples: Vec<u64>,
    /// Round trips started (warm-up included), answered and lost.
    pub counts: Counts,
}

impl Floor {
    pub fn from_samples(samples: Vec<u64>, counts: Counts) -> Floor {
        Floor { rtt: histogram_of(&samples), samples, counts }
    }
}

/// A [`new_histogram`] holding `samples` (ns; values above its range are clamped to it).
pub fn histogram_of(samples: &[u64]) -> Histogram<u64> {
    let mut h = new_histogram();
    for &s in samples {
        let _ = h.record(s.min(h.high()));
    }
    h
}

/// One counter alone in a 128-byte block: two cache lines on x86 (the adjacent-line
/// prefetcher pairs them), one on most arm64 parts.
#[repr(align(128))]
struct Line(AtomicU64);

/// Two threads pinned to `cores` (initiator, responder) bounce a counter held in one
/// 128-byte-aligned `AtomicU64`: each waits for the other's value, then writes value + 1.
/// One round trip is the initiator's write of an odd value until it sees the responder's
/// even answer; `warmup + iters` are made, the first `warmup` left out.
pub fn cacheline_pingpong(iters: u32, warmup: u32, cores: (Option<usize>, Option<usize>), spin: SpinMode) -> Floor {
    let total = u64::from(iters) + u64::from(warmup);
    let line = Line(AtomicU64::new(0));
    let start = Barrier::new(2);
    let samples = std::thread::scope(|s| {
        let responder = s.spawn(|| {
            pin_current_thread(cores.1);
            let mut backoff = Backoff::new(spin);
            start.wait();
            for k in 0..total {
                let want = 2 * k + 1;
                while line.0.load(Ordering::Acquire) != want {
                    backoff.idle();
                }
                backoff.reset();
                line.0.store(want + 1, Ordering::Release);
            }
        });
        let initiator = s.spawn(|| {
            pin_current_thread(cores.0);
            let mut backoff = Backoff::new(spin);
            let mut samples = Vec::with_capacity(iters as usize);
            start.wait();
            for k in 0..total {
                let t0 = monotonic_ns();
                line.0.store(2 * k + 1, Ordering::Release);
                while line.0.load(Ordering::Acquire) != 2 * k + 2 {
                    backoff.idle();
                }
                let t1 = monotonic_ns();
                backoff.reset();
                if k >= u64::from(warmup) {
                    samples.push(t1.saturating_sub(t0).max(1));
                }
            }
            samples
        });
        let samples = initiator.join().expect("cache-line ping-pong initiator panicked");
        responder.join().expect("cache-line ping-pong responder panicked");
        samples
    });
    Floor::from_samples(samples, Counts { sent: total, received: total, ..Counts::default() })
}

/// How long the initiator of [`udp_pingpong`] waits for an answer before counting the
/// datagram lost and sending the next one.
pub const UDP_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// Sends one datagram, waiting while the socket's buffer is full.
fn send_all(s: &UdpSocket, buf: &[u8]) -> std::io::Result<()> {
    loop {
        match s.send(buf) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => return Err(e),
        }
    }
}

/// Two threads pinned to `cores` (initiator, responder) bounce a `size`-byte UDP datagram
/// over loopback, between two fresh 127.x addresses, with non-blocking sockets polled in a
/// spin loop (the way the NIC engine and the peer poll theirs). The datagram carries its
/// sequence number in its first 8 bytes; an answer that does not come within
/// [`UDP_ANSWER_TIMEOUT`] counts as lost. `warmup + iters` round trips are made, the first
/// `warmup` left out.
pub fn udp_pingpong(iters: u32, warmup: u32, size: usize, cores: (Option<usize>, Option<usize>), spin: SpinMode) -> std::io::Result<Floor> {
    if !(8..=65_507).contains(&size) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("UDP ping-pong datagrams must be 8..=65507 bytes, not {size}")));
    }
    let (a, b) = crate::echo::fresh_loopback_pair();
    let initiator_sock = UdpSocket::bind(SocketAddrV4::new(a, 0))?;
    let responder_sock = UdpSocket::bind(SocketAddrV4::new(b, 0))?;
    initiator_sock.connect(responder_sock.local_addr()?)?;
    responder_sock.connect(initiator_sock.local_addr()?)?;
    initiator_sock.set_nonblocking(true)?;
    responder_sock.set_nonblocking(true)?;

    let total = u64::from(iters) + u64::from(warmup);
    let stop = AtomicBool::new(false);
    let start = Barrier::new(2);
    let timeout_ns = UDP_ANSWER_TIMEOUT.as_nanos() as u64;
    std::thread::scope(|s| {
        let responder = s.spawn(|| -> std::io::Result<()> {
            pin_current_thread(cores.1);
            let mut backoff = Backoff::new(spin);
            let mut buf = vec![0u8; size.max(2048)];
            start.wait();
            while !stop.load(Ordering::Relaxed) {
                match responder_sock.recv(&mut buf) {
                    Ok(n) => {
                        backoff.reset();
                        send_all(&responder_sock, &buf[..n])?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => backoff.idle(),
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => backoff.idle(),
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        let initiator = s.spawn(|| -> std::io::Result<(Vec<u64>, u64)> {
            pin_current_thread(cores.0);
            let result = (|| {
                let mut backoff = Backoff::new(spin);
                let mut out = vec![0u8; size];
                let mut inp = vec![0u8; size.max(2048)];
                let mut samples = Vec::with_capacity(iters as usize);
                let mut lost = 0u64;
                start.wait();
                for k in 0..total {
                    out[..8].copy_from_slice(&k.to_le_bytes());
                    let t0 = monotonic_ns();
                    send_all(&initiator_sock, &out)?;
                    loop {
                        match initiator_sock.recv(&mut inp) {
                            Ok(n) if n >= 8 && inp[..8] == out[..8] => {
                                let t1 = monotonic_ns();
                                backoff.reset();
                                if k >= u64::from(warmup) {
                                    samples.push(t1.saturating_sub(t0).max(1));
                                }
                                break;
                            }
                            // A late answer to a datagram already counted lost.
                            Ok(_) => {}
                            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::ConnectionRefused) => {
                                if monotonic_ns().saturating_sub(t0) > timeout_ns {
                                    lost += 1;
                                    break;
                                }
                                backoff.idle();
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok((samples, lost))
            })();
            stop.store(true, Ordering::Relaxed);
            result
        });
        let measured = initiator.join().expect("UDP ping-pong initiator panicked");
        // The initiator stops the responder whatever happened to it.
        let answered = responder.join().expect("UDP ping-pong responder panicked");
        let (samples, lost) = measured?;
        answered?;
        Ok(Floor::from_samples(samples, Counts { sent: total, received: total - lost, lost, ..Counts::default() }))
    })
}

/// The cost of reading the clock: `warmup + iters` pairs of
/// [`monotonic_ns`](rocelink_link::clock::monotonic_ns) calls back to back, the difference
/// of each pair recorded (0 where both calls read the same nanosecond). Its p50 is what a
/// timestamp adds to every figure and bounds the clock's resolution.
pub fn clock_overhead(iters: u32, warmup: u32) -> Floor {
    let total = u64::from(iters) + u64::from(warmup);
    let mut samples = Vec::with_capacity(iters as usize);
    for k in 0..total {
        let t0 = monotonic_ns();
        let t1 = monotonic_ns();
        if k >= u64::from(warmup) {
            samples.push(t1.saturating_sub(t0));
        }
    }
    Floor::from_samples(samples, Counts { sent: total, received: total, ..Counts::default() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Summary;

    #[test]
    fn cacheline_pingpong_is_sane() {
        let f = cacheline_pingpong(500, 50, (None, None), SpinMode::Shared);
        let s = Summary::of(&f.rtt);
        assert_eq!(s.count, 500);
        assert_eq!(f.samples.len(), 500);
        assert_eq!(f.counts, Counts { sent: 550, received: 550, ..Counts::default() });
        assert!(s.min >= 1 && s.min <= s.p50 && s.p50 <= s.p99 && s.p99 <= s.max, "{s:?}");
        // Even on 2 shared cores the median hand-off is well under a millisecond.
        assert!(s.p50 < 1_000_000, "{s:?}");
    }

    #[test]
    fn udp_pingpong_is_sane() {
        let f = udp_pingpong(300, 30, 64, (None, None), SpinMode::Shared).expect("udp ping-pong");
        let s = Summary::of(&f.rtt);
        assert_eq!(f.counts.sent, 330);
        assert_eq!(f.counts.lost, 0);
        assert_eq!(s.count, 300);
        assert!(s.min >= 1 && s.min <= s.p50 && s.p50 <= s.max, "{s:?}");
        assert!(s.p50 < 10_000_000, "{s:?}");
    }

    #[test]
    fn udp_pingpong_rejects_tiny_datagrams() {
        assert!(udp_pingpong(10, 0, 4, (None, None), SpinMode::Shared).is_err());
    }

    #[test]
    fn clock_overhead_is_small() {
        let f = clock_overhead(10_000, 100);
        let s = Summary::of(&f.rtt);
        assert_eq!(s.count, 10_000);
        assert!(s.p50 < 10_000, "{s:?}");
    }
}
