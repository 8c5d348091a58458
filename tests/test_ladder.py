"""A compiled signature's ladder (tiering.Ladder): its first program is the one XLA compiles
fastest (backend.fast_compile_options), and once its calls have cost that compile
(tiering.UPGRADE_RENT, 0 here where said) programs that may run faster are made on the
compile thread and tried against it (tiering.TRIAL_CALLS calls each); the faster stays.
Timing is only the trial's: the trial itself is tested with executables whose speed is set."""
import logging
import time
import types

import numpy as onp
import pytest

import autograd.numpy as np
import autograd.scipy.special as sp
from autograd import grad
from autograd_xla import backend, context, dispatch, fori_loop, hlo, jit_ps, lowering, tiering
from helpers import assert_close

pytestmark = pytest.mark.usefixtures("on_the_cpu")  # features of the CPU runtime (conftest)

rs = onp.random.RandomState(5)


@pytest.fixture
def climbing(monkeypatch):
    """Every call pays the rent; trials of two calls each."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 2)
    monkeypatch.setattr(tiering, "TURN_SETTLE_SECONDS", 0.0)
    assert tiering.compile_thread.wait(60)
    yield
    assert tiering.compile_thread.wait(60)


def settle(f, *args):
    """Call f until its signature's ladder is done; the results of every call."""
    results = []
    for _ in range(40):
        results.append(f(*args))
        assert tiering.compile_thread.wait(60)
        (entry,) = f._cache.values()
        if entry.ladder is None:
            return entry, results
    raise AssertionError("the ladder did not settle in 40 calls")


@pytest.mark.usefixtures("climbing")
def test_the_first_program_compiles_fast_and_the_default_is_tried_once_the_rent_is_paid():
    f = jit_ps(grad(lambda x: np.sum(np.tanh(x) * np.exp(-x * x))))
    x = rs.randn(300)
    f(x)
    (entry,) = f._cache.values()
    assert entry.options.env_option_overrides == (backend.FAST_COMPILE_OVERRIDES + backend.QUICK_COMPILE_OVERRIDES
                                                  + backend.SCHEDULER_OVERRIDES)  # little work: compiled quickly
    assert (f.cache_info()["compiles"], f.cache_info()["upgrades"]) == (1, 0)
    entry, results = settle(f, x)
    info = f.cache_info()
    # with LLVM's optimisations (backend.QUICK_STEP), the default options' program, then the one
    # in use with XLA's own scheduler (backend.XLA_SCHEDULER)
    assert (info["compiles"], info["upgrades"], info["traces"]) == (1, 3, 1) and info["upgrade_seconds"] > 0
    # the trials keep whichever ran faster: on a loaded or many-core machine (a TPU host's 13)
    # the quick first program's calls of 300 elements may win
    assert entry.options is None or entry.options.env_option_overrides in (
        [], backend.FAST_COMPILE_OVERRIDES, backend.FAST_COMPILE_OVERRIDES + backend.SCHEDULER_OVERRIDES,
        backend.FAST_COMPILE_OVERRIDES + backend.QUICK_COMPILE_OVERRIDES + backend.SCHEDULER_OVERRIDES)
    want = grad(lambda x: np.sum(np.tanh(x) * np.exp(-x * x)))(x)
    for got in results:  # the programs ran, in turn, during the trials
        assert_close(got, want)


@pytest.mark.usefixtures("climbing")
def test_a_signature_forgotten_before_its_turn_is_not_compiled_again():
    f = jit_ps(lambda x: np.cos(x) * 3.0)
    x = rs.randn(5)
    with tiering.compile_thread.paused():
        f(x)  # pays the rent: the next program's compile waits for the thread
        f.clear_cache()
    assert tiering.compile_thread.wait(60)
    assert f.cache_info()["upgrades"] == 0
    assert_close(f(x), onp.cos(x) * 3.0)


