"""Loop tree of a scheduled TIR function: loops, statement leaves, buffer accesses with affine indices.

The tree is the common input of the static cost model (data movement, loop/assembly mapping, TIR-only
features). Index expressions are rewritten over *loop* variables (block iter vars substituted), kept in a
small quasi-affine algebra (`IndexExpr`) that the isl data-movement analysis consumes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Union

import tvm
import tvm_ffi
from tvm import s_tir, tirx

__all__ = [
    "Access",
    "DivMod",
    "IndexExpr",
    "LoopNode",
    "LoopTree",
    "LoopTreeError",
    "StmtLeaf",
]


class LoopTreeError(ValueError):
    """The function cannot be turned into a loop tree (dynamic extents, unsupported statements)."""


# --------------------------------------------------------------------------------------------------
# Quasi-affine index algebra
# --------------------------------------------------------------------------------------------------

Term = Union[str, "DivMod"]


@dataclass(frozen=True)
class DivMod:
    """`floordiv(arg, divisor)` or `floormod(arg, divisor)` with a constant positive divisor."""

    op: str  # "floordiv" | "floormod"
    arg: IndexExpr
    divisor: int

    def interval(self, extents: Mapping[str, int]) -> tuple[float, float]:
        lo, hi = self.arg.interval(extents)
        if self.op == "floordiv":
            return float(math.floor(lo / self.divisor)), float(math.floor(hi / self.divisor))
        if lo >= 0 and hi < self.divisor:
            return lo, hi
        return 0.0, float(self.divisor - 1)

    def evaluate(self, values: Mapping[str, int]) -> int:
        a = self.arg.evaluate(values)
        return a // self.divisor if self.op == "floordiv" else a % self.divisor

    def __str__(self) -> str:
        return f"{self.op}({self.arg}, {self.divisor})"


def _term_key(t: Term) -> tuple:
    return (0, t) if isinstance(t, str) else (1, t.op, t.divisor, repr(t.arg))


@dataclass(frozen=True)
class IndexExpr:
    """`sum(coef * term) + const` over loop variables and floordiv/floormod terms.

    A non quasi-affine expression (products of variables, min/max, indirect loads) is *opaque*: only the
    loop variables it depends on and a conservative interval `bounds` are kept.
    """

    terms: tuple[tuple[Term, int], ...] = ()
    const: int = 0
    bounds: tuple[float, float] | None = None  # set iff opaque
    opaque_vars: frozenset[str] = frozenset()

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def constant(c: int) -> IndexExpr:
        return IndexExpr((), int(c))

    @staticmethod
    def var(name: str, coef: int = 1, const: int = 0) -> IndexExpr:
        return IndexExpr(((name, int(coef)),), int(const)) if coef else IndexExpr((), int(const))

    @staticmethod
    def make_opaque(bounds: tuple[float, float], vars_: frozenset[str]) -> IndexExpr:
        return IndexExpr((), 0, (float(bounds[0]), float(bounds[1])), frozenset(vars_))

    @staticmethod
    def from_terms(terms: Mapping[Term, int], const: int) -> IndexExpr:
        items = [(t, c) for t, c in terms.items() if c != 0]
        if all(isinstance(t, str) for t, _ in items):
            items.sort()
        else:
            items.sort(key=lambda kv: _term_key(kv[0]))
        return IndexExpr(tuple(items), int(const))

    def __hash__(self) -> int:  # footprint caches hash these repeatedly
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.terms, self.const, self.bounds, self.opaque_vars))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:  # string hashes differ between processes: never pickle the cached one
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)

    # -- properties -----------------------------------------------------------------------------
    @property
    def is_opaque(self) -> bool:
        return self.bounds is not None

    @property
    def quasi_affine(self) -> bool:
        """Representable in Presburger arithmetic (affine plus floordiv/floormod by constants)."""
        return self.bounds is None

    @property
    def affine(self) -> bool:
        """Purely affine in the loop variables (no floordiv/floormod, not opaque)."""
        return self.bounds is None and all(isinstance(t, str) for t, _ in self.terms)

    @property
    def coeffs(self) -> dict[str, int]:
        """Loop variable -> coefficient of the affine part."""
        return {t: c for t, c in self.terms if isinstance(t, str)}

    @property
    def is_const(self) -> bool:
        return self.bounds is None and not self.terms

    def loop_vars(self) -> frozenset[str]:
        if self.bounds is not None:
            return self.opaque_vars
        out: set[str] = set()
        for t, _ in self.terms:
            out |= {t} if isinstance(t, str) else t.arg.loop_vars()
        return frozenset(out)

    # -- arithmetic -----------------------------------------------------------------------------
    def _as_dict(self) -> dict[Term, int]:
        return dict(self.terms)

    def add(self, other: IndexExpr, scale: int = 1) -> IndexExpr:
        """self + scale * other (opaque operands must be combined through `interval`)."""
        assert self.quasi_affine and other.quasi_affine
        d = self._as_dict()
        for t, c in other.terms:
            d[t] = d.get(t, 0) + scale * c
        return IndexExpr.from_terms(d, self.const + scale * other.const)

    def scale(self, k: int) -> IndexExpr:
        assert self.quasi_affine
        if k == 0:
            return IndexExpr.constant(0)
        return IndexExpr(tuple((t, c * k) for t, c in self.terms), self.const * k)

    def interval(self, extents: Mapping[str, int]) -> tuple[float, float]:
        """Conservative [lo, hi] with each loop variable in [0, extent-1] (absent variables are 0)."""
        if self.bounds is not None:
            return self.bounds
        lo = hi = float(self.const)
        for t, c in self.terms:
            if isinstance(t, str):
                tlo, thi = 0.0, float(max(extents.get(t, 1), 1) - 1)
            else:
                tlo, thi = t.interval(extents)
            a, b = c * tlo, c * thi
            lo += min(a, b)
            hi += max(a, b)
        return lo, hi

    def specialize(self, extents: Mapping[str, int]) -> IndexExpr:
        """Fix every loop variable not in `extents` to 0 and simplify floordiv/floormod terms."""
        if self.bounds is not None:
            inner = self.opaque_vars & extents.keys()
            if inner:
                return IndexExpr.make_opaque(self.bounds, inner)
            # Independent of the remaining loops: one (unknown) value; any representative will do.
            return IndexExpr.constant(0)
        if self.affine:
            kept = tuple((t, c) for t, c in self.terms if t in extents)
            return self if len(kept) == len(self.terms) else IndexExpr(kept, self.const)
        d: dict[Term, int] = {}
        const = self.const
        for t, c in self.terms:
            if isinstance(t, str):
                if t in extents:
                    d[t] = d.get(t, 0) + c
                continue
            s = make_divmod(t.op, t.arg.specialize(extents), t.divisor, extents)
            const += c * s.const
            for t2, c2 in s.terms:
                d[t2] = d.get(t2, 0) + c * c2
        return IndexExpr.from_terms(d, const)

    def substitute(self, mapping: Mapping[str, IndexExpr], extents: Mapping[str, int]) -> IndexExpr:
        """Replace loop variables by expressions (variables of the result range over `extents`)."""
        if self.bounds is not None:
            vars_ = frozenset().union(*(mapping[v].loop_vars() if v in mapping else {v} for v in self.opaque_vars))
            return IndexExpr.make_opaque(self.bounds, vars_)
        out = IndexExpr.constant(self.const)
        for t, c in self.terms:
            if isinstance(t, str):
                out = out.add(mapping.get(t) or IndexExpr.var(t), c)
            else:
                out = out.add(make_divmod(t.op, t.arg.substitute(mapping, extents), t.divisor, extents), c)
        return out

    def evaluate(self, values: Mapping[str, int]) -> int:
        """Value at a point (used by tests and the box estimate); opaque expressions are not evaluable."""
        if self.bounds is not None:
            raise ValueError("opaque index expression has no value")
        v = self.const
        for t, c in self.terms:
            v += c * (values.get(t, 0) if isinstance(t, str) else t.evaluate(values))
        return v

    def __str__(self) -> str:
        if self.bounds is not None:
            return f"opaque{list(self.bounds)}({','.join(sorted(self.opaque_vars))})"
        parts = [f"{c}*{t}" for t, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def make_divmod(op: str, arg: IndexExpr, divisor: int, extents: Mapping[str, int]) -> IndexExpr:
    """Simplified `floordiv/floormod(arg, divisor)` given loop extents (variables in [0, extent-1]).

    Writing arg = g*H + L with g dividing `divisor` (g = divisor first, then the common factors of the terms'
    coefficients and the divisor, largest first) and the terms of L not divisible by g: when L's range lies in
    [0, g), floordiv(arg, d) = floordiv(H, d/g) and floormod(arg, d) = g*floormod(H, d/g) + L. With g = d that
    is H and L; a smaller g takes the inner loops of a fused index out of the division (`(64*i + j) % 1024`
    with j < 64 reads as contiguous in j). Otherwise a `DivMod` term is kept.
    """
    if divisor <= 0:
        raise LoopTreeError(f"non-positive divisor {divisor}")
    if divisor == 1:
        return arg if op == "floordiv" else IndexExpr.constant(0)
    if arg.is_const:
        return IndexExpr.constant(arg.const // divisor if op == "floordiv" else arg.const % divisor)
    for g in sorted({divisor} | {math.gcd(c, divisor) for _, c in arg.terms} - {1}, reverse=True):
        high: dict[Term, int] = {}
        low: dict[Term, int] = {}
        for t, c in arg.terms:
            if c % g == 0:
                high[t] = c // g
            else:
                low[t] = c
        q, r = divmod(arg.const, g)
        lexpr = IndexExpr.from_terms(low, r)
        lo, hi = lexpr.interval(extents)
        if lo < 0 or hi >= g:
            continue
        outer = make_divmod(op, IndexExpr.from_terms(high, q), divisor // g, extents)
        return outer if op == "floordiv" else outer.scale(g).add(lexpr)
    return IndexExpr.from_terms({DivMod(op, arg, divisor): 1}, 0)


# --------------------------------------------------------------------------------------------------
# Tree nodes
# --------------------------------------------------------------------------------------------------


@dataclass
class Access:
    """One load or store of a buffer element; `indices` are over the loop variables of the tree."""

    buffer: str
    dtype_bytes: int
    shape: tuple[int, ...]
    scope: str
    indices: tuple[IndexExpr, ...]
    is_write: bool
    conditional: bool = False  # inside if_then_else/select: may not execute
    # Where the element is stored when TVM allocates the buffer inside a loop and shrinks it (intermediates,
    # see `_compact_intermediates`); None: as `shape`/`indices`. Data movement reads these, the kernel model
    # the logical ones (a re-initialised accumulator is a new value per outer iteration, not one chain).
    storage_shape: tuple[int, ...] | None = None
    storage_indices: tuple[IndexExpr, ...] | None = None
    # `storage_align` of the buffer (a block's `buffer_dim_align`): (axis, factor, offset), the stride of `axis`
    # rounded up to factor * k + offset elements
    dim_align: tuple[tuple[int, int, int], ...] = ()

    @property
    def mem_shape(self) -> tuple[int, ...]:
        return self.shape if self.storage_shape is None else self.storage_shape

    @property
    def row_stride(self) -> int:
        """Elements from one row of the last dimension to the next in memory (its length, or more where aligned)."""
        row = self.mem_shape[-1] if self.mem_shape else 1
        for axis, factor, offset in self.dim_align:
            if axis == len(self.mem_shape) - 2 and factor > 0:
                row = -(-(row - offset) // factor) * factor + offset
        return row

    @property
    def mem_indices(self) -> tuple[IndexExpr, ...]:
        return self.indices if self.storage_indices is None else self.storage_indices

    @property
    def affine(self) -> bool:
        return all(ix.affine for ix in self.indices)

    @property
    def quasi_affine(self) -> bool:
        return all(ix.quasi_affine for ix in self.indices)


@dataclass
class StmtLeaf:
    """A buffer store (or an evaluated call) with its accesses and arithmetic-op counts."""

    block: str
    accesses: list[Access]
    ops: Counter
    depth: int
    conditions: tuple[IndexExpr, ...] = ()  # affine guards, each meaning `expr >= 0`
    predicated: bool = False  # block predicate or IfThenElse around it
    has_select: bool = False  # if_then_else / select in the value
    guard_vars: frozenset[str] = frozenset()  # loop variables the conditions of those selects depend on
    # those conditions as affine guards (`expr >= 0`, all must hold); None when one is not affine
    guard_conditions: tuple[IndexExpr, ...] | None = ()
    init: bool = False  # reduction init (runs once per spatial point)
    trips: int = 1  # product of the enclosing loop extents

    is_loop = False


@dataclass
class LoopNode:
    """A `for` loop of the scheduled function."""

    var: str
    extent: int
    kind: str  # serial | parallel | vectorized | unrolled | thread_binding
    depth: int
    thread_tag: str | None = None
    annotations: dict[str, object] = field(default_factory=dict)
    children: list[LoopNode | StmtLeaf] = field(default_factory=list)
    min: int = 0
    # GPU: a loop bound to a thread tag already bound by an enclosing loop runs on the same threads; it
    # adds no iterations and its variable is the enclosing one (named here).
    alias_of: str | None = None

    @property
    def trips(self) -> int:
        """Iterations this loop adds (1 for a re-bound thread loop)."""
        return 1 if self.alias_of else self.extent

    is_loop = True

    def statements(self) -> Iterator[StmtLeaf]:
        for c in self.children:
            if c.is_loop:
                yield from c.statements()
            else:
                yield c


Node = LoopNode | StmtLeaf

_KINDS = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread_binding"}


def _annotation_value(v: object) -> object:
    if isinstance(v, (tirx.IntImm, tirx.FloatImm)):
        return v.value
    if isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of `dtype` (a vector dtype counts all its lanes)."""
    dt = tvm.runtime.DataType(str(dtype))
    return max(1, dt.bits * dt.lanes // 8)


def _is_float(e) -> bool:
    ty = getattr(e, "ty", None)
    s = str(getattr(ty, "dtype", ty)) if ty is not None else ""
    return s.startswith("float") or s.startswith("bfloat")


# --------------------------------------------------------------------------------------------------
# TIR -> tree
# --------------------------------------------------------------------------------------------------

_CMP = (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE)
_DIV_OPS = {tirx.FloorDiv: "floordiv", tirx.Div: "floordiv", tirx.FloorMod: "floormod", tirx.Mod: "floormod"}


class _Builder:
    """Recursive walk over a PrimFunc body; keeps the variable environment and buffer table."""

    def __init__(self) -> None:
        self.env: dict[object, IndexExpr] = {}
        self.extents: dict[str, int] = {}
        self.used_names: set[str] = set()
        self.bound_tags: dict[str, tuple[str, int]] = {}  # thread tag -> (loop var, extent) of enclosing loops
        self.seen: set[tuple[int, bool]] = set()  # subexpressions of the current statement already counted
        self.guard_vars: frozenset[str] = frozenset()  # loop variables of the current statement's select conditions
        self.guard_conds: tuple[IndexExpr, ...] | None = ()  # those conditions as affine guards (None: not affine)
        self.dim_align: dict[str, tuple[tuple[int, int, int], ...]] = {}  # buffer -> its blocks' storage_align

    # -- expressions ----------------------------------------------------------------------------
    def index(self, e) -> IndexExpr:
        """Rewrite an integer TIR expression over loop variables."""
        if isinstance(e, tirx.IntImm):
            return IndexExpr.constant(int(e.value))
        if isinstance(e, tirx.Var):
            got = self.env.get(e)
            if got is None:
                return IndexExpr.make_opaque((-math.inf, math.inf), frozenset())
            return got
        if isinstance(e, (tirx.Add, tirx.Sub)):
            a, b = self.index(e.a), self.index(e.b)
            if a.quasi_affine and b.quasi_affine:
                return a.add(b, 1 if isinstance(e, tirx.Add) else -1)
            return self._opaque(e, a, b)
        if isinstance(e, tirx.Mul):
            a, b = self.index(e.a), self.index(e.b)
            if a.is_const and b.quasi_affine:
                return b.scale(a.const)
            if b.is_const and a.quasi_affine:
                return a.scale(b.const)
            return self._opaque(e, a, b)
        op = _DIV_OPS.get(type(e))
        if op is not None:
            a, b = self.index(e.a), self.index(e.b)
            if b.is_const and b.const > 0 and a.quasi_affine:
                return make_divmod(op, a, b.const, self.extents)
            return self._opaque(e, a, b)
        if isinstance(e, tirx.Cast) and not _is_float(e):
            return self.index(e.value)
        if isinstance(e, tirx.Let):
            self.env[e.var] = self.index(e.value)
            return self.index(e.body)
        return self._opaque(e)

    def _opaque(self, e, *parts: IndexExpr) -> IndexExpr:
        vars_ = frozenset().union(*(p.loop_vars() for p in parts)) if parts else self._expr_vars(e)
        return IndexExpr.make_opaque(self._interval(e), vars_)

    def _expr_vars(self, e) -> frozenset[str]:
        out: set[str] = set()

        def visit(x) -> None:
            if isinstance(x, tirx.Var) and x in self.env:
                out.update(self.env[x].loop_vars())

        _walk_expr(e, visit)
        return frozenset(out)

    def _interval(self, e) -> tuple[float, float]:
        """Conservative value range of an integer TIR expression."""
        if isinstance(e, tirx.IntImm):
            return float(e.value), float(e.value)
        if isinstance(e, tirx.Var):
            got = self.env.get(e)
            return got.interval(self.extents) if got is not None else (-math.inf, math.inf)
        if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul, tirx.Min, tirx.Max)):
            (alo, ahi), (blo, bhi) = self._interval(e.a), self._interval(e.b)
            if isinstance(e, tirx.Add):
                return alo + blo, ahi + bhi
            if isinstance(e, tirx.Sub):
                return alo - bhi, ahi - blo
            if isinstance(e, tirx.Min):
                return min(alo, blo), min(ahi, bhi)
            if isinstance(e, tirx.Max):
                return max(alo, blo), max(ahi, bhi)
            prods = [x * y for x in (alo, ahi) for y in (blo, bhi) if not (math.isinf(x) or math.isinf(y))]
            if len(prods) < 4:
                return -math.inf, math.inf
            return min(prods), max(prods)
        if type(e) in _DIV_OPS:
            (alo, ahi), (blo, bhi) = self._interval(e.a), self._interval(e.b)
            if blo != bhi or blo <= 0 or math.isinf(blo):
                return -math.inf, math.inf
            if _DIV_OPS[type(e)] == "floordiv":
                return tuple(x if math.isinf(x) else float(math.floor(x / blo)) for x in (alo, ahi))
            return 0.0, blo - 1
        if isinstance(e, tirx.Select):
            (alo, ahi), (blo, bhi) = self._interval(e.true_value), self._interval(e.false_value)
            return min(alo, blo), max(ahi, bhi)
        if isinstance(e, tirx.Cast):
            return self._interval(e.value)
        return -math.inf, math.inf

    def affine_guards(self, cond) -> tuple[IndexExpr, ...] | None:
        """A conjunction of affine comparisons as guards (`expr >= 0`); None when any part is something else."""
        if isinstance(cond, tirx.And):
            a, b = self.affine_guards(cond.a), self.affine_guards(cond.b)
            return None if a is None or b is None else a + b
        if isinstance(cond, (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ)):
            guards, _ = self.conditions(cond)
            return tuple(guards) if guards and all(g.affine for g in guards) else None
        return None

    def conditions(self, cond) -> tuple[list[IndexExpr], bool]:
        """Affine guards (`expr >= 0`) implied by a boolean condition; flag = condition was non-trivial."""
        if isinstance(cond, tirx.IntImm):
            return [], not bool(cond.value)
        if isinstance(cond, tirx.And):
            a, fa = self.conditions(cond.a)
            b, fb = self.conditions(cond.b)
            return a + b, fa or fb
        if isinstance(cond, (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ)):
            a, b = self.index(cond.a), self.index(cond.b)
            if not (a.quasi_affine and b.quasi_affine):
                return [], True
            if isinstance(cond, tirx.LT):
                return [b.add(a, -1).add(IndexExpr.constant(-1))], True
            if isinstance(cond, tirx.LE):
                return [b.add(a, -1)], True
            if isinstance(cond, tirx.GT):
                return [a.add(b, -1).add(IndexExpr.constant(-1))], True
            if isinstance(cond, tirx.GE):
                return [a.add(b, -1)], True
            return [a.add(b, -1), b.add(a, -1)], True
        return [], True

    def _buffer_access(self, buf, indices, is_write: bool, conditional: bool) -> Access:
        try:
            shape = tuple(int(s) for s in buf.shape)
        except (TypeError, ValueError) as err:
            raise LoopTreeError(f"buffer {buf.name} has a symbolic shape {list(buf.shape)}") from err
        return Access(
            buffer=str(buf.name),
            dtype_bytes=dtype_bytes(buf.dtype),
            shape=shape,
            scope=str(buf.scope()) or "global",
            indices=tuple(self.index(i) for i in indices),
            is_write=is_write,
            conditional=conditional,
        )

    def value(self, e, ops: Counter, loads: list[Access], conditional: bool = False) -> bool:
        """Count arithmetic ops of a value expression and collect its loads; returns `has_select`.

        A subexpression that occurs again in the same statement is counted once: LLVM computes it once
        (TE inlining copies a polynomial such as fast_exp's clamped argument ten times into one expression)."""
        if isinstance(e, (tirx.IntImm, tirx.FloatImm, tirx.Var)):
            return False
        key = (tvm_ffi.structural_hash(e), conditional)
        if key in self.seen:
            return False
        self.seen.add(key)
        sel = False
        if isinstance(e, tvm.ir.TensorLoad):
            ops["load"] += 1
            loads.append(self._buffer_access(e.source, e.indices, False, conditional))
            for i in e.indices:  # indirect indices: their loads are real accesses too
                sel |= self.value(i, Counter(), loads, conditional)
            return sel
        fl = _is_float(e)
        if isinstance(e, (tirx.Add, tirx.Sub)):
            mul = next((x for x in (e.a, e.b) if isinstance(x, tirx.Mul) and _is_float(x)), None)
            if fl and mul is not None:
                ops["fma"] += 1
                other = e.b if mul is e.a else e.a
                sel |= self.value(mul.a, ops, loads, conditional) | self.value(mul.b, ops, loads, conditional)
                return sel | self.value(other, ops, loads, conditional)
            ops["fadd" if fl else "iadd"] += 1
        elif isinstance(e, tirx.Mul):
            ops["fmul" if fl else "imul"] += 1
        elif type(e) in _DIV_OPS:
            ops["fdiv" if fl else "idiv"] += 1
        elif isinstance(e, (tirx.Min, tirx.Max)):
            ops["fminmax" if fl else "iminmax"] += 1
        elif isinstance(e, _CMP):
            ops["fcmp" if _is_float(e.a) else "icmp"] += 1
        elif isinstance(e, (tirx.And, tirx.Or, tirx.Not)):
            ops["logic"] += 1
        elif isinstance(e, tirx.Cast):
            ops["cast"] += 1
        if isinstance(e, tirx.Select) or (isinstance(e, tvm.ir.Call) and _call_name(e).endswith("if_then_else")):
            ops["select"] += 1
            args = [e.condition, e.true_value, e.false_value] if isinstance(e, tirx.Select) else list(e.args)
            self.value(args[0], ops, loads, conditional)
            self.guard_vars |= self._expr_vars(args[0])
            guards = self.affine_guards(args[0])
            self.guard_conds = None if guards is None or self.guard_conds is None else self.guard_conds + guards
            for a in args[1:]:
                self.value(a, ops, loads, True)
            return True
        if isinstance(e, tvm.ir.Call):
            ops["call"] += 1
            ops[f"call:{_call_name(e)}"] += 1
        if isinstance(e, tirx.Let):
            self.env[e.var] = self.index(e.value)
        for child in _expr_children(e):
            sel |= self.value(child, ops, loads, conditional)
        return sel

    # -- statements -----------------------------------------------------------------------------
    def unique(self, name: str) -> str:
        out, k = name, 1
        while out in self.used_names:
            k += 1
            out = f"{name}#{k}"
        self.used_names.add(out)
        return out

    def stmt(self, s, ctx: _Ctx) -> list[Node]:
        if isinstance(s, tirx.For):
            return [self.loop(s, ctx)]
        if isinstance(s, tirx.SeqStmt):
            out: list[Node] = []
            for x in s.seq:
                out.extend(self.stmt(x, ctx))
            return out
        if isinstance(s, s_tir.SBlockRealize):
            return self.block(s, ctx)
        if isinstance(s, tirx.BufferStore):
            ops: Counter = Counter()
            loads: list[Access] = []
            self.seen, self.guard_vars, self.guard_conds = set(), frozenset(), ()
            sel = self.value(s.value, ops, loads)
            for i in s.indices:
                sel |= self.value(i, Counter(), loads)
            ops["store"] += 1
            store = self._buffer_access(s.buffer, s.indices, True, False)
            return [ctx.leaf([store, *loads], ops, sel, self.guard_vars, self.guard_conds)]
        if isinstance(s, tirx.IfThenElse):
            conds, _ = self.conditions(s.condition)
            inner = ctx.guarded(conds)
            out = self.stmt(s.then_case, inner)
            if s.else_case is not None:
                out += self.stmt(s.else_case, ctx.guarded([]))
            return out
        if isinstance(s, tirx.Bind):
            self.env[s.var] = self.index(s.value)
            return []
        if isinstance(s, tirx.Evaluate):
            ops = Counter()
            loads = []
            self.seen, self.guard_vars, self.guard_conds = set(), frozenset(), ()
            sel = self.value(s.value, ops, loads)
            return [ctx.leaf(loads, ops, sel, self.guard_vars, self.guard_conds)] if loads else []
        if isinstance(s, tirx.AttrStmt):
            return self.stmt(s.body, ctx)
        if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.AssertStmt)):
            return []
        raise LoopTreeError(f"unsupported statement {type(s).__name__}")

    def loop(self, f, ctx: _Ctx) -> LoopNode:
        extent, lo = _const_int(f.extent, "extent"), _const_int(f.min, "min")
        step = _const_int(f.step, "step") if getattr(f, "step", None) is not None else 1
        kind = _KINDS.get(int(f.kind), "serial")
        tag = str(f.thread_binding.thread_tag) if f.thread_binding is not None else None
        node = LoopNode(
            var=str(f.loop_var.name),
            extent=extent,
            kind=kind,
            depth=ctx.depth,
            thread_tag=tag,
            annotations={str(k): _annotation_value(v) for k, v in f.annotations.items()},
            min=lo,
        )
        node.var = self.unique(node.var)
        outer = self.bound_tags.get(tag) if tag else None
        if outer is not None:  # same threads as the enclosing loop of this tag
            node.alias_of, outer_extent = outer
            self.env[f.loop_var] = IndexExpr.var(node.alias_of, step, lo)
            conds = [IndexExpr.var(node.alias_of, -1, extent - 1)] if extent < outer_extent else []
            node.children = self.stmt(f.body, ctx.guarded(conds, nested=True) if conds else ctx.inside(1))
            return node
        self.extents[node.var] = extent
        self.env[f.loop_var] = IndexExpr.var(node.var, step, lo)
        if tag:
            self.bound_tags[tag] = (node.var, extent)
        node.children = self.stmt(f.body, ctx.inside(extent))
        if tag:
            del self.bound_tags[tag]
        return node

    def block(self, r, ctx: _Ctx) -> list[Node]:
        b = r.block
        for buffer_index, axis, factor, offset in b.annotations.get("buffer_dim_align", ()):
            name = str(b.writes[int(buffer_index)].source.name)
            self.dim_align[name] = (*self.dim_align.get(name, ()), (int(axis), int(factor), int(offset)))
        for iv, val in zip(b.iter_vars, r.iter_values, strict=True):
            self.env[iv.var] = self.index(val)
        conds, pred = self.conditions(r.predicate)
        inner = ctx.in_block(str(b.name_hint), conds, pred)
        out: list[Node] = []
        if b.init is not None:
            out += self.stmt(b.init, inner.as_init())
        out += self.stmt(b.body, inner)
        return out


