"""Analysis of the blocks of a schedule's program: what the sketch rules' conditions are computed from.

Everything here looks at iteration kinds, buffer access patterns and producer/consumer edges; the only
expression facts are whether a body selects (if_then_else) and whether it calls a costly math function.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym import Analyzer

from .unchecked import raw_schedule

SPATIAL = 0
REDUCE = 2


_INDEX_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod)
_get_sblock_realize = tvm.get_global_func("s_tir.schedule.GetSBlockRealize")


def vars_in(expr: object) -> set[str]:
    """Names of the variables an index expression reads."""
    names: set[str] = set()
    _collect_vars(expr, names)
    return names


def _collect_vars(expr: object, names: set[str]) -> None:
    # Block bindings are sums and products of loop variables; walking those directly is several times
    # cheaper than a generic structural walk, which remains the fallback.
    if isinstance(expr, tirx.Var):
        names.add(expr.name)
    elif isinstance(expr, _INDEX_ARITH):
        _collect_vars(expr.a, names)
        _collect_vars(expr.b, names)
    elif not isinstance(expr, tirx.IntImm):
        tvm_ffi.structural_walk(expr, [(tirx.Var, lambda v: names.add(v.name))], order="pre")


def _product(values: list[int]) -> int:
    return reduce(lambda a, b: a * b, values, 1)


@dataclass(frozen=True)
class Access:
    """One buffer a block reads or writes, with the block iterators its region depends on."""

    buffer: str
    iter_vars: frozenset[str]
    index: tuple[str | None, ...]  # per dimension: the iterator if the region is exactly that point, else None


@dataclass(frozen=True)
class BlockInfo:
    """What the rules need to know about one block of the current program."""

    name: str
    spatial: tuple[tuple[str, int], ...]
    reduce: tuple[tuple[str, int], ...]
    reads: tuple[Access, ...]
    writes: tuple[Access, ...]
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    is_output: bool
    has_init: bool
    other_iters: int  # iterators that are neither spatial nor reduction (scan, opaque)
    conditional: bool = False  # the body selects with if_then_else (padding): inlining it puts a guard in the consumer
    costly_math: bool = False  # calls exp, log, tanh, erf, ...: inlined into k consumers it is computed k times

    @property
    def space_extent(self) -> int:
        return _product([e for _, e in self.spatial])

    @property
    def reduce_extent(self) -> int:
        return _product([e for _, e in self.reduce])

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduce)

    @property
    def is_spatial(self) -> bool:
        return not self.reduce and self.other_iters == 0

    def has_data_reuse(self) -> bool:
        """A read region misses some spatial iterator: the same input elements serve several outputs."""
        if not self.is_reduction or self.other_iters:
            return False
        spatial_names = {n for n, e in self.spatial if e > 1}
        if len(spatial_names) < 1:
            return False
        return any(
            (spatial_names - acc.iter_vars) and (acc.iter_vars & {n for n, _ in self.reduce})
            for acc in self.reads
            if acc.buffer not in {w.buffer for w in self.writes}
        )

    def is_elementwise_of(self, producer: BlockInfo) -> bool:
        """This block reads `producer`'s output at the same index it writes (a fusible consumer)."""
        if not self.is_spatial or len(self.writes) != 1 or len(producer.writes) != 1:
            return False
        if self.space_extent != producer.space_extent:
            return False
        out_buffer = producer.writes[0].buffer
        reads = [a for a in self.reads if a.buffer == out_buffer]
        if len(reads) != 1 or None in reads[0].index:
            return False
        return reads[0].index == self.writes[0].index


def block_names(sch: s_tir.Schedule) -> list[str]:
    """Names of all blocks of the program (excluding the root), in program order."""
    names: list[str] = []

    def on_block(block: s_tir.SBlock) -> None:
        if block.name_hint != "root":
            names.append(block.name_hint)

    tvm_ffi.structural_walk(sch.mod["main"], [(s_tir.SBlock, on_block)], order="pre")
    return names


def output_buffers(sch: s_tir.Schedule) -> set[str]:
    """Names of the buffers the function writes that are parameters (its outputs)."""
    params = {p.name for p in sch.mod["main"].params}
    written: set[str] = set()

    def on_block(block: s_tir.SBlock) -> None:
        for w in block.writes:
            written.add(w.source.name)

    tvm_ffi.structural_walk(sch.mod["main"], [(s_tir.SBlock, on_block)], order="pre")
    return params & written


