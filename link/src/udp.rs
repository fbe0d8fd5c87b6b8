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
//! IP_PMTUDISC_DO`: Linux then sends DF datagrams with identification 0, exactly the header
//! the ICRC was computed over by [`roce`](rocelink_wire::roce) emitters. The source port is the
//! frame's UDP source port; the destination is the frame's IPv4 destination and UDP
//! destination port.
//!
//! **Sending through connected sockets.** A `sendto` on an unconnected socket looks the route
//! up on every datagram; a connected socket keeps it. Measured on loopback, two threads
//! ping-ponging: ~0.25 us a datagram less (`scripts/probes/udp_connected.c`; the UDP floor,
//! `bench::floors::udp_pingpong`, sends through connected sockets too). A connected socket
//! shares its local address and port with the unconnected one that receives (`SO_REUSEADDR`),
//! and Linux gives it the datagrams *from* its destination; while it is bound but not yet
//! connected it may also win datagrams from anyone (equal scores), which would then sit in
//! another queue than the ones before and after them. So a connected socket is made only
//! where nothing is sent to its port yet:
//! - for the first destination of a source port other than the bound one (an FPGA sends from
//!   DP_PACKET_UDP_PORT and receives on 4791): the connected socket is bound and connected
//!   first, then the unconnected one that receives on that port from everyone else;
//! - for the bound port, only when asked, with [`UdpLink::connect_to`], before the
//!   destination is told to send (the NIC, once its peer's address is known).
//!
//! Every other frame goes with `sendto` on its port's unconnected socket. Connected sockets
//! are polled for datagrams too (a destination that sends from the address it is answered
//! at), with the extra sockets, until one receives, from then on on every call: nothing is
//! lost, a datagram is at worst taken [`EXTRA_SOCKET_POLL_EVERY`] idle calls late, once.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use rocelink_wire::ethernet::{self, EthernetRepr};
use rocelink_wire::ipv4::{self, Ipv4Repr};
use rocelink_wire::udp::{self, UdpRepr};

use crate::{Link, LinkError, MAX_FRAME};

/// Ethernet + IPv4 (no options) + UDP.
pub const HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// While the bound socket is empty, [`UdpLink::try_recv`] looks at the extra sockets (other
/// local ports, and the connected sending sockets that never received) on one call in this
/// many. Datagrams to them are rare (RoCEv2 answers go to port 4791, the bound one), and each
/// look is a syscall (~0.3 us) in front of the next look at the bound socket, where the data
/// path's datagrams land: polling them every call made a spinning peer with one extra socket
/// see its answers ~half a syscall later on average. A datagram to an extra socket still
/// arrives, at most this many idle calls late.
pub const EXTRA_SOCKET_POLL_EVERY: u32 = 8;

/// A connected socket that sends one (source port, destination) pair's datagrams.
struct TxSocket {
    src_port: u16,
    dst: SocketAddrV4,
    socket: UdpSocket,
    /// It received a datagram (its destination sends from the address it is answered at):
    /// polled on every call from then on.
    hot: bool,
}

/// One end of the UDP wire, bound to a local IPv4 address and port.
pub struct UdpLink {
    local: SocketAddrV4,
    socket: UdpSocket,
    /// Extra sockets bound to the other source ports frames are sent from (an FPGA sends from
    /// DP_PACKET_UDP_PORT and receives on 4791), unconnected: they receive from anyone. Made
    /// on first use, then reused.
    port_sockets: Vec<(u16, UdpSocket)>,
    /// The connected sending sockets, one per (source port, destination).
    tx_sockets: Vec<TxSocket>,
    /// The last pair sent and its route (see [`UdpLink::route`]): the common case is one pair.
    last_route: Option<(u16, SocketAddrV4, Option<usize>)>,
    /// try_recv calls that found the bound socket empty (EXTRA_SOCKET_POLL_EVERY).
    idle_polls: u32,
}

