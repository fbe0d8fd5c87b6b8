#!/usr/bin/env python3
"""Writes structured seed corpora for the fuzz targets into corpus/<target>/ (run by
scripts/fuzz before fuzzing; nothing here is committed output).

Seeds come from the repository itself (graphs/*.ron, the DEM fixtures, the scapy RoCE
vectors) and from well-formed messages built here in the targets' input formats (see each
target's docs; stateful targets read records: tag byte, u16 LE length, bytes)."""

import hashlib
import os
import struct
import sys
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
OUT = FUZZ / "corpus"


def put(target, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)


def fnv1a32(b):
    h = 0x811C9DC5
    for x in b:
        h = ((h ^ x) * 0x01000193) & 0xFFFFFFFF
    return h


def rec(tag, data):
    return bytes([tag]) + struct.pack("<H", len(data)) + data


def vectors():
    for name in (ROOT / "wire/tests/vectors/roce-icrc.txt", Path("/work/shared/vectors/roce-icrc.txt")):
        if name.is_file():
            for line in name.read_text().splitlines():
                if line and not line.startswith("#") and "\t" in line:
                    yield bytes.fromhex(line.split("\t")[1].strip())
            return


# --- RoCEv2 frames toward the NIC target's queue pair (fuzz_nic_receive) -------------------
QPN = 0x101
RX_RKEY = (1 << 8 | 0x5A) ^ 0x80  # the first region registered (MrTable::register)
UC = {"send_only": 0x24, "send_only_imm": 0x25, "write_first": 0x26, "write_middle": 0x27,
      "write_last": 0x28, "write_last_imm": 0x29, "write_only": 0x2A, "write_only_imm": 0x2B}


def frame(op, psn, payload, va=None, dma_len=None, imm=None, qpn=QPN, rkey=RX_RKEY):
    pad = -len(payload) % 4
    bth = struct.pack(">BBHI I", UC[op], pad << 4, 0xFFFF, qpn & 0xFFFFFF, psn & 0xFFFFFF)
    ext = b""
    if va is not None:
        ext += struct.pack(">QII", va, rkey, len(payload) if dma_len is None else dma_len)
    if imm is not None:
        ext += struct.pack(">I", imm)
    body = bth + ext + payload + bytes(pad) + bytes(4)  # ICRC filled by the harness
    udp = struct.pack(">HHHH", 12288, 4791, 8 + len(body), 0) + body
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                     bytes([192, 168, 0, 2]), bytes([192, 168, 0, 101])) + udp
    eth = bytes([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00])
    return eth + ip


def nic_seeds():
    fix = 1 | 2 | 4 | (1 << 3)  # lengths, ICRC, relative VA, the receive region's R_Key
    pat = bytes((i * 31 + 7) & 0xFF | 1 for i in range(1024))
    yield bytes([0]) + rec(fix | 1 << 5, frame("write_only_imm", 5, pat[:64], va=64, imm=0x1234))
    yield bytes([0]) + rec(fix, frame("write_only", 9, pat[:200], va=1000)) + \
        rec(fix | 2 << 5, frame("write_only_imm", 10, pat[:32], va=3000, imm=7))
    yield bytes([2]) + rec(fix, frame("write_first", 1, pat[:256], va=0, dma_len=600)) + \
        rec(fix, frame("write_middle", 2, pat[:256])) + \
        rec(fix | 1 << 5, frame("write_last_imm", 3, pat[:88], imm=99))
    yield bytes([4]) + rec(3 | 1 << 5, frame("send_only", 4, pat[:48])) + \
        rec(3 | 1 << 5, frame("send_only_imm", 5, pat[:17], imm=0xABCD))
    yield bytes([0]) + rec(fix | 1 << 5, frame("write_only_imm", 1, pat[:64], va=8064 - 32, imm=1))
    yield bytes([0]) + b"".join(rec(3 | 1 << 5, f) for f in vectors())


