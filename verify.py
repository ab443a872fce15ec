"""Check a scheduled program against the unscheduled one on random inputs (in this process, CPU only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm

from .errors import InvalidCandidateError
from .measure import random_arrays
from .task import Task


@dataclass(frozen=True)
class CheckResult:
    max_abs_err: float
    ok: bool


def random_inputs(task: Task, seed: int = 0) -> list[np.ndarray]:
    """Random arrays for every parameter of the task (outputs included; they are overwritten)."""
    return random_arrays([(shape, dtype) for _, shape, dtype in task.params], seed)


def run_module(mod: tvm.IRModule, task: Task, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Build `mod` for the task's (CPU) target, run it once and return all parameter arrays after the run."""
    if task.is_gpu:
        raise ValueError("run_module runs on the local CPU; GPU candidates are checked on a GPU machine")
    rt = tvm.compile(mod, target=task.target)
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    rt["main"](*args)
    return [a.numpy() for a in args]


def check_module(task: Task, mod: tvm.IRModule, *, rtol: float = 1e-3, atol: float = 1e-3, seed: int = 0,
                 reference: list[np.ndarray] | None = None) -> CheckResult:
    """Compare every parameter written by `mod` with the unscheduled program's result."""
    inputs = random_inputs(task, seed)
    expected = reference if reference is not None else run_module(task.mod, task, inputs)
    got = run_module(mod, task, inputs)
    worst, ok = 0.0, True
    for e, g, x in zip(expected, got, inputs, strict=True):
        if np.array_equal(e, x) and np.array_equal(g, x):
            continue  # an input left untouched by both
        err = float(np.max(np.abs(e.astype(np.float64) - g.astype(np.float64)))) if e.size else 0.0
        worst = max(worst, err)
        ok = ok and bool(np.allclose(g, e, rtol=rtol, atol=atol))
    return CheckResult(worst, ok)


def check_candidate(task: Task, candidate, **kwargs) -> CheckResult:
    """`check_module` for a candidate; raises InvalidCandidateError when its output is wrong."""
    result = check_module(task, candidate.to_mod(), **kwargs)
    if not result.ok:
        raise InvalidCandidateError(f"wrong result: max abs error {result.max_abs_err:.3g} vs the unscheduled program")
    return result
