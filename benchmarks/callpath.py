"""Where a tiny jitted call spends its time: jit_ps's per-call paths stage by stage, beside jax.jit.

    python benchmarks/callpath.py [--workload tiny|tiny_grad] [--repeat N]

A diagnostic for whoever optimises the call path. It reaches into jit_ps internals
(JittedFunction._split, the signature cache, backend.Executable's fields), so it may need
updating when those change; run.py does not depend on it. Each stage is timed on its own,
interleaved with the others, in microseconds per call (median of samples).

A call goes through jaxlib's C++ dispatch where its signature qualifies (autograd_xla/dispatch.py:
C++ flattens, looks up, puts and runs; where _callpath.c is built, C stages the arguments before
and makes the numpy results after), else through the Python path (JittedFunction._call_python:
flatten, signature, lookup, backend.Executable). Both are shown; "C++ call alone" and "Python
after it" are C++ given the numpy argument (no staging) and the results finished in Python.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as onp  # noqa: E402

import timing  # noqa: E402
from workloads import BY_NAME  # noqa: E402


def jit_ps_stages(wl, x):
    from jaxlib import xla_client as xc

    from autograd_xla import backend, dispatch, jit_ps, signatures, tree

    jf = jit_ps(wl.build_autograd(), fallback="error")
    jf(x)
    while any(e.ladder is not None for e in jf._cache.values()):  # the program it settles on (tiering.Ladder)
        jf(x)
    for _ in range(3):  # C++'s first calls of the signature, and of its staged arguments (dispatch.py)
        jf(x)
    args = (x,)
    spec, leaves = jf._split(args, {})
    sig = tuple(map(signatures.leaf_signature, leaves))
    (key, entry), = jf._cache.items()
    exe = entry.executable
    sharding, devices = exe._put_args
    aval = exe.in_avals[0]
    semantics = backend.host_semantics()
    put = xc.batched_device_put
    buffers = [put(aval, sharding, [x], devices, enable_x64=True, host_buffer_semantics=semantics)]
    outs = exe.exe.execute_sharded(buffers).consume_with_handlers(exe.handlers)
    convert = exe.converters[0]
    flat_out = [convert(outs[0])]
    cache = jf._cache
    cpp = {}
    if jf._fast is not None:
        fast = dispatch.fastpath(exe, entry.out_tree, jf.stats, cache, key)
        bare = dispatch.function("bare", None, lambda *a: (outs[0], fast._replace(
            out_pytree_def=dispatch._state["registry"].flatten(0)[1])), jf)
        bare(x)
        finish = fast.out_pytree_def.unflatten
        cpp = {
            "jit_ps: whole call, C++ dispatch": (jf, args),
            "  C++ call alone (results not converted)": (bare, args),
            "  Python after it (wait, count, numpy view)": (lambda: finish(outs), ()),
        }
    return {
        **cpp,
        "jit_ps: whole call, Python path": (jf._call_python, args),
        "  _split (flatten args)": (lambda: jf._split(args, {}), ()),
        "  signature of leaves": (lambda: tuple(map(signatures.leaf_signature, leaves)), ()),
        "  cache lookup": (lambda: cache.get(key), ()),
        "  executable call (put + run + convert)": (exe, (leaves,)),
        "    batched_device_put of the input": (lambda: put(aval, sharding, [x], devices, enable_x64=True,
                                                            host_buffer_semantics=semantics), ()),
        "    execute_sharded + consume_with_handlers": (
            lambda: exe.exe.execute_sharded(buffers).consume_with_handlers(exe.handlers), ()),
        "    output buffer -> numpy view": (lambda: convert(outs[0]), ()),
        "  unflatten result": (lambda: tree.unflatten(entry.out_tree, flat_out), ()),
        "  (reference) sig tuple built, nothing else": (lambda: (spec, sig), ()),
    }


def jax_stages(wl, x):
    try:
        import jax
    except ImportError:
        return {}
    jax.config.update("jax_enable_x64", True)
    jitted = jax.jit(wl.build_jax(jax, jax.numpy))
    x_dev = jax.device_put(x)
    out = jitted(x_dev)
    onp.asarray(jitted(x))
    return {
        "jax.jit: numpy in, np.asarray out": (lambda: onp.asarray(jitted(x)), ()),
        "  jax.jit on a device array, np.asarray out": (lambda: onp.asarray(jitted(x_dev)), ()),
        "  jax.jit on a device array, block_until_ready": (lambda: jitted(x_dev).block_until_ready(), ()),
        "  np.asarray of a jax output": (lambda: onp.asarray(out), ()),
        "  jax.device_put of the input": (lambda: jax.device_put(x).block_until_ready(), ()),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=("tiny", "tiny_grad"), default="tiny")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--target-ms", type=float, default=10.0)
    args = p.parse_args(argv)
    wl = BY_NAME[args.workload]
    (x,) = wl.make_inputs(onp.dtype("float64"), onp.random.default_rng(0))
    stages = {**jit_ps_stages(wl, x), **jax_stages(wl, x)}
    samples, _ = timing.interleaved(stages, args.repeat, args.target_ms / 1e3)
    print(f"## Per-call stages of `{args.workload}` ({wl.times}); median µs per call, load average "
          f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())}\n")
    print("| stage | µs |\n|---|---:|")
    for name, values in samples.items():
        s = timing.summarize(values)
        print(f"| {name.replace(' ', '&nbsp;', len(name) - len(name.lstrip()))} | {s['median'] * 1e6:.2f} |")


if __name__ == "__main__":
    main()
