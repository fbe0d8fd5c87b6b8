//! The UDP wire: real RoCEv2 datagrams (UDP payload = BTH .. ICRC) through the kernel.
//!
//! **Which IPv4 header the ICRC is checked against** (PROTOCOLS.md 1.1). A UDP socket
//! delivers only the UDP payload, so [`UdpLink::try_recv`] rebuilds the header an HSB FPGA
//! puts on the wire (identification 0, DF, TTL 64, TOS 0, UDP checksum 0; source = the
//! datagram's source, destination = the bound address) in front of the datagram. The NIC then
//! verifies the ICRC against that header: a sender that put another identification into its
//! ICRC fails here, as it would at a real NIC. TOS and TTL are masked by the ICRC, so their
//! rebuilt values do not matter.
//!
//! **What goes on the wire when sending.** The sockets set `IP_MTU_DISCOVER =
//! IP_PMTUDISC_DO`: Linux then sends DF datagrams with identification 0 from an unconnected
//! socket, exactly the header the ICRC was computed over by [`roce`](rocelink_wire::roce)
//! emitters. The source port is the frame's UDP source port (a socket is bound to it on first
//! use); the destination is the frame's IPv4 destination and UDP destination port.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use rocelink_wire::ethernet::{self, EthernetRepr};
use rocelink_wire::ipv4::{self, Ipv4Repr};
use rocelink_wire::udp::{self, UdpRepr};

use crate::{Link, LinkError, MAX_FRAME};

/// Ethernet + IPv4 (no options) + UDP.
pub const HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// While the bound socket is empty, [`UdpLink::try_recv`] looks at the extra sockets on one
/// call in this many. Datagrams to them are rare (RoCEv2 answers go to port 4791, the bound
/// one), and each look is a syscall (~0.3 us) in front of the next look at the bound socket,
/// where the data path's datagrams land: polling them every call made a spinning peer with one
/// extra socket see its answers ~half a syscall later on average. A datagram to an extra
/// socket still arrives, at most this many idle calls late.
pub const EXTRA_SOCKET_POLL_EVERY: u32 = 8;

/// One end of the UDP wire, bound to a local IPv4 address and port.
pub struct UdpLink {
    local: SocketAddrV4,
    socket: UdpSocket,
    /// Extra sockets for frames whose UDP source port is not `local`'s (an FPGA sends from
    /// DP_PACKET_UDP_PORT and receives on 4791). Made on first use, then reused.
    tx_sockets: Vec<(u16, UdpSocket)>,
    /// try_recv calls that found the bound socket empty (EXTRA_SOCKET_POLL_EVERY).
    idle_polls: u32,
}

fn bind_socket(addr: SocketAddrV4) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // Large buffers: open-loop bursts of 64 frames of 4 KiB must not overflow the kernel's.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    set_pmtudisc_do(&s)?;
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// `IP_MTU_DISCOVER = IP_PMTUDISC_DO`: DF set and identification 0 on the wire.
fn set_pmtudisc_do(s: &impl AsRawFd) -> std::io::Result<()> {
    let v: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
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

impl UdpLink {
    /// Binds `local` (a concrete address: the rebuilt header needs the destination IP; port 0
    /// picks a free port).
    pub fn bind(local: SocketAddrV4) -> std::io::Result<Self> {
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
        Ok(UdpLink { local, socket, tx_sockets: Vec::new(), idle_polls: 0 })
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    fn socket_for_port(&mut self, port: u16) -> std::io::Result<&UdpSocket> {
        if port == self.local.port() {
            return Ok(&self.socket);
        }
        if let Some(i) = self.tx_sockets.iter().position(|(p, _)| *p == port) {
            return Ok(&self.tx_sockets[i].1);
        }
        let s = bind_socket(SocketAddrV4::new(*self.local.ip(), port))?;
        self.tx_sockets.push((port, s));
        Ok(&self.tx_sockets.last().expect("just pushed").1)
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
        let (hdr, body) = buf.split_at_mut(HEADERS_LEN);
        // Every socket we own is polled (a peer may answer to any of our ports); the bound one
        // on every call, the extra ones on one idle call in EXTRA_SOCKET_POLL_EVERY.
        let mut got = match self.socket.recv_from(body) {
            Ok(x) => Some(x),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => return Err(e.into()),
        };
        if got.is_none() && !self.tx_sockets.is_empty() {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if self.idle_polls.is_multiple_of(EXTRA_SOCKET_POLL_EVERY) {
                for (_, s) in &self.tx_sockets {
                    match s.recv_from(body) {
                        Ok(x) => {
                            got = Some(x);
                            break;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        let Some((n, from)) = got else { return Ok(None) };
        let std::net::SocketAddr::V4(from) = from else { return Ok(None) };
        write_headers(hdr, from, self.local, n);
        Ok(Some(HEADERS_LEN + n))
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
        let payload_at = ethernet::HEADER_LEN + hl + udp::HEADER_LEN;
        let payload = &frame[payload_at..];
        let src_port = u.src_port();
        let sock = self.socket_for_port(src_port)?;
        loop {
            match sock.send_to(payload, dst) {
                Ok(_) => return Ok(()),
                // The kernel's buffer is full for a moment: wait for it rather than drop.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn describe(&self) -> String {
        format!("udp {}", self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> UdpLink {
        UdpLink::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap()
    }

    fn frame(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; HEADERS_LEN + payload.len()];
        write_headers(&mut f, src, dst, payload.len());
        f[HEADERS_LEN..].copy_from_slice(payload);
        f
    }

    /// Calls try_recv until a datagram comes (at most `limit` calls); the calls it took.
    fn calls_until_recv(link: &mut UdpLink, limit: u32) -> Option<(u32, Vec<u8>)> {
        let mut buf = vec![0u8; 2048];
        for k in 1..=limit {
            if let Some(n) = link.try_recv(&mut buf).unwrap() {
                return Some((k, buf[HEADERS_LEN..n].to_vec()));
            }
        }
        None
    }

    #[test]
    fn datagrams_to_the_bound_socket_come_on_the_first_call_and_to_an_extra_one_within_the_poll_period() {
        let mut a = loopback();
        let mut b = loopback();
        // a sends from a port of its own that is not its bound one: an extra socket
        let free = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
        let extra = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free);
        a.send(&frame(extra, b.local_addr(), b"to b")).unwrap();
        assert_eq!(calls_until_recv(&mut b, 1000).map(|(_, p)| p), Some(b"to b".to_vec()));
        for round in 0..3 {
            // to a's extra socket: taken on one of the next EXTRA_SOCKET_POLL_EVERY idle calls
            b.send(&frame(b.local_addr(), extra, b"to the extra socket")).unwrap();
            let (calls, p) = calls_until_recv(&mut a, 10 * EXTRA_SOCKET_POLL_EVERY).expect("the extra socket's datagram is received");
            assert_eq!(p, b"to the extra socket");
            assert!(calls <= EXTRA_SOCKET_POLL_EVERY, "round {round}: {calls} calls");
            // to a's bound socket: the very next call
            b.send(&frame(b.local_addr(), a.local_addr(), b"to the bound socket")).unwrap();
            assert_eq!(calls_until_recv(&mut a, 1), Some((1, b"to the bound socket".to_vec())));
        }
    }
}
