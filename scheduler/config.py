"""Tunable parameters of the task scheduler and the network tuning loop, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..search.config import VerifyConfig
from ..sketch.config import SpaceConfig


@dataclass(frozen=True)
class GradientConfig:
    """Ansor's gradient task scheduler (paper, section 6)."""

    alpha: float = 0.2  # weight of the backward (observed) difference against the optimistic forward guess
    beta: float = 2.0  # a task may reach 1/beta of the best throughput among its similar tasks
    window: int = 3  # rounds in the backward difference
    eps_greedy: float = 0.05  # chance of picking a random unfinished task instead of the steepest one
    similar_flops_ratio: float = 4.0  # tasks of one operator kind within this FLOP ratio are similar
    early_stopping: int | None = None  # rounds without improvement after which a task stops (None: never)
    max_invalid_rounds: int = 3  # rounds with no valid candidate at all after which a task stops
    # What t_i counts. "trials": candidates scored, in units of a full round, so that a warm-up round of 8 counts a
    # quarter of a 32-candidate round (Ansor's rounds are all one size; ours are not). "rounds": every round counts
    # one, so a task's first full round after an 8-candidate warm-up looks like its second: on ResNet-50 the
    # single-call convolutions then never got past their warm-up in 140 s while the 5-call one got four rounds
    time_unit: str = "trials"

    def __post_init__(self) -> None:
        if self.time_unit not in ("trials", "rounds"):
            raise ValueError(f"time_unit must be 'trials' or 'rounds', not {self.time_unit!r}")


@dataclass(frozen=True)
class NetworkTuneConfig:
    """The network tuning loop: round size, warm-up and the final check."""

    round_size: int = 32  # candidates fully scored per round of one task
    warmup_rounds: int = 1  # rounds every task gets before the gradient decides
    # candidates in a warm-up round: networks have tens of tasks, and with schedules carried over between similar
    # tasks 8 suffice; at 16 MobileNet-V2's warm-up took 96 of 125 s (session 56: 8 gave 0.92-1.04 of MetaSchedule's
    # 65-minute build with verification where 16 gave 1.06, same budget and seed)
    warmup_round_size: int = 8
    min_warmup_round_size: int = 4  # warm-up rounds shrink to this when the budget would not reach every task
    # each round of a task also scores the best candidates of up to this many tuned tasks of the same kind and sketch
    # structure (nearest in FLOPs first), carried over to its loop extents (annotate/transfer.py); 0: tasks are
    # searched independently
    transfer_seeds: int = 4
    check_rtol: float = 1e-3  # tuned network vs reference output
    check_atol: float = 1e-3
    check_seed: int = 0  # random inputs of the output check
    # verify_top_k measures only tasks with at least this share of the predicted network latency (weight x best
    # prediction): the smallest of MobileNet-V2's 34 tasks took as long to measure as the largest
    verify_min_share: float = 0.01
    verify: VerifyConfig = field(default_factory=VerifyConfig)  # how verify_top_k times each task's candidates
    space: SpaceConfig = field(default_factory=SpaceConfig)  # every task's search space (a resumed or verifying run
    # must use the one its records were tuned in: records of sketches it does not derive are ignored)
