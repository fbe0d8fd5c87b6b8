//! One provider instance and its lifecycle: `create` -> `connect` -> `launch` ->
//! `disconnect`, then drop (`destroy`).
//!
//! - [`Bridge::create`]: the ring ([`Ring`]), the queue pair's memory (staging slots the peer
//!   writes, TX slots the NIC sends from) and its memory regions, the software NIC, the wire
//!   bound and the peer started if it runs here (fpga-sim in this process) or named (a peer
//!   already running). The endpoint (our address, QP, R_Key, buffer address) is known from
//!   here on, before any peer is reached.
//! - [`Bridge::connect`]: the peer, over ECB, as an HSB host configures its FPGA: its IP
//!   version checked, its data plane written (our QP, R_Key, staging buffer, slot stride and
//!   count, our MAC, IP and port) and its virtual port enabled (PROTOCOLS.md 2.2). A peer that
//!   does not answer fails it within about a second.
//! - [`Bridge::launch`]: the NIC engine thread, with the ring adapter (`crate::adapter`) on it.
//!   A consumer of the CPU data plane (`get_cpu_dataplane`, or the UNIFIED context) need not
//!   call it, as NVIDIA's unified consumers do not: [`Bridge::want_cpu_plane`] launches once
//!   the bridge is connected (at once if it is, else at the end of `connect`).
//! - [`Bridge::disconnect`]: the engine stopped and joined, the peer's player stopped and its
//!   data plane unconfigured. Once: a disconnected bridge is not connected again.
//! - drop: disconnect, then the peer stopped if it runs here; every thread joined.
//!
//! Each step is idempotent; a step out of order is refused with the reason. Steps may come
//! from different threads (a `Mutex` orders them); the data path never takes it.
//!
//! [`Bridge::run_peer`] (a rocelink extension, exported as `rocelink_cudaq_bridge_run_peer`)
//! runs the peer's traffic player through one run, as `rocelink echo` does, and reports what
//! the peer captured: every answer checked by the peer against its request.

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rocelink_link::Link;
use rocelink_operator::graph::compile::RunPlan;
use rocelink_operator::graph::drive::{drive, Target};
use rocelink_operator::graph::model::Stop;
use rocelink_operator::hsb::{DataPlaneConfig, EcbClient, HsbHost};
use rocelink_operator::latency::Summary;
use rocelink_operator::mem::SharedMem;
use rocelink_operator::nic::{
    DoorbellMode, MrTable, NicCounters, NicEngine, NicEngineConfig, NicOptions, QpRegions, SoftNic,
};
use rocelink_operator::peer::{self, RunningPeer, HOST_MAC};
use rocelink_operator::rings::{QpMemory, QpSizes};
use rocelink_operator::settings::PeerMode;
use rocelink_operator::tap::Fault;
use rocelink_wire::hsb::ext::DEFAULT_HOST_QP;
use rocelink_wire::roce;
use rocelink_wire::rpc;

use crate::abi::{cudaq_status_t, CUDAQ_ERR_INTERNAL, CUDAQ_ERR_INVALID_ARG};
use crate::adapter::Adapter;
use crate::args::Config;
use crate::ring::Ring;

/// Why a step failed: the status the entry returns and the reason it logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: cudaq_status_t,
    pub message: String,
}

impl Error {
    /// The caller's mistake: a bad argument, a step out of order.
    pub fn arg(message: impl Into<String>) -> Error {
        Error { status: CUDAQ_ERR_INVALID_ARG, message: message.into() }
    }

