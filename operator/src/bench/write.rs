//! Writing a [`BenchReport`]: Markdown for people, JSON for tools, one SVG per (wire, size)
//! with a histogram and a CDF of every path on it (docs/perf.md, "How to report a figure"),
//! drawn by [`crate::chart::svg`].

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use super::{BenchReport, BenchRow};
use crate::latency::Summary;

use crate::latency::us;

fn times(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "-".into()
    }
}

/// A file-name-safe form of `s`.
fn file_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// The SVG's file name for `wire` and `size`: `<name>-<wire>-<size>.svg`.
pub fn svg_file_name(name: &str, wire: &str, size: usize) -> String {
    format!("{name}-{}-{size}.svg", file_part(wire))
}

/// Writes `<dir>/<name>.md`, `<dir>/<name>.json` and `<dir>/<name>-<wire>-<size>.svg` for
/// every (wire, size) of `report`, creating `dir`. `samples[i]` are the round trips (ns) of
/// `report.rows[i]`, drawn in the SVGs (a row without samples is left out of the plots).
/// Returns the paths written.
pub fn write_reports(report: &BenchReport, samples: &[Vec<u64>], dir: &Path, name: &str) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();

    let md = dir.join(format!("{name}.md"));
    std::fs::write(&md, markdown(report, name))?;
    written.push(md);

    let json = dir.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(report).map_err(io::Error::other)?;
    std::fs::write(&json, text + "\n")?;
    written.push(json);

    for (wire, size) in groups(&report.rows) {
        let series: Vec<(&str, &[u64])> = report
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.wire == wire && r.size == size)
            .map(|(i, r)| (r.path.as_str(), samples.get(i).map_or(&[][..], |s| s.as_slice())))
            .collect();
        let title = format!("{wire} wire, {size} B: full round trips");
        let svg = crate::chart::svg(&title, &series).map_err(io::Error::other)?;
        let path = dir.join(svg_file_name(name, &wire, size));
        std::fs::write(&path, svg)?;
        written.push(path);
    }
    Ok(written)
}

/// The (wire, size) pairs of `rows`, in order of first appearance.
fn groups(rows: &[BenchRow]) -> Vec<(String, usize)> {
    let mut g: Vec<(String, usize)> = Vec::new();
    for r in rows {
        if !g.iter().any(|(w, s)| *w == r.wire && *s == r.size) {
            g.push((r.wire.clone(), r.size));
        }
    }
    g
}

/// A row's path in the round-trip table: a floor that is the best of several variants names
/// the one it is.
fn path_cell(report: &BenchReport, r: &BenchRow) -> String {
    let chosen = report
        .floor_variants
        .iter()
        .find(|f| !f.variants.is_empty() && f.path == r.path && f.wire == r.wire && f.size == r.size)
        .map(|f| &f.chosen);
    match chosen {
        Some(v) => format!("{} ({})", r.path, v.replace('|', "\\|")),
        None => r.path.clone(),
    }
}

