"""Cycles per floating-point lane operation of the generated code, and the TIR's count of such operations.

Algorithm 1 can get execution counts badly wrong (LLVM versions a padded loop into several copies, or
turns a 2-trip loop into a flag toggle whose bound cannot be read), but the code inside each loop is what
runs. So the assembly is used for a rate, not a count: over the units that do floating-point work (each
innermost loop as a whole, and each straight-line block outside one), cycles of one execution from the list
scheduler and FP lanes of one execution (a 512-bit FMA is 16 lanes), both weighted by the unit's
execution count. Their ratio times the TIR's exact count of FP operations gives cycles that credit what
LLVM did (SLP or loop vectorization, accumulators kept in registers or not, guards turned into branches)
without trusting the absolute counts.
"""

from __future__ import annotations

from collections.abc import Iterable

from .asm import SCALAR_FP, VEC_ARITH, VEC_FMA, AsmProgram, InstructionCounts
from .listsched import ListScheduler
from .looptree import LoopTree

_FP_CLASSES = frozenset({VEC_FMA, VEC_ARITH, SCALAR_FP})
_TIR_FP_OPS = frozenset({"fma", "fadd", "fsub", "fmul", "fdiv", "fminmax", "fsqrt"})
CALL_LANES = 20.0  # an exp/erf/... call expands to about this many FP operations


def fp_lanes(instructions: Iterable) -> float:
    """FP lane operations of a run of instructions (scalar FP = 1, vector = width / 32); zeroing idioms
    (no register read, e.g. vxorps x, x, x) are not arithmetic."""
    total = 0.0
    for inst in instructions:
        if inst.iclass in _FP_CLASSES and (inst.reads or inst.mem_read):
            total += max(inst.width, 32) / 32 if inst.width else 1.0
    return total


def cycles_per_fp_lane(program: AsmProgram, counts: InstructionCounts, scheduler: ListScheduler) -> float | None:
    """Execution-weighted cycles per FP lane operation over the FP units of the program (None: no FP code)."""
    executions = {(b.function, b.block.start): b.executions for b in counts.blocks}
    cycles = lanes = 0.0
    for f in program.functions:
        in_leaf_loop: set[int] = set()
        for lp in f.loops:
            if lp.children:
                continue
            blocks = sorted(lp.blocks)
            in_leaf_loop.update(blocks)
            unit_lanes = sum(fp_lanes(f.blocks[b].instructions) for b in blocks)
            if unit_lanes <= 0:
                continue
            single = len(blocks) == 1
            unit_cycles = sum(scheduler.block_cycles(f.blocks[b].instructions, single) for b in blocks)
            n = executions.get((f.name, f.blocks[f.block_index(lp.header)].start), 0)
            cycles += unit_cycles * n
            lanes += unit_lanes * n
        for k, b in enumerate(f.blocks):
            if k in in_leaf_loop:
                continue
            unit_lanes = fp_lanes(b.instructions)
            if unit_lanes <= 0:
                continue
            n = executions.get((f.name, b.start), 0)
            cycles += scheduler.block_cycles(b.instructions, False) * n
            lanes += unit_lanes * n
    return cycles / lanes if lanes > 0 else None


def tir_fp_lanes(tree: LoopTree) -> float:
    """FP operations the TIR executes (one per element: what the FP lanes of the assembly add up to)."""
    total = 0.0
    for leaf in tree.statements():
        ops = sum(n for k, n in leaf.ops.items() if k in _TIR_FP_OPS)
        ops += CALL_LANES * sum(n for k, n in leaf.ops.items() if k.startswith("call:"))
        total += leaf.trips * ops
    return total
