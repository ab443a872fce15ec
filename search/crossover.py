"""Crossover of two candidates of one sketch: each block's decisions come from one parent (Ansor's crossover).

A hole's key is "<block>/<name>", so a block's decisions are the holes with that prefix.
"""

from __future__ import annotations

import numpy as np

from ..sketch.sketch import Decision, Sketch, settle_panels


def block_of(key: str) -> str:
    return key.split("/", 1)[0]


def hole_blocks(sketch: Sketch) -> dict[str, list[str]]:
    """Hole keys grouped by block, in hole order."""
    out: dict[str, list[str]] = {}
    for hole in sketch.holes:
        out.setdefault(block_of(hole.key), []).append(hole.key)
    return out


def crossover(
    sketch: Sketch, a: dict[str, Decision], b: dict[str, Decision], rng: np.random.Generator, tries: int = 8,
) -> dict[str, Decision] | None:
    """A child with every block's decisions from `a` or `b` (both parents contribute), keeping the limits.

    None when the parents differ in fewer than two blocks (the child would be a parent) or no mix of blocks
    within `tries` keeps the sketch's limits.
    """
    differing = [keys for keys in hole_blocks(sketch).values() if any(a[k] != b[k] for k in keys)]
    if len(differing) < 2:
        return None
    for _ in range(tries):
        from_b = rng.random(len(differing)) < 0.5
        if from_b.all() or not from_b.any():
            from_b[int(rng.integers(len(differing)))] ^= True
        child = dict(a)
        for keys, take in zip(differing, from_b, strict=True):
            if take:
                child.update({k: b[k] for k in keys})
        child = settle_panels(sketch.limits, child)
        if all(lim.holds(child) for lim in sketch.limits):
            return child
    return None
