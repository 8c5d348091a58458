"""Run autograd 1.9.1's own test suite with every check_grads call also checked on jit_ps(f).

    python benchmarks/autograd_suite.py [--only PATTERN] [--json OUT] [--markdown OUT]

The sdist is fetched once with `pip download --no-deps --no-binary :all: autograd==1.9.1`
into --src (default ~/.cache/autograd_xla/autograd-1.9.1-sdist) and unpacked; its tests/
folder runs under pytest in a subprocess, importing the installed autograd (not the sdist's
source tree), with `autograd_suite_plugin` (next to this file) replacing
autograd.test_util.check_grads; see that module for what one call checks and how it is
classified. pytest runs with `-c /dev/null` (autograd's pyproject asks for pytest-cov and
xdist and adds options), `--rootdir tests/` (so tests/conftest.py, which seeds numpy's
global RNG with 42 before each test, still applies) and `-p no:cacheprovider`.

A test is classified from its calls: "failed" if any call failed (or the test timed out,
crashed the interpreter, or failed in pytest outside its check_grads calls), else "plain
failure" if a call's check failed under plain autograd too (tests expecting check_grads to
raise, flakiness), else "fell back" if any call fell back, else "compiled". Tests that made
no check_grads call are "unchecked" (with their pytest outcome, which is plain autograd's:
nothing of theirs is jitted). "checked" counts the tests that made at least one call;
"passed" = compiled + fell back.

Failure and fallback causes are clustered by exception type + first message line (the
warning's first line for fallbacks) with names, numbers and shapes taken out; each cluster
says in which check it showed up (value / check_grads (check_jvp|check_vjp, nth order) / grad)
and where it was raised (the innermost autograd_xla frame).

Options: --only PATTERN (repeatable): a test file or node id (anything containing ".py") or
a pytest -k expression (several -k patterns are OR-ed; files and -k combine as in pytest).
--rev REV tests autograd_xla as committed at REV (`git archive` into a temporary folder put
first on PYTHONPATH), not the working tree. --timeout S (default 120) fails a test that runs
longer (SIGALRM in the plugin); a hang it cannot break (no progress for 3x that) or a crash of
the interpreter records the test as failed and pytest is restarted after it. --keep DIR keeps
the event log (DIR/events.jsonl); --events FILE summarizes such a log again without running.
Exit status: 0, or 1 when a checked test failed.

The whole suite takes about 7 minutes on 2 cores (`nice -n 10` it on a shared machine).
"""
import argparse
import collections
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VERSION = "1.9.1"
DEFAULT_SRC = os.path.join(os.path.expanduser("~"), ".cache", "autograd_xla", f"autograd-{VERSION}-sdist")
STATUSES = ("compiled", "fell back", "failed", "plain failure", "skipped", "unchecked")


# ----- the sdist -----------------------------------------------------------------------------------
def obtain_tests(src):
    """The unpacked sdist's tests/ folder under `src`, downloading and unpacking on first use."""
    tests = os.path.join(src, f"autograd-{VERSION}", "tests")
    if os.path.isfile(os.path.join(tests, "conftest.py")):
        return tests
    os.makedirs(src, exist_ok=True)
    archives = glob.glob(os.path.join(src, f"autograd-{VERSION}.tar.gz"))
    if not archives:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"autograd=={VERSION}", "-d", src]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        archives = glob.glob(os.path.join(src, f"autograd-{VERSION}.tar.gz"))
    if not archives:
        sys.exit(f"no autograd-{VERSION}.tar.gz in {src} after pip download")
    with tarfile.open(archives[0]) as tar:
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(src, **kw)
    if not os.path.isdir(tests):
        sys.exit(f"the sdist has no tests/ folder at {tests}")
    return tests


# ----- running pytest --------------------------------------------------------------------------------
def read_events(path):
    events = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        events.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a line cut short by a crash
    return events


def snapshot_package(rev, workdir):
    """`git archive REV autograd_xla` unpacked under workdir: a fixed copy of the package,
    put first on the subprocess's PYTHONPATH (ahead of the editable install's finder)."""
    dest = os.path.join(workdir, "package")
    os.makedirs(dest, exist_ok=True)
    archive = subprocess.run(["git", "-C", REPO, "archive", "--format=tar", rev, "autograd_xla"],
                             capture_output=True, check=True).stdout
    import io
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, **kw)
    return dest


