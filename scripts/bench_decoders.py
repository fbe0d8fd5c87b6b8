#!/usr/bin/env python3
"""Decoder benchmark: rocelink's decoders against PyMatching on the same stim shots.

For every code distance d and noise strength p: a stim rotated memory-Z circuit (the recipe
of docs/qec.md, rounds = d, the same p on all four noise channels), fresh shots, then
- PyMatching 2.4 `decode_batch`: predictions, time per shot (best of two passes);
- `rocelink decode --backend B` for each backend (cpu: the exact decoder; gpu: the device
  stage in a batch kernel): predictions, and the decoder's own time per shot (p50, p99,
  mean; the decoder alone, no file I/O);
- logical errors of each against stim's true observables, with 95% Wilson intervals, and
  the shots where each differs from PyMatching: ties (the same matching weight as
  PyMatching's, `rocelink decode --weights-out` against `decode(..., return_weight=True)`)
  and worse matchings (a higher weight) apart.

Writes <out-dir>/<name>.md and <name>.json. Needs stim and pymatching (PyPI) and numpy.

    python3 scripts/bench_decoders.py --rocelink target/release/rocelink \
        --distances 3,5,7,9,11,13 --ps 0.001,0.003,0.005 --backends cpu,gpu
"""

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time


def wilson(k, n, z=1.96):
    if n == 0:
        return (0.0, 0.0)
    ph = k / n
    den = 1 + z * z / n
    centre = (ph + z * z / (2 * n)) / den
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))


def fmt_rate(k, n):
    lo, hi = wilson(k, n)
    return f"{k} ({k / n:.2e}; {lo:.1e}-{hi:.1e})" if n else "-"


