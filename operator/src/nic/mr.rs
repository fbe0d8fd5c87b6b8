//! Memory regions: what the NIC may read (lkey) and what a remote peer may write (rkey).
//!
//! The NIC resolves every address through a region before touching memory: an address or a
//! length outside the region is refused, so nothing is ever written outside one.

use std::sync::Arc;

use crate::mem::SharedMem;
use crate::rings::QpMemory;

/// Access rights of a region (a subset of ibv_access_flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u8);

impl Access {
    pub const LOCAL_READ: Access = Access(0);
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(2);
    pub const REMOTE_READ: Access = Access(4);
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A registered region: `len` bytes at virtual address `addr`, which is byte `offset` of
/// `mem`. As with verbs, the virtual address is the host address of the memory.
#[derive(Clone)]
pub struct MemoryRegion {
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
    pub mem: Arc<SharedMem>,
    pub offset: usize,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("access", &self.access)
            .finish()
    }
}

impl MemoryRegion {
    /// Offset into `mem` of `[va, va + len)`, if the region holds all of it.
    pub fn resolve(&self, va: u64, len: u64) -> Option<usize> {
        let start = va.checked_sub(self.addr)?;
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| self.offset + start as usize)
    }
}

/// The NIC's table of regions, looked up by key.
#[derive(Debug, Default, Clone)]
pub struct MrTable {
    regions: Vec<MemoryRegion>,
    next_index: u32,
}

impl MrTable {
    /// Registers `len` bytes at `offset` of `mem`. Keys carry an index and a tag byte so that
    /// a stale or guessed key is unlikely to name a live region.
    pub fn register(&mut self, mem: Arc<SharedMem>, offset: usize, len: usize, access: Access) -> MemoryRegion {
        assert!(offset + len <= mem.len(), "region outside its memory");
        self.next_index += 1;
        let key = (self.next_index << 8) | 0x5a;
        let mr = MemoryRegion {
            lkey: key,
            rkey: key ^ 0x0000_0080,
            addr: mem.host_addr(offset),
            len: len as u64,
            access,
            mem,
            offset,
        };
        self.regions.push(mr.clone());
        mr
    }

    pub fn by_rkey(&self, rkey: u32) -> Option<&MemoryRegion> {
        self.regions.iter().find(|r| r.rkey == rkey)
    }

    pub fn by_lkey(&self, lkey: u32) -> Option<&MemoryRegion> {
        self.regions.iter().find(|r| r.lkey == lkey)
    }

    /// A table with the two regions the NIC of queue pair `q` needs, registered in this
    /// order: the RX slots, which the peer writes (REMOTE_WRITE | LOCAL_WRITE), and the TX
    /// slots, which SENDs gather from (LOCAL_READ).
    pub fn for_queue_pair(q: &QpMemory) -> QpRegions {
        let mut table = MrTable::default();
        let rx = table.register(
            q.mem.clone(),
            q.layout.rx_buffer,
            q.layout.rx_buffer_len(),
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        );
        let tx = table.register(q.mem.clone(), q.layout.tx_buffer, q.layout.tx_buffer_len(), Access::LOCAL_READ);
        QpRegions { table, rx, tx }
    }
}

/// What [`MrTable::for_queue_pair`] registers: the table (for the NIC) and its two regions.
#[derive(Debug, Clone)]
pub struct QpRegions {
    pub table: MrTable,
    /// The RX slots: the peer's RDMA WRITEs land here (their rkey).
    pub rx: MemoryRegion,
    /// The TX slots: SENDs gather from here (their lkey).
    pub tx: MemoryRegion,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_refuses_anything_outside() {
        let mem = Arc::new(SharedMem::new(8192));
        let mut t = MrTable::default();
        let mr = t.register(mem.clone(), 4096, 1024, Access::REMOTE_WRITE);
        assert_eq!(mr.resolve(mr.addr, 1024), Some(4096));
        assert_eq!(mr.resolve(mr.addr + 1000, 24), Some(5096));
        assert_eq!(mr.resolve(mr.addr + 1000, 25), None);
        assert_eq!(mr.resolve(mr.addr - 1, 1), None);
        assert_eq!(mr.resolve(u64::MAX, 2), None);
        assert!(t.by_rkey(mr.rkey).is_some());
        assert!(t.by_rkey(mr.lkey).is_none());
        assert!(t.by_lkey(mr.lkey).is_some());
    }
}
