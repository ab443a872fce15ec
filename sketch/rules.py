"""Sketch derivation rules as a table of (condition, action), as in Ansor.

Rules are tried in order on the current block of a derivation state. A condition answers PASS (rule does
not apply), APPLY (add the derived states, keep trying the next rules) or APPLY_AND_SKIP_REST.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import math
from dataclasses import dataclass, field

from tvm import s_tir, tirx

from ..prepack import constant_weight_params, constant_weight_share
from ..target import HardwareSpec
from .analysis import BlockInfo, analyze_block
from .config import SpaceConfig
from .sketch import ProbeDecider, Step
from .steps import (
    ComputeLocation,
    CrossThreadReduction,
    Inline,
    MultiLevelTile,
    PackOperand,
    PadRows,
    RFactor,
    attach_loops,
    pack_steps,
)


class Verdict(enum.Enum):
    PASS = 0
    APPLY = 1
    APPLY_AND_SKIP_REST = 2


@dataclass(frozen=True)
class RuleContext:
    """What rules may consult besides the program: the hardware and the space configuration."""

    spec: HardwareSpec
    config: SpaceConfig

    @property
    def gpu(self) -> bool:
        return self.spec.is_gpu


@dataclass
class SketchState:
    """A partial derivation: the program after the steps so far, and the next block to visit."""

    sch: s_tir.Schedule
    worklist: tuple[str, ...]
    index: int = 0
    steps: tuple[Step, ...] = ()
    rules: tuple[str, ...] = ()
    placed: frozenset[str] = frozenset()
    probe: ProbeDecider = field(default_factory=ProbeDecider)
    outputs: frozenset[str] = frozenset()
    variant: bool = False  # derived by a step that revisits its block: finished after the plain derivations
    deferred: bool = False  # finished after every other derivation, its own descendants included

    @property
    def block(self) -> str:
        return self.worklist[self.index]

    def info(self, name: str) -> BlockInfo:
        return analyze_block(self.sch, name, set(self.outputs))

    def then(self, step: Step | None, rule: str, *, placed: tuple[str, ...] = (), stay: bool = False,
             variant: bool = False, deferred: bool = False, label: str | None = None) -> SketchState:
        """A new state with `step` applied to a copy of the program and the visit moved on (`stay`: the rules
        visit the same block again, for a step that prepares it rather than schedules it; `variant`: finished
        after the plain derivations, so that the sketches named before it keep their names; `deferred`: after
        all other derivations and their variants; `label`: the block named in the rule trace, if not the visited
        one)."""
        label = label or (self.worklist[self.index] if self.index < len(self.worklist) else None)
        sch = self.sch.copy()
        probe = self.probe.copy()
        if step is not None:
            step.apply(sch, probe)
        return SketchState(
            sch=sch,
            worklist=self.worklist,
            index=self.index + (0 if stay else 1),
            steps=self.steps + ((step,) if step is not None else ()),
            rules=self.rules + ((f"{rule}({label})" if label else rule,) if step is not None else ()),
            placed=self.placed | frozenset(placed),
            probe=probe,
            outputs=self.outputs,
            variant=self.variant or stay or variant,
            deferred=self.deferred or deferred,
        )


class SketchRule(abc.ABC):
    """One row of the rule table: a condition on the current block and the states it derives."""

    name: str = "rule"

    @abc.abstractmethod
    def condition(self, state: SketchState, info: BlockInfo, ctx: RuleContext) -> Verdict: ...

    @abc.abstractmethod
    def apply(self, state: SketchState, info: BlockInfo, ctx: RuleContext) -> list[SketchState]: ...


def fusible_consumer(state: SketchState, info: BlockInfo) -> str | None:
    """The single element-wise consumer of `info`'s output, if there is exactly one and it is free."""
    if len(info.consumers) != 1 or len(info.writes) != 1:
        return None
    name = info.consumers[0]
    if name in state.placed:
        return None
    consumer = state.info(name)
    return name if consumer.is_elementwise_of(info) else None


