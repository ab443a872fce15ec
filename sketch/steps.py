"""The steps a sketch is made of; each replays schedule primitives and asks a `Decider` for its holes."""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx

from ..prepack import PREPROC_ATTR, is_constant_weight
from .analysis import affine_terms, iter_var_loops, loop_iter_kinds, vars_in
from .sketch import TILE, Decider, FootprintLimit, Hole, PanelLimit, ProductLimit, Step

UNROLL_KEY = "pragma_auto_unroll_max_step"


def tile_loop(sch: s_tir.Schedule, loop: s_tir.LoopRV, decider: Decider, key: str, parts: int,
              max_innermost: int) -> list[s_tir.LoopRV]:
    """Split `loop` into `parts` loops with a tile-size hole; the decision is recorded in the trace."""
    extent = int(sch.get(loop).extent)
    hole = Hole(key=key, kind=TILE, extent=extent, parts=parts, max_innermost=max_innermost)
    factors = decider.decide(hole)
    rvs = sch.sample_perfect_tile(loop, n=parts, max_innermost_factor=max_innermost, decision=list(factors))
    return list(sch.split(loop, factors=rvs, preserve_unit_iters=True))


def tile_hole_key(block: str, kind: str, index: int) -> str:
    """The key of `MultiLevelTile`'s tile hole for loop `index` of `block` (kind "R": a reduction loop)."""
    return f"{block}/{'R' if kind == 'R' else 'S'}{index}"


def choose(sch: s_tir.Schedule, decider: Decider, key: str, kind: str, options: tuple[int, ...]) -> int:
    """Pick one of `options` through a choice hole; recorded in the trace as a categorical sample."""
    index = decider.decide(Hole(key=key, kind=kind, options=tuple(options)))
    probs = [1.0 / len(options)] * len(options)
    sch.sample_categorical(candidates=list(options), probs=probs, decision=index)
    return options[index]


def _same(sch: s_tir.Schedule, a: s_tir.LoopRV, b: s_tir.LoopRV) -> bool:
    return sch.get(a).same_as(sch.get(b))


@dataclass(frozen=True)
class Inline(Step):
    """Always-inline: an element-wise block is computed where its consumers read it."""

    block: str

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        sch.compute_inline(sch.get_sblock(self.block))


