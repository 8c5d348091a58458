"""Batching at the level of the builder: vmap's interpreter.

A vmapped function is traced once, for one example. Its graph is then lowered by the usual
interpreter (`lowering.lower_subgraph`) and the usual translation rules, into a
`BatchingContext` instead of a plain `LoweringContext`. Translation rules compute with
`Value`s of the example's shapes and never learn that a batch exists: the context holds, for
each value, whether it varies across the batch (a `BatchedValue`, whose physical value
carries the batch as its leading axis) or not (a plain Value, computed once), and each
builder op is emitted on the physical values with the batch axis added to its dimension
numbers. So every primitive with a translation rule batches, user rules included, with no
rule of its own: about thirty builder ops have a batching rule here instead of 216
primitives.

Ops of the builder are batched this way (the batch axis is always physical axis 0):

* elementwise ops and those that act on trailing axes (fft, cholesky, triangular_solve,
  top_k, LAPACK and XLA's own custom calls, which loop over leading axes): the batch
  axis is prepended to every operand, those not batched being broadcast;
* shape ops, dot_general, reduce, reduce_window, sort, concatenate, pad: the dimension
  numbers are shifted by one; a dot keeps an operand that is not batched as it is;
* gather and scatter use StableHLO's batching dimensions when both the operand and the
  indices are batched; dynamic_slice / dynamic_update_slice with batched starts become a
  gather / scatter;
* while: the carry slots that become batched are found by a fixed point over the body;
  a batched predicate loops until every example is done, finished examples kept by a
  select; case with a batched index computes every branch and selects per example.

Any other op with a batched operand runs once per example in a loop inside the program
(`_per_example`), with one warning per op: correct, and slower.

Nested vmaps nest contexts: a BatchingContext's parent may be another one, whose values
the inner context treats as unbatched, emitting through the parent's own ops.
"""
import warnings

import numpy as np

from . import blas, hlo, ufunc_loops
from .context import REDUCTIONS, LoweringContext, collective_reduction, gathered_layout
from .errors import FallbackWarning


class BatchedValue(hlo.Value):
    """A value of the example being computed that differs across the batch of `level` (a
    BatchingContext's): `shape` is an example's, `phys` the batch of them (batch axis first)."""

    __slots__ = ("phys", "level")

    def __init__(self, phys, level, weak_type=False):
        self.phys, self.level = phys, level
        self.name = phys.name
        self.shape = tuple(phys.shape[1:])
        self.dtype = phys.dtype
        self.weak_type = weak_type

    def with_weak_type(self, weak):
        return BatchedValue(self.phys, self.level, weak)

    def as_dtype(self, dtype):
        return BatchedValue(self.phys.as_dtype(dtype), self.level, self.weak_type)

    def __repr__(self):
        return f"{self.name}: batched {self.type}"

    __str__ = __repr__


#: Elementwise ops: operands are broadcast to the result's shape, with the batch axis first.
ELEMENTWISE = frozenset({f"stablehlo.{n}" for n in hlo.UNARY_OPS | hlo.BINARY_OPS}
                        | {f"chlo.{n}" for n in hlo.CHLO_OPS - {"top_k"}}
                        | {f"stablehlo.{n}" for n in ("compare", "select", "convert", "bitcast_convert", "real",
                                                      "imag", "complex", "clamp", "reduce_precision")})
#: Ops that act on trailing axes and treat leading ones as a batch (attributes unchanged).
LEADING_BATCH = frozenset({"stablehlo.fft", "stablehlo.cholesky", "stablehlo.triangular_solve", "chlo.top_k",
                           "stablehlo.optimization_barrier"})
#: Custom calls that loop over leading axes: jaxlib's LAPACK kernels and XLA's own; and the
#: elementwise ufunc loops (ufunc_loops.py), which any axes suit.
LEADING_BATCH_TARGETS = ("lapack_", blas.SERIAL + "lapack_", "Qr", "ProductOfElementaryHouseholderReflectors",
                         ufunc_loops.PREFIX)

