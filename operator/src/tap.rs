//! Taps: how host operators get copies of what the data path did, without the data path ever
//! waiting for them.
//!
//! The source is the per-message record ring the transceiver loop already writes into the
//! queue pair's memory (`rl_msg_timestamp`, `timestamp_entries` records indexed by message
//! number, published by the `processed` counter). The data path writes it and moves on; it
//! never looks at the reader. A [`TapReader`] thread follows `processed` and copies the new
//! records out; records the data path overwrote before the reader got to them are counted as
//! overflow, never delivered torn. The data path is untouched: a tap costs it nothing.
//!
//! From the reader, records go to host operators through bounded crossbeam channels, one per
//! flow ([`FlowSender`]). A full channel never blocks its sender: its policy decides.
//! - `Pop`: the oldest queued message is dropped to make room (counted).
//! - `Reject`: the new message is dropped (counted).
//! - `Fault`: the message is dropped and the run fails with an error naming the flow.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use hdrhistogram::Histogram;

use crate::abi::rl_msg_timestamp;
use crate::latency::new_histogram;
use crate::rings::QpMemory;
use crate::settings::Policy;

/// One message of the data path as the tap saw it: the transceiver loop's record of it
/// (`rl_msg_timestamp`) and its number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MsgRecord {
    /// Message number in the order the transceiver answered (0 first).
    pub seq: u64,
    /// From the request's RPC header.
    pub request_id: u32,
    /// RX slot it arrived in.
    pub slot: u32,
    /// Bytes received.
    pub byte_count: u32,
    /// Send WQE index of the answer.
    pub sq_index: u32,
    /// The receive CQE was seen (backend clock: CLOCK_MONOTONIC on the CPU, %globaltimer on
    /// the GPU).
    pub cqe_seen_ns: u64,
    /// The send doorbell was rung.
    pub doorbell_ns: u64,
    /// The NIC wrote the receive CQE (NIC clock: CLOCK_MONOTONIC for the software NIC).
    pub nic_cqe_ns: u64,
}

/// What flows between host operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    Record(MsgRecord),
}

/// A reason for the run to fail, raised by any thread, read by the runner. The first one
/// raised is kept.
#[derive(Debug, Clone, Default)]
pub struct Fault {
    raised: Arc<AtomicBool>,
    first: Arc<Mutex<Option<String>>>,
}

impl Fault {
    pub fn raise(&self, why: String) {
        if let Ok(mut f) = self.first.lock() {
            if f.is_none() {
                tracing::error!("{why}");
                *f = Some(why);
            }
        }
        self.raised.store(true, Ordering::Release);
    }

    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    pub fn reason(&self) -> Option<String> {
        self.first.lock().ok().and_then(|f| f.clone())
    }
}

/// Counters of one flow: the receiver got `offered - dropped` messages.
#[derive(Debug, Default)]
pub struct FlowCounters {
    /// Messages sent into the flow.
    pub offered: AtomicU64,
    /// Messages the policy dropped (the oldest queued for `Pop`, the new one otherwise).
    pub dropped: AtomicU64,
}

/// The sending end of one flow: a bounded channel and its overflow policy.
pub struct FlowSender {
    tx: Sender<Message>,
    /// For `Pop`: the sender's own handle on the queue, to drop the oldest message.
    oldest: Receiver<Message>,
    policy: Policy,
    capacity: usize,
    /// `from -> to`, for the fault message.
    name: String,
    pub counters: Arc<FlowCounters>,
    fault: Fault,
}

/// A bounded flow of `capacity` messages: its sender and its receiver.
pub fn flow(name: String, capacity: usize, policy: Policy, fault: Fault) -> (FlowSender, Receiver<Message>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
    let s = FlowSender { tx, oldest: rx.clone(), policy, capacity, name, counters: Arc::default(), fault };
    (s, rx)
}

