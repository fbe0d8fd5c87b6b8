//! `Recorder`: one row per message to a file (CSV or JSON lines): what the transceiver loop
//! recorded (from the tap) joined, after the run, with what the peer captured, by
//! `request_id`. Every request the peer sent has a row, answered or not, in request order;
//! answers the peer captured for requests it did not send (stale or forged) come last.
//!
//! Columns: `request_id, status, warmup, seq, slot, byte_count, sq_index, cqe_seen_ns,
//! doorbell_ns, loop_ns, sent_ns, arrival_ns, rtt_ns, peer_to_host_ns, host_to_peer_ns,
//! rpc_status, result_len`. `status` is `ok`, `lost`, `corrupted` or `stale`. The one-way
//! splits are given only where the peer's clock is the host's (fpga-sim with the CPU
//! backend); a cell is empty (CSV) or the key absent (JSON) where a value is unknown.
//!
//! The file is created when the run starts (so a path that cannot be written fails the run
//! before anything is sent) and written at the end. Records are kept in memory until then
//! (32 bytes each), up to `max_records`; the rest are counted and left out.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use rocelink_wire::hsb::{capture_flags, CaptureRecord};

use super::{Build, Finished, HostContext, HostOperator, Message, MsgRecord, MsgType, OperatorDecl, Outputs, ParamDecl, ParamDefault, ParamKind, Params, PortDecl, PortDir};

pub static DECL: OperatorDecl = OperatorDecl {
    kind: "Recorder",
    doc: "host: one row per message (the loop's timestamps joined with the peer's capture) to CSV or JSON lines",
    ports: &[
        PortDecl { name: "in", dir: PortDir::In, ty: MsgType::MsgRecord, required: true, doc: "records to write" },
        PortDecl { name: "out", dir: PortDir::Out, ty: MsgType::MsgRecord, required: false, doc: "the same records, passed on" },
    ],
    params: &[
        ParamDecl { name: "path", kind: ParamKind::Path, default: ParamDefault::Str("records.csv"), doc: "the file, relative to outputs.dir" },
        ParamDecl { name: "format", kind: ParamKind::Choice(&["csv", "jsonl"]), default: ParamDefault::Unset, doc: "csv or jsonl (default: jsonl for a .jsonl or .json path, csv otherwise)" },
        ParamDecl { name: "max_records", kind: ParamKind::Int { min: 1, max: 1 << 30 }, default: ParamDefault::Int(10_000_000), doc: "records kept in memory until the run ends" },
    ],
    build: Build::Host(build),
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Csv,
    JsonLines,
}

fn build(p: &Params, ctx: &HostContext) -> Result<Box<dyn HostOperator>, String> {
    let path = ctx.output_path(p.str("path").unwrap_or("records.csv"));
    let format = match p.str("format") {
        Some("jsonl") => Format::JsonLines,
        Some(_) => Format::Csv,
        None if path.extension().is_some_and(|e| e == "jsonl" || e == "json") => Format::JsonLines,
        None => Format::Csv,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let file = File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    Ok(Box::new(Recorder { path, format, file: Some(file), max: p.int("max_records")? as usize, records: Vec::new(), left_out: 0 }))
}

struct Recorder {
    path: PathBuf,
    format: Format,
    file: Option<File>,
    max: usize,
    records: Vec<MsgRecord>,
    left_out: u64,
}

impl HostOperator for Recorder {
    fn on_message(&mut self, _: &'static str, msg: Message, out: &mut Outputs) -> Result<(), String> {
        let Message::Record(r) = msg;
        if self.records.len() < self.max {
            self.records.push(r);
        } else {
            self.left_out += 1;
        }
        out.send("out", msg);
        Ok(())
    }

    fn finish(&mut self, run: &Finished<'_>) -> Result<Vec<PathBuf>, String> {
        let Some(file) = self.file.take() else { return Ok(Vec::new()) };
        let rows = join(&self.records, run);
        let mut w = BufWriter::new(file);
        let io = |e: std::io::Error| format!("writing {}: {e}", self.path.display());
        match self.format {
            Format::Csv => {
                writeln!(w, "{}", COLUMNS.join(",")).map_err(io)?;
                for r in &rows {
                    writeln!(w, "{}", r.csv()).map_err(io)?;
                }
            }
            Format::JsonLines => {
                for r in &rows {
                    writeln!(w, "{}", r.json()).map_err(io)?;
                }
            }
        }
        w.flush().map_err(io)?;
        if self.left_out > 0 {
            tracing::warn!(file = %self.path.display(), left_out = self.left_out, "recorder: more records than max_records; the rest have no loop timestamps");
        }
        Ok(vec![self.path.clone()])
    }
}

const COLUMNS: [&str; 17] = [
    "request_id", "status", "warmup", "seq", "slot", "byte_count", "sq_index", "cqe_seen_ns", "doorbell_ns", "loop_ns", "sent_ns", "arrival_ns", "rtt_ns", "peer_to_host_ns", "host_to_peer_ns", "rpc_status", "result_len",
];

/// One message's row.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    request_id: u32,
    status: &'static str,
    warmup: bool,
    tap: Option<MsgRecord>,
    capture: Option<CaptureRecord>,
    same_clock: bool,
}

