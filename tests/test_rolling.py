"""Loop rolling (rolling.py): a Python loop unrolled by tracing is compiled as a scan over
its repeated body, and the rolled program's results are plain autograd's."""
import autograd.numpy as np
import numpy as onp
import pytest
from autograd import grad, hessian

from autograd.scipy.special import logsumexp

from autograd_xla import jit_ps, rolling, tree
from autograd_xla.compositions import rolled_vjps
from autograd_xla.control_flow.scans import scan_p
from autograd_xla.core import UfuncMethod, Var, map_vars

from helpers import NARROW, assert_close

RNG = onp.random.RandomState(0)
W = RNG.randn(4, 4) * 0.5
X0 = RNG.randn(4)
XS = RNG.randn(40, 4)


@pytest.fixture(autouse=True)
def backward_passes_as_traced(monkeypatch):
    """Here autograd's backward pass is traced node by node and rolled as it was traced
    (test_rolled_vjps.py: made from the rolled forward pass instead)."""
    monkeypatch.setattr(rolled_vjps, "ENABLED", False)


def scans(graph):
    """The rolled scans of a graph, outermost first, with those inside their bodies."""
    found = []
    for eqn in graph.eqns:
        params = eqn.args[0] if eqn.args else None
        if getattr(params, "rolled", False):
            found.append(params)
            found += scans(params.graphs[0])
    return found


def size(graph):
    """Equations of a graph, those of its loops' bodies included."""
    return len(graph.eqns) + sum(size(g) for e in graph.eqns for g in getattr(e.prim, "subgraphs", lambda e: ())(e))


def check_rolled(f, *args, argnums=0, rolled=True):
    """jit_ps(grad(f)) equals grad(f) (float64, 1e-12), and is rolled (or not); so does it
    with its VJP made from the rolled forward pass (compositions/rolled_vjps.py)."""
    static = tuple(i for i, a in enumerate(args) if isinstance(a, int))
    g = jit_ps(grad(f, argnums), static_argnums=static)
    want = grad(f, argnums)(*args)
    assert_close(g(*args), want)
    graph = g.graph(*args)
    assert bool(scans(graph)) == rolled, str(graph)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rolled_vjps, "ENABLED", True)
        assert_close(jit_ps(grad(f, argnums), static_argnums=static, tiered=False)(*args), want)
    return graph


# ----- what rolls ----------------------------------------------------------------------------
def euler(w, x, n):
    for _ in range(n):
        x = x + 0.1 * np.tanh(np.dot(w, x))
    return np.sum(x ** 2)


def test_an_euler_loop_rolls_forward_and_backward_and_its_program_does_not_grow():
    graphs = [check_rolled(euler, W, X0, n) for n in (30, 60)]
    assert [len(scans(g)) for g in graphs] == [2, 2]  # the forward pass and the backward pass
    assert [p.length for p in scans(graphs[1])] == [60, 60]  # (the backward's first and last steps absorbed)
    assert scans(graphs[1])[1].reverse  # the backward pass reads the forward's values backwards
    assert size(graphs[0]) == size(graphs[1])
    assert "stablehlo.while" in jit_ps(grad(euler), static_argnums=2).stablehlo(W, X0, 60)


def test_the_switch_turns_rolling_off():
    g = jit_ps(grad(euler), static_argnums=2, roll_loops=False)
    assert not scans(g.graph(W, X0, 30)) and len(g.graph(W, X0, 30).eqns) > 200
    assert_close(g(W, X0, 30), grad(euler)(W, X0, 30))


def lstm(params, xs):
    h = np.zeros(params["W"].shape[0])
    c = np.zeros_like(h)
    loss = 0.0
    for t in range(xs.shape[0]):
        z = np.concatenate([xs[t], h])                      # a slice x[t] with a static t
        f = 0.5 * (np.tanh(np.dot(params["W"], z) + params["b"]) + 1.0)
        g = np.tanh(np.dot(params["U"], z))
        c = f * c + (1.0 - f) * g
        h = np.tanh(c)
        loss = loss + np.sum(h * params["v"]) ** 2
    return loss


def test_an_lstm_with_dict_parameters_rolls():
    params = {"W": RNG.randn(3, 7), "b": RNG.randn(3), "U": RNG.randn(3, 7), "v": RNG.randn(3)}
    short, long_ = (check_rolled(lstm, params, RNG.randn(t, 4)) for t in (12, 24))
    assert size(short) == size(long_)
    assert [p.length for p in scans(long_)][0] == 24  # the forward pass, its first step too


