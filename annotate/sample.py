"""Random annotation: fill every hole of a sketch, respecting its limits (e.g. GPU thread counts)."""

from __future__ import annotations

import numpy as np

from ..sketch.factors import prime_factors
from ..sketch.sketch import Decision, Hole, Sketch

MAX_TRIES = 200


def random_tile(hole: Hole, rng: np.random.Generator) -> tuple[int, ...]:
    """A uniformly drawn assignment of the extent's prime factors to the parts, innermost bounded."""
    for _ in range(MAX_TRIES):
        parts = [1] * hole.parts
        for p in prime_factors(hole.extent):
            parts[int(rng.integers(hole.parts))] *= p
        if parts[-1] <= hole.max_innermost:
            return tuple(parts)
    parts = [1] * hole.parts  # the innermost bound always admits putting everything outermost
    parts[0] = hole.extent
    return tuple(parts)


def random_decision(hole: Hole, rng: np.random.Generator) -> Decision:
    if hole.is_tile:
        return random_tile(hole, rng)
    return int(rng.integers(len(hole.options)))


def sample_decisions(sketch: Sketch, rng: np.random.Generator) -> dict[str, Decision]:
    """Decisions for every hole; tile holes under a limit are redrawn until all limits hold."""
    decisions = {h.key: random_decision(h, rng) for h in sketch.holes}
    if not sketch.limits:
        return decisions
    limited = sorted(set().union(*(lim.keys for lim in sketch.limits)))
    for _ in range(MAX_TRIES):
        if all(lim.holds(decisions) for lim in sketch.limits):
            return decisions
        for key in limited:
            decisions[key] = random_tile(sketch.hole(key), rng)
    raise ValueError(f"could not satisfy the limits of sketch {sketch.name} in {MAX_TRIES} draws")
