"""Benchmark of the batching transformations: per-example gradients and dense Hessians.

    python benchmarks/vmap.py [--quick] [--only perexample,hessian] [--sizes 100,500,1000]
                              [--batch 256] [--repeat N] [--target-ms MS] [--stat median|min]
                              [--first-calls K] [--no-jit-loop] [--no-jax] [--hlo-dir DIR]

Prints markdown, everything measured in one process, contenders interleaved (timing.py):

1. per-example gradients of a tanh MLP's softmax cross-entropy (one example's loss as a
   function of (params, x, y)), batch 256: a Python loop of autograd's `grad` over the
   examples, plain and under `jit_ps`; `autograd_xla.vmap(grad(loss), in_axes=(None, 0, 0))`;
   `jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))`;
2. the dense Hessian of `f(x) = sum(tanh(x))**2`: `autograd.hessian(f)` plain and under
   `jit_ps`, `autograd_xla.hessian(f)`, `jax.jit(jax.hessian(f))`; and the StableHLO size of
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

import run  # noqa: E402  (environment, place, compare, table, hlo_op_counts, ...)
import timing  # noqa: E402

SECTIONS = ("perexample", "hessian")
MLP_SIZES = (784, 200, 100, 10)
TOLERANCE = 1e-10  # relative to the result's magnitude, float64

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

def mlp_inputs(rng, batch, align):
    params = [(rng.standard_normal((m, n)) / onp.sqrt(m), 0.1 * rng.standard_normal(n))
              for m, n in zip(MLP_SIZES[:-1], MLP_SIZES[1:])]
    x = rng.standard_normal((batch, MLP_SIZES[0]))
    y = onp.eye(MLP_SIZES[-1])[rng.integers(0, MLP_SIZES[-1], batch)]
    return run.place((params, x, y), align)


def stack_examples(per_example):
    """[example][layer](dW, db) -> [layer](dW stacked, db stacked): vmap's layout."""
    return [tuple(onp.stack([ex[layer][k] for ex in per_example]) for k in (0, 1))
            for layer in range(len(per_example[0]))]


# ----- contenders -------------------------------------------------------------------------------

class Contender:
    """`build()` returns (callable, jitted or None) made of fresh function objects; `expect` is
    what its result must match (plain autograd's, possibly restacked)."""

    def __init__(self, key, title, build, args, expect):
        self.key, self.title, self.build, self.args, self.expect = key, title, build, args, expect
        self.fn = self.jf = None
        self.first = []       # seconds of each first call
        self.split = None     # (trace, lower, compile) of the last first call, jit_ps only
        self.cache_hit = False
        self.error = None


def jax_caller(jax, jitted):
    asarray, tree_map = onp.asarray, jax.tree_util.tree_map
    return lambda *a: tree_map(asarray, jitted(*a))


def first_calls(contenders, k, ref_of):
    """k rounds; each round gives every contender one first call of a freshly built function
    (after dropping the previous one, so jit_ps's in-process program cache, which holds programs
    weakly, cannot serve it). The last round's functions are kept for the steady state."""
    from autograd_xla import FallbackWarning
    for r in range(k):
        for c in contenders:
            if c.key == "jit_ps_loop" and r > 0:
                continue  # its compile takes tens of seconds: measured once
            c.fn = c.jf = None
            gc.collect()
            fn, jf = c.build()
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)  # a silent fallback would time plain autograd
                warnings.filterwarnings("ignore", message=".*traced to a program of")
                t, out = timing.time_once(fn, c.args)
            c.first.append(t)
            c.fn, c.jf = fn, jf
            if jf is not None:
                st = jf.stats
                if st.fallbacks:
                    raise AssertionError(f"{c.title} ran as plain autograd")
                c.split = (st.trace_seconds, st.lower_seconds, st.compile_seconds)
                c.cache_hit = st.compiles == 0
            c.error = run.compare(ref_of(c), out, onp.float64, who=c.title)
            if not c.error <= TOLERANCE:
                raise AssertionError(f"{c.title}: result differs from plain autograd by {c.error:.2e} (relative)")
            del out


def steady(contenders, args):
    samples, numbers = timing.interleaved({c.key: (c.fn, c.args) for c in contenders}, args.repeat,
                                          args.target_ms / 1e3)
    return {k: timing.summarize(v) for k, v in samples.items()}, numbers


# ----- per-example gradients --------------------------------------------------------------------

