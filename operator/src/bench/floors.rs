//! The floors a path is measured against (docs/perf.md, "How to report a figure": every
//! figure beside its floor, measured in the same run). Each floor is the cheapest round trip
//! the same kind of hand-off can make on this machine now:
//! - [`cacheline_pingpong`]: two threads bouncing one cache line. The inproc wire's path is
//!   peer thread -> NIC engine thread -> CPU backend thread -> NIC -> peer, a chain of such
//!   cross-core hand-offs, so its round trip is a small multiple of this one.
//! - [`udp_pingpong`]: two threads bouncing a datagram over loopback with spinning,
//!   non-blocking receives: what the kernel's UDP path costs, the udp wire's floor.
//! - [`clock_overhead`]: two timestamps back to back, the cost and resolution of the clock
//!   every figure is taken with.
//!
//! A floor is a lower bound, and how cheap a hand-off can be depends on how it is made (a fence
//! after a store, how host memory is mapped, a connected socket or not), in ways that differ
//! between hosts. So a floor is measured every way it can be made, in the same run, and is the
//! best of those variants ([`best_of`]: the least p50); the report names the variant and gives
//! every one's figures. A path that beats its floor all the same shows the floor is wrong, and
//! the report says so ([`floor_error`]; docs/perf.md, "How to report a figure").
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

use crate::latency::{new_histogram, Counts, Summary};

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

/// One way of measuring a floor, and what it measured.
#[derive(Debug, Clone)]
pub struct Variant {
    /// What this way is, in words (`cuMemHostAlloc, fence after the store`).
    pub name: String,
    pub floor: Floor,
}

/// A floor variant's figures, as the report gives them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VariantSummary {
    pub name: String,
    /// Round trips (ns), warm-up excluded.
    pub rtt_ns: Summary,
    pub lost: u64,
    /// This variant is the floor (the best by p50).
    pub chosen: bool,
}

/// A floor measured several ways: the variants, the best one.
#[derive(Debug, Clone)]
pub struct BestOf {
    pub variants: Vec<Variant>,
    /// Index of the floor in `variants`.
    pub chosen: usize,
    /// Every variant's figures, in `variants`' order.
    pub summaries: Vec<VariantSummary>,
}

impl BestOf {
    /// The chosen variant.
    pub fn floor(&self) -> &Variant {
        &self.variants[self.chosen]
    }

    /// The chosen variant's figures.
    pub fn summary(&self) -> &VariantSummary {
        &self.summaries[self.chosen]
    }

    /// Moves the chosen variant out (its samples go to the report's plots).
    pub fn into_floor(mut self) -> (Variant, Vec<VariantSummary>) {
        let v = self.variants.swap_remove(self.chosen);
        (v, self.summaries)
    }
}

/// The best of `summaries`: the least p50, a tie going to the least p99, then to the first.
/// A variant without round trips (`count` 0: every one lost) is never the best. `None` when
/// no variant has round trips.
pub fn best_variant(summaries: &[Summary]) -> Option<usize> {
    summaries.iter().enumerate().filter(|(_, s)| s.count > 0).min_by_key(|(i, s)| (s.p50, s.p99, *i)).map(|(i, _)| i)
}

/// `variants` with the best one ([`best_variant`]) chosen as the floor; `None` when there
/// are none or none has round trips.
pub fn best_of(variants: Vec<Variant>) -> Option<BestOf> {
    let sums: Vec<Summary> = variants.iter().map(|v| Summary::of(&v.floor.rtt)).collect();
    let chosen = best_variant(&sums)?;
    let summaries = variants
        .iter()
        .zip(sums)
        .enumerate()
        .map(|(i, (v, rtt_ns))| VariantSummary {
            name: v.name.clone(),
            rtt_ns,
            lost: v.floor.counts.lost,
            chosen: i == chosen,
        })
        .collect();
    Some(BestOf { variants, chosen, summaries })
}

/// The floor error of a measured path, in words, when its p50 is below its floor's (ratio <
/// 1.0). A floor is the cheapest the same hand-offs can be: a path beating it shows the floor
/// measured something else or too little, and none of the path's ratios can be trusted.
pub fn floor_error(path: &str, path_rtt: &Summary, floor_path: &str, floor_rtt: &Summary) -> Option<String> {
    if path_rtt.count == 0 || floor_rtt.count == 0 || path_rtt.p50 >= floor_rtt.p50 {
        return None;
    }
    Some(format!(
        "floor error: {path} (p50 {:.2} us) beats its floor {floor_path} (p50 {:.2} us), {:.2}x: a floor is a lower bound, so this floor is wrong and the ratio to it means nothing",
        path_rtt.p50 as f64 / 1000.0,
        floor_rtt.p50 as f64 / 1000.0,
        path_rtt.p50 as f64 / floor_rtt.p50 as f64
    ))
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

/// How the two sockets of [`udp_pingpong`] address each other: the UDP floor is the best of
/// both (the udp wire may send either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpSockets {
    /// `connect`ed sockets: `send` and `recv`.
    Connected,
    /// Unconnected sockets: `send_to` the peer's address and `recv_from` (the way a socket
    /// that must send IPv4 identification 0 sends, PROTOCOLS.md 1.1).
    Unconnected,
}

