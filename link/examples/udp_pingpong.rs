//! Round trip of one 64-byte datagram (a UC SEND: BTH, 48 bytes, ICRC) over the UDP wire on
//! loopback, two threads ping-ponging, for each way of sending and receiving
//! ([`SendMode`], [`RecvMode`]), and through a pair of connected sockets for reference (what
//! the wire used to send with: invalid RoCEv2, a per-socket IPv4 identification). Variants
//! alternate, round after round, so that drift on the machine reaches all of them alike.
//!
//! `cargo run --release -p rocelink-link --example udp_pingpong -- [round_trips (20000)]
//! [rounds (5)] [core_a (0)] [core_b (1)]`: prints each variant's p50 per round, then the
//! median of its p50s. The raw variants need CAP_NET_RAW (skipped without).

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Instant;

use rocelink_link::udp::{RecvMode, SendMode, UdpModes};
use rocelink_link::{affinity, Link, UdpLink, MAX_FRAME};
use rocelink_wire::roce::{Endpoints, RoceRepr};

fn arg(i: usize, default: usize) -> usize {
    std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn p50(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn frame(src: SocketAddrV4, dst: SocketAddrV4) -> Vec<u8> {
    let ep = Endpoints {
        src_mac: [0; 6],
        dst_mac: [0; 6],
        src_ip: src.ip().octets(),
        dst_ip: dst.ip().octets(),
        src_port: src.port(),
        dst_port: dst.port(),
    };
    let mut f = vec![0u8; 256];
    let n = RoceRepr::uc_send_only(&ep, 2, 0, 48).emit(&[0x5a; 48], &mut f).unwrap();
    f.truncate(n);
    f
}

/// `n + warm` round trips between two links; the last `n` timed.
fn links(modes: UdpModes, n: usize, warm: usize, ca: usize, cb: usize) -> Option<u64> {
    let any = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    let mut a = UdpLink::bind_with(any, modes).ok()?;
    let mut b = UdpLink::bind_with(any, modes).ok()?;
    let (fa, fb) = (frame(a.local_addr(), b.local_addr()), frame(b.local_addr(), a.local_addr()));
    let echo = std::thread::spawn(move || {
        affinity::pin_current_thread(Some(cb));
        let mut buf = vec![0u8; MAX_FRAME];
        for _ in 0..n + warm {
            while b.try_recv(&mut buf).unwrap().is_none() {}
            b.send(&fb).unwrap();
        }
    });
    affinity::pin_current_thread(Some(ca));
    let mut buf = vec![0u8; MAX_FRAME];
    let mut t = Vec::with_capacity(n);
    for i in 0..n + warm {
        let s = Instant::now();
        a.send(&fa).unwrap();
        while a.try_recv(&mut buf).unwrap().is_none() {}
        if i >= warm {
            t.push(s.elapsed().as_nanos() as u64);
        }
    }
    echo.join().unwrap();
    Some(p50(t))
}

/// The same with connected, non-blocking UDP sockets sending and receiving the UDP payload.
fn connected(n: usize, warm: usize, ca: usize, cb: usize) -> u64 {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let payload = vec![0x5au8; 64];
    let pb = payload.clone();
    let echo = std::thread::spawn(move || {
        affinity::pin_current_thread(Some(cb));
        let mut buf = [0u8; 2048];
        for _ in 0..n + warm {
            while b.recv(&mut buf).is_err() {}
            b.send(&pb).unwrap();
        }
    });
    affinity::pin_current_thread(Some(ca));
    let mut buf = [0u8; 2048];
    let mut t = Vec::with_capacity(n);
    for i in 0..n + warm {
        let s = Instant::now();
        a.send(&payload).unwrap();
        while a.recv(&mut buf).is_err() {}
        if i >= warm {
            t.push(s.elapsed().as_nanos() as u64);
        }
    }
    echo.join().unwrap();
    p50(t)
}

fn main() {
    let (n, rounds, ca, cb) = (arg(1, 20_000), arg(2, 5), arg(3, 0), arg(4, 1));
    let warm = n / 10;
    let variants: Vec<(&str, Option<UdpModes>)> = vec![
        ("send udp,  receive raw", Some(UdpModes { send: Some(SendMode::Udp), recv: Some(RecvMode::Raw) })),
        ("send raw,  receive raw", Some(UdpModes { send: Some(SendMode::Raw), recv: Some(RecvMode::Raw) })),
        ("send udp,  receive rebuild", Some(UdpModes { send: Some(SendMode::Udp), recv: Some(RecvMode::Rebuild) })),
        ("send raw,  receive rebuild", Some(UdpModes { send: Some(SendMode::Raw), recv: Some(RecvMode::Rebuild) })),
        ("connected sockets (invalid ids)", None),
    ];
    let mut all: Vec<Vec<u64>> = vec![Vec::new(); variants.len()];
    for r in 0..rounds {
        for (k, (name, modes)) in variants.iter().enumerate() {
            let got = match modes {
                Some(m) => links(*m, n, warm, ca, cb),
                None => Some(connected(n, warm, ca, cb)),
            };
            match got {
                Some(p) => {
                    println!("round {r} {name:<32} p50 {p:>6} ns");
                    all[k].push(p);
                }
                None => println!("round {r} {name:<32} skipped (no raw socket: needs CAP_NET_RAW)"),
            }
        }
    }
    println!("median of the rounds' p50 ({n} round trips each):");
    for ((name, _), v) in variants.iter().zip(all) {
        if !v.is_empty() {
            println!("  {name:<32} {:>6} ns", p50(v));
        }
    }
}
