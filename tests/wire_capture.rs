//! Every frame of a whole UDP-wire echo run, as captured on `lo`, is valid RoCEv2 by an
//! implementation not written here: `rocelink echo --wire udp --peer-process` (fpga-sim as a
//! separate process) is captured with an AF_PACKET socket into a pcap, and
//! `scripts/check_icrc.py` recomputes each frame's ICRC with scapy (`scapy.contrib.roce`)
//! over the IPv4 header as it went on the wire (PROTOCOLS.md 1.1).
//!
//! Needs CAP_NET_RAW (the capture) and scapy (`pip install scapy`; CI puts it in
//! target/ci-python). Without either it is skipped with a message, except with `CI=true`,
//! where it fails. `ROCELINK_CAPTURE_BIN` runs another `rocelink` binary instead of this
//! build's (to check an older one's frames).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MESSAGES: u32 = 10_000;

/// Skips (prints why and returns) outside CI; fails in CI.
fn skip_or_fail(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("wire_capture cannot run in CI: {why}");
    }
    eprintln!("wire_capture: SKIPPED: {why}");
}

/// One run at a time: each spins three threads (and CI has two cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A classic BPF program for the capture socket (it sees the Ethernet header first): IPv4,
/// UDP, not a fragment, destination port 4791, `ip` the source or the destination. The
/// kernel then queues (and counts as dropped, when the buffer is full) this run's frames only.
fn capture_filter(ip: Ipv4Addr) -> Vec<libc::sock_filter> {
    let i = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let ip = u32::from(ip);
    vec![
        i(0x28, 0, 0, 12),       // 0 ldh [12]: ethertype
        i(0x15, 0, 11, 0x0800),  // 1 IPv4, else drop (13)
        i(0x30, 0, 0, 23),       // 2 ldb [23]: protocol
        i(0x15, 0, 9, 17),       // 3 UDP, else drop
        i(0x28, 0, 0, 20),       // 4 ldh [20]: flags | fragment offset
        i(0x45, 7, 0, 0x1fff),   // 5 a fragment after the first: drop
        i(0xb1, 0, 0, 14),       // 6 X = IPv4 header length
        i(0x48, 0, 0, 16),       // 7 ldh [x + 16]: UDP destination port
        i(0x15, 0, 4, 4791),     // 8 RoCEv2, else drop
        i(0x20, 0, 0, 26),       // 9 ld [26]: source address
        i(0x15, 3, 0, ip),       // 10 ours: accept (14)
        i(0x20, 0, 0, 30),       // 11 ld [30]: destination address
        i(0x15, 1, 0, ip),       // 12 ours: accept
        i(0x06, 0, 0, 0),        // 13 drop
        i(0x06, 0, 0, u32::MAX), // 14 accept
    ]
}

/// An AF_PACKET socket on `lo` that sees `ip`'s RoCEv2 frames ([`capture_filter`]), with a
/// 100 ms receive timeout and a large buffer.
fn packet_socket(ip: Ipv4Addr) -> std::io::Result<libc::c_int> {
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sa.sll_ifindex = ifindex as i32;
    // SAFETY: bind reads a sockaddr_ll of the size given; setsockopt reads the values given.
    unsafe {
        if libc::bind(fd, (&sa as *const libc::sockaddr_ll).cast(), std::mem::size_of::<libc::sockaddr_ll>() as u32)
            != 0
        {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        let prog = capture_filter(ip);
        let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut libc::sock_filter };
        if libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as u32,
        ) != 0
        {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        // what queued before the filter: anyone's
        let mut b = [0u8; 64];
        while libc::recv(fd, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) >= 0 {}
        let mut st: libc::tpacket_stats = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // reading the statistics resets them
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        );
        let size: libc::c_int = 64 << 20;
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, (&size as *const libc::c_int).cast(), 4);
        let tv = libc::timeval { tv_sec: 0, tv_usec: 100_000 };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    Ok(fd)
}