def analyze_block(sch: s_tir.Schedule, name: str, outputs: set[str] | None = None) -> BlockInfo:
    """Build the `BlockInfo` of block `name` in the schedule's current program."""
    rv = sch.get_sblock(name)
    block = sch.get(rv)
    outputs = output_buffers(sch) if outputs is None else outputs
    spatial, red, other = [], [], 0
    for iv in block.iter_vars:
        extent = int(iv.dom.extent)
        if int(iv.iter_type) == SPATIAL:
            spatial.append((iv.var.name, extent))
        elif int(iv.iter_type) == REDUCE:
            red.append((iv.var.name, extent))
        else:
            other += 1

    def accesses(regions: list) -> tuple[Access, ...]:
        out = []
        for r in regions:
            used: set[str] = set()
            index: list[str | None] = []
            for rng in r.region:
                used |= vars_in(rng.min)
                used |= vars_in(rng.extent)
                point = isinstance(rng.min, tirx.Var) and isinstance(rng.extent, tirx.IntImm)
                index.append(rng.min.name if point and int(rng.extent) == 1 else None)
            out.append(Access(r.source.name, frozenset(used), tuple(index)))
        return tuple(out)

    writes = accesses(block.writes)
    return BlockInfo(
        name=name,
        spatial=tuple(spatial),
        reduce=tuple(red),
        reads=accesses(block.reads),
        writes=writes,
        producers=tuple(sch.get(b).name_hint for b in sch.get_producers(rv)),
        consumers=tuple(sch.get(b).name_hint for b in sch.get_consumers(rv)),
        is_output=any(w.buffer in outputs for w in writes),
        has_init=block.init is not None,
        other_iters=other,
        conditional=_calls_any(block.body, _IF_THEN_ELSE),
        costly_math=_calls_any(block.body, *_COSTLY_MATH),
    )


_IF_THEN_ELSE = "if_then_else"
# math intrinsics that cost tens of cycles per element (a polynomial or a library call), unlike + - * / max;
# TVM registers some as tirx.* and some as prim.*, so they are matched by the last part of the name
_COSTLY_MATH = ("exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "tanh", "sigmoid", "erf", "pow", "sin",
                "cos", "tan", "atan", "sinh", "cosh", "asin", "acos")


def _calls_any(body: object, *names: str) -> bool:
    """The body calls an operator whose name (without its namespace) is one of `names`."""
    found = False

    def on_call(call: tvm.ir.Call) -> None:
        nonlocal found
        if not found and isinstance(call.op, tvm.ir.Op):
            found = call.op.name.rsplit(".", 1)[-1] in names

    tvm_ffi.structural_walk(body, [(tvm.ir.Call, on_call)], order="pre")
    return found


def _bindings(sch: s_tir.Schedule, name: str) -> list[tuple[str, int, set[str]]]:
    """(iterator, iterator type, loop variables in its binding) for each iterator of block `name`."""
    realize = _get_sblock_realize(raw_schedule(sch), sch.get_sblock(name))
    return [(iv.var.name, int(iv.iter_type), vars_in(val))
            for iv, val in zip(realize.block.iter_vars, realize.iter_values, strict=True)]


def iter_var_loops(sch: s_tir.Schedule, name: str) -> dict[str, set[str]]:
    """For each iterator of block `name`, the loop variables its binding uses."""
    return {iv: used for iv, _, used in _bindings(sch, name)}


def _step_in(expr: object, var: str) -> int | None:
    """How much `expr` grows when loop variable `var` grows by one, if it is linear in `var` (the rest of the
    expression may be anything that does not use it); None otherwise."""
    if var not in vars_in(expr):
        return 0
    if isinstance(expr, tirx.Var):
        return 1
    if isinstance(expr, tirx.Cast):
        return _step_in(expr.value, var)
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        a, b = _step_in(expr.a, var), _step_in(expr.b, var)
        if a is None or b is None:
            return None
        return a + b if isinstance(expr, tirx.Add) else a - b
    if isinstance(expr, tirx.Mul):
        for x, k in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(k, tirx.IntImm):
                step = _step_in(x, var)
                return None if step is None else step * int(k.value)
    return None