def test_a_later_program_shares_the_constants_the_first_put_on_the_device(monkeypatch):
    """A dataset the function closes over (lifted into a parameter) is put on the device once."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 0)
    data = rs.randn(300, 200)
    f = jit_ps(lambda w: np.tanh(data @ w))
    w = rs.randn(200)
    f(w)
    (entry,) = f._cache.values()
    first, consts = entry.executable, list(entry.executable.consts)
    assert len(consts) == 1
    entry, _ = settle(f, w)
    assert entry.executable is not first and len(entry.executable.consts) == 1
    assert all(a is b for a, b in zip(entry.executable.consts, consts))
    assert_close(f(w), onp.tanh(data @ w))


def test_a_short_job_compiles_once(monkeypatch):
    """Until its calls have cost its first compile, a signature has one program."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 1.0)
    f = jit_ps(lambda x: np.sin(x) + 1.0)
    x = rs.randn(10)
    for _ in range(5):
        assert_close(f(x), onp.sin(x) + 1.0)
    assert tiering.compile_thread.wait(60)
    assert f.cache_info()["upgrades"] == 0 and next(iter(f._cache.values())).ladder is not None


def test_no_ladder_when_the_rent_is_none(monkeypatch):
    monkeypatch.setattr(tiering, "UPGRADE_RENT", None)
    f = jit_ps(lambda x: x * 2.0)
    f(rs.randn(4))
    assert next(iter(f._cache.values())).ladder is None


