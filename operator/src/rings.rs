//! The memory of one queue pair and its data path, laid out once in one [`SharedMem`]:
//! send queue, receive queue, their completion queues, doorbell records, the CPU-proxy
//! doorbell, run control, per-message timestamps, and the RX/TX slot buffers.
//!
//! Every region that one side writes and the other polls starts on its own 128-byte line
//! (kernels/abi.h). Completion queues start with every entry INVALID and owned by hardware.

use std::sync::Arc;

use crate::abi::{self, rl_queue_desc, rl_transceiver_desc, CQE, LINE, RECV_WQE, WQEBB};
use crate::mem::{Carver, SharedMem, PAGE};

/// RX slots by default: room for a peer's 64 messages in flight (PROTOCOLS.md 2.3) and the
/// GPU data path's re-posts, which wait for a release fence every few messages
/// (`RL_FENCE_EVERY` in kernels/transceiver.cu), so such a peer never finds the receive queue
/// empty ([`QpSizes::posted_receives`]).
pub const DEFAULT_RX_SLOTS: u32 = 128;

/// Sizes of a queue pair and its buffers. Entry counts are powers of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpSizes {
    pub sq_entries: u32,
    pub rq_entries: u32,
    /// RX slots the peer writes (DP_MAX_BUFF + 1).
    pub rx_slots: u32,
    /// Bytes between RX slots (DP_PAGE_INC * 128).
    pub rx_slot_stride: u32,
    /// Bytes of each TX slot (answers too large to go inline); one per SQ entry.
    pub tx_slot_stride: u32,
    pub timestamp_entries: u32,
    /// Request a send CQE every this many WQEs.
    pub signal_every: u32,
}

impl Default for QpSizes {
    fn default() -> Self {
        QpSizes {
            sq_entries: 128,
            rq_entries: 128,
            rx_slots: DEFAULT_RX_SLOTS,
            rx_slot_stride: 4096,
            tx_slot_stride: 4096,
            timestamp_entries: 1 << 17,
            signal_every: 16,
        }
    }
}

impl QpSizes {
    /// Receives a data path that poisons its slots (the GPU's) has posted at most: one per
    /// RX slot, `min(rx_slots, rq_entries)`. The NIC places a write with immediate only with
    /// a posted receive, and that data path re-posts a message's receive only behind the
    /// release fence that follows the message's poison stores (kernels/transceiver/answer.cuh).
    /// With no more receives than slots, the next message into a slot needs a receive that
    /// was re-posted after the poison of the slot's previous message, so it cannot land
    /// before that poison, whatever the peer's window. With more (128 receives over 64
    /// slots), a peer with 64 messages in flight writes a slot again right after its answer,
    /// while the poison issued after that answer's doorbell may still be on its way and can
    /// overwrite the new message.
    pub fn posted_receives(&self) -> u32 {
        self.rx_slots.min(self.rq_entries)
    }

    /// Checks the invariants the rings rely on.
    pub fn validate(&self) -> Result<(), String> {
        let pow2 = |n: u32, what: &str| {
            if n.is_power_of_two() {
                Ok(())
            } else {
                Err(format!("{what} = {n} must be a power of two"))
            }
        };
        pow2(self.sq_entries, "sq_entries")?;
        pow2(self.rq_entries, "rq_entries")?;
        pow2(self.signal_every, "signal_every")?;
        if self.timestamp_entries != 0 {
            pow2(self.timestamp_entries, "timestamp_entries")?;
        }
        if self.signal_every > self.sq_entries / 2 {
            return Err(format!(
                "signal_every {} must be at most half of sq_entries {}",
                self.signal_every, self.sq_entries
            ));
        }
        if self.rx_slots == 0 || self.rx_slots > 4096 {
            return Err(format!("rx_slots = {} must be 1..=4096 (the immediate carries 12 slot bits)", self.rx_slots));
        }
        if self.rx_slot_stride == 0 || !self.rx_slot_stride.is_multiple_of(128) {
            return Err(format!(
                "rx_slot_stride = {} must be a non-zero multiple of 128 (DP_PAGE_INC units)",
                self.rx_slot_stride
            ));
        }
        if self.tx_slot_stride < 64 {
            return Err("tx_slot_stride must be at least 64".into());
        }
        Ok(())
    }
}

