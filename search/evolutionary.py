"""`EvolutionarySearch`: Ansor's evolutionary search over candidates, scored by the cost model directly.

Parents are the best scored candidates plus the best few of every sketch (so one sketch's early lead cannot
take the whole population), drawn by roulette on normalised throughput; children come from mutation
(MetaSchedule's weights) or per-block crossover, with an eps-greedy share of fresh random samples.
The first round, with nothing scored yet, is the initial random population.
"""

from __future__ import annotations

import numpy as np

from ..annotate.candidate import Candidate
from ..annotate.mutate import mutate
from ..space import SearchSpace
from .config import EvolutionConfig
from .crossover import crossover
from .strategy import Archive, SearchStrategy, roulette


class EvolutionarySearch(SearchStrategy):
    """Generational search: each `propose` breeds a batch of unseen children from the current best."""

    name = "evolutionary"

    def __init__(self, space: SearchSpace, archive: Archive, rng: np.random.Generator,
                 config: EvolutionConfig | None = None):
        super().__init__(space, archive, rng)
        self.config = config or EvolutionConfig()
        self.made = {"random": 0, "mutation": 0, "crossover": 0}

    def parents(self) -> list[tuple[Candidate, float]]:
        """The best scored candidates, and the best `per_sketch` of each sketch not among them."""
        parents = self.archive.top(self.config.population)
        if self.config.per_sketch > 0:
            have = {c.key for c, _ in parents}
            for sketch in self.space.sketches:
                parents += [(c, s) for c, s in self.archive.top(self.config.per_sketch, sketch=sketch.name)
                            if c.key not in have]
        return parents

    def propose(self, n: int) -> list[Candidate]:
        parents = self.parents()
        if len(parents) < 2:
            out = self.random_unseen(n)
            self.made["random"] += len(out)
            return out
        seconds = [s for _, s in parents]
        out = []
        for _ in range(n):
            child = self._child(parents, seconds)
            if child is None:
                break
            out.append(child)
        if len(out) < n:
            extra = self.random_unseen(n - len(out))
            self.made["random"] += len(extra)
            out += extra
        return out

    def _child(self, parents: list[tuple[Candidate, float]], seconds: list[float]) -> Candidate | None:
        cfg = self.config
        for _ in range(cfg.max_attempts):
            r = self.rng.random()
            if r < cfg.eps_greedy:
                kind, child = "random", self.random_candidate()
            elif r < cfg.eps_greedy + (1.0 - cfg.eps_greedy) * cfg.mutation_prob:
                kind, child = "mutation", self._mutant(parents[int(roulette(seconds, self.rng)[0])][0])
            else:
                kind, child = self._crossover(parents, seconds)
            if child is not None and self.archive.mark(child):
                self.made[kind] += 1
                return child
        return None

    def _mutant(self, parent: Candidate) -> Candidate | None:
        decisions = mutate(parent.sketch, parent.decisions, self.rng)
        if decisions is None:
            return None
        while self.rng.random() < self.config.repeat_mutation_prob:
            again = mutate(parent.sketch, decisions, self.rng)
            if again is None:
                break
            decisions = again
        return Candidate(parent.task, parent.sketch, decisions)

    def _crossover(self, parents: list[tuple[Candidate, float]], seconds: list[float]) -> tuple[str, Candidate | None]:
        a = parents[int(roulette(seconds, self.rng)[0])][0]
        mates = [i for i, (c, _) in enumerate(parents) if c.sketch.name == a.sketch.name and c.key != a.key]
        if mates:
            b = parents[mates[int(roulette([seconds[i] for i in mates], self.rng)[0])]][0]
            decisions = crossover(a.sketch, a.decisions, b.decisions, self.rng)
            if decisions is not None:
                return "crossover", Candidate(a.task, a.sketch, decisions)
        return "mutation", self._mutant(a)
