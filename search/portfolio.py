"""`PortfolioSearch`: runs several strategies side by side, splitting each round by their recent gains.

A strategy's gain in a round is how much its best candidate improved on the best known before the round,
log(best_before / its_best), or zero. Shares are proportional to the gains summed over a window of rounds,
with a floor so that no strategy starves; unused slots go to the others.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

import numpy as np

from ..annotate.candidate import Candidate
from ..space import SearchSpace
from .cmaes import CMAESSearch
from .config import CMAESConfig, EvolutionConfig, PortfolioConfig
from .evolutionary import EvolutionarySearch
from .strategy import Archive, SearchStrategy


class PortfolioSearch(SearchStrategy):
    """Evolutionary search and CMA-ES (or the given members) sharing one archive and the round's budget."""

    name = "portfolio"

    def __init__(self, space: SearchSpace, archive: Archive, rng: np.random.Generator,
                 members: Sequence[SearchStrategy] | None = None, config: PortfolioConfig | None = None,
                 evolution: EvolutionConfig | None = None, cmaes: CMAESConfig | None = None):
        super().__init__(space, archive, rng)
        self.config = config or PortfolioConfig()
        self.members = list(members) if members is not None else [
            EvolutionarySearch(space, archive, rng, evolution), CMAESSearch(space, archive, rng, cmaes)]
        self.gains = [collections.deque(maxlen=self.config.window) for _ in self.members]
        self.proposed = [0 for _ in self.members]
        self._owner: dict[tuple, int] = {}
        self._best_before = math.inf

    def shares(self) -> np.ndarray:
        """Fraction of the next round given to each member."""
        k = len(self.members)
        totals = np.array([sum(g) for g in self.gains], dtype=np.float64)
        if totals.sum() <= 0.0:
            return np.full(k, 1.0 / k)
        floor = min(self.config.min_share, 1.0 / k)
        return floor + (1.0 - k * floor) * totals / totals.sum()

    def propose(self, n: int) -> list[Candidate]:
        self._best_before = self.archive.best_seconds
        counts = _split(n, self.shares())
        out: list[Candidate] = []
        for i, member in enumerate(self.members):
            out += self._take(i, member.propose(counts[i]))
        for i in np.argsort(-self.shares(), kind="stable"):  # give slots a member left unused to the others
            if len(out) >= n:
                break
            out += self._take(int(i), self.members[int(i)].propose(n - len(out)))
        return out

    def _take(self, i: int, cands: list[Candidate]) -> list[Candidate]:
        for c in cands:
            self._owner[c.key] = i
        self.proposed[i] += len(cands)
        return cands

    def tell(self, cands: Sequence[Candidate], seconds: np.ndarray) -> None:
        seconds = np.asarray(seconds, dtype=np.float64)
        for i, member in enumerate(self.members):
            idx = [j for j, c in enumerate(cands) if self._owner.get(c.key) == i]
            mine = [cands[j] for j in idx]
            secs = seconds[idx]
            member.tell(mine, secs)
            if math.isfinite(self._best_before):
                best = float(secs.min()) if len(secs) else math.inf
                self.gains[i].append(max(0.0, math.log(self._best_before / best)) if math.isfinite(best) else 0.0)
        for c in cands:
            self._owner.pop(c.key, None)


def _split(n: int, shares: np.ndarray) -> list[int]:
    """Integer counts summing to `n`, proportional to `shares` (largest remainders)."""
    raw = shares * n
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts), kind="stable")[: n - int(counts.sum())]:
        counts[i] += 1
    return [int(c) for c in counts]
