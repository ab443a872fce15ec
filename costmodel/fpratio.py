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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from .asm import SCALAR_FP, VEC_ARITH, VEC_FMA, AsmProgram, InstructionCounts, tally_blocks
from .kernel import FP_OPS, VECTOR_CALL_COST, KernelConfig, call_name, statement_trips
from .listsched import ListScheduler
from .looptree import LoopTree

_FP_CLASSES = frozenset({VEC_FMA, VEC_ARITH, SCALAR_FP})
_STACK_POINTERS = frozenset({"rsp", "sp"})  # rbp and x29 may hold data pointers when frames are omitted


def fp_lanes(instructions: Iterable) -> float:
    """FP lane operations of a run of instructions (scalar FP = 1, vector = width / 32); zeroing idioms
    (no register read, e.g. vxorps x, x, x) are not arithmetic."""
    total = 0.0
    for inst in instructions:
        if inst.iclass in _FP_CLASSES and (inst.reads or inst.mem_read):
            total += max(inst.width, 32) / 32 if inst.width else 1.0
    return total


def _fp_units(program: AsmProgram, counts: InstructionCounts
              ) -> Iterator[tuple[list[Sequence], bool, int, float]]:
    """(blocks' instructions, whole single-block loop body, executions, FP lanes of one execution) of each unit
    doing FP work: every innermost loop as a whole, and every straight-line block outside one."""
    executions = {(b.function, b.block.start): b.executions for b in counts.blocks}
    for f in program.functions:
        in_leaf_loop: set[int] = set()
        units: list[tuple[list[Sequence], bool, int]] = []
        for lp in f.loops:
            if lp.children:
                continue
            blocks = sorted(lp.blocks)
            in_leaf_loop.update(blocks)
            units.append(([f.blocks[b].instructions for b in blocks], len(blocks) == 1,
                          executions.get((f.name, f.blocks[f.block_index(lp.header)].start), 0)))
        units += [([b.instructions], False, executions.get((f.name, b.start), 0))
                  for k, b in enumerate(f.blocks) if k not in in_leaf_loop]
        for blocks, single, n in units:
            lanes = sum(fp_lanes(insts) for insts in blocks)
            if lanes > 0:
                yield blocks, single, n, lanes


def cycles_per_fp_lane(program: AsmProgram, counts: InstructionCounts, scheduler: ListScheduler,
                       merge_loop_blocks: bool = False, fma_scheduler: ListScheduler | None = None) -> float | None:
    """Execution-weighted cycles per FP lane operation over the FP units of the program (None: no FP code).
    `merge_loop_blocks`: an innermost loop of several blocks is scheduled as one sequence (`KernelConfig`);
    `fma_scheduler`: the scheduler of units with vector multiply-adds (default: `scheduler`)."""
    cycles = lanes = 0.0
    for blocks, single, n, unit_lanes in _fp_units(program, counts):
        fma = fma_scheduler is not None and any(i.iclass == VEC_FMA for insts in blocks for i in insts)
        sched = fma_scheduler if fma else scheduler
        if merge_loop_blocks and len(blocks) > 1:
            cycles += sched.block_cycles([i for insts in blocks for i in insts]) * n
        else:
            cycles += sum(sched.block_cycles(insts, single) for insts in blocks) * n
        lanes += unit_lanes * n
    return cycles / lanes if lanes > 0 else None


def stack_accesses_per_fp_lane(program: AsmProgram, counts: InstructionCounts) -> float:
    """Execution-weighted loads and stores through the stack pointer per FP lane operation in the FP units:
    register spills and reloads of the code that does the arithmetic (0 without FP code)."""
    stack = lanes = 0.0
    for blocks, _, n, unit_lanes in _fp_units(program, counts):
        stack += n * sum(1 for insts in blocks for i in insts
                         if (i.mem_read or i.mem_write) and i.mem_base in _STACK_POINTERS)
        lanes += unit_lanes * n
    return stack / lanes if lanes > 0 else 0.0


def _fma_lanes(inst) -> float:
    """Multiply-add lanes of one instruction (vector FMA: width / 32; scalar vfmadd..ss / fmadd: 1)."""
    if inst.iclass == VEC_FMA:
        return max(inst.width, 32) / 32 if inst.width else 1.0
    if inst.iclass == SCALAR_FP and any(t in inst.mnemonic for t in ("fmadd", "fmsub", "fmla")):
        return 1.0
    return 0.0


def tir_fma_lanes(tree: LoopTree, kernel: KernelConfig | None = None) -> float | None:
    """Multiply-adds the TIR executes (`kernel.statement_trips`); None when a statement calls a function (an inlined
    exp or erf adds multiply-adds of its own to the assembly)."""
    total = 0.0
    for leaf, trips in statement_trips(tree, kernel):
        if any(call_name(k) for k in leaf.ops):
            return None
        total += trips * leaf.ops.get("fma", 0)
    return total


def repair_fma_counts(program: AsmProgram, counts: InstructionCounts, tree: LoopTree,
                      tolerance: float, kernel: KernelConfig | None = None) -> InstructionCounts:
    """`counts` with the executions of the code that does the multiply-adds scaled so that its FMA lanes match the
    TIR's, when Algorithm 1 missed them by more than `tolerance` either way (0: never). The TIR's count is exact; a
    loop LLVM duplicated, interchanged or turned into a flag toggle gets a wrong trip in the assembly, and the
    search then favours candidates whose compute loop was undercounted (Zen 3 GEMM, session 75: 1/8 of the FMAs)."""
    tir = tir_fma_lanes(tree, kernel) if tolerance else None
    if not tir:
        return counts
    asm = sum(b.executions * sum(_fma_lanes(i) for i in b.block.instructions) for b in counts.blocks)
    if asm <= 0 or 1 / tolerance <= tir / asm <= tolerance:
        return counts
    ratio = tir / asm
    scaled: set[tuple[str, int]] = set()  # (function, block start) of the units holding multiply-adds
    for f in program.functions:
        for k, b in enumerate(f.blocks):
            if not any(_fma_lanes(i) for i in b.instructions):
                continue
            inner = f.innermost_loop(b.start)
            members = f.loops[inner].blocks if inner is not None else (k,)
            scaled.update((f.name, f.blocks[m].start) for m in members)
    blocks = [replace(b, executions=round(b.executions * ratio)) if (b.function, b.block.start) in scaled else b
              for b in counts.blocks]
    return tally_blocks(blocks, counts.invocations, counts.fallbacks + 1)


def tir_fp_lanes(tree: LoopTree, kernel: KernelConfig | None = None) -> float:
    """FP operations the TIR executes (one per element: what the FP lanes of the assembly add up to). A call
    that stays one instruction (sqrt, fabs, ...) is one operation; libm calls (exp, erf, ...) are not counted:
    their bodies are not in the kernel's assembly, and `kernel.libm_lane_cycles` prices them."""
    total = 0.0
    for leaf, trips in statement_trips(tree, kernel):
        ops = sum(n for k, n in leaf.ops.items() if k in FP_OPS)
        ops += sum(n for k, n in leaf.ops.items() if call_name(k) in VECTOR_CALL_COST)
        total += trips * ops
    return total