/// Byte offsets of every region inside the queue pair's [`SharedMem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpLayout {
    pub sizes: QpSizes,
    pub sq: usize,
    pub rq: usize,
    pub scq: usize,
    pub rcq: usize,
    pub qp_dbrec: usize,
    pub scq_dbrec: usize,
    pub rcq_dbrec: usize,
    pub proxy_doorbell: usize,
    /// The emulated UAR doorbell register (8 bytes, its own line): where a kernel built with
    /// RL_DOORBELL_MMIO rings, and a software NIC with `DoorbellMode::Mmio` watches.
    pub uar: usize,
    pub control: usize,
    pub timestamps: usize,
    pub rx_buffer: usize,
    pub tx_buffer: usize,
    pub total: usize,
}

impl QpLayout {
    pub fn new(sizes: QpSizes) -> QpLayout {
        let mut c = Carver::new();
        let sq = c.take(sizes.sq_entries as usize * WQEBB, PAGE);
        let rq = c.take(sizes.rq_entries as usize * RECV_WQE, PAGE);
        let scq = c.take(sizes.sq_entries as usize * CQE, PAGE);
        let rcq = c.take(sizes.rq_entries as usize * CQE, PAGE);
        let qp_dbrec = c.take(8, LINE);
        let scq_dbrec = c.take(8, LINE);
        let rcq_dbrec = c.take(8, LINE);
        let proxy_doorbell = c.take(LINE, LINE);
        let uar = c.take(LINE, LINE);
        let control = c.take(2 * LINE, LINE);
        let timestamps = c.take(sizes.timestamp_entries as usize * abi::TIMESTAMP, LINE);
        let rx_buffer = c.take(sizes.rx_slots as usize * sizes.rx_slot_stride as usize, PAGE);
        let tx_buffer = c.take(sizes.sq_entries as usize * sizes.tx_slot_stride as usize, PAGE);
        let total = c.take(0, PAGE);
        QpLayout {
            sizes,
            sq,
            rq,
            scq,
            rcq,
            qp_dbrec,
            scq_dbrec,
            rcq_dbrec,
            proxy_doorbell,
            uar,
            control,
            timestamps,
            rx_buffer,
            tx_buffer,
            total,
        }
    }

    /// Offset of the `send` or `receive` doorbell counter inside the QP dbrec.
    pub fn rq_dbrec_counter(&self) -> usize {
        self.qp_dbrec
    }
    pub fn sq_dbrec_counter(&self) -> usize {
        self.qp_dbrec + 4
    }
    pub fn exit_flag(&self) -> usize {
        self.control + std::mem::offset_of!(abi::rl_control, exit_flag)
    }
    pub fn heartbeat(&self) -> usize {
        self.control + std::mem::offset_of!(abi::rl_control, heartbeat)
    }
    pub fn processed(&self) -> usize {
        self.control + std::mem::offset_of!(abi::rl_control, processed)
    }
    pub fn state(&self) -> usize {
        self.control + std::mem::offset_of!(abi::rl_control, state)
    }
    pub fn error(&self) -> usize {
        self.control + std::mem::offset_of!(abi::rl_control, error)
    }
    pub fn dropped(&self) -> usize {
        self.control + std::mem::offset_of!(abi::rl_control, dropped)
    }
    pub fn rx_slot(&self, slot: u32) -> usize {
        self.rx_buffer + slot as usize * self.sizes.rx_slot_stride as usize
    }
    pub fn tx_slot(&self, index: u32) -> usize {
        self.tx_buffer + (index & (self.sizes.sq_entries - 1)) as usize * self.sizes.tx_slot_stride as usize
    }
    pub fn rx_buffer_len(&self) -> usize {
        self.sizes.rx_slots as usize * self.sizes.rx_slot_stride as usize
    }
    pub fn tx_buffer_len(&self) -> usize {
        self.sizes.sq_entries as usize * self.sizes.tx_slot_stride as usize
    }
}