    /// Something that failed here or at the peer.
    pub fn internal(message: impl Into<String>) -> Error {
        Error { status: CUDAQ_ERR_INTERNAL, message: message.into() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Bytes between staging slots: any single-packet request fits one (PROTOCOLS.md 2.2: a
/// multiple of 128), so a request longer than a ring slot reaches the adapter, which drops it.
pub const STAGING_STRIDE: u32 = roce::PMTU as u32;
/// UDP source port of the peer's frames (HSB hosts write 12288 into DP_PACKET_UDP_PORT).
const PEER_SRC_PORT: u16 = 12288;
/// Each ECB exchange waits this long for its reply, this many times.
const ECB_TIMEOUT: Duration = Duration::from_millis(200);
const ECB_TRIES: u32 = 5;

/// Where the bridge is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Created,
    Connected,
    Launched,
    Disconnected,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Created => "created",
            Phase::Connected => "connected",
            Phase::Launched => "launched",
            Phase::Disconnected => "disconnected",
        }
    }
}

/// What the peer needs to reach us, fixed at `create`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `udp <host> <-> <peer>` or `inproc`.
    pub wire: String,
    pub host_ip: std::net::Ipv4Addr,
    pub host_port: u16,
    /// `sim` (fpga-sim in this process) or `remote`.
    pub peer: &'static str,
    pub ecb: SocketAddrV4,
    pub peer_roce: SocketAddrV4,
    pub qpn: u32,
    pub rkey: u32,
    /// Address of staging slot 0 (what the peer's RETH points at).
    pub buffer_addr: u64,
    pub slots: u32,
}

struct State {
    phase: Phase,
    peer: Option<RunningPeer>,
    /// Until launch.
    nic: Option<SoftNic>,
    link: Option<Box<dyn Link>>,
    engine: Option<NicEngine>,
    /// From connect on.
    host: Option<HsbHost>,
}

/// One provider instance.
pub struct Bridge {
    config: Config,
    ring: Arc<Ring>,
    q: QpMemory,
    tx_lkey: u32,
    endpoint: Endpoint,
    nic_counters: Arc<NicCounters>,
    state: Mutex<State>,
    /// The dispatcher's function table as it was handed over (`set_function_table`): its
    /// entries' address and count. The entries are not read: they may live in device memory.
    table: Mutex<Option<(usize, u32)>>,
    /// A consumer asked for the CPU data plane: `connect` launches too.
    cpu_plane: AtomicBool,
}

