//! `Recorder`: one row per message to a file (CSV or JSON lines): what the transceiver loop
//! recorded (from the tap) joined, after the run, with what the peer captured, by
//! `request_id`. Every request the peer sent has a row, answered or not, in request order;
//! answers the peer captured for requests it did not send (stale or forged) come next, then
//! messages the transceiver loop answered beyond the peer's count (`uncaptured`: a run whose
//! peer went away before its capture could be read).
//!
//! Columns: `request_id, status, warmup, seq, slot, byte_count, sq_index, cqe_seen_ns,
//! doorbell_ns, loop_ns, sent_ns, arrival_ns, rtt_ns, peer_to_host_ns, host_to_peer_ns,
//! rpc_status, result_len, nic_cqe_ns, nic_sent_ns, wire_nic_in_ns, wire_out_ns`. `status` is
//! `ok`, `lost`, `corrupted`, `stale` or `uncaptured`. Clocks: `cqe_seen_ns` and `doorbell_ns` are the data
//! path's (CLOCK_MONOTONIC on the CPU backend, %globaltimer on the GPU), `sent_ns` and
//! `arrival_ns` the peer's, `nic_cqe_ns` (the NIC wrote the receive CQE) and `nic_sent_ns` (the
//! answer's frame left the software NIC, while its send trace still holds it) the NIC's
//! (CLOCK_MONOTONIC for the software NIC). The one-way splits are given only where two clocks
//! are one: `peer_to_host_ns` / `host_to_peer_ns` where the peer's clock is the data path's
//! (fpga-sim with the CPU backend), `wire_nic_in_ns` (request sent to CQE written) and
//! `wire_out_ns` (frame sent to the peer's arrival stamp) where it is the NIC's (fpga-sim on
//! this host, any backend: on the GPU the rest of a round trip, `rtt_ns - wire_nic_in_ns -
//! loop_ns - wire_out_ns`, is the two PCIe hops and the NIC's send work; the NIC reads its
//! clock after its send returned, so the peer may stamp the frame first and `wire_out_ns` be a
//! little negative). A cell is empty (CSV) or the key absent (JSON) where a value is unknown.
//!
//! The file is created when the run starts (so a path that cannot be written fails the run
//! before anything is sent) and written at the end. Records are kept in memory until then
//! (32 bytes each), up to `max_records`; the rest are counted and left out.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use rocelink_wire::hsb::{capture_flags, CaptureRecord};

use super::{
    Build, Finished, HostContext, HostOperator, Message, MsgRecord, MsgType, OperatorDecl, Outputs, ParamDecl,
    ParamDefault, ParamKind, Params, PortDecl, PortDir,
};

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
        ParamDecl { name: "max_records", kind: ParamKind::Int { min: 1, max: 1 << 30 }, default: ParamDefault::Int(1 << 20), doc: "rows at most: records kept in memory until the run ends, and requests listed (the first ones); the rest are counted and left out" },
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
    Ok(Box::new(Recorder {
        path,
        format,
        file: Some(file),
        max: p.int("max_records")? as usize,
        records: Vec::new(),
        left_out: 0,
    }))
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
        let rows = join(&self.records, run, self.max as u64);
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

const COLUMNS: [&str; 21] = [
    "request_id",
    "status",
    "warmup",
    "seq",
    "slot",
    "byte_count",
    "sq_index",
    "cqe_seen_ns",
    "doorbell_ns",
    "loop_ns",
    "sent_ns",
    "arrival_ns",
    "rtt_ns",
    "peer_to_host_ns",
    "host_to_peer_ns",
    "rpc_status",
    "result_len",
    "nic_cqe_ns",
    "nic_sent_ns",
    "wire_nic_in_ns",
    "wire_out_ns",
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
    /// The peer's clock is the NIC's.
    nic_clock: bool,
    /// When the answer's frame left the NIC (NIC clock).
    nic_sent: Option<u64>,
}

