"""drytune: static auto-scheduling of tensor programs.

Ansor-style sketches and random annotations span the search space; a Tuna-style static cost model ranks
candidates without running them. See README.md for the pipeline and the public API.
"""

from .annotate.candidate import Candidate
from .errors import DrytuneError, InvalidCandidateError, UnsupportedProgramError
from .measure import measure, measure_modules
from .records import RecordStore
from .search.tune import TuneResult, tune
from .sketch.config import SpaceConfig
from .sketch.rules import SketchRule, Verdict, default_rules
from .sketch.sketch import Hole, Sketch
from .space import SearchSpace
from .target import HardwareSpec, resolve_target, spec_for
from .task import Task

__version__ = "0.1.0"

__all__ = [
    "Candidate",
    "DrytuneError",
    "HardwareSpec",
    "Hole",
    "InvalidCandidateError",
    "RecordStore",
    "SearchSpace",
    "Sketch",
    "SketchRule",
    "SpaceConfig",
    "Task",
    "TuneResult",
    "UnsupportedProgramError",
    "Verdict",
    "default_rules",
    "measure",
    "measure_modules",
    "resolve_target",
    "spec_for",
    "tune",
]
