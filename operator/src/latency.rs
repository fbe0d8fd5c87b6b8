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
    /// Answers the peer captured but overwrote (its capture RAM is a ring) before the host
    /// read them: answered, not measured.
    pub uncaptured: u64,
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
    /// Round trips in arrival order (ns), warm-up excluded, for plots: the first
    /// [`MAX_SAMPLES`] of them.
    pub samples: Vec<u64>,
    /// Capture records that were all zeros (no record: a peer without capture RAM).
    pub blank: u64,
    /// Records read, blank ones included.
    pub records: u64,
    /// The earliest send stamp and the latest arrival stamp of the answers received (ns, the
    /// peer's clock), warm-up included: the span an open-loop run's rate is measured over.
    pub span_ns: Option<(u64, u64)>,
}

impl Analysis {
    /// Answers per microsecond over [`Analysis::span_ns`], when it is not empty.
    pub fn answers_per_us(&self) -> Option<f64> {
        let (first, last) = self.span_ns?;
        (last > first && self.counts.received > 0).then(|| 1000.0 * self.counts.received as f64 / (last - first) as f64)
    }

    /// The peer's capture held no record at all, though records were read: its capture RAM
    /// is missing (it reads 0 with status OK), not its answers.
    pub fn capture_missing(&self) -> bool {
        self.records > 0 && self.blank == self.records
    }
}

/// Round trips [`Analysis::samples`] keeps (8 MiB); the histogram holds every one.
pub const MAX_SAMPLES: usize = 1 << 20;

/// Request ids the duplicate check remembers behind the highest one answered (a multiple of
/// 64; 128 KiB), far more than can be in flight: an answer to an older request is stale.
const SEEN_WINDOW: u64 = 1 << 20;

/// The capture analysed as it is read, in constant memory: counts, the round-trip histogram,
/// the first [`MAX_SAMPLES`] round trips, and a sliding window of the request ids answered.
#[derive(Debug, Clone)]
pub struct Analyzer {
    first_request_id: u32,
    /// Requests the run may send: an answer to a request beyond them is stale or forged.
    planned: u64,
    warmup: u64,
    counts: Counts,
    rtt: Histogram<u64>,
    samples: Vec<u64>,
    /// Bit `i % SEEN_WINDOW`: request `i` answered, for `i` in `highest - SEEN_WINDOW + 1 ..= highest`.
    seen: Vec<u64>,
    highest: Option<u64>,
    blank: u64,
    records: u64,
    span: Option<(u64, u64)>,
}

impl Analyzer {
    /// For a run of at most `planned` requests numbered from `first_request_id`; the first
    /// `warmup` are counted but left out of the latency distribution.
    pub fn new(first_request_id: u32, planned: u64, warmup: u64) -> Analyzer {
        Analyzer {
            first_request_id,
            planned,
            warmup,
            counts: Counts::default(),
            rtt: new_histogram(),
            samples: Vec::new(),
            seen: vec![0; (SEEN_WINDOW / 64) as usize],
            highest: None,
            blank: 0,
            records: 0,
            span: None,
        }
    }

    /// Bit of request `idx` in the window.
    fn bit(&mut self, idx: u64) -> (&mut u64, u64) {
        let i = idx % SEEN_WINDOW;
        (&mut self.seen[(i / 64) as usize], 1 << (i % 64))
    }

    /// Moves the window's top to `idx`, clearing the bits of the requests it takes in.
    fn advance(&mut self, idx: u64) {
        let from = self.highest.map_or(0, |h| h + 1);
        if idx < from {
            return;
        }
        if idx - from >= SEEN_WINDOW {
            self.seen.iter_mut().for_each(|w| *w = 0);
        } else {
            for k in from..=idx {
                let (w, b) = self.bit(k);
                *w &= !b;
            }
        }
        self.highest = Some(idx);
    }

