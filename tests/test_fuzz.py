"""Differential fuzzing: random programs of supported primitives on random shapes
(broadcasting, 0-d, size-1 and empty included) and dtypes, compiled with jit_ps and compared
with plain autograd in value and in gradient (jit_ps(grad(f)) and grad(jit_ps(f))).

The default budget is small and fixed (derandomized, no example database), so CI runs the
same programs every time in well under a minute. Raise it on demand:

    AUTOGRAD_XLA_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py        # more programs
    AUTOGRAD_XLA_FUZZ_SEED=7 AUTOGRAD_XLA_FUZZ_EXAMPLES=500 pytest ... # other programs

A failure prints the program as Python source, with its inputs' shapes and dtypes. The same
programs also run through the numpy tier (a held signature's calls run by numpy), which must
give plain autograd's results bit for bit.
"""
import os
import warnings

import numpy as onp
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import autograd.numpy as np
import autograd.scipy.special as sps
from autograd import grad
from autograd_xla import jit_ps, numpy_tier, tiering
from helpers import assert_close

EXAMPLES = int(os.environ.get("AUTOGRAD_XLA_FUZZ_EXAMPLES", "100"))
SEED = os.environ.get("AUTOGRAD_XLA_FUZZ_SEED")
MAX_OPS = 7

# Each template is Python source over operands {0}, {1}; every result is a smooth function of
# its inputs away from measure-zero sets, so random inputs never meet a kink.
UNARY = {
    "tanh": "np.tanh({0})", "sin": "np.sin({0})", "cos": "np.cos({0})", "exp_tanh": "np.exp(np.tanh({0}))",
    "log1p_sq": "np.log1p({0} ** 2)", "sqrt": "np.sqrt({0} ** 2 + 1.0)", "square": "{0} ** 2", "neg": "-{0}",
    "ratio": "{0} / (1.0 + {0} ** 2)", "scale": "{0} * 2.5", "shift": "({0} + 1)", "rsub": "(0.5 - {0})",
    "sigmoid": "1.0 / (1.0 + np.exp(-{0}))", "softplus": "np.logaddexp(0.0, {0})", "arctan": "np.arctan({0})",
    "abs": "np.abs({0})", "sinh_tanh": "np.sinh(np.tanh({0}))", "expm1_tanh": "np.expm1(np.tanh({0}))",
    "cube": "{0} ** 3", "clip": "np.clip({0}, -0.7, 0.9)", "where_pos": "np.where({0} > 0.1, {0}, -{0} * 0.5)",
    "square_f32": "{0} * np.float32(1.5)", "square_f64": "{0} * np.float64(0.75)",
    "transpose": "np.transpose({0})", "ravel": "np.ravel({0})", "expand": "np.expand_dims({0}, 0)",
    "reverse": "{0}[::-1]", "tail": "{0}[1:]", "first": "{0}[0]", "last_col": "{0}[..., -1:]",
    "sum": "np.sum({0})", "sum0": "np.sum({0}, axis=0)", "sum_last_keep": "np.sum({0}, axis=-1, keepdims=True)",
    "mean0": "np.mean({0}, axis=0)", "max_last": "np.max({0}, axis=-1)", "prod_tanh": "np.prod(np.tanh({0}))",
    "logsumexp": "sps.logsumexp({0})", "cumsum0": "np.cumsum({0}, axis=0)", "var": "np.var({0})",
    "stack_self": "np.stack([{0}, 2.0 * {0}])", "concat_self": "np.concatenate([{0}, {0} * 0.5])",
    "astype32": "{0}.astype(np.float32)", "swap": "np.swapaxes({0}, 0, -1)", "T_matmul": "{0}.T @ {0}",
    "sort": "np.sort({0}, axis=-1)", "flip": "np.flip({0}, 0)", "tile": "np.tile({0}, 2)",
    "repeat": "np.repeat({0}, 2, axis=0)", "column": "np.reshape({0}, (-1, 1))", "squeeze": "np.squeeze({0})",
    "take": "{0}[np.array([0, 0, -1])]", "max": "np.max({0})", "std": "np.std({0})",
    "mean_keep": "np.mean({0}, axis=-1, keepdims=True)", "softmax": "np.exp({0} - sps.logsumexp({0}))",
    "inv": "np.linalg.inv({0} + 3.0 * np.eye(np.shape({0})[-1]))", "det": "np.linalg.det({0})",
    "diag": "np.diag({0})", "triu": "np.triu({0})", "trace": "np.trace({0})", "pad": "np.pad({0}, 1)",
    "clip_tie_max": "np.max(np.clip({0}, -0.5, 0.5))", "norm": "np.linalg.norm({0})",
}
BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / (1.0 + {1} ** 2)",
    "maximum": "np.maximum({0}, {1})", "minimum": "np.minimum({0}, {1})",
    "where": "np.where({0} > {1}, {0}, {1} * 0.5)", "logaddexp": "np.logaddexp({0}, {1})",
    "arctan2": "np.arctan2({0}, {1} ** 2 + 1.0)", "hypot": "np.hypot({0}, {1})",
    "dot": "np.dot({0}, {1})", "matmul": "{0} @ {1}", "outer": "np.outer({0}, {1})",
    "concat": "np.concatenate([{0}, {1}])", "stack": "np.stack([{0}, {1}])", "inner": "np.inner({0}, {1})",
    "einsum": "np.einsum('...i,...i->...', {0}, {1})", "tensordot": "np.tensordot({0}, {1}, axes=1)",
}

