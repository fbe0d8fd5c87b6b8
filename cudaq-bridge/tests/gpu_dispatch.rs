//! A dispatcher of rocelink's own on the GPU, DEVICE_CALL style: `kernels/cudaq_dispatch.cu`
//! polls the RING_BUFFER context's device views of a provider whose ring is pinned host
//! memory mapped into the GPU, and answers fpga-sim's `echo` and `increment` requests through
//! the provider; every answer is checked at fpga-sim. Then, on the same ring and the same
//! peer, a host thread polling the host views (HOST_CALL style) serves the same runs, so the
//! two round trips sit side by side. With `ROCELINK_REPORT_DIR` set, the figures are written
//! there (`cudaq-bridge-gpu.md`).
//!
//! Needs a GPU (ignored otherwise): `bash scripts/gpu-tests.sh run` on the GPU machine.

use std::collections::HashMap;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocelink_cudaq_bridge::args;
use rocelink_cudaq_bridge::bridge::Bridge;
use rocelink_cudaq_bridge::ring::Ring;
use rocelink_operator::gpu::driver::{Gpu, StreamState};
use rocelink_operator::gpu::nvrtc;
use rocelink_wire::rpc;

const KERNEL: &str = include_str!("../../kernels/cudaq_dispatch.cu");

/// The runs each dispatcher serves: function, request size (header included), requests.
const RUNS: [(&str, usize, u64); 3] = [("echo", 64, 20_000), ("increment", 64, 20_000), ("echo", 1024, 5_000)];