def per_example(args, jax, jnp):
    import autograd_xla
    from autograd_xla import jit_ps
    params, x, y = inputs = mlp_inputs(onp.random.default_rng(args.seed), args.batch, args.align)
    plain = make_loop()
    ref = plain(*inputs)
    ref_stacked = stack_examples(ref)

    cs = [Contender("autograd", "autograd loop", lambda: (make_loop(), None), inputs, ref)]
    if not args.no_jit_loop:
        def build_jit_loop():
            jf = jit_ps(make_loop(), fallback="error")
            return jf, jf
        cs.append(Contender("jit_ps_loop", "jit_ps(loop)", build_jit_loop, inputs, ref))

    def build_vmap():
        v = autograd_xla.vmap(grad(make_mlp_loss()), in_axes=(None, 0, 0))
        return v, v
    cs.append(Contender("vmap", "autograd_xla.vmap(grad)", build_vmap, inputs, ref_stacked))
    if jax is not None:
        def build_jax():
            return jax_caller(jax, jax.jit(jax.vmap(jax.grad(make_jax_mlp_loss(jnp)), in_axes=(None, 0, 0)))), None
        cs.append(Contender("jax", "jax.jit(jax.vmap(jax.grad))", build_jax, inputs, ref_stacked))

    first_calls(cs, args.first_calls, lambda c: c.expect)
    summary, numbers = steady(cs, args)
    res = {"contenders": cs, "summary": summary, "numbers": numbers, "probe": scipy_lse_probe(x, y, params),
           "inputs": inputs}
    if args.diagnose_section:
        res["diag"] = diagnose(cs, inputs, jax)
    return res