    /// One capture record, in arrival order.
    pub fn push(&mut self, r: &CaptureRecord) {
        self.records += 1;
        if r.is_blank() {
            self.blank += 1;
            return;
        }
        let idx = u64::from(r.request_id.wrapping_sub(self.first_request_id));
        let too_old = self.highest.is_some_and(|h| idx + SEEN_WINDOW <= h);
        if idx >= self.planned || too_old {
            // Not a request of this run (stale or forged), or older than any in flight.
            self.counts.corrupted += 1;
            return;
        }
        let before = self.highest;
        self.advance(idx);
        let (w, b) = self.bit(idx);
        if *w & b != 0 || r.flags & capture_flags::DUPLICATE != 0 {
            self.counts.duplicated += 1;
            return;
        }
        *w |= b;
        self.counts.received += 1;
        let (sent, arrived) = (r.echoed_timestamp, r.arrival_timestamp);
        self.span = Some(self.span.map_or((sent, arrived), |(f, l)| (f.min(sent), l.max(arrived))));
        if before.is_some_and(|h| idx < h) {
            self.counts.reordered += 1;
        }
        let ok = r.flags & capture_flags::PAYLOAD_OK != 0 && r.flags & capture_flags::HEADER_OK != 0;
        if !ok {
            self.counts.corrupted += 1;
            return;
        }
        if idx >= self.warmup {
            let t = r.round_trip().max(1);
            let _ = self.rtt.record(t.min(self.rtt.high()));
            if self.samples.len() < MAX_SAMPLES {
                self.samples.push(t);
            }
        }
    }

    /// The round trips so far (for a progress line).
    pub fn rtt(&self) -> &Histogram<u64> {
        &self.rtt
    }

    /// Requests up to the highest one answered (0 before any answer).
    pub fn answered_upto(&self) -> u64 {
        self.highest.map_or(0, |h| h + 1)
    }

    /// The analysis of a run that sent `sent` requests, of whose answers `uncaptured` were
    /// counted by the peer but overwritten before they could be read (neither received nor
    /// lost).
    pub fn finish(self, sent: u64, uncaptured: u64) -> Analysis {
        let mut counts = self.counts;
        counts.sent = sent;
        counts.uncaptured = uncaptured;
        counts.lost = sent.saturating_sub(counts.received + uncaptured);
        Analysis {
            counts,
            rtt: self.rtt,
            samples: self.samples,
            blank: self.blank,
            records: self.records,
            span_ns: self.span,
        }
    }
}

