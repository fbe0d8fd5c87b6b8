#!/usr/bin/env python3
"""The sinter decoder against PyMatching, as `tests/sinter_decoder.rs` runs it.

1. `RocelinkDecoder.decode_via_files` on stim shots of the d = 5, p = 0.5% memory circuit:
   its predictions are PyMatching's but for ties (equal-weight matchings), at most 1%.
2. `RocelinkDecoder.compile_decoder_for_dem` (one `rocelink decode --serve` process) on the
   same kind of shots in batches of several sizes, an empty one among them: the same, batch
   by batch; and a process that fails raises with rocelink's message.
3. `sinter.collect` with `rocelink` beside `pymatching` on the d = 3 circuit, as a user runs
   it (sinter compiles the decoder for the task's DEM): every shot decoded, the logical
   errors of the two within 5 sigma of each other.

With `--gpu` (on the GPU machine: `bash scripts/gpu-tests.sh run` runs it), the same for
`rocelink-gpu`, the GPU stage's batch kernel, beside the CPU decoder.

Exit 3 when stim, PyMatching or sinter is missing (the Rust test then skips, or fails in CI).
"""

import os
import pathlib
import sys
import tempfile

try:
    import numpy as np
    import pymatching
    import sinter
    import stim
except ImportError as e:
    print(f"missing: {e}", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rocelink_sinter  # noqa: E402


def circuit(d, p):
    return stim.Circuit.generated(
        "surface_code:rotated_memory_z",
        distance=d,
        rounds=d,
        after_clifford_depolarization=p,
        before_round_data_depolarization=p,
        before_measure_flip_probability=p,
        after_reset_flip_probability=p,
    )


def sample(shots):
    c = circuit(5, 0.005)
    dem = c.detector_error_model(decompose_errors=True)
    dets, _ = c.compile_detector_sampler(seed=int.from_bytes(os.urandom(4), "little")).sample(
        shots, separate_observables=True
    )
    return dem, dets


def differ_from_pymatching(dem, dets, raw):
    ours = np.unpackbits(raw, axis=1, bitorder="little")[:, : dem.num_observables].astype(bool)
    theirs = pymatching.Matching.from_detector_error_model(dem).decode_batch(dets).astype(bool)
    return int(np.any(ours != theirs, axis=1).sum())


def via_files(backend):
    shots = 2000
    dem, dets = sample(shots)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        dem.to_file(tmp / "model.dem")
        np.packbits(dets, axis=1, bitorder="little").tofile(tmp / "dets.b8")
        rocelink_sinter.RocelinkDecoder(backend=backend).decode_via_files(
            num_shots=shots,
            num_dets=dem.num_detectors,
            num_obs=dem.num_observables,
            dem_path=tmp / "model.dem",
            dets_b8_in_path=tmp / "dets.b8",
            obs_predictions_b8_out_path=tmp / "pred.b8",
            tmp_dir=tmp,
        )
        raw = np.fromfile(tmp / "pred.b8", dtype=np.uint8).reshape(shots, -1)
    differ = differ_from_pymatching(dem, dets, raw)
    print(f"decode_via_files ({backend}): {shots} shots, {differ} predictions differ from PyMatching's (ties)")
    assert differ <= shots // 100, differ


def compiled(backend):
    shots = 2000
    dem, dets = sample(shots)
    packed = np.packbits(dets, axis=1, bitorder="little")
    decoder = rocelink_sinter.RocelinkDecoder(backend=backend).compile_decoder_for_dem(dem=dem)
    answers = []
    for lo, hi in [(0, 1), (1, 1), (1, 700), (700, shots)]:
        got = decoder.decode_shots_bit_packed(bit_packed_detection_event_data=packed[lo:hi])
        assert got.shape == (hi - lo, (dem.num_observables + 7) // 8) and got.dtype == np.uint8, got.shape
        answers.append(got)
    decoder.close()
    differ = differ_from_pymatching(dem, dets, np.concatenate(answers))
    print(f"compile_decoder_for_dem ({backend}): {shots} shots in 4 requests, {differ} predictions differ from PyMatching's (ties)")
    assert differ <= shots // 100, differ
    # a DEM rocelink refuses: the process exits, and the batch raises with its message
    bad = stim.DetectorErrorModel("error(1) D0 D1 L0")
    decoder = rocelink_sinter.RocelinkDecoder(backend=backend).compile_decoder_for_dem(dem=bad)
    try:
        decoder.decode_shots_bit_packed(bit_packed_detection_event_data=np.zeros((3, 1), dtype=np.uint8))
    except RuntimeError as e:
        assert "probability 1" in str(e), e
    else:
        raise AssertionError("a refused DEM answered")


def collect(decoders):
    shots = 20000
    stats = sinter.collect(
        num_workers=2,
        tasks=[sinter.Task(circuit=circuit(3, 0.005), json_metadata={"d": 3})],
        decoders=decoders + ["pymatching"],
        custom_decoders=rocelink_sinter.sinter_decoders(),
        max_shots=shots,
        max_errors=10**9,
    )
    errors = {s.decoder: s.errors for s in stats}
    got = {s.decoder: s.shots for s in stats}
    print(f"sinter.collect, d = 3, p = 0.5%: shots {got}, logical errors {errors}")
    assert got == {d: shots for d in decoders + ["pymatching"]}, got
    for d in decoders:
        a, b = errors[d], errors["pymatching"]
        assert a > 0 and abs(a - b) <= 5 * (a + b) ** 0.5, errors


if __name__ == "__main__":
    gpu = "--gpu" in sys.argv[1:]
    for backend in ["cpu", "gpu"] if gpu else ["cpu"]:
        via_files(backend)
        compiled(backend)
    collect(["rocelink", "rocelink-gpu"] if gpu else ["rocelink"])
