"""`tune_network`: import a model, extract its tasks, tune them within budgets, build and check the result."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..layout import resolve_layout
from ..records import Record, RecordStore
from ..search.config import VerifyConfig
from ..search.scorer import CostModelSpec, DeferredScorer, Scorer, make_scorer
from ..search.tune import heal_records
from ..target import resolve_target, target_identity
from .budget import Budget, BudgetConfig, BudgetError
from .build import build_checked
from .config import GradientConfig, NetworkTuneConfig
from .network_tuner import NetworkTuner
from .progress import RoundProgress
from .task_scheduler import TaskScheduler
from .tuned import TunedNetwork
from .workdir import TaskInfo, read_network, read_rounds, set_aside_rounds, write_network

log = logging.getLogger(__name__)

DEFAULT_BUDGET = "10m"


def prepare(model: Any, example_inputs: Sequence | None, target: Any, *, name: str | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None, fast_math: bool = False,
            layout: str = "auto"):
    """Import the model and extract its tasks: (network, tvm target, fused module, tasks, skipped)."""
    from ..extract import extract_tasks, fuse
    from ..network import load_network

    tvm_target, _ = resolve_target(target)
    network = load_network(model, example_inputs, name=name, input_shapes=input_shapes)
    fused = fuse(network.mod, tvm_target, fast_math=fast_math, layout=layout)
    tasks = extract_tasks(fused, tvm_target)
    return network, tvm_target, fused, list(tasks), list(getattr(tasks, "skipped", []))


def tune_network(
    model: Any,
    example_inputs: Sequence | None = None,
    *,
    target: Any = "llvm",
    budget: str | float | Budget | Mapping | None = None,
    task_budgets: BudgetConfig | Mapping | str | os.PathLike | None = None,
    ray_address: str | None = None,
    work_dir: str = "drytune-work",
    num_workers: int | None = None,
    strategy: str = "portfolio",
    task_scheduler: str | TaskScheduler = "gradient",
    latency_target: float | None = None,
    verify_top_k: int = 0,
    cost_model: CostModelSpec = None,
    name: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    fast_math: bool = False,
    layout: str = "auto",
    seed: int = 0,
    progress: bool = True,
    check: bool = True,
    config: NetworkTuneConfig | None = None,
    gradient: GradientConfig | None = None,
    scorer: Scorer | None = None,
) -> TunedNetwork:
    """Tune a whole network and return it built, checked and ready to run.

    `model`: a torch.nn.Module (with `example_inputs`), a path to an ONNX file, or a relax IRModule.
    `budget`: "10m", seconds, "2000 trials" or {"seconds": ..., "trials": ...}; it counts every run in
    `work_dir`, so a killed run resumes with what is left (raise the budget to tune further).
    `task_budgets`: per-task limits (see `BudgetConfig`; a dict, or a TOML/JSON file that may also hold the
    global budget). Candidates are scored on Ray: an embedded local Ray (`num_workers` actors, default one per
    CPU), the cluster at `ray_address` / $RAY_ADDRESS, or in this process with `num_workers=0`. With
    `verify_top_k`, each task's k best predictions are measured on this CPU and the fastest is built (the only
    step that runs candidates; off by default; tasks below `config.verify_min_share` of the predicted latency are
    left to the model). `fast_math`: exp, erf and tanh as vectorizing polynomials
    instead of one libm call per vector lane (`drytune.fastmath`; checked against the framework like the rest).
    `layout`: "auto" converts convolutions to channels-last (NHWC, HWIO weights) on CPU targets and keeps the
    imported layout on GPUs; "NHWC" or "keep" force one (`drytune.layout`). Inputs and outputs keep the model's
    layout either way. A resumed run must use the same settings: records of another module's tasks do not match
    and are ignored.
    """
    config = config or NetworkTuneConfig()
    budgets = BudgetConfig.coerce(task_budgets)
    total = Budget.parse(budget) if budget is not None else budgets.budget or Budget.parse(DEFAULT_BUDGET)
    own_scorer = scorer is None
    if scorer is None:
        scorer = DeferredScorer(lambda: make_scorer(cost_model, num_workers=num_workers, ray_address=ray_address))
        if not _spent(total, read_rounds(work_dir) if os.path.isdir(work_dir) else []):
            scorer.start_in_background()  # Ray starts while the model is imported
    try:
        network, tvm_target, fused, tasks, skipped = prepare(model, example_inputs, target, name=name,
                                                              input_shapes=input_shapes, fast_math=fast_math,
                                                              layout=layout)
        names = [nt.name for nt in tasks]
        limits = budgets.resolve(names)
        if total.trials is not None:
            floor = sum(lim.min_trials or 0 for lim in limits)
            if floor > total.trials:
                raise BudgetError(f"the tasks' min_trials add up to {floor}, more than the global budget of "
                                  f"{total.trials} trials")
        if total.seconds is not None:
            floor_s = sum(lim.min_seconds or 0 for lim in limits)
            if floor_s > total.seconds:
                raise BudgetError(f"the tasks' min_seconds add up to {floor_s:g} s, more than the global budget of "
                                  f"{total.seconds:g} s")

        os.makedirs(work_dir, exist_ok=True)
        heal_records(work_dir)
        store = RecordStore(work_dir)
        rounds = _open_work_dir(work_dir, network, tvm_target, tasks, skipped, str(total), fast_math,
                                resolve_layout(layout, tvm_target))

        bar = RoundProgress(total, enabled=progress, desc=f"tune {network.name}")
        tuner = NetworkTuner(tasks, limits, scorer, budget=total, store=store, work_dir=work_dir, strategy=strategy,
                             task_scheduler=task_scheduler, latency_target=latency_target, config=config,
                             gradient=gradient, seed=seed, on_round=bar.update)
        tuner.restore(rounds)
        if isinstance(scorer, DeferredScorer) and tuner.budget_left():
            scorer.start()  # now, so that a bad cluster address fails before the first round, not in it
        if rounds:
            log.info("resuming %s: %.0f s and %d trials already spent", work_dir, tuner.elapsed_before, tuner.trials)
        with bar:
            tuner.run()
    finally:
        if own_scorer:
            scorer.close()  # also a Ray started in the background for a run that failed first

    phase_seconds = dict(tuner.phase_seconds)
    preferred = None
    if verify_top_k > 0:
        for i, lim in enumerate(tuner.limits):  # a resumed run reads each task's records back first, untimed
            if not lim.skip:
                tuner.tuner(i)
        t0 = time.perf_counter()
        preferred = verify_tasks(tuner, tvm_target, verify_top_k, work_dir, config.verify, config.verify_min_share)
        phase_seconds["verify"] = time.perf_counter() - t0
    inputs = reference = None
    if check:
        from ..network import random_inputs

        inputs = random_inputs(network, seed=config.check_seed)
        reference = _reference(network, fused, tvm_target, inputs)
    built = build_checked(fused, tasks, store, tvm_target, reference=reference, inputs=inputs,
                          rtol=config.check_rtol, atol=config.check_atol, preferred=preferred)
    return TunedNetwork(network=network, target=tvm_target, tasks=tasks, skipped=skipped, states=tuner.states,
                        built=built, work_dir=work_dir, phase_seconds=phase_seconds)


def _spent(total: Budget, rounds: Sequence) -> bool:
    """Whether an earlier run's round log already used up the global budget (a resumed run that only builds)."""
    if not rounds:
        return False
    if total.seconds is not None and rounds[-1].elapsed >= total.seconds:
        return True
    return total.trials is not None and sum(r.trials for r in rounds) >= total.trials


