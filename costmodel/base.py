"""`CostModel`: the pluggable scorer interface (a pure function of a task and its candidates)."""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np

from ..annotate.candidate import Candidate
from ..task import Task


class CostModel(abc.ABC):
    """Estimates the latency in seconds of each candidate; `inf` marks a candidate that cannot be built.

    `prescore` is a cheaper estimate used to filter large populations before `predict`; by default it is
    `predict` itself.
    """

    @abc.abstractmethod
    def predict(self, task: Task, candidates: Sequence[Candidate]) -> np.ndarray: ...

    def prescore(self, task: Task, candidates: Sequence[Candidate]) -> np.ndarray:
        return self.predict(task, candidates)