def test_xla_flags_choosing_the_emitters_are_left_alone(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert backend.get_backend("cpu").fast_compile_options() is None
    monkeypatch.delenv("XLA_FLAGS")
    overrides = backend.get_backend("cpu").fast_compile_options().env_option_overrides
    assert overrides == backend.FAST_COMPILE_OVERRIDES + backend.SCHEDULER_OVERRIDES


def test_every_cpu_program_compiles_with_the_memory_optimised_scheduler(monkeypatch):
    """backend.SCHEDULER_OVERRIDES reach XLA with the first program's options and with a
    later program's default ones, unless XLA_FLAGS chose a scheduler (which they would undo)."""
    cpu = backend.get_backend("cpu")
    seen = []

    class Watched:  # the client, noting the overrides of each compile
        def __getattr__(self, name):
            return getattr(client, name)

        def compile_and_load(self, text, devices, options):
            seen.append(list(options.env_option_overrides))
            return client.compile_and_load(text, devices, options)
    client = cpu.client
    monkeypatch.setattr(cpu, "client", Watched())
    x = rs.randn(5)
    assert_close(jit_ps(lambda x: np.sin(x) * 3.0)(x), np.sin(x) * 3.0)
    cpu.compile(f"module @m {{ func.func public @main(%a: tensor<2xf64>) -> tensor<2xf64> {{ return %a : tensor<2xf64> }} }}")
    assert seen == [backend.FAST_COMPILE_OVERRIDES + backend.QUICK_COMPILE_OVERRIDES + backend.SCHEDULER_OVERRIDES,
                    backend.SCHEDULER_OVERRIDES]
    # a ladder's last step: the program in use with XLA's own scheduler (backend.XLA_SCHEDULER)
    assert cpu.with_xla_scheduler(None).env_option_overrides == []
    assert cpu.with_xla_scheduler(cpu.fast_compile_options()).env_option_overrides == backend.FAST_COMPILE_OVERRIDES
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_DEFAULT")
    assert cpu.fast_compile_options().env_option_overrides == backend.FAST_COMPILE_OVERRIDES
    assert cpu.with_xla_scheduler(None) is None  # XLA_FLAGS chose: no such step
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_parallel_codegen_split_count=8")  # any override XLA_FLAGS sets
    assert cpu.fast_compile_options().env_option_overrides == backend.FAST_COMPILE_OVERRIDES[:1] + backend.SCHEDULER_OVERRIDES


def test_a_quick_program_is_compiled_optimised_as_its_first_step(monkeypatch):
    """backend.QUICK_STEP's options: the quick program's less QUICK_COMPILE_OVERRIDES; none
    where those are not in them (an optimised program, XLA_FLAGS choosing the level)."""
    cpu = backend.get_backend("cpu")
    fast, quick = backend.FAST_COMPILE_OVERRIDES, backend.QUICK_COMPILE_OVERRIDES
    assert cpu.fast_compile_options(quick=True).env_option_overrides == fast + quick + backend.SCHEDULER_OVERRIDES
    assert cpu.optimized(cpu.fast_compile_options(quick=True)).env_option_overrides == fast + backend.SCHEDULER_OVERRIDES
    assert cpu.optimized(cpu.fast_compile_options()) is None and cpu.optimized(None) is None
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=2")
    assert cpu.fast_compile_options(quick=True).env_option_overrides == fast + backend.SCHEDULER_OVERRIDES
    assert cpu.optimized(cpu.fast_compile_options(quick=True)) is None


def lowered_work(f, *args):
    f(*args)
    (entry,) = f._cache.values()
    return entry, entry.lowered.work


def test_a_first_program_is_compiled_quickly_where_a_call_does_little_work(monkeypatch):
    """Lowering estimates the elements a call computes (context.op_work; a while loop's body
    hlo.WHILE_TRIPS times); at most backend.QUICK_WORK of them, its first program is compiled
    quickly and its ladder starts with backend.QUICK_STEP."""
    x = rs.randn(1000)
    entry, small = lowered_work(jit_ps(lambda x: np.tanh(x) * 2.0), x)
    assert 2000 <= small <= 3100  # tanh, the product (and 2.0 broadcast)
    assert entry.options.env_option_overrides[-2:-1] == backend.QUICK_COMPILE_OVERRIDES
    assert entry.ladder.steps[0] is backend.QUICK_STEP
    monkeypatch.setattr(backend, "QUICK_WORK", 10 * small)
    entry, looped = lowered_work(jit_ps(lambda x: fori_loop(0, 3, lambda i, y: np.tanh(y) * 2.0, x)), x)
    assert looped >= hlo.WHILE_TRIPS * small
    assert entry.options.env_option_overrides == backend.FAST_COMPILE_OVERRIDES + backend.SCHEDULER_OVERRIDES
    assert backend.QUICK_STEP not in entry.ladder.steps
    entry, summed = lowered_work(jit_ps(lambda x: np.sum(x.reshape(10, 100), axis=1)), x)
    assert summed >= 1000  # a reduction reads all its operand
    assert context.REDUCING_OPS | context.INDEXING_OPS | {"stablehlo.convolution"} <= hlo.OPS


# The functions the two programs were measured to compute the same bits of (backend.py's
# FAST_COMPILE_OVERRIDES), on a length where XLA's loops are vectorised, and those an ulp
# or two apart.
SAME_BITS = {
    "exp": np.exp, "tanh": np.tanh, "log1p": lambda x: np.log1p(x * x), "sqrt": lambda x: np.sqrt(np.abs(x)),
    "power": lambda x: np.abs(x) ** 1.7, "sin": np.sin, "arcsinh": np.arcsinh, "erf": sp.erf, "expit": sp.expit,
    "gammaln": lambda x: sp.gammaln(np.abs(x) + 0.5),
    "sum": lambda x: np.sum(x * x), "max": lambda x: np.max(x.reshape(-1, 100), axis=0), "cumsum": np.cumsum,
    "dot": lambda x: np.dot(x.reshape(-1, 100), x[:100]), "where": lambda x: np.where(x > 0, x, 0.1 * np.exp(x)),
    "grad": grad(lambda x: np.sum(np.tanh(x) ** 2 * np.log1p(x * x))),
}
ULPS_APART = {"tan": np.tan, "arctan": np.arctan, "cbrt": np.cbrt,
              # its two sums are one variadic reduction, which the two emitters sum in different orders
              "logsumexp": lambda x: sp.logsumexp(x.reshape(-1, 100), axis=1)}


@pytest.mark.parametrize("dtype", [onp.float64, onp.float32])
@pytest.mark.parametrize("name", sorted(SAME_BITS) + sorted(ULPS_APART))
def test_both_programs_compute_the_same_bits(monkeypatch, name, dtype):
    monkeypatch.setattr(backend, "QUICK_WORK", -1)  # the legacy emitters' optimised program first
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    # the default options' program replaces the first untried, and that one with XLA's own scheduler it
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 0)
    fun = SAME_BITS.get(name) or ULPS_APART[name]
    x = (rs.randn(30000) * 3).astype(dtype)
    f = jit_ps(fun)
    first = f(x)
    entry, results = settle(f, x)
    assert entry.options.env_option_overrides == []
    if name in SAME_BITS:
        onp.testing.assert_array_equal(results[-1], first)
    else:
        onp.testing.assert_allclose(results[-1], first, rtol=4 * onp.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [onp.float64, onp.float32])
