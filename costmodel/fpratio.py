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

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import NamedTuple

from .asm import (
    SCALAR_FP,
    SHUFFLE,
    VEC_ARITH,
    VEC_FMA,
    AsmProgram,
    InstructionCounts,
    LoopMapping,
    induction_step,
    tally_blocks,
)
from .kernel import FP_OPS, VECTOR_CALL_COST, KernelConfig, call_name, libm_symbol, statement_trips
from .listsched import ListScheduler
from .looptree import LoopTree

_FP_CLASSES = frozenset({VEC_FMA, VEC_ARITH, SCALAR_FP})
_STACK_POINTERS = frozenset({"rsp", "sp"})  # rbp and x29 may hold data pointers when frames are omitted
# vector arithmetic on floating-point lanes: x86 packed FP (vaddps, vmaxps, vcmpps; not vpaddd or conversions),
# AArch64 f-prefixed (fadd, fmax; not add, shl or scvtf)
_FLOAT_SIMD = re.compile(r"^v(?!p|cvt)[a-z0-9]*p[sdh]$|^f(?!cvt)")
_DIRECT_CALLS = frozenset({"call", "callq", "bl"})


def _calls_libm(inst) -> bool:
    """A call of a libm function (expf@PLT, erff): not memset, nor the runtime's calls through a pointer (the parallel
    launch inside a loop)."""
    return inst.mnemonic in _DIRECT_CALLS and inst.target is not None and libm_symbol(inst.target)


def fp_lanes(instructions: Iterable, float_only: bool = False) -> float:
    """FP lane operations of a run of instructions (scalar FP = 1, vector = width / 32); zeroing idioms
    (no register read, e.g. vxorps x, x, x) are not arithmetic. `float_only`: vector arithmetic on integers (the
    index vectors of LLVM's gathers and scatters) is not counted either (`KernelConfig.float_lanes_only`)."""
    total = 0.0
    for inst in instructions:
        if inst.iclass in _FP_CLASSES and (inst.reads or inst.mem_read):
            if float_only and inst.iclass == VEC_ARITH and not _FLOAT_SIMD.match(inst.mnemonic):
                continue
            total += max(inst.width, 32) / 32 if inst.width else 1.0
    return total


class _Flow(NamedTuple):
    """Control flow inside a unit: the position of its entry block and the edges between its blocks (positions in
    the unit's block list), back edges to the entry left out, so that the edges form a DAG."""

    start: int
    edges: tuple[tuple[int, int], ...]


def _units(program: AsmProgram, counts: InstructionCounts, skip_calls: bool = False
           ) -> Iterator[tuple[list[Sequence], bool, int, _Flow]]:
    """(blocks' instructions, whole single-block loop body, executions, control flow) of each unit of the program:
    every innermost loop as a whole, and every straight-line block outside one; with `skip_calls`, not those that
    call a libm function (`KernelConfig.rate_skips_call_units`)."""
    executions = {(b.function, b.block.start): b.executions for b in counts.blocks}
    for f in program.functions:
        in_leaf_loop: set[int] = set()
        units: list[tuple[list[Sequence], bool, int, _Flow]] = []
        for lp in f.loops:
            if lp.children:
                continue
            blocks = sorted(lp.blocks)
            in_leaf_loop.update(blocks)
            header = f.block_index(lp.header)
            at = {b: k for k, b in enumerate(blocks)}
            edges = tuple((at[p], at[b]) for b in blocks if b != header for p in f._preds[b] if p in at)
            units.append(([f.blocks[b].instructions for b in blocks], len(blocks) == 1,
                          executions.get((f.name, f.blocks[header].start), 0), _Flow(at[header], edges)))
        units += [([b.instructions], False, executions.get((f.name, b.start), 0), _Flow(0, ()))
                  for k, b in enumerate(f.blocks) if k not in in_leaf_loop]
        for unit in units:
            if not (skip_calls and any(_calls_libm(i) for insts in unit[0] for i in insts)):
                yield unit


def _dearest_path(costs: Sequence[float], flow: _Flow) -> list[int] | None:
    """Positions of the blocks on the dearest path through a unit from its entry (`_Flow`), by the blocks' own
    costs: one iteration of a loop with branches runs one path, not every block. None if the edges hold a cycle."""
    succs: list[list[int]] = [[] for _ in costs]
    indegree = [0] * len(costs)
    for a, b in flow.edges:
        succs[a].append(b)
        indegree[b] += 1
    best = [float("-inf")] * len(costs)
    best[flow.start] = costs[flow.start]
    came_from: list[int | None] = [None] * len(costs)
    ready = [k for k in range(len(costs)) if indegree[k] == 0]
    done = 0
    while ready:
        a = ready.pop()
        done += 1
        for b in succs[a]:
            if best[a] + costs[b] > best[b]:
                best[b], came_from[b] = best[a] + costs[b], a
            indegree[b] -= 1
            if indegree[b] == 0:
                ready.append(b)
    if done < len(costs):
        return None
    end: int | None = max(range(len(costs)), key=best.__getitem__)
    path = []
    while end is not None:
        path.append(end)
        end = came_from[end]
    return path[::-1]


