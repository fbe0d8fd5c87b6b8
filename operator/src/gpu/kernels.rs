//! The CUDA sources, embedded in the binary (so a carried binary needs no source tree), and
//! the code generated from a graph: the fused stage chain of the persistent kernel.

use super::nvrtc::Source;
use crate::stage::StageSpec;

/// (include name, text) of every file under `kernels/` the programs use.
pub const FILES: &[(&str, &str)] = &[
    ("abi.h", include_str!("../../../kernels/abi.h")),
    ("verbs.cuh", include_str!("../../../kernels/verbs.cuh")),
    ("stages/stage.cuh", include_str!("../../../kernels/stages/stage.cuh")),
    ("stages/echo.cuh", include_str!("../../../kernels/stages/echo.cuh")),
    ("stages/qec.cuh", include_str!("../../../kernels/stages/qec.cuh")),
    ("../abi.h", include_str!("../../../kernels/abi.h")),
    ("stage.cuh", include_str!("../../../kernels/stages/stage.cuh")),
    ("blossom.cuh", include_str!("../../../kernels/stages/blossom.cuh")),
    // the transceiver's parts (kernels/transceiver.cu includes them)
    ("transceiver/poll.cuh", include_str!("../../../kernels/transceiver/poll.cuh")),
    ("transceiver/dispatch.cuh", include_str!("../../../kernels/transceiver/dispatch.cuh")),
    ("transceiver/answer.cuh", include_str!("../../../kernels/transceiver/answer.cuh")),
];

const TRANSCEIVER: &str = include_str!("../../../kernels/transceiver.cu");
const PROBE: &str = include_str!("../../../kernels/probe.cu");
const QEC_BATCH: &str = include_str!("../../../kernels/qec_batch.cu");

/// Threads of the transceiver block: one thread polls, warp 0 sends; all load and run stages.
/// 128 threads load a 2 KiB message with one 16-byte load each, all in flight.
pub const TRANSCEIVER_THREADS: u32 = 128;

/// How the persistent transceiver kernel is built: its compile-time switches that the host
/// sets (kernels/transceiver.cu lists them). The caller decides them; the binary takes them
/// from the environment (docs/gpu.md). All of them are part of the compiled kernel's cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelOptions {
    /// The block size (`RL_THREADS`): a multiple of 32, 32 to 1024; 32 leaves no warp for the
    /// pre-poll.
    pub threads: u32,
    /// More `-D` options, for experiments with the kept switches (`-DRL_CHECKED_DOORBELL=0
    /// -DRL_MAX_INLINE=44` for a ConnectX, `-DRL_PROFILE ...`).
    pub defines: Vec<String>,
    /// Test hook (`RL_TEST_STALL`): a kernel that stops answering and beating after its first
    /// message, to prove that the watchdog ends the run with a clear error instead of a hang.
    pub test_stall: bool,
}

impl Default for KernelOptions {
    fn default() -> KernelOptions {
        KernelOptions { threads: TRANSCEIVER_THREADS, defines: Vec::new(), test_stall: false }
    }
}

impl KernelOptions {
    /// Why `threads` cannot be a block size of the kernel, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.threads < 32 || self.threads > 1024 || !self.threads.is_multiple_of(32) {
            return Err(format!(
                "the transceiver kernel's block size must be a multiple of 32 from 32 to 1024, not {}",
                self.threads
            ));
        }
        Ok(())
    }

    /// The NVRTC options that build it.
    pub fn nvrtc_options(&self) -> Vec<String> {
        let mut o = vec![format!("-DRL_THREADS={}", self.threads)];
        o.extend(self.defines.iter().cloned());
        if self.test_stall {
            o.push("-DRL_TEST_STALL".into());
        }
        o
    }
}

fn headers() -> Vec<Source> {
    FILES.iter().map(|(n, t)| Source { name: (*n).to_string(), text: (*t).to_string() }).collect()
}

/// The device code of one stage (kernels/stages/stage.cuh has the contract of its forms).
struct StageCode {
    /// Its header under kernels/.
    header: &'static str,
    /// The function that runs it from `src` into `dst` (`{func}_warp`, `{func}_block` too).
    func: &'static str,
    /// It takes the chain's `state` (the device state blob, `rl_transceiver_desc.stage_state`)
    /// as its last argument.
    stateful: bool,
    /// It has a register form, `{func}_regs`.
    regs: bool,
    /// It has an idle form, `{func}_idle`: work between messages.
    idle: bool,
}

