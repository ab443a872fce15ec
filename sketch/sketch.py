"""`Sketch`: a program structure derived by rules, as an ordered list of steps with holes.

A step applies schedule primitives to an `s_tir.Schedule`; wherever it needs a decision (a tile size, an
unroll step, a compute location...) it asks a `Decider` for the value of a named `Hole`. Holes have
structural domains (they do not depend on other decisions), so a sketch's holes are found once by a probe
application and a candidate is simply a sketch plus one value per hole.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tvm import s_tir

from .unchecked import unchecked

Decision = Any  # tuple[int, ...] for tile holes, int (option index) for choice holes

TILE = "tile"
CHOICE_KINDS = ("unroll", "parallel", "compute_loc", "vectorize", "threads", "fetch", "pack")


@dataclass(frozen=True)
class Hole:
    """A decision a sketch leaves open, with its domain.

    Tile holes split a loop of `extent` into `parts` factors (product = extent, innermost at most
    `max_innermost`); choice holes pick an index into `options`.
    """

    key: str
    kind: str
    extent: int = 1
    parts: int = 0
    max_innermost: int = 64
    options: tuple[int, ...] = ()

    @property
    def is_tile(self) -> bool:
        return self.kind == TILE

    @property
    def size(self) -> int:
        """Number of numbers this hole takes in a candidate's encoding."""
        return max(self.parts - 1, 0) if self.is_tile else 1


@dataclass(frozen=True)
class ProductLimit:
    """Constraint on decisions: the product of tile factors at (hole key, part index) lies in [low, high].

    Used for GPU thread and vthread counts, which must respect the hardware limits.
    """

    name: str
    factors: tuple[tuple[str, int], ...]
    high: int
    low: int = 1

    def value(self, decisions: dict[str, Decision]) -> int:
        prod = 1
        for key, index in self.factors:
            prod *= int(decisions[key][index])
        return prod

    def holds(self, decisions: dict[str, Decision]) -> bool:
        return self.low <= self.value(decisions) <= self.high

    @property
    def keys(self) -> set[str]:
        return {k for k, _ in self.factors}


@dataclass(frozen=True)
class FootprintLimit:
    """Constraint on decisions: bytes of the tiles staged in (GPU shared) memory stay within `high`.

    Each buffer is (element bytes, dims); a dim is (constant, terms) and its extent is constant + sum of
    coefficient x (product of the tile factors (hole key, part indices) - 1), the affine range of the
    index over one tile.
    """

    name: str
    buffers: tuple[tuple[int, tuple[tuple[int, tuple[tuple[str, tuple[int, ...], int], ...]], ...]], ...]
    high: int

    def value(self, decisions: dict[str, Decision]) -> int:
        total = 0
        for nbytes, dims in self.buffers:
            size = nbytes
            for const, terms in dims:
                extent = const
                for key, parts, coef in terms:
                    tile = 1
                    for p in parts:
                        tile *= int(decisions[key][p])
                    extent += coef * (tile - 1)
                size *= extent
            total += size
        return total

    def holds(self, decisions: dict[str, Decision]) -> bool:
        return self.value(decisions) <= self.high

    @property
    def keys(self) -> set[str]:
        return {k for _, dims in self.buffers for _, terms in dims for k, _, _ in terms}


@dataclass(frozen=True)
class PanelLimit:
    """Constraint on decisions: an operand packed in panels of vectors is as wide as the register tile's innermost part
    along the packed axis (option `pack_key` picks among `widths`; tile hole `tile_key`, its last part), so that a
    reduction step of the tile reads one contiguous piece and the panel is one sequential stream. A 16-wide tile on
    64-wide panels of BERT-base's 768 x 3072 weight read one line in four of every 256 bytes per step: 4.37 ms with the
    weight flushed before each run, as in the network, against 2.80-3.13 ms for tiles on panels of their width
    (Zen 4, session 85). Holds when the sketch has no such tile hole."""

    name: str
    pack_key: str
    widths: tuple[int, ...]
    tile_key: str

    def holds(self, decisions: dict[str, Decision]) -> bool:
        if self.tile_key not in decisions or self.pack_key not in decisions:
            return True
        return self.widths[int(decisions[self.pack_key])] == int(decisions[self.tile_key][-1])

    def settle(self, decisions: dict[str, Decision]) -> bool:
        """Pick the panel width equal to the tile's innermost part, if it is one of the widths; whether it holds."""
        if self.holds(decisions):
            return True
        inner = int(decisions[self.tile_key][-1])
        if inner not in self.widths:
            return False
        decisions[self.pack_key] = self.widths.index(inner)
        return True

    @property
    def keys(self) -> set[str]:
        return {self.tile_key}