def strictly_inlinable(state: SketchState, info: BlockInfo) -> bool:
    """Element-wise, not an output, and TVM accepts computing it inline into its consumers."""
    if not info.is_spatial or info.is_output or not info.consumers or len(info.writes) != 1:
        return False
    trial = state.sch.copy()
    try:
        trial.compute_inline(trial.get_sblock(info.name))
    except Exception:  # noqa: BLE001 - TVM says no with one of several error types
        return False
    return True


class AlwaysInline(SketchRule):
    """Inline an element-wise block into its consumers (on CPU not a conditional one, nor costly math shared by
    several consumers: see SpaceConfig)."""

    name = "always-inline"

    def condition(self, state, info, ctx):
        if not ctx.gpu:
            if info.conditional and not ctx.config.cpu_inline_conditional:
                return Verdict.PASS
            if info.costly_math and len(info.consumers) > 1 and not ctx.config.cpu_inline_shared_math:
                return Verdict.PASS
        return Verdict.APPLY_AND_SKIP_REST if strictly_inlinable(state, info) else Verdict.PASS

    def apply(self, state, info, ctx):
        return [state.then(Inline(info.name), self.name)]


class AddCrossThreadReduction(SketchRule):
    name = "cross-thread-reduction"

    def condition(self, state, info, ctx):
        ok = (ctx.gpu and info.is_reduction and not info.has_data_reuse()
              and info.reduce_extent >= ctx.config.cross_thread_min_reduce)
        return Verdict.APPLY if ok else Verdict.PASS

    def apply(self, state, info, ctx):
        return [state.then(CrossThreadReduction(info.name, ctx.config.cross_thread_threads), self.name)]


class AddRFactor(SketchRule):
    """CPU: factor a long reduction. A tiled block only when its spatial loops leave cores idle (space
    smaller than the reduction and than cores x jobs per core); any other reduction when it is long."""

    name = "rfactor"

    def condition(self, state, info, ctx):
        cfg = ctx.config
        if ctx.gpu or not info.is_reduction or info.reduce_extent < cfg.rfactor_min_reduce:
            return Verdict.PASS
        if info.has_data_reuse():
            small = info.space_extent < min(info.reduce_extent, ctx.spec.cores * cfg.rfactor_space_per_core)
            return Verdict.APPLY if small else Verdict.PASS
        return Verdict.APPLY

    def apply(self, state, info, ctx):
        m = ctx.config.max_innermost_factor
        plain = [state.then(RFactor(info.name, variant, m), self.name) for variant in ("outer", "inner")]
        if ctx.config.rfactor_split and info.space_extent < ctx.spec.cores:
            plain.append(state.then(RFactor(info.name, "split", m), self.name, variant=True))
        mode = ctx.config.rfactor_compute_location
        elementwise = _read_elementwise_once(state, info)
        place = mode == "all" or (mode == "elementwise" and elementwise)
        nest = ctx.config.rfactor_nest_partials and not elementwise
        if not (place or nest):
            return plain
        # variants: the block that sums the partial results gets a compute location in its consumer, as any
        # other block would (one loop nest fewer: global_avg_pool's sum and mean in one parallel loop); nested, the
        # partial sums get one in the sum's loops too, so that the consumer's other producers can share its loops
        placed: list[SketchState] = []
        for variant in ("outer", "inner"):
            factored = state.then(RFactor(info.name, variant, m), self.name, stay=True)
            after = factored.info(info.name)
            if _LOCATE.condition(factored, after, ctx) is Verdict.PASS:
                continue
            for located in _LOCATE.apply(factored, after, ctx):
                if place:
                    placed.append(located)
                if nest:
                    (rf,) = located.info(info.name).producers  # after rfactor the sum reads its partials alone
                    depth = len(attach_loops(located.sch, info.name))
                    placed.append(located.then(ComputeLocation(rf, info.name, depth), "nest-partials", stay=True,
                                               label=rf))
        return plain + placed