fn stage_code(spec: &StageSpec) -> StageCode {
    match spec {
        StageSpec::Echo => {
            StageCode { header: "stages/echo.cuh", func: "rl_stage_echo", stateful: false, regs: true, idle: false }
        }
        // State: the blob of `crate::gpu::qec_state` (tables, per-decoder shots, counters). Its
        // idle form decodes a shot's defects so far ahead of the shot's last message.
        StageSpec::QecDecoder { .. } => {
            StageCode { header: "stages/qec.cuh", func: "rl_stage_qec", stateful: true, regs: false, idle: true }
        }
    }
}

/// Why the GPU cannot run `chain`, if it cannot: more than one stage with device state (the
/// descriptor carries one `stage_state`), or a QEC decoder whose configuration or DEM does
/// not fit the device stage (`qec_state::check_spec`: K above 12, too many detectors or
/// observables, distances whose sums need more than 32 bits). Loads the DEM.
pub fn gpu_unsupported(chain: &[StageSpec]) -> Option<String> {
    let stateful: Vec<&StageSpec> = chain.iter().filter(|s| stage_code(s).stateful).collect();
    if stateful.len() > 1 {
        return Some(format!(
            "the GPU chain can hold one stage with device state (here {}: one QEC decoder per graph)",
            stateful.len()
        ));
    }
    stateful.first().and_then(|spec| super::qec_state::check_spec(spec).err())
}

