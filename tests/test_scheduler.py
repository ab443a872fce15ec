"""The gradient task scheduler and the budget configuration, on plain numbers (no TVM needed)."""

from __future__ import annotations

import json
import math

import pytest

from drytune.scheduler.budget import Budget, BudgetConfig, BudgetError, parse_seconds
from drytune.scheduler.config import GradientConfig
from drytune.scheduler.task_scheduler import (
    GradientTaskScheduler,
    RoundRobinTaskScheduler,
    TaskState,
    objective,
)

NAMES = ["fused_conv2d_add_relu", "fused_conv2d1_add", "fused_matmul_add", "softmax"]


# ---------------------------------------------------------------------------------------------- budgets


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("10m", 600), ("1h30m", 5400), ("2.5m", 150), (45, 45),
                                          ("120", 120), ("1h 5m", 3900)])
def test_durations(text, seconds) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("text", ["ten minutes", "10x", "-5", "5m3", ""])
def test_bad_durations(text) -> None:
    with pytest.raises(BudgetError, match="duration"):
        parse_seconds(text)


def test_budget_forms() -> None:
    assert Budget.parse("10m") == Budget(seconds=600)
    assert Budget.parse("2000 trials") == Budget(trials=2000)
    assert Budget.parse({"seconds": "1m", "trials": 64}) == Budget(seconds=60, trials=64)
    with pytest.raises(BudgetError, match="unknown budget key"):
        Budget.parse({"minutes": 3})
    with pytest.raises(BudgetError, match="negative"):
        Budget(trials=-1)


def test_rules_by_pattern_and_index_later_overrides() -> None:
    cfg = BudgetConfig.from_dict({"budget": "5m", "tasks": {
        "fused_conv2d*": {"min_trials": 64, "max_seconds": "90s"},
        "fused_conv2d1_add": {"min_trials": 8},
        3: {"skip": True},
        "2": {"weight": 5, "strategy": "cmaes"},
    }})
    assert cfg.budget == Budget(seconds=300)
    limits = cfg.resolve(NAMES)
    assert limits[0].min_trials == 64 and limits[0].max_seconds == 90
    assert limits[1].min_trials == 8 and limits[1].max_seconds == 90  # only min_trials overridden
    assert limits[2].weight == 5 and limits[2].strategy == "cmaes"
    assert limits[3].skip and not limits[0].skip


def test_unknown_task_lists_valid_names() -> None:
    with pytest.raises(BudgetError) as err:
        BudgetConfig.from_dict({"fused_dense*": {"max_trials": 3}}).resolve(NAMES)
    assert "matches no task" in str(err.value)
    for name in NAMES:
        assert name in str(err.value)
    with pytest.raises(BudgetError, match="out of range"):
        BudgetConfig.from_dict({7: {"skip": True}}).resolve(NAMES)


@pytest.mark.parametrize("limits,message", [
    ({"max_trials": -3}, "must not be negative"),
    ({"min_trials": 10, "max_trials": 5}, "exceeds max_trials"),
    ({"min_seconds": "2m", "max_seconds": "1m"}, "exceeds max_seconds"),
    ({"max_trails": 3}, "unknown key"),
    ({"strategy": "annealing"}, "unknown strategy"),
    ({"skip": True, "min_trials": 4}, "contradicts"),
    ({"weight": -1}, "non-negative"),
])
def test_bad_limits(limits, message) -> None:
    with pytest.raises(BudgetError, match=message):
        BudgetConfig.from_dict({"softmax": limits}).resolve(NAMES)


def test_budget_files(tmp_path) -> None:
    toml = tmp_path / "b.toml"
    toml.write_text('budget = "2m"\n[tasks."fused_matmul*"]\nmax_trials = 32\n[tasks.0]\nskip = true\n')
    cfg = BudgetConfig.from_file(toml)
    assert cfg.budget == Budget(seconds=120)
    limits = cfg.resolve(NAMES)
    assert limits[2].max_trials == 32 and limits[0].skip
    js = tmp_path / "b.json"
    js.write_text(json.dumps({"budget": "100 trials", "tasks": {"softmax": {"min_trials": 16}}}))
    assert BudgetConfig.from_file(js).resolve(NAMES)[3].min_trials == 16
    bad = tmp_path / "bad.toml"
    bad.write_text("budget = [unclosed\n")
    with pytest.raises(BudgetError, match="not valid TOML"):
        BudgetConfig.from_file(bad)
    with pytest.raises(BudgetError, match="cannot read"):
        BudgetConfig.from_file(tmp_path / "missing.toml")


