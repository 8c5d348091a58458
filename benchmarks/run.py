"""Benchmark: plain autograd vs jit_ps vs jax.jit on the core workloads, each in a process of its own.

    python benchmarks/run.py > benchmarks/results/run.md

That is the full run: every default workload of workloads.py in float32 and in float64
(`--dtype both`): 16 rows, each with 3 fresh worker processes and 4 more for first calls.
Prints markdown (see docs/benchmarks.rst for what each number means). Options: --quick (about a quarter of the time),
--dtype float32|float64|both, --only NAME[,NAME], --repeat N, --target-ms MS, --lead-ms MS,
--first-calls N, --seed N, --align numpy|16|64, --backend cpu, --no-jax, --json PATH,
--hlo-dir DIR (both sides' optimised HLO, jit_ps's of the program it settled on, for reading side
by side), --diagnose (where jit_ps's time goes against jax's: program and call path, runtime).

For each workload and dtype, three worker processes (procs.py) start together: plain autograd,
jit_ps (autograd_xla; never imports jax) and jax (never imports autograd_xla; jax.jit of the
same math written in jax.numpy, workloads.py). Each makes the same seeded inputs. Then:

1. first calls: one call of a freshly built function in each (jit_ps and jax alternately
   first); the parent compares jit_ps's and jax's results with plain autograd's;
2. a second jit_ps function, tiered (jit_ps's default; the first calls' function compiles at
   its first call, timing.py), runs until its signature has settled (timing.settle): on the
   program its ladder kept, or on plain autograd's calls where a plain trial measured those
   faster (autograd_xla.tiering.PlainStep);
3. steady state of that function: the parent asks the processes for one sample each per turn, in balanced
   orders (timing.balanced_orders); a sample is a batch of calls of at least --target-ms,
   after --lead-ms of the contender's own untimed calls;
4. --first-calls - 1 more first calls of jit_ps and of jax, each in a fresh process.

jax is timed twice in its process: called as the autograd code is (numpy in, numpy out) and
as a JAX training loop calls it (inputs on its device, results waited for and left there).
Prints markdown: per row medians and means (means show stalls that medians hide), ratios,
first calls, the acceptance checks. The exit status is 1 when a row failed (it says why).
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as onp  # noqa: E402

import procs  # noqa: E402
import timing  # noqa: E402
from procs import Case, fmt_ratio, format_seconds, table  # noqa: E402
from workloads import BY_NAME, WORKLOADS  # noqa: E402

FACTORY = "run:cases"
DTYPES = ("float32", "float64")
COLUMNS = {"autograd": "autograd", "jit_ps": "jit_ps", "jax": "jax.jit, numpy in/out",
           "jax_dev": "jax.jit, on its device", "jaxhlo_on_jit_ps": "jax's program on jit_ps's runtime (diag)"}


# ----- in the workers ---------------------------------------------------------------------------

def cases(kind, workload, dtype, seed=0, backend="cpu", align="numpy"):
    """The factory the workers call (procs.py): one workload's function(s) of `kind`, on
    inputs made from `seed`, the same in every process."""
    wl = BY_NAME[workload]
    inputs = wl.make_inputs(onp.dtype(dtype), onp.random.default_rng(seed))
    if align != "numpy":
        inputs = procs.place(inputs, int(align))
    if kind == "autograd":
        return {"autograd": Case(wl.build_autograd(), inputs)}
    if kind == "jit_ps":
        from autograd_xla import jit_ps
        jf = jit_ps(wl.build_autograd(), backend=backend, fallback="error")  # compiled at its first call
        # run.py's steady state: tiered, as by default (this process's default is off: timing.py),
        # so that a signature whose plain calls were measured faster runs them (tiering.PlainStep)
        steady = jit_ps(wl.build_autograd(), backend=backend, tiered=True)
        return {"jit_ps": Case(jf, inputs, settle=True, hlo=lambda: settled_hlo(jf, inputs),
                               stablehlo=lambda: jf.stablehlo(*inputs)),
                "jit_ps_steady": Case(steady, inputs, settle=True, plain_kept=lambda: steady.stats.plain_kept)}
    import jax
    jitted = jax.jit(wl.build_jax(jax, jax.numpy))
    tree_map, asarray = jax.tree_util.tree_map, onp.asarray
    on_device = jax.block_until_ready(jax.device_put(inputs))
    return {"jax": Case(lambda *a: tree_map(asarray, jitted(*a)), inputs,
                        hlo=lambda: jitted.lower(*inputs).compile().as_text(),
                        stablehlo=lambda: jitted.lower(*inputs).as_text()),
            "jax_dev": Case(lambda *a: jax.block_until_ready(jitted(*a)), on_device)}


def settled_hlo(jf, inputs):
    """The optimised HLO of the program jit_ps's signature runs now, the one timed (its
    ladder's, tiering.Ladder: jf.optimized_hlo compiles the default one anew). Uses jit_ps
    internals."""
    jf(*inputs)
    (entry,) = list(jf._cache.values())
    return entry.executable.exe.hlo_modules()[0].to_string()


def diagnostic_cases(kind, workload, dtype, jax_text, seed=0, backend="cpu", align="numpy"):
    """--diagnose, in the jit_ps worker: jax's StableHLO compiled by jit_ps's client and run by
    its Executable class on numpy arguments (the text only: jax is not imported). Uses jit_ps
    internals."""
    from jaxlib import xla_client as xc

    from autograd_xla import backend as backend_mod
    case = cases(kind, workload, dtype, seed, backend, align)["jit_ps"]
    out_avals = case.fn.lower(*case.args)._lowered.out_avals  # traced and lowered, not compiled
    _, leaves = case.fn._split(case.args, {})
    be = backend_mod.get_backend(backend)
    compiled = be.client.compile_and_load(jax_text, xc.DeviceList((be.default_device,)), xc.CompileOptions())
    theirs = backend_mod.Executable(be, backend_mod.Program(compiled), [(onp.shape(x), onp.asarray(x).dtype)
                                                                          for x in leaves],
                                    out_avals, [], jax_text)
    return {"jaxhlo_on_jit_ps": Case(theirs, (leaves,))}


# ----- in the parent ----------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer, shorter samples, fewer first calls")
    p.add_argument("--dtype", choices=DTYPES + ("both",), default="both",
                   help="inputs' dtype (default both; poly_big and cube_big are float32 only)")
    p.add_argument("--only", metavar="NAME[,NAME]", help="workloads to run: " + ", ".join(BY_NAME))
    p.add_argument("--backend", default="cpu", help="platform for jit_ps and jax (default cpu)")
    p.add_argument("--repeat", type=int, help="samples per contender; default 21, quick 7")
    p.add_argument("--target-ms", type=float, help="minimum duration of one sample; default 40, quick 15")
    p.add_argument("--lead-ms", type=float, default=150.0,
                   help="untimed calls of the contender itself before each sample, this long (default 150; 0: "
                        "none): after plain autograd's matrix products OpenBLAS's threads spin on for 0.1-0.2 s")
    p.add_argument("--first-calls", type=int,
                   help="first calls of jit_ps and of jax, each in a fresh process (default 3, quick 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--align", choices=("numpy", "16", "64"), default="numpy",
                   help="input addresses: as numpy made them in each process (default), or copied to an address "
                        "16 or 64 (i.e. 0) modulo 64 (procs.place)")
    p.add_argument("--no-jax", action="store_true", help="leave jax out even if it is installed")
    p.add_argument("--hlo-dir", metavar="DIR", help="write each side's StableHLO and XLA-optimised HLO here")
    p.add_argument("--diagnose", action="store_true",
                   help="where jit_ps's time goes against jax's: one more contender in the jit_ps worker, jax's "
                        "program run by jit_ps's runtime, and the optimised HLOs' op counts side by side")
    p.add_argument("--json", metavar="PATH", help="save raw samples and metadata as JSON")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else \
        [w.name for w in WORKLOADS if w.default]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    dtypes = DTYPES if args.dtype == "both" else (args.dtype,)
    args.rows = [(BY_NAME[n], d) for n in names for d in BY_NAME[n].row_dtypes(dtypes)]
    args.repeat = args.repeat or (7 if args.quick else 21)
    args.target_ms = args.target_ms or (15.0 if args.quick else 40.0)
    args.first_calls = args.first_calls if args.first_calls is not None else (1 if args.quick else 3)
    args.jax = not args.no_jax and procs.jax_available()
    return args


def run_row(wl, dtype, args, index):
    """One workload in one dtype: first calls, correctness, steady state, more first calls."""
    params = {"workload": wl.name, "dtype": dtype, "seed": args.seed, "backend": args.backend, "align": args.align}
    compiled = ["jit_ps"] + (["jax"] if args.jax else [])
    if index % 2:
        compiled.reverse()  # which one's first call goes first alternates between rows
    row = {"name": wl.name, "dtype": dtype, "times": wl.times, "errors": {}, "dtype_notes": [],
           "first_call": {k: [] for k in compiled}, "speedup_target": wl.speedup_target}
    with procs.Workers(["autograd"] + compiled, args.backend) as ws:
        for w in ws.values():
            w.build(FACTORY, **params)
        outs = {}
        for kind in compiled:
            t, outs[kind], split = ws[kind].request("first", kind)
            row["first_call"][kind].append((t, split))
        # plain autograd's last: OpenBLAS's threads spin on for 0.1-0.2 s after its products
        _, ref, _ = ws["autograd"].request("first", "autograd")
        for kind in compiled:
            row["errors"][kind] = procs.compare(ref, outs.pop(kind), dtype, row["dtype_notes"], procs.TITLES[kind])
        if args.jax:
            row["errors"]["jax_dev"] = procs.compare(ref, ws["jax"].request("output", "jax_dev"), dtype, [],
                                                     "jax.jit on device")
        tol = procs.TOLERANCE[dtype]
        del ref
        bad = {k: v for k, v in row["errors"].items() if not v <= tol}
        if bad:
            raise AssertionError(f"results differ from plain autograd's beyond {tol:g} (relative): {bad}")
        row["settled"] = ws["jit_ps"].request("settle", "jit_ps_steady")
        row["plain_kept"] = ws["jit_ps"].extra("jit_ps_steady", "plain_kept")
        if args.hlo_dir or args.diagnose:  # the compiled function's settled program, beside jax's
            ws["jit_ps"].request("settle", "jit_ps")
        contenders = {"autograd": (ws["autograd"], "autograd"), "jit_ps": (ws["jit_ps"], "jit_ps_steady")}
        if args.jax:
            contenders.update(jax=(ws["jax"], "jax"), jax_dev=(ws["jax"], "jax_dev"))
            if args.diagnose:
                ws["jit_ps"].build("run:diagnostic_cases", jax_text=ws["jax"].extra("jax", "stablehlo"), **params)
                contenders["jaxhlo_on_jit_ps"] = (ws["jit_ps"], "jaxhlo_on_jit_ps")
                row["hlo_diff"] = hlo_diff(ws["jit_ps"].extra("jit_ps", "hlo"), ws["jax"].extra("jax", "hlo"))
        samples, numbers = procs.interleaved(contenders, args.repeat, args.target_ms / 1e3, lead=args.lead_ms / 1e3)
        row.update(samples=samples, calls_per_sample=numbers,
                   summary={k: timing.summarize(v) for k, v in samples.items()})
        if args.hlo_dir:
            dump_hlo(args.hlo_dir, f"{wl.name}.{dtype}", ws, compiled)
    for i in range(args.first_calls - 1):
        for kind in (compiled if i % 2 else compiled[::-1]):
            row["first_call"][kind] += procs.fresh_first_calls(kind, FACTORY, params, kind, 1, args.backend)
    return row


def hlo_diff(ours, theirs):
    a, b = procs.hlo_op_counts(ours), procs.hlo_op_counts(theirs)
    diff = [f"{op} {a.get(op, 0)} vs {b.get(op, 0)}" for op in sorted(set(a) | set(b)) if a.get(op, 0) != b.get(op, 0)]
    return "; ".join(diff) if diff else "same op counts"


def dump_hlo(directory, stem, ws, kinds):
    os.makedirs(directory, exist_ok=True)
    for kind in kinds:
        for what, suffix in (("stablehlo", "stablehlo.mlir"), ("hlo", "optimized.hlo")):
            with open(os.path.join(directory, f"{stem}.{kind}.{suffix}"), "w") as f:
                f.write(ws[kind].extra(kind, what))


# ----- report -----------------------------------------------------------------------------------

def ratio(row, a, b, stat="median"):
    s = row.get("summary", {})
    return s[a][stat] / s[b][stat] if a in s and b in s else None


def first_median(row, kind):
    calls = row["first_call"].get(kind)
    return statistics.median(t for t, _ in calls) if calls else None


def report(rows, failures, env, args):
    lines = ["# autograd vs jit_ps vs jax.jit, each in a process of its own", "", "## Environment", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    present = [c for c in COLUMNS if any(c in r["summary"] for r in rows)]
    has_jax = "jax_dev" in present
    for stat in ("median", "mean"):
        lines += ["", f"## Steady state: {stat} time per call over {args.repeat} samples" +
                  (" (± = interquartile range / median)" if stat == "median" else "") +
                  f"; each sample ≥{args.target_ms:g} ms of calls after {args.lead_ms:g} ms of the contender's own", ""]
        head = ["workload", "dtype"] + [COLUMNS[c] for c in present] + ["autograd / jit_ps"]
        if has_jax:
            head += ["jit_ps / jax.jit on its device", "jit_ps / jax.jit numpy in/out"]
        out = []
        for r in rows:
            s = r["summary"]
            cells = [procs.cell(s.get(c)) if stat == "median" else format_seconds(s[c]["mean"]) if c in s else "—"
                     for c in present]
            line = [r["name"], r["dtype"]] + cells + [fmt_ratio(ratio(r, "autograd", "jit_ps", stat))]
            if has_jax:
                line += [fmt_ratio(ratio(r, "jit_ps", "jax_dev", stat)), fmt_ratio(ratio(r, "jit_ps", "jax", stat))]
            out.append(line)
        out += [[name, dtype, f"failed: {msg}"] + [""] * (len(head) - 3) for (name, dtype), msg in failures.items()]
        lines += table(head, out)

    if any("jaxhlo_on_jit_ps" in r["summary"] for r in rows):
        lines += diagnostics(rows)
    n = args.first_calls
    lines += ["", f"## First call: trace + compile + one run of a freshly built function, in {n} fresh "
                  "process(es) each (median and range; the library's client made beforehand)", ""]
    head = ["workload", "dtype", "jit_ps", "jit_ps trace / lower / XLA compile"] + \
        (["jax.jit", "jit_ps / jax.jit"] if has_jax else []) + ["jit_ps settled after (calls, s), on"]
    out = []
    for r in rows:
        fc = r["first_call"]
        parts = [s for _, s in fc["jit_ps"]]
        line = [r["name"], r["dtype"], procs.spread([t for t, _ in fc["jit_ps"]]),
                " / ".join(format_seconds(statistics.median(p[k] for p in parts)) for k in ("trace", "lower", "compile"))]
        if has_jax:
            line += [procs.spread([t for t, _ in fc["jax"]]),
                     fmt_ratio(first_median(r, "jit_ps") / first_median(r, "jax"))]
        calls, seconds = r["settled"]
        on = "plain autograd" if r.get("plain_kept") else "its program"
        out.append(line + [f"{calls}, {seconds:.2f} s, {on}"])
    lines += table(head, out)

    lines += ["", "## Workloads (what one timed call does)", ""]
    for r in rows:
        errs = ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items())
        lines.append(f"- **{r['name']}** ({r['dtype']}): {r['times']}. Largest difference from plain autograd, "
                     f"relative to the result's magnitude: {errs}." + "".join(f" Note: {t}." for t in r["dtype_notes"]))

    if has_jax:
        lines += ["", "## Acceptance checks (issue 43)", "",
                  "jit_ps (numpy in and out) against jax.jit with its inputs on its device: ≤ 1.0; against plain "
                  "autograd: ≥ the workload's target (none for a function of a few elements); first call ≤ jax's "
                  "(medians over the fresh processes).", ""]
        for r in rows:
            dev, speed, target = ratio(r, "jit_ps", "jax_dev"), ratio(r, "autograd", "jit_ps"), r["speedup_target"]
            first = first_median(r, "jit_ps") / first_median(r, "jax")
            line = f"- {r['name']} {r['dtype']}: jit_ps / jax.jit = {dev:.2f} {'met' if dev <= 1.0 else 'NOT MET'}"
            if target is not None:
                line += f"; autograd / jit_ps = {speed:.2f} (target {target:g}) {'met' if speed >= target else 'NOT MET'}"
            line += f"; first call {first:.2f} {'met' if first <= 1.0 else 'NOT MET'}"
            lines.append(line)
    lines += ["", f"load average at start {procs.fmt_load(env['loadavg_start'])}, at end "
                  f"{procs.fmt_load(os.getloadavg())} ({env['cpus_usable']} usable CPUs; more than that means the "
                  "numbers are disturbed)"]
    return "\n".join(lines)


def diagnostics(rows):
    """jit_ps - jax.jit on its device, split in two from medians: program and call path (jit_ps
    - jax's program run by jit_ps's runtime on the same numpy arguments) and runtime (that -
    jax.jit with its inputs and results on its device). Differences of medians, so only
    roughly additive."""
    def signed(seconds):
        return ("−" if seconds < 0 else "+") + format_seconds(abs(seconds))
    lines = ["", "## Diagnosis: where jit_ps's time goes against jax.jit on its device (medians; negative: jit_ps's "
                 "side faster)", "",
             "program and call path = jit_ps − jax's StableHLO compiled and run by jit_ps's runtime (its Executable, "
             "numpy in and out); runtime = that − jax.jit on its device.", ""]
    out = []
    for r in rows:
        m = {k: v["median"] for k, v in r["summary"].items()}
        if "jaxhlo_on_jit_ps" in m:
            out.append([r["name"], r["dtype"], signed(m["jit_ps"] - m["jaxhlo_on_jit_ps"]),
                        signed(m["jaxhlo_on_jit_ps"] - m["jax_dev"]), signed(m["jit_ps"] - m["jax_dev"]),
                        r.get("hlo_diff", "—")])
    return lines + table(["workload", "dtype", "program and call path", "runtime", "total",
                          "optimised-HLO op counts, jit_ps (settled program) vs jax"], out)


def main(argv=None):
    args = parse_args(argv)
    env = procs.environment(jax_column="present" if args.jax else "absent or --no-jax", backend=args.backend,
                            command=" ".join(["python", "benchmarks/run.py"] + (argv if argv is not None else sys.argv[1:])))
    rows, failures = [], {}
    t0 = time.perf_counter()
    for i, (wl, dtype) in enumerate(args.rows):
        print(f"<!-- {wl.name} {dtype} -->", file=sys.stderr, flush=True)
        try:
            rows.append(run_row(wl, dtype, args, i))
        except Exception as e:  # one broken row must not hide the others' numbers
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            failures[(wl.name, dtype)] = f"{type(e).__name__}: {lines[0] if lines else ''} {lines[-1] if len(lines) > 1 else ''}"[:300]
            print(f"<!-- {wl.name} {dtype} failed: {type(e).__name__}: {e} -->", file=sys.stderr, flush=True)
    env["benchmark_seconds"] = round(time.perf_counter() - t0, 1)
    print(report(rows, failures, env, args))
    if args.json:
        env["loadavg_end"] = list(os.getloadavg())
        with open(args.json, "w") as f:
            json.dump({"environment": env, "args": {k: v for k, v in vars(args).items() if k != "rows"},
                       "rows": rows, "failures": [list(k) + [v] for k, v in failures.items()]}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
