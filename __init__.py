"""drytune: static auto-scheduling of tensor programs.

Ansor-style sketches and random annotations span the search space; a Tuna-style static cost model ranks
candidates without running them. See README.md for the pipeline and the public API.
"""

from .annotate.candidate import Candidate
from .costmodel.model import StaticCostModel
from .errors import DrytuneError, InvalidCandidateError, UnsupportedProgramError
from .measure import measure, measure_modules
from .records import RecordStore
from .scheduler.budget import Budget, BudgetConfig, TaskBudget
from .scheduler.task_scheduler import GradientTaskScheduler, RoundRobinTaskScheduler, TaskScheduler
from .scheduler.tune_network import tune_network
from .scheduler.tuned import TunedNetwork
from .search.tune import TuneResult, tune
from .sketch.config import SpaceConfig
from .sketch.rules import SketchRule, Verdict, default_rules
from .sketch.sketch import Hole, Sketch
from .space import SearchSpace
from .target import HardwareSpec, resolve_target, spec_for
from .task import Task
from .threads import default_runtime_threads

__version__ = "0.1.0"

default_runtime_threads()  # TVM's thread pool starts lazily; its x86 default would halve the cores

__all__ = [
    "Budget",
    "BudgetConfig",
    "GradientTaskScheduler",
    "RoundRobinTaskScheduler",
    "StaticCostModel",
    "TaskBudget",
    "TaskScheduler",
    "TunedNetwork",
    "tune_network",
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
