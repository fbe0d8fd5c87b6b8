//! `rocelink decode --serve`: one process decodes batch after batch of shots of one DEM over
//! a pipe, so that a tool that decodes in batches (sinter's `compile_decoder_for_dem`,
//! `python/rocelink_sinter.py`) loads the DEM, builds the graph or the GPU's table and starts
//! the GPU once, not once a batch.
//!
//! Protocol, on the process's stdin and stdout (little-endian):
//! - a request is an 8-byte shot count `N`, then `N` shots in stim's b8 (ceil(detectors / 8)
//!   bytes each, the DEM's detectors only);
//! - its answer is `N` predictions in b8 (ceil(observables / 8) bytes each), in shot order,
//!   written and flushed before the next request is read;
//! - the end of the input before a request's first byte ends the run.
//!
//! Guarantees: a request cut short (the input ends inside its count or its shots), or one
//! above [`MAX_REQUEST_BYTES`] of shots, is an error and none of it is answered; every answer
//! is the one `rocelink decode` gives the same shots in a file, byte for byte (the same
//! decoders, the same code path per batch).

use std::io::{ErrorKind, Read, Write};
use std::path::Path;
use std::sync::Arc;

use rocelink_qec::{MatchingDecoder, SparseGraph};
use rocelink_wire::qec::packed_len;

use super::predict::{predict_stream_on, PredictStats, ShotFormat};
use super::QecError;

/// The most bytes of shots one request may carry (1 GiB): a count past it is refused before
/// anything is read or allocated for it.
pub const MAX_REQUEST_BYTES: u64 = 1 << 30;

/// The names errors give the two pipes.
pub const INPUT_NAME: &str = "<stdin>";
const OUTPUT_NAME: &str = "<stdout>";

/// What a serve run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Requests answered.
    pub requests: u64,
    /// Shots decoded in them.
    pub shots: u64,
    /// Shots the GPU could not decode, decoded on the CPU (0 on the CPU).
    pub overflows: u64,
    /// Shots without a perfect matching.
    pub unmatchable: u64,
}

fn input_error(reason: String) -> QecError {
    QecError::Input { path: INPUT_NAME.into(), reason }
}

/// Reads `buf.len()` bytes; how many came before the input ended.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<usize, QecError> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(QecError::io(Path::new(INPUT_NAME), e)),
        }
    }
    Ok(got)
}

/// The request loop (module docs) over `input` and `output`; `decode` turns a request's
/// shots (b8) into its predictions (b8), appended to the vector it is given.
pub fn serve_requests<E: From<QecError>>(
    mut input: impl Read,
    mut output: impl Write,
    detectors: usize,
    observables: usize,
    mut decode: impl FnMut(&[u8], &mut Vec<u8>) -> Result<PredictStats, E>,
) -> Result<ServeStats, E> {
    let (shot_bytes, answer_bytes) = (packed_len(detectors) as u64, packed_len(observables) as u64);
    let mut stats = ServeStats::default();
    let (mut shots, mut answer) = (Vec::new(), Vec::new());
    loop {
        let mut head = [0u8; 8];
        match read_full(&mut input, &mut head)? {
            0 => return Ok(stats),
            8 => {}
            k => {
                return Err(input_error(format!(
                    "request {}: the input ended {k} bytes into its shot count",
                    stats.requests
                ))
                .into())
            }
        }
        let count = u64::from_le_bytes(head);
        let bytes = count.checked_mul(shot_bytes).filter(|&b| b <= MAX_REQUEST_BYTES).ok_or_else(|| {
            input_error(format!(
                "request {}: {count} shots of {shot_bytes} bytes are more than the {MAX_REQUEST_BYTES} bytes a request may carry",
                stats.requests
            ))
        })?;
        shots.resize(bytes as usize, 0);
        let got = read_full(&mut input, &mut shots)?;
        if got != shots.len() {
            return Err(input_error(format!(
                "request {}: the input ended {got} bytes into its {bytes} bytes of shots ({count} shots of {detectors} detectors)",
                stats.requests
            ))
            .into());
        }
        answer.clear();
        let s = decode(&shots, &mut answer)?;
        if s.shots != count || answer.len() as u64 != count * answer_bytes {
            return Err(input_error(format!(
                "request {}: {count} shots gave {} predictions ({} bytes)",
                stats.requests,
                s.shots,
                answer.len()
            ))
            .into());
        }
        output.write_all(&answer).and_then(|()| output.flush()).map_err(|e| QecError::io(Path::new(OUTPUT_NAME), e))?;
        stats.requests += 1;
        stats.shots += count;
        stats.overflows += s.overflows;
        stats.unmatchable += s.unmatchable;
    }
}

