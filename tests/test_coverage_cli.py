"""The coverage report's command line: --help, --only FAMILY, progress on stderr, and totals
named with the words the columns show."""
import subprocess
import sys

from autograd_xla import coverage


def run(*args):
    result = subprocess.run([sys.executable, "-m", "autograd_xla.coverage", *args], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout, result.stderr


def rows_and_totals(text):
    """{name: (rule, fwd, vjp, jvp, batching)} of the table (read by the header's column positions), and
    {column: {value: count}} of the totals."""
    table, _, rest = text.partition("\nTotals:\n")
    header, _, *lines = table.splitlines()
    starts = [0] + [header.index(f" {c} ") + 1 for c in ("rule", "fwd", "vjp", "jvp", "batching")] + [None]
    rows = {}
    for line in filter(str.strip, lines):
        name, *cells = (line[a:b].strip() for a, b in zip(starts, starts[1:]))
        rows[name] = tuple(cells)
    totals = {}
    for line in rest.split("\n\n")[0].splitlines():
        head, _, items = line.strip().partition(": ")
        if head != "primitives":
            totals[head] = {k: int(v) for k, v in (item.rsplit(" ", 1) for item in items.split(" | "))}
    return rows, totals


def test_help():
    out, _ = run("--help")
    assert out.startswith("usage: python -m autograd_xla.coverage")
    assert "--only FAMILY" in out and "--no-run" in out and "stats" in out
    assert "--no-batching" in out and "batching" in out.split("options:")[0]


def test_only_a_family_runs_it_with_progress_and_consistent_totals():
    out, err = run("--only", "signal")
    rows, totals = rows_and_totals(out)
    assert rows == {"autograd.scipy.signal.convolve": ("lower", "ok", "ok", "no JVP", "ok")}
    assert totals["rule"] == {"lower": 1, "trace": 0, "none, traces": 0, "none": 0}
    assert totals["fwd"]["ok"] == totals["vjp"]["ok"] == totals["jvp"]["no JVP"] == totals["batching"]["ok"] == 1
    assert "coverage: 1/1 primitives checked" in err


def test_only_without_running_names_every_rule_with_the_totals_words():
    out, err = run("--only", "stats", "--only", "builtins", "--no-run", "--quiet")
    rows, totals = rows_and_totals(out)
    assert err == ""
    assert rows and all(coverage.family(n) in ("stats", "builtins") for n in rows)
    assert len([n for n in rows if n.startswith("scipy.stats.")]) == 27
    for column, i in (("rule", 0), ("fwd", 1), ("batching", 4)):
        values = [r[i] for r in rows.values()]
        assert {v: values.count(v) for v in set(values)} == {k: v for k, v in totals[column].items() if v}


def test_batching_column_vmaps_value_and_vjp():
    out, _ = run("numpy.tanh", "numpy.dot", "--quiet")
    rows, totals = rows_and_totals(out)
    assert rows == {"numpy.dot": ("lower", "ok", "ok", "ok", "ok"), "numpy.tanh": ("lower", "ok", "ok", "ok", "ok")}
    assert totals["batching"] == {"ok": 2, "loop": 0, "differs": 0, "FAIL": 0, "n/a": 0, "no example": 0}
    out, _ = run("numpy.tanh", "--quiet", "--no-batching")
    assert rows_and_totals(out)[0] == {"numpy.tanh": ("lower", "ok", "ok", "ok", "-")}


def test_batching_column_says_loop_for_an_op_without_a_batching_rule(monkeypatch):
    from autograd_xla import batching
    monkeypatch.setattr(batching, "ELEMENTWISE", batching.ELEMENTWISE - {"stablehlo.tanh"})
    [row] = coverage.report(["numpy.tanh"])
    assert (row.fwd, row.batching) == ("ok", "loop")
    assert row.errors == ["batching: loop: no batching rule for stablehlo.tanh (runs once per example)"]


def test_families_and_selectors():
    assert [coverage.family(n) for n in ("numpy.tanh", "numpy.linalg.inv", "scipy.linalg.sqrtm", "numpy.fft.fft",
                                         "autograd.numpy.fft.truncate_pad", "autograd.numpy.numpy_vjps.untake",
                                         "scipy.stats.t.pdf", "autograd.builtins.make_sequence",
                                         "autograd.core.VSpace.add")] == [
        "numpy", "linalg", "linalg", "fft", "fft", "numpy", "stats", "builtins", "misc"]
    assert coverage.selects("linalg", "numpy.linalg.inv") and not coverage.selects("numpy", "numpy.linalg.inv")
    assert coverage.selects("tanh", "numpy.tanh") and coverage.selects("numpy.linalg", "numpy.linalg.inv")


def test_totals_use_the_column_words():
    rows = [coverage.Row(n) for n in "abc"]
    rows[0].rule, rows[1].rule, rows[2].rule = "lower", "none, traces", "lower"
    t = coverage.totals(rows)
    assert (t["primitives"], t["rule: lower"], t["rule: trace"], t["rule: none, traces"]) == (3, 2, 0, 1)
    assert t["fwd: -"] == 3   # a value outside COLUMN_VALUES is counted under its own word
    assert not any("translation" in k for k in t)
