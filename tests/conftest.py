"""The suite runs against the default platform: the CPU, or with AUTOGRAD_XLA_PLATFORM=tpu (gpu)
the accelerator, where the same tests compare at the precision the platform computes in
(helpers.tolerance) and the features of the CPU alone run on the CPU or are skipped, each with
its reason (the tables below, markers `cpu_only` and `sockets`).

AUTOGRAD_XLA_TESTS_32BIT=1 gives the CPU a TPU's floating-point rule (float64 programs computed
in float32, results handed back as float64: backend.FLOAT64_PLATFORMS), to try the suite's
platform rules without a TPU."""
import faulthandler
import os
import signal
import socket
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# Four CPU devices for the whole test run (pmap, collectives); single-device programs run on the
# first and cost the same. Set before the CPU client starts; a run may choose another count.
os.environ.setdefault("AUTOGRAD_XLA_CPU_DEVICES", "4")
# A new signature compiles at its first call: the suite's tests count traces and compiles and
# expect fallback warnings at the call that meets them. Tiered execution, the default
# (tiering.default_tiered), is tested in test_tiered.py, where each test says tiered=True or
# sets the default; a run may set the variable to 1 to run everything tiered.
os.environ.setdefault("AUTOGRAD_XLA_TIERED", "0")

import autograd_xla  # noqa: E402 (after the device count: the CPU client starts on first use, not here)
from autograd_xla import backend as backend_mod  # noqa: E402
from autograd_xla import tiering  # noqa: E402

# A ladder's trial runs TRIAL_CALLS timed calls of each program in the suite, as many as a test
# sets, alternating call by call: past them it would go on until the calls have taken
# TRIAL_SECONDS, and each turn would begin with untimed calls (test_ladder's tests of those set
# them).
tiering.TRIAL_SECONDS = 0.0
tiering.TURN_WARM_CALLS = 0

#: The platforms computing float64 in 64 bits, as XLA gives them (the tests the tables below run
#: on the CPU see these under AUTOGRAD_XLA_TESTS_32BIT too, as they would beside a TPU).
FLOAT64_PLATFORMS = backend_mod.FLOAT64_PLATFORMS
EMULATED_32BIT = os.environ.get("AUTOGRAD_XLA_TESTS_32BIT") == "1"
if EMULATED_32BIT:
    backend_mod.FLOAT64_PLATFORMS = backend_mod.FLOAT64_PLATFORMS - {"cpu"}

#: The platform the suite's jitted functions run on by default.
PLATFORM = autograd_xla.default_platform()
if PLATFORM != "cpu":
    # One process at a time can hold a TPU (libtpu's lock) and the suite's process holds it: the
    # processes tests start (examples, imports, caches, workers) run on the CPU. The suite's own
    # default is pinned, so the variable no longer chooses it here.
    autograd_xla.set_default_platform(PLATFORM)
    os.environ["AUTOGRAD_XLA_PLATFORM"] = "cpu"

import numpy  # noqa: E402

import helpers  # noqa: E402 (reads the platform pinned above)

