//! What a run measured ([`RunReport`], the JSON of `rocelink run --json` and
//! `rocelink echo --json`), its summary text and its JSON file. Every runner (`graph::run`,
//! and through it `rocelink echo` and the benchmarks) reports with these types, and every
//! operator that writes a report reads them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::env::Environment;
use crate::hsb::PeerStats;
use crate::latency::{us, Analysis, Counts, Summary};
use crate::nic::NicStats;

pub mod qec;

pub use qec::QecReport;

/// What a run measured: the fields of `rocelink echo --json` (counts, `rtt_ns`, `nic_drops`,
/// `env`, ...) and what a graph adds (graph, chain, stop reason, tap, files, problems).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    #[serde(flatten)]
    pub counts: Counts,
    pub rtt_ns: Summary,
    pub nic_drops: BTreeMap<String, u64>,
    pub nic: NicStats,
    pub peer: Option<PeerStats>,
    /// Messages the transceiver loop answered / refused.
    pub backend_processed: u64,
    pub backend_dropped: u32,
    /// Where the round trip went (only when the peer stamps with this host's clock).
    pub breakdown_ns: Option<crate::latency::Breakdown>,
    /// Extension registers the peer lacked (a real FPGA).
    pub peer_missing_extensions: Vec<&'static str>,
    pub mode: String,
    pub rate: Option<f64>,
    /// An open-loop run at a fixed rate (`Rate`): what came back against what was offered.
    pub rate_achieved: Option<OpenLoopRate>,
    pub warmup: u32,
    pub env: Environment,
    pub graph: String,
    pub graph_file: Option<String>,
    pub date_utc: String,
    /// The fused chain, stage names in data order.
    pub stage_chain: Vec<String>,
    /// `count`, `duration`, `interrupt`, `timeout` or `fault`.
    pub stopped_by: String,
    pub interrupted: bool,
    /// Requests still unanswered when a run was cut short (duration, interrupt): not counted
    /// as lost.
    pub in_flight_at_stop: u64,
    pub elapsed_s: f64,
    pub tap: Option<TapReport>,
    /// Why the run failed, if a flow or operator failed it.
    pub fault: Option<String>,
    /// Why the run does not pass though nothing failed (no answer came back, the peer's
    /// capture or counters are missing, it did not finish in time), in words: empty for a run
    /// whose answers demonstrably came back. See `graph::run::verdict`.
    pub not_verified: Vec<String>,
    /// The host's own view of each message, from the data path's record ring and the NIC's
    /// send trace: request in (CQE written) -> answer out (frame sent), ns. The only round-trip
    /// figure of a run whose peer has no capture.
    pub host_side_ns: Option<Summary>,
    /// Threads that did not stop in time, operators that could not write their files.
    pub problems: Vec<String>,
    /// Files written (reports, records).
    pub files: Vec<PathBuf>,
    /// A QEC graph's decoding results (absent from other graphs' reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qec: Option<QecReport>,
    #[serde(skip)]
    pub analysis: Option<Analysis>,
}

/// An open-loop run's message rate (the transport's keep-up floor beside a QEC graph at a
/// fixed syndrome cycle).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct OpenLoopRate {
    /// Messages per microsecond the peer was asked to send.
    pub offered_per_us: f64,
    /// Answers per microsecond: the answers received over the span from the first one's send
    /// stamp to the last one's arrival (warm-up included).
    pub achieved_per_us: f64,
    /// `achieved_per_us` reaches [`crate::graph::qec::KEEP_UP_SHARE`] of the offered rate.
    pub keeps_up: bool,
}

impl OpenLoopRate {
    /// The figures of a run offered `rate` messages per second, `achieved` answers per us.
    pub fn of(rate: f64, achieved: Option<f64>) -> Option<OpenLoopRate> {
        let offered = rate / 1e6;
        let achieved = achieved?;
        Some(OpenLoopRate {
            offered_per_us: offered,
            achieved_per_us: achieved,
            keeps_up: achieved >= crate::graph::qec::KEEP_UP_SHARE * offered,
        })
    }

    /// `0.912 messages/us of 1.000 offered: keeps up`.
    pub fn text(&self) -> String {
        format!(
            "{:.3} messages/us of {:.3} offered: {}",
            self.achieved_per_us,
            self.offered_per_us,
            if self.keeps_up { "keeps up" } else { "FALLS BEHIND" }
        )
    }
}

/// What the tap delivered.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TapReport {
    pub records: u64,
    /// Records overwritten before the tap read them.
    pub overflow: u64,
    /// The transceiver loop's time per message, CQE seen to doorbell rung.
    pub loop_ns: Summary,
    pub flows: Vec<FlowReport>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FlowReport {
    pub flow: String,
    pub capacity: usize,
    pub policy: &'static str,
    /// Messages sent into the flow; the receiver got `offered - dropped`.
    pub offered: u64,
    pub dropped: u64,
}

impl RunReport {
    /// A report of nothing (for tests and tools).
    pub fn empty() -> RunReport {
        RunReport {
            counts: Counts::default(),
            rtt_ns: Summary::default(),
            nic_drops: BTreeMap::new(),
            nic: NicStats::default(),
            peer: None,
            backend_processed: 0,
            backend_dropped: 0,
            breakdown_ns: None,
            peer_missing_extensions: Vec::new(),
            mode: "closed-loop".into(),
            rate: None,
            rate_achieved: None,
            warmup: 0,
            env: Environment::default(),
            graph: String::new(),
            graph_file: None,
            date_utc: String::new(),
            stage_chain: Vec::new(),
            stopped_by: "count".into(),
            interrupted: false,
            in_flight_at_stop: 0,
            elapsed_s: 0.0,
            tap: None,
            fault: None,
            not_verified: Vec::new(),
            host_side_ns: None,
            problems: Vec::new(),
            files: Vec::new(),
            qec: None,
            analysis: None,
        }
    }

