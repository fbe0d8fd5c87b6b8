//! The `qec` section of a QEC graph's run report: what it holds, the lines of the summary and
//! the Markdown section of the report files. `graph::qec` fills it from the run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::hsb::DecoderTime;
use crate::latency::Summary;

/// What a QEC run measured: the report's `qec` section.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QecReport {
    /// The `QecDecoder` stage and its DEM.
    pub decoder: String,
    pub dem: String,
    /// The replay's detection events (`None`: a peer already running, with its own).
    pub dets: Option<String>,
    /// The replay as the peer reports it (QEC_* registers).
    pub loaded_shots: u32,
    pub detectors: u32,
    pub observables: u32,
    pub rounds_per_shot: u32,
    pub rounds_per_message: u32,
    pub messages_per_shot: u32,
    pub max_message_bytes: u32,
    /// `closed-loop` or `round-cycle`.
    pub load: String,
    /// The syndrome cycle as the peer runs it (whole player clocks), ns per round.
    pub round_cycle_ns: Option<f64>,
    /// Shots whose messages all left / whose correction came back well-formed.
    pub shots_sent: u64,
    pub shots_decoded: u64,
    pub rounds_sent: u64,
    /// Decoded shots whose correction is not the true observable flip.
    pub logical_errors: u64,
    /// `logical_errors / shots_decoded`.
    pub logical_error_rate: f64,
    /// A reference prediction (PyMatching's) is loaded.
    pub reference: bool,
    /// The reference's own logical errors on the shots decoded (`None` without a reference,
    /// or against a peer with several observables whose files are not here).
    pub reference_logical_errors: Option<u64>,
    /// Decoded shots whose correction differs from the reference (`None` without one).
    pub disagreements: Option<u64>,
    /// Of those, the shots above the defect cap (answered by the fallback, exact only when the
    /// shot's clusters all fit under the cap, so not expected to agree); the rest are
    /// disagreements of the exact matcher (ties).
    pub disagreements_on_overflow: Option<u64>,
    /// Shots above the decoder's defect cap, answered by its fallback.
    pub overflows: u64,
    /// Shots without a perfect matching.
    pub unmatchable: u64,
    /// OK answers of the wrong form (a result before the final round, or a final answer
    /// without correction and decode report).
    pub bad_answers: u64,
    /// Answers with a non-OK status, by status name (only those seen).
    pub status: BTreeMap<String, u64>,
    /// Messages never answered within the peer's response timeout.
    pub unanswered: u64,
    /// Shots at the start left out of the reaction latency.
    pub warmup_shots: u32,
    /// Final round sent to correction back (the final message's round trip), ns, over the
    /// shots decoded after the warm-up.
    pub reaction_ns: Summary,
    /// Rounds decoded per microsecond, first message sent to last correction back.
    pub throughput_rounds_per_us: Option<f64>,
    /// Rounds per microsecond the syndrome cycle offers (`None` in closed loop).
    pub offered_rounds_per_us: Option<f64>,
    /// Whether the throughput reaches `graph::qec::KEEP_UP_SHARE` of the offered rounds (`None` in
    /// closed loop: there is no cycle to keep up with).
    pub keeps_up: Option<bool>,
    /// The transceiver loop's time for each shot's final message (receive CQE seen to send
    /// doorbell, the backend's clock): the decode plus the loop's own per-message work. From
    /// the data path's record ring (its last `tap_ring` messages), warm-up left out.
    pub final_round_loop_ns: Summary,
    /// The same for the other messages (appended to the shot, nothing decoded): the loop's
    /// own share of the final figure.
    pub other_rounds_loop_ns: Summary,
    /// The decoder's own decode time, from the decode reports of every decoded shot (warm-up
    /// included; the peer's histogram: hsb::ext::QEC_DECODE_COUNT): the GPU stage times itself
    /// with %globaltimer, the CPU stage with its clock. `None` from a peer without it.
    pub decoder_time: Option<DecoderTime>,
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
}