def _fp_units(program: AsmProgram, counts: InstructionCounts, float_only: bool = False, skip_calls: bool = False
              ) -> Iterator[tuple[list[Sequence], bool, int, float]]:
    """(blocks' instructions, whole single-block loop body, executions, FP lanes of one execution) of each unit
    (`_units`) doing FP work; `float_only`: see `fp_lanes`."""
    for blocks, single, n, _ in _units(program, counts, skip_calls):
        lanes = sum(fp_lanes(insts, float_only) for insts in blocks)
        if lanes > 0:
            yield blocks, single, n, lanes


def has_fp_code(program: AsmProgram, counts: InstructionCounts) -> bool:
    """Does the program execute FP lane operations at all (what `cycles_per_fp_lane` needs for a rate)?"""
    return any(n > 0 for _, _, n, _ in _fp_units(program, counts))


def cycles_per_fp_lane(program: AsmProgram, counts: InstructionCounts, scheduler: ListScheduler,
                       merge_loop_blocks: bool = False, fma_scheduler: ListScheduler | None = None,
                       float_only: bool = False, skip_calls: bool = False) -> float | None:
    """Execution-weighted cycles per FP lane operation over the FP units of the program (None: no FP code).
    `merge_loop_blocks`: an innermost loop of several blocks is scheduled as one sequence (`KernelConfig`);
    `fma_scheduler`: the scheduler of units with vector multiply-adds (default: `scheduler`); `float_only`: see
    `fp_lanes`; `skip_calls`: see `_units`."""
    cycles = lanes = 0.0
    for blocks, single, n, unit_lanes in _fp_units(program, counts, float_only, skip_calls):
        fma = fma_scheduler is not None and any(i.iclass == VEC_FMA for insts in blocks for i in insts)
        sched = fma_scheduler if fma else scheduler
        if merge_loop_blocks and len(blocks) > 1:
            cycles += sched.block_cycles([i for insts in blocks for i in insts]) * n
        else:
            cycles += sum(sched.block_cycles(insts, single) for insts in blocks) * n
        lanes += unit_lanes * n
    return cycles / lanes if lanes > 0 else None


def stack_accesses_per_fp_lane(program: AsmProgram, counts: InstructionCounts, float_only: bool = False,
                               skip_calls: bool = False) -> float:
    """Execution-weighted loads and stores through the stack pointer per FP lane operation in the FP units:
    register spills and reloads of the code that does the arithmetic (0 without FP code)."""
    stack = lanes = 0.0
    for blocks, _, n, unit_lanes in _fp_units(program, counts, float_only, skip_calls):
        stack += n * sum(1 for insts in blocks for i in insts
                         if (i.mem_read or i.mem_write) and i.mem_base in _STACK_POINTERS)
        lanes += unit_lanes * n
    return stack / lanes if lanes > 0 else 0.0


def outside_shuffles_per_fp_lane(program: AsmProgram, counts: InstructionCounts, float_only: bool = False,
                                 skip_calls: bool = False) -> float:
    """Execution-weighted shuffles and inserts of the units that do no FP work (`_units`), per FP lane operation of
    the FP units (0 without FP code): what the FP rate does not see. LLVM builds a TVM vector of odd width lane by
    lane (a weight's 56-lane splat: 42 vinsertps and 3 wider inserts) before the loop that uses it."""
    return _outside_per_fp_lane(program, counts, lambda blocks, *_: sum(1 for insts in blocks for i in insts
                                                                        if i.iclass == SHUFFLE), float_only, skip_calls)


def outside_cycles_per_fp_lane(program: AsmProgram, counts: InstructionCounts, scheduler: ListScheduler,
                               float_only: bool = False, skip_calls: bool = False, path_cycles: bool = False,
                               steady: bool = False, blocks_only: bool = False) -> float:
    """Execution-weighted list-scheduled cycles of the units that do no FP work (`_units`), per FP lane operation of
    the FP units (0 without FP code). LLVM gathers a strided operand in the block before the multiply-add loop that
    reuses it (a batched matmul's 8 gathers of 8 lanes for every 2 iterations of 64 multiply-adds), which the FP rate
    does not see either. `path_cycles`: a loop with branches costs its dearest path per iteration, scheduled as one
    sequence, not all its blocks one by one (`KernelConfig.asm_outside_path_cycles`); `steady`: each block or path
    costs what one more execution adds to executions back to back (a steady-state `scheduler`), since out of order
    the core overlaps this code with what runs around it (`KernelConfig.asm_outside_steady`); `blocks_only`: loops are
    left out, only straight-line blocks count (`KernelConfig.asm_outside_blocks_only`)."""
    def cost(blocks: list[Sequence], single: bool, flow: _Flow) -> float:
        if blocks_only and (single or len(blocks) > 1):
            return 0.0
        cycles = [scheduler.block_cycles(insts, steady) for insts in blocks]
        path = _dearest_path(cycles, flow) if path_cycles and len(blocks) > 1 else None
        if path is None:
            return sum(cycles)
        return scheduler.block_cycles([i for k in path for i in blocks[k]], steady)
    return _outside_per_fp_lane(program, counts, cost, float_only, skip_calls)


