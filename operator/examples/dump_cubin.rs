// temporary: write the transceiver cubin for SASS inspection
use rocelink_operator::gpu::{kernels, nvrtc};
use rocelink_operator::stage::StageSpec;
fn main() {
    let (main, headers, mut opts) = kernels::transceiver_program(&[StageSpec::Echo]);
    opts.extend(std::env::args().skip(1));
    let c = nvrtc::compile(&main, &headers, "sm_90", &opts, false).unwrap();
    std::fs::write("/tmp/t.cubin", &c.cubin).unwrap();
}
