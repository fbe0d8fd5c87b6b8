//! End to end over the in-process wire: a host configures the peer through real ECB
//! requests over UDP, and a responder thread stands in for the host's NIC and GPU echo.

mod common;

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{
    configure_vp, echo_template, next_frame, note_error, read_capture, start_run, wait_done, EcbClient, HostSetup, Run,
    HOST,
};
use rocelink_fpga_sim::{start, SimConfig};
use rocelink_link::inproc;
use rocelink_link::{Backoff, Link, SpinMode, UdpLink, MAX_FRAME};
use rocelink_wire::bth::Opcode;
use rocelink_wire::hsb::{capture_flags, ext, reg, CaptureRecord};
use rocelink_wire::roce::{self, Endpoints, RoceRepr};
use rocelink_wire::rpc;

const SIM_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// Which wire carries the frames, and the addresses on it.
#[derive(Debug, Clone, Copy)]
struct Wire {
    udp: bool,
    sim_ip: [u8; 4],
    host: HostSetup,
    /// UDP source port of the answers.
    answer_port: u16,
}

const INPROC: Wire = Wire { udp: false, sim_ip: [127, 0, 0, 2], host: HOST, answer_port: 49152 };
/// Over UDP both ends need port 4791 (the RoCEv2 port `parse_frame` insists on), so each
/// gets an address of its own in 127.0.78.0/24, which no other test uses.
const UDP: Wire = Wire {
    udp: true,
    sim_ip: [127, 0, 78, 2],
    host: HostSetup { ip: [127, 0, 78, 1], ..HOST },
    answer_port: roce::UDP_PORT,
};
const ARG_LEN: usize = 40;

/// What the responder does wrong, by request id.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    corrupt: Option<u32>,
    drop: Option<u32>,
    duplicate: Option<u32>,
    /// Also sends a copy of this answer with a broken ICRC.
    bad_icrc: Option<u32>,
    /// Also sends a copy of this answer to another QP.
    wrong_qp: Option<u32>,
}

#[derive(Debug, Default)]
struct Report {
    requests: u32,
    errors: Vec<String>,
}

