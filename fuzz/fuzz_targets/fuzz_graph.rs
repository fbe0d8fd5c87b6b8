//! Graph files, as `rocelink check` reads them (`graph::load::load_str`, then
//! `graph::compile`) and `rocelink graph` draws them (`graph::dot::dot`); nothing runs.
//!
//! Input: the RON text, then optionally a NUL byte and `--set` overrides (`path=value`, one
//! per line). Runs from the repository root, so the paths of the repository's graphs (DEM
//! fixtures) resolve as they do for a user.
//!
//! Checked: no panic; every error renders (with its location when it has one); a compiled
//! plan renders as text and as Graphviz.
#![no_main]

use std::sync::Once;

use libfuzzer_sys::fuzz_target;
use rocelink_operator::graph::{self, load, Override};

fuzz_target!(|data: &[u8]| {
    static ROOT: Once = Once::new();
    ROOT.call_once(|| {
        std::env::set_current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).expect("the repository root");
    });
    let Ok(all) = std::str::from_utf8(data) else {
        return;
    };
    // A graph names files that compile reads (a decoder's DEM); keep it off device and
    // kernel files, which never end or change under it.
    if ["dev/", "proc/", "sys/", "run/"].iter().any(|p| all.contains(p)) {
        return;
    }
    let (text, sets) = all.split_once('\0').unwrap_or((all, ""));
    let Ok(sets) = sets.lines().filter(|l| !l.is_empty()).map(Override::parse).collect::<Result<Vec<_>, _>>() else {
        return;
    };
    let g = match load::load_str("fuzz.ron", text, &sets) {
        Ok(g) => g,
        Err(e) => {
            let _ = (e.to_string(), e.first().location());
            return;
        }
    };
    match graph::compile(g) {
        Ok(plan) => {
            let _ = (plan.to_string(), graph::dot::dot(&plan), plan.threads(), plan.spinners());
        }
        Err(e) => {
            let _ = (e.to_string(), e.first().location());
        }
    }
});
