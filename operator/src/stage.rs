//! Processing stages: what the transceiver does with a request between receive and send.
//!
//! A stage reads the request bytes (the RX slot, RPC header first) and writes the answer into
//! the TX slot. It never allocates or blocks; a request it cannot answer is dropped and
//! counted by the caller.

use rocelink_wire::rpc::{self, RequestRepr, ResponseRepr};

/// The request an echo run's player sends, as the [`Echo`] stage answers it: an RPC header
/// (function `echo`) and `size - 24` argument bytes (a fixed pattern; the player scrambles it
/// per request).
pub fn echo_template(size: usize) -> Vec<u8> {
    request_template(rpc::function_id::ECHO, size)
}

/// [`echo_template`] calling `function_id` instead (the peer checks the answers of `echo` and
/// `increment`).
pub fn request_template(function_id: u32, size: usize) -> Vec<u8> {
    let args: Vec<u8> = (0..size - rpc::HEADER_LEN).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect();
    rpc::request(function_id, 0, 0, &args)
}

/// What a stage did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The answer is the first `n` bytes of the output.
    Answer(usize),
    /// Not answerable (no RPC header): drop it, count it.
    Drop,
}

pub trait Stage: Send {
    fn name(&self) -> &'static str;
    fn process(&mut self, request: &[u8], out: &mut [u8]) -> Outcome;
    /// [`process`](Self::process) where the loop can say whether the next message is already
    /// waiting (`waiting()`): a stage whose work on the answer's path is partly optional (a
    /// decoder's streaming work) cuts it short then, so that a loop behind its peer catches up.
    fn process_polled(&mut self, request: &[u8], out: &mut [u8], _waiting: &mut dyn FnMut() -> bool) -> Outcome {
        self.process(request, out)
    }
    /// Called by the loop after a message's answer went out, when no message is waiting:
    /// work the answers did not need, given up as soon as `waiting()` says a message came
    /// (the CPU twin of the device stages' idle forms).
    fn idle(&mut self, _waiting: &mut dyn FnMut() -> bool) {}
}

/// A device stage as a graph names it: what each backend builds its own way (a Rust
/// [`Stage`] on the CPU, generated device code on the GPU).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum StageSpec {
    Echo,
    /// The QEC decoding stage (docs/qec.md): `enqueue_syndromes` rounds in, corrections out, by
    /// exact minimum-weight matching on the graph of a stim detector error model.
    QecDecoder {
        /// The detector error model file.
        dem: std::path::PathBuf,
        /// Rounds each `enqueue_syndromes` carries.
        rounds_per_message: u32,
        /// K, the GPU decoder's defect cap (above it the GPU's fallback answers and counts); the CPU decoder is exact for any number of defects and ignores it.
        max_defects: u32,
        /// Decoder ids 0..decoders.
        decoders: u32,
        /// Where the CPU stage does each round's streaming work (the GPU stage settles in
        /// its kernel and ignores it).
        #[serde(default)]
        settle: Settle,
    },
}

/// Where the CPU decoder stage does a round's streaming work (its defects' balls, the
/// clusters and the proof of the shot so far).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Settle {
    /// In the transceiver loop, before the round's acknowledgement goes out, given up between
    /// clusters once the next message waits ([`Stage::process_polled`]; in a closed loop none
    /// does): the final round does what is left.
    #[default]
    InLoop,
    /// In the loop, after the acknowledgement went out, while no message waits
    /// ([`Stage::idle`]; given up when one comes): the final round does what is left.
    Idle,
    /// On a worker thread beside the loop (`crate::qec::beside`), pinned to `core` when
    /// given: the acknowledgement goes out at once, the final round waits for the worker.
    Beside { core: Option<usize> },
}

