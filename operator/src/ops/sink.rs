//! `Sink`: takes anything and counts it (the end of a flow that must go somewhere, or a
//! stand-in while a graph is being built).

use std::path::PathBuf;

use super::{
    Build, Finished, HostContext, HostOperator, Message, MsgType, OperatorDecl, Outputs, Params, PortDecl, PortDir,
};

pub static DECL: OperatorDecl = OperatorDecl {
    kind: "Sink",
    doc: "host: counts what it receives, keeps nothing",
    ports: &[PortDecl { name: "in", dir: PortDir::In, ty: MsgType::Any, required: true, doc: "anything" }],
    params: &[],
    build: Build::Host(build),
};

fn build(_: &Params, ctx: &HostContext) -> Result<Box<dyn HostOperator>, String> {
    Ok(Box::new(Sink { name: ctx.name.clone(), count: 0 }))
}

struct Sink {
    name: String,
    count: u64,
}

impl HostOperator for Sink {
    fn on_message(&mut self, _: &'static str, _: Message, _: &mut Outputs) -> Result<(), String> {
        self.count += 1;
        Ok(())
    }

    fn finish(&mut self, _: &Finished<'_>) -> Result<Vec<PathBuf>, String> {
        tracing::info!(operator = %self.name, messages = self.count, "sink");
        Ok(Vec::new())
    }
}
