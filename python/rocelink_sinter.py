"""rocelink's exact matching decoder as a sinter decoder.

sinter (stim's Monte Carlo tool, `pip install sinter`) estimates logical error rates by
sampling circuits and decoding the shots; this module gives it `rocelink decode` (the exact
CPU decoder, or the GPU stage with `--backend gpu`), so a logical-error-rate study runs on
rocelink the way it runs on PyMatching:

    PYTHONPATH=python sinter collect \\
        --circuits circuits/*.stim --decoders rocelink pymatching \\
        --custom_decoders_module_function rocelink_sinter:sinter_decoders \\
        --max_shots 1000000 --max_errors 1000 --processes 8 --save_resume_filepath stats.csv

or from Python: `sinter.collect(..., decoders=["rocelink"], custom_decoders=sinter_decoders())`.

The decoders (`sinter_decoders()`): `rocelink` (the exact CPU decoder, one thread per sinter
worker), `rocelink-gpu` (the GPU stage's batch kernel, GPU 0). The binary is `$ROCELINK_BIN`,
else `rocelink` on PATH.

sinter first asks a decoder to compile itself for a task's DEM (`compile_decoder_for_dem`):
here that starts one `rocelink decode --serve` process, which loads the DEM (and, for
`rocelink-gpu`, builds the table and starts the GPU) once, then answers every batch of the
task over its pipes (an 8-byte shot count and the shots in b8 in, the predictions in b8 out:
`operator/src/qec/serve.rs`). `decode_via_files`, sinter's fallback, runs `rocelink decode`
on files for one batch. Either way a failure raises with rocelink's own message.
"""

import os
import shutil
import subprocess
import tempfile

try:
    import sinter

    _Decoder = sinter.Decoder
    _Compiled = sinter.CompiledDecoder
except ImportError:  # the classes still work where sinter is absent (its own tests)
    _Decoder = object
    _Compiled = object


class RocelinkCompiledDecoder(_Compiled):
    """One `rocelink decode --serve` process for one DEM (sinter.CompiledDecoder)."""

    def __init__(self, cmd, num_dets, num_obs, dem_dir):
        self._dem_dir = dem_dir  # the DEM file and the process's stderr, while it runs
        self.num_det_bytes = -(-num_dets // 8)
        self.num_obs_bytes = -(-num_obs // 8)
        # stderr to a file, not a pipe: a pipe nobody reads could fill and stop the process
        self._err_path = os.path.join(dem_dir.name, "stderr.txt")
        with open(self._err_path, "wb") as err:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)

    def _failed(self, why):
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        try:
            with open(self._err_path, "rb") as f:
                err = f.read().decode(errors="replace").strip()
        except OSError:
            err = ""
        self.close()
        return RuntimeError(f"rocelink decode --serve {why} (exit {self._proc.returncode}): {err}")

    def decode_shots_bit_packed(self, *, bit_packed_detection_event_data):
        import numpy as np

        shots = np.ascontiguousarray(bit_packed_detection_event_data, dtype=np.uint8)
        if shots.ndim != 2 or shots.shape[1] != self.num_det_bytes:
            raise ValueError(f"expected shots of {self.num_det_bytes} bytes, got an array of shape {shots.shape}")
        n = shots.shape[0]
        want = n * self.num_obs_bytes
        try:
            self._proc.stdin.write(n.to_bytes(8, "little"))
            self._proc.stdin.write(shots.tobytes())
            self._proc.stdin.flush()
            out = self._proc.stdout.read(want) if want else b""
        except (BrokenPipeError, OSError):
            raise self._failed("stopped") from None
        if len(out) != want:
            raise self._failed(f"answered {len(out)} of {want} bytes")
        return np.frombuffer(out, dtype=np.uint8).reshape(n, self.num_obs_bytes)

    def close(self):
        """Ends the process (stdin closed: it answers what it has and exits)."""
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._dem_dir is not None:
            self._dem_dir.cleanup()
            self._dem_dir = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class RocelinkDecoder(_Decoder):
    """`rocelink decode` for sinter: a serving process per DEM (compile_decoder_for_dem), or
    one run on sinter's files per batch (decode_via_files)."""

    def __init__(self, backend="cpu", threads=1, binary=None):
        self.backend = backend
        self.threads = threads
        self.binary = binary

    def _binary(self):
        found = self.binary or os.environ.get("ROCELINK_BIN") or shutil.which("rocelink")
        if not found:
            raise RuntimeError("no rocelink binary: set ROCELINK_BIN or put `rocelink` on PATH")
        return found

    def _backend_args(self):
        args = ["--backend", self.backend]
        if self.backend == "cpu":
            args += ["--threads", str(self.threads)]
        return args

    def compile_decoder_for_dem(self, *, dem):
        """A `rocelink decode --serve` process for `dem` (a stim.DetectorErrorModel)."""
        dem_dir = tempfile.TemporaryDirectory(prefix="rocelink-sinter-")
        path = os.path.join(dem_dir.name, "model.dem")
        dem.to_file(path)
        cmd = [self._binary(), "decode", "--dem", path, "--serve", *self._backend_args()]
        return RocelinkCompiledDecoder(cmd, dem.num_detectors, dem.num_observables, dem_dir)

    def decode_via_files(
        self,
        *,
        num_shots,
        num_dets,
        num_obs,
        dem_path,
        dets_b8_in_path,
        obs_predictions_b8_out_path,
        tmp_dir,
    ):
        cmd = [
            self._binary(),
            "decode",
            "--dem",
            str(dem_path),
            "--in",
            str(dets_b8_in_path),
            "--in-format",
            "b8",
            "--out",
            str(obs_predictions_b8_out_path),
            "--out-format",
            "b8",
            "--num-shots",
            str(num_shots),
            *self._backend_args(),
        ]
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"rocelink decode failed ({r.returncode}): {r.stderr.strip()}")


def sinter_decoders():
    """The decoders for sinter's `--custom_decoders_module_function rocelink_sinter:sinter_decoders`."""
    return {"rocelink": RocelinkDecoder(), "rocelink-gpu": RocelinkDecoder(backend="gpu")}