# --- ECB requests as an HSB host sends them (fuzz_ecb_server) -----------------------------
def ecb_seeds():
    # Structured records: bit 0 set, command in bits 1-2 (0 WR_DWORD, 1 WR_BLOCK, 2 RD_DWORD,
    # 3 RD_BLOCK), ACK in bit 3.
    def wr(pairs):
        return rec(1 | 1 << 1 | 1 << 3, b"".join(struct.pack(">II", a, v) for a, v in pairs))

    def rd(addrs):
        return rec(1 | 3 << 1, b"".join(struct.pack(">II", a, 0) for a in addrs))

    vp = lambda off: 0x1000 + off
    hif = lambda off: 0x0200_0300 + off
    configure = wr([(hif(0x0C), 0), (vp(0x00), 0x101), (vp(0x04), 0x1DA), (vp(0x08), 0x1000_0000),
                    (vp(0x0C), 0), (vp(0x10), 8), (vp(0x14), 7), (vp(0x18), 64), (vp(0x20), 0x0000_0001),
                    (vp(0x24), 0x0200), (vp(0x28), 0x7F00_0001), (vp(0x2C), 4791), (hif(0x04), 1),
                    (hif(0x08), 12288), (hif(0x0C), 1)])
    # CUQR echo request template in player RAM (words little-endian).
    tmpl = struct.pack("<IIIIQ", 0x4355_5152, fnv1a32(b"echo"), 40, 0, 0) + bytes(40)
    words = [(0x5010_0000 + 4 * i, struct.unpack("<I", tmpl[i:i + 4])[0]) for i in range(0, len(tmpl), 4)]
    player = wr(words) + wr([(0x5000_000C, len(tmpl)), (0x5000_0010, 4), (0x5000_0008, 156),
                             (0x5000_0014, 1), (0x5000_0018, 2), (0x5000_001C, 1)])
    arm = wr([(0x4000_0000, 0), (0x4000_0000, 1)])
    start = wr([(0x5000_0004, 1)])
    reads = rd([0x80, 0x84, 0x188, 0x4000_0080, 0x4000_0084, 0x4010_0000, 0x4000_0100, 0x4000_0200])
    yield bytes([0]) + rd([0x80]) + configure + player + arm + start + reads
    yield bytes([1]) + rd([0x4000_0200, 0x4000_0204, 0x4000_0208, 0x4000_020C]) + \
        wr([(0x4000_0204, 1), (0x4000_0200, 1)]) + player + arm + start + rd([0x4000_0240, 0x4000_0280])
    yield bytes([0]) + rec(0, bytes([0x14, 0, 0, 1, 0, 0, 0, 0, 0, 0x80])) + \
        rec(0, bytes([0x04, 0x01, 0, 2, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0x08]))