@dataclass(frozen=True)
class _Ctx:
    depth: int = 0
    trips: int = 1
    block: str = "root"
    conds: tuple[IndexExpr, ...] = ()
    predicated: bool = False
    init: bool = False

    def inside(self, extent: int) -> _Ctx:
        return _Ctx(self.depth + 1, self.trips * extent, self.block, self.conds, self.predicated, self.init)

    def guarded(self, conds: list[IndexExpr], nested: bool = False) -> _Ctx:
        return _Ctx(self.depth + nested, self.trips, self.block, self.conds + tuple(conds), True, self.init)

    def in_block(self, name: str, conds: list[IndexExpr], pred: bool) -> _Ctx:
        return _Ctx(self.depth, self.trips, name, self.conds + tuple(conds), self.predicated or pred, False)

    def as_init(self) -> _Ctx:
        return _Ctx(self.depth, self.trips, self.block, self.conds, self.predicated, True)

    def leaf(self, accesses: list[Access], ops: Counter, has_select: bool,
             guard_vars: frozenset[str] = frozenset(),
             guard_conditions: tuple[IndexExpr, ...] | None = ()) -> StmtLeaf:
        return StmtLeaf(
            block=self.block,
            accesses=accesses,
            ops=ops,
            depth=self.depth,
            conditions=self.conds,
            predicated=self.predicated,
            has_select=has_select,
            guard_vars=guard_vars,
            guard_conditions=guard_conditions,
            init=self.init,
            trips=self.trips,
        )


