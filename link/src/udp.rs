//! The UDP wire: real RoCEv2 datagrams (UDP payload = BTH .. ICRC) through the kernel.
//!
//! Guarantee: every frame sent carries, on the wire, the IPv4 header its ICRC was computed
//! over, and every frame received is handed on with the IPv4 header it arrived with
//! ([`RecvMode::Raw`]) or, where the process may not open raw sockets, with the header an
//! HSB FPGA sends ([`RecvMode::Rebuild`], which then assumes identification 0). Which modes a
//! link uses is logged when it is bound and said by [`Link::describe`].
//!
//! **Sending** (PROTOCOLS.md 1.1: the ICRC covers the identification and flags). Linux puts
//! identification 0 on a DF datagram only when the socket has no destination of its own: an
//! unconnected UDP socket with `IP_MTU_DISCOVER = IP_PMTUDISC_DO`, or a raw socket. A
//! *connected* socket numbers its datagrams with a per-socket counter, so connected sockets
//! are never used. Two ways, both giving the header the frame's emitter wrote:
//! - [`SendMode::Udp`]: `sendto` on an unconnected UDP socket bound to the frame's source
//!   port, DF (identification 0), `SO_NO_CHECK` (UDP checksum 0, as the HSB RTL), TTL 64;
//! - [`SendMode::Raw`]: the frame's own IPv4 header and everything after it through an
//!   `IPPROTO_RAW` socket (`IP_HDRINCL`): identification 0, DF, TTL 64 and UDP checksum 0 as
//!   the HSB RTL writes them; the kernel fills in only the total length and header checksum
//!   (and keeps identification 0 for DF). Needs CAP_NET_RAW.
//!
//! [`UdpLink::bind`] sends with [`SendMode::Raw`] where a raw socket opens, else with
//! [`SendMode::Udp`]; the raw send was the faster on loopback, and the raw receiver, a little
//! slower than the rebuilding one, is still the default where allowed, because only it checks
//! the ICRC a ConnectX checks (`latency-reports/decisions.md`; `examples/udp_pingpong.rs`
//! measures both).
//!
//! **Receiving.** A UDP socket delivers only the UDP payload. Where the process may open raw
//! sockets (CAP_NET_RAW), [`RecvMode::Raw`] receives through an `AF_INET`/`SOCK_RAW`/
//! `IPPROTO_UDP` socket bound to the local address, whose BPF filter keeps the datagrams to
//! this link's ports (fragments dropped): the NIC verifies the ICRC against the header as
//! received, so a sender's identification (any value, with a correct ICRC) is accepted, and a
//! wrong ICRC is not. The UDP sockets stay bound (the ports stay ours and no ICMP
//! unreachable answers the peer) with a drop-all filter, so their queues never fill.
//! Otherwise [`RecvMode::Rebuild`] rebuilds the header an HSB FPGA puts on the wire
//! (identification 0, DF, TTL 64, TOS 0, UDP checksum 0; source = the datagram's source,
//! destination = the bound address) in front of the datagram: the NIC then verifies the ICRC
//! against that, and a sender with another identification fails, valid or not.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use rocelink_wire::ethernet::{self, EthernetRepr};
use rocelink_wire::ipv4::{self, Ipv4Repr};
use rocelink_wire::udp::{self, UdpRepr};

use crate::{Link, LinkError, MAX_FRAME};

/// Ethernet + IPv4 (no options) + UDP.
pub const HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// In [`RecvMode::Rebuild`], while the bound socket is empty, [`UdpLink::try_recv`] looks at
/// the extra ports' sockets on one call in this many. Datagrams to them are rare (RoCEv2
/// answers go to port 4791, the bound one), and each look is a syscall in front of the next
/// look at the bound socket. A datagram to an extra socket still arrives, at most
/// this many idle calls late. ([`RecvMode::Raw`] has one socket for every port.)
pub const EXTRA_SOCKET_POLL_EVERY: u32 = 8;

/// How a link puts frames on the wire (the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// `sendto` on unconnected UDP sockets (DF, identification 0).
    Udp,
    /// The frame's IPv4 header and payload through an `IP_HDRINCL` raw socket.
    Raw,
}

/// How a link takes frames off the wire (the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvMode {
    /// A raw IPv4 socket: the header as received.
    Raw,
    /// The UDP sockets, with the HSB header rebuilt (identification 0 assumed).
    Rebuild,
}

