"""Random annotation: fill every hole of a sketch, respecting its limits (e.g. GPU thread counts)."""

from __future__ import annotations

import math

import numpy as np

from ..sketch.factors import prime_factors
from ..sketch.sketch import Decision, Hole, PanelLimit, ProductLimit, Sketch

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


REDRAWS = 16
REPAIR_STEPS = 256


def _move_prime(value: tuple[int, ...], src: int, dst: int, rng: np.random.Generator) -> tuple[int, ...]:
    parts = list(value)
    p = int(rng.choice(prime_factors(parts[src])))
    parts[src] //= p
    parts[dst] *= p
    return tuple(parts)


def _repair_step(sketch: Sketch, decisions: dict[str, Decision], limit, rng: np.random.Generator) -> bool:
    """Move one prime factor so that `limit` gets closer to holding; False if no move is possible."""
    if isinstance(limit, PanelLimit):
        return _repair_panel(decisions, limit)
    if isinstance(limit, ProductLimit):
        too_low = limit.value(decisions) < limit.low
        if too_low:  # pull a factor from the outermost part into a limited part
            moves = [(k, 0, i) for k, i in limit.factors if i != 0 and decisions[k][0] > 1]
        else:  # push a factor from a limited part out to the outermost part
            moves = [(k, i, 0) for k, i in limit.factors if i != 0 and decisions[k][i] > 1]
    else:  # footprint too large: shrink a tile inside the staged region
        moves = [(k, p, 0) for k in limit.keys for p in range(1, len(decisions[k])) if decisions[k][p] > 1]
    if not moves:
        return False
    key, src, dst = moves[int(rng.integers(len(moves)))]
    decisions[key] = _move_prime(decisions[key], src, dst, rng)
    return True


def _repair_panel(decisions: dict[str, Decision], limit: PanelLimit) -> bool:
    """The panel width that the tile's innermost part already has, else the tile's innermost part set to the panel
    width nearest it that divides the extent (the rest moved to the outermost part); False if none divides it."""
    if limit.settle(decisions):
        return True
    tile = list(decisions[limit.tile_key])
    extent = math.prod(tile)
    widths = [w for w in limit.widths if extent % w == 0]
    if not widths:
        return False
    width = min(widths, key=lambda w: (abs(math.log(w / max(tile[-1], 1))), w))
    tile[-1] = width
    for i in range(len(tile) - 2, 0, -1):  # middle parts that no longer fit are dropped, innermost first
        if extent % (width * math.prod(tile[1:-1])) == 0:
            break
        tile[i] = 1
    tile[0] = extent // (width * math.prod(tile[1:-1]))
    decisions[limit.tile_key] = tuple(tile)
    return limit.settle(decisions)


def repair(sketch: Sketch, decisions: dict[str, Decision], rng: np.random.Generator) -> dict[str, Decision] | None:
    """Decisions that satisfy all of the sketch's limits, reached by moving prime factors between tile
    levels (towards the grid when too large, into threads when too few), or None if that fails."""
    out = dict(decisions)
    for _ in range(REPAIR_STEPS):
        broken = [lim for lim in sketch.limits if not lim.holds(out)]
        if not broken:
            return out
        if not _repair_step(sketch, out, broken[int(rng.integers(len(broken)))], rng):
            return None
    return out if all(lim.holds(out) for lim in sketch.limits) else None


def sample_decisions(sketch: Sketch, rng: np.random.Generator) -> dict[str, Decision]:
    """Decisions for every hole; when limits fail, limited tiles are redrawn a few times, then repaired."""
    decisions = {h.key: random_decision(h, rng) for h in sketch.holes}
    if not sketch.limits:
        return decisions
    limited = sorted(set().union(*(lim.keys for lim in sketch.limits)))
    for _ in range(MAX_TRIES // REDRAWS):
        for _ in range(REDRAWS):
            if all(lim.holds(decisions) for lim in sketch.limits):
                return decisions
            for key in limited:
                decisions[key] = random_tile(sketch.hole(key), rng)
        fixed = repair(sketch, decisions, rng)
        if fixed is not None:
            return fixed
    raise ValueError(f"could not satisfy the limits of sketch {sketch.name}")