# --- CUQR requests to the QEC stage (fuzz_qec_session) ------------------------------------
def enq_args(decoder, counter, bits):
    n = len(bits)
    packed = bytearray((n + 7) // 8)
    for i, b in enumerate(bits):
        packed[i // 8] |= b << (i % 8)
    return struct.pack("<qqqq", decoder, counter, 0, n) + bytes(packed)


def qec_session_seeds():
    shot = [0, 1, 1, 0, 0, 0]
    whole = rec(1, enq_args(0, 0, shot)) + rec(2, struct.pack("<qqB", 0, 2, 1))
    rounds = b"".join(rec(1, enq_args(0, c, shot[c:c + 1])) for c in range(6))
    yield bytes([0]) + whole + rec(3, struct.pack("<q", 0)) + whole
    yield bytes([0]) + rounds + rec(2, struct.pack("<qqB", 0, 64, 0))
    yield bytes([3 * 1 + 1]) + b"".join(rec(1, enq_args(1, 2 * c, shot[2 * c:2 * c + 2])) for c in range(3)) + \
        rec(2, struct.pack("<qqB", 1, 8, 0))


def main():
    OUT.mkdir(exist_ok=True)
    for f in vectors():
        put("fuzz_roce_frame", f)
        put("fuzz_headers", bytes([3]) + f[42:54])
    put("fuzz_ecb_request", bytes([0x09, 0x01, 0, 1, 0, 0]) + struct.pack(">IIII", 0x1000, 5, 0x1004, 6))
    put("fuzz_ecb_reply", bytes([0x94, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0x80, 0, 0, 0x26, 0x07, 0x12, 0x34, 0, 0]))
    put("fuzz_rpc", struct.pack("<IIIIQ", 0x4355_5152, 0x7ED8_BE82, 40, 7, 99))

    for dem in sorted(ROOT.glob("operator/tests/fixtures/qec/*/model.dem")) + sorted(ROOT.glob("tests/**/*.dem")):
        text = dem.read_bytes()
        if len(text) <= 40_000:  # the d5 models slow every execution down; their heads suffice
            put("fuzz_dem", text)
        put("fuzz_dem", b"\n".join(text.splitlines()[:60]) + b"\n")
    put("fuzz_dem", b"detector(0, 0, 0) D0\nrepeat 3 {\n  error(0.1) D0 D1 ^ D2 L0\n  shift_detectors(0, 0, 1) 2\n"
                    b"  detector[tag](1, 0, 0) D1\n}\nlogical_observable L1\nerror(0.2) D0\n")
    put("fuzz_dem", b"error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1 D2\nerror(0.1) D2\n")
    # Extreme probabilities (a subnormal p, p next to 0.5): the weights and tables they make.
    put("fuzz_dem", b"error(5e-324) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1\n")
    put("fuzz_dem", b"error(0.4999999999999999) D0\nerror(0.4999999999999999) D0 D1\n"
                    b"error(0.4999999999999999) D1\nerror(1e-300) D1 D2\nerror(0.4999999999999999) D2\n")

    # Shot files in every format (fuzz_shot_files: format byte, then the file) and a DEM
    # with negative edges.
    put("fuzz_dem", b"error(0.7) D0 D1 L0\nerror(0.1) D1 D2\nerror(0.9) D2\nerror(0.2) D0\n")
    put("fuzz_shot_files", bytes([0]) + bytes([0b101, 0, 0x0F]) * 3)
    put("fuzz_shot_files", bytes([1 | 1 << 3]) + (b"1" * 20 + b"\n") + (b"0" * 20 + b"\n"))
    put("fuzz_shot_files", bytes([2 | 2 << 3]) + bytes([0, 3, 15, 0, 20]))
    put("fuzz_shot_files", bytes([3 | 3 << 3]) + b"0,5,19\n\n7\n")
    put("fuzz_shot_files", bytes([4 | 4 << 3 | 64]) + b"shot D0 D7 L0\nshot\nshot D19\n")

    put("fuzz_qec_payloads", bytes([0]) + enq_args(0, 3, [1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]))
    put("fuzz_qec_payloads", bytes([1]) + struct.pack("<qqB", 0, 1, 1))
    put("fuzz_qec_payloads", bytes([2]) + struct.pack("<q", 2))
    put("fuzz_qec_payloads", bytes([3]) + struct.pack("<H", 9) + bytes([0x01, 0x01]) + bytes(6))
    put("fuzz_qec_payloads", bytes([4]) + struct.pack("<BBHfII", 0, 0, 3, 4.5, 1200, 7))
    for s in qec_session_seeds():
        put("fuzz_qec_session", s)

    hdr = struct.pack("<HIHH", 4, 1, 1, 8)
    recs = b"".join(struct.pack("<8I", i, 1000 * i, 0, 1000 * i + 500, 0, 3, 64, 0) for i in range(1, 5))
    put("fuzz_hsb_layouts", hdr + recs)
    put("fuzz_hsb_layouts", hdr + recs + struct.pack("<8I", 1, 1000, 0, 900, 0, 4 | 3, 64, 0xFFFFFFFE))

    for s in ecb_seeds():
        put("fuzz_ecb_server", s)
    for s in nic_seeds():
        put("fuzz_nic_receive", s)

    for g in sorted(ROOT.glob("graphs/*.ron")):
        text = g.read_bytes()
        put("fuzz_graph", text)
        put("fuzz_graph", text + b"\0run.stop=Count(10)\nrun.size=64\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
