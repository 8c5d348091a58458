"""XLA:CPU's two code generators for fused loops, on the benchmarks' programs: compile time,
run time and whether the results are the same bits.

    python benchmarks/emitters.py [--quick] [--only logreg,hmm_grad]

A signature's first program is compiled with `backend.FAST_COMPILE_OVERRIDES` (XLA's legacy IR
emitters), the program with XLA's default options (its fusion emitters) is tried later
(`autograd_xla.tiering.Ladder`). For each program here (the StableHLO jit_ps gives XLA), both
are compiled --repeat times, alternately (median), and run alternately in interleaved samples
(median per call), with the arguments jit_ps passes; the results of one run of each are
compared bit for bit. Prints a markdown table.
"""
import argparse
import os
import statistics
import sys
import time

import jaxlib
import numpy as onp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from autograd import grad, hessian_tensor_product  # noqa: E402

from autograd_xla import backend, jit_ps, tiering  # noqa: E402
import procs  # noqa: E402
import table1  # noqa: E402
import timing  # noqa: E402
import workloads  # noqa: E402


def programs():
    """{name: (function, args)}: the runner's workloads (float64) and Table 1's three derivatives."""
    rng = onp.random.default_rng(0)
    out = {}
    for name in ("logreg", "mlp_step", "selu_fwd", "selu_grad", "poly_big", "add_one_1e6", "tiny_grad"):
        wl = workloads.BY_NAME[name]
        out[name] = (wl.build_autograd(), wl.make_inputs(onp.float64, rng))
    for problem in ("quadratic", "hmm", "logreg"):
        f, _, x0, _ = table1.PROBLEMS[problem](onp.random.RandomState(0))
        p = onp.random.RandomState(1).randn(x0.size)
        out[f"{problem}_grad"] = (grad(f), (x0,))
        out[f"{problem}_hvp"] = (hessian_tensor_product(f), (x0, p))
    return out


def compiled_pair(fun, args, repeat):
    """Two jit_ps functions of `fun`, one kept on each program (no ladder), and the median
    compile seconds of each program's text."""
    cpu = backend.get_backend("cpu")
    fast = cpu.fast_compile_options()
    text = jit_ps(fun).lower(*args).as_text()
    seconds = {"legacy": [], "default": []}
    for k in range(repeat):
        for name, options in (("legacy", fast), ("default", None)):
            t0 = time.perf_counter()
            cpu.client.compile_and_load(text + f"\n// {k} {name}", backend.xc.DeviceList((cpu.default_device,)),
                                        options or backend.xc.CompileOptions())
            seconds[name].append(time.perf_counter() - t0)
    tiering.UPGRADE_RENT = None  # each keeps its first program ...
    legacy = jit_ps(fun)
    legacy(*args)
    fast_overrides = list(backend.FAST_COMPILE_OVERRIDES)
    backend.FAST_COMPILE_OVERRIDES[:] = [("xla_cpu_use_fusion_emitters", True)]  # ... this one the default's
    try:
        default = jit_ps(fun)
        default(*args)
    finally:
        backend.FAST_COMPILE_OVERRIDES[:] = fast_overrides
    return legacy, default, {k: statistics.median(v) for k, v in seconds.items()}


def same_bits(a, b):
    return all(onp.array_equal(onp.asarray(x), onp.asarray(y), equal_nan=True)
               for x, y in zip(procs.leaves_of(a), procs.leaves_of(b)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 compiles and 7 samples each")
    p.add_argument("--only", help="comma-separated program names")
    args = p.parse_args(argv)
    repeat, samples = (3, 7) if args.quick else (5, 15)
    table = programs()
    names = args.only.split(",") if args.only else list(table)
    rows = []
    for name in names:
        fun, call_args = table[name]
        legacy, default, compile_seconds = compiled_pair(fun, call_args, repeat)
        runs, _ = timing.interleaved({"legacy": (legacy, call_args), "default": (default, call_args)}, samples, 0.02)
        run = {k: statistics.median(v) for k, v in runs.items()}
        rows.append(f"| {name} | {compile_seconds['default'] * 1e3:.1f} ms | {compile_seconds['legacy'] * 1e3:.1f} ms | "
                    f"{compile_seconds['legacy'] / compile_seconds['default']:.2f} | {timing.format_seconds(run['default'])} | "
                    f"{timing.format_seconds(run['legacy'])} | {run['legacy'] / run['default']:.2f} | "
                    f"{'yes' if same_bits(legacy(*call_args), default(*call_args)) else 'no'} |")
        print(f"<!-- {name} done -->", file=sys.stderr, flush=True)
    print(f"XLA:CPU's emitters, jaxlib {jaxlib.__version__}; load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs\n")
    print("| program | compile: default | legacy | legacy / default | run: default | legacy | legacy / default | same bits |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
