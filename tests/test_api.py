"""jit_ps as a user meets it: call forms, argument structures, the per-signature cache,
static arguments, results, and introspection."""
import functools
import gc

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad, value_and_grad
from autograd_xla import ArgumentError, CompileError, backend, blas, calls, context, jit_ps, lowering, tiering, vmap, while_loop
import helpers
from helpers import assert_close, run_threads

rs = onp.random.RandomState(0)


def mlp(params, x):
    for W, b in params:
        x = np.tanh(x @ W + b)
    return x


def test_decorator_and_call_forms():
    @jit_ps
    def f(x):
        return np.sin(x) * 2

    @jit_ps(static_argnums=1)
    def g(x, n):
        return x ** n

    x = rs.randn(4)
    assert_close(f(x), onp.sin(x) * 2)
    assert_close(g(x, 3), x ** 3)
    assert_close(jit_ps(grad(lambda x: np.sum(np.sin(x))))(x), onp.cos(x))
    assert f.__name__ == "f" and "jit_ps" in repr(f)


def test_containers_in_and_out():
    params = [(rs.randn(3, 4), rs.randn(4)), (rs.randn(4, 2), rs.randn(2))]
    x = rs.randn(5, 3)
    assert_close(jit_ps(mlp)(params, x), mlp(params, x))

    def structured(d, t):
        return {"sum": d["a"] + t[0], "pair": (t[1] * 2, [d["b"]])}
    d, t = {"a": rs.randn(3), "b": rs.randn(2)}, (rs.randn(3), rs.randn(1))
    assert_close(jit_ps(structured)(d, t), structured(d, t))


def test_grad_wrt_container_matches_autograd():
    params = [(rs.randn(3, 4), rs.randn(4)), (rs.randn(4, 2), rs.randn(2))]
    x = rs.randn(5, 3)

    def loss(params, x):
        return np.sum(mlp(params, x) ** 2)
    expected = grad(loss)(params, x)
    assert_close(jit_ps(grad(loss))(params, x), expected)
    assert_close(grad(jit_ps(loss))(params, x), expected)


def test_keyword_arguments_and_defaults():
    def f(x, scale=2.0, *, shift=0.0):
        return x * scale + shift
    jf = jit_ps(f)
    x = rs.randn(3)
    assert_close(jf(x), f(x))
    assert_close(jf(x, scale=3.0, shift=1.0), f(x, scale=3.0, shift=1.0))
    assert_close(jf(x, 0.5), f(x, 0.5))


def test_scalars_follow_numpy_promotion():
    f = jit_ps(lambda x, s: x * s)
    x32 = rs.randn(3).astype(onp.float32)
    assert f(x32, 2.0).dtype == onp.float32                 # Python float is weak
    assert f(x32, onp.float64(2.0)).dtype == onp.float64    # numpy scalar is not
    assert f(x32, onp.array(2.0)).dtype == onp.float64      # neither is a 0-d array
    assert f(onp.arange(3, dtype=onp.int32), 2).dtype == onp.int32
    assert f(onp.arange(3, dtype=onp.int32), 2.5).dtype == onp.float64
    assert jit_ps(lambda s, t: s / t)(3, 2) == 1.5