@pytest.mark.parametrize("name", sorted(SAME_BITS) + sorted(ULPS_APART))
def test_a_quick_program_computes_its_optimised_programs_results_to_a_few_ulps(monkeypatch, name, dtype):
    """A first program compiled quickly (backend.QUICK_COMPILE_OVERRIDES) has no fused
    multiply-adds, which LLVM forms in its optimised one (XLA:CPU allows them): the results
    of the two differ by a few ulps of their magnitude."""
    monkeypatch.setattr(backend, "QUICK_WORK", 1 << 30)  # quick at any size
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 0)  # each step's program is put in use untried
    fun = SAME_BITS.get(name) or ULPS_APART[name]
    x = (rs.randn(30000) * 3).astype(dtype)
    f = jit_ps(fun)
    quick = f(x)
    (entry,) = f._cache.values()
    assert entry.ladder.steps[0] is backend.QUICK_STEP
    f(x)  # pays the rent: the step's program is compiled, and put in use
    assert tiering.compile_thread.wait(60)
    assert entry.options.env_option_overrides == backend.FAST_COMPILE_OVERRIDES + backend.SCHEDULER_OVERRIDES
    optimised = f(x)
    eps = onp.finfo(dtype).eps
    onp.testing.assert_allclose(quick, optimised, rtol=4 * eps, atol=16 * eps * onp.abs(optimised).max())


# ----- the trial, with executables of set speed ----------------------------------------------
#: The lowerings of two programs of no BLAS product (lowering.Lowered.blas).
LOWERED, LOWERED_2 = types.SimpleNamespace(blas=False), types.SimpleNamespace(blas=False)


class Timed:
    """An executable taking `seconds` a call and returning [name]."""

    def __init__(self, name, seconds, forgotten):
        self.name, self.seconds, self.program = name, seconds, name
        self.backend = types.SimpleNamespace(forget=forgotten.extend)

    def __call__(self, args, keep_on_device):
        time.sleep(self.seconds)
        return [self.name]

    def programs(self):
        return [self.program]


def trial(old_seconds, new_seconds, monkeypatch, step=None):
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 1.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 3)
    monkeypatch.setattr(tiering, "TURN_CALLS", 1)  # the programs alternate, every call timed
    monkeypatch.setattr(tiering, "TURN_SETTLE_SECONDS", 0.0)
    forgotten, settled = [], []
    entry = types.SimpleNamespace(executable=Timed("old", old_seconds, forgotten), lowered=LOWERED, options="fast")
    step = step or (lambda: (Timed("new", new_seconds, forgotten), LOWERED_2, None))
    entry.ladder = tiering.Ladder([step], 0.01, lambda: lambda entry, step: step(), lambda: lambda: settled.append(1))
    ran = []
    for _ in range(40):
        ran += entry.ladder.run(entry, (), False)
        assert tiering.compile_thread.wait(60)
        if entry.ladder is None:
            break
    assert settled == [1]
    return entry, ran, forgotten


def test_a_trial_keeps_the_faster_new_program(monkeypatch):
    entry, ran, forgotten = trial(0.004, 0.0005, monkeypatch)
    assert (entry.executable.name, entry.lowered, entry.options) == ("new", LOWERED_2, None)
    # the rent (old calls until 0.01 s spent: 2 or 3 of 4 ms sleeps), then the trial's turns
    assert forgotten == ["old"] and ran[-6:] == ["old", "new"] * 3 and ran.count("old") >= 1 + 3


