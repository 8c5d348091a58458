"""pytest plugin for `autograd_suite.py`: runs autograd's own test suite with every
`check_grads` call checked on `jit_ps(f)` as well.

Loaded with `-p autograd_suite_plugin` (the benchmarks/ folder on PYTHONPATH). At import,
before any test module is collected, it replaces `autograd.test_util.check_grads` (so also
`combo_check`, which calls the module global) by a checker that, for each call
`check_grads(f, argnum, modes, order)(*args, **kwargs)`, runs

  value       `jit_ps(f)(*args, **kwargs)` against `f(*args, **kwargs)`;
  check_grads autograd's original `check_grads(jit_ps(f), argnum, modes, order)(*args, **kwargs)`;
  grad        where f's value is a real float scalar: `jit_ps(grad(f, argnum))(*args, **kwargs)`
              against `grad(f, argnum)(*args, **kwargs)`.

Each part runs on a fresh `jit_ps(f)` with numpy's global random state as it was when the
call began, so a fallback warning is attributed to the part that gave it. A call is
"compiled" (all parts passed, no fallback warning), "fell back" (passed, but a
FallbackWarning, or a warning saying "... as plain autograd", was seen), "failed" (a part
raised or mismatched) or "plain failure": when a part failed, the original check_grads is
rerun on the plain `f` from the same random state; if that fails too, the call is a plain
failure and the plain exception propagates (tests such as test_tests.py expect it). When
only the jitted check failed, the checker returns normally, so the test goes on (with
numpy's random state where the plain check left it) and its later calls are checked too.

One JSON line per event goes to --agx-out: {"event": "start", ...} before each test, and
{"event": "test", ...} with the test's pytest outcome and its check_grads calls after it.
--agx-timeout N fails a test that runs over N seconds (SIGALRM; "timeout"); --agx-skip FILE
deselects the node ids listed in FILE (the driver's restart after a crash).
"""
import json
import os
import re
import signal
import sys
import time
import traceback
import warnings

import autograd
import autograd.test_util as _test_util
import numpy as np
import pytest
from autograd import grad

from autograd_xla import FallbackWarning, jit_ps

# What is checked is the compiled program: a new signature compiles at its first call (tiered
# execution, jit_ps's default, would run it plainly first).
os.environ.setdefault("AUTOGRAD_XLA_TIERED", "0")


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001
        return None


_ORIG_CHECK_GRADS = _test_util.check_grads
_AUTOGRAD_XLA_DIR = os.path.dirname(os.path.abspath(sys.modules["autograd_xla"].__file__)) + os.sep
_TEST_UTIL_FILE = os.path.abspath(_test_util.__file__)
_FALLBACK_TEXT = re.compile(r"\bas plain autograd\b")

PARTS = ("value", "check_grads", "grad")


class TestTimeout(BaseException):
    """Raised by SIGALRM in a test that ran too long. A BaseException, so the checker's
    `except Exception` does not swallow it and pytest records the test as failed."""


class _State:
    depth = 0          # > 0 inside the original check_grads: nested calls go straight to it
    calls = None       # the current test's call records (None outside a test)
    current = None     # the call record being checked now (for a timeout's attribution)
    part = None        # the part being run now
    rtol64, atol64, rtol32, atol32 = 1e-7, 1e-12, 1e-5, 1e-6
    loose = None       # (rtol, atol) of the current test where an algorithm differs (LOOSER)


S = _State()

#: Tests whose values may differ by more than the default tolerance because the compiled
#: algorithm is another one, and by how much: odeint is an adaptive Dormand-Prince integrator
#: under jit_ps and LSODA in scipy; they agree to the integration tolerance (scipy's default
#: rtol 1.49e-8 per step, accumulated over the interval), measured 4.3e-8 on values <= 0.65.
LOOSER = {"test_scipy.py::test_odeint": (1e-6, 1e-9)}


# ----- comparing values -------------------------------------------------------------------------
class Mismatch(AssertionError):
    pass