/// The Markdown report.
pub fn markdown(report: &BenchReport, name: &str) -> String {
    let e = &report.env;
    let m = &e.machine;
    let mut s = String::new();
    let _ = writeln!(s, "# rocelink latency: {name}\n");
    let _ = writeln!(
        s,
        "Every figure is a **full round trip** (request sent to answer received, not halved), in microseconds; \
         {} round trips per row after {} warm-up round trips (made, then discarded), {}. \
         Each floor was measured in this process right before the path beside it; the ratios to it are what carry \
         from one machine to another.\n",
        e.count, e.warmup, e.mode
    );
    if report.interrupted {
        let _ = writeln!(s, "**Interrupted**: the rows cover what was measured before the interrupt.\n");
    }
    if !report.floor_errors.is_empty() {
        let _ = writeln!(s, "## Floor errors\n");
        let _ = writeln!(
            s,
            "**A path beat its floor.** A floor is a lower bound of the path it is the floor of: a path below it means the floor measured too little \
             or something else, and the ratios to it cannot be trusted.\n"
        );
        for e in &report.floor_errors {
            let _ = writeln!(s, "- {e}");
        }
        let _ = writeln!(s);
    }

    let spin_note = match m.spin_mode.as_str() {
        "shared" => {
            "shared: fewer cores than spinners, so every spinner (floors included) spins briefly, then yields its core"
        }
        "dedicated+pause" => {
            "dedicated: every spinner has a core and never yields (floors too); PAUSE between polls (--spin-pause)"
        }
        "dedicated" => {
            "dedicated: every spinner has a core and never yields, polling back to back without PAUSE (floors too)"
        }
        other => other,
    };
    let c = &report.clock_overhead_ns;
    let rows = [
        ("backend", m.backend.clone()),
        ("wires", e.wires.join(", ")),
        ("payload sizes (B)", e.sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")),
        ("spin mode", spin_note.into()),
        ("pinned cores", m.pinned_text()),
        ("clock", format!("CLOCK_MONOTONIC; two reads back to back: p50 {} ns, p99 {} ns", c.p50, c.p99)),
    ];
    crate::env::write_markdown(&mut s, &e.date_utc, m, &rows);

    let _ = writeln!(s, "\n## Round trips (us)\n");
    let _ = writeln!(
        s,
        "| path | wire | size (B) | count | min | p50 | p90 | p99 | p99.9 | max | p50 / floor | p99 / floor | lost |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &report.rows {
        let t: &Summary = &r.rtt_ns;
        let (r50, r99) = match (&r.vs_floor, r.is_floor()) {
            (Some(v), _) if v.floor_error.is_some() => (format!("{} (floor error)", times(v.p50)), times(v.p99)),
            (Some(v), _) => (times(v.p50), times(v.p99)),
            (None, true) => ("floor".into(), "floor".into()),
            (None, false) => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            path_cell(report, r),
            r.wire,
            r.size,
            t.count,
            us(t.min),
            us(t.p50),
            us(t.p90),
            us(t.p99),
            us(t.p999),
            us(t.max),
            r50,
            r99,
            r.counts.lost
        );
    }

    if !report.floor_variants.is_empty() {
        let _ = writeln!(s, "\n## Floor variants\n");
        let _ = writeln!(s, "A floor measured several ways, one after the other in this run, is the best of them (the least p50); the composite floors are built on those.\n");
        let _ = writeln!(s, "| floor | wire | size (B) | variant | count | p50 | p99 | lost | the floor |");
        let _ = writeln!(s, "|---|---|---:|---|---:|---:|---:|---:|---|");
        for f in report.floor_variants.iter().filter(|f| !f.variants.is_empty()) {
            for v in &f.variants {
                let t = &v.rtt_ns;
                let chosen = if v.chosen { "**yes**" } else { "" };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {chosen} |",
                    f.path,
                    f.wire,
                    f.size,
                    v.name.replace('|', "\\|"),
                    t.count,
                    us(t.p50),
                    us(t.p99),
                    v.lost
                );
            }
        }
        for f in report.floor_variants.iter().filter(|f| f.variants.is_empty()) {
            let _ = writeln!(
                s,
                "\n{} ({} wire, {} B) is built from {}.",
                f.path,
                f.wire,
                f.size,
                f.chosen.replace('|', "\\|")
            );
        }
    }

    if report.rows.iter().any(|r| r.breakdown_ns.as_ref().is_some_and(|b| b.matched > 0)) {
        let _ = writeln!(s, "\n## Where the round trip went (p50, us)\n");
        let _ = writeln!(s, "From the data path's own timestamps (the NIC's CQE time, the data path's CQE-seen and doorbell times), joined with the peer's capture by request id; paths whose peer shares this host's clock.\n");
        let _ = writeln!(s, "The rest is split by the NIC's send trace (when each answer's frame left) where it holds the round trip: the CQE to the data path's eyes, the doorbell to the NIC and the NIC's send work together, then the wire out (frame sent to the peer's capture).\n");
        let _ = writeln!(s, "| path | wire | size (B) | wire + NIC in | data-path turnaround | the rest (CQE to the data path, doorbell to the NIC, NIC + wire out) | of which: CQE to data path + doorbell to NIC + NIC send | of which: wire out | matched |");
        let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in &report.rows {
            if let Some(b) = r.breakdown_ns.as_ref().filter(|b| b.matched > 0) {
                let split = |f: fn(&crate::latency::RestSplit) -> u64| {
                    b.rest_split.as_ref().map_or("-".to_string(), |r| us(f(r)))
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.path,
                    r.wire,
                    r.size,
                    us(b.wire_nic_in.p50),
                    us(b.turnaround.p50),
                    us(b.rest.p50),
                    split(|r| r.to_nic_sent.p50),
                    split(|r| r.wire_out.p50),
                    b.matched
                );
            }
        }
    }

    let _ = writeln!(s, "\n## Targets\n");
    if report.targets.is_empty() {
        let _ = writeln!(s, "No target applies to these rows.");
    }
    for t in &report.targets {
        // The floor the measured row was divided by (a composite one for the GPU paths).
        let floor = report
            .rows
            .iter()
            .find(|r| r.wire == t.wire && r.size == t.size && r.path == t.path)
            .and_then(|r| r.vs_floor.as_ref())
            .map_or("its floor".to_string(), |v| v.floor.clone());
        let verdict = if t.met { "**met**" } else { "**not met**" };
        let value = t.ratio.map_or("nothing to compare".to_string(), |x| format!("{x:.2}"));
        let _ = writeln!(
            s,
            "- {} on the {} wire, {} B, against {floor}: target {}; measured {value}: {verdict}.",
            t.path, t.wire, t.size, t.what
        );
    }

    let _ = writeln!(s, "\n## Messages\n");
    let _ =
        writeln!(s, "| path | wire | size (B) | sent | received | lost | duplicated | reordered | corrupted | how |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &report.rows {
        let c = &r.counts;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.path,
            r.wire,
            r.size,
            c.sent,
            c.received,
            c.lost,
            c.duplicated,
            c.reordered,
            c.corrupted,
            r.detail.replace('|', "\\|")
        );
    }
    let _ = writeln!(s, "\nSent counts include the warm-up messages; the distributions exclude them.");

    let groups = groups(&report.rows);
    if !groups.is_empty() {
        let _ = writeln!(s, "\n## Plots\n");
        for (wire, size) in groups {
            let f = svg_file_name(name, &wire, size);
            let _ = writeln!(s, "![{wire} wire, {size} B]({f})");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{floors::histogram_of, paths, vs_floor, BenchEnv, Target};
    use crate::env::Environment;
    use crate::latency::Counts;

    fn synthetic() -> (BenchReport, Vec<Vec<u64>>) {
        // Floor around 400 ns, path around 1.3 us, with a tail.
        let floor: Vec<u64> =
            (0..2000u64).map(|i| 380 + (i * 7919) % 60 + if i % 500 == 0 { 5_000 } else { 0 }).collect();
        let path: Vec<u64> =
            (0..2000u64).map(|i| 1_200 + (i * 104_729) % 300 + if i % 400 == 0 { 40_000 } else { 0 }).collect();
        let fs = Summary::of(&histogram_of(&floor));
        let ps = Summary::of(&histogram_of(&path));
        let vs = vs_floor(paths::CPU_BACKEND, &ps, paths::FLOOR_CACHELINE, None, &fs);
        let counts = Counts { sent: 2010, received: 2010, ..Counts::default() };
        let rows = vec![
            BenchRow {
                path: paths::FLOOR_CACHELINE.into(),
                wire: "inproc".into(),
                size: 64,
                floor_of: Some(paths::CPU_BACKEND.into()),
                rtt_ns: fs,
                counts,
                vs_floor: None,
                detail: "two threads".into(),
                breakdown_ns: None,
            },
            BenchRow {
                path: paths::CPU_BACKEND.into(),
                wire: "inproc".into(),
                size: 64,
                floor_of: None,
                rtt_ns: ps,
                counts,
                vs_floor: Some(vs.clone()),
                detail: "inproc".into(),
                breakdown_ns: None,
            },
        ];
        let report = BenchReport {
            env: BenchEnv {
                machine: Environment::here("cpu", "inproc", 64, "shared"),
                date_utc: "2026-01-02T03:04:05Z".into(),
                wires: vec!["inproc".into()],
                sizes: vec![64],
                mode: "closed-loop".into(),
                count: 2000,
                warmup: 10,
                figures: "full round trip".into(),
            },
            clock_overhead_ns: Summary { count: 10, min: 15, p50: 20, p90: 21, p99: 30, p999: 40, max: 50, mean: 21.0 },
            rows,
            floor_variants: vec![],
            floor_errors: vec![],
            targets: vec![Target {
                path: paths::CPU_BACKEND.into(),
                wire: "inproc".into(),
                size: 64,
                what: "p50 <= 3x floor p50".into(),
                max_ratio: 3.0,
                ratio: Some(vs.p50),
                met: vs.p50 <= 3.0,
            }],
            interrupted: false,
            samples: vec![floor, path],
            files: vec![],
        };
        let samples = report.samples.clone();
        (report, samples)
    }

    #[test]
    fn the_spin_mode_says_whether_dedicated_spinners_pause() {
        let (mut report, _) = synthetic();
        for (mode, says) in [
            ("dedicated", "without PAUSE"),
            ("dedicated+pause", "PAUSE between polls (--spin-pause)"),
            ("shared", "spins briefly, then yields"),
        ] {
            report.env.machine.spin_mode = mode.into();
            let md = markdown(&report, "syn");
            assert!(md.contains(says), "{mode}: {md}");
        }
    }

    #[test]
    fn writes_markdown_json_and_svg() {
        let (report, samples) = synthetic();
        let ratio = report.rows[1].vs_floor.as_ref().expect("ratio").p50;
        assert!(ratio > 2.5 && ratio < 4.5, "{ratio}");
        let dir = std::env::temp_dir().join(format!(
            "rocelink-bench-write-{}-{}",
            std::process::id(),
            rocelink_link::clock::monotonic_ns()
        ));
        let files = write_reports(&report, &samples, &dir, "syn").expect("write");
        let md_path = dir.join("syn.md");
        let json_path = dir.join("syn.json");
        let svg_path = dir.join("syn-inproc-64.svg");
        assert_eq!(files, vec![md_path.clone(), json_path.clone(), svg_path.clone()]);

        let md = std::fs::read_to_string(&md_path).expect("md");
        assert!(md.contains("| path | wire | size (B) | count | min | p50 | p90 | p99 | p99.9 | max | p50 / floor | p99 / floor | lost |"), "{md}");
        assert!(md.contains(&format!("{ratio:.2}x")), "{md}");
        assert!(md.contains("full round trip"));
        assert!(md.contains("| floor: cache-line ping-pong | inproc | 64 | 2000 |"), "{md}");
        assert!(md.contains("**met**") || md.contains("**not met**"), "{md}");
        assert!(md.contains("2026-01-02T03:04:05Z"));

        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("parses");
        assert_eq!(json["env"]["spin_mode"], "shared");
        assert_eq!(json["env"]["date_utc"], "2026-01-02T03:04:05Z");
        assert!(json["env"]["rocelink_version"].is_string());
        assert_eq!(json["clock_overhead_ns"]["p50"], 20);
        let rows = json["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["path"], paths::FLOOR_CACHELINE);
        assert_eq!(rows[0]["floor_of"], paths::CPU_BACKEND);
        assert!(rows[0]["vs_floor"].is_null());
        assert_eq!(rows[1]["floor_of"], serde_json::Value::Null);
        assert!(rows[1]["vs_floor"]["p50"].as_f64().is_some());
        assert!(rows[1]["vs_floor"]["p99"].as_f64().is_some());
        // Above its floor: no floor error, and the floor was not the best of variants.
        assert!(rows[1]["vs_floor"]["floor_error"].is_null());
        assert!(rows[1]["vs_floor"]["floor_variant"].is_null());
        assert_eq!(json["floor_errors"], serde_json::json!([]));
        assert_eq!(json["floor_variants"], serde_json::json!([]));
        assert!(!md.contains("floor error"), "{md}");
        assert!(!md.contains("## Floor variants"), "{md}");
        for k in ["min", "p50", "p90", "p99", "p999", "max", "count"] {
            assert!(rows[1]["rtt_ns"][k].is_u64(), "{k}");
        }
        assert_eq!(rows[1]["counts"]["lost"], 0);
        assert_eq!(json["targets"][0]["max_ratio"], 3.0);
        assert!(json["targets"][0]["met"].is_boolean());

        let svg = std::fs::read_to_string(&svg_path).expect("svg");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(paths::FLOOR_CACHELINE));
        assert!(svg.contains(paths::CPU_BACKEND));
        assert!(svg.contains("CDF"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A UDP floor that is the best of two socket variants, and a path that beats it anyway.
    fn with_a_floor_error() -> BenchReport {
        use crate::bench::floors::{best_of, Floor, Variant};
        use crate::bench::FloorVariants;
        let (mut report, _) = synthetic();
        let around = |p50: u64| -> Vec<u64> { (0..1000u64).map(|i| p50 - 20 + (i * 7919) % 41).collect() };
        let counts = Counts { sent: 1000, received: 1000, ..Counts::default() };
        let best = best_of(vec![
            Variant { name: "connected sockets".into(), floor: Floor::from_samples(around(8_400), counts) },
            Variant {
                name: "unconnected sockets (sendto, recvfrom)".into(),
                floor: Floor::from_samples(around(7_970), counts),
            },
        ])
        .expect("a best");
        let (floor, variants) = best.into_floor();
        let fs = Summary::of(&floor.floor.rtt);
        let ps = Summary::of(&histogram_of(&around(6_940)));
        let vs = vs_floor(paths::CPU_BACKEND, &ps, paths::FLOOR_UDP, Some(&floor.name), &fs);
        report.rows = vec![
            BenchRow {
                path: paths::FLOOR_UDP.into(),
                wire: "udp".into(),
                size: 64,
                floor_of: Some(paths::CPU_BACKEND.into()),
                rtt_ns: fs,
                counts,
                vs_floor: None,
                detail: "two threads".into(),
                breakdown_ns: None,
            },
            BenchRow {
                path: paths::CPU_BACKEND.into(),
                wire: "udp".into(),
                size: 64,
                floor_of: None,
                rtt_ns: ps,
                counts,
                vs_floor: Some(vs.clone()),
                detail: "udp".into(),
                breakdown_ns: None,
            },
        ];
        report.floor_variants = vec![FloorVariants {
            path: paths::FLOOR_UDP.into(),
            wire: "udp".into(),
            size: 64,
            chosen: floor.name.clone(),
            variants,
        }];
        report.floor_errors = vec![format!("udp wire, 64 B: {}", vs.floor_error.expect("the path beat its floor"))];
        report.targets.clear();
        report.samples = vec![floor.floor.samples, around(6_940)];
        report
    }

    #[test]
    fn the_report_names_the_floor_variant_and_the_floor_error() {
        let report = with_a_floor_error();
        let md = markdown(&report, "err");
        // The summary says it first, in words.
        let errors_at = md.find("## Floor errors").expect("a floor-error section");
        assert!(errors_at < md.find("## Environment").expect("environment"), "{md}");
        assert!(md.contains("- udp wire, 64 B: floor error: cpu backend (p50 6.94 us) beats its floor floor: UDP ping-pong (spinning) (p50 7.97 us), 0.87x"), "{md}");
        assert!(md.contains("| 0.87x (floor error) |"), "{md}");
        // The floor row names its variant; the variants table has both, the chosen one marked.
        assert!(
            md.contains(
                "| floor: UDP ping-pong (spinning) (unconnected sockets (sendto, recvfrom)) | udp | 64 | 1000 |"
            ),
            "{md}"
        );
        assert!(md.contains("## Floor variants"), "{md}");
        assert!(md.contains("| floor: UDP ping-pong (spinning) | udp | 64 | connected sockets | 1000 | 8.4"), "{md}");
        assert!(md.contains("| floor: UDP ping-pong (spinning) | udp | 64 | unconnected sockets (sendto, recvfrom) | 1000 | 7.97 | "), "{md}");
        assert_eq!(md.matches("| **yes** |").count(), 1, "{md}");

        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&report).expect("json")).expect("parses");
        let err = json["rows"][1]["vs_floor"]["floor_error"].as_str().expect("a floor error in the row");
        assert!(err.starts_with("floor error: cpu backend"), "{err}");
        assert_eq!(json["rows"][1]["vs_floor"]["floor_variant"], "unconnected sockets (sendto, recvfrom)");
        assert!(json["rows"][1]["vs_floor"]["p50"].as_f64().expect("ratio") < 1.0);
        assert_eq!(json["floor_errors"].as_array().expect("list").len(), 1);
        let fv = &json["floor_variants"][0];
        assert_eq!(fv["path"], paths::FLOOR_UDP);
        assert_eq!(fv["chosen"], "unconnected sockets (sendto, recvfrom)");
        let vs = fv["variants"].as_array().expect("variants");
        assert_eq!(vs.len(), 2);
        assert_eq!((vs[0]["chosen"].as_bool(), vs[1]["chosen"].as_bool()), (Some(false), Some(true)));
        assert!(vs[0]["rtt_ns"]["p50"].as_u64() > vs[1]["rtt_ns"]["p50"].as_u64());
        assert!(vs[1]["rtt_ns"]["p99"].is_u64());
    }
}
