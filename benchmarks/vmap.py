"""Benchmark of the batching transformations: per-example gradients and dense Hessians.

    python benchmarks/vmap.py [--quick] [--only perexample,hessian] [--sizes 100,500,1000]
                              [--batch 256] [--repeat N] [--target-ms MS] [--stat median|min]
                              [--first-calls K] [--no-jit-loop] [--no-jax] [--hlo-dir DIR]
                              [--dtype float32|float64|both]

Prints markdown. Each library runs in a worker process of its own (procs.py: plain autograd;
autograd_xla, which never imports jax; jax, which never imports autograd_xla), on the same
seeded inputs, the results compared with plain autograd's, samples interleaved between the
processes, first calls made in fresh processes:

1. per-example gradients of a tanh MLP's softmax cross-entropy (one example's loss as a
   function of (params, x, y)), batch 256: a Python loop of autograd's `grad` over the
   examples, plain and under `jit_ps`; `autograd_xla.vmap(grad(loss), in_axes=(None, 0, 0))`;
   `jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))`; float32 and float64 (--dtype);
2. the dense Hessian of `f(x) = sum(tanh(x))**2`: `autograd.hessian(f)` plain and under
   `jit_ps`, `autograd_xla.hessian(f)`, `jax.jit(jax.hessian(f))` (float64); and the StableHLO size of
   `jit_ps(autograd.hessian(f))`, which should not grow with n.

Then a diagnosis (optimised-HLO op counts, the compiled programs' parameters, arrays moved per
call) and the acceptance checks. See docs/benchmarks.rst.
"""
import gc
import os
import re
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as onp  # noqa: E402

import autograd  # noqa: E402
import autograd.numpy as np  # noqa: E402
from autograd import grad  # noqa: E402
from autograd.scipy.special import logsumexp  # noqa: E402

import procs  # noqa: E402
import timing  # noqa: E402

SECTIONS = ("perexample", "hessian")
MLP_SIZES = (784, 200, 100, 10)
FACTORY = "vmap:cases"
STAT = "median"  # --stat

# ----- the user's code (autograd) ---------------------------------------------------------------
# Every make_* returns fresh function objects, so a first call traces and compiles from scratch.


def make_mlp_loss(scipy_lse=False):
    """One example's loss: x [784], y one-hot [10]. The log-sum-exp is written out (max, exp,
    sum, log) as in jax's version below; scipy_lse=True uses autograd.scipy.special.logsumexp."""
    def predict(params, x):
        for W, b in params[:-1]:
            x = np.tanh(x @ W + b)
        W, b = params[-1]
        logits = x @ W + b
        if scipy_lse:
            return logits - logsumexp(logits)
        m = np.max(logits)
        return logits - (m + np.log(np.sum(np.exp(logits - m))))

    def loss(params, x, y):
        return -np.sum(predict(params, x) * y)
    return loss


def make_loop():
    """Per-example gradients the obvious way: grad of one example's loss, once per example.
    Returns a list (one entry per example) of [(dW, db), ...]."""
    g = grad(make_mlp_loss())

    def per_example_grads(params, x, y):
        return [g(params, x[i], y[i]) for i in range(x.shape[0])]
    return per_example_grads


def make_f():
    def f(x):
        return np.sum(np.tanh(x)) ** 2
    return f


# ----- the same math in jax ------------------------------------------------------------------------

def make_jax_mlp_loss(jnp):
    def predict(params, x):
        for W, b in params[:-1]:
            x = jnp.tanh(x @ W + b)
        W, b = params[-1]
        logits = x @ W + b
        m = jnp.max(logits)
        return logits - (m + jnp.log(jnp.sum(jnp.exp(logits - m))))

    def loss(params, x, y):
        return -jnp.sum(predict(params, x) * y)
    return loss


def make_jax_f(jnp):
    def f(x):
        return jnp.sum(jnp.tanh(x)) ** 2
    return f


# ----- inputs -----------------------------------------------------------------------------------

