//! The checked CPU-proxy doorbell under concurrency (abi.h `rl_proxy_doorbell`): a writer
//! thread plays the GPU data path's side of the contract as loosely as it allows, and the NIC
//! engine thread (the real [`NicEngine`] running [`SoftNic`]) must still send every answer
//! exactly once, in order, byte for byte.
//!
//! The writer, per message: an inline SEND of 1..=236 payload bytes (1 to 4 WQEBBs), or (one in
//! four) a SEND gathering 1..=1000 bytes from its TX slot, the WQE's and the slot's words
//! written in a shuffled order, the doorbell stored after only some of them (the rest land
//! after it, as unfenced GPU stores may), the doorbell's range growing message by message and
//! reset after a "fence" (every few messages, or before it would pass 16 WQEBBs; at a fence
//! every earlier word has been written, which is what a fence guarantees); one in eight goes
//! out fenced with an unchecked doorbell. A wrong NIC either sends a frame whose bytes differ
//! (a torn WQE or payload), sends one twice, skips one, or gives up on one
//! (`tx_wqe_check_failures`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocelink_link::{Link, SpinMode, MAX_FRAME};
use rocelink_operator::abi;
use rocelink_operator::nic::{NicEngine, NicEngineConfig, NicOptions};
use rocelink_operator::rings::{QpMemory, QpSizes};
use rocelink_wire::roce;

#[path = "support/nic_rig.rs"]
mod nic_rig;
use nic_rig::{NicRig, Wire, QPN};

const ENTRIES: u32 = 64;
const MESSAGES: u32 = 3000;

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const TX_STRIDE: u32 = 1024;

/// Message `k`'s payload, and whether it is gathered from its TX slot (else inline).
fn payload(k: u32, rng: &mut Rng) -> (bool, Vec<u8>) {
    let gathered = rng.below(4) == 0;
    let len = 1 + rng.below(if gathered { 1000 } else { 236 }) as usize;
    (gathered, (0..len).map(|i| (k as usize * 131 + i * 7) as u8).collect())
}

/// Where the TX slot of the WQE at WQEBB `index` is: its address (as the NIC resolves it) and
/// its offset in the queue pair's memory.
fn tx_slot(q: &QpMemory, index: u32) -> (u64, usize) {
    let off = q.layout.tx_buffer + (index % ENTRIES * TX_STRIDE) as usize;
    (q.mem.host_addr(off), off)
}

/// Message `k`'s WQE at WQEBB index `index`, padded to whole WQEBBs: the payload inline, or a
/// SEND gathering it from the TX slot of `index` (key `lkey`).
fn wqe(q: &QpMemory, lkey: u32, index: u32, (gathered, payload): &(bool, Vec<u8>)) -> Vec<u8> {
    if *gathered {
        let (addr, _) = tx_slot(q, index);
        return abi::send_gather_wqe(
            index as u16,
            QPN,
            abi::RL_WQE_CTRL_CQ_UPDATE as u8,
            addr,
            lkey,
            payload.len() as u32,
        )
        .to_vec();
    }
    let mut w = abi::send_inline_segments(index as u16, QPN, abi::RL_WQE_CTRL_CQ_UPDATE as u8, payload);
    w.resize(w.len().div_ceil(abi::WQEBB) * abi::WQEBB, 0);
    w
}

