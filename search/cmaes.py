"""`CMAESSearch`: CMA-ES (the `cma` package) over each sketch's fixed-length decision encoding.

One distribution per sketch; a sampled vector is decoded (snapped) to valid decisions and a violated limit
is repaired (prime factors moved between tile levels, else the limited holes redrawn). Fitness is
log(predicted seconds); a vector that decodes to a candidate already scored costs no trial and gets that
score. A sketch's distribution restarts (IPOP: larger population) when it stops, stalls, or keeps producing
only candidates seen before. The first candidates are random samples, so that each distribution starts at
its sketch's best.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..annotate.candidate import Candidate
from ..annotate.encode import decode, dimension, encode
from ..annotate.sample import MAX_TRIES, random_tile, repair, sample_decisions
from ..sketch.sketch import Decision, Sketch
from ..space import SearchSpace
from .config import CMAESConfig
from .strategy import Archive, SearchStrategy


def repair_limits(sketch: Sketch, decisions: dict[str, Decision], rng: np.random.Generator) -> dict[str, Decision]:
    """`decisions` if they keep the sketch's limits; else the nearest fix by moving prime factors between
    tile levels, else the limited tile holes redrawn, else a fresh sample."""
    if all(lim.holds(decisions) for lim in sketch.limits):
        return decisions
    fixed = repair(sketch, decisions, rng)
    if fixed is not None:
        return fixed
    limited = sorted(set().union(*(lim.keys for lim in sketch.limits)))
    out = dict(decisions)
    for _ in range(MAX_TRIES):
        for key in limited:
            out[key] = random_tile(sketch.hole(key), rng)
        if all(lim.holds(out) for lim in sketch.limits):
            return out
    return sample_decisions(sketch, rng)


@dataclass
class _Generation:
    vectors: list[np.ndarray]
    keys: list[tuple]


@dataclass
class _SketchState:
    """The distribution of one sketch and its progress."""

    sketch: Sketch
    dim: int
    es: Any = None
    popsize: int | None = None
    pending: _Generation | None = None
    best: float = math.inf
    stall: int = 0
    duplicate_runs: int = 0
    generations: int = 0
    restarts: int = 0


class CMAESSearch(SearchStrategy):
    """Asks each sketch's CMA-ES for a generation, proposes its unseen candidates, tells it once all are scored."""

    name = "cmaes"

    def __init__(self, space: SearchSpace, archive: Archive, rng: np.random.Generator,
                 config: CMAESConfig | None = None):
        super().__init__(space, archive, rng)
        self.config = config or CMAESConfig()
        self.states = [_SketchState(s, dimension(s), popsize=self.config.popsize) for s in space.sketches
                       if dimension(s) > 0]
        self.queue: collections.deque[Candidate] = collections.deque()

    # ------------------------------------------------------------------ proposing

    def propose(self, n: int) -> list[Candidate]:
        if len(self.archive) < self.config.initial_random:
            return self.random_unseen(min(n, self.config.initial_random - len(self.archive)))
        out: list[Candidate] = []
        asked = 0
        while len(out) < n:
            if self.queue:
                out.append(self.queue.popleft())
                continue
            state = self._pick()
            if state is None or asked >= self.config.max_generations_per_call:
                break
            self._ask(state)
            asked += 1
        if not out:  # every distribution is waiting or saw only known candidates: keep the budget in use
            out = self.random_unseen(n)
        return out

    def _pick(self) -> _SketchState | None:
        """A sketch with no generation in flight: unexplored ones first, then roulette on their best."""
        free = [s for s in self.states if s.pending is None]
        if not free:
            return None
        fresh = [s for s in free if s.generations == 0]
        if fresh:
            return fresh[0]
        overall = self.archive.best_seconds
        weights = []
        for s in free:
            top = self.archive.top(1, s.sketch.name)
            weights.append((overall / top[0][1]) ** self.config.sketch_focus if top else 0.01)
        weights = np.asarray(weights)
        return free[int(self.rng.choice(len(free), p=weights / weights.sum()))]

    def _start(self, state: _SketchState, from_best: bool) -> None:
        import cma  # imported on first use: it takes over a second

        top = self.archive.top(1, state.sketch.name)
        if from_best and top:
            x0 = encode(state.sketch, top[0][0].decisions)
        else:
            x0 = encode(state.sketch, sample_decisions(state.sketch, self.rng))
        sigma = self.config.sigma0 if state.restarts == 0 else self.config.restart_sigma
        rng = self.rng
        opts = {
            "bounds": [0.0, 1.0], "seed": np.nan, "randn": lambda *shape: rng.standard_normal(shape),
            "verbose": -9, "verb_log": 0, "verb_disp": 0, "tolflatfitness": 3,
        }
        if state.popsize is not None:
            opts["popsize"] = state.popsize
        # a 1-d encoding is padded with one ignored coordinate: cma works in two or more dimensions best
        x0 = np.concatenate([x0, [0.5]]) if state.dim == 1 else x0
        state.es = cma.CMAEvolutionStrategy(np.clip(x0, 0.0, 1.0), sigma, opts)
        state.popsize = state.es.popsize
        state.stall = state.duplicate_runs = 0
        state.best = math.inf

    def _ask(self, state: _SketchState) -> None:
        if state.es is None:
            self._start(state, from_best=True)
        vectors = [np.asarray(x) for x in state.es.ask()]
        gen = _Generation(vectors, [])
        fresh = 0
        for x in vectors:
            decisions = repair_limits(state.sketch, decode(state.sketch, x[:state.dim]), self.rng)
            cand = Candidate(self.space.task, state.sketch, decisions)
            gen.keys.append(cand.key)
            if self.archive.mark(cand):
                self.queue.append(cand)
                fresh += 1
        state.pending = gen
        state.generations += 1
        state.duplicate_runs = 0 if fresh else state.duplicate_runs + 1
        if not fresh:
            self._complete(state)

    # ------------------------------------------------------------------ learning

    def tell(self, cands: list[Candidate], seconds: np.ndarray) -> None:
        queued = {c.key for c in self.queue}
        for state in self.states:
            if state.pending is not None and not queued.intersection(state.pending.keys):
                self._complete(state)

    def _complete(self, state: _SketchState) -> None:
        """Tell the distribution its generation's fitness (scores from the archive) and restart it if stuck."""
        gen = state.pending
        assert gen is not None
        state.pending = None
        scores = [self.archive.scores.get(k, math.inf) for k in gen.keys]
        logs = [math.log(s) for s in scores if math.isfinite(s) and s > 0]
        penalty = (max(logs) + 1.0) if logs else 0.0
        fitness = [math.log(s) if math.isfinite(s) and s > 0 else penalty for s in scores]
        state.es.tell(gen.vectors, fitness)
        best = min(scores)
        if best < state.best:
            state.best, state.stall = best, 0
        else:
            state.stall += 1
        cfg = self.config
        if (state.es.stop() or state.stall >= cfg.stall_generations
                or state.duplicate_runs >= cfg.duplicate_generations):
            self._restart(state)

    def _restart(self, state: _SketchState) -> None:
        state.restarts += 1
        state.popsize = min(self.config.max_popsize, int(round(state.popsize * self.config.popsize_growth)))
        self._start(state, from_best=self.rng.random() < self.config.restart_from_best_prob)