/// Whether `f` (Ethernet first) is IPv4/UDP to port 4791 from or to `ip`.
fn is_roce_of(f: &[u8], ip: Ipv4Addr) -> bool {
    if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14 + 9] != 17 {
        return false;
    }
    let ihl = usize::from(f[14] & 0xf) * 4;
    let Some(udp) = f.get(14 + ihl..14 + ihl + 8) else { return false };
    let (src, dst) = (&f[26..30], &f[30..34]);
    u16::from_be_bytes([udp[2], udp[3]]) == 4791 && (src == ip.octets() || dst == ip.octets())
}

/// Captures frames of `ip` on `lo` until `stop`; returns them (each once: as it left, the
/// outgoing copy) and the kernel's drop count.
fn capture(fd: libc::c_int, ip: Ipv4Addr, stop: Arc<AtomicBool>) -> (Vec<(Duration, Vec<u8>)>, u32) {
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 65536];
    let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let start = std::time::Instant::now();
    // after stop, read until the queue is empty
    loop {
        // SAFETY: sockaddr_ll is plain data.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: recvfrom writes at most buf.len() bytes and a sockaddr_ll of `len`.
        let n = unsafe {
            libc::recvfrom(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut sa as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            if stop.load(Ordering::Acquire) {
                break;
            }
            continue;
        }
        let f = &buf[..n as usize];
        if sa.sll_pkttype == libc::PACKET_OUTGOING && is_roce_of(f, ip) {
            frames.push((t0 + start.elapsed(), f.to_vec()));
        }
    }
    // SAFETY: tpacket_stats is plain data; getsockopt writes at most `len` bytes.
    let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    (frames, st.tp_drops)
}

