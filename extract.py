"""Tasks of a network: fuse the Relax module once, then take its distinct PrimFuncs with their call counts.

Extraction is MetaSchedule's own (`relax_integration.extract_tasks`), so each task's module is exactly the
workload that `relax.transform.MetaScheduleApplyDatabase` looks up when tuned records are applied.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from .constfold import fold_constants_numpy
from .errors import DrytuneError
from .fastmath import fast_math_passes
from .layout import layout_passes, resolve_layout
from .prepack import mark_constant_weights
from .target import HardwareSpec, resolve_target
from .task import Task

log = logging.getLogger(__name__)


def fuse(mod: tvm.IRModule, target: str | dict | Target, *, fast_math: bool = False,
         layout: str = "keep", prepack_weights: bool = True) -> tvm.IRModule:
    """Lower an unfused Relax module to fused PrimFuncs called from "main" (the module that gets tuned and built).

    Run it exactly once on the imported module: fusion is not idempotent, and fusing a fused module again
    merges kernels further, so its PrimFuncs no longer match the tuned tasks (their records are then ignored).
    `fast_math`: exp, erf and tanh (softmax, GELU) become polynomials that vectorize instead of one libm call per
    vector lane (`fastmath.py`); results differ from libm's in the last bits, and the tuned network is checked
    against the framework's output either way. `layout`: "NHWC" converts the convolutions to channels-last
    (`layout.py`), "auto" does so on CPU targets, "keep" leaves the imported layout. `prepack_weights` marks the
    parameters that are constants, so that schedules may pack them once at build time (`prepack.py`); the mark is
    part of each PrimFunc, so records tuned with it and without it do not match each other.
    """
    tvm_target, _ = resolve_target(target)
    passes = tvm.transform.Sequential([
        # a batch norm right after a convolution becomes scaled weights and a bias (constants folded here), so the
        # kernel's epilogue is one add instead of subtract, divide, multiply and add per output element
        relax.transform.FoldBatchnormToConv2D(),
        fold_constants_numpy(),  # FoldConstant compiles a kernel per constant call: ~20 s on MobileNet-V2
        relax.transform.FoldConstant(),
        *layout_passes(resolve_layout(layout, tvm_target)),
        fold_constants_numpy(),  # the weights' transposes
        relax.transform.DecomposeOpsForInference(),  # other batch norms -> elementwise ops that fuse into the conv
        # DecomposeOpsForInference leaves batch_norm's result as item 0 of a tuple literal; without folding that
        # away FuseOps stops at the tuple and a following relu becomes a separate kernel.
        relax.transform.CanonicalizeBindings(),
        *(fast_math_passes() if fast_math else []),
        relax.get_pipeline("zero"),  # LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR
        *([mark_constant_weights] if prepack_weights else []),
    ])
    with tvm_target:
        return passes(mod)


@dataclass
class NetworkTask:
    """One distinct fused PrimFunc of a network: its tuning task, how often the network calls it, and its kind."""

    name: str
    task: Task
    weight: int  # calls per network run
    flops: float  # of one call
    kind: str  # operator kind for similarity grouping: "conv2d", "matmul", "softmax", ...
    index: int


@dataclass(frozen=True)
class SkippedTask:
    """A PrimFunc drytune cannot tune; the network build gives it a default schedule."""

    name: str
    weight: int
    reason: str


class TaskList(list):
    """`list[NetworkTask]` with `skipped`, the PrimFuncs left out and why."""

    def __init__(self, tasks: list[NetworkTask], skipped: list[SkippedTask]):
        super().__init__(tasks)
        self.skipped = skipped


@functools.lru_cache(maxsize=1)
def _op_names() -> tuple[str, ...]:
    """Short names of Relax operators ("conv2d", "layer_norm", ...), longest first."""
    names = {n.rsplit(".", 1)[-1] for n in tvm.ir.Op.list_op_names() if n.startswith("relax.")}
    return tuple(sorted(names, key=len, reverse=True))


# Operators that only move or reshape data; a fused name's kind is its first operator not in this set.
LAYOUT_OPS = frozenset({
    "reshape", "transpose", "permute_dims", "broadcast_to", "expand_dims", "squeeze", "flatten", "concat",
    "split", "strided_slice", "take", "tile", "repeat", "layout_transform", "collapse_sum_to", "astype",
})


def _name_ops(name: str) -> list[str]:
    """Operators named in a fused PrimFunc's name, in order: "fused_conv2d3_subtract_add1" -> [conv2d, ...]."""
    rest = name[len("fused_"):] if name.startswith("fused_") else name
    ops = []
    while rest:
        for op in _op_names():
            found = re.match(rf"{re.escape(op)}\d*(_|$)", rest)
            if found:
                ops.append(op)
                rest = rest[found.end():]
                break
        else:
            token, _, rest = rest.partition("_")
            ops.append(re.sub(r"\d+$", "", token) or token)
    return ops


def task_kind(name: str) -> str:
    """Operator kind of a fused PrimFunc for similarity grouping: its first operator that computes something
    ("fused_conv2d3_subtract_add" -> "conv2d", "fused_reshape9_gelu_reshape10" -> "gelu")."""
    ops = _name_ops(name) or [name]
    return next((op for op in ops if op not in LAYOUT_OPS), ops[0])


def _unique(name: str, taken: set[str]) -> str:
    out, i = name, 1
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    taken.add(out)
    return out


def extract_tasks(
    fused_mod: tvm.IRModule, target: str | dict | Target, spec: HardwareSpec | None = None
) -> TaskList:
    """The tuning tasks of a fused module (from `fuse`), structurally de-duplicated, weighted by call count.

    A PrimFunc that drytune cannot tune (e.g. dynamic shapes) is logged and listed in `.skipped` instead.
    """
    tvm_target, tvm_spec = resolve_target(target, spec)
    if not any(isinstance(f, tvm.tirx.PrimFunc) for f in fused_mod.functions.values()):
        raise ValueError("the module has no PrimFuncs: pass the output of extract.fuse, not the imported module")
    tasks: list[NetworkTask] = []
    skipped: list[SkippedTask] = []
    taken: set[str] = set()
    for extracted in ms.relax_integration.extract_tasks(fused_mod, tvm_target):
        name = _unique(str(extracted.task_name), taken)
        weight = int(extracted.weight)
        try:
            task = Task.from_prim_func(extracted.dispatched[0], tvm_target, name=name, spec=tvm_spec,
                                       weight=float(weight))
        except (DrytuneError, TypeError, ValueError) as err:
            log.warning("task %s is not tuned (it gets a default schedule): %s", name, err)
            skipped.append(SkippedTask(name, weight, str(err)))
            continue
        tasks.append(NetworkTask(name=name, task=task, weight=weight, flops=task.flops, kind=task_kind(name),
                                 index=len(tasks)))
    return TaskList(tasks, skipped)