def run_suite(tests, only, timeout, workdir, tol, quiet, package_dir=None, max_restarts=25):
    """Run pytest (restarting after a crash or a hang, skipping what already ran); return
    (test records by node id, collect errors, session info)."""
    out = os.path.join(workdir, "events.jsonl")
    skip = os.path.join(workdir, "skip.txt")
    paths, kexprs = [], []
    for pat in only or ():
        (paths if (".py" in pat) else kexprs).append(pat)
    targets = [p if os.path.isabs(p) else os.path.join(tests, p) for p in paths] or [tests]
    cmd = [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", tests, "-p", "no:cacheprovider",
           "-p", "autograd_suite_plugin", "--agx-out", out, "--agx-timeout", str(timeout), "--agx-skip", skip,
           "-q" if not quiet else "-qq", "--tb=line", "-rN", "--continue-on-collection-errors",
           "-W", "default"]
    if tol:
        cmd += ["--agx-tol", tol]
    if kexprs:
        cmd += ["-k", " or ".join(f"({k})" for k in kexprs)]
    cmd += targets
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE] + ([package_dir] if package_dir else []) + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("PYTHONHASHSEED", "0")
    # a hang the SIGALRM guard cannot break (inside C++): no new event for this long kills the run
    hard = max(3 * timeout, 300) if timeout > 0 else None

    records, crashed, collect_errors, session = {}, {}, {}, {}
    for attempt in range(max_restarts + 1):
        with open(skip, "w", encoding="utf-8") as f:
            f.write("\n".join(list(records) + list(crashed)) + "\n")
        print(("+ " if attempt == 0 else f"+ (restart {attempt}) ") + " ".join(cmd), flush=True)
        proc = subprocess.Popen(cmd, cwd=tests, env=env)
        last_size, last_change, killed = -1, time.time(), False
        while True:
            try:
                rc = proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                size = os.path.getsize(out) if os.path.exists(out) else 0
                if size != last_size:
                    last_size, last_change = size, time.time()
                elif hard and time.time() - last_change > hard:
                    print(f"\n!! no progress for {hard:.0f} s: killing pytest (pid {proc.pid})", flush=True)
                    proc.kill()
                    proc.wait()
                    rc, killed = "killed (hang)", True
                    break
        in_progress = None
        for ev in read_events(out):
            kind = ev.get("event")
            if kind == "session":
                session = ev
            elif kind == "start":
                in_progress = ev["nodeid"]
            elif kind == "test":
                records[ev["nodeid"]] = ev
                in_progress = None
            elif kind == "collect_error":
                collect_errors[ev["nodeid"]] = ev["message"]
        if in_progress is not None and in_progress not in records:
            why = rc if killed else (f"signal {-rc}" if isinstance(rc, int) and rc < 0 else f"exit status {rc}")
            crashed[in_progress] = {"event": "test", "nodeid": in_progress, "outcome": "crashed",
                                    "crash": f"pytest died in this test ({why})", "calls": [], "phase_errors": []}
            print(f"!! {in_progress}: the pytest process died ({why}); restarting after it", flush=True)
            continue
        if rc not in (0, 1, 5) and not killed:
            print(f"!! pytest exited with status {rc}", flush=True)
            if not session and not records:
                sys.exit("pytest could not start (see above)")
        break
    records.update(crashed)
    return records, collect_errors, session