impl SendMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SendMode::Udp => "unconnected UDP sockets (DF, identification 0)",
            SendMode::Raw => "raw IP_HDRINCL socket (the frame's own header)",
        }
    }
}

impl RecvMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RecvMode::Raw => "raw socket (ICRC checked against the header as received)",
            RecvMode::Rebuild => "UDP socket (header rebuilt: assumes identification 0, DF)",
        }
    }
}

/// Which modes [`UdpLink::bind_with`] uses: `None` picks the raw one where a raw socket
/// opens (CAP_NET_RAW), else [`SendMode::Udp`] / [`RecvMode::Rebuild`]; `Some` insists, and
/// binding fails if it cannot be had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpModes {
    pub send: Option<SendMode>,
    pub recv: Option<RecvMode>,
}

/// One end of the UDP wire, bound to a local IPv4 address and port.
pub struct UdpLink {
    local: SocketAddrV4,
    socket: UdpSocket,
    /// Extra sockets bound to the other source ports frames are sent from (an FPGA sends from
    /// DP_PACKET_UDP_PORT and receives on 4791), unconnected. Made on first use, then reused.
    port_sockets: Vec<(u16, UdpSocket)>,
    /// [`SendMode::Raw`]: the `IPPROTO_RAW` socket (it receives nothing).
    raw_tx: Option<OwnedFd>,
    /// [`RecvMode::Raw`]: the raw receiving socket, filtered to our address and ports.
    raw_rx: Option<OwnedFd>,
    /// Rebuild mode: try_recv calls that found the bound socket empty (EXTRA_SOCKET_POLL_EVERY).
    idle_polls: u32,
}