# Programs a translation rule is known to get wrong, by op name -> predicate on its operand:
# not generated while the rule is being fixed (each such divergence also gets a test in
# FOUND). Empty: everything the fuzzer found so far is fixed.
NOT_YET = {}

DIMS = st.sampled_from([0, 1, 1, 2, 3, 3])


@st.composite
def shapes(draw, base=None):
    """A shape, or one that broadcasts against `base` (dims dropped from the front or set to 1)."""
    if base is None:
        return tuple(draw(st.lists(DIMS, min_size=0, max_size=3)))
    keep = draw(st.integers(0, len(base)))
    return tuple(1 if draw(st.booleans()) and draw(st.booleans()) else d for d in base[len(base) - keep:])


@st.composite
def programs(draw):
    n_in = draw(st.integers(1, 3))
    base = draw(shapes())
    in_shapes = [base] + [draw(st.one_of(shapes(base), shapes())) for _ in range(n_in - 1)]
    dtypes = [draw(st.sampled_from([onp.float64, onp.float64, onp.float32, float])) for _ in range(n_in)]
    rng = onp.random.RandomState(draw(st.integers(0, 2 ** 16)))
    inputs = [float(rng.uniform(-1.5, 1.5)) if d is float else rng.uniform(-1.5, 1.5, size=s).astype(d)
              for s, d in zip(in_shapes, dtypes)]  # float: a Python scalar argument (weakly typed)
    env = {f"x{i}": v for i, v in enumerate(inputs)}
    lines = []
    scope = {"np": onp, "sps": _SPS_ON_NUMPY}
    for _ in range(draw(st.integers(1, MAX_OPS))):
        names = list(env)
        if draw(st.booleans()):
            op = draw(st.sampled_from(sorted(UNARY)))
            template = UNARY[op]
            operands = [draw(st.sampled_from(names))]
            if op in NOT_YET and NOT_YET[op](env[operands[0]]):
                continue
        else:
            template = BINARY[draw(st.sampled_from(sorted(BINARY)))]
            operands = [draw(st.sampled_from(names)), draw(st.sampled_from(names))]
        expr = template.format(*operands)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                value = eval(expr, scope, dict(env))          # valid for numpy? (shapes, finiteness)
        except Exception:
            continue
        value = onp.asarray(value)
        if value.dtype.kind != "f" or value.size > 4096 or not onp.all(onp.isfinite(value)) \
                or (value.size and onp.max(onp.abs(value)) > 1e4):
            continue
        name = f"v{len(lines)}"
        env[name] = value
        lines.append(f"    {name} = {expr}")
    outs = [n for n in env if n.startswith("v")][-2:] or ["x0"]
    n_out = draw(st.integers(1, len(outs)))
    ret = outs[-1] if n_out == 1 else f"({', '.join(outs[-n_out:])})"
    args = ", ".join(f"x{i}" for i in range(n_in))
    source = f"def program({args}):\n" + "\n".join(lines + [f"    return {ret}"]) + "\n"
    return source, inputs


