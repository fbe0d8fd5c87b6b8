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
else `rocelink` on PATH. sinter hands over each batch as files (the DEM, the shots in b8);
`rocelink decode` writes the predictions in b8, whole or not at all, and a failure raises
with rocelink's own message.
"""

import os
import shutil
import subprocess

try:
    import sinter

    _Decoder = sinter.Decoder
except ImportError:  # the class still works where sinter is absent (its own tests)
    _Decoder = object


class RocelinkDecoder(_Decoder):
    """`rocelink decode` on sinter's files (sinter.Decoder.decode_via_files)."""

    def __init__(self, backend="cpu", threads=1, binary=None):
        self.backend = backend
        self.threads = threads
        self.binary = binary

    def _binary(self):
        found = self.binary or os.environ.get("ROCELINK_BIN") or shutil.which("rocelink")
        if not found:
            raise RuntimeError("no rocelink binary: set ROCELINK_BIN or put `rocelink` on PATH")
        return found

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
            "--backend",
            self.backend,
        ]
        if self.backend == "cpu":
            cmd += ["--threads", str(self.threads)]
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"rocelink decode failed ({r.returncode}): {r.stderr.strip()}")


def sinter_decoders():
    """The decoders for sinter's `--custom_decoders_module_function rocelink_sinter:sinter_decoders`."""
    return {"rocelink": RocelinkDecoder(), "rocelink-gpu": RocelinkDecoder(backend="gpu")}
