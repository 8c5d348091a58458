"""Per-call time of cheap elementwise functions across array sizes: where the fixed cost of a
call (C++'s or Python's path, staging, XLA's threads) stops mattering against numpy.

    python benchmarks/sizes.py [--sizes 1000,20000,...] [--align 16|64] [--repeat N]
                               [--target-ms MS] [--stat median|min] [--no-jax]

Two functions: `x + 1.0` (one argument) and `sin(x) * s + y - t` (two arrays of the size and two
of one element, so that small arguments ride beside large ones). Contenders, interleaved in one
process (timing.py): numpy itself, jit_ps with numpy arrays placed `--align` bytes past a
64-byte boundary (16: where malloc puts numpy's large arrays), and jax.jit with its inputs
already on the device (asarray of the result, blocked). Sizes in float64 elements; 8,192 is
backend.IN_PLACE_MIN_BYTES, 131,072 lowering.LARGE_ARRAY_BYTES.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as onp  # noqa: E402

import autograd.numpy as np  # noqa: E402
import run  # noqa: E402  (place, table, import_jax, environment)
import timing  # noqa: E402

SIZES = (1000, 8300, 20000, 40000, 76800, 120000, 300000, 1000000)


def add_one(x):
    return x + 1.0


def sine_mix(x, y, s, t):
    return np.sin(x) * s + y - t


def inputs(name, n, align):
    rng = onp.random.default_rng(n)
    if name == "add_one":
        return (run.place(rng.standard_normal(n), align),)
    return (run.place(rng.standard_normal(n), align), run.place(rng.standard_normal(n), align),
            onp.array([2.0]), onp.array([0.5]))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--align", type=int, choices=(16, 64), default=16)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--target-ms", type=float, default=20.0)
    p.add_argument("--stat", choices=("median", "min"), default="median")
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--jax-sync-dispatch", action="store_true")
    return p.parse_args(argv)


def main(argv=None):
    from autograd_xla import jit_ps

    args = parse_args(argv)
    jax, jnp, note = run.import_jax(args)
    env = run.environment(argparse.Namespace(dtype="float64", backend="cpu"), jax, note)
    print(f"# sizes.py: per-call time by array size\n\njaxlib {env['jaxlib']}, jax {env['jax']}, "
          f"numpy {env['numpy']}; {env['cpus_usable']} usable CPUs; inputs ≡ {args.align % 64} mod 64; "
          f"{args.stat} of {args.repeat} interleaved samples\n")
    head = ["function", "elements", "numpy", "jit_ps", "jax.jit, inputs on device", "numpy / jit_ps",
            "jit_ps / jax.jit on device"]
    rows = []
    for name, fun in (("add_one", add_one), ("sine_mix", sine_mix)):
        for n in map(int, args.sizes.split(",")):
            xs = inputs(name, n, args.align)
            jf = jit_ps(fun, fallback="error")
            jf(*xs)
            timing.settle(jf, xs)
            want = fun(*xs)
            assert onp.allclose(jf(*xs), want, rtol=1e-13, atol=0), (name, n)
            contenders = {"numpy": (fun, xs), "jit_ps": (jf, xs)}
            if jax is not None:
                jitted, asarray = jax.jit(fun if name == "add_one" else
                                          lambda x, y, s, t: jnp.sin(x) * s + y - t), onp.asarray
                device = tuple(jax.device_put(x) for x in xs)
                contenders["jax"] = (lambda *a: asarray(jitted(*a)), device)
            samples, _ = timing.interleaved(contenders, args.repeat, args.target_ms / 1e3)
            stat = {k: timing.summarize(v)[args.stat] for k, v in samples.items()}
            jx = stat.get("jax")
            rows.append([name, f"{n:,}", timing.format_seconds(stat["numpy"]), timing.format_seconds(stat["jit_ps"]),
                         timing.format_seconds(jx) if jx else "—", f"{stat['numpy'] / stat['jit_ps']:.2f}×",
                         f"{stat['jit_ps'] / jx:.2f}" if jx else "—"])
            print("| " + " | ".join(rows[-1]) + " |", file=sys.stderr)
    print("\n".join(run.table(head, rows)))
    la = os.getloadavg()
    print(f"\nload average at end {la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f} ({env['cpus_usable']} usable CPUs)")


if __name__ == "__main__":
    main()
