//! The CPU stage's streaming work beside the transceiver loop: a worker thread owns the
//! session's decoders and does each round's work there (the new defects' balls, the clusters
//! and the proof: `MatchingDecoder::add_defect` and `settle`), while the loop thread only
//! appends the bits, hands the round's defects over and answers the acknowledgement at once.
//! The final round is handed over the same way and the loop waits for its result.
//!
//! Why: in the loop, a round's settle work is paid before every acknowledgement, so at a fixed
//! syndrome cycle the loop falls behind once that work exceeds the cycle (d = 11 at a 1 us
//! cycle); beside it, the loop's own time per message is the protocol's, and the worker keeps
//! up as long as the whole shot's work fits the shot's cycles.
//!
//! Guarantees:
//! - The answers are the in-loop stage's: the same exact minimum weight for every shot
//!   (settling is optional work that `finish` completes); where two matchings tie, which one
//!   is reported may depend on how many rounds were settled before the final one.
//! - Coalescing: a round's settle is skipped while more work is queued, and gives up as soon
//!   as some arrives (between the clusters it solves: `MatchingDecoder::settle_unless`),
//!   keeping what it solved, so a worker that falls behind catches up instead of queueing
//!   settles, and the final round waits at most for the cluster being solved when it
//!   arrived.
//! - No allocation per message: a round's defects go over a bounded channel in fixed-size
//!   commands; a full channel makes the loop thread wait (spinning) for room.
//! - No syscall on the loop's path while the worker is busy: the worker spins on its queue
//!   ([`SPIN_BEFORE_PARK`] after its last command, then parks until the next one), and the
//!   loop spins for a final round's result. A worker pinned to a core spins without yielding
//!   (the core is its own); an unpinned one, and the loop waiting for it, yield between polls,
//!   so that a machine with fewer cores than spinning threads still makes progress.
//! - A worker that is gone (it panicked) makes every later final round an overflow report (no
//!   decode), never a hang.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError};
use rocelink_qec::{MatchingDecoder, SparseGraph};
use rocelink_wire::qec as wq;

use super::exact::ConfigError;
use super::session::{round_left, QecSession, RoundLeft, SessionConfig, SessionDecoder, ShotOutcome};

/// Defects one command carries (a round with more takes several).
const DEFECTS_PER_CMD: usize = 14;

/// Commands the channel holds: a few shots of rounds at any noise the decoder meets.
const QUEUE: usize = 4096;

/// How long the worker spins on an empty queue before it parks. While messages keep coming
/// (a run), it never parks; the first message after a longer pause pays one wake-up.
pub const SPIN_BEFORE_PARK: Duration = Duration::from_millis(2);

/// What a command asks of the worker after its defects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// More of this round's defects follow.
    More,
    /// A round but the last ended: settle the shot so far, unless more work is queued.
    Settle,
    /// A round ended whose shot most likely ends with the next message
    /// (`session::RoundLeft::LastButOne`): the complete settle, unless more work is queued
    /// (`MatchingDecoder::settle_last_unless`).
    SettleLast,
    /// The shot is complete: decode it and send the result.
    Finish,
}

/// What the loop thread hands the worker: one command a message, as a rule (a round of
/// more than [`DEFECTS_PER_CMD`] defects takes more), so that a message costs the loop one
/// push.
#[derive(Debug, Clone, Copy)]
struct Cmd {
    /// The decoder id.
    slot: u32,
    /// A new shot starts first (any unfinished one is dropped).
    begin: bool,
    then: Then,
    /// Defects of the shot (detector indices): the first `n`.
    n: u8,
    d: [u32; DEFECTS_PER_CMD],
}

