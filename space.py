"""`SearchSpace`: a task's sketches and random candidates drawn from them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .annotate.candidate import Candidate
from .annotate.sample import sample_decisions
from .sketch.config import SpaceConfig
from .sketch.generate import generate_sketches, searched_sketches
from .sketch.rules import SketchRule
from .task import Task


class SearchSpace:
    """The template-free search space of one task: rule-derived sketches times their hole domains."""

    def __init__(self, task: Task, rules: Sequence[SketchRule] | None = None, config: SpaceConfig | None = None):
        self.task = task
        self.config = config or SpaceConfig()
        # every derived sketch names candidates (records, measured datasets); the search draws from `sketches`
        self.derived = generate_sketches(task, rules, self.config)
        self.sketches = searched_sketches(task, self.derived, self.config)
        if not self.sketches:
            raise ValueError(f"no sketch could be derived for task {task.name!r}")

    def size(self) -> float:
        """Estimated number of distinct candidates (sum over sketches of their decision products)."""
        return float(sum(s.space_size() for s in self.sketches))

    def sample(self, n: int, seed: int | None = 0, rng: np.random.Generator | None = None) -> list[Candidate]:
        """`n` random candidates, sketches drawn uniformly (duplicates possible in small spaces)."""
        rng = rng or np.random.default_rng(seed)
        out = []
        for _ in range(n):
            sketch = self.sketches[int(rng.integers(len(self.sketches)))]
            out.append(Candidate(self.task, sketch, sample_decisions(sketch, rng)))
        return out

    def sketch(self, name: str):
        for s in self.derived:
            if s.name == name:
                return s
        raise KeyError(f"no sketch {name!r}; sketches: {[s.name for s in self.derived]}")
