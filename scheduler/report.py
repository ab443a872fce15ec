"""`drytune report WORK_DIR`: the per-task table of a network's tuning and a PNG of its tuning curve."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from ..errors import DrytuneError
from .progress import format_seconds
from .workdir import NETWORK_FILE, read_network, read_rounds

MEASURED_FILE = "measured.json"


@dataclass(frozen=True)
class TaskRow:
    index: int
    name: str
    kind: str
    calls: float
    flops: float
    trials: int
    seconds: float  # tuning time spent on it
    predicted: float  # best predicted seconds of one call
    measured: float | None  # measured seconds of one call, if verified


@dataclass
class Report:
    model: str
    target: str
    budget: str
    rows: list[TaskRow]
    skipped: list[tuple[str, str]]
    curve: list[tuple[float, float]]  # (elapsed seconds, predicted network latency)

    @property
    def spent(self) -> float:
        return sum(r.seconds for r in self.rows)

    @property
    def predicted_total(self) -> float:
        """Sum of calls x predicted over the tasks with a prediction (untuned tasks are not counted)."""
        return sum(r.calls * r.predicted for r in self.rows if math.isfinite(r.predicted))

    @property
    def untuned(self) -> list[str]:
        return [r.name for r in self.rows if not math.isfinite(r.predicted)]

    def table(self) -> str:
        spent = self.spent or 1.0
        head = (f"{'#':>3}  {'task':<60} {'calls':>5} {'GFLOP':>8} {'trials':>6} {'budget':>6} "
                f"{'predicted':>10} {'measured':>10} {'x calls':>10}")
        lines = [f"model {self.model} on {self.target}; budget {self.budget}", head, "-" * len(head)]
        for r in self.rows:
            lines.append(
                f"{r.index:>3}  {r.name[:60]:<60} {r.calls:>5g} {r.flops / 1e9:>8.3f} {r.trials:>6} "
                f"{100 * r.seconds / spent:>5.1f}% {format_seconds(r.predicted):>10} "
                f"{format_seconds(r.measured) if r.measured is not None else '-':>10} "
                f"{format_seconds(r.calls * r.predicted):>10}")
        lines.append("-" * len(head))
        untuned = f", {len(self.untuned)} untuned task(s) not counted" if self.untuned else ""
        trials = sum(r.trials for r in self.rows)
        lines.append(f"predicted network latency {format_seconds(self.predicted_total)} (sum of calls x predicted"
                     f"{untuned}); tuning time {self.spent:.0f} s, {trials} candidates scored")
        for name, why in self.skipped:
            lines.append(f"not tuned: {name}: {why}")
        return "\n".join(lines)

    __str__ = table

    def plot(self, path: str) -> str:
        """The tuning curve (predicted network latency over tuning time) as a PNG."""
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        pts = [(t, f) for t, f in self.curve if math.isfinite(f)]
        fig, ax = plt.subplots(figsize=(6.4, 4))
        if pts:
            ax.step([t for t, _ in pts], [f * 1e3 for _, f in pts], where="post")
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.4g"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.4g"))
        ax.set_xlabel("tuning time (s)")
        ax.set_ylabel("predicted network latency (ms)")
        ax.set_title(f"{self.model} on {self.target}")
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path


def load_report(work_dir: str) -> Report:
    """Read a network work directory (network.json, rounds.jsonl, measured.json) into a `Report`."""
    net = read_network(work_dir)
    if net is None:
        raise DrytuneError(f"{work_dir} holds no network tuning run ({NETWORK_FILE} is missing); "
                           "`drytune tune` writes one")
    rounds = read_rounds(work_dir)
    measured = {}
    path = os.path.join(work_dir, MEASURED_FILE)
    if os.path.exists(path):
        with open(path) as f:
            measured = json.load(f)
    rows = []
    for i, t in enumerate(net["tasks"]):
        mine = [r for r in rounds if r.task == t["name"]]
        rows.append(TaskRow(i, t["name"], t["kind"], t["calls"], t["flops"], sum(r.trials for r in mine),
                            sum(r.seconds for r in mine), mine[-1].best if mine else math.inf,
                            measured.get(t["name"])))
    curve = [(r.elapsed, r.objective) for r in rounds]
    return Report(net["model"], net["target"], net["budget"], rows, [tuple(s) for s in net.get("skipped", [])], curve)
