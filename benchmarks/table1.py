"""The 2018 paper's Table 1: truncated Newton-CG driven by autograd derivatives.

scipy.optimize.minimize(method="Newton-CG", jac=..., hessp=...) minimises three problems,
with the value, the gradient and the Hessian-vector product computed three ways:

* autograd: the user's autograd code as is (value `f`, `grad(f)`, and autograd's
  `hessian_tensor_product(f)`, i.e. reverse-over-reverse);
* jit_ps: the same three functions wrapped in `jit_ps`;
* jax.jit (where jax is importable): the same mathematics in jax.numpy, with jax's usual
  Hessian-vector product (forward-over-reverse), each function under `jax.jit`.

Problems:
  quadratic  0.5 x'Ax - b'x, n = 1000, A dense symmetric positive definite (closed over)
  hmm        negative marginal log-likelihood of a Gaussian HMM by the forward algorithm in
             log space, T = 100 steps, K = 20 states; the recursion is written once with
             autograd_xla.scan, which runs as a Python loop under plain autograd and as a
             stablehlo.while under jit_ps (jax: lax.scan)
  logreg     L2-regularised logistic regression, N = 5000, D = 100

Each column runs in a worker process of its own (procs.py: plain autograd; jit_ps, which
never imports jax; jax, which never imports autograd_xla), samples interleaved between them.
Reported: whole-optimisation time (median of --runs runs, with the programs jit_ps has by
then), per-call medians of value, gradient and Hessian-vector product (interleaved samples;
jit_ps's of the programs it settles on, autograd_xla.tiering.Ladder), first-call time (trace +
compile + run of all three functions, in the worker's fresh process), and the optimiser's
results, which must agree across columns. Run: python benchmarks/table1.py [--quick] [--only hmm] [--no-jax]
"""
import argparse
import os
import statistics
import sys

import numpy as onp
import scipy.optimize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import autograd.numpy as np  # noqa: E402
from autograd import grad, hessian_tensor_product  # noqa: E402
from autograd.scipy.special import logsumexp  # noqa: E402

from procs import TITLES, Case, Workers, compare, fmt_load, interleaved, jax_available  # noqa: E402
from timing import format_seconds, summarize  # noqa: E402


# ----- the three problems, as autograd code -----------------------------------------------------
def make_quadratic(rs, n=1000):
    M = rs.randn(n, n) / onp.sqrt(n)
    A = M @ M.T + 0.5 * onp.eye(n)
    b = rs.randn(n)

    def f(x):
        return 0.5 * np.dot(x, np.dot(A, x)) - np.dot(b, x)

    def f_jax(jnp):
        return lambda x: 0.5 * jnp.dot(x, jnp.dot(A, x)) - jnp.dot(b, x)
    return f, f_jax, onp.zeros(n), 30


def make_hmm(rs, T=100, K=20):
    true_means = onp.linspace(-3, 3, K)
    states = rs.randint(0, K, size=T)
    obs = true_means[states] + 0.5 * rs.randn(T)

    def unpack(theta):
        log_A = theta[:K * K].reshape(K, K)
        log_A = log_A - logsumexp(log_A, axis=1, keepdims=True)
        log_pi = theta[K * K:K * K + K] - logsumexp(theta[K * K:K * K + K])
        means = theta[K * K + K:]
        return log_A, log_pi, means

    def f(theta):
        from autograd_xla import scan  # here: the jax worker builds this problem too, never autograd_xla
        log_A, log_pi, means = unpack(theta)
        log_emit = -0.5 * (obs[:, None] - means[None, :]) ** 2 - 0.5 * onp.log(2 * onp.pi)

        def step(log_alpha, log_e):
            return logsumexp(log_alpha[:, None] + log_A, axis=0) + log_e, 0.0

        log_alpha, _ = scan(step, log_pi + log_emit[0], log_emit[1:])
        return -logsumexp(log_alpha) + 1e-3 * np.sum(theta ** 2)

    def f_jax(jnp):
        import jax
        from jax.scipy.special import logsumexp as lse

        def fj(theta):
            log_A = theta[:K * K].reshape(K, K)
            log_A = log_A - lse(log_A, axis=1, keepdims=True)
            log_pi = theta[K * K:K * K + K] - lse(theta[K * K:K * K + K])
            means = theta[K * K + K:]
            log_emit = -0.5 * (obs[:, None] - means[None, :]) ** 2 - 0.5 * onp.log(2 * onp.pi)

            def step(log_alpha, log_e):
                return lse(log_alpha[:, None] + log_A, axis=0) + log_e, 0.0

            log_alpha, _ = jax.lax.scan(step, log_pi + log_emit[0], log_emit[1:])
            return -lse(log_alpha) + 1e-3 * jnp.sum(theta ** 2)
        return fj

    theta0 = onp.concatenate([0.1 * rs.randn(K * K), onp.zeros(K), onp.linspace(-2, 2, K) + 0.1 * rs.randn(K)])
    return f, f_jax, theta0, 15


