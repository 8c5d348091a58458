"""Benchmark of pmap: data-parallel SGD on 1, 2 and 4 CPU devices, and iterated_map_reduce.

    python benchmarks/pmap.py [--quick] [--only mlp,imr] [--devices 1,2,4] [--batch 64]
                              [--iters 100] [--repeat N] [--target-ms MS] [--stat median|min]
                              [--no-jax] [--no-diagnose] [--profile]

Prints markdown. The device count of a process is fixed when its XLA clients are made, so
each device count has its own worker processes, one per library (procs.py: plain autograd;
autograd_xla, which never imports jax; jax, which never imports autograd_xla), made with that
many CPU devices; the parent asks them for samples in turn (interleaved) and prints one report.

1. one SGD step of a tanh MLP 784-200-100-10 (softmax cross-entropy, float64) at a fixed
   batch per device (weak scaling), gradients averaged with `pmean` over the devices:
   `autograd_xla.pmap` vs `jax.pmap` of the same math, numpy parameters in and out; the same
   with the parameters kept on the devices between steps (`keep_on_device=True`, jax's own
   device-resident arrays); plain autograd on the whole batch for reference;
2. `iterated_map_reduce` (K gradient steps of a logistic regression, one program) against K
   separate pmap calls of one step, and jax's K `jax.pmap` calls and `jax.pmap` of a
   `lax.fori_loop` around `psum`, on 4 devices.

Every contender's result is checked against plain autograd on the full batch first. Then a
per-call breakdown of autograd_xla's pmap call (put, execute, gather) and, with --profile or
when autograd_xla is more than 1.25x slower than jax.pmap, a cProfile of the call path.
See docs/benchmarks.rst.
"""
import cProfile
import json
import os
import pstats
import sys
import time

import numpy as onp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import procs  # noqa: E402
import timing  # noqa: E402
from procs import Case, cell, table  # noqa: E402

SECTIONS = ("mlp", "imr")
MLP_SIZES = (784, 200, 100, 10)
LR = 0.1
TOLERANCE = 1e-10          # relative to the result's magnitude, float64
BOUND = 1.25               # acceptance: autograd_xla pmap step / jax.pmap step
KEEP_STEPS = 10            # device-resident variants: steps per timed call, then one wait
IMR_SHAPE = (256, 32)      # logistic regression: examples per device, features
IMR_LR = 0.5
#: K x jax.pmap: wait after this many asynchronously dispatched steps. Left to run ahead by 100,
#: jax's CPU client aborted the process (an all-reduce rendezvous waited 40 s for its 4th device;
#: one run in three with another process busy). autograd_xla waits at 16 likewise (MAX_IN_FLIGHT).
JAX_IN_FLIGHT = 16

TITLES = {
    "ax": "autograd_xla.pmap",
    "jax": "jax.pmap",
    "ax_out0": "autograd_xla.pmap, out_axes=0",
    "jax_out0": "jax.pmap, out_axes=0",
    "ax_keep": "autograd_xla.pmap, keep_on_device",
    "jax_keep": "jax.pmap, device-resident",
    "autograd": "plain autograd, whole batch (1 core)",
    "imr": "autograd_xla.iterated_map_reduce",
    "ax_fori": "autograd_xla.pmap(fori_loop ∘ psum), built once",
    "ax_loop": "K × autograd_xla.pmap(step)",
    "jax_loop": "K × jax.pmap(step)",
    "jax_fori": "jax.pmap(lax.fori_loop ∘ psum)",
}


# ----- the user's code (autograd) ---------------------------------------------------------------

def make_mlp(np, logsumexp):
    """(loss, predict) of a tanh MLP with softmax cross-entropy; params a flat list
    [W1, b1, W2, b2, W3, b3]; y one-hot."""
    def loss(params, x, y):
        for i in range(0, len(params) - 2, 2):
            x = np.tanh(x @ params[i] + params[i + 1])
        logits = x @ params[-2] + params[-1]
        return -np.mean(np.sum((logits - logsumexp(logits, axis=1, keepdims=True)) * y, axis=1))
    return loss


def mlp_inputs(rng, devices, batch):
    params = []
    for m, n in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        params += [rng.standard_normal((m, n)) / m ** 0.5, 0.1 * rng.standard_normal(n)]
    x = rng.standard_normal((devices, batch, MLP_SIZES[0]))
    y = onp.eye(MLP_SIZES[-1])[rng.integers(0, MLP_SIZES[-1], (devices, batch))]
    return params, x, y


def logreg_inputs(rng, devices):
    n, d = IMR_SHAPE
    X = rng.standard_normal((devices, n, d))
    y = (rng.random((devices, n)) < 0.5).astype(float)
    return X, y, 0.01 * rng.standard_normal(d)


