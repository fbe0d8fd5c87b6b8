//! The ring contract at the frame level: frames sent by hand over the UDP wire (real
//! datagrams to the provider's NIC), the provider driven through its Rust API, the ring read
//! as a dispatcher reads it. fpga-sim serves the peer's ECB (the provider configures it as it
//! would an FPGA) and receives the answers.
//!
//! Checked: a frame that is no CUQR request, one whose arguments are cut short, and a request
//! longer than a slot are counted and dropped before the ring, and nothing of them is written;
//! a good request is published whole in the next FIFO slot; an answer goes out, and TX flags
//! that are no slot address or carry the dispatcher's error tag are counted and cleared.

use std::net::SocketAddrV4;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::{Duration, Instant};

use rocelink_cudaq_bridge::abi::{CUDAQ_TX_FLAG_ERROR_TAG, CUDAQ_TX_FLAG_IN_FLIGHT};
use rocelink_cudaq_bridge::args;
use rocelink_cudaq_bridge::bridge::Bridge;
use rocelink_link::{Link, UdpLink};
use rocelink_operator::peer::{HOST_MAC, PEER_MAC};
use rocelink_wire::reth::RethRepr;
use rocelink_wire::roce::{self, Endpoints, RoceRepr};
use rocelink_wire::rpc::{self, RequestRepr, ResponseRepr};

