"""Measured candidate sets: the data that calibration fits and the fidelity benchmark scores against.

Rows are appended one per candidate to a JSON-lines file (resumable): operator, target, sketch name,
decisions, every repeat time and the median. Candidates are rebuilt from (sketch name, decisions), so
features can be recomputed with any version of the cost model.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi

from ..annotate.candidate import Candidate
from ..space import SearchSpace
from ..task import Task

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MeasuredRow:
    op: str
    target: str
    sketch: str
    decisions: dict
    seconds: float
    times: tuple[float, ...]
    error: str | None = None
    source: str = "random"  # "random": a uniform sample of the space; "search": a search's best predictions
    program: str | None = None  # `program_digest` of the module that was timed (None in rows older than it)

    def candidate(self, space: SearchSpace) -> Candidate:
        return Candidate.from_json(space.task, space.sketch(self.sketch), self.decisions)

    @property
    def ok(self) -> bool:
        return self.error is None and np.isfinite(self.seconds)


def read_rows(path: str) -> list[MeasuredRow]:
    """All rows of a dataset file; broken lines (e.g. from a killed run) are skipped with a warning."""
    rows: list[MeasuredRow] = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                rows.append(MeasuredRow(d["op"], d["target"], d["sketch"], d["decisions"], float(d["seconds"]),
                                        tuple(d["times"]), d.get("error"), d.get("source", "random"),
                                        d.get("program")))
            except (json.JSONDecodeError, KeyError) as err:
                log.warning("%s:%d skipped (%s)", path, lineno, err)
    return rows


def program_digest(mod: tvm.IRModule) -> str:
    """A short structural hash of a scheduled module: whether a row's candidate still replays to the program that
    was timed (sketch and finishing code change between sessions; decisions alone do not pin the program)."""
    return f"{tvm_ffi.structural_hash(mod) & (2**64 - 1):016x}"


def _append(path: str, row: MeasuredRow) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row.__dict__ | {"times": list(row.times)}) + "\n")


def collect(task: Task, n: int, path: str, *, seed: int = 0, repeat: int = 3, timeout_s: float = 30.0,
            flush_cache: bool = False) -> Iterator[MeasuredRow]:
    """Measure `n` random candidates of `task` (those already in `path` are kept), appending as it goes."""
    return measure_candidates(SearchSpace(task).sample(n, seed=seed), path, repeat=repeat, timeout_s=timeout_s,
                              flush_cache=flush_cache)


def _decisions_json(cand: Candidate) -> str:
    return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in cand.decisions.items()}, sort_keys=True)


def measure_candidates(cands: list[Candidate], path: str, *, source: str = "random", repeat: int = 3,
                       timeout_s: float = 30.0, flush_cache: bool = False) -> Iterator[MeasuredRow]:
    """Measure the candidates (of one task) not yet in `path`, appending a row for each as it goes."""
    from ..measure import MeasureWorker, measure_modules

    if not cands:
        return
    task = cands[0].task
    done = {(r.sketch, json.dumps(r.decisions, sort_keys=True)) for r in read_rows(path) if r.op == task.name}
    with MeasureWorker() as worker:
        for cand in cands:
            key = (cand.sketch.name, _decisions_json(cand))
            if key in done:
                continue
            done.add(key)
            try:
                mod = cand.to_mod()
            except Exception as err:  # noqa: BLE001 - recorded as a failed row
                row = MeasuredRow(task.name, task.target.kind.name, cand.sketch.name, json.loads(key[1]),
                                  float("inf"), (), f"replay: {err}", source)
            else:
                # each repeat runs back to back for measure's min_repeat_ms: single calls of microsecond kernels
                # measured up to 100x slow on a busy 2-core machine (whole 4 ms scheduler ticks per parallel region)
                res = measure_modules([mod], task.target, number=1, repeat=repeat, timeout_s=timeout_s,
                                      flush_cache=flush_cache, worker=worker)[0]
                row = MeasuredRow(task.name, task.target.kind.name, cand.sketch.name, json.loads(key[1]),
                                  res.seconds, tuple(res.times), res.error, source, program_digest(mod))
            _append(path, row)
            yield row