/// A non-blocking IPv4 UDP socket with large buffers and DF set, bound to `addr`. With
/// `reuse`, SO_REUSEADDR is set before the bind (a second socket on a port already ours);
/// without, after it, so that a port another socket holds (with SO_REUSEADDR or not) fails to
/// bind and this link's later sockets may share the port.
fn bind_socket(addr: SocketAddrV4, reuse: bool) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // Large buffers: open-loop bursts of 64 frames of 4 KiB must not overflow the kernel's.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    set_pmtudisc_do(&s)?;
    if reuse {
        s.set_reuse_address(true)?;
    }
    s.bind(&addr.into())?;
    if !reuse {
        // Bound without it (a port someone else holds fails above); set now so that this
        // link's connected sockets may share the port.
        s.set_reuse_address(true)?;
    }
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

/// One non-blocking receive: `Ok(None)` when nothing waits. A connected socket reports an
/// ICMP error from its destination (not listening yet) on a receive: nothing waits then either.
fn recv_one(s: &UdpSocket, body: &mut [u8]) -> std::io::Result<Option<(usize, std::net::SocketAddr)>> {
    match s.recv_from(body) {
        Ok(x) => Ok(Some(x)),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::ConnectionRefused) => Ok(None),
        Err(e) => Err(e),
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
        let socket = bind_socket(local, false)?;
        let local = match socket.local_addr()? {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => unreachable!("bound an IPv4 socket"),
        };
        Ok(UdpLink {
            local,
            socket,
            port_sockets: Vec::new(),
            tx_sockets: Vec::new(),
            last_route: None,
            idle_polls: 0,
        })
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// Frames from the bound port to `dst` go through a socket connected to it from now on
    /// (the module's doc). Call it before `dst` is told to send to this link: a datagram that
    /// comes while the socket is being made may land in it, and is then taken at most
    /// [`EXTRA_SOCKET_POLL_EVERY`] idle calls late, out of order with those around it.
    pub fn connect_to(&mut self, dst: SocketAddrV4) -> std::io::Result<()> {
        if self.connected(self.local.port(), dst).is_some() {
            return Ok(());
        }
        self.add_connected(self.local.port(), dst, true)?;
        self.last_route = None;
        Ok(())
    }

    /// The connected socket of (`src_port`, `dst`), if there is one: its index in `tx_sockets`.
    fn connected(&self, src_port: u16, dst: SocketAddrV4) -> Option<usize> {
        self.tx_sockets.iter().position(|t| t.src_port == src_port && t.dst == dst)
    }

    /// A socket bound to `src_port` and connected to `dst`; `shared`: the port is already ours
    /// (SO_REUSEADDR before the bind), else it is bound first like the bound socket.
    fn add_connected(&mut self, src_port: u16, dst: SocketAddrV4, shared: bool) -> std::io::Result<usize> {
        let socket = bind_socket(SocketAddrV4::new(*self.local.ip(), src_port), shared)?;
        socket.connect(dst)?;
        self.tx_sockets.push(TxSocket { src_port, dst, socket, hot: false });
        Ok(self.tx_sockets.len() - 1)
    }

    /// The unconnected socket bound to `port`: the bound one or an extra one (made by `route`).
    fn socket_for_port(&self, port: u16) -> &UdpSocket {
        if port == self.local.port() {
            return &self.socket;
        }
        let i = self.port_sockets.iter().position(|(p, _)| *p == port).expect("an extra port's socket is made with its first route");
        &self.port_sockets[i].1
    }

    /// How frames from `src_port` to `dst` are sent (the module's doc), the sockets made on
    /// first use: `Some(i)`, through the connected `tx_sockets[i]`; `None`, with `sendto` on
    /// the port's unconnected socket.
    fn route(&mut self, src_port: u16, dst: SocketAddrV4) -> std::io::Result<Option<usize>> {
        if let Some((p, d, r)) = self.last_route {
            if p == src_port && d == dst {
                return Ok(r);
            }
        }
        let r = if let Some(i) = self.connected(src_port, dst) {
            Some(i)
        } else if src_port == self.local.port() || self.port_sockets.iter().any(|(p, _)| *p == src_port) {
            None
        } else {
            // A new port: connected first (bound as the bound socket is: a port another
            // socket holds fails here), then the socket that receives on it.
            let i = self.add_connected(src_port, dst, false)?;
            let s = bind_socket(SocketAddrV4::new(*self.local.ip(), src_port), true)?;
            self.port_sockets.push((src_port, s));
            Some(i)
        };
        self.last_route = Some((src_port, dst, r));
        Ok(r)
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
        // Every socket we own is polled (a peer may answer to any of our ports, and from a
        // destination of ours): the bound one and the hot connected ones on every call, the
        // others on one idle call in EXTRA_SOCKET_POLL_EVERY. `to`: the port it was sent to.
        let mut to = self.local.port();
        let mut got = recv_one(&self.socket, body)?;
        if got.is_none() && !(self.port_sockets.is_empty() && self.tx_sockets.is_empty()) {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            let all = self.idle_polls.is_multiple_of(EXTRA_SOCKET_POLL_EVERY);
            for t in &mut self.tx_sockets {
                if t.hot || all {
                    if let Some(x) = recv_one(&t.socket, body)? {
                        t.hot = true;
                        got = Some(x);
                        to = t.src_port;
                        break;
                    }
                }
            }
            if got.is_none() && all {
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
        let r = self.route(src_port, dst)?;
        loop {
            let sent = match r {
                Some(i) => self.tx_sockets[i].socket.send(payload),
                None => self.socket_for_port(src_port).send_to(payload, dst),
            };
            match sent {
                Ok(_) => return Ok(()),
                // The kernel's buffer is full for a moment: wait for it rather than drop.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                // A connected socket reports an earlier datagram's ICMP error (nobody listened
                // at the destination then) on this send, which it did not make: make it again,
                // as an unconnected sendto would have been made.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && r.is_some() => {}
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

    /// A UDP port on 127.0.0.1 free a moment ago.
    fn free_port() -> u16 {
        UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn an_extra_port_sends_through_a_connected_socket_and_the_bound_port_once_asked() {
        let mut a = loopback();
        let mut b = loopback();
        let extra = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
        let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
        let through = |a: &mut UdpLink, b: &mut UdpLink, src: SocketAddrV4, payload: &[u8]| {
            a.send(&frame(src, b.local_addr(), payload)).unwrap();
            let mut buf = vec![0u8; 2048];
            let n = (0..1000).find_map(|_| b.try_recv(&mut buf).unwrap()).expect("received");
            // the rebuilt header: the datagram's source (the frame's port), b's address
            assert_eq!(&buf[..n], &frame(src, b.local_addr(), payload)[..]);
        };
        through(&mut a, &mut b, a_addr, b"from the bound port, sendto");
        assert!(a.tx_sockets.is_empty());
        through(&mut a, &mut b, extra, b"from an extra port");
        assert_eq!(a.tx_sockets.len(), 1);
        assert_eq!((a.tx_sockets[0].src_port, a.tx_sockets[0].dst), (extra.port(), b_addr));
        a.connect_to(b_addr).unwrap();
        a.connect_to(b_addr).unwrap();
        through(&mut a, &mut b, a_addr, b"from the bound port, connected");
        assert_eq!(a.tx_sockets.len(), 2);
        assert_eq!(a.last_route, Some((a_addr.port(), b_addr, Some(1))));
    }

    #[test]
    fn a_destination_that_sends_from_the_address_it_is_answered_at_gets_through_then_on_every_call() {
        let mut a = loopback();
        let mut b = loopback();
        a.connect_to(b.local_addr()).unwrap();
        a.send(&frame(a.local_addr(), b.local_addr(), b"request")).unwrap();
        assert!(calls_until_recv(&mut b, 1000).is_some());
        // b answers from its bound port, the address a sends to: Linux gives it to a's
        // connected socket, taken within the poll period, and polled on every call from then on
        b.send(&frame(b.local_addr(), a.local_addr(), b"answer")).unwrap();
        let (calls, p) = calls_until_recv(&mut a, 10 * EXTRA_SOCKET_POLL_EVERY).expect("the answer is received");
        assert_eq!(p, b"answer");
        assert!(calls <= EXTRA_SOCKET_POLL_EVERY, "{calls} calls");
        assert!(a.tx_sockets[0].hot);
        for _ in 0..3 {
            a.send(&frame(a.local_addr(), b.local_addr(), b"request")).unwrap();
            assert_eq!(calls_until_recv(&mut b, 1), Some((1, b"request".to_vec())));
            b.send(&frame(b.local_addr(), a.local_addr(), b"answer")).unwrap();
            assert_eq!(calls_until_recv(&mut a, 1), Some((1, b"answer".to_vec())));
        }
    }

    #[test]
    fn a_burst_from_an_extra_port_to_a_link_that_answers_arrives_in_order() {
        // the peer's and the NIC's shape (fpga-sim: 12288 -> 4791, answers 4791 -> 4791), open
        // loop: the NIC's first answer must not make a socket that takes requests
        let mut peer = loopback();
        let mut nic = loopback();
        let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
        nic.connect_to(peer.local_addr()).unwrap();
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
        assert_eq!(got, (0..400).collect::<Vec<_>>());
    }

    #[test]
    fn a_datagram_to_an_extra_port_is_rebuilt_with_that_port_as_its_destination() {
        let mut a = loopback();
        let mut b = loopback();
        let extra = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
        a.send(&frame(extra, b.local_addr(), b"makes the extra socket")).unwrap();
        assert!(calls_until_recv(&mut b, 1000).is_some());
        let mut c = loopback();
        c.send(&frame(c.local_addr(), extra, b"to the extra port")).unwrap();
        let mut buf = vec![0u8; 2048];
        let n = (0..1000).find_map(|_| a.try_recv(&mut buf).unwrap()).expect("received");
        assert_eq!(&buf[..n], &frame(c.local_addr(), extra, b"to the extra port")[..]);
    }

    #[test]
    fn a_port_held_by_another_socket_still_fails_to_bind() {
        let held = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let std::net::SocketAddr::V4(addr) = held.local_addr().unwrap() else { unreachable!() };
        let err = UdpLink::bind(addr).err().expect("the port is taken");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        // and so does an extra source port another socket holds, with SO_REUSEADDR or not
        let mut a = loopback();
        let b = loopback();
        assert!(a.send(&frame(addr, b.local_addr(), b"x")).is_err());
        let reusing = bind_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), true).unwrap();
        let std::net::SocketAddr::V4(held) = reusing.local_addr().unwrap() else { unreachable!() };
        assert!(a.send(&frame(held, b.local_addr(), b"x")).is_err());
        assert_eq!(UdpLink::bind(held).err().map(|e| e.kind()), Some(std::io::ErrorKind::AddrInUse));
    }

    #[test]
    fn sends_to_a_destination_nobody_listens_at_do_not_fail() {
        // the first datagram's ICMP error comes back to the connected socket and is reported
        // on the next send, which is made again
        let mut a = loopback();
        let nobody = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
        a.connect_to(nobody).unwrap();
        for _ in 0..4 {
            a.send(&frame(a.local_addr(), nobody, b"into the void")).unwrap();
        }
        assert_eq!(a.tx_sockets.len(), 1);
        assert!(calls_until_recv(&mut a, 4 * EXTRA_SOCKET_POLL_EVERY).is_none());
    }
}
