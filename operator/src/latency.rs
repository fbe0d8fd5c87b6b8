//! Turning a peer's capture into what a latency run reports: the counts (sent, received,
//! lost, duplicated, reordered, corrupted) and the round-trip distribution (HdrHistogram,
//! nanoseconds, warm-up discarded).

use hdrhistogram::Histogram;
use rocelink_wire::hsb::{capture_flags, CaptureRecord};

/// Message counts of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub sent: u64,
    /// Distinct requests answered.
    pub received: u64,
    pub lost: u64,
    /// Answers to a request already answered.
    pub duplicated: u64,
    /// Answers that arrived after an answer to a later request.
    pub reordered: u64,
    /// Answers whose header or payload differ from what was sent.
    pub corrupted: u64,
}

/// Percentiles of a distribution, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub count: u64,
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Summary {
    pub fn of(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        Summary {
            count: h.len(),
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// A histogram for nanosecond latencies from 1 ns to 10 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid histogram bounds")
}

/// The analysed capture.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub counts: Counts,
    pub rtt: Histogram<u64>,
    /// Round trips in arrival order (ns), warm-up excluded, for plots.
    pub samples: Vec<u64>,
}

/// Analyses the records of a run of `sent` requests numbered from `first_request_id`;
/// the first `warmup` requests are counted but left out of the latency distribution.
pub fn analyze(records: &[CaptureRecord], sent: u64, first_request_id: u32, warmup: u64) -> Analysis {
    let mut seen = vec![false; sent as usize];
    let mut counts = Counts { sent, ..Default::default() };
    let mut rtt = new_histogram();
    let mut samples = Vec::with_capacity(records.len());
    let mut highest: Option<u64> = None;
    for r in records {
        let idx = u64::from(r.request_id.wrapping_sub(first_request_id));
        if idx >= sent {
            // Not a request of this run: a stale or forged answer.
            counts.corrupted += 1;
            continue;
        }
        if seen[idx as usize] || r.flags & capture_flags::DUPLICATE != 0 {
            counts.duplicated += 1;
            continue;
        }
        seen[idx as usize] = true;
        counts.received += 1;
        if highest.is_some_and(|h| idx < h) {
            counts.reordered += 1;
        }
        highest = Some(highest.map_or(idx, |h| h.max(idx)));
        let ok = r.flags & capture_flags::PAYLOAD_OK != 0 && r.flags & capture_flags::HEADER_OK != 0;
        if !ok {
            counts.corrupted += 1;
            continue;
        }
        if idx >= warmup {
            let t = r.round_trip().max(1);
            let _ = rtt.record(t.min(rtt.high()));
            samples.push(t);
        }
    }
    counts.lost = sent - counts.received;
    Analysis { counts, rtt, samples }
}

/// Where the round trips went, from the peer's capture joined by request id with the data
/// path's timestamp records. Valid when the peer and the NIC stamp with the same clock (the
/// software NIC and fpga-sim on one host: CLOCK_MONOTONIC).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Breakdown {
    /// Peer send -> the NIC wrote the CQE (wire and NIC in).
    pub wire_nic_in: Summary,
    /// The data path saw the CQE -> it rang the doorbell (data-path clock).
    pub turnaround: Summary,
    /// The rest: CQE to the data path's eyes, doorbell to the NIC, NIC and wire out.
    pub rest: Summary,
    /// The rest split by the NIC's send trace (`nic::SendTrace`), when it held any of the
    /// round trips (their count: `rest_split.wire_out.count`).
    pub rest_split: Option<RestSplit>,
    /// Round trips that had a timestamp record.
    pub matched: u64,
    /// Kernels built with RL_PROFILE: CQE seen -> request loaded, and -> answer written
    /// (before the doorbell's fence).
    pub profile_loaded: Option<Summary>,
    pub profile_written: Option<Summary>,
}

/// [`Breakdown::rest`] for the round trips the NIC's send trace holds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RestSplit {
    /// The NIC wrote the CQE -> the answer's frame left, less the turnaround: the data path's
    /// poll seeing the CQE, its doorbell reaching the NIC, the NIC's send work.
    pub to_nic_sent: Summary,
    /// The frame left -> the peer took the answer (the wire out and the peer's receive).
    pub wire_out: Summary,
}

