#!/usr/bin/env bash
# The GPU check of the platforms issue, as one prepared script for a machine with an NVIDIA GPU.
#
# It runs the test suite with the GPU as the default platform, then the benchmark runner's MLP
# step, SeLU layer and convnet SGD step under jit_ps on the GPU, against plain autograd on the
# CPU and jax.jit on the same GPU (when jax is installed there), all in one run.
#
# Usage, from the repository root:  bash benchmarks/gpu_check.sh [OUTPUT_DIR]
#
# Requirements on that machine: jaxlib with a matching CUDA PJRT plugin (jax-cuda12-pjrt or
# jax-cuda13-pjrt, plus jax-cudaNN-plugin for cuSOLVER), numpy, scipy, pytest, hypothesis and
# autograd 1.9.1. A machine without network access can be given autograd as a wheel in .whl/
# (pip download --no-deps autograd==1.9.1 -d .whl), which this script installs if present.
# autograd_xla is pinned to jaxlib 0.10.2; with another jaxlib the backend warns, and this
# script reports whether the private runtime surfaces it relies on are still there.
set -uo pipefail
out="${1:-${OUT:-gpu_check_out}}"
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/agx_site .whl/*.whl && export PYTHONPATH="/tmp/agx_site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1

python3 - <<'PY' 2>&1 | tee "$out/environment.txt"
import importlib, sys
for name in ("numpy", "scipy", "autograd", "jaxlib", "jax"):
    try:
        m = importlib.import_module(name); print(f"{name} {getattr(m, '__version__', '?')}")
    except ImportError as e:
        print(f"{name} absent ({e})")
import autograd_xla
from autograd_xla import backend
print("cuda plugin:", backend.cuda_plugin())
print("devices:", autograd_xla.devices())
print("default platform:", autograd_xla.default_platform())
PY

echo "== tests with the GPU as the default platform" | tee "$out/tests.txt"
AUTOGRAD_XLA_PLATFORM=gpu timeout 1500 python3 -m pytest -q -p no:cacheprovider -x --maxfail=20 tests/ 2>&1 | tail -60 | tee -a "$out/tests.txt"

echo "== benchmarks: jit_ps and jax.jit on the GPU, plain autograd on the CPU" | tee "$out/bench.md"
timeout 1500 python3 benchmarks/run.py --backend gpu --only mlp_step,selu_fwd,selu_grad,convnet_step \
    --json "$out/bench.json" 2>&1 | tee -a "$out/bench.md"
