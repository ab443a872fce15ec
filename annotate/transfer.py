"""Carry a candidate's decisions over to another task whose sketches have the same structure.

Tasks of one network often differ only in their loop extents (MobileNet-V2's 1x1 convolutions, its depthwise
ones). A tile decision keeps its inner factors where they divide the new extent, choice decisions keep their option
values, so a schedule found for one task seeds the search of its neighbours (the idea of transfer-tuning,
Gibson and Cano, 2022), without any measurement.
"""

from __future__ import annotations

import numpy as np

from ..sketch.factors import divisors
from ..sketch.sketch import Decision, Hole, Sketch
from ..task import Task
from .candidate import Candidate
from .sample import repair


def project_tile(value: tuple[int, ...], hole: Hole) -> tuple[int, ...]:
    """A factorization of `hole.extent` in `hole.parts` factors close to `value`, inside out: each inner factor is the
    largest divisor of what is left that does not exceed the old one (innermost also within `max_innermost`); the
    outermost takes the rest."""
    left = hole.extent
    inner: list[int] = []
    for i, f in enumerate(reversed(value[1:])):
        cap = min(f, hole.max_innermost) if i == 0 else f
        d = max(x for x in divisors(left) if x <= cap)
        inner.append(d)
        left //= d
    return (left, *reversed(inner))


def _choice(source: Hole, index: int, target: Hole) -> int | None:
    """The target option with the source option's value (the options may differ in length: parallel fusion)."""
    value = source.options[index]
    return target.options.index(value) if value in target.options else None


def _same_structure(a: Sketch, b: Sketch) -> bool:
    return [(h.key, h.kind, h.parts) for h in a.holes] == [(h.key, h.kind, h.parts) for h in b.holes]


def _sketch_index(sketch: Sketch) -> str:
    return sketch.name.rsplit("/", 1)[-1]


def transfer(cand: Candidate, sketches: list[Sketch], target_task: Task) -> Candidate | None:
    """`cand`'s decisions on the sketch of `sketches` (another task's) derived by the same rules with the same holes;
    None when there is no such sketch, a choice value has no counterpart, or the decisions cannot be repaired to
    meet the target sketch's limits."""
    source = cand.sketch
    match = next((s for s in sketches if _sketch_index(s) == _sketch_index(source) and _same_structure(s, source)),
                 None)
    if match is None:
        return None
    old = {h.key: h for h in source.holes}
    decisions: dict[str, Decision] = {}
    for hole in match.holes:
        value = cand.decisions[hole.key]
        if hole.is_tile:
            decisions[hole.key] = project_tile(tuple(value), hole)
        else:
            index = _choice(old[hole.key], int(value), hole)
            if index is None:
                return None
            decisions[hole.key] = index
    if match.limits:
        decisions = repair(match, decisions, np.random.default_rng(0))
        if decisions is None:
            return None
    return Candidate(target_task, match, decisions)