/// Joins `records` (peer capture) with `stamps` (data path) on request id, and the stamps with
/// `trace` (the NIC's send times) on the answer's send-queue index when there is one.
pub fn breakdown(
    records: &[CaptureRecord],
    stamps: &[crate::abi::rl_msg_timestamp],
    first_request_id: u32,
    warmup: u64,
    trace: Option<&crate::nic::SendTrace>,
) -> Breakdown {
    let by_id: std::collections::HashMap<u32, &crate::abi::rl_msg_timestamp> = stamps.iter().map(|s| (s.request_id, s)).collect();
    let (mut a, mut b, mut c) = (new_histogram(), new_histogram(), new_histogram());
    let (mut d, mut e) = (new_histogram(), new_histogram());
    let (mut p0, mut p1) = (new_histogram(), new_histogram());
    let mut matched = 0;
    let ok = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
    for r in records {
        if r.flags & ok != ok || r.flags & capture_flags::DUPLICATE != 0 || u64::from(r.request_id.wrapping_sub(first_request_id)) < warmup {
            continue;
        }
        let Some(s) = by_id.get(&r.request_id) else { continue };
        let rtt = r.round_trip();
        let into = s.nic_cqe_ns.wrapping_sub(r.echoed_timestamp);
        let turn = s.doorbell_ns.wrapping_sub(s.cqe_seen_ns);
        if into > rtt || turn > rtt || into + turn > rtt {
            continue; // clocks that do not line up: leave the message out
        }
        let _ = a.record(into.max(1));
        let _ = b.record(turn.max(1));
        let _ = c.record((rtt - into - turn).max(1));
        // the frame left after the CQE was written and the turnaround, before the peer took it
        if let Some(sent) = trace.and_then(|t| t.sent_ns(s.sq_index)) {
            let to_sent = sent.wrapping_sub(s.nic_cqe_ns);
            let out = r.arrival_timestamp.wrapping_sub(sent);
            if to_sent >= turn && to_sent <= rtt && out <= rtt && into + to_sent + out == rtt {
                let _ = d.record((to_sent - turn).max(1));
                let _ = e.record(out.max(1));
            }
        }
        if s.profile[1] != 0 {
            let _ = p0.record(u64::from(s.profile[0]).max(1));
            let _ = p1.record(u64::from(s.profile[1]).max(1));
        }
        matched += 1;
    }
    let prof = |h: &Histogram<u64>| (!h.is_empty()).then(|| Summary::of(h));
    Breakdown {
        wire_nic_in: Summary::of(&a),
        turnaround: Summary::of(&b),
        rest: Summary::of(&c),
        rest_split: (!e.is_empty()).then(|| RestSplit { to_nic_sent: Summary::of(&d), wire_out: Summary::of(&e) }),
        matched,
        profile_loaded: prof(&p0),
        profile_written: prof(&p1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(id: u32, nic_cqe: u64, seen: u64, doorbell: u64, sq_index: u32) -> crate::abi::rl_msg_timestamp {
        crate::abi::rl_msg_timestamp { cqe_seen_ns: seen, doorbell_ns: doorbell, nic_cqe_ns: nic_cqe, request_id: id, slot: 0, byte_count: 64, sq_index, profile: [0; 2] }
    }

    #[test]
    fn breakdown_splits_the_rest_by_the_send_trace_where_it_holds_the_answer() {
        let ok = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
        // sent at 1000, CQE written at 1300, turnaround 500 (the data path's clock), frame out
        // at 2600, answer taken at 3000
        let records = [rec(1, 1000, 2000, ok), rec(2, 5000, 2000, ok), rec(3, 9000, 2000, ok)];
        let stamps = [stamp(1, 1300, 50_000, 50_500, 0), stamp(2, 5300, 60_000, 60_500, 2), stamp(3, 9300, 70_000, 70_500, 4)];
        let trace = crate::nic::SendTrace::new(16);
        trace.record(0, 2600);
        trace.record(2, 6600);
        // message 3's entry says the frame left before its CQE was written: left out
        trace.record(4, 9200);
        let b = breakdown(&records, &stamps, 1, 0, Some(&trace));
        let split = b.rest_split.expect("split");
        assert_eq!((b.matched, split.wire_out.count), (3, 2));
        assert_eq!((b.wire_nic_in.p50, b.turnaround.p50, b.rest.p50), (300, 500, 1200));
        let (n, w) = (split.to_nic_sent, split.wire_out);
        // CQE -> sent 1300, less the turnaround: 800; sent -> taken: 400; 800 + 400 = the rest
        assert_eq!((n.p50, w.p50), (800, 400));
        // without a trace, no split
        let b = breakdown(&records, &stamps, 1, 0, None);
        assert_eq!(b.rest_split, None);
    }

    fn rec(id: u32, sent: u64, rtt: u64, flags: u32) -> CaptureRecord {
        CaptureRecord { request_id: id, echoed_timestamp: sent, arrival_timestamp: sent + rtt, flags, result_len: 8, rpc_status: 0 }
    }
    const OK: u32 = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;

    #[test]
    fn counts_every_kind_of_trouble() {
        let records = [
            rec(100, 0, 1000, OK),
            rec(102, 10, 2000, OK),
            rec(101, 20, 3000, OK),               // reordered
            rec(102, 30, 4000, OK),               // duplicate
            rec(103, 40, 5000, capture_flags::HEADER_OK), // corrupted payload
            rec(7, 50, 1, OK),                    // not of this run
        ];
        let a = analyze(&records, 5, 100, 0);
        assert_eq!(
            a.counts,
            Counts { sent: 5, received: 4, lost: 1, duplicated: 1, reordered: 1, corrupted: 2 }
        );
        let s = Summary::of(&a.rtt);
        assert_eq!(s.count, 3);
        assert_eq!(s.min, 1000);
        assert!(s.max >= 3000 && s.max < 3010);
    }

    #[test]
    fn warmup_is_counted_but_not_measured() {
        let records: Vec<_> = (0..10).map(|i| rec(i, 0, 100 + u64::from(i), OK)).collect();
        let a = analyze(&records, 10, 0, 4);
        assert_eq!(a.counts.received, 10);
        assert_eq!(Summary::of(&a.rtt).count, 6);
        assert_eq!(Summary::of(&a.rtt).min, 104);
    }
}