def loop_stride_bytes(sch: s_tir.Schedule, name: str, loop: s_tir.LoopRV) -> int | None:
    """Largest distance in bytes between the elements that consecutive iterations of `loop` read in one of block
    `name`'s inputs (buffers it reads and does not write); 0: the same elements, None: not linear in the loop.

    Indices are first simplified within the block iterators' ranges: a chain of reshapes and transposes inlined into
    one nest reads through floordiv/floormod terms that are linear there (lv[(s // 128 + r) % 128, ...] is lv[r, ...]
    when s < 128)."""
    realize = _get_sblock_realize(raw_schedule(sch), sch.get_sblock(name))
    analyzer = Analyzer()
    for iv in realize.block.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    var = sch.get(loop).loop_var.name
    moving: dict[str, int] = {}  # block iterator -> its step per iteration of the loop
    for iv, value in zip(realize.block.iter_vars, realize.iter_values, strict=True):
        step = _step_in(value, var)
        if step is None:
            return None
        if step:
            moving[iv.var.name] = step
    written = [w.source for w in realize.block.writes]
    widest = 0
    for region in realize.block.reads:
        if any(region.source.same_as(w) for w in written):
            continue
        stride, inner = 0, 1
        for rng, dim in zip(reversed(region.region), reversed(region.source.shape), strict=True):
            start = analyzer.simplify(rng.min)
            coefs = [_step_in(start, iv) for iv in moving]
            if None in coefs:
                return None
            step = sum(c * s for c, s in zip(coefs, moving.values(), strict=True))
            if step:
                stride = step * inner
                break
            if not isinstance(dim, tirx.IntImm):
                break
            inner *= int(dim)
        widest = max(widest, abs(stride) * region.source.dtype.bits // 8)
    return widest


def _loop_kind(loop: tirx.For, bindings: list[tuple[int, set[str]]]) -> str:
    var = loop.loop_var.name
    used = [t for t, vs in bindings if var in vs]
    if not used:
        return "S" if int(loop.extent) == 1 else "O"
    if any(t == REDUCE for t in used):
        return "R"
    return "S" if all(t == SPATIAL for t in used) else "O"


def loop_iter_kinds(sch: s_tir.Schedule, name: str) -> list[str]:
    """For each loop around block `name` (outer to inner): "S" if it feeds only spatial iterators,
    "R" if it feeds a reduction iterator, "O" otherwise (unused by the block).

    A unit loop that the bindings no longer mention counts as "S": TVM simplifies such loops away
    depending on tile sizes, and kinds must not depend on decisions."""
    loops = sch.get_loops(sch.get_sblock(name))
    bindings = [(t, vs) for _, t, vs in _bindings(sch, name)]
    return [_loop_kind(sch.get(lp), bindings) for lp in loops]


def loop_kind(sch: s_tir.Schedule, name: str, loop: s_tir.LoopRV) -> str:
    """`loop_iter_kinds` of one loop around block `name` (the finishing step asks only about the innermost)."""
    return _loop_kind(sch.get(loop), [(t, vs) for _, t, vs in _bindings(sch, name)])


def affine_terms(expr: object) -> tuple[int, dict[str, int]] | None:
    """(constant, {var: coefficient}) of an integer affine expression, or None if it is not affine."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value), {}
    if isinstance(expr, tirx.Var):
        return 0, {expr.name: 1}
    if isinstance(expr, tirx.Cast):
        return affine_terms(expr.value)
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        a, b = affine_terms(expr.a), affine_terms(expr.b)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(expr, tirx.Add) else -1
        coeffs = dict(a[1])
        for k, v in b[1].items():
            coeffs[k] = coeffs.get(k, 0) + sign * v
        return a[0] + sign * b[0], coeffs
    if isinstance(expr, tirx.Mul):
        a, b = affine_terms(expr.a), affine_terms(expr.b)
        if a is None or b is None:
            return None
        if not a[1]:
            a, b = b, a
        if b[1]:
            return None
        return a[0] * b[0], {k: v * b[0] for k, v in a[1].items()}
    return None
