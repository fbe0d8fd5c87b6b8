#!/usr/bin/env python3
"""Generate the QEC decoder fixtures: stim circuits, DEMs, detection events, true
observables, and PyMatching's predictions and matching weights (docs/qec.md, "Oracles").

The committed fixtures under operator/tests/fixtures/qec/ were made with this script, so
`cargo test` needs no Python. CI regenerates them with a fresh seed into another folder and
points the Rust tests at it with ROCELINK_QEC_FIXTURES (operator/tests/qec_fixtures.rs).

Needs (PyPI): stim 1.16 and pymatching 2.4, e.g.
    pip install 'stim==1.16.*' 'pymatching==2.4.*'

Usage:
    python3 scripts/qec_fixtures.py                         # the committed set, seed 1
    python3 scripts/qec_fixtures.py --seed 77 --out-dir /tmp/qec-fresh
    python3 scripts/qec_fixtures.py --distances 3 --ps 0.001 --shots 500 --out-dir /tmp/x

One folder per (distance, p), named d{d}_p{p} (e.g. d5_p0.001), and one more,
d3_r8_p0.001_repeat, whose DEM is stim's unflattened one (a `repeat` block with
`shift_detectors`, 1,000 shots); each holds:
    model.dem    the DEM with decomposed errors (stim text format), flattened except in
                 the *_repeat folder
    dets.b8      detection events, stim b8: each shot ceil(num_detectors/8) bytes, LSB first
    obs.01       the true observable flips, one line of '0'/'1' per shot
    pred.01      PyMatching's predictions, same format (what `pymatching predict
                 --out_format 01` writes)
    weights.txt  PyMatching's matching weight per shot (`decode_batch(return_weights=True)`),
                 one float per line, repr precision
    meta.json    recipe, seed, shots, sizes and package versions

The circuit is the recipe of docs/qec.md ("Inputs and outputs"): rotated memory-Z,
`rounds = distance` (8 for the repeat fixture), the same p for all four noise channels.
"""

import argparse
import json
import os
import sys


def memory_circuit(d, p, rounds=None):
    """The recipe (docs/qec.md): rotated memory-Z, `rounds` (default d), p on all four noise channels."""
    import stim

    return stim.Circuit.generated(
        "surface_code:rotated_memory_z",
        distance=d,
        rounds=rounds or d,
        after_clifford_depolarization=p,
        before_round_data_depolarization=p,
        before_measure_flip_probability=p,
        after_reset_flip_probability=p,
    )


def generate(d, p, shots, seed, out_dir, rounds=None, flatten=True):
    import numpy as np
    import pymatching
    import stim

    circuit = memory_circuit(d, p, rounds)
    dem = circuit.detector_error_model(decompose_errors=True)
    if flatten:
        dem = dem.flattened()
    dets, obs = circuit.compile_detector_sampler(seed=seed).sample(
        shots, separate_observables=True
    )
    matching = pymatching.Matching.from_detector_error_model(dem)
    pred, weights = matching.decode_batch(dets, return_weights=True)

    name = f"d{d}_p{p}" if rounds is None else f"d{d}_r{rounds}_p{p}"
    if not flatten:
        name += "_repeat"
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.dem"), "w") as f:
        f.write(str(dem))
        f.write("\n")
    # stim's b8: bits LSB first within each byte, each shot padded to a whole byte.
    np.packbits(dets.astype(np.uint8), axis=1, bitorder="little").tofile(
        os.path.join(folder, "dets.b8")
    )

    def write01(name, bits):
        with open(os.path.join(folder, name), "w") as f:
            for row in bits.astype(np.uint8):
                f.write("".join("1" if b else "0" for b in row))
                f.write("\n")

    write01("obs.01", obs)
    write01("pred.01", pred)
    with open(os.path.join(folder, "weights.txt"), "w") as f:
        for w in weights:
            f.write(repr(float(w)))
            f.write("\n")
    defects = dets.sum(axis=1)
    meta = {
        "recipe": "surface_code:rotated_memory_z, docs/qec.md",
        "distance": d,
        "rounds": rounds or d,
        "flattened": flatten,
        "p": p,
        "seed": seed,
        "shots": shots,
        "num_detectors": dem.num_detectors,
        "num_observables": dem.num_observables,
        "max_defects": int(defects.max()) if shots else 0,
        "mean_defects": float(defects.mean()) if shots else 0.0,
        "pymatching_logical_errors": int((pred != obs).any(axis=1).sum()),
        "stim": stim.__version__,
        "pymatching": pymatching.__version__,
    }
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return folder, meta


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "operator", "tests", "fixtures", "qec")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="sampler seed (default 1)")
    ap.add_argument("--out-dir", default=default_out, help="where the d*_p* folders go")
    ap.add_argument("--shots", type=int, default=5000, help="shots per fixture")
    ap.add_argument("--distances", default="3,5", help="comma-separated code distances")
    ap.add_argument("--ps", default="0.001,0.003", help="comma-separated noise strengths")
    ap.add_argument("--no-repeat", action="store_true",
                    help="skip the d=3, 8-round fixture whose DEM keeps stim's repeat block")
    args = ap.parse_args()
    try:
        import pymatching  # noqa: F401
        import stim  # noqa: F401
    except ImportError as e:
        sys.exit(f"qec_fixtures.py needs stim and pymatching: pip install 'stim==1.16.*' "
                 f"'pymatching==2.4.*' ({e})")
    jobs = [(int(d), float(p), args.shots, None, True)
            for d in args.distances.split(",") for p in args.ps.split(",")]
    if not args.no_repeat:
        # stim folds rounds 3..7 of an 8-round circuit into `repeat 2 { ... }` with
        # `shift_detectors`: the loader's flattening is checked end to end on it.
        jobs.append((3, 0.001, min(args.shots, 1000), 8, False))
    for d, p, shots, rounds, flatten in jobs:
        folder, meta = generate(d, p, shots, args.seed, args.out_dir, rounds, flatten)
        print(f"{folder}: {meta['shots']} shots, {meta['num_detectors']} detectors, "
              f"max defects {meta['max_defects']}, "
              f"PyMatching logical errors {meta['pymatching_logical_errors']}")


if __name__ == "__main__":
    main()
