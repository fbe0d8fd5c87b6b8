//! `LatencyReport`: the run's report files, `<name>.md` (for people), `<name>.json` (the run
//! report, the fields of `rocelink run --json`) and `<name>.svg` (histogram and CDF of the
//! round trips, `crate::chart`), in `outputs.dir`.
//!
//! Its optional `in` port takes the tap's records: the report then also gives the
//! transceiver loop's time per message (CQE seen to doorbell rung), the part of the round
//! trip spent in the loop.
//!
//! In a QEC graph the Markdown opens with the decoding results (`report::qec::markdown`) and
//! the plot is of the reaction latency (final round sent to correction back), the figure
//! feed-forward cares about; the per-message round trips stay in their table.

use std::fmt::Write as _;
use std::path::PathBuf;

use hdrhistogram::Histogram;

use super::{
    Build, Finished, HostContext, HostOperator, Message, MsgType, OperatorDecl, Outputs, ParamDecl, ParamDefault,
    ParamKind, Params, PortDecl, PortDir,
};
use crate::latency::{new_histogram, Summary};
use crate::report::RunReport;

pub static DECL: OperatorDecl = OperatorDecl {
    kind: "LatencyReport",
    doc: "host: writes the run's report as Markdown, JSON and SVG",
    ports: &[PortDecl {
        name: "in",
        dir: PortDir::In,
        ty: MsgType::MsgRecord,
        required: false,
        doc: "tap records, for the loop-time split",
    }],
    params: &[ParamDecl {
        name: "name",
        kind: ParamKind::Str,
        default: ParamDefault::Unset,
        doc: "file name stem (default: the graph's name)",
    }],
    build: Build::Host(build),
};

/// Whether `name` can stem the report files: a file name, no folders.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\'])
}

fn build(p: &Params, ctx: &HostContext) -> Result<Box<dyn HostOperator>, String> {
    let name = p.str("name").unwrap_or(&ctx.graph).to_string();
    if !valid_name(&name) {
        return Err(format!("name `{name}` must be a file name without folders"));
    }
    std::fs::create_dir_all(&ctx.out_dir).map_err(|e| format!("cannot create {}: {e}", ctx.out_dir.display()))?;
    Ok(Box::new(LatencyReport { dir: ctx.out_dir.clone(), name, loop_ns: new_histogram() }))
}

struct LatencyReport {
    dir: PathBuf,
    name: String,
    loop_ns: Histogram<u64>,
}

impl HostOperator for LatencyReport {
    fn on_message(&mut self, _: &'static str, msg: Message, _: &mut Outputs) -> Result<(), String> {
        let Message::Record(r) = msg;
        let _ = self.loop_ns.record(r.doorbell_ns.saturating_sub(r.cqe_seen_ns).clamp(1, self.loop_ns.high()));
        Ok(())
    }

    fn finish(&mut self, run: &Finished<'_>) -> Result<Vec<PathBuf>, String> {
        let r = run.report;
        let loop_ns = (!self.loop_ns.is_empty()).then(|| Summary::of(&self.loop_ns));
        let io = |what: &PathBuf, e: std::io::Error| format!("writing {}: {e}", what.display());
        let mut files = Vec::new();

        let json = self.dir.join(format!("{}.json", self.name));
        crate::report::write_json(r, &json).map_err(|e| io(&json, e))?;
        files.push(json);

        let svg_name = format!("{}.svg", self.name);
        let label = format!("{} backend", r.env.backend);
        let (title, samples) = match &r.qec {
            Some(_) => (
                format!("{}: {} wire, reaction latency (final round sent to correction back)", r.graph, r.env.wire),
                run.qec_reaction_samples,
            ),
            None => (
                format!("{}: {} wire, {} B, full round trips", r.graph, r.env.wire, r.env.payload_size),
                run.rtt_samples,
            ),
        };
        let svg = crate::chart::svg(&title, &[(&label, samples)])?;
        let svg_path = self.dir.join(&svg_name);
        std::fs::write(&svg_path, svg).map_err(|e| io(&svg_path, e))?;

        let md = self.dir.join(format!("{}.md", self.name));
        std::fs::write(&md, markdown(r, loop_ns.as_ref(), &svg_name)).map_err(|e| io(&md, e))?;
        files.push(md);
        files.push(svg_path);
        Ok(files)
    }
}

