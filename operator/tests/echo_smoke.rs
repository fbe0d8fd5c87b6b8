use rocelink_operator::echo::{run_echo, EchoConfig, WireKind};

#[test]
fn inproc_closed_loop_smoke() {
    let cfg = EchoConfig { wire: WireKind::Inproc, count: 2000, size: 64, ..Default::default() };
    let r = run_echo(&cfg).expect("run");
    eprintln!("{}", rocelink_operator::report::echo_text(&r));
    assert_eq!(r.counts.received, 2000);
    assert_eq!(r.counts.lost, 0);
}

#[test]
fn udp_closed_loop_smoke() {
    let cfg = EchoConfig { wire: WireKind::Udp, count: 2000, size: 1024, ..Default::default() };
    let r = run_echo(&cfg).expect("run");
    eprintln!("{}", rocelink_operator::report::echo_text(&r));
    assert_eq!(r.counts.received, 2000);
    assert_eq!(r.counts.lost, 0);
}
