//! Round trip of one frame over the in-process wire between two pinned threads, closed loop:
//! what a hop of the `inproc` wire costs across cores (cache-line transfers), beside a raw
//! one-line ping-pong of the same two cores (the wire's floor).
//!
//! `cargo run --release -p rocelink-link --example inproc_pingpong -- [frame_bytes (142)]
//! [round_trips (200000)] [core_a (0)] [core_b (1)]`: prints p50 / p90 / p99 in ns of both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rocelink_link::{affinity, inproc, Link, MAX_FRAME};

fn arg(i: usize, default: usize) -> usize {
    std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn report(name: &str, mut v: Vec<u64>) {
    let (p50, p90, p99) = (pct(&mut v, 0.5), pct(&mut v, 0.9), pct(&mut v, 0.99));
    println!("{name:<34} p50 {p50:>5} ns  p90 {p90:>5} ns  p99 {p99:>5} ns");
}

fn main() {
    let (len, n, ca, cb) = (arg(1, 142).clamp(1, MAX_FRAME), arg(2, 200_000), arg(3, 0), arg(4, 1));
    let warm = n / 10;

    // the wire: b echoes what a sends
    let (mut a, mut b) = inproc::pair(64);
    let echo = std::thread::spawn(move || {
        affinity::pin_current_thread(Some(cb));
        let mut buf = vec![0u8; MAX_FRAME];
        for _ in 0..n + warm {
            let k = loop {
                if let Some(k) = b.try_recv(&mut buf).unwrap() {
                    break k;
                }
            };
            b.send(&buf[..k]).unwrap();
        }
    });
    let wire = std::thread::spawn(move || {
        affinity::pin_current_thread(Some(ca));
        let frame: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut buf = vec![0u8; MAX_FRAME];
        let mut wire = Vec::with_capacity(n);
        for i in 0..n + warm {
            let t = Instant::now();
            a.send(&frame).unwrap();
            while a.try_recv(&mut buf).unwrap().is_none() {}
            if i >= warm {
                wire.push(t.elapsed().as_nanos() as u64);
            }
        }
        wire
    })
    .join()
    .unwrap();
    echo.join().unwrap();

    // the floor: one 64-byte line each way
    #[repr(align(128))]
    struct Line(AtomicU64);
    let (ping, pong) = (Arc::new(Line(AtomicU64::new(0))), Arc::new(Line(AtomicU64::new(0))));
    let (p2, q2) = (ping.clone(), pong.clone());
    let echo = std::thread::spawn(move || {
        affinity::pin_current_thread(Some(cb));
        for i in 1..=(n + warm) as u64 {
            while p2.0.load(Ordering::Acquire) != i {}
            q2.0.store(i, Ordering::Release);
        }
    });
    let floor = std::thread::spawn(move || {
        affinity::pin_current_thread(Some(ca));
        let mut floor = Vec::with_capacity(n);
        for i in 1..=(n + warm) as u64 {
            let t = Instant::now();
            ping.0.store(i, Ordering::Release);
            while pong.0.load(Ordering::Acquire) != i {}
            if i as usize > warm {
                floor.push(t.elapsed().as_nanos() as u64);
            }
        }
        floor
    })
    .join()
    .unwrap();
    echo.join().unwrap();
    println!("inproc_pingpong: {len}-byte frame, {n} round trips, cores {ca} and {cb}");
    report("inproc wire (frame each way)", wire);
    report("floor: one line each way", floor);
}