# ----- classifying ----------------------------------------------------------------------------------
def normalize(text):
    """A cause's text with names, numbers and shapes taken out, for clustering."""
    s = text
    s = re.sub(r"0x[0-9a-fA-F]+", "0x_", s)
    s = re.sub(r"jit_ps\((?:[^()]|\([^()]*\))*\)", "jit_ps(f)", s)
    s = re.sub(r"<jit_ps (?:[^<>]|<[^<>]*>)*>", "<jit_ps f>", s)
    s = re.sub(r"check of ((?:[jv]vp_)*)\S+ failed.*", r"check of \1f failed", s)
    s = re.sub(r"\b(VJP|JVP) of \S+ wrt", r"\1 of F wrt", s)
    s = re.sub(r"computed from '[^']*'", "computed from 'X'", s)
    s = re.sub(r"argument \S+ (is a|has type)", r"argument A \1", s)
    s = re.sub(r"for value (True|False) of type", "for value B of type", s)
    s = re.sub(r"\((\s*\d+\s*,)*\s*\d*\s*\)", "(shape)", s)
    s = re.sub(r"\[(\s*\d+\s*,)*\s*\d*\s*\]", "[shape]", s)
    s = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", s)
    s = re.sub(r"\s+", " ", s).strip()
    return s[:240]


def call_causes(call):
    """[(kind, part, text, where)] of one call: kind 'failed' or 'fell back'; part 'value',
    'check_grads (check_jvp, first order)', 'grad', ...; text 'Type: first message line' or
    the fallback warning's first line; where the failure was raised (innermost autograd_xla frame)."""
    out = []
    if call.get("timeout"):
        out.append(("failed", call["timeout"], "timeout", None))
    if "plain_value_error" in call and call.get("status") == "failed":
        e = call["plain_value_error"]
        out.append(("failed", "plain f", f"{e['type']}: {e['message']} (but the plain check_grads passed)", None))
    for part in ("value", "check_grads", "grad"):
        p = call.get("parts", {}).get(part)
        if not p:
            continue
        if p["status"] == "failed":
            e = p["error"]
            label = f"{part} ({e['in_check']})" if part == "check_grads" and e.get("in_check") else part
            where = e.get("in_autograd_xla") or e.get("innermost")
            if e.get("in_autograd_xla") and e.get("innermost") and e["innermost"] != e["in_autograd_xla"]:
                where += f" (innermost: {e['innermost']})"
            out.append(("failed", label, f"{e['type']}: {e['message']}", where))
        for line in p.get("fallbacks", ()):
            out.append(("fell back", part, line, None))
    return out


def classify(rec):
    """(status, [(kind, part, text, where)] of its causes, the first being the primary one)."""
    calls = rec.get("calls") or []
    if rec.get("outcome") == "crashed":
        return "failed", [("failed", "test", "crash: " + rec["crash"], None)]
    if rec.get("timeout"):
        part = rec["timeout"].get("part") or "test body"
        return "failed", [("failed", part, "timeout: the test ran over the time limit", None)]
    if not calls:
        return ("skipped" if rec.get("outcome") == "skipped" else "unchecked"), []
    statuses = [c.get("status", "failed") for c in calls]
    causes = []
    for c in calls:
        for cause in call_causes(c):
            if cause not in causes:
                causes.append(cause)
    failed = [c for c in causes if c[0] == "failed"]
    fell = [c for c in causes if c[0] == "fell back"]
    if "failed" in statuses:
        return "failed", failed + fell
    if rec.get("outcome") == "failed" and "plain failure" not in statuses:
        msg = "; ".join(f"{e['phase']}: {e['message']}" for e in rec.get("phase_errors", ())) or "?"
        return "failed", [("failed", "test", f"pytest failed outside check_grads: {msg}", None)] + fell
    if "plain failure" in statuses:
        e = next(c for c in calls if c.get("status") == "plain failure").get("plain_error", {})
        return "plain failure", [("plain failure", "plain check_grads", f"{e.get('type')}: {e.get('message')}", None)]
    if "fell back" in statuses:
        return "fell back", fell
    return "compiled", []


def _fmt(cause):
    return f"{cause[1]}: {cause[2]}" if cause else None


