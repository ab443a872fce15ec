"""Carrying a schedule over to a similar task: tile projection, sketch matching, seeds in a tuning round."""

from __future__ import annotations

import math

import pytest

import drytune as dt
from drytune import workloads
from drytune.annotate.transfer import project_tile, transfer
from drytune.search import LocalScorer, TaskTuner
from drytune.search.config import TuneConfig
from drytune.sketch.sketch import Hole
from drytune.verify import check_candidate


def _task(workload: workloads.Workload, name: str) -> dt.Task:
    return dt.Task.from_prim_func(workload.prim_func(), "llvm", name=name)


@pytest.fixture(scope="module")
def convs() -> tuple[dt.Task, dt.Task]:
    """Two 3x3 NHWC convolutions that differ only in their extents."""
    small = _task(workloads.small("conv2d_nhwc"), "conv_a")
    other = _task(workloads.reshaped("conv2d_nhwc", N=1, H=7, W=7, CI=24, CO=40, K=3, stride=1, pad=1), "conv_b")
    return small, other


def test_a_tile_keeps_the_inner_factors_that_divide_the_new_extent() -> None:
    hole = Hole("c/S3", "tile", extent=144, parts=4, max_innermost=64)
    assert project_tile((8, 5, 1, 8), hole) == (6, 3, 1, 8)  # 320 -> 144: 8 divides, 5 becomes 3, the rest outside
    assert project_tile((1, 2, 5, 16), hole) == (3, 1, 3, 16)
    assert project_tile((1, 1, 1, 7), Hole("c/S1", "tile", extent=56, parts=4)) == (8, 1, 1, 7)
    capped = project_tile((1, 1, 1, 60), Hole("c/R", "tile", extent=24, parts=4, max_innermost=16))
    assert capped == (2, 1, 1, 12) and math.prod(capped) == 24


def test_a_candidate_carries_over_to_a_task_of_the_same_structure(convs) -> None:
    a, b = convs
    space_b = dt.SearchSpace(b)
    carried = 0
    for cand in dt.SearchSpace(a).sample(6, seed=4):
        moved = transfer(cand, space_b.sketches, b)
        assert moved is not None, cand
        assert moved.task is b and moved.sketch.name.split("/")[-1] == cand.sketch.name.split("/")[-1]
        for hole in moved.sketch.holes:
            value = moved.decisions[hole.key]
            if hole.is_tile:
                assert math.prod(value) == hole.extent and value[-1] <= hole.max_innermost
            else:  # the same option value (unroll steps, vector widths), not just the same index
                old = next(h for h in cand.sketch.holes if h.key == hole.key)
                assert hole.options[value] == old.options[cand.decisions[hole.key]]
        check_candidate(b, moved)  # replays on b's program and computes b's result
        carried += 1
    assert carried == 6


def test_no_counterpart_in_another_operator(convs) -> None:
    a, _ = convs
    softmax = _task(workloads.small("softmax"), "softmax")
    cand = dt.SearchSpace(a).sample(1, seed=0)[0]
    assert transfer(cand, dt.SearchSpace(softmax).sketches, softmax) is None


def test_seeds_are_scored_once_past_the_prescore_filter(convs) -> None:
    a, b = convs
    seeds = [transfer(c, dt.SearchSpace(b).sketches, b) for c in dt.SearchSpace(a).sample(6, seed=9)]
    tuner = TaskTuner(b, LocalScorer(), strategy="random", config=TuneConfig(prescore_oversample=4))
    assert tuner.round(8, seeds) == 8
    scored = [s for s in seeds if tuner.archive.score(s) is not None]
    assert len(scored) == 4  # half the round at most, the rest the strategy's (pre-scored) proposals
    assert all(math.isfinite(tuner.archive.score(s)) for s in scored)
    tuner.round(8, seeds)  # the first four are seen: only the other two come in
    assert sum(tuner.archive.score(s) is not None for s in seeds) == 6 and tuner.trials == 16


def test_a_network_round_scores_the_schedules_of_similar_tasks_carried_over(convs) -> None:
    from types import SimpleNamespace

    from drytune.scheduler.budget import Budget, TaskBudget
    from drytune.scheduler.config import NetworkTuneConfig
    from drytune.scheduler.network_tuner import NetworkTuner

    a, b = convs
    softmax = _task(workloads.small("softmax"), "softmax")
    tasks = [SimpleNamespace(name=t.name, weight=1, flops=1e6 * (3 - i), kind=kind, task=t)
             for i, (t, kind) in enumerate([(a, "conv2d"), (softmax, "softmax"), (b, "conv2d")])]

    def first_rounds(transfer_seeds: int) -> NetworkTuner:
        net = NetworkTuner(tasks, [TaskBudget()] * 3, LocalScorer(), budget=Budget(trials=1000), store=None,
                           work_dir=None, config=NetworkTuneConfig(warmup_round_size=6, round_size=6,
                                                                   transfer_seeds=transfer_seeds))
        assert [net.step() for _ in range(3)] == [0, 1, 2]  # the warm-up, heaviest first: b comes after a
        return net

    net = first_rounds(2)
    best_a = net.tuners[0].best[0]
    carried = transfer(best_a, net.tuners[2].space.sketches, b)
    assert carried is not None and net.tuners[2].archive.score(carried) is not None
    assert net._seeds(1) == []  # softmax has no task of its kind
    assert first_rounds(0)._seeds(2) == []