# ----- in the workers (procs.py) ------------------------------------------------------------------

def device_env(nd):
    """The worker environment of a process with `nd` CPU devices (autograd_xla's and jax's)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    return {"AUTOGRAD_XLA_CPU_DEVICES": str(nd),
            "XLA_FLAGS": " ".join(flags + [f"--xla_force_host_platform_device_count={nd}"])}


def check_devices(kind, nd):
    if kind == "jit_ps":
        import autograd_xla
        got = [str(d) for d in autograd_xla.devices()]
    elif kind == "jax":
        import jax
        got = [str(d) for d in jax.devices()]
    else:
        return None
    if len(got) != nd:
        raise RuntimeError(f"the {kind} worker has {len(got)} CPU devices, expected {nd}")
    return got


def cases(kind, section, devices, seed, batch=None, iters=None, profile_calls=200, repeat=7, target_ms=40.0):
    """The factory the workers call: a section's contenders of `kind` on `devices` devices."""
    devs = check_devices(kind, devices)
    if section == "mlp":
        out = mlp_cases(kind, devices, seed, batch, profile_calls, repeat, target_ms)
    else:
        out = imr_cases(kind, devices, seed, iters)
    for c in out.values():
        c.extras["devices"] = lambda: devs
    return out


def replicas_equal(stacked, who):
    """A device-axis result's copies must agree (they are the same replicated parameters): one copy."""
    for a in stacked:
        a = onp.asarray(a)
        if not all(onp.array_equal(a[0], a[i]) for i in range(1, a.shape[0])):
            raise AssertionError(f"{who}: the devices' copies of the parameters differ")
    return [onp.asarray(a)[0] for a in stacked]


def mlp_cases(kind, nd, seed, batch, profile_calls, repeat, target_ms):
    params, x, y = mlp_inputs(onp.random.default_rng(seed), nd, batch)
    stacked = [onp.ascontiguousarray(onp.broadcast_to(p, (nd,) + p.shape)) for p in params]
    if kind == "autograd":
        import autograd.numpy as np
        from autograd import grad
        from autograd.scipy.special import logsumexp
        loss = make_mlp(np, logsumexp)
        xf, yf = x.reshape(-1, MLP_SIZES[0]), y.reshape(-1, MLP_SIZES[-1])

        def plain_step(params, x, y):
            return [p - LR * g for p, g in zip(params, grad(loss)(params, x, y))]
        return {"autograd": Case(plain_step, (params, xf, yf))}

    if kind == "jit_ps":
        import autograd.numpy as np
        from autograd import grad
        from autograd.scipy.special import logsumexp

        from autograd_xla import pmap, pmean
        loss = make_mlp(np, logsumexp)

        def step(params, x, y):  # one device's shard of x and y
            return [p - LR * g for p, g in zip(params, pmean(grad(loss)(params, x, y), "i"))]
        one = pmap(step, "i", in_axes=(None, 0, 0), out_axes=None)   # numpy params in, one copy out
        out0 = pmap(step, "i", in_axes=(None, 0, 0))                  # the device axis out
        keep = pmap(step, "i", in_axes=(0, 0, 0), keep_on_device=True)  # parameters stay on the devices

        def keep_first():
            r = keep(stacked, x, y)
            if not all(type(o).__name__ == "ShardedArray" for o in r):
                raise AssertionError(f"keep_on_device=True returned {sorted({type(o).__name__ for o in r})}")
            state["p"] = r
            return replicas_equal(r, TITLES["ax_keep"])
        state = {}
        keys = ("ax", "ax_out0", "ax_keep")
        fns = (one, out0, keep)
    else:
        import jax
        jnp = jax.numpy
        jloss = make_mlp(jnp, jax.nn.logsumexp)

        def jstep(params, x, y):
            return [p - LR * g for p, g in zip(params, jax.lax.pmean(jax.grad(jloss)(params, x, y), "i"))]
        asarray, tree_map = onp.asarray, jax.tree_util.tree_map
        jp, jp0 = jax.pmap(jstep, "i", in_axes=(None, 0, 0), out_axes=None), jax.pmap(jstep, "i", in_axes=(None, 0, 0))
        jpk = jax.pmap(jstep, "i", in_axes=(0, 0, 0))
        one = lambda *a: tree_map(asarray, jp(*a))  # noqa: E731
        out0 = lambda *a: tree_map(asarray, jp0(*a))  # noqa: E731
        keep = jpk

        def keep_first():
            state["p"] = r = jax.block_until_ready(jpk(stacked, x, y))
            return replicas_equal(r, TITLES["jax_keep"])
        state = {}
        keys = ("jax", "jax_out0", "jax_keep")

    def keep_steps():  # KEEP_STEPS steps on device-resident parameters, then one wait
        p = state["p"]
        for _ in range(KEEP_STEPS):
            p = keep(p, x, y)
        (p[0].block_until_ready() if kind == "jit_ps" else jax.block_until_ready(p))
        state["p"] = p
    inputs = (params, x, y)
    if kind == "jit_ps":
        diag = {"breakdown": lambda: ax_breakdown(one, inputs, repeat, target_ms),
                "profile": lambda: profile(one, inputs, profile_calls)}
    else:
        diag = {"breakdown": lambda: jax_breakdown(jax, jp, inputs, repeat, target_ms)}
    return {keys[0]: Case(one, inputs, **diag),
            keys[1]: Case(out0, inputs, first=lambda *a: replicas_equal(out0(*a), TITLES[keys[1]])),
            keys[2]: Case(keep_steps, (), first=keep_first)}