# ---------------------------------------------------------------------------------------------- scheduler


def state(name: str, history: list[float], weight: float = 1.0, flops: float = 1e9, kind: str = "conv2d") -> TaskState:
    s = TaskState(name, weight, flops, kind)
    for best in history:
        s.add_round(best, 32, 1.0)
    return s


def test_warmup_goes_to_every_task_first() -> None:
    sched = GradientTaskScheduler(GradientConfig(eps_greedy=0.0))
    states = [state("a", [1e-3]), state("b", []), state("c", [])]
    assert sched.next_task(states) == 1
    states[1].add_round(2e-3, 32, 1.0)
    assert sched.next_task(states) == 2


def test_task_without_valid_candidate_comes_first() -> None:
    sched = GradientTaskScheduler(GradientConfig(eps_greedy=0.0))
    states = [state("a", [1e-3, 9e-4]), state("b", [math.inf])]
    assert sched.next_task(states) == 1


def test_weight_decides_between_equal_histories() -> None:
    sched = GradientTaskScheduler(GradientConfig(eps_greedy=0.0))
    states = [state("a", [4e-3, 3e-3], kind="x"), state("b", [4e-3, 3e-3], weight=10, kind="y")]
    assert sched.next_task(states) == 1


def test_similar_task_throughput_points_at_the_laggard() -> None:
    # b does the same kind of work as a at the same FLOPs but is 10x slower: beta * C_b / V_a - g_b is very negative
    sched = GradientTaskScheduler(GradientConfig(eps_greedy=0.0))
    a = state("a", [1e-3] * 8)
    b = state("b", [1e-2] * 8)
    c = state("c", [5e-3] * 8, kind="matmul")  # no similar task: only -g/t counts
    assert sched.similar([a, b, c], 1) == [0, 1]
    assert sched.gradient([a, b, c], 1) < sched.gradient([a, b, c], 2) < 0
    assert sched.next_task([a, b, c]) == 1


def test_backward_difference_favours_a_task_still_improving() -> None:
    sched = GradientTaskScheduler(GradientConfig(eps_greedy=0.0))
    flat = state("flat", [2e-3] * 6, kind="x")
    falling = state("falling", [4e-3, 3.5e-3, 3e-3, 2.6e-3, 2.3e-3, 2e-3], kind="y")
    assert sched.next_task([flat, falling]) == 1


def test_finished_tasks_are_never_picked() -> None:
    sched = GradientTaskScheduler()
    states = [state("a", [1e-3]), state("b", [5e-3])]
    states[1].done = "search space exhausted"
    assert all(sched.next_task(states) == 0 for _ in range(50))
    states[0].done = "reached max_trials = 32"
    assert sched.next_task(states) is None
    assert RoundRobinTaskScheduler().next_task(states) is None


def simulate(sched, rounds: int) -> float:
    """Tasks whose latency falls as g(t) = floor * (1 + gap / t); f after `rounds` picks."""
    tasks = [(10.0, 1e-3, 8.0), (1.0, 2e-3, 4.0), (1.0, 5e-4, 1.0), (4.0, 3e-3, 2.0), (1.0, 1e-4, 0.5)]
    states = [TaskState(f"t{i}", w, 1e9 * (i + 1), f"k{i}") for i, (w, _, _) in enumerate(tasks)]
    for _ in range(rounds):
        i = sched.next_task(states)
        _, floor, gap = tasks[i]
        states[i].add_round(floor * (1 + gap / (states[i].rounds + 1)), 32, 1.0)
    return objective(states)


def test_gradient_beats_round_robin_on_diminishing_returns() -> None:
    for seed in range(3):
        grad = simulate(GradientTaskScheduler(GradientConfig(), seed=seed), 40)
        rr = simulate(RoundRobinTaskScheduler(), 40)
        assert grad < rr


def test_warmup_takes_the_heaviest_task_first() -> None:
    sched = GradientTaskScheduler(GradientConfig(eps_greedy=0.0))
    states = [state("light", [], weight=1, flops=1e6), state("heavy", [], weight=3, flops=1e9),
              state("mid", [], weight=10, flops=1e7)]
    assert sched.next_task(states) == 1
    states[1].add_round(1e-3, 16, 1.0)
    assert sched.next_task(states) == 2


