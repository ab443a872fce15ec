"""CPU features of one scheduled program: what Tuna's linear score is computed from.

Executed instructions come from the generated assembly mapped onto the TIR loops (Algorithm 1), cycles
from the per-block list scheduler, cache-line movement from the isl loop-tree analysis (Algorithm 2),
thread-level parallelism from the parallel loops of the TIR, and per-core cycles of the TIR register-tile
kernel model (`kernel`), whose execution counts come from the TIR and so cannot be miscounted by a wrong
loop mapping (LLVM's loop versioning of padded convolutions defeats Algorithm 1). All counts are per core: work inside
parallel loops is divided by the effective speed-up (parallel extent over cores, with load imbalance).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import tvm

from ..prepack import constant_weight_params
from ..target import HardwareSpec
from .asm import AsmParseError, MapConfig, analyze_asm
from .burststore import burst_store_lines, output_params
from .datamove import DataMoveConfig, FootprintCounter, core_footprint_lines, data_movement, default_counter
from .fpratio import (
    cycles_per_fp_lane,
    has_fp_code,
    outside_cycles_per_fp_lane,
    outside_shuffles_per_fp_lane,
    repair_chunk_counts,
    repair_fma_counts,
    stack_accesses_per_fp_lane,
    tir_fp_lanes,
)
from .kernel import KernelConfig, kernel_cycles, libm_lane_cycles
from .listsched import ListScheduler, SchedConfig
from .looptree import LoopNode, LoopTree, StmtLeaf

log = logging.getLogger(__name__)

# Order of the numeric feature vector; coefficients files use these names.
FEATURE_NAMES = (
    "ilp_cycles",  # list-scheduler cycles of the executed blocks
    "vec_fma",  # executed vector FMA instructions
    "vec_mem",  # executed vector loads, stores and broadcasts
    "scalar",  # executed scalar and other instructions
    "l1_lines",  # cache lines moved into L1
    "l2_lines",  # cache lines moved into L2
    "mem_lines",  # compulsory lines of all buffers (from memory)
    "parallel_launches",  # entries into a parallel region (thread-pool wake-ups)
    "kernel_cycles",  # per-core cycles of the TIR register-tile kernel model (costmodel.kernel)
    "kernel_serial_cycles",  # the same on one core: what parallel loops do not shorten (busy or shared cores)
    "asm_fp_cycles",  # TIR FP ops x cycles per FP lane of the generated code (costmodel.fpratio) + libm calls, per core
    "asm_fp_serial_cycles",  # the same on one core
    "stack_mem",  # loads/stores through the stack pointer in the FP code (spills) per FP lane x TIR FP ops, per core
    "burst_store_lines",  # a network kernel's output lines stored in bursts the compute does not hide, per core
    "asm_outside_shuffles",  # shuffles outside the FP code per FP lane x TIR FP ops, per core (fpratio)
    "asm_outside_cycles",  # list-scheduled cycles outside the FP code per FP lane x TIR FP ops, per core (fpratio)
)
# Features added after coefficient files were fitted: a file without one weighs it 0.
ADDED_FEATURES = frozenset({"burst_store_lines", "asm_outside_shuffles", "asm_outside_cycles"})

_L1_LINES, _KERNEL_CYCLES = FEATURE_NAMES.index("l1_lines"), FEATURE_NAMES.index("kernel_cycles")


def hide_l1_refills(values, lines_per_cycle: float) -> np.ndarray:
    """Feature values (one row or a matrix) with only the L1 refills beyond `lines_per_cycle` per kernel-model cycle
    left in `l1_lines`: the rest stream in from L2 beside the kernel's own work (prefetchers, out-of-order window)."""
    out = np.array(values, dtype=float)
    if lines_per_cycle:
        out[..., _L1_LINES] = np.maximum(0.0, out[..., _L1_LINES] - lines_per_cycle * out[..., _KERNEL_CYCLES])
    return out


@dataclass(frozen=True)
class CPUFeatures:
    """Per-core feature values of one candidate, plus facts used to turn the score into seconds."""

    values: tuple[float, ...]
    flops: float
    speedup: float
    fallbacks: int = 0

    def as_dict(self) -> dict[str, float]:
        return dict(zip(FEATURE_NAMES, self.values, strict=True))