# ----- diagnosis ----------------------------------------------------------------------------------

def ax_breakdown(ax, inputs, repeat, target_ms):
    """autograd_xla's pmap call split into its stages, each timed on its own, interleaved: the
    host-to-device puts (ReplicatedExecutable.put_replicated / put_sharded), the execution
    (execute_sharded + consume_with_handlers + waiting for every device), the gather of the
    results to numpy (replicated.gather), the rest being Python (flatten, signature, cache,
    unflatten). Uses autograd_xla internals."""

    from autograd_xla import replicated
    params, x, y = inputs
    (entry,) = ax._cache.values()
    exe = entry[0]
    if not isinstance(exe, replicated.ReplicatedExecutable):
        return None  # one device runs on jit_ps's single-device path: nothing multi-device to split
    leaves = list(params) + [x, y]
    # the program's parameters: params (broadcast) then x, y (mapped), then hoisted constants
    avals, mapped = exe.in_avals, exe.mapped

    def put():
        bufs = []
        for v, a, m in zip(leaves, avals, mapped):
            bufs.append(exe.put_sharded(v, a) if m else exe.put_replicated(v))
        return bufs
    bufs = put() + exe.consts

    def execute():
        outs = exe.exe.execute_sharded(bufs).consume_with_handlers(exe.handlers)
        for o in outs:
            o.block_until_ready()
        return outs
    outs = execute()

    def gather():
        return [replicated.gather(o, a)[0] for o, a in zip(outs, exe.out_avals)]

    def executable():
        return exe(leaves)

    stages = {"whole call": (ax, inputs), "executable (put + run + gather)": (executable, ()),
              "put: params replicated + x, y sharded": (put, ()), "execute + wait": (execute, ()),
              "gather results to numpy": (gather, ())}
    nbytes = {"in_replicated": int(sum(v.nbytes for v, m in zip(leaves, mapped) if not m)),
              "in_sharded": int(sum(v.nbytes for v, m in zip(leaves, mapped) if m)),
              "out": int(sum(onp.prod(a.shape) * a.dtype.itemsize for a in exe.out_avals)),
              "n_in": len(leaves), "n_consts": len(exe.consts), "n_out": len(exe.out_avals)}
    samples, _ = timing.interleaved(stages, repeat, target_ms / 1e3)
    return {"stages": {k: timing.summarize(v) for k, v in samples.items()}, "order": list(stages), "bytes": nbytes}


def jax_breakdown(jax, jp, inputs, repeat, target_ms):
    """jax.pmap's call: numpy in and out; without converting its results; with x, y already
    on the devices."""
    params, x, y = inputs
    ident = jax.pmap(lambda a: a)  # its results: arrays sharded over the devices, as jp takes x, y
    dx, dy = jax.block_until_ready(ident(x)), jax.block_until_ready(ident(y))
    tree_map = jax.tree_util.tree_map
    stages = {"jax.pmap: whole call (numpy in, numpy out)": (lambda: tree_map(onp.asarray, jp(params, x, y)), ()),
              "jax.pmap: numpy in, wait, no conversion": (lambda: jax.block_until_ready(jp(params, x, y)), ()),
              # in_axes=None params are taken from the host (one copy); x, y on the devices already
              "jax.pmap: x, y on device, params numpy, wait": (lambda: jax.block_until_ready(jp(params, dx, dy)), ())}
    samples, _ = timing.interleaved(stages, repeat, target_ms / 1e3)
    return {"stages": {k: timing.summarize(v) for k, v in samples.items()}, "order": list(stages)}


