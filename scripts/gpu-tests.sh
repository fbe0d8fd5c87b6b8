#!/usr/bin/env bash
# GPU tests and benchmark, in two halves (the GPU machine has no Rust):
#   bash scripts/gpu-tests.sh build   # on the Rust machine: release binary + test binaries -> .carry/
#   bash scripts/gpu-tests.sh run     # on the GPU machine (carry .carry): runs the ignored GPU tests
#   bash scripts/gpu-tests.sh bench OUT_DIR [NAME]  # on the GPU machine: the latency benchmark
# With the device tool: run(command="bash scripts/gpu-tests.sh run", carry=[".carry"]).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    cargo build --release --bin rocelink
    mkdir -p .carry
    grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
    strip target/release/rocelink -o .carry/rocelink
    # test binaries of the root package's GPU tests
    exe=$(cargo test --release --test gpu --no-run --message-format=json 2>/dev/null \
          | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="gpu" and m.get("executable"): print(m["executable"])')
    strip "$exe" -o .carry/gpu-tests
    # the QEC decoder's GPU-vs-CPU test (operator crate); it reads the committed fixtures
    exe=$(cargo test --release -p rocelink-operator --test qec_gpu_match --no-run --message-format=json 2>/dev/null \
          | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="qec_gpu_match" and m.get("executable"): print(m["executable"])')
    strip "$exe" -o .carry/qec-gpu-tests
    ls -la .carry
    ;;
  run)
    export ROCELINK_BIN="$PWD/.carry/rocelink"
    nvidia-smi -L
    ./.carry/gpu-tests --ignored --test-threads 1 "${@:2}"
    # run from the operator folder: the test finds its fixtures relative to it
    (cd operator && ../.carry/qec-gpu-tests --ignored --test-threads 1)
    ;;
  bench)
    out=${2:?out dir}; name=${3:-gpu-echo}
    cores=$(bash scripts/pick-cores.sh 3)
    ./.carry/rocelink bench --gpu 0 --sizes 32,64,256,1024 --count "${COUNT:-100000}" --cores "$cores" --spin dedicated --out "$out" --name "$name"
    ;;
  *) echo "usage: $0 build | run [test filter] | bench OUT_DIR [NAME]" >&2; exit 2 ;;
esac