def make_logreg(rs, N=5000, D=100):
    X = rs.randn(N, D)
    w_true = rs.randn(D)
    y = (X @ w_true + rs.randn(N) > 0).astype(onp.float64)

    def f(w):
        z = np.dot(X, w)
        return np.mean(np.logaddexp(0.0, z) - y * z) + 0.5e-3 * np.dot(w, w)

    def f_jax(jnp):
        return lambda w: jnp.mean(jnp.logaddexp(0.0, jnp.dot(X, w)) - y * jnp.dot(X, w)) + 0.5e-3 * jnp.dot(w, w)
    return f, f_jax, onp.zeros(D), 30


PROBLEMS = {"quadratic": make_quadratic, "hmm": make_hmm, "logreg": make_logreg}


# ----- the three ways to get value, gradient and Hessian-vector product -----------------------
def autograd_triple(f):
    return f, grad(f), hessian_tensor_product(f)


def jit_triple(f):
    from autograd_xla import jit_ps
    value, jac, hessp = autograd_triple(f)
    return jit_ps(value, fallback="error"), jit_ps(jac, fallback="error"), jit_ps(hessp, fallback="error")


def jax_triple(jax, f_jax):
    jnp = jax.numpy
    fj = f_jax(jnp)
    gj = jax.grad(fj)
    value = jax.jit(fj)
    jac = jax.jit(gj)
    hessp = jax.jit(lambda x, p: jax.jvp(gj, (x,), (p,))[1])
    asarray = onp.asarray
    return (lambda x: float(value(x)), lambda x: asarray(jac(x)), lambda x, p: asarray(hessp(x, p)))


#: Newton-CG's step tolerance. Much below this the quadratic's line search only chases
#: rounding noise, and the number of evaluations then depends on the last bits of each
#: column's arithmetic rather than on the method.
XTOL = 1e-6


def minimize(triple, x0, maxiter):
    value, jac, hessp = triple
    return scipy.optimize.minimize(value, x0, method="Newton-CG", jac=jac, hessp=hessp,
                                   options={"maxiter": maxiter, "xtol": XTOL})


# ----- in the workers (procs.py) -----------------------------------------------------------------
def cases(kind, problem):
    """The factory the workers call: the problem's optimisation and its three functions, of `kind`."""
    f, f_jax, x0, maxiter = PROBLEMS[problem](onp.random.RandomState(0))
    p = onp.random.RandomState(1).randn(x0.size)
    x = x0 + 0.01 * onp.random.RandomState(2).randn(x0.size)  # per-call times: near the start, fixed
    if kind == "jax":
        import jax
        triple = jax_triple(jax, f_jax)
    else:
        triple = jit_triple(f) if kind == "jit_ps" else autograd_triple(f)
    value, jac, hessp = triple
    last = {}

    def optimise():
        r = minimize(triple, x0, maxiter)
        last.update(fun=r.fun, x=r.x, nit=r.nit, nfev=r.nfev, njev=r.njev, nhev=r.nhev)
    jit = kind == "jit_ps"
    return {"first": Case(lambda: (value(x0), jac(x0), hessp(x0, p))),
            "opt": Case(optimise, last=lambda: last),
            "value": Case(value, (x,), settle=jit), "grad": Case(jac, (x,), settle=jit),
            "hvp": Case(hessp, (x, p), settle=jit)}


