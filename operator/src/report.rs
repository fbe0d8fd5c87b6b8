//! Printing and writing what a run measured.

use std::fmt::Write as _;
use std::path::Path;

use crate::echo::EchoReport;

use crate::latency::us;

/// The human summary printed at the end of a run.
pub fn echo_text(r: &EchoReport) -> String {
    let mut s = String::new();
    let c = &r.counts;
    let t = &r.rtt_ns;
    let _ = writeln!(s, "rocelink echo: {} wire, {} B, {}, backend {}, spin {}", r.env.wire, r.env.payload_size, r.mode, r.env.backend, r.env.spin_mode);
    if t.count == 0 {
        // no zeros that read like figures
        let _ = writeln!(s, "  round trip: no samples (nothing answered after the warm-up of {} round trips)", r.warmup);
    } else {
        let _ = writeln!(s, "  round trip (us, full RTT, {} samples): min {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}", t.count, us(t.min), us(t.p50), us(t.p90), us(t.p99), us(t.p999), us(t.max));
    }
    let _ = writeln!(s, "  sent {}  received {}  lost {}  duplicated {}  reordered {}  corrupted {}", c.sent, c.received, c.lost, c.duplicated, c.reordered, c.corrupted);
    if c.uncaptured > 0 {
        let _ = writeln!(s, "  uncaptured {} (answered, but overwritten in the peer's capture ring before they were read: not measured)", c.uncaptured);
    }
    if let Some(h) = &r.host_side_ns {
        let _ = writeln!(s, "  host side (us, request in -> answer out at the NIC, {} messages): p50 {}  p99 {}", h.count, us(h.p50), us(h.p99));
    }
    if let Some(b) = &r.breakdown_ns {
        let _ = writeln!(s, "  where it went (p50, {} matched): {}", b.matched, b.p50_text());
        if let Some(r) = &b.rest_split {
            let _ = writeln!(
                s,
                "  the rest by the NIC's send trace (p50, us, {} traced): CQE to data path + doorbell to NIC + NIC send {}  wire out {}",
                r.wire_out.count,
                us(r.to_nic_sent.p50),
                us(r.wire_out.p50)
            );
        }
        if let (Some(l), Some(w)) = (&b.profile_loaded, &b.profile_written) {
            let _ = writeln!(s, "  kernel profile (p50, us from CQE seen): request loaded {}  answer written {}  doorbell {}", us(l.p50), us(w.p50), us(b.turnaround.p50));
        }
    }
    if let Some(p) = &r.poll_phase {
        if p.scans > 0 {
            let _ = writeln!(s, "  poll phase: first read {} us after each doorbell (one read {} us; {} scan{})", us(u64::from(p.wait_ns)), us(u64::from(p.read_ns)), p.scans, if p.scans == 1 { "" } else { "s" });
        } else {
            let _ = writeln!(s, "  poll phase: no wait chosen (polls from each doorbell on: the phase lock is off, as by default, or found messages queued or too few for a scan)");
        }
    }
    let drops: Vec<String> = r.nic_drops.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(s, "  NIC: rx {} tx {} drops: {}", r.nic.rx_packets, r.nic.tx_packets, if drops.is_empty() { "none".into() } else { drops.join(", ") });
    // what the NIC delivered, the transceiver loop answered or refused (a request it could
    // not take: no RPC header, bad magic, an argument past the end, a slot out of range)
    let _ = writeln!(s, "  transceiver loop: answered {}  refused {}", r.backend_processed, r.backend_dropped);
    if r.nic.tx_wqe_rereads > 0 || r.nic.tx_wqe_check_failures > 0 {
        // checked doorbells (abi.h rl_proxy_doorbell): how often a WQE was still landing
        let _ = writeln!(s, "  NIC: {} checked doorbells re-read until their check held, {} never held (sent in error)", r.nic.tx_wqe_rereads, r.nic.tx_wqe_check_failures);
    }
    if let Some(p) = &r.peer {
        let _ = writeln!(s, "  peer: sent {} received {} icrc_failures {} malformed {} stalls {}", p.sent, p.received, p.icrc_failures, p.malformed, p.stalls);
    }
    if !r.peer_missing_extensions.is_empty() {
        let _ = writeln!(s, "  peer lacks rocelink extensions: {}", r.peer_missing_extensions.join(", "));
    }
    for w in &r.not_verified {
        let _ = writeln!(s, "  NOT VERIFIED: {w}");
    }
    s
}

/// Writes the report as JSON.
pub fn write_json(r: &impl serde::Serialize, path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::PollPhase;

    #[test]
    fn the_summary_says_what_the_poll_phase_lock_chose() {
        let mut r = EchoReport::empty();
        assert!(!echo_text(&r).contains("poll phase"), "no line for backends without the lock");
        r.poll_phase = Some(PollPhase { wait_ns: 1072, read_ns: 1150, scans: 1 });
        assert!(echo_text(&r).contains("poll phase: first read 1.07 us after each doorbell (one read 1.15 us; 1 scan)"), "{}", echo_text(&r));
        r.poll_phase = Some(PollPhase { wait_ns: 0, read_ns: 0, scans: 0 });
        assert!(echo_text(&r).contains("poll phase: no wait chosen"), "{}", echo_text(&r));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["poll_phase"]["scans"], 0);
        r.poll_phase = None;
        assert!(serde_json::to_value(&r).unwrap().get("poll_phase").is_none());
    }

    #[test]
    fn the_summary_says_when_checked_doorbells_were_re_read() {
        let mut r = EchoReport::empty();
        assert!(!echo_text(&r).contains("re-read"), "no line when none was");
        r.nic.tx_wqe_rereads = 3;
        assert!(echo_text(&r).contains("NIC: 3 checked doorbells re-read until their check held, 0 never held"), "{}", echo_text(&r));
        assert_eq!(serde_json::to_value(&r).unwrap()["nic"]["tx_wqe_rereads"], 3);
    }
}