if helpers.NARROW:
    # the tests' direct numpy comparisons too compare at the platform's precision (helpers.TOL_32)
    _assert_allclose = numpy.testing.assert_allclose

    def _assert_allclose_32(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
        d = numpy.asarray(desired)
        floor = helpers.TOL_32[numpy.dtype("float64")] if d.dtype.kind in "fc" else 0
        if floor:
            finite = numpy.abs(d[numpy.isfinite(d)]) if d.size else d
            atol = max(atol, floor * float(finite.max()) if finite.size else 0)
        _assert_allclose(actual, desired, max(rtol, floor), atol, *args, **kwargs)

    numpy.testing.assert_allclose = _assert_allclose_32

#: Test files whose every test exercises the CPU runtime: on another platform they run on the
#: CPU (the on_the_cpu fixture), with the reason.
CPU_FILES = {
    "test_blas.py": "BLAS's custom calls exist in XLA:CPU alone",
    "test_dispatch.py": "jaxlib's C++ call path drives CPU executables (dispatch._qualifies)",
    "test_hlo_picture.py": "it draws XLA:CPU's optimised programs (their fusions' names, float64 labels)",
    "test_ladder.py": "the ladder's programs are XLA:CPU's (compile options, BLAS, views)",
    "test_parallel.py": "pmap over the CPU's four devices",
    "test_special_loops.py": ("scipy's own ufunc loops, which give scipy's results bit for bit, are custom calls "
                              "of XLA:CPU alone (rules/special.py's scipy_loop): elsewhere the portable "
                              "algorithms are lowered, which test_special.py measures"),
}

#: Tests of features of the CPU alone (file::name prefix -> reason): on the CPU elsewhere.
CPU_TESTS = {
    "test_reliability_inputs.py::test_result_too_large_for_memory": (
        "it tests XLA:CPU's refusal of 8 TiB (its address space bounded, so it is never granted and filled)"),
    "test_distributed.py::test_initialize_after_the_cpu_client_started": "the CPU client's distributed runtime",
    "test_aot.py::test_compiled_text_and_analyses": "it reads a float64 program's text and XLA:CPU's buffer sizes",
    "test_aot.py::test_donation_is_input_output_aliasing": "it reads a float64 program's text",
    "test_lowering.py::test_jit_with_several_small_params_and_a_large_one": (
        "small arguments are packed into one buffer for the CPU alone (lowering._packs)"),
    "test_numpy_contractions.py::test_products_reading_the_left_operand_transposed": (
        "it reads the transposes the CPU's products fold (the program's text)"),
    "test_linalg.py::test_one_custom_call_per_factorization": "LAPACK's custom calls exist in XLA:CPU alone",
    "test_linalg.py::test_batched_lapack_kernels": "LAPACK's custom calls exist in XLA:CPU alone",
    "test_numpy_elementwise.py::test_compositions_xla_folds_over_the_reals": (
        "numpy's overflow and NaN through XLA's folds are kept on the CPU alone (context.FOLDED_RESULTS)"),
    "test_numpy_elementwise.py::test_bit_level_functions_exact[float64]": (
        "float64's own bits exist where float64 is computed (a TPU's are float32's: "
        "test_bit_level_functions_follow_the_precision_computed_in)"),
    "test_reliability_inputs.py::test_in_place_reads_never_leak_between_threads": (
        "arguments are read in place during a synchronous call on the CPU alone"),
    "test_library_patterns.py::test_a_hessian_by_central_differences_of_gammainc": (
        "its Hessian divides differences of gammainc by a float64-sized step (~2e-5) twice: it agrees only "
        "with scipy's own loops, bit for bit, which XLA:CPU calls (rules/special.py); float32's rounding "
        "over that step squared is ~1e2, and the [0, 0] entry came out 168287 for 46.6"),
    "test_tiered.py::test_the_plain_budget_is_the_rent_factor_times_the_mean_compile_so_far": (
        "quick compile options (backend.fast_compile_options) exist for XLA:CPU alone: elsewhere every compile counts"),
    "test_tiered.py::test_a_signature_s_saving_sets_the_budget_of_the_next_function_of_its_shape": (
        "a signature's saving is learned by its tiering.Ladder's timed calls, and ladders climb XLA:CPU's options alone"),
    "test_tiered.py::test_on_by_default_compiling_in_the_background_where_a_core_is_free": (
        "tiering is the default only where a plain call returns what a compiled one does, on the CPU "
        "(api._plain_is_alike): elsewhere a new signature compiles at its first call"),
    "test_tiered.py::test_by_default_not_where_a_plain_call_returns_other_kinds_of_results": (
        "tiering is the default only where a plain call returns what a compiled one does, on the CPU "
        "(api._plain_is_alike): elsewhere a new signature compiles at its first call"),
    "test_tiered.py::test_a_signature_whose_plain_calls_are_faster_runs_plainly_for_good": (
        "plain autograd is tried against a compiled program (tiering.PlainStep) only where a plain call returns "
        "what a compiled one does, on the CPU (api._plain_step)"),
    "test_tiered.py::test_a_signature_whose_compiled_calls_are_faster_stays_compiled": (
        "plain autograd is tried against a compiled program (tiering.PlainStep) only where a plain call returns "
        "what a compiled one does, on the CPU (api._plain_step)"),
    "test_special.py::test_logsumexp_derivatives_take_the_forward_passs_exponentials": (
        "it counts the exponentials XLA:CPU's optimised program keeps (its CSE leaves one per term); a TPU's "
        "kept two of the same emitted program (XLA:TPU's fusion)"),
    "test_special.py::test_loops_computed_in_32_bits_stop_at_their_precision": (
        "it measures the loops' stopping rule in float32 (x64=False) against scipy at 6e-6, which needs float32 "
        "transcendentals within a few ulps, as XLA:CPU's are: a TPU's log1p (in XLA's lgamma, which the "
        "prefactors take) is 2.3e-4 off (helpers.TPU_RTOL), and its 99th percentile came 1.5e-4"),
}


def _sockets():
    """Whether this machine lets a process open a loopback socket (the TPU machine allows none)."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
        return True
    except OSError:
        return False


SOCKETS = _sockets()


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu_only(reason): a feature of the CPU alone; skipped on other platforms")
    config.addinivalue_line("markers", "sockets: starts processes that talk over loopback sockets")


#: A run on a machine whose commands are bounded (the TPU's: 10 minutes) must not lose the rest
#: of its time to one hung test: $AUTOGRAD_XLA_TEST_TIMEOUT seconds per test, after which the
#: stacks of all threads go to $AUTOGRAD_XLA_TEST_TIMEOUT_LOG (else stderr) and the test fails
#: (benchmarks/tpu_check.sh sets both). $AUTOGRAD_XLA_TESTS_DONE names a file of node ids, one
#: a line, that this run leaves out: those an earlier command ran (tpu_check.sh's ran_*.txt).
TEST_TIMEOUT = float(os.environ.get("AUTOGRAD_XLA_TEST_TIMEOUT") or 0)
TESTS_DONE = os.environ.get("AUTOGRAD_XLA_TESTS_DONE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not TEST_TIMEOUT:
        yield
        return
    log = os.environ.get("AUTOGRAD_XLA_TEST_TIMEOUT_LOG")
    stream = open(log, "a") if log else sys.stderr

    def expire(signum, frame):
        raise TimeoutError(f"{item.nodeid} ran past {TEST_TIMEOUT:g} s ($AUTOGRAD_XLA_TEST_TIMEOUT)")

    stream.write(f"== {item.nodeid}\n")
    stream.flush()
    # the watchdog thread writes the stacks even where the main thread never returns to Python
    # (a wait in C++ holding the GIL), where the alarm's exception could not be raised
    faulthandler.dump_traceback_later(TEST_TIMEOUT, file=stream)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT + 1)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()
        if log:
            stream.close()


def pytest_collection_modifyitems(config, items):
    if TESTS_DONE:
        done = set(open(TESTS_DONE).read().splitlines())
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
        items[:] = [item for item in items if item.nodeid not in done]
    for item in items:
        if item.get_closest_marker("sockets") and not SOCKETS:
            item.add_marker(pytest.mark.skip(reason="several processes talk over loopback sockets, which this "
                                                    "machine does not allow"))
        marker = item.get_closest_marker("cpu_only")
        if marker is not None and PLATFORM != "cpu":
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "a feature of the CPU alone")
            item.add_marker(pytest.mark.skip(reason=f"CPU only: {reason}"))


def _on_cpu_reason(item):
    """Why a test runs on the CPU whatever the default platform (None: it runs on the default)."""
    base = os.path.basename(str(item.fspath))
    if base in CPU_FILES:
        return CPU_FILES[base]
    name = f"{base}::{item.name}"
    return next((why for prefix, why in CPU_TESTS.items() if name.startswith(prefix)), None)


#: Files whose tests see the PrecisionWarning (its own tests); elsewhere, on a platform that
#: computes float64 in 32 bits, it is silenced: a test of something else is not about it.
PRECISION_WARNING_FILES = {"test_platforms.py"}


def _restore_platform():
    autograd_xla.set_default_platform(None if PLATFORM == "cpu" else PLATFORM)


@pytest.fixture(autouse=True)
def _platform(request):
    """Tests of the CPU's features run there (CPU_FILES, CPU_TESTS); after each test the suite's
    default platform is back (a test that resets the default would otherwise leave the CPU)."""
    if PLATFORM != "cpu" and _on_cpu_reason(request.node) is not None:
        autograd_xla.set_default_platform("cpu")
    if EMULATED_32BIT and _on_cpu_reason(request.node) is not None:
        request.getfixturevalue("monkeypatch").setattr(backend_mod, "FLOAT64_PLATFORMS", FLOAT64_PLATFORMS)
    if helpers.NARROW and os.path.basename(str(request.node.fspath)) not in PRECISION_WARNING_FILES:
        request.getfixturevalue("monkeypatch").setattr(autograd_xla.JittedFunction, "_warn_32_bit",
                                                       lambda self, graph, backend: None)
    yield
    if PLATFORM != "cpu" and backend_mod._default_platform != PLATFORM:
        _restore_platform()


@pytest.fixture
def on_the_cpu():
    """The CPU as the default platform for one test, whatever the run's default: for the
    features of the CPU runtime (BLAS's custom calls, arguments read in place, C++'s call path,
    the ladder's CPU programs, pmap over the CPU devices). benchmarks/gpu_check.sh runs the
    suite with a GPU as the default, where these tests failed for want of the feature."""
    autograd_xla.set_default_platform("cpu")
    yield
    _restore_platform()
