"""Measured candidate sets: the data that calibration fits and the fidelity benchmark scores against.

Rows are appended one per candidate to a JSON-lines file (resumable): operator, target, sketch name,
decisions, every repeat time and the median. Candidates are rebuilt from (sketch name, decisions), so
features can be recomputed with any version of the cost model.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
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


def _line(row: MeasuredRow) -> str:
    return json.dumps(row.__dict__ | {"times": list(row.times)}) + "\n"


def _append(path: str, row: MeasuredRow) -> None:
    with open(path, "a") as f:
        f.write(_line(row))


def collect(task: Task, n: int, path: str, *, seed: int = 0, repeat: int = 3, timeout_s: float = 30.0,
            flush_cache: bool = False, rounds: int = 1) -> Iterator[MeasuredRow]:
    """Measure `n` random candidates of `task` (those already in `path` are kept), appending as it goes; `rounds`
    as in `measure_candidates`."""
    return measure_candidates(SearchSpace(task).sample(n, seed=seed), path, repeat=repeat, timeout_s=timeout_s,
                              flush_cache=flush_cache, rounds=rounds)


def _decisions_json(cand: Candidate) -> str:
    return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in cand.decisions.items()}, sort_keys=True)


def measure_candidates(cands: list[Candidate], path: str, *, source: str | Sequence[str] = "random",
                       repeat: int = 3, timeout_s: float = 30.0, flush_cache: bool = False,
                       rounds: int = 1) -> Iterator[MeasuredRow]:
    """Measure the candidates (of one task) not yet in `path`, appending a row for each (with its `source`, one
    for all or one per candidate) as it goes.

    With `rounds` > 1 all of them are timed in turn, once per round (`repeat` times each), and their rows are
    appended after the last round: a slow phase of the machine then falls on every candidate alike instead of
    on the ones it happened to meet."""
    from ..measure import MeasureResult, MeasureWorker, measure_modules

    if not cands:
        return
    task = cands[0].task
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    done = {(r.sketch, json.dumps(r.decisions, sort_keys=True)) for r in read_rows(path) if r.op == task.name}
    sources = [source] * len(cands) if isinstance(source, str) else list(source)
    todo: list[tuple[tuple[str, str], str, tvm.IRModule]] = []

    def row(key: tuple[str, str], src: str, res: MeasureResult | None, error: str | None,
            mod: tvm.IRModule | None) -> MeasuredRow:
        return MeasuredRow(task.name, task.target.kind.name, key[0], json.loads(key[1]),
                           res.seconds if res is not None else float("inf"), res.times if res is not None else (),
                           error, src, program_digest(mod) if mod is not None else None)

    with MeasureWorker() as worker:
        for cand, src in zip(cands, sources, strict=True):
            key = (cand.sketch.name, _decisions_json(cand))
            if key in done:
                continue
            done.add(key)
            try:
                mod = cand.to_mod()
            except Exception as err:  # noqa: BLE001 - recorded as a failed row
                failed = row(key, src, None, f"replay: {err}", None)
                _append(path, failed)
                yield failed
                continue
            if rounds > 1:
                todo.append((key, src, mod))
                continue
            # each repeat runs back to back for measure's min_repeat_ms: single calls of microsecond kernels
            # measured up to 100x slow on a busy 2-core machine (whole 4 ms scheduler ticks per parallel region)
            res = measure_modules([mod], task.target, number=1, repeat=repeat, timeout_s=timeout_s,
                                  flush_cache=flush_cache, worker=worker)[0]
            measured = row(key, src, res, res.error, mod)
            _append(path, measured)
            yield measured
        if todo:
            results = measure_modules([mod for _, _, mod in todo], task.target, number=1, repeat=repeat,
                                      timeout_s=timeout_s, flush_cache=flush_cache, rounds=rounds, worker=worker)
            for (key, src, mod), res in zip(todo, results, strict=True):
                measured = row(key, src, res, res.error, mod)
                _append(path, measured)
                yield measured


def row_key(row: MeasuredRow) -> tuple[str, str, str, str]:
    """What names one measured candidate across files: operator, sketch, decisions and source."""
    return row.op, row.sketch, json.dumps(row.decisions, sort_keys=True), row.source


def merge_timings(first: list[MeasuredRow], second: list[MeasuredRow]) -> tuple[list[MeasuredRow], dict[str, int]]:
    """The rows of two timings of the same candidates as one: where both timed the same program successfully, the
    times of both and their median; otherwise the second (later) row, or the first where the second has none.

    More rounds per candidate lower the noise a ranking is judged against; a program digest that differs means
    the candidate replays to another program now, so the older times are dropped rather than mixed in."""
    later = {row_key(r): r for r in second}
    merged: list[MeasuredRow] = []
    counts = {"merged": 0, "program_changed": 0, "failed_in_one": 0, "first_only": 0, "second_only": 0}
    for row in first:
        other = later.pop(row_key(row), None)
        if other is None:
            counts["first_only"] += 1
            merged.append(row)
        elif not (row.ok and other.ok):
            counts["failed_in_one"] += 1
            merged.append(other if other.ok or not row.ok else row)
        elif row.program is not None and other.program is not None and row.program != other.program:
            counts["program_changed"] += 1
            merged.append(other)
        else:
            counts["merged"] += 1
            times = row.times + other.times
            merged.append(MeasuredRow(row.op, row.target, row.sketch, row.decisions, float(np.median(times)), times,
                                      None, row.source, other.program or row.program))
    counts["second_only"] = len(later)
    merged.extend(later.values())
    return merged, counts


def write_rows(path: str, rows: Sequence[MeasuredRow]) -> None:
    """Write `rows` as a new dataset file (replacing `path`)."""
    with open(path, "w") as f:
        f.writelines(_line(row) for row in rows)