use crate::latency::us;

/// The Markdown report.
pub fn markdown(r: &RunReport, loop_ns: Option<&Summary>, svg: &str) -> String {
    let mut s = String::new();
    let e = &r.env;
    let _ = writeln!(s, "# rocelink run: {}\n", r.graph);
    let warmup = match &r.qec {
        Some(q) => {
            format!("{} warm-up shots ({} messages)", r.warmup, u64::from(r.warmup) * u64::from(q.messages_per_shot))
        }
        None => format!("{} warm-up messages", r.warmup),
    };
    let _ = writeln!(
        s,
        "Every figure is a **full round trip** (the peer's send stamp to its arrival stamp of the answer), in microseconds; {}, {} B messages{}, {warmup} left out of the distribution. Stopped by: {}.\n",
        r.mode,
        e.payload_size,
        if r.qec.is_some() { " at most" } else { "" },
        r.stopped_by
    );
    let rows = [
        ("graph", r.graph_file.clone().unwrap_or_else(|| "built in memory".into())),
        ("backend", e.backend.clone()),
        ("stage chain", r.stage_chain.join(" -> ")),
        ("wire", e.wire.clone()),
        ("spin mode", e.spin_mode.clone()),
        ("pinned cores", e.pinned_text()),
    ];
    crate::env::write_markdown(&mut s, &r.date_utc, e, &rows);
    if let Some(q) = &r.qec {
        let _ = writeln!(s, "\n{}", crate::report::qec::markdown(q).trim_end());
    }
    let t = &r.rtt_ns;
    let _ = writeln!(s, "\n## Round trips (us)\n\n| count | min | p50 | p90 | p99 | p99.9 | max |\n|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {} | {} | {} |",
        t.count,
        us(t.min),
        us(t.p50),
        us(t.p90),
        us(t.p99),
        us(t.p999),
        us(t.max)
    );
    if let Some(b) = &r.breakdown_ns {
        let _ = writeln!(
            s,
            "\nWhere the round trip went (p50, from the data path's timestamps, {} messages): {}.",
            b.matched,
            b.p50_text()
        );
    }
    if let Some(l) = loop_ns {
        let _ = writeln!(s, "\nTransceiver loop per message (CQE seen to doorbell rung, from the tap, {} messages): min {}  p50 {}  p99 {}  max {} us.", l.count, us(l.min), us(l.p50), us(l.p99), us(l.max));
    }
    let c = &r.counts;
    let _ = writeln!(s, "\n## Messages\n\n| sent | received | lost | duplicated | reordered | corrupted | in flight at stop |\n|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {} | {} | {} |",
        c.sent, c.received, c.lost, c.duplicated, c.reordered, c.corrupted, r.in_flight_at_stop
    );
    if let Some(a) = &r.rate_achieved {
        let _ = writeln!(
            s,
            "\nOpen-loop rate: {} (answers over the first send to the last arrival, warm-up included).",
            a.text()
        );
    }
    let drops: Vec<String> = r.nic_drops.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        s,
        "\nNIC: {} frames in, {} out; drops: {}. Transceiver loop: {} answered, {} refused.",
        r.nic.rx_packets,
        r.nic.tx_packets,
        if drops.is_empty() { "none".into() } else { drops.join(", ") },
        r.backend_processed,
        r.backend_dropped
    );
    if let Some(tap) = &r.tap {
        let _ =
            writeln!(s, "\nTap: {} records copied, {} overwritten before they were read.", tap.records, tap.overflow);
        for f in &tap.flows {
            let _ = writeln!(
                s,
                "- flow {} (capacity {}, {}): {} offered, {} dropped",
                f.flow, f.capacity, f.policy, f.offered, f.dropped
            );
        }
    }
    if !r.problems.is_empty() {
        let _ = writeln!(s, "\n## Problems\n");
        for p in &r.problems {
            let _ = writeln!(s, "- {p}");
        }
    }
    let _ = writeln!(s, "\n## Plot\n\n![round trips]({svg})");
    s
}