def verify_tasks(tuner: NetworkTuner, target, k: int, work_dir: str, verify: VerifyConfig,
                 min_share: float = 0.0) -> dict[str, Record]:
    """Measure the k best candidates of every tuned task on this CPU; the fastest of each is preferred in the build,
    and the measured seconds go to the work directory's measured.json (the report's "measured" column).

    Tasks go in order of their share of the predicted network latency (weight x best prediction); those below
    `min_share` keep the model's choice: measuring them costs as much as measuring a large task and gains nothing
    visible."""
    from ..measure import close_build_pools
    from ..search.select import SearchError, prebuild_verification, runs_here, select_best
    from .report import MEASURED_FILE

    if not runs_here(target):
        log.warning("verify_top_k: target %s does not run on this machine; nothing measured", target_identity(target))
        return {}
    path = os.path.join(work_dir, MEASURED_FILE)
    measured: dict[str, float] = {}
    if os.path.exists(path):
        with open(path) as f:
            measured = json.load(f)
    shares: dict[int, float] = {}
    for i, nt in enumerate(tuner.tasks):
        best = tuner.tuner(i).archive.top(1) if not tuner.limits[i].skip else []
        if best:
            shares[i] = float(nt.weight) * best[0][1]
    total = sum(shares.values()) or 1.0
    order = sorted(shares, key=shares.get, reverse=True)
    chosen = [i for i in order if shares[i] / total >= min_share]
    small = [tuner.tasks[i].name for i in order if i not in chosen]
    if small:
        log.info("verify_top_k: %d tasks below %.1f%% of the predicted latency keep the model's choice: %s",
                 len(small), 100 * min_share, ", ".join(small))
    preferred = {}
    try:
        prebuild_verification([(tuner.tasks[i].task, tuner.tuner(i).archive) for i in chosen], k, verify)
        for i in chosen:
            nt = tuner.tasks[i]
            try:
                sel = select_best(nt.task, tuner.tuner(i).archive, verify_top_k=k, verify=verify)
            except SearchError as err:
                log.warning("verify_top_k: %s", err)
                continue
            preferred[nt.name] = Record(sel.best.to_schedule().trace, sel.predicted, nt.task.mod,
                                        str(nt.task.target))
            if sel.measured is not None:
                measured[nt.name] = sel.measured
    finally:
        close_build_pools()
    with open(path + ".tmp", "w") as f:
        json.dump(measured, f, indent=1)
    os.replace(path + ".tmp", path)
    return preferred


