//! `rocelink decode --backend gpu`: decodes a file of detection events with
//! the GPU decoder, the device stage `rl_stage_qec` of `kernels/stages/qec.cuh` that the
//! persistent transceiver kernel runs, through the batch kernel `kernels/qec_batch.cu`.
//!
//! Guarantees:
//! - the predictions file is byte for byte the one [`crate::qec::predict`] (the CPU decoder)
//!   writes for the same files and K: the stage decodes on the same PyMatching-exact table
//!   (`fine_table`, uploaded by [`QecState`]) and is checked against the CPU session bit for
//!   bit (`operator/tests/qec_gpu_match.rs`);
//! - the same shot readers and writers as the CPU path (`qec::predict`), so the same formats,
//!   the same errors for malformed input (naming the shot and the file), and an empty input
//!   gives an empty output;
//! - the statistics are the CPU path's [`PredictStats`], with the decode times taken from each
//!   answer's decode report: the in-kernel time of the decode (thread 0's `%globaltimer` from
//!   the defect scan to the answer written), no transfer or launch;
//! - without a CUDA driver, a device or NVRTC it fails with [`GpuDecodeError::Gpu`] before the
//!   output file is created; configurations the device stage cannot hold (K above 12, more
//!   than 3584 detectors or 32 observables) with [`GpuDecodeError::State`].
//!
//! How: every shot becomes one CUQR `enqueue_syndromes` request, built here (all n detection
//! bits, counter 0, so the stage decodes on it), for decoder id `i % decoders` where
//! `decoders` = two per multiprocessor; the kernel runs one block per decoder id, block b
//! taking the requests b, b + decoders, ... in order, and copies each answer (CUQS header,
//! correction bits, 16-byte decode report) out. Shots go in launches of `decoders * 256`; each
//! answer's report names the decoder's own shot index, which is checked against the shots
//! that decoder was given before (of this file, or of the requests before with `--serve`), as
//! are the answer's status, length and request id.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use rocelink_wire::qec::{self as wq, DecodeReportRepr, EnqueueSyndromesRepr, REPORT_OVERFLOW, REPORT_UNMATCHABLE};
use rocelink_wire::rpc::{self, function_id, status, RequestRepr, ResponseRepr};
use thiserror::Error;

use super::driver::{DeviceBuffer, Gpu, GpuError, GpuInfo, StreamState};
use super::qec_state::{QecState, QecStateError};
use super::{kernels, nvrtc};
use crate::qec::predict::{check_shot_count, finish_stats, write_atomically, PredictionWriter, ShotReader};
use crate::qec::serve::{self, ServeStats};
use crate::qec::{InputFormat, PredictStats, QecError, SessionConfig, ShotFormat};