def test_warmup_rounds_shrink_so_every_task_gets_one() -> None:
    from types import SimpleNamespace

    from drytune.scheduler.budget import TaskBudget
    from drytune.scheduler.config import NetworkTuneConfig
    from drytune.scheduler.network_tuner import NetworkTuner

    tasks = [SimpleNamespace(name=f"t{i}", weight=1, flops=1e9, kind="conv2d") for i in range(10)]
    cfg = NetworkTuneConfig(round_size=32, warmup_round_size=16, min_warmup_round_size=4)

    def tuner(budget: Budget) -> NetworkTuner:
        return NetworkTuner(tasks, [TaskBudget()] * 10, scorer=None, budget=budget, store=None, work_dir=None,
                            config=cfg)

    assert tuner(Budget(trials=1000))._round_size(0) == 16
    assert tuner(Budget(trials=80))._round_size(0) == 8  # 80 trials over 10 waiting tasks
    assert tuner(Budget(trials=10))._round_size(0) == 4  # never below the minimum
    t = tuner(Budget(seconds=100))
    for s in t.states[:5]:  # five tasks warmed up at 1 s per candidate
        s.add_round(1e-3, 16, 16.0)
    t.elapsed_before = 55.0
    assert t._round_size(7) == 8  # just under 45 s left for 5 waiting tasks at 1 s per candidate


def test_time_is_counted_in_trials_so_a_small_warmup_round_counts_little() -> None:
    # ResNet-50's shape: a single-call task after an 8-candidate warm-up against a 5-call task that had a full
    # 32-candidate round after its warm-up. Counted in trials the single-call task has had a quarter of a round and
    # its first full round comes first; counted in rounds (Ansor's code, whose rounds are all one size) it waits
    single = TaskState("single", 1.0, 2.3e8, "conv2d")
    single.add_round(1.1e-3, 8, 1.0)
    heavy = TaskState("heavy", 5.0, 2.3e8, "conv2d")
    heavy.add_round(1.0e-3, 8, 1.0)
    heavy.add_round(0.85e-3, 32, 4.0)
    states = [single, heavy]
    assert GradientTaskScheduler(GradientConfig(eps_greedy=0.0), round_size=32).next_task(states) == 0
    by_rounds = GradientTaskScheduler(GradientConfig(eps_greedy=0.0, time_unit="rounds"), round_size=32)
    assert by_rounds.next_task(states) == 1
    with pytest.raises(ValueError, match="time_unit"):
        GradientConfig(time_unit="seconds")


def test_backward_difference_is_per_trial() -> None:
    # the same fall in latency over three rounds is steeper when those rounds scored fewer candidates
    sched = GradientTaskScheduler(GradientConfig(eps_greedy=0.0, alpha=1.0), round_size=32)
    few, many = TaskState("few", 1.0, 1e9, "x"), TaskState("many", 1.0, 1e9, "y")
    for best in (4e-3, 3e-3, 2.5e-3, 2e-3):
        few.add_round(best, 8, 1.0)
        many.add_round(best, 32, 1.0)
    assert sched.gradient([few, many], 0) == pytest.approx(4 * sched.gradient([few, many], 1))


def test_resumed_run_restores_each_task_as_the_killed_run_left_it(tmp_path) -> None:
    from types import SimpleNamespace

    from drytune.scheduler.budget import TaskBudget
    from drytune.scheduler.network_tuner import NetworkTuner
    from drytune.scheduler.workdir import read_rounds

    tasks = [SimpleNamespace(name=f"t{i}", weight=1, flops=1e9, kind="conv2d") for i in range(2)]

    def tuner() -> NetworkTuner:
        return NetworkTuner(tasks, [TaskBudget()] * 2, scorer=None, budget=Budget(trials=1000), store=None,
                            work_dir=str(tmp_path), task_scheduler="round-robin")

    class Space:  # stands in for a TaskTuner: task 0 runs out after one round, task 1 never does
        def __init__(self, sizes: list[int]) -> None:
            self.sizes, self.archive, self.best = sizes, SimpleNamespace(best_seconds=1e-3), []

        def round(self, n: int, seeds) -> int:
            return min(n, self.sizes.pop(0)) if self.sizes else 0

    first = tuner()
    first.tuners = {0: Space([8]), 1: Space([8, 32, 32])}
    for _ in range(5):
        first.step()
    assert first.states[0].done == "search space exhausted" and first.states[1].done is None

    again = tuner()
    again.restore(read_rounds(str(tmp_path)))
    for old, new in zip(first.states, again.states, strict=True):
        assert (new.done, new.history, new.trials_history) == (old.done, old.history, old.trials_history)
        assert new.seconds == pytest.approx(old.seconds)
    assert again.scheduler.next_task(again.states) == 1  # the exhausted task is not proposed again