def summarize(records, collect_errors, wall):
    rows = []
    for nodeid in sorted(records):
        rec = records[nodeid]
        status, causes = classify(rec)
        calls = rec.get("calls") or []
        n = collections.Counter(c.get("status", "failed") for c in calls)
        rows.append({"nodeid": nodeid, "status": status, "cause": _fmt(causes[0]) if causes else None,
                     "causes": [_fmt(c) for c in causes], "_causes": causes,
                     "pytest_outcome": rec.get("outcome"), "seconds": rec.get("seconds"),
                     "calls": len(calls), "calls_compiled": n["compiled"], "calls_fell_back": n["fell back"],
                     "calls_failed": n["failed"], "calls_plain_failure": n["plain failure"],
                     "details": [c for c in calls if c.get("status") != "compiled"]})
    by = collections.Counter(r["status"] for r in rows)
    checked = sum(by[s] for s in ("compiled", "fell back", "failed", "plain failure"))
    # Clusters: exception type + normalized first message line (fallbacks: the warning's
    # normalized first line), whatever part it came from. `tests`: the tests whose primary
    # (first) cause is in the cluster; `also_in`: tests where it shows up as a later cause;
    # `parts`: in how many tests it showed up in each part (value / check_grads ... / grad).
    groups = {}
    for kind in ("failed", "fell back"):
        g = {}
        for r in rows:
            if r["status"] != kind and not (kind == "fell back" and r["status"] == "failed"):
                continue
            mine = [c for c in r["_causes"] if c[0] == kind]
            keys, parts = set(), set()
            for i, c in enumerate(mine):
                key = normalize(c[2])
                entry = g.setdefault(key, {"cause": c[2], "where": c[3], "tests": [], "also_in": [],
                                           "parts": collections.Counter()})
                entry["where"] = entry["where"] or c[3]
                if (key, c[1]) not in parts:
                    parts.add((key, c[1]))
                    entry["parts"][c[1]] += 1
                if key not in keys:
                    keys.add(key)
                    primary = i == 0 and r["status"] == kind
                    (entry["tests"] if primary else entry["also_in"]).append(r["nodeid"])
        groups[kind] = sorted(g.values(), key=lambda v: (-len(v["tests"]), -len(v["also_in"]), v["cause"]))
        for v in groups[kind]:
            v["parts"] = dict(v["parts"].most_common())
    for r in rows:
        del r["_causes"]
    calls = collections.Counter()
    for r in rows:
        for k in ("compiled", "fell_back", "failed", "plain_failure"):
            calls[k] += r["calls_" + k]
    summary = {"tests_run": len(rows), "checked": checked, "passed": by["compiled"] + by["fell back"],
               "compiled": by["compiled"], "fell_back": by["fell back"], "failed": by["failed"],
               "plain_failure": by["plain failure"], "skipped": by["skipped"], "unchecked": by["unchecked"],
               "unchecked_passed": sum(1 for r in rows if r["status"] == "unchecked" and r["pytest_outcome"] == "passed"),
               "unchecked_failed": [r["nodeid"] for r in rows if r["status"] == "unchecked"
                                    and r["pytest_outcome"] != "passed"],
               "plain_failures": [f"{r['nodeid']} ({r['cause']})" for r in rows if r["status"] == "plain failure"],
               "check_grads_calls": dict(calls), "collect_errors": collect_errors, "wall_seconds": wall}
    return summary, rows, groups


# ----- output --------------------------------------------------------------------------------------
def _parts(g):
    return ", ".join(f"{p} {n}" for p, n in g["parts"].items())


