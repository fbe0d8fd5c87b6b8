//! Data-plane counters, readable over ECB in the rocelink extension block
//! (`hsb::ext::STATS_BASE`), and the QEC replay's counters (`hsb::ext::QEC_*`, [`QecStats`]).
//!
//! Who writes: only the data-plane thread (and the ECB thread when it resets them at the
//! start of a run, while the data plane is idle). Who reads: the ECB thread. Every counter
//! is a `Relaxed` atomic: each is a monotonic tally with no data published behind it, so
//! no ordering with other memory is needed (the capture count, which does publish data,
//! lives in [`crate::capture`] and uses Release/Acquire). The QEC times are `Relaxed` u64
//! stores for the same reason; a host reads them after the capture's done bit, whose
//! Release/Acquire pair makes every store of the run visible.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rocelink_wire::hsb::ext;

/// One counter per `hsb::ext::STAT_*` register.
#[derive(Debug, Default)]
pub struct Stats {
    /// WRITE_IMM frames handed to the link.
    pub sent: AtomicU32,
    /// SEND answers to the peer's QP (every one gets a capture record while capturing).
    pub received: AtomicU32,
    /// Frames whose ICRC did not match (PROTOCOLS.md 1).
    pub icrc_failures: AtomicU32,
    /// Frames that did not parse as RoCEv2, or answers without a valid CUQS header.
    pub malformed: AtomicU32,
    /// Times a frame was due but the in-flight limit held it back (counted once per frame).
    pub stalls: AtomicU32,
    /// Well-formed frames we did not expect: other opcodes or QPs, answers to request ids
    /// this run never sent, answers while no run is active.
    pub unexpected: AtomicU32,
    /// Messages whose answer never came (retired after the response timeout).
    pub timeouts: AtomicU32,
    /// Frames with a BTH TVer other than 0, dropped (IBTA 9.6; PROTOCOLS.md 1.2).
    pub bad_tver: AtomicU32,
    /// Frames during a run from an IPv4 source other than the host's (DP_HOST_IP), dropped
    /// (IBTA 9.6: a connected QP accepts its peer only; PROTOCOLS.md 1.2).
    pub wrong_source: AtomicU32,
    /// The QEC replay's counters.
    pub qec: QecStats,
}

/// A copy of the counters at one moment (each read on its own: not a consistent cut).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub sent: u32,
    pub received: u32,
    pub icrc_failures: u32,
    pub malformed: u32,
    pub stalls: u32,
    pub unexpected: u32,
    pub timeouts: u32,
    pub bad_tver: u32,
    pub wrong_source: u32,
}

