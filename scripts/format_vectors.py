#!/usr/bin/env python3
"""Write the shot-format vectors: one set of stim shots in every result format
`pymatching predict` reads, and PyMatching's own predictions in every format it writes
(docs/qec.md, "Oracles"). `tests/decode_formats.rs` runs `rocelink decode` on each input
and compares its output with PyMatching's byte for byte.

stim writes the inputs (`stim.write_shot_data_file`) and PyMatching's command line
(`pymatching predict`, stim's format code inside) writes the predictions, so neither side
of the comparison is rocelink's. The generator checks that PyMatching answers the same from
every input format, with and without the observables appended.

Needs (PyPI): stim 1.16 and pymatching 2.4.

Usage:
    python3 scripts/format_vectors.py                    # the committed set, seed 1
    python3 scripts/format_vectors.py --seed 7 --out-dir /tmp/formats

Writes into the output folder: model.dem; shots.<f> (the DEM's detectors) and
shots_obs.<f> (the detectors, then the observables, as `stim detect --append_observables`
writes them) for f in b8, 01, r8, hits, dets; pred.<g> (PyMatching's predictions from
shots.b8) for g in the same formats; meta.json.

The circuit is stim's repetition-code memory (d = 15, 20 rounds, one p on its noise
channels): 294 detectors, past 255, so r8's runs of 255 occur, in a DEM of a few kB; shot 0 is
cleared (an empty shot in every format).
"""

import argparse
import json
import os
import tempfile

FORMATS = ["b8", "01", "r8", "hits", "dets"]


def main():
    import numpy as np
    import pymatching
    import stim

    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "operator", "tests", "fixtures", "qec", "formats")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-dir", default=default_out)
    ap.add_argument("--distance", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--p", type=float, default=0.01)
    ap.add_argument("--shots", type=int, default=120)
    a = ap.parse_args()

    d, p = a.distance, a.p
    circuit = stim.Circuit.generated(
        "repetition_code:memory",
        distance=d,
        rounds=a.rounds,
        after_clifford_depolarization=p,
        before_round_data_depolarization=p,
        before_measure_flip_probability=p,
        after_reset_flip_probability=p,
    )
    dem = circuit.detector_error_model(decompose_errors=True).flattened()
    dets, obs = circuit.compile_detector_sampler(seed=a.seed).sample(a.shots, separate_observables=True)
    # An empty shot, for the formats' edge cases.
    dets[0, :] = False
    obs[0, :] = False
    n, k = dem.num_detectors, dem.num_observables
    os.makedirs(a.out_dir, exist_ok=True)
    out = lambda name: os.path.join(a.out_dir, name)
    with open(out("model.dem"), "w") as f:
        f.write(str(dem))
        f.write("\n")
    both = np.concatenate([dets, obs], axis=1)
    for fmt in FORMATS:
        stim.write_shot_data_file(data=dets, path=out(f"shots.{fmt}"), format=fmt, num_detectors=n)
        stim.write_shot_data_file(data=both, path=out(f"shots_obs.{fmt}"), format=fmt, num_detectors=n, num_observables=k)

    def predict(shots, in_fmt, out_path, out_fmt, appended):
        args = ["predict", "--dem", out("model.dem"), "--in", shots, "--in_format", in_fmt]
        args += ["--out", out_path, "--out_format", out_fmt]
        if appended:
            args.append("--in_includes_appended_observables")
        pymatching.cli(command_line_args=args)

    for fmt in FORMATS:
        predict(out("shots.b8"), "b8", out(f"pred.{fmt}"), fmt, False)
    with tempfile.TemporaryDirectory() as tmp:
        want = open(out("pred.01"), "rb").read()
        for fmt in FORMATS:
            for name, appended in (("shots", False), ("shots_obs", True)):
                got = os.path.join(tmp, "pred.01")
                predict(out(f"{name}.{fmt}"), fmt, got, "01", appended)
                assert open(got, "rb").read() == want, f"PyMatching reads {name}.{fmt} otherwise"
    meta = {
        "recipe": "repetition_code:memory, p on all its noise channels; shot 0 cleared",
        "distance": d,
        "rounds": a.rounds,
        "p": p,
        "seed": a.seed,
        "shots": a.shots,
        "num_detectors": n,
        "num_observables": k,
        "formats": FORMATS,
        "stim": stim.__version__,
        "pymatching": pymatching.__version__,
    }
    with open(out("meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{a.out_dir}: {a.shots} shots of {n} detectors in {len(FORMATS)} formats, PyMatching's predictions in each")


if __name__ == "__main__":
    main()
