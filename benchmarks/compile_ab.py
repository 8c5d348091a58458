"""Where a first call's compile differs from jax's: XLA compiles jit_ps's program and jax's
program of one workload, each with jit_ps's compile options and with jax's, each compile
the first of a fresh process (as a first call's is), in turn.

    python benchmarks/compile_ab.py selu_grad_4096 [--runs 3]

The workloads and sizes are benchmarks/tpu.py's CASES, float32, on the default platform (the
TPU where there is one). jax's program text is made once, in a process of its own (jax and
autograd_xla each open the chip, which one process at a time may hold); the compiles then
run on autograd_xla's client. jax's options are those jax.jit compiles with (its
get_compile_options defaults: memory_fitting_level O2, SPMD partitioning on, one device
assigned); jit_ps's are backend.Backend.compile's. Prints the median seconds of each
(program, options) pair.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

JAX_MEMORY_FITTING_LEVEL = 29  # jax's EffortLevel.O2, its jax_memory_fitting_level default


def _inputs(case):
    import numpy as onp
    import tpu
    import workloads as w
    wname, make, _ = tpu.CASES[case]
    return w.BY_NAME[wname], make(onp.float32, onp.random.default_rng(0))


def _jax_text(case, path):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_default_matmul_precision", "highest")
    workload, args = _inputs(case)
    with open(path, "w") as fh:
        fh.write(jax.jit(workload.build_jax(jax, jnp)).lower(*args).as_text())


def _compile(case, program, options, jax_path):
    """Seconds of XLA's compile of `program` ('jit_ps' or 'jax') with `options` in this process."""
    import numpy
    from jaxlib import xla_client as xc

    import autograd_xla
    backend = autograd_xla.backend.get_backend()
    workload, args = _inputs(case)
    if program == "jax":
        with open(jax_path) as fh:
            text = fh.read()
    else:
        text = autograd_xla.jit_ps(workload.build_autograd(), fallback="error").lower(*args).as_text()
    compile_options = backend._options()
    if options == "jax":
        build = compile_options.executable_build_options
        build.memory_fitting_level = JAX_MEMORY_FITTING_LEVEL
        build.use_spmd_partitioning = True
        compile_options.device_assignment = xc.DeviceAssignment.create(
            numpy.array([[backend.default_device.id]], numpy.int32))
    devices = xc.DeviceList((backend.default_device,))
    t = time.perf_counter()
    backend.client.compile_and_load(text, devices, compile_options)
    return time.perf_counter() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("case")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--child", nargs=3, metavar=("PROGRAM", "OPTIONS", "JAX_TEXT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(_compile(a.case, *a.child)))
        return
    me = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        jax_path = os.path.join(tmp, "jax.mlir")
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import compile_ab; "
                        f"compile_ab._jax_text({a.case!r}, {jax_path!r})"], check=True)
        pairs = [(program, options) for program in ("jit_ps", "jax") for options in ("jit_ps", "jax")]
        seconds = {pair: [] for pair in pairs}
        for _ in range(a.runs):
            for pair in pairs:
                out = subprocess.run([sys.executable, me, a.case, "--child", *pair, jax_path], check=True,
                                     capture_output=True, text=True).stdout
                seconds[pair].append(json.loads(out.strip().splitlines()[-1]))
    for (program, options), ts in seconds.items():
        print(f"{a.case}: {program}'s program, {options}'s options: median {statistics.median(ts):.3f} s "
              f"({', '.join(f'{t:.3f}' for t in ts)})")


if __name__ == "__main__":
    main()
