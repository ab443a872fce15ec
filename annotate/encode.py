"""Fixed-length numeric encoding of a sketch's decisions (the space CMA-ES searches), and back.

A tile hole of `parts` factors takes parts-1 numbers: log2(factor) / log2(extent) of each inner factor
(the outermost factor is what remains). A choice hole takes one number: (index + 0.5) / n_options. All
numbers lie in [0, 1]; decoding snaps to the nearest valid factor and repairs the innermost bound, so
any vector decodes to a valid assignment and decode(encode(d)) == d.
"""

from __future__ import annotations

import math

import numpy as np

from ..sketch.factors import divisors
from ..sketch.sketch import Decision, Hole, Sketch


def dimension(sketch: Sketch) -> int:
    return sum(h.size for h in sketch.holes)


def _encode_hole(hole: Hole, value: Decision) -> list[float]:
    if not hole.is_tile:
        return [(int(value) + 0.5) / len(hole.options)]
    if hole.parts <= 1:
        return []
    scale = math.log2(hole.extent) if hole.extent > 1 else 1.0
    return [math.log2(f) / scale for f in value[1:]]


def _decode_hole(hole: Hole, xs: np.ndarray) -> Decision:
    if not hole.is_tile:
        n = len(hole.options)
        return int(min(n - 1, max(0, math.floor(float(xs[0]) * n))))
    if hole.parts <= 1:
        return (hole.extent,)
    scale = math.log2(hole.extent) if hole.extent > 1 else 1.0
    remaining = hole.extent
    inner: list[int] = []
    for pos in range(hole.parts - 1, 0, -1):  # innermost first, the outermost takes the remainder
        target = float(np.clip(xs[pos - 1], 0.0, 1.0)) * scale
        choices = divisors(remaining)
        if pos == hole.parts - 1:
            choices = tuple(d for d in choices if d <= hole.max_innermost) or (1,)
        best = min(choices, key=lambda d: (abs(math.log2(d) - target), d))
        inner.append(best)
        remaining //= best
    return (remaining, *reversed(inner))


def encode(sketch: Sketch, decisions: dict[str, Decision]) -> np.ndarray:
    """The decision vector of a candidate of `sketch`."""
    out: list[float] = []
    for hole in sketch.holes:
        out += _encode_hole(hole, decisions[hole.key])
    return np.asarray(out, dtype=np.float64)


def decode(sketch: Sketch, vector: np.ndarray) -> dict[str, Decision]:
    """Decisions from any vector of the right length (values are clipped and snapped)."""
    vector = np.asarray(vector, dtype=np.float64)
    if vector.shape != (dimension(sketch),):
        raise ValueError(f"expected a vector of length {dimension(sketch)}, got shape {vector.shape}")
    out: dict[str, Decision] = {}
    pos = 0
    for hole in sketch.holes:
        out[hole.key] = _decode_hole(hole, vector[pos:pos + hole.size])
        pos += hole.size
    return out
