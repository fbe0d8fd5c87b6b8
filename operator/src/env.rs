//! The environment header every report carries (docs/perf.md, "How to report a figure"): host,
//! CPU, kernel, GPU and CUDA driver, pinned cores, wire, payload size.

use std::collections::BTreeMap;

/// Where a figure was measured.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Environment {
    pub host: String,
    pub cpu: String,
    pub kernel: String,
    pub cores: usize,
    pub backend: String,
    pub wire: String,
    pub payload_size: usize,
    pub spin_mode: String,
    /// Thread -> core it was pinned to.
    pub pinned: BTreeMap<String, String>,
    pub rocelink_version: String,
    /// GPU, driver, CUDA version where a GPU ran.
    pub gpu: Option<String>,
}

/// The Markdown "Environment" section of a report: the date, this machine's rows (host, CPU,
/// cores, kernel, GPU, rocelink's version), then the report's own `rows` (backend, wire,
/// spin mode, pinned cores, ...). The one place every report's header is written.
pub fn write_markdown(s: &mut String, date_utc: &str, m: &Environment, rows: &[(&str, String)]) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "## Environment\n\n| | |\n|---|---|");
    let machine = [
        ("date (UTC)", date_utc.to_string()),
        ("host", m.host.clone()),
        ("CPU", m.cpu.clone()),
        ("cores available", m.cores.to_string()),
        ("kernel", m.kernel.clone()),
        ("GPU", m.gpu.clone().unwrap_or_else(|| "none used".into())),
        ("rocelink", m.rocelink_version.clone()),
    ];
    for (k, v) in machine.iter().map(|(k, v)| (*k, v)).chain(rows.iter().map(|(k, v)| (*k, v))) {
        let _ = writeln!(s, "| {k} | {} |", v.replace('|', "\\|"));
    }
}

impl Environment {
    /// The pinned cores as `thread core, ...`, or `unpinned`.
    pub fn pinned_text(&self) -> String {
        if self.pinned.is_empty() {
            return "unpinned".into();
        }
        self.pinned.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

impl Environment {
    /// What this machine is, with the run's backend, wire and payload size.
    pub fn here(backend: &str, wire: &str, payload_size: usize, spin_mode: &str) -> Environment {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Environment {
            host: read_trim("/proc/sys/kernel/hostname"),
            cpu,
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            cores: rocelink_link::affinity::available_cores(),
            backend: backend.into(),
            wire: wire.into(),
            payload_size,
            spin_mode: spin_mode.into(),
            pinned: BTreeMap::new(),
            rocelink_version: env!("CARGO_PKG_VERSION").into(),
            gpu: None,
        }
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn utc_timestamp(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723)), "2000-02-29T01:02:03Z");
        assert_eq!(utc_timestamp(UNIX_EPOCH + Duration::from_secs(1_767_225_599)), "2025-12-31T23:59:59Z");
    }
}
