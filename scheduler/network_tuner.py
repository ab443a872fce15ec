"""`NetworkTuner`: the rounds of a network's tuning, handed out to its tasks by a task scheduler within budgets."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence

from ..annotate.candidate import Candidate
from ..annotate.transfer import transfer
from ..records import RecordStore
from ..search.scorer import Scorer
from ..search.tuner import TaskTuner, fit_round
from ..space import SearchSpace
from .budget import Budget, TaskBudget
from .config import GradientConfig, NetworkTuneConfig
from .task_scheduler import TASK_SCHEDULERS, GradientTaskScheduler, TaskScheduler, TaskState, objective
from .workdir import RoundLog, append_round

log = logging.getLogger(__name__)


EXHAUSTED = "search space exhausted"


def _apply_round(s: TaskState, best: float, trials: int, seconds: float) -> None:
    """One round's outcome on its task's state, in a run or read back from the round log: a round that scored
    nothing adds its time, and a history entry only to a task without one (keeping what earlier runs found)."""
    if trials > 0:
        s.add_round(best, trials, seconds)
        return
    s.seconds += seconds
    if not s.history:
        s.add_round(best, 0, 0.0)


def make_task_scheduler(name: str | TaskScheduler, *, config: NetworkTuneConfig, gradient: GradientConfig,
                        seed: int) -> TaskScheduler:
    if isinstance(name, TaskScheduler):
        return name
    if name not in TASK_SCHEDULERS:
        raise ValueError(f"unknown task scheduler {name!r}; choose one of {', '.join(TASK_SCHEDULERS)}")
    if name == "gradient":
        return GradientTaskScheduler(gradient, warmup_rounds=config.warmup_rounds, seed=seed,
                                     round_size=config.round_size)
    return TASK_SCHEDULERS[name]()


class NetworkTuner:
    """Runs rounds until the global budget, every task's limit, or the latency target is reached.

    Tasks below their minimum budget go first; then the task scheduler picks. A task stops when its space is
    exhausted, its maximum is reached, it stays invalid, or (optionally) it stops improving. Each round is
    appended to the work directory's round log, so a killed run resumes with its spent budget.
    """

    def __init__(self, tasks: Sequence, limits: Sequence[TaskBudget], scorer: Scorer, *,
                 budget: Budget, store: RecordStore | None, work_dir: str | None, strategy: str = "portfolio",
                 task_scheduler: str | TaskScheduler = "gradient", latency_target: float | None = None,
                 config: NetworkTuneConfig | None = None, gradient: GradientConfig | None = None, seed: int = 0,
                 on_round: Callable[[NetworkTuner, int], None] | None = None):
        self.tasks = list(tasks)
        self.limits = list(limits)
        self.scorer = scorer
        self.budget = budget
        self.store = store
        self.work_dir = work_dir
        self.strategy = strategy
        self.config = config or NetworkTuneConfig()
        self.gradient = gradient or GradientConfig()
        self.scheduler = make_task_scheduler(task_scheduler, config=self.config, gradient=self.gradient, seed=seed)
        self.latency_target = latency_target
        self.seed = seed
        self.on_round = on_round
        self.tuners: dict[int, TaskTuner] = {}
        self.states = [TaskState(nt.name, lim.weight if lim.weight is not None else float(nt.weight), nt.flops,
                                 nt.kind) for nt, lim in zip(self.tasks, self.limits, strict=True)]
        for s, lim in zip(self.states, self.limits, strict=True):
            if lim.skip:
                s.done = "skipped by the budget configuration"
        self.elapsed_before = 0.0  # spent by earlier runs in this work directory
        self.start = time.perf_counter()

    # ------------------------------------------------------------------ resume

    def restore(self, rounds: Sequence[RoundLog]) -> None:
        """Take back the spent budget and each task's history from an earlier run's round log."""
        index = {s.name: i for i, s in enumerate(self.states)}
        for r in rounds:
            i = index.get(r.task)
            if i is None:
                continue
            s = self.states[i]
            _apply_round(s, r.best, r.trials, r.seconds)
            if r.exhausted:
                s.done = EXHAUSTED
        if rounds:
            self.elapsed_before = rounds[-1].elapsed
        for s, lim in zip(self.states, self.limits, strict=True):
            self._check_limits(s, lim)

    # ------------------------------------------------------------------ budget

    @property
    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.start

    @property
    def trials(self) -> int:
        return sum(s.trials for s in self.states)

    @property
    def phase_seconds(self) -> dict[str, float]:
        """This run's round time over all tasks: proposing, prescoring, scoring (the rest is task set-up)."""
        total: Counter[str] = Counter()
        for t in self.tuners.values():
            total.update(t.phase_seconds)
        return dict(total)

    def budget_left(self) -> bool:
        b = self.budget
        if b.seconds is not None and self.elapsed >= b.seconds:
            return False
        if b.trials is not None and self.trials >= b.trials:
            return False
        if self.latency_target is not None and objective(self.states) <= self.latency_target:
            return False
        return True

    def _check_limits(self, s: TaskState, lim: TaskBudget) -> None:
        if s.done is not None:
            return
        if lim.max_trials is not None and s.trials >= lim.max_trials:
            s.done = f"reached max_trials = {lim.max_trials}"
        elif lim.max_seconds is not None and s.seconds >= lim.max_seconds:
            s.done = f"reached max_seconds = {lim.max_seconds:g}"
        elif self.gradient.early_stopping is not None and s.rounds_without_gain >= self.gradient.early_stopping:
            s.done = f"no gain in {s.rounds_without_gain} rounds (early stopping)"
        elif s.rounds >= self.gradient.max_invalid_rounds and not math.isfinite(s.best):
            s.done = f"no valid candidate in {s.rounds} rounds"

    def _below_minimum(self) -> int | None:
        below = [i for i, (s, lim) in enumerate(zip(self.states, self.limits, strict=True)) if s.done is None and (
            (lim.min_trials is not None and s.trials < lim.min_trials)
            or (lim.min_seconds is not None and s.seconds < lim.min_seconds))]
        return min(below, key=lambda i: (self.states[i].rounds, i)) if below else None

    def _round_size(self, i: int) -> int:
        warm = self.states[i].rounds < self.config.warmup_rounds
        n = min(self.config.warmup_round_size, self.config.round_size) if warm else self.config.round_size
        if warm:  # shrink warm-up rounds so that every task gets one within the budget
            n = min(n, max(self.config.min_warmup_round_size, self._warmup_share()))
        lim = self.limits[i]
        if lim.max_trials is not None:
            n = min(n, lim.max_trials - self.states[i].trials)
        if self.budget.trials is not None:
            n = min(n, self.budget.trials - self.trials)
        s = self.states[i]
        seconds_left = []
        if self.budget.seconds is not None:
            seconds_left.append(self.budget.seconds - self.elapsed)
        if lim.max_seconds is not None:
            seconds_left.append(lim.max_seconds - s.seconds)
        if n > 0 and seconds_left:
            n = fit_round(n, max(min(seconds_left), 0.0), s.seconds / s.trials if s.trials else None)
        return max(n, 0)

    def _warmup_share(self) -> int:
        """Candidates per task that the budget left allows for the tasks still waiting for their warm-up."""
        waiting = sum(1 for s in self.states if s.done is None and s.rounds < self.config.warmup_rounds)
        share = 1 << 30
        if self.budget.trials is not None:
            share = (self.budget.trials - self.trials) // max(waiting, 1)
        spent = sum(s.seconds for s in self.states)
        if self.budget.seconds is not None and self.trials > 0 and spent > 0:
            per_candidate = spent / self.trials
            share = min(share, int((self.budget.seconds - self.elapsed) / per_candidate / max(waiting, 1)))
        return share

    # ------------------------------------------------------------------ rounds

    def tuner(self, i: int) -> TaskTuner:
        if i not in self.tuners:
            nt = self.tasks[i]
            strategy = self.limits[i].strategy or self.strategy
            t = TaskTuner(nt.task, self.scorer, strategy=strategy, store=self.store, seed=self.seed + i,
                          space=SearchSpace(nt.task, config=self.config.space))
            self.tuners[i] = t
            if t.resumed:
                log.info("task %s: %d records of earlier runs read back", nt.name, t.resumed)
        return self.tuners[i]

    def _seeds(self, i: int) -> list[Candidate]:
        """The best candidates of up to `transfer_seeds` tuned tasks like task i (same kind and sketch structure,
        nearest FLOPs first), carried over to task i's loop extents."""
        if self.config.transfer_seeds <= 0:
            return []
        me = self.states[i]
        others = [j for j, t in self.tuners.items() if j != i and self.states[j].kind == me.kind and t.best]
        others.sort(key=lambda j: abs(math.log(max(self.states[j].flops, 1.0) / max(me.flops, 1.0))))
        target = self.tuner(i)
        seeds: list[Candidate] = []
        for j in others:
            cand = transfer(self.tuners[j].best[0], target.space.sketches, target.task)
            if cand is not None:
                seeds.append(cand)
                if len(seeds) == self.config.transfer_seeds:
                    break
        return seeds

    def step(self) -> int | None:
        """One round of one task; returns the task's index, or None when nothing is left to do."""
        if not self.budget_left():
            return None
        i = self._below_minimum()
        if i is None:
            i = self.scheduler.next_task(self.states)
        if i is None:
            return None
        s, lim = self.states[i], self.limits[i]
        n = self._round_size(i)
        t0 = time.perf_counter()
        tuner = self.tuner(i)
        done = tuner.round(n, self._seeds(i)) if n > 0 else 0
        spent = time.perf_counter() - t0
        best = tuner.archive.best_seconds
        _apply_round(s, best, done, spent)
        if done == 0:
            s.done = EXHAUSTED if n > 0 else "no trials left"
        self._check_limits(s, lim)
        if self.work_dir is not None:
            append_round(self.work_dir, RoundLog(self.elapsed, s.name, done, spent, best, objective(self.states),
                                                 exhausted=done == 0 and n > 0))
        if self.on_round is not None:
            self.on_round(self, i)
        return i

    def run(self) -> None:
        while self.step() is not None:
            pass