impl Stats {
    /// Adds one to `counter` (a field of this struct).
    #[inline]
    pub fn bump(counter: &AtomicU32) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds one to `sent` or `received`, which have a single writer while a run is active:
    /// the data-plane thread, the only thread that bumps them (the dataplane after a send,
    /// [`crate::player::Player::on_frame`]). The ECB thread's [`Stats::reset`] writes them
    /// only while no run is active (`running` reads false, Acquire, after the data plane's
    /// last bump and Release store of `running`), and the run's first bump happens after
    /// that reset (the Start command's channel). So a plain load and store cannot lose a
    /// count, and readers see each value grow monotonically; no locked instruction per
    /// packet. Any other counter, or a caller outside a run, uses [`Stats::bump`].
    #[inline]
    pub fn bump_in_run(counter: &AtomicU32) {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    pub fn reset(&self) {
        for c in self.counters() {
            c.store(0, Ordering::Relaxed);
        }
        self.qec.reset();
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let r = |c: &AtomicU32| c.load(Ordering::Relaxed);
        StatsSnapshot {
            sent: r(&self.sent),
            received: r(&self.received),
            icrc_failures: r(&self.icrc_failures),
            malformed: r(&self.malformed),
            stalls: r(&self.stalls),
            unexpected: r(&self.unexpected),
            timeouts: r(&self.timeouts),
            bad_tver: r(&self.bad_tver),
            wrong_source: r(&self.wrong_source),
        }
    }

    /// The counters in register order (STAT_SENT, STAT_RECEIVED, STAT_ICRC_FAILURES,
    /// STAT_MALFORMED, STAT_STALLS, STAT_UNEXPECTED, STAT_TIMEOUTS: one word each from
    /// `STATS_BASE`), then bad_tver and wrong_source (the words after, 0x1C and 0x20).
    pub fn counters(&self) -> [&AtomicU32; 9] {
        [
            &self.sent,
            &self.received,
            &self.icrc_failures,
            &self.malformed,
            &self.stalls,
            &self.unexpected,
            &self.timeouts,
            &self.bad_tver,
            &self.wrong_source,
        ]
    }
}

/// QEC replay counters, one per `hsb::ext::QEC_*` counter register (meanings there).
/// Written by the data-plane thread only.
#[derive(Debug, Default)]
pub struct QecStats {
    pub shots_sent: AtomicU32,
    pub shots_decoded: AtomicU32,
    pub logical_errors: AtomicU32,
    pub disagreements: AtomicU32,
    pub overflows: AtomicU32,
    pub unmatchable: AtomicU32,
    pub rounds_sent: AtomicU32,
    pub bad_answers: AtomicU32,
    pub first_send_ns: AtomicU64,
    pub last_send_ns: AtomicU64,
    pub last_correction_ns: AtomicU64,
    /// Word 0 every non-OK answer, word `s` status `s` (1..=6), word 7 any other status.
    pub status: [AtomicU32; ext::QEC_STATUS_WORDS as usize],
    /// The decode reports' decode_ns (`ext::QEC_DECODE_COUNT ..`).
    pub decode: DecodeTimes,
}

/// A histogram of the decoder's own decode times (`ext::QEC_DECODE_BINS` log-linear bins,
/// `ext::qec_decode_bin`) and their maximum. Written by the data-plane thread only.
#[derive(Debug)]
pub struct DecodeTimes {
    bins: Box<[AtomicU32]>,
    max: AtomicU32,
}

impl Default for DecodeTimes {
    fn default() -> Self {
        DecodeTimes { bins: (0..ext::QEC_DECODE_BINS).map(|_| AtomicU32::new(0)).collect(), max: AtomicU32::new(0) }
    }
}

impl DecodeTimes {
    /// Counts one decode of `ns`.
    #[inline]
    pub fn record(&self, ns: u32) {
        let bin = ext::qec_decode_bin(ns) as usize;
        Stats::bump(&self.bins[bin]);
        if ns > self.max.load(Ordering::Relaxed) {
            self.max.store(ns, Ordering::Relaxed);
        }
    }

    fn reset(&self) {
        for b in self.bins.iter().chain(std::iter::once(&self.max)) {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// Decodes counted.
    pub fn count(&self) -> u32 {
        self.bins.iter().fold(0u32, |a, b| a.wrapping_add(b.load(Ordering::Relaxed)))
    }

    /// The maximum, ns.
    pub fn max(&self) -> u32 {
        self.max.load(Ordering::Relaxed)
    }

    /// The `q` quantile (0 < q <= 1), ns: the upper edge of the bin that holds it (the
    /// maximum when that is the last bin, or below the edge); 0 before any decode.
    pub fn quantile(&self, q: f64) -> u32 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q * f64::from(total)).ceil() as u32).clamp(1, total);
        let mut seen = 0u32;
        for (i, b) in self.bins.iter().enumerate() {
            seen = seen.saturating_add(b.load(Ordering::Relaxed));
            if seen >= rank {
                let edge = ext::qec_decode_bin_edge(i as u32);
                return if i as u32 == ext::QEC_DECODE_BINS - 1 { self.max() } else { edge.min(self.max()) };
            }
        }
        self.max()
    }
}

/// A copy of the QEC counters at one moment (each read on its own): the registers' values,
/// `hsb::QecCounters`.
pub type QecStatsSnapshot = rocelink_wire::hsb::QecCounters;

impl QecStats {
    fn counters(&self) -> [&AtomicU32; 8] {
        [
            &self.shots_sent,
            &self.shots_decoded,
            &self.logical_errors,
            &self.disagreements,
            &self.overflows,
            &self.unmatchable,
            &self.rounds_sent,
            &self.bad_answers,
        ]
    }

    fn times(&self) -> [&AtomicU64; 3] {
        [&self.first_send_ns, &self.last_send_ns, &self.last_correction_ns]
    }