def test_a_trial_keeps_the_program_in_use_when_the_new_is_slower(monkeypatch):
    entry, ran, forgotten = trial(0.0005, 0.004, monkeypatch)
    assert (entry.executable.name, entry.lowered, entry.options) == ("old", LOWERED, "fast")
    assert forgotten == ["new"] and ran.count("new") == 3


class FakeClock:
    """time.perf_counter and time.sleep of a clock that moves only when slept on."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class Disturbed(Timed):
    """A Timed executable whose call is `slow` seconds instead where `disturbed(k)` says so
    (k: its calls so far): what other work on the cores does to a call."""

    def __init__(self, name, seconds, forgotten, slow, disturbed):
        super().__init__(name, seconds, forgotten)
        self.slow, self.disturbed, self.calls = slow, disturbed, 0

    def __call__(self, args, keep_on_device):
        self.calls += 1
        time.sleep(self.slow if self.disturbed(self.calls - 1) else self.seconds)
        return [self.name]


def test_a_trial_times_a_turn_s_calls_once_it_has_settled(monkeypatch):
    """Turns of TURN_CALLS timed calls after the trial's settling seconds: the calls soon after
    the other program's (which find that program's state on the cores) are not timed."""
    monkeypatch.setattr(tiering, "TURN_CALLS", 2)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 2)
    forgotten = []
    old = Disturbed("old", 0.001, forgotten, 0.06, lambda k: k == 0)  # its turn's first call outlasts the settling
    entry = types.SimpleNamespace(executable=old, lowered=LOWERED, options="fast")
    new = Timed("new", 0.004, forgotten)
    entry.ladder = tiering.Ladder([lambda: None], 0.0, None, lambda: lambda: None)
    entry.ladder.trial = tiering.Trial((new, LOWERED_2, None), 0.05)
    ran = []
    while entry.ladder.trial is not None:
        ran += entry.ladder.run(entry, (), False)
    settling = len(ran) - 3 - 2  # the new program's calls before its turn had lasted 0.05 s
    assert ran[:3] == ["old"] * 3 and set(ran[3:]) == {"new"} and 2 <= settling <= 0.05 / 0.004 + 1
    assert entry.executable is old and forgotten == ["new"]


def run_trial(old, new):
    """The program kept by a trial of `new` against `old` (TRIAL_CALLS calls each, alternating)."""
    forgotten = []
    old.backend = new.backend = types.SimpleNamespace(forget=forgotten.extend)
    entry = types.SimpleNamespace(executable=old, lowered=LOWERED, options="fast")
    entry.ladder = tiering.Ladder([lambda: None], 0.0, None, lambda: lambda: None)
    entry.ladder.trial = tiering.Trial((new, LOWERED_2, None), 0.0)
    while entry.ladder.trial is not None:
        entry.ladder.run(entry, (), False)
    assert forgotten == [(new if entry.executable is old else old).name]
    return entry.executable.name


def test_a_burst_of_other_work_does_not_decide_a_trial(monkeypatch):
    """A burst slowing both programs' calls while it lasts, most of the one in use's (its
    first 4 of 6) and half of the other's, does not make it lose to a program slower on every
    call (the MLP step's trials, tiering.TRIAL_CALLS; each program's median would)."""
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 6)
    old = Disturbed("old", 0.001, [], 0.021, lambda k: k < 4)
    new = Disturbed("new", 0.004, [], 0.024, lambda k: k < 3)  # the burst ends between old's 4th call and new's
    assert run_trial(old, new) == "old"


def test_a_lucky_call_does_not_decide_a_trial(monkeypatch):
    """A program whose calls stall but for one that is the trial's fastest loses to one
    steadily slower than that call (logistic regression's BLAS matrix-vector product under
    load: calls of 20-33 ms and of 0.31, against XLA's product's 0.37-0.41)."""
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 6)
    old = Timed("old", 0.004, [])
    new = Disturbed("new", 0.001, [], 0.02, lambda k: k != 2)
    assert run_trial(old, new) == "old"
    old = Disturbed("old", 0.001, [], 0.02, lambda k: k != 2)  # the same, the stalling program in use
    assert run_trial(old, Timed("new", 0.004, [])) == "new"


@pytest.mark.parametrize("blas", [(False, False), (True, False), (False, True), (True, True)])
def test_a_trial_waits_for_turns_to_settle_only_beside_blas(monkeypatch, blas):
    """OpenBLAS's threads spin on after their work and slow the other program's calls for a
    while: a trial where one program calls BLAS and the other does not times a turn's calls
    after TURN_SETTLE_SECONDS; any other times them all (waiting kept a tiny function's calls
    on the Python path for most of a second; two programs that both call BLAS, XLA's options
    apart, are slowed alike, and waiting made such a trial of the demo's classifier last 1.07
    s of a 200-step job instead of 0.2)."""
    monkeypatch.setattr(tiering, "TURN_SETTLE_SECONDS", 0.1)
    monkeypatch.setattr(tiering, "TURN_CALLS", 1)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 2)
    forgotten = []
    entry = types.SimpleNamespace(executable=Timed("old", 0.001, forgotten), options="fast",
                                  lowered=types.SimpleNamespace(blas=blas[0]))
    made = (Timed("new", 0.001, forgotten), types.SimpleNamespace(blas=blas[1]), None)
    entry.ladder = ladder = tiering.Ladder([None], 0.0, lambda: lambda entry, step: made, lambda: lambda: None)
    ladder._make(entry)
    mixed = blas[0] != blas[1]
    assert ladder.trial.settle == (0.1 if mixed else 0.0)
    t0, calls = time.perf_counter(), 0
    while ladder.trial is not None:
        ladder.run(entry, (), False)
        calls += 1
    assert (time.perf_counter() - t0 >= 4 * 0.1) == mixed  # four turns, each settling first
    assert calls == 4 or mixed


def test_a_step_that_fails_leaves_the_program_in_use(monkeypatch, caplog):
    def fails():
        raise RuntimeError("XLA said no")
    with caplog.at_level(logging.WARNING, logger="autograd_xla.tiering"):
        entry, ran, forgotten = trial(0.0005, None, monkeypatch, step=fails)
    assert entry.executable.name == "old" and set(ran) == {"old"} and forgotten == []
    assert "XLA said no" in caplog.text and "keeping the one in use" in caplog.text


@pytest.mark.parametrize("cheap", [True, False])
def test_a_cheap_program_climbs_after_a_few_calls_without_the_rent(monkeypatch, cheap):
    """A program running in under CHEAP_CALL_SECONDS a call makes its next one after
    CHEAP_CALLS calls, however long its compile took (its calls stay on the Python path
    until the ladder settles); a dearer one pays the rent first."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 1e9)
    monkeypatch.setattr(tiering, "CHEAP_CALLS", 5)
    monkeypatch.setattr(tiering, "CHEAP_CALL_SECONDS", 1.0 if cheap else 1e-12)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 2)
    f = jit_ps(lambda x: np.sin(x) * 3.0)
    x = rs.randn(4)
    for _ in range(5 + 30):
        assert_close(f(x), onp.sin(x) * 3.0)
        assert tiering.compile_thread.wait(60)
    (entry,) = f._cache.values()
    assert (entry.ladder is None) == cheap and f.cache_info()["upgrades"] == (3 if cheap else 0)


