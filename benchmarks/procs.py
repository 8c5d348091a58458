"""Each contender in a worker process of its own: the protocol every benchmark script uses.

A contender's *kind* names its library: "autograd" (plain autograd), "jit_ps" (autograd_xla)
or "jax". Each kind runs in a worker process of its own (`Worker`), as users run them: one
XLA CPU client and one thread pool per process, not two clients on the same cores. A jax
worker never imports autograd_xla, and no other worker imports jax (checked after every
request).

A worker builds its cases by calling a *factory* the parent names, `module:function` in this
directory, as `function(kind, **params)` -> {key: Case}. Inputs are made inside each worker
from the same seed, so every worker holds the same numbers; the parent compares the results
that come back (`compare`). Then the parent asks the workers for samples, one per turn
(`interleaved`): every worker but the one sampling waits on its pipe, and a burst of someone
else's load lands on all contenders alike.

Messages are pickled (command, arguments) pairs over the worker's stdin and a private copy of
its stdout (the worker's own stdout goes to stderr, so that what a library prints cannot
corrupt the channel).
"""
import gc
import importlib
import importlib.util
import os
import pickle
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import traceback
from importlib import metadata

import numpy as onp

import timing
from timing import format_seconds

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KINDS = ("autograd", "jit_ps", "jax")
TITLES = {"autograd": "autograd", "jit_ps": "jit_ps", "jax": "jax.jit"}
#: A kind's library must never be in another kind's process.
FORBIDDEN = {"autograd": ("jax",), "jit_ps": ("jax",), "jax": ("autograd_xla",)}
#: The largest difference from plain autograd's result allowed, relative to its magnitude, by the
#: inputs' dtype: XLA and OpenBLAS sum in different orders, and a float32 computation's
#: derivative is float32 under jit_ps and jax where plain autograd's may be float64.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


class Case:
    """What a worker can time: fn(*args). `settle`: a jit_ps function whose signature may climb
    to later programs (timing.settle runs before steady state). `extras`: {name: callable}
    the parent may call by name (`Worker.extra`), e.g. the optimised HLO's text; "first", if
    there, makes the first call instead of fn (e.g. one that fails on a fallback)."""

    def __init__(self, fn, args=(), settle=False, **extras):
        self.fn, self.args, self.settle, self.extras = fn, tuple(args), settle, extras


# ----- worker side -----------------------------------------------------------------------------

def start_kind(kind, backend):
    """Import and warm the kind's library: its client made and its lazily imported modules
    loaded, so that a first call measures tracing and compiling the workload only."""
    x = onp.ones(2)
    if kind == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)  # float64 like numpy; float32 inputs stay float32
        jax.config.update("jax_platforms", {"gpu": "cuda"}.get(backend, backend))
        onp.asarray(jax.jit(lambda v: v * 2.0)(x))
        onp.asarray(jax.jit(jax.grad(lambda v: (v * v).sum() * 2.0))(x))
    elif kind == "jit_ps":
        timing.load_jit_ps(backend)
    elif kind == "autograd":
        from autograd import grad
        grad(lambda v: (v * v).sum())(x)
    else:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")


def to_numpy(tree):
    """A result as plain numpy (lists, tuples and dicts kept), picklable with no library."""
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_numpy(x) for x in tree) if type(tree) in (list, tuple) else [to_numpy(x) for x in tree]
    if isinstance(tree, dict):
        return {k: to_numpy(v) for k, v in tree.items()}
    if tree is None or isinstance(tree, (str, bool, int)):
        return tree
    return onp.asarray(tree)


class Served:
    """The worker's state and its commands (each a method; the reply is its return value)."""

    def __init__(self, kind):
        self.kind, self.cases = kind, {}

    def build(self, factory, params):
        module, function = factory.split(":")
        cases = getattr(importlib.import_module(module), function)(self.kind, **params)
        self.cases.update(cases)
        return list(cases)

    def first(self, key):
        """(seconds, numpy result, jit_ps's split of the time or None) of one call."""
        c = self.cases[key]
        t, out = timing.time_once(c.extras.get("first", c.fn), c.args)
        st = getattr(c.fn, "stats", None)
        split = None if st is None else {"trace": st.trace_seconds, "lower": st.lower_seconds,
                                         "compile": st.compile_seconds}
        return t, to_numpy(out), split

    def output(self, key):
        c = self.cases[key]
        return to_numpy(c.fn(*c.args))

    def settle(self, key):
        c = self.cases[key]
        return timing.settle(c.fn, c.args) if c.settle else (0, 0.0)

    def calibrate(self, key, target, warmup):
        c = self.cases[key]
        if warmup:
            timing.warm_up(c.fn, c.args, warmup)
        return timing.calibrate(c.fn, c.args, target)

    def sample(self, key, number, lead):
        c = self.cases[key]
        if lead:
            timing.warm_up(c.fn, c.args, lead, min_calls=1)
        return timing.time_calls(c.fn, c.args, number) / number

    def calls(self, key, number):
        """The seconds of each of `number` calls, for means and stalls call by call."""
        c = self.cases[key]
        return [timing.time_once(c.fn, c.args)[0] for _ in range(number)]

    def call(self, function, args):
        """module:function(*args) in the worker, e.g. a diagnosis that needs its library."""
        module, name = function.split(":")
        return getattr(importlib.import_module(module), name)(*args)

    def extra(self, key, name, args):
        return self.cases[key].extras[name](*args)

    def drop(self, keys):
        for k in keys:
            self.cases.pop(k, None)
        gc.collect()