@dataclass(frozen=True)
class MultiLevelTile(Step):
    """Multi-level tiling (e.g. "SSRSRS"), optionally with a cache-write stage and a fused consumer.

    On GPU (`gpu=True`) the first three spatial levels are bound to blockIdx / vthread / threadIdx, the
    consumer is fused at the thread level and the inputs are staged in shared memory (cooperative fetch).
    """

    block: str
    structure: str
    consumer: str | None = None
    fuse_level: int = 0
    cache_write: str | None = None
    shared_reads: bool = False
    gpu: bool = False
    max_innermost: int = 64
    max_threads: int = 1024
    min_threads: int = 1
    max_vthread: int = 8
    fetch_vector: tuple[int, ...] = (1, 2, 4)
    max_shared_bytes: int = 48 * 1024

    def describe(self) -> str:
        extra = []
        if self.cache_write:
            extra.append(f"cache_write={self.cache_write}")
        if self.consumer and self.fuse_level:
            extra.append(f"fuse {self.consumer} at level {self.fuse_level}")
        if self.shared_reads:
            extra.append("shared cache reads")
        return f"MultiLevelTile({self.block}, {self.structure}{', ' if extra else ''}{', '.join(extra)})"

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        block = sch.get_sblock(self.block)
        consumer = self.consumer
        if self.cache_write:
            cache = sch.cache_write(block, 0, self.cache_write)
            cache_name = sch.get(cache).name_hint
            if consumer is not None:  # element-wise consumer folded into the copy-back stage
                sch.reverse_compute_inline(sch.get_sblock(consumer))
            consumer = cache_name
        loops = sch.get_loops(block)
        kinds = loop_iter_kinds(sch, self.block)
        n_s, n_r = self.structure.count("S"), self.structure.count("R")
        if self.gpu and self.shared_reads:
            decider.constrain(self._shared_footprint(sch, loops, kinds, n_s, n_r))
        s_tiles: list[list[s_tir.LoopRV]] = []
        r_tiles: list[list[s_tir.LoopRV]] = []
        s_keys: list[str] = []
        for idx, (loop, kind) in enumerate(zip(loops, kinds, strict=True)):
            if kind == "R":
                r_tiles.append(tile_loop(sch, loop, decider, tile_hole_key(self.block, kind, idx), n_r,
                                         self.max_innermost))
            else:
                key = tile_hole_key(self.block, kind, idx)
                s_tiles.append(tile_loop(sch, loop, decider, key, n_s, self.max_innermost))
                s_keys.append(key)
        order: list[s_tir.LoopRV] = []
        levels: list[list[s_tir.LoopRV]] = []  # the loops of each spatial level, in order
        r_levels: list[list[s_tir.LoopRV]] = []
        s_level = r_level = 0
        for ch in self.structure:
            if ch == "S":
                group = [t[s_level] for t in s_tiles]
                levels.append(group)
                s_level += 1
            else:
                group = [t[r_level] for t in r_tiles]
                r_levels.append(group)
                r_level += 1
            order += group
        sch.reorder(*order)
        if self.gpu:
            r_outer = r_levels[0][-1] if r_levels and r_levels[0] else None
            self._bind_gpu(sch, decider, levels, s_keys, consumer, r_outer)
            return
        if consumer is not None and self.fuse_level > 0:
            sch.reverse_compute_at(sch.get_sblock(consumer), levels[self.fuse_level - 1][-1],
                                   preserve_unit_loops=True)

    def _shared_footprint(self, sch: s_tir.Schedule, loops: list[s_tir.LoopRV], kinds: list[str], n_s: int,
                          n_r: int) -> FootprintLimit:
        """Bytes of the shared-memory tiles of all inputs as a function of the tile sizes (inside R0)."""
        loop_of = {}  # block iterator -> (hole key, the tile parts that lie inside one shared-memory stage)
        bindings = iter_var_loops(sch, self.block)
        for idx, (lp, kind) in enumerate(zip(loops, kinds, strict=True)):
            var = sch.get(lp).loop_var.name
            key = tile_hole_key(self.block, kind, idx)
            parts = tuple(range(1, n_r if kind == "R" else n_s))
            for iv, used in bindings.items():
                if used == {var}:
                    loop_of[iv] = (key, parts)
        buffers = []
        for region in sch.get(sch.get_sblock(self.block)).reads:
            ty = region.source.ty
            dims = []
            for rng, full in zip(region.region, ty.shape, strict=True):
                terms = affine_terms(rng.min)
                extent = affine_terms(rng.extent)
                if terms is None or extent is None or extent[1] or any(v not in loop_of for v in terms[1]):
                    dims.append((int(full), ()))
                    continue
                dims.append((extent[0], tuple((*loop_of[v], abs(c)) for v, c in terms[1].items() if c)))
            buffers.append((max(1, tvm.DataType(ty.dtype).bits // 8), tuple(dims)))
        return FootprintLimit("shared_memory", tuple(buffers), self.max_shared_bytes)

    def _bind_gpu(self, sch: s_tir.Schedule, decider: Decider, levels: list[list[s_tir.LoopRV]],
                  s_keys: list[str], consumer: str | None, r_outer: s_tir.LoopRV | None) -> None:
        decider.constrain(ProductLimit("threads", tuple((k, 2) for k in s_keys), self.max_threads,
                                       self.min_threads))
        decider.constrain(ProductLimit("vthread", tuple((k, 1) for k in s_keys), self.max_vthread))
        bound = []
        for group, tag in zip(levels[:3], ("blockIdx.x", "vthread.x", "threadIdx.x"), strict=True):
            fused = sch.fuse(*group, preserve_unit_iters=True)
            sch.bind(fused, tag)
            bound.append(fused)
        thread_loop = bound[2]
        threads = int(sch.get(thread_loop).extent)
        if consumer is not None:
            sch.reverse_compute_at(sch.get_sblock(consumer), thread_loop, preserve_unit_loops=True)
        if not self.shared_reads or r_outer is None:
            return
        block = sch.get_sblock(self.block)
        for index in range(len(sch.get(block).reads)):
            buffer_name = sch.get(block).reads[index].source.name
            cache = sch.cache_read(block, index, "shared")
            sch.compute_at(cache, r_outer, preserve_unit_loops=True)
            cache_loops = sch.get_loops(cache)
            own = cache_loops[_position(sch, cache_loops, r_outer) + 1:]
            vec = choose(sch, decider, f"{self.block}/fetch:{buffer_name}", "fetch", self.fetch_vector)
            fused = sch.fuse(*own, preserve_unit_iters=True) if len(own) > 1 else own[0]
            if vec > 1:
                _, tx, vx = sch.split(fused, factors=[None, threads, vec])
                sch.vectorize(vx)
            else:
                _, tx = sch.split(fused, factors=[None, threads])
            sch.bind(tx, "threadIdx.x")


def _position(sch: s_tir.Schedule, loops: list[s_tir.LoopRV], target: s_tir.LoopRV) -> int:
    for i, lp in enumerate(loops):
        if _same(sch, lp, target):
            return i
    raise ValueError("loop not found among the block's loops")


@dataclass(frozen=True)
class RFactor(Step):
    """Reduction factorization: split the (fused) reduction and make one part a spatial axis.

    `variant="outer"` factors the outer part (parallel partial sums, indexed first: rf[ro, s...]), `"inner"`
    the inner part (vectorizable partial sums, indexed last: rf[s..., ri], so that the vectorized loop over ri
    writes consecutive floats; indexed first they lie a whole output apart, and a 7x7 global pool of 2048
    channels ran 1.2-9x slower, Zen 4, docs/measurements-one-operator.md). `"split"` splits the reduction in
    three and factors the outer and inner parts together (rf[s..., ro * RI + ri], loops ro, rm, ri: cores share
    the reduction and each vectorizes over ri; a whole-matrix sum of squares ran 1.7x faster than on one core,
    Zen 4, docs/measurements-one-operator.md).
    """

    block: str
    variant: str
    max_innermost: int = 64

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        block = sch.get_sblock(self.block)
        loops = sch.get_loops(block)
        kinds = loop_iter_kinds(sch, self.block)
        r_loops = [lp for lp, k in zip(loops, kinds, strict=True) if k == "R"]
        fused = sch.fuse(*r_loops, preserve_unit_iters=True) if len(r_loops) > 1 else r_loops[0]
        if self.variant == "split":
            outer, mid, inner = tile_loop(sch, fused, decider, f"{self.block}/rf", 3, self.max_innermost)
            lanes = int(sch.get(inner).extent)
            sch.reorder(outer, inner, mid)
            both = sch.fuse(outer, inner, preserve_unit_iters=True)
            rf = sch.rfactor(both, factor_axis=len(sch.get(block).writes[0].source.shape))
            *_, partial, mid = sch.get_loops(rf)
            ro, ri = sch.split(partial, factors=[None, lanes], preserve_unit_iters=True)
            sch.reorder(ro, mid, ri)
            return
        outer, inner = tile_loop(sch, fused, decider, f"{self.block}/rf", 2, self.max_innermost)
        if self.variant == "inner":
            sch.rfactor(inner, factor_axis=len(sch.get(block).writes[0].source.shape))
        else:
            sch.rfactor(outer, factor_axis=0)


@dataclass(frozen=True)
class PackOperand(Step):
    """CPU: copy an input of a reduction into panels, buf[s, r] or buf[r, s] -> packed[s // P, r, s % P].

    s is the block's innermost spatial iterator and r a reduction iterator. The inner tile then reads P
    consecutive floats per r step from one stream, instead of rows a whole row apart (a 1024-float row
    stride puts every row of a tile in one L1 set) or, for buf[s, r], a gather. P is a choice hole. The copy
    is a root nest (panels outermost, then r, then the panel's P elements) that the finishing step annotates.
    A batch of such inputs (`batch_dims` leading indices that are output iterators, as batch_matmul's
    B[b, j, k]) is packed matrix by matrix: packed[b, s // P, r, s % P]. A network's convolution weight has
    several reduction indices, all kept in order inside the panel: w[ry, rx, rc, f] -> packed[f // P, ry, rx, rc,
    f % P], so that the channels a core computes read one contiguous stream instead of a piece of every 4-KiB
    row. A network's constant weight is packed once at build time, not per call (`drytune.prepack`).
    """

    block: str
    read_index: int
    spatial_first: bool  # the buffer is indexed [..., s, r...] (e.g. a dense weight), else [..., r..., s]
    options: tuple[int, ...]
    batch_dims: int = 0
    rows: bool = False  # panels of a few rows of an input the tile broadcasts (A of a GEMM), not of vectors

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        key = f"{self.block}/pack{self.read_index}"
        if not self.rows:
            tile_key = self._tile_key(sch)
            if tile_key is not None:
                decider.constrain(PanelLimit(f"{key} panel", key, self.options, tile_key))
        width = choose(sch, decider, key, "pack", self.options)
        ndim = len(sch.get(sch.get_sblock(self.block)).reads[self.read_index].source.shape)
        cache = sch.cache_read(sch.get_sblock(self.block), self.read_index, "global")
        nb = self.batch_dims
        s_at = nb if self.spatial_first else ndim - 1

        def panels(*index):
            rest = [v for i, v in enumerate(index[nb:], nb) if i != s_at]
            return (*index[:nb], index[s_at] // width, *rest, index[s_at] % width)

        sch.transform_layout(cache, ("write", 0), tirx.IndexMap.from_func(panels, ndim=ndim, index_dtype="int32"))
        loops = sch.get_loops(cache)
        panel, lane = sch.split(loops[s_at], factors=[None, width])
        sch.reorder(panel, *[loop for i, loop in enumerate(loops[nb:], nb) if i != s_at], lane)
        if is_constant_weight(sch.mod["main"], sch.get(cache).reads[0].source):
            # a network weight: packed once when the network is built. 1, not True: a record's trace comes back from
            # JSON with 1, and a mark that differs from the sketch's replay made every such record unrecognised
            sch.annotate(cache, PREPROC_ATTR, 1)

    def _tile_key(self, sch: s_tir.Schedule) -> str | None:
        """The key that `MultiLevelTile` gives the tile hole of the packed axis (the block's loop over it, untiled)."""
        region = sch.get(sch.get_sblock(self.block)).reads[self.read_index].region
        s_at = self.batch_dims if self.spatial_first else len(region) - 1
        ivs = vars_in(region[s_at].min)
        bound = set().union(*(used for iv, used in iter_var_loops(sch, self.block).items() if iv in ivs))
        loops = [sch.get(lp).loop_var.name for lp in sch.get_loops(sch.get_sblock(self.block))]
        found = [i for i, name in enumerate(loops) if name in bound]
        return tile_hole_key(self.block, "S", found[0]) if len(found) == 1 else None


@dataclass(frozen=True)
class CrossThreadReduction(Step):
    """GPU: threads of a block cooperate on one reduction (spatial -> blockIdx, reduction -> threadIdx)."""

    block: str
    threads: tuple[int, ...]

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        block = sch.get_sblock(self.block)
        loops = sch.get_loops(block)
        kinds = loop_iter_kinds(sch, self.block)
        s_loops = [lp for lp, k in zip(loops, kinds, strict=True) if k != "R"]
        r_loops = [lp for lp, k in zip(loops, kinds, strict=True) if k == "R"]
        n = choose(sch, decider, f"{self.block}/xthreads", "threads", self.threads)
        fused_r = sch.fuse(*r_loops, preserve_unit_iters=True) if len(r_loops) > 1 else r_loops[0]
        _, tx = sch.split(fused_r, factors=[None, n])
        sch.bind(tx, "threadIdx.x")
        if s_loops:
            bx = sch.fuse(*s_loops, preserve_unit_iters=True) if len(s_loops) > 1 else s_loops[0]
            sch.bind(bx, "blockIdx.x")


def attach_loops(sch: s_tir.Schedule, consumer: str) -> list[s_tir.LoopRV]:
    """The consumer's outer serial spatial loops: where a producer may be computed."""
    loops = sch.get_loops(sch.get_sblock(consumer))
    kinds = loop_iter_kinds(sch, consumer)
    found = []
    for lp, k in zip(loops, kinds, strict=True):
        if k != "S" or sch.get(lp).kind != tirx.ForKind.SERIAL:
            break
        found.append(lp)
    return found


@dataclass(frozen=True)
class ComputeLocation(Step):
    """Place a block at one of its consumer's spatial loops, or leave it at the root.

    `depth` fixes the number of loop choices when the sketch is derived: a consumer that is itself computed at
    another block's loop gains the inherited loops in front, which must not change this hole's domain.
    `others` are further consumers of the block: the chosen loop is moved out to the innermost one that also
    encloses them (the root if none does), since a producer must come before every reader. With `inline` the last
    option (`INLINE`) inlines the block into its consumers instead (last, so that older records keep their meaning).
    """

    INLINE = -2

    block: str
    consumer: str
    depth: int
    gpu: bool = False
    others: tuple[str, ...] = ()
    inline: bool = False

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        options = (*range(-1, self.depth), *((self.INLINE,) if self.inline else ()))
        where = choose(sch, decider, f"{self.block}/at", "compute_loc", options)
        if where == self.INLINE:
            sch.compute_inline(sch.get_sblock(self.block))
            return
        candidates = attach_loops(sch, self.consumer)
        for other in self.others:
            theirs = sch.get_loops(sch.get_sblock(other))
            shared = 0
            while shared < len(candidates) and any(_same(sch, candidates[shared], lp) for lp in theirs):
                shared += 1
            candidates = candidates[:shared]
        where = min(where, len(candidates) - 1)
        if where >= 0:
            block = sch.get_sblock(self.block)
            sch.compute_at(block, candidates[where], preserve_unit_loops=True)
            if self.gpu:  # the attach loop ends up inside the consumer's threads: a per-thread buffer
                sch.set_scope(block, 0, "local")


@dataclass(frozen=True)
class PadRows(Step):
    """CPU: pad a matmul-like block's row iterator up to a multiple (`pad_einsum`), then pack its inputs.

    A power-of-two extent admits only power-of-two register tiles; padded (1024 -> 1032 rows), tiles of 6 or 12
    rows fit, whose broadcasts and loads leave the FMA ports busier. The padding copy of the row input is inlined
    into its packing (zeros beyond the extent); the padded output is copied back by a consumer block of its own
    nest (not fused: its extent differs from the block's). Padding has to come first: `pad_einsum` wants plain
    indices, which packing replaces.
    """

    block: str
    row_iter: str
    multiple: int
    packs: tuple[PackOperand, ...]

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        block = sch.get_sblock(self.block)
        before = {sch.get(b).name_hint for b in sch.get_producers(block)}
        padding = [self.multiple if iv.var.name == self.row_iter else 1 for iv in sch.get(block).iter_vars]
        sch.pad_einsum(block, padding)
        pads = [name for b in sch.get_producers(sch.get_sblock(self.block))
                if (name := sch.get(b).name_hint) not in before]
        for pack in self.packs:
            pack.apply(sch, decider)
        for name in pads:  # now read by the packing copy only
            sch.compute_inline(sch.get_sblock(name))

    def describe(self) -> str:
        return (f"PadRows({self.block}, {self.row_iter} to a multiple of {self.multiple}, then "
                + ", ".join(p.describe() for p in self.packs) + ")")


def pack_steps(steps: tuple[Step, ...]) -> list[PackOperand]:
    """The packings among `steps`, those done inside a `PadRows` included."""
    found: list[PackOperand] = []
    for s in steps:
        if isinstance(s, PackOperand):
            found.append(s)
        elif isinstance(s, PadRows):
            found += s.packs
    return found