impl FlowSender {
    /// Queues `m` without blocking; a full queue is handled by the flow's policy. (The
    /// sender keeps a handle on its own queue for `Pop`, so a receiver that is gone shows as
    /// a queue that fills up, handled the same way.)
    pub fn push(&self, mut m: Message) {
        self.counters.offered.fetch_add(1, Ordering::Relaxed);
        loop {
            match self.tx.try_send(m) {
                Ok(()) => return,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(back)) => match self.policy {
                    Policy::Pop => {
                        if self.oldest.try_recv().is_ok() {
                            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        m = back;
                    }
                    Policy::Reject => {
                        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Policy::Fault => {
                        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        self.fault
                            .raise(format!("flow {} overflowed (capacity {}, policy Fault)", self.name, self.capacity));
                        return;
                    }
                },
            }
        }
    }
}

/// What the tap reader saw.
#[derive(Debug)]
pub struct TapStats {
    /// Records copied out of the ring.
    pub records: AtomicU64,
    /// Records the data path overwrote before the reader copied them.
    pub overflow: AtomicU64,
    /// Time the transceiver loop spent on each message: CQE seen to doorbell rung (ns).
    pub loop_ns: Mutex<Histogram<u64>>,
}

impl Default for TapStats {
    fn default() -> Self {
        TapStats { records: AtomicU64::new(0), overflow: AtomicU64::new(0), loop_ns: Mutex::new(new_histogram()) }
    }
}

/// How often the reader looks at `processed`. At 1 ms it keeps up with the default ring of
/// 131,072 records up to about 100 million messages per second.
const POLL: Duration = Duration::from_millis(1);

/// The thread that follows the data path's record ring.
pub struct TapReader {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<TapStats>,
}

impl TapReader {
    /// Starts following the record ring of `q` from message 0, sending every record to
    /// every flow in `outs`. With `fault_on_overflow`, an overwritten record fails the run.
    /// Counts go to `stats`.
    pub fn spawn(
        q: QpMemory,
        outs: Vec<FlowSender>,
        core: Option<usize>,
        fault_on_overflow: Option<Fault>,
        stats: Arc<TapStats>,
    ) -> std::io::Result<TapReader> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, stats) = (stop.clone(), stats.clone());
            std::thread::Builder::new().name("rocelink-tap".into()).spawn(move || {
                rocelink_link::affinity::pin_current_thread(core);
                follow(&q, &outs, &stop, &stats, fault_on_overflow.as_ref());
            })?
        };
        Ok(TapReader { stop, thread: Some(thread), stats })
    }

    /// Tells the reader that the data path has stopped: it copies what is left, then ends
    /// (dropping its senders, which lets the host operators finish).
    pub fn finish(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The thread, for the runner to join with a timeout.
    pub fn take_thread(&mut self) -> Option<JoinHandle<()>> {
        self.thread.take()
    }
}

impl Drop for TapReader {
    fn drop(&mut self) {
        self.finish();
    }
}

