#!/usr/bin/env bash
# The GPU check, as one prepared script for a machine with an NVIDIA GPU: the environment, the
# test suite with the GPU as the default platform, then the benchmark runner's MLP step, SeLU
# layer and convnet SGD step under jit_ps on the GPU against plain autograd on the CPU and jax.jit
# on the same GPU (when jax is installed there), float32 and float64, within one deadline.
#
# Usage, from the repository root:  bash benchmarks/gpu_check.sh [OUTPUT_DIR]
#   PY (python3)  TESTS (tests/)  WORKERS (12; 0: no pytest-xdist)  END (525: seconds for it all)
#   BENCH (200: seconds kept for the benchmarks)
#
# Requirements there: jaxlib with a matching CUDA PJRT plugin (jax-cudaNN-pjrt and
# jax-cudaNN-plugin), numpy, scipy, pytest (pytest-xdist, pytest-timeout if present) and autograd
# 1.9.1. A machine without network access can be given autograd as a wheel in .whl/ (pip download
# --no-deps autograd==1.9.1 -d .whl), installed into its Python here, so that the tests' child
# processes find it too. autograd_xla is pinned to jaxlib 0.10.2; on another jaxlib, the runtime calls
# that moved between versions are in autograd_xla/clients.py (clients.result_handler among them).
set -uo pipefail
T0=$SECONDS
PY=${PY:-python3}; TESTS=${TESTS:-tests/}; WORKERS=${WORKERS:-12}; END=${END:-525}; BENCH=${BENCH:-200}
out="${1:-${OUT:-gpu_check_out}}"; mkdir -p "$out"
left() { echo $(( END - (SECONDS - T0) )); }
stamp() { echo "== [${SECONDS}s, $(left)s left] $*"; }
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

stamp "machine" | tee "$out/environment.txt"
{ nvidia-smi -L; $PY -V; nproc
  if ls .whl/*.whl >/dev/null 2>&1; then $PY -m pip install -q --no-index --no-deps .whl/*.whl || echo "wheel install failed"; fi
  timeout 90 $PY setup.py -q build_ext --inplace > "$out/build.log" 2>&1; echo "C extensions built: rc=$?"
  timeout 120 $PY - <<'PY'
import importlib, time
for name in ("numpy", "scipy", "autograd", "jaxlib", "jax"):
    try:
        m = importlib.import_module(name); print(f"{name} {getattr(m, '__version__', '?')}")
    except ImportError as e:
        print(f"{name} absent ({e})")
import numpy as onp
import autograd.numpy as np
import autograd_xla
from autograd_xla import backend, blas, clients, dispatch
print("C parts: _callpath", dispatch.native is not None, "| _blas", blas.native is not None)
print("cuda plugin:", clients.cuda_plugin())
print("devices:", autograd_xla.devices())
print("default platform:", autograd_xla.default_platform())
x = onp.random.randn(256, 256)
f = autograd_xla.jit_ps(lambda x: np.tanh(x @ x).sum(), fallback="error")
print("jit_ps on the default platform, against numpy:", f(x), onp.tanh(x @ x).sum())
PY
} 2>&1 | tee -a "$out/environment.txt"

T=$(( $(left) - BENCH )); [ $T -gt 320 ] && T=320
stamp "tests, the GPU as the default platform, at most ${T}s" | tee "$out/tests.txt"
XD=""; [ "$WORKERS" != 0 ] && $PY -c "import xdist" 2>/dev/null && XD="-n $WORKERS --dist loadfile"
TO=""; $PY -c "import pytest_timeout" 2>/dev/null && TO="--timeout 120"
# each worker takes a share of the GPU's memory, not most of it as jaxlib's client does by default
AUTOGRAD_XLA_PLATFORM=gpu XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout -s INT -k 20 $T \
    $PY -m pytest -q -p no:cacheprovider $XD $TO -rfE --tb=line "$TESTS" > "$out/tests.log" 2>&1
echo "pytest rc=$?" >> "$out/tests.txt"
grep -E "^(FAILED|ERROR) |passed|failed" "$out/tests.log" | cut -c1-300 | tail -120 >> "$out/tests.txt"
cat "$out/tests.txt"

for dt in float32 float64; do
    if [ $dt = float32 ]; then T=$(( ($(left) - 10) / 2 )); else T=$(( $(left) - 5 )); fi
    stamp "benchmarks, $dt, at most ${T}s"
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.4 timeout -s INT -k 10 $T $PY benchmarks/run.py --backend gpu \
        --only mlp_step,selu_fwd,selu_grad,convnet_step --quick --dtype $dt --json "$out/bench_$dt.json" \
        > "$out/bench_$dt.md" 2>&1
    echo "run.py rc=$?"; grep -v "^<!--" "$out/bench_$dt.md" | head -40
done
stamp "done"
