#!/usr/bin/env bash
# The TPU check, as one prepared script for a machine with a TPU (one chip, jax/jaxlib/libtpu
# installed, no network, commands of at most 10 minutes): the environment, the test suite with
# the TPU as the default platform in chunks, and benchmarks/tpu.py's jit_ps against jax.jit on
# the same chip, each contender in a process of its own (one process holds the chip at a time).
#
# Usage, from the repository root:  bash benchmarks/tpu_check.sh STEP  (logs in $OUT, else tpu_check_out)
#   STEP: setup           install autograd's wheel, build the C parts, print the environment
#         tests K/N       setup, then chunk K of N of the test files (balanced by their size)
#         tests cpu       setup, then the files of the CPU's features (conftest.CPU_FILES), apart
#         tests FILE...   setup, then these test files or node ids (TESTS="..." for several);
#                         `tests $(sed -n Kp benchmarks/tpu_chunks.txt)`, K = 1, 2: the TPU's
#                         files split by their measured time there (6 and 7 minutes of tests)
#         bench           setup, then the benchmarks and their table
#   FIRST_ROUNDS (0: more processes per side that measure first calls alone, alternating;
#   the table gives each side's median) FIRST_ONLY (their workloads: the five shortest compiles)
#   ROUNDS (1: processes per side that measure everything, alternating; the table gives medians)
#   PY (python3)  END (520: seconds for the step)  MEM_GB (24: the host memory at which the
#   tests are stopped)  WHEELS (.whl-tpu: autograd 1.9.1 as a wheel, pip download --no-deps
#   --only-binary=:all: autograd==1.9.1 -d .whl-tpu)  BENCH_ONLY (workloads of benchmarks/tpu.py)
#   PYTEST_ARGS (-v: each test named as it runs, so that a run stopped by its time still says
#   which ran: ran_NAME.txt)  TEST_TIMEOUT (120: seconds a test may run; then it fails and the
#   stacks of all threads go to hangs_NAME.log)  DONE (a file of node ids that this run leaves
#   out, one a line: the ran_*.txt of earlier commands, concatenated, so that the suite goes on
#   across commands: `tests 1/1` with DONE runs what is left of the whole suite)
#
# Host memory is watched all along (the sum of this user's processes' resident memory, every
# quarter second, into memory.log): past MEM_GB the test run is stopped, so a test can never take the
# machine down (one once drove the host past 28 GiB and its memory limit killed the whole run); past
# 8 GiB each new GiB logs the processes that hold the most and the last test named (a process
# holding the chip had 13.8 GiB resident).
set -uo pipefail
T0=$SECONDS
PY=${PY:-python3}; END=${END:-520}; MEM_GB=${MEM_GB:-24}; WHEELS=${WHEELS:-.whl-tpu}
step="${1:-setup}"; shift || true
out="${OUT:-tpu_check_out}"  # (the device tool's $OUT, whose files come back)
mkdir -p "$out"
left() { echo $(( END - (SECONDS - T0) )); }
stamp() { echo "== [${SECONDS}s, $(left)s left] $*"; }
export PYTHONUNBUFFERED=1