fn follow(q: &QpMemory, outs: &[FlowSender], stop: &AtomicBool, stats: &TapStats, fault: Option<&Fault>) {
    let entries = u64::from(q.layout.sizes.timestamp_entries);
    if entries == 0 {
        return;
    }
    let processed = q.mem.atomic_u64(q.layout.processed());
    let mut next: u64 = 0;
    let mut batch: Vec<MsgRecord> = Vec::with_capacity(4096);
    loop {
        // Read `stop` first: after it, one more pass sees everything the stopped loop wrote.
        let last_pass = stop.load(Ordering::Acquire);
        let published = processed.load(Ordering::Acquire);
        if published > next {
            let mut lost = 0;
            if published - next > entries {
                lost += published - next - entries;
                next = published - entries;
            }
            batch.clear();
            for seq in next..published {
                let off = q.layout.timestamps + (seq % entries) as usize * std::mem::size_of::<rl_msg_timestamp>();
                let t: rl_msg_timestamp = q.mem.read_struct(off);
                batch.push(MsgRecord {
                    seq,
                    request_id: t.request_id,
                    slot: t.slot,
                    byte_count: t.byte_count,
                    sq_index: t.sq_index,
                    cqe_seen_ns: t.cqe_seen_ns,
                    doorbell_ns: t.doorbell_ns,
                    nic_cqe_ns: t.nic_cqe_ns,
                });
            }
            // A record is intact only if the data path had not started writing message
            // `seq + entries` (same slot) when the copy ended.
            let after = processed.load(Ordering::Acquire);
            let torn_below = after.saturating_sub(entries - 1);
            let before = batch.len();
            batch.retain(|r| r.seq >= torn_below);
            lost += (before - batch.len()) as u64;
            next = published;
            if lost > 0 {
                stats.overflow.fetch_add(lost, Ordering::Relaxed);
                if let Some(f) = fault {
                    f.raise(format!("the tap ring ({entries} records) overflowed: {lost} records were overwritten before the tap read them (a tap flow has policy Fault)"));
                }
            }
            stats.records.fetch_add(batch.len() as u64, Ordering::Relaxed);
            if let Ok(mut h) = stats.loop_ns.lock() {
                let high = h.high();
                for r in &batch {
                    let _ = h.record(r.doorbell_ns.saturating_sub(r.cqe_seen_ns).clamp(1, high));
                }
            }
            for r in &batch {
                for o in outs {
                    o.push(Message::Record(*r));
                }
            }
        }
        if last_pass {
            return;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::SharedMem;
    use crate::rings::QpSizes;

    fn memory(entries: u32) -> QpMemory {
        QpMemory::new(QpSizes { timestamp_entries: entries, ..QpSizes::default() }, SharedMem::new).unwrap()
    }

    /// Writes message `seq`'s record and publishes it, as the transceiver loop does.
    fn write(q: &QpMemory, seq: u64) {
        let entries = u64::from(q.layout.sizes.timestamp_entries);
        let rec = rl_msg_timestamp {
            cqe_seen_ns: 1000 * seq,
            doorbell_ns: 1000 * seq + 250,
            nic_cqe_ns: 1000 * seq - 100,
            request_id: seq as u32 + 1,
            slot: 0,
            byte_count: 64,
            sq_index: seq as u32,
            profile: [0; 2],
        };
        q.mem.write_struct(
            q.layout.timestamps + (seq % entries) as usize * std::mem::size_of::<rl_msg_timestamp>(),
            rec,
        );
        q.mem.atomic_u64(q.layout.processed()).store(seq + 1, Ordering::Release);
    }

    fn collect(rx: &Receiver<Message>) -> Vec<MsgRecord> {
        rx.try_iter().map(|Message::Record(r)| r).collect()
    }

    #[test]
    fn copies_every_record_in_order_and_counts_the_overwritten() {
        let q = memory(16);
        let (tx, rx) = flow("roce.tap -> t.in".into(), 1000, Policy::Reject, Fault::default());
        // 40 records before the reader starts: the ring holds the last 16.
        for s in 0..40 {
            write(&q, s);
        }
        let mut t = TapReader::spawn(q.clone(), vec![tx], None, None, Arc::default()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        for s in 40..50 {
            write(&q, s);
        }
        t.finish();
        t.take_thread().unwrap().join().unwrap();
        let got = collect(&rx);
        let seqs: Vec<u64> = got.iter().map(|r| r.seq).collect();
        // The first pass may only trust records the data path cannot be rewriting.
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        assert_eq!(*seqs.last().unwrap(), 49);
        assert_eq!(t.stats.records.load(Ordering::Relaxed) + t.stats.overflow.load(Ordering::Relaxed), 50);
        assert!(t.stats.overflow.load(Ordering::Relaxed) >= 24);
        assert!(got.iter().all(|r| r.request_id == r.seq as u32 + 1 && r.doorbell_ns - r.cqe_seen_ns == 250));
        assert_eq!(t.stats.loop_ns.lock().unwrap().len(), seqs.len() as u64);
    }

    #[test]
    fn full_flows_follow_their_policy_and_never_block() {
        let rec = |seq| Message::Record(MsgRecord { seq, ..MsgRecord::default() });
        for policy in [Policy::Pop, Policy::Reject, Policy::Fault] {
            let fault = Fault::default();
            let (tx, rx) = flow("a.out -> b.in".into(), 4, policy, fault.clone());
            for s in 0..10 {
                tx.push(rec(s));
            }
            let kept: Vec<u64> = collect(&rx).iter().map(|r| r.seq).collect();
            assert_eq!(tx.counters.dropped.load(Ordering::Relaxed), 6, "{policy:?}");
            match policy {
                Policy::Pop => assert_eq!(kept, vec![6, 7, 8, 9]),
                _ => assert_eq!(kept, vec![0, 1, 2, 3]),
            }
            assert_eq!(fault.is_raised(), policy == Policy::Fault);
            if policy == Policy::Fault {
                assert!(fault.reason().unwrap().contains("flow a.out -> b.in overflowed (capacity 4, policy Fault)"));
            }
        }
    }
}