/// Threads per block (a multiple of 32, as the stage requires).
pub const THREADS: u32 = kernels::TRANSCEIVER_THREADS;
/// `RL_BATCH_OUT`: bytes of each answer's slot in the output array.
pub const OUT_STRIDE: usize = 64;
/// `RL_BATCH_MAX_REQ`: the longest request the kernel stages.
pub const MAX_REQUEST: usize = 512;
/// Requests each block handles per launch.
const ROUNDS_PER_LAUNCH: usize = 256;
/// The longest one launch may take before the decode is given up.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a GPU decode failed.
#[derive(Debug, Error)]
pub enum GpuDecodeError {
    /// The DEM, the input or the output (the CPU path's errors).
    #[error(transparent)]
    Qec(#[from] QecError),
    /// The decoder configuration does not fit the device stage.
    #[error(transparent)]
    State(#[from] QecStateError),
    /// No usable GPU, NVRTC, or a CUDA call failed (not a `source`: the message says it all,
    /// once, in `{:#}` chains too).
    #[error("GPU decoder: {0}")]
    Gpu(GpuError),
    /// The kernel's answer is not the decoded shot it must be (a bug, not an input error).
    #[error("GPU decoder: {0}")]
    Answer(String),
}

impl From<GpuError> for GpuDecodeError {
    fn from(e: GpuError) -> Self {
        GpuDecodeError::Gpu(e)
    }
}

/// What a GPU decode did.
#[derive(Debug, Clone)]
pub struct GpuDecodeReport {
    /// As the CPU path's; decode times are the in-kernel ones of the decode reports.
    pub stats: PredictStats,
    /// The device.
    pub gpu: GpuInfo,
    /// Blocks (decoder ids) per launch.
    pub decoders: usize,
    /// Kernel launches.
    pub launches: u64,
    /// Wall time of the launches (upload, kernel, download), ms.
    pub gpu_ms: f64,
}

/// Decoder ids (blocks) for a device with `multiprocessors` SMs: two per SM.
pub fn decoders_for(multiprocessors: i32) -> usize {
    (2 * multiprocessors.max(1) as usize).clamp(1, 1024)
}

/// Bytes of each request: header, fixed arguments and `packed_len(n)` syndrome bytes.
pub fn request_len(num_detectors: usize) -> usize {
    rpc::HEADER_LEN + wq::ENQUEUE_SYNDROMES_FIXED_LEN + wq::packed_len(num_detectors)
}

/// Writes into `buf` (`request_len(n)` bytes) the `enqueue_syndromes` request carrying the
/// whole shot (`packed_len(n)` bytes, b8 order; bits at or past n are cleared first) to
/// `decoder`, counter 0, with `request_id`.
pub fn build_request(buf: &mut [u8], shot: &mut [u8], n: usize, decoder: usize, request_id: u32) -> Result<(), String> {
    if !n.is_multiple_of(8) {
        if let Some(last) = shot.last_mut() {
            *last &= (1u8 << (n % 8)) - 1;
        }
    }
    let e = EnqueueSyndromesRepr {
        decoder_id: decoder as i64,
        counter: 0,
        syndrome_mapping_id: 0,
        num_syndromes: n as i64,
    };
    let head = RequestRepr {
        function_id: function_id::ENQUEUE_SYNDROMES,
        arg_len: e.buffer_len() as u32,
        request_id,
        ptp_timestamp: 0,
    };
    let (h, args) = buf.split_at_mut_checked(rpc::HEADER_LEN).ok_or("request buffer shorter than a header")?;
    head.emit(h).map_err(|e| format!("request header: {e:?}"))?;
    e.emit_with(shot, args).map_err(|e| format!("enqueue_syndromes arguments: {e:?}"))?;
    Ok(())
}

/// The correction mask and decode report of the answer to the request of [`build_request`]
/// (`len` as the stage returned it, -1 when it did not answer), or why it is not one.
pub fn parse_answer(
    answer: &[u8],
    len: i32,
    num_observables: usize,
    request_id: u32,
) -> Result<(u64, DecodeReportRepr), String> {
    let clen = wq::correction_len(num_observables);
    let want = rpc::HEADER_LEN + clen + wq::DECODE_REPORT_LEN;
    let n = usize::try_from(len).map_err(|_| format!("the decoder stage did not answer (returned {len})"))?;
    let a = answer
        .get(..n)
        .ok_or_else(|| format!("an answer of {n} bytes, longer than the {} the kernel copies", answer.len()))?;
    let r = ResponseRepr::parse(a).map_err(|e| format!("an answer without a CUQS header ({e:?})"))?;
    if r.status != status::OK || n != want || r.result_len as usize != clen + wq::DECODE_REPORT_LEN {
        return Err(format!(
            "answer status {} with {} result bytes (want status 0 with {})",
            r.status,
            r.result_len,
            clen + wq::DECODE_REPORT_LEN
        ));
    }
    if r.request_id != request_id {
        return Err(format!("the answer to request {} came in the slot of request {request_id}", r.request_id));
    }
    let body = &a[rpc::HEADER_LEN..];
    let report = DecodeReportRepr::parse(&body[clen..]).map_err(|e| format!("decode report: {e:?}"))?;
    Ok((wq::parse_corrections(&body[..clen], num_observables), report))
}

/// Runs `count` requests (`stride` bytes apart in `reqs`, each `len` bytes) through the stage;
/// fills `outs` (`count * OUT_STRIDE` bytes) and `lens`.
trait Executor {
    fn run(
        &mut self,
        reqs: &[u8],
        stride: usize,
        len: usize,
        count: usize,
        outs: &mut [u8],
        lens: &mut [i32],
    ) -> Result<(), GpuDecodeError>;
}

/// Decodes every shot of `in_path` with the DEM of `dem_path` on GPU `ordinal` and writes the
/// predictions to `out_path`, exactly as [`crate::qec::predict`] (module docs).
#[allow(clippy::too_many_arguments)]
pub fn decode_file(
    ordinal: usize,
    dem_path: &Path,
    in_path: &Path,
    in_format: impl Into<InputFormat>,
    out_path: &Path,
    out_format: ShotFormat,
    max_defects: usize,
    expected_shots: Option<u64>,
    options: crate::qec::graph::GraphOptions,
) -> Result<GpuDecodeReport, GpuDecodeError> {
    let in_format = in_format.into();
    let table = crate::qec::fine_table_with(dem_path, options)?.0;
    if let Some(shots) = expected_shots {
        check_shot_count(in_path, in_format, table.num_detectors, table.num_observables, shots)?;
    }
    let input = File::open(in_path).map_err(|e| QecError::Io { path: in_path.to_path_buf(), source: e })?;
    let (stats, run) = with_batch_decoder(ordinal, dem_path, &table, max_defects, |decode| {
        // The predictions file appears only complete (crate::qec::predict module docs).
        write_atomically(out_path, |writer| -> Result<PredictStats, GpuDecodeError> {
            let r = decode(&mut BufReader::new(input), in_format, writer, out_format, in_path, out_path);
            if let (Ok(stats), Some(shots)) = (&r, expected_shots) {
                if stats.shots != shots {
                    return Err(QecError::Input {
                        path: in_path.to_path_buf(),
                        reason: format!("{} shots, but {shots} were expected", stats.shots),
                    }
                    .into());
                }
            }
            r
        })
    })?;
    Ok(GpuDecodeReport { stats, gpu: run.gpu, decoders: run.decoders, launches: run.launches, gpu_ms: run.gpu_ms })
}

/// `rocelink decode --backend gpu --serve` (`crate::qec::serve`): the request loop over
/// `input` and `output` with the batch decoder set up once, each request decoded as
/// [`decode_file`] decodes a file.
pub fn serve(
    ordinal: usize,
    dem_path: &Path,
    max_defects: usize,
    options: crate::qec::graph::GraphOptions,
    input: impl std::io::Read,
    output: impl Write,
) -> Result<(ServeStats, BatchRun), GpuDecodeError> {
    let table = crate::qec::fine_table_with(dem_path, options)?.0;
    let (n, o) = (table.num_detectors, table.num_observables);
    with_batch_decoder(ordinal, dem_path, &table, max_defects, |decode| {
        let (i, out) = (Path::new(serve::INPUT_NAME), Path::new("<stdout>"));
        serve::serve_requests(input, output, n, o, |shots, answer| {
            let mut shots = shots;
            decode(&mut shots, ShotFormat::B8.into(), answer, ShotFormat::B8, i, out)
        })
    })
}

/// What a batch decoder did on its GPU (over every stream it decoded).
#[derive(Debug, Clone)]
pub struct BatchRun {
    /// The device.
    pub gpu: GpuInfo,
    /// Blocks (decoder ids) per launch.
    pub decoders: usize,
    /// Kernel launches.
    pub launches: u64,
    /// Wall time of the launches (upload, kernel, download), ms.
    pub gpu_ms: f64,
}

/// Decodes a stream of shots (input, its format, output, its format, their names for errors).
type DecodeStreamFn<'a> = dyn FnMut(
        &mut dyn BufRead,
        InputFormat,
        &mut dyn Write,
        ShotFormat,
        &Path,
        &Path,
    ) -> Result<PredictStats, GpuDecodeError>
    + 'a;

/// Sets up the batch decoder for `table` (the DEM of `dem_path`) on GPU `ordinal` (what the
/// device stage cannot hold is refused before a GPU is looked for) and hands it to `work`: it
/// decodes stream after stream on the same device state (the decoders' shot counts carry
/// over). Frees the device after `work`.
fn with_batch_decoder<R>(
    ordinal: usize,
    dem_path: &Path,
    table: &crate::qec::DistanceTable<u32>,
    max_defects: usize,
    work: impl FnOnce(&mut DecodeStreamFn<'_>) -> Result<R, GpuDecodeError>,
) -> Result<(R, BatchRun), GpuDecodeError> {
    // Refuse what the device stage cannot hold before looking for a GPU.
    let config = |decoders| SessionConfig {
        decoders,
        rounds_per_message: 1,
        max_defects,
        syndrome_mapping_id: None,
        measure_time: true,
    };
    QecState::build(table, &config(1))?;
    let gpu = Gpu::open(ordinal)?;
    let decoders = decoders_for(gpu.info.multiprocessors);
    let state = QecState::build(table, &config(decoders))?;
    let (main, headers, options) = kernels::qec_batch_program();
    let compiled = nvrtc::compile(&main, &headers, &gpu.info.arch(), &options, true)?;
    let module = gpu.load(&compiled.cubin, &["rl_qec_batch"])?;
    let mut exec = GpuExecutor::new(&gpu, &module, &state, decoders, request_len(table.num_detectors))?;
    // A shot the device could not decode (status OVERFLOW: a cluster over its scratch) is
    // decoded here, exactly, by the CPU decoder, made at the first such shot.
    let mut cpu: Option<rocelink_qec::MatchingDecoder> = None;
    let mut redecode = |shot: &[u8]| -> Result<(u64, f64), GpuDecodeError> {
        if cpu.is_none() {
            let graph = crate::qec::sparse_graph_from_file(dem_path)?;
            cpu = Some(rocelink_qec::MatchingDecoder::new(graph));
        }
        Ok(cpu.as_mut().map_or((0, f64::INFINITY), |d| {
            let r = d.decode_b8(shot);
            (r.observables, r.weight)
        }))
    };
    let (n, num_obs) = (table.num_detectors, table.num_observables);
    let mut done = vec![0u64; decoders];
    let result = work(&mut |input, in_format, output, out_format, in_name, out_name| {
        let stats = decode_stream(
            &mut exec,
            &mut redecode,
            &mut done,
            n,
            num_obs,
            input,
            in_format,
            output,
            out_format,
            in_name,
            out_name,
        )?;
        Ok(stats)
    });
    let (launches, gpu_ms) = (exec.launches, exec.millis);
    let freed = exec.free();
    if !exec.stuck {
        module.unload(); // waits for the module's kernels: not after one that did not finish
    }
    let r = result?;
    freed?;
    Ok((r, BatchRun { gpu: gpu.info.clone(), decoders, launches, gpu_ms }))
}

/// Decodes one shot (b8) the device could not, on the CPU: its observables and weight.
type Redecode<'a> = dyn FnMut(&[u8]) -> Result<(u64, f64), GpuDecodeError> + 'a;

/// The decode loop over open streams (module docs), with the stage behind `exec`: one
/// decoder id per entry of `done`, which counts the shots each has decoded (before this
/// stream too: its report's shot index is checked against it).
#[allow(clippy::too_many_arguments)]
fn decode_stream(
    exec: &mut dyn Executor,
    redecode: &mut Redecode<'_>,
    done: &mut [u64],
    n: usize,
    num_obs: usize,
    mut input: impl BufRead,
    in_format: InputFormat,
    mut output: impl Write,
    out_format: ShotFormat,
    in_name: &Path,
    out_name: &Path,
) -> Result<PredictStats, GpuDecodeError> {
    let decoders = done.len();
    let mut reader = ShotReader::new(in_format, n, num_obs, in_name)?;
    let mut writer = PredictionWriter::new(out_format, num_obs);
    let len = request_len(n);
    if len > MAX_REQUEST {
        return Err(GpuDecodeError::Answer(format!(
            "{n} detectors make {len}-byte requests; the batch kernel holds {MAX_REQUEST}"
        )));
    }
    let stride = len.div_ceil(16) * 16;
    let per_launch = decoders * ROUNDS_PER_LAUNCH;
    let mut reqs = vec![0u8; per_launch * stride];
    let mut outs = vec![0u8; per_launch * OUT_STRIDE];
    let mut lens = vec![0i32; per_launch];
    let mut shot = vec![0u8; wq::packed_len(n)];
    let mut stats = PredictStats { defect_histogram: vec![0; n + 1], ..PredictStats::default() };
    let mut times: Vec<u64> = Vec::new();
    loop {
        // Read a launch's worth; a malformed shot ends the input after the shots before it
        // are decoded and written (as the CPU path writes them before it stops).
        let first = stats.shots;
        let mut count = 0;
        let mut failed = None;
        while count < per_launch {
            match reader.read(&mut input, first + count as u64, &mut shot) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            let g = first + count as u64;
            build_request(&mut reqs[count * stride..count * stride + len], &mut shot, n, count % decoders, g as u32)
                .map_err(GpuDecodeError::Answer)?;
            count += 1;
        }
        if count > 0 {
            exec.run(&reqs, stride, len, count, &mut outs, &mut lens)?;
        }
        for i in 0..count {
            let g = first + i as u64;
            let (mut obs, report) =
                parse_answer(&outs[i * OUT_STRIDE..(i + 1) * OUT_STRIDE], lens[i], num_obs, g as u32)
                    .map_err(|e| GpuDecodeError::Answer(format!("shot {g}: {e}")))?;
            let before = &mut done[i % decoders];
            if report.shot != *before as u32 {
                return Err(GpuDecodeError::Answer(format!(
                    "shot {g}: decoded as shot {} of its decoder, not {before}",
                    report.shot
                )));
            }
            *before += 1;
            let ns = u64::from(report.decode_ns);
            times.push(ns);
            stats.decode_ns_total = stats.decode_ns_total.saturating_add(ns);
            stats.shots += 1;
            // the report's f32 weight (the stage's), or the CPU's for a shot it decoded
            let mut weight = f64::from(report.weight);
            match report.status {
                REPORT_OVERFLOW => {
                    stats.overflows += 1;
                    let at = i * stride + rpc::HEADER_LEN + wq::ENQUEUE_SYNDROMES_FIXED_LEN;
                    (obs, weight) = redecode(&reqs[at..at + wq::packed_len(n)])?;
                }
                REPORT_UNMATCHABLE => stats.unmatchable += 1,
                _ => {}
            }
            if let Some(h) = stats.defect_histogram.get_mut(usize::from(report.defects)) {
                *h += 1;
            }
            stats.weights.push(weight);
            writer.write(&mut output, obs).map_err(|e| QecError::Io { path: out_name.to_path_buf(), source: e })?;
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        if count < per_launch {
            break;
        }
    }
    finish_stats(&mut stats, &mut times);
    Ok(stats)
}

/// The batch kernel on one device: buffers for one launch, allocated once.
struct GpuExecutor<'a> {
    gpu: &'a Gpu,
    function: sys::CUfunction,
    stream: super::driver::Stream,
    decoders: usize,
    d_state: Option<DeviceBuffer>,
    d_reqs: Option<DeviceBuffer>,
    d_outs: Option<DeviceBuffer>,
    d_lens: Option<DeviceBuffer>,
    launches: u64,
    millis: f64,
    /// Dynamic shared memory per block (QecState::dynamic_shared, at most BATCH_SHARED).
    shared: u32,
    /// A launch did not finish in time: its buffers and module are left to the driver.
    stuck: bool,
}

/// Dynamic shared memory a batch block may take (the table when it fits, else the clusters'
/// work): two blocks per multiprocessor still fit (228 KiB each on Hopper).
const BATCH_SHARED: usize = 96 * 1024;

impl<'a> GpuExecutor<'a> {
    fn new(
        gpu: &'a Gpu,
        module: &super::driver::Module,
        state: &QecState,
        decoders: usize,
        len: usize,
    ) -> Result<Self, GpuError> {
        let per_launch = decoders * ROUNDS_PER_LAUNCH;
        let stride = len.div_ceil(16) * 16;
        let mut e = GpuExecutor {
            gpu,
            function: module.function(0),
            shared: state.dynamic_shared(gpu, module, 0, BATCH_SHARED)?,
            stream: gpu.stream()?,
            decoders,
            d_state: None,
            d_reqs: None,
            d_outs: None,
            d_lens: None,
            launches: 0,
            millis: 0.0,
            stuck: false,
        };
        let st = gpu.alloc(state.device_bytes())?;
        gpu.upload(&st, 0, state.bytes())?;
        e.d_state = Some(st);
        e.d_reqs = Some(gpu.alloc(per_launch * stride)?);
        e.d_outs = Some(gpu.alloc(per_launch * OUT_STRIDE)?);
        e.d_lens = Some(gpu.alloc(per_launch * 4)?);
        Ok(e)
    }

    /// Frees the device buffers (only when no launch runs: after `run` returned).
    fn free(&mut self) -> Result<(), GpuDecodeError> {
        for b in [self.d_state.take(), self.d_reqs.take(), self.d_outs.take(), self.d_lens.take()].into_iter().flatten()
        {
            // SAFETY: `run` waits for every launch to finish (or fails the decode without
            // coming here again after a launch that did not finish: see `run`).
            unsafe { self.gpu.free(b) }?;
        }
        Ok(())
    }
}

impl Executor for GpuExecutor<'_> {
    fn run(
        &mut self,
        reqs: &[u8],
        stride: usize,
        len: usize,
        count: usize,
        outs: &mut [u8],
        lens: &mut [i32],
    ) -> Result<(), GpuDecodeError> {
        let (Some(st), Some(rq), Some(ou), Some(ln)) = (&self.d_state, &self.d_reqs, &self.d_outs, &self.d_lens) else {
            return Err(GpuDecodeError::Answer("the device buffers are gone".into()));
        };
        let t0 = Instant::now();
        self.gpu.upload(rq, 0, &reqs[..count * stride])?;
        let (mut p_reqs, mut p_stride, mut p_len, mut p_count) =
            (rq.device_ptr(), stride as u32, len as u32, count as u32);
        let (mut p_outs, mut p_lens, mut p_state) = (ou.device_ptr(), ln.device_ptr(), st.device_ptr());
        let mut params = [
            &mut p_reqs as *mut u64 as *mut std::ffi::c_void,
            &mut p_stride as *mut u32 as *mut std::ffi::c_void,
            &mut p_len as *mut u32 as *mut std::ffi::c_void,
            &mut p_count as *mut u32 as *mut std::ffi::c_void,
            &mut p_outs as *mut u64 as *mut std::ffi::c_void,
            &mut p_lens as *mut u64 as *mut std::ffi::c_void,
            &mut p_state as *mut u64 as *mut std::ffi::c_void,
        ];
        // Block b owns decoder id b: the requests name `i % decoders` (decode_stream).
        let grid = count.min(self.decoders) as u32;
        self.gpu.make_current()?;
        // SAFETY: rl_qec_batch's parameters are (const uint8_t *, uint32_t, uint32_t, uint32_t,
        // uint8_t *, int32_t *, void *) in this order, each pointing at a live local; the
        // device buffers hold `count` requests of `stride` bytes, `count * OUT_STRIDE` answer
        // bytes, `count` lengths and the state, and are freed only once the stream is idle.
        let r = unsafe {
            sys::cuLaunchKernel(
                self.function,
                grid,
                1,
                1,
                THREADS,
                1,
                1,
                self.shared,
                self.stream.0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        r.result().map_err(|e| GpuError::Cuda { call: "cuLaunchKernel", err: format!("{e:?}") })?;
        loop {
            match self.stream.query() {
                StreamState::Idle => break,
                StreamState::Failed(e) => return Err(GpuError::Cuda { call: "rl_qec_batch", err: e }.into()),
                StreamState::Running if t0.elapsed() > LAUNCH_TIMEOUT => {
                    // Leave the buffers to the driver (freed at exit): the kernel may still run.
                    self.d_state = None;
                    self.d_reqs = None;
                    self.d_outs = None;
                    self.d_lens = None;
                    self.stuck = true;
                    return Err(GpuDecodeError::Answer(format!(
                        "a launch of {count} shots did not finish in {} s",
                        LAUNCH_TIMEOUT.as_secs()
                    )));
                }
                StreamState::Running => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        self.gpu.download(ou, 0, &mut outs[..count * OUT_STRIDE])?;
        let mut raw = vec![0u8; count * 4];
        self.gpu.download(ln, 0, &mut raw)?;
        for (l, c) in lens.iter_mut().zip(raw.chunks_exact(4)) {
            *l = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        self.launches += 1;
        self.millis += t0.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qec::graph::MatchingGraph;
    use crate::qec::predict::predict_stream;
    use crate::qec::{ExactDecoder, QecSession};
    use std::sync::Arc;

    /// The stage's CPU twin (`QecSession`, which `qec_gpu_match` holds the device stage equal
    /// to) in place of the kernel, blocks run one after another: tests the host half.
    struct CpuStage(QecSession<ExactDecoder>);

    impl Executor for CpuStage {
        fn run(
            &mut self,
            reqs: &[u8],
            stride: usize,
            len: usize,
            count: usize,
            outs: &mut [u8],
            lens: &mut [i32],
        ) -> Result<(), GpuDecodeError> {
            for i in 0..count {
                let out = &mut outs[i * OUT_STRIDE..(i + 1) * OUT_STRIDE];
                lens[i] = self.0.handle(&reqs[i * stride..i * stride + len], out).map_or(-1, |n| n as i32);
            }
            Ok(())
        }
    }

    const DEM: &str = "error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.05) D1 D2 L1\nerror(0.1) D2 D3\nerror(0.1) D3 D4\nerror(0.1) D4 D5\nerror(0.1) D5 D6\nerror(0.1) D6 D7\nerror(0.1) D7 D8\nerror(0.2) D8\n";

    fn table() -> Arc<crate::qec::DistanceTable<u32>> {
        Arc::new(MatchingGraph::from_dem_text(DEM).unwrap().fine_table().unwrap())
    }

    /// A decode's stats (or error text) and the bytes it wrote.
    type Run = (Result<PredictStats, String>, Vec<u8>);

    /// (CPU path, host half over the CPU stage).
    fn both(input: &[u8], inf: ShotFormat, outf: ShotFormat, k: usize, decoders: usize) -> (Run, Run) {
        let t = table();
        let (n, nobs) = (t.num_detectors, t.num_observables);
        let mut cpu_out = Vec::new();
        let cpu = predict_stream(
            &mut ExactDecoder::new(Arc::clone(&t), k).unwrap(),
            input,
            inf,
            &mut cpu_out,
            outf,
            Path::new("in"),
            Path::new("out"),
        );
        let config = SessionConfig {
            decoders,
            rounds_per_message: 1,
            max_defects: k,
            syndrome_mapping_id: None,
            measure_time: false,
        };
        let mut stage = CpuStage(QecSession::with_table(t, config).unwrap());
        let mut gpu_out = Vec::new();
        let gpu = decode_stream(
            &mut stage,
            &mut |_| Err(GpuDecodeError::Answer("the CPU stage answered OVERFLOW".into())),
            &mut vec![0; decoders],
            n,
            nobs,
            input,
            inf.into(),
            &mut gpu_out,
            outf,
            Path::new("in"),
            Path::new("out"),
        );
        ((cpu.map_err(|e| e.to_string()), cpu_out), (gpu.map_err(|e| e.to_string()), gpu_out))
    }

    fn shots(count: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        (0..count * 2)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let b = (s >> 33) as u8;
                b & (b >> 1) & (b >> 2) // sparse defects; bits 9..15 are padding
            })
            .collect()
    }

    #[test]
    fn the_host_half_gives_the_cpu_predictions_and_stats() {
        // More shots than one launch of 3 decoders (768), in both formats and K (at K = 2,
        // many shots above K: its clusters, exact).
        let input = shots(2000, 7);
        for (k, outf) in [(12, ShotFormat::Zero1), (2, ShotFormat::B8)] {
            let ((cpu, cpu_out), (gpu, gpu_out)) = both(&input, ShotFormat::B8, outf, k, 3);
            let (cpu, gpu) = (cpu.unwrap(), gpu.unwrap());
            assert_eq!(gpu_out, cpu_out, "K={k}");
            assert_eq!((gpu.shots, gpu.overflows, gpu.unmatchable), (cpu.shots, cpu.overflows, cpu.unmatchable));
            assert_eq!(gpu.defect_histogram, cpu.defect_histogram);
            assert_eq!(gpu.shots, 2000);
            assert_eq!(gpu.overflows, 0);
            // the reports' weights (f32) are the decoder's, shot by shot
            assert_eq!(gpu.weights.len(), 2000);
            for (i, (g, c)) in gpu.weights.iter().zip(&cpu.weights).enumerate() {
                assert!(g == c || (g - c).abs() <= 1e-6 * c.abs(), "K={k} shot {i}: {g} against {c}");
            }
        }
        let text: String = (0..500).map(|i| format!("{:09b}\n", (i * 37) % 512)).collect();
        let ((_, cpu_out), (gpu, gpu_out)) = both(text.as_bytes(), ShotFormat::Zero1, ShotFormat::Zero1, 12, 2);
        assert_eq!(gpu_out, cpu_out);
        assert_eq!(gpu.unwrap().shots, 500);
    }

    #[test]
    fn requests_in_turn_continue_the_decoders_shot_counts() {
        // `serve`'s requests on one stage: each stream's shots go on from the shots its
        // decoders decoded before, answered as one file is.
        let t = table();
        let (n, nobs) = (t.num_detectors, t.num_observables);
        let input = shots(1000, 3);
        let whole = both(&input, ShotFormat::B8, ShotFormat::B8, 2, 3).1 .1;
        let config = SessionConfig {
            decoders: 3,
            rounds_per_message: 1,
            max_defects: 2,
            syndrome_mapping_id: None,
            measure_time: false,
        };
        let mut stage = CpuStage(QecSession::with_table(t, config).unwrap());
        let mut out = Vec::new();
        let (mut done, mut base) = (vec![0; 3], 0);
        for part in [&input[..2 * 5], &input[2 * 5..2 * 800], &input[2 * 800..]] {
            let st = decode_stream(
                &mut stage,
                &mut |_| Err(GpuDecodeError::Answer("the CPU stage answered OVERFLOW".into())),
                &mut done,
                n,
                nobs,
                part,
                ShotFormat::B8.into(),
                &mut out,
                ShotFormat::B8,
                Path::new("in"),
                Path::new("out"),
            )
            .unwrap();
            base += st.shots;
        }
        assert_eq!(base, 1000);
        assert_eq!(out, whole);
    }

    #[test]
    fn empty_and_malformed_inputs_as_on_the_cpu() {
        let ((cpu, cpu_out), (gpu, gpu_out)) = both(b"", ShotFormat::B8, ShotFormat::Zero1, 12, 4);
        assert_eq!((cpu.unwrap().shots, gpu.unwrap().shots), (0, 0));
        assert!(cpu_out.is_empty() && gpu_out.is_empty());
        for (bad, f) in [
            (&b"000000000\n0001\n"[..], ShotFormat::Zero1),
            (b"000000000\n00x000000\n", ShotFormat::Zero1),
            (&[1u8, 0, 1][..], ShotFormat::B8),
        ] {
            let ((cpu, cpu_out), (gpu, gpu_out)) = both(bad, f, ShotFormat::Zero1, 12, 4);
            assert_eq!(gpu.unwrap_err(), cpu.unwrap_err());
            assert_eq!(gpu_out, cpu_out, "the shots before the bad one are written");
        }
    }

    #[test]
    fn a_wrong_answer_is_an_error_not_a_prediction() {
        let mut buf = vec![0u8; request_len(9)];
        build_request(&mut buf, &mut [0xff, 0xff], 9, 0, 5).unwrap();
        let t = table();
        let mut s = QecSession::with_table(t, SessionConfig::default()).unwrap();
        let mut out = [0u8; OUT_STRIDE];
        let n = s.handle(&buf, &mut out).unwrap() as i32;
        let (obs, rep) = parse_answer(&out, n, 2, 5).unwrap();
        assert_eq!(rep.defects, 9, "the padding bits are cleared");
        assert_eq!(rep.shot, 0);
        assert!(obs < 4);
        assert!(parse_answer(&out, n, 2, 6).unwrap_err().contains("slot"));
        assert!(parse_answer(&out, -1, 2, 5).unwrap_err().contains("did not answer"));
        // A second shot on a decoder that the batch kernel gave to another block.
        let n = s.handle(&buf, &mut out).unwrap() as i32;
        assert_eq!(parse_answer(&out, n, 2, 5).unwrap().1.shot, 1);
        assert!(parse_answer(&out[..24], 24, 2, 5).is_err());
    }

    #[test]
    fn decoders_fill_the_device() {
        assert_eq!(decoders_for(132), 264);
        assert_eq!(decoders_for(0), 2);
        assert!(request_len(super::super::qec_state::MAX_DETECTORS) <= MAX_REQUEST);
    }

    /// CI has NVRTC but no GPU: the batch kernel compiles to an sm_90 cubin.
    #[test]
    fn the_batch_kernel_compiles_to_sm90() {
        if !nvrtc::present_or_skip("the batch kernel compile") {
            return;
        }
        let (main, headers, options) = kernels::qec_batch_program();
        let c = nvrtc::compile(&main, &headers, "sm_90", &options, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&c.cubin[..4], b"\x7fELF");
    }
}