def profile(ax, inputs, calls):
    """cProfile of `calls` steady-state calls: the top functions by own time and by cumulative
    time, per call."""
    for _ in range(3):
        ax(*inputs)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        ax(*inputs)
    pr.disable()
    st = pstats.Stats(pr)
    rows = []
    for (file, line, name), (cc, nc, tt, ct, callers) in st.stats.items():
        where = f"{os.path.basename(file)}:{line}({name})" if line else name
        rows.append({"where": where, "ncalls": nc / calls, "tottime": tt / calls, "cumtime": ct / calls})
    total = sum(r["tottime"] for r in rows)
    by_tot = sorted(rows, key=lambda r: -r["tottime"])[:15]
    by_cum = sorted(rows, key=lambda r: -r["cumtime"])[:25]
    return {"calls": calls, "total": total, "by_tottime": by_tot, "by_cumtime": by_cum}


# ----- iterated_map_reduce ------------------------------------------------------------------------

def imr_cases(kind, nd, seed, K):
    X, y, w0 = logreg_inputs(onp.random.default_rng(seed), nd)
    N = X.shape[0] * X.shape[1]
    inputs = (w0, X, y)

    def update(w, g):
        return w - IMR_LR * g / N
    if kind == "autograd":
        import autograd.numpy as np

        def reference(w, X, y):  # plain autograd code on the whole data set: the reference
            Xf, yf = X.reshape(N, -1), y.reshape(N)
            for _ in range(K):
                w = update(w, Xf.T @ (1.0 / (1.0 + np.exp(-(Xf @ w))) - yf))
            return w
        return {"reference": Case(reference, inputs)}
    if kind == "jax":
        import jax
        jnp, lax = jax.numpy, jax.lax

        def jgrad_shard(w, Xs, ys):
            return Xs.T @ (1.0 / (1.0 + jnp.exp(-(Xs @ w))) - ys)

        def jone(w, Xs, ys):
            return update(w, lax.psum(jgrad_shard(w, Xs, ys), "i"))
        jp = jax.pmap(jone, "i", in_axes=(None, 0, 0), out_axes=None)

        def jax_loop(w, X, y):
            for k in range(K):
                w = jp(w, X, y)
                if k % JAX_IN_FLIGHT == JAX_IN_FLIGHT - 1:
                    w.block_until_ready()  # jax's CPU client deadlocks with ~100 all-reduces queued
            return onp.asarray(w)
        jf = jax.pmap(lambda w, Xs, ys: lax.fori_loop(0, K, lambda i, w: jone(w, Xs, ys), w), "i",
                      in_axes=(None, 0, 0), out_axes=None)
        return {"jax_loop": Case(jax_loop, inputs), "jax_fori": Case(lambda *a: onp.asarray(jf(*a)), inputs)}

    import autograd.numpy as np

    from autograd_xla import fori_loop, iterated_map_reduce, pmap, psum

    def grad_shard(w, shard):  # the logistic loss's gradient (summed) on one shard
        Xs, ys = shard
        return Xs.T @ (1.0 / (1.0 + np.exp(-(Xs @ w))) - ys)

    def imr(w0, X, y):
        return iterated_map_reduce(grad_shard, update, w0, (X, y), K)

    def per_device(w, Xs, ys):
        return fori_loop(0, K, lambda i, w: update(w, psum(grad_shard(w, (Xs, ys)), "i")), w)
    fori = pmap(per_device, "i", in_axes=(None, 0, 0), out_axes=None)
    one = pmap(lambda w, Xs, ys: update(w, psum(grad_shard(w, (Xs, ys)), "i")), "i", in_axes=(None, 0, 0),
               out_axes=None)

    def ax_loop(w, X, y):
        for _ in range(K):
            w = one(w, X, y)
        return w

    def second_call():
        t0 = time.perf_counter()
        imr(*inputs)
        return time.perf_counter() - t0
    return {"imr": Case(imr, inputs, second_call=second_call, split=lambda: imr_split(imr, inputs)),
            "ax_fori": Case(fori, inputs), "ax_loop": Case(ax_loop, inputs)}


def imr_split(imr, inputs):
    """Where one iterated_map_reduce call goes: autograd_xla's tracing, lowering and XLA
    compile (it builds a new pmap on every call, so its program is traced and compiled
    again unless something still holds it) vs running it; from cProfile's cumulative times."""
    pr = cProfile.Profile()
    pr.enable()
    imr(*inputs)
    pr.disable()
    st = pstats.Stats(pr)
    out = {}
    for (file, line, name), (cc, nc, tt, ct, callers) in st.stats.items():
        base = os.path.basename(file)
        key = None
        if name == "trace_function" and base == "tracing.py":
            key = "trace"
        elif name == "lower_replicated":
            key = "lower"
        elif name == "_compile" and base == "backend.py":
            key = "XLA compile"
        elif name == "__call__" and base == "replicated.py":
            key = "execute"
        elif name == "iterated_map_reduce":
            key = "total"
        if key and ct > out.get(key, 0.0):
            out[key] = ct
    return out