setup() {
    stamp "setup" | tee -a "$out/environment.txt"
    {
        if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
            PIP_CONFIG_FILE=/dev/null $PY -m pip install --isolated -q --no-index --no-deps --no-compile \
                --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || echo "wheel install failed"
        fi
        export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site"
        # the tests' own processes replace PYTHONPATH (with the repository's root): jax, jaxlib and
        # autograd must be found without it, through a .pth file in the user's site-packages
        local site; site=$($PY -m site --user-site) && mkdir -p "$site" && \
            echo "${PYTHONPATH#$PWD:}" | tr ':' '\n' > "$site/autograd_xla_tpu_check.pth"
        echo "overcommit_memory: $(cat /proc/sys/vm/overcommit_memory)  (1: any allocation succeeds until touched)"
        timeout 120 $PY setup.py -q build_ext --inplace > "$out/build.log" 2>&1; echo "C parts built: rc=$?"
        timeout 120 $PY - <<'PY'
import importlib, platform
print("python", platform.python_version(), "glibc", platform.libc_ver()[1])
for name in ("numpy", "scipy", "autograd", "jaxlib", "jax", "pytest"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "?"))
    except ImportError as e:
        print(name, "absent", e)
import numpy as onp
import autograd.numpy as np
import autograd_xla
from autograd_xla import blas, dispatch
print("C parts: _callpath", dispatch.native is not None, "| _blas", blas.native is not None)
print("devices:", autograd_xla.devices(), "| default platform:", autograd_xla.default_platform())
x = onp.random.RandomState(0).randn(256, 256).astype("float32")
f = autograd_xla.jit_ps(lambda x: np.tanh(x @ x).sum(), fallback="error")
print("jit_ps float32 on the TPU against numpy:", f(x), onp.tanh(x.astype("float64") @ x).sum())
PY
    } 2>&1 | tee -a "$out/environment.txt"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site"
}

watch_memory() {  # $1: the PID to stop past MEM_GB; writes memory.log, the peak last
    local pid=$1 peak=0 kb shown=0
    while kill -0 "$pid" 2>/dev/null; do
        kb=$(ps -u "$(id -u)" -o rss= | awk '{s += $1} END {print s + 0}')
        [ "$kb" -gt "$peak" ] && peak=$kb
        # past 8 GiB, each new GiB: the processes that hold it (a sum of RSS counts shared pages
        # once per process that maps them)
        if [ "$kb" -gt $(( (shown + 1) * 1024 * 1024 )) ] && [ "$kb" -gt $(( 8 * 1024 * 1024 )) ]; then
            shown=$(( kb / 1024 / 1024 ))
            { echo "[${SECONDS}s] $(( kb / 1024 )) MiB in all:"
              ps -u "$(id -u)" -o pid=,ppid=,rss=,etime=,args= --sort=-rss | head -5 | cut -c1-200
              echo "  tests last named: $(grep -aoE '^tests/[^ ]+' "$out"/tests_*.log 2>/dev/null | tail -1)"
            } >> "$out/memory.log"
        fi
        if [ "$kb" -gt $(( MEM_GB * 1024 * 1024 )) ]; then
            echo "host memory $(( kb / 1024 )) MiB > ${MEM_GB} GiB: stopping the tests" | tee -a "$out/memory.log"
            kill -INT "$pid"; sleep 5; kill -KILL "$pid" 2>/dev/null
        fi
        sleep 0.25
    done
    echo "peak resident memory of this user's processes: $(( peak / 1024 )) MiB" >> "$out/memory.log"
}

chunk() {  # the test files of chunk $1 of $2, balanced by their bytes; "cpu": tests/conftest.py's CPU_FILES
    $PY - "$1" "${2:-0}" <<'PY'
import ast, os, sys
# CPU_FILES run on the CPU whatever the platform, in a process of their own: jaxlib's
# device-to-host copy imports jax.core where jax is installed, and jax's C++ states then
# serve the C++ call path these files test (dispatch._jax_states)
tree = ast.parse(open("tests/conftest.py").read())
cpu = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
           and getattr(node.targets[0], "id", None) == "CPU_FILES")
if sys.argv[1] == "cpu":
    print(" ".join("tests/" + f for f in sorted(cpu)))
    sys.exit()
k, n = int(sys.argv[1]), int(sys.argv[2])
files = sorted((os.path.getsize(os.path.join("tests", f)), f) for f in os.listdir("tests")
               if f.startswith("test_") and f.endswith(".py") and f not in cpu)
bins = [[0, []] for _ in range(n)]
for size, f in reversed(files):
    b = min(bins, key=lambda b: b[0]); b[0] += size; b[1].append("tests/" + f)
print(" ".join(sorted(bins[k - 1][1])))
PY
}

