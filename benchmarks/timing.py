"""Timing helpers for a noisy, shared machine.

Contenders for one workload are *interleaved*: each round times one sample of every
contender, in balanced orders (`balanced_orders`), so a burst of load from someone else's
process, or what a contender leaves behind, lands on all of them rather than on whichever
happened to run then. A sample is a batch of calls long enough (`target` seconds) for the
clock to be accurate; the per-call time of a sample is batch time / calls. Reported: median
over samples and the interquartile range.
The garbage collector is collected before and disabled during each sample, as timeit does.
"""
import argparse
import gc
import os
import statistics
import time

import bytecode  # noqa: F401  (the package byte-compiled, as installed)

# These benchmarks time compiled programs and the first calls that compile them: a new
# signature compiles at its first call (tiered execution, jit_ps's default, is timed by
# tiered.py and the library harnesses, benchmarks/libraries/).
os.environ.setdefault("AUTOGRAD_XLA_TIERED", "0")

_clock = time.perf_counter


def time_calls(fn, args, number):
    """Seconds for `number` calls of fn(*args)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        t0 = _clock()
        for _ in range(number):
            fn(*args)
        return _clock() - t0
    finally:
        if was_enabled:
            gc.enable()


def load_jit_ps(backend="cpu"):
    """autograd_xla's lazily imported parts loaded (jaxlib, its client, the rules: a first
    trace and compile load them) by compiling a trivial program, as importing jax loads
    jaxlib: a timed first call then measures tracing and compiling its workload only."""
    import numpy
    from autograd_xla import jit_ps
    jit_ps(lambda v: v * 2.0, backend=backend, tiered=False)(numpy.ones(2))


def time_once(fn, args):
    """(seconds, result) of a single call: for first calls (trace + compile + run)."""
    t0 = _clock()
    out = fn(*args)
    return _clock() - t0, out


def calibrate(fn, args, target, max_number=1_000_000):
    """Calls per sample so that one sample takes at least `target` seconds."""
    number = 1
    while True:
        t = time_calls(fn, args, number)
        if t >= target or number >= max_number:
            return number
        if t <= 0:
            number *= 10
            continue
        # aim a little past the target, at least doubling
        number = min(max_number, max(2 * number, int(number * 1.2 * target / t) + 1))


def settle(jf, args, limit=60.0):
    """Call a jit_ps function until its signature has settled on its program
    (cache_info()["climbing"]: the later programs made and tried, autograd_xla.tiering.Ladder,
    and C++'s program of a signature with large arguments, which the first call after the
    ladder starts compiling), so that a steady state measured next is that program's: until
    two calls in a row find it settled. Returns (calls, seconds) it took."""
    from autograd_xla import tiering  # here: a jax worker (procs.py) imports this module, never autograd_xla
    t0, calls, quiet = _clock(), 0, 0
    while quiet < 2 and _clock() - t0 < limit:
        jf(*args)
        calls += 1
        if not tiering.compile_thread.idle():
            tiering.compile_thread.wait(limit)
        quiet = 0 if jf.cache_info()["climbing"] else quiet + 1
    return calls, _clock() - t0


def warm_up(fn, args, seconds, min_calls=2):
    t0 = _clock()
    n = 0
    while n < min_calls or _clock() - t0 < seconds:
        fn(*args)
        n += 1


def balanced_orders(n):
    """Orders of n contenders in which each directly follows every other equally often (a
    Williams design: n orders for even n, 2n for odd), so that what one contender leaves
    behind falls on all the others alike. Measured: after plain autograd's matrix products
    OpenBLAS's threads spin on for 0.1-0.2 s, and the jitted MLP step run next took 5.1-5.5 ms
    a call (9.3-10 ms of CPU) against 3.1-3.3 (5.2) alone; in a plain rotation the contender
    after autograd is the same one in most rounds."""
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    orders = [[(k + i) % n for k in first] for i in range(n)]
    return orders + [order[::-1] for order in orders] if n % 2 else orders


def interleaved(contenders, repeat, target, warmup=0.05, lead=0.0):
    """contenders: {name: (fn, args)}. Returns {name: [per-call seconds of each sample]},
    sampled in rounds, each contender once a round in balanced_orders; each sample after
    `lead` seconds of the contender's own calls, untimed (what the one before left behind
    wears off: after plain autograd's MLP step XLA's next ~100 ms of calls ran 1.5x slower)."""
    for fn, args in contenders.values():
        warm_up(fn, args, warmup)
    numbers = {name: calibrate(fn, args, target) for name, (fn, args) in contenders.items()}
    names = list(contenders)
    orders = balanced_orders(len(names))
    samples = {name: [] for name in names}
    for r in range(repeat):
        for name in [names[i] for i in orders[r % len(orders)]]:
            fn, args = contenders[name]
            if lead:
                warm_up(fn, args, lead, min_calls=1)
            samples[name].append(time_calls(fn, args, numbers[name]) / numbers[name])
    return samples, numbers


def summarize(values):
    """median, mean, first and third quartile, min, max, n. The mean counts what the median
    hides: a contender that stalls now and then (a thread pool's contention) has a median
    like the others' and a larger mean."""
    v = sorted(values)
    if len(v) >= 2:
        q1, _, q3 = statistics.quantiles(v, n=4, method="inclusive")
    else:
        q1 = q3 = v[0]
    return {"median": statistics.median(v), "mean": statistics.fmean(v), "q1": q1, "q3": q3, "min": v[0],
            "max": v[-1], "n": len(v)}


def format_seconds(s):
    if s is None:
        return "—"
    if s >= 1.0:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def section_parser(doc, sections, quick_help):
    """An argument parser (described by the first paragraph of `doc`) with the options every
    sectioned benchmark has: --quick and --only."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--only", metavar="SECTION[,SECTION]", help="sections to run: " + ", ".join(sections))
    return parser


def sections_and_sampling(parser, args, known):
    """The sections `--only` names (all of `known` without it; a parser error for unknown
    ones), and the sampling defaults of a quick or a full run (--repeat, --target-ms)."""
    sections = list(known) if not args.only else [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in sections if s not in known]
    if bad:
        parser.error(f"unknown section(s) {', '.join(bad)}; known: {', '.join(known)}")
    args.sections = sections
    if args.repeat is None:
        args.repeat = 7 if args.quick else 21
    if args.target_ms is None:
        args.target_ms = 15.0 if args.quick else 40.0
    return args

