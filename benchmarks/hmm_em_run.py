"""autograd 1.9.1's `hmm_em` example, its whole `__main__` run (EM to convergence on 60 lines
of examples/lstm.py, 20 hidden states), plain autograd versus the same run with the example's
`vgrad(log_partition_function)` replaced by `jit_ps(vgrad(log_partition_function))`: the
E step's gradient is traced once (a loop over each line's characters: one per line, rolled
back into a scan forward and backward, rolling.py) and compiled once; every later EM
iteration reuses it. Each contender runs in a process of its own (imports included in
"whole run"), --repeat times, interleaved; the parameters EM converges to are compared with
plain autograd's.

    python benchmarks/hmm_em_run.py [--repeat 1] [--lines 60] [--timeout 900] [--unrolled]

--unrolled adds jit_ps(..., roll_loops=False) (its compile took over 4 minutes before rolling).

Measured on 2 cores (load average 1.1), one process each: plain autograd 119.5 s (119 EM
iterations, 1.00 s each); jit_ps 19.1 s, of which the first E step 16.3 s (XLA compiling 120
loops, two per line) and 13.6 ms each later one; the converged parameters within 1.3e-13 of
plain autograd's.
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

# The jitted runs' first call is timed compiling (tiered execution, jit_ps's default, would run it plainly first).
os.environ.setdefault("AUTOGRAD_XLA_TIERED", "0")


def run_one(contender, lines, out):
    t0 = time.perf_counter()
    import numpy as onp
    from benchmarks.autograd_examples import examples_dir, load
    import autograd.numpy as np
    m = load("hmm_em")
    if contender != "autograd":
        from autograd import value_and_grad
        from autograd_xla import jit_ps
        jf = jit_ps(value_and_grad(m.log_partition_function), roll_loops=contender == "rolled")
        m.vgrad = lambda f: jf  # the example's EM_update calls vgrad(log_partition_function)
    np.random.seed(0)  # the example's __main__
    np.seterr(divide="ignore")
    train_inputs, num_outputs = m.build_dataset(os.path.join(examples_dir(), "lstm.py"), max_lines=lines)
    init_params = m.initialize_hmm_parameters(20, num_outputs)
    stamps, lls = [], []
    t1 = time.perf_counter()
    pi, A, B = m.EM(init_params, train_inputs, lambda ll, params: (stamps.append(time.perf_counter()),
                                                                   lls.append(float(ll))))
    end = time.perf_counter()
    onp.save(out, onp.concatenate([onp.ravel(pi), onp.ravel(A), onp.ravel(B)]))
    print(json.dumps({"whole": end - t0, "first": stamps[0] - t1, "iterations": len(lls),
                      "rest": (end - stamps[0]) / max(len(lls) - 1, 1), "loglike": lls[-1]}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", nargs=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--unrolled", action="store_true")
    opts = parser.parse_args()
    if opts.one:
        return run_one(opts.one[0], opts.lines, opts.one[1])
    import tempfile
    import numpy as onp
    contenders = ["autograd", "rolled"] + (["unrolled"] if opts.unrolled else [])
    samples, params = {c: [] for c in contenders}, {}
    tmp = tempfile.mkdtemp()
    for r in range(opts.repeat):
        for c in (contenders if r % 2 == 0 else contenders[::-1]):
            out = os.path.join(tmp, f"{c}.npy")
            cmd = [sys.executable, os.path.abspath(__file__), "--one", c, out, "--lines", str(opts.lines)]
            try:
                got = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout, check=True)
            except subprocess.TimeoutExpired:
                continue
            samples[c].append(json.loads(got.stdout.strip().splitlines()[-1]))
            params[c] = onp.load(out)
    print(f"hmm_em, {opts.lines} lines, 20 states; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; median of {opts.repeat} processes each\n")
    print("| contender | whole run (s) | first E step (s) | later E steps (ms each) | EM iterations "
          "| max |params - autograd's| |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in contenders:
        if not samples[c]:
            print(f"| {c} | > {opts.timeout} | | | | |")
            continue
        med = {k: statistics.median(s[k] for s in samples[c]) for k in ("whole", "first", "rest", "iterations")}
        diff = float(onp.max(onp.abs(params[c] - params["autograd"]))) if "autograd" in params else float("nan")
        print(f"| {c} | {med['whole']:.1f} | {med['first']:.2f} | {med['rest'] * 1e3:.1f} | {med['iterations']:.0f} "
              f"| {diff:.1e} |")


if __name__ == "__main__":
    main()