def _outside_per_fp_lane(program: AsmProgram, counts: InstructionCounts,
                         cost: Callable[[list[Sequence], bool, _Flow], float], float_only: bool, skip_calls: bool
                         ) -> float:
    """Execution-weighted `cost` (of a unit's blocks, whether it is a one-block loop, and its flow) of the units without
    FP lanes, per FP lane of the others."""
    outside = lanes = 0.0
    for blocks, single, n, flow in _units(program, counts, skip_calls):
        unit_lanes = sum(fp_lanes(insts, float_only) for insts in blocks)
        if unit_lanes > 0:
            lanes += n * unit_lanes
        elif n > 0:
            outside += n * cost(blocks, single, flow)
    return outside / lanes if lanes > 0 else 0.0


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


def _leaf_fp_ops(leaf) -> int:
    """FP operations of one execution of a statement, as `tir_fp_lanes` counts them."""
    return sum(n for k, n in leaf.ops.items() if k in FP_OPS or call_name(k) in VECTOR_CALL_COST)


def tir_fp_lanes(tree: LoopTree, kernel: KernelConfig | None = None) -> float:
    """FP operations the TIR executes (one per element: what the FP lanes of the assembly add up to). A call
    that stays one instruction (sqrt, fabs, ...) is one operation; libm calls (exp, erf, ...) are not counted:
    their bodies are not in the kernel's assembly, and `kernel.libm_lane_cycles` prices them."""
    return sum(trips * _leaf_fp_ops(leaf) for leaf, trips in statement_trips(tree, kernel))


def fp_ops_per_iteration(tree: LoopTree, kernel: KernelConfig | None = None) -> list[float]:
    """FP operations (`tir_fp_lanes`) per iteration of each loop of `tree`, in the order of `tree.preorder()`."""
    trips = {id(leaf): t for leaf, t in statement_trips(tree, kernel)}
    per: dict[int, float] = {}

    def visit(node, outer: int) -> float:
        if not node.is_loop:
            return trips.get(id(node), 0.0) * _leaf_fp_ops(node)
        iterations = outer * node.extent
        total = sum(visit(c, iterations) for c in node.children)
        per[id(node)] = total / iterations if iterations else 0.0
        return total

    for root in tree.roots:
        visit(root, 1)
    return [per.get(id(lp), 0.0) for lp in tree.preorder()]


def repair_chunk_counts(program: AsmProgram, mapping: LoopMapping, counts: InstructionCounts, tree: LoopTree,
                        kernel: KernelConfig | None = None, float_only: bool = False) -> InstructionCounts:
    """`counts` with the executions of each innermost loop whose trip Algorithm 1 took from its TIR loop's extent
    (bounds not constants: a parallel body's chunk loop) divided by its induction step s > 1, when one iteration does
    s iterations' worth of the TIR's FP operations: LLVM vectorized or unrolled the loop s wide
    (`KernelConfig.repair_chunk_steps`). Counted at the extent, such a loop weighed s times its share in the FP rate."""
    per_iteration = None
    scale: dict[tuple[str, int], int] = {}
    for m in mapping.matches:
        if m.source != "ir" or m.ir_index is None:
            continue
        f = program.function(m.function)
        lp = f.loops[m.loop]
        step = abs(induction_step(f, m.loop) or 0) if not lp.children else 0
        if step < 2:
            continue
        if per_iteration is None:
            per_iteration = fp_ops_per_iteration(tree, kernel)
        want = step * per_iteration[m.ir_index]
        lanes = sum(fp_lanes(f.blocks[b].instructions, float_only) for b in lp.blocks)
        if want > 0 and 0.75 <= lanes / want <= 4 / 3:
            scale.update(((f.name, f.blocks[b].start), step) for b in lp.blocks)
    if not scale:
        return counts
    blocks = [replace(b, executions=b.executions // scale[(b.function, b.block.start)])
              if (b.function, b.block.start) in scale else b for b in counts.blocks]
    return tally_blocks(blocks, counts.invocations, counts.fallbacks)