impl Row {
    /// Column values, `None` where unknown.
    fn cells(&self) -> [Option<String>; 21] {
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
            s(t.map(|t| t.nic_cqe_ns).filter(|&v| v != 0)),
            s(self.nic_sent),
            t.zip(c)
                .filter(|(t, _)| self.nic_clock && t.nic_cqe_ns != 0)
                .map(|(t, c)| signed(t.nic_cqe_ns, c.echoed_timestamp)),
            self.nic_sent.zip(c).filter(|_| self.nic_clock).map(|(sent, c)| signed(c.arrival_timestamp, sent)),
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
                _ => v
                    .parse::<i64>()
                    .map(serde_json::Value::from)
                    .or_else(|_| v.parse::<u64>().map(serde_json::Value::from))
                    .unwrap_or(serde_json::Value::String(v)),
            };
            m.insert((*k).to_string(), value);
        }
        serde_json::Value::Object(m).to_string()
    }
}

/// One row per request sent (request order), then the stale answers, then the messages the
/// tap saw beyond `sent`.
/// At most `max_rows` requests are listed (the first ones; the run keeps the first
/// `graph::drive::KEEP_RECORDS` capture records raw, so a longer list would call answers lost
/// that were only not kept).
fn join(tap: &[MsgRecord], run: &Finished<'_>, max_rows: u64) -> Vec<Row> {
    let all_sent = run.report.counts.sent;
    let sent = all_sent.min(max_rows);
    let first = run.first_request_id;
    let warmup = u64::from(run.report.warmup);
    let same_clock = run.same_clock;
    let nic_clock = run.nic_clock;
    let nic_sent = |tap: Option<MsgRecord>| tap.and_then(|t| run.send_trace.and_then(|tr| tr.sent_ns(t.sq_index)));
    let mut by_id: HashMap<u32, MsgRecord> = HashMap::with_capacity(tap.len());
    for r in tap {
        by_id.entry(r.request_id).or_insert(*r);
    }
    let mut answers: HashMap<u32, CaptureRecord> = HashMap::with_capacity(run.capture.len());
    let mut stale = Vec::new();
    for c in run.capture {
        let idx = u64::from(c.request_id.wrapping_sub(first));
        if idx >= all_sent {
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
            Some(c)
                if c.flags & (capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK)
                    != (capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK) =>
            {
                "corrupted"
            }
            Some(_) => "ok",
        };
        let tap = by_id.get(&id).copied();
        rows.push(Row {
            request_id: id,
            status,
            warmup: i < warmup,
            tap,
            capture,
            same_clock,
            nic_clock,
            nic_sent: nic_sent(tap),
        });
    }
    let mut listed: std::collections::HashSet<u32> = stale.iter().map(|c| c.request_id).collect();
    for c in stale {
        let tap = by_id.get(&c.request_id).copied();
        rows.push(Row {
            request_id: c.request_id,
            status: "stale",
            warmup: false,
            tap,
            capture: Some(c),
            same_clock,
            nic_clock,
            nic_sent: nic_sent(tap),
        });
    }
    // Messages the data path answered that the peer's counts do not cover (a run whose peer
    // went away before its capture was read: `sent` is then what was read): listed, with
    // the data path's side only, not dropped from the file.
    for r in tap {
        let idx = u64::from(r.request_id.wrapping_sub(first));
        if idx >= all_sent && listed.insert(r.request_id) {
            let t = Some(*r);
            rows.push(Row {
                request_id: r.request_id,
                status: "uncaptured",
                warmup: idx < warmup,
                tap: t,
                capture: None,
                same_clock,
                nic_clock,
                nic_sent: nic_sent(t),
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunReport;

    fn cap(id: u32, sent: u64, arrival: u64, flags: u32) -> CaptureRecord {
        CaptureRecord {
            request_id: id,
            echoed_timestamp: sent,
            arrival_timestamp: arrival,
            flags,
            result_len: 40,
            rpc_status: 0,
        }
    }

    #[test]
    fn answers_beyond_the_peers_count_are_listed_as_uncaptured() {
        // the peer went away: its count (what was read of its capture) is 1, the tap saw 3
        let tap: Vec<MsgRecord> = (1..=3)
            .map(|id| MsgRecord { seq: u64::from(id), request_id: id, ..Default::default() })
            .chain([MsgRecord { seq: 9, request_id: 3, ..Default::default() }])
            .collect();
        let capture = vec![cap(1, 1_000, 1_500, capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK)];
        let mut report = RunReport::empty();
        report.counts.sent = 1;
        let run = Finished {
            report: &report,
            capture: &capture,
            first_request_id: 1,
            rtt_samples: &[],
            qec_reaction_samples: &[],
            same_clock: true,
            nic_clock: false,
            send_trace: None,
        };
        let status: Vec<(u32, &str)> = join(&tap, &run, u64::MAX).iter().map(|r| (r.request_id, r.status)).collect();
        assert_eq!(status, vec![(1, "ok"), (2, "uncaptured"), (3, "uncaptured")]);
    }

    #[test]
    fn joins_by_request_id_with_a_row_per_request() {
        let ok = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
        let tap = vec![
            MsgRecord {
                seq: 0,
                request_id: 1,
                cqe_seen_ns: 1_100,
                doorbell_ns: 1_300,
                nic_cqe_ns: 1_050,
                ..Default::default()
            },
            MsgRecord {
                seq: 1,
                request_id: 2,
                sq_index: 2,
                cqe_seen_ns: 2_100,
                doorbell_ns: 2_300,
                ..Default::default()
            },
        ];
        let trace = crate::nic::SendTrace::new(8);
        trace.record(0, 1_350); // request 1's answer (sq_index 0) left the NIC
        let capture = vec![cap(1, 1_000, 1_500, ok), cap(3, 3_000, 3_900, capture_flags::HEADER_OK), cap(99, 0, 1, ok)];
        let mut report = RunReport::empty();
        report.counts.sent = 4;
        report.warmup = 1;
        let run = Finished {
            report: &report,
            capture: &capture,
            first_request_id: 1,
            rtt_samples: &[],
            qec_reaction_samples: &[],
            same_clock: true,
            nic_clock: true,
            send_trace: Some(&trace),
        };
        let rows = join(&tap, &run, u64::MAX);
        let status: Vec<(u32, &str)> = rows.iter().map(|r| (r.request_id, r.status)).collect();
        assert_eq!(status, vec![(1, "ok"), (2, "lost"), (3, "corrupted"), (4, "lost"), (99, "stale")]);
        assert_eq!(rows[0].csv(), "1,ok,true,0,0,0,0,1100,1300,200,1000,1500,500,100,200,0,40,1050,1350,50,150");
        // no capture: no round trip nor one-way splits; no CQE time nor trace entry: empty
        assert_eq!(rows[1].csv(), "2,lost,false,1,0,0,2,2100,2300,200,,,,,,,,,,,");
        let j: serde_json::Value = serde_json::from_str(&rows[0].json()).unwrap();
        assert_eq!(j["rtt_ns"], 500);
        assert_eq!(j["warmup"], true);
        assert_eq!((j["wire_nic_in_ns"].as_i64(), j["wire_out_ns"].as_i64()), (Some(50), Some(150)));
        let j: serde_json::Value = serde_json::from_str(&rows[3].json()).unwrap();
        assert!(j.get("rtt_ns").is_none() && j["status"] == "lost");
    }

    #[test]
    fn nic_splits_only_where_the_peer_shares_the_nics_clock() {
        let ok = capture_flags::PAYLOAD_OK | capture_flags::HEADER_OK;
        let tap = vec![MsgRecord {
            seq: 0,
            request_id: 1,
            cqe_seen_ns: 9_000_100,
            doorbell_ns: 9_000_600,
            nic_cqe_ns: 1_050,
            ..Default::default()
        }];
        let trace = crate::nic::SendTrace::new(8);
        trace.record(0, 1_350);
        let capture = vec![cap(1, 1_000, 1_500, ok)];
        let mut report = RunReport::empty();
        report.counts.sent = 1;
        // a GPU run with fpga-sim on this host: the data path's clock is the GPU's, the NIC's is the peer's
        let run = Finished {
            report: &report,
            capture: &capture,
            first_request_id: 1,
            rtt_samples: &[],
            qec_reaction_samples: &[],
            same_clock: false,
            nic_clock: true,
            send_trace: Some(&trace),
        };
        assert_eq!(
            join(&tap, &run, u64::MAX)[0].csv(),
            "1,ok,false,0,0,0,0,9000100,9000600,500,1000,1500,500,,,0,40,1050,1350,50,150"
        );
        // a remote FPGA: its clock is its own; the NIC's stamps stay, the splits go
        let run = Finished { nic_clock: false, ..run };
        assert_eq!(
            join(&tap, &run, u64::MAX)[0].csv(),
            "1,ok,false,0,0,0,0,9000100,9000600,500,1000,1500,500,,,0,40,1050,1350,,"
        );
    }
}