/// The host side: checks every WRITE_IMM against PROTOCOLS.md 2.3 and answers a UC SEND ONLY
/// with a CUQS echo (PROTOCOLS.md 3).
fn responder(mut link: Box<dyn Link>, wire: Wire, faults: Faults, stop: Arc<AtomicBool>) -> JoinHandle<Report> {
    let host = wire.host;
    std::thread::spawn(move || {
        let mut report = Report::default();
        let mut rx = vec![0u8; MAX_FRAME];
        let mut tx = vec![0u8; MAX_FRAME];
        let mut answer = vec![0u8; 4096];
        let mut last_psn: Option<u32> = None;
        let mut psn = 0u32;
        let mut backoff = Backoff::new(SpinMode::Shared);
        let ep = Endpoints {
            src_mac: host.mac,
            dst_mac: SIM_MAC,
            src_ip: host.ip,
            dst_ip: wire.sim_ip,
            src_port: wire.answer_port,
            dst_port: roce::UDP_PORT,
        };
        while let Some(n) = next_frame(&mut *link, &mut rx, &mut backoff, &stop) {
            let f = match roce::parse_frame(&rx[..n]) {
                Ok(f) => f,
                Err(e) => {
                    note_error(&mut report.errors, format!("unparseable frame: {e:?}"));
                    continue;
                }
            };
            report.requests += 1;
            let r = f.repr;
            let (Some(reth), Some(imm)) = (r.reth, r.immdt) else {
                note_error(&mut report.errors, "no RETH/ImmDt".into());
                continue;
            };
            let slot = imm & 0xFFF;
            let checks = [
                (r.bth.opcode == Opcode::UcWriteOnlyImm, "opcode 0x2B"),
                (r.bth.dest_qp == host.qp, "DestQP = DP_QP"),
                (r.bth.pkey == 0xFFFF, "P_Key"),
                (slot < host.slots, "slot < DP_MAX_BUFF + 1"),
                (reth.va == host.buffer_va + u64::from(slot) * u64::from(host.page_inc) * 128, "VA"),
                (reth.rkey == host.rkey, "rkey"),
                (reth.dma_len as usize == f.payload.len(), "DMA length = window"),
                (imm >> 12 == r.bth.psn & 0xF_FFFF, "immediate PSN"),
                (!matches!(last_psn, Some(p) if (p + 1) & 0xFF_FFFF != r.bth.psn), "PSN + 1"),
                (r.udp.src_port == host.src_port && r.udp.dst_port == 4791, "UDP ports"),
                (r.ipv4.dst_addr == host.ip && r.ipv4.src_addr == wire.sim_ip, "IP addresses"),
                (r.ipv4.ident == 0 && r.ipv4.dont_frag && r.ipv4.ttl == 64, "HSB IPv4 header"),
                // A UDP socket never sees the MACs (the link writes zeros).
                (wire.udp || (r.eth.dst_addr == host.mac && r.eth.src_addr == SIM_MAC), "MACs"),
            ];
            for (ok, what) in checks {
                if !ok {
                    note_error(&mut report.errors, format!("psn {}: {what} wrong: {r:?}", r.bth.psn));
                }
            }
            last_psn = Some(r.bth.psn);
            let Ok(req) = rpc::RequestRepr::parse(f.payload) else {
                note_error(&mut report.errors, "no CUQR header".into());
                continue;
            };
            let id = req.request_id;
            let args = &f.payload[rpc::HEADER_LEN..rpc::HEADER_LEN + req.arg_len as usize];
            if faults.drop == Some(id) {
                continue;
            }
            let resp = rpc::ResponseRepr {
                status: 0,
                result_len: req.arg_len,
                request_id: id,
                ptp_timestamp: req.ptp_timestamp,
            };
            resp.emit(&mut answer).expect("response header");
            let len = rpc::HEADER_LEN + args.len();
            answer[rpc::HEADER_LEN..len].copy_from_slice(args);
            if faults.corrupt == Some(id) {
                answer[rpc::HEADER_LEN + 3] ^= 0x40;
            }
            let mut send = |link: &mut Box<dyn Link>, qp: u32, break_icrc: bool| {
                let repr = RoceRepr::uc_send_only(&ep, qp, psn, len);
                psn = (psn + 1) & 0xFF_FFFF;
                let n = repr.emit(&answer[..len], &mut tx).expect("emit answer");
                if break_icrc {
                    tx[n - 1] ^= 0xFF;
                }
                link.send(&tx[..n]).expect("send answer");
            };
            if faults.bad_icrc == Some(id) {
                send(&mut link, ext::DEFAULT_FPGA_QP, true);
            }
            if faults.wrong_qp == Some(id) {
                send(&mut link, 77, false);
            }
            send(&mut link, ext::DEFAULT_FPGA_QP, false);
            if faults.duplicate == Some(id) {
                send(&mut link, ext::DEFAULT_FPGA_QP, false);
            }
        }
        report
    })
}

struct Bench {
    ecb: EcbClient,
    stop: Arc<AtomicBool>,
    responder: Option<JoinHandle<Report>>,
    sim: Option<rocelink_fpga_sim::FpgaSim>,
}

impl Bench {
    fn new(faults: Faults) -> Self {
        Self::on(INPROC, faults)
    }

    fn on(wire: Wire, faults: Faults) -> Self {
        let (peer, host): (Box<dyn Link>, Box<dyn Link>) = if wire.udp {
            let bind =
                |ip: [u8; 4]| UdpLink::bind(SocketAddrV4::new(ip.into(), roce::UDP_PORT)).expect("bind UDP wire");
            (Box::new(bind(wire.sim_ip)), Box::new(bind(wire.host.ip)))
        } else {
            let (a, b) = inproc::pair(256);
            (Box::new(a), Box::new(b))
        };
        let config = SimConfig {
            ecb_bind: "127.0.0.2:0".parse().expect("addr"),
            mac: SIM_MAC,
            ip: wire.sim_ip,
            spin: SpinMode::Shared,
            ..SimConfig::default()
        };
        let sim = start(config, peer).expect("start sim");
        let stop = Arc::new(AtomicBool::new(false));
        let responder = responder(host, wire, faults, Arc::clone(&stop));
        let mut ecb = EcbClient::connect(sim.ecb_addr());
        configure_vp(&mut ecb, &wire.host);
        Bench { ecb, stop, responder: Some(responder), sim: Some(sim) }
    }