# ----- in the parent ------------------------------------------------------------------------------
def run_problem(name, kinds, args):
    out = {"first": {}, "opt": {}, "per_call": {}, "settled": {}, "errors": {}}
    with Workers(kinds) as ws:
        for w in ws.values():
            w.build("table1:cases", problem=name)
        firsts = {}
        for k in kinds:  # trace + compile + run of all three functions, in a fresh process
            out["first"][k], firsts[k], _ = ws[k].request("first", "first")
        for k in kinds[1:]:
            out["errors"][k] = compare(firsts["autograd"], firsts[k], "float64", who=k)
        # the optimiser, several whole runs per contender, interleaved
        samples, _ = interleaved({k: (ws[k], "opt") for k in kinds}, args.runs, 0.0, number=1)
        out["opt"] = {k: statistics.median(v) for k, v in samples.items()}
        out["results"] = {k: ws[k].extra("opt", "last") for k in kinds}
        # per-call times of the programs jit_ps settles on (timing.settle; the optimisation
        # above ran what it had by then)
        for what in ("value", "grad", "hvp"):
            out["settled"][what] = ws["jit_ps"].request("settle", what)
            samples, _ = interleaved({k: (ws[k], what) for k in kinds}, args.repeat, args.target, lead=0.15)
            out["per_call"][what] = {k: summarize(v)["median"] for k, v in samples.items()}
    out["check"] = check_results(out["results"])
    return out


def check_results(results):
    ref = results["autograd"]
    notes = []
    for k, r in results.items():
        rel = abs(r["fun"] - ref["fun"]) / max(abs(ref["fun"]), 1e-300)
        dx = onp.max(onp.abs(r["x"] - ref["x"])) / max(onp.max(onp.abs(ref["x"])), 1e-300)
        notes.append(f"{TITLES[k]}: f* = {r['fun']:.12g}, iterations {r['nit']}, evaluations f/g/Hv "
                     f"{r['nfev']}/{r['njev']}/{r['nhev']}, "
                     f"|f* - autograd f*| / |f*| = {rel:.1e}, max|x* - autograd x*| / max|x*| = {dx:.1e}")
    return notes


def fmt_ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def report(all_results, kinds):
    names = [TITLES[k] for k in kinds]
    lines = ["| problem | measure | " + " | ".join(names) + " | autograd / jit_ps | jit_ps / jax.jit |",
             "|---|---|" + "---:|" * (len(names) + 2)]
    for prob, res in all_results.items():
        rows = [("whole optimisation", res["opt"])] + [(f"per call: {w}", res["per_call"][w])
                                                       for w in ("value", "grad", "hvp")]
        rows.append(("first calls (trace + compile + run, 3 functions, fresh process)", res["first"]))
        for label, times in rows:
            cells = [format_seconds(times[k]) for k in kinds]
            lines.append(f"| {prob} | {label} | " + " | ".join(cells) +
                         f" | {fmt_ratio(times['autograd'], times['jit_ps'])} | {fmt_ratio(times['jit_ps'], times.get('jax'))} |")
    print("\n".join(lines))
    print()
    for prob, res in all_results.items():
        print(f"{prob}:")
        for note in res["check"]:
            print(f"  - {note}")
        print("  - values, gradients and Hessian-vector products at x0, largest difference from plain autograd's "
              "relative to their magnitude: " + ", ".join(f"{TITLES[k]} {v:.1e}" for k, v in res["errors"].items()))
        print("  - jit_ps settled (value / grad / hvp) after " + " / ".join(
            f"{calls} more calls, {seconds:.2f} s" for calls, seconds in res["settled"].values()))


def fmt_ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--only", default=None, help="comma-separated problems")
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument("--runs", type=int, default=None, help="whole optimisations per contender")
    parser.add_argument("--repeat", type=int, default=None, help="per-call samples")
    args = parser.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 5)
    args.repeat = args.repeat or (7 if args.quick else 21)
    args.target = 0.02 if args.quick else 0.05
    kinds = ["autograd", "jit_ps"] + ([] if args.no_jax or not jax_available() else ["jax"])
    names = args.only.split(",") if args.only else list(PROBLEMS)
    print(f"Table 1: Newton-CG with autograd derivatives; float64; {', '.join(TITLES[k] for k in kinds)}, each in a "
          f"process of its own (procs.py); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    all_results = {name: run_problem(name, kinds, args) for name in names}
    report(all_results, kinds)
    print(f"\nload average at end {fmt_load(os.getloadavg())}")


if __name__ == "__main__":
    main()
