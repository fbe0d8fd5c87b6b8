#!/usr/bin/env python3
"""Write the negative-weight vectors: a DEM whose edges include merged probabilities above
0.5 (negative weights, which PyMatching decodes by flipping their ends' detection events),
stim shots of it, and PyMatching's predictions and matching weights (docs/qec.md, "Oracles").
`tests/decode_cli.rs` holds `rocelink decode`'s predictions and weights equal to them.

The DEM is the decoder fixtures' recipe (rotated memory-Z, rounds = d, p on all four noise
channels) at d = 5, p = 0.3%, with every 7th error's probability replaced by 0.6, 0.75 or 0.9:
about one edge in six negative, so every shot has many flipped events.

Needs (PyPI): stim 1.16 and pymatching 2.4.

Usage:
    python3 scripts/negative_vectors.py                    # the committed set, seed 1
    python3 scripts/negative_vectors.py --seed 7 --out-dir /tmp/negative

Writes model.dem, shots.b8, pred.01 (PyMatching's predictions), weights.txt (its matching
weights, one a line) and meta.json.
"""

import argparse
import json
import os
import random
import re


def main():
    import numpy as np
    import pymatching
    import stim

    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "operator", "tests", "fixtures", "qec", "negative")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-dir", default=default_out)
    ap.add_argument("--shots", type=int, default=600)
    a = ap.parse_args()

    from qec_fixtures import memory_circuit

    d, p, every = 5, 0.003, 7
    circuit = memory_circuit(d, p)
    rng = random.Random(a.seed)
    lines, k = [], 0
    for line in str(circuit.detector_error_model(decompose_errors=True).flattened()).split("\n"):
        if line.startswith("error("):
            k += 1
            if k % every == 0:
                line = re.sub(r"error\([^)]*\)", f"error({rng.choice([0.6, 0.75, 0.9])})", line)
        lines.append(line)
    dem = stim.DetectorErrorModel("\n".join(lines))
    dets, obs, _ = dem.compile_sampler(seed=a.seed).sample(a.shots)
    matching = pymatching.Matching.from_detector_error_model(dem)
    pred, weights = matching.decode_batch(dets, return_weights=True)
    negative = sum(1 for e in matching.edges() if e[2]["weight"] < 0)

    os.makedirs(a.out_dir, exist_ok=True)
    out = lambda name: os.path.join(a.out_dir, name)
    with open(out("model.dem"), "w") as f:
        f.write(str(dem))
        f.write("\n")
    np.packbits(dets.astype(np.uint8), axis=1, bitorder="little").tofile(out("shots.b8"))
    with open(out("pred.01"), "w") as f:
        for row in pred.astype(np.uint8):
            f.write("".join("1" if b else "0" for b in row) + "\n")
    with open(out("weights.txt"), "w") as f:
        for w in weights:
            f.write(repr(float(w)) + "\n")
    meta = {
        "recipe": f"surface_code:rotated_memory_z d={d} p={p}, every {every}th error at p in (0.6, 0.75, 0.9)",
        "seed": a.seed,
        "shots": a.shots,
        "num_detectors": dem.num_detectors,
        "negative_edges": negative,
        "edges": len(matching.edges()),
        "mean_events": float(dets.sum(axis=1).mean()),
        "stim": stim.__version__,
        "pymatching": pymatching.__version__,
    }
    with open(out("meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{a.out_dir}: {a.shots} shots, {negative} of {meta['edges']} edges negative")


if __name__ == "__main__":
    main()
