//! `QecDecoder`: the device stage that decodes syndromes (docs/qec.md): `enqueue_syndromes` rounds
//! in, the correction (flipped logical observables) out on a shot's final round, by exact
//! minimum-weight matching on the graph of a stim detector error model (`crate::qec`).

use super::{Build, MsgType, OperatorDecl, ParamDecl, ParamDefault, ParamKind, Params, PortDecl, PortDir};
use crate::stage::{Settle, StageSpec};

pub static DECL: OperatorDecl = OperatorDecl {
    kind: "QecDecoder",
    doc: "device stage: exact minimum-weight matching decoder for stim detector error models (CUDA-Q QEC messages)",
    ports: &[
        PortDecl { name: "in", dir: PortDir::In, ty: MsgType::Request, required: true, doc: "enqueue_syndromes, get_corrections, reset_decoder" },
        PortDecl { name: "out", dir: PortDir::Out, ty: MsgType::Response, required: true, doc: "acks and corrections" },
    ],
    params: &[
        ParamDecl { name: "dem", kind: ParamKind::Str, default: ParamDefault::Required, doc: "the detector error model file (stim .dem), relative to the working directory" },
        ParamDecl { name: "rounds_per_message", kind: ParamKind::Int { min: 1, max: 1 << 16 }, default: ParamDefault::Int(1), doc: "syndrome rounds each enqueue_syndromes carries" },
        ParamDecl { name: "max_defects", kind: ParamKind::Int { min: 1, max: 20 }, default: ParamDefault::Int(12), doc: "K: the subset DP's defect cap (GPU model); above it the shot is split into independent clusters, each matched exactly" },
        ParamDecl { name: "decoders", kind: ParamKind::Int { min: 1, max: 1024 }, default: ParamDefault::Int(1), doc: "decoder ids 0..decoders, each with its own shot" },
        ParamDecl { name: "settle", kind: ParamKind::Choice(&["in_loop", "idle", "beside"]), default: ParamDefault::Str("in_loop"), doc: "CPU backend: where each round's streaming work runs: in_loop (before its acknowledgement), idle (in the loop after the acknowledgement, while no message waits) or beside (a worker thread, on the operator's `core` when given; the acknowledgement goes out at once)" },
    ],
    build: Build::Stage(build),
};

fn build(p: &Params) -> Result<StageSpec, String> {
    let dem = p.str("dem").ok_or("parameter `dem` is required")?;
    if !std::path::Path::new(dem).is_file() {
        return Err(format!("parameter `dem`: no detector error model at `{dem}`"));
    }
    Ok(StageSpec::QecDecoder {
        dem: dem.into(),
        rounds_per_message: p.int("rounds_per_message")? as u32,
        max_defects: p.int("max_defects")? as u32,
        decoders: p.int("decoders")? as u32,
        // The worker's core comes from the operator entry's `core` (graph/compile.rs).
        settle: match p.str("settle") {
            Some("beside") => Settle::Beside { core: None },
            Some("idle") => Settle::Idle,
            _ => Settle::InLoop,
        },
    })
}
