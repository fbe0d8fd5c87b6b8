//! Host operators: what they receive, how they run, and what they get when the run is over.
//!
//! Each host operator runs on its own thread ([`spawn`]), fed by the bounded channels of its
//! input flows. It ends when every input has ended (all senders gone: the tap reader ends
//! after the data path stops), so stopping cascades from the tap downstream without a stop
//! message. The runner then calls [`HostOperator::finish`] with the run's report and the
//! peer's capture, so operators that join the two (the recorder) or write reports can.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select};
use rocelink_wire::hsb::CaptureRecord;

use super::MsgType;
use crate::nic::NicCounters;
use crate::report::RunReport;
use crate::rings::QpMemory;
use crate::tap::{Fault, FlowSender, TapStats};
pub use crate::tap::{Message, MsgRecord};

impl Message {
    pub fn ty(&self) -> MsgType {
        match self {
            Message::Record(_) => MsgType::MsgRecord,
        }
    }
}

/// Live counters of the running data path, for operators that report during the run.
#[derive(Clone)]
pub struct Live {
    q: QpMemory,
    nic: Arc<NicCounters>,
    tap: Arc<TapStats>,
}

impl Live {
    pub fn new(q: QpMemory, nic: Arc<NicCounters>, tap: Arc<TapStats>) -> Live {
        Live { q, nic, tap }
    }
    /// Messages the transceiver loop answered.
    pub fn processed(&self) -> u64 {
        self.q.mem.atomic_u64(self.q.layout.processed()).load(Ordering::Relaxed)
    }
    /// Messages the transceiver loop refused.
    pub fn dropped(&self) -> u32 {
        self.q.mem.atomic_u32(self.q.layout.dropped()).load(Ordering::Relaxed)
    }
    /// Frames the NIC dropped, all reasons.
    pub fn nic_drops(&self) -> u64 {
        self.nic.snapshot().drops.values().sum()
    }
    /// Records the tap lost to overflow.
    pub fn tap_overflow(&self) -> u64 {
        self.tap.overflow.load(Ordering::Relaxed)
    }
    pub fn tap(&self) -> &TapStats {
        &self.tap
    }
}

/// What a host operator's constructor gets.
#[derive(Clone)]
pub struct HostContext {
    /// The operator's name in the graph.
    pub name: String,
    pub graph: String,
    /// Where relative output paths go (`outputs.dir`).
    pub out_dir: PathBuf,
    pub live: Live,
}

impl HostContext {
    /// `p` resolved against the output folder.
    pub fn output_path(&self, p: &str) -> PathBuf {
        self.out_dir.join(p)
    }
}

/// What the run produced, for [`HostOperator::finish`].
pub struct Finished<'a> {
    pub report: &'a RunReport,
    /// The peer's capture records, in arrival order.
    pub capture: &'a [CaptureRecord],
    /// The request id of the first message the peer sent.
    pub first_request_id: u32,
    /// Round trips (ns) of the measured messages (warm-up left out), in arrival order.
    pub rtt_samples: &'a [u64],
    /// A QEC run's reaction latencies (ns; each shot's final message, warm-up shots left
    /// out), in arrival order; empty for other runs.
    pub qec_reaction_samples: &'a [u64],
    /// The peer stamps with the clock of the data path's records (fpga-sim on this host with
    /// the CPU backend: CLOCK_MONOTONIC), so one-way times can be taken.
    pub same_clock: bool,
    /// The peer stamps with the software NIC's clock (fpga-sim on this host, whatever the
    /// backend: CLOCK_MONOTONIC), so the wire and NIC parts of a round trip can be taken.
    pub nic_clock: bool,
    /// When each answer's frame left the software NIC (none for a real NIC).
    pub send_trace: Option<&'a crate::nic::SendTrace>,
}

/// A host operator.
pub trait HostOperator: Send {
    /// One message on input port `port`.
    fn on_message(&mut self, port: &'static str, msg: Message, out: &mut Outputs) -> Result<(), String>;

    /// How often [`Self::on_tick`] runs, if at all.
    fn tick_period(&self) -> Option<Duration> {
        None
    }

    fn on_tick(&mut self, _out: &mut Outputs) {}

    /// After the run, on the runner's thread: writes what the operator writes; returns the
    /// files written.
    fn finish(&mut self, run: &Finished<'_>) -> Result<Vec<PathBuf>, String>;
}

/// The output ports of a host operator and the flows leaving each.
#[derive(Default)]
pub struct Outputs {
    ports: Vec<(&'static str, Vec<FlowSender>)>,
}

impl Outputs {
    pub fn add(&mut self, port: &'static str, flow: FlowSender) {
        match self.ports.iter_mut().find(|(p, _)| *p == port) {
            Some((_, v)) => v.push(flow),
            None => self.ports.push((port, vec![flow])),
        }
    }

    /// Sends `msg` on every flow leaving `port` (none connected: nothing happens).
    pub fn send(&self, port: &str, msg: Message) {
        if let Some((_, flows)) = self.ports.iter().find(|(p, _)| *p == port) {
            for f in flows {
                f.push(msg);
            }
        }
    }

    pub fn is_connected(&self, port: &str) -> bool {
        self.ports.iter().any(|(p, v)| *p == port && !v.is_empty())
    }
}

/// A host operator's thread; joining it gives the operator back.
pub type HostThread = JoinHandle<Box<dyn HostOperator>>;

/// Messages handled from one input before the thread looks at its other inputs and its tick.
const BURST: usize = 256;

/// Runs `op` on a thread named after it until all of `inputs` have ended. An error from the
/// operator raises `fault` and ends the thread (its inputs are dropped: upstream flows then
/// fill up and follow their policy).
pub fn spawn(
    name: &str,
    mut op: Box<dyn HostOperator>,
    mut inputs: Vec<(&'static str, Receiver<Message>)>,
    mut out: Outputs,
    core: Option<usize>,
    fault: Fault,
) -> std::io::Result<HostThread> {
    let op_name = name.to_string();
    std::thread::Builder::new().name(format!("op:{name}")).spawn(move || {
        rocelink_link::affinity::pin_current_thread(core);
        let period = op.tick_period();
        let mut next_tick = period.map(|p| Instant::now() + p);
        'run: while !inputs.is_empty() {
            let wait = next_tick.map_or(Duration::from_millis(100), |t| t.saturating_duration_since(Instant::now()));
            let mut sel = Select::new();
            for (_, rx) in &inputs {
                sel.recv(rx);
            }
            let ready = sel.ready_timeout(wait);
            if let Ok(i) = ready {
                let (port, rx) = (inputs[i].0, inputs[i].1.clone());
                for n in 0..BURST {
                    let got = if n == 0 {
                        rx.recv_timeout(Duration::ZERO)
                    } else {
                        rx.try_recv().map_err(|e| {
                            if e.is_empty() {
                                RecvTimeoutError::Timeout
                            } else {
                                RecvTimeoutError::Disconnected
                            }
                        })
                    };
                    match got {
                        Ok(m) => {
                            if let Err(e) = op.on_message(port, m, &mut out) {
                                fault.raise(format!("operator {op_name}: {e}"));
                                break 'run;
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => {
                            inputs.remove(i);
                            break;
                        }
                    }
                }
            }
            if let (Some(p), Some(t)) = (period, next_tick) {
                if Instant::now() >= t {
                    op.on_tick(&mut out);
                    next_tick = Some(t + p);
                }
            }
        }
        drop(out);
        op
    })
}