run_tests() {  # $1: a name for the logs; the rest: pytest's selection
    local name=$1; shift
    local T=$(( $(left) - 15 ))
    stamp "tests $name, the TPU as the default platform, at most ${T}s: $*" | tee -a "$out/tests_$name.txt"
    AUTOGRAD_XLA_PLATFORM=tpu AUTOGRAD_XLA_TEST_TIMEOUT=${TEST_TIMEOUT:-120} AUTOGRAD_XLA_TEST_TIMEOUT_LOG="$out/hangs_$name.log" \
        AUTOGRAD_XLA_TESTS_DONE=${DONE:+$(realpath "$DONE")} \
        timeout -s INT -k 20 $T $PY -m pytest ${PYTEST_ARGS:--v} -p no:cacheprovider -rfEs --tb=line \
        --durations=20 --junitxml="$out/junit_$name.xml" "$@" > "$out/tests_$name.log" 2>&1 &
    local pid=$!
    watch_memory $pid &
    wait $pid; echo "pytest rc=$?" >> "$out/tests_$name.txt"
    wait
    grep -E "^tests/.* (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR) +\[" "$out/tests_$name.log" \
        | sed -E 's/ (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR) +\[.*$//' > "$out/ran_$name.txt"
    echo "$(wc -l < "$out/ran_$name.txt") tests ran (ran_$name.txt)" >> "$out/tests_$name.txt"
    grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" "$out/tests_$name.log" | cut -c1-240 | tail -150 >> "$out/tests_$name.txt"
    cat "$out/memory.log" >> "$out/tests_$name.txt"
    tail -160 "$out/tests_$name.txt"
}

bench() {
    local only=${BENCH_ONLY:-} r n=$(( 2 * ${ROUNDS:-1} )) side
    for (( r = 1; r <= ${ROUNDS:-1}; r++ )); do  # each side's processes alternating
        for side in jax jit_ps; do
            n=$(( n - 1 )); local T=$(( $(left) - 40 - 100 * n ))  # (100 s kept for each process after it)
            (( T < 60 )) && T=60  # (a short END: the processes after this one get what is left)
            stamp "benchmarks, round $r, $side, at most ${T}s"
            timeout -s INT -k 10 $T $PY benchmarks/tpu.py run $side ${only:+--only $only} \
                --json "$out/bench_${side}_round$r.json" 2>&1 | grep -v "hugepages" | tee "$out/bench_${side}_round$r.log"
        done
    done
    for (( r = 1; r <= ${FIRST_ROUNDS:-0}; r++ )); do  # more first calls, each side's processes alternating
        for side in jax jit_ps; do
            stamp "first calls, round $r, $side"
            timeout -s INT -k 10 $(( $(left) / 2 )) $PY benchmarks/tpu.py run $side --first-only \
                --only ${FIRST_ONLY:-powers_1000,powers_5000,mlp_step_b1024,logreg_1e5x1000,tiny_grad} \
                --json "$out/bench_${side}_first$r.json" 2>&1 | grep -v "hugepages"
        done
    done
    stamp "benchmarks, numpy on the host (the powers)"
    timeout -s INT -k 10 $(( $(left) - 5 )) $PY benchmarks/tpu.py run numpy --only powers_1000,powers_5000 \
        --json "$out/bench_numpy.json" 2>&1 | tee "$out/bench_numpy.log"
    $PY benchmarks/tpu.py table "$out"/bench_*.json | tee "$out/bench_table.md"
}

case "$step" in
    setup) setup ;;
    tests)
        setup
        if [[ "${1:-}" =~ ^[0-9]+/[0-9]+$ ]]; then
            run_tests "${1%/*}of${1#*/}" $(chunk "${1%/*}" "${1#*/}")
        elif [ "${1:-}" = cpu ]; then
            run_tests cpu $(chunk cpu)
        else
            run_tests "${TESTS_NAME:-selected}" "$@"
        fi ;;
    bench) setup; bench ;;
    *) echo "unknown step $step (setup, tests K/N, tests FILE..., bench)"; exit 2 ;;
esac
stamp "done"