def _const_int(e, what: str) -> int:
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    raise LoopTreeError(f"loop {what} is not a constant: {e}")


def _call_name(c) -> str:
    op = c.op
    return str(getattr(op, "name", getattr(op, "name_hint", op)))


def _expr_children(e) -> list:
    if isinstance(e, tvm.ir.TensorLoad):
        return list(e.indices)
    if isinstance(e, (tirx.Not, tirx.BitwiseNot)):
        return [e.a]
    if hasattr(e, "a") and hasattr(e, "b"):
        return [e.a, e.b]
    if isinstance(e, tirx.Cast):
        return [e.value]
    if isinstance(e, tirx.Select):
        return [e.condition, e.true_value, e.false_value]
    if isinstance(e, tvm.ir.Call):
        return list(e.args)
    if isinstance(e, tirx.Let):
        return [e.value, e.body]
    if isinstance(e, tirx.Ramp):
        return [e.base, e.stride]
    if isinstance(e, tirx.Broadcast):
        return [e.value]
    if isinstance(e, tirx.Shuffle):
        return list(e.vectors)
    return []


def _walk_expr(e, visit) -> None:
    visit(e)
    for c in _expr_children(e):
        _walk_expr(c, visit)


# --------------------------------------------------------------------------------------------------
# Public tree
# --------------------------------------------------------------------------------------------------