def render_text(summary, rows, groups, all_rows=True):
    s = summary
    lines = []
    if all_rows:
        lines.append("per test (calls: compiled/fell back/failed/plain failure):")
        w = max((len(r["nodeid"]) for r in rows), default=10)
        for r in rows:
            calls = (f"{r['calls_compiled']}/{r['calls_fell_back']}/{r['calls_failed']}/{r['calls_plain_failure']}"
                     if r["calls"] else "")
            lines.append(f"  {r['nodeid']:<{w}}  {r['status']:<13} {calls:<11} {r['cause'] or ''}"[:400])
        lines.append("")
    lines.append(f"autograd {VERSION} test suite through jit_ps: {s['tests_run']} tests run in {s['wall_seconds']} s")
    lines.append(f"  checked (>= 1 check_grads call): {s['checked']}")
    lines.append(f"  passed: {s['passed']}  (compiled {s['compiled']}, fell back {s['fell_back']})")
    lines.append(f"  failed: {s['failed']}")
    lines.append(f"  plain failure (the plain check fails too; not counted against jit_ps): {s['plain_failure']}")
    for p in s["plain_failures"]:
        lines.append(f"      {p}"[:200])
    lines.append(f"  unchecked (no check_grads call): {s['unchecked']} ({s['unchecked_passed']} passed plainly"
                 + (f"; not passing: {', '.join(s['unchecked_failed'])}" if s["unchecked_failed"] else "") + ")")
    lines.append(f"  skipped: {s['skipped']}")
    c = s["check_grads_calls"]
    lines.append(f"  check_grads calls: compiled {c.get('compiled', 0)}, fell back {c.get('fell_back', 0)}, "
                 f"failed {c.get('failed', 0)}, plain failure {c.get('plain_failure', 0)}")
    if s["collect_errors"]:
        lines.append(f"  collection errors: {s['collect_errors']}")
    for kind, title in (("failed", "failure causes"), ("fell back", "fallback causes")):
        lines.append("")
        lines.append(f"{title}: tests whose first {kind} cause it is (+ tests where it comes later); "
                     "parts = tests it showed in, by check:")
        for g in groups[kind]:
            ex = ", ".join((g["tests"] or g["also_in"])[:2])
            more = f" (+{len(g['also_in'])})" if g["also_in"] else ""
            lines.append(f"  {len(g['tests']):4d}{more:<6} {g['cause']}"[:320])
            lines.append(f"             parts: {_parts(g)}" + (f"; raised at {g['where']}" if g.get("where") else ""))
            lines.append(f"             e.g. {ex}")
    return "\n".join(lines)


def _md(text):
    return str(text or "").replace("|", "\\|").replace("\n", " ")


def render_markdown(summary, rows, groups, meta):
    s = summary
    c = s["check_grads_calls"]
    out = [f"# autograd {VERSION} test suite through `jit_ps`", "",
           f"`{meta.get('command')}`, {meta.get('date')}, autograd_xla {meta.get('commit')}, "
           f"wall time {s['wall_seconds']} s.", "",
           "| | tests |", "|---|---:|",
           f"| run | {s['tests_run']} |", f"| checked (>= 1 check_grads call) | {s['checked']} |",
           f"| passed (compiled + fell back) | {s['passed']} |", f"| compiled | {s['compiled']} |",
           f"| fell back | {s['fell_back']} |", f"| failed | {s['failed']} |",
           f"| plain failure (fails under plain autograd too) | {s['plain_failure']} |",
           f"| unchecked (no check_grads call) | {s['unchecked']} ({s['unchecked_passed']} passed) |",
           f"| skipped | {s['skipped']} |", "",
           f"check_grads calls: compiled {c.get('compiled', 0)}, fell back {c.get('fell_back', 0)}, "
           f"failed {c.get('failed', 0)}, plain failure {c.get('plain_failure', 0)}.", ""]
    for kind, title in (("failed", "Failure causes"), ("fell back", "Fallback causes")):
        out += [f"## {title}", "",
                "`tests`: tests whose first cause it is (+ tests where it comes later); `parts`: in how many "
                "tests it showed up, by check.", "",
                "| tests | cause | parts | raised at | examples |", "|---:|---|---|---|---|"]
        for g in groups[kind]:
            more = f" (+{len(g['also_in'])})" if g["also_in"] else ""
            ex = ", ".join((g["tests"] or g["also_in"])[:3])
            out.append(f"| {len(g['tests'])}{more} | {_md(g['cause'])} | {_md(_parts(g))} | "
                       f"{_md(g.get('where') or '')} | {_md(ex)} |")
        out.append("")
    out += ["## Per test", "", "| test | status | calls c/f/x/p | first cause |", "|---|---|---|---|"]
    for r in rows:
        calls = f"{r['calls_compiled']}/{r['calls_fell_back']}/{r['calls_failed']}/{r['calls_plain_failure']}" \
            if r["calls"] else ""
        out.append(f"| `{r['nodeid']}` | {r['status']} | {calls} | {_md(r['cause'])} |")
    return "\n".join(out) + "\n"