    /// Stops everything; returns the responder's report (which must hold no errors).
    fn finish(mut self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let report = self.responder.take().expect("responder").join().expect("responder ran");
        let t0 = std::time::Instant::now();
        self.sim.take().expect("sim").stop();
        assert!(t0.elapsed() < Duration::from_secs(1), "stop joins within 1 s");
        assert!(report.errors.is_empty(), "responder saw: {:#?}", report.errors);
        report
    }
}

fn assert_all_ok(records: &[CaptureRecord], first: u32, frames: u32) {
    assert_eq!(records.len(), frames as usize);
    let mut ids: Vec<u32> = records.iter().map(|r| r.request_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (first..first + frames).collect::<Vec<_>>(), "one answer per request id");
    for r in records {
        assert_eq!(r.flags, capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK, "{r:?}");
        assert_eq!(r.result_len as usize, ARG_LEN);
        assert_eq!(r.rpc_status, 0);
        assert!(r.echoed_timestamp > 0, "stamped at transmission: {r:?}");
        assert!(r.arrival_timestamp >= r.echoed_timestamp, "{r:?}");
    }
}

#[test]
fn closed_and_open_loop_echo() {
    let mut b = Bench::new(Faults::default());
    let template = echo_template(ARG_LEN);
    let enable = reg::PLAYER_STAMP_PTP | reg::PLAYER_SCRAMBLE;

    // Closed loop: one message at a time.
    let closed = Run {
        frames: 1000,
        max_outstanding: 1,
        interval_clocks: 0,
        first_request_id: 100,
        timeout_us: 1_000_000,
        enable,
    };
    start_run(&mut b.ecb, &template, &closed);
    wait_done(&mut b.ecb, Duration::from_secs(20));
    let records = read_capture(&mut b.ecb);
    assert_all_ok(&records, 100, 1000);
    assert_eq!(b.ecb.stat(ext::STAT_SENT), 1000);
    assert_eq!(b.ecb.stat(ext::STAT_RECEIVED), 1000);
    assert_eq!(b.ecb.stat(ext::STAT_UNEXPECTED), 0);
    // Closed loop: each answer arrives before the next request leaves.
    let mut by_id = records.clone();
    by_id.sort_by_key(|r| r.request_id);
    for w in by_id.windows(2) {
        assert!(w[0].arrival_timestamp <= w[1].echoed_timestamp, "overlap in closed loop: {w:?}");
    }

    // Open loop: up to 64 in flight, 1 us apart (156 clocks).
    let open = Run {
        frames: 1000,
        max_outstanding: 0,
        interval_clocks: 156,
        first_request_id: 5000,
        timeout_us: 1_000_000,
        enable,
    };
    start_run(&mut b.ecb, &template, &open);
    wait_done(&mut b.ecb, Duration::from_secs(20));
    assert_all_ok(&read_capture(&mut b.ecb), 5000, 1000);
    assert_eq!(b.ecb.stat(ext::STAT_SENT), 1000);
    assert_eq!(b.ecb.stat(ext::STAT_RECEIVED), 1000);
    assert_eq!(b.ecb.stat(ext::STAT_MALFORMED), 0);
    assert_eq!(b.ecb.stat(ext::STAT_ICRC_FAILURES), 0);

    let report = b.finish();
    assert_eq!(report.requests, 2000);
}