/// A non-blocking IPv4 UDP socket with large buffers, DF set and UDP checksum 0, bound to
/// `addr` (without SO_REUSEADDR: a port another socket holds fails to bind).
fn bind_socket(addr: SocketAddrV4) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // Large buffers: open-loop bursts of 64 frames of 4 KiB must not overflow the kernel's.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    set_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    // The HSB RTL sends UDP checksum 0 (the ICRC masks the field either way).
    set_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, 1)?;
    s.set_ttl_v4(64)?;
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn set_int(fd: libc::c_int, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Classic BPF opcodes (linux/filter.h).
mod bpf {
    pub const LD_W_ABS: u16 = 0x20;
    pub const LD_H_ABS: u16 = 0x28;
    pub const LD_H_IND: u16 = 0x48;
    pub const LDX_B_MSH: u16 = 0xb1;
    pub const JEQ_K: u16 = 0x15;
    pub const JSET_K: u16 = 0x45;
    pub const RET_K: u16 = 0x06;
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The raw receiver's filter (it sees the IPv4 header first): keeps unfragmented datagrams
/// to `ip` and one of `ports`, drops the rest.
fn port_filter(ip: Ipv4Addr, ports: &[u16]) -> Vec<libc::sock_filter> {
    const TESTS_AT: usize = 6;
    let drop = TESTS_AT + ports.len();
    let accept = drop + 1;
    // a jump from instruction `from` to `target`
    let to = |from: usize, target: usize| (target - from - 1) as u8;
    let mut p = vec![
        insn(bpf::LD_H_ABS, 0, 0, 6),              // flags | fragment offset
        insn(bpf::JSET_K, to(1, drop), 0, 0x3fff), // MF or an offset: a fragment
        insn(bpf::LD_W_ABS, 0, 0, 16),             // destination address
        insn(bpf::JEQ_K, 0, to(3, drop), u32::from(ip)),
        insn(bpf::LDX_B_MSH, 0, 0, 0), // X = IPv4 header length
        insn(bpf::LD_H_IND, 0, 0, 2),  // UDP destination port
    ];
    for (i, port) in ports.iter().enumerate() {
        p.push(insn(bpf::JEQ_K, to(TESTS_AT + i, accept), 0, u32::from(*port)));
    }
    p.push(insn(bpf::RET_K, 0, 0, 0));
    p.push(insn(bpf::RET_K, 0, 0, u32::MAX));
    p
}

fn attach_filter(fd: libc::c_int, prog: &[libc::sock_filter]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut libc::sock_filter };
    // SAFETY: the kernel copies `len` instructions from `filter`, which points at `prog`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Keeps a UDP socket bound but empty ([`RecvMode::Raw`] receives its datagrams): a filter
/// that drops everything, then whatever queued before it.
fn silence(s: &UdpSocket) -> std::io::Result<()> {
    attach_filter(s.as_raw_fd(), &[insn(bpf::RET_K, 0, 0, 0)])?;
    let mut b = [0u8; 64];
    while s.recv_from(&mut b).is_ok() {}
    Ok(())
}

fn raw_socket(protocol: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the fd is owned from here on.
    let fd =
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// The raw receiving socket: bound to `ip` (the kernel then hands it only datagrams to `ip`),
/// filtered to `ports`, with a large buffer.
fn raw_receiver(ip: Ipv4Addr, ports: &[u16]) -> std::io::Result<OwnedFd> {
    let fd = raw_socket(libc::IPPROTO_UDP)?;
    // The filter first: nothing else queues meanwhile.
    attach_filter(fd.as_raw_fd(), &port_filter(ip, ports))?;
    let sa = sockaddr(SocketAddrV4::new(ip, 0));
    // SAFETY: bind reads a sockaddr_in of the size given.
    if unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    if set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 4 << 20).is_err() {
        let _ = set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    }
    // Until the filter was attached it took every UDP datagram of the host: drop those
    // (nobody was told to send to this link yet).
    let mut b = [0u8; 64];
    // SAFETY: recv writes at most `b.len()` bytes into `b`.
    while unsafe { libc::recv(fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) } >= 0 {}
    Ok(fd)
}

/// One non-blocking receive: `Ok(None)` when nothing waits (or an ICMP error of an earlier
/// send was reported on the socket: nothing waits then either).
fn recv_one(s: &UdpSocket, body: &mut [u8]) -> std::io::Result<Option<(usize, std::net::SocketAddr)>> {
    match s.recv_from(body) {
        Ok(x) => Ok(Some(x)),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::ConnectionRefused) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl UdpLink {
    /// Binds `local` (a concrete address: the ICRC covers it; port 0 picks a free port), in
    /// the modes [`UdpModes::default`] picks.
    pub fn bind(local: SocketAddrV4) -> std::io::Result<Self> {
        Self::bind_with(local, UdpModes::default())
    }

    /// Binds `local` in `modes`.
    pub fn bind_with(local: SocketAddrV4, modes: UdpModes) -> std::io::Result<Self> {
        if local.ip().is_unspecified() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the UDP wire needs a concrete local IPv4 address (the ICRC covers it), not 0.0.0.0",
            ));
        }
        let socket = bind_socket(local)?;
        let local = match socket.local_addr()? {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => unreachable!("bound an IPv4 socket"),
        };
        // IPPROTO_RAW implies IP_HDRINCL and receives nothing.
        let raw_tx = match modes.send {
            Some(SendMode::Udp) => None,
            Some(SendMode::Raw) => Some(raw_socket(libc::IPPROTO_RAW)?),
            None => raw_socket(libc::IPPROTO_RAW).ok(),
        };
        let raw_rx = match modes.recv {
            Some(RecvMode::Rebuild) => None,
            Some(RecvMode::Raw) => Some(raw_receiver(*local.ip(), &[local.port()])?),
            None => raw_receiver(*local.ip(), &[local.port()]).ok(),
        };
        if raw_rx.is_some() {
            silence(&socket)?;
        }
        let link = UdpLink { local, socket, port_sockets: Vec::new(), raw_tx, raw_rx, idle_polls: 0 };
        tracing::info!(local = %local, send = link.send_mode().as_str(), receive = link.recv_mode().as_str(), "UDP wire bound");
        Ok(link)
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    pub fn send_mode(&self) -> SendMode {
        if self.raw_tx.is_some() {
            SendMode::Raw
        } else {
            SendMode::Udp
        }
    }

    pub fn recv_mode(&self) -> RecvMode {
        if self.raw_rx.is_some() {
            RecvMode::Raw
        } else {
            RecvMode::Rebuild
        }
    }

    /// Makes the unconnected socket of source port `port` if it is not there yet (a port
    /// another socket holds fails here).
    fn ensure_port(&mut self, port: u16) -> std::io::Result<()> {
        if port == self.local.port() || self.port_sockets.iter().any(|(p, _)| *p == port) {
            return Ok(());
        }
        let s = bind_socket(SocketAddrV4::new(*self.local.ip(), port))?;
        if let Some(rx) = &self.raw_rx {
            // the raw receiver takes this port's datagrams too, from now on
            let mut ports: Vec<u16> = self.port_sockets.iter().map(|(p, _)| *p).collect();
            ports.extend([self.local.port(), port]);
            attach_filter(rx.as_raw_fd(), &port_filter(*self.local.ip(), &ports))?;
            silence(&s)?;
        }
        self.port_sockets.push((port, s));
        Ok(())
    }

    /// The unconnected socket bound to `port` (made by [`Self::ensure_port`]).
    fn port_socket(&self, port: u16) -> &UdpSocket {
        if port == self.local.port() {
            return &self.socket;
        }
        let i = self
            .port_sockets
            .iter()
            .position(|(p, _)| *p == port)
            .expect("a source port's socket is made before its first send");
        &self.port_sockets[i].1
    }

    /// [`RecvMode::Raw`]: one datagram, IPv4 header first, into `buf` after an Ethernet header.
    fn recv_raw(rx: &OwnedFd, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        let (eth, ip) = buf.split_at_mut(ethernet::HEADER_LEN);
        // SAFETY: recv writes at most `ip.len()` bytes into `ip`.
        let n = unsafe { libc::recv(rx.as_raw_fd(), ip.as_mut_ptr().cast(), ip.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        EthernetRepr { dst_addr: [0; 6], src_addr: [0; 6], ethertype: ethernet::ETHERTYPE_IPV4 }
            .emit(&mut ethernet::Frame::new_unchecked(eth));
        Ok(Some(ethernet::HEADER_LEN + n as usize))
    }

    /// [`RecvMode::Rebuild`]: the bound socket, or on one idle call in
    /// [`EXTRA_SOCKET_POLL_EVERY`] the extra ones; the HSB header rebuilt in front.
    fn recv_rebuild(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        let (hdr, body) = buf.split_at_mut(HEADERS_LEN);
        // `to`: the port it was sent to.
        let mut to = self.local.port();
        let mut got = recv_one(&self.socket, body)?;
        if got.is_none() && !self.port_sockets.is_empty() {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if self.idle_polls.is_multiple_of(EXTRA_SOCKET_POLL_EVERY) {
                for (port, s) in &self.port_sockets {
                    if let Some(x) = recv_one(s, body)? {
                        got = Some(x);
                        to = *port;
                        break;
                    }
                }
            }
        }
        let Some((n, from)) = got else { return Ok(None) };
        let std::net::SocketAddr::V4(from) = from else { return Ok(None) };
        write_headers(hdr, from, SocketAddrV4::new(*self.local.ip(), to), n);
        Ok(Some(HEADERS_LEN + n))
    }
}

/// Writes the Ethernet/IPv4/UDP header an HSB FPGA sends in front of a `payload_len`-byte UDP
/// payload into `buf[..HEADERS_LEN]`.
fn write_headers(buf: &mut [u8], src: SocketAddrV4, dst: SocketAddrV4, payload_len: usize) {
    let eth = EthernetRepr { dst_addr: [0; 6], src_addr: [0; 6], ethertype: ethernet::ETHERTYPE_IPV4 };
    let ip = Ipv4Repr {
        src_addr: src.ip().octets(),
        dst_addr: dst.ip().octets(),
        protocol: ipv4::PROTO_UDP,
        payload_len: udp::HEADER_LEN + payload_len,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: true,
    };
    let u = UdpRepr { src_port: src.port(), dst_port: dst.port(), payload_len, checksum: 0 };
    let (e, rest) = buf.split_at_mut(ethernet::HEADER_LEN);
    eth.emit(&mut ethernet::Frame::new_unchecked(e));
    let (i, rest) = rest.split_at_mut(ipv4::HEADER_LEN);
    ip.emit(&mut ipv4::Packet::new_unchecked(i));
    u.emit(&mut udp::Packet::new_unchecked(&mut rest[..udp::HEADER_LEN]));
}

impl Link for UdpLink {
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<Option<usize>, LinkError> {
        if buf.len() < HEADERS_LEN {
            return Err(LinkError::FrameTooLarge(HEADERS_LEN));
        }
        let got = match &self.raw_rx {
            Some(rx) => Self::recv_raw(rx, buf)?,
            None => self.recv_rebuild(buf)?,
        };
        Ok(got)
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        if frame.len() > MAX_FRAME {
            return Err(LinkError::FrameTooLarge(frame.len()));
        }
        let eth = ethernet::Frame::new_checked(frame).map_err(|_| LinkError::NotIpv4Udp)?;
        if eth.ethertype() != ethernet::ETHERTYPE_IPV4 {
            return Err(LinkError::NotIpv4Udp);
        }
        let ip = ipv4::Packet::new_checked(eth.payload()).map_err(|_| LinkError::NotIpv4Udp)?;
        if ip.protocol() != ipv4::PROTO_UDP {
            return Err(LinkError::NotIpv4Udp);
        }
        let hl = usize::from(ip.header_len());
        let ip_bytes = eth.payload();
        let u = udp::Packet::new_checked(ip_bytes.get(hl..).ok_or(LinkError::NotIpv4Udp)?)
            .map_err(|_| LinkError::NotIpv4Udp)?;
        let dst = SocketAddrV4::new(Ipv4Addr::from(ip.dst_addr()), u.dst_port());
        let src_port = u.src_port();
        // The source port is ours (bound, or bound now) in both modes.
        self.ensure_port(src_port)?;
        loop {
            let sent = match &self.raw_tx {
                Some(tx) => {
                    let datagram = &ip_bytes[..usize::from(ip.total_len()).min(ip_bytes.len())];
                    let sa = sockaddr(SocketAddrV4::new(*dst.ip(), 0));
                    // SAFETY: sendto reads `datagram` and a sockaddr_in of the size given.
                    let n = unsafe {
                        libc::sendto(
                            tx.as_raw_fd(),
                            datagram.as_ptr().cast(),
                            datagram.len(),
                            0,
                            (&sa as *const libc::sockaddr_in).cast(),
                            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                        )
                    };
                    if n < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                }
                None => self
                    .port_socket(src_port)
                    .send_to(&frame[ethernet::HEADER_LEN + hl + udp::HEADER_LEN..], dst)
                    .map(|_| ()),
            };
            match sent {
                Ok(()) => return Ok(()),
                // The kernel's buffer is full for a moment: wait for it rather than drop.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                // An earlier datagram's ICMP error (nobody listened at its destination then),
                // reported on this send, which it did not make: make it again.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn describe(&self) -> String {
        format!("udp {} (send: {}; receive: {})", self.local, self.send_mode().as_str(), self.recv_mode().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocelink_wire::roce::{self, Endpoints, RoceRepr};

    const REBUILD: UdpModes = UdpModes { send: Some(SendMode::Udp), recv: Some(RecvMode::Rebuild) };

    /// Whether this process may open raw sockets; says so when it may not.
    fn raw_allowed(test: &str) -> bool {
        match raw_socket(libc::IPPROTO_UDP) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("{test}: SKIPPED, no raw socket ({e}; needs CAP_NET_RAW)");
                false
            }
        }
    }

    fn loopback(modes: UdpModes) -> UdpLink {
        UdpLink::bind_with(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), modes).unwrap()
    }

    /// A link on port 4791 (RoCEv2's: `parse_frame` wants it) of a loopback address of its own.
    fn roce_link(modes: UdpModes) -> UdpLink {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        loop {
            let k = NEXT.fetch_add(1, Ordering::Relaxed) + std::process::id() % 4096 * 16;
            let ip = Ipv4Addr::new(127, 213, (k >> 8) as u8, k as u8 | 1);
            match UdpLink::bind_with(SocketAddrV4::new(ip, roce::UDP_PORT), modes) {
                Ok(l) => return l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(e) => panic!("{ip}: {e}"),
            }
        }
    }

    /// The modes to test: rebuild always, and every raw combination where allowed.
    fn all_modes(test: &str) -> Vec<UdpModes> {
        let mut v = vec![REBUILD];
        if raw_allowed(test) {
            for send in [SendMode::Udp, SendMode::Raw] {
                v.push(UdpModes { send: Some(send), recv: Some(RecvMode::Raw) });
            }
            v.push(UdpModes { send: Some(SendMode::Raw), recv: Some(RecvMode::Rebuild) });
        }
        v
    }

    fn frame(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; HEADERS_LEN + payload.len()];
        write_headers(&mut f, src, dst, payload.len());
        f[HEADERS_LEN..].copy_from_slice(payload);
        f
    }

    /// A UC SEND from `src` to `dst` whose ICRC covers identification `ident`.
    fn roce_send(src: SocketAddrV4, dst: SocketAddrV4, ident: u16) -> Vec<u8> {
        let ep = Endpoints {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src_ip: src.ip().octets(),
            dst_ip: dst.ip().octets(),
            src_port: src.port(),
            dst_port: dst.port(),
        };
        let mut r = RoceRepr::uc_send_only(&ep, 2, 7, 16);
        r.ipv4.ident = ident;
        let mut f = vec![0u8; 256];
        let n = r.emit(&[0x5a; 16], &mut f).unwrap();
        f.truncate(n);
        f
    }

    /// Calls try_recv until a datagram comes (at most `limit` calls); the calls it took.
    fn calls_until_recv(link: &mut UdpLink, limit: u32) -> Option<(u32, Vec<u8>)> {
        let mut buf = vec![0u8; 2048];
        for k in 1..=limit {
            if let Some(n) = link.try_recv(&mut buf).unwrap() {
                return Some((k, buf[..n].to_vec()));
            }
        }
        None
    }

    fn recv_frame(link: &mut UdpLink) -> Vec<u8> {
        calls_until_recv(link, 100_000).expect("a datagram comes").1
    }

    /// A UDP port on 127.0.0.1 free a moment ago.
    fn free_port() -> u16 {
        UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn the_header_on_the_wire_is_the_one_the_frame_was_built_with_in_every_send_mode() {
        // the raw receiver sees the header as sent: identification 0, DF, TTL 64, UDP
        // checksum 0, byte for byte the emitter's (the ICRC covers it: PROTOCOLS.md 1.1)
        if !raw_allowed("the_header_on_the_wire_is_the_one_the_frame_was_built_with_in_every_send_mode") {
            return;
        }
        for send in [SendMode::Udp, SendMode::Raw] {
            let mut a = roce_link(UdpModes { send: Some(send), recv: Some(RecvMode::Raw) });
            let mut b = roce_link(UdpModes { send: Some(SendMode::Udp), recv: Some(RecvMode::Raw) });
            for k in 0..50u16 {
                let f = roce_send(a.local_addr(), b.local_addr(), 0);
                a.send(&f).unwrap();
                let got = recv_frame(&mut b);
                assert_eq!(&got[ethernet::HEADER_LEN..], &f[ethernet::HEADER_LEN..], "{send:?}, frame {k}");
                roce::parse_frame(&got).expect("its ICRC verifies against the header received");
            }
        }
    }

    #[test]
    fn a_raw_receiver_verifies_against_the_header_as_received_and_a_rebuilding_one_assumes_identification_0() {
        if !raw_allowed(
            "a_raw_receiver_verifies_against_the_header_as_received_and_a_rebuilding_one_assumes_identification_0",
        ) {
            return;
        }
        // a sender that chose identification 0x1234 and computed its ICRC over it (valid)
        let mut tx = roce_link(UdpModes { send: Some(SendMode::Raw), recv: Some(RecvMode::Rebuild) });
        let mut raw = roce_link(UdpModes { send: None, recv: Some(RecvMode::Raw) });
        let f = roce_send(tx.local_addr(), raw.local_addr(), 0x1234);
        tx.send(&f).unwrap();
        let got = recv_frame(&mut raw);
        assert_eq!(ipv4::Packet::new_checked(&got[ethernet::HEADER_LEN..]).unwrap().ident(), 0x1234);
        roce::parse_frame(&got).expect("accepted: a correct ICRC over identification 0x1234");
        // the same frame with a wrong ICRC
        let mut bad = roce_send(tx.local_addr(), raw.local_addr(), 0x1234);
        *bad.last_mut().unwrap() ^= 1;
        tx.send(&bad).unwrap();
        let got = recv_frame(&mut raw);
        assert_eq!(roce::parse_frame(&got).err(), Some(rocelink_wire::Error::BadIcrc));
        // a rebuilding receiver cannot see the identification: it fails a valid frame
        let mut rebuild = roce_link(REBUILD);
        tx.send(&roce_send(tx.local_addr(), rebuild.local_addr(), 0x1234)).unwrap();
        let got = recv_frame(&mut rebuild);
        assert_eq!(ipv4::Packet::new_checked(&got[ethernet::HEADER_LEN..]).unwrap().ident(), 0);
        assert_eq!(roce::parse_frame(&got).err(), Some(rocelink_wire::Error::BadIcrc));
        // and accepts one over identification 0
        tx.send(&roce_send(tx.local_addr(), rebuild.local_addr(), 0)).unwrap();
        roce::parse_frame(&recv_frame(&mut rebuild)).expect("identification 0");
    }

    #[test]
    fn a_raw_receiver_takes_only_datagrams_to_its_address_and_ports_and_its_udp_socket_stays_empty() {
        if !raw_allowed("a_raw_receiver_takes_only_datagrams_to_its_address_and_ports_and_its_udp_socket_stays_empty") {
            return;
        }
        let mut a = loopback(UdpModes { send: Some(SendMode::Udp), recv: Some(RecvMode::Raw) });
        let mut other = loopback(REBUILD);
        let plain = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        // to another port of the same address: not ours
        plain.send_to(b"to someone else", other.local_addr()).unwrap();
        assert!(calls_until_recv(&mut other, 100_000).is_some());
        assert!(calls_until_recv(&mut a, 1000).is_none());
        for k in 0..2000u32 {
            plain.send_to(&k.to_le_bytes(), a.local_addr()).unwrap();
            let got = recv_frame(&mut a);
            assert_eq!(&got[HEADERS_LEN..], &k.to_le_bytes());
        }
        // the bound UDP socket never queued one (its drop-all filter): nothing waits there
        let mut b = [0u8; 16];
        assert!(a.socket.recv_from(&mut b).is_err());
        assert_eq!(
            a.describe(),
            format!("udp {} (send: {}; receive: {})", a.local_addr(), SendMode::Udp.as_str(), RecvMode::Raw.as_str())
        );
    }

    #[test]
    fn datagrams_to_the_bound_socket_come_on_the_first_call_and_to_an_extra_one_within_the_poll_period() {
        for modes in all_modes("datagrams_to_the_bound_socket_come..") {
            let mut a = loopback(modes);
            let mut b = loopback(modes);
            // a sends from a port of its own that is not its bound one: an extra socket
            let extra = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
            a.send(&frame(extra, b.local_addr(), b"to b")).unwrap();
            assert_eq!(&recv_frame(&mut b)[HEADERS_LEN..], b"to b");
            for round in 0..3 {
                // to a's extra socket: taken on one of the next EXTRA_SOCKET_POLL_EVERY idle calls
                b.send(&frame(b.local_addr(), extra, b"to the extra socket")).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
                let (calls, p) = calls_until_recv(&mut a, 10 * EXTRA_SOCKET_POLL_EVERY)
                    .expect("the extra socket's datagram is received");
                assert_eq!(&p[HEADERS_LEN..], b"to the extra socket");
                // and rebuilt (or received) with that port as its destination
                assert_eq!(p, frame(b.local_addr(), extra, b"to the extra socket"), "{modes:?}");
                assert!(calls <= EXTRA_SOCKET_POLL_EVERY, "{modes:?} round {round}: {calls} calls");
                // to a's bound socket: the very next call
                b.send(&frame(b.local_addr(), a.local_addr(), b"to the bound socket")).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
                let (calls, p) = calls_until_recv(&mut a, 1).expect("on the first call");
                assert_eq!((calls, &p[HEADERS_LEN..]), (1, &b"to the bound socket"[..]));
            }
        }
    }

    #[test]
    fn a_burst_from_an_extra_port_to_a_link_that_answers_arrives_in_order() {
        // the peer's and the NIC's shape (fpga-sim: 12288 -> 4791, answers 4791 -> 4791), open loop
        for modes in all_modes("a_burst_from_an_extra_port..") {
            let mut peer = loopback(modes);
            let mut nic = loopback(modes);
            let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
            let mut buf = vec![0u8; 2048];
            let mut got = Vec::new();
            for k in 0..400u32 {
                peer.send(&frame(src, nic.local_addr(), &k.to_le_bytes())).unwrap();
                if k % 3 == 0 {
                    while let Some(n) = nic.try_recv(&mut buf).unwrap() {
                        got.push(u32::from_le_bytes(buf[HEADERS_LEN..n].try_into().unwrap()));
                        nic.send(&frame(nic.local_addr(), peer.local_addr(), b"answer")).unwrap();
                    }
                }
            }
            for _ in 0..10_000 {
                if let Some(n) = nic.try_recv(&mut buf).unwrap() {
                    got.push(u32::from_le_bytes(buf[HEADERS_LEN..n].try_into().unwrap()));
                }
            }
            assert_eq!(got, (0..400).collect::<Vec<_>>(), "{modes:?}");
            let mut answers = 0;
            for _ in 0..10_000 {
                if peer.try_recv(&mut buf).unwrap().is_some() {
                    answers += 1;
                }
            }
            assert_eq!(answers, 400, "{modes:?}");
        }
    }

    #[test]
    fn a_port_held_by_another_socket_still_fails_to_bind() {
        let held = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let std::net::SocketAddr::V4(addr) = held.local_addr().unwrap() else { unreachable!() };
        let err = UdpLink::bind(addr).err().expect("the port is taken");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        // and so does an extra source port another socket holds, with SO_REUSEADDR or not
        let mut a = loopback(UdpModes::default());
        let b = loopback(UdpModes::default());
        assert!(a.send(&frame(addr, b.local_addr(), b"x")).is_err());
        let reusing = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        reusing.set_reuse_address(true).unwrap();
        reusing.bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into()).unwrap();
        let held = reusing.local_addr().unwrap().as_socket_ipv4().unwrap();
        assert!(a.send(&frame(held, b.local_addr(), b"x")).is_err());
        assert_eq!(UdpLink::bind(held).err().map(|e| e.kind()), Some(std::io::ErrorKind::AddrInUse));
    }

    #[test]
    fn sends_to_a_destination_nobody_listens_at_do_not_fail() {
        // the first datagram's ICMP error comes back to the socket and is reported on the
        // next send, which is made again
        for modes in all_modes("sends_to_a_destination_nobody_listens_at_do_not_fail") {
            let mut a = loopback(modes);
            let nobody = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
            for _ in 0..4 {
                a.send(&frame(a.local_addr(), nobody, b"into the void")).unwrap();
            }
            assert!(calls_until_recv(&mut a, 4 * EXTRA_SOCKET_POLL_EVERY).is_none(), "{modes:?}");
        }
    }

    #[test]
    fn the_port_filter_keeps_exactly_our_address_and_ports() {
        // the filter's jumps, checked by running it here on the program as built
        fn run(p: &[libc::sock_filter], pkt: &[u8]) -> u32 {
            let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
            let h = |o: usize| u32::from(u16::from_be_bytes([pkt[o], pkt[o + 1]]));
            loop {
                let i = p[pc];
                pc += 1;
                match i.code {
                    bpf::LD_H_ABS => a = h(i.k as usize),
                    bpf::LD_W_ABS => a = u32::from_be_bytes(pkt[i.k as usize..i.k as usize + 4].try_into().unwrap()),
                    bpf::LDX_B_MSH => x = 4 * u32::from(pkt[i.k as usize] & 0xf),
                    bpf::LD_H_IND => a = h((x + i.k) as usize),
                    bpf::JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                    bpf::JSET_K => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                    bpf::RET_K => return i.k,
                    c => panic!("opcode {c:#x}"),
                }
            }
        }
        let ip = Ipv4Addr::new(127, 0, 0, 5);
        let p = port_filter(ip, &[4791, 12288]);
        let pkt = |dst: Ipv4Addr, port: u16| {
            frame(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9), SocketAddrV4::new(dst, port), b"x")[ethernet::HEADER_LEN..]
                .to_vec()
        };
        assert_eq!(run(&p, &pkt(ip, 4791)), u32::MAX);
        assert_eq!(run(&p, &pkt(ip, 12288)), u32::MAX);
        assert_eq!(run(&p, &pkt(ip, 4792)), 0);
        assert_eq!(run(&p, &pkt(Ipv4Addr::new(127, 0, 0, 6), 4791)), 0);
        let mut frag = pkt(ip, 4791);
        frag[6] |= 0x20; // more fragments
        assert_eq!(run(&p, &frag), 0);
    }
}
