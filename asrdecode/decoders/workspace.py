"""Workspaces of the compiled searches (`wfst`, `wfst-otf`, `let`): named arrays in one tuple.

A compiled search keeps its tokens, back-pointers and lattice data in flat arrays that grow by
doubling and are reused from utterance to utterance (one workspace per worker thread or stream).
numba passes them as one heterogeneous tuple; a frame driver that grows an array returns the tuple
with that array replaced. The layout of each search is one field table (`WorkspaceLayout`: name
and dtype per array), from which the tuple is allocated and the field indices are taken; inside
compiled code `grow_fields` and `swap_spans` rebuild the tuple for named fields (`let`), or a frame
driver unpacks it in spans (`WorkspaceLayout.span`) once per call and rebuilds it once at the end
(`wfst`).

Hot loops take the arrays they use, never the tuple: numba adds an atomic reference count per
array of a tuple passed to a helper, and around an array reassigned inside a loop.

`grow_tensors` is the same doubling growth for the torch tensors of batched transducer hypotheses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from asrdecode.numba_status import configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)

INIT_CAPACITY = 1024


class WorkspaceLayout:
    """The arrays of one compiled search: (name, dtype) per field, in tuple order."""

    def __init__(self, *fields: tuple[str, type | np.dtype]) -> None:
        self.fields = tuple((name, np.dtype(dt)) for name, dt in fields)
        self._index = {name: i for i, (name, _) in enumerate(self.fields)}
        if len(self._index) != len(self.fields):
            raise ValueError("workspace field names must be unique")

    def __len__(self) -> int:
        return len(self.fields)

    def indices(self, *names: str) -> tuple[int, ...]:
        """The tuple positions of the named fields (the ``W_*`` constants compiled code reads)."""
        return tuple(self._index[n] for n in names)

    def span(self, first: str, last: str) -> slice:
        """The tuple positions of the adjacent fields `first`..`last`, as a slice (a module
        constant lets compiled code unpack them at once: ``a, b, c = ws[SPAN]``)."""
        return slice(self._index[first], self._index[last] + 1)

    def allocate(self, capacity: int = INIT_CAPACITY, **arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        """A new workspace: every field an empty array of `capacity`, except those given."""
        unknown = set(arrays) - set(self._index)
        if unknown:
            raise KeyError(f"not workspace fields: {sorted(unknown)}")
        return tuple(
            arrays[name] if name in arrays else np.empty(capacity, dtype=dt) for name, dt in self.fields
        )


def lattice_records(
    layout: WorkspaceLayout, arrays: tuple, n_arcs: int, n_nodes: int, n_pairs: int | None = None
) -> tuple[np.recarray, ...]:
    """Copies of a search's kept lattice arcs (``frame src dst arc ac``) and nodes (``frame state
    cost``) from its ``lat_*`` and ``node_*`` fields. With `n_pairs` (the on-the-fly searches,
    whose lattice states are (graph state, LM state) pairs) the arcs also carry the LM's share
    ``lm`` and a third record array gives each pair's ``state`` and ``lm_state``."""
    names = ["frame", "src", "dst", "arc", "ac"] + (["lm"] if n_pairs is not None else [])
    arcs = np.rec.fromarrays(
        [arrays[i][:n_arcs].copy() for i in layout.indices(*(f"lat_{n}" for n in names))], names=names
    )
    nodes = np.rec.fromarrays(
        [arrays[i][:n_nodes].copy() for i in layout.indices("node_frame", "node_state", "node_cost")],
        names=["frame", "state", "cost"],
    )
    if n_pairs is None:
        return arcs, nodes
    pairs = np.rec.fromarrays(
        [arrays[i][:n_pairs].copy() for i in layout.indices("pair_state", "pair_u")],
        names=["state", "lm_state"],
    )
    return arcs, nodes, pairs


@numba.njit(nogil=True, cache=True)
def grow(a: np.ndarray, need: int) -> np.ndarray:
    """`a` if it holds `need` elements, else a copy with (at least) twice the capacity."""
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@intrinsic
def prefetch(typingctx, array, index):
    """Hint the CPU to load ``array[index]`` into the cache (LLVM's ``llvm.prefetch``: read, high
    locality); no effect on results, never faults (an index past the end is only an address).
    The searches issue it a few tokens ahead for the graph records a token's arcs start from,
    whose loads otherwise stall at random addresses of a graph larger than the cache, and for the
    LM memo sets of those arcs' words (when `compiled.prefetch_pays`)."""
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]], wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


def _borrowable(ty: types.Type) -> bool:
    """Arrays, plain numbers and (nested) tuples of them."""
    if isinstance(ty, (types.Array, types.Number, types.Boolean)):
        return True
    return isinstance(ty, types.BaseTuple) and all(_borrowable(t) for t in ty.types)


