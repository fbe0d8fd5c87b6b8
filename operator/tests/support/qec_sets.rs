//! The `--set` overrides that point a QEC graph (`graphs/qec_d*.ron`) at a fixture: the peer
//! replays its shots and the decoder decodes with its model. Included with `#[path]` by the
//! tests that run QEC graphs.
#![allow(dead_code)]

/// The overrides for the fixture folder `dir` (`model.dem`, `dets.b8`, `obs.01`, `pred.01`).
pub fn fixture_sets(dir: &str) -> Vec<String> {
    vec![
        format!("peer.qec.dem={dir}/model.dem"),
        format!("peer.qec.dets={dir}/dets.b8"),
        format!("peer.qec.obs={dir}/obs.01"),
        format!("peer.qec.pred={dir}/pred.01"),
        format!("operators.decoder.dem={dir}/model.dem"),
    ]
}