/// The loop thread's end of the worker, shared by the session's decoders.
#[derive(Debug)]
struct Link {
    /// `None` only while dropping, so that the worker sees its queue disconnect.
    tx: Option<Sender<Cmd>>,
    results: Receiver<ShotOutcome>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        // The worker ends when its queue disconnects.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One decoder id's end of the worker ([`SessionDecoder`]).
#[derive(Debug)]
pub struct BesideDecoder {
    slot: u32,
    num_detectors: usize,
    /// The graph: its negative edges flip events before they go to the worker.
    graph: Arc<SparseGraph>,
    /// What the next command carries: a new shot's start, the final round's last defects.
    begin: bool,
    held: (u8, [u32; DEFECTS_PER_CMD]),
    link: Arc<Link>,
    /// The worker is gone: final rounds answer overflow.
    dead: bool,
    /// The worker has a core of its own: waits spin without yielding.
    pinned: bool,
}

impl BesideDecoder {
    fn push(&mut self, then: Then, n: usize, d: [u32; DEFECTS_PER_CMD]) {
        let begin = std::mem::take(&mut self.begin);
        self.send(Cmd { slot: self.slot, begin, then, n: n as u8, d });
    }

    fn send(&mut self, cmd: Cmd) {
        if self.dead {
            return;
        }
        let tx = self.link.tx.as_ref().expect("the link's sender lives until the link drops");
        let mut cmd = cmd;
        loop {
            match tx.try_send(cmd) {
                Ok(()) => return,
                Err(TrySendError::Full(c)) => {
                    cmd = c;
                    pause(self.pinned);
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.dead = true;
                    return;
                }
            }
        }
    }
}

/// One poll's wait: a spin hint on a core of one's own, else a yield.
#[inline]
fn pause(pinned: bool) {
    if pinned {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// No decode: the worker is gone.
fn no_decode() -> ShotOutcome {
    ShotOutcome { observables: 0, weight: f64::INFINITY, defects: 0, report: wq::REPORT_OVERFLOW }
}

impl SessionDecoder for BesideDecoder {
    fn begin(&mut self) {
        self.begin = true;
        self.held.0 = 0;
    }

    fn round(&mut self, shot: &[u8], first: usize, n: usize, _waiting: &mut dyn FnMut() -> bool) {
        let mut d = [0u32; DEFECTS_PER_CMD];
        let mut k = 0usize;
        let graph = Arc::clone(&self.graph);
        graph.for_each_defect(shot, first, first + n, |at| {
            d[k] = at;
            k += 1;
            if k == DEFECTS_PER_CMD {
                self.push(Then::More, k, d);
                k = 0;
            }
        });
        let left = round_left(first, n, self.num_detectors);
        if left != RoundLeft::Final {
            self.push(if left == RoundLeft::LastButOne { Then::SettleLast } else { Then::Settle }, k, d);
        } else {
            // The final round's last defects go with the finish (one push).
            self.held = (k as u8, d);
        }
    }

    fn finish(&mut self, _shot: &[u8]) -> ShotOutcome {
        let (k, d) = self.held;
        self.held.0 = 0;
        self.push(Then::Finish, k as usize, d);
        if self.dead {
            return no_decode();
        }
        loop {
            match self.link.results.try_recv() {
                Ok(r) => return r,
                Err(TryRecvError::Empty) => pause(self.pinned),
                Err(TryRecvError::Disconnected) => {
                    self.dead = true;
                    return no_decode();
                }
            }
        }
    }
}

/// The worker: the decoders, their commands in order.
fn work(mut decoders: Vec<MatchingDecoder>, rx: Receiver<Cmd>, results: Sender<ShotOutcome>, pinned: bool) {
    let mut idle_since = Instant::now();
    loop {
        let cmd = match rx.try_recv() {
            Ok(c) => c,
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {
                if idle_since.elapsed() < SPIN_BEFORE_PARK {
                    pause(pinned);
                    continue;
                }
                match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(c) => c,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        };
        let dec = &mut decoders[cmd.slot as usize];
        if cmd.begin {
            dec.begin_shot();
        }
        for &x in &cmd.d[..cmd.n as usize] {
            dec.add_defect(x);
        }
        match cmd.then {
            Then::More => {}
            // Skipped while more work is queued, and given up once some comes: the next
            // settle, or the finish, goes on from what it solved.
            Then::Settle => {
                if rx.is_empty() {
                    dec.settle_unless(&mut || !rx.is_empty());
                }
            }
            Then::SettleLast => {
                if rx.is_empty() {
                    dec.settle_last_unless(&mut || !rx.is_empty());
                }
            }
            Then::Finish => {
                if results.send(ShotOutcome::from(dec.finish())).is_err() {
                    return;
                }
            }
        }
        idle_since = Instant::now();
    }
}

impl QecSession<BesideDecoder> {
    /// The CPU stage with its streaming work beside the loop (module docs): shots of
    /// `graph`'s DEM decoded exactly, round by round, on a worker thread pinned to `core`
    /// (unpinned when `None`).
    pub fn beside(graph: Arc<SparseGraph>, config: SessionConfig, core: Option<usize>) -> Result<Self, ConfigError> {
        let n = graph.num_detectors();
        let decoders: Vec<MatchingDecoder> =
            (0..config.decoders).map(|_| MatchingDecoder::new(Arc::clone(&graph))).collect();
        let (tx, rx) = bounded(QUEUE);
        let (res_tx, results) = bounded(1);
        let (pinned_tx, pinned_rx) = bounded(1);
        let thread = std::thread::Builder::new()
            .name("qec-settle".into())
            .spawn(move || {
                let pinned = core.is_some() && rocelink_link::affinity::pin_current_thread(core);
                let _ = pinned_tx.send(pinned);
                work(decoders, rx, res_tx, pinned)
            })
            .map_err(|_| ConfigError::Session("cannot start the decoder's worker thread"))?;
        let pinned = pinned_rx.recv().unwrap_or(false);
        let link = Arc::new(Link { tx: Some(tx), results, thread: Some(thread) });
        let mut next = 0u32;
        Self::with_decoders(config, n, graph.num_observables(), || {
            let slot = next;
            next += 1;
            Ok(BesideDecoder {
                slot,
                num_detectors: n,
                graph: Arc::clone(&graph),
                begin: false,
                held: (0, [0; DEFECTS_PER_CMD]),
                link: Arc::clone(&link),
                dead: false,
                pinned,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocelink_wire::qec::EnqueueSyndromesRepr;
    use rocelink_wire::rpc::{self, function_id, RequestRepr, ResponseRepr};
    use std::path::Path;

    fn fixture(name: &str) -> (Arc<SparseGraph>, Vec<u8>) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec").join(name);
        let graph = crate::qec::sparse_graph_from_file(&dir.join("model.dem")).unwrap();
        (graph, std::fs::read(dir.join("dets.b8")).unwrap())
    }

    /// `enqueue_syndromes` of bits `first..first + n` of `shot`.
    fn enqueue(decoder: i64, counter: i64, shot: &[u8], first: usize, n: usize) -> Vec<u8> {
        let mut bits = vec![0u8; n.div_ceil(8)];
        for i in 0..n {
            if shot[(first + i) / 8] >> ((first + i) % 8) & 1 == 1 {
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        let r = EnqueueSyndromesRepr { decoder_id: decoder, counter, syndrome_mapping_id: 0, num_syndromes: n as i64 };
        let mut a = vec![0u8; r.buffer_len()];
        r.emit_with(&bits, &mut a).unwrap();
        let mut b = vec![0u8; rpc::HEADER_LEN + a.len()];
        RequestRepr {
            function_id: function_id::ENQUEUE_SYNDROMES,
            arg_len: a.len() as u32,
            request_id: counter as u32,
            ptp_timestamp: 7,
        }
        .emit(&mut b)
        .unwrap();
        b[rpc::HEADER_LEN..].copy_from_slice(&a);
        b
    }

    /// The beside stage answers every message as the in-loop stage does: two decoder ids
    /// with their shots interleaved message by message, rounds of `chunk` bits (the final
    /// answers byte for byte, the correction allowed to differ only where the weights tie).
    fn same_answers(name: &str, chunk: usize, shots: usize) {
        let (graph, dets) = fixture(name);
        let n = graph.num_detectors();
        let cfg = SessionConfig { decoders: 2, ..SessionConfig::default() };
        let mut inloop = QecSession::new(Arc::clone(&graph), cfg).unwrap();
        let mut beside = QecSession::beside(Arc::clone(&graph), cfg, None).unwrap();
        let bytes = n.div_ceil(8);
        let (mut finals, mut ties, mut defects) = (0usize, 0usize, 0u64);
        let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
        for pair in (0..shots.min(dets.len() / bytes)).collect::<Vec<_>>().chunks(2) {
            let mut counter = [0i64; 2];
            for first in (0..n).step_by(chunk) {
                let len = chunk.min(n - first);
                for (id, &s) in pair.iter().enumerate() {
                    let req = enqueue(id as i64, counter[id], &dets[s * bytes..(s + 1) * bytes], first, len);
                    counter[id] += 1;
                    let la = inloop.handle(&req, &mut a).expect("answered");
                    let lb = beside.handle(&req, &mut b).expect("answered");
                    let last = first + len == n;
                    assert_eq!(la, lb, "{name} shot {s}: answer lengths");
                    if !last || a[..la] == b[..lb] {
                        assert_eq!(a[..la], b[..lb], "{name} shot {s} at bit {first}");
                        if last {
                            finals += 1;
                            let r = rocelink_wire::qec::DecodeReportRepr::parse(&a[la - 16..la]).unwrap();
                            defects += u64::from(r.defects);
                        }
                        continue;
                    }
                    // Only a tie may differ: same status, defects and weight, another correction.
                    let ra = rocelink_wire::qec::DecodeReportRepr::parse(&a[la - 16..la]).unwrap();
                    let rb = rocelink_wire::qec::DecodeReportRepr::parse(&b[lb - 16..lb]).unwrap();
                    assert_eq!(
                        (ra.status, ra.defects, ra.weight),
                        (rb.status, rb.defects, rb.weight),
                        "{name} shot {s}"
                    );
                    assert_eq!(ResponseRepr::parse(&a[..la]).unwrap().status, 0);
                    finals += 1;
                    ties += 1;
                }
            }
        }
        assert_eq!(finals, shots, "{name}: every shot decoded");
        assert!(defects * 2 > shots as u64, "{name}: the shots have defects to decode");
        assert!(ties * 100 <= shots, "{name}: {ties} of {shots} shots differ (ties are rare)");
        assert_eq!(inloop.counters(0), beside.counters(0));
        assert_eq!(inloop.counters(1), beside.counters(1));
    }

    #[test]
    fn answers_equal_the_in_loop_stage() {
        same_answers("d5_p0.003", 24, 2000);
        same_answers("d5_p0.003", 7, 400);
        same_answers("d3_p0.003", 8, 2000);
    }

    #[test]
    fn a_shot_dropped_mid_way_leaves_no_trace() {
        // A shot abandoned (counter 0 again) and one cut by a gap: the next shots still
        // decode as in the loop.
        let (graph, dets) = fixture("d5_p0.003");
        let n = graph.num_detectors();
        let bytes = n.div_ceil(8);
        let cfg = SessionConfig::default();
        let mut inloop = QecSession::new(Arc::clone(&graph), cfg).unwrap();
        let mut beside = QecSession::beside(graph, cfg, None).unwrap();
        let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
        let mut run = |req: Vec<u8>| {
            let la = inloop.handle(&req, &mut a).unwrap();
            let lb = beside.handle(&req, &mut b).unwrap();
            assert_eq!(a[..la], b[..lb]);
        };
        let shot = |s: usize| &dets[s * bytes..(s + 1) * bytes];
        run(enqueue(0, 0, shot(1), 0, 48)); // abandoned by the next counter 0
        run(enqueue(0, 0, shot(2), 0, 48));
        run(enqueue(0, 2, shot(2), 48, 24)); // a gap: dropped
        for s in 3..40 {
            for (c, first) in (0..n).step_by(24).enumerate() {
                run(enqueue(0, c as i64, shot(s), first, 24.min(n - first)));
            }
        }
        assert_eq!(inloop.counters(0), beside.counters(0));
        assert_eq!(beside.counters(0).unwrap().shots, 37);
    }
}
