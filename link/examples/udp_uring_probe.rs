//! Probe: does io_uring shorten a loopback UDP round trip against the spinning
//! non-blocking-socket ping-pong that is the UDP wire's floor (`bench::floors::udp_pingpong`)?
//!
//! Two threads bounce a `size`-byte datagram between two 127.x addresses, connected sockets,
//! `count` round trips after `warmup`, timed by the initiator with CLOCK_MONOTONIC. Modes:
//! - `sys`: non-blocking sockets, `recv` polled in a spin loop, `send` (the floor's way);
//! - `uring`: each side has an io_uring with a kernel submission thread (SQPOLL) pinned to
//!   its own core; a receive is always posted, the thread spins on the completion ring and
//!   sends by writing an SQE (no syscall on either side);
//! - `uring-recv`: receives through the SQPOLL ring, sends with `send(2)`.
//!
//! Usage: udp_uring_probe MODE COUNT SIZE CORE_A CORE_B [SQ_CORE_A SQ_CORE_B]
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use io_uring::{opcode, types, IoUring};

const WARMUP: u64 = 2000;

fn pin(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

/// A ring with its submission thread on `sq_core`, `sock` registered as file 0.
fn ring(sq_core: usize, sock: &UdpSocket) -> IoUring {
    let r = IoUring::builder()
        .setup_sqpoll(10_000)
        .setup_sqpoll_cpu(sq_core as u32)
        .build(64)
        .expect("io_uring with SQPOLL");
    r.submitter().register_files(&[sock.as_raw_fd()]).expect("register the socket");
    r
}

/// Posts one receive into `buf` on the ring's registered file 0.
fn post_recv(r: &mut IoUring, buf: &mut [u8]) {
    let sqe = opcode::Recv::new(types::Fixed(0), buf.as_mut_ptr(), buf.len() as u32).build().user_data(1);
    // SAFETY: `buf` outlives the receive (it is waited for before the buffer is reused).
    unsafe { r.submission().push(&sqe).expect("SQ full") };
    r.submit().expect("submit");
}

fn post_send(r: &mut IoUring, buf: &[u8]) {
    let sqe = opcode::Send::new(types::Fixed(0), buf.as_ptr(), buf.len() as u32).build().user_data(2);
    // SAFETY: as above; the send's completion is reaped before `buf` changes.
    unsafe { r.submission().push(&sqe).expect("SQ full") };
    r.submit().expect("submit");
}

/// Spins until the receive (user data 1) completes; reaps send completions on the way.
fn wait_recv(r: &mut IoUring, stop: &AtomicBool) -> Option<usize> {
    loop {
        if let Some(c) = r.completion().next() {
            if c.user_data() == 1 {
                assert!(c.result() >= 0, "recv failed: {}", c.result());
                return Some(c.result() as usize);
            }
            assert!(c.result() >= 0, "send failed: {}", c.result());
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        std::hint::spin_loop();
    }
}

fn sys_recv(s: &UdpSocket, buf: &mut [u8], stop: &AtomicBool) -> Option<usize> {
    loop {
        match s.recv(buf) {
            Ok(n) => return Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("recv: {e}"),
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 6 {
        eprintln!("usage: {} sys|uring|uring-recv COUNT SIZE CORE_A CORE_B [SQ_CORE_A SQ_CORE_B]", a[0]);
        std::process::exit(2);
    }
    let mode = a[1].clone();
    let count: u64 = a[2].parse().unwrap();
    let size: usize = a[3].parse().unwrap();
    let (ca, cb): (usize, usize) = (a[4].parse().unwrap(), a[5].parse().unwrap());
    let (sa, sb): (usize, usize) = if a.len() >= 8 { (a[6].parse().unwrap(), a[7].parse().unwrap()) } else { (ca, cb) };
    let ia = SocketAddrV4::new(Ipv4Addr::new(127, 77, 0, 1), 0);
    let ib = SocketAddrV4::new(Ipv4Addr::new(127, 77, 0, 2), 0);
    let sock_a = UdpSocket::bind(ia).unwrap();
    let sock_b = UdpSocket::bind(ib).unwrap();
    sock_a.connect(sock_b.local_addr().unwrap()).unwrap();
    sock_b.connect(sock_a.local_addr().unwrap()).unwrap();
    let uring = mode.starts_with("uring");
    let uring_send = mode == "uring";
    if !uring {
        sock_a.set_nonblocking(true).unwrap();
        sock_b.set_nonblocking(true).unwrap();
    }
    let stop = AtomicBool::new(false);
    let start = Barrier::new(2);
    let total = count + WARMUP;
    let samples = std::thread::scope(|s| {
        let resp = s.spawn(|| {
            pin(cb);
            let mut r = uring.then(|| ring(sb, &sock_b));
            let mut buf = vec![0u8; 2048];
            let mut out = vec![0u8; 2048];
            if let Some(r) = r.as_mut() {
                post_recv(r, &mut buf);
            }
            start.wait();
            loop {
                let n = match r.as_mut() {
                    Some(r) => wait_recv(r, &stop),
                    None => sys_recv(&sock_b, &mut buf, &stop),
                };
                let Some(n) = n else { break };
                out[..n].copy_from_slice(&buf[..n]);
                match r.as_mut() {
                    Some(r) => {
                        post_recv(r, &mut buf);
                        if uring_send {
                            post_send(r, &out[..n]);
                        } else {
                            sock_b.send(&out[..n]).unwrap();
                        }
                    }
                    None => {
                        sock_b.send(&out[..n]).unwrap();
                    }
                }
            }
        });
        let init = s.spawn(|| {
            pin(ca);
            let mut r = uring.then(|| ring(sa, &sock_a));
            let mut buf = vec![0u8; 2048];
            let mut out = vec![0u8; size];
            let mut samples = Vec::with_capacity(count as usize);
            if let Some(r) = r.as_mut() {
                post_recv(r, &mut buf);
            }
            start.wait();
            for k in 0..total {
                out[..8].copy_from_slice(&k.to_le_bytes());
                let t0 = Instant::now();
                match r.as_mut() {
                    Some(r) if uring_send => post_send(r, &out),
                    _ => {
                        sock_a.send(&out).unwrap();
                    }
                }
                let n = match r.as_mut() {
                    Some(r) => wait_recv(r, &stop),
                    None => sys_recv(&sock_a, &mut buf, &stop),
                }
                .unwrap();
                let dt = t0.elapsed().as_nanos() as u64;
                assert_eq!(n, size);
                assert_eq!(buf[..8], k.to_le_bytes(), "answer out of order");
                if let Some(r) = r.as_mut() {
                    post_recv(r, &mut buf);
                }
                if k >= WARMUP {
                    samples.push(dt);
                }
            }
            stop.store(true, Ordering::Relaxed);
            samples
        });
        let v = init.join().unwrap();
        // The responder may sit in a posted receive: a last datagram wakes it to see `stop`.
        let _ = sock_a.send(&[0u8; 8]);
        resp.join().unwrap();
        v
    });
    let mut v = samples;
    v.sort_unstable();
    let q = |p: f64| v[((v.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0;
    println!(
        "mode {mode:10} size {size:5} count {count} cores {ca},{cb} sq {sa},{sb}: min {:.2} p50 {:.2} p90 {:.2} p99 {:.2} us",
        q(0.0),
        q(0.5),
        q(0.9),
        q(0.99)
    );
}
