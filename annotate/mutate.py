"""Mutation operators on a candidate's decisions, chosen with MetaSchedule/Ansor's weights."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..sketch.factors import prime_factors
from ..sketch.sketch import Decision, Hole, Sketch, settle_panels


@dataclass(frozen=True)
class MutationWeights:
    """Probability weight of each mutation kind (LLVM defaults of MetaSchedule); GPU adds thread binding."""

    weights: dict[str, float] = field(default_factory=lambda: {
        "tile": 0.90, "compute_loc": 0.05, "unroll": 0.03, "parallel": 0.02,
        "vectorize": 0.02, "threads": 0.02, "fetch": 0.02, "pack": 0.05,  # pack: drytune's panel width
    })


def mutate_tile(hole: Hole, value: tuple[int, ...], rng: np.random.Generator) -> tuple[int, ...] | None:
    """Move one prime factor from one part to another (keeps the product; respects the innermost bound)."""
    parts = list(value)
    donors = [i for i, f in enumerate(parts) if f > 1]
    if not donors or hole.parts < 2:
        return None
    for _ in range(16):
        src = int(rng.choice(donors))
        dst = int(rng.integers(hole.parts - 1))
        dst = dst if dst < src else dst + 1
        p = int(rng.choice(prime_factors(parts[src])))
        new = list(parts)
        new[src] //= p
        new[dst] *= p
        if new[-1] <= hole.max_innermost:
            return tuple(new)
    return None


def mutate_choice(hole: Hole, value: int, rng: np.random.Generator) -> int | None:
    if len(hole.options) < 2:
        return None
    other = int(rng.integers(len(hole.options) - 1))
    return other if other < value else other + 1


def mutate(
    sketch: Sketch, decisions: dict[str, Decision], rng: np.random.Generator,
    weights: MutationWeights | None = None,
) -> dict[str, Decision] | None:
    """One mutation of `decisions` that keeps the sketch's limits, or None if no mutation is possible."""
    weights = weights or MutationWeights()
    mutable = [h for h in sketch.holes if (h.is_tile and h.parts > 1 and h.extent > 1) or len(h.options) > 1]
    kinds = sorted({h.kind for h in mutable})
    if not kinds:
        return None
    w = np.array([weights.weights.get(k, 0.02) for k in kinds])
    for _ in range(32):
        kind = kinds[int(rng.choice(len(kinds), p=w / w.sum()))]
        holes = [h for h in mutable if h.kind == kind]
        hole = holes[int(rng.integers(len(holes)))]
        value = decisions[hole.key]
        new_value = mutate_tile(hole, value, rng) if hole.is_tile else mutate_choice(hole, value, rng)
        if new_value is None:
            continue
        out = settle_panels(sketch.limits, {**decisions, hole.key: new_value})
        if out == decisions:  # a panel width that the tile sets back
            continue
        if all(lim.holds(out) for lim in sketch.limits):
            return out
    return None