def _borrow(context, builder, ty: types.Type, value):
    """`borrowed`'s code: every array of `value` (of type `ty`) without its meminfo."""
    if isinstance(ty, types.Array):
        src = context.make_array(ty)(context, builder, value)
        view = context.make_array(ty)(context, builder)
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        for field in ("nitems", "itemsize", "data", "shape", "strides"):
            setattr(view, field, getattr(src, field))
        return view._getvalue()
    if isinstance(ty, types.BaseTuple):
        out = value
        for i, t in enumerate(ty.types):
            out = builder.insert_value(out, _borrow(context, builder, t, builder.extract_value(value, i)), i)
        return out
    return value


@intrinsic
def borrowed(typingctx, value):
    """Views of an array, or of every array in a (nested) tuple of arrays and numbers, that numba
    counts no references of: the same data, shape and strides with no meminfo (as `numba.carray`'s
    views of foreign memory). numba counts references of the arrays an njit function takes, binds
    or passes on: an atomic add, and a release fence with an atomic subtract, around helper calls
    and in loops where its pruning cannot prove them redundant. On such a view the count is a call
    that finds no meminfo (no atomic): cheap, not free (docs/design.md). Only for arrays the
    caller holds for the whole call (a workspace's fields unpacked by a frame step, an LM's
    tables), never for one it grows, replaces or returns. (An argument rebound
    to its views keeps numba from pruning the branches on its type, such as ``lm is None``: bind
    them to a new name there.)"""
    if not _borrowable(value):
        return None

    def codegen(context, builder, signature, args):
        return _borrow(context, builder, signature.args[0], args[0])

    return value(value), codegen


def grow_tensors(holder: object, names: Sequence[str], dim: int, needed: int, fill: dict[str, int]) -> None:
    """Grow `holder`'s tensor attributes `names` along `dim` (all of one length there), doubling
    until `needed` entries fit; the content is kept, new entries are ``fill.get(name, 0)`` (the
    torch counterpart of `grow`, for host-side storage of batched hypotheses)."""
    size = getattr(holder, names[0]).shape[dim]
    if needed <= size:
        return
    new = size
    while new < needed:
        new *= 2
    for name in names:
        old = getattr(holder, name)
        shape = list(old.shape)
        shape[dim] = new
        grown = torch.full(shape, fill.get(name, 0), dtype=old.dtype, device=old.device)
        grown.narrow(dim, 0, size).copy_(old)
        setattr(holder, name, grown)


def _tuple_function(args: str, n: int, item: Callable[[int], str]) -> Callable:
    """A function ``impl(<args>)`` returning the tuple of the expressions ``item(k)``, k < n (text
    made here from constants, compiled by numba as an overload's implementation)."""
    body = ", ".join(item(k) for k in range(n))
    namespace: dict = {}
    exec(f"def impl({args}):\n    return ({body},)\n", namespace)  # noqa: S102 (our own text)
    return namespace["impl"]


def grow_fields(ws: tuple, first: int, last: int, need: int) -> tuple:
    """The workspace tuple with fields `first`..`last` (constants; adjacent in the layout) grown
    to hold `need` elements (compiled code)."""
    return (*ws[:first], *(grow(a, need) for a in ws[first : last + 1]), *ws[last + 1 :])


@overload(grow_fields, prefer_literal=True, jit_options={"nogil": True})
def _grow_fields(ws, first, last, need):
    if not isinstance(ws, types.BaseTuple):
        return None
    if not (isinstance(first, types.IntegerLiteral) and isinstance(last, types.IntegerLiteral)):
        return None
    lo, hi = first.literal_value, last.literal_value
    impl = _tuple_function(
        "ws, first, last, need", len(ws), lambda p: f"grow(ws[{p}], need)" if lo <= p <= hi else f"ws[{p}]"
    )
    impl.__globals__["grow"] = grow
    return impl


def swap_spans(ws: tuple, first: int, last: int, other: int) -> tuple:
    """The workspace tuple with fields `first`..`last` exchanged with as many fields from `other`
    (constants; e.g. the current and the next tokens' arrays), in one rebuild (compiled code)."""
    items = list(ws)
    n = last - first + 1
    items[first : last + 1], items[other : other + n] = ws[other : other + n], ws[first : last + 1]
    return tuple(items)


@overload(swap_spans, prefer_literal=True, jit_options={"nogil": True})
def _swap_spans(ws, first, last, other):
    if not isinstance(ws, types.BaseTuple):
        return None
    if not all(isinstance(x, types.IntegerLiteral) for x in (first, last, other)):
        return None
    lo, hi, at = first.literal_value, last.literal_value, other.literal_value
    where = {p: at + (p - lo) for p in range(lo, hi + 1)}
    where.update({at + (p - lo): p for p in range(lo, hi + 1)})
    return _tuple_function("ws, first, last, other", len(ws), lambda p: f"ws[{where.get(p, p)}]")