/// Waits until `key` of the bridge's counters reads `want`.
fn wait_for(b: &Bridge, key: &str, want: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let c = b.counters();
        let got =
            c.split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{key}="))).and_then(|v| v.parse::<u64>().ok());
        if got == Some(want) {
            return;
        }
        assert!(Instant::now() < until, "{key} never reached {want}: {c}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn request(arg_len: u32, bytes: usize, fill: u8) -> Vec<u8> {
    let mut b = vec![fill; bytes];
    RequestRepr { function_id: rpc::function_id::ECHO, arg_len, request_id: 9, ptp_timestamp: 77 }
        .emit(&mut b[..rpc::HEADER_LEN])
        .expect("header");
    b
}

#[test]
fn frames_that_do_not_fit_the_contract_never_reach_the_ring() {
    let (host_ip, peer_ip) = rocelink_operator::echo::fresh_loopback_pair();
    let sim_link = UdpLink::bind(SocketAddrV4::new(peer_ip, roce::UDP_PORT)).expect("peer link");
    let sim = rocelink_fpga_sim::start(
        rocelink_fpga_sim::SimConfig {
            ecb_bind: SocketAddrV4::new(peer_ip, 0),
            mac: PEER_MAC,
            ip: peer_ip.octets(),
            ..Default::default()
        },
        Box::new(sim_link),
    )
    .expect("fpga-sim");
    let cfg = args::parse(&[
        "--peer".to_string(),
        sim.ecb_addr().to_string(),
        "--host-ip".into(),
        host_ip.to_string(),
        "--slots=4".into(),
        "--slot-size=128".into(),
        "--ring-memory=host".into(),
    ])
    .expect("args");
    let b = Bridge::create(cfg).expect("create");
    b.connect().expect("connect");
    b.launch().expect("launch");
    let e = b.endpoint().clone();
    let ring = b.ring().clone();

    // Frames from the peer's address, another port: the NIC accepts the peer's IP only.
    let mut raw = UdpLink::bind(SocketAddrV4::new(peer_ip, 4800)).expect("sender");
    let ep = Endpoints {
        src_mac: PEER_MAC,
        dst_mac: HOST_MAC,
        src_ip: peer_ip.octets(),
        dst_ip: host_ip.octets(),
        src_port: 4800,
        dst_port: roce::UDP_PORT,
    };
    let mut psn = 0;
    let mut send = |staging_slot: u32, payload: &[u8]| {
        let stride = u64::from(rocelink_cudaq_bridge::bridge::STAGING_STRIDE);
        let reth = RethRepr {
            va: e.buffer_addr + u64::from(staging_slot) * stride,
            rkey: e.rkey,
            dma_len: payload.len() as u32,
        };
        let mut f = vec![0u8; roce::MAX_FRAME_LEN];
        let n = RoceRepr::uc_write_imm(&ep, e.qpn, psn, reth, (psn << 12) | staging_slot, payload.len())
            .emit(payload, &mut f)
            .expect("emit");
        raw.send(&f[..n]).expect("send");
        psn += 1;
    };

    let mut other_magic = request(40, 64, 0xA1);
    other_magic[0] ^= 0xFF;
    send(0, &other_magic);
    send(1, &request(100, 60, 0xA2)); // fewer argument bytes than arg_len
    send(2, &request(200, 224, 0xA3)); // 224 bytes: longer than a 128-byte slot
    wait_for(&b, "rx_not_rpc", 2);
    wait_for(&b, "rx_too_long", 1);
    wait_for(&b, "rx_requests", 0);
    for i in 0..4 {
        assert_eq!(ring.rx_flag(i).load(Acquire), 0, "slot {i} published");
    }
    let views = ring.ringbuffer();
    // SAFETY: the ring's 4 RX slots of 128 bytes; nothing writes them now (nothing published).
    let rx = unsafe { std::slice::from_raw_parts(views.rx_data_host, 4 * 128) };
    assert!(rx.iter().all(|&x| x == 0), "nothing of a dropped frame is written");

    // A good request, with padding after its arguments: published whole in slot 0 (FIFO),
    // the padding left out.
    let good = request(80, 120, 0xB4);
    send(3, &good);
    wait_for(&b, "rx_requests", 1);
    assert_eq!(ring.rx_flag(0).load(Acquire), ring.rx_slot_addr(0));
    assert_eq!(&rx[..104], &good[..104]);
    assert!(rx[104..].iter().all(|&x| x == 0), "only the request (header and arg_len bytes) is copied");

    // The dispatcher's side: take it, answer it.
    assert_eq!(ring.rx_poll(), Some(0));
    let mut answer = [0u8; 104];
    ResponseRepr::echo_of(&RequestRepr::parse(&good).expect("request")).emit(&mut answer[..24]).expect("header");
    answer[24..].copy_from_slice(&good[24..104]);
    // SAFETY: TX slot 0 is the dispatcher's: its flag is 0 and its request is held.
    unsafe { std::ptr::copy_nonoverlapping(answer.as_ptr(), views.tx_data_host, answer.len()) };
    let received_before = sim.stats().unexpected;
    ring.tx_publish(0).expect("publish");
    wait_for(&b, "tx_responses", 1);
    assert_eq!(ring.tx_flag(0).load(Acquire), 0, "the engine clears the flag once it has the response");
    // the peer had no run going: it counts the answer as unexpected, which shows it arrived
    let until = Instant::now() + Duration::from_secs(5);
    while sim.stats().unexpected == received_before {
        assert!(Instant::now() < until, "the answer never reached the peer");
        std::thread::sleep(Duration::from_millis(2));
    }

    // TX flags that name nothing to send (in ring order after slot 0's answer).
    ring.tx_flag(1).store(CUDAQ_TX_FLAG_ERROR_TAG << 48 | 700, Release);
    ring.tx_flag(2).store(ring.tx_slot_addrs(0).0, Release); // slot 0's address in slot 2's flag
    ring.tx_flag(3).store(CUDAQ_TX_FLAG_IN_FLIGHT, Release);
    wait_for(&b, "tx_dispatch_errors", 1);
    wait_for(&b, "tx_bad_responses", 1);
    assert_eq!(ring.tx_flag(1).load(Acquire), 0);
    assert_eq!(ring.tx_flag(2).load(Acquire), 0);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(ring.tx_flag(3).load(Acquire), CUDAQ_TX_FLAG_IN_FLIGHT, "in flight: left for the dispatcher");
    wait_for(&b, "tx_responses", 1);

    b.disconnect().expect("disconnect");
    drop(b);
    sim.stop();
}
