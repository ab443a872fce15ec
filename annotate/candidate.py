"""`Candidate`: a sketch plus one decision per hole; replays onto a fresh schedule."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import tvm
from tvm import s_tir

from ..errors import TVM_ERRORS, InvalidCandidateError
from ..sketch.sketch import Decision, DecisionError, ReplayDecider, Sketch
from ..task import Task


def _freeze(decisions: dict[str, Decision]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else int(v)) for k, v in decisions.items()))


@dataclass(frozen=True, eq=False)
class Candidate:
    """One point of the search space. Equality and hashing go by (sketch, decisions)."""

    task: Task = field(repr=False)
    sketch: Sketch = field(repr=False)
    decisions: dict[str, Decision]

    @cached_property
    def key(self) -> tuple:
        return (self.sketch.name, _freeze(self.decisions))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Candidate) and self.key == other.key

    def __repr__(self) -> str:
        return f"Candidate({self.sketch.name}, {dict(_freeze(self.decisions))})"

    def to_schedule(self) -> s_tir.Schedule:
        """Replay the sketch with this candidate's decisions; TVM's refusal becomes InvalidCandidateError."""
        sch = s_tir.Schedule(self.task.mod)
        try:
            self.sketch.apply(sch, ReplayDecider(self.decisions, self.sketch.holes))
        except DecisionError as err:
            raise InvalidCandidateError(f"bad decisions: {err}") from err
        except TVM_ERRORS as err:
            raise InvalidCandidateError(f"schedule rejected: {_first_line(err)}") from err
        return sch

    def to_mod(self) -> tvm.IRModule:
        """The scheduled IRModule (function "main"), ready for `tvm.compile`."""
        return self.to_schedule().mod

    def decisions_json(self) -> str:
        return json.dumps(dict(_freeze(self.decisions)))

    def with_decisions(self, **changes: Decision) -> Candidate:
        return Candidate(self.task, self.sketch, {**self.decisions, **changes})

    @classmethod
    def from_json(cls, task: Task, sketch: Sketch, decisions: dict[str, Any]) -> Candidate:
        """A candidate from decisions read back from JSON, where tile sizes come back as lists."""
        return cls(task, sketch, dict(_freeze(decisions)))


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "Error" in ln or "error" in ln:
            return ln.strip()[:300]
    return (lines[-1] if lines else type(err).__name__)[:300]