impl Bridge {
    /// Allocates and starts everything `create` needs (module docs).
    pub fn create(config: Config) -> Result<Bridge, Error> {
        let ring = Arc::new(Ring::new(config.geometry, config.ring_memory).map_err(Error::internal)?);
        let sizes = QpSizes {
            rx_slots: config.geometry.slots,
            rx_slot_stride: STAGING_STRIDE,
            tx_slot_stride: STAGING_STRIDE,
            timestamp_entries: 0,
            ..QpSizes::default()
        };
        let q = QpMemory::new(sizes, SharedMem::new).map_err(Error::internal)?;
        let QpRegions { table: mrs, rx: rx_mr, tx: tx_mr } = MrTable::for_queue_pair(&q);
        // Last: from here on a peer may run, and the state below stops it on every way out.
        let pw = peer::start(config.wire, config.bind(), &config.peer, None, config.peer_core, config.spin_mode())
            .map_err(|e| Error::internal(format!("create: {e}")))?;
        let nic_counters = Arc::new(NicCounters::default());
        // The adapter rings the CPU-proxy doorbell (HostVerbs' default): the NIC answers to it.
        let opts = NicOptions { doorbell: DoorbellMode::Proxy, ..NicOptions::default() };
        let nic = SoftNic::new(pw.host_qp(), opts, mrs, q.clone(), nic_counters.clone());
        let endpoint = Endpoint {
            wire: pw.wire.clone(),
            host_ip: pw.host_ip,
            host_port: pw.host_port,
            peer: if matches!(config.peer, PeerMode::InProcess { .. }) { "sim" } else { "remote" },
            ecb: pw.ecb,
            peer_roce: pw.peer_roce,
            qpn: DEFAULT_HOST_QP,
            rkey: rx_mr.rkey,
            buffer_addr: rx_mr.addr,
            slots: config.geometry.slots,
        };
        let state = State {
            phase: Phase::Created,
            peer: Some(pw.peer),
            nic: Some(nic),
            link: Some(pw.nic_link),
            engine: None,
            host: None,
        };
        Ok(Bridge {
            config,
            ring,
            q,
            tx_lkey: tx_mr.lkey,
            endpoint,
            nic_counters,
            state: Mutex::new(state),
            table: Mutex::new(None),
            cpu_plane: AtomicBool::new(false),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A step that panicked (caught at the FFI boundary) leaves a state whose fields are
        // each consistent: go on with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn ring(&self) -> &Arc<Ring> {
        &self.ring
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn phase(&self) -> Phase {
        self.state().phase
    }

    /// The data plane as the peer is told it (PROTOCOLS.md 2.2): frames of up to a staging
    /// slot.
    fn data_plane(&self) -> DataPlaneConfig {
        DataPlaneConfig {
            vp: 0,
            data_plane: 0,
            qpn: self.endpoint.qpn,
            rkey: self.endpoint.rkey,
            buffer_addr: self.endpoint.buffer_addr,
            page_stride: STAGING_STRIDE,
            pages: self.endpoint.slots,
            frame_len: STAGING_STRIDE,
            host_mac: HOST_MAC,
            host_ip: self.endpoint.host_ip,
            host_port: self.endpoint.host_port,
            peer_src_port: PEER_SRC_PORT,
            packet_size: STAGING_STRIDE,
        }
    }

    /// Configures the peer (module docs).
    pub fn connect(&self) -> Result<(), Error> {
        let mut s = self.state();
        match s.phase {
            Phase::Created => {}
            Phase::Connected | Phase::Launched => return Ok(()),
            Phase::Disconnected => {
                return Err(Error::arg("connect: the bridge is disconnected; a bridge connects once (create another)"))
            }
        }
        let ecb = self.endpoint.ecb;
        let mut client = EcbClient::connect(ecb).map_err(|e| Error::internal(format!("connect: ECB socket: {e}")))?;
        client.set_timeout(ECB_TIMEOUT, ECB_TRIES).map_err(|e| Error::internal(format!("connect: ECB socket: {e}")))?;
        let mut host = HsbHost::new(client);
        host.check_version().map_err(|e| Error::internal(format!("connect: the peer at {ecb}: {e}")))?;
        host.configure(&self.data_plane())
            .map_err(|e| Error::internal(format!("connect: configuring the peer's data plane: {e}")))?;
        s.host = Some(host);
        s.phase = Phase::Connected;
        tracing::info!(peer = %ecb, wire = %self.endpoint.wire, "connected");
        drop(s);
        if self.cpu_plane.load(Acquire) {
            self.launch()?;
        }
        Ok(())
    }

    /// A consumer of the CPU data plane (module docs): launches now if connected, else once
    /// `connect` has run.
    pub fn want_cpu_plane(&self) -> Result<(), Error> {
        self.cpu_plane.store(true, Release);
        let connected = self.state().phase == Phase::Connected;
        if connected {
            self.launch()?;
        }
        Ok(())
    }

    /// Starts the NIC engine with the ring adapter on its thread.
    pub fn launch(&self) -> Result<(), Error> {
        let mut s = self.state();
        match s.phase {
            Phase::Connected => {}
            Phase::Launched => return Ok(()),
            Phase::Created => return Err(Error::arg("launch: connect first")),
            Phase::Disconnected => return Err(Error::arg("launch: the bridge is disconnected")),
        }
        let (Some(nic), Some(link)) = (s.nic.take(), s.link.take()) else {
            return Err(Error::internal("launch: the NIC is gone (an earlier launch failed)"));
        };
        let mut adapter = Adapter::new(self.q.clone(), self.endpoint.qpn, self.tx_lkey, self.ring.clone());
        let cfg = NicEngineConfig { core: self.config.nic_core, spin: self.config.spin_mode() };
        let engine = NicEngine::spawn_with_data_path(nic, link, cfg, Box::new(move || adapter.turn()))
            .map_err(|e| Error::internal(format!("launch: cannot start the NIC engine thread: {e}")))?;
        s.engine = Some(engine);
        self.ring.set_running(true);
        s.phase = Phase::Launched;
        Ok(())
    }

    /// Stops the data path and unconfigures the peer (module docs). The local side is stopped
    /// whatever the peer answers; an error says the peer could not be unconfigured.
    pub fn disconnect(&self) -> Result<(), Error> {
        let mut s = self.state();
        if s.phase == Phase::Disconnected {
            return Ok(());
        }
        s.phase = Phase::Disconnected;
        self.ring.set_running(false);
        if let Some(e) = s.engine.take() {
            e.stop();
        }
        let Some(mut host) = s.host.take() else { return Ok(()) };
        let undone = host.ecb().set_timeout(ECB_TIMEOUT, 2).map_err(|e| e.to_string()).and_then(|()| {
            match host.stop_player() {
                // a peer without a player (an FPGA whose application sends) has nothing to stop
                Err(e) if !e.is_invalid_address() => return Err(e.to_string()),
                _ => {}
            }
            host.unconfigure(0, 0).map_err(|e| e.to_string())
        });
        undone.map_err(|e| {
            Error::internal(format!(
                "disconnect: the data path stopped, but the peer at {} could not be unconfigured: {e}",
                self.endpoint.ecb
            ))
        })
    }

    /// Keeps the dispatcher's function table (its address and count).
    pub fn set_function_table(&self, entries: usize, count: u32) {
        *self.table.lock().unwrap_or_else(|p| p.into_inner()) = Some((entries, count));
    }

    /// The function table handed over, if any: (entries' address, count).
    pub fn function_table(&self) -> Option<(usize, u32)> {
        *self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `get_endpoint_info`'s line: the endpoint, the geometry, the state, then the counters.
    pub fn endpoint_info(&self) -> String {
        let e = &self.endpoint;
        let g = self.ring.geometry();
        format!(
            "transport=rocelink wire={} host={}:{} peer={} peer_ecb={} peer_roce={} qp={:#x} rkey={:#x} buffer_addr={:#x} slots={} slot_size={} ring_memory={} state={} {}",
            if e.wire == "inproc" { "inproc" } else { "udp" },
            e.host_ip,
            e.host_port,
            e.peer,
            e.ecb,
            e.peer_roce,
            e.qpn,
            e.rkey,
            e.buffer_addr,
            g.slots,
            g.slot_size,
            self.ring.memory(),
            self.phase().as_str(),
            self.counters()
        )
    }

    /// The ring's counters and the NIC's, `key=value`.
    pub fn counters(&self) -> String {
        let n = self.nic_counters.snapshot();
        let drops: u64 = n.drops.values().sum();
        let mut s = format!(
            "{} nic_rx_packets={} nic_rx_cqes={} nic_tx_packets={} nic_tx_errors={} nic_link_errors={} nic_drops={drops}",
            self.ring.counters.text(),
            n.rx_packets,
            n.rx_cqes,
            n.tx_packets,
            n.tx_errors,
            n.link_errors
        );
        for (reason, count) in n.drops.iter().filter(|(_, c)| **c > 0) {
            s += &format!(" nic_drop_{reason}={count}");
        }
        s
    }

    /// Runs the peer's traffic player through one run of `spec` (`function=NAME count=N
    /// size=BYTES [rate=PER_SECOND] [timeout_s=S]`: requests calling NAME, of BYTES each, RPC
    /// header included; open loop at the rate, closed loop without one) and reports what the
    /// peer captured, `key=value`: `sent answered ok lost duplicated corrupted reordered
    /// uncaptured stopped_by elapsed_ms rtt_p50_ns rtt_p99_ns rtt_max_ns`. `ok` counts the
    /// answers the peer found right (`echo`: the args; `increment`: the args plus one).
    /// Only while launched. The peer is left configured as `connect` left it.
    pub fn run_peer(&self, spec: &str) -> Result<String, Error> {
        let run = run_spec(spec).map_err(Error::arg)?;
        let (ecb, target) = {
            let s = self.state();
            if s.phase != Phase::Launched {
                return Err(Error::arg(format!("run_peer: the bridge is {}, not launched", s.phase.as_str())));
            }
            let e = &self.endpoint;
            let target = Target {
                qpn: e.qpn,
                rkey: e.rkey,
                buffer_addr: e.buffer_addr,
                slot_stride: STAGING_STRIDE,
                slots: e.slots,
                host_ip: e.host_ip,
                host_port: e.host_port,
            };
            (e.ecb, target)
        };
        let fault = Fault::default();
        let driven = drive(ecb, &target, &run, None, false, &fault, &|| None, None)
            .map_err(|e| Error::internal(format!("run_peer: {e}")))?;
        {
            // the drive unconfigures the peer at its end; a bridge still launched gets its
            // data plane back
            let mut s = self.state();
            if s.phase == Phase::Launched {
                let dp = self.data_plane();
                if let Some(h) = s.host.as_mut() {
                    h.configure(&dp).map_err(|e| Error::internal(format!("run_peer: reconfiguring the peer: {e}")))?;
                }
            }
        }
        let a = driven.analyzer.clone().finish(driven.sent, driven.uncaptured);
        let c = &a.counts;
        let rtt = Summary::of(&a.rtt);
        let mut report = format!(
            "sent={} answered={} ok={} lost={} duplicated={} corrupted={} reordered={} uncaptured={} stopped_by={} elapsed_ms={} rtt_p50_ns={} rtt_p99_ns={} rtt_max_ns={}",
            c.sent,
            c.received,
            rtt.count,
            c.lost,
            c.duplicated,
            c.corrupted,
            c.reordered,
            c.uncaptured,
            driven.stopped_by.as_str(),
            driven.elapsed.as_millis(),
            rtt.p50,
            rtt.p99,
            rtt.max
        );
        if let Some(why) = fault.reason() {
            report += " fault=1";
            crate::log_error(&format!("run_peer: {why}"));
        }
        Ok(report)
    }

    /// Disconnects and stops the peer if it runs here; every thread joined.
    pub fn shutdown(&self) {
        if let Err(e) = self.disconnect() {
            tracing::warn!("{e}");
        }
        let peer = self.state().peer.take();
        if let Some(p) = peer {
            p.stop();
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A `run_peer` spec (see [`Bridge::run_peer`]).
fn run_spec(spec: &str) -> Result<RunPlan, String> {
    let mut function_id = rpc::function_id::ECHO;
    let (mut count, mut size, mut rate, mut timeout) = (None, 64usize, None, 60.0f64);
    for kv in spec.split_whitespace() {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("run_peer: `{kv}` is no key=value"))?;
        let bad = || format!("run_peer: {k}={v}: not a valid value");
        match k {
            "function" => function_id = rpc::fnv1a32(v.as_bytes()),
            "count" => count = Some(v.parse::<u32>().map_err(|_| bad())?),
            "size" => size = v.parse().map_err(|_| bad())?,
            "rate" => rate = Some(v.parse::<f64>().map_err(|_| bad())?),
            "timeout_s" => timeout = v.parse().map_err(|_| bad())?,
            _ => return Err(format!("run_peer: unknown key `{k}` (function, count, size, rate, timeout_s)")),
        }
    }
    let count = count.filter(|&n| n > 0).ok_or("run_peer: count=N (at least 1) is required")?;
    if size < rpc::HEADER_LEN || size > STAGING_STRIDE as usize {
        return Err(format!("run_peer: size={size} must be {}..={STAGING_STRIDE}", rpc::HEADER_LEN));
    }
    if rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) || !(timeout > 0.0 && timeout.is_finite()) {
        return Err("run_peer: rate and timeout_s must be positive".into());
    }
    Ok(RunPlan {
        stop: Stop::Count(count),
        warmup: 0,
        rate,
        round_cycle_us: None,
        size,
        timeout: Some(Duration::from_secs_f64(timeout)),
        function_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_specs() {
        let r = run_spec("function=increment count=10 size=128 rate=1000 timeout_s=5").unwrap();
        assert_eq!(
            (r.function_id, r.size, r.rate, r.timeout),
            (rpc::function_id::INCREMENT, 128, Some(1000.0), Some(Duration::from_secs(5)))
        );
        assert!(matches!(r.stop, Stop::Count(10)));
        assert_eq!(run_spec("count=1").unwrap().function_id, rpc::function_id::ECHO);
        for bad in
            ["", "count=0", "count=1 size=10", "count=1 size=5000", "count=1 rate=-1", "count=1 colour=red", "count"]
        {
            assert!(run_spec(bad).is_err(), "{bad}");
        }
    }
}