def _read_elementwise_once(state: SketchState, info: BlockInfo) -> bool:
    """The block's output has one consumer, which reads it at the index it writes (a pool's mean)."""
    return len(info.consumers) == 1 and state.info(info.consumers[0]).is_elementwise_of(info)


def _pack_of(info: BlockInfo, params: set[str], s_name: str, widths: tuple[int, ...], rows: bool = False,
             weights: frozenset[str] = frozenset()) -> PackOperand | None:
    """The packing of the first function input read as [r, s] or [s, r] (after leading batch indices that are
    other spatial iterators), with r a reduction iterator, by the panel `widths`; None if none is read so.
    A constant weight in `weights` may have several reduction indices before or after s (a convolution's
    [ry, rx, rc, f]) when the caller passes it: only for tasks whose weights are a large share of their data; other
    inputs would be copied on every call, a whole tensor for little reuse."""
    reduce_names = {n for n, _ in info.reduce}
    batch_names = {n for n, _ in info.spatial} - {s_name}
    for i, acc in enumerate(info.reads):
        if acc.buffer not in params or len(acc.index) < 2 or None in acc.index:
            continue
        nb = 0
        while nb < len(acc.index) and acc.index[nb] in batch_names:
            nb += 1
        body = acc.index[nb:]
        if len(body) < 2 or (len(body) > 2 and (rows or acc.buffer not in weights)):
            continue
        for first, s_at, others in ((True, body[0], body[1:]), (False, body[-1], body[:-1])):
            if s_at == s_name and set(others) <= reduce_names:
                return PackOperand(info.name, i, first, widths, nb, rows)
    return None


def rows_share_l1_set(buffer: tirx.Buffer, spec: HardwareSpec) -> bool:
    """A 2-D (or batched) buffer whose rows lie a multiple of the L1 way size apart: all its rows map to one L1
    set, so a tile that reads a few rows at once evicts itself (GEMM 1024^3: A's 4 KiB rows on 4 KiB ways)."""
    way = spec.l1_bytes // spec.l1_ways if spec.l1_ways else 0
    return bool(way) and int(buffer.shape[-1]) * buffer.dtype.bits // 8 % way == 0


def packable_reads(state: SketchState, info: BlockInfo, ctx: RuleContext) -> list[PackOperand]:
    """The block's packable inputs, in the order they are packed: first the one indexed by the innermost
    spatial iterator s (B of a GEMM: panels of whole vectors along s), then the one indexed by the spatial
    iterator before it if its rows share an L1 set (A of a GEMM, whose rows the register tile broadcasts:
    panels of a few rows, as BLAS packs A), each by widths that divide its extent."""
    if not info.spatial or not info.reduce:
        return []
    func = state.sch.mod["main"]
    params = {p.name for p in func.params}
    heavy = (ctx.config.cpu_pack_conv_weights
             and constant_weight_share(state.sch.mod) >= ctx.config.pack_conv_weight_min_share)
    weights = frozenset(p.name for p in constant_weight_params(func)) if heavy else frozenset()
    lanes = ctx.spec.vector_lanes(32)
    found = []
    s_name, s_extent = info.spatial[-1]
    widths = tuple(w * lanes for w in ctx.config.pack_widths if s_extent % (w * lanes) == 0 and w * lanes < s_extent)
    if widths and (pack := _pack_of(info, params, s_name, widths, weights=weights)) is not None:
        found.append(pack)
    if len(info.spatial) >= 2:
        row_name, row_extent = info.spatial[-2]
        widths = tuple(w for w in ctx.config.pack_row_widths if row_extent % w == 0 and w < row_extent)
        pack = _pack_of(info, params, row_name, widths, rows=True) if widths else None
        if pack is not None and all(pack.read_index != f.read_index for f in found):
            buffer = state.sch.get(state.sch.get_sblock(info.name)).reads[pack.read_index].source
            if rows_share_l1_set(buffer, ctx.spec):
                found.append(pack)
    return found