    pub fn reset(&self) {
        for c in self.counters().into_iter().chain(&self.status) {
            c.store(0, Ordering::Relaxed);
        }
        for t in self.times() {
            t.store(0, Ordering::Relaxed);
        }
        self.decode.reset();
    }

    /// Counts an answer with non-OK `status`.
    #[inline]
    pub fn count_status(&self, status: i32) {
        let word = match status {
            1..=6 => status as usize,
            _ => ext::QEC_STATUS_WORDS as usize - 1,
        };
        Stats::bump(&self.status[0]);
        Stats::bump(&self.status[word]);
    }

    /// The counter register at `addr` (`ext::QEC_SHOTS_SENT ..`, the time words and
    /// `ext::QEC_STATUS_COUNTS ..`); `None` for any other address.
    pub fn read_register(&self, addr: u32) -> Option<u32> {
        let r = |c: &AtomicU32| c.load(Ordering::Relaxed);
        let counters_end = ext::QEC_SHOTS_SENT + 4 * self.counters().len() as u32;
        let times_end = ext::QEC_FIRST_SEND_LO + 8 * self.times().len() as u32;
        let status_end = ext::QEC_STATUS_COUNTS + 4 * ext::QEC_STATUS_WORDS;
        if (ext::QEC_SHOTS_SENT..counters_end).contains(&addr) {
            Some(r(self.counters()[((addr - ext::QEC_SHOTS_SENT) / 4) as usize]))
        } else if (ext::QEC_FIRST_SEND_LO..times_end).contains(&addr) {
            let off = addr - ext::QEC_FIRST_SEND_LO;
            let t = self.times()[(off / 8) as usize].load(Ordering::Relaxed);
            Some(if off % 8 < 4 { t as u32 } else { (t >> 32) as u32 })
        } else if (ext::QEC_STATUS_COUNTS..status_end).contains(&addr) {
            Some(r(&self.status[((addr - ext::QEC_STATUS_COUNTS) / 4) as usize]))
        } else {
            match addr {
                ext::QEC_DECODE_COUNT => Some(self.decode.count()),
                ext::QEC_DECODE_P50_NS => Some(self.decode.quantile(0.5)),
                ext::QEC_DECODE_P99_NS => Some(self.decode.quantile(0.99)),
                ext::QEC_DECODE_MAX_NS => Some(self.decode.max()),
                _ => None,
            }
        }
    }

