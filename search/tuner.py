"""`TaskTuner`: tunes one task round by round (propose, prescore filter, score, learn, record).

Rounds are the unit a task scheduler hands out; `tune` drives one tuner to a budget. Records of earlier runs
in the store are read back first: they seed the search and are never proposed again.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..annotate.candidate import Candidate
from ..errors import InvalidCandidateError
from ..records import RecordStore, candidate_from_trace
from ..space import SearchSpace
from ..task import Task
from .cmaes import CMAESSearch
from .config import TuneConfig
from .evolutionary import EvolutionarySearch
from .portfolio import PortfolioSearch
from .random_search import RandomSearch
from .scorer import Scorer
from .strategy import Archive, SearchStrategy

log = logging.getLogger(__name__)

STRATEGIES: dict[str, type[SearchStrategy]] = {
    "portfolio": PortfolioSearch,
    "evolutionary": EvolutionarySearch,
    "cmaes": CMAESSearch,
    "random": RandomSearch,
}


def make_strategy(name: str, space: SearchSpace, archive: Archive, seed: int = 0) -> SearchStrategy:
    """A strategy by name ("portfolio", "evolutionary", "cmaes" or "random") with its default config."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None
    return cls(space, archive, np.random.default_rng(seed))


@dataclass(frozen=True)
class CurvePoint:
    """The tuning curve: best predicted seconds after `trials` scored candidates, `seconds` into the run."""

    seconds: float
    trials: int
    best: float


def fit_round(n: int, seconds_left: float | None, seconds_per_candidate: float | None) -> int:
    """Shrink a round of `n` candidates to what `seconds_left` allows at the rate seen so far (at least one).

    Without it a time budget overruns by up to a whole round: tens of seconds where candidates compile slowly.
    """
    if seconds_left is None or not seconds_per_candidate:
        return n
    return max(1, min(n, int(seconds_left / seconds_per_candidate)))


class TaskTuner:
    """One task's search state: space, archive, strategy, records; `round(n)` scores up to n new candidates."""

    def __init__(self, task: Task, scorer: Scorer, *, strategy: str | SearchStrategy = "portfolio",
                 store: RecordStore | None = None, seed: int = 0, space: SearchSpace | None = None,
                 config: TuneConfig | None = None):
        self.task = task
        self.scorer = scorer
        self.store = store
        self.config = config or TuneConfig()
        self.space = space or SearchSpace(task)
        self.archive = Archive()
        self.resumed = self._resume()
        if isinstance(strategy, SearchStrategy):
            self.strategy = strategy
        else:
            self.strategy = make_strategy(strategy, self.space, self.archive, seed)
        self.trials = 0
        self.invalid: list[tuple[Candidate, str]] = []
        self.curve: list[CurvePoint] = []
        self.phase_seconds = {"propose": 0.0, "prescore": 0.0, "predict": 0.0}  # where the rounds' time went
        self.start = time.perf_counter()

    def _resume(self) -> int:
        """Load the store's records of this task into the archive; returns how many were recognised."""
        if self.store is None:
            return 0
        found = unknown = 0
        for rec in self.store.records(self.task):
            cand = candidate_from_trace(self.task, self.space.derived, rec.trace)
            if cand is None:
                unknown += 1
                continue
            self.archive.record(cand, rec.seconds)
            found += 1
        if unknown:
            log.warning("%d records of task %s match none of its sketches; ignored", unknown, self.task.name)
        return found

    @property
    def best(self) -> tuple[Candidate, float] | None:
        top = self.archive.top(1)
        return top[0] if top else None

    def round(self, n: int, seeds: Sequence[Candidate] = ()) -> int:
        """Propose, score and record up to `n` new candidates; returns how many were scored (0: space exhausted).

        `seeds` (candidates of this task from elsewhere, e.g. carried over from a similar task) not seen before take
        up to half of the round, scored without the pre-score's filter; the strategy proposes the rest."""
        if n <= 0:
            return 0
        fresh: list[Candidate] = []
        for c in seeds:
            if len(fresh) < n // 2 and c.task is self.task and self.archive.mark(c):
                fresh.append(c)
        oversample = self.config.prescore_oversample if self.scorer.prescore_is_cheap(self.task) else 1
        t0 = time.perf_counter()
        proposals = self.strategy.propose((n - len(fresh)) * oversample)
        t1 = time.perf_counter()
        self.phase_seconds["propose"] += t1 - t0
        if not proposals and not fresh:
            return 0
        kept = proposals
        if len(proposals) > n - len(fresh):
            pre = self.scorer.score(self.task, proposals, "prescore").seconds
            keep = set(np.argsort(pre, kind="stable")[:n - len(fresh)].tolist())
            kept = [c for i, c in enumerate(proposals) if i in keep]
        kept = fresh + kept
        t2 = time.perf_counter()
        self.phase_seconds["prescore"] += t2 - t1
        scores = self.scorer.score(self.task, kept, "predict")
        self.phase_seconds["predict"] += time.perf_counter() - t2
        by_key = {}
        for cand, secs, why in zip(kept, scores.seconds, scores.reasons, strict=True):
            secs = float(secs)
            by_key[cand.key] = secs
            self.archive.record(cand, secs)
            if math.isfinite(secs):
                self._store(cand, secs)
            else:
                self.invalid.append((cand, why or "invalid"))
        for cand in proposals:
            if cand.key not in by_key:  # dropped by the prescore: never proposed again
                self.archive.record(cand, math.inf)
        self.strategy.tell(proposals, np.array([by_key.get(c.key, math.inf) for c in proposals]))
        self.trials += len(kept)
        self.curve.append(CurvePoint(time.perf_counter() - self.start, self.trials, self.archive.best_seconds))
        return len(kept)

    def _store(self, cand: Candidate, seconds: float) -> None:
        if self.store is None:
            return
        try:
            self.store.add(cand, seconds)
        except InvalidCandidateError as err:
            log.warning("could not record %s: %s", cand, err.reason)
