"""Container structure of arguments and results: flatten to leaves and back.

The containers are the ones autograd differentiates through (tuple, list, dict and
namedtuples such as numpy's EighResult) plus None as an empty node. A treedef is a nested
tuple, so it is hashable and cheap to compare: it is part of every cache key.

autograd's SequenceBox and DictBox are flattened as the containers they wrap; their
children are read through the box (`box[i]`), which autograd records, so gradients flow
back into the container exactly as they would through user code indexing it.
"""
from autograd.builtins import DictBox, SequenceBox
from autograd.tracer import Box, getval

LEAF = "*"


def _is_namedtuple(t):
    return issubclass(t, tuple) and hasattr(t, "_fields")


def flatten(obj):
    leaves = []
    return leaves, _flatten(obj, leaves)


def _flatten(obj, leaves):
    t = type(obj)
    if t is tuple or t is list:
        return (t, tuple([_flatten(x, leaves) for x in obj]))
    if t is dict:
        return (dict, tuple(obj), tuple([_flatten(x, leaves) for x in obj.values()]))
    if obj is None:
        return (None,)
    if t is SequenceBox:  # boxes nest (a second derivative): the container is innermost
        inner = type(getval(obj))
        return (inner, tuple([_flatten(obj[i], leaves) for i in range(len(obj))]))
    if t is DictBox:
        keys = tuple(getval(obj))
        return (dict, keys, tuple([_flatten(obj[k], leaves) for k in keys]))
    if issubclass(t, tuple) and _is_namedtuple(t):
        return (t, tuple([_flatten(x, leaves) for x in obj]))
    leaves.append(obj)
    return LEAF


def unflatten(treedef, leaves, boxing=None, plain_levels=0):
    """The structure rebuilt around `leaves`.

    `boxing` (container kind -> autograd's differentiable constructor) rebuilds a container
    that holds autograd boxes as autograd's own container box, as `grad` hands a list or dict
    argument to the function it differentiates: code that passes such a container on to a
    primitive whole (`odeint(f, y0, t, autograd.builtins.tuple((params,)))`) needs it boxed.
    The top `plain_levels` levels (an argument tuple) stay plain containers.
    """
    return _unflatten(treedef, iter(leaves), boxing, plain_levels)


def _unflatten(treedef, it, boxing=None, plain_levels=0):
    if treedef is LEAF:
        return next(it)
    kind = treedef[0]
    if kind is None:
        return None
    below = max(plain_levels - 1, 0)
    children = [_unflatten(c, it, boxing, below) for c in treedef[-1]]
    if boxing and not plain_levels and kind in boxing and any(isinstance(c, Box) for c in children):
        return boxing[kind](dict(zip(treedef[1], children)) if kind is dict else children)
    if kind is dict:
        return dict(zip(treedef[1], children))
    if kind is tuple or kind is list:
        return kind(children)
    return kind(*children)


def leaf_paths(treedef, prefix=()):
    """Key path of every leaf (a tuple of indices and dict keys), for error messages."""
    if treedef is LEAF:
        return [prefix]
    kind = treedef[0]
    if kind is None:
        return []
    if kind is dict:
        return [p for k, c in zip(treedef[1], treedef[2]) for p in leaf_paths(c, prefix + (k,))]
    return [p for i, c in enumerate(treedef[1]) for p in leaf_paths(c, prefix + (i,))]


def sequences_only(treedef):
    """Whether a structure is made of tuples, lists and None only: one that jaxlib's C++
    pytrees flatten to the same leaves in the same order (they sort a dict's keys)."""
    if treedef is LEAF:
        return True
    kind = treedef[0]
    return kind is None or (kind is tuple or kind is list) and all(map(sequences_only, treedef[1]))


def keys_sort(treedef):
    """Whether every dict's keys in a structure can be sorted (jaxlib's C++ pytrees sort them)."""
    if treedef is LEAF or treedef[0] is None:
        return True
    if treedef[0] is dict:
        try:
            sorted(treedef[1])
        except TypeError:
            return False
    return all(map(keys_sort, treedef[-1]))


def format_path(keys):
    return "".join(f"[{k!r}]" for k in keys)


def num_leaves(treedef):
    if treedef is LEAF:
        return 1
    if treedef[0] is None:
        return 0
    children = treedef[2] if treedef[0] is dict else treedef[1]
    return sum(num_leaves(c) for c in children)


def first_difference(a, b, prefix=()):
    """(key path, a's part, b's part) where structures `a` and `b` first differ, or None."""
    if a == b:
        return None
    if a is LEAF or b is LEAF or a[0] is not b[0] or a[0] is None or len(a[-1]) != len(b[-1]) or a[1:-1] != b[1:-1]:
        return prefix, a, b
    keys = a[1] if a[0] is dict else range(len(a[1]))
    return next(found for k, x, y in zip(keys, a[-1], b[-1]) for found in [first_difference(x, y, prefix + (k,))]
                if found is not None)


def describe(treedef):
    """Short human form of a structure, for recompile warnings."""
    if treedef is LEAF:
        return "*"
    kind = treedef[0]
    if kind is None:
        return "None"
    if kind is dict:
        return "{" + ", ".join(f"{k!r}: {describe(c)}" for k, c in zip(treedef[1], treedef[2])) + "}"
    inner = ", ".join(describe(c) for c in treedef[1])
    if kind is list:
        return f"[{inner}]"
    if kind is tuple:
        return f"({inner}{',' if len(treedef[1]) == 1 else ''})"
    return f"{kind.__name__}({inner})"