/// `rl_chain.cuh` for a chain: each stage's answer is the next stage's request, ping-ponging
/// between the kernel's two shared buffers; `*answer` is where the last answer is.
///
/// Three entry points (the stage contract, kernels/stages/echo.cuh):
/// - `rl_run_chain`: every thread of the block runs every stage (the launch-per-message probe);
/// - `rl_run_chain_warp`: warp 0 alone runs the stages' warp forms until one of them needs the
///   block (`RL_STAGE_TO_BLOCK`, with the stage's index and input length in `*resume`, `*rlen`);
///   the persistent kernel's data path, with no block barrier for the common message;
/// - `rl_run_chain_block`: every thread, after that hand-over: the stage's block continuation,
///   then the later stages whole;
/// - `rl_run_chain_regs`, when every stage has a register form (`RL_CHAIN_REGS` 1): warp 0,
///   the request and the answer in registers (16 bytes a lane), for a request the poll brought
///   in whole;
/// - `rl_run_chain_idle`, when a stage has an idle form (`RL_CHAIN_IDLE` 1): warp 0, between
///   messages, each such stage's idle form in chain order.
pub fn chain_header(chain: &[StageSpec]) -> String {
    let mut includes = String::new();
    let mut full = String::new();
    let mut warp = String::new();
    let mut block = String::new();
    let mut regs = String::new();
    let mut idle = String::new();
    let mut all_regs = true;
    let mut seen = Vec::new();
    for (k, spec) in chain.iter().enumerate() {
        let StageCode { header, func, stateful, regs: has_regs, idle: has_idle } = stage_code(spec);
        all_regs &= has_regs;
        if has_idle {
            let state = if stateful { "state" } else { "" };
            idle.push_str(&format!("    /* stage {k}: {spec:?} */\n    {func}_idle({state});\n"));
        }
        regs.push_str(&format!(
            "    /* stage {k}: {spec:?} */\n    n = {func}_regs(c, n);\n    if (n < 0) return -1;\n"
        ));
        if !seen.contains(&header) {
            includes.push_str(&format!("#include \"{header}\"\n"));
            seen.push(header);
        }
        let (src, dst) = if k % 2 == 0 { ("a", "b") } else { ("b", "a") };
        let state = if stateful { ", state" } else { "" };
        full.push_str(&format!(
            "    /* stage {k}: {spec:?} */\n    n = {func}({src}, n, {dst}, cap{state});\n    if (n < 0) return -1;\n"
        ));
        warp.push_str(&format!(
            "    /* stage {k}: {spec:?} */\n    *rlen = n;\n    n = {func}_warp({src}, n, {dst}, cap{state});\n    if (n == RL_STAGE_TO_BLOCK) {{\n        *resume = {k};\n        return n;\n    }}\n    if (n < 0) return -1;\n"
        ));
        block.push_str(&format!(
            "    /* stage {k}: {spec:?} */\n    if (resume == {k}) n = {func}_block({src}, n, {dst}, cap{state});\n    else if (resume < {k}) n = {func}({src}, n, {dst}, cap{state});\n    if (resume <= {k} && n < 0) return -1;\n"
        ));
    }
    if chain.is_empty() {
        // No stage ends with the contract's barrier: the chain keeps it.
        full.push_str("    __syncthreads();\n");
    }
    let last = if chain.len() % 2 == 1 { "b" } else { "a" };
    format!(
        "/* generated by rocelink from the graph's device stages: {chain:?} */\n#ifndef ROCELINK_CHAIN_CUH\n#define ROCELINK_CHAIN_CUH\n#include \"abi.h\"\n#include \"stages/stage.cuh\"\n{includes}\n\
__device__ __forceinline__ int rl_run_chain(uint8_t *a, int len, uint8_t *b, int cap, const uint8_t **answer, void *state) {{\n    int n = len;\n    (void)state;\n{full}    *answer = {last};\n    return n;\n}}\n\
__device__ __forceinline__ int rl_run_chain_warp(uint8_t *a, int len, uint8_t *b, int cap, const uint8_t **answer, void *state, int *resume, int *rlen) {{\n    int n = len;\n    (void)state;\n    (void)resume;\n    (void)rlen;\n{warp}    *answer = {last};\n    return n;\n}}\n\
__device__ __forceinline__ int rl_run_chain_block(uint8_t *a, uint8_t *b, int cap, const uint8_t **answer, void *state, int resume, int n) {{\n    (void)a;\n    (void)b;\n    (void)cap;\n    (void)state;\n    (void)resume;\n{block}    *answer = {last};\n    return n;\n}}\n\
#define RL_CHAIN_REGS {regs_flag}\n\
__device__ __forceinline__ int rl_run_chain_regs(uint4 &c, int len) {{\n    int n = len;\n    (void)c;\n{regs}    return n;\n}}\n\
#define RL_CHAIN_IDLE {idle_flag}\n\
__device__ __forceinline__ void rl_run_chain_idle(void *state) {{\n    (void)state;\n{idle}}}\n#endif\n",
        regs_flag = u8::from(all_regs),
        idle_flag = u8::from(!idle.is_empty()),
        regs = if all_regs { regs } else { "    return -1; /* a stage without a register form */\n".to_string() },
    )
}

/// The persistent transceiver program for `chain` as built by default, its headers and NVRTC
/// options.
pub fn transceiver_program(chain: &[StageSpec]) -> (Source, Vec<Source>, Vec<String>) {
    transceiver_program_with(chain, &KernelOptions::default())
}

/// The same built with `options`.
pub fn transceiver_program_with(chain: &[StageSpec], options: &KernelOptions) -> (Source, Vec<Source>, Vec<String>) {
    let mut h = headers();
    h.push(Source { name: "rl_chain.cuh".into(), text: chain_header(chain) });
    let main = Source { name: "transceiver.cu".into(), text: TRANSCEIVER.into() };
    (main, h, options.nvrtc_options())
}

/// The floor probes (mapped-memory ping-pong) and the launch-per-message echo kernel.
pub fn probe_program() -> (Source, Vec<Source>, Vec<String>) {
    let mut h = headers();
    h.push(Source { name: "rl_chain.cuh".into(), text: chain_header(&[StageSpec::Echo]) });
    (Source { name: "probe.cu".into(), text: PROBE.into() }, h, vec![format!("-DRL_THREADS={TRANSCEIVER_THREADS}")])
}