def test_per_step_constants_become_inputs():
    """A loop index baked in as a number (t * dt) and a static slice (xs[t]) differ between
    steps: they are the scan's per-step inputs."""
    def f(w, x, xs):
        for t in range(xs.shape[0]):
            x = x + 0.05 * np.sin(t * 0.1) * np.tanh(np.dot(w, x)) + 0.01 * xs[t]
        return np.sum(x ** 2)

    graph = check_rolled(f, W, X0, XS)
    stacked = [a for e in graph.eqns if e.prim is scan_p for a in e.args if isinstance(a, onp.ndarray)]
    assert any(a.dtype == onp.int64 and list(a) == sorted(a) and len(set(a)) > 30 for a in stacked)
    check_rolled(f, W, X0, XS, argnums=2)  # the gradient with respect to xs: xs[t]'s adjoint per step


def test_a_loop_over_the_rows_of_a_closed_over_dataset_rolls():
    """`for x in data` over a constant the function closes over, each row concatenated with
    the state as autograd's lstm and rnn examples do: each step reads a row of thousands of
    elements, a per-step input."""
    def model(data):
        def f(params, h):
            w, u = params
            for x in data:
                h = np.tanh(np.dot(np.concatenate((x, h), axis=1), np.concatenate((w, u))))
            return np.sum(h ** 2)
        return f

    params = (RNG.randn(64, 4) * 0.1, RNG.randn(4, 4) * 0.5)
    short, long_ = (check_rolled(model(RNG.randn(t, 40, 64)), params, onp.zeros((40, 4))) for t in (15, 30))
    assert size(short) == size(long_)


def test_early_break_on_a_static_condition():
    def f(w, x, n):
        for t in range(100):
            if t >= n:
                break
            x = np.tanh(np.dot(w, x) + 0.1 * t)
        return np.sum(x)

    check_rolled(f, W, X0, 25)


def test_a_step_that_differs_is_left_unrolled():
    def f(w, x):
        for t in range(30):
            x = np.tanh(np.dot(w, x))
            if t == 17:
                x = x * 2.0 + 1.0
        return np.sum(x ** 2)

    graph = check_rolled(f, W, X0)
    assert len([p for p in scans(graph) if not p.reverse]) == 2  # steps 0-16 and 18-29


def test_a_rule_that_needs_the_constant_keeps_those_steps_unrolled():
    def f(x):
        for t in range(20):
            x = np.roll(x, t) * 1.1 + np.sin(x)
        return np.sum(x ** 2)

    g = jit_ps(grad(f))
    assert_close(g(X0), grad(f)(X0))


def test_nested_loops_roll_at_each_level():
    ws = RNG.randn(5, 4, 4) * 0.4

    def f(ws, x, xs):
        for layer in range(ws.shape[0]):
            h = x
            for t in range(xs.shape[0]):
                h = np.tanh(np.dot(ws[layer], h) + xs[t])
            x = h
        return np.sum(x ** 2)

    graphs = [check_rolled(f, ws, X0, XS[:n]) for n in (12, 24)]
    assert size(graphs[0]) == size(graphs[1])
    assert max(len(scans(g)) for g in graphs) >= 3


def test_second_order_derivatives_through_a_rolled_loop():
    def f(x):
        for _ in range(20):
            x = x + 0.1 * np.sin(np.dot(W, x))
        return np.sum(x ** 3)

    def hvp(x, v):
        return np.dot(grad(f)(x), v)

    check_rolled(hvp, X0, XS[0])  # the Hessian times a vector: grad of grad
    h = jit_ps(hessian(f))  # (autograd's hessian vmaps; the loops inside a vmapped graph stay unrolled)
    assert_close(h(X0), hessian(f)(X0))


def test_float32_stays_float32():
    w, x = W.astype(onp.float32), X0.astype(onp.float32)
    g = jit_ps(grad(euler), static_argnums=2)
    got, want = g(w, x, 30), grad(euler)(w, x, 30)
    assert got.dtype == want.dtype == onp.float32
    assert_close(got, want)
    assert scans(g.graph(w, x, 30))


# ----- the first and last steps of a loop: the same operations as plain autograd -------------
def interpret(graph, args):
    """`graph`'s results computed by numpy: each equation's primitive (the function plain
    autograd calls) on numpy values, a rolled scan as a Python loop over its body. Equal to
    plain autograd's results bit for bit where the program makes the same calls on the same
    values in the same order (XLA's own tanh, exp and dot round differently from numpy's, so
    the compiled program is compared within tolerances)."""
    return tree.unflatten(graph.out_tree, _interpret(graph, tree.flatten(args)[0], []))