def mlp_inputs(rng, batch, align, dtype="float64"):
    params = [((rng.standard_normal((m, n)) / onp.sqrt(m)).astype(dtype), (0.1 * rng.standard_normal(n)).astype(dtype))
              for m, n in zip(MLP_SIZES[:-1], MLP_SIZES[1:])]
    x = rng.standard_normal((batch, MLP_SIZES[0])).astype(dtype)
    y = onp.eye(MLP_SIZES[-1], dtype=dtype)[rng.integers(0, MLP_SIZES[-1], batch)]
    return procs.place((params, x, y), align)


def hessian_inputs(n, seed, align):
    return (procs.place(onp.random.default_rng(seed + n).standard_normal(n), align),)


def stack_examples(per_example):
    """[example][layer](dW, db) -> [layer](dW stacked, db stacked): vmap's layout."""
    return [tuple(onp.stack([ex[layer][k] for ex in per_example]) for k in (0, 1))
            for layer in range(len(per_example[0]))]


# ----- in the workers (procs.py) ------------------------------------------------------------------
# Every case is built fresh, so that its first call traces and compiles from scratch.

TITLES = {"autograd": "autograd loop", "jit_ps_loop": "jit_ps(loop)", "vmap": "autograd_xla.vmap(grad)",
          "jax": "jax.jit(jax.vmap(jax.grad))"}
HESSIAN_TITLES = {"autograd": "autograd.hessian", "jit_ps": "jit_ps(autograd.hessian)", "ax": "autograd_xla.hessian",
                  "jax": "jax.jit(jax.hessian)"}


def cases(kind, section, seed, align, batch=None, dtype="float64", n=None, jit_loop=True):
    """The factory the workers call: the section's contenders of `kind`."""
    if section == "perexample":
        inputs = mlp_inputs(onp.random.default_rng(seed), batch, align, dtype)
    else:
        inputs = hessian_inputs(n, seed, align)
    if kind == "autograd":
        return {"autograd": procs.Case(make_loop() if section == "perexample" else autograd.hessian(make_f()), inputs)}
    if kind == "jit_ps":
        import autograd_xla
        from autograd_xla import jit_ps
        if section == "perexample":
            fns = {"vmap": autograd_xla.vmap(grad(make_mlp_loss()), in_axes=(None, 0, 0))}
            if jit_loop:
                fns["jit_ps_loop"] = jit_ps(make_loop(), fallback="error")
        else:
            fns = {"jit_ps": jit_ps(autograd.hessian(make_f()), fallback="error"),
                   "ax": autograd_xla.hessian(make_f())}
        return {k: procs.Case(f, inputs, diag=lambda f=f, k=k: diagnose_jit_ps(f, inputs, k != "jit_ps_loop"),
                              first=lambda *a, f=f: first_call_checked(f, a))
                for k, f in fns.items()}
    import jax
    jnp = jax.numpy
    if section == "perexample":
        jitted = jax.jit(jax.vmap(jax.grad(make_jax_mlp_loss(jnp)), in_axes=(None, 0, 0)))
    else:
        jitted = jax.jit(jax.hessian(make_jax_f(jnp)))
    asarray, tree_map = onp.asarray, jax.tree_util.tree_map
    call = lambda *a: tree_map(asarray, jitted(*a))  # noqa: E731
    return {"jax": procs.Case(call, inputs, diag=lambda: diagnose_jax(jitted, call, inputs))}


def first_call_checked(fn, args):
    """A first call that fails on a fallback (a silent one would time plain autograd)."""
    from autograd_xla import FallbackWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        warnings.filterwarnings("ignore", message=".*traced to a program of")
        out = fn(*args)
    if fn.stats.fallbacks:
        raise AssertionError("ran as plain autograd")
    return out


def minor_faults(fn, args):
    import resource
    gc.collect()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn(*args)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0


def diagnose_jit_ps(f, inputs, with_stablehlo):
    """Optimised HLO, arrays moved per call (jit_ps stats), minor page faults of one call."""
    faults = minor_faults(f, inputs)
    text = f.optimized_hlo(*inputs)
    before = (f.stats.host_to_device, f.stats.device_to_host)
    f(*inputs)
    moved = (f.stats.host_to_device - before[0], f.stats.device_to_host - before[1])
    return {"text": text, "moved": moved, "faults": faults, "stablehlo": f.stablehlo(*inputs) if with_stablehlo else None}