def test_while_a_signature_rents_cpp_takes_its_calls(monkeypatch):
    """A climbing signature's first calls are timed on the Python path (HANDOFF_CALLS); then
    C++ takes them (Ladder.hand), counted down to those that pay the rent (here CHEAP_CALLS),
    and the next step's program is made on the compile thread. The next C++ call hands the
    calls back for the program's trial on the Python path; once the ladder settles C++
    takes them again, with the program kept. Every result is right throughout."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 1e9)
    monkeypatch.setattr(tiering, "CHEAP_CALL_SECONDS", 1.0)  # every call cheap: the next step after CHEAP_CALLS
    monkeypatch.setattr(tiering, "CHEAP_CALLS", 40)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 2)
    f = jit_ps(lambda x: np.cos(x) + 1.0)
    if not dispatch.available():
        pytest.skip("this jaxlib offers no C++ dispatch")
    python, calls = f._call_python, []
    f._call_python = lambda *a, **k: calls.append(1) or python(*a, **k)
    x = rs.randn(3)

    def call(k):
        assert_close(f(x + k), onp.cos(x + k) + 1.0)
    for k in range(tiering.HANDOFF_CALLS + 1):  # compiled, then timed on the Python path
        call(k)
    (entry,) = f._cache.values()
    ladder = entry.ladder
    assert ladder.handed is not None and not ladder._started
    python_calls = len(calls)
    for k in range(100):  # through C++, counted down
        if ladder._started:
            break
        call(k)
    assert ladder._started and 20 <= k <= 40 and len(calls) == python_calls
    assert tiering.compile_thread.wait(60) and ladder.ready is not None
    call(0)  # C++'s call hands the calls back
    assert ladder.trial is not None and ladder.handed is None and len(calls) == python_calls
    for k in range(100):  # the trial, on the Python path
        if entry.ladder is None:
            break
        call(k)
        assert tiering.compile_thread.wait(60)
    assert entry.ladder is None and len(calls) > python_calls
    python_calls = len(calls)
    for k in range(5):
        call(k)
    assert len(calls) <= python_calls + 2  # C++'s first calls of the signature (and of its staged arguments)
    assert f.cache_info()["upgrades"] >= 1


def test_a_ladder_whose_program_cpp_cannot_run_keeps_its_calls_in_python(monkeypatch):
    """A signature whose program needs Python at each call (a large argument read through a
    view) is not handed to C++ while it climbs: its calls go to the Python path at once
    (`_waiting`), not through C++'s lookup and miss."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 1e9)
    f = jit_ps(lambda x: np.cos(x) + 1.0)
    if not dispatch.available():
        pytest.skip("this jaxlib offers no C++ dispatch")
    x = onp.zeros(lowering.LARGE_ARRAY_BYTES // 8 + 1024)[3:]  # misaligned: read through a view
    for _ in range(tiering.HANDOFF_CALLS + 5):
        assert_close(f(x), onp.cos(x) + 1.0)
    (entry,) = f._cache.values()
    assert entry.ladder is not None and entry.ladder.handed is None and f._waiting


def test_where_the_products_run_is_tried_before_xla_s_default_options():
    """A ladder tries lowering's variants (here lowering.XLA_DOTS: a BLAS matrix-vector product
    left to XLA) before XLA's default options (step None): a trial keeps the program whose
    fastest call is faster, and a product's time drowns the difference the options make to
    the loops around it (api.JittedFunction._compile_lowered)."""
    A, x = rs.randn(600, 600), rs.randn(600)
    f = jit_ps(lambda A, x: np.tanh(A @ x) * 2.0)
    assert_close(f(A, x), np.tanh(A @ x) * 2.0)
    (entry,) = f._cache.values()
    assert entry.lowered.blas and entry.options is not None
    steps = entry.ladder.steps
    assert steps.index(lowering.XLA_DOTS) < steps.index(None) < steps.index(backend.XLA_SCHEDULER)


def test_a_call_by_call_trial_runs_until_its_calls_have_taken_trial_seconds(monkeypatch):
    """Past TRIAL_CALLS pairs, a trial whose programs alternate call by call goes on until each
    program's timed calls have taken TRIAL_SECONDS: a burst slowing the new program's first 4
    calls (its calls 1 ms, the old one's 2) makes it lose a trial of 8 pairs, not one of ~40
    (16 or more: the interquartile mean drops the burst's)."""
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 8)
    monkeypatch.setattr(tiering, "TRIAL_MAX_CALLS", 400)
    clock = FakeClock()  # the calls' seconds exactly, whatever else runs on the machine
    monkeypatch.setattr(tiering, "time", clock)
    monkeypatch.setattr(time, "sleep", clock.sleep)
    for seconds, kept, pairs in ((0.0, "old", (8, 8)), (0.06, "new", (16, 44))):
        monkeypatch.setattr(tiering, "TRIAL_SECONDS", seconds)
        old = Timed("old", 0.002, [])
        new = Disturbed("new", 0.001, [], 0.005, lambda k: k < 4)
        assert run_trial(old, new) == kept and pairs[0] <= new.calls <= pairs[1]