#[test]
fn torn_and_late_wqes_under_checked_ranges_go_out_once_in_order_and_whole() {
    let sizes = QpSizes {
        sq_entries: ENTRIES,
        rq_entries: 64,
        rx_slots: 8,
        rx_slot_stride: 256,
        tx_slot_stride: TX_STRIDE,
        timestamp_entries: 0,
        signal_every: 8,
    };
    // a deadline no scheduling delay on a loaded 2-core machine reaches: a failure here is a
    // wrong check, not a slow writer
    let opts = NicOptions { wqe_check_deadline: Duration::from_secs(30), ..NicOptions::default() };
    let NicRig { nic, q, counters, tx, .. } = NicRig::new(sizes, opts);
    let lkey = tx.lkey;
    let Wire { nic_end, mut peer_end, .. } = Wire::new(64);
    let engine = NicEngine::spawn(nic, Box::new(nic_end), NicEngineConfig { core: None, spin: SpinMode::Shared })
        .expect("engine thread");

    // what the writer sent, for the peer to compare; and the WQEBBs of the answers that came
    // back (the writer reuses WQEBBs only after the NIC ran what was in them)
    let received = Arc::new(AtomicU64::new(0));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let payloads: Vec<(bool, Vec<u8>)> = (0..MESSAGES).map(|k| payload(k, &mut rng)).collect();
    let writer = {
        let q = q.clone();
        let received = received.clone();
        let payloads = payloads.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(0xD1CE_5EA5_0000_0001);
            let (mut pi, mut range_first, mut unfenced) = (0u32, 0u32, 0u32);
            let mut late: Vec<(usize, [u8; 8])> = Vec::new(); // words not yet written
            for (k, p) in payloads.iter().enumerate() {
                let w = wqe(&q, lkey, pi, p);
                let bbs = (w.len() / abi::WQEBB) as u32;
                // room: no WQEBB the NIC has yet to run, or may read again for the open range's
                // check, is written over
                while u64::from(pi + bbs) - received.load(Relaxed).min(u64::from(range_first)) > u64::from(ENTRIES) {
                    std::thread::yield_now();
                }
                // the words of this WQE and of its TX slot's payload (the last word's bytes past
                // the payload are garbage, which the check must not see), shuffled; some
                // written now, the rest after the doorbell
                let mut words: Vec<(usize, [u8; 8])> = (0..w.len() / 8)
                    .map(|i| {
                        (
                            q.layout.sq + ((pi as usize * abi::WQEBB + i * 8) % (ENTRIES as usize * abi::WQEBB)),
                            w[i * 8..i * 8 + 8].try_into().unwrap(),
                        )
                    })
                    .collect();
                if p.0 {
                    let (_, at) = tx_slot(&q, pi);
                    for (i, c) in p.1.chunks(8).enumerate() {
                        let mut word = [0xee; 8];
                        word[..c.len()].copy_from_slice(c);
                        words.push((at + i * 8, word));
                    }
                }
                for i in (1..words.len()).rev() {
                    words.swap(i, rng.below(i as u64 + 1) as usize);
                }
                // one in eight goes out as a writer without checked doorbells sends (a real
                // NIC's MMIO doorbell): fence (everything before lands), then an unchecked one
                let unchecked = rng.below(8) == 0;
                let now = if unchecked { words.len() } else { rng.below(words.len() as u64 + 1) as usize };
                for (n, &(at, word)) in words.iter().enumerate() {
                    if n < now {
                        q.mem.write(at, &word);
                    } else {
                        late.push((at, word));
                    }
                }
                pi += bbs;
                if unchecked {
                    for (at, word) in late.drain(..) {
                        q.mem.write(at, &word);
                    }
                    std::sync::atomic::fence(Release);
                    q.mem.atomic_u64(q.layout.proxy_doorbell).store(abi::ProxyDoorbell::unchecked(pi), Release);
                    range_first = pi;
                    unfenced = 0;
                    continue;
                }
                // the check of the whole range, from the intended bytes of its WQEs and of the
                // payloads they gather
                let mut check = 0u64;
                let mut b = range_first;
                let mut m = k - unfenced as usize; // the range's first message
                while b < pi {
                    let wm = wqe(&q, lkey, b, &payloads[m]);
                    check ^= abi::range_check(&wm, b - range_first, |_, first| {
                        Some(abi::gather_check(&payloads[m].1, first))
                    })
                    .unwrap();
                    b += (wm.len() / abi::WQEBB) as u32;
                    m += 1;
                }
                q.mem
                    .atomic_u64(q.layout.proxy_doorbell)
                    .store(abi::ProxyDoorbell::checked(pi, pi - range_first, check), Release);
                // the late words land (a random few now, the rest by the next fence)
                let land = rng.below(late.len() as u64 + 1) as usize;
                for (at, word) in late.drain(..land) {
                    q.mem.write(at, &word);
                }
                unfenced += 1;
                // a fence after 1..=8 messages, or before the range would pass 16 WQEBBs
                if unfenced > rng.below(8) as u32 || pi - range_first + 4 > 16 {
                    // a fence: everything written lands before anything after it
                    for (at, word) in late.drain(..) {
                        q.mem.write(at, &word);
                    }
                    std::sync::atomic::fence(Release);
                    range_first = pi;
                    unfenced = 0;
                }
            }
            for (at, word) in late.drain(..) {
                q.mem.write(at, &word);
            }
        })
    };

    let mut buf = vec![0u8; MAX_FRAME];
    let t0 = Instant::now();
    let mut got = 0u32;
    while got < MESSAGES {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{got} of {MESSAGES} answers after 120 s; counters {:?}",
            counters.snapshot()
        );
        match peer_end.try_recv(&mut buf).expect("link") {
            Some(n) => {
                let f = roce::parse_frame(&buf[..n]).expect("a valid RoCEv2 frame");
                let (gathered, p) = &payloads[got as usize];
                assert_eq!(f.payload, &p[..], "answer {got}: not the bytes its WQE was to hold");
                let bbs = if *gathered {
                    1
                } else {
                    ((16 + 4 + f.payload.len()).div_ceil(16) * 16).div_ceil(abi::WQEBB) as u64
                };
                got += 1;
                received.fetch_add(bbs, Relaxed);
            }
            None => std::thread::yield_now(),
        }
    }
    writer.join().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(peer_end.try_recv(&mut buf).expect("link"), None, "a frame more than the writer sent");
    engine.stop();
    let s = counters.snapshot();
    assert_eq!((s.tx_packets, s.tx_errors, s.tx_wqe_check_failures), (u64::from(MESSAGES), 0, 0), "{s:?}");
    // torn reads did happen (the words written after the doorbell), and were waited out
    assert!(s.tx_wqe_rereads > 0, "{s:?}");
}