impl Row {
    /// Column values, `None` where unknown.
    fn cells(&self) -> [Option<String>; 17] {
        let t = self.tap.as_ref();
        let c = self.capture.as_ref();
        let s = |v: Option<u64>| v.map(|v| v.to_string());
        let signed = |a: u64, b: u64| (a as i64).wrapping_sub(b as i64).to_string();
        [
            Some(self.request_id.to_string()),
            Some(self.status.to_string()),
            Some(self.warmup.to_string()),
            s(t.map(|t| t.seq)),
            s(t.map(|t| u64::from(t.slot))),
            s(t.map(|t| u64::from(t.byte_count))),
            s(t.map(|t| u64::from(t.sq_index))),
            s(t.map(|t| t.cqe_seen_ns)),
            s(t.map(|t| t.doorbell_ns)),
            s(t.map(|t| t.doorbell_ns.saturating_sub(t.cqe_seen_ns))),
            s(c.map(|c| c.echoed_timestamp)),
            s(c.map(|c| c.arrival_timestamp)),
            s(c.map(|c| c.round_trip())),
            t.zip(c).filter(|_| self.same_clock).map(|(t, c)| signed(t.cqe_seen_ns, c.echoed_timestamp)),
            t.zip(c).filter(|_| self.same_clock).map(|(t, c)| signed(c.arrival_timestamp, t.doorbell_ns)),
            c.map(|c| c.rpc_status.to_string()),
            s(c.map(|c| u64::from(c.result_len))),
        ]
    }

    fn csv(&self) -> String {
        self.cells().map(|c| c.unwrap_or_default()).join(",")
    }

    fn json(&self) -> String {
        let mut m = serde_json::Map::new();
        for (k, v) in COLUMNS.iter().zip(self.cells()) {
            let Some(v) = v else { continue };
            let value = match *k {
                "status" => serde_json::Value::String(v),
                "warmup" => serde_json::Value::Bool(v == "true"),
                _ => v.parse::<i64>().map(serde_json::Value::from).or_else(|_| v.parse::<u64>().map(serde_json::Value::from)).unwrap_or(serde_json::Value::String(v)),
            };
            m.insert((*k).to_string(), value);
        }
        serde_json::Value::Object(m).to_string()
    }
}

/// One row per request sent (request order), then the stale answers.
fn join(tap: &[MsgRecord], run: &Finished<'_>) -> Vec<Row> {
    let sent = run.report.counts.sent;
    let first = run.first_request_id;
    let warmup = u64::from(run.report.warmup);
    let same_clock = run.same_clock;
    let mut by_id: HashMap<u32, MsgRecord> = HashMap::with_capacity(tap.len());
    for r in tap {
        by_id.entry(r.request_id).or_insert(*r);
    }
    let mut answers: HashMap<u32, CaptureRecord> = HashMap::with_capacity(run.capture.len());
    let mut stale = Vec::new();
    for c in run.capture {
        let idx = u64::from(c.request_id.wrapping_sub(first));
        if idx >= sent {
            stale.push(*c);
        } else if c.flags & capture_flags::DUPLICATE == 0 {
            answers.entry(c.request_id).or_insert(*c);
        }
    }
    let mut rows = Vec::with_capacity(sent as usize + stale.len());
    for i in 0..sent {
        let id = first.wrapping_add(i as u32);
        let capture = answers.get(&id).copied();
        let status = match capture {
            None => "lost",
            Some(c) if c.flags & (capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK) != (capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK) => "corrupted",
            Some(_) => "ok",
        };
        rows.push(Row { request_id: id, status, warmup: i < warmup, tap: by_id.get(&id).copied(), capture, same_clock });
    }
    for c in stale {
        rows.push(Row { request_id: c.request_id, status: "stale", warmup: false, tap: by_id.get(&c.request_id).copied(), capture: Some(c), same_clock });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::RunReport;

    fn cap(id: u32, sent: u64, arrival: u64, flags: u32) -> CaptureRecord {
        CaptureRecord { request_id: id, echoed_timestamp: sent, arrival_timestamp: arrival, flags, result_len: 40, rpc_status: 0 }
    }

    #[test]
    fn joins_by_request_id_with_a_row_per_request() {
        let ok = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
        let tap = vec![
            MsgRecord { seq: 0, request_id: 1, cqe_seen_ns: 1_100, doorbell_ns: 1_300, ..Default::default() },
            MsgRecord { seq: 1, request_id: 2, cqe_seen_ns: 2_100, doorbell_ns: 2_300, ..Default::default() },
        ];
        let capture = vec![cap(1, 1_000, 1_500, ok), cap(3, 3_000, 3_900, capture_flags::HEADER_OK), cap(99, 0, 1, ok)];
        let mut report = RunReport::empty();
        report.counts.sent = 4;
        report.warmup = 1;
        let run = Finished { report: &report, capture: &capture, first_request_id: 1, rtt_samples: &[], qec_reaction_samples: &[], same_clock: true };
        let rows = join(&tap, &run);
        let status: Vec<(u32, &str)> = rows.iter().map(|r| (r.request_id, r.status)).collect();
        assert_eq!(status, vec![(1, "ok"), (2, "lost"), (3, "corrupted"), (4, "lost"), (99, "stale")]);
        assert_eq!(rows[0].csv(), "1,ok,true,0,0,0,0,1100,1300,200,1000,1500,500,100,200,0,40");
        assert_eq!(rows[1].csv(), "2,lost,false,1,0,0,0,2100,2300,200,,,,,,,");
        let j: serde_json::Value = serde_json::from_str(&rows[0].json()).unwrap();
        assert_eq!(j["rtt_ns"], 500);
        assert_eq!(j["warmup"], true);
        let j: serde_json::Value = serde_json::from_str(&rows[3].json()).unwrap();
        assert!(j.get("rtt_ns").is_none() && j["status"] == "lost");
    }
}