def run_rocelink(exe, backend, dem, dets, out, shots):
    cmd = [exe, "decode", "--dem", dem, "--in", dets, "--in-format", "b8", "--out", out,
           "--out-format", "b8", "--num-shots", str(shots), "--backend", backend,
           "--weights-out", out + ".weights"]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    line = [l for l in p.stderr.splitlines() if l.startswith("decoded ")]
    m = re.search(r"mean (\d+) ns, p50 (\d+) ns, p99 (\d+) ns, max (\d+) ns", line[-1] if line else "")
    over = re.search(r" (\d+) over the GPU decoder", line[-1] if line else "")
    # the GPU batch's kernel time over all its blocks and launches: the throughput a user gets
    kernel = re.search(r" launches, ([0-9.]+) ms\)", line[-1] if line else "")
    stats = {
        "mean_ns": int(m.group(1)) if m else None,
        "p50_ns": int(m.group(2)) if m else None,
        "p99_ns": int(m.group(3)) if m else None,
        "max_ns": int(m.group(4)) if m else None,
        "overflows": int(over.group(1)) if over else 0,
        "wall_s": wall,
        "kernel_ms": float(kernel.group(1)) if kernel else None,
        "summary": line[-1] if line else "",
    }
    return stats, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rocelink", default="target/release/rocelink")
    ap.add_argument("--distances", default="3,5,7,9,11,13")
    ap.add_argument("--ps", default="0.001,0.003,0.005")
    ap.add_argument("--shots", type=int, default=20000, help="shots per point up to d = 7")
    ap.add_argument("--large-shots", type=int, default=10000, help="shots per point from d = 9")
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--out-dir", default="latency-reports")
    ap.add_argument("--name", default="qec-decoders")
    a = ap.parse_args()

    import numpy as np
    import pymatching
    import stim

    backends = [b for b in a.backends.split(",") if b]
    rows = []
    work = tempfile.mkdtemp(prefix="rocelink-bench-decoders-")
    for d in [int(x) for x in a.distances.split(",")]:
        for p in [float(x) for x in a.ps.split(",")]:
            shots = a.shots if d <= 7 else a.large_shots
            c = stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=d,
                                       after_clifford_depolarization=p,
                                       before_round_data_depolarization=p,
                                       before_measure_flip_probability=p,
                                       after_reset_flip_probability=p)
            dem = c.detector_error_model(decompose_errors=True).flattened()
            dets, obs = c.compile_detector_sampler(seed=a.seed + d * 1000 + int(p * 1e5)).sample(
                shots, separate_observables=True)
            truth = obs[:, 0].astype(np.uint8)
            folder = os.path.join(work, f"d{d}_p{p}")
            os.makedirs(folder, exist_ok=True)
            dem_path = os.path.join(folder, "model.dem")
            with open(dem_path, "w") as f:
                f.write(str(dem) + "\n")
            dets_path = os.path.join(folder, "dets.b8")
            np.packbits(dets.astype(np.uint8), axis=1, bitorder="little").tofile(dets_path)

            m = pymatching.Matching.from_detector_error_model(dem)
            best = float("inf")
            for _ in range(2):
                t = time.perf_counter()
                pred = m.decode_batch(dets)
                best = min(best, time.perf_counter() - t)
            pm = pred[:, 0].astype(np.uint8)
            row = {
                "d": d, "p": p, "shots": shots, "detectors": dem.num_detectors,
                "mean_defects": float(dets.sum(axis=1).mean()),
                "pymatching": {"logical_errors": int((pm != truth).sum()), "us_per_shot": best / shots * 1e6},
            }
            for b in backends:
                out = os.path.join(folder, f"pred-{b.replace(':', '')}.b8")
                stats, err = run_rocelink(a.rocelink, b, dem_path, dets_path, out, shots)
                if err:
                    row[b] = {"error": err}
                    continue
                ours = np.unpackbits(np.fromfile(out, dtype=np.uint8).reshape(shots, -1), axis=1,
                                     bitorder="little")[:, 0]
                stats["logical_errors"] = int((ours != truth).sum())
                differ = np.nonzero(ours != pm)[0]
                stats["differ_from_pymatching"] = int(len(differ))
                # A differing shot is a tie when its matching weighs what PyMatching's does
                # (the GPU reports an f32 weight: a relative 1e-5 covers its rounding; two
                # distinct matchings differ by a sum of edge weights, far more).
                with open(out + ".weights") as f:
                    weights = [float(x) for x in f.read().split()]
                ties = 0
                for i in differ:
                    _, w_pm = m.decode(dets[i], return_weight=True)
                    ties += abs(weights[i] - w_pm) <= 1e-5 * max(1.0, abs(w_pm))
                stats["ties_with_pymatching"] = int(ties)
                stats["worse_than_pymatching"] = int(len(differ) - ties)
                row[b] = stats
            rows.append(row)
            print(json.dumps(row), flush=True)

    os.makedirs(a.out_dir, exist_ok=True)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = [m.group(1) for r in rows for b in backends
            for m in [re.search(r"GPU \d+ (.+?) \((\d+ blocks)", r.get(b, {}).get("summary", ""))] if m]
    meta = {"gpu": gpus[0] if gpus else None, "stim": stim.__version__, "pymatching": pymatching.__version__, "seed": a.seed,
            "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "backends": backends,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(os.path.join(a.out_dir, a.name + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)

    lines = [f"# QEC decoders against PyMatching ({a.name})", "",
             "stim %s rotated memory-Z, rounds = d, the same p on all four noise channels; seed %d; "
             "PyMatching %s `decode_batch` (best of two passes) and `rocelink decode` on the same shots. "
             "Logical errors: count (rate; 95%% Wilson interval). Differs: shots whose prediction is not "
             "PyMatching's, and of them the ties (a matching of the same weight). Decode times are the decoder's own "
             "(rocelink: per shot, no I/O; PyMatching: the batch call divided by the shots); a GPU batch's "
             "us/shot (all blocks) is its kernels' time over all the shots, many blocks decoding side by side: the "
             "throughput a user of `rocelink decode --backend gpu` gets, beside PyMatching's one core."
             % (meta["stim"], a.seed, meta["pymatching"]), "",
             "Machine: %s, %s, %d cores; %s UTC; both decoders single-threaded, one after the other."
             % (meta["host"], meta["cpu"], meta["cores"] or 0, meta["date"]), ""]
    if meta["gpu"]:
        lines[-1:-1] = ["GPU (the gpu backend's batch kernel): %s." % meta["gpu"]]
    head = "| d | p | shots | mean defects | PyMatching errors | PyMatching us/shot |"
    sep = "|---|---|---|---|---|---|"
    batch = [b for b in backends if any(r.get(b, {}).get("kernel_ms") for r in rows)]
    for b in backends:
        head += f" {b} errors | {b} differs | {b} us/shot mean (p50, p99) | {b} / PyMatching |"
        sep += "---|---|---|---|"
        if b in batch:
            head += f" {b} batch us/shot (all blocks) | {b} batch / PyMatching |"
            sep += "---|---|"
    lines += [head, sep]
    for r in rows:
        pmr = r["pymatching"]
        line = (f"| {r['d']} | {r['p']} | {r['shots']} | {r['mean_defects']:.1f} | "
                f"{fmt_rate(pmr['logical_errors'], r['shots'])} | {pmr['us_per_shot']:.2f} |")
        for b in backends:
            s = r.get(b, {})
            if "error" in s or not s:
                line += f" {s.get('error', '-')} | | | |" + (" | |" if b in batch else "")
                continue
            mean = (s["mean_ns"] or 0) / 1000
            extra = f"; {s['overflows']} decoded on the CPU (over the GPU scratch)" if s.get("overflows") else ""
            ties = s.get("ties_with_pymatching", 0)
            differs = f"{s['differ_from_pymatching']}" + (f" ({ties} tie{'s' if ties != 1 else ''})" if ties else "")
            line += (f" {fmt_rate(s['logical_errors'], r['shots'])} | {differs}{extra} | "
                     f"{mean:.2f} ({(s['p50_ns'] or 0) / 1000:.2f}, {(s['p99_ns'] or 0) / 1000:.2f}) | "
                     f"{mean / pmr['us_per_shot']:.2f}x |")
            if b in batch:
                per = (s.get("kernel_ms") or 0) * 1000 / r["shots"]
                line += f" {per:.3f} | {per / pmr['us_per_shot']:.2f}x |"
        lines.append(line)
    with open(os.path.join(a.out_dir, a.name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
