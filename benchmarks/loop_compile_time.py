"""Trace and compile time of a Python loop unrolled at trace time versus the same loop as
`fori_loop` / `scan` (one `stablehlo.while` whose body is traced once).

    python benchmarks/loop_compile_time.py [--sizes 10,100,1000] [--repeat 3] [--no-grad] [--width 16]
    python benchmarks/loop_compile_time.py --rolling [--workloads lstm:10,30,100,300 euler:50,500 ...]
                                            [--repeat 3] [--steady-calls 20] [--timeout 300] [--float32]
                                            [--contenders unrolled,rolled,scan,autograd,jax]

--rolling: first call and steady state of jit_ps(grad(loss)) for legacy loops (an LSTM with dict
parameters over T steps, an Euler integrator, an HMM forward recursion, an MLP written as a
loop over layers), each as: the Python loop unrolled (jit_ps(..., roll_loops=False)), the same
loop rolled automatically (rolling.py, the default), the loop hand-written with
autograd_xla.scan, plain autograd, and jax.jit(jax.grad(loss)) of the same Python loop on
jax.numpy (`in_jax_numpy`: jax unrolls it too; float64 with jax_enable_x64). Each (workload,
size, contender) runs in a process of its own (a fresh process per repeat: its first call is a
real first call), the contenders of one size interleaved; a process past --timeout seconds
reports "> timeout". Prints a markdown table.

The loop is an RNN step, c = tanh(W @ c + x[i]), over n rows of x. For each n and each
form it reports, for jit_ps(loss) and (unless --no-grad) jit_ps(grad(loss)): the seconds
spent tracing, lowering to StableHLO and compiling with XLA on the first call (median of
--repeat fresh functions; each repeat changes a constant so XLA's program cache cannot
answer), and the median steady-state time of one call. Prints a markdown table.
"""
import argparse
import os
import platform
import statistics
import sys
import types

# first calls here are compiles: a tiered signature (jit_ps's default on the CPU) would run plainly
os.environ.setdefault("AUTOGRAD_XLA_TIERED", "0")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import autograd.numpy as np  # noqa: E402
import numpy as onp  # noqa: E402
from autograd import grad  # noqa: E402

import timing  # noqa: E402
from autograd_xla import fori_loop, jit_ps, scan  # noqa: E402


def losses(scale):
    """The three forms of one loss; `scale` differs per repeat to defeat program caching."""
    def step(W, c, x):
        return np.tanh(np.dot(W, c) * scale + x)

    def unrolled(W, c, xs):
        for i in range(xs.shape[0]):
            c = step(W, c, xs[i])
        return np.sum(c ** 2)

    def with_fori(W, c, xs):
        return np.sum(fori_loop(0, xs.shape[0], lambda i, c: step(W, c, xs[i]), c) ** 2)

    def with_scan(W, c, xs):
        return np.sum(scan(lambda c, x: (step(W, c, x), None), c, xs)[0] ** 2)

    return {"unrolled Python loop": unrolled, "fori_loop": with_fori, "scan": with_scan}


