#!/usr/bin/env python3
"""Recomputes the ICRC of every RoCEv2 frame (IPv4, UDP port 4791) in a pcap with scapy's
implementation (scapy.contrib.roce, BTH.compute_icrc), which shares no code with rocelink,
against the IPv4 header as captured.

Usage: check_icrc.py FILE.pcap [--vectors FILE]   (--vectors: also check a file of
"description<TAB>hex frame" lines, e.g. PROTOCOLS.md's vectors/roce-icrc.txt, as a self-test)

Prints one JSON object: frames, invalid, opcodes (count per BTH opcode, "0x2b"...),
identifications (distinct IPv4 identification values seen, up to 8) and the first invalid
frames. Exit status: 0 when every frame verifies, 1 when one does not, 3 when scapy is missing.
"""
import json
import struct
import sys

try:
    from scapy.all import Ether, IP, UDP, PcapReader
    from scapy.contrib.roce import BTH
except ImportError as e:  # the caller (tests/wire_capture.rs) skips or fails on 3
    print(f"scapy is not installed ({e}); pip install scapy", file=sys.stderr)
    sys.exit(3)


def check(frame_bytes):
    """(opcode, ident, ok) of a frame, or None if it is not RoCEv2 over IPv4."""
    p = Ether(frame_bytes)
    if IP not in p or UDP not in p or p[UDP].dport != 4791 or BTH not in p:
        return None
    bth = p[BTH]
    stored = struct.pack("!I", bth.icrc)
    return bth.opcode, p[IP].id, bth.compute_icrc(None) == stored


def main():
    args = sys.argv[1:]
    frames = []
    if "--vectors" in args:
        i = args.index("--vectors")
        with open(args[i + 1]) as f:
            for line in f:
                if line.startswith("#") or "\t" not in line:
                    continue
                frames.append(bytes.fromhex(line.split("\t")[1].strip()))
        del args[i:i + 2]
    out = {"frames": 0, "invalid": 0, "opcodes": {}, "identifications": [], "first_invalid": []}

    def take(raw):
        r = check(raw)
        if r is None:
            return
        op, ident, ok = r
        out["frames"] += 1
        key = f"0x{op:02x}"
        out["opcodes"][key] = out["opcodes"].get(key, 0) + 1
        if ident not in out["identifications"] and len(out["identifications"]) < 8:
            out["identifications"].append(ident)
        if not ok:
            out["invalid"] += 1
            if len(out["first_invalid"]) < 3:
                out["first_invalid"].append(raw.hex())

    for raw in frames:
        take(raw)
    for path in args:
        with PcapReader(path) as r:
            for pkt in r:
                take(bytes(pkt))
    print(json.dumps(out))
    sys.exit(0 if out["invalid"] == 0 else 1)


if __name__ == "__main__":
    main()