def _interpret(graph, invals, captured):
    env = dict(zip(graph.invars, invals))
    env.update((inner, v) for (inner, _), v in zip(graph.captured, captured))
    for eqn in graph.eqns:
        if eqn.prim is scan_p:
            out = _interpret_scan(eqn.args[0], map_vars(list(eqn.args[1:]), env.__getitem__))
        else:
            args, kwargs = map_vars((eqn.args, eqn.kwargs), env.__getitem__)
            if type(eqn.prim) is UfuncMethod and eqn.prim.method == "at":  # (functional: a copy updated)
                out = onp.array(args[0])
                eqn.prim(out, *args[1:], **kwargs)
            else:
                out = eqn.prim(*args, **kwargs)
        for v, x in zip(eqn.outvars, tree.flatten(out)[0]):
            if v is not None:
                env[v] = x
    return [env[v] if isinstance(v, Var) else v for v in graph.outvars]


def _interpret_scan(params, operands):
    carry, rest = operands[:params.n_carry], operands[params.n_carry:]
    xs, captured = rest[:params.n_xs], rest[params.n_xs:]
    ys = None
    for i in (reversed if params.reverse else iter)(range(params.length)):
        out = _interpret(params.graphs[0], [i] + carry + [x[i] for x in xs], captured)
        carry, y = out[:params.n_carry], out[params.n_carry:]
        if ys is None:
            ys = [onp.empty((params.length,) + onp.shape(v), onp.asarray(v).dtype) for v in y]
        for buf, v in zip(ys, y):
            buf[i] = v
    return carry + (ys or [])


def hmm(params, obs):
    log_alpha = params["log_pi"] + obs[0]
    for t in range(1, obs.shape[0]):
        log_alpha = logsumexp(log_alpha[:, None] + params["log_A"], axis=0) + obs[t]
    return logsumexp(log_alpha)


def mlp(params, x):
    for layer in range(params["W"].shape[0]):
        x = np.tanh(np.dot(x, params["W"][layer]) + params["b"][layer])
    return np.sum(x ** 2)


LOOPS = {  # loop, its arguments
    "euler": (euler, lambda: (W, X0, 40)),
    "lstm": (lstm, lambda: ({"W": RNG.randn(3, 7), "b": RNG.randn(3), "U": RNG.randn(3, 7), "v": RNG.randn(3)},
                            RNG.randn(16, 4))),
    "hmm": (hmm, lambda: ({"log_A": onp.log(RNG.dirichlet(onp.ones(5), 5)), "log_pi": onp.log(RNG.dirichlet(onp.ones(5)))},
                          RNG.randn(30, 5))),
    "mlp": (mlp, lambda: ({"W": RNG.randn(12, 6, 6) * 0.4, "b": RNG.randn(12, 6) * 0.1}, RNG.randn(5, 6))),
}


def _cast(args, dtype):
    return tree.unflatten(tree.flatten(args)[1], [a.astype(dtype) if isinstance(a, onp.ndarray) else a
                                                  for a in tree.flatten(args)[0]])


#: The compiled loops' tolerance on a 32-bit platform (NARROW): a chip's float32 tanh and cosh are
#: not numpy's, and a recurrence carries their rounding on. Measured on the CPU: the 16-step
#: LSTM's gradient moves by up to 15x (median 1.3x, 30 draws) a relative error given to every
#: tanh and its derivative, of the gradient's scale; on a TPU v5e its float32 gradient came
#: 1.6e-4 of that scale from numpy's (TOL_32 is 1e-4), the float64 one within TOL_32.
RECURRENCE_RTOL_32 = 1e-3


@pytest.mark.parametrize("dtype", [onp.float64, onp.float32])
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_absorbed_first_and_last_steps_compute_plain_autograds_gradient_bit_for_bit(monkeypatch, name, dtype):
    """The backward pass's first step (no gradient accumulated yet) and last step (without
    what nothing reads) become steps of the loop: the rolled program makes plain autograd's
    calls on plain autograd's values (its numpy run equals autograd's gradient bit for bit,
    and the unrolled program's), has fewer equations outside loops, and compiles to
    autograd's gradient within the suite's tolerance."""
    f, make = LOOPS[name]
    args = _cast(make(), dtype)
    static = tuple(i for i, a in enumerate(args) if isinstance(a, int))
    want = grad(f)(*args)
    rolled = jit_ps(grad(f), static_argnums=static)
    graph = rolled.graph(*args)
    unrolled = jit_ps(grad(f), static_argnums=static, roll_loops=False).graph(*args)
    got, plain_trace = interpret(graph, args), interpret(unrolled, args)
    for a, b in zip(tree.flatten(got)[0], tree.flatten(plain_trace)[0]):
        onp.testing.assert_array_equal(a, b, strict=True)
    if not (name == "hmm" and dtype == onp.float32):  # (the trace's float32 logsumexp gradient
        for a, b in zip(tree.flatten(got)[0], tree.flatten(want)[0]):  # keeps float32 where numpy
            onp.testing.assert_array_equal(a, b, strict=True)         # divides by an int64 count)
    assert_close(rolled(*args), want, rtol=RECURRENCE_RTOL_32 if NARROW else None)
    monkeypatch.setattr(rolling, "ABSORB_ENDS", False)
    before = jit_ps(grad(f), static_argnums=static).graph(*args)
    assert len(graph.eqns) < len(before.eqns)
    forward = max(p.length for p in scans(graph) if not p.reverse)
    assert [p.length for p in scans(graph) if p.reverse] == [forward]  # every backward step


