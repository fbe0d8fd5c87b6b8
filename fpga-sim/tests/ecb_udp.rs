//! The ECB server over a real UDP socket, in process and as the `fpga-sim` binary.

mod common;

use std::process::Command as Process;
use std::time::{Duration, Instant};

use common::{spawn_ready, EcbClient};
use rocelink_fpga_sim::{start, SimConfig};
use rocelink_link::inproc;
use rocelink_wire::ecb::{self, Command, Reply, Status};
use rocelink_wire::hsb::reg;

#[test]
fn serves_over_udp_and_survives_bad_requests() {
    let (peer, _host) = inproc::pair(4);
    let config = SimConfig { ecb_bind: "127.0.0.2:0".parse().expect("addr"), ..SimConfig::default() };
    let sim = start(config, Box::new(peer)).expect("start");
    assert_eq!(sim.link_description(), "inproc");
    let mut c = EcbClient::connect(sim.ecb_addr());

    assert_eq!(c.read(reg::HSB_IP_VERSION), 0x2607);
    assert_eq!(c.read(reg::FPGA_PTP_SYNC_STAT) & 0xF, 0xF);

    // Garbage of every kind: nothing comes back for the short ones, an error for the rest.
    let short = Duration::from_millis(100);
    assert_eq!(c.raw(&[], short), None);
    assert_eq!(c.raw(&[0x14, 0, 0], short), None);
    let r = c.raw(&[0x77, 0, 0, 1, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0], Duration::from_secs(2)).expect("answered");
    let rep = Reply::new_checked(&r[..]).expect("reply");
    assert_eq!((rep.command_byte(), rep.status()), (0xF7, Status::InvalidCommand));
    assert_eq!(c.transact(Command::RdDword, &[(0x0000_0F00, 0)]), Err(Status::InvalidAddress));
    let big = vec![0xFFu8; 9000];
    assert!(c.raw(&big, short).is_some(), "an unknown command is answered, even when oversized");

    // Still serving, with the sequence check intact.
    c.write(0x104, 0xABCD);
    assert_eq!(c.read(0x104), 0xABCD);
    let words = c.read_words(reg::PLAYER_RAM, 600);
    assert_eq!(words.len(), 600);

    let t0 = Instant::now();
    sim.stop();
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn binary_prints_ready_line_and_exits_when_stdin_closes() {
    let (mut child, ecb_addr, roce) = spawn_ready(Process::new(env!("CARGO_BIN_EXE_fpga-sim")).args([
        "--ecb",
        "127.0.0.2:0",
        "--roce",
        "127.0.0.2:0",
        "--spin",
        "shared",
        "--exit-on-stdin-close",
    ]));
    assert_eq!(*roce.ip(), std::net::Ipv4Addr::new(127, 0, 0, 2), "{roce}");
    let mut c = EcbClient::connect(ecb_addr);
    assert_eq!(c.read(reg::HSB_IP_VERSION), 0x2607);
    let mut req = [0u8; 64];
    let n = ecb::emit_request(Command::RdDword, 0, 1, &[(reg::FPGA_DATE, 0)], &mut req).expect("request");
    assert!(c.raw(&req[..n], Duration::from_secs(2)).is_some());

    drop(child.stdin.take());
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "{status}");
            break;
        }
        if t0.elapsed() > Duration::from_secs(3) {
            let _ = child.kill();
            panic!("fpga-sim did not exit after stdin closed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn binary_help_documents_every_flag() {
    let out = Process::new(env!("CARGO_BIN_EXE_fpga-sim")).arg("--help").output().expect("run --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--ecb", "--roce", "--mac", "--qp", "--core", "--spin", "--log-level", "--exit-on-stdin-close"] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}
