//! The CUDA kernels compile with NVRTC to sm_90 cubins (the H200's architecture). NVRTC
//! needs no GPU: CI installs the `nvidia-cuda-nvrtc` wheel (the GPU machine's CUDA 13.0) and
//! puts its `libnvrtc.so.13` on the loader path, so a kernel that does not compile fails CI.

use rocelink_operator::gpu::kernels::{self, KernelOptions};
use rocelink_operator::gpu::nvrtc;
use rocelink_operator::stage::StageSpec;

fn nvrtc_or_skip() -> bool {
    nvrtc::present_or_skip("this kernel compile test")
}

fn compile(program: (nvrtc::Source, Vec<nvrtc::Source>, Vec<String>), arch: &str) -> nvrtc::Compiled {
    let (main, headers, options) = program;
    match nvrtc::compile(&main, &headers, arch, &options, false) {
        Ok(c) => c,
        Err(e) => panic!("{} does not compile for {arch}:\n{e}", main.name),
    }
}

#[test]
fn transceiver_kernel_compiles_to_sm90_cubin() {
    if !nvrtc_or_skip() {
        return;
    }
    // The QEC chain too: its stage's static shared memory (the DP, the schedule, the cache)
    // must fit beside the transceiver's in the 48 KB a static allocation may take, which
    // ptxas enforces at compile time.
    let qec = StageSpec::QecDecoder {
        dem: "unused.dem".into(),
        rounds_per_message: 1,
        max_defects: 12,
        decoders: 1,
        settle: Default::default(),
    };
    for chain in
        [vec![StageSpec::Echo], vec![StageSpec::Echo, StageSpec::Echo], vec![qec.clone()], vec![StageSpec::Echo, qec]]
    {
        let c = compile(kernels::transceiver_program(&chain), "sm_90");
        // An ELF image (cubin), not PTX text.
        assert_eq!(&c.cubin[..4], b"\x7fELF", "chain {chain:?}");
    }
}

#[test]
fn every_kernel_switch_compiles() {
    if !nvrtc_or_skip() {
        return;
    }
    // Every value of the switches the kernel keeps (kernels/transceiver.cu: the block size, the
    // inline limit, the doorbells, the profile, the stall test, the buffers) away from its
    // default, and a few together; what ROCELINK_KERNEL_DEFINES may pass.
    let echo = [StageSpec::Echo];
    let qec = [StageSpec::QecDecoder {
        dem: "unused.dem".into(),
        rounds_per_message: 1,
        max_defects: 12,
        decoders: 1,
        settle: Default::default(),
    }];
    let variants: &[(&[StageSpec], &[&str])] = &[
        (&echo, &["-DRL_THREADS=32"]),
        (&echo, &["-DRL_THREADS=64"]),
        (&echo, &["-DRL_THREADS=256"]),
        (&echo, &["-DRL_MAX_INLINE=44"]),
        (&echo, &["-DRL_CHECKED_DOORBELL=0"]),
        (&echo, &["-DRL_DOORBELL_MMIO=1"]),
        (&echo, &["-DRL_DOORBELL_MMIO=1", "-DRL_MAX_INLINE=44"]),
        (&echo, &["-DRL_CHECKED_DOORBELL=0", "-DRL_MAX_INLINE=44"]),
        (&echo, &["-DRL_MAX_MSG=1024"]),
        (&echo, &["-DRL_PROFILE"]),
        (&echo, &["-DRL_PROFILE", "-DRL_PROFILE_A=1", "-DRL_PROFILE_B=2"]),
        (&echo, &["-DRL_PROFILE", "-DRL_PROFILE_A=4", "-DRL_PROFILE_B=5"]),
        (&echo, &["-DRL_PROFILE", "-DRL_PROFILE_CLK", "-DRL_PROFILE_A=7", "-DRL_PROFILE_B=8"]),
        (
            &echo,
            &["-DRL_PROFILE", "-DRL_PROFILE_CLK", "-DRL_CHECKED_DOORBELL=0", "-DRL_PROFILE_A=7", "-DRL_PROFILE_B=8"],
        ),
        (&echo, &["-DRL_PROFILE", "-DRL_DOORBELL_MMIO=1", "-DRL_MAX_INLINE=44"]),
        (&echo, &["-DRL_THREADS=256", "-DRL_PROFILE"]),
        (&echo, &["-DRL_TEST_STALL"]),
        (&echo, &["-DRL_MAX_INLINE=44", "-DRL_TEST_STALL"]),
        (&echo, &["-DRL_THREADS=32", "-DRL_CHECKED_DOORBELL=0", "-DRL_MAX_INLINE=44"]),
        // a chain without register forms: the fast path's checks, then the warp forms
        (&qec, &["-DRL_THREADS=32", "-DRL_MAX_INLINE=44"]),
        (&qec, &["-DRL_PROFILE", "-DRL_CHECKED_DOORBELL=0"]),
    ];
    for (chain, defs) in variants {
        let options =
            KernelOptions { defines: defs.iter().map(|d| d.to_string()).collect(), ..KernelOptions::default() };
        let (main, headers, options) = kernels::transceiver_program_with(chain, &options);
        if let Err(e) = nvrtc::compile(&main, &headers, "sm_90", &options, false) {
            panic!("variant {defs:?} ({chain:?}) does not compile:\n{e}");
        }
    }
    // The block size and the stall test as the typed options set them.
    let stall = KernelOptions { threads: 64, test_stall: true, ..KernelOptions::default() };
    let (main, headers, options) = kernels::transceiver_program_with(&echo, &stall);
    assert!(
        options.iter().any(|o| o == "-DRL_THREADS=64") && options.iter().any(|o| o == "-DRL_TEST_STALL"),
        "{options:?}"
    );
    compile((main, headers, options), "sm_90");
    // The ConnectX's doorbell needs the unchecked one: the checked doorbell with it is refused.
    let (main, headers, mut options) = kernels::transceiver_program(&echo);
    options.extend(["-DRL_DOORBELL_MMIO=1".to_string(), "-DRL_CHECKED_DOORBELL=1".to_string()]);
    let e = nvrtc::compile(&main, &headers, "sm_90", &options, false)
        .expect_err("RL_DOORBELL_MMIO with RL_CHECKED_DOORBELL=1 is refused");
    assert!(e.to_string().contains("RL_DOORBELL_MMIO needs RL_CHECKED_DOORBELL=0"), "{e}");
}