def _walk_nests(tree: LoopTree):
    """(root node, work in statement instances, first parallel extent, parallel entries) per root nest."""
    for root in tree.roots:
        work, par_extent, launches = 0.0, 1, 0

        def visit(node, outer_trips: int, inside_parallel: bool) -> None:
            nonlocal work, par_extent, launches
            if isinstance(node, StmtLeaf):
                work += node.trips
                return
            if not isinstance(node, LoopNode):
                for child in getattr(node, "children", ()):
                    visit(child, outer_trips, inside_parallel)
                return
            parallel_here = node.kind == "parallel" and not inside_parallel
            if parallel_here:
                par_extent = max(par_extent, node.extent)
                launches += outer_trips
            for child in node.children:
                visit(child, outer_trips * node.extent, inside_parallel or parallel_here)

        visit(root, 1, False)
        yield root, work, par_extent, launches


def parallel_speedup(tree: LoopTree, cores: int) -> tuple[float, int]:
    """Work-weighted speed-up of the program on `cores` (ceil load imbalance) and parallel-region entries."""
    total = slow = 0.0
    launches = 0
    for _, work, extent, entries in _walk_nests(tree):
        speed = extent / math.ceil(extent / cores) if extent > 1 else 1.0
        total += work
        slow += work / speed
        launches += entries
    return (total / slow if slow > 0 else 1.0), launches


def _flops(tree: LoopTree) -> float:
    total = 0.0
    for leaf in tree.statements():
        total += leaf.trips * sum(v for k, v in leaf.ops.items() if k.startswith("f"))
    return total


def weight_lines_per_core(mod: tvm.IRModule, tree: LoopTree, spec: HardwareSpec,
                          counter: FootprintCounter | None = None) -> float:
    """Cache lines of the function's constant weights (parameters a network always passes the same tensor,
    marked by the importer) that one core reads: in a network each weight was last touched an inference ago,
    so a schedule whose cores all read a whole weight streams it from memory once per core. Not a feature: priced
    per line, it ranked cold kernels no better (benchmarks/cold_weights.py, session 59)."""
    weights = {str(buf.name) for buf in constant_weight_params(mod["main"])}
    if not weights:
        return 0.0
    return float(sum(core_footprint_lines(tree, spec, weights, counter).values()))


def without_argument_checks() -> tvm.transform.PassContext:
    """The current pass context with the calling wrapper's argument checks left out of the build (TVM's
    `tirx.disable_assert`): they are a few hundred instructions once per call, the same for every candidate of a
    task, and without them LLVM has about half the assembly to emit (full score ~1.1x faster)."""
    ctx = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(opt_level=ctx.opt_level, config={**dict(ctx.config), "tirx.disable_assert": True},
                                     required_pass=list(ctx.required_pass), disabled_pass=list(ctx.disabled_pass))