impl StageSpec {
    /// The CPU implementation, built once before the data path starts (a DEM that does not
    /// load is an error here, not per message).
    pub fn cpu_stage(&self) -> Result<Box<dyn Stage>, String> {
        match self {
            StageSpec::Echo => Ok(Box::new(Echo)),
            StageSpec::QecDecoder { dem, rounds_per_message, max_defects, decoders, settle } => {
                let graph = crate::qec::sparse_graph_from_file(dem).map_err(|e| e.to_string())?;
                // The complete balls the decoders regrow, searched now rather than by the
                // first shots that need them.
                rocelink_qec::MatchingDecoder::new(std::sync::Arc::clone(&graph)).fill_complete_balls();
                let config = crate::qec::SessionConfig {
                    decoders: *decoders as usize,
                    rounds_per_message: *rounds_per_message,
                    max_defects: *max_defects as usize,
                    syndrome_mapping_id: None,
                    measure_time: true,
                };
                Ok(match *settle {
                    Settle::InLoop => Box::new(QecDecoderStage {
                        session: crate::qec::QecSession::new(graph, config).map_err(|e| e.to_string())?,
                    }),
                    Settle::Idle => Box::new(QecDecoderStage {
                        session: crate::qec::QecSession::idle_settled(graph, config).map_err(|e| e.to_string())?,
                    }),
                    Settle::Beside { core } => Box::new(QecDecoderStage {
                        session: crate::qec::QecSession::beside(graph, config, core).map_err(|e| e.to_string())?,
                    }),
                })
            }
        }
    }
}

/// The QEC decoder as a CPU stage: the RPC session of `crate::qec` behind [`Stage`].
pub struct QecDecoderStage<D: crate::qec::SessionDecoder = rocelink_qec::MatchingDecoder> {
    session: crate::qec::QecSession<D>,
}

impl<D: crate::qec::SessionDecoder> Stage for QecDecoderStage<D> {
    fn name(&self) -> &'static str {
        "qec-decoder"
    }

    fn process(&mut self, request: &[u8], out: &mut [u8]) -> Outcome {
        self.process_polled(request, out, &mut || false)
    }

    fn process_polled(&mut self, request: &[u8], out: &mut [u8], waiting: &mut dyn FnMut() -> bool) -> Outcome {
        match self.session.handle_polled(request, out, waiting) {
            Some(n) => Outcome::Answer(n),
            None => Outcome::Drop,
        }
    }

    fn idle(&mut self, waiting: &mut dyn FnMut() -> bool) {
        self.session.idle(waiting);
    }
}

/// Stages fused into one: each stage's answer is the next stage's request; the last answer
/// goes out. A stage that drops ends the chain with a drop.
pub struct Chain {
    stages: Vec<Box<dyn Stage>>,
    scratch: Vec<u8>,
}

impl Chain {
    pub fn new(stages: Vec<Box<dyn Stage>>) -> Chain {
        Chain { stages, scratch: vec![0; rocelink_wire::roce::PMTU] }
    }
    pub fn from_specs(specs: &[StageSpec]) -> Result<Chain, String> {
        Ok(Chain::new(specs.iter().map(StageSpec::cpu_stage).collect::<Result<_, _>>()?))
    }
}

impl Stage for Chain {
    fn name(&self) -> &'static str {
        "chain"
    }

    fn process(&mut self, request: &[u8], out: &mut [u8]) -> Outcome {
        self.process_polled(request, out, &mut || false)
    }

    fn process_polled(&mut self, request: &[u8], out: &mut [u8], waiting: &mut dyn FnMut() -> bool) -> Outcome {
        let n = self.stages.len();
        if n == 0 {
            return Outcome::Drop;
        }
        if n == 1 {
            return self.stages[0].process_polled(request, out, waiting);
        }
        // Stage k writes into `out` when n - 1 - k is even, so the last stage writes into
        // `out`; the others alternate through `scratch`.
        let mut to_out = (n - 1).is_multiple_of(2);
        let first = if to_out {
            self.stages[0].process_polled(request, out, waiting)
        } else {
            self.stages[0].process_polled(request, &mut self.scratch, waiting)
        };
        let Outcome::Answer(mut len) = first else {
            return Outcome::Drop;
        };
        for stage in self.stages[1..].iter_mut() {
            let r = if to_out {
                stage.process_polled(&out[..len], &mut self.scratch, waiting)
            } else {
                stage.process_polled(&self.scratch[..len], out, waiting)
            };
            let Outcome::Answer(m) = r else {
                return Outcome::Drop;
            };
            len = m;
            to_out = !to_out;
        }
        Outcome::Answer(len)
    }

    fn idle(&mut self, waiting: &mut dyn FnMut() -> bool) {
        for stage in self.stages.iter_mut() {
            if waiting() {
                return;
            }
            stage.idle(waiting);
        }
    }
}

/// Answers every request with a CUQS response echoing `request_id` and `ptp_timestamp`,
/// status 0, followed by exactly the request's argument bytes (PROTOCOLS.md 3).
#[derive(Debug, Default, Clone, Copy)]
pub struct Echo;

