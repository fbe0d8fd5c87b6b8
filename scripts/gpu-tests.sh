#!/usr/bin/env bash
# GPU tests and benchmark, in two halves (the GPU machine has no Rust):
#   bash scripts/gpu-tests.sh build   # on the Rust machine: release binary + test binaries -> .carry/
#   bash scripts/gpu-tests.sh run     # on the GPU machine (carry .carry): runs the ignored GPU tests
#   bash scripts/gpu-tests.sh bench OUT_DIR [NAME]  # on the GPU machine: the latency benchmark
#   bash scripts/gpu-tests.sh decoders OUT_DIR [NAME] # on the GPU machine: the decoders against
#       PyMatching on fresh stim shots, CPU and GPU (scripts/bench_decoders.py; stim and
#       PyMatching from the carried wheels)
#   bash scripts/gpu-tests.sh qec OUT_DIR [NAME]    # on the GPU machine: the QEC benchmark
#       (rocelink bench-qec, PyMatching from the carried wheel), with its fixed 1 us syndrome
#       cycle runs beside their echo floors
# With the device tool: run(command="bash scripts/gpu-tests.sh run", carry=[".carry"]).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    cargo build --release --bin rocelink
    mkdir -p .carry
    # .carry/ stays out of git (and out of the tree the device tool copies unless carried); in
    # a worktree .git is a file, and the exclude file is the common git directory's
    exclude="$(git rev-parse --git-common-dir)/info/exclude"
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.carry/' "$exclude" 2>/dev/null || echo '/.carry/' >> "$exclude"
    strip target/release/rocelink -o .carry/rocelink
    # test binaries: the root package's GPU tests; the QEC decoder's GPU-vs-CPU test (operator
    # crate, it reads the committed fixtures); the device verbs layer's WQEs on the GPU,
    # executed by the software NIC (operator crate); the transceiver kernel against the CPU's
    # echo stage on a stream of changing sizes (operator crate); the bridge provider's ring
    # served by the GPU dispatch kernel (cudaq-bridge crate)
    carry_test() { # carry_test TEST OUT [cargo args...]: strips the test binary TEST to .carry/OUT
      local name=$1 out=$2; shift 2
      local exe
      exe=$(cargo test --release "$@" --test "$name" --no-run --message-format=json 2>/dev/null \
            | python3 -c 'import sys,json
name=sys.argv[1]
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]==name and m.get("executable"): print(m["executable"])' "$name")
      strip "$exe" -o ".carry/$out"
    }
    carry_test gpu gpu-tests
    carry_test qec_gpu_match qec-gpu-tests -p rocelink-operator
    carry_test verbs_gpu verbs-gpu-tests -p rocelink-operator
    carry_test transceiver_gpu transceiver-gpu-tests -p rocelink-operator
    # the CUDA-Q bridge provider served by rocelink's GPU dispatch kernel (cudaq-bridge crate)
    carry_test gpu_dispatch cudaq-gpu-tests -p rocelink-cudaq-bridge
    # PyMatching for bench-qec's single-shot column: the GPU machine has no network, and its
    # python3 (3.12) has numpy, scipy, networkx and matplotlib but not pymatching
    mkdir -p .carry/wheels
    ls .carry/wheels/pymatching-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .carry/wheels pymatching==2.4.0 \
        || echo "no PyMatching wheel: bench-qec will skip its column" >&2
    # stim, for the decoder benchmark's fresh circuits
    ls .carry/wheels/stim-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .carry/wheels 'stim==1.16.*' \
        || echo "no stim wheel: the decoder benchmark cannot run there" >&2
    # sinter (pure Python, published as source only: built into a wheel here), for the sinter
    # decoder's test on the GPU backend
    ls .carry/wheels/sinter-*.whl >/dev/null 2>&1 || python3 -m pip wheel -q --no-deps -w .carry/wheels 'sinter==1.16.*' \
        || echo "no sinter wheel: its GPU test cannot run there" >&2
    ls -la .carry
    ;;
  run)
    # Every binary runs, whatever the ones before it did; each one's result is listed at the
    # end, and the exit status is 1 when any failed. The tests find the tree's files (QEC
    # fixtures, graphs) through ROCELINK_REPO_ROOT: this copy of the tree, not the one they
    # were built in.
    export ROCELINK_BIN="$PWD/.carry/rocelink"
    export ROCELINK_REPO_ROOT="$PWD"
    nvidia-smi -L || true
    results=()
    failed=0
    run_bin() { # run_bin NAME [args...]: runs .carry/NAME, records its result
      local name=$1; shift
      echo "== $name"
      local rc=0
      if [ ! -x ".carry/$name" ]; then
        echo "missing: .carry/$name (bash scripts/gpu-tests.sh build)" >&2
        rc=127
      else
        "./.carry/$name" "$@" || rc=$?
      fi
      if [ "$rc" -eq 0 ]; then results+=("pass  $name"); else results+=("FAIL  $name (exit $rc)"); failed=1; fi
    }
    run_bin gpu-tests --ignored --test-threads 1 "${@:2}"
    run_bin qec-gpu-tests --ignored --test-threads 1
    run_bin verbs-gpu-tests --ignored --test-threads 1
    run_bin transceiver-gpu-tests --ignored --test-threads 1
    run_bin cudaq-gpu-tests --ignored --test-threads 1 --nocapture
    # rocelink as a sinter decoder on the GPU stage (python/test_rocelink_sinter.py --gpu)
    echo "== sinter-gpu"
    if ! python3 -c 'import pymatching, stim, sinter' 2>/dev/null && ls .carry/wheels/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rl-site .carry/wheels/*.whl
    fi
    if PYTHONPATH=/tmp/rl-site${PYTHONPATH:+:$PYTHONPATH} python3 python/test_rocelink_sinter.py --gpu; then
      results+=("pass  sinter-gpu")
    else
      results+=("FAIL  sinter-gpu"); failed=1
    fi
    echo "== results"
    printf '%s\n' "${results[@]}"
    exit "$failed"
    ;;
  bench)
    out=${2:?out dir}; name=${3:-gpu-echo}
    cores=$(bash scripts/pick-cores.sh 3)
    ./.carry/rocelink bench --gpu 0 --sizes 32,64,256,1024 --count "${COUNT:-100000}" --cores "$cores" --spin dedicated --out "$out" --name "$name"
    ;;
  decoders)
    out=${2:?out dir}; name=${3:-qec-decoders}
    if ! python3 -c 'import pymatching, stim' 2>/dev/null && ls .carry/wheels/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rl-site .carry/wheels/*.whl && export PYTHONPATH=/tmp/rl-site
    fi
    python3 scripts/bench_decoders.py --rocelink ./.carry/rocelink --backends "${BACKENDS:-cpu,gpu}" --out-dir "$out" --name "$name" \
      --distances "${DISTANCES:-3,5,7,9,11,13}" --ps "${PS:-0.001,0.003,0.005}" --shots "${SHOTS:-20000}" --large-shots "${LARGE_SHOTS:-10000}"
    ;;
  qec)
    out=${2:?out dir}; name=${3:-bench-qec}
    if ! python3 -c 'import pymatching' 2>/dev/null && ls .carry/wheels/pymatching-*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rl-site .carry/wheels/*.whl && export PYTHONPATH=/tmp/rl-site
    fi
    cores4=$(bash scripts/pick-cores.sh 4)
    cores=${cores4%,*}
    # FIXTURES (scripts/qec_fixtures.py's folders), DISTANCES, PS, BACKENDS and WIRES choose the
    # runs, CYCLE_FIXTURES (comma-separated folder names, `none`) and CYCLE_ROUNDS the fixed
    # 1 us cycle runs beside their echo floors, CPU_SETTLE (in-loop, idle, beside) where the CPU
    # stage does its streaming work (beside: its worker on a fourth core); the defaults are
    # bench-qec's own
    fx=${FIXTURES:-operator/tests/fixtures/qec}
    settle=()
    [ "${CPU_SETTLE:-}" = beside ] && settle=(--cpu-settle beside --settle-core "${cores4##*,}")
    [ "${CPU_SETTLE:-}" = in-loop ] && settle=(--cpu-settle in-loop)
    [ "${CPU_SETTLE:-}" = idle ] && settle=(--cpu-settle idle)
    ./.carry/rocelink bench-qec --shots "${SHOTS:-5000}" --warmup "${WARMUP:-100}" --fixtures "$fx" \
      ${DISTANCES:+--distances "$DISTANCES"} ${PS:+--ps "$PS"} ${BACKENDS:+--backends "$BACKENDS"} ${WIRES:+--wires "$WIRES"} \
      ${CYCLE_FIXTURES:+--cycle-fixtures "$CYCLE_FIXTURES"} ${CYCLE_ROUNDS:+--cycle-rounds "$CYCLE_ROUNDS"} "${settle[@]}" \
      --cores "$cores" --spin dedicated --out "$out" --name "$name"
    ;;
  *) echo "usage: $0 build | run [test filter] | bench OUT_DIR [NAME] | decoders OUT_DIR [NAME] | qec OUT_DIR [NAME]" >&2; exit 2 ;;
esac