/// The request loop with the exact CPU decoder on `threads` threads (at least one), as
/// `rocelink decode --threads` decodes a file.
pub fn serve_cpu(
    graph: Arc<SparseGraph>,
    threads: usize,
    input: impl Read,
    output: impl Write,
) -> Result<ServeStats, QecError> {
    let mut decoders: Vec<MatchingDecoder> = (0..threads.max(1)).map(|_| MatchingDecoder::new(graph.clone())).collect();
    let (n, o) = (graph.num_detectors(), graph.num_observables());
    serve_requests(input, output, n, o, |shots, answer| {
        predict_stream_on(
            &mut decoders,
            shots,
            ShotFormat::B8,
            answer,
            ShotFormat::B8,
            Path::new(INPUT_NAME),
            Path::new(OUTPUT_NAME),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEM: &str = "error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1 D2\nerror(0.1) D2\nerror(0.2) D3 L1\n";

    fn graph() -> Arc<SparseGraph> {
        rocelink_qec::sparse_graph_from_dem_text(DEM).unwrap()
    }

    fn request(shots: &[u8]) -> Vec<u8> {
        let mut r = (shots.len() as u64).to_le_bytes().to_vec();
        r.extend_from_slice(shots);
        r
    }

    #[test]
    fn answers_each_request_as_a_file_decode_does() {
        let g = graph();
        // every 4-detector shot, in two requests and an empty one
        let all: Vec<u8> = (0u8..16).collect();
        let mut input = request(&all[..5]);
        input.extend(request(&[]));
        input.extend(request(&all[5..]));
        let mut out = Vec::new();
        let stats = serve_cpu(g.clone(), 2, &input[..], &mut out).unwrap();
        assert_eq!(stats, ServeStats { requests: 3, shots: 16, overflows: 0, unmatchable: 0 });
        let mut d = MatchingDecoder::new(g);
        let want: Vec<u8> = all.iter().map(|&s| d.decode_b8(&[s]).observables as u8).collect();
        assert_eq!(out, want);
        // D0 alone: to the boundary through L0; D3 alone: L1
        assert_eq!((out[1], out[8]), (1, 2));
    }

    #[test]
    fn a_request_cut_short_is_an_error_and_not_answered() {
        let mut input = request(&[1, 2]);
        input.extend(request(&[3, 4, 5]));
        input.pop();
        let mut out = Vec::new();
        let e = serve_cpu(graph(), 1, &input[..], &mut out).unwrap_err().to_string();
        assert!(e.contains("request 1: the input ended 2 bytes into its 3 bytes of shots"), "{e}");
        assert_eq!(out.len(), 2, "the first request answered, none of the second");
        let e = serve_cpu(graph(), 1, &[7u8, 0, 0][..], &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("request 0: the input ended 3 bytes into its shot count"), "{e}");
        let e = serve_cpu(graph(), 1, &u64::MAX.to_le_bytes()[..], &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("more than the"), "{e}");
        assert_eq!(serve_cpu(graph(), 1, &[][..], &mut Vec::new()).unwrap(), ServeStats::default());
    }
}
