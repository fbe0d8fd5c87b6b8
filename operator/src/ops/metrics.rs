//! `Metrics`: periodic counters through `tracing` (target `rocelink::metrics`, level info):
//! messages and rate seen on its input over the period, the transceiver loop's time per
//! message (CQE seen to doorbell, p50/p99 over the period), and the data path's live
//! counters (answered, refused, NIC drops, tap overflow). Passes its input on at `out`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::{
    Build, Finished, HostContext, HostOperator, Live, Message, MsgType, OperatorDecl, Outputs, ParamDecl, ParamDefault,
    ParamKind, Params, PortDecl, PortDir,
};
use crate::latency::new_histogram;

pub static DECL: OperatorDecl = OperatorDecl {
    kind: "Metrics",
    doc: "host: logs message rate, loop time and drop counters every period (tracing target rocelink::metrics)",
    ports: &[
        PortDecl { name: "in", dir: PortDir::In, ty: MsgType::MsgRecord, required: true, doc: "records to count" },
        PortDecl {
            name: "out",
            dir: PortDir::Out,
            ty: MsgType::MsgRecord,
            required: false,
            doc: "the same records, passed on",
        },
    ],
    params: &[ParamDecl {
        name: "period_ms",
        kind: ParamKind::Int { min: 10, max: 3_600_000 },
        default: ParamDefault::Int(1000),
        doc: "milliseconds between two log lines",
    }],
    build: Build::Host(build),
};

fn build(p: &Params, ctx: &HostContext) -> Result<Box<dyn HostOperator>, String> {
    Ok(Box::new(Metrics {
        name: ctx.name.clone(),
        period: Duration::from_millis(p.int("period_ms")? as u64),
        live: ctx.live.clone(),
        total: 0,
        in_period: 0,
        loop_ns: new_histogram(),
        since: Instant::now(),
    }))
}

struct Metrics {
    name: String,
    period: Duration,
    live: Live,
    total: u64,
    in_period: u64,
    loop_ns: Histogram<u64>,
    since: Instant,
}

impl Metrics {
    fn log(&mut self) {
        let secs = self.since.elapsed().as_secs_f64().max(1e-9);
        let (p50, p99) = if self.loop_ns.is_empty() {
            (0, 0)
        } else {
            (self.loop_ns.value_at_quantile(0.5), self.loop_ns.value_at_quantile(0.99))
        };
        tracing::info!(
            target: "rocelink::metrics",
            operator = %self.name,
            messages = self.total,
            rate = format!("{:.0}/s", self.in_period as f64 / secs),
            loop_p50_ns = p50,
            loop_p99_ns = p99,
            answered = self.live.processed(),
            refused = self.live.dropped(),
            nic_drops = self.live.nic_drops(),
            tap_overflow = self.live.tap_overflow(),
            "metrics"
        );
        self.in_period = 0;
        self.loop_ns.reset();
        self.since = Instant::now();
    }
}

impl HostOperator for Metrics {
    fn on_message(&mut self, _: &'static str, msg: Message, out: &mut Outputs) -> Result<(), String> {
        let Message::Record(r) = msg;
        self.total += 1;
        self.in_period += 1;
        let _ = self.loop_ns.record(r.doorbell_ns.saturating_sub(r.cqe_seen_ns).clamp(1, self.loop_ns.high()));
        out.send("out", msg);
        Ok(())
    }

    fn tick_period(&self) -> Option<Duration> {
        Some(self.period)
    }

    fn on_tick(&mut self, _: &mut Outputs) {
        self.log();
    }

    fn finish(&mut self, _: &Finished<'_>) -> Result<Vec<PathBuf>, String> {
        self.log();
        Ok(Vec::new())
    }
}
