"""Search over a task's candidates: evolutionary search, CMA-ES and a portfolio, scored in parallel on Ray."""

from .cmaes import CMAESSearch
from .evolutionary import EvolutionarySearch
from .portfolio import PortfolioSearch
from .random_search import RandomSearch
from .ray_scorer import RayScorer, ScorerError
from .scorer import LocalScorer, Scorer, Scores
from .select import SearchError
from .strategy import Archive, SearchStrategy
from .tune import TuneResult, tune
from .tuner import CurvePoint, TaskTuner

__all__ = [
    "Archive",
    "CMAESSearch",
    "CurvePoint",
    "EvolutionarySearch",
    "LocalScorer",
    "PortfolioSearch",
    "RandomSearch",
    "RayScorer",
    "Scorer",
    "ScorerError",
    "Scores",
    "SearchError",
    "SearchStrategy",
    "TaskTuner",
    "TuneResult",
    "tune",
]
