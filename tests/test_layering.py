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
    """Dotted module name -> path, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(module, path, known):
    """The package modules `module` imports anywhere in its source. `from . import x`
    imports the submodule x when there is one, else a name of the package itself."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
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


def floors(graph):
    """Module -> floor: 0 for modules importing no package module, else one above the
    highest floor it imports (defined only without circles)."""
    memo = {}

    def floor(m):
        if m not in memo:
            memo[m] = 1 + max((floor(d) for d in graph[m]), default=-1)
        return memo[m]
    return {m: floor(m) for m in graph}


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules importing one another):\n" + "\n".join(
        " <-> ".join(c) for c in found)


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
    known = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py"}
    graph = {m: imported(m, p, known) for m, p in known.items()}
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_registry_and_core_are_at_the_bottom():
    graph = import_graph()
    assert graph["autograd_xla.core"] == set()
    assert graph["autograd_xla.registry"] <= {"autograd_xla.core"}
    rules = [m for m in graph if m.startswith("autograd_xla.rules")]
    above = {"autograd_xla.tracing", "autograd_xla.lowering", "autograd_xla.api", "autograd_xla.control_flow"}
    for m in rules:  # translation rules never reach up into the tracer, the interpreter or control flow
        reached = {d for d in graph[m] if any(d == a or d.startswith(a + ".") for a in above)}
        assert not reached, f"{m} imports {sorted(reached)}"


@pytest.mark.parametrize("module", sorted(modules()))
def test_module_size(module):
    path = modules()[module]
    text = path.read_text()
    lines = text.count("\n")
    if lines > MAX_LINES:
        doc = ast.get_docstring(ast.parse(text)) or ""
        assert LONG_REASON in doc, (f"{path.name} has {lines} lines: split it, or say at its top why not "
                                    f"('{LONG_REASON} ...')")


if __name__ == "__main__":  # the layering by floor, for the closing note
    g = import_graph()
    by_floor = {}
    for m, f in floors(g).items():
        by_floor.setdefault(f, []).append(m)
    for f in sorted(by_floor):
        print(f"floor {f}: " + ", ".join(sorted(m.removeprefix("autograd_xla.") for m in by_floor[f])))
