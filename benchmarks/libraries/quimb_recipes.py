"""By hand: quimb's TNOptimizer workloads (autodiff_backend="autograd") and plain autoray code
under the recipes a new user of jit_ps would try.

Workloads (quimb's "optimizing a tensor network" docs, small sizes):
    mps_fit      an MPS (bond 4) fitted to a random target MPS (bond 8) by negative overlap
    heis_energy  an MPS ground state of a Heisenberg chain: norm_fn spreads 1/sqrt(<psi|psi>),
                 loss = <psi|H|psi> contracted with tensor_network_align
    circuit_fit  a 2-round brickwork circuit of parametrized U3 gates + CZ (complex, PTensors)
                 fitted to a random complex target MPS: loss = 1 - |<psi|target>|^2

Recipes on each TNOptimizer workload:
    a   TNOptimizer(tn, loss_fn=jit_ps(loss), ...)                      (jit the user's loss)
    b1  AutoGradHandler.setup_fn patched: jit_ps(autograd.value_and_grad(fn))
    b2  AutoGradHandler.setup_fn patched: autograd.value_and_grad(jit_ps(fn))
    d   jit_ps(loss)(tn, **constants) called directly on a TensorNetwork, the network then
        changed in place (tn.multiply_ / normalize, what quimb users do) and called again
Recipes (c), plain autoray code (no quimb):
    c1 f = sum(tanh(x)**2)                 c2 sum(einsum("ijk,kjl->il", A, B)**2)
    c3 sum(tanh(tensordot(A, B, axes)))    c4 complex: svd(Z), conj, real, einsum
each as jit_ps(autograd.grad(f)), jit_ps(f) and autograd.grad(jit_ps(f)).

Verdicts (judged with tiered=False, so the first call traces and compiles; a second attempt with
fallback="error" gives the exact cause): compiled / fell back (cause) / failed / WRONG (differs
from plain autograd beyond 1e-10 relative, float64). Timing: a whole optimisation (--steps L-BFGS-B
evaluations, TNOptimizer built and first call included) in a fresh process per contender,
contenders interleaved over --rounds, medians. Contenders: plain; b1 / b2 with jit_ps's default
(tiered); ":untiered" = tiered=False; ":untiered-warm" = tiered=False after one plain evaluation of the
initial loss (so cotengra's contraction-path search does not run inside the trace).

    python3 -m venv /tmp/qb && /tmp/qb/bin/pip install quimb==1.16.0 autograd==1.9.1 jaxlib==0.10.2 numpy scipy
    PYTHONPATH=$PWD /tmp/qb/bin/python benchmarks/libraries/quimb_recipes.py [--no-timing] [--no-calls]
        [--rounds 3] [--steps 60] [--only mps_fit,...] [--contenders plain,b1,...] [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

RTOL, ATOL = 1e-10, 1e-12
SCRIPT = os.path.abspath(__file__)


# ---------------------------------------------------------------- workloads

def normalize_state(psi):
    return psi / (psi.H @ psi) ** 0.5


def negative_overlap(psi, target):
    return -(psi.H @ target) ** 2


def norm_spread(psi):
    nfact = (psi.H @ psi) ** 0.5
    return psi.multiply(1 / nfact, spread_over="all")


def energy(psi, ham):
    import quimb.tensor as qtn
    b, h, k = qtn.tensor_network_align(psi.H, ham, psi)
    return (b | h | k) ^ ...


def infidelity(psi, target):
    import autoray
    return 1 - autoray.do("abs", psi.H @ target) ** 2


def workload(name):
    """dict(tn, loss, norm_fn, constants, tags)."""
    import quimb.tensor as qtn
    if name == "mps_fit":
        L = 10
        return dict(tn=qtn.MPS_rand_state(L, bond_dim=4, seed=1), loss=negative_overlap, norm_fn=normalize_state,
                    constants={"target": qtn.MPS_rand_state(L, bond_dim=8, seed=2)}, tags=None)
    if name == "heis_energy":
        L = 8
        return dict(tn=qtn.MPS_rand_state(L, bond_dim=4, seed=7), loss=energy, norm_fn=norm_spread,
                    constants={"ham": qtn.MPO_ham_heis(L)}, tags=None)
    if name == "circuit_fit":
        N = 4
        rng = np.random.default_rng(1)
        circ = qtn.Circuit(N)
        for r in range(2):
            for i in range(N):
                circ.apply_gate("U3", *rng.uniform(0, 2 * np.pi, 3), i, gate_round=r, parametrize=True)
            for i in range(r % 2, N - 1, 2):
                circ.apply_gate("CZ", i, i + 1, gate_round=r)
        target = qtn.MPS_rand_state(N, bond_dim=2, seed=3, dtype="complex128")
        return dict(tn=circ.psi, loss=infidelity, norm_fn=None, constants={"target": target}, tags=["U3"])
    raise KeyError(name)


WORKLOADS = ["mps_fit", "heis_energy", "circuit_fit"]


def make_opt(w, recipe, **jit_kw):
    """A TNOptimizer for workload dict w under recipe ('plain', 'a', 'b1', 'b2'); returns
    (opt, [jitted functions])."""
    import autograd
    import quimb.tensor as qtn
    import quimb.tensor.optimize as qopt
    from autograd_xla import jit_ps
    jitted = []
    loss = w["loss"]
    if recipe == "a":
        loss = jit_ps(loss, **jit_kw)
        jitted.append(loss)
    orig = qopt.AutoGradHandler.setup_fn
    if recipe in ("b1", "b2"):
        def setup_fn(self, fn):  # what a user monkeypatching quimb's autograd handler writes
            orig(self, fn)
            if recipe == "b1":
                self._value_and_grad = jit_ps(autograd.value_and_grad(fn), **jit_kw)
                jitted.append(self._value_and_grad)
            else:
                jf = jit_ps(fn, **jit_kw)
                jitted.append(jf)
                self._value_and_grad = autograd.value_and_grad(jf)
        qopt.AutoGradHandler.setup_fn = setup_fn
    try:
        opt = qtn.TNOptimizer(w["tn"], loss_fn=loss, norm_fn=w["norm_fn"], loss_constants=w["constants"],
                              tags=w["tags"], autodiff_backend="autograd", progbar=False)
    finally:
        qopt.AutoGradHandler.setup_fn = orig
    return opt, jitted


# ---------------------------------------------------------------- judging

def leaves(r):
    if isinstance(r, (tuple, list)):
        return [x for i in r for x in leaves(i)]
    return [np.asarray(r)]


def disagreement(plain, other):
    a, b = leaves(plain), leaves(other)
    if len(a) != len(b):
        return f"{len(b)} results, plain {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return f"result {i}: shape {y.shape}, plain {x.shape}"
        if not np.allclose(y, x, rtol=RTOL, atol=ATOL):
            return (f"result {i}: off by {float(np.max(np.abs(x - y))):.3e} "
                    f"(plain magnitude {float(np.max(np.abs(x))):.3e})")
    return None


def short(text, n=220):
    text = str(text)
    if "for this signature: " in text:
        text = text.split("for this signature: ", 1)[1]
    return " ".join(text.split())[:n]


def judge(plain_call, jit_call, jitted_of, error_call=None):
    """plain_call(), jit_call() -> result; jitted_of(): the jitted functions used by jit_call;
    error_call: the same with fallback='error' (for the exact cause of a fallback)."""
    from autograd_xla import FallbackWarning
    try:
        reference = plain_call()
    except Exception as e:  # noqa: BLE001 - the workload itself does not run: not our verdict
        return {"status": "plain failed", "cause": f"{type(e).__name__}: {short(e)}"}
    verdict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            t0 = time.perf_counter()
            result = jit_call()
            verdict["seconds"] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            return {"status": "failed", "cause": f"{type(e).__name__}: {short(e)}"}
    fb = [short(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    info = [j.cache_info() for j in jitted_of()]
    verdict["traces"] = sum(i["traces"] for i in info)
    verdict["compiles"] = sum(i["compiles"] for i in info)
    wrong = disagreement(reference, result)
    if wrong:
        verdict.update(status="WRONG", cause=wrong + (f"; fell back: {fb[0]}" if fb else ""))
    elif fb or sum(i["fallbacks"] for i in info):
        verdict.update(status="fell back", cause=fb[0] if fb else "fallback counted, no warning")
    elif verdict["compiles"] == 0 and verdict["traces"] == 0:
        verdict.update(status="not compiled", cause="no trace, no compile")
    else:
        verdict.update(status="compiled", cause="")
    if error_call is not None and verdict["status"] != "compiled":
        try:
            error_call()
            verdict["fallback_error"] = "no error raised"
        except Exception as e:  # noqa: BLE001
            verdict["fallback_error"] = f"{type(e).__name__}: {short(e, 300)}"
    return verdict


def judge_tnopt(wname, recipe):
    w = workload(wname)
    plain, _ = make_opt(w, "plain")
    x0 = plain.vectorizer.vector.copy()

    def vg(opt):
        # two calls: tiered=False compiles at the first, the second runs the program
        r1 = opt.vectorized_value_and_grad(x0.copy())
        r1 = (r1[0], np.array(r1[1]))
        r2 = opt.vectorized_value_and_grad(x0.copy())
        return [r1[0], r1[1], r2[0], np.array(r2[1])]

    holder = {}

    def jit_call():
        opt, holder["jitted"] = make_opt(w, recipe, tiered=False)
        return vg(opt)

    def error_call():
        opt, _ = make_opt(w, recipe, tiered=False, fallback="error")
        return vg(opt)

    return judge(lambda: vg(plain), jit_call, lambda: holder.get("jitted", []), error_call)


def judge_static_mutation(wname):
    """Recipe d: jit_ps(loss) called on a TensorNetwork, which is then changed in place."""
    from autograd_xla import jit_ps
    w = workload(wname)
    norm = w["norm_fn"] or (lambda t: t)

    def run(f, **kw):
        tn = norm(w["tn"].copy())
        f(tn, **w["constants"])  # a plain call first: cotengra's path search (see report) is done
        out = [f(tn, **w["constants"]) for _ in range(3)]
        tn.multiply_(2.0)  # in place, as quimb's trailing-underscore methods and tn.normalize() do
        out.append(f(tn, **w["constants"]))
        return out

    holder = {}

    def jit_call():
        holder["jitted"] = [jit_ps(w["loss"], tiered=False)]
        return run(holder["jitted"][0])

    def error_call():
        return run(jit_ps(w["loss"], tiered=False, fallback="error"))

    return judge(lambda: run(w["loss"]), jit_call, lambda: holder.get("jitted", []), error_call)


def autoray_cases():
    import autoray
    do = autoray.do
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200)
    A, B = rng.standard_normal((6, 7, 8)), rng.standard_normal((8, 7, 5))
    Z = rng.standard_normal((6, 4)) + 1j * rng.standard_normal((6, 4))

    def c1(x):
        return do("sum", do("tanh", x) ** 2)

    def c2(A, B):
        return do("sum", do("einsum", "ijk,kjl->il", A, B) ** 2)

    def c3(A, B):
        return do("sum", do("tanh", do("tensordot", A, B, axes=[(1, 2), (1, 0)])))

    def c4(Z):  # what quimb's compressions / overlaps do: complex svd, conj, real (autograd 1.9.1 has no qr VJP)
        U, s, VH = do("linalg.svd", Z, full_matrices=False)
        return do("sum", s ** 2 * do("tanh", s)) + do("real", do("einsum", "ij,ij->", do("conj", Z), U @ VH))

    return {"c1_tanh": (c1, (x,)), "c2_einsum": (c2, (A, B)), "c3_tensordot": (c3, (A, B)), "c4_complex_svd": (c4, (Z,))}


def judge_autoray(name, form):
    import autograd
    from autograd_xla import jit_ps
    f, args = autoray_cases()[name]
    holder = {}

    def build(**kw):
        if form == "jit_ps(grad(f))":
            j = jit_ps(autograd.grad(f), **kw)
            return j, j
        if form == "jit_ps(f)":
            j = jit_ps(f, **kw)
            return j, j
        j = jit_ps(f, **kw)
        return autograd.grad(j), j

    plain = autograd.grad(f) if "grad" in form else f

    def jit_call():
        g, j = build(tiered=False)
        holder["jitted"] = [j]
        return [g(*args), g(*args)]

    def error_call():
        g, _ = build(tiered=False, fallback="error")
        return g(*args)

    return judge(lambda: [plain(*args), plain(*args)], jit_call, lambda: holder.get("jitted", []), error_call)


# ---------------------------------------------------------------- timing workers

def worker(wname, contender, steps):
    """One whole optimisation in this (fresh) process; prints one JSON line."""
    from autograd_xla import FallbackWarning
    recipe, _, mode = contender.partition(":")
    kw = {"tiered": False} if mode.startswith("untiered") else {}
    w = workload(wname)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        if mode.endswith("warm"):
            # the initial loss, evaluated plainly as users print it: cotengra's path search
            # (which draws from Python's global `random`) then happens outside the trace
            w["loss"]((w["norm_fn"] or (lambda t: t))(w["tn"]), **w["constants"])
        opt, jitted = make_opt(w, recipe, **kw)
        opt.optimize(steps)
        seconds = time.perf_counter() - t0
    fb = [short(m.message, 160) for m in caught if issubclass(m.category, FallbackWarning)]
    info = [j.cache_info() for j in jitted]
    print(json.dumps({"seconds": seconds, "loss": opt.loss, "nevals": opt.nevals, "fallbacks": fb,
                      "compiles": sum(i["compiles"] for i in info), "traces": sum(i["traces"] for i in info),
                      "plain_tier_calls": sum(i["plain_tier_calls"] for i in info)}))


def run_worker(wname, contender, steps):
    out = subprocess.run([sys.executable, SCRIPT, "--worker", wname, contender, "--steps", str(steps)],
                         capture_output=True, text=True, timeout=600)
    lines = out.stdout.strip().splitlines()
    if out.returncode or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(lines[-1])


def fmt(s):
    return "–" if s is None else (f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", nargs=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--contenders", default="plain,b1,b1:untiered,b1:untiered-warm,b2,b2:untiered-warm")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--no-calls", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.worker:
        worker(*a.worker, a.steps)
        return
    import autograd
    import autoray
    import quimb
    import jaxlib
    import autograd_xla
    print(f"quimb {quimb.__version__}, autoray {autoray.__version__}, autograd {autograd.__version__ if hasattr(autograd, '__version__') else '1.9.1'}, "
          f"numpy {np.__version__}, jaxlib {jaxlib.__version__}, autograd_xla from {os.path.dirname(autograd_xla.__file__)}")
    one, five, _ = os.getloadavg()
    print(f"load average {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores")
    report = {"calls": {}, "timing": {}}
    names = a.only.split(",")
    def verdict(label, v):
        report["calls"][" ".join(label)] = v
        line = f"{label[0]:14s} {label[1]:16s} "
        print(f"{line}{v['status']:10s} {v.get('cause', '')}")
        if "fallback_error" in v:
            print(f"{'':{len(line)}s}fallback='error': {v['fallback_error']}")
    if not a.no_calls:
        for wname in names:
            for recipe in ("a", "b1", "b2"):
                verdict((wname, recipe), judge_tnopt(wname, recipe))
            verdict((wname, "d"), judge_static_mutation(wname))
        for name in autoray_cases():
            for form in ("jit_ps(grad(f))", "jit_ps(f)", "grad(jit_ps(f))"):
                verdict((name, form), judge_autoray(name, form))
    if not a.no_timing:
        contenders = a.contenders.split(",")
        for wname in names:
            samples = {c: [] for c in contenders}
            for r in range(a.rounds):
                order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
                for c in order:
                    samples[c].append(run_worker(wname, c, a.steps))
            report["timing"][wname] = samples
            plain = np.median([s["seconds"] for s in samples["plain"] if "seconds" in s])
            for c in contenders:
                ok = [s for s in samples[c] if "seconds" in s]
                med = float(np.median([s["seconds"] for s in ok])) if ok else None
                last = ok[-1] if ok else samples[c][-1]
                fbs = sorted({f for s in ok for f in s.get("fallbacks", [])})
                print(f"{wname:12s} {c:12s} {fmt(med):>8s} ({', '.join(fmt(s['seconds']) for s in ok)}) "
                      f"{'' if med is None else f'{plain / med:.2f}x'} loss {last.get('loss')} nevals {last.get('nevals')} "
                      f"compiles {last.get('compiles')} traces {last.get('traces')} plain_tier {last.get('plain_tier_calls')}"
                      f"{' ERROR ' + last['error'] if 'error' in last else ''}{' FALLBACK: ' + fbs[0] if fbs else ''}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(report, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