def elementwise(w, x, c):
    for _ in range(30):
        x = x + 0.5 * (w * x)
    return np.sum(x * c)


def computed_as_the_platform(f, *args):
    """Plain f(*args) in the precision the suite's platform computes them in: float64 arrays
    in float32 on a 32-bit platform (NARROW), the result handed back as float64 (as jit_ps
    does there); elsewhere plain f(*args). Correctly rounded float32 arithmetic gives numpy's
    float32 bits."""
    if not NARROW or not any(a.dtype == onp.float64 for a in args):
        return f(*args)
    return onp.asarray(f(*[a.astype(onp.float32) if a.dtype == onp.float64 else a for a in args])).astype(onp.float64)


@pytest.mark.parametrize("dtype", [onp.float64, onp.float32])
def test_signed_zeros_infinities_and_nans_through_an_absorbed_first_step(dtype):
    """The first step's missing add(acc, g) is add(-0.0, g): exactly g for g = -0.0 too (where
    +0.0 + -0.0 would be +0.0), inf and NaN. A loop of correctly rounded operations only, so
    the compiled program, too, equals plain autograd bit for bit."""
    w = onp.array([0.5, 1.0, -0.25, 2.0, 0.0, -0.0, onp.inf, 0.3], dtype)
    x = onp.array([1.0, -0.0, 0.0, onp.inf, 2.0, -1.0, 1.0, onp.nan], dtype)
    c = onp.array([-0.0, 1.0, -0.0, 1.0, -1.0, 0.0, 1.0, 1.0], dtype)
    for argnum in (0, 1):
        want = grad(elementwise, argnum)(w, x, c)
        g = jit_ps(grad(elementwise, argnum))
        graph = g.graph(w, x, c)
        assert [p.length for p in scans(graph)] == [30] * (2 - argnum)  # (every backward step; the
        # gradient with respect to x of this linear loop needs no forward pass)
        for got, expected in ((g(w, x, c), computed_as_the_platform(grad(elementwise, argnum), w, x, c)),
                              (interpret(graph, (w, x, c)), want)):
            onp.testing.assert_array_equal(got, expected, strict=True)
            onp.testing.assert_array_equal(onp.signbit(got), onp.signbit(expected))
    assert onp.signbit(want[0]) and onp.signbit(grad(elementwise)(w, x, c)[0])  # (a -0.0 to keep)


# ----- finding runs --------------------------------------------------------------------------
@pytest.mark.parametrize("tokens, runs", [
    ([9] + [1, 2, 3] * 5 + [7], [(1, 3, 5)]),
    ([1, 2, 3] * 3, []),                                  # too few repetitions
    ([5, 5, 1, 1, 1, 1, 1, 1], [(2, 1, 6)]),
    ([1, 2, 1, 3] * 4, [(0, 4, 4)]),                       # a token twice in the body
    ([1, 2] * 4 + [3, 4, 5] * 4, [(0, 2, 4), (8, 3, 4)]),
])
def test_find_runs(monkeypatch, tokens, runs):
    monkeypatch.setattr(rolling, "MIN_EQNS", 4)
    assert rolling.find_runs(tokens) == runs


def _runs_by_comparison(tokens):
    """find_runs' definition with blocks compared element by element (no hashes)."""
    n, runs, i = len(tokens), [], 0
    while i < n:
        found, j = None, i
        for _ in range(rolling.CANDIDATES):
            j = next((m for m in range(j + 1, n) if tokens[m] == tokens[i]), n)
            p = j - i
            if j >= n or i + max(rolling.MIN_REPS * p, rolling.MIN_EQNS) > n:
                break
            k = 1
            while i + (k + 1) * p <= n and tokens[i + k * p:i + (k + 1) * p] == tokens[i:i + p]:
                k += 1
            if k >= rolling.MIN_REPS and k * p >= rolling.MIN_EQNS:
                found = (i, p, k)
                break
        if found is None:
            i += 1
        else:
            runs.append(found)
            i += found[1] * found[2]
    return runs


