"""`tune(task, ...)`: search one task's space with the static cost model and return its best checked schedule."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass

from ..annotate.candidate import Candidate
from ..records import RECORD_FILE, WORKLOAD_FILE, RecordStore
from ..space import SearchSpace
from ..task import Task
from .config import TuneConfig
from .scorer import CostModelSpec, DeferredScorer, Scorer, make_scorer
from .select import select_best
from .tuner import CurvePoint, TaskTuner, fit_round

log = logging.getLogger(__name__)


def heal_records(work_dir: str) -> None:
    """Finish the last line of a records file that a killed run left without its newline.

    A complete JSON record only lacks its newline (the next append would glue onto it); a partial one was
    never a record and is cut off.
    """
    for name in (WORKLOAD_FILE, RECORD_FILE):
        path = os.path.join(work_dir, name)
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            continue
        with open(path, "rb+") as f:
            data = f.read()
            if data.endswith(b"\n"):
                continue
            start = data.rfind(b"\n") + 1
            try:
                json.loads(data[start:])
            except ValueError:
                log.warning("%s: dropping an incomplete last record left by an interrupted run", path)
                f.truncate(start)
            else:
                f.write(b"\n")


@dataclass
class TuneResult:
    """The outcome of `tune`: the best candidate and its predicted (and, if verified, measured) seconds."""

    task: Task
    best: Candidate
    predicted: float
    measured: float | None
    curve: list[CurvePoint]  # (seconds into the run, trials, best predicted seconds) after every round
    trials: int  # candidates scored in this run
    resumed: int  # records of earlier runs read back from work_dir
    invalid: list[tuple[Candidate, str]]  # candidates the cost model rejected, with the reason
    measured_top: list[tuple[Candidate, float, float]]  # verify_top_k: (candidate, predicted, measured)
    check: str  # how `best` was checked
    records_path: str | None
    strategy: str
    phase_seconds: dict[str, float]  # seconds of the rounds spent proposing, prescoring and scoring

    def __repr__(self) -> str:
        measured = f", measured={self.measured:.4g}s" if self.measured is not None else ""
        return (f"TuneResult({self.task.name!r}, predicted={self.predicted:.4g}s{measured}, trials={self.trials}, "
                f"resumed={self.resumed}, invalid={len(self.invalid)})")


def tune(
    task: Task,
    *,
    trials: int | None = None,
    seconds: float | None = None,
    strategy: str = "portfolio",
    work_dir: str | None = None,
    cost_model: CostModelSpec = None,
    verify_top_k: int = 0,
    ray_address: str | None = None,
    num_workers: int | None = None,
    seed: int = 0,
    progress: bool = True,
    scorer: Scorer | None = None,
    config: TuneConfig | None = None,
    space: SearchSpace | None = None,
) -> TuneResult:
    """Tune `task` for `trials` scored candidates and/or `seconds` (default: `TuneConfig.default_trials`).

    Candidates are scored by `cost_model` (default: the static model of the task's target) on Ray actors:
    an embedded local Ray with `num_workers` actors (default one per CPU), or the cluster at `ray_address` /
    $RAY_ADDRESS; `num_workers=0` scores in this process without isolation. With `work_dir`, every valid
    candidate is appended to its MetaSchedule JSON database as found, and a rerun resumes from it, never
    proposing a recorded candidate again (the budget counts this run's candidates). With `verify_top_k`, the
    k best predictions are measured on this CPU and the fastest wins. The returned best is checked against
    the unscheduled program (or built, for targets that do not run here); if it fails, the next best is.
    `space` replaces the default `SearchSpace(task)` (other rules or `SpaceConfig`).
    """
    from tqdm import tqdm

    config = config or TuneConfig()
    if trials is None and seconds is None:
        trials = config.default_trials
    start = time.perf_counter()
    own_scorer = scorer is None
    if scorer is None:  # made on first use: a call that only verifies or reads its records back starts no Ray
        scorer = DeferredScorer(lambda: make_scorer(cost_model, num_workers=num_workers, ray_address=ray_address))
        if trials != 0 and num_workers != 0:  # Ray starts while the records are read back
            scorer.start_in_background()
    if work_dir is not None and os.path.isdir(work_dir):
        heal_records(work_dir)
    store = RecordStore(work_dir) if work_dir is not None else None
    try:
        tuner = TaskTuner(task, scorer, strategy=strategy, store=store, seed=seed, config=config, space=space)
        tuner.start = start
        in_rounds = 0.0  # seconds spent in rounds: their rate sizes the last round of a time budget
        total = trials if trials is not None else math.ceil(seconds)
        with tqdm(total=total, disable=not progress, unit="cand" if trials is not None else "s",
                  desc=f"tune {task.name}", leave=False) as bar:
            while True:
                elapsed = time.perf_counter() - start
                left = trials - tuner.trials if trials is not None else config.round_size
                if left <= 0 or (seconds is not None and elapsed >= seconds):
                    break
                rate = in_rounds / tuner.trials if tuner.trials else None
                n = fit_round(min(config.round_size, left), seconds - elapsed if seconds is not None else None, rate)
                t0 = time.perf_counter()
                done = tuner.round(n)
                in_rounds += time.perf_counter() - t0
                if done == 0:
                    break  # the space is exhausted
                bar.update(done if trials is not None else min(total, round(time.perf_counter() - start)) - bar.n)
                bar.set_postfix(best=f"{tuner.archive.best_seconds:.3g}s")
    finally:
        if own_scorer:
            scorer.close()
    chosen = select_best(task, tuner.archive, verify_top_k=verify_top_k, verify=config.verify,
                         attempts=config.check_attempts)
    return TuneResult(
        task=task, best=chosen.best, predicted=chosen.predicted, measured=chosen.measured, curve=tuner.curve,
        trials=tuner.trials, resumed=tuner.resumed, invalid=tuner.invalid, measured_top=chosen.measured_top,
        check=chosen.check, records_path=os.path.join(work_dir, RECORD_FILE) if work_dir is not None else None,
        strategy=tuner.strategy.name, phase_seconds=dict(tuner.phase_seconds),
    )
