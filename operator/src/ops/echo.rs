//! `Echo`: the device stage that answers each request with a CUQS response echoing its
//! `request_id`, `ptp_timestamp` and argument bytes (`crate::stage::Echo` on the CPU).

use super::{Build, MsgType, OperatorDecl, Params, PortDecl, PortDir};
use crate::stage::StageSpec;

pub static DECL: OperatorDecl = OperatorDecl {
    kind: "Echo",
    doc: "device stage: answers each request with its own arguments",
    ports: &[
        PortDecl { name: "in", dir: PortDir::In, ty: MsgType::Request, required: true, doc: "the request" },
        PortDecl { name: "out", dir: PortDir::Out, ty: MsgType::Response, required: true, doc: "the answer" },
    ],
    params: &[],
    build: Build::Stage(build),
};

fn build(_: &Params) -> Result<StageSpec, String> {
    Ok(StageSpec::Echo)
}