@pytest.mark.parametrize("seed", range(4))
def test_find_runs_equals_comparing_blocks(monkeypatch, seed):
    """Runs found through block hashes are those comparing the blocks finds, on token lists of
    repeated bodies and noise, token values past 2**31 (the hash's modulus) included."""
    monkeypatch.setattr(rolling, "MIN_EQNS", 8)
    rng = onp.random.RandomState(seed)
    for _ in range(40):
        body = list(rng.randint(0, 6, rng.randint(1, 12)))
        tokens = []
        while len(tokens) < 400:
            tokens += body * rng.randint(1, 9) if rng.rand() < 0.5 else list(rng.randint(0, 9, rng.randint(1, 10)))
        tokens = [int(t) + (2**31 - 3 if seed % 2 else 0) for t in tokens]
        assert rolling.find_runs(tokens) == _runs_by_comparison(tokens)


def test_a_large_program_rolling_cannot_shorten_warns_naming_the_loop(monkeypatch):
    import autograd_xla.api as api
    monkeypatch.setattr(api, "LARGE_PROGRAM_WARN_AFTER", 50)

    def f(x):
        for t in range(30):
            x = np.roll(x, t) * 1.1  # np.roll's shift must be a constant: its steps stay unrolled
        return np.sum(x)

    line = f.__code__.co_firstlineno + 2
    with pytest.warns(UserWarning, match=rf"traced to a program of .* from {__file__}:{line}.*autograd_xla\.scan"):
        assert_close(jit_ps(f)(X0), f(X0))


def test_hmm_em_recursion_over_sequences_of_different_lengths():
    """autograd's hmm_em example: a sum over sequences of different lengths, each a loop over
    its traced integer observations (`log_B[:, y]` with a traced y): one loop per sequence,
    forward and backward, the list's gradients equal plain autograd's."""
    from autograd import value_and_grad
    from autograd.scipy.special import logsumexp

    def log_partition_function(natural_params, data):
        if isinstance(data, list):
            return sum(map(lambda seq: log_partition_function(natural_params, seq), data))
        log_pi, log_A, log_B = natural_params
        log_alpha = log_pi
        for y in data:
            log_alpha = logsumexp(log_alpha[:, None] + log_A, axis=0) + log_B[:, y]
        return logsumexp(log_alpha)

    params = [onp.log(RNG.dirichlet(onp.ones(5))), onp.log(RNG.dirichlet(onp.ones(5), 5)),
              onp.log(RNG.dirichlet(onp.ones(7), 5))]
    data = [RNG.randint(0, 7, size=n) for n in (9, 14, 11)]
    g = jit_ps(value_and_grad(log_partition_function))
    got, want = g(params, data), value_and_grad(log_partition_function)(params, data)
    assert_close(got[0], want[0])
    for a, b in zip(got[1], want[1]):
        assert_close(a, b)
    lengths = sorted(p.length for p in scans(g.graph(params, data)) if not p.reverse)
    assert lengths == [9, 11, 14]


def test_dict_parameter_gradients_are_summed_in_plain_autograds_order():
    """Each step's `params["W"]` is a node of its own to autograd, whose per-step gradients
    reach the parameter after the backward pass, summed in time-step order (0, 1, ...): the
    opposite of the backward loop's order, which makes them last step first. Floating-point
    addition does not reassociate exactly, so the sum stays a forward loop of its own over the
    backward loop's stacked gradients (adding each in the backward loop would round
    differently from plain autograd)."""
    def f(params, x):
        for _ in range(60):
            x = x + 0.1 * np.tanh(np.dot(params["W"], x))
        return np.sum(x ** 2)

    graph = check_rolled(f, {"W": W}, X0)
    forward, backward, total = [e for e in graph.eqns if e.prim is scan_p]
    assert backward.args[0].reverse and not total.args[0].reverse
    assert backward.args[0].length == 60  # (the backward pass's first and last steps absorbed)
    assert total.args[0].length == 59  # the first step's gradient starts the sum (tracing.accumulate)
    stacked, made = backward.outvars[-1], {v: e for e in graph.eqns for v in e.outvars}
    reads = [a for a in total.args if type(a) is Var]  # the stacked gradients
    assert any(a is stacked or (a in made and any(x is stacked for x in made[a].invars())) for a in reads)