def _open_work_dir(work_dir: str, network, target, tasks, skipped, budget: str, fast_math: bool = False,
                   layout: str = "keep") -> list:
    """Write network.json; return the round log to resume from (empty for another model, target, math mode or
    layout)."""
    fingerprint = (str(network.fingerprint) + ("+fast-math" if fast_math else "")
                   + (f"+{layout}" if layout != "keep" else "") + "+prepack")
    ident = target_identity(target)
    previous = read_network(work_dir)
    rounds = read_rounds(work_dir)
    if previous is not None and (previous.get("fingerprint") != fingerprint or previous.get("target") != ident):
        log.warning("%s was used for model %r on %r; its records stay, but only those of identical subgraphs "
                    "and target are used for %r on %r", work_dir, previous.get("model"), previous.get("target"),
                    network.name, ident)
        set_aside_rounds(work_dir, str(previous.get("fingerprint", "other")))
        rounds = []
    infos = [TaskInfo(nt.name, float(nt.weight), float(nt.flops), nt.kind, float(nt.weight)) for nt in tasks]
    write_network(work_dir, model=network.name, fingerprint=fingerprint, target=ident, tasks=infos,
                  skipped=[(s.name, s.reason) for s in skipped],
                  budget=budget)
    return rounds


def _reference(network, fused, target, inputs: list[np.ndarray]):
    """The framework's output when the model came with one, else the untuned TVM build's (computed lazily)."""
    from ..search.select import runs_here
    from .build import compile_module, run_executable

    if not runs_here(target):
        return None
    if network.reference_fn is not None:
        return lambda: [np.asarray(x) for x in network.reference(*inputs)]
    cache: list[list[np.ndarray]] = []

    def untuned() -> list[np.ndarray]:
        if not cache:
            cache.append(run_executable(compile_module(fused, target), inputs))
        return cache[0]

    return untuned
