"""Progress display of a network's tuning: budget spent, rounds, the task just tuned and the predicted total."""

from __future__ import annotations

import math

from .budget import Budget
from .task_scheduler import objective


def format_seconds(seconds: float) -> str:
    """A latency for people: 812 us, 3.41 ms, 1.2 s."""
    if not math.isfinite(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


class RoundProgress:
    """A tqdm bar over the global budget (seconds, else trials) updated after every round."""

    def __init__(self, budget: Budget, *, enabled: bool = True, desc: str = "tune"):
        self.budget = budget
        self.enabled = enabled
        self.desc = desc
        self.bar = None
        self.rounds = 0

    def __enter__(self) -> RoundProgress:
        if self.enabled:
            from tqdm import tqdm

            by_time = self.budget.seconds is not None
            total = math.ceil(self.budget.seconds) if by_time else self.budget.trials
            self.bar = tqdm(total=total, unit="s" if by_time else "cand", desc=self.desc, dynamic_ncols=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def update(self, tuner, i: int) -> None:
        self.rounds += 1
        if self.bar is None:
            return
        done = tuner.elapsed if self.budget.seconds is not None else tuner.trials
        self.bar.n = min(self.bar.total, int(done))
        state = tuner.states[i]
        live = sum(s.done is None for s in tuner.states)
        self.bar.set_postfix_str(f"round {self.rounds} | {state.name}: {format_seconds(state.best)} | "
                                 f"network {format_seconds(objective(tuner.states))} | {live} tasks open")