@pytest.mark.parametrize("name, f", [
    ("max", lambda a, s: a + np.max(s)), ("sum", lambda a, s: a + np.sum(s)),
    ("reshape", lambda a, s: a + np.reshape(s, ())), ("asarray", lambda a, s: a + np.asarray(s)),
    ("negative", lambda a, s: a + np.negative(s)), ("neg", lambda a, s: a + -s), ("pos", lambda a, s: a + (+s)),
    ("abs", lambda a, s: a + abs(s)), ("np.abs", lambda a, s: a + np.abs(s)), ("mul", lambda a, s: a * (s * 2.0)),
    ("where", lambda a, s: a + np.where(True, s, 0.0)), ("where_array", lambda a, s: a + np.where(a > 0, s, 0.0)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_python_float_argument_keeps_numpys_promotion_through_functions_and_operators(name, f):
    """A Python float argument stands for a Python number (weak, NEP 50): Python's operators
    on it give Python numbers (-s, abs(s), s * 2.0: weak), numpy's functions numpy values
    (np.max(s), np.reshape(s, ()): float64), also where they pass it through unchanged (the
    fuzzer found np.max(s) added to a float32 0-d array float32 here, float64 plainly), and
    autograd's np.where of Python numbers alone a Python number."""
    a = onp.array(0.1464405, dtype=onp.float32)
    want, got = f(a, 0.6455680991172583), jit_ps(f, tiered=False)(a, 0.6455680991172583)
    assert onp.asarray(got).dtype == onp.asarray(want).dtype, name
    assert_close(got, want)


def test_zero_d_results_are_numpy_scalars_and_arrays_are_writable():
    f = jit_ps(lambda x: (np.sum(x), x * 2))
    s, y = f(onp.arange(3.0))
    assert isinstance(s, onp.float64) and s == 3.0
    assert isinstance(y, onp.ndarray) and y.flags.writeable
    y[0] = 100.0  # results are the caller's to modify
    assert f(onp.arange(3.0))[1][0] == 0.0


def test_one_compile_per_signature():
    f = jit_ps(lambda x: x * 2)
    a = rs.randn(3)
    for _ in range(5):
        f(a)
    assert f.cache_info()["traces"] == 1 and f.cache_info()["hits"] == 4
    f(rs.randn(3))                                 # same signature, new values
    assert f.cache_info()["traces"] == 1


@pytest.mark.parametrize("change", ["dtype", "shape", "static", "weak", "ndim"])
def test_recompile_on_signature_change(change):
    f = jit_ps(lambda x, n: x * n, static_argnums=1)
    f(rs.randn(3), 2)
    other = {
        "dtype": lambda: f(rs.randn(3).astype(onp.float32), 2),
        "shape": lambda: f(rs.randn(4), 2),
        "static": lambda: f(rs.randn(3), 3),
        "weak": lambda: f(1.0, 2),
        "ndim": lambda: f(rs.randn(3, 1), 2),
    }[change]
    other()
    assert f.cache_info()["traces"] == 2


def test_recompile_on_container_structure():
    f = jit_ps(lambda xs: sum(x.sum() for x in xs))
    f([rs.randn(2), rs.randn(2)])
    f((rs.randn(2), rs.randn(2)))          # tuple instead of list
    f([rs.randn(2), rs.randn(2), rs.randn(2)])
    f([rs.randn(2), rs.randn(2)])          # back to the first: cached
    assert f.cache_info()["traces"] == 3


def test_static_argnames_and_unhashable_static():
    f = jit_ps(lambda x, mode: x * 2 if mode == "double" else x * 3, static_argnames="mode")
    x = rs.randn(3)
    assert_close(f(x, mode="double"), x * 2)
    assert_close(f(x, "triple"), x * 3)          # by position, same parameter
    assert f.cache_info()["traces"] == 2
    g = jit_ps(lambda x, opts: x * opts[0], static_argnums=1)
    with pytest.raises(ArgumentError, match="hashable"):
        g(x, [2])
    assert_close(g(x, (2,)), x * 2)               # still usable afterwards


def test_the_signature_naming_arguments_is_the_functions_own():
    """A jitted function names its arguments by the function's signature, made at its first
    use: neither an attribute of the function that functools.update_wrapper copies nor a
    jitted function's own, jitted again, stands in for it."""
    def f(x, mode="double"):
        return x * 2 if mode == "double" else x * 3
    f._signature = "not a signature"
    x = rs.randn(3)
    for jf in (jit_ps(f), jit_ps(jit_ps(f)), jit_ps(f, static_argnames="mode")):
        assert str(jf._signature) == "(x, mode='double')"
        assert_close(jf(x, mode="triple"), x * 3)


def test_cache_is_bounded():
    f = jit_ps(lambda x: x + 1, cache_size=3)
    for n in range(1, 6):
        f(onp.ones(n))
    info = f.cache_info()
    assert info["size"] == 3 and info["evictions"] == 2


def test_closed_over_array_is_captured_once():
    data = rs.randn(200, 50)            # large enough to become a device-resident constant
    f = jit_ps(lambda w: np.sum(np.dot(data, w)))
    w = rs.randn(50)
    assert_close(f(w), onp.sum(data @ w))
    lowered = f.stablehlo(w)
    assert lowered.count(f"tensor<200x50x{helpers.F64_TEXT}>") >= 1
    assert "%k0" in lowered                          # passed as a resident parameter, not a literal
    entry = next(iter(f._cache.values()))
    assert len(entry.executable.consts) == 1


def test_introspection():
    def f(x, W):
        return np.sum(np.tanh(np.dot(x, W)))
    x, W = rs.randn(2, 3), rs.randn(3, 4)
    jf = jit_ps(f)
    text = str(jf.graph(x, W))
    assert "tanh" in text and "dot" in text and "(x)" in text and "test_api.py" in text
    assert "stablehlo.dot_general" in jf.stablehlo(x, W)
    assert "fusion" in jf.optimized_hlo(x, W)
    info = jf.cache_info()
    assert info["traces"] == 1 and info["trace_seconds"] > 0 and info["compile_seconds"] > 0
    assert jf.cost_analysis(x, W)["flops"] > 0


def test_nested_jit_is_inlined():
    inner = jit_ps(lambda x: np.exp(x))
    outer = jit_ps(lambda x: inner(x) + 1)
    x = rs.randn(3)
    assert_close(outer(x), onp.exp(x) + 1)
    assert inner.cache_info()["traces"] == 0


def test_methods_can_be_jitted():
    class Model:
        def __init__(self, scale):
            self.scale = scale

        @jit_ps(static_argnums=0)
        def __call__(self, x):
            return x * self.scale

        __hash__ = object.__hash__
    m = Model(3.0)
    assert_close(m(onp.ones(2)), onp.full(2, 3.0))


def test_empty_and_zero_d_inputs():
    f = jit_ps(lambda x, s: (x * 2, np.sum(x), s + 1))
    out = f(onp.zeros((0, 3)), onp.float32(1.5))
    assert out[0].shape == (0, 3) and out[1] == 0.0 and out[2].dtype == onp.float32


def test_executables_are_freed_with_the_jitted_function(monkeypatch):
    """Once it is not among the RECENT_PROGRAMS the backend keeps (none here)."""
    import gc
    import weakref

    from autograd_xla import backend
    monkeypatch.setattr(backend, "RECENT_PROGRAMS", 0)
    backend.get_backend("cpu").release_recent()
    f = jit_ps(lambda x: np.sin(x) * 3.25 + 0.125)   # a program no other test compiles
    x = rs.randn(7, 3)
    f(x)
    grad(jit_ps(lambda x: np.sum(np.sin(x) * 3.25)))(x)
    program = weakref.ref(next(iter(f._cache.values())).executable.program)
    assert program() is not None
    del f
    gc.collect()
    assert program() is None


def test_a_fresh_function_finds_the_executable_of_the_same_program(monkeypatch):
    """A library's fit() building `value_and_grad(nll)` anew each time traces again, but its
    program is one the backend still holds: XLA is not asked twice. The bound is kept."""
    import gc
    import weakref

    from autograd_xla import backend
    monkeypatch.setattr(backend, "RECENT_PROGRAMS", 2)
    x = rs.randn(5)

    def fit(scale):
        f = jit_ps(value_and_grad(lambda w: np.sum(np.tanh(w * scale) ** 2)))
        f(x)
        return f.stats.compiles, weakref.ref(next(iter(f._cache.values())).executable.program)

    first, program = fit(1.375)
    again, _ = fit(1.375)
    assert (first, again) == (1, 0) and program() is not None
    fit(2.5)
    fit(3.5)   # two newer programs: the first is no longer held
    gc.collect()
    assert program() is None


def layered_loss(params, x):  # autograd's zeros for params[0]'s gradient are made on the caller's line
    W, b = params[-1]
    return np.sum(np.tanh(x @ W + b))


def test_a_program_traced_from_another_line_finds_its_executable():
    """The ops a program takes from its caller's line (hlo.Locations) do not keep the backend
    from sharing an executable: a library's fit() called from two places compiles once."""
    params = [(rs.randn(3, 2), rs.randn(2)), (rs.randn(3, 2), rs.randn(2))]
    x = rs.randn(4, 3)
    f, g = jit_ps(grad(layered_loss)), jit_ps(grad(layered_loss))
    traced_here = f.stablehlo(params, x)  # traced: the calls below reuse these traces
    traced_there = g.stablehlo(params, x)
    assert traced_here != traced_there
    out_f = f(params, x)
    out_g = g(params, x)
    assert (f.stats.compiles, g.stats.compiles) == (1, 0)
    expected = grad(layered_loss)(params, x)
    for out in (out_f, out_g):
        for got, want in zip(out, expected):
            assert_close(got[0], want[0])
            assert_close(got[1], want[1])
        assert not onp.any(out[0][0])


class Fitter:
    """A library's model: its likelihood slices by a count, so `n` must be static."""

    def __init__(self, scale):
        self.scale = scale

    def nll(self, w, n):
        TRACE_RUNS.append(1)
        return np.sum(np.tanh(w[:n] * self.scale) ** 2)


TRACE_RUNS = []


def test_a_fresh_closure_starts_with_what_the_last_one_learned():
    """A fresh wrapper of a fresh closure of the same code (lifelines builds
    value_and_grad(self.nll) in every fit) makes `n` static from its first trace, as the
    previous wrapper learned: one trace instead of two; the results are still per value."""
    from autograd_xla import signatures
    x = rs.randn(6)
    runs = []
    for scale, n in [(1.5, 3), (2.5, 3), (2.5, 4)]:
        fitter = Fitter(scale)
        f = jit_ps(value_and_grad(fitter.nll))
        del TRACE_RUNS[:]
        value, g = f(x, n)
        runs.append(len(TRACE_RUNS))
        v0, g0 = value_and_grad(fitter.nll)(x, n)
        assert_close(value, v0)
        assert_close(g, g0)
    assert runs[0] == 2 * runs[1] and runs[1] == runs[2]  # the first trace stopped at w[:n], then traced again

    shape = signatures.function_shape
    assert shape(value_and_grad(Fitter(1.0).nll)) == shape(value_and_grad(Fitter(2.0).nll))
    assert shape(value_and_grad(Fitter(1.0).nll, 0)) != shape(value_and_grad(Fitter(1.0).nll, 1))  # argnum by value

    def scaled(k, data):
        return lambda w: np.sum(w * k * data)
    assert shape(scaled(2, x)) == shape(scaled(2, x + 1)) != shape(scaled(3, x))  # arrays by type, numbers by value
    assert shape(np.sin) != shape(np.cos) and shape(len) != shape(abs)


def test_a_trace_stopped_by_a_concrete_value_runs_once_more_beside_a_wrapper_not_intercepted():
    """A trace that a concrete-value request stops runs the function once more, with the value
    static: once, also while a primitive wrapper no trace has intercepted is alive (an
    earlier wrapper of a raw function wrapped again, as autograd.scipy.special's psi and
    digamma are, and lifelines' gammainc): the stopped trace's frames are looked at while its
    interceptors are still in, where only such a wrapper's frame holds its raw function."""
    import scipy.special
    from autograd.extend import primitive
    earlier = primitive(scipy.special.psi)
    later = primitive(scipy.special.psi)  # autograd's map now holds `later` for psi, not `earlier`
    runs = []

    def nll(w, n):  # (a function of its own: none before it learned that `n` is static)
        runs.append(1)
        return np.sum(np.tanh(w[:n] * 1.5) ** 2)

    x = rs.randn(6)
    value, g = jit_ps(value_and_grad(nll), tiered=False)(x, 3)
    assert len(runs) == 2  # stopped at w[:n], then traced with n static
    v0, g0 = value_and_grad(nll)(x, 3)
    assert_close(value, v0)
    assert_close(g, g0)
    assert earlier is not later


@pytest.mark.parametrize("offset", [0, 8, 16, 48])
def test_large_inputs_at_any_alignment(offset):
    """Large aligned arguments are read in place, others copied; both must be exact."""
    buf = onp.empty(300 * 100 + 16)
    start = ((-buf.ctypes.data % 64) + offset) // 8
    X = buf[start:start + 300 * 100].reshape(300, 100)
    X[:] = rs.randn(300, 100)
    w = rs.randn(100)
    f = jit_ps(lambda X, w: np.tanh(X @ w) + X.sum(0)[:3].sum())
    expected = onp.tanh(X @ w) + X.sum(0)[:3].sum()
    for _ in range(20):
        assert_close(f(X, w), expected)
    X[0, 0] += 1.0                   # the caller may modify arguments between calls
    assert_close(f(X, w), onp.tanh(X @ w) + X.sum(0)[:3].sum())


# ----- large arrays are read where they are and written into reused memory (LARGE_ARRAY_BYTES) -----
BIG = (512, 256)  # float64: 1 MiB, the smallest size handled so


def poly(x):
    return x + x * x + x * x * x


def placed(shape=BIG, dtype=onp.float64, offset=0):
    return helpers.placed(shape, dtype, offset)


@pytest.fixture
def recycling(monkeypatch):
    """Results recycled from LARGE_ARRAY_BYTES on (lowering.RECYCLE_MIN_BYTES), as BIG's: the
    mechanism, without arrays of 32 MiB."""
    monkeypatch.setattr(lowering, "RECYCLE_MIN_BYTES", lowering.LARGE_ARRAY_BYTES)


@pytest.mark.usefixtures("on_the_cpu")
def test_results_below_recycle_min_bytes_are_xlas_fresh_memory():
    """glibc serves them from its heap (memory.MALLOC_RAISING_BYTES): no buffer passed in, so
    a call whose earlier results are all alive copies nothing (Backend.take)."""
    assert lowering.LARGE_ARRAY_BYTES <= onp.prod(BIG) * 8 < lowering.RECYCLE_MIN_BYTES
    f = jit_ps(poly)
    x = placed()
    assert "tf.aliasing_output" not in f.stablehlo(x)
    kept = [f(x + k) for k in range(3)]
    assert len({k.ctypes.data for k in kept}) == 3
    for k, y in enumerate(kept):
        assert_close(y, poly(x + k))


@pytest.mark.usefixtures("on_the_cpu", "recycling")
def test_large_results_reuse_dead_results_buffers():
    """A result of RECYCLE_MIN_BYTES is written into a dead earlier result's memory; results
    still alive, and views of dead ones, are never written again."""
    assert onp.prod(BIG) * 8 >= lowering.RECYCLE_MIN_BYTES
    f = jit_ps(poly)
    x = placed()
    assert "tf.aliasing_output = 0" in f.stablehlo(x)
    first = f(x)
    address = first.ctypes.data
    del first
    second = f(x + 1.0)
    assert second.ctypes.data == address               # the dead result's buffer, reused
    assert_close(second, poly(x + 1.0))
    view = second[5:, :7]                               # a view keeps the whole buffer from reuse
    del second
    kept = [f(x + k) for k in range(3)]                 # every result alive: fresh memory each
    assert len({k.ctypes.data for k in kept} | {view.base.ctypes.data if view.base is not None else 0}) == 4
    for k, y in enumerate(kept):
        assert_close(y, poly(x + k))
    assert_close(view, poly(x + 1.0)[5:, :7])


@pytest.mark.usefixtures("recycling")
def test_device_arrays_are_not_recycled():
    """A DeviceArray's buffer seen through numpy (np.asarray) is never given away when the
    numpy view dies: only results an executable handed to numpy as they are can be."""
    on_device = jit_ps(poly, keep_on_device=True)
    f = jit_ps(poly)
    x = placed()
    d = on_device(x)
    assert "tf.aliasing_output" not in on_device.stablehlo(x)
    view = onp.asarray(d)
    del view
    for k in range(3):
        f(x + k)
        f(d)                                            # a DeviceArray into a view parameter
    assert_close(onp.asarray(d), poly(x))
    assert_close(f(d), poly(poly(x)))


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.parametrize("offset", [0, 16, 32, 48])
def test_large_arguments_read_elementwise_are_views_at_any_alignment(offset):
    """A large argument only elementwise ops read is read where it is, from the 64-byte
    boundary below it: exact, and following the caller's changes between calls."""
    x = placed(offset=offset)
    f = jit_ps(lambda x: np.tanh(x) * x + 1.0)
    assert "%view0" in f.stablehlo(x)
    for k in range(3):
        x[k, :] += 1.0
        assert_close(f(x), onp.tanh(x) * x + 1.0)
    assert_close(f(x.T), onp.tanh(x.T) * x.T + 1.0)    # not contiguous: copied, to offset 0
    assert_close(f(x[:, ::-1]), onp.tanh(x[:, ::-1]) * x[:, ::-1] + 1.0)
    g = jit_ps(grad(lambda x: np.sum(np.sin(x) * x)))
    assert_close(g(x), onp.cos(x) * x + onp.sin(x))


@pytest.mark.usefixtures("on_the_cpu")
def test_one_signature_called_with_its_views_at_changing_offsets(monkeypatch):
    """The views' offsets travel in one small buffer, put once per combination and kept
    (backend.OFFSET_BUFFERS of them): every combination reads its own offsets."""
    monkeypatch.setattr(backend, "OFFSET_BUFFERS", 3)
    f = jit_ps(lambda x, y: x * 2.0 - y)
    arrays = {offset: placed(offset=offset) for offset in (0, 8, 24, 56)}
    for a, b in [(0, 8), (8, 0), (24, 56), (56, 24), (0, 8), (8, 8), (56, 0)]:
        x, y = arrays[a], arrays[b]
        assert_close(f(x, y), x * 2.0 - y)
    (entry,) = f._cache.values()
    assert 1 <= len(entry.executable._offsets) <= 3


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.parametrize("offset", [0, 16])
def test_arguments_read_in_place_are_put_once_per_place(monkeypatch, offset):
    """The device buffer reading a large argument where it is (Backend.alias) is made once per
    address and size and holds no reference to the array: every call reads the memory as it
    is then (the same array changed, or another array in the same memory), the array dies
    when the caller drops it, and numpy may still resize it in place."""
    import gc
    import weakref
    monkeypatch.setattr(backend, "ALIASES_KEPT", 3)
    cpu = backend.get_backend("cpu")
    cpu._aliases.clear()
    f = jit_ps(lambda x: x * 2.0 + 1.0)
    raw = onp.empty(onp.prod(BIG) * 8 + 128, onp.uint8)
    start = -raw.ctypes.data % 64 + offset

    def in_raw():  # a new array object on the same memory at each call
        return raw[start:start + onp.prod(BIG) * 8].view(onp.float64).reshape(BIG)

    in_raw()[:] = rs.rand(*BIG)
    for k in range(3):
        x = in_raw()
        x[k] += 1.0
        assert_close(f(x), x * 2.0 + 1.0)
    assert len(cpu._aliases) == 1
    others = [placed(offset=offset) for _ in range(4)]
    for y in others:
        assert_close(f(y), y * 2.0 + 1.0)
    assert len(cpu._aliases) == 3                      # ALIASES_KEPT, the oldest dropped
    assert_close(f(in_raw()), in_raw() * 2.0 + 1.0)

    x = rs.rand(*BIG)
    f(x)
    x.resize(BIG[0] * BIG[1] + 8, refcheck=True)       # no reference left behind
    dead = weakref.ref(x)
    assert_close(f(x[:-8].reshape(BIG)), x[:-8].reshape(BIG) * 2.0 + 1.0)
    del x
    gc.collect()
    assert dead() is None


def test_a_donated_argument_is_never_read_from_a_kept_buffer():
    """Donation may consume the buffer an argument was put into; the next call then makes
    another (the caller's array is never written)."""
    x = placed(offset=0)
    expected = x * 2.0
    f = jit_ps(lambda x: x * 2.0, donate_argnums=0)
    g = jit_ps(lambda x: x * 2.0)
    for _ in range(3):
        assert_close(g(x), expected)
        assert_close(f(x), expected)
    assert_close(x * 2.0, expected)


def test_a_view_never_reads_into_the_next_page():
    """An array ending at a mapping's end, where a view's pad would read on into whatever
    follows (unmapped here), is copied instead; so is one at an offset of no whole element."""
    import mmap
    shape = (511, 257)                          # 1,050,616 bytes: it starts 8 bytes past a 64-byte boundary
    pages = -(-(int(onp.prod(shape)) * 8) // mmap.PAGESIZE)
    m = mmap.mmap(-1, pages * mmap.PAGESIZE)
    whole = onp.frombuffer(m, onp.uint8)
    x = whole[pages * mmap.PAGESIZE - int(onp.prod(shape)) * 8:].view(onp.float64).reshape(shape)
    x[:] = rs.rand(*shape)
    assert x.ctypes.data % 64 == 8 and (x.ctypes.data + x.nbytes) % mmap.PAGESIZE == 0
    aval = backend.Aval((x.size + context.view_pad(x.dtype),), x.dtype)
    cpu = backend.get_backend("cpu")
    assert cpu.alias(x, aval, view=True) == (None, 0)
    f = jit_ps(lambda x: x * 3.0)
    assert_close(f(x), x * 3.0)
    odd = onp.frombuffer(mmap.mmap(-1, 8 * 1000 * 200 + 64), onp.uint8)[4:4 + 8 * 1000 * 200]
    odd = odd.view(onp.float64).reshape(1000, 200)
    odd[:] = rs.rand(1000, 200)
    assert cpu.alias(odd, backend.Aval((odd.size + 7,), odd.dtype), view=True) == (None, 0)
    assert_close(f(odd), odd * 3.0)
    del x, odd, whole


@pytest.mark.usefixtures("one_call_is_hot")
def test_large_arguments_read_otherwise_are_staged_and_stay_current():
    """A misaligned large argument read other than elementwise or by dots a View does (here:
    a matrix of short rows, lowering.VIEW_DOT_ROW_BYTES, or times many columns) is copied into reused aligned memory:
    the answer follows the caller's changes to it between calls."""
    X = placed((4096, 32), offset=16)
    w = rs.randn(32)
    f = hot(jit_ps(lambda X, w: np.tanh(X @ w)), X, w)
    assert "%view" not in f.stablehlo(X, w)
    for k in range(3):
        X[k, :] += 1.0
        assert_close(f(X, w), onp.tanh(X @ w))
    Y, W = placed(offset=16), rs.randn(BIG[1], 128)  # nor times many columns (lowering.VIEW_DOT_TRAFFIC)
    g = hot(jit_ps(lambda Y, W: Y @ W), Y, W)
    assert "%view" not in g.stablehlo(Y, W)
    assert_close(g(Y, W), Y @ W)


def products(X, w, g, W):
    """Every way a dot reads a matrix through a View: contracting its rows or its columns,
    with a vector or a matrix, the matrix first or second, directly or through transposes."""
    return X @ w, g @ X, X @ W, W.T @ X.T, X.T @ g, np.dot(g, X) * 2.0


def hot(f, *args):
    """f once its signature for `args` is hot (one call pays the rent here, and each new
    program replaces the one in use untried): its faster programs, the one reading large
    matrices in place last (tiering.Ladder), made and in use."""
    for _ in range(3):  # each call past the rent starts the next step
        f(*args)
        assert tiering.compile_thread.wait(60)
    return f


@pytest.fixture
def one_call_is_hot(monkeypatch):
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 0)


@pytest.fixture
def xla_dots(monkeypatch):
    """Matrix-vector products are XLA's, as off the CPU (on it BLAS does them, blas.py, reading
    a viewed matrix where it is without a View: tests/test_blas.py)."""
    monkeypatch.setattr(blas, "MIN_ELEMENTS", None)


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.usefixtures("xla_dots")
def test_a_hot_signature_reads_its_matrix_in_place_once_made_faster(monkeypatch):
    """The first program copies a misaligned matrix a dot reads (it compiles faster); once the
    signature's calls have cost a compile, one that reads it in place replaces it, with the
    same results."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 1e6)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 0)
    X, w = placed((256, 1024), offset=16), rs.randn(1024)
    f = jit_ps(lambda X, w: np.tanh(X @ w))
    for k in range(3):
        assert_close(f(X, w + k), onp.tanh(X @ (w + k)))
        assert "%tail" not in f.stablehlo(X, w)
    assert tiering.compile_thread.idle()
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    hot(f, X, w)
    assert "%view0" in f.stablehlo(X, w) and "%tail1" in f.stablehlo(X, w)
    for k in range(3):
        X[k] += 1.0
        assert_close(f(X, w), onp.tanh(X @ w))
    assert f.cache_info()["traces"] == 1


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.usefixtures("xla_dots")
@pytest.mark.usefixtures("one_call_is_hot")
def test_a_faster_program_that_fails_to_compile_leaves_the_first(monkeypatch, caplog):
    X, w = placed((256, 1024), offset=16), rs.randn(1024)
    f = jit_ps(lambda X, w: X @ w)
    compile_first = backend.Backend.compile

    def refuse_views(self, text, *a, **k):
        if "%tail" in text:
            raise CompileError("refused")
        return compile_first(self, text, *a, **k)
    monkeypatch.setattr(backend.Backend, "compile", refuse_views)
    with caplog.at_level("WARNING", logger="autograd_xla.tiering"):
        assert_close(hot(f, X, w)(X, w), X @ w)
    assert "keeping the one in use" in caplog.text and "%tail" not in f.stablehlo(X, w)


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.usefixtures("xla_dots")
def test_threads_calling_a_signature_as_it_turns_hot(monkeypatch):
    """Four threads call while the signature's faster programs are made and tried against
    the one in use (tiering.Trial, 3 calls each): every result right, the ladder climbed."""
    gc.collect()
    backend.get_backend("cpu").release_recent()  # its programs, compiled from other lines above, are made again
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 3)
    monkeypatch.setattr(tiering, "TURN_SETTLE_SECONDS", 0.0)
    X = placed((256, 1024), offset=32)
    f = jit_ps(lambda X, w: np.tanh(X @ w))
    ws = [rs.randn(1024) for _ in range(4)]
    errors = []

    def work(w):
        for _ in range(10):
            if not onp.allclose(f(X, w), onp.tanh(X @ w), rtol=1e-12, atol=1e-12):
                errors.append(w)
    run_threads(work, [(w,) for w in ws])
    assert tiering.compile_thread.wait(60)
    for _ in range(20):  # what is left of a trial
        work(ws[0])
        assert tiering.compile_thread.wait(60)
    (entry,) = f._cache.values()
    assert not errors and entry.ladder is None and f.cache_info()["traces"] == 1
    # LLVM's optimisations, default options, XLA's products, XLA's own scheduler
    assert f.cache_info()["upgrades"] == 4


VIEWED = [(onp.float64, offset) for offset in range(0, 64, 8)] + [(onp.float32, offset) for offset in (0, 4, 28, 60)]


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.usefixtures("xla_dots")
@pytest.mark.usefixtures("one_call_is_hot")
@pytest.mark.parametrize("dtype,offset", VIEWED, ids=[f"{d.__name__}-{o}" for d, o in VIEWED])
def test_large_matrices_are_multiplied_where_they_are(dtype, offset):
    """A large matrix a dot reads is read in place, from the 64-byte boundary below it, at
    any offset from there: exact, and following the caller's changes between calls."""
    shape = (128, 2048) if dtype == onp.float64 else (256, 2048)  # rows long enough for six dots
    X = placed(shape, dtype, offset)
    w, g, W = (rs.randn(*s).astype(dtype) for s in ((shape[1],), (shape[0],), (shape[1], 3)))
    f = hot(jit_ps(products), X, w, g, W)
    assert "%view0" in f.stablehlo(X, w, g, W) and "%tail1" in f.stablehlo(X, w, g, W)
    rtol = 1e-12 if dtype == onp.float64 else 1e-4
    for k in range(2):
        X[k, :] += 1.0
        for got, want in zip(f(X, w, g, W), products(X, w, g, W)):
            onp.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 10)
    loss = lambda w, X: np.sum(np.sin(X @ w))  # noqa: E731
    for got, want in zip(hot(jit_ps(value_and_grad(loss)), w, X)(w, X), value_and_grad(loss)(w, X)):
        onp.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 10)


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.usefixtures("xla_dots")
@pytest.mark.usefixtures("one_call_is_hot")
def test_a_vmapped_product_multiplies_the_matrix_where_it_is():
    """Under vmap the other operand carries the batch; the matrix is still read in place."""
    X = placed((256, 1024), offset=24)
    W = rs.randn(3, 1024)
    f = hot(jit_ps(vmap(lambda w, X: np.tanh(X @ w), in_axes=(0, None))), W, X)
    assert "%view1" in f.stablehlo(W, X)
    assert_close(f(W, X), onp.stack([onp.tanh(X @ w) for w in W]))


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.usefixtures("xla_dots")
@pytest.mark.usefixtures("one_call_is_hot")
@pytest.mark.parametrize("offset", [0, 8, 56])
def test_a_matrix_multiplied_where_it_is_keeps_nan_and_infinity_where_numpy_has_them(offset):
    """Other memory around a viewed matrix (NaN here), and a NaN or infinity in it, reach
    exactly the results numpy's reach: no other row or column of the product."""
    shape, n = (512, 256), 512 * 256
    raw = onp.full(n + 32, onp.nan)
    start = (-raw.ctypes.data % 64 + offset) // 8
    X = raw[start:start + n].reshape(shape)
    X[:] = rs.rand(*shape)
    X[3, 0], X[7, -1], X[0, 5] = onp.inf, onp.nan, -onp.inf
    w, g = rs.randn(shape[1]), rs.randn(shape[0])
    f = hot(jit_ps(lambda X, w, g: (X @ w, g @ X)), X, w, g)
    assert "%view0" in f.stablehlo(X, w, g)
    for got, want in zip(f(X, w, g), (X @ w, g @ X)):
        onp.testing.assert_array_equal(onp.isfinite(got), onp.isfinite(want))
        onp.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.usefixtures("recycling")
def test_spare_memory_is_bounded_and_released(monkeypatch):
    """Counts every spare buffer, so nothing else may give one back meanwhile: an earlier
    test's dead results held in cycles (freed when the collector runs) or its compile job."""
    assert tiering.compile_thread.wait(60)
    gc.collect()
    gc.disable()
    try:
        spare_memory_is_bounded_and_released(monkeypatch)
    finally:
        gc.enable()


def spare_memory_is_bounded_and_released(monkeypatch):
    cpu = backend.get_backend("cpu")
    cpu.release_spare()
    # results alone: a call that read x through a view on the Python path (which the load's
    # timing of the tiers decides) would hand back its staged copy of x into the same bound
    monkeypatch.setattr(cpu, "unstage", lambda array, aval: None)
    unit = int(onp.prod(BIG)) * 8
    monkeypatch.setattr(backend, "RECYCLE_MAX_BYTES", 3 * unit)
    x, x32 = placed(), placed(dtype=onp.float32)
    results = [jit_ps(poly)(x) for _ in range(4)]
    del results                                 # four dead results: two kept (RECYCLE_PER_TYPE)
    assert [len(v) for v in cpu._spare.values()] == [2] and cpu._spare_bytes == 2 * unit, {k: len(v) for k, v in cpu._spare.items()}
    results = [jit_ps(lambda x: x * 2.0)(onp.concatenate([x32, x32])) for _ in range(3)]
    del results                                 # three more of another type: one kept (the byte bound)
    assert sorted(len(v) for v in cpu._spare.values() if v) == [1, 2] and cpu._spare_bytes == 3 * unit
    cpu.release_spare()
    assert cpu._spare_bytes == 0 and not cpu._spare



#: float64: just over lowering.FRESH_RESULT_BYTES
HUGE = (2048, 2049)


@pytest.mark.usefixtures("on_the_cpu")
def test_a_huge_result_is_written_afresh_until_a_dead_one_can_be_reused(monkeypatch):
    """A signature whose result is as large as lowering.FRESH_RESULT_BYTES and has no dead
    result to reuse compiles first the program that writes it afresh (its pages faulted in by
    the program's threads, not by a copy on one thread: backend.Backend.take), and the one
    writing into a dead result's buffer on the compile thread after its first call; calls run
    that once they find a dead result."""
    assert tiering.compile_thread.wait(60)
    cpu = backend.get_backend("cpu")
    cpu.release_spare()
    taken = []
    take = backend.Backend.take
    monkeypatch.setattr(backend.Backend, "take", lambda self, aval: taken.append(aval) or take(self, aval))
    f = jit_ps(lambda x: x * 2.0 + 1.0)
    x = rs.rand(*HUGE)
    y1 = f(x)
    executable = next(iter(f._cache.values())).executable
    assert executable.fresh is not None and f.stats.compiles == 1
    assert tiering.compile_thread.wait(60) and executable.exe is not None and f.stats.compiles == 2
    y2 = f(x)                                # y1 alive: no dead result, written afresh again
    assert taken == []
    address = y1.ctypes.data
    assert_close(y1, x * 2.0 + 1.0)
    del y1
    y3 = f(x)                                # into y1's buffer
    assert len(taken) == 1 and y3.ctypes.data == address
    assert_close(y2, x * 2.0 + 1.0)
    assert_close(y3, x * 2.0 + 1.0)
    g = jit_ps(lambda x: x * 3.0)
    del y2
    assert_close(g(x), x * 3.0)              # a dead result of its type exists: one program only
    assert next(iter(g._cache.values())).executable.fresh is None and g.stats.compiles == 1
    assert "tf.aliasing_output" in g.stablehlo(x) and "tf.aliasing_output" in f.stablehlo(x)
    cpu.release_spare()
    monkeypatch.setattr(lowering, "FRESH_TEXT_BYTES", 100)  # a longer program: one program only, as before
    h = jit_ps(lambda x: x * 4.0)
    assert_close(h(x), x * 4.0)
    assert next(iter(h._cache.values())).executable.fresh is None and h.stats.compiles == 1
    cpu.release_spare()


# ----- what cannot be traced, and the legacy patterns that still work ---------------------------
def _line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def branchy(x, scale):
    while np.sum(x) > 0:                      # Python control flow on a traced value, 64 steps
        x = x - 0.0078125 * scale                  # (exact in float32 too: the count never depends on rounding)
    return x


def floaty(x):
    return x * float(np.sum(x))


TABLE = onp.arange(12.0).reshape(4, 3)


def lookup(x):
    return TABLE[np.argmax(x)] * x[0]


@pytest.mark.parametrize("fn, text, what", [
    (branchy, "while np.sum(x) > 0", "bool(x), `if x:`"),
    (floaty, "float(np.sum(x))", "float(x)"),
])  # (np.asarray(x) of a float argument retraces with it static: test_subclasses.py)
def test_untraceable_uses_name_the_argument_the_line_and_the_remedies(fn, text, what):
    from autograd_xla import ConcretizationError
    x = onp.ones(3)
    f = jit_ps(fn, fallback="error")  # the default runs such a signature plainly (test_legacy.py)
    args = (x, 2.0) if fn is branchy else (x,)
    with pytest.raises(ConcretizationError) as info:
        f(*args)
    msg = str(info.value)
    assert what in msg and "computed from 'x' (f64[3])" in msg
    assert f'{__file__}", line {_line_of(fn, text)}' in msg
    assert "static_argnums" in msg and "cond" in msg and "fori_loop" in msg
    if fn is branchy:   # the suggested remedy works
        assert_close(jit_ps(lambda x, s: while_loop(lambda x: np.sum(x) > 0, lambda x: x - 0.0078125 * s, x))(*args),
                     fn(*args))
    with pytest.raises(ConcretizationError):        # the failure left nothing behind: it fails the same way
        f(*args)


def test_numpy_table_indexed_by_a_traced_integer_says_how_to_look_it_up():
    from autograd_xla import ConcretizationError
    x = onp.array([0.1, 0.7, 0.2])
    with pytest.raises(ConcretizationError, match=r"np\.take\(table, idx"):
        jit_ps(lookup, fallback="error")(x)
    assert_close(jit_ps(lambda x: np.take(TABLE, np.argmax(x), axis=0) * x[0])(x), lookup(x))


def test_legacy_minibatch_objective_with_an_iteration_counter():
    """autograd's examples select a minibatch of a closed-over dataset by slicing with
    `iter`: each iteration value is traced (the slice is concrete), XLA compiles once and the
    sliced batch is passed as a resident parameter; values match plain autograd."""
    data = rs.rand(600, 4)
    w = rs.rand(4)

    def objective(w, iter):
        idx = iter % 6
        batch = data[idx * 100:(idx + 1) * 100]
        return np.sum(np.tanh(batch @ w))
    f = jit_ps(grad(objective))
    for it in list(range(7)) * 2:
        assert_close(f(w, it), grad(objective)(w, it))
    info = f.cache_info()
    assert info["traces"] == 7 and info["compiles"] == 1 and info["hits"] == 7


def test_slices_of_an_argument_with_traced_bounds_compile_once():
    """With the dataset passed as an argument the slice bounds stay traced: one trace, a
    dynamic slice of fixed length."""
    data = rs.rand(600, 4)
    w = rs.rand(4)

    def objective(w, data, i):
        return np.sum(np.tanh(data[i * 100:(i + 1) * 100] @ w))
    f = jit_ps(grad(objective))
    for i in range(6):
        assert_close(f(w, data, i), grad(objective)(w, data, i))
    assert f.cache_info()["traces"] == 1


@pytest.mark.usefixtures("on_the_cpu")
def test_small_arguments_travel_as_one_buffer_per_dtype():
    """On CPU, arguments of at most PACK_MAX_BYTES go to the device packed per dtype (one
    transfer) and are sliced apart in the program; values, weak types and dtypes survive.
    (Where C++'s call path may take the calls each goes alone: a dict's leaves it orders
    otherwise, so here it may not.)"""
    from autograd_xla.backend import DeviceArray

    def f(params, scale, n, mask, empty, big):
        (W, b), (V, c) = params["first"], params["second"]
        h = np.tanh(np.dot(big[:3, :4], W) + b) * scale + n
        return np.sum(np.dot(h, V) + c) * np.where(mask, 1.0, 2.0) + np.sum(empty), np.sum(big)
    params = {"first": (rs.randn(4, 5), rs.randn(5)), "second": (rs.randn(5, 2), rs.randn(2))}
    args = (params, 0.5, 3, onp.array([True, False]), onp.zeros((0, 3)), rs.randn(200, 100))
    jf = jit_ps(f)
    assert_close(jf(*args), f(*args))
    text = jf.stablehlo(*args)
    main = text[text.index("@main("):text.index(") -> (")]
    assert "tensor<200x100xf64>" in main                       # large: a parameter of its own
    assert "tensor<38xf64>" in main                            # 20 + 5 + 10 + 2 + 0 + the weak 0.5
    assert "tensor<4x5xf64>" not in main and "tensor<2xi1>" in main   # a lone bool stays alone
    assert jf.cache_info()["host_to_device"] == 9              # counted per argument, as before
    # a DeviceArray among the packed arguments is copied in; x64=False packs 32-bit values
    b = params["first"][1]
    d = jit_ps(lambda x: x * 1.0, keep_on_device=True)(b)
    assert isinstance(d, DeviceArray)
    assert_close(jit_ps(lambda a, b: a * b)(d, b), b ** 2)
    f32 = jit_ps(lambda a, b, k: a * b + k, x64=False)(b, b, 2)
    assert f32.dtype == onp.float32 and onp.allclose(f32, b ** 2 + 2, rtol=1e-6)


def test_arguments_nothing_reads_are_not_passed():
    """A large misaligned argument, small ones that would be packed, and one read only by
    dead code: none is a parameter, none is moved; the results are autograd's, also of a
    gradient that reads only a row of a large argument."""
    def f(big, a, b, c, used):
        dead = np.sum(np.exp(b))  # noqa: F841 (traced, pruned)
        return np.tanh(used) * 2.0
    big, used = helpers.placed((512, 512), offset=16), rs.randn(3)
    args = (big, rs.randn(3), rs.randn(3), 1.5, used)
    jf = jit_ps(f)
    assert_close(jf(*args), f(*args))
    text = jf.stablehlo(*args)
    main = text[text.index("@main("):text.index(") -> (")]
    assert main.count("%arg") == 1 and f"tensor<3x{helpers.F64_TEXT}>" in main and "512" not in main
    assert jf.cache_info()["host_to_device"] == 1
    g = jit_ps(grad(lambda big, used: np.sum(np.tanh(used)) + 0.0 * np.sum(big[0]), argnum=1))
    assert_close(g(big, used), 1.0 - onp.tanh(used) ** 2)


# ----- what a function reads besides its arguments --------------------------------------------
SCALE = 1.0  # a global a jitted function reads (test_a_value_read_besides_the_arguments_...)


def _scaled_by_global(x):
    return SCALE * np.sum(x ** 2)


class _Metric:
    offset = 0.0  # a class attribute the method reads

    def __init__(self):
        self.a, self.W, self.evaluations = 1.0, onp.eye(2), 0

    def energy(self, x):
        self.evaluations += 1  # a counter the trace reads too: no constant of the program
        return self.a * np.sum((self.W @ x) ** 2) + self.offset


@pytest.mark.parametrize("tiered", [False, None])
def test_a_value_read_besides_the_arguments_and_assigned_anew_is_read_again(tiered, monkeypatch):
    """A closure variable, a global, a bound method's attributes (a float, an array) and its
    class's attribute, read by the trace and assigned another value later: plain autograd
    reads them at every call, and so does the jitted function (geomstats' metrics keep their
    parameters as attributes: the old program's answer came back); a counter the function
    bumps is not read as a constant and traces nothing again. Tiered, the held and compiled
    calls too."""
    global SCALE
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0.0 if tiered is None else None)  # compiled soon
    x = onp.array([1.0, 2.0])

    def make():
        factor = 1.0

        def f(x):
            return factor * np.sum(x ** 3)

        def set_factor(v):
            nonlocal factor
            factor = v
        return f, set_factor
    f, set_factor = make()
    m = _Metric()
    cases = [(f, lambda: set_factor(3.0)), (_scaled_by_global, lambda: globals().update(SCALE=3.0)),
             (grad(m.energy), lambda: setattr(m, "a", 3.0)), (grad(m.energy), lambda: setattr(m, "W", 2 * onp.eye(2))),
             (m.energy, lambda: setattr(_Metric, "offset", 2.5))]
    try:
        _read_again(cases, x, tiered)
    finally:
        _Metric.offset = 0.0
    SCALE = 1.0
    assert m.evaluations > 0


