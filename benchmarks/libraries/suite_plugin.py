"""A pytest plugin (`-p suite_plugin`, this folder on PYTHONPATH) that runs a library's own tests
with its autograd code routed through jit_ps and records, test by test, the outcome and what
jit_ps did: LIBRARY_PATCH names `module:function(mode, made)` that installs the routing for
LIBRARY_MODE and appends every JittedFunction it makes to `made`; LIBRARY_RESULTS is the JSON
file written at the end: {nodeid: {outcome, error, fallbacks (causes), traces, compiles, jitted}}.

Fallbacks are counted from cache_info() as well as from FallbackWarnings: libraries such as
lifelines fit under warnings.simplefilter("ignore"), so the routing should record causes itself
(common.recording) where warnings are silenced."""
import importlib
import json
import os
import warnings

import pytest

MADE, RESULTS, CAUSES = [], {}, []


def pytest_configure(config):
    module, function = os.environ["LIBRARY_PATCH"].split(":")
    getattr(importlib.import_module(module), function)(os.environ["LIBRARY_MODE"], MADE)


def pytest_runtest_logstart(nodeid, location):
    del MADE[:], CAUSES[:]  # (fixtures, run before the call, may make the jitted functions)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    from autograd_xla import FallbackWarning
    from common import fallback_cause
    info = [j.cache_info() for j in MADE]
    causes = [fallback_cause(w.message) for w in caught if issubclass(w.category, FallbackWarning)] + CAUSES
    counted = sum(i["fallbacks"] for i in info)
    if counted and not causes:
        causes = [f"{counted} fallback(s) counted, no FallbackWarning seen"]
    RESULTS[item.nodeid] = dict(fallbacks=causes, traces=sum(i["traces"] for i in info),
                                compiles=sum(i["compiles"] for i in info), jitted=len(MADE))


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        entry = RESULTS.setdefault(report.nodeid, {})
        if report.outcome == "failed":
            entry["outcome"] = "failed"
            crash = getattr(report.longrepr, "reprcrash", None)
            entry["error"] = (crash.message if crash else str(report.longrepr))[:300]
        else:
            entry.setdefault("outcome", report.outcome)


def pytest_sessionfinish(session):
    with open(os.environ["LIBRARY_RESULTS"], "w") as f:
        json.dump(RESULTS, f)
