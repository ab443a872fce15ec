"""Build a tuned network: pick each task's best record, apply them with TVM's `MetaScheduleApplyDatabase`,
give untuned tasks a default schedule, compile, and check the output against a reference."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..errors import DrytuneError
from ..prepack import PREPACKED_SUFFIX, fold_weight_packing
from ..records import Record, RecordStore
from ..verify import check_module

log = logging.getLogger(__name__)


class BuildCheckError(DrytuneError):
    """The built network's output differs from the reference even with every task on its default schedule."""


@dataclass
class Choice:
    """The schedule a task gets in the build: a record (tuned) or none (default schedule)."""

    name: str
    record: Record | None
    rejected: list[str]  # why better records were not used

    @property
    def predicted(self) -> float | None:
        return self.record.seconds if self.record is not None else None


def _replays(record: Record) -> str | None:
    try:
        record.to_schedule()
    except Exception as err:  # noqa: BLE001 - TVM raises many kinds; the record is only skipped
        return f"replay failed: {str(err).strip().splitlines()[-1][:160] if str(err).strip() else type(err).__name__}"
    return None


def choose_records(store: RecordStore | None, tasks: Sequence, *, skip: dict[str, int] | None = None,
                   preferred: dict[str, Record] | None = None) -> list[Choice]:
    """Each task's best record of the network's target that replays; `skip[name]` best ones are passed over.

    `preferred[name]` (e.g. the measured fastest of the top-k) goes before the records, unless skipped.
    """
    out = []
    for nt in tasks:
        rejected: list[str] = []
        chosen = None
        records = store.records(nt.task) if store is not None else []
        if preferred and nt.name in preferred:
            records = [preferred[nt.name], *records]
        passed_over = min((skip or {}).get(nt.name, 0), len(records))
        rejected += ["failed the output check"] * min(passed_over, 1)
        for rec in records[passed_over:]:
            why = _replays(rec)
            if why is None:
                chosen = rec
                break
            rejected.append(why)
            log.warning("task %s: a record was not applied (%s)", nt.name, why)
        out.append(Choice(nt.name, chosen, rejected))
    return out


def default_schedule_rules(target: Target) -> list:
    """TVM's rule-based default schedules (dlight): required on GPUs (threads must be bound), cheap help on CPUs."""
    from tvm.s_tir import dlight as dl

    if target.kind.name == "cuda":
        return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def apply_choices(fused: tvm.IRModule, tasks: Sequence, choices: Sequence[Choice], target: Target) -> tvm.IRModule:
    """The fused module with the chosen records applied by `MetaScheduleApplyDatabase`, defaults elsewhere, and
    the weights that schedules pack packed here, once (`drytune.prepack`)."""
    return fold_weight_packing(scheduled_module(fused, tasks, choices, target))


def scheduled_module(fused: tvm.IRModule, tasks: Sequence, choices: Sequence[Choice], target: Target
                     ) -> tvm.IRModule:
    """The fused module with the chosen records applied and default schedules elsewhere, weights not packed yet."""
    from tvm.s_tir import dlight as dl

    db = ms.database.MemoryDatabase()
    for nt, choice in zip(tasks, choices, strict=True):
        if choice.record is None:
            continue
        workload = db.commit_workload(nt.task.mod)
        db.commit_tuning_record(ms.database.TuningRecord(
            trace=choice.record.trace, workload=workload, run_secs=[choice.record.seconds], target=target,
            args_info=ms.arg_info.ArgInfo.from_prim_func(nt.task.func)))
    with target, db:
        mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    with target:
        try:
            mod = dl.ApplyDefaultSchedule(*default_schedule_rules(target))(mod)
        except Exception as err:  # noqa: BLE001 - defaults are a convenience on CPU, checked below on GPU
            if target.kind.name == "cuda":
                raise
            log.warning("default CPU schedules not applied: %s", err)
    return mod