def _compare(got, exp, path="out"):
    if isinstance(exp, (tuple, list)):
        if not isinstance(got, (tuple, list)) or isinstance(got, tuple) != isinstance(exp, tuple):
            raise Mismatch(f"container mismatch at {path}: got {type(got).__name__}, expected {type(exp).__name__}")
        if len(got) != len(exp):
            raise Mismatch(f"length mismatch at {path}: got {len(got)}, expected {len(exp)}")
        for i, (g, e) in enumerate(zip(got, exp)):
            _compare(g, e, f"{path}[{i}]")
        return
    if isinstance(exp, dict):
        if not isinstance(got, dict) or set(got) != set(exp):
            raise Mismatch(f"dict mismatch at {path}: got {type(got).__name__} "
                           f"{sorted(map(str, got)) if isinstance(got, dict) else ''}, expected keys "
                           f"{sorted(map(str, exp))}")
        for k in exp:
            _compare(got[k], exp[k], f"{path}[{k!r}]")
        return
    if exp is None or isinstance(exp, str):
        if got != exp:
            raise Mismatch(f"value mismatch at {path}: got {got!r}, expected {exp!r}")
        return
    try:
        e = np.asarray(exp)
        g = np.asarray(got)
    except Exception as err:  # noqa: BLE001
        raise Mismatch(f"uncomparable values at {path}: {type(got).__name__} vs {type(exp).__name__}: {err}")
    if e.dtype == object or g.dtype == object:
        if not (got is exp or bool(np.all(g == e))):
            raise Mismatch(f"value mismatch at {path} (object arrays)")
        return
    if g.shape != e.shape:
        raise Mismatch(f"shape mismatch at {path}: got {g.shape}, expected {e.shape}")
    if g.dtype != e.dtype:
        raise Mismatch(f"dtype mismatch at {path}: got {g.dtype}, expected {e.dtype}")
    if e.dtype.kind in "fc":
        single = e.dtype in (np.float32, np.complex64, np.float16)
        rtol, atol = (S.rtol32, S.atol32) if single else (S.rtol64, S.atol64)
        if S.loose is not None:
            rtol, atol = max(rtol, S.loose[0]), max(atol, S.loose[1])
        if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            with np.errstate(all="ignore"):
                d = np.abs(g - e)
                d = np.where(np.isnan(d), np.inf, d)
                worst = float(np.max(d)) if d.size else 0.0
                scale = float(np.max(np.abs(e))) if e.size else 0.0
            raise Mismatch(f"value mismatch at {path}: max |got - expected| = {worst:.3g} "
                           f"(max |expected| = {scale:.3g}, rtol {rtol:g}, atol {atol:g})")
    elif not np.array_equal(g, e):
        raise Mismatch(f"value mismatch at {path} ({e.dtype} values differ)")


def _is_real_scalar(v):
    if isinstance(v, bool):
        return False
    if isinstance(v, float):
        return True
    if isinstance(v, (np.ndarray, np.generic)):
        return np.ndim(v) == 0 and v.dtype.kind == "f"
    return False


# ----- recording -----------------------------------------------------------------------------------
def _first_line(text):
    text = str(text).strip()
    return text.splitlines()[0].strip() if text else ""


def _error_record(err):
    """Type, first message line and where: the innermost autograd_xla frame and the innermost frame."""
    tb = traceback.extract_tb(err.__traceback__)
    ours = [f for f in tb if os.path.abspath(f.filename).startswith(_AUTOGRAD_XLA_DIR)]
    where = lambda f: f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" if f else None
    cls = type(err)
    name = cls.__name__ if cls.__module__ in ("builtins", "__main__") else f"{cls.__module__}.{cls.__name__}"
    rec = {"type": name, "message": _first_line(err) or _first_line(repr(err)),
           "in_autograd_xla": where(ours[-1]) if ours else None, "innermost": where(tb[-1]) if tb else None}
    # inside autograd's check_grads: which of its checks, at which derivative order
    util = [f for f in tb if os.path.abspath(f.filename) == _TEST_UTIL_FILE]
    checks = [f.name for f in util if f.name in ("check_vjp", "check_jvp")]
    if checks:
        order = sum(1 for f in util if f.name == "check_grads")
        nth = {1: "first", 2: "second", 3: "third"}.get(order, f"order {order}")
        rec["in_check"] = f"{checks[-1]}, {nth} order"
    return rec