Limit = ProductLimit | FootprintLimit | PanelLimit


def settle_panels(limits: Sequence[Limit], decisions: dict[str, Decision]) -> dict[str, Decision]:
    """`decisions` with every panel width that a tile's innermost part determines set to it (a copy)."""
    out = dict(decisions)
    for lim in limits:
        if isinstance(lim, PanelLimit):
            lim.settle(out)
    return out


class Decider(abc.ABC):
    """Supplies values for holes while a sketch is applied (probe, replay)."""

    @abc.abstractmethod
    def decide(self, hole: Hole) -> Decision: ...

    def constrain(self, limit: Limit) -> None:
        """Record a constraint on decisions (only the probe keeps them)."""


class ProbeDecider(Decider):
    """Records every hole and constraint it is asked about and answers with a neutral default."""

    def __init__(self) -> None:
        self.holes: list[Hole] = []
        self.limits: list[Limit] = []

    def copy(self) -> ProbeDecider:
        other = ProbeDecider()
        other.holes = list(self.holes)
        other.limits = list(self.limits)
        return other

    def decide(self, hole: Hole) -> Decision:
        if any(h.key == hole.key for h in self.holes):
            raise ValueError(f"hole {hole.key!r} asked twice while probing a sketch")
        self.holes.append(hole)
        if hole.is_tile:
            return (hole.extent,) + (1,) * (hole.parts - 1)
        return 0

    def constrain(self, limit: Limit) -> None:
        self.limits.append(limit)


class DecisionError(ValueError):
    """A replayed decision is missing or outside its hole's domain (not TVM's refusal of the schedule)."""


class ReplayDecider(Decider):
    """Answers from a fixed decision dict; a missing or out-of-domain decision is an error."""

    def __init__(self, decisions: dict[str, Decision], holes: Sequence[Hole] = ()):
        self.decisions = decisions
        self.expected = {h.key: h for h in holes}

    def decide(self, hole: Hole) -> Decision:
        known = self.expected.get(hole.key)
        if known is not None and known != hole:
            raise DecisionError(f"hole {hole.key!r} has domain {hole} on replay but {known} in the sketch")
        try:
            value = self.decisions[hole.key]
        except KeyError:
            raise DecisionError(f"no decision for hole {hole.key!r}") from None
        if hole.is_tile:
            value = tuple(int(v) for v in value)
            prod = 1
            for v in value:
                prod *= v
            if len(value) != hole.parts or prod != hole.extent:
                raise DecisionError(f"tile decision {value} does not split {hole.extent} into {hole.parts} parts")
            return value
        if not 0 <= int(value) < len(hole.options):
            raise DecisionError(f"choice {value} out of range for hole {hole.key!r} ({len(hole.options)} options)")
        return int(value)


class Step(abc.ABC):
    """One rule application, replayable onto a schedule; steps are immutable and hashable."""

    @abc.abstractmethod
    def apply(self, sch: s_tir.Schedule, decider: Decider) -> None: ...

    def describe(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class Sketch:
    """A derived program structure: the steps, the holes they leave open and the limits on decisions."""

    name: str
    steps: tuple[Step, ...]
    holes: tuple[Hole, ...] = ()
    limits: tuple[Limit, ...] = ()
    rules: tuple[str, ...] = field(default=(), compare=False)

    def hole(self, key: str) -> Hole:
        for h in self.holes:
            if h.key == key:
                return h
        raise KeyError(key)

    def apply(self, sch: s_tir.Schedule, decider: Decider) -> s_tir.Schedule:
        fast = unchecked(sch)
        for step in self.steps:
            step.apply(fast, decider)
        return sch

    def space_size(self) -> float:
        """Number of distinct decision assignments (tile factorizations x choices)."""
        from .factors import count_factorizations

        total = 1.0
        for h in self.holes:
            total *= count_factorizations(h.extent, h.parts, h.max_innermost) if h.is_tile else len(h.options)
        return total

    def describe(self) -> str:
        lines = [f"sketch {self.name} ({len(self.holes)} holes, rules: {' > '.join(self.rules)})"]
        lines += [f"  {s.describe()}" for s in self.steps]
        return "\n".join(lines)


def hole_keys(holes: Sequence[Hole]) -> list[str]:
    return [h.key for h in holes]
