"""Choose the candidate to hand out: optionally measure the top-k, then check it against the unscheduled program."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import dataclass

import numpy as np
import tvm

from ..annotate.candidate import Candidate
from ..errors import TVM_ERRORS, DrytuneError, InvalidCandidateError
from ..measure import cold_timing, measure, prebuild
from ..prepack import constant_weight_share
from ..task import Task
from ..verify import check_candidate, random_inputs, run_module
from .config import VerifyConfig
from .strategy import Archive

log = logging.getLogger(__name__)


class SearchError(DrytuneError):
    """The search found no candidate that is valid and passes the check."""


@dataclass(frozen=True)
class Selection:
    best: Candidate
    predicted: float
    measured: float | None
    measured_top: list[tuple[Candidate, float, float]]  # (candidate, predicted, measured seconds; inf = failed)
    check: str  # how `best` was checked


_VERIFY = VerifyConfig()
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "amx", "popcnt", "lzcnt", "movbe", "neon", "sve")


def runs_here(target: tvm.target.Target) -> bool:
    """Whether code for `target` runs on this CPU: same architecture and no instruction-set extension
    (SSE/AVX/FMA/AMX..., NEON/SVE) that this CPU lacks; LLVM's tuning-only features are ignored."""
    if target.kind.name != "llvm":
        return False
    from tvm.target import codegen

    host_triple = str(codegen.llvm_get_system_triple())
    triple = str(dict(target.attrs).get("mtriple", "")) or host_triple
    if triple.split("-")[0] != host_triple.split("-")[0]:
        return False
    host = tvm.target.Target({"kind": "llvm", "mcpu": str(codegen.llvm_get_system_cpu())})
    wanted = {str(f) for f in codegen.llvm_get_cpu_features(target) if str(f).startswith(_ISA_PREFIXES)}
    return wanted <= {str(f) for f in codegen.llvm_get_cpu_features(host)}


def measure_interleaved(task: Task, candidates: list[Candidate], verify: VerifyConfig = _VERIFY) -> np.ndarray:
    """Median measured seconds of each candidate over `verify.rounds` rounds that time every candidate once, in turn
    (the first round also checks outputs against the unscheduled program; failures are inf). One pass in order would
    credit a slow phase of the machine, or work still winding down after a search, to whichever candidate it fell on.
    A network's task whose constant weights are most of its data is timed with them cold, as the network runs it
    (`VerifyConfig.cold_weight_share`)."""
    share, weights = verify.cold_weight_share, constant_weight_share(task.mod)
    if share is not None and weights > 0 and weights >= share:
        timing = cold_timing(verify.cold_repeat)
    else:
        timing = {"repeat": verify.repeat, "min_repeat_ms": verify.min_repeat_ms}
    return measure(task, candidates, check=True, rounds=verify.rounds,
                   build_workers=verify.build_workers or os.cpu_count() or 1, **timing)


def verification_set(top: list[tuple[Candidate, float]], k: int,
                     one_per_sketch: bool) -> list[tuple[Candidate, float]]:
    """The k (candidate, prediction) pairs to measure from `top` (best first): the k best, or with `one_per_sketch`
    the best of each sketch in order, then the best of the rest."""
    if not one_per_sketch:
        return top[:k]
    firsts: dict[str, tuple[Candidate, float]] = {}
    for cand, predicted in top:
        firsts.setdefault(cand.sketch.name, (cand, predicted))
    chosen = list(firsts.values())[:k]
    taken = {id(c) for c, _ in chosen}
    return chosen + [x for x in top if id(x[0]) not in taken][: k - len(chosen)]


def verification_head(archive: Archive, k: int, verify: VerifyConfig = _VERIFY) -> list[tuple[Candidate, float]]:
    """The (candidate, prediction) pairs that `select_best(..., verify_top_k=k)` measures."""
    return verification_set(archive.top(verify.pool if verify.one_per_sketch else k), k, verify.one_per_sketch)


def prebuild_verification(work: list[tuple[Task, Archive]], k: int, verify: VerifyConfig = _VERIFY) -> None:
    """Compile in one batch, on every build process, what `select_best(..., verify_top_k=k)` will then measure for
    each (task, archive) that runs here: its candidates and the unscheduled program they are checked against. Per
    task, two candidates and a reference keep two build processes busy only part of the time."""
    by_target: dict[str, tuple[tvm.target.Target, list[tvm.IRModule], list[tvm.IRModule]]] = {}
    for task, archive in work:
        if k <= 0 or not runs_here(task.target):
            continue
        _, mods, references = by_target.setdefault(str(task.target), (task.target, [], []))
        for cand, _ in verification_head(archive, k, verify):
            with contextlib.suppress(InvalidCandidateError):
                mods.append(cand.to_mod())
        references.append(task.mod)
    for target, mods, references in by_target.values():
        prebuild(mods, target, verify.build_workers or os.cpu_count() or 1, references=references)


def select_best(task: Task, archive: Archive, *, verify_top_k: int = 0, verify: VerifyConfig = _VERIFY,
                attempts: int = 8) -> Selection:
    """The best candidate that passes the check, by measured time among the verified top-k, else by prediction.

    The check compares the output with the unscheduled program's when the target runs on this CPU (a measured
    candidate was compared while it was measured); otherwise (GPU, other architectures) the candidate must at
    least build. Raises `SearchError` if none of the `attempts` best candidates passes.
    """
    top = archive.top(max(attempts, verify_top_k))
    if not top:
        raise SearchError(f"no valid candidate was found for task {task.name!r}")
    local = runs_here(task.target)
    order = list(top)
    measured_top: list[tuple[Candidate, float, float]] = []
    if verify_top_k > 0:
        if local:
            head = verification_head(archive, verify_top_k, verify)
            times = measure_interleaved(task, [c for c, _ in head], verify)
            measured_top = [(c, p, float(t)) for (c, p), t in zip(head, times, strict=True)]
            ranked = sorted((x for x in measured_top if math.isfinite(x[2])), key=lambda x: x[2])
            timed = {c for c, _, _ in ranked}
            # measured first, fastest first; then unmeasured by prediction, as far as `attempts` reaches
            order = [(c, p) for c, p, _ in ranked] + [x for x in top if x[0] not in timed]
        else:
            log.warning("verify_top_k: target %s does not run on this machine; not measured", task.target.kind.name)
    measured = {c.key: t for c, _, t in measured_top}
    reference = None
    for cand, predicted in order:
        t = measured.get(cand.key)
        if t is not None and math.isfinite(t):  # measured, so its output was checked in the measuring worker
            return Selection(cand, predicted, t, measured_top, "output matches the unscheduled program")
        try:
            if local:
                if reference is None:
                    reference = run_module(task.mod, task, random_inputs(task))
                check_candidate(task, cand, reference=reference)
                how = "output matches the unscheduled program"
            else:
                tvm.compile(cand.to_mod(), target=task.target)
                how = "built (the target does not run here)"
        except (DrytuneError, *TVM_ERRORS) as err:
            log.warning("best candidate %s failed the check (%s); trying the next", cand, err)
            continue
        return Selection(cand, predicted, None, measured_top, how)
    raise SearchError(f"none of the {len(order)} best candidates of task {task.name!r} passed the check")