fn write_pcap(path: &std::path::Path, frames: &[(Duration, Vec<u8>)]) {
    let mut out = Vec::new();
    // classic pcap, microsecond stamps, LINKTYPE_ETHERNET
    for w in [
        0xa1b2_c3d4u32.to_le_bytes(),
        [2, 0, 4, 0],
        0u32.to_le_bytes(),
        0u32.to_le_bytes(),
        65535u32.to_le_bytes(),
        1u32.to_le_bytes(),
    ] {
        out.extend_from_slice(&w);
    }
    for (t, f) in frames {
        for w in [t.as_secs() as u32, t.subsec_micros(), f.len() as u32, f.len() as u32] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn every_frame_of_a_udp_wire_echo_run_has_a_valid_icrc_by_scapy() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let host = host_ip(0);
    let fd = match packet_socket(host) {
        Ok(fd) => fd,
        Err(e) => return skip_or_fail(&format!("no AF_PACKET socket on lo ({e}; needs CAP_NET_RAW)")),
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("scripts/check_icrc.py");
    // scapy present? (exit 3 when not)
    let probe = Command::new("python3").arg(&script).output();
    match probe {
        Ok(o) if o.status.code() == Some(3) => {
            unsafe { libc::close(fd) };
            return skip_or_fail(&format!("scapy missing: {}", String::from_utf8_lossy(&o.stderr).trim()));
        }
        Err(e) => {
            unsafe { libc::close(fd) };
            return skip_or_fail(&format!("no python3: {e}"));
        }
        Ok(_) => {}
    }

    let stop = Arc::new(AtomicBool::new(false));
    let cap = {
        let stop = stop.clone();
        std::thread::spawn(move || capture(fd, host, stop))
    };
    let bin = std::env::var("ROCELINK_CAPTURE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_rocelink").into());
    let out = Command::new(&bin)
        .args([
            "echo",
            "--wire",
            "udp",
            "--peer-process",
            "--count",
            &MESSAGES.to_string(),
            "--size",
            "64",
            "--quiet",
            "--host-ip",
        ])
        .arg(host.to_string())
        .args(["--log-level", "info"])
        .output()
        .expect("run rocelink");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Release);
    let (frames, drops) = cap.join().unwrap();
    unsafe { libc::close(fd) };
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("rocelink echo: {}\n{}{stderr}", out.status, String::from_utf8_lossy(&out.stdout));

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wire_capture");
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("echo-udp.pcap");
    write_pcap(&pcap, &frames);
    let check = Command::new("python3").arg(&script).arg(&pcap).output().expect("run check_icrc.py");
    let report = String::from_utf8_lossy(&check.stdout);
    eprintln!(
        "{}: {} frames captured (kernel drops {drops}); check_icrc.py: {report}{}",
        pcap.display(),
        frames.len(),
        String::from_utf8_lossy(&check.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(report.trim()).expect("check_icrc.py prints JSON");
    assert_eq!(drops, 0, "the capture lost frames");
    assert!(v["frames"].as_u64().unwrap() >= 2 * u64::from(MESSAGES), "{v}");
    assert!(v["opcodes"]["0x2b"].as_u64().unwrap_or(0) >= u64::from(MESSAGES), "fpga-sim's WRITE_IMMs: {v}");
    assert!(v["opcodes"]["0x24"].as_u64().unwrap_or(0) >= u64::from(MESSAGES), "the host's SENDs: {v}");
    assert_eq!(v["invalid"], 0, "frames whose ICRC is wrong on the wire: {v}");
    assert!(out.status.success(), "rocelink echo failed: {}", out.status);
    // the wire said at start how it sends and receives
    assert!(stderr.contains("UDP wire bound"), "{stderr}");
}

/// A host address of this process's own (`k` tells tests apart), so that other runs on lo
/// are not captured.
fn host_ip(k: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(127, 251 - k, (pid % 250) as u8, (pid / 250 % 120) as u8 * 2 + 2)
}

#[test]
fn a_request_replayed_from_a_third_address_is_dropped_and_counted_as_wrong_source() {
    // IBTA 9.6, PROTOCOLS.md 1.2: the host's UC QP accepts its peer's address only. A third
    // address sends the peer's first request again, as its own (ICRC over its own header:
    // valid RoCEv2, right QP and key), during a UDP-wire run.
    use rocelink_link::Link;
    use rocelink_wire::roce;
    const REPLAYS: u64 = 50;
    const COUNT: u32 = 3000;
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let host = host_ip(1);
    let fd = match packet_socket(host) {
        Ok(fd) => fd,
        Err(e) => return skip_or_fail(&format!("no AF_PACKET socket on lo ({e}; needs CAP_NET_RAW)")),
    };
    let third = Ipv4Addr::new(host.octets()[0], host.octets()[1], host.octets()[2], host.octets()[3] + 1);
    let replayer = std::thread::spawn(move || {
        let mut link = rocelink_link::UdpLink::bind(std::net::SocketAddrV4::new(third, roce::UDP_PORT))
            .expect("bind the third address");
        let mut buf = vec![0u8; 65536];
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            // SAFETY: recv writes at most buf.len() bytes.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 || !is_roce_of(&buf[..n as usize], host) || buf[30..34] != host.octets() {
                continue;
            }
            let Ok(f) = roce::parse_frame(&buf[..n as usize]) else { continue };
            if f.repr.bth.opcode != rocelink_wire::bth::Opcode::UcWriteOnlyImm {
                continue;
            }
            let mut r = f.repr;
            r.ipv4.src_addr = third.octets();
            let mut replay = vec![0u8; 65536];
            let len = r.emit(f.payload, &mut replay).unwrap();
            for _ in 0..REPLAYS {
                link.send(&replay[..len]).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
            unsafe { libc::close(fd) };
            return true;
        }
        unsafe { libc::close(fd) };
        false
    });
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wire_capture");
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("replay.json");
    let _ = std::fs::remove_file(&json);
    let out = Command::new(env!("CARGO_BIN_EXE_rocelink"))
        .args([
            "echo",
            "--wire",
            "udp",
            "--peer-process",
            "--count",
            &COUNT.to_string(),
            "--size",
            "64",
            "--quiet",
            "--host-ip",
        ])
        .arg(host.to_string())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run rocelink");
    eprintln!(
        "rocelink echo: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(replayer.join().unwrap(), "no request was seen to replay");
    assert!(out.status.success(), "{}", out.status);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["nic_drops"]["wrong_source"], REPLAYS, "{r}");
    let other: u64 = r["nic_drops"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "wrong_source")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert_eq!(other, 0, "{r}");
    assert_eq!((r["received"].as_u64(), r["lost"].as_u64()), (Some(u64::from(COUNT)), Some(0)), "{r}");
}