impl UdpSockets {
    pub const ALL: [UdpSockets; 2] = [UdpSockets::Connected, UdpSockets::Unconnected];

    /// The variant's name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            UdpSockets::Connected => "connected sockets",
            UdpSockets::Unconnected => "unconnected sockets (sendto, recvfrom)",
        }
    }
}

/// One end of [`udp_pingpong`]: a non-blocking socket and the peer it sends to.
struct End {
    sock: UdpSocket,
    peer: std::net::SocketAddr,
    mode: UdpSockets,
}

impl End {
    /// Sends one datagram, waiting while the socket's buffer is full.
    fn send_all(&self, buf: &[u8]) -> std::io::Result<()> {
        loop {
            let r = match self.mode {
                UdpSockets::Connected => self.sock.send(buf),
                UdpSockets::Unconnected => self.sock.send_to(buf, self.peer),
            };
            match r {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
    }

    /// One datagram if there is one (`WouldBlock` otherwise); an unconnected socket drops what
    /// does not come from the peer, as a connected one does.
    fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.mode {
            UdpSockets::Connected => self.sock.recv(buf),
            UdpSockets::Unconnected => match self.sock.recv_from(buf)? {
                (n, from) if from == self.peer => Ok(n),
                _ => Err(std::io::ErrorKind::WouldBlock.into()),
            },
        }
    }
}

/// Two threads pinned to `cores` (initiator, responder) bounce a `size`-byte UDP datagram
/// over loopback, between two fresh 127.x addresses, with non-blocking sockets polled in a
/// spin loop (the way the NIC engine and the peer poll theirs), addressed as `sockets` says.
/// The datagram carries its sequence number in its first 8 bytes; an answer that does not
/// come within [`UDP_ANSWER_TIMEOUT`] counts as lost. `warmup + iters` round trips are made,
/// the first `warmup` left out.
pub fn udp_pingpong(
    iters: u32,
    warmup: u32,
    size: usize,
    cores: (Option<usize>, Option<usize>),
    spin: SpinMode,
    sockets: UdpSockets,
) -> std::io::Result<Floor> {
    if !(8..=65_507).contains(&size) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("UDP ping-pong datagrams must be 8..=65507 bytes, not {size}"),
        ));
    }
    let (a, b) = crate::peer::fresh_loopback_pair();
    let initiator_sock = UdpSocket::bind(SocketAddrV4::new(a, 0))?;
    let responder_sock = UdpSocket::bind(SocketAddrV4::new(b, 0))?;
    let (ia, ra) = (initiator_sock.local_addr()?, responder_sock.local_addr()?);
    if sockets == UdpSockets::Connected {
        initiator_sock.connect(ra)?;
        responder_sock.connect(ia)?;
    }
    initiator_sock.set_nonblocking(true)?;
    responder_sock.set_nonblocking(true)?;
    let initiator_end = End { sock: initiator_sock, peer: ra, mode: sockets };
    let responder_end = End { sock: responder_sock, peer: ia, mode: sockets };

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
                match responder_end.recv(&mut buf) {
                    Ok(n) => {
                        backoff.reset();
                        responder_end.send_all(&buf[..n])?;
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
                    initiator_end.send_all(&out)?;
                    loop {
                        match initiator_end.recv(&mut inp) {
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
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::ConnectionRefused
                                ) =>
                            {
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

/// [`udp_pingpong`] every way ([`UdpSockets::ALL`]), one after the other, as floor variants.
pub fn udp_pingpong_variants(
    iters: u32,
    warmup: u32,
    size: usize,
    cores: (Option<usize>, Option<usize>),
    spin: SpinMode,
) -> std::io::Result<Vec<Variant>> {
    UdpSockets::ALL
        .iter()
        .map(|&m| Ok(Variant { name: m.as_str().into(), floor: udp_pingpong(iters, warmup, size, cores, spin, m)? }))
        .collect()
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
        for mode in UdpSockets::ALL {
            let f = udp_pingpong(300, 30, 64, (None, None), SpinMode::Shared, mode).expect("udp ping-pong");
            let s = Summary::of(&f.rtt);
            assert_eq!(f.counts.sent, 330, "{mode:?}");
            assert_eq!(f.counts.lost, 0, "{mode:?}");
            assert_eq!(s.count, 300, "{mode:?}");
            assert!(s.min >= 1 && s.min <= s.p50 && s.p50 <= s.max, "{mode:?} {s:?}");
            assert!(s.p50 < 10_000_000, "{mode:?} {s:?}");
        }
    }

    #[test]
    fn udp_pingpong_rejects_tiny_datagrams() {
        assert!(udp_pingpong(10, 0, 4, (None, None), SpinMode::Shared, UdpSockets::Connected).is_err());
    }

    #[test]
    fn udp_variants_are_both_socket_kinds() {
        let v = udp_pingpong_variants(50, 5, 64, (None, None), SpinMode::Shared).expect("udp variants");
        let names: Vec<&str> = v.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, [UdpSockets::Connected.as_str(), UdpSockets::Unconnected.as_str()]);
        assert!(v.iter().all(|v| v.floor.samples.len() == 50));
    }

    fn variant(name: &str, samples: Vec<u64>, lost: u64) -> Variant {
        let n = samples.len() as u64;
        Variant {
            name: name.into(),
            floor: Floor::from_samples(samples, Counts { sent: n + lost, received: n, lost, ..Counts::default() }),
        }
    }

    /// Synthetic round trips around `p50` ns with a tail of `tail` ns every 50th.
    fn around(p50: u64, tail: u64) -> Vec<u64> {
        (0..1000u64).map(|i| p50 - 20 + (i * 7919) % 41 + if i % 50 == 0 { tail } else { 0 }).collect()
    }

    #[test]
    fn the_floor_is_the_variant_with_the_least_p50() {
        // Synthetic: the fenced variants faster, as on the H200; one allocation faster still.
        let b = best_of(vec![
            variant("cuMemHostAlloc, no fence", around(2_250, 500), 0),
            variant("cuMemHostAlloc, fence after the store", around(1_580, 3_000), 0),
            variant("malloc + cuMemHostRegister, no fence", around(2_400, 0), 0),
            variant("malloc + cuMemHostRegister, fence after the store", around(1_700, 0), 0),
        ])
        .expect("a best");
        assert_eq!(b.chosen, 1);
        assert_eq!(b.floor().name, "cuMemHostAlloc, fence after the store");
        assert_eq!(b.summaries.iter().filter(|s| s.chosen).count(), 1);
        assert!(b.summaries[1].chosen && b.summary().name == b.floor().name);
        // A worse p99 does not stop a variant from being the floor: the floor is the least p50.
        assert!(b.summaries[1].rtt_ns.p99 > b.summaries[3].rtt_ns.p99, "{:?}", b.summaries);
        for (s, v) in b.summaries.iter().zip(&b.variants) {
            assert_eq!(s.name, v.name);
            assert_eq!(s.rtt_ns, Summary::of(&v.floor.rtt));
        }
        let (floor, sums) = b.into_floor();
        assert_eq!(floor.name, "cuMemHostAlloc, fence after the store");
        assert_eq!(floor.floor.samples.len(), 1000);
        assert_eq!(sums.len(), 4);
    }

    #[test]
    fn ties_go_to_the_lower_p99_then_to_the_first() {
        let s = |p50, p99| Summary { count: 10, min: 1, p50, p90: p99, p99, p999: p99, max: p99, mean: p50 as f64 };
        assert_eq!(best_variant(&[s(100, 300), s(100, 200), s(100, 200)]), Some(1));
        assert_eq!(best_variant(&[s(90, 900), s(100, 100)]), Some(0));
        // A variant that lost every round trip has no p50 and is never chosen.
        let none = Summary::default();
        assert_eq!(best_variant(&[none, s(100, 100)]), Some(1));
        assert_eq!(best_variant(&[none, none]), None);
        assert_eq!(best_variant(&[]), None);
        assert!(best_of(vec![]).is_none());
        assert!(best_of(vec![variant("all lost", vec![], 10)]).is_none());
        let b = best_of(vec![variant("all lost", vec![], 10), variant("fine", around(500, 0), 0)]).expect("a best");
        assert_eq!((b.chosen, b.summaries[0].lost, b.summaries[0].chosen), (1, 10, false));
    }

    #[test]
    fn a_path_below_its_floor_is_a_floor_error() {
        let s = |p50| Summary {
            count: 100,
            min: p50 / 2,
            p50,
            p90: p50,
            p99: p50 * 2,
            p999: p50 * 2,
            max: p50 * 3,
            mean: p50 as f64,
        };
        // The UDP path at 6.94 us against a floor of 7.97 us (0.87x).
        let e =
            floor_error("cpu backend", &s(6_940), "floor: UDP ping-pong (spinning)", &s(7_970)).expect("a floor error");
        assert!(e.starts_with("floor error: "), "{e}");
        for part in ["cpu backend", "6.94 us", "floor: UDP ping-pong (spinning)", "7.97 us", "0.87x"] {
            assert!(e.contains(part), "{part} in {e}");
        }
        // At or above the floor: no error; nothing measured: nothing to say.
        assert_eq!(floor_error("p", &s(7_970), "f", &s(7_970)), None);
        assert_eq!(floor_error("p", &s(9_000), "f", &s(7_970)), None);
        assert_eq!(floor_error("p", &Summary::default(), "f", &s(7_970)), None);
        assert_eq!(floor_error("p", &s(100), "f", &Summary::default()), None);
    }

    #[test]
    fn clock_overhead_is_small() {
        let f = clock_overhead(10_000, 100);
        let s = Summary::of(&f.rtt);
        assert_eq!(s.count, 10_000);
        assert!(s.p50 < 10_000, "{s:?}");
    }
}
