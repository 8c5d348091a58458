"""What the library harnesses share: how a call is judged (compiled, fell back with its cause,
failed, WRONG), how results are compared with plain autograd's, and how timing workers run, one
process per contender, their samples interleaved.

The autograd_xla under test is the one on PYTHONPATH (a worktree's root), never an installed
copy: each library lives in a venv of its own without autograd_xla, e.g.

    PYTHONPATH=/path/to/worktree /path/to/venv/bin/python benchmarks/libraries/pennylane_recipes.py
"""
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))
import bytecode  # noqa: E402,F401  (the package under test byte-compiled, as installed)
RTOL, ATOL = 1e-8, 1e-10  # float64 throughout; compiled results agree with plain to ~1e-12


def under_test():
    """Where the autograd_xla being measured comes from, and its git commit."""
    import autograd_xla
    root = os.path.dirname(os.path.dirname(os.path.abspath(autograd_xla.__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %D"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except OSError:
        head = "?"
    return f"autograd_xla from {root} ({head})"


def load():
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores"


def leaves(result):
    """A result (array, number, tuple/list/dict of them, pennylane tensor) as a list of float arrays."""
    if isinstance(result, dict):
        return [x for k in sorted(result) for x in leaves(result[k])]
    if isinstance(result, (tuple, list)):
        return [x for r in result for x in leaves(r)]
    if result is None:
        return [None]
    return [np.asarray(getattr(result, "_value", result), dtype=float)]


def disagreement(plain, other):
    """None when `other` equals `plain` to RTOL/ATOL leaf by leaf, else a short description."""
    a, b = leaves(plain), leaves(other)
    if len(a) != len(b):
        return f"{len(b)} result arrays, plain has {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if (x is None) != (y is None):
            return f"result {i}: {y!r} where plain gives {x!r}"
        if x is None:
            continue
        if x.shape != y.shape:
            return f"result {i}: shape {y.shape}, plain {x.shape}"
        if not np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True):
            err = float(np.max(np.abs(x - y)))
            return f"result {i}: off by {err:.2e} (plain magnitude {float(np.max(np.abs(x))):.2e})"
    return None


def fallback_cause(message):
    """The cause a FallbackWarning names, on one short line."""
    text = str(message)
    marker = "for this signature: "
    if marker in text:
        text = text.split(marker, 1)[1]
    for prefix in ("tracing it raised ",):
        if text.startswith(prefix):
            text = text[len(prefix):]
    line = text.strip().splitlines()[0] if text.strip() else "?"
    return line[:160]


def judge(plain_call, jit_call, jitted=()):
    """Run plain_call and jit_call (thunks); the verdict of the jitted one against the plain one.

    Returns a dict: status ('compiled', 'fell back', 'failed', 'WRONG', or 'plain failed'),
    cause (the FallbackWarning's cause, the exception, or the disagreement), seconds."""
    from autograd_xla import FallbackWarning
    try:
        reference = plain_call()
    except Exception as e:  # noqa: BLE001 - the workload itself does not run: not our verdict
        return {"status": "plain failed", "cause": f"{type(e).__name__}: {e}"[:160]}
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = jit_call()
        except Exception as e:  # noqa: BLE001
            return {"status": "failed", "cause": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160],
                    "seconds": time.perf_counter() - t0}
    seconds = time.perf_counter() - t0
    fallbacks = [fallback_cause(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    counted = sum(j.cache_info()["fallbacks"] for j in jitted)
    wrong = disagreement(reference, result)
    if wrong:
        return {"status": "WRONG", "cause": wrong + (f"; fell back: {fallbacks[0]}" if fallbacks else ""),
                "seconds": seconds}
    if fallbacks:
        return {"status": "fell back", "cause": fallbacks[0], "seconds": seconds}
    if counted:
        return {"status": "fell back", "cause": f"{counted} fallback(s) counted, no FallbackWarning", "seconds": seconds}
    traced = sum(j.cache_info()["traces"] for j in jitted)
    if jitted and not traced:
        return {"status": "fell back", "cause": "never traced (the jitted function was not called)", "seconds": seconds}
    return {"status": "compiled", "cause": "", "seconds": seconds}


def worker(script, *args, timeout=900):
    """Run `script --worker ...` in a process of its own; its last stdout line is JSON."""
    out = subprocess.run([sys.executable, script, "--worker", *args], capture_output=True, text=True, timeout=timeout)
    lines = out.stdout.strip().splitlines()
    if out.returncode or not lines:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail[:200]}
    return json.loads(lines[-1])


def interleaved(script, contenders, rounds):
    """contenders: {label: [worker args]}. Each round runs every contender once, each in a fresh
    process, the order rotated from round to round so that load falls on all alike. Returns
    {label: [sample dict, ...]}."""
    labels = list(contenders)
    samples = {label: [] for label in labels}
    for r in range(rounds):
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        for label in order:
            samples[label].append(worker(script, *contenders[label]))
    return samples


def median_of(samples, key):
    values = [s[key] for s in samples if key in s and s[key] is not None]
    return float(np.median(values)) if values else None


def per_call(f, budget=1.0, most=200, least=3):
    """Steady-state seconds per call of f(): median of calls after one warm-up call, stopping
    after `budget` seconds (at least `least` calls)."""
    f()
    times = []
    start = time.perf_counter()
    while len(times) < most and (len(times) < least or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def fmt(seconds):
    if seconds is None:
        return "–"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def ratio(plain, other):
    return "–" if plain is None or other is None or other == 0 else f"{plain / other:.2f}×"


def tally(verdicts):
    """{status: count} over verdict dicts."""
    counts = {}
    for v in verdicts:
        counts[v["status"]] = counts.get(v["status"], 0) + 1
    return counts


def causes(verdicts):
    """{cause: count} over the verdicts that fell back or failed."""
    found = {}
    for v in verdicts:
        if v["status"] in ("fell back", "failed", "WRONG"):
            key = f"{v['status']}: {v['cause']}"
            found[key] = found.get(key, 0) + 1
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def run_pytest(pytest_args, cwd, patch, mode, pythonpath=(), timeout=3000):
    """A library's tests in a fresh pytest process with suite_plugin routing them as
    `patch` ('module:function') does for `mode`: ({nodeid: result}, seconds, pytest's last line)."""
    import tempfile
    fd, results = tempfile.mkstemp(suffix=".json", prefix="suite_")
    os.close(fd)
    os.remove(results)
    env = dict(os.environ, LIBRARY_PATCH=patch, LIBRARY_MODE=mode, LIBRARY_RESULTS=results)
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_plugin",
                          *pytest_args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    if not os.path.exists(results) or out.returncode not in (0, 1):
        raise RuntimeError(f"pytest exited {out.returncode} ({mode}):\n" + out.stdout[-3000:] + out.stderr[-3000:])
    with open(results) as f:
        found = json.load(f)
    os.remove(results)
    return found, seconds, (out.stdout.strip().splitlines() or ["?"])[-1]


def suite_table(runs):
    """runs: {mode: {nodeid: result}}, 'plain' among them. Prints the pass/fail table against
    plain and the failure and fallback causes."""
    plain = runs.get("plain", {})
    print("| mode | tests | pass | fail | fail where plain passes | pass where plain fails | compiled | fell back |"
          " not traced |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, results in runs.items():
        outcome = {k: v.get("outcome") for k, v in results.items()}
        passed = [k for k, o in outcome.items() if o == "passed"]
        failed = [k for k, o in outcome.items() if o == "failed"]
        lost = [k for k in failed if plain.get(k, {}).get("outcome") == "passed"]
        gained = [k for k in passed if plain.get(k, {}).get("outcome") == "failed"]
        fell = [k for k, v in results.items() if v.get("fallbacks")]
        compiled = [k for k, v in results.items() if v.get("traces") and not v.get("fallbacks")]
        untraced = [k for k, v in results.items() if not v.get("traces") and not v.get("fallbacks")]
        jit = mode != "plain"
        print(f"| {mode} | {len(outcome)} | {len(passed)} | {len(failed)} | {len(lost)} | {len(gained)} | "
              f"{len(compiled) if jit else '–'} | {len(fell) if jit else '–'} | {len(untraced) if jit else '–'} |")
    for mode, results in runs.items():
        errors, fallbacks = {}, {}
        for k, v in results.items():
            if v.get("outcome") == "failed":
                errors.setdefault((v.get("error") or "?").splitlines()[0][:150], []).append(k.split("::", 1)[-1])
            for cause in set(v.get("fallbacks", ())):
                fallbacks[cause] = fallbacks.get(cause, 0) + 1
        for e, tests in sorted(errors.items(), key=lambda kv: -len(kv[1])):
            print(f"  {mode}: {len(tests)} failed: {e}  (e.g. {tests[0]})")
        for cause, n in sorted(fallbacks.items(), key=lambda kv: -kv[1]):
            print(f"  {mode}: fell back in {n} tests: {cause}")


def recording(jitted):
    """jitted, called with warnings recorded even where the caller silences them (lifelines fits
    under simplefilter('ignore')): FallbackWarnings' causes go to suite_plugin.CAUSES."""
    import functools

    from autograd_xla import FallbackWarning

    @functools.wraps(jitted)
    def call(*args, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = jitted(*args, **kwargs)
        found = [fallback_cause(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        if found:
            import suite_plugin
            suite_plugin.CAUSES.extend(found)
        return result
    return call
