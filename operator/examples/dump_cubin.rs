//! Writes a transceiver kernel, compiled by NVRTC for sm_90, as a cubin, for reading its SASS
//! (`nvdisasm -c`, `cuobjdump -res-usage`) without a GPU: the path from the poll to the
//! doorbell, register use, spills. The echo graph's chain by default; `--qec MODEL.dem` the
//! QEC decoder's (one round per message, K = 12, one decoder).
//!
//! `LD_LIBRARY_PATH=<dir of libnvrtc.so.13> cargo run --release --example dump_cubin -p
//! rocelink-operator -- OUT.cubin [--qec MODEL.dem] [-DNAME=VALUE ...]` (the extra options are
//! the kernel's compile-time switches, as `ROCELINK_KERNEL_DEFINES` passes them at run time).

use rocelink_operator::gpu::{kernels, nvrtc};
use rocelink_operator::stage::StageSpec;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next() else {
        eprintln!("usage: dump_cubin OUT.cubin [-DNAME=VALUE ...]");
        std::process::exit(2);
    };
    let mut args: Vec<String> = args.collect();
    let stage = match args.iter().position(|a| a == "--qec") {
        Some(i) if i + 1 < args.len() => {
            let dem = args.remove(i + 1);
            args.remove(i);
            StageSpec::QecDecoder {
                dem: dem.into(),
                rounds_per_message: 1,
                max_defects: 12,
                decoders: 1,
                settle: Default::default(),
            }
        }
        Some(_) => {
            eprintln!("--qec needs a detector error model file");
            std::process::exit(2);
        }
        None => StageSpec::Echo,
    };
    let (main, headers, mut opts) = kernels::transceiver_program(&[stage]);
    opts.extend(args);
    match nvrtc::compile(&main, &headers, "sm_90", &opts, false) {
        Ok(c) => {
            if let Err(e) = std::fs::write(&out, &c.cubin) {
                eprintln!("cannot write {out}: {e}");
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