def serve(kind, backend):
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the libraries print goes to stderr
    sys.stdout = sys.stderr
    inbox = os.fdopen(0, "rb")

    def reply(status, value):
        pickle.dump((status, value), channel, protocol=pickle.HIGHEST_PROTOCOL)
        channel.flush()

    try:
        start_kind(kind, backend)
    except Exception:
        reply("error", traceback.format_exc())
        return
    served = Served(kind)
    reply("ok", os.getpid())
    while True:
        try:
            command, args = pickle.load(inbox)
        except EOFError:
            return
        if command == "quit":
            reply("ok", None)
            return
        try:
            value = getattr(served, command)(*args)
            leaked = [m for m in FORBIDDEN[kind] if m in sys.modules]
            if leaked:
                raise AssertionError(f"{', '.join(leaked)} imported in the {kind} worker")
            reply("ok", value)
        except Exception:
            reply("error", traceback.format_exc())


# ----- parent side -----------------------------------------------------------------------------

class WorkerError(RuntimeError):
    pass


class Worker:
    """A worker process of one kind. `env`: variables added to this process's environment.
    Starting returns at once; the first request waits until the worker has imported and
    warmed its library (`ready`)."""

    def __init__(self, kind, backend="cpu", env=None):
        self.kind = kind
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-X", "faulthandler", os.path.abspath(__file__), kind, backend],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=worker_environment(env), cwd=REPO)
        self._ready = False

    def ready(self):
        if not self._ready:
            self._receive("start")
            self._ready = True
        return self

    def _receive(self, what):
        try:
            status, value = pickle.load(self.proc.stdout)
        except EOFError:
            self.proc.wait()
            raise WorkerError(f"{self.kind} worker died during {what} (exit {self.proc.returncode}): "
                              f"{self.stderr_tail()}") from None
        if status == "error":
            raise WorkerError(f"{self.kind} worker, {what}:\n{value}")
        return value

    def request(self, command, *args):
        self.ready()
        pickle.dump((command, args), self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.flush()
        return self._receive(command)

    def build(self, factory, **params):
        return self.request("build", factory, params)

    def extra(self, key, name, *args):
        return self.request("extra", key, name, args)

    def call(self, function, *args):
        return self.request("call", function, args)

    def stderr_tail(self, lines=15):
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def close(self):
        if self.proc.poll() is None:
            try:
                if self._ready:
                    self.request("quit")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def worker_environment(extra):
    """This process's environment, `extra` added, and this checkout first on the path: the
    autograd_xla measured is the one beside this script."""
    env = dict(os.environ, **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


class Workers(dict):
    """{kind: Worker}, started together (their imports overlap), closed together."""

    def __init__(self, kinds, backend="cpu", env=None):
        super().__init__((k, Worker(k, backend, (env or {}).get(k))) for k in kinds)
        for w in self.values():
            w.ready()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for w in self.values():
            w.close()


def interleaved(contenders, repeat, target, lead=0.0, warmup=0.05, number=None):
    """contenders: {name: (worker, key)}. Returns ({name: [per-call seconds of each sample]},
    {name: calls per sample}). Each round asks every contender for one sample, in balanced
    orders (timing.balanced_orders), each sample after `lead` seconds of the contender's own
    untimed calls. `number`: calls per sample for all (no warm-up, no calibration), e.g. 1
    for a whole optimisation."""
    if number is None:
        numbers = {n: w.request("calibrate", key, target, warmup) for n, (w, key) in contenders.items()}
    else:
        numbers = dict.fromkeys(contenders, number)
    names = list(contenders)
    orders = timing.balanced_orders(len(names))
    samples = {n: [] for n in names}
    for r in range(repeat):
        for name in [names[i] for i in orders[r % len(orders)]]:
            w, key = contenders[name]
            samples[name].append(w.request("sample", key, numbers[name], lead))
    return samples, numbers


def fresh_first_calls(kind, factory, params, key, n, backend="cpu", env=None):
    """First calls of `key` made by `n` fresh worker processes, one after the other (each
    builds the factory's cases and calls `key` once): [(seconds, jit_ps's split or None)]."""
    out = []
    for _ in range(n):
        with Worker(kind, backend, env) as w:
            w.build(factory, **params)
            t, _, split = w.request("first", key)
            out.append((t, split))
    return out


# ----- comparing and reporting (the parent's) ----------------------------------------------------

def leaves_of(obj):
    if isinstance(obj, (list, tuple)):
        return [x for item in obj for x in leaves_of(item)]
    if isinstance(obj, dict):
        return [x for k in sorted(obj) for x in leaves_of(obj[k])]
    return [obj]


def compare(ref, out, dtype, notes=None, who=""):
    """Largest error relative to the reference leaf's magnitude. Shapes must match. Dtypes
    must match unless `notes` is given (where plain autograd's derivative of a float32
    computation is float64, e.g. the gradient of np.mean, jit_ps's and jax's are float32); a
    differing dtype is then recorded in `notes` instead of failing."""
    a, b = leaves_of(ref), leaves_of(out)
    if len(a) != len(b):
        raise AssertionError(f"{who}: {len(b)} result leaves, expected {len(a)}")
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        x, y = onp.asarray(x), onp.asarray(y)
        if x.shape != y.shape or (x.dtype != y.dtype and notes is None):
            raise AssertionError(f"{who}: result {y.dtype}{list(y.shape)}, expected {x.dtype}{list(x.shape)} "
                                 "(plain autograd's)")
        if x.dtype != y.dtype:
            notes.append(f"{who} result {i} is {y.dtype} where autograd's is {x.dtype}")
        scale = max(float(onp.max(onp.abs(x))) if x.size else 0.0, onp.finfo(dtype).tiny)
        worst = max(worst, _max_difference(x.ravel(), y.ravel()) / scale)
    return worst


def _max_difference(x, y, block=1 << 20):
    """max |x - y| in float64, a block at a time (a 10000x10000 result would need 2.4 GB at once)."""
    worst = 0.0
    for i in range(0, x.size, block):
        worst = max(worst, float(onp.max(onp.abs(x[i:i + block].astype(onp.float64) - y[i:i + block]))))
    return worst


def cell(summary, stat="median"):
    """'1.23 ms ±4%': the statistic, and the interquartile range relative to the median."""
    if summary is None:
        return "—"
    spread = (summary["q3"] - summary["q1"]) / summary["median"] * 100 if summary["median"] else 0.0
    return f"{format_seconds(summary[stat])} ±{spread:.0f}%"


def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}×"


def spread(xs):
    """median (min-max) of some seconds."""
    return f"{format_seconds(statistics.median(xs))} ({format_seconds(min(xs))}-{format_seconds(max(xs))})"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s+=\s+.*?\s([a-z][a-z0-9-]*)\(")
_BOOKKEEPING = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element"}


def hlo_op_counts(text):
    """Opcode -> count over every computation of an optimised HLO module's text."""
    counts = {}
    for line in text.splitlines():
        m = _INSTRUCTION.match(line)
        if m and m.group(1) not in _BOOKKEEPING:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def fmt_load(la):
    return "/".join(f"{x:.2f}" for x in la)


def environment(**extra):
    """The machine and the versions, as the parent sees them (it imports no library)."""
    env = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": _cpu_model(),
           "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "loadavg_start": list(os.getloadavg()), "numpy": onp.__version__, "numpy_blas": _numpy_blas(),
           "versions": _versions(), "autograd_xla_git": _git_rev(),
           "thread_env": {k: os.environ[k] for k in sorted(os.environ)
                          if any(s in k for s in ("THREADS", "OPENBLAS", "OMP_", "MKL_", "BLIS", "XLA", "JAX_"))},
           "processes": "each contender's library in a worker process of its own (benchmarks/procs.py), samples "
                        "interleaved between the processes"}
    env.update(extra)
    return env


def _versions():
    out = {}
    for dist in ("autograd", "jaxlib", "jax"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def jax_available():
    return importlib.util.find_spec("jax") is not None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _numpy_blas():
    try:
        blas = onp.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # show_config's layout is not a stable API
        return "?"


def _git_rev():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "autograd_xla"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev + ("+uncommitted changes in autograd_xla/" if dirty else "")
    except Exception:
        return "?"


def place(tree, offset):
    """Copy every array in `tree` to an address that is `offset` modulo 64 (offset 64 means 0).

    Where an input lives decides whether XLA can read it in place: jax.jit passes 64-byte
    aligned numpy arrays to the CPU runtime without copying and copies the others. numpy's
    own memory handler puts large arrays 16 bytes past a 64-byte boundary; the one
    autograd_xla gives numpy on import puts them on one."""
    if isinstance(tree, (list, tuple)):
        return type(tree)(place(x, offset) for x in tree)
    a = onp.asarray(tree)
    buf = onp.empty(a.nbytes + 128, onp.uint8)
    start = (offset % 64 - buf.ctypes.data) % 64
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 64 == offset % 64
    return out


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu")