/// The lines `rocelink run` prints for the `qec` section.
pub fn summary_text(q: &QecReport) -> String {
    let mut s = String::new();
    let cycle = q
        .round_cycle_ns
        .map_or_else(|| "closed loop".to_string(), |ns| format!("syndrome cycle {:.3} us per round", ns / 1000.0));
    let _ = writeln!(
        s,
        "  qec: decoder `{}`, {} detectors in {} rounds, rounds per message {} ({} messages per shot), {cycle}",
        q.decoder, q.detectors, q.rounds_per_shot, q.rounds_per_message, q.messages_per_shot
    );
    let on_overflow = q
        .disagreements_on_overflow
        .filter(|n| *n > 0)
        .map_or_else(String::new, |n| format!(" ({n} on overflow shots)"));
    let reference = match (q.reference_logical_errors, q.disagreements) {
        (Some(e), Some(d)) => format!("; reference (PyMatching) {e} on the same shots, {d} disagreements{on_overflow}"),
        (None, Some(d)) => format!("; {d} disagreements with the reference{on_overflow}"),
        _ => "; no reference loaded".into(),
    };
    let _ = writeln!(
        s,
        "  shots sent {}  decoded {}  logical errors {} ({:.2e} per shot){reference}",
        q.shots_sent, q.shots_decoded, q.logical_errors, q.logical_error_rate
    );
    let status: Vec<String> = q.status.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        s,
        "  overflows {}  unmatchable {}  bad answers {}  non-OK statuses: {}  unanswered {}",
        q.overflows,
        q.unmatchable,
        q.bad_answers,
        if status.is_empty() { "none".into() } else { status.join(", ") },
        q.unanswered
    );
    let t = &q.reaction_ns;
    let _ = writeln!(s, "  reaction latency (us, final round sent to correction back, {} shots): min {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}", t.count, us(t.min), us(t.p50), us(t.p90), us(t.p99), us(t.p999), us(t.max));
    let thr = q.throughput_rounds_per_us.map_or_else(|| "n/a".to_string(), |t| format!("{t:.3}"));
    let keep = match (q.offered_rounds_per_us, q.keeps_up) {
        (Some(o), Some(k)) => format!(" of {o:.3} offered: {}", if k { "keeps up" } else { "FALLS BEHIND" }),
        _ => " (closed loop)".into(),
    };
    let l = &q.final_round_loop_ns;
    let _ = writeln!(s, "  throughput {thr} rounds/us{keep}; loop time per final message (decode) p50 {} p99 {} us, other messages p50 {} us", us(l.p50), us(l.p99), us(q.other_rounds_loop_ns.p50));
    if let Some(d) = &q.decoder_time {
        let _ = writeln!(
            s,
            "  decode time, the decoder's own (its reports, {} shots): p50 {} p99 {} max {} us",
            d.count,
            us(d.p50_ns.into()),
            us(d.p99_ns.into()),
            us(d.max_ns.into())
        );
    }
    s
}

/// The Markdown section of the report files.
pub fn markdown(q: &QecReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## QEC decoding\n");
    let _ = writeln!(
        s,
        "Decoder `{}` on `{}`; shots from `{}`: {} loaded, {} detectors in {} rounds, {} observable(s); rounds per message {} ({} messages per shot, up to {} bytes); {}.\n",
        q.decoder,
        q.dem,
        q.dets.as_deref().unwrap_or("the peer's own replay"),
        q.loaded_shots,
        q.detectors,
        q.rounds_per_shot,
        q.observables,
        q.rounds_per_message,
        q.messages_per_shot,
        q.max_message_bytes,
        q.round_cycle_ns.map_or_else(|| "closed loop (one message in flight)".to_string(), |ns| format!("a fixed syndrome cycle of {:.3} us per round", ns / 1000.0))
    );
    let opt = |v: Option<u64>| v.map_or_else(|| "n/a".to_string(), |v| v.to_string());
    let _ = writeln!(s, "| shots sent | decoded | logical errors | reference's logical errors | disagreements | of them on overflow shots | overflows | unmatchable | bad answers | unanswered |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        q.shots_sent,
        q.shots_decoded,
        q.logical_errors,
        opt(q.reference_logical_errors),
        opt(q.disagreements),
        opt(q.disagreements_on_overflow),
        q.overflows,
        q.unmatchable,
        q.bad_answers,
        q.unanswered
    );
    if !q.status.is_empty() {
        let st: Vec<String> = q.status.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "\nAnswers with a non-OK status: {}.", st.join(", "));
    }
    let _ =
        writeln!(s, "\n| us | count | min | p50 | p90 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|---:|---:|---:|");
    for (what, t) in [
        ("reaction latency (final round sent to correction back)", &q.reaction_ns),
        ("loop time, final message (decode)", &q.final_round_loop_ns),
        ("loop time, other messages", &q.other_rounds_loop_ns),
    ] {
        let _ = writeln!(
            s,
            "| {what} | {} | {} | {} | {} | {} | {} | {} |",
            t.count,
            us(t.min),
            us(t.p50),
            us(t.p90),
            us(t.p99),
            us(t.p999),
            us(t.max)
        );
    }
    let thr = q.throughput_rounds_per_us.map_or_else(|| "n/a".to_string(), |t| format!("{t:.3}"));
    let keep = match (q.offered_rounds_per_us, q.keeps_up) {
        (Some(o), Some(k)) => {
            format!(" against {o:.3} offered by the cycle: {}", if k { "keeps up" } else { "**falls behind**" })
        }
        _ => " (closed loop: no cycle to keep up with)".into(),
    };
    let _ = writeln!(
        s,
        "\nThroughput: {thr} rounds per microsecond{keep}. {} warm-up shots left out of the latency figures.",
        q.warmup_shots
    );
    if let Some(d) = &q.decoder_time {
        let _ = writeln!(
            s,
            "\nDecode time, the decoder's own (the decode reports' decode_ns: %globaltimer inside the GPU stage, the clock in the CPU stage; every decoded shot, {} of them, warm-up included; percentiles to the peer's bins: 32 ns to 2 us, 3% above): p50 {} us, p99 {} us, max {} us.",
            d.count,
            us(d.p50_ns.into()),
            us(d.p99_ns.into()),
            us(d.max_ns.into())
        );
    }
    s
}
