"""tree.py: flattening containers to leaves and back, treedefs as cache keys, and
autograd's container boxes flattened as the containers they wrap (gradients still flow)."""
import collections

import autograd.numpy as anp
import numpy as onp
import pytest
from autograd import grad
from autograd.builtins import DictBox, SequenceBox
from autograd.builtins import dict as ag_dict
from autograd.builtins import list as ag_list
from autograd.builtins import tuple as ag_tuple
from autograd.tracer import Box

from autograd_xla import tree

Point = collections.namedtuple("Point", "x y")
X = onp.arange(3.0)

# label, structure, its leaves in order, describe()
STRUCTURES = [
    ("scalar", 3.5, [3.5], "*"),
    ("array", X, [X], "*"),
    ("None", None, [], "None"),
    ("empty tuple", (), [], "()"),
    ("one-tuple", (1,), [1], "(*,)"),
    ("list of scalars", [1, 2.0, 3j], [1, 2.0, 3j], "[*, *, *]"),
    ("nested", (1, [2, (3, None)], {"a": 4}), [1, 2, 3, 4], "(*, [*, (*, None)], {'a': *})"),
    ("dict keeps insertion order", {"b": 1, "a": 2, "c": [3, 4]}, [1, 2, 3, 4], "{'b': *, 'a': *, 'c': [*, *]}"),
    ("namedtuple", Point(1, [2, 3]), [1, 2, 3], "Point(*, [*, *])"),
    ("numpy's EighResult", onp.linalg.eigh(onp.eye(2)), list(onp.linalg.eigh(onp.eye(2))), "EighResult(*, *)"),
    ("strings and objects are leaves", ["s", len, slice(1, 2)], ["s", len, slice(1, 2)], "[*, *, *]"),
    ("None among leaves", [None, 1, {"k": None}], [1], "[None, *, {'k': None}]"),
]


def same(a, b):
    """Equal structure, types and leaves (arrays compared by value)."""
    if isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(b, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in b)
    if isinstance(b, onp.ndarray):
        return isinstance(a, onp.ndarray) and onp.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("label,obj,leaves,text", STRUCTURES, ids=[s[0] for s in STRUCTURES])
def test_flatten_unflatten_round_trip(label, obj, leaves, text):
    got, treedef = tree.flatten(obj)
    assert len(got) == len(leaves) and all(same(g, e) for g, e in zip(got, leaves)), label
    assert tree.num_leaves(treedef) == len(leaves), label
    assert len(tree.leaf_paths(treedef)) == len(leaves), label
    assert tree.describe(treedef) == text, label
    rebuilt = tree.unflatten(treedef, got)
    assert same(rebuilt, obj), label
    assert hash(treedef) == hash(tree.flatten(rebuilt)[1]) and tree.flatten(rebuilt)[1] == treedef
    marked = tree.unflatten(treedef, [f"leaf{i}" for i in range(len(leaves))])  # leaves land in order
    assert tree.flatten(marked)[0] == [f"leaf{i}" for i in range(len(leaves))]


def test_leaf_paths():
    _, treedef = tree.flatten({"a": [1, (2, 3)], "b": None, "c": 4, "p": Point(5, 6)})
    paths = tree.leaf_paths(treedef)
    assert paths == [("a", 0), ("a", 1, 0), ("a", 1, 1), ("c",), ("p", 0), ("p", 1)]
    assert tree.format_path(paths[1]) == "['a'][1][0]" and tree.format_path(()) == ""
    assert tree.leaf_paths(tree.flatten(7)[1]) == [()]


def treedef(obj):
    return tree.flatten(obj)[1]


def test_treedef_equality_and_hash():
    assert treedef((1, [2.0, "x"])) == treedef((onp.ones(3), [0, X]))  # leaves do not matter
    different = [treedef(x) for x in ([1, 2], (1, 2), Point(1, 2), {"x": 1, "y": 2}, {"y": 1, "x": 2}, [1, [2]],
                                       [1, None], [1, 2, 3], 1, None)]
    for i, a in enumerate(different):
        for j, b in enumerate(different):
            assert (a == b) == (i == j), (tree.describe(a), tree.describe(b))
    cache = {t: i for i, t in enumerate(different)}  # usable as cache keys
    assert len(cache) == len(different) and cache[treedef({"y": X, "x": X})] == 4


def test_unflatten_rebuilds_namedtuples_and_dicts():
    _, td = tree.flatten({"p": Point(1, 2), "l": [3]})
    out = tree.unflatten(td, [10, 20, 30])
    assert type(out["p"]) is Point and out["p"].y == 20 and out["l"] == [30] and list(out) == ["p", "l"]


def test_container_boxes_are_flattened_as_their_containers():
    seen = []

    def loss(params):
        leaves, td = tree.flatten(params)
        seen.append((type(params), td, [type(leaf) for leaf in leaves]))
        w, b, c = leaves
        return anp.sum(w ** 2) + 3.0 * b + anp.sum(anp.sin(c))

    params = {"w": [X, onp.array(2.0)], "c": (onp.array([0.5, -1.0]),)}
    got = grad(loss)(params)
    ((kind, td, leaf_types),) = seen
    assert kind is DictBox and td == treedef(params)
    assert all(issubclass(t, Box) for t in leaf_types)  # read through the box: autograd records it
    assert list(got) == ["w", "c"] and type(got["w"]) is list and type(got["c"]) is tuple
    onp.testing.assert_allclose(got["w"][0], 2 * X, rtol=1e-15)
    onp.testing.assert_allclose(got["w"][1], 3.0, rtol=1e-15)
    onp.testing.assert_allclose(got["c"][0], onp.cos(params["c"][0]), rtol=1e-15)


def test_nested_sequence_boxes():
    def f(pair):
        assert type(pair) is SequenceBox
        leaves, td = tree.flatten(pair)
        assert td == treedef(([0.0, 0.0], 0.0))
        a, b, c = leaves
        return a * b * c

    args = ([2.0, 3.0], 5.0)
    got = grad(f)(args)
    assert type(got) is tuple and type(got[0]) is list
    onp.testing.assert_allclose([got[0][0], got[0][1], got[1]], [15.0, 10.0, 6.0])
    second = grad(lambda x: grad(f)(([x, 3.0], 5.0))[0][1])(2.0)  # boxes nest: d/dx of (x * 5)
    assert second == 5.0


def test_unflatten_with_boxing():
    boxing = {list: ag_list, tuple: ag_tuple, dict: ag_dict}
    kinds = []

    def f(x):
        leaves, td = tree.flatten(([x, x * 2.0], {"k": x}))
        boxed = tree.unflatten(td, leaves, boxing)
        plain = tree.unflatten(td, leaves, boxing, plain_levels=1)
        kinds.append((type(boxed), type(plain), type(plain[0]), type(plain[1])))
        return anp.sum(anp.array(plain[0])) + boxed[1]["k"] * 3.0
    assert grad(f)(1.5) == 6.0  # d/dx (x + 2x + 3x)
    assert kinds == [(SequenceBox, tuple, SequenceBox, DictBox)]
    assert type(tree.unflatten(treedef([1]), [1.0], boxing)) is list  # nothing boxed: a plain list
