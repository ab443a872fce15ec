"""Finishing steps appended to every sketch: parallel / vectorize / unroll on CPU, thread binding on GPU,
and the split of reductions into init and update blocks (what MetaSchedule's postprocessors do)."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, tirx

from ..prepack import PREPROC_ATTR
from .analysis import block_names, loop_iter_kinds, loop_kind, loop_stride_bytes
from .factors import divisors
from .sketch import Decider, Step
from .steps import UNROLL_KEY, choose

SERIAL = tirx.ForKind.SERIAL


def loop_nests(sch: s_tir.Schedule) -> list[list[str]]:
    """Blocks grouped by the top-level loop nest they live in, in program order."""
    nests: list[tuple[object, list[str]]] = []
    for name in block_names(sch):
        loops = sch.get_loops(sch.get_sblock(name))
        if not loops:
            continue
        top = sch.get(loops[0])
        for stmt, members in nests:
            if stmt.same_as(top):
                members.append(name)
                break
        else:
            nests.append((top, [name]))
    return [members for _, members in nests]


def spatial_prefix(sch: s_tir.Schedule, blocks: list[str]) -> list[s_tir.LoopRV]:
    """Outer loops shared by all `blocks` that are serial, spatial for every block and singly nested."""
    first = sch.get_loops(sch.get_sblock(blocks[0]))
    kinds = {b: loop_iter_kinds(sch, b) for b in blocks}
    prefix: list[s_tir.LoopRV] = []
    for i, lp in enumerate(first):
        loop = sch.get(lp)
        if loop.kind != SERIAL or loop.thread_binding is not None:
            break
        if any(i >= len(k) or k[i] != "S" for k in kinds.values()):
            break
        prefix.append(lp)
        if not isinstance(loop.body, tirx.For):
            break
    return prefix


def vectorizable_inner(sch: s_tir.Schedule, block: str) -> s_tir.LoopRV | None:
    """The innermost loop of `block` if it is serial, spatial and holds only the block: the loop to vectorize."""
    loops = sch.get_loops(sch.get_sblock(block))
    if not loops:
        return None
    inner = sch.get(loops[-1])
    if inner.kind != SERIAL or not isinstance(inner.body, s_tir.SBlockRealize):
        return None
    return loops[-1] if loop_kind(sch, block, loops[-1]) == "S" else None


def vectorize_inner(sch: s_tir.Schedule, loop: s_tir.LoopRV | None, cap: int) -> None:
    """Vectorize `loop` (a block's `vectorizable_inner`), splitting it to at most `cap` lanes."""
    if loop is None:
        return
    extent = int(sch.get(loop).extent)
    if extent <= 1:
        return
    if extent <= cap:
        sch.vectorize(loop)
        return
    width = max(d for d in divisors(extent) if d <= cap)
    if width > 1:
        _, inner = sch.split(loop, factors=[None, width])
        sch.vectorize(inner)


def gathers(sch: s_tir.Schedule, block: str, loop: s_tir.LoopRV | None, line_bytes: int) -> bool:
    """The lanes of `block`'s vectorizable loop `loop` fall `line_bytes` or more apart in one of its inputs (buffers
    it only reads): each lane is a load of its own, inside the body that auto-unrolling copies."""
    if loop is None:
        return False
    stride = loop_stride_bytes(sch, block, loop)
    return stride is not None and stride >= line_bytes


def decompose_reductions(sch: s_tir.Schedule) -> None:
    """Split each reduction block with an init into init + update at its first serial reduction loop."""
    for name in block_names(sch):
        block = sch.get_sblock(name)
        if sch.get(block).init is None:
            continue
        loops = sch.get_loops(block)
        kinds = loop_iter_kinds(sch, name)
        r_loops = [lp for lp, k in zip(loops, kinds, strict=True) if k == "R"]
        if not r_loops or any(sch.get(lp).thread_binding is not None for lp in r_loops):
            continue
        sch.decompose_reduction(block, r_loops[0])


def nest_heads(sch: s_tir.Schedule) -> tuple[tuple[str, int], ...]:
    """(first block, spatial prefix length) of each loop nest: the fixed set of finishing holes.

    Taken on the probe program, where every block with a compute-location hole sits at the root, so it
    lists the most nests any candidate can have; a candidate's nest uses the holes of the first head in it. A nest
    that only packs a network's weight gets none: the build packs the weight once and drops the nest, so its
    parallel, vector and unroll choices would change nothing that runs, only thin the search.
    """
    return tuple((nest[0], len(spatial_prefix(sch, nest))) for nest in loop_nests(sch)
                 if not all(PREPROC_ATTR in sch.get(sch.get_sblock(b)).annotations for b in nest))


def _annotate_unroll(sch: s_tir.Schedule, block: str, unroll: int) -> None:
    """Auto-unroll pragmas on the outermost loop of `block`'s nest (nothing for a step of 0)."""
    if unroll:
        top = sch.get_loops(sch.get_sblock(block))[0]
        sch.annotate(top, UNROLL_KEY, unroll)
        sch.annotate(top, "pragma_unroll_explicit", 1)


def _head_of(nest: list[str], chosen: dict[str, tuple[int, ...]]) -> str | None:
    return next((b for b in nest if b in chosen), None)


@dataclass(frozen=True)
class FinishCPU(Step):
    """Per loop nest: vectorize inner spatial loops, parallelize a fused outer prefix (or, with
    `serial_option`, none), auto-unroll. A block whose vector lanes gather an input (lanes `gather_bytes` or more
    apart) gets at most `gather_lanes` lanes, and its nest at most `gather_unroll` unrolled steps: each gathered
    lane is a load of its own, and with more of them LLVM spends seconds to minutes on the candidate."""

    unroll_steps: tuple[int, ...]
    vector_caps: tuple[int, ...]
    heads: tuple[tuple[str, int], ...]
    serial_option: bool = False
    gather_lanes: int | None = None
    gather_unroll: int | None = None
    gather_bytes: int = 64

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        chosen: dict[str, tuple[int, ...]] = {}
        for head, bound in self.heads:
            depths = tuple(range(1, max(bound, 1) + 1)) + ((0,) if self.serial_option else ())
            depth = choose(sch, decider, f"{head}/parallel", "parallel", depths)
            cap = choose(sch, decider, f"{head}/vectorize", "vectorize", self.vector_caps)
            unroll = choose(sch, decider, f"{head}/unroll", "unroll", self.unroll_steps)
            chosen[head] = (depth, cap, unroll)
        for blocks in loop_nests(sch):
            head = _head_of(blocks, chosen)
            if head is None:
                continue
            depth, cap, unroll = chosen[head]
            limited = self.gather_lanes is not None or self.gather_unroll is not None
            # each block's innermost loop holds that block alone, so vectorizing one leaves the others' handles valid
            inner = {b: vectorizable_inner(sch, b) for b in blocks}
            gathering = [b for b in blocks if limited and gathers(sch, b, inner[b], self.gather_bytes)]
            for b in blocks:
                lanes = cap if b not in gathering or self.gather_lanes is None else min(cap, self.gather_lanes)
                vectorize_inner(sch, inner[b], lanes)
            if gathering and self.gather_unroll is not None:
                unroll = min(unroll, self.gather_unroll)
            prefix = spatial_prefix(sch, blocks)
            depth = min(depth, len(prefix))
            if depth:
                top = sch.fuse(*prefix[:depth], preserve_unit_iters=True) if depth > 1 else prefix[0]
                sch.parallel(top)
            _annotate_unroll(sch, blocks[0], unroll)
        decompose_reductions(sch)


@dataclass(frozen=True)
class FinishGPU(Step):
    """Bind every nest that is not yet on threads (blockIdx x threadIdx over its spatial prefix), unroll."""

    unroll_steps: tuple[int, ...]
    threads: tuple[int, ...]
    heads: tuple[tuple[str, int], ...]

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None:
        chosen: dict[str, tuple[int, ...]] = {}
        for head, _ in self.heads:
            n = choose(sch, decider, f"{head}/threads", "threads", self.threads)
            unroll = choose(sch, decider, f"{head}/unroll", "unroll", self.unroll_steps)
            chosen[head] = (n, unroll)
        for blocks in loop_nests(sch):
            head = _head_of(blocks, chosen)
            if head is None:
                continue
            n, unroll = chosen[head]
            top = sch.get_loops(sch.get_sblock(blocks[0]))[0]
            if sch.get(top).thread_binding is None:
                prefix = spatial_prefix(sch, blocks)
                if prefix:
                    fused = sch.fuse(*prefix, preserve_unit_iters=True) if len(prefix) > 1 else prefix[0]
                    bx, tx = sch.split(fused, factors=[None, n])
                    sch.bind(bx, "blockIdx.x")
                    sch.bind(tx, "threadIdx.x")
                else:  # nothing spatial to spread: one thread runs the whole nest
                    sch.bind(sch.add_unit_loop(top), "blockIdx.x")
            _annotate_unroll(sch, blocks[0], unroll)
        decompose_reductions(sch)