    /// Nothing lost, duplicated or corrupted.
    pub fn is_clean(&self) -> bool {
        self.counts.lost == 0 && self.counts.duplicated == 0 && self.counts.corrupted == 0
    }
}

/// The summary `rocelink run` prints: the echo summary, then what the graph adds.
pub fn summary_text(r: &RunReport) -> String {
    use std::fmt::Write as _;
    let mut s = echo_text(r).replacen("rocelink echo:", &format!("rocelink run {}:", r.graph), 1);
    if let Some(q) = &r.qec {
        s += &qec::summary_text(q);
    }
    let _ = writeln!(
        s,
        "  stage chain: {}; stopped by {} after {:.2} s{}",
        r.stage_chain.join(" -> "),
        r.stopped_by,
        r.elapsed_s,
        if r.in_flight_at_stop > 0 {
            format!(" ({} in flight at the stop, not counted as lost)", r.in_flight_at_stop)
        } else {
            String::new()
        }
    );
    if let Some(t) = &r.tap {
        let l = &t.loop_ns;
        let _ = writeln!(
            s,
            "  tap: {} records, {} overwritten before read; loop time per message (us) p50 {:.2} p99 {:.2}",
            t.records,
            t.overflow,
            l.p50 as f64 / 1000.0,
            l.p99 as f64 / 1000.0
        );
        for f in t.flows.iter().filter(|f| f.dropped > 0) {
            let _ = writeln!(
                s,
                "  flow {} dropped {} of {} messages (capacity {}, {})",
                f.flow, f.dropped, f.offered, f.capacity, f.policy
            );
        }
    }
    for f in &r.files {
        let _ = writeln!(s, "  wrote {}", f.display());
    }
    s
}

/// The human summary printed at the end of a run.
pub fn echo_text(r: &RunReport) -> String {
    let mut s = String::new();
    let c = &r.counts;
    let t = &r.rtt_ns;
    let _ = writeln!(
        s,
        "rocelink echo: {} wire, {} B, {}, backend {}, spin {}",
        r.env.wire, r.env.payload_size, r.mode, r.env.backend, r.env.spin_mode
    );
    if t.count == 0 {
        // no zeros that read like figures
        let _ =
            writeln!(s, "  round trip: no samples (nothing answered after the warm-up of {} round trips)", r.warmup);
    } else {
        let _ = writeln!(
            s,
            "  round trip (us, full RTT, {} samples): min {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            t.count,
            us(t.min),
            us(t.p50),
            us(t.p90),
            us(t.p99),
            us(t.p999),
            us(t.max)
        );
    }
    let _ = writeln!(
        s,
        "  sent {}  received {}  lost {}  duplicated {}  reordered {}  corrupted {}",
        c.sent, c.received, c.lost, c.duplicated, c.reordered, c.corrupted
    );
    if let Some(a) = &r.rate_achieved {
        let _ = writeln!(s, "  rate: {}", a.text());
    }
    if c.uncaptured > 0 {
        let _ = writeln!(s, "  uncaptured {} (answered, but overwritten in the peer's capture ring before they were read: not measured)", c.uncaptured);
    }
    if let Some(h) = &r.host_side_ns {
        let _ = writeln!(
            s,
            "  host side (us, request in -> answer out at the NIC, {} messages): p50 {}  p99 {}",
            h.count,
            us(h.p50),
            us(h.p99)
        );
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
            let _ = writeln!(
                s,
                "  kernel profile (p50, us from CQE seen): request loaded {}  answer written {}  doorbell {}",
                us(l.p50),
                us(w.p50),
                us(b.turnaround.p50)
            );
        }
    }
    let drops: Vec<String> = r.nic_drops.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        s,
        "  NIC: rx {} tx {} drops: {}",
        r.nic.rx_packets,
        r.nic.tx_packets,
        if drops.is_empty() { "none".into() } else { drops.join(", ") }
    );
    // what the NIC delivered, the transceiver loop answered or refused (a request it could
    // not take: no RPC header, bad magic, an argument past the end, a slot out of range)
    let _ = writeln!(s, "  transceiver loop: answered {}  refused {}", r.backend_processed, r.backend_dropped);
    if r.nic.tx_wqe_rereads > 0 || r.nic.tx_wqe_check_failures > 0 {
        // checked doorbells (abi.h rl_proxy_doorbell): how often a WQE was still landing
        let _ = writeln!(
            s,
            "  NIC: {} checked doorbells re-read until their check held, {} never held (sent in error)",
            r.nic.tx_wqe_rereads, r.nic.tx_wqe_check_failures
        );
    }
    if let Some(p) = &r.peer {
        let _ = writeln!(
            s,
            "  peer: sent {} received {} icrc_failures {} malformed {} stalls {}",
            p.sent, p.received, p.icrc_failures, p.malformed, p.stalls
        );
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

    #[test]
    fn the_summary_says_when_checked_doorbells_were_re_read() {
        let mut r = RunReport::empty();
        assert!(!echo_text(&r).contains("re-read"), "no line when none was");
        r.nic.tx_wqe_rereads = 3;
        assert!(
            echo_text(&r).contains("NIC: 3 checked doorbells re-read until their check held, 0 never held"),
            "{}",
            echo_text(&r)
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["nic"]["tx_wqe_rereads"], 3);
    }
}