@dataclass
class LoopTree:
    """Loop nest forest of one PrimFunc plus the extents of all its loop variables."""

    roots: list[Node]
    extents: dict[str, int]
    _key: tuple | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_mod(cls, mod: tvm.IRModule | tirx.PrimFunc, func_name: str = "main", compact: bool = True) -> LoopTree:
        """Build the tree of `mod[func_name]` (or of a bare PrimFunc); `compact`: index intermediate buffers
        as TVM allocates them (see `_compact_intermediates`), not as whole arrays."""
        func = mod[func_name] if isinstance(mod, tvm.IRModule) else mod
        b = _Builder()
        roots = b.stmt(func.body, _Ctx())
        if compact:
            _compact_intermediates(roots, b.extents, {str(p.name) for p in func.params})
        tree = cls(roots=roots, extents=dict(b.extents))
        if b.dim_align:
            for a in tree.accesses():
                a.dim_align = b.dim_align.get(a.buffer, ())
        return tree

    def walk(self) -> Iterator[Node]:
        """All nodes in pre-order (loops and statement leaves)."""
        stack = list(reversed(self.roots))
        while stack:
            n = stack.pop()
            yield n
            if n.is_loop:
                stack.extend(reversed(n.children))

    def preorder(self) -> list[LoopNode]:
        """Loop nodes in pre-order (each has `.extent`, `.kind`, `.depth`)."""
        return [n for n in self.walk() if n.is_loop]

    def statements(self) -> list[StmtLeaf]:
        return [n for n in self.walk() if not n.is_loop]

    def accesses(self) -> Iterator[Access]:
        for s in self.statements():
            yield from s.accesses

    def shape_key(self) -> tuple:
        """Hashable structure of the tree (loop extents, kinds, tags, annotations, blocks) for caching."""
        if self._key is None:
            self._key = tuple(_node_key(n) for n in self.roots)
        return self._key

    def total_ops(self) -> Counter:
        """Arithmetic/memory op counts of all statements times their trip counts (TIR-only feature)."""
        out: Counter = Counter()
        for s in self.statements():
            for k, v in s.ops.items():
                out[k] += v * s.trips
        return out