def test_a_trial_is_cut_at_trial_max_calls_and_one_of_turns_at_trial_calls(monkeypatch):
    """A cheap program's trial ends after TRIAL_MAX_CALLS pairs whatever TRIAL_SECONDS says (its
    calls take the Python path meanwhile); a trial of turns that settle first (beside BLAS)
    after TRIAL_CALLS timed calls each, its waits making a longer one last seconds."""
    monkeypatch.setattr(tiering, "TRIAL_SECONDS", 60.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 2)
    monkeypatch.setattr(tiering, "TRIAL_MAX_CALLS", 5)
    new = Disturbed("new", 0.0, [], 0.0, lambda k: False)
    run_trial(Timed("old", 0.0, []), new)
    assert new.calls == 5
    monkeypatch.setattr(tiering, "TURN_CALLS", 1)
    entry = types.SimpleNamespace(executable=Timed("old", 0.0, []), lowered=LOWERED, options="fast")
    entry.executable.backend = types.SimpleNamespace(forget=lambda programs: None)
    entry.ladder = tiering.Ladder([lambda: None], 0.0, None, lambda: lambda: None)
    entry.ladder.trial = trial = tiering.Trial((Timed("new", 0.0, []), LOWERED_2, None), 0.001)
    while entry.ladder.trial is not None:
        entry.ladder.run(entry, (), False)
    assert [len(t) for t in trial.times] == [2, 2]


