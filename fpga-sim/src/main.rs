//! `fpga-sim`: the software FPGA peer as a process (see `fpga-sim --help`).

fn main() -> anyhow::Result<()> {
    rocelink_fpga_sim::cli::main_with_args(std::env::args_os())
}