def applied_tasks(mod: tvm.IRModule) -> set[str]:
    """Names of the PrimFuncs that carry a schedule (TVM marks them `tirx.is_scheduled`); a kernel whose weight
    packing was split off at build time (TVM names it `<task>_prepacked`) counts under its task's name."""
    out = set()
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and "tirx.is_scheduled" in func.attrs:
            out.add(gv.name_hint.removesuffix(PREPACKED_SUFFIX))
    return out


def compile_module(mod: tvm.IRModule, target: Target) -> tvm.runtime.Executable:
    """Compile an already fused and scheduled relax module (tvm.compile's CPU pipeline does not fuse again)."""
    return tvm.compile(mod, target=target)


def run_executable(ex, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run "main" of a compiled relax module on the CPU; outputs flattened to numpy arrays."""
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in inputs])
    return flatten(out)


def flatten(value) -> list[np.ndarray]:
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("Array", "ADT", "Tuple"):
        return [a for v in value for a in flatten(v)]
    return [value.numpy() if hasattr(value, "numpy") else np.asarray(value)]


def outputs_match(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float,
                  atol: float) -> tuple[bool, float]:
    """Whether two output lists agree, and the largest absolute difference."""
    if len(got) != len(want):
        return False, float("inf")
    worst, ok = 0.0, True
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            return False, float("inf")
        if g.size:
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))))
        ok = ok and bool(np.allclose(g, w, rtol=rtol, atol=atol))
    return ok, worst


def failing_tasks(tasks: Sequence, choices: Sequence[Choice], rtol: float, atol: float) -> list[str]:
    """Tasks whose chosen schedule disagrees with their unscheduled program (each checked on its own)."""
    bad = []
    for nt, choice in zip(tasks, choices, strict=True):
        if choice.record is None:
            continue
        try:
            result = check_module(nt.task, choice.record.to_schedule().mod, rtol=rtol, atol=atol)
            ok = result.ok
        except Exception as err:  # noqa: BLE001 - a schedule that fails to build or run fails the check
            log.warning("task %s: its schedule fails to build or run: %s", nt.name, err)
            ok = False
        if not ok:
            bad.append(nt.name)
    return bad


@dataclass
class BuiltNetwork:
    executable: tvm.runtime.Executable
    module: tvm.IRModule
    choices: list[Choice]
    check: str  # how the output was checked


def build_checked(fused: tvm.IRModule, tasks: Sequence, store: RecordStore | None, target: Target, *,
                  reference: Callable[[], list[np.ndarray]] | None, inputs: Sequence[np.ndarray] | None,
                  rtol: float, atol: float, attempts: int = 3,
                  preferred: dict[str, Record] | None = None) -> BuiltNetwork:
    """Apply, compile and, when the target runs here, compare with `reference()`; on a mismatch the tasks whose
    schedules fail their own check fall back to their next record (then to the default schedule)."""
    from ..search.select import runs_here

    skip: dict[str, int] = {}
    for attempt in range(attempts + 1):
        choices = choose_records(store, tasks, skip=skip, preferred=preferred)
        mod = apply_choices(fused, tasks, choices, target)
        ex = compile_module(mod, target)
        if reference is None or inputs is None or not runs_here(target):
            how = "built; not run (the target does not run on this machine)" if not runs_here(target) else "built"
            return BuiltNetwork(ex, mod, choices, how)
        ok, err = outputs_match(run_executable(ex, inputs), reference(), rtol, atol)
        if ok:
            return BuiltNetwork(ex, mod, choices, f"output matches the reference (max abs error {err:.2g})")
        log.warning("the tuned network's output differs from the reference (max abs error %.3g); checking tasks", err)
        bad = failing_tasks(tasks, choices, rtol, atol)
        if not bad:
            break
        for name in bad:  # next record; on the last attempt, the default schedule
            skip[name] = skip.get(name, 0) + 1 if attempt < attempts - 1 else 1 << 30
    raise BuildCheckError(f"the built network's output differs from the reference (max abs error {err:.3g}) and no "
                          "single task's schedule is to blame; the tolerance may be too tight for this network")