# ----- parent -------------------------------------------------------------------------------------

FACTORY = "pmap:cases"


def spawn(args, section, nd):
    """One section on `nd` devices: a worker per library with that many CPU devices; first calls,
    results against plain autograd's, interleaved samples, the diagnosis. The report's dict, or
    {"devices": nd, "error": ...}."""
    kinds = ["autograd", "jit_ps"] + ([] if args.no_jax or not procs.jax_available() else ["jax"])
    params = {"section": section, "devices": nd, "seed": args.seed, "batch": args.batch, "iters": args.iters,
              "profile_calls": args.profile_calls, "repeat": args.repeat, "target_ms": args.target_ms}
    print(f"<!-- {section}, {nd} device(s) -->", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        with procs.Workers(kinds, env=dict.fromkeys(kinds, device_env(nd))) as ws:
            keys = {k: w.build(FACTORY, **params) for k, w in ws.items()}
            res = {"errors": {}, "first": {}, "notes": []}
            ref_key = keys["autograd"][0]
            ref = ws["autograd"].request("output", ref_key)
            contenders = {}
            for kind in kinds[1:]:
                for key in keys[kind]:
                    try:
                        res["first"][key], out, _ = ws[kind].request("first", key)
                        res["errors"][key] = compare(ref if section == "mlp" else [ref],
                                                     out if section == "mlp" else [out], TITLES[key])
                        contenders[key] = (ws[kind], key)
                    except procs.WorkerError as e:
                        if key != "ax_keep":
                            raise
                        res["notes"].append(f"{TITLES[key]} failed: {str(e).splitlines()[-1]}")
            if section == "mlp" and not args.no_plain:
                contenders["autograd"] = (ws["autograd"], "autograd")
            order = [k for k in TITLES if k in contenders]
            repeat = args.repeat if section == "mlp" else args.imr_repeat
            samples, numbers = procs.interleaved({k: contenders[k] for k in order}, repeat, args.target_ms / 1e3)
            per_step = {k: [s / KEEP_STEPS for s in v] if k.endswith("_keep") else v for k, v in samples.items()}
            res.update(summary={k: timing.summarize(v) for k, v in per_step.items()}, numbers=numbers, order=order)
            out = {"devices": nd, "jax": procs.environment()["versions"]["jax"] if "jax" in ws else None,
                   "ax_devices": ws["jit_ps"].extra(keys["jit_ps"][0], "devices"), section: res}
            if section == "mlp" and not args.no_diagnose:
                res["breakdown"] = ws["jit_ps"].extra("ax", "breakdown")
                if res["breakdown"] and "jax" in ws:
                    theirs = ws["jax"].extra("jax", "breakdown")
                    res["breakdown"]["stages"].update(theirs["stages"])
                    res["breakdown"]["order"] += theirs["order"]
                ratio = res["summary"]["ax"][args.stat] / res["summary"]["jax"][args.stat] if "jax" in ws else None
                if args.profile or (ratio is not None and ratio > BOUND):
                    res["profile"] = ws["jit_ps"].extra("ax", "profile")
            if section == "imr":
                res.update(K=args.iters, N=IMR_SHAPE[0] * nd, d=IMR_SHAPE[1],
                           second_call_imr=ws["jit_ps"].extra("imr", "second_call"))
                if not args.no_diagnose:
                    res["imr_profile"] = ws["jit_ps"].extra("imr", "split")
    except Exception as e:  # one device count's failure must not hide the others
        return {"devices": nd, "error": f"{type(e).__name__}: {' / '.join(str(e).splitlines()[-12:])}"}
    out["wall"] = time.perf_counter() - t0
    return out


def fmt_s(s):
    return timing.format_seconds(s)


def compare(ref, got, who):
    """Largest difference relative to each reference leaf's magnitude; fails beyond TOLERANCE."""
    worst = procs.compare(ref, got, "float64", who=who)
    if not worst <= TOLERANCE:
        raise AssertionError(f"{who}: result differs from plain autograd by {worst:.2e} (relative)")
    return worst


def ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.2f}×"


