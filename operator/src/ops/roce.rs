//! `RoceTransceiver`: the queue pair the peer writes into and the transceiver loop answers
//! from. Its `rx` port hands each request to the first device stage, its `tx` port takes the
//! last stage's answer; everything in between is fused into one loop. Its `tap` port gives
//! host operators a copy of every answered message's record (see `crate::tap`).

use super::{Build, MsgType, OperatorDecl, ParamDecl, ParamDefault, ParamKind, Params, PortDecl, PortDir};

/// The queue pair's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransceiverConfig {
    /// RX slots the peer writes into (DP_MAX_BUFF + 1).
    pub slots: u32,
    /// Records in the tap ring (a power of two; 0: no records).
    pub tap_ring: u32,
}

pub static DECL: OperatorDecl = OperatorDecl {
    kind: "RoceTransceiver",
    doc: "the RoCEv2 UC queue pair: requests in (RDMA WRITE with immediate), answers out (SEND)",
    ports: &[
        PortDecl { name: "rx", dir: PortDir::Out, ty: MsgType::Request, required: true, doc: "each request the NIC placed in an RX slot" },
        PortDecl { name: "tx", dir: PortDir::In, ty: MsgType::Response, required: true, doc: "the answer to send back" },
        PortDecl { name: "tap", dir: PortDir::Out, ty: MsgType::MsgRecord, required: false, doc: "a record of every answered message, for host operators" },
    ],
    params: &[
        ParamDecl { name: "slots", kind: ParamKind::Int { min: 1, max: 4096 }, default: ParamDefault::Int(crate::rings::DEFAULT_RX_SLOTS as i64), doc: "RX slots the peer cycles through (the GPU data path posts one receive per slot: at least 72 for a peer with 64 messages in flight)" },
        ParamDecl { name: "tap_ring", kind: ParamKind::Pow2 { min: 0, max: 1 << 24 }, default: ParamDefault::Int(1 << 17), doc: "records in the tap ring the data path writes (32 B each)" },
    ],
    build: Build::Transceiver(build),
};

fn build(p: &Params) -> Result<TransceiverConfig, String> {
    Ok(TransceiverConfig { slots: p.int("slots")? as u32, tap_ring: p.int("tap_ring")? as u32 })
}
