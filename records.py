"""Tuning records in MetaSchedule's JSON database format (so TVM's `MetaScheduleApplyDatabase` applies them).

A record is the schedule trace of a candidate (its sampling instructions carry the decisions) with a run
time: the predicted latency, or the measured one when verified. Records are appended as they are found.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from .annotate.candidate import Candidate
from .sketch.sketch import Sketch
from .target import target_identity
from .task import Task

log = logging.getLogger(__name__)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
SAMPLE_INSTS = ("SamplePerfectTile", "SampleCategorical")


@dataclass(frozen=True)
class Record:
    """One tuning record read back: its trace, run time and the task's module it belongs to."""

    trace: s_tir.Trace
    seconds: float
    workload: tvm.IRModule
    target: str

    def to_schedule(self) -> s_tir.Schedule:
        sch = s_tir.Schedule(self.workload)
        self.trace.apply_to_schedule(sch, remove_postproc=False)
        return sch


def _check_files(work_dir: str) -> None:
    """Raise a clear error if a records file exists but is not a MetaSchedule JSON database."""
    import json

    for name in (WORKLOAD_FILE, RECORD_FILE):
        path = os.path.join(work_dir, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(
                        f"{path}:{lineno} is not valid JSON ({err.msg}); the records file is corrupt. "
                        "Move it away to start afresh, or delete the broken line to keep the rest."
                    ) from None


class RecordStore:
    """A work directory's MetaSchedule JSON database, opened for appending."""

    def __init__(self, work_dir: str):
        os.makedirs(work_dir, exist_ok=True)
        _check_files(work_dir)
        self.work_dir = work_dir
        self.db = ms.database.JSONDatabase(
            path_workload=os.path.join(work_dir, WORKLOAD_FILE),
            path_tuning_record=os.path.join(work_dir, RECORD_FILE),
            allow_missing=True,
        )

    def add(self, candidate: Candidate, seconds: float, sch: s_tir.Schedule | None = None) -> None:
        """Append the candidate's trace with `seconds` as its run time."""
        task = candidate.task
        sch = sch or candidate.to_schedule()
        workload = self.db.commit_workload(task.mod)
        record = ms.database.TuningRecord(
            trace=sch.trace,
            workload=workload,
            run_secs=[float(seconds)],
            target=task.target,
            args_info=ms.arg_info.ArgInfo.from_prim_func(task.func),
        )
        self.db.commit_tuning_record(record)

    def records(self, task: Task) -> list[Record]:
        """All records of `task`'s program for its target kind, best first."""
        if not self.db.has_workload(task.mod):
            return []
        workload = self.db.commit_workload(task.mod)
        out = []
        wanted = target_identity(task.target)
        other: dict[str, int] = {}
        for rec in self.db.get_all_tuning_records():
            if not tvm_ffi.structural_equal(rec.workload.mod, workload.mod):
                continue
            if rec.target is not None and target_identity(rec.target) != wanted:
                other[target_identity(rec.target)] = other.get(target_identity(rec.target), 0) + 1
                continue
            secs = [float(x) for x in rec.run_secs] if rec.run_secs is not None else [float("inf")]
            out.append(Record(rec.trace, min(secs), rec.workload.mod, str(rec.target)))
        for ident, n in other.items():
            log.warning("ignoring %d record(s) of target %r for task %s (tuning for %r)", n, ident, task.name, wanted)
        out.sort(key=lambda r: r.seconds)
        return out


def trace_decisions(trace: s_tir.Trace) -> list[object]:
    """The decisions of the trace's sampling instructions, in order."""
    out = []
    for inst in trace.insts:
        if inst.kind.name in SAMPLE_INSTS:
            decision = trace.get_decision(inst)
            out.append(tuple(int(x) for x in decision) if isinstance(decision, (list, tuple)) or hasattr(
                decision, "__len__") else int(decision))
    return out


def candidate_from_trace(task: Task, sketches: list[Sketch], trace: s_tir.Trace) -> Candidate | None:
    """Recover the candidate a trace was replayed from: each hole is one sampling instruction, in order."""
    values = trace_decisions(trace)
    for sketch in sketches:
        if len(sketch.holes) != len(values):
            continue
        decisions = {}
        for hole, value in zip(sketch.holes, values, strict=True):
            if hole.is_tile != isinstance(value, tuple):
                break
            if hole.is_tile:
                decisions[hole.key] = value
            else:  # categorical decisions are option indices, as ours are
                decisions[hole.key] = int(value)
        else:
            cand = Candidate(task, sketch, decisions)
            try:
                sch = cand.to_schedule()
            except Exception:  # noqa: BLE001 - not this sketch
                continue
            replayed = s_tir.Schedule(task.mod)
            trace.apply_to_schedule(replayed, remove_postproc=False)
            if tvm_ffi.structural_equal(sch.mod, replayed.mod):
                return cand
    return None