/// The status of a response to a request whose lengths are inconsistent (a protocol error,
/// negative per PROTOCOLS.md 3).
pub const STATUS_BAD_LENGTH: i32 = -1;

impl Stage for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn process(&mut self, request: &[u8], out: &mut [u8]) -> Outcome {
        let Ok(req) = RequestRepr::parse(request) else {
            return Outcome::Drop;
        };
        let args = request.get(rpc::HEADER_LEN..rpc::HEADER_LEN + req.arg_len as usize);
        let (status, args) = match args {
            Some(a) if rpc::HEADER_LEN + a.len() <= out.len() => (0, a),
            _ => (STATUS_BAD_LENGTH, &[][..]),
        };
        let resp = ResponseRepr {
            status,
            result_len: args.len() as u32,
            request_id: req.request_id,
            ptp_timestamp: req.ptp_timestamp,
        };
        if out.len() < rpc::HEADER_LEN || resp.emit(&mut out[..rpc::HEADER_LEN]).is_err() {
            return Outcome::Drop;
        }
        out[rpc::HEADER_LEN..rpc::HEADER_LEN + args.len()].copy_from_slice(args);
        Outcome::Answer(rpc::HEADER_LEN + args.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: u32, ts: u64, args: &[u8], arg_len: u32) -> Vec<u8> {
        let mut b = vec![0u8; rpc::HEADER_LEN + args.len()];
        RequestRepr { function_id: rpc::function_id::ECHO, arg_len, request_id: id, ptp_timestamp: ts }
            .emit(&mut b[..rpc::HEADER_LEN])
            .unwrap();
        b[rpc::HEADER_LEN..].copy_from_slice(args);
        b
    }

    #[test]
    fn echo_answers_with_cuqs_and_the_args() {
        let req = request(7, 0x1122_3344_5566_7788, b"payload!", 8);
        let mut out = [0u8; 128];
        let Outcome::Answer(n) = Echo.process(&req, &mut out) else { panic!() };
        assert_eq!(n, 32);
        let resp = ResponseRepr::parse(&out[..n]).unwrap();
        assert_eq!(
            (resp.status, resp.result_len, resp.request_id, resp.ptp_timestamp),
            (0, 8, 7, 0x1122_3344_5566_7788)
        );
        assert_eq!(&out[24..32], b"payload!");
        assert_eq!(&out[0..4], &0x4355_5153u32.to_le_bytes());
    }

    /// Appends one byte: a stage whose effect shows how many times it ran.
    struct Append(u8);
    impl Stage for Append {
        fn name(&self) -> &'static str {
            "append"
        }
        fn process(&mut self, request: &[u8], out: &mut [u8]) -> Outcome {
            out[..request.len()].copy_from_slice(request);
            out[request.len()] = self.0;
            Outcome::Answer(request.len() + 1)
        }
    }

    #[test]
    fn chains_feed_each_answer_to_the_next_stage() {
        for n in 1..5u8 {
            let mut c = Chain::new((0..n).map(|i| Box::new(Append(i)) as Box<dyn Stage>).collect());
            let mut out = [0u8; 16];
            assert_eq!(c.process(b"x", &mut out), Outcome::Answer(1 + n as usize));
            let expect: Vec<u8> = std::iter::once(b'x').chain(0..n).collect();
            assert_eq!(&out[..1 + n as usize], &expect[..]);
        }
        assert_eq!(Chain::new(vec![]).process(b"x", &mut [0; 4]), Outcome::Drop);
    }

    #[test]
    fn echo_refuses_bad_requests_without_panicking() {
        let mut out = [0u8; 64];
        assert_eq!(Echo.process(b"short", &mut out), Outcome::Drop);
        let mut bad_magic = request(1, 2, b"x", 1);
        bad_magic[0] ^= 1;
        assert_eq!(Echo.process(&bad_magic, &mut out), Outcome::Drop);
        // arg_len larger than what arrived: answered with a protocol-error status, no args.
        let req = request(9, 3, b"abc", 300);
        assert_eq!(Echo.process(&req, &mut out), Outcome::Answer(24));
        let resp = ResponseRepr::parse(&out[..24]).unwrap();
        assert_eq!((resp.status, resp.result_len, resp.request_id), (STATUS_BAD_LENGTH, 0, 9));
    }
}