def _compact_intermediates(roots: list[Node], extents: Mapping[str, int], params: set[str]) -> None:
    """Index each intermediate buffer as TVM stores it: allocated inside the deepest loop enclosing all its
    accesses and shrunk to what one iteration of that loop touches (TVM's buffer-allocation planning and
    compaction). A pad computed at an inner loop is then a few lines reused in place, not a whole buffer
    streamed through the caches. Loops bound to GPU threads stay outside (global buffers are not allocated
    per thread); a buffer whose indices mix those loops with inner ones keeps its shape."""
    uses: dict[str, list[tuple[tuple[LoopNode, ...], Access]]] = {}

    def visit(node: Node, path: tuple[LoopNode, ...]) -> None:
        if node.is_loop:
            for c in node.children:
                visit(c, path + (node,))
            return
        for a in node.accesses:
            if a.buffer not in params:
                uses.setdefault(a.buffer, []).append((path, a))

    for r in roots:
        visit(r, ())
    for accs in uses.values():
        prefix: list[LoopNode] = []
        for level in zip(*(p for p, _ in accs), strict=False):
            if any(lp is not level[0] for lp in level) or level[0].thread_tag or level[0].alias_of:
                break
            prefix.append(level[0])
        if prefix:
            _compact(accs, {lp.var for lp in prefix}, extents)