def test_a_call_by_call_trial_s_turns_begin_with_untimed_calls(monkeypatch):
    """With TURN_WARM_CALLS, each turn's first calls run untimed (they follow the other program's
    call): a program whose call after the other's is slow, and fast after its own, is kept."""
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 4)
    monkeypatch.setattr(tiering, "TURN_WARM_CALLS", 1)
    ran = []

    class AfterItself(Timed):
        def __call__(self, args, keep_on_device):  # slow after the other program's call
            time.sleep(self.seconds if ran and ran[-1] == self.name else 0.02)
            ran.append(self.name)
            return [self.name]

    assert run_trial(AfterItself("old", 0.004, []), AfterItself("new", 0.001, [])) == "new"
    assert ran == ["old", "old", "new", "new"] * 4


def test_accelerators_compile_with_the_options_jax_jit_compiles_with():
    """Off the CPU a program compiles with what jax.jit sets where XLA's defaults differ
    (backend.ACCELERATOR_BUILD_OPTIONS: memory fitting at effort O2, the SPMD partitioner, no
    profile), kept by a ladder step's options (backend._without); the CPU's stay XLA's."""
    options = backend.Backend._options(types.SimpleNamespace(platform="tpu"))
    build = options.executable_build_options
    assert (build.memory_fitting_level, build.use_spmd_partitioning, build.use_shardy_partitioner,
            options.profile_version, list(options.env_option_overrides)) == (29, True, True, -1, [])
    options.env_option_overrides = backend.FAST_COMPILE_OVERRIDES
    less = backend._without(options, backend.FAST_COMPILE_OVERRIDES[:1])
    assert less.env_option_overrides == backend.FAST_COMPILE_OVERRIDES[1:]
    assert (less.executable_build_options.memory_fitting_level, less.profile_version) == (29, -1)
    cpu = backend.get_backend("cpu")._options().executable_build_options
    assert (cpu.memory_fitting_level, cpu.use_spmd_partitioning) == (0, False)
