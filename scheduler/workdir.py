"""A network tuning run's work directory: the records plus the network's task list and the round log.

    database_workload.json, database_tuning_record.json   records (MetaSchedule JSON database)
    network.json                                          model fingerprint, target, tasks, budget
    rounds.jsonl                                          one line per tuning round, appended as it ends

The round log makes a killed run resumable (spent budget, each task's history) and feeds `drytune report`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass

log = logging.getLogger(__name__)

NETWORK_FILE = "network.json"
ROUNDS_FILE = "rounds.jsonl"


@dataclass(frozen=True)
class TaskInfo:
    """A task as the work directory lists it."""

    name: str
    weight: float
    flops: float
    kind: str
    calls: float  # call count in the network (weight before any override)


@dataclass(frozen=True)
class RoundLog:
    """One finished round: which task, how many candidates, how long, its best and the network objective after."""

    elapsed: float  # seconds of tuning in this work directory, all runs together
    task: str
    trials: int
    seconds: float
    best: float  # the task's best predicted seconds after the round
    objective: float  # sum of weight x best over all tasks
    exhausted: bool = False  # the task's search space ran out in this round (absent in older logs)


def write_network(work_dir: str, *, model: str, fingerprint: str, target: str, tasks: Sequence[TaskInfo],
                  skipped: Sequence[tuple[str, str]], budget: str) -> None:
    data = {"model": model, "fingerprint": fingerprint, "target": target, "budget": budget,
            "tasks": [asdict(t) for t in tasks], "skipped": [list(s) for s in skipped]}
    tmp = os.path.join(work_dir, NETWORK_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, os.path.join(work_dir, NETWORK_FILE))


def read_network(work_dir: str) -> dict | None:
    path = os.path.join(work_dir, NETWORK_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError:
        log.warning("%s is not valid JSON; it is rewritten", path)
        return None


def append_round(work_dir: str, entry: RoundLog) -> None:
    with open(os.path.join(work_dir, ROUNDS_FILE), "a") as f:
        f.write(json.dumps(asdict(entry)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_rounds(work_dir: str) -> list[RoundLog]:
    """The round log; a line cut by a kill (or otherwise unreadable) is skipped with a warning."""
    path = os.path.join(work_dir, ROUNDS_FILE)
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(RoundLog(**json.loads(line)))
            except (ValueError, TypeError):
                log.warning("%s:%d: unreadable round entry skipped", path, lineno)
    return out


def set_aside_rounds(work_dir: str, fingerprint: str) -> None:
    """Keep the round log of another model under another name (its records stay in the database)."""
    path = os.path.join(work_dir, ROUNDS_FILE)
    if os.path.exists(path):
        os.replace(path, os.path.join(work_dir, f"rounds.{fingerprint[:12]}.jsonl"))