#[test]
fn probe_kernels_compile_to_sm90_cubin() {
    if !nvrtc_or_skip() {
        return;
    }
    let c = compile(kernels::probe_program(), "sm_90");
    assert_eq!(&c.cubin[..4], b"\x7fELF");
    // Every kernel the benchmark loads by name is in the cubin (its symbol table).
    for name in ["rl_probe_pingpong", "rl_probe_pingpong_fenced", "rl_echo_once"] {
        assert!(
            c.cubin.windows(name.len() + 1).any(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0),
            "{name} missing from the probe cubin"
        );
    }
}

#[test]
fn a_compile_error_returns_nvrtc_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let main = nvrtc::Source {
        name: "broken.cu".into(),
        text: "extern \"C\" __global__ void k() { this_is_not_defined(); }".into(),
    };
    let err = nvrtc::compile(&main, &[], "sm_90", &[], false).expect_err("must not compile");
    let msg = err.to_string();
    assert!(msg.contains("this_is_not_defined"), "{msg}");
    assert!(msg.contains("sm_90"), "{msg}");
}

#[test]
fn compiled_kernels_are_cached_on_disk() {
    if !nvrtc_or_skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rocelink-kcache-{}", std::process::id()));
    std::env::set_var("ROCELINK_KERNEL_CACHE", &dir);
    let (main, headers, options) = kernels::probe_program();
    let first = nvrtc::compile(&main, &headers, "sm_90", &options, true).unwrap();
    let second = nvrtc::compile(&main, &headers, "sm_90", &options, true).unwrap();
    assert!(!first.from_cache);
    assert!(second.from_cache);
    assert_eq!(first.cubin, second.cubin);
    assert!(dir.join(format!("{}.cubin", first.key)).is_file());
    // Another architecture is another key.
    let other = nvrtc::compile(&main, &headers, "sm_80", &options, true).unwrap();
    assert_ne!(other.key, first.key);
    let _ = std::fs::remove_dir_all(&dir);
}
