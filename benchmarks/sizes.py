"""Per-call time of cheap elementwise functions across array sizes: where the fixed cost of a
call (C++'s or Python's path, staging, XLA's threads) stops mattering against numpy.

    python benchmarks/sizes.py [--sizes 1000,20000,...] [--align 16|64] [--repeat N]
                               [--target-ms MS] [--stat median|min] [--no-jax]

Two functions: `x + 1.0` (one argument) and `sin(x) * s + y - t` (two arrays of the size and two
of one element, so that small arguments ride beside large ones). Contenders, each in a worker
process of its own (procs.py), samples interleaved between them: numpy itself, jit_ps with numpy arrays placed `--align` bytes past a
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
import procs  # noqa: E402
import timing  # noqa: E402

SIZES = (1000, 8300, 20000, 40000, 76800, 120000, 300000, 1000000)


def add_one(x):
    return x + 1.0


def sine_mix(x, y, s, t):
    return np.sin(x) * s + y - t


def inputs(name, n, align):
    rng = onp.random.default_rng(n)
    if name == "add_one":
        return (procs.place(rng.standard_normal(n), align),)
    return (procs.place(rng.standard_normal(n), align), procs.place(rng.standard_normal(n), align),
            onp.array([2.0]), onp.array([0.5]))


def cases(kind, name, n, align):
    """The factory the workers call (procs.py): the function of `kind` on its inputs."""
    xs = inputs(name, n, align)
    fun = add_one if name == "add_one" else sine_mix
    if kind == "autograd":  # numpy itself: these functions on numpy arrays
        return {"numpy": procs.Case(fun, xs)}
    if kind == "jit_ps":
        from autograd_xla import jit_ps
        jf = jit_ps(fun, fallback="error")
        return {"jit_ps": procs.Case(jf, xs, settle=True)}
    import jax
    jnp = jax.numpy
    jitted, asarray = jax.jit(fun if name == "add_one" else lambda x, y, s, t: jnp.sin(x) * s + y - t), onp.asarray
    device = tuple(jax.device_put(x) for x in xs)
    return {"jax": procs.Case(lambda *a: asarray(jitted(*a)), device)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--align", type=int, choices=(16, 64), default=16)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--target-ms", type=float, default=20.0)
    p.add_argument("--stat", choices=("median", "min"), default="median")
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--backend", default="cpu")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    kinds = ["autograd", "jit_ps"] + ([] if args.no_jax or not procs.jax_available() else ["jax"])
    env = procs.environment()
    print(f"# sizes.py: per-call time by array size\n\n{env['versions']}, numpy {env['numpy']}; "
          f"{env['cpus_usable']} usable CPUs; inputs ≡ {args.align % 64} mod 64; {args.stat} of {args.repeat} "
          "interleaved samples; each library in a worker process of its own\n")
    head = ["function", "elements", "numpy", "jit_ps", "jax.jit, inputs on device", "numpy / jit_ps",
            "jit_ps / jax.jit on device"]
    rows = []
    with procs.Workers(kinds, args.backend) as ws:
        for name in ("add_one", "sine_mix"):
            for n in map(int, args.sizes.split(",")):
                keys = {k: w.build("sizes:cases", name=name, n=n, align=args.align)[0] for k, w in ws.items()}
                want = ws["autograd"].request("output", "numpy")
                for kind in kinds[1:]:
                    err = procs.compare(want, ws[kind].request("output", keys[kind]), "float64", [], kind)
                    assert err <= 1e-13, (name, n, kind, err)
                ws["jit_ps"].request("settle", "jit_ps")
                samples, _ = procs.interleaved({keys[k]: (w, keys[k]) for k, w in ws.items()}, args.repeat,
                                               args.target_ms / 1e3)
                stat = {k: timing.summarize(v)[args.stat] for k, v in samples.items()}
                jx = stat.get("jax")
                rows.append([name, f"{n:,}", timing.format_seconds(stat["numpy"]),
                             timing.format_seconds(stat["jit_ps"]), timing.format_seconds(jx),
                             f"{stat['numpy'] / stat['jit_ps']:.2f}×", f"{stat['jit_ps'] / jx:.2f}" if jx else "—"])
                print("| " + " | ".join(rows[-1]) + " |", file=sys.stderr)
                for k, w in ws.items():
                    w.request("drop", [keys[k]])
    print("\n".join(procs.table(head, rows)))
    la = os.getloadavg()
    print(f"\nload average at end {la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f} ({env['cpus_usable']} usable CPUs)")


if __name__ == "__main__":
    main()
