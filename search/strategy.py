"""`SearchStrategy`: proposes batches of unseen candidates and learns from their scores; `Archive`: what was seen."""

from __future__ import annotations

import abc
import bisect
import itertools
import math
from collections.abc import Sequence

import numpy as np

from ..annotate.candidate import Candidate
from ..annotate.sample import sample_decisions
from ..space import SearchSpace


class Archive:
    """Every candidate proposed so far (never proposed again) and the predicted seconds of those scored.

    Shared by the strategies of one task, so a portfolio never scores a candidate twice; `inf` is invalid.
    """

    def __init__(self) -> None:
        self.seen: set[tuple] = set()
        self.scores: dict[tuple, float] = {}
        self._valid: list[tuple[float, int, Candidate]] = []  # sorted by seconds
        self._order = itertools.count()

    def mark(self, cand: Candidate) -> bool:
        """Mark `cand` as proposed; False if it was seen before."""
        if cand.key in self.seen:
            return False
        self.seen.add(cand.key)
        return True

    def __contains__(self, cand: Candidate) -> bool:
        return cand.key in self.seen

    def record(self, cand: Candidate, seconds: float) -> None:
        """Store the score of `cand` (first score wins; a candidate is scored once)."""
        self.seen.add(cand.key)
        if cand.key in self.scores:
            return
        seconds = float(seconds)
        self.scores[cand.key] = seconds
        if math.isfinite(seconds):
            bisect.insort(self._valid, (seconds, next(self._order), cand))

    def score(self, cand: Candidate) -> float | None:
        return self.scores.get(cand.key)

    def top(self, k: int, sketch: str | None = None) -> list[tuple[Candidate, float]]:
        """The `k` best valid candidates (of one sketch if given), best first."""
        out = []
        for secs, _, cand in self._valid:
            if sketch is None or cand.sketch.name == sketch:
                out.append((cand, secs))
                if len(out) == k:
                    break
        return out

    @property
    def best_seconds(self) -> float:
        return self._valid[0][0] if self._valid else math.inf

    @property
    def n_valid(self) -> int:
        return len(self._valid)

    def __len__(self) -> int:
        return len(self.scores)


class SearchStrategy(abc.ABC):
    """Proposes candidates nobody has proposed yet; `tell` gives back their predicted seconds (inf = invalid)."""

    name = "strategy"

    def __init__(self, space: SearchSpace, archive: Archive, rng: np.random.Generator):
        self.space = space
        self.archive = archive
        self.rng = rng

    @abc.abstractmethod
    def propose(self, n: int) -> list[Candidate]:
        """Up to `n` unseen candidates, marked seen in the archive (fewer only when the space runs dry)."""

    def tell(self, cands: Sequence[Candidate], seconds: np.ndarray) -> None:
        """Learn from the scores of candidates this strategy proposed (the archive already holds them)."""

    def random_candidate(self) -> Candidate:
        """A random candidate of a uniformly drawn sketch (not marked seen)."""
        sketch = self.space.sketches[int(self.rng.integers(len(self.space.sketches)))]
        return Candidate(self.space.task, sketch, sample_decisions(sketch, self.rng))

    def random_unseen(self, n: int) -> list[Candidate]:
        """Up to `n` fresh random candidates, marked seen (fewer when the space is nearly exhausted)."""
        out: list[Candidate] = []
        for _ in range(20 * n + 20):
            if len(out) == n:
                break
            cand = self.random_candidate()
            if self.archive.mark(cand):
                out.append(cand)
        return out


def roulette(seconds: Sequence[float], rng: np.random.Generator, size: int = 1) -> np.ndarray:
    """Indices drawn with probability proportional to normalised throughput (best / seconds)."""
    secs = np.asarray(seconds, dtype=np.float64)
    weights = secs.min() / secs
    return rng.choice(len(secs), size=size, p=weights / weights.sum())
