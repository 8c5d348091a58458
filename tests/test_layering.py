"""The package's layering: no import circles among its modules, counting imports inside
functions, and no module over ~1,000 lines without a reason written at its top.

Read from the source with `ast`, not by importing, so that an import placed inside a
function to hide a circle counts like any other.
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "autograd_xla"
MAX_LINES = 1000
LONG_REASON = "This module is long because"


def modules():
    """Dotted module name -> path, for every module of the package: its Python files and its
    C extensions' sources (setup.py builds _blas.c as autograd_xla._blas, _callpath.c as
    autograd_xla._callpath)."""
    found = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def lazy_module(node):
    """The module named by `LazyModule("name")` (registry.LazyModule: imported at its first
    attribute), which is an import like any other; else None."""
    if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "LazyModule"
            and node.args and isinstance(node.args[0], ast.Constant)):
        return node.args[0].value
    return None


def imported(module, path, known):
    """The package modules `module` imports anywhere in its source. `from . import x`
    imports the submodule x when there is one, else a name of the package itself."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    if path.suffix == ".c":
        return set()  # C imports no module of ours
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if lazy_module(node) in known:
            out.add(lazy_module(node))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in known:
                    out.add(sub)
                elif base in known:
                    out.add(base)
    out.discard(module)
    return out


#: The floors, bottom first: a module imports only from its own floor and those below.
FLOORS = [
    ("foundation: the graph, errors, containers", ["core", "errors", "tree"]),
    ("the primitive registry", ["registry"]),
    ("StableHLO text; pictures of XLA's HLO text", ["hlo", "hlo_picture"]),
    ("BLAS's matrix-vector products and numpy ufuncs' own loops, XLA FFI custom calls on the CPU (their handlers in C); jaxlib's clients; the process's memory (numpy's handler in C)",
     ["blas", "ufunc_loops", "_blas", "clients", "memory", "_aligned"]),
    ("what a translation rule's ctx offers", ["context"]),
    ("translation rules", ["rules"]),
    ("interpreters: tracing, lowering, batching, partial evaluation, numpy's run of a graph; the runtime, its C++ dispatch, its processes",
     ["tracing", "lowering", "batching", "partial_eval", "numpy_tier", "backend", "replicated", "dispatch", "calls",
      "_callpath", "persistent_cache", "distributed", "placement"]),
    ("structured control flow", ["control_flow"]),
    ("loop rolling: a trace's repeated runs of equations as scans", ["rolling"]),
    ("compositions: trace rules and patches of autograd", ["compositions"]),
    ("derivatives of compiled calls, random draws, batched calls, collectives, pmap",
     ["autodiff", "impurity", "batched", "collectives", "parallel"]),
    ("jit_ps: the cache, its signatures, its fast paths, ahead-of-time objects, tiered execution and its compile thread; vmap and the Jacobians",
     ["api", "signatures", "fastpaths", "aot", "transforms", "tiering", "background"]),
    ("the package and its reports", ["", "coverage"]),
]


def floor_of(module):
    """Index in FLOORS of the floor holding `module` (a package's modules share its floor)."""
    name = module.removeprefix("autograd_xla").removeprefix(".")
    for i, (_, members) in enumerate(FLOORS):
        for m in members:
            if name == m or (m and name.startswith(m + ".")):
                return i
    raise KeyError(f"{module} is on no floor: add it to FLOORS in {__file__}")


def import_graph():
    known = modules()
    return {m: imported(m, p, known) for m, p in known.items()}


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules importing one another):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_every_module_imports_only_its_floor_and_below():
    graph = import_graph()
    upward = [f"{m} (floor {floor_of(m)}) imports {d} (floor {floor_of(d)})"
              for m, deps in sorted(graph.items()) for d in sorted(deps) if floor_of(d) > floor_of(m)]
    assert not upward, "imports reaching up a floor:\n" + "\n".join(upward)


def test_cycle_finder_sees_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_function_local_imports_count(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n    return g\n")
    (pkg / "c.py").write_text("from .registry import LazyModule\nb = LazyModule('pkg.b')\n")
    known = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py", "pkg.c": pkg / "c.py"}
    graph = {m: imported(m, p, known) for m, p in known.items()}
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.b"}}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("module", sorted(modules()))
def test_module_size(module):
    path = modules()[module]
    text = path.read_text()
    lines = text.count("\n")
    if lines > MAX_LINES:  # (a C extension's doc: its leading comment)
        doc = text.partition("*/")[0] if path.suffix == ".c" else ast.get_docstring(ast.parse(text)) or ""
        assert LONG_REASON in doc, (f"{path.name} has {lines} lines: split it, or say at its top why not "
                                    f"('{LONG_REASON} ...')")


if __name__ == "__main__":  # the layering by floor, for the closing note
    g = import_graph()
    for i, (title, _) in enumerate(FLOORS):
        members = sorted(m.removeprefix("autograd_xla.") for m in g if floor_of(m) == i)
        below = sorted({str(floor_of(d)) for m in g if floor_of(m) == i for d in g[m] if floor_of(d) < i}, key=int)
        print(f"{i:2d} {title}: {', '.join(members)}" + (f"  (imports floors {', '.join(below)})" if below else ""))