class _SpsOnNumpy:
    """scipy.special for the validity check, which runs on numpy arrays."""

    @staticmethod
    def logsumexp(x, **kwargs):
        import scipy.special
        return scipy.special.logsumexp(x, **kwargs)


_SPS_ON_NUMPY = _SpsOnNumpy()


def build(source):
    scope = {"np": np, "sps": sps}
    exec(compile(source, "<fuzz program>", "exec"), scope)
    return scope["program"]


def tolerance(source, inputs):
    # float32 anywhere (an input, a cast, a float32 constant) makes the values and gradients
    # only float32-accurate: XLA's and numpy's float32 transcendental functions differ by a
    # few ulps each, compounded along the chain; in float64 likewise a few ulps, chained
    f32 = "float32" in source or any(onp.asarray(x).dtype == onp.float32 for x in inputs)
    return 2e-4 if f32 else 1e-10


def scalarized(f):
    def s(*xs):
        out = f(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        total = 0.0
        for k, o in enumerate(outs):
            w = onp.random.RandomState(k).uniform(0.5, 1.5, size=np.shape(o))
            total = total + np.sum(o * w)
        return total
    return s


def gradient_atol(s, inputs):
    """The scale a gradient's rounding is relative to: the program's (scalarized) value and
    inputs, at least 1. A gradient whose terms cancel (d/dx of sum(softmax([x, x])), 0 in
    exact arithmetic) is rounding residue on both sides: plain autograd 2.2e-16, XLA 0."""
    try:
        scale = max([abs(float(s(*inputs)))] + [float(onp.max(onp.abs(x), initial=0.0)) for x in inputs])
    except Exception:
        return None
    return max(scale, 1.0) if onp.isfinite(scale) else None


def describe(source, inputs):
    args = ", ".join(f"x{i}: " + (f"{x.dtype}{list(x.shape)}" if isinstance(x, onp.ndarray) else f"Python {x!r}")
                     for i, x in enumerate(inputs))
    return f"\n--- fuzz program ({args}) ---\n{source}"


def check_program(source, inputs):
    """Value and gradients of the program under jit_ps equal plain autograd's (where plain
    autograd computes them)."""
    f = build(source)
    s = scalarized(f)
    g = grad(lambda xs: s(*xs))
    where = describe(source, inputs)
    checks = [("value", lambda: jit_ps(f)(*inputs), lambda: f(*inputs)),
              ("jit_ps(grad(f))", lambda: jit_ps(g)(tuple(inputs)), lambda: g(tuple(inputs))),
              ("grad(jit_ps(f))", lambda: grad(lambda xs: jit_ps(s)(*xs))(tuple(inputs)), lambda: g(tuple(inputs)))]
    for path, run_jit, run_plain in checks:
        atol = None if path == "value" else gradient_atol(s, inputs)
        try:
            expected = run_plain()
        except Exception:
            # plain autograd refuses the program (shapes its VJPs cannot handle, Python floats
            # where its VJPs expect arrays): no oracle to compare with; jit_ps may raise or answer
            try:
                run_jit()
            except Exception:
                pass
            continue
        try:
            assert_close(run_jit(), expected, rtol=tolerance(source, inputs), atol=atol and tolerance(source, inputs) * atol,
                         path=path)
        except Exception as e:
            raise AssertionError(f"{type(e).__name__}: {e}{where}") from e


_settings = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=SEED is None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.filter_too_much], print_blob=False)


def _seeded(test):
    return seed(int(SEED))(test) if SEED is not None else test


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*has been traced for")
@_seeded
@_settings
@given(programs())
def test_random_programs_match_autograd(program):
    source, inputs = program
    check_program(source, inputs)


def as_loop_body(f):
    """A legacy Python loop around the program: six steps, each scaling the inputs by a Python
    number of its own, summing the scalarized results (rolled into scans: rolling.py)."""
    s = scalarized(f)

    def looped(*xs):
        total = 0.0
        for t in range(6):
            total = total + s(*[x * (1.0 + 0.1 * t) for x in xs])
        return total
    return looped