def report_mlp(children, args, lines):
    st = args.stat
    param_kb = sum(m * n + n for m, n in zip(MLP_SIZES[:-1], MLP_SIZES[1:])) * 8 / 1e3
    lines += ["", f"## 1. Data-parallel SGD step: tanh MLP {'-'.join(map(str, MLP_SIZES))}, softmax cross-entropy, "
                  f"float64, {args.batch} examples per device", "",
              "`pmap(lambda params, x, y: [p - lr * g for p, g in zip(params, pmean(grad(loss)(params, x, y), \"i\"))],"
              " \"i\", in_axes=(None, 0, 0), out_axes=None)`, params a list of 6 arrays "
              f"({param_kb:.0f} kB of float64), x, y of shape (devices, batch, ...). Weak scaling: the whole batch grows with the devices.", "",
              f"Per step, {st} (± = IQR / median), one worker process per library and device count, the contenders interleaved "
              f"({args.repeat} samples of ≥{args.target_ms:g} ms; calls per sample in brackets). "
              f"Device-resident rows: {KEEP_STEPS} steps per timed call, then one wait; shown per step.", ""]
    ok = [c for c in children if "error" not in c]
    for c in children:
        if "error" in c:
            lines.append(f"- **{c['devices']} device(s): failed** — {c['error']}")
    if not ok:
        return
    order = []
    for c in ok:
        for k in c["mlp"]["order"]:
            if k not in order:
                order.append(k)
    head = ["contender"] + [f"{c['devices']} dev" for c in ok] + \
        [f"{c['devices']} dev / jax.pmap" for c in ok if c["mlp"]["summary"].get("jax")]
    rows = []
    for k in order:
        row = [TITLES[k]]
        for c in ok:
            s = c["mlp"]["summary"].get(k)
            row.append(f"{cell(s, st)} [{c['mlp']['numbers'].get(k, '—')}]" if s else "—")
        for c in ok:
            s = c["mlp"]["summary"]
            if s.get("jax"):
                ref = "jax_keep" if k.endswith("_keep") else "jax_out0" if k.endswith("_out0") else "jax"
                row.append(ratio(s[k][st], s[ref][st]) if k in s and ref in s and not k.startswith("jax")
                           and k != "autograd" else "—")
        rows.append(row)
    lines += table(head, rows)
    lines += ["", "Ratios: each autograd_xla row against the jax.pmap row of the same kind (numpy out as one copy; "
                  "out_axes=0; device-resident), same device count.", ""]

    # weak-scaling overhead against 1 device
    base = next((c for c in ok if c["devices"] == 1), None)
    if base is not None and len(ok) > 1:
        lines += ["Per-step time against the same contender on 1 device (weak scaling: ideal is 1.00× on as many "
                  "cores as devices; this machine has 2 shared cores, so 4 devices cannot beat 2) and the overhead "
                  "that adds:", ""]
        head = ["contender"] + [f"{c['devices']} dev / 1 dev" for c in ok if c is not base] + \
            [f"{c['devices']} dev − 1 dev" for c in ok if c is not base]
        rows = []
        for k in order:
            if k == "autograd":
                continue
            b = base["mlp"]["summary"].get(k)
            r1 = [ratio(c["mlp"]["summary"][k][st], b[st]) if b and k in c["mlp"]["summary"] else "—"
                  for c in ok if c is not base]
            r2 = [signed(c["mlp"]["summary"][k][st] - b[st]) if b and k in c["mlp"]["summary"] else "—"
                  for c in ok if c is not base]
            rows.append([TITLES[k]] + r1 + r2)
        lines += table(head, rows)
        lines += ["", "Across device counts the numbers come from different processes (run one after the other), "
                      "so these ratios are less steady than the per-row ones above."]

    lines += ["", "First call (trace + compile + one step, numpy in/out): " + "; ".join(
        f"{c['devices']} dev: " + ", ".join(f"{TITLES[k]} {fmt_s(v)}" for k, v in c["mlp"]["first"].items()
                                           if k in ("ax", "jax", "ax_keep", "jax_keep"))
        for c in ok) + "."]
    errs = "; ".join(f"{c['devices']} dev: " + ", ".join(f"{k} {v:.1e}" for k, v in c["mlp"]["errors"].items())
                     for c in ok)
    lines += ["", f"Correctness (before timing): every contender's new parameters against plain autograd's SGD step on "
                  f"the whole batch (devices × {args.batch}), largest difference relative to the leaf's magnitude "
                  f"(bound {TOLERANCE:g}); device-axis results also checked to agree across devices: {errs}."]
    for c in ok:
        for n in c["mlp"]["notes"]:
            lines.append(f"- {c['devices']} dev: {n}")


def signed(s):
    return ("−" if s < 0 else "+") + fmt_s(abs(s))


