"""A GPU pre-score from the lowered TIR alone (no CUDA C, no nvcc, no ptxas).

Per kernel: the launch configuration from the thread bindings and the operations one thread executes (arithmetic,
global, shared and local accesses, each weighted by its enclosing loop extents), turned into terms shaped like the
full GPU terms. A search screens many candidates with it and builds only the survivors to PTX.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ..target import HardwareSpec
from .cuda_build import launch_configs, lower_device, static_bytes
from .gpu_features import occupancy

PRESCORE_TERM_NAMES = ("issue", "shared", "memory_latency", "launch", "latency")
_ARITH = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Call", "FloorDiv", "FloorMod"})
_MEMORY_LATENCY = 400.0  # cycles of a global load that misses L1 (order of magnitude; the fit scales it)
_ALU_LATENCY = 4.0


@dataclass(frozen=True)
class KernelWork:
    """What one thread of a kernel executes, counted on the lowered TIR, and how the kernel is launched."""

    kernel: str
    blocks: int
    threads_per_block: int
    arith: float
    global_accesses: float
    shared_accesses: float
    local_accesses: float
    local_elements: int  # elements of thread-local buffers: a register estimate
    smem_bytes: int


def _space(buf: tirx.Buffer) -> str:
    scope = str(buf.scope())
    return "shared" if scope.startswith("shared") else "local" if scope.startswith("local") else "global"


class _Counter:
    def __init__(self) -> None:
        self.counts = {"arith": 0.0, "global": 0.0, "shared": 0.0, "local": 0.0}
        self.local_elements = 0
        self.smem_bytes = 0

    def expr(self, expr, mult: float) -> None:
        def visit(node) -> None:
            name = type(node).__name__
            if name in ("BufferLoad", "TensorLoad"):  # TVM 0.27's lowered loads are TensorLoad(source=buffer)
                self.counts[_space(getattr(node, "buffer", None) or node.source)] += mult
            elif name in _ARITH:
                self.counts["arith"] += mult

        tvm_ffi.structural_walk(expr, [(object, visit)], order="pre")

    def stmt(self, stmt, mult: float) -> None:
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                self.stmt(s, mult)
        elif isinstance(stmt, tirx.For):
            self.stmt(stmt.body, mult * (int(stmt.extent) if isinstance(stmt.extent, tirx.IntImm) else 1))
        elif isinstance(stmt, tirx.BufferStore):
            self.counts[_space(stmt.buffer)] += mult
            self.expr(stmt.value, mult)
        elif isinstance(stmt, tirx.IfThenElse):
            self.expr(stmt.condition, mult)
            self.stmt(stmt.then_case, mult)
            if stmt.else_case is not None:
                self.stmt(stmt.else_case, mult)
        elif isinstance(stmt, tirx.AllocBuffer):
            space = _space(stmt.buffer)
            if space == "local":
                size = 1
                for d in stmt.buffer.shape:
                    size *= int(d) if isinstance(d, tirx.IntImm) else 1
                self.local_elements += size
            elif space == "shared":
                self.smem_bytes += static_bytes(stmt.buffer) or 0
        else:
            if type(stmt).__name__ in ("Bind", "LetStmt", "Evaluate"):
                self.expr(stmt.value, mult)
            body = getattr(stmt, "body", None)
            if body is not None:
                self.stmt(body, mult)


def kernel_work(mod: tvm.IRModule, target) -> list[KernelWork]:
    """`KernelWork` of every kernel of a scheduled CUDA module, in launch order (TVM lowering only)."""
    launch = {lc.kernel: lc for lc in launch_configs(mod)}
    out = []
    for name, func in lower_device(mod, target).items():
        counter = _Counter()
        counter.stmt(func.body, 1.0)
        lc = launch.get(name)
        c = counter.counts
        out.append(KernelWork(name, lc.blocks if lc else 1, lc.threads_per_block if lc else 1, c["arith"], c["global"],
                              c["shared"], c["local"], counter.local_elements, counter.smem_bytes))
    return out


def prescore_terms(work: Sequence[KernelWork], spec: HardwareSpec) -> np.ndarray | None:
    """`PRESCORE_TERM_NAMES` summed over kernels; None if a kernel cannot be resident on an SM at all."""
    total = np.zeros(len(PRESCORE_TERM_NAMES))
    for k in work:
        registers = min(255, 32 + k.local_elements)
        occ = occupancy(registers, k.smem_bytes, k.threads_per_block, spec)
        if occ.blocks_per_sm <= 0 or k.threads_per_block > spec.max_threads_per_block:
            return None
        warps = math.ceil(k.threads_per_block / spec.warp_size)
        per_sm = math.ceil(k.blocks / spec.sm_count)
        hiding = max(1.0, min(occ.blocks_per_sm, per_sm) * warps / 4.0)
        waves = max(1, math.ceil(k.blocks / (occ.blocks_per_sm * spec.sm_count)))
        ops = k.arith + k.global_accesses + k.shared_accesses + k.local_accesses
        total += (ops * warps * per_sm / 4.0, k.shared_accesses * warps * per_sm / 4.0,
                  k.global_accesses * _MEMORY_LATENCY / hiding * waves, 1.0, ops * _ALU_LATENCY / hiding * waves)
    return total
