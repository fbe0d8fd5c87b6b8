//! Printing and writing what a run measured.

use std::fmt::Write as _;
use std::path::Path;

use crate::echo::EchoReport;

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
}

/// The human summary printed at the end of a run.
pub fn echo_text(r: &EchoReport) -> String {
    let mut s = String::new();
    let c = &r.counts;
    let t = &r.rtt_ns;
    let _ = writeln!(s, "rocelink echo: {} wire, {} B, {}, backend {}, spin {}", r.env.wire, r.env.payload_size, r.mode, r.env.backend, r.env.spin_mode);
    let _ = writeln!(s, "  round trip (us, full RTT, {} samples): min {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}", t.count, us(t.min), us(t.p50), us(t.p90), us(t.p99), us(t.p999), us(t.max));
    let _ = writeln!(s, "  sent {}  received {}  lost {}  duplicated {}  reordered {}  corrupted {}", c.sent, c.received, c.lost, c.duplicated, c.reordered, c.corrupted);
    if let Some(b) = &r.breakdown_ns {
        let _ = writeln!(
            s,
            "  where it went (p50, us, {} matched): wire+NIC in {}  data-path turnaround {}  rest (CQE to data path, doorbell to NIC, NIC+wire out) {}",
            b.matched,
            us(b.wire_nic_in.p50),
            us(b.turnaround.p50),
            us(b.rest.p50)
        );
        if let (Some(l), Some(w)) = (&b.profile_loaded, &b.profile_written) {
            let _ = writeln!(s, "  kernel profile (p50, us from CQE seen): request loaded {}  answer written {}  doorbell {}", us(l.p50), us(w.p50), us(b.turnaround.p50));
        }
    }
    let drops: Vec<String> = r.nic_drops.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(s, "  NIC: rx {} tx {} drops: {}", r.nic.rx_packets, r.nic.tx_packets, if drops.is_empty() { "none".into() } else { drops.join(", ") });
    if let Some(p) = &r.peer {
        let _ = writeln!(s, "  peer: sent {} received {} icrc_failures {} malformed {} stalls {}", p.sent, p.received, p.icrc_failures, p.malformed, p.stalls);
    }
    if !r.peer_missing_extensions.is_empty() {
        let _ = writeln!(s, "  peer lacks rocelink extensions: {}", r.peer_missing_extensions.join(", "));
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