def report_breakdown(children, args, lines):
    ok = [c for c in children if "error" not in c and c["mlp"].get("breakdown")]
    if not ok:
        return
    st = args.stat
    lines += ["", "## Diagnosis: where a pmap step's time goes", "",
              "Each stage timed on its own (interleaved, in its library's worker process), per call: `autograd_xla.pmap`'s whole "
              "call; its `ReplicatedExecutable` called on the leaves (what is left of the whole call is Python: "
              "flatten, signature, cache lookup, unflatten); inside that, the host-to-device puts (params "
              "replicated to every device, x and y sharded), `execute_sharded` + waiting for every device, and "
              "gathering the results to numpy (`replicated.gather`, all devices' copies, then `[0]`: out_axes=None). "
              "jax.pmap rows: the whole numpy-in/numpy-out call, the call without converting its results, and with "
              "x, y already on the devices.", ""]
    order = ok[0]["mlp"]["breakdown"]["order"]
    head = ["stage"] + [f"{c['devices']} dev" for c in ok]
    rows = [[k] + [cell(c["mlp"]["breakdown"]["stages"].get(k), st) for c in ok] for k in order]
    derived = []
    for c in ok:
        s = {k: v[st] for k, v in c["mlp"]["breakdown"]["stages"].items()}
        derived.append((s["whole call"] - s["executable (put + run + gather)"],
                        s["executable (put + run + gather)"] - s["put: params replicated + x, y sharded"]
                        - s["execute + wait"] - s["gather results to numpy"]))
    rows.append(["= Python around the executable (whole − executable)"] + [signed(d[0]) for d in derived])
    rows.append(["= inside the executable, not in the three stages"] + [signed(d[1]) for d in derived])
    lines += table(head, rows)
    b, n0 = ok[0]["mlp"]["breakdown"]["bytes"], ok[0]["devices"]
    lines += ["", f"Bytes per step: {b['in_replicated'] / 1e3:.0f} kB of params put on each device, "
                  f"{b['in_sharded'] / n0 / 1e3:.0f} kB of x, y per device, {b['out'] / n0 / 1e3:.0f} kB of "
                  f"results per device gathered (all devices' copies, out_axes=None keeps one); {b['n_in']} inputs, "
                  f"{b['n_consts']} hoisted constants, {b['n_out']} outputs."]
    for c in ok:
        pr = c["mlp"].get("profile")
        if not pr:
            continue
        lines += ["", f"cProfile of `autograd_xla.pmap` steady-state calls, {c['devices']} device(s), "
                      f"{pr['calls']} calls (times per call, profiler overhead included: compare rows, not with the "
                      f"table above):", ""]
        lines += table(["function (by own time)", "calls / step", "own time", "cumulative"],
                       [[f"`{r['where']}`", f"{r['ncalls']:.0f}", fmt_s(r["tottime"]), fmt_s(r["cumtime"])]
                        for r in pr["by_tottime"][:12]])
        lines += [""]
        lines += table(["function (by cumulative time)", "calls / step", "own time", "cumulative"],
                       [[f"`{r['where']}`", f"{r['ncalls']:.0f}", fmt_s(r["tottime"]), fmt_s(r["cumtime"])]
                        for r in pr["by_cumtime"][:18]])


def report_imr(c, args, lines):
    st = args.stat
    lines += ["", "## 2. iterated_map_reduce vs K pmap calls (logistic regression, gradient descent)", ""]
    if "error" in c:
        lines.append(f"**failed** — {c['error']}")
        return
    r = c["imr"]
    lines += [f"{c['devices']} devices, {IMR_SHAPE[0]} examples × {r['d']} features per device, K = {r['K']} "
              f"full-batch gradient steps `w - {IMR_LR} * psum(X.T @ (sigmoid(X @ w) - y)) / {r['N']}`, numpy w in "
              f"and out. Per call of all K steps, {st}, interleaved ({args.imr_repeat} samples of "
              f"≥{args.target_ms:g} ms, calls per sample in brackets).", ""]
    s = r["summary"]
    jf = s.get("jax_fori")
    head = ["contender", "K steps", "per step", "vs jax.pmap(fori_loop)", "vs iterated_map_reduce", "first call"]
    rows = []
    for k in r["order"]:
        rows.append([TITLES[k] + (f" (waits every {JAX_IN_FLIGHT} steps)" if k == "jax_loop" else ""), f"{cell(s[k], st)} [{r['numbers'][k]}]", fmt_s(s[k][st] / r["K"]),
                     ratio(s[k][st], jf[st]) if jf else "—", ratio(s[k][st], s["imr"][st]),
                     fmt_s(r["first"].get(k))])
    lines += table(head, rows)
    errs = ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items())
    lines += ["", f"Correctness (before timing): final w against plain autograd's K steps on all "
                  f"{r['N']} examples, relative: {errs}."]
    sp = r.get("imr_profile")
    if sp:
        parts = ", ".join(f"{k} {fmt_s(sp[k])}" for k in ("total", "trace", "lower", "XLA compile", "execute")
                          if k in sp)
        lines += ["", f"One `iterated_map_reduce` call under cProfile (cumulative): {parts}. Its second call took "
                      f"{fmt_s(r['second_call_imr'])}, the first {fmt_s(r['first']['imr'])}: it builds a new "
                      "`pmap` of a new closure on every call, and the compiled program is cached only while a "
                      "pmapped function holds it (weak references), so each call traces, lowers and compiles "
                      "again. The `pmap(fori_loop ∘ psum), built once` row is the same program compiled once."]


