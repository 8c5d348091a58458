"""By hand, on a machine with a TPU: how fast XLA's programs of one workload run on the chip,
jax's StableHLO text against jit_ps's and against jit_ps's with autograd's derivative of tanh
written other ways, each compiled by jit_ps's client and run by it in one process (after
``tpu_program_probe.py jax DIR CASE`` left jax's text in DIR):

    python3 benchmarks/tpu_variants_probe.py DIR [CASE]

Variants: jax (jax's text), ours (jit_ps's), ans (tanh's VJP as ``g * (1 - ans ** 2)``, jax's
form), exp1 (``g * 4e / (1 + e) ** 2`` with ``e = exp(-2|x|)``). Each program runs on
random arguments of its parameters' shapes, kept on the chip: per round, 200 calls in a row
waited for at the end (the chip's pace) and 50 calls each waited for (launch and pace);
rounds alternate the variants; medians of 7 rounds, µs a call.
"""
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as onp  # noqa: E402

import tpu_program_probe as probe  # noqa: E402


def derivative(form):
    import autograd.numpy as anp
    from autograd.extend import defvjp
    if form == "ans":
        defvjp(anp.tanh, lambda ans, x: lambda g: g * (1 - ans ** 2))
    elif form == "exp1":
        def vjp(ans, x):
            e = anp.exp(-2 * anp.abs(x))
            return lambda g: g * (4 * e / (1 + e) ** 2)
        defvjp(anp.tanh, vjp)
    else:
        defvjp(anp.tanh, lambda ans, x: lambda g: g / anp.cosh(x) ** 2)


def parameters(text):
    sig = text[text.find("@main("):]
    sig = sig[:sig.find(")")]
    return [(tuple(int(d) for d in dims.split("x")[:-1]), dims.split("x")[-1])
            for dims in re.findall(r"tensor<([0-9x]+x?f32|f32)>", sig)]


def main(directory, case="mlp_step_b1024"):
    from autograd_xla import backend, jit_ps
    jit_ps(lambda v: v + 1, tiered=False)(onp.ones(3, onp.float32))
    be = backend.get_backend()
    devices = backend.xc.DeviceList((be.default_device,))
    workload, args = probe.inputs(case)
    texts = {}
    with open(os.path.join(directory, f"{case}.jax.mlir")) as fh:
        texts["jax"] = fh.read()
    for form in ("ours", "ans", "exp1"):
        derivative(form)
        texts[form] = jit_ps(workload.build_autograd(), tiered=False).lower(*args).as_text()
        print(form, "ops:", texts[form].count(" = \""), "cosh:", texts[form].count("cosh"), flush=True)
    derivative("ours")
    rng = onp.random.default_rng(0)
    runs = {}
    for name, text in texts.items():
        exe = be.client.compile_and_load(text, devices, be._options())
        bufs = [be.put(rng.standard_normal(shape).astype(onp.float32) * 0.1) for shape, _ in parameters(text)]
        runs[name] = (exe, bufs)
    def go(exe, bufs):
        return exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
    def wait(outs):
        for o in outs:
            o[0].block_until_ready()
    for exe, bufs in runs.values():
        for _ in range(20):
            wait(go(exe, bufs))
    pace, synced = {n: [] for n in runs}, {n: [] for n in runs}
    for r in range(7):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            exe, bufs = runs[name]
            t = time.perf_counter()
            for _ in range(200):
                outs = go(exe, bufs)
            wait(outs)
            pace[name].append(1e6 * (time.perf_counter() - t) / 200)
            t = time.perf_counter()
            for _ in range(50):
                wait(go(exe, bufs))
            synced[name].append(1e6 * (time.perf_counter() - t) / 50)
    for name in runs:
        print(f"{case} {name:5s}: in a row {statistics.median(pace[name]):7.1f} µs "
              f"({min(pace[name]):.1f}-{max(pace[name]):.1f}), each waited for "
              f"{statistics.median(synced[name]):7.1f} ({min(synced[name]):.1f}-{max(synced[name]):.1f})", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