#[test]
fn faults_are_flagged_and_counted() {
    let first = 1;
    let faults = Faults {
        corrupt: Some(first + 10),
        drop: Some(first + 20),
        duplicate: Some(first + 30),
        bad_icrc: Some(first + 40),
        wrong_qp: Some(first + 50),
    };
    let mut b = Bench::new(faults);
    let template = echo_template(ARG_LEN);
    // No scrambling here: the checker must also work on plain args.
    let run = Run {
        frames: 1000,
        max_outstanding: 0,
        interval_clocks: 0,
        first_request_id: first,
        timeout_us: 20_000,
        enable: reg::PLAYER_STAMP_PTP,
    };
    start_run(&mut b.ecb, &template, &run);
    wait_done(&mut b.ecb, Duration::from_secs(20));
    let records = read_capture(&mut b.ecb);

    // 999 answered + 1 duplicate.
    assert_eq!(records.len(), 1000);
    assert!(!records.iter().any(|r| r.request_id == first + 20), "the dropped request has no record");
    let of = |id: u32| records.iter().filter(|r| r.request_id == id).collect::<Vec<_>>();
    assert_eq!(of(first + 10)[0].flags, capture_flags::HEADER_OK, "corrupted args: header ok, payload not");
    let dup = of(first + 30);
    assert_eq!(dup.len(), 2);
    assert_eq!(dup[0].flags, capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK);
    assert_eq!(dup[1].flags, capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK | capture_flags::DUPLICATE);
    let good = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
    assert_eq!(records.iter().filter(|r| r.flags == good).count(), 998, "999 answers less the corrupted one");

    assert_eq!(b.ecb.stat(ext::STAT_SENT), 1000);
    assert_eq!(b.ecb.stat(ext::STAT_RECEIVED), 1000, "999 + duplicate; the broken ones are not answers");
    assert_eq!(b.ecb.stat(ext::STAT_ICRC_FAILURES), 1);
    assert_eq!(b.ecb.stat(ext::STAT_UNEXPECTED), 1, "the answer to another QP");
    assert_eq!(b.ecb.stat(ext::STAT_MALFORMED), 0);
    assert!(b.ecb.stat(ext::STAT_STALLS) >= 1, "the lost answer holds the 64-slot window until it times out");

    b.finish();
}

#[test]
fn clearing_the_run_bit_aborts_a_run() {
    let mut b = Bench::new(Faults { drop: Some(3), ..Faults::default() });
    let template = echo_template(ARG_LEN);
    // Closed loop with a long timeout: the dropped request 3 holds the run.
    let run = Run {
        frames: 10,
        max_outstanding: 1,
        interval_clocks: 0,
        first_request_id: 0,
        timeout_us: 60_000_000,
        enable: 0,
    };
    start_run(&mut b.ecb, &template, &run);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.ecb.read(reg::PLAYER_ENABLE) & reg::PLAYER_RUN, 1, "still waiting for answer 3");
    assert_eq!(b.ecb.read(reg::CAPTURE_COUNT), 3);
    // Clearing the run bit aborts it.
    b.ecb.write(reg::PLAYER_ENABLE, 0);
    wait_done(&mut b.ecb, Duration::from_secs(2));
    b.finish();
}

#[test]
fn echo_over_the_udp_wire() {
    // Real datagrams through the kernel: the ICRC each side computed must match the IPv4
    // header the other side's link rebuilds (identification 0, DF; PROTOCOLS.md 1.1).
    let mut b = Bench::on(UDP, Faults::default());
    let template = echo_template(ARG_LEN);
    let run = Run {
        frames: 300,
        max_outstanding: 0,
        interval_clocks: 0,
        first_request_id: 7,
        timeout_us: 1_000_000,
        enable: reg::PLAYER_STAMP_PTP | reg::PLAYER_SCRAMBLE,
    };
    start_run(&mut b.ecb, &template, &run);
    wait_done(&mut b.ecb, Duration::from_secs(20));
    assert_all_ok(&read_capture(&mut b.ecb), 7, 300);
    assert_eq!(b.ecb.stat(ext::STAT_ICRC_FAILURES), 0);
    assert_eq!(b.finish().requests, 300);
}