/// Analyses the records of a run of `sent` requests numbered from `first_request_id`;
/// the first `warmup` requests are counted but left out of the latency distribution.
pub fn analyze(records: &[CaptureRecord], sent: u64, first_request_id: u32, warmup: u64) -> Analysis {
    let mut a = Analyzer::new(first_request_id, sent, warmup);
    for r in records {
        a.push(r);
    }
    a.finish(sent, 0)
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

impl Breakdown {
    /// The split at p50, in words and microseconds: the one text of every report.
    pub fn p50_text(&self) -> String {
        format!(
            "wire and NIC in {}, data-path turnaround {}, the rest (CQE to the data path, doorbell to the NIC, NIC and wire out) {} us",
            us(self.wire_nic_in.p50),
            us(self.turnaround.p50),
            us(self.rest.p50)
        )
    }
}

/// Nanoseconds as microseconds with two decimals, as every report prints them.
pub fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
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
    let by_id: std::collections::HashMap<u32, &crate::abi::rl_msg_timestamp> =
        stamps.iter().map(|s| (s.request_id, s)).collect();
    let (mut a, mut b, mut c) = (new_histogram(), new_histogram(), new_histogram());
    let (mut d, mut e) = (new_histogram(), new_histogram());
    let (mut p0, mut p1) = (new_histogram(), new_histogram());
    let mut matched = 0;
    let ok = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
    for r in records {
        if r.flags & ok != ok
            || r.flags & capture_flags::DUPLICATE != 0
            || u64::from(r.request_id.wrapping_sub(first_request_id)) < warmup
        {
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
        crate::abi::rl_msg_timestamp {
            cqe_seen_ns: seen,
            doorbell_ns: doorbell,
            nic_cqe_ns: nic_cqe,
            request_id: id,
            slot: 0,
            byte_count: 64,
            sq_index,
            profile: [0; 2],
        }
    }

    #[test]
    fn breakdown_splits_the_rest_by_the_send_trace_where_it_holds_the_answer() {
        let ok = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
        // sent at 1000, CQE written at 1300, turnaround 500 (the data path's clock), frame out
        // at 2600, answer taken at 3000
        let records = [rec(1, 1000, 2000, ok), rec(2, 5000, 2000, ok), rec(3, 9000, 2000, ok)];
        let stamps =
            [stamp(1, 1300, 50_000, 50_500, 0), stamp(2, 5300, 60_000, 60_500, 2), stamp(3, 9300, 70_000, 70_500, 4)];
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
        CaptureRecord {
            request_id: id,
            echoed_timestamp: sent,
            arrival_timestamp: sent + rtt,
            flags,
            result_len: 8,
            rpc_status: 0,
        }
    }
    const OK: u32 = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;

    #[test]
    fn counts_every_kind_of_trouble() {
        let records = [
            rec(100, 0, 1000, OK),
            rec(102, 10, 2000, OK),
            rec(101, 20, 3000, OK),                       // reordered
            rec(102, 30, 4000, OK),                       // duplicate
            rec(103, 40, 5000, capture_flags::HEADER_OK), // corrupted payload
            rec(7, 50, 1, OK),                            // not of this run
        ];
        let a = analyze(&records, 5, 100, 0);
        assert_eq!(
            a.counts,
            Counts { sent: 5, received: 4, lost: 1, duplicated: 1, reordered: 1, corrupted: 2, uncaptured: 0 }
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

    #[test]
    fn the_rate_spans_the_first_send_to_the_last_arrival() {
        // 10 answers, sent every 1000 ns from 5000, each back 500 ns later, out of order;
        // a duplicate does not count
        let mut records: Vec<_> = (0..10u32).rev().map(|i| rec(i, 5000 + 1000 * u64::from(i), 500, OK)).collect();
        records.push(rec(3, 8000, 900, OK));
        let a = analyze(&records, 10, 0, 2);
        assert_eq!(a.span_ns, Some((5000, 14_500)));
        let r = a.answers_per_us().unwrap();
        assert!((r - 10.0 / 9.5).abs() < 1e-12, "{r}");
        assert_eq!(analyze(&[], 10, 0, 0).answers_per_us(), None);
        let o = crate::report::OpenLoopRate::of(1_000_000.0, Some(r)).unwrap();
        assert!(o.keeps_up && (o.offered_per_us - 1.0).abs() < 1e-12, "{o:?}");
        assert!(!crate::report::OpenLoopRate::of(2_000_000.0, Some(r)).unwrap().keeps_up);
    }

    #[test]
    fn blank_records_are_no_records() {
        let records = vec![CaptureRecord::default(); 5];
        let a = analyze(&records, 5, 1, 0);
        assert!(a.capture_missing());
        assert_eq!((a.counts.received, a.counts.corrupted, a.counts.lost, a.blank), (0, 0, 5, 5));
        let mut mixed = records.clone();
        mixed.push(rec(1, 0, 10, OK));
        assert!(!analyze(&mixed, 5, 1, 0).capture_missing());
        assert!(!analyze(&[], 5, 1, 0).capture_missing(), "nothing read is not a missing capture");
    }

    #[test]
    fn a_long_run_keeps_constant_memory_and_still_finds_duplicates() {
        let n = 3 * SEEN_WINDOW;
        let mut a = Analyzer::new(0, n + 10, 0);
        for i in 0..n {
            a.push(&rec(i as u32, i, 100 + i % 7, OK));
            if i % 100_000 == 99_999 {
                // an answer again, long after the first
                a.push(&rec((i - 1000) as u32, i, 100, OK));
            }
        }
        // far older than the window: stale
        a.push(&rec(5, 0, 100, OK));
        let f = a.finish(n + 10, 4);
        assert_eq!(f.counts.received, n);
        assert_eq!(f.counts.duplicated, n / 100_000);
        assert_eq!(f.counts.corrupted, 1);
        assert_eq!(f.counts.lost, 6, "sent - received - uncaptured");
        assert_eq!(f.samples.len(), MAX_SAMPLES);
        assert_eq!(f.rtt.len(), n);
    }
}
