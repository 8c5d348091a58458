"""Legacy Python loops as whole jobs: a fresh function's first N steps of gradient descent,
each job a fresh process, plain autograd against jit_ps's default (tiered: plain calls, then
the trace by numpy, then the compiled program) and jit_ps compiling at the first call
(tiered=False); contenders interleaved over --rounds, medians.

    python benchmarks/loop_jobs.py [--rounds 3] [--steps 100] [--only lstm,euler,hmm]

Workloads (loop_compile_time.py's, float64): an LSTM's gradient over 100 steps, a 500-step
Euler integrator's, an HMM forward recursion's over 100 observations; and `mixture`, no loop
but differentiated from outside, as pymanopt's decorator stack and quimb do: each step
`grad(jit_ps(f))` and a value call of `jit_ps(f)` (a line search's), f the negative
log-likelihood of pymanopt's Gaussian-mixture notebook (1,000 2-D points, 3 components: a
batched solve, slogdet, logsumexp), --mixture-steps of them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import bytecode  # noqa: E402,F401  (the package byte-compiled, as installed)

MODES = ("plain", "tiered", "compiled")


def mixture():
    """(f, (S, v)): the Gaussian mixture's negative log-likelihood and a starting point."""
    import autograd.numpy as np
    import numpy as onp
    from autograd.scipy.special import logsumexp
    rng = onp.random.RandomState(42)
    n = 1000
    y = onp.concatenate([rng.randn(n, 2).T, onp.ones((1, n))], axis=0)[None]

    def f(S, v):
        nu = np.append(v, 0)
        logdet = np.expand_dims(np.linalg.slogdet(S)[1], 1)
        log_q = -0.5 * (np.sum(y * np.linalg.solve(S, y), axis=1) + logdet)
        alpha = np.exp(nu) / np.sum(np.exp(nu))
        return -np.sum(logsumexp(np.log(np.expand_dims(alpha, 1)) + log_q, axis=0))
    A = rng.randn(3, 3, 3)
    return f, (onp.einsum("kij,klj->kil", A, A) + 3 * onp.eye(3), rng.randn(2))


def job(work, mode, steps):
    """One job in this process: seconds to each step's end, and the function's counters."""
    import numpy as onp
    import loop_compile_time as loops
    from autograd import grad
    if work == "mixture":
        return mixture_job(mode, steps)
    f, args = {"lstm": (loops.lstm_loop, loops.lstm_args(100, onp.float64)),
               "euler": (loops.euler_loop, loops.euler_args(500, onp.float64)),
               "hmm": (loops.hmm_loop, loops.hmm_args(100, onp.float64))}[work]
    os.environ.pop("AUTOGRAD_XLA_TIERED", None)  # (loop_compile_time sets it to 0 for its own tables)
    t0 = time.perf_counter()
    if mode == "plain":
        g = grad(f)
    else:
        from autograd_xla import jit_ps
        g = jit_ps(grad(f), tiered=None if mode == "tiered" else False)
    params, rest = args[0], args[1:]
    ends = []
    for _ in range(steps):
        step = g(params, *rest)
        params = {k: v - 1e-3 * step[k] for k, v in params.items()}
        ends.append(time.perf_counter() - t0)
    info = g.cache_info() if mode != "plain" else {}
    return {"first": ends[0], "total": ends[-1],
            **{k: info.get(k) for k in ("compiles", "plain_tier_calls", "numpy_tier_calls")}}


def mixture_job(mode, steps):
    """`mixture`'s job: grad(jit_ps(f)) and jit_ps(f) each step; its VJP's counters too."""
    from autograd import grad
    f, (S, v) = mixture()
    os.environ.pop("AUTOGRAD_XLA_TIERED", None)
    t0 = time.perf_counter()
    if mode != "plain":
        from autograd_xla import jit_ps
        f = jit_ps(f, tiered=None if mode == "tiered" else False)
    g = grad(f, argnum=(0, 1))
    ends = []
    for _ in range(steps):
        dS, dv = g(S, v)
        f(S, v)
        v = v - 1e-4 * dv
        ends.append(time.perf_counter() - t0)
    # the derivatives' programs: the gradient with the value (autodiff.jit_call_ahead) or the VJP alone
    vjps = [d.cache_info() for key, d in getattr(f, "_derivatives", {}).items() if key[0] in ("vjp", "value_vjp")]
    info = f.cache_info() if mode != "plain" else {}
    return {"first": ends[0], "total": ends[-1], **{k: info.get(k) for k in ("compiles", "plain_tier_calls",
                                                                              "numpy_tier_calls")},
            "vjp_compiles": sum(i["compiles"] for i in vjps)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--only", default="lstm,euler,hmm,mixture")
    p.add_argument("--mixture-steps", type=int, default=1500)
    p.add_argument("--worker", nargs=2, metavar=("WORK", "MODE"), help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.worker:
        print(json.dumps(job(*opts.worker, opts.mixture_steps if opts.worker[0] == "mixture" else opts.steps)))
        return
    works = opts.only.split(",")
    samples = {}
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {opts.steps} steps "
          f"({opts.mixture_steps} of the mixture), "
          f"medians of {opts.rounds} fresh processes a contender\n")
    for r in range(opts.rounds):
        for work in works:
            for mode in MODES[r % 3:] + MODES[:r % 3]:
                out = subprocess.run([sys.executable, __file__, "--steps", str(opts.steps), "--mixture-steps",
                                      str(opts.mixture_steps), "--worker", work, mode],
                                     capture_output=True, text=True, check=True)
                samples.setdefault((work, mode), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| workload | plain | tiered (default) | compiled at the first call | first call: plain / tiered / compiled |")
    print("|---|---:|---:|---:|---|")
    for work in works:
        med = {m: {k: statistics.median(s[k] for s in samples[(work, m)]) for k in ("first", "total")} for m in MODES}
        plain = med["plain"]["total"]
        cells = [f"{plain:.2f} s"] + [f"{med[m]['total']:.2f} s ({plain / med[m]['total']:.1f}x)" for m in MODES[1:]]
        firsts = " / ".join(f"{med[m]['first']:.3f}" for m in MODES)
        print(f"| {work} | " + " | ".join(cells) + f" | {firsts} s |", flush=True)
    for work in works:
        for m in MODES[1:]:
            s = samples[(work, m)][-1]
            print(f"{work}, {m} (the last job): " + ", ".join(f"{k} {v}" for k, v in s.items()
                                                           if k not in ("first", "total") and v is not None))


if __name__ == "__main__":
    main()