def scipy_lse_probe(x, y, params):
    """Does vmap(grad(loss)) compile when the loss uses autograd.scipy.special.logsumexp?"""
    import autograd_xla
    from autograd_xla import FallbackWarning
    v = autograd_xla.vmap(grad(make_mlp_loss(scipy_lse=True)), in_axes=(None, 0, 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        v(params, x[:4], y[:4])
    fell = [w for w in caught if issubclass(w.category, FallbackWarning)]
    if not fell and not v.stats.fallbacks:
        return "compiles"
    msg = str(fell[0].message) if fell else "fell back"
    m = re.search(r"raised (.*?)\n", msg)
    return "falls back to plain autograd: " + (m.group(1) if m else msg.splitlines()[0])


# ----- dense Hessian ----------------------------------------------------------------------------

def hessian_section(args, jax, jnp):
    import autograd_xla
    from autograd_xla import jit_ps
    rows = {}
    for n in args.sizes:
        print(f"<!-- hessian n={n} -->", file=sys.stderr, flush=True)
        x = run.place(onp.random.default_rng(args.seed + n).standard_normal(n), args.align)
        inputs = (x,)
        ref = autograd.hessian(make_f())(x)
        cs = []
        if args.max_plain_n is None or n <= args.max_plain_n:
            cs.append(Contender("autograd", "autograd.hessian", lambda: (autograd.hessian(make_f()), None),
                                inputs, ref))

        def build_jit():
            jf = jit_ps(autograd.hessian(make_f()), fallback="error")
            return jf, jf

        def build_ax():
            h = autograd_xla.hessian(make_f())
            return h, h
        cs.append(Contender("jit_ps", "jit_ps(autograd.hessian)", build_jit, inputs, ref))
        cs.append(Contender("ax", "autograd_xla.hessian", build_ax, inputs, ref))
        if jax is not None:
            def build_jax():
                return jax_caller(jax, jax.jit(jax.hessian(make_jax_f(jnp)))), None
            cs.append(Contender("jax", "jax.jit(jax.hessian)", build_jax, inputs, ref))
        first_calls(cs, args.first_calls, lambda c: c.expect)
        summary, numbers = steady(cs, args)
        rows[n] = {"contenders": cs, "summary": summary, "numbers": numbers, "inputs": inputs}
        if args.diagnose_section and n == args.diag_n:
            rows[n]["diag"] = diagnose(cs, inputs, jax)
    sizes = {}
    for n in args.hlo_sizes:
        x = onp.random.default_rng(n).standard_normal(n)
        sizes[n] = {}
        for title, h in (("jit_ps(autograd.hessian)", jit_ps(autograd.hessian(make_f()), fallback="error")),
                         ("autograd_xla.hessian", autograd_xla.hessian(make_f()))):
            text = h.stablehlo(x)
            sizes[n][title] = (len(text), text.count("\n") + 1)
    return rows, sizes


# ----- diagnosis --------------------------------------------------------------------------------

_ENTRY = re.compile(r"^ENTRY\s+\S+\s+\((.*?)\)\s*->", re.M)


def entry_params(text):
    m = _ENTRY.search(text)
    if not m:
        return "?"
    return ", ".join(re.findall(r":\s*([a-z0-9]+\[[0-9,]*\])", m.group(1)))


def diagnose(cs, inputs, jax):
    """Per compiled contender: optimised-HLO op counts, the entry computation's parameters, and
    host-to-device / device-to-host arrays of one call (jit_ps stats)."""
    import resource
    out = {}
    for c in cs:
        gc.collect()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        c.fn(*c.args)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        try:
            if c.key == "jax":
                out[c.key] = {"title": c.title, "text": None, "moved": None, "faults": faults}
                continue
            if c.jf is not None:
                text = c.jf.optimized_hlo(*inputs)
                before = (c.jf.stats.host_to_device, c.jf.stats.device_to_host)
                c.fn(*inputs)
                moved = (c.jf.stats.host_to_device - before[0], c.jf.stats.device_to_host - before[1])
            else:
                continue
            out[c.key] = {"title": c.title, "text": text, "moved": moved, "faults": faults,
                          "stablehlo": None if c.key == "jit_ps_loop" else c.jf.stablehlo(*inputs)}
        except Exception as e:  # diagnostics are optional
            out[c.key] = {"title": c.title, "text": None, "moved": None, "error": f"{type(e).__name__}: {e}"}
    return out


def jax_lowered(jax, jnp, section, inputs):
    if section.startswith("perexample"):
        jitted = jax.jit(jax.vmap(jax.grad(make_jax_mlp_loss(jnp)), in_axes=(None, 0, 0)))
    else:
        jitted = jax.jit(jax.hessian(make_jax_f(jnp)))
    return jitted.lower(*inputs)


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


# ----- report -----------------------------------------------------------------------------------

def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}×"


def med(summary, key):
    s = summary.get(key)
    return None if s is None else s[run.STAT]


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


def report_perexample(res, args, lines):
    cs, summary = res["contenders"], res["summary"]
    jax_t = med(summary, "jax")
    ag_t = med(summary, "autograd")
    lines += ["", f"## 1. Per-example gradients: tanh MLP {'-'.join(map(str, MLP_SIZES))}, softmax cross-entropy, "
                  f"batch {args.batch}", "",
              f"Steady state: {run.STAT} per call (± = interquartile range / median), {args.repeat} interleaved "
              f"samples of ≥{args.target_ms:g} ms (calls per sample in brackets). First call: trace + compile + "
              f"one run of freshly built functions, median of {args.first_calls} "
              f"(jit_ps(loop): one), before that contender's steady state.", ""]
    head = ["contender", "steady state", "vs jax.jit", "autograd / this", "first call",
            "jit_ps trace / lower / compile", "first call vs jax.jit"]
    rows = []
    jf_first = first_median(next((c for c in cs if c.key == "jax"), None)) if jax_t else None
    for c in cs:
        t = med(summary, c.key)
        rows.append([c.title, f"{run.fmt_cell(summary[c.key])} [{res['numbers'][c.key]}]",
                     fmt_ratio(t / jax_t if jax_t else None), fmt_ratio(ag_t / t if ag_t else None),
                     first_cell(c), split_cell(c),
                     fmt_ratio(first_median(c) / jf_first if jf_first else None)])
    lines += run.table(head, rows)
    lines += ["", "- The loops return a list of one `[(dW, db), ...]` per example; vmap and jax return them stacked "
                  "(`[(dW[256,...], db[256,...]), ...]`); the timed calls include no restacking.",
              "- Largest difference from plain autograd, relative: " +
              ", ".join(f"{c.title} {c.error:.1e}" for c in cs if c.key != "autograd") + ".",
              f"- Probe: `vmap(grad(loss))` with the log-sum-exp written as `autograd.scipy.special.logsumexp` "
              f"(4 examples): {res['probe']}."]


def report_hessian(rows, sizes, args, lines):
    lines += ["", "## 2. Dense Hessian of `f(x) = sum(tanh(x))**2`", "",
              f"Steady state: {run.STAT} per call, ± = IQR / median, interleaved per n ({args.repeat} samples of "
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
        row = [str(n)] + [run.fmt_cell(s[keys[t]]) if t in by else "skipped" for t in titles]
        if has_jax:
            jt = med(s, "jax")
            row += [fmt_ratio(med(s, keys[t]) / jt if t in by and jt else None) for t in titles if keys[t] != "jax"]
        out.append(row)
    lines += run.table(head, out)

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
    lines += run.table(head, out)
    errs = "; ".join(f"n={n}: " + ", ".join(f"{c.title} {c.error:.1e}" for c in r["contenders"] if c.key != "autograd")
                     for n, r in rows.items())
    lines += ["", f"Largest difference from plain autograd, relative: {errs}."]
    if sizes:
        lines += ["", "StableHLO text given to XLA (`jf.stablehlo(x)`): characters / lines", ""]
        titles2 = list(next(iter(sizes.values())))
        lines += run.table(["n"] + titles2, [[str(n)] + [f"{c:,} / {ln:,}" for c, ln in v.values()]
                                             for n, v in sizes.items()])


def report_diag(name, diag, jax, jnp, inputs, lines, hlo_dir=None):
    if not diag:
        return
    texts = {k: v["text"] for k, v in diag.items() if v.get("text")}
    titles = {k: v["title"] for k, v in diag.items()}
    stablehlo = {k: v["stablehlo"] for k, v in diag.items() if v.get("stablehlo")}
    if jax is not None:
        try:
            lowered = jax_lowered(jax, jnp, name, inputs)
            texts["jax"] = lowered.compile().as_text()
            titles["jax"] = "jax.jit"
            stablehlo["jax"] = lowered.as_text()
        except Exception as e:
            lines.append(f"- jax's compiled text unavailable: {type(e).__name__}: {e}")
    compiles = compile_seconds(stablehlo)
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        for k, t in texts.items():
            with open(os.path.join(hlo_dir, f"{name}.{k}.optimized.hlo"), "w") as f:
                f.write(t)
    counts = {k: run.hlo_op_counts(t) for k, t in texts.items()}
    ops = sorted(set().union(*counts.values())) if counts else []
    keys = list(texts)
    faults = {k: v["faults"] for k, v in diag.items() if "faults" in v}
    lines += run.table(["optimised HLO"] + [titles[k] for k in keys],
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
    if pe and "jax" in pe["summary"]:
        s = pe["summary"]
        checks.append((f"per-example gradients, batch {args.batch}: autograd_xla.vmap(grad) / "
                       "jax.jit(jax.vmap(jax.grad)), steady state", med(s, "vmap") / med(s, "jax"), 1.0))
    if not checks:
        lines.append("(need jax)")
        return True
    lines += run.table(["check", "ratio", "bound", "verdict"],
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
    p.add_argument("--align", type=int, choices=(16, 64), default=16, help="input addresses mod 64 (run.py's --align)")
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
    args.dtype, args.jax_sync_dispatch = "float64", False  # for run.environment / run.import_jax
    return args


def main(argv=None):
    args = parse_args(argv)
    run.STAT = args.stat
    jax, jnp, jax_note = run.import_jax(args)
    env = run.environment(args, jax, jax_note)
    run.warm_runtimes(jax, args)
    t0 = time.perf_counter()
    pe = hs = sizes = None
    if "perexample" in args.sections:
        print("<!-- per-example gradients -->", file=sys.stderr, flush=True)
        pe = per_example(args, jax, jnp)
    if "hessian" in args.sections:
        hs, sizes = hessian_section(args, jax, jnp)
    env["benchmark_seconds"] = round(time.perf_counter() - t0, 1)

    lines = ["# Batching: per-example gradients and dense Hessians (autograd, jit_ps, autograd_xla, jax.jit)",
             "", "## Environment", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    if pe:
        report_perexample(pe, args, lines)
    if hs:
        report_hessian(hs, sizes, args, lines)
    if args.diagnose_section and (pe or hs):
        lines += ["", "## Diagnosis: the compiled programs", ""]
        if pe and pe.get("diag"):
            lines += [f"Per-example gradients, batch {args.batch}:", ""]
            report_diag("perexample", pe["diag"], jax, jnp, pe["inputs"], lines, args.hlo_dir)
            lines.append("")
        if hs and args.diag_n in hs and hs[args.diag_n].get("diag"):
            lines += [f"Hessian, n={args.diag_n}:", ""]
            report_diag(f"hessian{args.diag_n}", hs[args.diag_n]["diag"], jax, jnp, hs[args.diag_n]["inputs"], lines,
                        args.hlo_dir)
    ok = acceptance(pe, hs, args, lines)
    lines += ["", f"load average at start {run._fmt_load(env['loadavg_start'])}, at end "
                  f"{run._fmt_load(os.getloadavg())} ({env['cpus_usable']} usable CPUs; more than that means the "
                  "numbers are disturbed)"]
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