/// The offline batch decoder (`rocelink decode --backend gpu`): `rl_stage_qec` over many
/// shots, one decoder id per block (`crate::gpu::qec_batch`).
pub fn qec_batch_program() -> (Source, Vec<Source>, Vec<String>) {
    (Source { name: "qec_batch.cu".into(), text: QEC_BATCH.into() }, headers(), Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_header_ping_pongs_and_names_the_last_buffer() {
        let one = chain_header(&[StageSpec::Echo]);
        assert!(one.contains("n = rl_stage_echo(a, n, b, cap);"));
        assert!(one.contains("*answer = b;"));
        assert_eq!(one.matches("#include \"stages/echo.cuh\"").count(), 1);
        let two = chain_header(&[StageSpec::Echo, StageSpec::Echo]);
        assert!(two.contains("n = rl_stage_echo(b, n, a, cap);"));
        assert!(two.contains("*answer = a;"));
        assert_eq!(two.matches("#include \"stages/echo.cuh\"").count(), 1);
        // no stage: the answer is the request, and the chain keeps the stages' closing barrier
        let none = chain_header(&[]);
        assert!(none.contains("__syncthreads();") && none.contains("*answer = a;"));
        assert!(!one.contains("__syncthreads"));
        // the warp form hands over at the stage that needs the block, which resumes there
        assert!(two.contains("n = rl_stage_echo_warp(b, n, a, cap);") && two.contains("*resume = 1;"));
        assert!(two.contains("if (resume == 1) n = rl_stage_echo_block(b, n, a, cap);"));
        assert!(two.contains("else if (resume < 1) n = rl_stage_echo(b, n, a, cap);"));
        // echo has a register form: the chain runs on registers, stage after stage
        assert!(one.contains("#define RL_CHAIN_REGS 1") && one.contains("n = rl_stage_echo_regs(c, n);"));
        assert_eq!(two.matches("n = rl_stage_echo_regs(c, n);").count(), 2);
        assert!(none.contains("#define RL_CHAIN_REGS 1"));
        // echo has no idle form: nothing runs between messages
        assert!(one.contains("#define RL_CHAIN_IDLE 0") && !one.contains("rl_stage_echo_idle"));
    }

    #[test]
    fn kernel_options_become_nvrtc_options() {
        assert_eq!(KernelOptions::default().nvrtc_options(), vec!["-DRL_THREADS=128".to_string()]);
        let o = KernelOptions { threads: 32, defines: vec!["-DRL_MAX_INLINE=44".into()], test_stall: true };
        assert_eq!(o.nvrtc_options(), vec!["-DRL_THREADS=32", "-DRL_MAX_INLINE=44", "-DRL_TEST_STALL"]);
        assert!(o.check().is_ok() && KernelOptions::default().check().is_ok());
        for bad in [0, 16, 100, 2048] {
            assert!(KernelOptions { threads: bad, ..KernelOptions::default() }.check().is_err(), "{bad}");
        }
        let (_, _, options) = transceiver_program_with(&[StageSpec::Echo], &o);
        assert_eq!(options, o.nvrtc_options());
        assert_eq!(transceiver_program(&[StageSpec::Echo]).2, KernelOptions::default().nvrtc_options());
    }

    #[test]
    fn the_qec_stage_gets_the_chain_state() {
        let qec = StageSpec::QecDecoder {
            dem: "model.dem".into(),
            rounds_per_message: 1,
            max_defects: 12,
            decoders: 1,
            settle: Default::default(),
        };
        let h = chain_header(&[StageSpec::Echo, qec]);
        assert!(h.contains("#include \"stages/qec.cuh\""));
        assert!(h.contains("n = rl_stage_echo(a, n, b, cap);"));
        assert!(h.contains("n = rl_stage_qec(b, n, a, cap, state);"));
        assert!(h.contains("n = rl_stage_qec_warp(b, n, a, cap, state);"));
        assert!(h.contains("if (resume == 1) n = rl_stage_qec_block(b, n, a, cap, state);"));
        // the decoder has no register form: the chain has none either
        assert!(h.contains("#define RL_CHAIN_REGS 0") && !h.contains("rl_stage_qec_regs"));
        // it has an idle form (a shot decoded ahead of its last message), with the state
        assert!(h.contains("#define RL_CHAIN_IDLE 1") && h.contains("    rl_stage_qec_idle(state);\n"));
        assert_eq!(h.matches("_idle(").count(), 2, "the idle form called once, besides rl_run_chain_idle itself: {h}");
        assert!(FILES.iter().any(|(name, _)| *name == "stages/qec.cuh"));
    }
}
