"""Cache data movement of a loop tree (Tuna, Algorithm 2) with footprints counted in cache lines.

Bottom-up over the loop tree, per buffer t and loop L (outer loop variables fixed at their first value):
  fp_t(L)  = distinct lines of t touched by the whole execution of L,
  fp1_t(L) = the same for one iteration of L, single(L) = sum_t fp1_t(L).
If single(L) fits in the cache, mov_t(L) = fp_t(L). Otherwise a buffer whose reuse status is still true
moves fp_t(L) and every other buffer moves trip(L) * sum_children mov_t(child). The reuse status of t
starts true at the statements and flips to false (as in the paper) when fp_t of a loop exceeds the cache,
or when a run of consecutive sibling nodes not touching t (cyclically across iterations) has a combined
footprint above the cache. Caches are set associative where the spec gives their ways: a buffer's footprint
counts as (most of its lines in one set) x sets when that is larger, so rows 4 KiB apart that all land in one L1
set overflow it long before the lines add up to the capacity. Sets are told apart only by a line's offset in its
4 KiB page, since pages land anywhere in a physically indexed cache. A fused loop is analysed as the nest of the loops
it fuses (its mixed-radix digits), which also makes the floordiv/floormod of fused indices affine. Only buffers
in global memory are analysed ("local"/"shared" scopes are registers or scratchpads, not cached).

Footprints are exact. Accesses are renamed canonically (equal images compare equal), a union covered by one full
box is that box, and floordiv/floormod are made affine where exact (mixed-radix digits, dense split arguments as
one variable). A single separable affine access then has a closed form (product over buffer dimensions of
distinct values, the row-contiguous suffix mapped to lines by floor division); other queries (unions, coupled
dimensions, remaining floordiv/floormod, guards) are enumerated with numpy when their domain is small, and
counted by isl (`count_val`, bounded by an operation limit) otherwise. Non quasi-affine indices (a box of their
range inside isl) and isl failures fall back to conservative estimates, counted in `FootprintStats` and logged.
Footprints are cached per process across candidates.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import islpy as isl
import numpy as np

from ..target import HardwareSpec
from .looptree import Access, DivMod, IndexExpr, LoopNode, LoopTree, Node, StmtLeaf, make_divmod

__all__ = [
    "DataMoveConfig",
    "DataMovement",
    "FootprintCounter",
    "LevelMovement",
    "LineLayout",
    "LoopRecord",
    "core_footprint_lines",
    "data_movement",
    "default_counter",
]

log = logging.getLogger(__name__)

_ON_CHIP_SCOPES = ("local", "shared", "warp", "wmma", "m16n8k8", "metal")


@dataclass(frozen=True)
class DataMoveConfig:
    """Tunable parameters of the data-movement analysis."""

    engine: str = "auto"  # "auto": closed form when exact else isl | "isl": always isl | "box": estimate only
    # isl_ctx operation limit per query: counting a box costs a few operations per row (8192 rows of lines:
    # 9.5k, ~1 ms); a union with nested floordiv/floormod took 50k operations and 0.8 s.
    max_isl_operations: int = 100_000
    max_enum_values: int = 1 << 20  # largest value range enumerated by the closed form
    max_enum_points: int = 1 << 16  # iteration points below which a footprint is enumerated (numpy), not isl
    cache_entries: int = 200_000  # footprint results kept per process
    # Set conflicts: a footprint whose lines crowd into a few sets (rows 4 KiB apart all land in one L1 set)
    # fits only if no set holds more lines than the cache has ways. Needs the spec's l1_ways/l2_ways.
    set_conflicts: bool = True
    # iteration points enumerated to find the most crowded set (numpy, cached; ~10 ms at the limit). At 1 << 16 a
    # 3 x 3 conv's weight slice (9 x 256 rows 1 KiB apart, 64 channels: 147k points, 9216 lines in 512 of the L2's
    # 2048 sets, 18 > 16 ways) went unchecked and ResNet-50's pick for it ran 1.8 ms, predicted 0.57 (2.3 with the
    # check; session 58)
    max_crowd_points: int = 1 << 18
    # The caches are physically indexed: set bits above the page offset come from the page frame the OS picked, so
    # lines compete for sets only by their offset in the page. A cache with more sets than a page has lines is
    # checked as that many sets of proportionally more ways (Zen 3's 512 KiB 8-way L2: 64 x 128). 0: sets by
    # virtual address, which put a GEMM's 8 B panels 64 KiB apart in the same L2 sets, counted its 32 KiB chunk as
    # the whole L2 and charged it 10x the L2 lines of the same B packed 32 wide; the two ran alike (session 79).
    # Transparent huge pages would make virtual sets real; this machine class only takes them on madvise.
    page_bytes: int = 4096
    levels: tuple[str, ...] = ("L1", "L2")


# --------------------------------------------------------------------------------------------------
# Element -> cache line mapping
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineLayout:
    """Row-major buffer cut into lines: dims [0, k) stay, dims [k, n) are linearised and divided by `epl`.

    k is the largest index such that the size of the suffix dims [k, n) is a multiple of the elements per
    line, which makes (idx_0..idx_{k-1}, floor(lin_suffix / epl)) a bijection with the line address.
    """

    shape: tuple[int, ...]
    epl: int  # elements per line
    k: int
    strides: tuple[int, ...]  # strides of the suffix dims inside the linearised suffix

    @staticmethod
    def of(shape: Sequence[int], dtype_bytes: int, line_bytes: int) -> LineLayout:
        shape = tuple(int(s) for s in shape) or (1,)
        epl = max(1, line_bytes // max(1, dtype_bytes))
        n = len(shape)
        k = 0
        for cand in range(n - 1, -1, -1):
            if math.prod(shape[cand:]) % epl == 0:
                k = cand
                break
        strides = tuple(math.prod(shape[d + 1 :]) for d in range(k, n))
        return LineLayout(shape, epl, k, strides)

    def linear_suffix(self, idx: Sequence[IndexExpr]) -> IndexExpr:
        lin = IndexExpr.constant(0)
        for d, stride in zip(range(self.k, len(self.shape)), self.strides, strict=True):
            lin = lin.add(idx[d], stride)
        return lin

    @property
    def suffix_size(self) -> int:
        return math.prod(self.shape[self.k :])


# --------------------------------------------------------------------------------------------------
# Footprint counting engine
# --------------------------------------------------------------------------------------------------

# A specialised access: (indices, guards) over the loop variables of the query.
SpecAccess = tuple[tuple[IndexExpr, ...], tuple[IndexExpr, ...]]


@dataclass
class FootprintStats:
    """Counters of how footprint queries were answered."""

    queries: int = 0
    cache_hits: int = 0
    closed_form: int = 0
    enumerated: int = 0
    isl: int = 0
    fallbacks: int = 0
    fallback_reasons: Counter = field(default_factory=Counter)

    def delta(self, before: FootprintStats) -> FootprintStats:
        return FootprintStats(
            self.queries - before.queries,
            self.cache_hits - before.cache_hits,
            self.closed_form - before.closed_form,
            self.enumerated - before.enumerated,
            self.isl - before.isl,
            self.fallbacks - before.fallbacks,
            self.fallback_reasons - before.fallback_reasons,
        )

    def copy(self) -> FootprintStats:
        return FootprintStats(
            self.queries,
            self.cache_hits,
            self.closed_form,
            self.enumerated,
            self.isl,
            self.fallbacks,
            Counter(self.fallback_reasons),
        )


class FootprintCounter:
    """Counts distinct cache lines of a union of accesses over a box of loop variables, with a cache."""

    def __init__(self, config: DataMoveConfig | None = None) -> None:
        self.config = config or DataMoveConfig()
        self.stats = FootprintStats()
        self._cache: OrderedDict[tuple, tuple[int, str, str]] = OrderedDict()
        self._ctx = isl.Context()
        self._ctx.set_max_operations(self.config.max_isl_operations)
        self._lock = threading.Lock()
        self._crowd_cache: OrderedDict[tuple, tuple[int, ...] | None] = OrderedDict()

    def count(self, layout: LineLayout, accesses: Iterable[SpecAccess], extents: Mapping[str, int]) -> int:
        """Distinct lines touched by `accesses` with each variable v in [0, extents[v])."""
        accs = frozenset(accesses)
        used = sorted({v for idx, conds in accs for e in (*idx, *conds) for v in e.loop_vars()})
        key = (layout, accs, tuple((v, int(extents[v])) for v in used))
        with self._lock:
            self.stats.queries += 1
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.stats.cache_hits += 1
                self._count_method(hit[1], hit[2], logged=True)
                return hit[0]
            ext = {v: int(extents[v]) for v in used}
            value, method, reason = self._compute(layout, accs, ext)
            self._count_method(method, reason, logged=False)
            self._cache[key] = (value, method, reason)
            if len(self._cache) > self.config.cache_entries:
                self._cache.popitem(last=False)
            return value

    def crowding(self, layout: LineLayout, accesses: Iterable[SpecAccess], extents: Mapping[str, int],
                 sets: tuple[int, ...]) -> tuple[int, ...] | None:
        """Most lines of the footprint that share one cache set, for caches of each of `sets` sets (lines
        map to sets by address modulo, buffers start on a set boundary); None when too large to enumerate."""
        accs = frozenset(accesses)
        if any(e.is_opaque for idx, _ in accs for e in idx):
            return None
        used = sorted({v for idx, conds in accs for e in (*idx, *conds) for v in e.loop_vars()})
        ext = {v: int(extents[v]) for v in used}
        key = (layout, accs, tuple(ext.items()), sets)
        with self._lock:
            if key in self._crowd_cache:
                self._crowd_cache.move_to_end(key)
                return self._crowd_cache[key]
        points = sum(math.prod(ext[v] for v in _access_vars(a)) for a in accs)
        got = None
        if points <= self.config.max_crowd_points:
            lines = _lines(layout, accs, ext)
            got = tuple(int(np.bincount(lines % n, minlength=1).max()) if lines.size else 0 for n in sets)
        with self._lock:
            self._crowd_cache[key] = got
            if len(self._crowd_cache) > self.config.cache_entries:
                self._crowd_cache.popitem(last=False)
        return got

    def _count_method(self, method: str, reason: str, logged: bool) -> None:
        if method == "closed_form":
            self.stats.closed_form += 1
        elif method == "enumerated":
            self.stats.enumerated += 1
        elif method == "isl":
            self.stats.isl += 1
        if reason:
            self.stats.fallbacks += 1
            self.stats.fallback_reasons[reason] += 1
            if not logged:
                log.info("footprint fallback (%s), conservative %s estimate", reason, method)

    def _compute(self, layout: LineLayout, accs: frozenset[SpecAccess], ext: dict[str, int]) -> tuple[int, str, str]:
        if not accs:
            return 0, "closed_form", ""
        engine = self.config.engine
        opaque = any(e.is_opaque for idx, _ in accs for e in idx)
        if engine == "box":
            return _box_count(layout, accs, ext), "box", ""
        if engine == "auto" and not opaque:
            simple, ext = set(), dict(ext)
            for a in accs:
                got, more = simplify_access(a, ext)
                if got is not None:
                    simple.add(got)
                    ext.update(more)
            accs = frozenset(simple)
            if not accs:
                return 0, "closed_form", ""
        if engine == "auto" and not opaque:
            cover = _covering_box(list(accs), ext) if len(accs) > 1 else None
            got = _closed_form(layout, frozenset([cover]) if cover else accs, ext, self.config.max_enum_values)
            if got is not None:
                return got, "closed_form", ""
            points = sum(math.prod(ext[v] for v in _access_vars(a)) for a in accs)
            if points <= self.config.max_enum_points:
                return _enumerate(layout, accs, ext), "enumerated", ""
        try:
            got = self._isl_count(layout, accs, ext)
        except Exception as err:  # isl.Error, or anything unexpected from islpy: never fail the caller
            reason = "isl_limit" if "maximal number of operations" in str(err) else "isl_error"
            if reason == "isl_error":
                log.warning("isl footprint failed (%s); using the box estimate", err)
            self._ctx.reset_operations()
            return _box_count(layout, accs, ext), "box", reason
        return got, "isl", "non_affine" if opaque else ""

    def _isl_count(self, layout: LineLayout, accs: frozenset[SpecAccess], ext: dict[str, int]) -> int:
        self._ctx.reset_operations()
        text = isl_footprint_text(layout, accs, ext)
        val = isl.Set.read_from_str(self._ctx, text).count_val()
        # count_val returns a partial count when it runs out of operations; the next operation fails then.
        isl.Set.read_from_str(self._ctx, "{ [0] }")
        if val is None or not val.is_int():
            raise isl.Error(f"count_val gave no integer for {text}")
        self._ctx.reset_operations()  # printing the value counts operations too
        return int(val.to_python())


_default_counters: dict[DataMoveConfig, FootprintCounter] = {}


def default_counter(config: DataMoveConfig | None = None) -> FootprintCounter:
    """Process-wide counter per config, so footprints are shared between candidates of one search."""
    config = config or DataMoveConfig()
    got = _default_counters.get(config)
    if got is None:
        got = _default_counters[config] = FootprintCounter(config)
    return got


# -- closed form -----------------------------------------------------------------------------------


def _distinct(expr: IndexExpr, ext: Mapping[str, int], epl: int, max_enum: int) -> int | None:
    """Distinct values of floor(expr / epl) for an affine expr over a box; None if too large to enumerate.

    The terms with the smallest coefficients that cover a contiguous range [0, span] form the dense
    part; the values of the other ("outer") terms are enumerated, each giving an interval of lines.
    """
    base = expr.const
    terms: list[tuple[int, int]] = []
    for v, c in expr.terms:
        e = ext[v]
        if e <= 1 or c == 0:
            continue
        if c < 0:
            base += c * (e - 1)
            c = -c
        terms.append((c, e))
    terms.sort()
    span, i = 0, 0
    while i < len(terms) and terms[i][0] <= span + 1:
        span += terms[i][0] * (terms[i][1] - 1)
        i += 1
    outer = terms[i:]
    if not outer:
        return (base + span) // epl - base // epl + 1
    if math.prod(e for _, e in outer) > max_enum:
        return None
    starts = np.zeros(1, dtype=np.int64)
    for c, e in outer:
        starts = np.unique((starts[:, None] + c * np.arange(e, dtype=np.int64)[None, :]).ravel())
    lo = (starts + base) // epl
    hi = (starts + base + span) // epl
    # Sorted ranges with non-decreasing ends: each overlaps the union of the earlier ones only via its
    # predecessor.
    overlap = np.maximum(0, hi[:-1] - lo[1:] + 1)
    return int((hi - lo + 1).sum() - overlap.sum())


def _closed_form(layout: LineLayout, accs: frozenset[SpecAccess], ext: Mapping[str, int], max_enum: int) -> int | None:
    """Exact count for one affine access without guards whose line groups use disjoint variables."""
    if len(accs) != 1:
        return None
    idx, conds = next(iter(accs))
    if conds:
        return None
    if not all(e.affine for e in idx):
        flat = _flatten_divmods(idx, ext)
        if flat is None:
            return None
        idx, ext = flat
    groups = [idx[d] for d in range(layout.k)] + [layout.linear_suffix(idx)]
    seen: set[str] = set()
    for g in groups:
        vs = g.loop_vars()
        if vs & seen:
            return None
        seen |= vs
    total = 1
    for d, g in enumerate(groups):
        n = _distinct(g, ext, layout.epl if d == layout.k else 1, max_enum)
        if n is None:
            return None
        total *= n
    return total


def _access_vars(acc: SpecAccess) -> set[str]:
    return {v for e in (*acc[0], *acc[1]) for v in e.loop_vars()}


def _eval_np(e: IndexExpr, grid: Mapping[str, np.ndarray]) -> np.ndarray | int:
    out: np.ndarray | int = e.const
    for t, c in e.terms:
        if isinstance(t, str):
            out = out + c * grid[t]
        else:
            a = _eval_np(t.arg, grid)
            out = out + c * (np.floor_divide(a, t.divisor) if t.op == "floordiv" else np.mod(a, t.divisor))
    return out


def _lines(layout: LineLayout, accs: Iterable[SpecAccess], ext: Mapping[str, int]) -> np.ndarray:
    """Distinct line addresses (buffer offset / line) touched, by evaluating every iteration point with numpy."""
    full_strides = [math.prod(layout.shape[d + 1 :]) for d in range(len(layout.shape))]
    parts = []
    for acc in accs:
        vs = sorted(_access_vars(acc))
        shape = [ext[v] for v in vs]
        grid = {v: np.arange(ext[v], dtype=np.int64).reshape([-1 if j == i else 1 for j in range(len(vs))])
                for i, v in enumerate(vs)}  # fmt: skip
        addr = sum(s * _eval_np(e, grid) for s, e in zip(full_strides, acc[0], strict=True))
        lines = np.broadcast_to(np.floor_divide(addr, layout.epl), shape)
        mask = np.ones(shape, dtype=bool)
        for c in acc[1]:
            mask &= np.broadcast_to(_eval_np(c, grid), shape) >= 0
        parts.append(lines[mask])
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def _enumerate(layout: LineLayout, accs: Iterable[SpecAccess], ext: Mapping[str, int]) -> int:
    """Exact count by evaluating every iteration point of every (quasi-affine) access with numpy."""
    return int(_lines(layout, accs, ext).size)


def _occurrences(e: IndexExpr, out: Counter) -> None:
    for t, _ in e.terms:
        if isinstance(t, str):
            out[t] += 1
        else:
            _occurrences(t.arg, out)


def _flatten_divmods(
    idx: tuple[IndexExpr, ...], ext: Mapping[str, int]
) -> tuple[tuple[IndexExpr, ...], dict[str, int]] | None:
    """Replace each floordiv/floormod of an affine argument by a fresh variable, when exact.

    Exact when the argument's variables occur nowhere else and it takes every value of an interval
    [lo, hi]: floordiv by d then takes every value of [lo//d, hi//d], floormod those of an interval too
    unless it wraps around.
    """
    uses: Counter = Counter()
    for e in idx:
        _occurrences(e, uses)
    new_ext = dict(ext)
    out = []
    for e in idx:
        terms: dict[str, int] = {}
        const = e.const
        for t, c in e.terms:
            if isinstance(t, str):
                terms[t] = terms.get(t, 0) + c
                continue
            iv = _dense_interval(t.arg, ext) if t.arg.affine else None
            if iv is None or any(uses[v] != 1 for v in t.arg.loop_vars()):
                return None
            (lo, hi), d = iv, t.divisor
            if t.op == "floordiv":
                off, n = lo // d, hi // d - lo // d + 1
            elif hi - lo + 1 >= d:
                off, n = 0, d
            elif lo % d <= hi % d:
                off, n = lo % d, hi - lo + 1
            else:
                return None
            name = f"~{len(new_ext)}"
            new_ext[name] = n
            terms[name] = c
            const += c * off
        out.append(IndexExpr.from_terms(terms, const))
    return tuple(out), new_ext


def _rewrite_arg(e: IndexExpr, arg: IndexExpr, repl: IndexExpr, ext: Mapping[str, int]) -> IndexExpr:
    """e with every floordiv/floormod of `arg` taken of `repl` instead (and simplified)."""
    out = IndexExpr.constant(e.const)
    for t, c in e.terms:
        if isinstance(t, str):
            out = out.add(IndexExpr.var(t), c)
        else:
            inner = repl if t.arg == arg else _rewrite_arg(t.arg, arg, repl, ext)
            out = out.add(make_divmod(t.op, inner, t.divisor, ext), c)
    return out


def simplify_access(acc: SpecAccess, ext: Mapping[str, int]) -> tuple[SpecAccess | None, dict[str, int]]:
    """Make floordiv/floormod of an access affine where exact; None if its guards exclude every point.

    A multi-variable argument A of floordiv/floormod (a split of a fused loop, as in cooperative fetching:
    (f0*128 + f1*4 + f2) // 60) whose variables occur only inside A and in bounds on A, and which takes
    every value of an interval, is one variable phi ranging over that interval (bounds applied). Then
    variables used through floordiv/floormod are written as mixed-radix digits when their cut points chain.
    """
    idx, conds = acc
    exprs = (*idx, *conds)
    if all(e.affine for e in exprs) or any(e.is_opaque for e in exprs):
        return acc, {}
    new_ext = dict(ext)
    args: list[IndexExpr] = []

    def collect(e: IndexExpr) -> None:
        for t, _ in e.terms:
            if isinstance(t, DivMod):
                if t.arg.affine and t.arg.terms and (len(t.arg.terms) > 1 or t.arg.terms[0][1] != 1):
                    if t.arg not in args:
                        args.append(t.arg)
                else:
                    collect(t.arg)

    for e in exprs:
        collect(e)
    for arg in args:
        total: Counter = Counter()
        for e in idx:
            _occurrences(e, total)
        neg = tuple((v, -c) for v, c in arg.terms)
        upper = [c for c in conds if c.terms == neg]  # K - A' >= 0, with A = A' + const
        lower = [c for c in conds if c.terms == arg.terms]  # A' - K >= 0
        others = [c for c in conds if c.terms not in (neg, arg.terms)]
        for c in others:
            _occurrences(c, total)
        inside: Counter = Counter()
        for e in idx:
            _count_arg(e, arg, inside)
        if any(total[v] != inside[v] for v in arg.loop_vars()):
            continue
        iv = _dense_interval(arg, new_ext)
        if iv is None:
            continue
        lo, hi = iv
        hi = min([hi, *(c.const + arg.const for c in upper)])
        lo = max([lo, *(arg.const - c.const for c in lower)])
        if hi < lo:
            return None, {}
        phi = f"~{len(new_ext)}"
        new_ext[phi] = hi - lo + 1
        repl = IndexExpr.var(phi, 1, lo)
        idx = tuple(_rewrite_arg(e, arg, repl, new_ext) for e in idx)
        conds = tuple(others)
    exprs = (*idx, *conds)
    _, subst = _digits_of(exprs, new_ext)
    if subst:
        idx = tuple(e.substitute(subst, new_ext) for e in idx)
        conds = tuple(c.substitute(subst, new_ext) for c in conds)
    return (idx, conds), new_ext


def _count_arg(e: IndexExpr, arg: IndexExpr, out: Counter) -> None:
    """Occurrences of the variables of `arg` inside floordiv/floormod terms of exactly `arg`."""
    for t, _ in e.terms:
        if isinstance(t, DivMod):
            if t.arg == arg:
                _occurrences(arg, out)
            else:
                _count_arg(t.arg, arg, out)


def canonical_access(
    idx: tuple[IndexExpr, ...], conds: tuple[IndexExpr, ...], ext: Mapping[str, int]
) -> tuple[SpecAccess, dict[str, int]]:
    """Rename the loop variables of one affine access by (extent, coefficient pattern).

    Accesses with the same image then compare equal whatever their loop names, which dedups unions
    (init/update/copy of one tile) and lets the cache serve other schedules. Each access's image is a
    projection of its own iteration domain, so renaming accesses independently is exact.
    """
    exprs = (*idx, *conds)
    if not all(e.affine for e in exprs):
        return (idx, conds), {v: ext[v] for e in exprs for v in e.loop_vars()}
    coefs = [e.coeffs for e in exprs]
    used = {v for c in coefs for v in c}
    sig = {v: (ext[v], tuple(c.get(v, 0) for c in coefs)) for v in used}
    names = {v: f"e{sig[v][0]}_{i}" for i, v in enumerate(sorted(used, key=lambda v: sig[v]))}
    ren = tuple(IndexExpr(tuple(sorted((names[v], k) for v, k in e.terms)), e.const) for e in exprs)
    return (ren[: len(idx)], ren[len(idx) :]), {names[v]: ext[v] for v in used}


def _dense_interval(e: IndexExpr, ext: Mapping[str, int]) -> tuple[int, int] | None:
    """[lo, hi] if the affine expression takes every integer value in its range over the box."""
    base, span = e.const, 0
    for c, n in sorted((abs(c), ext[v]) for v, c in e.terms if ext[v] > 1):
        if c > span + 1:
            return None
        span += c * (n - 1)
    base += sum(c * (ext[v] - 1) for v, c in e.terms if c < 0)
    return base, base + span


def _covering_box(accs: Sequence[SpecAccess], ext: Mapping[str, int]) -> SpecAccess | None:
    """An access whose element set is a full box containing the per-dim hulls of all the others."""
    hulls = []
    for idx, _ in accs:
        if not all(e.quasi_affine for e in idx):
            return None
        hulls.append([e.interval(ext) for e in idx])
    for idx, conds in accs:
        if conds or not all(e.affine for e in idx):
            continue
        seen: set[str] = set()
        box = []
        for e in idx:
            vs = e.loop_vars()
            iv = _dense_interval(e, ext)
            if vs & seen or iv is None:
                break
            seen |= vs
            box.append(iv)
        else:
            if all(all(b[0] <= h[0] and h[1] <= b[1] for b, h in zip(box, other, strict=True)) for other in hulls):
                return idx, conds
    return None


# -- isl -------------------------------------------------------------------------------------------


def _isl_expr(e: IndexExpr, names: Mapping[str, str]) -> str:
    parts = []
    for t, c in e.terms:
        if isinstance(t, str):
            atom = names[t]
        elif t.op == "floordiv":
            atom = f"floor(({_isl_expr(t.arg, names)})/{t.divisor})"
        else:
            atom = f"(({_isl_expr(t.arg, names)}) mod {t.divisor})"
        parts.append(f"{c}*{atom}" if c != 1 else atom)
    if e.const or not parts:
        parts.append(str(e.const))
    return " + ".join(parts).replace("+ -", "- ")


def isl_footprint_text(layout: LineLayout, accs: Iterable[SpecAccess], ext: Mapping[str, int]) -> str:
    """isl set (text) of the lines touched: one disjunct per access, loop variables existential."""
    names = {v: f"v{i}" for i, v in enumerate(sorted(ext))}
    outs = [f"o{d}" for d in range(layout.k)] + ["l"]
    disjuncts = []
    for idx, conds in accs:
        used = sorted({v for e in (*idx, *conds) for v in e.loop_vars()})
        exist = [names[v] for v in used]
        cons = [f"0 <= {names[v]} <= {ext[v] - 1}" for v in used]
        dims: list[str] = []
        for d, e in enumerate(idx):
            if e.is_opaque:  # conservative: any value of the (clipped) range
                b = f"b{d}"
                lo, hi = e.bounds
                lo = 0 if math.isinf(lo) else max(0, int(lo))
                hi = layout.shape[d] - 1 if math.isinf(hi) else min(layout.shape[d] - 1, int(hi))
                exist.append(b)
                cons.append(f"{lo} <= {b} <= {max(lo, hi)}")
                dims.append(b)
            else:
                dims.append(_isl_expr(e, names))
        for d in range(layout.k):
            cons.append(f"o{d} = {dims[d]}")
        lin = " + ".join(
            f"{s}*({dims[d]})" for d, s in zip(range(layout.k, len(layout.shape)), layout.strides, strict=True)
        )
        if layout.epl == 1:
            cons.append(f"l = {lin}")
        else:
            cons.append(f"{layout.epl}*l <= {lin} <= {layout.epl}*l + {layout.epl - 1}")
        cons += [f"{_isl_expr(c, names)} >= 0" for c in conds]
        body = " and ".join(cons)
        if exist:
            body = f"exists ({', '.join(exist)} : {body})"
        disjuncts.append(f"L[{', '.join(outs)}] : {body}")
    return "{ " + "; ".join(disjuncts) + " }"


# -- box estimate ----------------------------------------------------------------------------------


def _box_count(layout: LineLayout, accs: Iterable[SpecAccess], ext: Mapping[str, int]) -> int:
    """Upper bound: product over line coordinates of the hull of their ranges (guards ignored)."""
    n = len(layout.shape)
    hull: list[list[float]] = [[math.inf, -math.inf] for _ in range(layout.k + 1)]
    for idx, _ in accs:
        ranges = []
        for d, e in enumerate(idx):
            lo, hi = e.interval(ext)
            ranges.append((max(lo, 0.0), min(hi, layout.shape[d] - 1.0)))
        for d in range(layout.k):
            hull[d][0] = min(hull[d][0], ranges[d][0])
            hull[d][1] = max(hull[d][1], ranges[d][1])
        lo = sum(s * ranges[d][0] for d, s in zip(range(layout.k, n), layout.strides, strict=True))
        hi = sum(s * ranges[d][1] for d, s in zip(range(layout.k, n), layout.strides, strict=True))
        hull[-1][0] = min(hull[-1][0], lo // layout.epl)
        hull[-1][1] = max(hull[-1][1], min(hi, layout.suffix_size - 1.0) // layout.epl)
    return int(math.prod(max(0.0, hi - lo + 1) for lo, hi in hull))


# --------------------------------------------------------------------------------------------------
# Algorithm 2
# --------------------------------------------------------------------------------------------------


@dataclass
class LoopRecord:
    """What Algorithm 2 decided at one loop (or the program root) for one cache level."""

    var: str  # loop variable; "<var>@<stride>" for a digit of a fused loop; "<root>" for the program
    depth: int
    trip: int
    single_lines: int  # footprint of one iteration, all buffers
    fits: bool
    footprint: dict[str, int]  # per buffer, whole loop
    movement: dict[str, float]  # per buffer
    reuse: dict[str, bool]  # reuse status after this loop


@dataclass
class LevelMovement:
    """Data moved into one cache level by the whole program."""

    level: str
    capacity_lines: int
    lines: float
    bytes: float
    per_buffer_lines: dict[str, float]
    per_buffer_bytes: dict[str, float]
    loops: list[LoopRecord]

    def record(self, var: str) -> LoopRecord:
        return next(r for r in self.loops if r.var == var)


@dataclass
class DataMovement:
    """Per-cache-level movement plus the whole-program footprint (compulsory lines) of each buffer."""

    line_bytes: int
    levels: dict[str, LevelMovement]
    footprint_lines: dict[str, int]
    buffers: tuple[str, ...]
    stats: FootprintStats

    def bytes(self, level: str) -> float:
        return self.levels[level].bytes

    def lines(self, level: str) -> float:
        return self.levels[level].lines


@dataclass
class _Info:
    """Footprints of one node (loop, statement or the virtual root) of the tree."""

    var: str
    depth: int
    trip: int
    fp: dict[str, int]
    fp1: dict[str, int]
    children: list[_Info]
    crowd: dict[str, tuple[int, ...]] = field(default_factory=dict)  # per buffer: most lines in one set
    crowd1: dict[str, tuple[int, ...]] = field(default_factory=dict)  # the same for one iteration


@dataclass(eq=False)
class _AccRef:
    """An access prepared for footprint queries (fused loop variables replaced by their digits)."""

    buffer: str
    indices: tuple[IndexExpr, ...]
    conds: tuple[IndexExpr, ...]
    path: tuple[str, ...]  # enclosing loop variables (fused loops: their digits), outermost first


class _Analysis:
    """Footprint pass over the tree (independent of cache size)."""

    def __init__(self, tree: LoopTree, spec: HardwareSpec, counter: FootprintCounter,
                 sets: tuple[int, ...] = (), max_lines: int = 0) -> None:
        self.counter = counter
        self.sets = sets  # set counts of the set-associative levels analysed for conflicts
        self.max_lines = max_lines  # footprints above this fit no level anyway: no conflict query
        self.line_bytes = spec.line_bytes
        self.layouts: dict[str, LineLayout] = {}
        self.extents = dict(tree.extents)
        self.digits, self.subst = _fused_digits(tree, self.extents)
        self._spec_memo: dict[tuple[int, int], tuple[SpecAccess, dict[str, int]] | None] = {}
        self._path: list[str] = []

    def _ref(self, a: Access, conds: tuple[IndexExpr, ...]) -> _AccRef:
        if a.buffer not in self.layouts:
            self.layouts[a.buffer] = LineLayout.of(a.mem_shape, a.dtype_bytes, self.line_bytes)
        idx, cs = a.mem_indices, conds
        if self.subst:
            idx = tuple(e.substitute(self.subst, self.extents) for e in idx)
            cs = tuple(c.substitute(self.subst, self.extents) for c in cs)
        return _AccRef(a.buffer, idx, cs, tuple(self._path))

    def _specialise(self, ref: _AccRef, depth: int) -> tuple[SpecAccess, dict[str, int]] | None:
        """The access with loops outside `path[depth:]` at their first iteration, in canonical variables
        (with their extents); None if its guards exclude that iteration."""
        key = (id(ref), depth)
        if key in self._spec_memo:
            return self._spec_memo[key]
        ext = {v: self.extents[v] for v in ref.path[depth:] if self.extents[v] > 1}  # extent 1: always 0
        conds: list[IndexExpr] | None = []
        for c in ref.conds:
            sc = c.specialize(ext)
            if not sc.is_const:
                conds.append(sc)
            elif sc.const < 0:
                conds = None
                break
        got = None
        if conds is not None:
            got = canonical_access(tuple(e.specialize(ext) for e in ref.indices), tuple(conds), ext)
        self._spec_memo[key] = got
        return got

    def count(self, refs: dict[str, list[_AccRef]], depth: int
              ) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
        """Per buffer: distinct lines touched below `depth`, and (set-associative levels) most lines in one set."""
        out, crowd = {}, {}
        for buf, lst in refs.items():
            accs, ext = [], {}
            for r in lst:  # (extents of the canonical variables come with each access)
                got = self._specialise(r, depth)
                if got is not None:
                    accs.append(got[0])
                    ext.update(got[1])
            n = out[buf] = self.counter.count(self.layouts[buf], accs, ext)
            if self.sets and 1 < n <= self.max_lines:
                got = self.counter.crowding(self.layouts[buf], accs, ext, self.sets)
                if got is not None:
                    crowd[buf] = got
        return out, crowd

    def visit(self, node: LoopNode | StmtLeaf, refs_out: dict[str, list[_AccRef]]) -> _Info:
        depth = len(self._path)
        if not node.is_loop:
            refs: dict[str, list[_AccRef]] = {}
            for a in node.accesses:
                if not _on_chip(a.scope):
                    refs.setdefault(a.buffer, []).append(self._ref(a, node.conditions))
            _merge(refs_out, refs)
            fp, crowd = self.count(refs, depth)
            return _Info(node.block, depth, 1, fp, fp, [], crowd, crowd)
        if node.alias_of:  # re-bound GPU thread loop: no iterations of its own
            return self._transparent(node, refs_out)
        # A fused loop is analysed as the nest of its digits (outermost first), like the unfused loops.
        levels = tuple(reversed(self.digits.get(node.var, (node.var,))))
        self._path.extend(levels)
        refs = {}
        children = [self.visit(c, refs) for c in node.children]
        del self._path[depth:]
        _merge(refs_out, refs)
        for lvl in range(len(levels) - 1, -1, -1):
            d = depth + lvl
            v = levels[lvl]
            # With one child, one iteration of the loop is exactly the child's execution.
            fp1, crowd1 = (children[0].fp, children[0].crowd) if len(children) == 1 else self.count(refs, d + 1)
            fp, crowd = self.count(refs, d)
            info = _Info(v, d, self.extents[v], fp, fp1, children, crowd, crowd1)
            children = [info]
        return info

    def _transparent(self, node: LoopNode, refs_out: dict[str, list[_AccRef]]) -> _Info:
        refs: dict[str, list[_AccRef]] = {}
        children = [self.visit(c, refs) for c in node.children]
        _merge(refs_out, refs)
        depth = len(self._path)
        fp, crowd = self.count(refs, depth)
        return _Info(node.var, depth, 1, fp, fp, children, crowd, crowd)

    def root(self, tree: LoopTree) -> _Info:
        refs: dict[str, list[_AccRef]] = {}
        children = [self.visit(c, refs) for c in tree.roots]
        fp, crowd = self.count(refs, 0)
        return _Info("<root>", -1, 1, fp, fp, children, crowd, crowd)

    def collect(self, nodes: Sequence[Node], refs_out: dict[str, list[_AccRef]]) -> None:
        """The accesses below `nodes`, prepared for footprint queries, without counting any loop's footprint."""
        for node in nodes:
            if not node.is_loop:
                for a in node.accesses:
                    if not _on_chip(a.scope):
                        refs_out.setdefault(a.buffer, []).append(self._ref(a, node.conditions))
                continue
            if node.alias_of:
                self.collect(node.children, refs_out)
                continue
            depth = len(self._path)
            self._path.extend(reversed(self.digits.get(node.var, (node.var,))))
            self.collect(node.children, refs_out)
            del self._path[depth:]


def core_footprint_lines(tree: LoopTree, spec: HardwareSpec, buffers: Container[str],
                         counter: FootprintCounter | None = None) -> dict[str, int]:
    """Distinct lines of each of `buffers` that the first core touches: the program with the outermost parallel
    loop of each nest cut to the first core's share of its iterations (the runtime hands each core one
    contiguous chunk). A weight that every core reads whole (parallel over pixels) counts whole; split by
    output channels, it counts its share. Without a parallel loop one core touches everything."""
    counter = counter or default_counter()
    extents = dict(tree.extents)
    for root in tree.roots:
        loop = _outermost_parallel(root)
        if loop is not None:
            extents[loop.var] = -(-loop.extent // max(spec.cores, 1))
    analysis = _Analysis(LoopTree(roots=tree.roots, extents=extents), spec, counter)
    refs: dict[str, list[_AccRef]] = {}
    analysis.collect(tree.roots, refs)
    lines, _ = analysis.count({b: r for b, r in refs.items() if b in buffers}, 0)
    return lines


def _outermost_parallel(node: Node) -> LoopNode | None:
    """The first parallel loop met going down from `node` (pre-order), or None."""
    if not node.is_loop:
        return None
    if node.kind == "parallel":
        return node
    for child in node.children:
        found = _outermost_parallel(child)
        if found is not None:
            return found
    return None


def _fused_digits(tree: LoopTree, extents: dict[str, int]) -> tuple[dict[str, tuple[str, ...]], dict[str, IndexExpr]]:
    """Mixed-radix digits of the loops of `tree` used through floordiv/floormod (fused loops)."""
    exprs = [e for st in tree.statements() for e in (*st.conditions, *(x for a in st.accesses for x in a.mem_indices))]
    return _digits_of(exprs, extents)


def _digits_of(
    exprs: Iterable[IndexExpr], extents: dict[str, int], only: Container[str] | None = None
) -> tuple[dict[str, tuple[str, ...]], dict[str, IndexExpr]]:
    """Mixed-radix digits of variables used through floordiv/floormod, so that those become affine.

    The cut points c of the floordiv(f, c) / floormod(f, c) terms (possibly nested) of a variable f, when
    they form a divisibility chain up to its extent, define the exact rewrite f = sum_j digit_j * cut_j
    (for a loop, the digits iterate in the loop's order); `extents` gets the digit extents. Returns
    (variable -> digit names, innermost first; variable -> expression over its digits).
    """
    cuts: dict[str, set[int]] = {}

    def root(e: IndexExpr) -> tuple[str, int] | None:
        """(f, base) when e is f, or a digit group of f starting at stride `base`; records the cuts."""
        if e.const != 0 or len(e.terms) != 1 or e.terms[0][1] != 1:
            return None
        t = e.terms[0][0]
        if isinstance(t, str):
            return t, 1
        got = root(t.arg)
        if got is None:
            return None
        f, base = got
        cuts.setdefault(f, set()).add(base * t.divisor)
        return (f, base * t.divisor) if t.op == "floordiv" else (f, base)

    def visit(e: IndexExpr) -> None:
        for t, _ in e.terms:
            if isinstance(t, DivMod) and root(IndexExpr(((t, 1),), 0)) is None:
                visit(t.arg)  # other uses stay floordiv/floormod over the digits

    for e in exprs:
        visit(e)
    digits: dict[str, tuple[str, ...]] = {}
    subst: dict[str, IndexExpr] = {}
    for f, cs in cuts.items():
        extent = extents.get(f)
        if extent is None or (only is not None and f not in only):
            continue
        chain = _longest_chain(cs, extent)
        if not chain:
            continue
        names, terms, prev = [], {}, 1
        for c in chain:
            name = f"{f}@{prev}"
            extents[name] = c // prev
            names.append(name)
            terms[name] = prev
            prev = c
        digits[f] = tuple(names)
        subst[f] = IndexExpr.from_terms(terms, 0)
    return digits, subst


def _longest_chain(cuts: Iterable[int], extent: int) -> list[int]:
    """Longest c_1 | c_2 | ... | extent among the cut points (ascending, ends with the extent); other
    floordiv/floormod terms stay as they are over the digits."""
    cands = sorted({c for c in cuts if 1 < c < extent and extent % c == 0})
    best: dict[int, list[int]] = {}
    for c in cands:
        prev = [best[p] for p in cands if p < c and c % p == 0]
        best[c] = max(prev, key=len, default=[]) + [c]
    tail = max(best.values(), key=len, default=[])
    return tail + [extent] if tail else []


def _merge(into: dict[str, list[_AccRef]], refs: dict[str, list[_AccRef]]) -> None:
    for k, v in refs.items():
        into.setdefault(k, []).extend(v)


def _on_chip(scope: str) -> bool:
    return any(scope.startswith(s) for s in _ON_CHIP_SCOPES)


@dataclass(frozen=True)
class _Geometry:
    """One cache level: capacity in lines, and (set-associative) its set count and index in the crowd tuples."""

    cap: int
    sets: int = 0
    index: int = -1

    def effective(self, fp: Mapping[str, int], crowd: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
        """Footprints as the cache sees them: lines crowding into few sets fill them as if the footprint
        were (most lines in one set) x sets, so it fits only if both its size and that crowding fit."""
        if self.index < 0:
            return dict(fp)
        return {t: max(n, crowd[t][self.index] * self.sets) if t in crowd else n for t, n in fp.items()}


def _movement(info: _Info, geo: _Geometry, records: list[LoopRecord]) -> dict[str, tuple[float, bool]]:
    """Per buffer (movement in lines, reuse status) of a node for one cache level."""
    if not info.children:
        return {t: (float(n), True) for t, n in info.fp.items()}
    cap = geo.cap
    subs = [_movement(c, geo, records) for c in info.children]
    single = sum(geo.effective(info.fp1, info.crowd1).values())
    fits = single <= cap
    seen = geo.effective(info.fp, info.crowd)
    out: dict[str, tuple[float, bool]] = {}
    for t, fp in info.fp.items():
        touched = [i for i, s in enumerate(subs) if t in s]
        reuse = all(subs[i][t][1] for i in touched) and not _gap_exceeds(info, touched, cap)
        if fits or reuse:
            mov = float(fp)
        else:
            mov = info.trip * sum(subs[i][t][0] for i in touched)
        out[t] = (mov, reuse and seen[t] <= cap)
    records.append(
        LoopRecord(
            var=info.var,
            depth=info.depth,
            trip=info.trip,
            single_lines=single,
            fits=fits,
            footprint=dict(info.fp),
            movement={t: m for t, (m, _) in out.items()},
            reuse={t: r for t, (_, r) in out.items()},
        )
    )
    return out


def _gap_exceeds(info: _Info, touched: list[int], cap: int) -> bool:
    """A run of consecutive children not touching the buffer (wrapping around if the loop repeats)
    whose footprints sum above the cache: the buffer's reuse distance exceeds the capacity."""
    n = len(info.children)
    if len(touched) == n:
        return False
    sizes = [sum(c.fp.values()) for c in info.children]
    marks = set(touched)
    if info.trip > 1:
        seq: Iterable[int] = [(touched[0] + 1 + s) % n for s in range(n)]
    else:
        seq = range(touched[0], touched[-1] + 1)
    run = 0
    for i in seq:
        if i in marks:
            if run > cap:
                return True
            run = 0
        else:
            run += sizes[i]
    return False


def data_movement(
    tree: LoopTree,
    spec: HardwareSpec,
    config: DataMoveConfig | None = None,
    counter: FootprintCounter | None = None,
) -> DataMovement:
    """Lines/bytes moved into each cache level (L1, L2 of `spec`) by the program, total and per buffer."""
    if counter is None:
        counter = default_counter(config)
    cfg = config or counter.config
    before = counter.stats.copy()
    capacities = {"L1": spec.l1_bytes, "L2": spec.l2_bytes, "L3": spec.l3_bytes}
    ways = {"L1": spec.l1_ways, "L2": spec.l2_ways}
    geos: dict[str, _Geometry] = {}
    set_counts: list[int] = []
    for level in cfg.levels:
        cap = max(1, int(capacities[level]) // spec.line_bytes)
        w = ways.get(level, 0) if cfg.set_conflicts else 0
        if 0 < w < cap and cap % w == 0:
            sets = cap // w
            if cfg.page_bytes >= spec.line_bytes:
                sets = min(sets, cfg.page_bytes // spec.line_bytes)
            set_counts.append(sets)
            geos[level] = _Geometry(cap, sets, len(set_counts) - 1)
        else:
            geos[level] = _Geometry(cap)
    max_lines = max((g.cap for g in geos.values() if g.index >= 0), default=0)
    analysis = _Analysis(tree, spec, counter, tuple(set_counts), max_lines)
    root = analysis.root(tree)
    levels: dict[str, LevelMovement] = {}
    for level in cfg.levels:
        cap = geos[level].cap
        records: list[LoopRecord] = []
        mov = _movement(root, geos[level], records)
        per_lines = {t: m for t, (m, _) in mov.items()}
        levels[level] = LevelMovement(
            level=level,
            capacity_lines=cap,
            lines=float(sum(per_lines.values())),
            bytes=float(sum(per_lines.values()) * spec.line_bytes),
            per_buffer_lines=per_lines,
            per_buffer_bytes={t: m * spec.line_bytes for t, m in per_lines.items()},
            loops=records,
        )
    stats = counter.stats.delta(before)
    if stats.fallbacks:
        log.debug("data_movement: %d footprint fallbacks %s", stats.fallbacks, dict(stats.fallback_reasons))
    return DataMovement(
        line_bytes=spec.line_bytes,
        levels=levels,
        footprint_lines=dict(root.fp),
        buffers=tuple(sorted(root.fp)),
        stats=stats,
    )
