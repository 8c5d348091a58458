"""By hand, on a machine with a TPU: where a workload's first call goes, and how the program
jit_ps gives XLA differs from jax's, each side in a process of its own (one process holds
the chip):

    python3 benchmarks/tpu_program_probe.py jax DIR [CASE ...]
    python3 benchmarks/tpu_program_probe.py jit_ps DIR [CASE ...]

CASEs are benchmarks/tpu.py's (default: selu_grad_4096 mlp_step_b1024 selu_fwd_4096). Per
case, jax: its lowering's and XLA's compile's seconds (``lower().compile()``), its StableHLO
text and XLA's optimised HLO written to DIR; jit_ps: a fresh function's first call (numpy
in and out) with its trace, lowering and compile seconds (cache_info), its StableHLO text
and XLA's optimised HLO written to DIR; then, where jax's run left its text in DIR, jit_ps's
client compiles jax's text and jit_ps's alternately with jit_ps's compile options (2 rounds),
which tells a slower program from slower options. Each side prints the optimised programs'
instruction counts by opcode (fusions, dots, convolutions, copies, transposes) and the
fusions' kinds.
"""
import collections
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository's autograd_xla

import numpy as onp  # noqa: E402

import tpu  # noqa: E402
import workloads as w  # noqa: E402

DEFAULT = ["selu_grad_4096", "mlp_step_b1024", "selu_fwd_4096"]
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = [^ ]+ (\w[\w\-]*)\(", re.M)


def counts(hlo):
    """The entry computation's instruction counts by opcode, and the fusions' kinds."""
    entry = hlo[hlo.find("ENTRY"):]
    entry = entry[:entry.find("\n}\n") + 1] if "\n}\n" in entry else entry
    ops = collections.Counter(_INSTRUCTION.findall(entry))
    kinds = collections.Counter(re.findall(r"kind=(k\w+)", entry))
    return dict(ops.most_common()), dict(kinds)


def inputs(case):
    wname, make, _ = tpu.CASES[case]
    return w.BY_NAME[wname], make(onp.float32, onp.random.default_rng(0))


def write(directory, name, text):
    with open(os.path.join(directory, name), "w") as f:
        f.write(text)


def jax_side(directory, cases):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_default_matmul_precision", "highest")
    jax.jit(lambda v: v + 1)(onp.ones(3, onp.float32)).block_until_ready()  # the chip's start
    for case in cases:
        workload, args = inputs(case)
        f = jax.jit(workload.build_jax(jax, jnp))
        t0 = time.perf_counter()
        lowered = f.lower(*args)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        t3 = time.perf_counter()
        write(directory, f"{case}.jax.mlir", lowered.as_text())
        hlo = compiled.as_text()
        write(directory, f"{case}.jax.hlo", hlo)
        print(f"jax {case}: lowering {1e3 * (t1 - t0):.0f} ms, compile {1e3 * (t2 - t1):.0f} ms, first run "
              f"{1e3 * (t3 - t2):.0f} ms; StableHLO {len(lowered.as_text())} bytes; optimised {counts(hlo)}",
              flush=True)


def jit_ps_side(directory, cases):
    from autograd_xla import backend, jit_ps
    jit_ps(lambda v: v + 1, tiered=False)(onp.ones(3, onp.float32))  # the chip's start, the lazy imports
    be = backend.get_backend()
    devices = backend.xc.DeviceList((be.default_device,))
    for case in cases:
        workload, args = inputs(case)
        f = jit_ps(workload.build_autograd(), tiered=False, fallback="error")
        t0 = time.perf_counter()
        [onp.asarray(x) for x in tpu._leaves(f(*args))]
        first = time.perf_counter() - t0
        info = f.cache_info()
        text = f.lower(*args).as_text()
        write(directory, f"{case}.jit_ps.mlir", text)
        hlo = f.optimized_hlo(*args)
        write(directory, f"{case}.jit_ps.hlo", hlo)
        print(f"jit_ps {case}: first call {1e3 * first:.0f} ms: trace {1e3 * info['trace_seconds']:.0f}, lowering "
              f"{1e3 * info['lower_seconds']:.0f}, compile {1e3 * info['compile_seconds']:.0f} ms; StableHLO "
              f"{len(text)} bytes; optimised {counts(hlo)}", flush=True)
        theirs = os.path.join(directory, f"{case}.jax.mlir")
        if not os.path.exists(theirs):
            continue
        with open(theirs) as fh:
            texts = {"jax's": fh.read(), "jit_ps's": text}
        for r in range(2):
            for name in sorted(texts, reverse=bool(r % 2)):
                t = time.perf_counter()
                be.client.compile_and_load(texts[name], devices, be._options())
                print(f"  {case}: {name} text, jit_ps's client and options: compile "
                      f"{1e3 * (time.perf_counter() - t):.0f} ms", flush=True)


if __name__ == "__main__":
    side, directory, *chosen = sys.argv[1:]
    os.makedirs(directory, exist_ok=True)
    {"jax": jax_side, "jit_ps": jit_ps_side}[side](directory, chosen or DEFAULT)