_warned_ops = set()


def reset_warnings():
    """Warn again about ops run per example (the warning comes once per op and process)."""
    _warned_ops.clear()


def _warn_per_example(what):
    if what not in _warned_ops:
        _warned_ops.add(what)
        warnings.warn(f"vmap: {what} has no batching rule, so it runs once per example in a loop inside the "
                      "compiled program (correct, but slower than a batched op)", FallbackWarning, stacklevel=3)


class BatchingContext(LoweringContext):
    """The ctx of translation rules lowered for a batch of `size` examples; emits through
    `parent` (the context around the vmap: a LoweringContext, or another BatchingContext)."""

    def __init__(self, parent, size, level=None, axis_name=None):  # the Builder's state lives in the parent
        self.parent, self.size, self.module, self.axis_name = parent, size, parent.module, axis_name
        # what marks this vmap's values: shared by the contexts of its regions (loop bodies,
        # branches), which compute with values of the block around them
        self.level = level if level is not None else object()

    # ----- plumbing: everything is emitted into the parent -----------------------------------
    @property
    def lines(self):
        return self.parent.lines

    @property
    def location(self):
        return self.parent.location

    @location.setter
    def location(self, value):
        self.parent.location = value

    @property
    def _transposed(self):
        return self.parent._transposed

    @property
    def _depth(self):  # the nesting of the block emitted into: special_kernels picks the innermost builder by it
        return self.parent._depth

    def fresh_name(self, prefix="%"):
        return self.parent.fresh_name(prefix)

    def emit(self, line):
        self.parent.emit(line)

    def child(self):
        return self.inside(self.parent.child())

    def inside(self, builder):
        """This vmap's context emitting into `builder` (a region of the parent's)."""
        return BatchingContext(builder, self.size, self.level, self.axis_name)

    def region(self, arg_types, body, trips=1):
        return self.parent.region(arg_types, lambda b, *args: body(self.inside(b), *args), trips)

    def rule(self, entry):
        """A primitive's batching rule when it has one (registry.register_batching_rule),
        else its translation rule, batched op by op."""
        return entry.batching or entry.lowering

    # ----- batched values ----------------------------------------------------------------
    def batched(self, v):
        return type(v) is BatchedValue and v.level is self.level

    def wrap(self, phys, weak=False):
        return BatchedValue(phys, self.level, weak)

    def physical(self, v, shape=None):
        """The batch of `v` (broadcast across the batch when it is not batched), with each
        example broadcast to `shape` when given (a scalar operand of an elementwise op)."""
        if self.batched(v):
            p = v.phys
            if shape is not None and tuple(shape) != v.shape:
                p = self.parent.broadcast_in_dim(p, (self.size,) + tuple(shape),
                                                 (0,) + tuple(range(1 + len(shape) - v.ndim, 1 + len(shape))))
            return p
        shape = v.shape if shape is None else tuple(shape)
        return self.parent.broadcast_in_dim(v, (self.size,) + shape, range(1 + len(shape) - v.ndim, 1 + len(shape)))

    def _any(self, values):
        return any(self.batched(v) for v in values)

    # ----- the generic op ------------------------------------------------------------------
    def op(self, name, operands, results, attrs=None, regions=()):
        operands = list(operands)
        if not self._any(operands):
            return self.parent.op(name, operands, results, attrs, regions)
        n = self.size
        if name in ELEMENTWISE:
            shape = tuple(results[0][0])
            phys = [self.physical(v, shape) for v in operands]
        elif name in LEADING_BATCH:
            phys = [self.physical(v) for v in operands]
        elif name == "stablehlo.convolution" and self._convolution_batches(operands, attrs):
            return [self._convolution(operands, results, attrs)]
        else:
            return self._per_example(name, operands, results, attrs, regions)
        outs = self.parent.op(name, phys, [((n,) + tuple(s), d) for s, d in results], attrs, regions)
        return [self.wrap(o) for o in outs]

    def _convolution_batches(self, operands, attrs):
        """Whether a convolution is batched as one convolution: rules/signal.py's form (batch
        dimension 0 in the input and the result, one feature group, no batch groups)."""
        dims = attrs.get("dimension_numbers", "")
        return (dims.startswith("#stablehlo.conv<[b,") and "->[b," in dims and attrs.get("batch_group_count") == "1 : i64"
                and attrs.get("feature_group_count") == "1 : i64")

    def _convolution(self, operands, results, attrs):
        """An input batched alone: its batch merged into the convolution's. A batched kernel:
        the examples' kernels stacked as output features, and where the input is batched too,
        each example's input features a feature group of its own (one convolution where a GPU
        had run one per example: XLA:CPU's float64 convolutions are dots, rules/signal.py)."""
        lhs, rhs = operands
        (shape, dtype), = results
        n, p = self.size, self.parent
        if not self.batched(rhs):
            merged = p.reshape(lhs.phys, (n * lhs.shape[0],) + lhs.shape[1:])
            out = p.op1("stablehlo.convolution", [merged, rhs], (n * shape[0],) + tuple(shape[1:]), dtype, attrs)
            return self.wrap(p.reshape(out, (n,) + tuple(shape)))
        (b, o), spatial = shape[:2], tuple(shape[2:])
        kernels = p.reshape(rhs.phys, (n * o,) + rhs.shape[1:])
        if self.batched(lhs):  # [n, b, f, ...] -> [b, n * f, ...], example k's features the k-th group
            x = p.transpose(lhs.phys, [1, 0] + list(range(2, lhs.ndim + 1)))
            lhs = p.reshape(x, (b, n * lhs.shape[1]) + lhs.shape[2:])
            attrs = dict(attrs, feature_group_count=f"{n} : i64")
        out = p.op1("stablehlo.convolution", [lhs, kernels], (b, n * o) + spatial, dtype, attrs)
        out = p.reshape(out, (b, n, o) + spatial)
        return self.wrap(p.transpose(out, [1, 0] + list(range(2, 3 + len(spatial)))))

    def _per_example(self, name, operands, results, attrs, regions):
        """The op once per example, in a loop inside the program."""
        _warn_per_example(f"'{name}'")

        def one(b, *example):
            return b.op(name, example, results, attrs, regions)
        return self.map_examples(one, operands, results)

    def map_examples(self, fn, operands, results):
        """`fn(builder, *operands of one example) -> Values` (of `results`' (shape, dtype)),
        run for each example in a stablehlo.while; the results are batched."""
        n, p = self.size, self.parent
        i32 = np.dtype(np.int32)
        accs = [p.full((n,) + tuple(s), 0, d) for s, d in results]

        def cond(b, i, *carry):
            return b.compare(i, b.scalar(n, i32), "LT")

        def body(b, i, *carry):
            zero = b.scalar(0, i32)
            example = []
            for v in operands:
                if self.batched(v):
                    piece = b.dynamic_slice(v.phys, [i] + [zero] * v.ndim, (1,) + v.shape)
                    example.append(b.reshape(piece, v.shape))
                else:
                    example.append(v)
            outs = fn(b, *example)
            new = [b.dynamic_update_slice(acc, b.reshape(o, (1,) + o.shape), [i] + [zero] * o.ndim)
                   for acc, o in zip(carry, outs)]
            return [b.binary("add", i, b.scalar(1, i32))] + new

        outs = p.while_loop([p.scalar(0, i32)] + accs, cond, body)[1:]
        return [self.wrap(o) for o in outs]

    # ----- shapes --------------------------------------------------------------------------
    def broadcast_in_dim(self, x, shape, dims):
        if not self.batched(x):
            return self.parent.broadcast_in_dim(x, shape, dims)
        return self.wrap(self.parent.broadcast_in_dim(x.phys, (self.size,) + tuple(shape),
                                                      (0,) + tuple(d + 1 for d in dims)))

    def reshape(self, x, shape):
        if not self.batched(x):
            return self.parent.reshape(x, shape)
        return self.wrap(self.parent.reshape(x.phys, (self.size,) + tuple(shape)))

    def transpose(self, x, perm):
        if not self.batched(x):
            return self.parent.transpose(x, perm)
        return self.wrap(self.parent.transpose(x.phys, (0,) + tuple(p + 1 for p in perm)))

    def slice(self, x, starts, limits, strides=None):
        if not self.batched(x):
            return self.parent.slice(x, starts, limits, strides)
        strides = list(strides or [1] * x.ndim)
        return self.wrap(self.parent.slice(x.phys, [0] + list(starts), [self.size] + list(limits), [1] + strides))

    def reverse(self, x, dims):
        if not self.batched(x):
            return self.parent.reverse(x, dims)
        return self.wrap(self.parent.reverse(x.phys, [d + 1 for d in dims]))

    def concatenate(self, xs, dimension):
        if not self._any(xs):
            return self.parent.concatenate(xs, dimension)
        return self.wrap(self.parent.concatenate([self.physical(x) for x in xs], dimension + 1))

    def pad(self, x, value, low, high, interior=None):
        if self.batched(value):
            return self._per_example_method(lambda b, x, v: b.pad(x, v, low, high, interior), [x, value])
        if not self.batched(x):
            return self.parent.pad(x, value, low, high, interior)
        interior = list(interior or [0] * x.ndim)
        return self.wrap(self.parent.pad(x.phys, value, [0] + list(low), [0] + list(high), [0] + interior))

    def _per_example_method(self, fn, operands):
        """A builder method run once per example (operands it cannot batch, such as a batched
        padding value or reduction start): its result types come from a trial build."""
        trial = self.parent.child()
        example = [o.phys if self.batched(o) else o for o in operands]
        example = [trial.reshape(trial.slice(p, [0] * p.ndim, (1,) + p.shape[1:]), p.shape[1:]) if self.batched(o)
                   else p for o, p in zip(operands, example)]
        outs = fn(trial, *example)
        single = not isinstance(outs, (list, tuple))
        results = [(o.shape, o.dtype) for o in ([outs] if single else outs)]
        mapped = self.map_examples(lambda b, *ex: [fn(b, *ex)] if single else fn(b, *ex), operands, results)
        return mapped[0] if single else mapped

    # ----- dynamic slices ----------------------------------------------------------------
    def _index_vector(self, starts):
        """The traced starts as one index vector (batched), of a common integer type."""
        dtype = np.result_type(*[s.dtype for s in starts])
        return self.concatenate([self.reshape(self.convert(s, dtype), (1,)) for s in starts], 0)

    def dynamic_slice(self, x, starts, sizes):
        starts = list(starts)
        if self._any(starts):  # a gather, which clamps its starts as dynamic_slice does
            idx = self._index_vector(starts)
            nd = x.ndim
            return self.gather(x, idx, list(range(nd)), [], list(range(nd)), 0, sizes, tuple(sizes))
        if not self.batched(x):
            return self.parent.dynamic_slice(x, starts, sizes)
        zero = self.parent.scalar(0, starts[0].dtype if starts else np.int32)
        return self.wrap(self.parent.dynamic_slice(x.phys, [zero] + starts, (self.size,) + tuple(sizes)))

    def dynamic_update_slice(self, x, update, starts):
        starts = list(starts)
        if self._any(starts):  # a scatter; it drops an update out of bounds, so clamp as dynamic_update_slice does
            clamped = []
            for s, d, u in zip(starts, x.shape, update.shape):
                clamped.append(self.clamp(self.scalar(0, s.dtype), s, self.scalar(d - u, s.dtype)))
            idx = self._index_vector(clamped)
            nd = x.ndim
            return self.scatter(x, idx, update, list(range(nd)), [], list(range(nd)), 0,
                                lambda b, old, new: new)
        if not self._any([x, update]):
            return self.parent.dynamic_update_slice(x, update, starts)
        zero = self.parent.scalar(0, starts[0].dtype if starts else np.int32)
        return self.wrap(self.parent.dynamic_update_slice(self.physical(x), self.physical(update), [zero] + starts))

    # ----- contractions and reductions ------------------------------------------------------
    def dot_general(self, x, y, contracting, batching=((), ()), dtype=None):
        bx, by = self.batched(x), self.batched(y)
        if not (bx or by):
            return self.parent.dot_general(x, y, contracting, batching, dtype)
        (lc, rc), (lb, rb) = [list(c) for c in contracting], [list(b) for b in batching]
        p = self.parent
        if bx and by:
            out = p.dot_general(x.phys, y.phys, ([c + 1 for c in lc], [c + 1 for c in rc]),
                                ([0] + [b + 1 for b in lb], [0] + [b + 1 for b in rb]), dtype)
            return self.wrap(out)
        if bx:
            out = p.dot_general(x.phys, y, ([c + 1 for c in lc], rc), ([b + 1 for b in lb], rb), dtype)
            axis = len(lb)  # the batch leads x's free dimensions
        else:
            out = p.dot_general(x, y.phys, (lc, [c + 1 for c in rc]), (lb, [b + 1 for b in rb]), dtype)
            axis = x.ndim - len(lc)  # after the dot's batch dimensions and x's free ones
        return self.wrap(to_front(p, out, axis))

    def reduce(self, operands, inits, dims, body):
        operands, inits = list(operands), list(inits)
        if self._any(inits):
            k = len(operands)
            return self._per_example_method(lambda b, *ops: b.reduce(ops[:k], ops[k:], dims, body), operands + inits)
        if not self._any(operands):
            return self.parent.reduce(operands, inits, dims, body)
        phys = [self.physical(v) for v in operands]
        return [self.wrap(o) for o in self.parent.reduce(phys, inits, [d + 1 for d in dims], body)]

    def reduce_window(self, operands, inits, window, strides, padding, body):
        operands, inits = list(operands), list(inits)
        if self._any(inits):
            k = len(operands)
            return self._per_example_method(
                lambda b, *ops: b.reduce_window(ops[:k], ops[k:], window, strides, padding, body), operands + inits)
        if not self._any(operands):
            return self.parent.reduce_window(operands, inits, window, strides, padding, body)
        phys = [self.physical(v) for v in operands]
        outs = self.parent.reduce_window(phys, inits, [1] + list(window), [1] + list(strides),
                                         [(0, 0)] + [tuple(q) for q in padding], body)
        return [self.wrap(o) for o in outs]

    def sort(self, operands, dimension, comparator, stable=True):
        operands = list(operands)
        if not self._any(operands):
            return self.parent.sort(operands, dimension, comparator, stable)
        outs = self.parent.sort([self.physical(v) for v in operands], dimension + 1, comparator, stable)
        return [self.wrap(o) for o in outs]

    # ----- gather / scatter -----------------------------------------------------------------
    def gather(self, x, indices, offset_dims, collapsed, start_index_map, index_vector_dim, slice_sizes, shape,
               batching=((), ())):
        bx, bi = self.batched(x), self.batched(indices)
        if not (bx or bi):
            return self.parent.gather(x, indices, offset_dims, collapsed, start_index_map, index_vector_dim,
                                      slice_sizes, shape, batching)
        ob, ib = list(batching[0]), list(batching[1])
        up = [d + 1 for d in offset_dims]
        shape = (self.size,) + tuple(shape)
        if bx and not bi:  # the batch is one more slice dimension, taken whole
            out = self.parent.gather(x.phys, indices, [0] + up, [c + 1 for c in collapsed],
                                     [s + 1 for s in start_index_map], index_vector_dim, (self.size,) + tuple(slice_sizes),
                                     shape, ([b + 1 for b in ob], ib))
        elif bi and not bx:  # the batch is one more index dimension: it leads the output's
            out = self.parent.gather(x, indices.phys, up, collapsed, start_index_map, index_vector_dim + 1,
                                     slice_sizes, shape, (ob, [b + 1 for b in ib]))
        else:
            out = self.parent.gather(x.phys, indices.phys, up, [c + 1 for c in collapsed],
                                     [s + 1 for s in start_index_map], index_vector_dim + 1, (1,) + tuple(slice_sizes),
                                     shape, ([0] + [b + 1 for b in ob], [0] + [b + 1 for b in ib]))
        return self.wrap(out)

    def scatter(self, x, indices, updates, window_dims, inserted, to_operand, index_vector_dim, combine,
                batching=((), ())):
        if not self._any([x, indices, updates]):
            return self.parent.scatter(x, indices, updates, window_dims, inserted, to_operand, index_vector_dim,
                                       combine, batching)
        ob, ib = list(batching[0]), list(batching[1])
        xp, up = self.physical(x), self.physical(updates)
        if not self.batched(indices):  # the batch is one more window dimension, updated whole
            out = self.parent.scatter(xp, indices, up, [0] + [w + 1 for w in window_dims], [d + 1 for d in inserted],
                                      [d + 1 for d in to_operand], index_vector_dim, combine,
                                      ([b + 1 for b in ob], ib))
        else:
            out = self.parent.scatter(xp, indices.phys, up, [w + 1 for w in window_dims], [d + 1 for d in inserted],
                                      [d + 1 for d in to_operand], index_vector_dim + 1, combine,
                                      ([0] + [b + 1 for b in ob], [0] + [b + 1 for b in ib]))
        return self.wrap(out)

    def custom_call(self, target, operands, results, backend_config=None, api_version=4, layouts=None,
                    extra=None):
        operands = list(operands)
        if not self._any(operands):
            return self.parent.custom_call(target, operands, results, backend_config, api_version, layouts, extra)
        if not target.startswith(LEADING_BATCH_TARGETS):
            _warn_per_example(f"custom call '{target}'")

            def one(b, *example):
                return b.custom_call(target, example, results, backend_config, api_version, layouts, extra)
            return self.map_examples(one, operands, results)
        if layouts is not None:  # the batch is the slowest-varying dimension of every operand and result
            layouts = tuple([tuple(d + 1 for d in layout) + (0,) for layout in side] for side in layouts)
        outs = self.parent.custom_call(target, [self.physical(v) for v in operands],
                                       [((self.size,) + tuple(s), d) for s, d in results], backend_config,
                                       api_version, layouts, extra)
        return [self.wrap(o) for o in outs]

    # ----- control flow ---------------------------------------------------------------------
    def _trial(self, fn, values, batched):
        """Which results of `fn(ctx, *values)` are batched when the values flagged in `batched`
        are: built into a block that is thrown away."""
        scratch = self.child()
        given = [(v if self.batched(v) else scratch.wrap(scratch.physical(v))) if b else v
                 for v, b in zip(values, batched)]
        outs = fn(scratch, *given)
        return [self.batched(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]

    def while_loop(self, inits, cond, body):
        inits = list(inits)
        # the batched slots: those whose initial value is, those the body makes so (a fixed
        # point), and all of them when the predicate is batched
        batched = [self.batched(v) for v in inits]
        while True:
            pred = self._trial(cond, inits, batched)[0]
            grown = [b or o or pred for b, o in zip(batched, self._trial(body, inits, batched))]
            if grown == batched:
                break
            batched = grown
        if not any(batched):
            return self.parent.while_loop(inits, lambda b, *c: cond(self.inside(b), *c),
                                          lambda b, *c: body(self.inside(b), *c))

        def values(b, carry):
            ctx = self.inside(b)
            return ctx, [ctx.wrap(c) if k else c for c, k in zip(carry, batched)]

        def cond_phys(b, *carry):
            ctx, carry = values(b, carry)
            going = cond(ctx, *carry)
            # a batched predicate: loop until every example is done
            return b.reduce_with(going.phys, [0], "or", False) if ctx.batched(going) else going

        def body_phys(b, *carry):
            ctx, carry = values(b, carry)
            new = body(ctx, *carry)
            if pred:  # examples already done keep their carry
                going = cond(ctx, *carry)
                new = [ctx.select(ctx.broadcast_in_dim(going, v.shape, ()), n, v) for n, v in zip(new, carry)]
            return [ctx.physical(v) if k else v for v, k in zip(new, batched)]

        outs = self.parent.while_loop([self.physical(v) if k else v for v, k in zip(inits, batched)],
                                      cond_phys, body_phys)
        return [self.wrap(o) if k else o for o, k in zip(outs, batched)]

    def case(self, index, branches, result_types):
        n = self.size
        if self.batched(index):  # every branch, then per example the one its index picks
            outs = [list(branch(self)) for branch in branches]
            chosen = outs[-1]  # an index out of range picks the last branch, as stablehlo.case does
            for k in range(len(branches) - 2, -1, -1):
                hit = self.compare(index, self.scalar(k, index.dtype), "EQ")
                chosen = [self.select(self.broadcast_in_dim(hit, a.shape, ()), a, b) for a, b in zip(outs[k], chosen)]
            return chosen
        batched = [False] * len(result_types)
        for branch in branches:
            batched = [b or o for b, o in zip(batched, self._trial(lambda ctx: branch(ctx), [], []))]

        def branch_phys(branch):
            def run(b):
                ctx = self.inside(b)
                return [ctx.physical(v) if k else v for v, k in zip(branch(ctx), batched)]
            return run

        types = [((n,) + tuple(s), d) if k else (s, d) for (s, d), k in zip(result_types, batched)]
        outs = self.parent.case(index, [branch_phys(br) for br in branches], types)
        return [self.wrap(o) if k else o for o, k in zip(outs, batched)]

    # ----- collectives over the batch (vmap's axis_name) ------------------------------------
    def collective(self, kind, x, axis_name, **params):
        """A collective over this vmap's examples when `axis_name` is its axis; else the
        parent's (a pmap's devices, an outer vmap's examples), applied to the whole batch."""
        n, p = self.size, self.parent
        if axis_name != self.axis_name or axis_name is None:
            if kind == "axis_index" or not self.batched(x):
                return p.collective(kind, x, axis_name, **params)
            if kind == "all_gather":  # gathered behind the batch axis
                params = dict(params, axis=params["axis"] + 1)
            return self.wrap(p.collective(kind, x.phys, axis_name, **params))
        if kind == "axis_index":
            return self.wrap(p.iota((n,), np.int32, 0))
        if kind in REDUCTIONS:
            op, identity = collective_reduction(kind, x.dtype)
            if not self.batched(x):  # the same value in every example
                return p.binary("multiply", x, p.full(x.shape, n, x.dtype)) if op == "add" else x
            return p.reduce_with(x.phys, [0], op, identity)
        if kind == "all_gather":
            return gathered_layout(p, self.physical(x), params["axis"], params["tiled"])
        if kind == "ppermute":
            sources = dict((int(t), int(s)) for s, t in params["perm"])
            phys = self.physical(x)
            idx = np.array([[sources.get(t, 0)] for t in range(n)], dtype=np.int32)
            moved = p.gather(phys, p.const(idx), list(range(1, phys.ndim)), [0], [0], 1, (1,) + x.shape, phys.shape)
            keep = np.array([t in sources for t in range(n)])
            mask = p.broadcast_in_dim(p.const(keep), phys.shape, (0,))
            return self.wrap(p.select(mask, moved, p.zeros_like(moved)))
        raise ValueError(f"unknown collective {kind!r}")


def to_front(ctx, v, axis):
    """`v` with its axis `axis` moved to the front (a vmap's mapped argument)."""
    if axis == 0:
        return v
    return ctx.transpose(v, [axis] + [d for d in range(v.ndim) if d != axis])


def from_front(ctx, v, axis):
    """`v` with its leading axis moved to position `axis` (a vmap's result)."""
    if axis == 0:
        return v
    rest = list(range(1, v.ndim))
    return ctx.transpose(v, rest[:axis] + [0] + rest[axis:])