def acceptance(children, args, lines):
    lines += ["", "## Acceptance checks", ""]
    checks = []
    for c in children:
        if "error" in c:
            checks.append((f"{c['devices']} device(s): child failed", None))
            continue
        s = c["mlp"]["summary"]
        if "jax" in s:
            checks.append((f"{c['devices']} device(s): autograd_xla.pmap step / jax.pmap step (numpy in/out)",
                           s["ax"][args.stat] / s["jax"][args.stat]))
    if not checks:
        lines.append("(need jax)")
        return True
    lines += table(["check", "ratio", "bound", "verdict"],
                   [[n, "—" if v is None else f"{v:.2f}", f"≤ {BOUND:g}",
                     "FAIL" if v is None or v > BOUND else "PASS"] for n, v in checks])
    return all(v is not None and v <= BOUND for _, v in checks)


def parse_args(argv=None):
    p = timing.section_parser(__doc__, SECTIONS, "fewer, shorter samples")
    p.add_argument("--devices", default="1,2,4", help="device counts of the MLP section (default 1,2,4)")
    p.add_argument("--imr-devices", type=int, default=4, help="devices of the iterated_map_reduce section (default 4)")
    p.add_argument("--batch", type=int, default=64, help="examples per device (default 64)")
    p.add_argument("--iters", type=int, default=100, help="K, iterations of section 2 (default 100)")
    p.add_argument("--repeat", type=int, help="interleaved samples per contender; default 21, quick 7")
    p.add_argument("--imr-repeat", type=int, help="samples per contender in section 2; default 11, quick 5")
    p.add_argument("--target-ms", type=float, help="minimum duration of one sample; default 40, quick 15")
    p.add_argument("--stat", choices=("median", "min"), default="median")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--no-plain", action="store_true", help="leave out plain autograd's whole-batch step")
    p.add_argument("--no-diagnose", action="store_true", help="omit the per-stage breakdown")
    p.add_argument("--profile", action="store_true", help="cProfile the pmap call path even when it passes")
    p.add_argument("--profile-calls", type=int, default=200)
    p.add_argument("--json", metavar="PATH", help="also save the children's raw results")
    args = timing.sections_and_sampling(p, p.parse_args(argv), SECTIONS)
    args.device_counts = [int(d) for d in args.devices.split(",") if d.strip()]
    if args.imr_repeat is None:
        args.imr_repeat = 5 if args.quick else 11
    return args


def main(argv=None):
    args = parse_args(argv)
    env = procs.environment()
    t0 = time.perf_counter()
    mlp = [spawn(args, "mlp", nd) for nd in args.device_counts] if "mlp" in args.sections else []
    imr = spawn(args, "imr", args.imr_devices) if "imr" in args.sections else None
    env["benchmark_seconds"] = round(time.perf_counter() - t0, 1)
    first = next((c for c in mlp + [imr] if c and "error" not in c), None)
    if first:
        env["jax"] = first["jax"] or "absent"
    lines = ["# pmap: data-parallel SGD (weak scaling) and iterated_map_reduce, autograd_xla vs jax", "",
             "## Environment", ""] + [f"- {k}: {v}" for k, v in env.items()]
    lines += ["- devices: per device count, one worker process per library (procs.py), "
              "`AUTOGRAD_XLA_CPU_DEVICES=N` and `XLA_FLAGS=--xla_force_host_platform_device_count=N` "
              "(jax, `jax_enable_x64`); "
              f"{env['cpus_usable']} usable CPU cores, so more than {env['cpus_usable']} devices share cores and "
              "no speed-up is possible beyond that."]
    if mlp:
        report_mlp(mlp, args, lines)
        if not args.no_diagnose:
            report_breakdown(mlp, args, lines)
    if imr:
        report_imr(imr, args, lines)
    ok = acceptance(mlp, args, lines) if mlp else True
    lines += ["", f"load average at start {procs.fmt_load(env['loadavg_start'])}, at end "
                  f"{procs.fmt_load(os.getloadavg())} ({env['cpus_usable']} usable CPUs; more than that means the "
                  "numbers are disturbed)"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "mlp": mlp, "imr": imr}, f, indent=1, default=str)
    print("\n".join(lines))
    failed = any("error" in c for c in mlp + ([imr] if imr else []))
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