class CPUFeatureExtractor:
    """Builds a candidate's module to assembly and extracts `CPUFeatures` (no execution)."""

    def __init__(self, target: tvm.target.Target, spec: HardwareSpec, kernel: KernelConfig | None = None):
        self.target = target
        self.kernel = kernel or KernelConfig.for_spec(spec)
        self.spec = spec
        self.arch = spec.arch
        mcpu = str(dict(target.attrs).get("mcpu", ""))
        sched = {"failed_forward_cycles": int(self.kernel.failed_forward_cycles),
                 "failed_forward_masked": bool(self.kernel.failed_forward_masked),
                 "gather_lane_cycles": float(self.kernel.asm_gather_lane_cycles),
                 "scheduler_entries": int(self.kernel.asm_scheduler_entries)}
        self.scheduler = ListScheduler.for_spec(spec, SchedConfig(**sched), cpu=mcpu or None)
        # the assembly's FP rate of multiply-add loops, per iteration in steady state, where the kernel settings ask
        self.fma_scheduler = ListScheduler.for_spec(
            spec, SchedConfig(steady_state=True, steady_state_slope=bool(self.kernel.asm_steady_state_slope), **sched),
            cpu=mcpu or None) \
            if self.kernel.steady_state_fp_rate else None
        self.footprints = default_counter(DataMoveConfig())

    def assembly(self, mod: tvm.IRModule) -> str:
        with without_argument_checks():
            return tvm.compile(mod, target=self.target).mod.inspect_source("asm")

    def extract(self, mod: tvm.IRModule, asm: str | None = None) -> CPUFeatures:
        """Features of a scheduled module; raises AsmParseError or a TVM error when it cannot be analysed."""
        tree = LoopTree.from_mod(mod)
        text = asm if asm is not None else self.assembly(mod)
        program, mapping, counts = analyze_asm(text, self.arch, tree.preorder(),
                                               MapConfig(more_alias_checks=self.kernel.asm_more_alias_checks))
        float_only = self.kernel.float_lanes_only
        if self.kernel.repair_chunk_steps:
            counts = repair_chunk_counts(program, mapping, counts, tree, self.kernel, float_only)
        counts = repair_fma_counts(program, counts, tree, self.kernel.repair_fma_counts, self.kernel)
        speedup, launches = parallel_speedup(tree, self.spec.cores)
        par_cycles = ser_cycles = 0.0
        par_blocks = [b for b in counts.blocks if b.parallel]
        ser_blocks = [b for b in counts.blocks if not b.parallel]
        if par_blocks:
            par_cycles = self.scheduler.program_cycles(par_blocks)
        if ser_blocks:
            ser_cycles = self.scheduler.program_cycles(ser_blocks)
        par_share = par_cycles / (par_cycles + ser_cycles) if par_cycles + ser_cycles > 0 else 0.0
        scale = (1 - par_share) + par_share / speedup  # per-core fraction of program-wide counts
        fma = counts.get("vec_fma")
        vec_mem = counts.get("vec_load") + counts.get("vec_store") + counts.get("broadcast") + counts.get("vec_move")
        scalar = counts.total - fma - vec_mem
        moved = data_movement(tree, self.spec, counter=self.footprints)
        kern = kernel_cycles(tree, self.spec, self.kernel)
        skip_calls = self.kernel.rate_skips_call_units
        rate = cycles_per_fp_lane(program, counts, self.scheduler, self.kernel.merge_loop_blocks, self.fma_scheduler,
                                  float_only, skip_calls)
        if rate is None and skip_calls and has_fp_code(program, counts):
            rate = 0.0  # all the FP code calls functions: the libm cycles below price it
        # no FP code in the assembly (copies, integer work): fall back to the kernel model's cycles
        fp_ops = tir_fp_lanes(tree, self.kernel)
        asm_fp = rate * fp_ops + libm_lane_cycles(tree, self.kernel) if rate is not None else kern.serial_cycles
        compulsory = float(sum(moved.footprint_lines.values()))
        values = (
            ser_cycles + par_cycles / speedup,
            fma * scale,
            vec_mem * scale,
            scalar * scale,
            moved.lines("L1") * scale,
            moved.lines("L2") * scale,
            compulsory,
            float(launches),
            kern.cycles,
            kern.serial_cycles,
            asm_fp / speedup,
            asm_fp,
            stack_accesses_per_fp_lane(program, counts, float_only, skip_calls) * fp_ops / speedup,
            self._burst_store_lines(mod, tree),
            outside_shuffles_per_fp_lane(program, counts, float_only, skip_calls) * fp_ops / speedup,
            self._outside_cycles(program, counts, float_only, skip_calls) * fp_ops / speedup,
        )
        return CPUFeatures(values=values, flops=_flops(tree), speedup=speedup,
                           fallbacks=counts.fallbacks + moved.stats.fallbacks)

    def _outside_cycles(self, program, counts, float_only: bool, skip_calls: bool) -> float:
        """`outside_cycles_per_fp_lane` under the kernel settings; a steady state needs the FP rate's scheduler."""
        steady = self.kernel.asm_outside_steady and self.fma_scheduler is not None
        return outside_cycles_per_fp_lane(program, counts, self.fma_scheduler if steady else self.scheduler, float_only,
                                          skip_calls, self.kernel.asm_outside_path_cycles, steady,
                                          self.kernel.asm_outside_blocks_only)

    def _burst_store_lines(self, mod: tvm.IRModule, tree: LoopTree) -> float:
        """Output lines stored in bursts, for a network's kernel only (its weights marked): there the output lands in
        memory that the kernels before it evicted; a kernel timed alone and repeated finds it in the caches."""
        if not constant_weight_params(mod["main"]):
            return 0.0
        return burst_store_lines(tree, output_params(mod, tree), self.kernel.store_burst_lines, self.spec.cores)


__all__ = ["ADDED_FEATURES", "FEATURE_NAMES", "AsmParseError", "CPUFeatureExtractor", "CPUFeatures", "parallel_speedup",
           "without_argument_checks"]