def _fallback_lines(caught):
    out = []
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, FallbackWarning) or _FALLBACK_TEXT.search(text):
            line = _first_line(text)
            if line not in out:
                out.append(line)
    return out


def _shape_desc(x):
    if isinstance(x, (tuple, list)):
        return type(x).__name__ + "[" + ", ".join(_shape_desc(v) for v in x) + "]"
    if isinstance(x, dict):
        return "dict{" + ", ".join(f"{k}: {_shape_desc(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (np.ndarray, np.generic)):
        return f"{x.dtype}{list(x.shape)}"
    return type(x).__name__


def _run_part(rec, part, state, thunk):
    """Run one part with numpy's random state reset; record ok / fallback / failed."""
    S.part = part
    t0 = time.perf_counter()
    res = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.random.set_state(state)
        try:
            thunk()
            res["status"] = "ok"
        except Exception as err:  # noqa: BLE001  (a TestTimeout is a BaseException and goes through)
            res["status"] = "failed"
            res["error"] = _error_record(err)
    fallbacks = _fallback_lines(caught)
    if fallbacks:
        res["fallbacks"] = fallbacks
        if res["status"] == "ok":
            res["status"] = "fallback"
    res["seconds"] = round(time.perf_counter() - t0, 4)
    rec["parts"][part] = res
    S.part = None
    return res


def _run_check(fun, argnum, op_args, op_kwargs, args, kwargs):
    rec = {"fun": getattr(fun, "__name__", repr(fun)), "argnum": repr(argnum),
           "options": repr((op_args, op_kwargs)) if (op_args or op_kwargs) else "",
           "args": ", ".join([_shape_desc(a) for a in args] + [f"{k}={_shape_desc(v)}" for k, v in kwargs.items()]),
           "parts": {}}
    if S.calls is not None:
        S.calls.append(rec)
    S.current = rec
    t0 = time.perf_counter()
    state = np.random.get_state()

    def plain_value():
        np.random.set_state(state)
        return fun(*args, **kwargs)

    try:
        expected = plain_value()
        plain_ok = True
    except Exception as err:  # noqa: BLE001
        plain_ok = False
        rec["plain_value_error"] = _error_record(err)

    if plain_ok:
        def value():
            _compare(jit_ps(fun)(*args, **kwargs), expected)

        _run_part(rec, "value", state, value)

        def check():
            S.depth += 1
            try:
                _ORIG_CHECK_GRADS(jit_ps(fun), argnum, *op_args, **op_kwargs)(*args, **kwargs)
            finally:
                S.depth -= 1

        _run_part(rec, "check_grads", state, check)

        if _is_real_scalar(expected):
            g = grad(fun, argnum)
            np.random.set_state(state)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    g_expected = g(*args, **kwargs)
            except Exception as err:  # noqa: BLE001
                rec["parts"]["grad"] = {"status": "skipped", "why": "plain grad raised: " +
                                        _error_record(err)["type"]}
            else:
                _run_part(rec, "grad", state, lambda: _compare(jit_ps(g)(*args, **kwargs), g_expected))

    statuses = [p["status"] for p in rec["parts"].values()]
    if plain_ok and "failed" not in statuses:
        rec["status"] = "fell back" if "fallback" in statuses else "compiled"
        rec["seconds"] = round(time.perf_counter() - t0, 4)
        S.current = None
        return None
    # a part failed (or f itself raised): is the plain check failing as well?
    S.part = "plain check_grads"
    np.random.set_state(state)
    S.depth += 1
    try:
        _ORIG_CHECK_GRADS(fun, argnum, *op_args, **op_kwargs)(*args, **kwargs)
    except Exception as err:  # noqa: BLE001
        rec["status"] = "plain failure"
        rec["plain_error"] = _error_record(err)
        rec["seconds"] = round(time.perf_counter() - t0, 4)
        S.current = S.part = None
        raise
    finally:
        S.depth -= 1
    rec["status"] = "failed"
    rec["seconds"] = round(time.perf_counter() - t0, 4)
    S.current = S.part = None
    return None


def check_grads(fun, argnum=0, *op_args, **op_kwargs):
    """Drop-in for autograd.test_util.check_grads (see the module docstring)."""
    if S.depth:  # the original check_grads recursing into itself for higher orders
        return _ORIG_CHECK_GRADS(fun, argnum, *op_args, **op_kwargs)
    assert type(argnum) in (int, tuple, list), argnum

    def checker(*args, **kwargs):
        return _run_check(fun, argnum, op_args, op_kwargs, args, kwargs)

    checker.__name__ = f"check_grads_of_{getattr(fun, '__name__', 'fun')}_wrt_argnum_{argnum}"
    return checker


check_grads.__wrapped__ = _ORIG_CHECK_GRADS
_test_util.check_grads = check_grads  # before any test module does `from autograd.test_util import ...`


# ----- pytest hooks ------------------------------------------------------------------------------
def pytest_addoption(parser):
    g = parser.getgroup("autograd_suite")
    g.addoption("--agx-out", default=None, help="JSON-lines file for the per-test records")
    g.addoption("--agx-timeout", type=float, default=120.0, help="per-test time limit in seconds (0: none)")
    g.addoption("--agx-skip", default=None, help="file of node ids (one a line) to deselect")
    g.addoption("--agx-tol", default=None, help="rtol64,atol64,rtol32,atol32 of the value comparisons")


_out = None
_timeout = 0.0
_tests = {}


def _emit(obj):
    if _out is not None:
        _out.write(json.dumps(obj, default=str) + "\n")
        _out.flush()


def pytest_configure(config):
    global _out, _timeout
    path = config.getoption("--agx-out")
    if path:
        _out = open(path, "a", encoding="utf-8")
    _timeout = config.getoption("--agx-timeout") or 0.0
    tol = config.getoption("--agx-tol")
    if tol:
        S.rtol64, S.atol64, S.rtol32, S.atol32 = (float(v) for v in tol.split(","))
    _emit({"event": "session", "pid": os.getpid(), "autograd": autograd.__file__,
           "autograd_version": _version("autograd"), "numpy": np.__version__,
           "autograd_xla": sys.modules["autograd_xla"].__file__})


def pytest_unconfigure(config):
    global _out
    if _out is not None:
        _emit({"event": "end"})
        _out.close()
        _out = None


def pytest_collection_modifyitems(session, config, items):
    path = config.getoption("--agx-skip")
    if not path or not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        skip = {line.strip() for line in f if line.strip()}
    keep = [it for it in items if it.nodeid not in skip]
    dropped = [it for it in items if it.nodeid in skip]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_collectreport(report):
    if report.failed:
        _emit({"event": "collect_error", "nodeid": report.nodeid,
               "message": _first_line(getattr(report.longrepr, "reprcrash", None) and
                                      report.longrepr.reprcrash.message or str(report.longrepr)[-500:])})


def _alarm(signum, frame):
    raise TestTimeout(f"test ran over {_timeout:g} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _emit({"event": "start", "nodeid": item.nodeid, "time": time.time()})
    S.calls = []
    S.loose = next((tol for name, tol in LOOSER.items() if item.nodeid.endswith(name)), None)
    _tests[item.nodeid] = {"outcome": "passed", "phase_errors": [], "t0": time.perf_counter()}
    yield
    t = _tests.pop(item.nodeid)
    calls, S.calls = S.calls, None
    _emit({"event": "test", "nodeid": item.nodeid, "outcome": t["outcome"], "phase_errors": t["phase_errors"],
           "timeout": t.get("timeout"), "seconds": round(time.perf_counter() - t["t0"], 3), "calls": calls})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    use_alarm = _timeout > 0 and hasattr(signal, "SIGALRM")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, _timeout)
    try:
        yield
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def pytest_runtest_logreport(report):
    t = _tests.get(report.nodeid)
    if t is None:
        return
    if report.skipped and t["outcome"] == "passed":
        t["outcome"] = "skipped"
    elif report.failed:
        t["outcome"] = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        msg = crash.message if crash is not None else str(report.longrepr)[-500:]
        t["phase_errors"].append({"phase": report.when, "message": _first_line(msg)})
        if "TestTimeout" in msg or (crash is not None and "test ran over" in msg):
            cur = S.current
            t["timeout"] = {"part": S.part, "fun": cur["fun"] if cur else None}
            if cur is not None and "status" not in cur:
                cur["status"], cur["timeout"] = "failed", S.part
            S.current = S.part = None