def diagnose_jax(jitted, call, inputs):
    lowered = jitted.lower(*inputs)
    return {"text": lowered.compile().as_text(), "moved": None, "faults": minor_faults(call, inputs),
            "stablehlo": lowered.as_text()}


def scipy_lse_probe(seed, align):
    """Does vmap(grad(loss)) compile when the loss uses autograd.scipy.special.logsumexp?"""
    import autograd_xla
    from autograd_xla import FallbackWarning
    params, x, y = mlp_inputs(onp.random.default_rng(seed), 4, align)
    v = autograd_xla.vmap(grad(make_mlp_loss(scipy_lse=True)), in_axes=(None, 0, 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        v(params, x, y)
    fell = [w for w in caught if issubclass(w.category, FallbackWarning)]
    if not fell and not v.stats.fallbacks:
        return "compiles"
    msg = str(fell[0].message) if fell else "fell back"
    m = re.search(r"raised (.*?)\n", msg)
    return "falls back to plain autograd: " + (m.group(1) if m else msg.splitlines()[0])


def stablehlo_sizes(sizes):
    """{n: {title: (characters, lines)}} of the StableHLO text jit_ps gives XLA."""
    import autograd_xla
    from autograd_xla import jit_ps
    out = {}
    for n in sizes:
        x = onp.random.default_rng(n).standard_normal(n)
        out[n] = {}
        for title, h in (("jit_ps(autograd.hessian)", jit_ps(autograd.hessian(make_f()), fallback="error")),
                         ("autograd_xla.hessian", autograd_xla.hessian(make_f()))):
            text = h.stablehlo(x)
            out[n][title] = (len(text), text.count("\n") + 1)
    return out


def compile_seconds(texts, backend="cpu", rounds=5):
    """{key: median seconds} for XLA to compile each StableHLO text on jit_ps's client, bypassing
    every cache; the texts take turns, round after round, as timing.interleaved does."""
    from jaxlib import xla_client as xc

    from autograd_xla import backend as backend_mod
    be = backend_mod.get_backend(backend)
    times = {k: [] for k in texts}
    for _ in range(rounds):
        for k, text in texts.items():
            t0 = time.perf_counter()
            be.client.compile_and_load(text, xc.DeviceList((be.default_device,)), xc.CompileOptions())
            times[k].append(time.perf_counter() - t0)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


# ----- in the parent ------------------------------------------------------------------------------

class Contender:
    """What the parent learns of one contender: its first calls, its split of jit_ps's time,
    its difference from plain autograd, its steady state."""

    def __init__(self, key, title, kind):
        self.key, self.title, self.kind = key, title, kind
        self.first = []       # seconds of each first call
        self.split = None     # (trace, lower, compile) of the last first call, jit_ps only
        self.error = None
        self.cache_hit = False


def section(params, keys, titles, args, ref_of):
    """One section's (or Hessian size's) contenders: first calls (in fresh processes where
    the first call of a worker is not the case's own), correctness, steady state, diagnosis."""
    kinds = {"autograd": "autograd", "jit_ps_loop": "jit_ps", "vmap": "jit_ps", "jit_ps": "jit_ps", "ax": "jit_ps",
             "jax": "jax"}
    cs = [Contender(k, titles[k], kinds[k]) for k in keys]
    used = list(dict.fromkeys(c.kind for c in cs))
    res = {"contenders": cs}
    with procs.Workers(used, args.backend) as ws:
        for w in ws.values():
            w.build(FACTORY, **params)
        ref, fresh = None, set()
        for c in cs:
            t, out, split = ws[c.kind].request("first", c.key)
            if c.kind not in fresh or c.key == "jit_ps_loop":  # the loop's compile takes ~30 s: measured once
                c.first.append(t)
                c.split = split and (split["trace"], split["lower"], split["compile"])
            fresh.add(c.kind)
            if c.key == "autograd":
                ref = out
            else:
                expect = ref_of(c, ref)
                dtype = params.get("dtype", "float64")
                c.error = procs.compare(expect, out, dtype, res.setdefault("dtype_notes", []), c.title)
                tol = procs.TOLERANCE[dtype]
                if not c.error <= tol:
                    raise AssertionError(f"{c.title}: result differs from plain autograd by {c.error:.2e} (relative)")
        del ref, out
        samples, res["numbers"] = procs.interleaved({c.key: (ws[c.kind], c.key) for c in cs}, args.repeat,
                                                    args.target_ms / 1e3)
        res["summary"] = {k: timing.summarize(v) for k, v in samples.items()}
        if args.diagnose_section and params.get("n") in (None, args.diag_n):
            res["diag"] = diagnose(cs, ws, args)
    for c in cs:
        if c.kind != "autograd" and c.key != "jit_ps_loop":
            for t, split in procs.fresh_first_calls(c.kind, FACTORY, params, c.key, args.first_calls - len(c.first),
                                                    args.backend):
                c.first.append(t)
                c.split = split and (split["trace"], split["lower"], split["compile"])
    return res


def per_example(args, dtype):
    params = {"section": "perexample", "seed": args.seed, "align": args.align, "batch": args.batch, "dtype": dtype,
              "jit_loop": not args.no_jit_loop}
    keys = ["autograd"] + ([] if args.no_jit_loop else ["jit_ps_loop"]) + ["vmap"] + (["jax"] if args.jax else [])
    res = section(params, keys, TITLES, args,
                  lambda c, ref: ref if c.key == "jit_ps_loop" else stack_examples(ref))
    with procs.Worker("jit_ps", args.backend) as w:
        res["probe"] = w.call("vmap:scipy_lse_probe", args.seed, args.align)
    return res


def hessian_section(args):
    rows = {}
    for n in args.sizes:
        print(f"<!-- hessian n={n} -->", file=sys.stderr, flush=True)
        params = {"section": "hessian", "seed": args.seed, "align": args.align, "n": n}
        keys = (["autograd"] if args.max_plain_n is None or n <= args.max_plain_n else []) + ["jit_ps", "ax"] + \
            (["jax"] if args.jax else [])
        if "autograd" not in keys:
            raise SystemExit("--max-plain-n: plain autograd's Hessian is the reference every result is checked against")
        rows[n] = section(params, keys, HESSIAN_TITLES, args, lambda c, ref: ref)
    sizes = {}
    if args.hlo_sizes:
        with procs.Worker("jit_ps", args.backend) as w:
            sizes = w.call("vmap:stablehlo_sizes", args.hlo_sizes)
    return rows, sizes


# ----- diagnosis --------------------------------------------------------------------------------

_ENTRY = re.compile(r"^ENTRY\s+\S+\s+\((.*?)\)\s*->", re.M)


def entry_params(text):
    m = _ENTRY.search(text)
    if not m:
        return "?"
    return ", ".join(re.findall(r":\s*([a-z0-9]+\[[0-9,]*\])", m.group(1)))


def diagnose(cs, ws, args):
    """Per compiled contender, from its worker: optimised HLO, the entry computation's
    parameters, arrays moved per call (jit_ps stats), page faults of one call; and every
    StableHLO text's XLA compile time on jit_ps's client (jax's text too: it is only text)."""
    out = {}
    for c in cs:
        if c.kind == "autograd":
            continue
        try:
            out[c.key] = dict(ws[c.kind].extra(c.key, "diag"), title=c.title)
        except Exception as e:  # diagnostics are optional
            out[c.key] = {"title": c.title, "text": None, "moved": None, "error": f"{type(e).__name__}: {e}"}
    texts = {k: v["stablehlo"] for k, v in out.items() if v.get("stablehlo")}
    compiles = ws["jit_ps"].call("vmap:compile_seconds", texts, args.backend) if texts else {}
    for k, v in out.items():
        v["compile"] = compiles.get(k)
    return out


_COPY = re.compile(r"=\s+([a-z0-9]+)\[([0-9,]*)\](\{[0-9,]*\})?\s+(copy|transpose)\(")


def copies(text):
    """The copy / transpose instructions of an optimised HLO module, largest first (shape{layout})."""
    found = {}
    for m in _COPY.finditer(text):
        dims = [int(d) for d in m.group(2).split(",") if d]
        size = 1
        for d in dims:
            size *= d
        key = f"{m.group(4)} {m.group(1)}[{m.group(2)}]{m.group(3) or ''}"
        found[key] = size
    big = sorted(found, key=found.get, reverse=True)[:3]
    return "; ".join(big) if big else "none"


# ----- report -----------------------------------------------------------------------------------

def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}×"


def med(summary, key):
    s = summary.get(key)
    return None if s is None else s[STAT]


def first_cell(c):
    if not c.first:
        return "—"
    t = sorted(c.first)[len(c.first) // 2]
    cell = timing.format_seconds(t)
    if len(c.first) > 1:
        cell += f" (min {timing.format_seconds(min(c.first))})"
    if c.cache_hit:
        cell += " (program cache hit)"
    return cell


def first_median(c):
    return sorted(c.first)[len(c.first) // 2] if c.first else None


def split_cell(c):
    if c.split is None:
        return "—"
    return " / ".join(timing.format_seconds(s) for s in c.split)


def report_perexample(res, args, lines, dtype):
    cs, summary = res["contenders"], res["summary"]
    jax_t = med(summary, "jax")
    ag_t = med(summary, "autograd")
    lines += ["", f"## 1. Per-example gradients: tanh MLP {'-'.join(map(str, MLP_SIZES))}, softmax cross-entropy, "
                  f"batch {args.batch}, {dtype}", "",
              f"Steady state: {STAT} per call (± = interquartile range / median), {args.repeat} interleaved "
              f"samples of ≥{args.target_ms:g} ms (calls per sample in brackets). First call: trace + compile + "
              f"one run of a freshly built function in a fresh process, median of {args.first_calls} "
              f"(jit_ps(loop): one, in the process that had just compiled the vmap).", ""]
    head = ["contender", "steady state", "vs jax.jit", "autograd / this", "first call",
            "jit_ps trace / lower / compile", "first call vs jax.jit"]
    rows = []
    jf_first = first_median(next((c for c in cs if c.key == "jax"), None)) if jax_t else None
    for c in cs:
        t = med(summary, c.key)
        rows.append([c.title, f"{procs.cell(summary[c.key], STAT)} [{res['numbers'][c.key]}]",
                     fmt_ratio(t / jax_t if jax_t else None), fmt_ratio(ag_t / t if ag_t else None),
                     first_cell(c), split_cell(c),
                     fmt_ratio(first_median(c) / jf_first if jf_first else None)])
    lines += procs.table(head, rows)
    lines += ["", "- The loops return a list of one `[(dW, db), ...]` per example; vmap and jax return them stacked "
                  "(`[(dW[256,...], db[256,...]), ...]`); the timed calls include no restacking.",
              "- Largest difference from plain autograd, relative: " +
              ", ".join(f"{c.title} {c.error:.1e}" for c in cs if c.key != "autograd") + "." +
              "".join(f" Note: {n}." for n in sorted(set(res.get("dtype_notes", [])))),
              f"- Probe: `vmap(grad(loss))` with the log-sum-exp written as `autograd.scipy.special.logsumexp` "
              f"(4 examples): {res['probe']}."]


def report_hessian(rows, sizes, args, lines):
    lines += ["", "## 2. Dense Hessian of `f(x) = sum(tanh(x))**2`", "",
              f"Steady state: {STAT} per call, ± = IQR / median, interleaved per n ({args.repeat} samples of "
              f"≥{args.target_ms:g} ms). Ratios are against jax.jit in the same run.", ""]
    titles = []
    for r in rows.values():
        for c in r["contenders"]:
            if c.title not in titles:
                titles.append(c.title)
    keys = {c.title: c.key for r in rows.values() for c in r["contenders"]}
    has_jax = "jax" in keys.values()
    head = ["n"] + titles + ([f"{t} / jax.jit" for t in titles if keys[t] != "jax"] if has_jax else [])
    out = []
    for n, r in rows.items():
        s = r["summary"]
        by = {c.title: c for c in r["contenders"]}
        row = [str(n)] + [procs.cell(s[keys[t]], STAT) if t in by else "skipped" for t in titles]
        if has_jax:
            jt = med(s, "jax")
            row += [fmt_ratio(med(s, keys[t]) / jt if t in by and jt else None) for t in titles if keys[t] != "jax"]
        out.append(row)
    lines += procs.table(head, out)

    lines += ["", f"First call (median of {args.first_calls} fresh builds; jit_ps: trace / lower / XLA compile of the "
                  "last):", ""]
    compiled = [t for t in titles if keys[t] not in ("jax", "autograd")]
    head = ["n"] + titles + ([f"{t} / jax.jit" for t in compiled] if has_jax else [])
    out = []
    for n, r in rows.items():
        by = {c.title: c for c in r["contenders"]}
        row = [str(n)]
        for t in titles:
            c = by.get(t)
            row.append("skipped" if c is None else first_cell(c) + (f" ({split_cell(c)})" if c.split else ""))
        if has_jax:
            jt = first_median(next(c for c in r["contenders"] if c.key == "jax"))
            row += [fmt_ratio(first_median(by[t]) / jt) for t in compiled]
        out.append(row)
    lines += procs.table(head, out)
    errs = "; ".join(f"n={n}: " + ", ".join(f"{c.title} {c.error:.1e}" for c in r["contenders"] if c.key != "autograd")
                     for n, r in rows.items())
    lines += ["", f"Largest difference from plain autograd, relative: {errs}."]
    if sizes:
        lines += ["", "StableHLO text given to XLA (`jf.stablehlo(x)`): characters / lines", ""]
        titles2 = list(next(iter(sizes.values())))
        lines += procs.table(["n"] + titles2, [[str(n)] + [f"{c:,} / {ln:,}" for c, ln in v.values()]
                                             for n, v in sizes.items()])


def report_diag(name, diag, lines, hlo_dir=None):
    if not diag:
        return
    texts = {k: v["text"] for k, v in diag.items() if v.get("text")}
    titles = {k: v["title"] for k, v in diag.items()}
    compiles = {k: v["compile"] for k, v in diag.items() if v.get("compile") is not None}
    for k, v in diag.items():
        if v.get("error"):
            lines.append(f"- {v['title']}: diagnosis unavailable: {v['error']}")
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        for k, t in texts.items():
            with open(os.path.join(hlo_dir, f"{name}.{k}.optimized.hlo"), "w") as f:
                f.write(t)
    counts = {k: procs.hlo_op_counts(t) for k, t in texts.items()}
    ops = sorted(set().union(*counts.values())) if counts else []
    keys = list(texts)
    faults = {k: v["faults"] for k, v in diag.items() if "faults" in v}
    lines += procs.table(["optimised HLO"] + [titles[k] for k in keys],
                       [["entry parameters"] + [entry_params(texts[k]) for k in keys],
                        ["arrays in / out per call (jit_ps stats)"] +
                        ["{} / {}".format(*diag[k]["moved"]) if k in diag and diag[k]["moved"] else "—"
                         for k in keys],
                        ["XLA compile of its StableHLO alone (same client, interleaved, median of 5)"] +
                        [timing.format_seconds(compiles[k]) if k in compiles else "—" for k in keys],
                        ["minor page faults in one call (getrusage)"] +
                        [f"{faults[k]:,}" if k in faults else "—" for k in keys],
                        ["largest copies / transposes"] + [copies(texts[k]) for k in keys],
                        ["text characters"] + [f"{len(texts[k]):,}" for k in keys]] +
                       [[op] + [str(counts[k].get(op, 0)) for k in keys] for op in ops])


def acceptance(pe, hs, args, lines):
    lines += ["", "## Acceptance checks", ""]
    checks = []
    if hs:
        n = 500 if 500 in hs else max(hs)
        r = hs[n]
        s = r["summary"]
        by = {c.key: c for c in r["contenders"]}
        if "jax" in s:
            for key in ("jit_ps", "ax"):
                ss = med(s, key) / med(s, "jax")
                fc = first_median(by[key]) / first_median(by["jax"])
                checks.append((f"Hessian n={n}: {by[key].title} steady state / jax.jit", ss, 1.0))
                checks.append((f"Hessian n={n}: {by[key].title} first call / jax.jit", fc, 1.5))
    for dtype, r in (pe or {}).items():
        if "jax" in r["summary"]:
            s = r["summary"]
            checks.append((f"per-example gradients, batch {args.batch}, {dtype}: autograd_xla.vmap(grad) / "
                           "jax.jit(jax.vmap(jax.grad)), steady state", med(s, "vmap") / med(s, "jax"), 1.0))
    if not checks:
        lines.append("(need jax)")
        return True
    lines += procs.table(["check", "ratio", "bound", "verdict"],
                       [[name, f"{v:.2f}", f"≤ {b:g}", "PASS" if v <= b else "FAIL"] for name, v, b in checks])
    return all(v <= b for _, v, b in checks)


# ----- main -------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = timing.section_parser(__doc__, SECTIONS, "fewer, shorter samples; one first call each")
    p.add_argument("--sizes", default="100,500,1000", help="Hessian sizes n (default 100,500,1000)")
    p.add_argument("--hlo-sizes", default="20,500", help="n for the StableHLO size table (default 20,500; '' none)")
    p.add_argument("--max-plain-n", type=int, help="skip plain autograd.hessian above this n")
    p.add_argument("--batch", type=int, default=256, help="examples per per-example-gradient call (default 256)")
    p.add_argument("--no-jit-loop", action="store_true",
                   help="leave out jit_ps(loop) (its XLA compile takes ~30 s at batch 256)")
    p.add_argument("--repeat", type=int, help="interleaved samples per contender; default 21, quick 7")
    p.add_argument("--target-ms", type=float, help="minimum duration of one sample; default 40, quick 15")
    p.add_argument("--first-calls", type=int, help="fresh first calls per contender (median shown); default 3, quick 1")
    p.add_argument("--stat", choices=("median", "min"), default="median")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--align", type=int, choices=(16, 64), default=16, help="input addresses mod 64 (procs.place)")
    p.add_argument("--dtype", choices=("float32", "float64", "both"), default="both",
                   help="per-example gradients' dtype (default both); the Hessian is float64")
    p.add_argument("--no-diagnose", action="store_true", help="omit the optimised-HLO comparison")
    p.add_argument("--diag-n", type=int, default=500, help="Hessian size diagnosed (default 500)")
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--hlo-dir", metavar="DIR", help="also write the diagnosed programs' optimised HLO here")
    args = timing.sections_and_sampling(p, p.parse_args(argv), SECTIONS)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.hlo_sizes = [int(s) for s in args.hlo_sizes.split(",") if s.strip()]
    if args.first_calls is None:
        args.first_calls = 1 if args.quick else 3
    args.diagnose_section = not args.no_diagnose
    args.dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)
    args.jax = not args.no_jax and procs.jax_available()
    return args


def main(argv=None):
    global STAT
    args = parse_args(argv)
    STAT = args.stat
    env = procs.environment(jax_column="present" if args.jax else "absent or --no-jax", backend=args.backend)
    t0 = time.perf_counter()
    pe, hs, sizes = {}, None, None
    if "perexample" in args.sections:
        for dtype in args.dtypes:
            print(f"<!-- per-example gradients, {dtype} -->", file=sys.stderr, flush=True)
            pe[dtype] = per_example(args, dtype)
    if "hessian" in args.sections:
        hs, sizes = hessian_section(args)
    env["benchmark_seconds"] = round(time.perf_counter() - t0, 1)

    lines = ["# Batching: per-example gradients and dense Hessians (autograd, jit_ps, autograd_xla, jax.jit)",
             "", "## Environment", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    for dtype, r in pe.items():
        report_perexample(r, args, lines, dtype)
    if hs:
        report_hessian(hs, sizes, args, lines)
    if args.diagnose_section and (pe or hs):
        lines += ["", "## Diagnosis: the compiled programs", ""]
        for dtype, r in pe.items():
            if r.get("diag"):
                lines += [f"Per-example gradients, batch {args.batch}, {dtype}:", ""]
                report_diag(f"perexample.{dtype}", r["diag"], lines, args.hlo_dir)
                lines.append("")
        if hs and args.diag_n in hs and hs[args.diag_n].get("diag"):
            lines += [f"Hessian, n={args.diag_n}:", ""]
            report_diag(f"hessian{args.diag_n}", hs[args.diag_n]["diag"], lines, args.hlo_dir)
    ok = acceptance(pe, hs, args, lines)
    lines += ["", f"load average at start {procs.fmt_load(env['loadavg_start'])}, at end "
                  f"{procs.fmt_load(os.getloadavg())} ({env['cpus_usable']} usable CPUs; more than that means the "
                  "numbers are disturbed)"]
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