def _read_again(cases, x, tiered):
    """Each (function, change): the jitted function agrees with plain before and after the
    change, which traces it again once."""
    for fun, change in cases:
        jf = jit_ps(fun, tiered=tiered)
        for _ in range(3):
            assert_close(jf(x), fun(x))
        traces = jf.stats.traces
        change()
        for _ in range(3):
            assert_close(jf(x), fun(x))
        assert jf.stats.traces == traces + 1


SMALL, MIDDLE, LARGE = onp.ones(3), onp.ones(2000), onp.ones(100_000)  # compared whole, whole, sampled
TABLES = {"w": onp.ones(3), "scale": 2.0}
LAYERS = [(onp.ones(3), 0.5)]


@pytest.mark.parametrize("tiered", [False, None])
def test_an_array_read_besides_the_arguments_and_changed_in_place_is_read_again(tiered, monkeypatch):
    """An array the trace read (a global, small or large, Fortran-ordered, a closure variable,
    an attribute, a dict's item, a tuple's in a list, a partial's bound argument and keyword,
    a default value) changed in place keeps its identity; plain autograd reads its new
    values, and so does the jitted function (its bytes are compared: all of them, or for a
    large one a sample spread over it, which a change of every element meets); a dict's item
    or a list's element assigned anew is read again too."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0.0 if tiered is None else None)
    x = onp.array([1.0, 2.0, 3.0])
    fortran = onp.asfortranarray(onp.arange(6.0).reshape(2, 3))
    closed, bound_a, bound_b, default_a, default_b = (onp.ones(3) for _ in range(5))
    m = _Metric()
    m.W = onp.eye(3)
    cases = [(lambda x: np.sum(x * SMALL), lambda: SMALL.__setitem__(1, 5.0)),
             (lambda x: np.sum(x * MIDDLE[:3]) + np.sum(MIDDLE), lambda: MIDDLE.__setitem__(1999, 4.0)),
             (lambda x: np.sum(x * LARGE[-3:]), lambda: LARGE.__imul__(2.0)),
             (lambda x: np.sum(fortran @ x), lambda: fortran.__setitem__((1, 0), 7.0)),
             (lambda x: np.sum(x * closed), lambda: closed.__iadd__(1.0)),
             (grad(m.energy), lambda: m.W.__setitem__((0, 2), 3.0)),
             (lambda x: np.sum(x * TABLES["w"]) * TABLES["scale"], lambda: TABLES["w"].__setitem__(0, -1.0)),
             (lambda x: np.sum(x * TABLES["w"]) * TABLES["scale"], lambda: TABLES.__setitem__("w", onp.zeros(3))),
             (lambda x: np.sum(x * LAYERS[0][0]) + LAYERS[0][1], lambda: LAYERS[0][0].__setitem__(2, 4.0)),
             (lambda x: np.sum(x * LAYERS[0][0]) + LAYERS[0][1], lambda: LAYERS.__setitem__(0, (onp.ones(3), 1.5))),
             (functools.partial(lambda x, a, b: np.sum(x * a * b), bound_a, b=bound_b), lambda: bound_a.__imul__(3.0)),
             (functools.partial(lambda x, a, b: np.sum(x * a * b), bound_a, b=bound_b), lambda: bound_b.__iadd__(1.0)),
             (lambda x, a=default_a, *, b=default_b: np.sum(x * a * b), lambda: default_a.__imul__(2.0)),
             (lambda x, a=default_a, *, b=default_b: np.sum(x * a * b), lambda: default_b.__imul__(2.0))]
    try:
        _read_again(cases, x, tiered)
    finally:
        SMALL[:], MIDDLE[:], LARGE[:] = 1.0, 1.0, 1.0
        TABLES.update(w=onp.ones(3), scale=2.0)
        LAYERS[0] = (onp.ones(3), 0.5)


def test_content_sample_takes_an_arrays_memory_whole_or_spread_over_it():
    from autograd_xla.signatures import SAMPLED, content_same, content_sample
    small, large = onp.arange(6.0), onp.arange(100_000.0)
    assert content_sample(small) == (small.tobytes(), 1, 8)
    data, step, itemsize = content_sample(large)
    assert len(data) // itemsize <= SAMPLED and step > 1 and data == large[::step].tobytes()
    assert content_sample(onp.arange(12.0).reshape(3, 4)[:, 1]) is None  # not one block of memory
    assert content_sample(onp.array([1, "a"], dtype=object)) is None and content_sample(2.0) is None
    f = onp.asfortranarray(onp.arange(6.0).reshape(2, 3))
    sample = content_sample(f)
    assert sample[0] == f.T.tobytes() and content_same(f, sample)
    holder = {"f": f}
    captured = ((holder, "f", f) + sample,)  # as _callpath's Front compares it, and calls.py's mirror
    assert calls._captured_hold(captured)
    f[0, 1] = 9.0
    assert not content_same(f, sample) and not calls._captured_hold(captured)


def test_a_value_read_besides_the_arguments_that_changes_at_every_call_runs_plainly():
    """Past CAPTURED_CHANGES changes of a value the trace read (here a float attribute set
    anew before each call), each tracing the function again, it runs as plain autograd,
    with one FallbackWarning naming the attribute; fallback='error' traces again each time."""
    from autograd_xla import FallbackWarning
    from autograd_xla.api import CAPTURED_CHANGES
    m = _Metric()
    x = onp.array([1.0, 2.0])
    jf = jit_ps(m.energy, tiered=False)
    with pytest.warns(FallbackWarning, match="attribute 'a' of a _Metric has changed between calls"):
        for k in range(CAPTURED_CHANGES + 4):
            m.a = 1.0 + k
            assert_close(jf(x), m.energy(x))
    assert jf.stats.traces == CAPTURED_CHANGES + 1
    strict = jit_ps(m.energy, tiered=False, fallback="error")
    for k in range(CAPTURED_CHANGES + 2):
        m.a = 1.0 + k
        assert_close(strict(x), m.energy(x))
    assert strict.stats.traces == CAPTURED_CHANGES + 2


@pytest.mark.parametrize("tiered", [False, None])
def test_calls_under_a_numpy_error_state_that_raises_run_plainly(tiered, monkeypatch):
    """Under np.errstate(over='raise') plain autograd's numpy raises FloatingPointError where
    a compiled program returns inf: such calls run plainly (one FallbackWarning), the compiled
    program again once the state is left (or another that warns or ignores is entered);
    differentiated from outside too; fallback='error' raises."""
    from autograd_xla import FallbackWarning, JitError
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0.0 if tiered is None else None)

    def f(x):
        return np.sum(np.exp(x))
    jf = jit_ps(f, tiered=tiered)
    x, big = onp.array([1.0, 2.0]), onp.array([1.0, 1000.0])
    for _ in range(3):
        assert_close(jf(x), f(x))
    with onp.errstate(over="raise"):
        with pytest.warns(FallbackWarning, match="floating-point error state"), pytest.raises(FloatingPointError):
            jf(big)
        with pytest.raises(FloatingPointError):
            grad(jf)(big)
        assert_close(jf(x), f(x))
    with onp.errstate(all="ignore"):
        assert jf(big) == onp.inf and grad(jf)(big)[1] == onp.inf
    assert_close(jf(x), f(x))
    assert jf.stats.traces == 1
    strict = jit_ps(f, tiered=tiered, fallback="error")
    with onp.errstate(divide="raise"), pytest.raises(JitError, match="error state"):
        strict(x)
    assert_close(strict(x), f(x))
