//! The wires that carry RoCEv2 frames between the peer (an FPGA or `fpga-sim`) and the NIC.
//!
//! Every [`Link`] carries whole frames, Ethernet header first, so that one parse path in the
//! NIC serves all wires and the ICRC is always checked against an IPv4/UDP header:
//! - [`inproc`]: lock-free single-producer single-consumer rings between two threads of one
//!   process, no kernel. It measures the GPU and NIC path itself.
//! - [`udp`]: real UDP datagrams on port 4791 through the kernel, visible to tcpdump and
//!   Wireshark. A socket delivers only the UDP payload; see [`udp`] for how the header the
//!   ICRC covers is rebuilt.
//!
//! Guarantees: `try_recv` never blocks; `send` never drops silently (it spins while an
//! in-process ring is full, and reports socket errors); no allocation per frame.

pub mod affinity;
pub mod cache;
pub mod clock;
pub mod inproc;
pub mod spin;
pub mod udp;

pub use inproc::InprocLink;
pub use spin::{pause_asked_by_env, Backoff, SpinMode};
pub use udp::UdpLink;

/// The largest frame a link carries (a jumbo frame). Frames above the RoCE path MTU still
/// travel, so that the NIC sees them and counts them as oversized.
pub const MAX_FRAME: usize = 9216;

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("frame of {0} bytes is larger than the link carries ({MAX_FRAME})")]
    FrameTooLarge(usize),
    #[error("frame is not an Ethernet/IPv4/UDP frame")]
    NotIpv4Udp,
    #[error("the other end of the in-process link is gone")]
    Disconnected,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A wire that carries whole RoCEv2 frames, Ethernet header first.
pub trait Link: Send {
    /// Polls once. `Ok(Some(len))`: one frame is in `buf[..len]`; `Ok(None)`: nothing is
    /// waiting. Never blocks. A frame longer than `buf` is truncated to `buf.len()`
    /// (pass a [`MAX_FRAME`] buffer to never truncate).
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<Option<usize>, LinkError>;
    /// Sends one frame.
    fn send(&mut self, frame: &[u8]) -> Result<(), LinkError>;
    /// What the wire is, for logs and reports: `inproc` or `udp 127.0.0.1:4791`.
    fn describe(&self) -> String;
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<Option<usize>, LinkError> {
        (**self).try_recv(buf)
    }
    fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        (**self).send(frame)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