def git_commit(rev="HEAD"):
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", rev], capture_output=True,
                              text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def main(argv=None):
    if argv is not None:
        sys.argv[1:] = argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", metavar="PATTERN",
                    help="a test file / node id (contains .py) or a pytest -k expression; repeatable")
    ap.add_argument("--json", metavar="OUT", help="write summary, causes and per-test records as JSON")
    ap.add_argument("--markdown", metavar="OUT", help="write the summary and per-test table as markdown")
    ap.add_argument("--src", default=DEFAULT_SRC, help=f"where the sdist is cached (default {DEFAULT_SRC})")
    ap.add_argument("--timeout", type=float, default=120.0, help="per-test limit in seconds (default 120; 0: none)")
    ap.add_argument("--tol", default=None, help="value tolerances rtol64,atol64,rtol32,atol32 (default 1e-7,1e-12,1e-5,1e-6)")
    ap.add_argument("--rev", metavar="REV", help="test autograd_xla as committed at REV (git archive into a "
                    "temporary folder) instead of the working tree, e.g. --rev HEAD while others edit it")
    ap.add_argument("--keep", metavar="DIR", help="keep pytest's event log in DIR")
    ap.add_argument("--events", metavar="FILE", help="don't run: summarize the event log of an earlier run "
                    "(DIR/events.jsonl of --keep DIR)")
    ap.add_argument("--no-rows", action="store_true", help="print only the summary, not the per-test table")
    ap.add_argument("--quiet", action="store_true", help="quieter pytest output")
    args = ap.parse_args(argv)

    if args.events:
        records, collect_errors, session, meta = load_events(args.events)
        meta["summarized"] = " ".join(["python", os.path.relpath(os.path.abspath(__file__), REPO)] + sys.argv[1:])
        return report(args, records, collect_errors, session, meta)
    tests = obtain_tests(args.src)
    workdir = args.keep or tempfile.mkdtemp(prefix="autograd_suite_")
    os.makedirs(workdir, exist_ok=True)
    for name in ("events.jsonl", "skip.txt"):
        if os.path.exists(os.path.join(workdir, name)):
            os.remove(os.path.join(workdir, name))
    meta = {"command": " ".join(["python", os.path.relpath(os.path.abspath(__file__), REPO)] + sys.argv[1:]),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "commit": git_commit(args.rev or "HEAD") + ("" if args.rev else " + working tree"),
            "tests_dir": tests}
    t0 = time.time()
    package_dir = snapshot_package(args.rev, workdir) if args.rev else None
    records, collect_errors, session = run_suite(tests, args.only, args.timeout, workdir, args.tol, args.quiet,
                                                 package_dir)
    wall = time.time() - t0
    meta["wall_seconds"] = round(wall, 1)
    with open(os.path.join(workdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    status = report(args, records, collect_errors, session, meta)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


def load_events(path):
    records, collect_errors, session = {}, {}, {}
    for ev in read_events(path):
        if ev.get("event") == "test":
            records[ev["nodeid"]] = ev
        elif ev.get("event") == "collect_error":
            collect_errors[ev["nodeid"]] = ev["message"]
        elif ev.get("event") == "session":
            session = ev
    meta_file = os.path.join(os.path.dirname(os.path.abspath(path)), "meta.json")
    meta = json.load(open(meta_file)) if os.path.exists(meta_file) else {"command": "?", "date": "?", "commit": "?"}
    return records, collect_errors, session, meta


def report(args, records, collect_errors, session, meta):
    summary, rows, groups = summarize(records, collect_errors, meta.get("wall_seconds", float("nan")))
    meta = dict(meta, session=session)
    print()
    print(render_text(summary, rows, groups, all_rows=not args.no_rows))
    if session.get("autograd") and os.path.abspath(session["autograd"]).startswith(os.path.abspath(args.src)):
        print(f"!! warning: the sdist's own autograd was imported ({session['autograd']})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "summary": summary, "failure_causes": groups["failed"],
                       "fallback_causes": groups["fell back"], "tests": rows}, f, indent=1, default=str)
        print(f"wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(render_markdown(summary, rows, groups, meta))
        print(f"wrote {args.markdown}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