def packable_read(state: SketchState, info: BlockInfo, ctx: RuleContext) -> PackOperand | None:
    """The next packing the block can take: the first of `packable_reads` that no step of the state did yet."""
    done = {s.read_index for s in pack_steps(state.steps) if s.block == info.name}
    return next((p for p in packable_reads(state, info, ctx) if p.read_index not in done), None)


class AddOperandPacking(SketchRule):
    """CPU: a matmul-like block also gets sketches whose 2-D input (or batch of them) is first packed into
    panels, and then, if its other input's rows share an L1 set, sketches with that one packed as well (each
    packed state visits the block again, for tiling)."""

    name = "pack-operand"

    def condition(self, state, info, ctx):
        ok = (not ctx.gpu and ctx.config.cpu_pack_operands and info.has_data_reuse()
              and packable_read(state, info, ctx) is not None)
        return Verdict.APPLY if ok else Verdict.PASS

    def apply(self, state, info, ctx):
        return [state.then(packable_read(state, info, ctx), self.name, stay=True)]


def padded_rows(state: SketchState, info: BlockInfo, ctx: RuleContext) -> PadRows | None:
    """The row padding of a block whose unpadded sketches pack both inputs (B in vector panels, A in row panels),
    when its row extent is not a multiple of the padded widths and padding it adds little work; else None."""
    cfg = ctx.config
    if ctx.gpu or not (cfg.cpu_pack_operands and cfg.pack_row_pad_widths) or pack_steps(state.steps):
        return None
    packs = packable_reads(state, info, ctx)
    if [p.rows for p in packs] != [False, True]:
        return None
    row_name, extent = info.spatial[-2]
    multiple = math.lcm(*cfg.pack_row_pad_widths)
    padded = -(-extent // multiple) * multiple
    if padded == extent or padded - extent > cfg.pack_row_pad_waste * extent:
        return None
    rows = dataclasses.replace(packs[1], options=tuple(w for w in cfg.pack_row_pad_widths if w < padded))
    return PadRows(info.name, row_name, multiple, (packs[0], rows))


class AddRowPadding(SketchRule):
    """CPU: a matmul-like block whose inputs both get packed also gets sketches with its rows padded first, for
    register tiles of 6 or 12 rows (derived last, so that the other sketches keep their names)."""

    name = "pad-rows"

    def condition(self, state, info, ctx):
        return Verdict.APPLY if info.has_data_reuse() and padded_rows(state, info, ctx) else Verdict.PASS

    def apply(self, state, info, ctx):
        return [state.then(padded_rows(state, info, ctx), self.name, stay=True, deferred=True)]


def _tile(info: BlockInfo, ctx: RuleContext, **kw) -> MultiLevelTile:
    cfg = ctx.config
    if ctx.gpu:
        return MultiLevelTile(
            info.name, cfg.gpu_structure, gpu=True, cache_write="local", shared_reads=True,
            fuse_level=cfg.gpu_fusion_level, max_innermost=cfg.max_innermost_factor,
            max_threads=ctx.spec.max_threads_per_block, min_threads=cfg.min_threads_per_block,
            max_vthread=cfg.max_vthread, fetch_vector=cfg.fetch_vector,
            max_shared_bytes=ctx.spec.smem_per_block, **kw,
        )
    return MultiLevelTile(info.name, cfg.cpu_structure, max_innermost=cfg.max_innermost_factor, **kw)


class MultiLevelTilingWithFusion(SketchRule):
    name = "multi-level-tiling-with-fusion"

    def condition(self, state, info, ctx):
        ok = info.has_data_reuse() and fusible_consumer(state, info) is not None
        return Verdict.APPLY_AND_SKIP_REST if ok else Verdict.PASS

    def apply(self, state, info, ctx):
        consumer = fusible_consumer(state, info)
        if ctx.gpu:
            return [state.then(_tile(info, ctx, consumer=consumer), self.name, placed=(consumer,))]
        return [
            state.then(_tile(info, ctx, consumer=consumer, fuse_level=level), self.name, placed=(consumer,))
            for level in ctx.config.cpu_fusion_levels
        ]


class AddCacheWrite(SketchRule):
    """CPU: tile into a local accumulation buffer and fuse the copy-back at a tile level."""

    name = "cache-write"

    def condition(self, state, info, ctx):
        ok = not ctx.gpu and info.has_data_reuse() and fusible_consumer(state, info) is None
        return Verdict.APPLY if ok else Verdict.PASS

    def apply(self, state, info, ctx):
        return [
            state.then(_tile(info, ctx, cache_write="global", fuse_level=level), self.name)
            for level in ctx.config.cpu_fusion_levels
        ]


class MultiLevelTiling(SketchRule):
    """Plain multi-level tiling (on GPU always with the local cache-write and shared-memory reads)."""

    name = "multi-level-tiling"

    def condition(self, state, info, ctx):
        return Verdict.APPLY_AND_SKIP_REST if info.has_data_reuse() else Verdict.PASS

    def apply(self, state, info, ctx):
        return [state.then(_tile(info, ctx), self.name)]


def anchor_consumer(state: SketchState, info: BlockInfo) -> str | None:
    """The consumer that every other consumer of `info` feeds (directly or not), or the single consumer.

    A block computed at one of the anchor's loops then lies in front of all its readers, as in softmax, where
    exp is read by the row sum and by the normalisation, and the sum is read by the normalisation.
    """
    if len(info.consumers) == 1:
        return info.consumers[0]

    def reaches(src: str, dst: str) -> bool:
        seen, todo = set(), [src]
        while todo:
            name = todo.pop()
            if name == dst:
                return True
            if name not in seen:
                seen.add(name)
                todo += state.info(name).consumers
        return False

    anchors = [c for c in info.consumers if all(o == c or reaches(o, c) for o in info.consumers)]
    return anchors[0] if len(anchors) == 1 else None


class RandomComputeLocation(SketchRule):
    """A non-output block gets a compute-location hole (root or a loop of the consumer that its other consumers
    feed; several consumers on CPU only, where the hole is clamped to the loops that enclose them all; on CPU a
    conditional block may also be inlined)."""

    name = "compute-location"

    def condition(self, state, info, ctx):
        ok = (not info.is_output and info.consumers and info.name not in state.placed
              and (len(info.consumers) == 1 or not ctx.gpu) and anchor_consumer(state, info) is not None
              and state.sch.get_loops(state.sch.get_sblock(info.name)))
        return Verdict.APPLY_AND_SKIP_REST if ok else Verdict.PASS

    def apply(self, state, info, ctx):
        consumer = anchor_consumer(state, info)
        depth = len(attach_loops(state.sch, consumer))
        others = tuple(c for c in info.consumers if c != consumer)
        inline = (not ctx.gpu and info.conditional and ctx.config.cpu_inline_conditional_hole
                  and strictly_inlinable(state, info))
        return [state.then(ComputeLocation(info.name, consumer, depth, ctx.gpu, others, inline), self.name)]


_LOCATE = RandomComputeLocation()


class Skip(SketchRule):
    name = "skip"

    def condition(self, state, info, ctx):
        return Verdict.APPLY

    def apply(self, state, info, ctx):
        return [state.then(None, self.name)]


def default_rules() -> list[SketchRule]:
    """The rule table, in the order the rules are tried (the conditions check the target themselves)."""
    return [
        AlwaysInline(),
        AddCrossThreadReduction(),
        AddRFactor(),
        AddOperandPacking(),
        AddRowPadding(),
        MultiLevelTilingWithFusion(),
        AddCacheWrite(),
        MultiLevelTiling(),
        RandomComputeLocation(),
        Skip(),
    ]