def check_numpy_tier(source, inputs, loop=False):
    """The program (`loop`: as_loop_body's) and its gradient, tiered, every signature traced
    at its second call and held (numpy_tier.py: its later calls run the trace by numpy), at
    five inputs: plain autograd's results bit for bit."""
    f = as_loop_body(build(source)) if loop else build(source)
    s = scalarized(f)
    g = grad(lambda *xs: s(*xs))
    saved = tiering.PLAIN_SECONDS, tiering.plain_budget, tiering.worth_compiling
    tiering.PLAIN_SECONDS, tiering.worth_compiling = None, lambda *a: False
    tiering.plain_budget = lambda learned, call: 0.0 if call is not None else float("inf")
    try:
        for fn in (f, g):
            jf = jit_ps(fn, tiered=True)
            for k in range(5):
                xs = [x * (1 + 0.01 * k) if isinstance(x, float) else (x * (1 + 0.01 * k)).astype(x.dtype)
                      for x in inputs]
                try:
                    want = fn(*xs)
                except Exception:  # plain autograd refuses it: no oracle
                    break
                got = jf(*xs)
                assert numpy_tier.same(got, want), f"call {k}: {got!r} against {want!r}{describe(source, inputs)}"
    finally:
        tiering.PLAIN_SECONDS, tiering.plain_budget, tiering.worth_compiling = saved


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:Output seems independent of input")
@_seeded
@_settings
@given(programs())
def test_random_programs_through_the_numpy_tier(program):
    check_numpy_tier(*program)


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:Output seems independent of input")
@_seeded
@_settings
@given(programs())
def test_random_programs_as_loop_bodies_through_the_numpy_tier(program):
    """(Found: a rolled loop's per-step Python numbers passed to its steps as numpy float64s
    made float32 steps float64, 4e-9 off at some inputs: control_flow/scans.py's `numpy` face.)"""
    check_numpy_tier(*program, loop=True)


# Programs the fuzzer found failing, kept as regression tests (all fixed).
FOUND = [
    # numpy accepts axis=0 / -1 when reducing or scanning a 0-d array; the rules raised AxisError
    ("def program(x0):\n    return np.sum(x0, axis=0)\n", [((), "float64")]),
    ("def program(x0):\n    return np.cumsum(x0, axis=-1)\n", [((), "float64")]),
    ("def program(x0):\n    return np.max(x0, axis=-1)\n", [((), "float64")]),
    ("def program(x0):\n    return np.repeat(x0, 2, axis=0)\n", [((), "float64")]),
    # numpy pads a 0-d array to a 0-d array; the rule raised IndexError
    ("def program(x0):\n    return np.pad(x0, 1)\n", [((), "float64")]),
    # numpy's triu of a vector is a matrix (the mask broadcasts); the rule raised ValueError
    ("def program(x0):\n    return np.triu(x0)\n", [((3,), "float64")]),
    # sort's VJP gathers from an empty array with slice size 1: XLA rejected the program
    ("def program(x0):\n    return np.sort(x0) ** 3\n", [((0,), "float64")]),
    # a Python float times np.float32 is float32 (NEP 50): the gradient is float32-accurate
    ("def program(x0):\n    v0 = x0 * np.float32(1.5)\n    return (np.maximum(v0, v0), v0 / (1.0 + v0 ** 2))\n",
     [((), float)]),
    # np.max of a Python float is np.float64; the traced max passed the weak scalar through, and
    # a float32 0-d array plus it was float32
    ("def program(x0, x1):\n    return x0 + np.max(x1)\n", [((), "float32"), ((), float)]),
]


def _inputs(shapes_dtypes):
    rng = onp.random.RandomState(0)
    return [float(rng.uniform(-1.5, 1.5)) if d is float else rng.uniform(-1.5, 1.5, size=s).astype(d)
            for s, d in shapes_dtypes]


@pytest.mark.parametrize("source, shapes_dtypes", FOUND)
def test_programs_found_by_fuzzing(source, shapes_dtypes):
    check_program(source, _inputs(shapes_dtypes))
