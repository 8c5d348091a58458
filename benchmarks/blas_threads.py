"""LAPACK inside compiled programs against numpy's, as users run them: plain autograd and jit_ps
each in a worker process of its own (procs.py), samples interleaved between the workers (one
batch of calls per turn, each call timed), optionally with other processes keeping every core busy (`--load`).

Workloads (issue 43's): `solve`, np.sum(np.linalg.solve(S, y)) with S 4x6x6 and y 1x6x5000
(getrf and two trsm on 5000 right-hand sides); `gp`, the gradient of a Gaussian process's
log marginal likelihood (n = 50, autograd's examples/gaussian_process.py: a 50x50 covariance,
its Cholesky factor and solves). jit_ps runs a LAPACK kernel of such sizes on one OpenBLAS
thread (blas.SERIAL); numpy's calls use OpenBLAS's default threads.

    python benchmarks/blas_threads.py [--calls 300] [--turns 6] [--load] [--workloads solve gp]

prints, per workload and contender, the mean, median and largest time of a call (ms) and the
load average before and after (noisy on a shared machine: rerun and say so).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import procs  # noqa: E402


def build(workload):
    """(function, arguments) of plain autograd code for `workload`."""
    import autograd.numpy as np
    import autograd.scipy.stats.multivariate_normal as mvn
    from autograd import grad

    rng = np.random.default_rng(0)
    if workload == "solve":
        S = rng.standard_normal((4, 6, 6)) + 6 * np.eye(6)
        y = rng.standard_normal((1, 6, 5000))
        return (lambda S: np.sum(np.linalg.solve(S, y))), (S,)
    if workload == "gp":
        X = np.linspace(-5, 5, 50)[:, None]
        y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(50)

        def log_marginal_likelihood(params):
            log_variance, log_lengthscale, log_noise = params[0], params[1], params[2]
            sq = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=2)
            cov = np.exp(log_variance) * np.exp(-0.5 * sq / np.exp(2 * log_lengthscale))
            cov = cov + (np.exp(log_noise) + 1e-6) * np.eye(50)
            return mvn.logpdf(y, np.zeros(50), cov)
        return grad(log_marginal_likelihood), (np.array([0.1, 0.2, -2.0]),)
    raise ValueError(f"unknown workload {workload!r}")


def cases(kind, workload):
    """The factory the workers call (procs.py): the workload as plain autograd code, or jit_ps of it."""
    f, args = build(workload)
    if kind == "jit_ps":
        from autograd_xla import jit_ps
        f = jit_ps(f, fallback="error")  # compiled, or no figure
    return {kind: procs.Case(f, args)}


def _spin():
    while True:
        pass


def load_average():
    return os.getloadavg()[0]


def measure(workload, calls, turns):
    import numpy as onp
    kinds = ("autograd", "jit_ps")
    with procs.Workers(kinds) as ws:
        values = {}
        for kind, w in ws.items():
            w.build("blas_threads:cases", workload=workload)
            values[kind] = w.request("output", kind)
            w.request("calls", kind, 20)  # warm
        onp.testing.assert_allclose(values["jit_ps"], values["autograd"], rtol=1e-10, err_msg=workload)
        times = {c: [] for c in kinds}
        per_turn = max(1, calls // turns)
        for _ in range(turns):
            for kind, w in ws.items():
                times[kind] += w.request("calls", kind, per_turn)
    return {c: onp.array(t) * 1e3 for c, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--load", action="store_true", help="keep every core busy with other processes")
    parser.add_argument("--workloads", nargs="+", default=["solve", "gp"])
    args = parser.parse_args()
    import multiprocessing
    loaders = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() if args.load else 0)]
    for p in loaders:
        p.start()
    try:
        print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'default')}, {os.cpu_count()} cores, "
              f"{len(loaders)} spinning processes, load average {load_average():.2f}")
        for workload in args.workloads:
            times = measure(workload, args.calls, args.turns)
            for contender, t in times.items():
                print(f"{workload:6s} {contender:9s} mean {t.mean():8.3f}  median {float(sorted(t)[len(t) // 2]):8.3f}"
                      f"  max {t.max():8.2f} ms over {len(t)} calls")
            ratio = times["jit_ps"].mean() / times["autograd"].mean()
            print(f"{workload:6s} jit_ps / autograd (means): {ratio:.2f}; load average {load_average():.2f}")
    finally:
        for p in loaders:
            p.terminate()


if __name__ == "__main__":
    main()
