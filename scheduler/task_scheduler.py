"""Task schedulers: which task of a network gets the next round of tuning.

They see only each task's history of best predicted latency per round, its weight and FLOPs; they know
nothing of candidates or of how latencies are obtained, so they are tested on plain numbers.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .config import GradientConfig


@dataclass
class TaskState:
    """What a task scheduler knows of one task: best latency (seconds) after each of its rounds."""

    name: str
    weight: float
    flops: float
    kind: str  # operator kind, for similarity groups
    history: list[float] = field(default_factory=list)  # best predicted seconds after each round
    trials_history: list[int] = field(default_factory=list)  # candidates scored by the end of each round
    seconds: float = 0.0  # wall time spent in its rounds
    done: str | None = None  # why it takes no more rounds (exhausted, max budget, early stop, ...)
    rounds_without_gain: int = 0

    @property
    def rounds(self) -> int:
        return len(self.history)

    @property
    def best(self) -> float:
        return self.history[-1] if self.history else math.inf

    @property
    def trials(self) -> int:
        """Candidates scored in all its rounds."""
        return self.trials_history[-1] if self.trials_history else 0

    def add_round(self, best: float, trials: int, seconds: float) -> None:
        self.rounds_without_gain = self.rounds_without_gain + 1 if self.history and best >= self.best else 0
        self.trials_history.append(self.trials + trials)
        self.history.append(best)
        self.seconds += seconds


def objective(states: Sequence[TaskState]) -> float:
    """f = sum of weight x best latency over the tasks (inf while a weighted task has no valid candidate)."""
    return sum(s.weight * s.best for s in states if s.weight > 0)


class TaskScheduler(ABC):
    """Picks the next task to tune among the unfinished ones, or None when every task is finished."""

    name = "task-scheduler"

    @abstractmethod
    def next_task(self, states: Sequence[TaskState]) -> int | None: ...


class RoundRobinTaskScheduler(TaskScheduler):
    """Each unfinished task in turn: the fewest rounds first."""

    name = "round-robin"

    def next_task(self, states: Sequence[TaskState]) -> int | None:
        live = [i for i, s in enumerate(states) if s.done is None]
        return min(live, key=lambda i: (states[i].rounds, i)) if live else None


class GradientTaskScheduler(TaskScheduler):
    """Ansor's scheduler: after a warm-up round per task, the task whose next round should lower f the most.

    df/dt_i ~ w_i * (alpha * (g_i(t) - g_i(t - window)) / window
                     + (1 - alpha) * (min(g_i - g_i / t_i, beta * C_i / max_{k in N(i)} V_k) - g_i)),
    with g the best predicted latency, C FLOPs, V = C / g the throughput and N(i) the tasks of the same operator
    kind within a FLOP ratio. t (and the window) count candidates scored in units of `round_size` (or rounds, by
    `config.time_unit`). The most negative gradient wins; ties and an eps share of the picks go to a random
    unfinished task.
    """

    name = "gradient"

    def __init__(self, config: GradientConfig | None = None, *, warmup_rounds: int = 1, seed: int = 0,
                 round_size: int = 32):
        self.config = config or GradientConfig()
        self.warmup_rounds = warmup_rounds
        self.round_size = round_size
        self.rng = np.random.default_rng(seed)

    def similar(self, states: Sequence[TaskState], i: int) -> list[int]:
        """N(i): tasks of i's operator kind whose FLOPs are within the configured ratio (including i)."""
        r = self.config.similar_flops_ratio
        me = states[i]
        return [k for k, s in enumerate(states)
                if s.kind == me.kind and s.flops > 0 and me.flops > 0 and 1 / r <= s.flops / me.flops <= r]

    def spent(self, s: TaskState, rounds: int | None = None) -> float:
        """t: the time units task `s` has had, or those of its last `rounds` rounds."""
        if self.config.time_unit == "rounds" or not s.trials:
            return float(s.rounds if rounds is None else rounds)  # no trial counts (rounds read back with none)
        before = 0 if rounds is None or rounds >= s.rounds else s.trials_history[-1 - rounds]
        return (s.trials - before) / self.round_size

    def gradient(self, states: Sequence[TaskState], i: int) -> float:
        """Estimated change of f per time unit given to task i (negative: f falls)."""
        cfg = self.config
        s = states[i]
        g = s.best
        if not math.isfinite(g):
            return -math.inf  # no valid candidate yet: any valid one is an unbounded gain
        w = cfg.window
        backward = 0.0
        if s.rounds > w and math.isfinite(s.history[-1 - w]) and self.spent(s, w) > 0:
            backward = (g - s.history[-1 - w]) / self.spent(s, w)
        guess = g - g / self.spent(s)  # a finite g means a round, so spent > 0
        throughputs = [states[k].flops / states[k].best for k in self.similar(states, i)
                       if states[k].best > 0 and math.isfinite(states[k].best)]
        if len(throughputs) > 1:
            guess = min(guess, cfg.beta * s.flops / max(throughputs))
        forward = guess - g
        return s.weight * (cfg.alpha * backward + (1 - cfg.alpha) * forward)

    def next_task(self, states: Sequence[TaskState]) -> int | None:
        live = [i for i, s in enumerate(states) if s.done is None]
        if not live:
            return None
        warm = [i for i in live if states[i].rounds < self.warmup_rounds]
        if warm:  # the heaviest first (calls x FLOPs): if the budget runs out, the light tasks wait
            return max(warm, key=lambda i: (states[i].weight * states[i].flops, -i))
        if self.rng.random() < self.config.eps_greedy:
            return int(self.rng.choice(live))
        grads = np.array([self.gradient(states, i) for i in live])
        if np.all(grads == grads[0]):
            return int(self.rng.choice(live))
        return live[int(np.argmin(grads))]


TASK_SCHEDULERS: dict[str, type[TaskScheduler]] = {
    "gradient": GradientTaskScheduler,
    "round-robin": RoundRobinTaskScheduler,
}
