"""By hand, on a machine with a TPU: how long XLA takes to compile one program, and a kept
call's pace, jax.jit against jit_ps, each side in a process of its own (one process holds
the chip):

    python3 benchmarks/tpu_compile_probe.py jax
    python3 benchmarks/tpu_compile_probe.py jit_ps

The sum of a matrix's first three powers (x + x*x + x*x*x*c) at 1000², 5000², 5000² again
and 1000² again, a fresh constant c each time so that nothing is reused: jax's lowering and
XLA's compile (``lower().compile()``), jit_ps's trace, lowering and compile (its
cache_info) of a first call, and (jit_ps, after jax's run) jax's StableHLO text of the last
5000² program and jit_ps's own compiled alternately by jit_ps's client with its options
(JAX_TEXT; 5 rounds, a fresh constant each); then 2,000 calls in a row of ``a * b + 1.0`` on
3 float32 kept on the device, and (jit_ps) where the Python part of those calls goes (cProfile)."""
import cProfile
import io
import pstats
import sys
import time

import numpy as onp

SHAPES = [(1000, 1000), (5000, 5000), (5000, 5000), (1000, 1000)]
CALLS = 2000
JAX_TEXT = "/tmp/tpu_compile_probe_jax.mlir"


def kept_pace(kept):
    """µs a call of `kept` over CALLS calls in a row on arguments on the device."""
    a = kept(onp.ones(3, onp.float32), onp.ones(3, onp.float32))
    b = kept(a, a)
    end = time.perf_counter() + 1.0  # a second of calls first: jit_ps's faster programs made and tried meanwhile
    while time.perf_counter() < end:
        kept(a, b)
    t = time.perf_counter()
    for _ in range(CALLS):
        kept(a, b)
    return 1e6 * (time.perf_counter() - t) / CALLS, (a, b)


def jax_side():
    import jax
    jax.jit(lambda v: v + 1)(onp.ones(3, onp.float32)).block_until_ready()  # the chip's start
    for i, shape in enumerate(SHAPES):
        x, c = onp.ones(shape, onp.float32), 1.5 + i
        f = jax.jit(lambda v, c=c: v + v * v + v * v * v * c)
        t0 = time.perf_counter()
        lowered = f.lower(x)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        onp.asarray(compiled(x))
        if shape == SHAPES[2]:
            with open(JAX_TEXT, "w") as f:
                f.write(lowered.as_text())
        print(f"jax {shape}: lowering {1e3 * (t1 - t0):.0f} ms, compile {1e3 * (t2 - t1):.0f} ms, "
              f"run and copy {1e3 * (time.perf_counter() - t2):.0f} ms", flush=True)
    print(f"jax kept call: {kept_pace(jax.jit(lambda a, b: a * b + 1.0))[0]:.1f} µs", flush=True)


def alternate(theirs, rounds=5):
    """jit_ps's client compiles jax's text of the 5000² program and jit_ps's own, alternately,
    each round with a fresh constant (no cache answers), with jit_ps's compile options."""
    from autograd_xla import backend, jit_ps
    be = backend.get_backend()
    devices = backend.xc.DeviceList((be.default_device,))
    x = onp.ones(SHAPES[2], onp.float32)
    for i in range(rounds):
        c = 10.5 + i
        texts = {"jit_ps's": jit_ps(lambda v, c=c: v + v * v + v * v * v * c).lower(x).as_text(),
                 "jax's": theirs.replace("dense<3.500000e+00>", f"dense<{c:e}>")}  # (SHAPES[2]'s constant)
        for name in sorted(texts, reverse=bool(i % 2)):
            t0 = time.perf_counter()
            be.client.compile_and_load(texts[name], devices, be._options())
            print(f"{name} text of the 5000² program, jit_ps's client: compile "
                  f"{1e3 * (time.perf_counter() - t0):.0f} ms", flush=True)


def jit_ps_side():
    from autograd_xla import jit_ps
    jit_ps(lambda v: v + 1, tiered=False)(onp.ones(3, onp.float32))  # the chip's start, the lazy imports
    for i, shape in enumerate(SHAPES):
        x, c = onp.ones(shape, onp.float32), 1.5 + i
        f = jit_ps(lambda v, c=c: v + v * v + v * v * v * c, tiered=False)
        t0 = time.perf_counter()
        onp.asarray(f(x))
        info = f.cache_info()
        print(f"jit_ps {shape}: first call {1e3 * (time.perf_counter() - t0):.0f} ms: trace "
              f"{1e3 * info['trace_seconds']:.0f}, lowering {1e3 * info['lower_seconds']:.0f}, compile "
              f"{1e3 * info['compile_seconds']:.0f} ms", flush=True)
    try:
        with open(JAX_TEXT) as f:
            text = f.read()
    except OSError:
        pass
    else:
        alternate(text)
    kept = jit_ps(lambda a, b: a * b + 1.0, keep_on_device=True)
    pace, (a, b) = kept_pace(kept)
    print(f"jit_ps kept call: {pace:.1f} µs", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        kept(a, b)
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
    print(out.getvalue())


if __name__ == "__main__":
    {"jax": jax_side, "jit_ps": jit_ps_side}[sys.argv[1]]()
