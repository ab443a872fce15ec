"""Tunable parameters of the search strategies, the parallel scorer and the tuning loop, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvolutionConfig:
    """Ansor-style evolutionary search: parents from the best scored candidates, children by mutation/crossover."""

    population: int = 64  # parent pool: the best scored candidates so far
    per_sketch: int = 4  # plus the best few of every sketch, so one sketch's lead cannot crowd out the others
    eps_greedy: float = 0.05  # share of children that are fresh random samples
    mutation_prob: float = 0.85  # share of the other children made by mutation; the rest by crossover
    repeat_mutation_prob: float = 0.3  # after each mutation, another one with this probability
    max_attempts: int = 32  # tries to make one unseen child before falling back to a random sample


@dataclass(frozen=True)
class CMAESConfig:
    """CMA-ES over a sketch's decision encoding, one distribution per sketch, restarted when it stalls."""

    initial_random: int = 32  # random candidates scored first; each distribution starts at its sketch's best
    sigma0: float = 0.25  # initial step size in the [0, 1] encoding
    restart_sigma: float = 0.3
    popsize: int | None = None  # None: cma's default 4 + 3 ln(d)
    popsize_growth: float = 2.0  # IPOP: population factor at each restart
    max_popsize: int = 64
    stall_generations: int = 8  # generations without a better candidate before a restart
    duplicate_generations: int = 3  # generations in a row with no unseen candidate before a restart
    max_generations_per_call: int = 64  # bound on generations asked in one propose call
    restart_from_best_prob: float = 0.5  # a restart starts from the sketch's best (else from a random sample)
    sketch_focus: float = 4.0  # sketches get generations with weight (overall best / sketch best) ** focus


@dataclass(frozen=True)
class PortfolioConfig:
    """Split of each round between the strategies, by their improvements of the best over recent rounds."""

    window: int = 6  # rounds of gains remembered per strategy
    min_share: float = 0.2  # every strategy keeps at least this share of a round


@dataclass(frozen=True)
class ScorerConfig:
    """Parallel scoring on Ray actors: batch size, batches in flight, time limits and restarts."""

    batch_size: int = 1  # a batch that hangs is only found out after timeout x its size, then retried one by one:
    # with two hanging candidates a 90 s batch_matmul search took 96 s one at a time, 129 s in pairs; when nothing
    # hangs, one at a time scored light GEMM candidates at 0.95x the rate of pairs (README, Running on a Ray cluster)
    prescore_batch_size: int = 16  # the pre-score builds no code (milliseconds each): larger batches spread the cost
    # of a Ray call (benchmarks/results/scoring_speed_*.md)
    in_flight_per_worker: int = 2
    # a batch that runs longer than this times its size is a hang: its actor is replaced and the batch retried one
    # candidate at a time. Full scores on Zen 4: median 0.21 s, p99 4.9 s, slowest 11.4 s of 1152 random candidates;
    # at 60 s (batches of 4), two batch_matmul candidates LLVM could not build in a minute made a 90 s search take
    # 363 s; 122 s at 15 s in batches of 2 (benchmarks/results/scorer_timeout_znver4*.json)
    timeout_s_per_candidate: float = 15.0
    startup_timeout_s: float = 180.0  # for a new actor to import TVM and build its cost model
    max_failed_starts: int = 3  # consecutive actor start failures before giving up


@dataclass(frozen=True)
class VerifyConfig:
    """How verify_top_k times the k best predictions: interleaved rounds, each timing every candidate once.

    Rounds matter more than repeats here: the machine's slow phases last seconds, far longer than one repeat. On
    MobileNet-V2's tasks three repeats of at least 10 ms gave medians within 6% (mostly 2%) of five of 20 ms
    at 0.4x the time (session 43, an ad-hoc comparison of 9 kernels)."""

    rounds: int = 3  # the median over rounds decides
    repeat: int = 3  # repeats per round; a round's time is their median
    min_repeat_ms: int = 10  # runs per repeat grow until a repeat lasts this long
    build_workers: int = 0  # processes compiling the candidates side by side before they are timed; 0: one per CPU
    # measure the best prediction of each sketch first (best first), then fill up with the next best: a model that
    # misprices one kernel family ranks its near-copies together at the top, and measuring them teaches nothing
    one_per_sketch: bool = False
    # a network's task whose constant weights (marked by the importer) are at least this share of its arguments'
    # bytes is timed with every argument but the activation flushed before each run, one run per repeat: in the
    # network each weight was last read an inference ago (None: always hot). ResNet-50's kernels ran 1.34x their hot
    # time inside the network and 1.04x their cold time, and cold times told which of two kernels is faster there
    # 86% of the time against 75% for hot; verified cold, three sets of records built 0.917-0.952 of their unverified
    # latency against 0.948-1.011 hot. MobileNet-V2's small weights and large activations went the other way (61%
    # against 76%, benchmarks/results/in_network_*.md, session 59)
    cold_weight_share: float | None = 0.5
    cold_repeat: int = 10
    pool: int = 1 << 16  # predictions the sketch-diverse choice looks through (a search tends to fill its top
    # hundreds with one sketch: GEMM at 300 s, the best 537 of 1490)


@dataclass(frozen=True)
class TuneConfig:
    """The tuning loop: round size, budget defaults, prescore filtering and the final check."""

    default_trials: int = 256  # when neither trials nor seconds is given
    round_size: int = 32  # candidates fully scored per round (strategies learn between rounds)
    prescore_oversample: int = 8  # proposed per slot when the model has a cheaper prescore (it costs ~1/50 of a
    # full score; benchmarks/results/prescore_filter_znver3.md: best of 3 full scores 0.71 of the best at 4x, 0.76 8x)
    check_attempts: int = 8  # candidates tried, best first, until one passes the numeric check
    verify: VerifyConfig = VerifyConfig()
