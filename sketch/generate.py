"""Derive a task's sketches: walk its blocks from output to input applying the rule table."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tvm import DataType, s_tir

from ..task import Task
from .analysis import block_names, output_buffers
from .config import SpaceConfig
from .finish import FinishCPU, FinishGPU, nest_heads
from .rules import RuleContext, SketchRule, SketchState, Verdict, default_rules, packable_reads
from .sketch import Sketch
from .steps import PackOperand

log = logging.getLogger(__name__)


def generate_sketches(
    task: Task, rules: Sequence[SketchRule] | None = None, config: SpaceConfig | None = None
) -> list[Sketch]:
    """All sketches the rules derive for `task` (at most `config.max_sketches`), each with its holes."""
    config = config or SpaceConfig()
    rules = list(rules) if rules is not None else default_rules()
    ctx = RuleContext(spec=task.spec, config=config)
    root = initial_state(task)
    pending = [root]
    finished: list[SketchState] = []
    while pending and len(finished) < config.max_sketches:
        state = pending.pop(0)
        if state.index >= len(state.worklist):
            finished.append(state)
            continue
        if state.block not in block_names(state.sch):  # removed by an earlier step (e.g. inlined)
            pending.append(state.then(None, "gone"))
            continue
        info = state.info(state.block)
        derived: list[SketchState] = []
        for rule in rules:
            verdict = Verdict.PASS if (state.block in state.placed and rule.name != "skip") \
                else rule.condition(state, info, ctx)
            if verdict is Verdict.PASS:
                continue
            derived += rule.apply(state, info, ctx)
            if verdict is Verdict.APPLY_AND_SKIP_REST:
                break
        # depth first: finish one derivation before widening; variants (packed operands, ...) after all plain
        # derivations, and a variant of a variant after those, so that adding a variant rule does not rename
        # the sketches recorded before it
        later = [d for d in derived if d.variant and (not state.variant or d.index == state.index)]
        pending = [d for d in derived if not any(d is x for x in later)] + pending + later
    sketches: list[Sketch] = []
    seen: set[tuple] = set()
    for state in finished:
        heads = nest_heads(state.sch)
        finish = (FinishGPU(config.gpu_unroll_steps, config.gpu_threads, heads) if task.is_gpu
                  else FinishCPU(config.cpu_unroll_steps, config.vector_caps, heads, config.cpu_serial_option,
                                 config.cpu_gather_lanes, config.cpu_gather_unroll, config.cpu_gather_bytes))
        final = state.then(finish, "finish")
        steps = final.steps
        if steps in seen:
            continue
        seen.add(steps)
        sketches.append(Sketch(
            name=f"{task.name}/{len(sketches)}", steps=steps, holes=tuple(final.probe.holes),
            limits=tuple(final.probe.limits), rules=final.rules,
        ))
    log.debug("task %s: %d sketches", task.name, len(sketches))
    return sketches


def initial_state(task: Task) -> SketchState:
    """The derivation's starting state: the unscheduled program, no block visited."""
    sch = s_tir.Schedule(task.mod)
    return SketchState(sch=sch, worklist=tuple(reversed(block_names(sch))), outputs=frozenset(output_buffers(sch)))


def critical_packings(root: SketchState, ctx: RuleContext) -> frozenset[tuple[str, int]]:
    """(block, read index) of the packable inputs whose rows lie a multiple of the L1 way size apart: every row
    then maps to the same L1 set, so a tile that reads a few rows at once evicts itself."""
    way = ctx.spec.l1_bytes // ctx.spec.l1_ways if ctx.spec.l1_ways else 0
    if not way:
        return frozenset()
    found = set()
    for name in block_names(root.sch):
        reads = root.sch.get(root.sch.get_sblock(name)).reads
        for pack in packable_reads(root, root.info(name), ctx):
            buffer = reads[pack.read_index].source
            row_bytes = int(buffer.shape[-1]) * DataType(str(buffer.dtype)).bits // 8
            if row_bytes % way == 0:
                found.add((name, pack.read_index))
    return frozenset(found)


def searched_sketches(task: Task, sketches: list[Sketch], config: SpaceConfig | None = None) -> list[Sketch]:
    """The sketches a search draws from: on CPU, when some sketch packs every critical-stride input
    (`critical_packings`), only those that do; all otherwise. Names are those of the full derivation."""
    config = config or SpaceConfig()
    if task.is_gpu or not config.cpu_pack_critical_rows:
        return sketches
    critical = critical_packings(initial_state(task), RuleContext(spec=task.spec, config=config))

    def packed(sketch: Sketch) -> set[tuple[str, int]]:
        return {(s.block, s.read_index) for s in sketch.steps if isinstance(s, PackOperand)}

    kept = [s for s in sketches if critical <= packed(s)]
    if not critical or not kept:
        return sketches
    log.debug("task %s: %d sketches leave critical-stride rows unpacked, not searched", task.name,
              len(sketches) - len(kept))
    return kept