/// A queue pair's memory, shared by the NIC engine and the data path.
#[derive(Clone)]
pub struct QpMemory {
    pub mem: Arc<SharedMem>,
    pub layout: QpLayout,
}

impl QpMemory {
    /// Lays out and initialises the memory with `alloc` (plain host memory for the CPU
    /// backend; pinned mapped memory for the GPU backend). Every CQE starts INVALID, owned by
    /// hardware, and the words a one-round receive may read before the NIC wrote them (receive
    /// CQE bytes 0..48, each RX slot's first RL_SPEC_BYTES) hold `RL_SPEC_POISON`
    /// (abi.h; kernels/transceiver/poll.cuh), before any receive is posted.
    pub fn new(sizes: QpSizes, alloc: impl FnOnce(usize) -> SharedMem) -> Result<QpMemory, String> {
        sizes.validate()?;
        let layout = QpLayout::new(sizes);
        let mem = alloc(layout.total);
        if mem.len() < layout.total {
            return Err(format!("allocator returned {} bytes, need {}", mem.len(), layout.total));
        }
        for i in 0..sizes.sq_entries as usize {
            mem.atomic_u8(layout.scq + i * CQE + abi::CQE_OP_OWN)
                .store(abi::RL_CQE_INIT_OP_OWN as u8, std::sync::atomic::Ordering::Relaxed);
        }
        for i in 0..sizes.rq_entries as usize {
            mem.atomic_u8(layout.rcq + i * CQE + abi::CQE_OP_OWN)
                .store(abi::RL_CQE_INIT_OP_OWN as u8, std::sync::atomic::Ordering::Relaxed);
        }
        let poison: Vec<u8> =
            abi::RL_SPEC_POISON.to_le_bytes().repeat(abi::RL_SPEC_BYTES.max(abi::RL_SPEC_CQE_BYTES) as usize / 4);
        for i in 0..sizes.rq_entries as usize {
            mem.write(layout.rcq + i * CQE, &poison[..abi::RL_SPEC_CQE_BYTES as usize]);
        }
        let spec = (abi::RL_SPEC_BYTES as usize).min(sizes.rx_slot_stride as usize);
        for slot in 0..sizes.rx_slots {
            mem.write(layout.rx_slot(slot), &poison[..spec]);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(QpMemory { mem: Arc::new(mem), layout })
    }

    /// The descriptor the data path runs on, with device addresses.
    pub fn transceiver_desc(&self, qpn: u32, tx_lkey: u32) -> rl_transceiver_desc {
        self.transceiver_desc_at(self.mem.device_addr(0), qpn, tx_lkey)
    }

    /// The descriptor with every address relative to `device_base`, the address the data
    /// path uses for byte 0 of the memory (a GPU's address of registered host memory).
    pub fn transceiver_desc_at(&self, device_base: u64, qpn: u32, tx_lkey: u32) -> rl_transceiver_desc {
        let l = &self.layout;
        let m = &self.mem;
        let dev = |off: usize| device_base + off as u64;
        let q = |ring: usize, dbrec: usize, entries: u32, size: usize| rl_queue_desc {
            ring: dev(ring),
            dbrec: dev(dbrec),
            entries,
            entry_size: size as u32,
        };
        rl_transceiver_desc {
            sq: q(l.sq, l.sq_dbrec_counter(), l.sizes.sq_entries, WQEBB),
            rq: q(l.rq, l.rq_dbrec_counter(), l.sizes.rq_entries, RECV_WQE),
            scq: q(l.scq, l.scq_dbrec, l.sizes.sq_entries, CQE),
            rcq: q(l.rcq, l.rcq_dbrec, l.sizes.rq_entries, CQE),
            rx_buffer: dev(l.rx_buffer),
            tx_buffer: dev(l.tx_buffer),
            proxy_doorbell: dev(l.proxy_doorbell),
            control: dev(l.control),
            timestamps: if l.sizes.timestamp_entries == 0 { 0 } else { dev(l.timestamps) },
            tx_buffer_iova: m.host_addr(l.tx_buffer),
            stage_state: 0,
            rx_slot_stride: l.sizes.rx_slot_stride,
            rx_slots: l.sizes.rx_slots,
            tx_slot_stride: l.sizes.tx_slot_stride,
            tx_lkey,
            qpn,
            timestamp_entries: l.sizes.timestamp_entries,
            signal_every: l.sizes.signal_every,
            rsvd: 0,
            uar: dev(l.uar),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_do_not_overlap_and_polled_words_have_their_own_lines() {
        let l = QpLayout::new(QpSizes::default());
        let mut regions = [
            (l.sq, 128 * 64),
            (l.rq, 128 * 16),
            (l.scq, 128 * 64),
            (l.rcq, 128 * 64),
            (l.qp_dbrec, LINE),
            (l.scq_dbrec, LINE),
            (l.rcq_dbrec, LINE),
            (l.proxy_doorbell, LINE),
            (l.control, 2 * LINE),
            (l.timestamps, (1 << 17) * abi::TIMESTAMP),
            (l.rx_buffer, l.rx_buffer_len()),
            (l.tx_buffer, l.tx_buffer_len()),
        ];
        regions.sort();
        for w in regions.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
        }
        for (off, _) in regions {
            assert_eq!(off % LINE, 0);
        }
        assert!(l.total >= l.tx_buffer + l.tx_buffer_len());
    }

    #[test]
    fn sizes_are_validated() {
        let bad = QpSizes { sq_entries: 100, ..Default::default() };
        assert!(bad.validate().is_err());
        let bad = QpSizes { rx_slot_stride: 100, ..Default::default() };
        assert!(bad.validate().is_err());
        let bad = QpSizes { rx_slots: 5000, ..Default::default() };
        assert!(bad.validate().is_err());
        assert!(QpSizes::default().validate().is_ok());
    }

    #[test]
    fn cqs_start_invalid() {
        let m = QpMemory::new(QpSizes::default(), SharedMem::new).unwrap();
        let op = m.mem.read_struct::<u8>(m.layout.rcq + 63);
        assert_eq!(op, 0xf1);
    }

    #[test]
    fn what_a_one_round_receive_may_read_early_starts_poisoned() {
        let sizes = QpSizes::default();
        let m = QpMemory::new(sizes, SharedMem::new).unwrap();
        let word = |off: usize| u32::from_le_bytes(m.mem.read_struct::<[u8; 4]>(off));
        let last = sizes.rq_entries as usize - 1;
        for e in [0, last] {
            let at = m.layout.rcq + e * CQE;
            for w in 0..abi::RL_SPEC_CQE_BYTES as usize / 4 {
                assert_eq!(word(at + 4 * w), abi::RL_SPEC_POISON, "CQE {e} word {w}");
            }
            // the chunk with the owner byte is the NIC's alone
            assert_eq!(m.mem.read_struct::<[u8; 16]>(at + 48)[..15], [0u8; 15]);
            assert_eq!(m.mem.read_struct::<u8>(at + 63), abi::RL_CQE_INIT_OP_OWN as u8);
        }
        for slot in [0, sizes.rx_slots - 1] {
            let at = m.layout.rx_slot(slot);
            for w in 0..abi::RL_SPEC_BYTES as usize / 4 {
                assert_eq!(word(at + 4 * w), abi::RL_SPEC_POISON, "slot {slot} word {w}");
            }
            assert_eq!(word(at + abi::RL_SPEC_BYTES as usize), 0, "only the speculated bytes");
        }
    }
}