def _compact(accs: list[tuple[tuple, Access]], outer: set[str], extents: Mapping[str, int]) -> None:
    """Storage indices of one buffer's accesses: the loops in `outer` dropped, the shape shrunk to the rest."""
    split: list[list[IndexExpr]] = []
    outer_parts: list[tuple] | None = None
    for _, a in accs:
        inner_idx, outs = [], []
        for ix in a.indices:
            if ix.is_opaque:
                if not ix.opaque_vars <= outer:
                    return
                inner_idx.append(IndexExpr.constant(0))
                outs.append(("opaque", ix.bounds))
                continue
            keep, drop = {}, {}
            for t, c in ix.terms:
                used = {t} if isinstance(t, str) else t.arg.loop_vars()
                if all(extents.get(v, 1) <= 1 for v in used):
                    continue  # a unit loop: always 0
                if used <= outer:
                    drop[t] = c
                elif used & outer:
                    return  # an index mixing an outer and an inner loop: not separable
                else:
                    keep[t] = c
            inner_idx.append(IndexExpr.from_terms(keep, ix.const))
            outs.append(tuple(sorted(drop.items(), key=lambda kv: _term_key(kv[0]))))
        if outer_parts is None:
            outer_parts = outs
        elif outs != outer_parts:
            return  # accesses at different offsets of the outer loops: TVM's region covers both; keep it whole
        split.append(inner_idx)
    shape, lows = [], []
    for dim in range(len(split[0])):
        ivs = [idx[dim].interval(extents) for idx in split]
        lo, hi = int(min(i[0] for i in ivs)), int(max(i[1] for i in ivs))
        shape.append(min(hi - lo + 1, accs[0][1].shape[dim]))
        lows.append(lo)
    for (_, a), idx in zip(accs, split, strict=True):
        a.storage_shape = tuple(shape)
        a.storage_indices = tuple(ix.add(IndexExpr.constant(-lo)) for ix, lo in zip(idx, lows, strict=True))


def _node_key(n: Node) -> tuple:
    if n.is_loop:
        ann = tuple(sorted((k, str(v)) for k, v in n.annotations.items()))
        return ("L", n.extent, n.kind, n.thread_tag, ann, tuple(_node_key(c) for c in n.children))
    return ("S", n.block, n.init, len(n.accesses))
