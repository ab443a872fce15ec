"""Derive a task's sketches: walk its blocks from output to input applying the rule table."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tvm import s_tir

from ..prepack import is_constant_weight
from ..task import Task
from .analysis import block_names, output_buffers
from .config import SpaceConfig
from .finish import FinishCPU, FinishGPU, nest_heads
from .rules import RuleContext, SketchRule, SketchState, Verdict, default_rules
from .sketch import Sketch
from .steps import PackOperand, pack_steps

log = logging.getLogger(__name__)


def generate_sketches(
    task: Task, rules: Sequence[SketchRule] | None = None, config: SpaceConfig | None = None
) -> list[Sketch]:
    """All sketches the rules derive for `task` (at most `config.max_sketches`), each with its holes."""
    config = config or SpaceConfig()
    rules = list(rules) if rules is not None else default_rules()
    ctx = RuleContext(spec=task.spec, config=config)
    sch = s_tir.Schedule(task.mod)
    worklist = tuple(reversed(block_names(sch)))
    pending = [SketchState(sch=sch, worklist=worklist, outputs=frozenset(output_buffers(sch)))]
    finished: list[SketchState] = []
    deferred: list[SketchState] = []
    while (pending or deferred) and len(finished) < config.max_sketches:
        if not pending:
            pending, deferred = deferred, []
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
        deferred += [d for d in derived if d.deferred and not state.deferred]
        derived = [d for d in derived if not d.deferred or state.deferred]
        later = [d.variant and (not state.variant or d.index == state.index) for d in derived]
        pending = ([d for d, x in zip(derived, later, strict=True) if not x] + pending
                   + [d for d, x in zip(derived, later, strict=True) if x])
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


def _packs_weight(task: Task, step: PackOperand) -> bool:
    """Whether the step packs one of the network's constant weights (read `read_index` of its block)."""
    sch = s_tir.Schedule(task.mod)
    return is_constant_weight(task.func, sch.get(sch.get_sblock(step.block)).reads[step.read_index].source)


def searched_sketches(task: Task, sketches: list[Sketch], config: SpaceConfig | None = None) -> list[Sketch]:
    """The sketches a search draws from: on CPU, when some sketches pack an input's rows (which they do only
    for rows that share an L1 set) or a network's constant weight, only those that pack all of them; all
    otherwise. Names are those of the full derivation."""
    config = config or SpaceConfig()
    if task.is_gpu or not (config.cpu_pack_critical_rows or config.cpu_pack_weights):
        return sketches
    steps = {s for sketch in sketches for s in pack_steps(sketch.steps)}
    must = {(s.block, s.read_index) for s in steps
            if (s.rows and config.cpu_pack_critical_rows) or (config.cpu_pack_weights and _packs_weight(task, s))}

    def packs(sketch: Sketch) -> set[tuple[str, int]]:
        return {(s.block, s.read_index) for s in pack_steps(sketch.steps)}

    kept = [s for s in sketches if must <= packs(s)]
    if not must or not kept:
        return sketches
    log.debug("task %s: %d sketches leave rows that share an L1 set or a constant weight unpacked, not searched",
              task.name, len(sketches) - len(kept))
    return kept