    pub fn snapshot(&self) -> QecStatsSnapshot {
        let r = |c: &AtomicU32| c.load(Ordering::Relaxed);
        let t = |c: &AtomicU64| c.load(Ordering::Relaxed);
        QecStatsSnapshot {
            shots_sent: r(&self.shots_sent),
            shots_decoded: r(&self.shots_decoded),
            logical_errors: r(&self.logical_errors),
            disagreements: r(&self.disagreements),
            overflows: r(&self.overflows),
            unmatchable: r(&self.unmatchable),
            rounds_sent: r(&self.rounds_sent),
            bad_answers: r(&self.bad_answers),
            first_send_ns: t(&self.first_send_ns),
            last_send_ns: t(&self.last_send_ns),
            last_correction_ns: t(&self.last_correction_ns),
            status: std::array::from_fn(|i| r(&self.status[i])),
            decode: rocelink_wire::hsb::DecoderTime {
                count: self.decode.count(),
                p50_ns: self.decode.quantile(0.5),
                p99_ns: self.decode.quantile(0.99),
                max_ns: self.decode.max(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_times_give_bin_edge_percentiles_and_the_exact_maximum() {
        let q = QecStats::default();
        assert_eq!(q.read_register(ext::QEC_DECODE_COUNT), Some(0));
        assert_eq!(q.read_register(ext::QEC_DECODE_P99_NS), Some(0));
        // 98 decodes of 100 ns (bin 3: up to 128), one of 1000 (bin 31: up to 1024), one of
        // 40 us (a log bin: 40,000 ns is 1250 units, in [1216, 1280) units, up to 40,960 ns)
        for _ in 0..98 {
            q.decode.record(100);
        }
        q.decode.record(1000);
        q.decode.record(40_000);
        assert_eq!(q.read_register(ext::QEC_DECODE_COUNT), Some(100));
        assert_eq!(q.read_register(ext::QEC_DECODE_P50_NS), Some(128));
        assert_eq!(q.read_register(ext::QEC_DECODE_P99_NS), Some(1024));
        assert_eq!(q.read_register(ext::QEC_DECODE_MAX_NS), Some(40_000));
        assert_eq!(q.decode.quantile(1.0), 40_000, "a percentile is never above the maximum");
        // Milliseconds keep their percentiles (3% bins), beyond the old 16 us linear range.
        let m = QecStats::default();
        for ns in [20_000u32, 500_000, 900_000, 1_000_000, 3_000_000] {
            for _ in 0..20 {
                m.decode.record(ns);
            }
        }
        let p50 = m.decode.quantile(0.5);
        assert!((900_000..=900_000 * 103 / 100).contains(&p50), "{p50}");
        assert_eq!(m.decode.quantile(1.0), 3_000_000);
        // a percentile is never above the maximum
        let r = QecStats::default();
        r.decode.record(5);
        assert_eq!(r.decode.quantile(0.5), 5);
        let s = q.snapshot();
        assert_eq!((s.decode.count, s.decode.p50_ns, s.decode.p99_ns, s.decode.max_ns), (100, 128, 1024, 40_000));
        q.reset();
        assert_eq!(q.read_register(ext::QEC_DECODE_COUNT), Some(0));
        assert_eq!(q.read_register(ext::QEC_DECODE_MAX_NS), Some(0));
    }

    #[test]
    fn qec_registers_follow_the_map() {
        let q = QecStats::default();
        q.shots_sent.store(1, Ordering::Relaxed);
        q.bad_answers.store(8, Ordering::Relaxed);
        q.last_correction_ns.store(0x1234_5678_9ABC_DEF0, Ordering::Relaxed);
        q.count_status(6);
        q.count_status(-3);
        assert_eq!(q.read_register(ext::QEC_SHOTS_SENT), Some(1));
        assert_eq!(q.read_register(ext::QEC_BAD_ANSWERS), Some(8));
        assert_eq!(q.read_register(ext::QEC_LAST_CORRECTION_LO), Some(0x9ABC_DEF0));
        assert_eq!(q.read_register(ext::QEC_LAST_CORRECTION_HI), Some(0x1234_5678));
        assert_eq!(q.read_register(ext::QEC_STATUS_COUNTS), Some(2));
        assert_eq!(q.read_register(ext::QEC_STATUS_COUNTS + 24), Some(1));
        assert_eq!(q.read_register(ext::QEC_STATUS_COUNTS + 28), Some(1));
        assert_eq!(q.read_register(ext::QEC_STATUS_COUNTS + 32), Some(0), "the decode count follows the status words");
        assert_eq!(q.read_register(ext::QEC_DECODE_MAX_NS + 4), None);
        assert_eq!(q.read_register(ext::QEC_LAST_CORRECTION_HI + 4), None);
        assert_eq!(q.read_register(ext::QEC_BAD_ANSWERS + 4), Some(0), "first send, low word");
        // Every named register is served.
        for a in [
            ext::QEC_SHOTS_SENT,
            ext::QEC_SHOTS_DECODED,
            ext::QEC_LOGICAL_ERRORS,
            ext::QEC_DISAGREEMENTS,
            ext::QEC_OVERFLOWS,
            ext::QEC_UNMATCHABLE,
            ext::QEC_ROUNDS_SENT,
            ext::QEC_BAD_ANSWERS,
            ext::QEC_FIRST_SEND_LO,
            ext::QEC_FIRST_SEND_HI,
            ext::QEC_LAST_SEND_LO,
            ext::QEC_LAST_SEND_HI,
            ext::QEC_LAST_CORRECTION_LO,
            ext::QEC_LAST_CORRECTION_HI,
            ext::QEC_DECODE_COUNT,
            ext::QEC_DECODE_P50_NS,
            ext::QEC_DECODE_P99_NS,
            ext::QEC_DECODE_MAX_NS,
        ] {
            assert!(q.read_register(a).is_some(), "{a:#x}");
        }
        q.reset();
        assert_eq!(q.snapshot(), QecStatsSnapshot::default());
    }
}