def measure(fn, args):
    jf = jit_ps(fn)
    jf(*args)
    s = jf.stats
    compile_s = s.compile_seconds
    steady = timing.time_calls(jf, args, 20) / 20
    return s.trace_seconds, s.lower_seconds, compile_s, steady


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--no-grad", action="store_true")
    opts = parser.parse_args()
    sizes = [int(n) for n in opts.sizes.split(",")]
    rng = onp.random.RandomState(0)
    W = rng.randn(opts.width, opts.width) / onp.sqrt(opts.width)
    c0 = rng.randn(opts.width)
    modes = [("value", lambda f: f)] + ([] if opts.no_grad else [("grad", lambda f: grad(f))])

    print(f"Loop trace/compile time: {platform.machine()}, Python {platform.python_version()}, "
          f"width {opts.width}, float64, median of {opts.repeat} fresh compiles\n")
    print("| n | form | jit_ps of | trace (s) | lower (s) | XLA compile (s) | first call total (s) "
          "| steady call (µs) |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for n in sizes:
        xs = rng.randn(n, opts.width)
        for name in losses(1.0):
            for mode, transform in modes:
                rows = []
                for r in range(opts.repeat):
                    fn = transform(losses(1.0 + 1e-9 * (r + 1) + 1e-6 * n)[name])
                    rows.append(measure(fn, (W, c0, xs)))
                trace, lower, comp, steady = (statistics.median(col) for col in zip(*rows))
                print(f"| {n} | {name} | {mode} | {trace:.3f} | {lower:.3f} | {comp:.3f} | "
                      f"{trace + lower + comp:.3f} | {steady * 1e6:.1f} |", flush=True)


# ----- --rolling: legacy loops, unrolled / rolled / scan / plain ------------------------------
def _sigmoid(x):
    return 0.5 * (np.tanh(x / 2.0) + 1.0)


def _lstm_cell(params, h, c, x):
    z = np.concatenate([x, h])
    f = _sigmoid(np.dot(params["Wf"], z) + params["bf"])
    i = _sigmoid(np.dot(params["Wi"], z) + params["bi"])
    o = _sigmoid(np.dot(params["Wo"], z) + params["bo"])
    g = np.tanh(np.dot(params["Wg"], z) + params["bg"])
    c = f * c + i * g
    return o * np.tanh(c), c


def lstm_loop(params, xs, ys):
    h = np.zeros(params["Wf"].shape[0])
    c = np.zeros_like(h)
    loss = 0.0
    for t in range(xs.shape[0]):
        h, c = _lstm_cell(params, h, c, xs[t])
        loss = loss + np.sum((np.dot(params["Wy"], h) - ys[t]) ** 2)
    return loss


def lstm_scan(params, xs, ys):
    def step(carry, inp):
        h, c, loss = carry
        h, c = _lstm_cell(params, h, c, inp[0])
        return (h, c, loss + np.sum((np.dot(params["Wy"], h) - inp[1]) ** 2)), None
    h = np.zeros(params["Wf"].shape[0])
    return scan(step, (h, np.zeros_like(h), np.zeros(())), (xs, ys))[0][2]


def lstm_args(n, dtype, H=16, D=8):
    r = onp.random.RandomState(0)
    p = {k: (r.randn(H, H + D) * 0.3).astype(dtype) for k in ("Wf", "Wi", "Wo", "Wg")}
    p.update({k: (r.randn(H) * 0.1).astype(dtype) for k in ("bf", "bi", "bo", "bg")})
    p["Wy"] = (r.randn(2, H) * 0.3).astype(dtype)
    return p, r.randn(n, D).astype(dtype), r.randn(n, 2).astype(dtype)


def euler_loop(params, x, ts):
    for k in range(ts.shape[0] - 1):
        dt = ts[k + 1] - ts[k]
        x = x + dt * np.tanh(np.dot(params["W2"], np.tanh(np.dot(params["W1"], x) + params["b1"])))
    return np.sum(x ** 2)


def euler_scan(params, x, ts):
    def step(x, t):
        return x + (t[1] - t[0]) * np.tanh(np.dot(params["W2"], np.tanh(np.dot(params["W1"], x) + params["b1"]))), None
    return np.sum(scan(step, x, np.stack([ts[:-1], ts[1:]], axis=1))[0] ** 2)


def euler_args(n, dtype, D=8, H=32):
    r = onp.random.RandomState(1)
    p = {"W1": (r.randn(H, D) * 0.3).astype(dtype), "b1": (r.randn(H) * 0.1).astype(dtype),
         "W2": (r.randn(D, H) * 0.3).astype(dtype)}
    return p, r.randn(D).astype(dtype), onp.linspace(0.0, 1.0, n + 1).astype(dtype)


def _logsumexp(a, axis):
    m = np.max(a, axis=axis, keepdims=True)
    return np.log(np.sum(np.exp(a - m), axis=axis)) + np.squeeze(m, axis)


def hmm_loop(params, obs):
    log_a, log_pi = params["log_A"], params["log_pi"]
    alpha = log_pi + obs[0]
    for t in range(1, obs.shape[0]):
        alpha = _logsumexp(alpha[:, None] + log_a, 0) + obs[t]
    return _logsumexp(alpha, 0)


def hmm_scan(params, obs):
    def step(alpha, o):
        return _logsumexp(alpha[:, None] + params["log_A"], 0) + o, None
    return _logsumexp(scan(step, params["log_pi"] + obs[0], obs[1:])[0], 0)


def hmm_args(n, dtype, K=8):
    r = onp.random.RandomState(2)
    return {"log_A": onp.log(r.dirichlet(onp.ones(K), K)).astype(dtype),
            "log_pi": onp.log(onp.ones(K) / K).astype(dtype)}, r.randn(n, K).astype(dtype)


def mlp_loop(params, x):
    for layer in range(params["W"].shape[0]):
        x = np.tanh(np.dot(x, params["W"][layer]) + params["b"][layer])
    return np.sum(x ** 2)


def mlp_scan(params, x):
    return np.sum(scan(lambda h, wb: (np.tanh(np.dot(h, wb[0]) + wb[1]), None), x, (params["W"], params["b"]))[0] ** 2)


def mlp_args(n, dtype, B=32, D=64):
    r = onp.random.RandomState(3)
    return ({"W": (r.randn(n, D, D) / onp.sqrt(D)).astype(dtype), "b": (r.randn(n, D) * 0.1).astype(dtype)},
            r.randn(B, D).astype(dtype))


WORKLOADS = {"lstm": (lstm_loop, lstm_scan, lstm_args), "euler": (euler_loop, euler_scan, euler_args),
             "hmm": (hmm_loop, hmm_scan, hmm_args), "mlp": (mlp_loop, mlp_scan, mlp_args)}
CONTENDERS = ("unrolled", "rolled", "scan", "autograd", "jax")


def in_jax_numpy(fn):
    """`fn` with this module's `np` and its own helpers rebound to jax.numpy: the same Python
    loop, as jax.jit traces it (unrolled)."""
    import jax.numpy as jnp
    env = dict(globals(), np=jnp)
    for name, obj in list(env.items()):
        if isinstance(obj, types.FunctionType) and obj.__module__ == __name__:
            env[name] = types.FunctionType(obj.__code__, env, name, obj.__defaults__, obj.__closure__)
    return env[fn.__name__]


def run_one(workload, n, contender, dtype, steady_calls):
    """In this process: (first call seconds, steady seconds a call) of one contender."""
    import json
    import time
    loop, scanned, make = WORKLOADS[workload]
    args = make(n, dtype)
    if contender == "autograd":
        fn = grad(loop)
    elif contender == "jax":
        import jax
        jax.config.update("jax_enable_x64", onp.dtype(dtype) == onp.float64)
        jitted = jax.jit(jax.grad(in_jax_numpy(loop)))

        def fn(*a):
            return jax.block_until_ready(jitted(*a))
    else:
        timing.load_jit_ps()
        fn = jit_ps(grad(scanned if contender == "scan" else loop), roll_loops=contender == "rolled")
    t0 = time.perf_counter()
    fn(*args)
    first = time.perf_counter() - t0
    steady = min(timing.time_calls(fn, args, steady_calls) for _ in range(3)) / steady_calls
    print(json.dumps({"first": first, "steady": steady}))


def rolling_table(opts):
    import json
    import subprocess
    dtype = onp.float32 if opts.float32 else onp.float64
    print(f"Legacy loops, jit_ps(grad(loss)): {platform.machine()}, Python {platform.python_version()}, "
          f"{onp.dtype(dtype).name}, {os.cpu_count()} cores; first call = median of {opts.repeat} fresh processes\n")
    print("| workload | n | contender | first call (s) | steady call (ms) |")
    print("|---|---:|---|---:|---:|")
    for spec in opts.workloads:
        name, sizes = spec.split(":")
        for n in map(int, sizes.split(",")):
            contenders = opts.contenders.split(",")
            samples = {c: [] for c in contenders}
            skip = set()
            for r in range(opts.repeat):
                order = contenders if r % 2 == 0 else contenders[::-1]
                for c in order:
                    if c in skip:
                        continue
                    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, str(n), c,
                           "--steady-calls", str(opts.steady_calls)] + (["--float32"] if opts.float32 else [])
                    try:
                        out = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout, check=True)
                        samples[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
                    except subprocess.TimeoutExpired:
                        skip.add(c)  # a first call past the timeout: not sampled again
                    except subprocess.CalledProcessError as e:
                        print(f"<!-- {name} {n} {c} failed: {e.stderr.strip().splitlines()[-1:]} -->")
                        skip.add(c)
            for c in contenders:
                if samples[c]:
                    first = statistics.median(s["first"] for s in samples[c])
                    steady = statistics.median(s["steady"] for s in samples[c])
                    print(f"| {name} | {n} | {c} | {first:.3f} | {steady * 1e3:.3f} |", flush=True)
                else:
                    print(f"| {name} | {n} | {c} | > {opts.timeout} | - |", flush=True)


def entry():
    if "--one" in sys.argv or "--rolling" in sys.argv:
        parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        parser.add_argument("--rolling", action="store_true")
        parser.add_argument("--one", nargs=3)
        parser.add_argument("--workloads", nargs="+",
                            default=["lstm:10,30,100,300", "euler:50,500", "hmm:100", "mlp:16"])
        parser.add_argument("--repeat", type=int, default=3)
        parser.add_argument("--steady-calls", type=int, default=20)
        parser.add_argument("--timeout", type=int, default=300)
        parser.add_argument("--float32", action="store_true")
        parser.add_argument("--contenders", default=",".join(CONTENDERS),
                            help=f"comma-separated, of {','.join(CONTENDERS)} (the unrolled ones take tens of seconds)")
        opts = parser.parse_args()
        if opts.one:
            name, n, contender = opts.one
            run_one(name, int(n), contender, onp.float32 if opts.float32 else onp.float64, opts.steady_calls)
        else:
            rolling_table(opts)
    else:
        main()


if __name__ == "__main__":
    entry()