fn report(line: &str) -> HashMap<String, String> {
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn num(m: &HashMap<String, String>, key: &str) -> u64 {
    m.get(key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {key} in {m:?}"))
}

/// Runs every run of [`RUNS`] through the peer and checks that every answer came back right.
fn serve(bridge: &Bridge, who: &str) -> Vec<(String, usize, u64, u64, u64, u64)> {
    let mut rows = Vec::new();
    for (function, size, count) in RUNS {
        let line = bridge.run_peer(&format!("function={function} count={count} size={size}")).expect("run_peer");
        let r = report(&line);
        assert_eq!(
            (num(&r, "sent"), num(&r, "ok"), num(&r, "lost")),
            (count, count, 0),
            "{who}, {function} {size} B: {line}"
        );
        assert_eq!(num(&r, "corrupted") + num(&r, "duplicated"), 0, "{who}: {line}");
        println!("{who}: {function} {size} B: {line}");
        rows.push((
            function.to_string(),
            size,
            count,
            num(&r, "rtt_p50_ns"),
            num(&r, "rtt_p99_ns"),
            num(&r, "rtt_max_ns"),
        ));
    }
    rows
}

/// The host loop: the dispatcher's contract on the host views, from slot `start` on.
fn host_loop(ring: Arc<Ring>, start: u32, stop: Arc<AtomicBool>, answered: Arc<AtomicU32>) {
    let rb = ring.ringbuffer();
    let slots = ring.geometry().slots;
    let stride = rb.rx_stride_sz;
    let mut i = start;
    while !stop.load(Relaxed) {
        if ring.rx_flag(i).load(Acquire) == 0 {
            std::hint::spin_loop();
            continue;
        }
        // SAFETY: slot i is the dispatcher's while its RX flag is set; both slots lie in the
        // ring's allocation (slots x stride bytes each), and the lengths are checked below.
        unsafe {
            let req = rb.rx_data_host.add(i as usize * stride);
            let resp = rb.tx_data_host.add(i as usize * stride);
            let mut h = [0u8; rpc::HEADER_LEN];
            std::ptr::copy_nonoverlapping(req, h.as_mut_ptr(), rpc::HEADER_LEN);
            let word = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().unwrap());
            let (magic, function, arg_len) = (word(0), word(4), word(8) as usize);
            let inc = function == rpc::function_id::INCREMENT;
            if magic == rpc::REQUEST_MAGIC
                && (inc || function == rpc::function_id::ECHO)
                && rpc::HEADER_LEN + arg_len <= stride
            {
                for b in 0..arg_len {
                    *resp.add(rpc::HEADER_LEN + b) = (*req.add(rpc::HEADER_LEN + b)).wrapping_add(u8::from(inc));
                }
                let mut out = h;
                out[0..4].copy_from_slice(&rpc::RESPONSE_MAGIC.to_le_bytes());
                out[4..8].copy_from_slice(&0i32.to_le_bytes());
                std::ptr::copy_nonoverlapping(out.as_ptr(), resp, rpc::HEADER_LEN);
                ring.tx_flag(i).store(ring.tx_slot_addrs(i).0, Release);
                answered.fetch_add(1, Relaxed);
            }
        }
        ring.rx_flag(i).store(0, Release);
        i = (i + 1) % slots;
    }
}

#[test]
fn the_dispatch_kernel_compiles_to_an_sm90_cubin() {
    if !nvrtc::present_or_skip("the dispatch kernel's compile test") {
        return;
    }
    let c = nvrtc::compile(
        &nvrtc::Source { name: "cudaq_dispatch.cu".into(), text: KERNEL.into() },
        &[],
        "sm_90",
        &[],
        false,
    )
    .unwrap_or_else(|e| panic!("cudaq_dispatch.cu does not compile:\n{e}"));
    assert_eq!(&c.cubin[..4], b"\x7fELF");
}

#[test]
#[ignore = "needs a GPU: the dispatch kernel polls the ring's device views"]
fn a_gpu_dispatch_kernel_serves_fpga_sim_through_the_provider() {
    let config = args::parse(&["--wire", "inproc", "--ring-memory", "gpu:0", "--slots", "64", "--slot-size", "1024"])
        .expect("arguments");
    let bridge = Bridge::create(config).expect("create");
    let ring = bridge.ring().clone();
    let rb = ring.ringbuffer();
    let slots = ring.geometry().slots;
    assert!(ring.memory().starts_with("gpu"), "the ring is in {}, not mapped GPU memory", ring.memory());

    let gpu = Gpu::open(0).expect("GPU 0");
    let c = nvrtc::compile(
        &nvrtc::Source { name: "cudaq_dispatch.cu".into(), text: KERNEL.into() },
        &[],
        &gpu.info.arch(),
        &[],
        true,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let module = gpu.load(&c.cubin, &["rl_cudaq_dispatch"]).expect("load");
    let ctl = gpu.host_alloc(4096).expect("control memory");
    let stream = gpu.stream().expect("stream");
    let (mut rxf, mut txf, mut rxd, mut txd) =
        (rb.rx_flags as u64, rb.tx_flags as u64, rb.rx_data as u64, rb.tx_data as u64);
    let (mut rxs, mut txs, mut n) = (rb.rx_stride_sz as u64, rb.tx_stride_sz as u64, slots);
    let mut tx_host = ring.tx_slot_addrs(0).0;
    let (mut fe, mut fi) = (rpc::function_id::ECHO, rpc::function_id::INCREMENT);
    let mut ctl_dev = ctl.device_addr(0);
    let mut params = [
        &mut rxf as *mut u64 as *mut std::ffi::c_void,
        &mut txf as *mut u64 as *mut _,
        &mut rxd as *mut u64 as *mut _,
        &mut txd as *mut u64 as *mut _,
        &mut rxs as *mut u64 as *mut _,
        &mut txs as *mut u64 as *mut _,
        &mut n as *mut u32 as *mut _,
        &mut tx_host as *mut u64 as *mut _,
        &mut fe as *mut u32 as *mut _,
        &mut fi as *mut u32 as *mut _,
        &mut ctl_dev as *mut u64 as *mut _,
    ];
    // SAFETY: the parameters match rl_cudaq_dispatch's; the ring and the control memory stay
    // mapped until the kernel has returned (checked below, before they are dropped).
    unsafe { stream.launch(module.function(0), 32, &mut params) }.expect("launch");

    bridge.connect().expect("connect");
    bridge.launch().expect("launch the provider");
    let gpu_rows = serve(&bridge, "GPU dispatch kernel");

    ctl.atomic_u64(0).store(1, Release);
    let t0 = Instant::now();
    loop {
        match stream.query() {
            StreamState::Idle => break,
            StreamState::Failed(e) => panic!("the dispatch kernel failed: {e}"),
            StreamState::Running => {
                assert!(t0.elapsed() < Duration::from_secs(5), "the dispatch kernel did not stop");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let (answered, dropped) = (ctl.atomic_u64(8).load(Acquire), ctl.atomic_u64(16).load(Acquire));
    let want: u64 = RUNS.iter().map(|r| r.2).sum();
    assert!(
        answered >= want && dropped == 0,
        "the kernel answered {answered} (want at least {want}), dropped {dropped}"
    );

    // The same runs through the host views, from the slot the kernel would have read next.
    let start = (answered % u64::from(slots)) as u32;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU32::new(0));
    let host = {
        let (ring, stop, count) = (ring.clone(), stop.clone(), count.clone());
        std::thread::spawn(move || host_loop(ring, start, stop, count))
    };
    let host_rows = serve(&bridge, "host loop");
    stop.store(true, Relaxed);
    host.join().expect("host loop");
    bridge.shutdown();
    module.unload();

    if let Some(dir) = std::env::var_os("ROCELINK_REPORT_DIR") {
        let mut md = String::from(
            "# CUDA-Q bridge provider: rocelink's GPU dispatcher against a host loop\n\n\
             `cudaq-bridge/tests/gpu_dispatch.rs`: one provider (`--wire inproc`, 64 slots of 1 KiB in pinned host memory \
             mapped into GPU 0), fpga-sim in the process checking every answer. The GPU dispatcher is \
             `kernels/cudaq_dispatch.cu` (one warp polling the RING_BUFFER device views); the host loop is one thread \
             polling the host views of the same ring. Round trips at fpga-sim (request sent to answer captured), closed \
             loop, in microseconds.\n\n\
             | dispatcher | function | size (B) | requests | all answers right | p50 | p99 | max |\n|---|---|---|---|---|---|---|---|\n",
        );
        for (who, rows) in [("GPU kernel (device views)", &gpu_rows), ("host thread (host views)", &host_rows)] {
            for (f, size, count, p50, p99, max) in rows {
                md += &format!(
                    "| {who} | {f} | {size} | {count} | yes | {:.2} | {:.2} | {:.2} |\n",
                    *p50 as f64 / 1e3,
                    *p99 as f64 / 1e3,
                    *max as f64 / 1e3
                );
            }
        }
        let path = std::path::Path::new(&dir).join("cudaq-bridge-gpu.md");
        std::fs::write(&path, md).expect("report");
        println!("wrote {}", path.display());
    }
}
