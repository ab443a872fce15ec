"""Per-core compute cycles of a scheduled program from its TIR loop tree: a register-tile kernel model.

For every statement the loops around it are split into the *body* (vectorized loops and the inner loops
that TVM unrolls: explicit `unroll`, or `pragma_auto_unroll_max_step` on an enclosing loop) and the loops
that iterate that body. One iteration of the body costs the largest of its throughput bounds (vector
arithmetic over the FP pipes, loads over the load ports, stores, all micro-ops over the issue width) and,
when the innermost iterating loop is a reduction loop, the latency of the accumulator chains (few
independent accumulators = latency bound); a reduction unrolled inside the body has its chains overlapped
only across the bodies that fit in the reorder window. A body of more than several hundred micro-ops that
loads and stores its accumulators issues at a fraction of the issue width (measured, not explained by the
decoders' width alone). Vectorization is credited by lanes actually used; a vector lane that walks a
non-contiguous address is a gather (one load per lane). Accumulators of a reduction whose innermost iterating
loop is spatial are loaded and stored every iteration. Each iteration of a loop that is not unrolled pays a
small loop overhead, which makes tiny bodies in long loops expensive.

What TVM's lowering and LLVM do to the TIR is modelled where it changes the cost by large factors: TVM
scalarizes a vector statement whose select condition changes across the lanes (padding guards); LLVM's loop
vectorizer takes a contiguous innermost spatial loop, its SLP vectorizer packs the copies of an unrolled one,
small intermediates indexed only by unrolled loops live in registers (scalar replacement), and the
floordiv/floormod that split a fused loop back into indices are computed in every iteration.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..target import HardwareSpec
from .datamove import LineLayout, default_counter
from .looptree import Access, DivMod, IndexExpr, LoopNode, LoopTree, StmtLeaf

# Arithmetic op kinds of `StmtLeaf.ops` and their cost in FP-pipe slots per (vector) operation.
_FP_COST = {"fma": 1.0, "fadd": 1.0, "fsub": 1.0, "fmul": 1.0, "fminmax": 1.0, "select": 1.0, "fcmp": 1.0,
            "fdiv": 4.0, "fsqrt": 6.0, "cast": 1.0}
# Math calls that LLVM keeps as vector instructions, in FP-pipe slots per vector operation. The libm ones
# (exp, erf, tanh, log, ...) are scalarized on LLVM CPU targets: one call per lane (`KernelConfig.libm_cycles`).
# Other calls (likely, reinterpret, ...) are free.
VECTOR_CALL_COST = {"sqrt": 6.0, "rsqrt": 7.0, "fabs": 1.0, "floor": 1.0, "ceil": 1.0, "trunc": 1.0, "round": 1.0,
                    "nearbyint": 1.0, "fma": 1.0, "copysign": 1.0}
_LIBM_CALLS = frozenset({"exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "erf", "tanh",
                         "sigmoid", "sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "atan2", "asinh",
                         "acosh", "atanh", "fmod", "hypot"})
_INT_KINDS = ("iadd", "isub", "imul", "icmp", "logic", "idiv", "imod", "shift")


FP_OPS = frozenset({"fma", "fadd", "fsub", "fmul", "fdiv", "fminmax", "fsqrt"})  # TIR floating-point operations


def libm_symbol(symbol: str) -> bool:
    """Is `symbol` (an assembly call target: expf@PLT, erff, tanh) one of the libm functions TVM scalarizes?"""
    name = symbol.split("@")[0].lstrip("_")
    return name in _LIBM_CALLS or (name.endswith("f") and name[:-1] in _LIBM_CALLS)


def call_name(op_key: str) -> str | None:
    """The function a statement's op key counts ("call:tirx.exp" -> "exp"), None for other ops."""
    return op_key.rsplit(".", 1)[-1] if op_key.startswith("call:") else None


@dataclass(frozen=True)
class KernelConfig:
    """Machine parameters of the kernel model (per core); defaults describe a 2-FMA-pipe AVX-512 core."""

    fp_pipes: float = 2.0
    # Loads (vector, broadcast or scalar) per cycle. The Emerald Rapids machines' file sets 1: GEMM register tiles
    # timed alone there (benchmarks/tile_peak.py) took 0.9-1.3 cycles per load, a broadcast as much as a full vector,
    # so an 8 x 32 tile (10 loads per 16 FMAs) ran at 61-64% of the FMA peak and a 4 x 64 tile (8 loads) at 77-79%
    load_ports: float = 2.0
    # Loads per cycle of a statement whose operations are narrower than a full register (scalar code, or TVM
    # vectors of xmm or ymm width); 0: `load_ports`. On Emerald Rapids scalar loads run 1.42x and xmm ones 1.33x
    # the zmm rate (benchmarks/load_widths.py), and 1.4 ranks that machine's rows better (Spearman +0.019), but no
    # file sets it: searches with it picked no faster kernels (benchmarks/file_ab.py, session 93)
    narrow_load_ports: float = 0.0
    # price loops that LLVM's own vectorizers vectorize at the width they build (`HardwareSpec.llvm_vector_bits`:
    # ymm operations on Intel's AVX-512 cores, twice as many as zmm ones would take), not the register's
    llvm_vector_width: bool = False
    store_ports: float = 1.0
    shuffle_ports: float = 1.0
    issue_width: float = 6.0
    fma_latency: float = 4.0
    registers: int = 30  # vector registers available for accumulators
    loop_overhead: float = 1.0  # cycles per iteration of a loop that is not unrolled
    reorder_window: float = 256.0  # micro-ops in flight (reorder buffer): how many bodies' chains overlap
    gather_cost: float = 1.0  # cycles per lane of a gathered (non-contiguous) vector access
    # shuffle-pipe slots per lane of a strided TVM vector, which LLVM assembles lane by lane (vmovss and
    # vinsertps; two shuffle pipes on Zen 4, one on Skylake-X)
    lane_insert_cost: float = 0.5
    int_cost: float = 0.5  # issue slots per integer op that survives in the body (guards, indices)
    register_array_elems: int = 64  # largest intermediate (elements) LLVM scalar-replaces into registers
    divmod_cost: float = 6.0  # integer micro-ops of a floordiv/floormod by a constant that is not a power of two
    auto_vectorize: bool = True  # credit LLVM's vectorization of a contiguous innermost spatial loop
    auto_vectorize_min: int = 8  # shortest loop LLVM's vectorizer is credited for
    slp_vectorize: bool = True  # credit LLVM's SLP vectorization of an unrolled contiguous spatial loop
    slp_min: int = 4  # fewest copies the SLP vectorizer is credited for packing
    # credit SLP packing of a multiply-add body's copies whose loads walk memory in a small stride (pooling windows,
    # copies and max keep it: they interleave)
    slp_strided: bool = False
    # ... but a multiply-add body's copies whose stride-2 (or 3, 4) loads do not reach into the next copy's elements
    # (the window's offsets iterate outside the body) are packed, with two wide loads and a permute per vector
    # (MetaSchedule's depthwise_conv2d_s2 kernel on Zen 5: 56 unrolled x copies, `vpermt2ps`)
    slp_strided_apart: bool = True
    # LLVM's SLP vectorizer packs the copies (a vector's worth or more) of a loop that TVM scalarized for a padding
    # guard, then unrolled, when the guard can fail in at most this many copies (the edges: the others' conditions
    # fold to true), with masked loads
    slp_guarded_lanes: int = 2
    # ... but not when the guard also tests an iterating loop's counter at both ends of its range: each copy keeps a
    # switch of its own (`edge_switch_guarded`)
    edge_switches: bool = True
    gapped_strides_gather: bool = False  # LLVM gathers a strided load whose copies leave gaps (spec.llvm_gathers)
    # LLVM's loop vectorizer gathers a strided load of a multiply-add body whose copies reach into the next lane's
    # elements (a 3-wide window at stride 2: offsets 0, 1, 2), on every AVX-512 CPU checked (znver4, znver5,
    # skylake-avx512); a depthwise stride-2 candidate predicted first ran 3.4x slower than the best sample
    # (docs/measurements-costmodel.md)
    overlapping_strides_gather: bool = False
    # ... and a strided load under a guard that changes across the lanes (a stride-2 window reading the input in
    # place of its padding) in a multiply-add body: the loads cannot be widened past a failing guard, so each lane
    # is built on its own (vinsertps from an extracted address, masked vgatherqps). Zen 4: a depthwise stride-2
    # pick predicted at 0.13 ms ran 0.71-1.34 ms, about 80 cycles per 84-lane body against 16 priced as interleaved
    # loads. Not pooling windows (vpermt2ps, max_pool2d's assembly) nor copies the SLP vectorizer packs
    guarded_strides_gather: bool = False
    # ... and, where LLVM's loop vectorizer took the loop around the body, a padded window copied per output column
    # into registers that multiply-adds read (the copy forwarded into them): the strided loads of the unrolled
    # copies whose guard can fail somewhere (the padded edge rows, the column left of the first) are masked
    # `vgatherqps`, those whose guards always hold interleaved. Zen 4, depthwise_conv2d_s2: 7 of a 5 x 3 window's 15
    # loads gathered per 16 lanes, the pick predicted at 0.126 ms ran 0.340 (session 90). Not windows read by max or
    # add (max_pool2d's and avg_pool2d's same copies: `vpermt2ps` only, among their fastest measured rows)
    guarded_copies_gather: bool = False
    # LLVM's loop vectorizer takes the innermost iterating spatial loop even when its lanes are far apart in
    # memory, with gathers and scatters (AVX-512: every x86 CPU checked; AVX2 has no scatter)
    gather_vectorize: bool = False
    # On x86 the loop vectorizer also takes an iterating loop whose body LLVM unrolls around guarded loads when the
    # body only copies (a padded window) and the guards do not change with that loop: each guard becomes a mask of
    # all or no lanes (`vmovups ... {%k} {z}`, `vmaskmovps` with AVX2; seen for znver3/4/5, skylake-avx512 to
    # graniterapids). MetaSchedule's MobileNet-V2 depthwise kernels run so (a 5 x 5 padded window computed at the
    # 64-channel loop: priced 2.9x its time as scalar code before, session 82). Not a body with arithmetic: 24 guarded
    # multiply-adds of a 3-channel input convolution stayed scalar
    uniform_guard_masks: bool = False
    # A TVM vector moved in more memory pieces than it has registers is widened (10 lanes: one zmm, 8 + 2 pieces; 6: one
    # ymm, 4 + 2): each load joins its pieces with an insert and each store splits them with an extract, on the FP pipes
    # beside the FMAs (Zen 5 microbenchmark, docs/measurements-costmodel.md "Widened vectors": an accumulator update on
    # 10 or 12 lanes in a zmm, or 6 in a ymm, runs 1.2-1.7x slower than on 16 or 8 lanes, at any alignment)
    widen_cost: float = 1.0  # FP-pipe slots per such insert or extract (0: not counted at all)
    # LLVM's LICM hoists a contiguous operand that does not change with the innermost iterating loop; when its vector is
    # wider than a register and its lane count not a power of two (20, 24, 40, 48, 80; 12 with AVX2), the hoisted load
    # is assembled lane by lane in the loop's preheader (vmovss and vinsertps per lane), once per run of the loop and
    # not overlapped with it (TVM's vectors only: a 48-iteration loop that LLVM vectorizes runs as three whole zmm
    # registers, MetaSchedule's MobileNet-V2 depthwise kernels). `preheader_lane_cycles` per lane (a load and an
    # insert): on Zen 4 a 48-lane tile over 2 row blocks ran at half the FMA rate of a 32-lane one, over 40 blocks at
    # the same (docs/measurements-costmodel.md)
    hoisted_by_lane: bool = True
    preheader_lane_cycles: float = 1.0
    # Cycles per lane that a gather instruction (LLVM's vectorizers emit them; TVM builds its own strided vectors lane
    # by lane) adds to its body beside the other work, on cores whose gathers are microcoded and hold up the rest
    # (`HardwareSpec.gather_serial_lane_cycles`; 0: they only share the load bound). On Zen 4 a vgatherqps of 8
    # lanes beside 24 independent zmm FMAs adds 0.67 cycles per lane to the FMAs' time (1.56 alone), a vgatherdps of
    # 16 lanes 0.73, while 16 lanes loaded and inserted one by one add 0.01 (`benchmarks/serial_gathers.py`). The
    # candidates that LLVM vectorized with gathers ran 1.4x their price (median of 188 Zen 4 rows, session 92)
    gather_serial_lane_cycles: float = 0.0
    # A scalar operand broadcast to such a TVM vector (wider than a register, lane count not a power of two) is splatted
    # by LLVM with vinsertps, three per 128-bit piece (0.75 per lane), the pieces then joined, instead of one
    # vbroadcastss (x86 with AVX-512 and AVX2 alike: znver3, znver4 and skylake-avx512 at 12-80 lanes). The model
    # charges it when the operand does not change with the innermost iterating loop, no other statement shares that
    # loop, and the body's splats and outputs do not fit the registers: LLVM hoists the scalar loads and builds the
    # splats again in the loop. Zen 4 conv2d_nchw, 28 lanes, 64 weights per body: 1,344 vinsertps to 128 FMAs,
    # predicted 2.0 ms, ran 5.1 (session 91). Shuffle-slot cycles per lane of each such splat in a body: fitted to
    # benchmarks/splat_inserts.py (one thread, 16 splats per body, 20-56 lanes: measured over predicted against the
    # 16-lane kernel 0.91-1.11, 1.17-1.31 without); 0: not counted
    splat_lane_cycles: float = 0.0
    # Accumulators of half-register TVM vectors (8 lanes with AVX-512) held in registers across the reduction loop
    # are joined by LLVM into full registers, two adjacent columns per FMA, when the tile has more than
    # `join_half_vectors_above` elements (benchmarks/register_tiles.py: 2x80, 3x64, 2x96, 4x48 tiles of 8 lanes ran
    # as zmm FMAs, tiles of 128 elements or fewer as ymm); 0 disables
    join_half_vectors_above: int = 128
    hoist_invariant: bool = True  # credit LLVM's hoisting of gathered/strided operands invariant in the inner loop
    # ... and of gathered ones (vgather, in a loop LLVM vectorized) beyond the registers too: LLVM gathers them once
    # before the loop and spills the excess, which each body reads back from the stack (batch_matmul on
    # emeraldrapids: 64 gathers outside the innermost loop, 34 of its 256 FMAs reading the stack). Off: rebuilt
    hoisted_gathers_spill: bool = False
    # An operand element reused across an unrolled body loop stays in a register only while what the loops inside that
    # loop read fits the registers the accumulators leave; otherwise it is loaded again each iteration (a 16 x 16 GEMM
    # tile unrolled over 2 column blocks outside 8 reduction steps broadcasts each A element twice)
    register_reuse: bool = True
    llvm_unroll_budget: float = 256.0  # LLVM fully unrolls a constant loop whose unrolled body stays below this
    # and a loop around such a loop while the whole unrolled nest stays below this many times the budget (accumulator
    # tiles, benchmarks/register_tiles.py: a 12- or 6-column loop unrolled, then the 2- or 4-row loop around it up to
    # 480 model instructions; 4 x 96 and 2 x 128 tiles, whose column loops alone exceed the budget or whose nest
    # reaches 960, were not)
    llvm_unroll_nest_factor: float = 2.0
    # Off: size a body for LLVM's full unroll as instructions per statement instance x instances. On: as LLVM sees it
    # after scalar promotion and common-subexpression elimination: `unroll_fp_insts` per FP operation per instance,
    # one access per distinct address (an operand invariant in an unrolled loop once, a TVM vector's gathered operand
    # a load and an insert per lane, a scalar splat two), and no load or store of an accumulator that the unrolled
    # loop reduces into (promoted to a register). Session 92: the multiply-adds per run of the innermost asm loop match
    # the model's in 267 of 420 sampled Zen 4 rows (259 off; `benchmarks/loop_structure.py`), held out Spearman 0.850
    # (0.839) but top-10 0.904 (0.915).
    unroll_distinct_accesses: bool = False
    unroll_fp_insts: float = 2.0
    # An unrolled body of more micro-ops than `large_body_uops` whose accumulators go through memory issues only
    # `large_body_width` per cycle. Measured on Zen 5 (docs/measurements-costmodel.md, "Large unrolled bodies"): a
    # 1024-FMA GEMM body (1910 instructions) ran 1.7 instructions per cycle, 1.75x slower than the same tiles in a
    # 32-FMA loop; the GEMM search's picks with 512-FMA bodies (~800 micro-ops) ran 1.4-2.1x slower than predicted,
    # 16-FMA loops 1.2x. The Zen 5 file of session 65 set 1200 (GEMM bodies of 900-1000 micro-ops ran 2.7-3.1 per
    # cycle there); session 67 went back to 600: among the picks of nine network tunings (benchmarks/pick_pool.py),
    # 1200 chose the slower kernel in 12 of the 13 tasks where the two settings chose differently.
    large_body_uops: float = 600.0
    large_body_width: float = 2.0
    # An unrolled body of more micro-ops than this issues at `large_body_width` whatever its accumulators do; 0: off.
    # conv1d's 120-s pick on Zen 5 (1024 FMAs, 1537 micro-ops, accumulators in registers) ran about 1.7 micro-ops per
    # cycle, priced FP-bound at 2 FMAs per cycle (session 68)
    huge_body_uops: float = 0.0
    # Micro-ops per cycle of a body that multiplies and adds (FMAs), accumulators in registers or not; 0: `issue_width`.
    # On the Emerald Rapids machines 23 of 30 GEMM bodies ran at 1.9-2.2 micro-ops per cycle
    # (benchmarks/kernel_bodies.py) and register tiles alone at 1.8-2.5 (benchmarks/tile_peak.py). No shipped file
    # sets it: a width of 2 was screened on the Intel fidelity rows only, never tuned with; that file sets
    # `load_ports` instead. The Zen 5 file sets 3: 16 variants of one GEMM tile (bodies of 150-1000 micro-ops,
    # accumulators through memory) ran 2.3-3.1 micro-ops per cycle (docs/measurements-costmodel.md, session 65)
    fma_issue_width: float = 0.0
    # Cycles per cache line that a nest reads from an intermediate another core wrote in an earlier nest (a parallel
    # nest read by a serial one, or two parallel nests that split the buffer differently). The two vCPUs of these
    # machines share a line in ~30 ns or, in other phases, ~170 ns (a ping-pong between them,
    # docs/measurements-costmodel.md "Lines that change cores"): global_avg_pool's sum read serially after its parallel
    # partial sums ran 6.3 or 17.7 us.
    remote_line_cycles: float = 40.0
    # Cycles per accumulator vector each time a reduction loop that keeps its accumulators in registers starts on
    # another output tile (the loop around it walks the output): the finished tile is stored and the next one
    # loaded between the two runs of FMA chains, not overlapped with them. A MobileNet-V2 1x1 convolution (14
    # accumulators, reduction split 12 x 8 around 14 output tiles) ran 118 us, 102 us with the reduction whole
    # (docs/measurements-costmodel.md, "Pumped pipes and accumulator reloads"). 0 disables.
    accumulator_reload_cycles: float = 1.0
    # Cycles per accumulator vector of such a reload when the output tiles that the loop around walks between two runs
    # on the same tile crowd one L1 set beyond its ways, so that the tile comes back from L2 (gemm_bert: an 8 x 32 tile
    # walking 16 tiles of rows 12 KiB apart cost 10-11 cycles per reloaded line, docs/measurements-one-operator.md
    # "Accumulator reloads that miss L1"). Conflict misses only: a walk whose lines exceed L1 as a whole streams in. 0,
    # the default: such reloads cost `accumulator_reload_cycles` like the others. A calibration sets it for its machine
    # (the Zen 4 file: 5, its refit moved the held-out median top-1 0.796 -> 0.852, Spearman 0.831 -> 0.829).
    evicted_reload_cycles: float = 0.0
    # The stores of accumulators that a body loads and stores every time (accumulators through memory) take load-port
    # slots beside its loads. On the `rocketlake` guest a 4 x 64 tile body that loads and stores its 16 accumulators
    # ran 32-37 cycles per body slower than the same body with them in registers (8 or 16 reduction steps per body,
    # `benchmarks/accumulator_reload.py`): about two per accumulator, where the loads alone at `load_ports` = 1 add
    # 16. False: such stores use `store_ports` only. The Zen 5 file sets it: a body storing its 32 accumulators
    # every 2 reduction steps (64 FMAs) ran 65 cycles per body, priced 33 before and 52 with this and
    # `fma_issue_width` 3 (session 65).
    accumulator_stores_load: bool = False
    # Accumulators that a body loads and stores, vectorized with a masked tail (a row of 14 lanes as 8 + 6 of a ymm on
    # AVX-512), touch the start of the next vector in memory with the tail's store: the next row's first load overlaps
    # it in part, cannot take its value from the store buffer, and waits until the store is written to L1, after it
    # retires. Each row's chain of multiply-adds then starts after the one before it: the body costs its rows times
    # (the chain's latency + this many cycles) instead of chains overlapped out of order. 0: not counted. conv2d_s2's
    # row that the held-out Intel model ranked first of 200 (measured 28th) ran 10.0 ms, 2.32 ms with the rows of its
    # output tile padded to 16 floats and nothing else changed. Of 10 rows it flags, padding sped up 6 (4 by
    # 1.8-3.8x), the others not, among them every body of 8-16 rows (`benchmarks/partial_overlap.py`, session 97).
    # Off: a refit with it at 20 ranked better held out (top-1 0.868 -> 0.900) but picked no faster kernels
    partial_overlap_cycles: float = 0.0
    # The same stall seen in the assembly instead (`SchedConfig.failed_forward_cycles`, for the FP rate's list
    # scheduler): a load that overlaps an earlier store without lying inside it, in the same iteration or the one
    # before (addresses followed across constant pointer steps), waits until that store has retired plus this many
    # cycles. It sees the order of loads and stores that the rule above cannot: conv2d_s2's row runs 120 cycles per
    # iteration in steady state with it at 20 (12 without; 15 with its rows padded, either way). 0: not counted
    failed_forward_cycles: float = 0.0
    # ... and a load that overlaps an earlier masked store waits so too (`SchedConfig.failed_forward_masked`): LLVM
    # keeps the masked tail of a row of accumulators (14 lanes as 8 + a masked 6) in memory across the reduction
    # loop, and each iteration reloads what the last one stored under the mask
    failed_forward_masked: bool = False
    # The assembly's gathers priced by their lanes in the FP rate's list scheduler (`SchedConfig.gather_lane_cycles`:
    # cycles a gather holds a load pipe per lane); 0: a gather is priced as one load
    asm_gather_lane_cycles: float = 0.0
    # Entries of the list scheduler's scheduler (`SchedConfig.scheduler_entries`): dispatch stalls while this many
    # instructions wait for their operands, so that long multiply-add chains overlap less; 0: unbounded
    asm_scheduler_entries: int = 0
    # The FP rate's steady state per loop iteration measured after as many copies as it measures over
    # (`SchedConfig.steady_state_slope`), so that a long multiply-add chain's slack is not counted as speed
    asm_steady_state_slope: bool = False
    # The assembly's cycles outside the FP code (`fpratio.outside_cycles_per_fp_lane`) price an innermost loop with
    # branches by its dearest path per iteration, not by all its blocks: a padded input's copy loop (depthwise_conv2d,
    # 40 blocks, each iteration runs about 9 of them) was priced at 256 cycles an iteration, more than its kernel ran
    asm_outside_path_cycles: bool = False
    # ... and price each of those blocks (or paths) by its steady state, what one more execution adds to executions
    # back to back (`fpratio.outside_cycles_per_fp_lane`'s `steady`), not by one execution alone: out of order the
    # core overlaps a pad's address arithmetic with the code around it; a long chain (a runtime alias check's mask
    # of 8 pointer comparisons) still fills the scheduler and keeps most of its latency
    asm_outside_steady: bool = False
    # ... and count only the straight-line blocks, no loops: LLVM guards a padded copy it vectorized with a runtime
    # alias check and keeps a scalar version of the copy loop behind it, which never runs when the pointers are apart
    # but which the assembly's counts give every execution of the copy (depthwise_conv2d, session 100)
    asm_outside_blocks_only: bool = False
    # The assembly's counts leave out the scalar versions behind runtime alias checks of more shapes
    # (`MapConfig.more_alias_checks`): a pointer distance against the vector's bytes (`subq`, `cmpq $64`, `jb`) and
    # an overlap test whose conflict falls through (`je`). A padded copy's scalar version (depthwise_conv2d, 8 guarded
    # elements an iteration) was given every execution of the copy and priced 0.5 M of a kernel that ran 0.3 M cycles
    asm_more_alias_checks: bool = False
    # The assembly's FP rate (`fpratio.cycles_per_fp_lane`) schedules an innermost loop of several basic blocks (guards
    # that LLVM turned into branches, e.g. a padded input read in place) as one sequence, so that its blocks overlap as
    # they do out of order. False: each block alone, the sums of their latencies added. MetaSchedule's MobileNet-V2
    # 3 x 3 stride-2 depthwise kernel (an innermost loop of about 30 blocks, each a guarded load) ran 35 cycles per
    # iteration, the isolated blocks summed to several times that (session 67).
    merge_loop_blocks: bool = False
    # The assembly's FP rate takes a single-block innermost loop with vector multiply-adds at its cycles per
    # iteration in steady state (copies of the body scheduled back to back, `SchedConfig.steady_state`) instead of
    # one body alone, whose load and FMA latencies a short body pays in full: a 6 x 64 GEMM tile of 24 FMAs per
    # iteration is priced 24 cycles alone on Emerald Rapids and ran at 93.5% of the FMA peak (session 93). Loops
    # without multiply-adds keep the single-body schedule (with every loop in steady state, pooling ranked worse)
    steady_state_fp_rate: bool = False
    # When the assembly's multiply-add lanes, counted with Algorithm 1's trips, differ from the TIR's exact count by
    # more than this factor either way, the executions of the code doing them are scaled to the TIR's count
    # (`fpratio.repair_fma_counts`); 0: never. Of 10 GEMM tiles timed on Zen 3, 6 were miscounted 1/8 to 12x (LLVM
    # duplicated or rearranged their loops), and a 300-s search picked one counted 1/8 (session 75)
    repair_fma_counts: float = 0.0
    # The assembly's FP lanes count floating-point vector arithmetic only: LLVM's gathers and scatters compute their
    # index vectors with integer vector instructions (vpsllq, vpaddd on zmm), which counted as 16 FP lanes each made
    # such loops look cheap per FP operation (`fpratio.fp_lanes`; session 95, softmax on Emerald Rapids)
    float_lanes_only: bool = False
    # A parallel body's chunk loop has no constant bounds, so Algorithm 1 takes its TIR loop's extent as its trip;
    # LLVM often vectorizes or unrolls it s wide (its induction register steps by s), and it then runs extent / s
    # times. Applied where one iteration's FP lanes are s times the TIR's FP operations per iteration of that loop
    # (`fpratio.repair_chunk_counts`). Counted at the extent, such loops weighed up to 32x their share in the FP rate
    # (session 95: softmax's 200 fidelity candidates had 313 such loops)
    repair_chunk_steps: bool = False
    # The assembly's FP rate leaves out the units that call a libm function (the scalarized calls of exp, erf; not
    # memset, nor the runtime's calls through a pointer such as a parallel launch inside a loop):
    # `libm_cycles`, measured over whole kernels of such calls, already price the code around each call, and the list
    # scheduler, which does not see the callee, chains the stores and reloads around the calls (softmax's exp loop of
    # 16 calls priced 152 cycles, 9.5 per call on top of the call's 7.5; the whole softmax ran 8.8 per element on
    # Emerald Rapids, session 95). Calls laid out straight-line had no FP lanes and were never counted
    rate_skips_call_units: bool = False
    # LLVM's LICM hoists the loads of a contiguous or broadcast operand that does not change with the innermost
    # iterating loop into that loop's preheader even when they do not fit the registers left by the accumulators; the
    # register allocator then stores them to the stack there, and the body reads them back. Cycles per hoisted vector
    # (its load and its spill store), once per run of the loop, when some are spilled; 0: not counted. The Zen 5 GEMM
    # search's pick of session 67 (a 4 x 64 tile whose 64 broadcasts of A are invariant in a 2-iteration column
    # loop) ran 199 cycles per body, 163 for the same body whose loop around iterates 32 times (session 68). The Zen 5
    # file sets 1 (docs/measurements-costmodel.md, "Session 68")
    hoisted_spill_cycles: float = 0.0
    # A statement recomputed in a rolled serial loop that none of its addresses or guards read, its own loops unrolled
    # or vectorized by TVM, runs once per run of that loop: LLVM's LICM hoists the straight-line code (`licm_hoisted`).
    # A Zen 3 softmax candidate that computes each row's maximum, unrolled 512 wide, inside the column loop ran 0.48
    # ms (4th of 48) and was priced with the 4-10 ms ones whose maximum stays a rolled loop there (session 80); the
    # assembly of such a row maximum executes its max instructions once per row (tests/test_costmodel_kernel.py)
    licm_statements: bool = True
    # The innermost loop's increment, compare and branch run on the integer ports beside the body's FP work: with this
    # set, `loop_overhead` is a bound of its own (at most one taken branch per cycle), not cycles added to every body.
    # Added, it charged Zen 3's 6 x 16 GEMM tile 7 cycles per 12 multiply-adds (17% over its FMA bound) and ranked it
    # below fully unrolled tiles that ran slower (session 76). On Zen 3's 909 random rows it ranked worse held out
    # (Spearman 0.786 -> 0.778, top-10 0.827 -> 0.809): no file sets it
    loop_overhead_overlaps: bool = False
    # A network kernel's statement that stores more than this many lines of an output with nothing else in between
    # (its own loops) waits on memory for them (`burststore`); fewer drain beside the compute around them. On the Zen 5
    # MobileNet-V2 pools (session 69) 4 and 8 ranked alike, 32 worse
    store_burst_lines: float = 8.0
    # Pipe cycles of one FP operation on a full-width vector where the datapath is narrower (Zen 4 runs a 512-bit
    # operation on a 256-bit pipe for two cycles); operations on vectors that fit the datapath take one. 1: none.
    pump: int = 1
    # Zen 4 also stores a 512-bit vector as two 256-bit halves, one zmm store every two cycles (a pad strip written
    # and read back costs that beside the FMAs)
    pump_stores: bool = True
    # Zen 4 loads one 512-bit vector per cycle (two 256-bit ones): a full-width load, or a broadcast into a full-width
    # register, takes both load-port slots. The BERT-base dense tiles on Zen 4 ran at the rate this gives (8 rows x 16
    # lanes, 9 loads per 8 FMAs: 1.125 cycles per FMA; 4 x 16, 5 per 4: 1.25; session 84), where two ports of any
    # width leave both FMA-bound. Not set by any file: on Zen 4's fidelity rows held out it moved Spearman 0.842 ->
    # 0.85 but top-1 0.933 -> 0.90 and top-10 0.91 -> 0.88 (session 84). False: loads of any width share `load_ports`.
    pump_loads: bool = False
    launch_cycles: float = 20000.0  # entering a parallel region (TVM thread-pool wake-up, ~8 us), pre-score only
    # Cycles per lane of a scalarized libm call at the spec's clock: glibc on Zen 4 over 393k vectorized
    # elements, one thread (exp 2.9 ns, erf 4.4, tanh 4.8, sigmoid 2.4, log 2.1; x 2.6 GHz); other calls: 10.
    libm_cycles: dict[str, float] = field(default_factory=lambda: {
        "exp": 7.5, "erf": 11.5, "tanh": 12.5, "sigmoid": 6.0, "log": 5.5})
    libm_default_cycles: float = 10.0
    # A body that TVM unrolled into more than `hot_call_sites` libm calls (each a call site of its own in straight-line
    # code) runs every call `cold_call_cycles` slower, the same instructions executed: more call sites than the
    # front end keeps branch targets for (Emerald Rapids, benchmarks/libm_calls.py: an exp body of 8192 call sites
    # ran at the speed of a loop, 16384 2.6x slower; a softmax exp unrolled into 16384 calls ran 3x slower than the
    # same exp as a loop of 128). 0 disables.
    hot_call_sites: int = 12288
    cold_call_cycles: float = 21.0
    # A libm call on a lane of a TVM vector of a full register or more costs `libm_vector_lane_cycles` more than one
    # in a scalar loop or on a narrower vector (Emerald Rapids, benchmarks/libm_calls.py: exp on 16-64 lanes 0.8-1.1 ns
    # per element slower than in a scalar loop or at 4-8 lanes in each of three runs; softmax's exp at 8 lanes 0.85x
    # the time at 16)
    libm_vector_lane_cycles: float = 2.5

    def libm_calls(self, ops: dict[str, int]) -> int:
        """Scalarized libm calls per lane among a statement's `ops`."""
        return sum(n for key, n in ops.items() if call_name(key) in _LIBM_CALLS)

    def call_costs(self, ops: dict[str, int]) -> tuple[float, float]:
        """(FP-pipe slots per vector operation, cycles per lane) of the calls among a statement's `ops`."""
        vector = per_lane = 0.0
        for key, n in ops.items():
            name = call_name(key)
            if name is None:
                continue
            if name in VECTOR_CALL_COST:
                vector += VECTOR_CALL_COST[name] * n
            elif name in _LIBM_CALLS:
                per_lane += self.libm_cycles.get(name, self.libm_default_cycles) * n
        return vector, per_lane

    @classmethod
    def for_spec(cls, spec: HardwareSpec) -> KernelConfig:
        """The defaults with the core's FMA pipes, their pumping (`HardwareSpec.pump`: Zen 4's 512-bit operations
        take a 256-bit pipe for two cycles) and vector registers (x86 has 16 below AVX-512), two of them kept for
        the operands of the FMAs."""
        vector_regs = 16 if spec.arch == "x86" and spec.vector_bits < 512 else 32
        avx512 = spec.arch == "x86" and spec.vector_bits >= 512
        return cls(fp_pipes=float(spec.fma_units), pump=spec.pump, registers=vector_regs - 2,
                   gapped_strides_gather=spec.llvm_gathers,
                   gather_vectorize=avx512, overlapping_strides_gather=avx512, guarded_strides_gather=avx512,
                   guarded_copies_gather=avx512,
                   uniform_guard_masks=spec.arch == "x86", splat_lane_cycles=0.1875 if spec.arch == "x86" else 0.0,
                   gather_serial_lane_cycles=spec.gather_serial_lane_cycles)


@dataclass
class KernelEstimate:
    """Compute cycles of one program, per core (`cycles`) and in total (`serial_cycles`), with details."""

    cycles: float
    serial_cycles: float
    bound_counts: dict[str, float] = field(default_factory=dict)  # cycles attributed to each bound


def _vector_ops(extent: int, lanes: int) -> int:
    """Registers, and arithmetic instructions, of a vector of `extent` lanes: LLVM widens a partial register
    (14 float lanes on AVX-512 are one zmm; checked in the assembly for 7-56 lanes on znver3 and znver5)."""
    return -(-extent // lanes)


def _memory_pieces(extent: int, lanes: int) -> int:
    """Loads or stores of a contiguous vector of `extent` lanes: full registers plus the tail in power-of-2
    pieces, since the widened lanes must not touch memory (14 lanes: 8 + 4 + 2)."""
    full, rest = divmod(extent, lanes)
    return full + bin(rest).count("1")


def tail_overlaps_next_row(out: Access, e_v: int, width: int) -> bool:
    """Whether a row of `out` of `e_v` lanes, moved as `width` lanes with the rest masked, reaches into the next row
    in memory: rows shorter than `width` apart, e.g. an output tile that TVM compacted to 14 floats a row. (Two
    vectors of one longer row did not run slower than priced: a body loads its vectors before it stores them.)"""
    return e_v < width and out.row_stride < width


def _memory_indices(acc: Access) -> tuple:
    """The indices of `acc` without trailing unit dimensions, which do not change the address
    (an rfactor buffer of shape (64, 1) is contiguous in its first index)."""
    n = len(acc.indices)
    while n > 1 and len(acc.shape) == len(acc.indices) and acc.shape[n - 1] == 1:
        n -= 1
    return acc.indices[:n]


def _vector_stride(acc: Access, vec: str) -> int | None:
    """Constant element stride of `acc` along the vector loop `vec` in its last dimension, else None."""
    indices = _memory_indices(acc)
    if any(vec in ix.loop_vars() for ix in indices[:-1]):
        return None
    last = indices[-1] if indices else None
    if last is None or not last.quasi_affine or any(
            not isinstance(t, str) and vec in t.arg.loop_vars() for t, _ in last.terms):
        return None
    return abs(last.coeffs.get(vec, 0)) or None


def _access_kind(acc: Access, vec: str | None, max_stride: int = 4) -> str:
    """How a vectorized statement touches `acc`: 'scalar' (broadcast), 'contig', 'strided' (small constant
    stride: wide loads and shuffles) or 'gather' (one load per lane)."""
    if vec is None or not any(vec in ix.loop_vars() for ix in acc.indices):
        return "scalar"
    stride = _vector_stride(acc, vec)
    if stride == 1:
        return "contig"
    if stride is not None and stride <= max_stride:
        return "strided"
    return "gather"


def _lane_loads(acc: Access, vec: str, lanes: int, body: dict[str, int]) -> int:
    """Scalar loads of a strided TVM vector access over its lanes and the (non-vector) body loops: one per
    distinct element, since LLVM loads an element that several unrolled copies share once (the columns of
    neighbouring pooling windows overlap)."""
    indices = _memory_indices(acc)
    last = indices[-1]
    coeffs = last.coeffs
    if len(coeffs) != len(last.terms):  # floordiv/floormod terms: count every lane of every copy
        return _distinct(acc, body) * lanes
    offsets = {coeffs.get(vec, 0) * lane for lane in range(lanes)}
    for var, extent in body.items():
        if var in coeffs:
            if len(offsets) * extent > 65536:
                return _distinct(acc, body) * lanes
            offsets = {x + coeffs[var] * i for x in offsets for i in range(extent)}
    outer = set().union(*(ix.loop_vars() for ix in indices[:-1])) if len(indices) > 1 else set()
    return len(offsets) * math.prod(e for v, e in body.items() if v in outer and v not in coeffs)


def _interleave_has_gaps(acc: Access, stride: int, body: dict[str, int]) -> bool:
    """Whether the copies of `acc` in the unrolled body leave some of the `stride` element offsets unread: on CPUs
    with cheap gathers LLVM's loop vectorizer then gathers (vgather, seen in the assembly of strided convolutions)
    instead of loading the whole interleaved group and shuffling it apart (strided pooling
    windows read every offset)."""
    coeffs = _memory_indices(acc)[-1].coeffs
    residues = {0}
    for var, extent in body.items():
        if coeffs.get(var):
            residues = {(r + coeffs[var] * i) % stride for r in residues for i in range(extent)}
    return len(residues) < stride


def _copies_overlap(acc: Access, stride: int, body: dict[str, int]) -> bool:
    """Whether the copies of `acc` in the unrolled body reach `stride` elements or more past the first, i.e. into the
    elements of the next vector lane (a 3-wide window at stride 2)."""
    coeffs = _memory_indices(acc)[-1].coeffs
    return sum(abs(coeffs.get(var, 0)) * (extent - 1) for var, extent in body.items()) >= stride


def guarded_lanes(leaf: StmtLeaf, var: str, extent: int, path: list[LoopNode]) -> int:
    """How many of the `extent` values of `var` (each copy of an unrolled loop) may fail one of the statement's
    select guards that depend on `var`, for some value of the other loops in `path` (guards the same for every copy
    do not count); all of them when a guard is not affine or reads a variable of no loop there."""
    guards = leaf.guard_conditions
    extents = {lp.var: lp.extent for lp in path}
    if guards is None or any(v not in extents for g in guards for v in g.loop_vars()):
        return extent
    others = {v: e for v, e in extents.items() if v != var}
    return sum(any(g.coeffs.get(var) and _may_fail(g, {var: value}, extents, others) for g in guards)
               for value in range(extent))


def _may_fail(guard: IndexExpr, fixed: dict[str, int], extents: dict[str, int], others: dict[str, int]) -> bool:
    """Whether the guard `guard >= 0` can fail with the `fixed` loops at their values, for some value of the `others`
    (loop variables of `extents`, the loops around the statement)."""
    at = guard.substitute({v: IndexExpr.constant(x) for v, x in fixed.items()}, extents)
    return at.interval(others)[0] < 0


def failing_copies(leaf: StmtLeaf, unrolled: dict[str, int], path: list[LoopNode], limit: int = 4096) -> float:
    """The share of the unrolled body's copies (one per value of the `unrolled` loops) in which one of the
    statement's select guards may fail for some value of the other loops in `path`; all of them when a guard is
    not affine or reads a variable of no loop there, or the copies are too many to check."""
    guards = leaf.guard_conditions
    extents = {lp.var: lp.extent for lp in path}
    if guards is None or any(v not in extents for g in guards for v in g.loop_vars()):
        return 1.0
    tested = {v: e for v, e in unrolled.items() if any(v in g.loop_vars() for g in guards)}
    copies = math.prod(tested.values())
    if copies > limit:
        return 1.0
    others = {v: e for v, e in extents.items() if v not in tested}
    failing = sum(any(_may_fail(g, dict(zip(tested, values, strict=True)), extents, others) for g in guards)
                  for values in itertools.product(*(range(e) for e in tested.values())))
    return failing / copies


def edge_switch_guarded(leaf: StmtLeaf, outer: list[LoopNode]) -> bool:
    """Whether a select guard tests the variable of one iterating loop alone and can fail at both ends of its range
    (a padded row computed over the whole padded height). LLVM turns that range test on a counter of known range
    into a switch on the edge values, one in every copy of a loop that TVM scalarized for the guard, and neither
    merges nor packs them: the copies stay scalar, a branch each (depthwise_conv2d's pad, Zen 5, session 71)."""
    guards = leaf.guard_conditions or ()
    for lp in outer:
        if lp.extent < 2:
            continue
        own = [g for g in guards if g.loop_vars() == {lp.var}]
        can_fail = [g.coeffs[lp.var] for g in own if g.interval({lp.var: lp.extent})[0] < 0]
        if any(c > 0 for c in can_fail) and any(c < 0 for c in can_fail):
            return True
    return False


def _access_vars(acc: Access) -> set[str]:
    """The loop variables `acc`'s indices read."""
    return set().union(*(ix.loop_vars() for ix in acc.indices))


def _distinct(acc: Access, body: dict[str, int]) -> int:
    """Distinct index values of `acc` over the (non-vector) body loops."""
    used = _access_vars(acc)
    n = 1
    for v, e in body.items():
        if v in used:
            n *= e
    return n


def _register_reloads(acc: Access, body: list[LoopNode], unrolled: dict[str, int], budget: float) -> int:
    """Loads of each distinct element of operand `acc` in one body: reuse across an unrolled body loop that `acc`
    does not depend on is kept only while the elements that the loops inside it read fit `budget` registers; beyond
    that the element is loaded again in every iteration of that loop (`body` inner to outer)."""
    used = _access_vars(acc)
    inside: dict[str, int] = {}
    reloads = 1
    for lp in body:
        if lp.var not in unrolled:
            continue
        if lp.var not in used and _distinct(acc, inside) > budget:
            reloads *= lp.extent
        inside[lp.var] = lp.extent
    return reloads


def _divmods(expr: IndexExpr):
    """Every floordiv/floormod term of `expr`, nested ones included."""
    for t, _ in expr.terms:
        if isinstance(t, DivMod):
            yield t
            yield from _divmods(t.arg)


def index_ops(accesses: list[Access], inner: str | None, unrolled: dict[str, int], cfg: KernelConfig) -> float:
    """Integer micro-ops per body execution of the floordiv/floormod index terms that change with the innermost
    iterating loop `inner` (fused loops): LLVM hoists the others out of it, but computes these once per
    iteration, per distinct value over the unrolled loops (a power-of-two divisor is one shift or mask)."""
    if inner is None:
        return 0.0
    seen: dict[tuple, float] = {}
    for acc in accesses:
        for ix in acc.indices:
            for t in _divmods(ix):
                key = (t.op, t.divisor, t.arg)
                used = t.arg.loop_vars()
                if key in seen or inner not in used:
                    continue
                cost = 1.0 if t.divisor & (t.divisor - 1) == 0 else cfg.divmod_cost
                seen[key] = cost * math.prod(e for v, e in unrolled.items() if v in used)
    return sum(seen.values())


def _tvm_unroll(node: LoopNode | StmtLeaf, max_step: int) -> tuple[int, bool]:
    """TVM's `UnrollLoop` count for a subtree: (its statements once the loops TVM unrolls are copied, whether every
    loop in it is unrolled). A loop's step count is that of its whole body, sibling statements included, and a loop
    with a rolled loop inside it is never unrolled; vectorized loops are gone by then (one step per vector
    statement) unless a guard that changes across the lanes scalarized them."""
    if not node.is_loop:
        return 1, True
    steps, all_unrolled = 0, True
    for child in node.children:
        s, u = _tvm_unroll(child, max_step)
        steps += s
        all_unrolled = all_unrolled and u
    kind = node.kind
    if kind == "vectorized":
        if not any(node.var in leaf.guard_vars for leaf in node.statements()):
            return steps, all_unrolled
        kind = "serial"
    if node.extent <= 1:
        return steps, all_unrolled
    if kind == "unrolled" or (kind == "serial" and max_step and all_unrolled and steps * node.extent <= max_step):
        return steps * node.extent, all_unrolled
    return steps, False


def _unroll_step(path: list[LoopNode]) -> int:
    """TVM's auto-unroll limit (`pragma_auto_unroll_max_step`) in force inside `path`; 0: none."""
    max_step = 0
    for lp in path:
        step = lp.annotations.get("pragma_auto_unroll_max_step")
        if isinstance(step, (int, float)) and step > 0:
            max_step = int(step)
    return max_step


def _statement_vars(leaf: StmtLeaf) -> set[str]:
    """The loop variables a statement's addresses, value or guards read."""
    used = set(leaf.guard_vars).union(*(_access_vars(a) for a in leaf.accesses))
    return used.union(*(c.loop_vars() for c in leaf.conditions))


def _straight_line(loops: list[LoopNode], max_step: int) -> bool:
    """Whether the loops around a statement (outer to inner) are all gone once TVM unrolls and vectorizes."""
    return not loops or _tvm_unroll(loops[0], max_step)[1]


def _stays_in_loop(leaf: StmtLeaf, inside: list[LoopNode], loop: LoopNode, max_step: int) -> bool:
    """Whether `leaf`, under `loop` and then the loops `inside`, runs in every iteration of `loop`: it reads the
    loop's variable, or a loop inside keeps it in a rolled loop that LICM does not take out whole."""
    return loop.var in _statement_vars(leaf) or not _straight_line(inside, max_step)


def _subtree_paths(node: LoopNode | StmtLeaf, path: list[LoopNode]):
    """The statements under `node`'s children, each with the loops between `node` and it."""
    if not node.is_loop:
        yield node, path
        return
    for child in node.children:
        yield from _subtree_paths(child, path + [child] if child.is_loop else path)


def licm_hoisted(leaf: StmtLeaf, path: list[LoopNode]) -> int:
    """How many times fewer a statement runs than its loops say because LLVM's LICM moves it out of them: the
    extents of the rolled serial loops around its straight-line body (its loops TVM unrolled or vectorized) that
    none of its addresses or guards read, from the inside out, up to a loop that does, one that is not serial, or
    one where another statement that stays in it writes a buffer this one reads or writes."""
    max_step = _unroll_step(path)
    used = _statement_vars(leaf)
    buffers = {a.buffer for a in leaf.accesses}
    i = len(path)
    while i > 0 and _straight_line(path[i - 1:], max_step):
        i -= 1
    factor = 1
    for at in range(i - 1, -1, -1):
        loop = path[at]
        if loop.extent <= 1:
            continue
        if loop.kind != "serial" or loop.var in used:
            break
        if any(other is not leaf and buffers & {a.buffer for a in other.accesses if a.is_write}
               and _stays_in_loop(other, inside, loop, max_step)
               for other, inside in _subtree_paths(loop, [])):
            break
        factor *= loop.extent
    return factor


def statement_trips(tree: LoopTree, cfg: KernelConfig | None = None) -> list[tuple[StmtLeaf, float]]:
    """Every statement with how often it runs: its loops' trips, less what LICM hoists
    (`KernelConfig.licm_statements`)."""
    cfg = cfg or KernelConfig()
    return [(leaf, leaf.trips / (licm_hoisted(leaf, path) if cfg.licm_statements else 1))
            for _, items in statement_paths(tree) for leaf, path in items]


def _body_loops(path: list[LoopNode], stmt_insts: float, budget: float, nest_factor: float = 1.0,
                body_insts: Callable[[list[LoopNode]], float] | None = None
                ) -> tuple[list[LoopNode], list[LoopNode], list[LoopNode]]:
    """Split the loops around a statement into (iterating loops outer->inner, body loops, the body loops
    only LLVM unrolls): TVM's unrolling (explicit, or auto-unroll of a loop whose whole body, copied, stays
    within `max_step` statements: `_tvm_unroll`), then LLVM's full unrolling of small constant
    loops (unrolled body of at most `budget` instructions, `stmt_insts` per statement instance; a loop around one
    LLVM already unrolled may take the body to `nest_factor` x `budget`); `body_insts`, when given, sizes the body
    from its loops (innermost first) instead."""
    max_step = _unroll_step(path)
    body: list[LoopNode] = []
    by_llvm: list[LoopNode] = []
    steps = 1
    i = len(path)
    while i > 0:
        lp = path[i - 1]
        if lp.extent <= 1 or lp.kind == "vectorized":
            pass
        elif lp.kind == "unrolled" or (lp.kind == "serial" and max_step and not by_llvm
                                       and _tvm_unroll(lp, max_step)[1]):
            steps *= lp.extent
        elif lp.kind == "serial" and (body_insts(body + [lp]) if body_insts else steps * lp.extent * stmt_insts) \
                <= budget * (nest_factor if by_llvm else 1):
            steps *= lp.extent
            by_llvm.append(lp)
        else:
            break
        body.append(lp)
        i -= 1
    return [lp for lp in path[:i] if lp.extent > 1], body, by_llvm


def _split_loops(leaf: StmtLeaf, path: list[LoopNode], spec: HardwareSpec, cfg: KernelConfig):
    """(FP-pipe slots, libm cycles per lane, integer ops) of one instance of `leaf`, and its loops split by
    `_body_loops` (iterating, body, unrolled by LLVM)."""
    vec_path = next((lp for lp in reversed(path) if lp.kind == "vectorized"), None)
    if vec_path is not None and vec_path.var in leaf.guard_vars:
        # TVM's VectorizeLoop scalarizes an if_then_else whose condition changes across the lanes (a padding
        # guard): the loop runs serially, unrolled or not, and is left to LLVM's vectorizers
        path = [dataclasses.replace(lp, kind="serial") if lp is vec_path else lp for lp in path]
        vec_path = None
    fp = sum(_FP_COST.get(k, 0.0) * n for k, n in leaf.ops.items())
    vector_calls, lane_calls = cfg.call_costs(leaf.ops)
    fp += vector_calls
    ints = sum(n for k, n in leaf.ops.items() if k in _INT_KINDS)
    lanes = spec.vector_lanes(32)
    stmt_insts = fp + len(leaf.accesses)
    fp_insts, pieces = fp, 1
    if vec_path is not None:
        e = vec_path.extent
        fp_insts, pieces = fp * _vector_ops(e, lanes), _memory_pieces(e, lanes)
        stmt_insts = fp_insts + len(leaf.accesses) * pieces
    sizer = _distinct_body_size(leaf, vec_path, fp_insts * cfg.unroll_fp_insts, pieces) \
        if cfg.unroll_distinct_accesses else None
    return (fp, lane_calls, ints, *_body_loops(path, stmt_insts, cfg.llvm_unroll_budget, cfg.llvm_unroll_nest_factor,
                                               sizer))


def _distinct_body_size(leaf: StmtLeaf, vec_path: LoopNode | None, fp_insts: float, pieces: int
                        ) -> Callable[[list[LoopNode]], float]:
    """Instructions of `leaf`'s body unrolled over given loops, one per distinct address
    (`KernelConfig.unroll_distinct_accesses`)."""
    writes = [a for a in leaf.accesses if a.is_write]
    out = (writes[0].buffer, tuple(map(str, writes[0].indices))) if writes else None
    out_vars = _access_vars(writes[0]) if writes else set()
    accesses = {(a.buffer, tuple(map(str, a.indices)), a.is_write): a for a in leaf.accesses}

    def insts(a: Access) -> float:
        if vec_path is None:
            return 1.0
        return {"contig": float(pieces), "scalar": 2.0}.get(_access_kind(a, vec_path.var), 2.0 * vec_path.extent)

    def size(loops: list[LoopNode]) -> float:
        ext = {lp.var: lp.extent for lp in loops if lp.kind != "vectorized"}
        promoted = out is not None and loops[-1].var not in out_vars
        return math.prod(ext.values()) * fp_insts + sum(_distinct(a, ext) * insts(a) for (buf, idx, _), a
                                                        in accesses.items() if not (promoted and (buf, idx) == out))

    return size


def register_buffers(tree: LoopTree, spec: HardwareSpec, cfg: KernelConfig) -> frozenset[str]:
    """Intermediates LLVM keeps in registers (scalar replacement of the allocation): compacted to at most
    `cfg.register_array_elems` elements and, at every access, indexed only by loops unrolled or vectorized
    there, so that each element is a constant offset."""
    fits: dict[str, bool] = {}
    for _, items in statement_paths(tree):
        for leaf, path in items:
            inner = None
            for acc in leaf.accesses:
                if acc.storage_shape is None or not fits.get(acc.buffer, True):
                    continue
                if inner is None:
                    inner = {lp.var for lp in _split_loops(leaf, path, spec, cfg)[4]}
                used = set().union(*(ix.loop_vars() for ix in acc.storage_indices))
                fits[acc.buffer] = math.prod(acc.storage_shape) <= cfg.register_array_elems and used <= inner
    return frozenset(b for b, ok in fits.items() if ok)


def multiply_add_inputs(tree: LoopTree, registers: frozenset[str]) -> frozenset[str]:
    """The register-held intermediates (`register_buffers`) that a multiply-add statement reads: LLVM forwards their
    copies into the multiply-adds and vectorizes both as one body (pooling windows read by max or add are not
    forwarded so: their strided loads stay interleaved)."""
    read = set()
    for _, items in statement_paths(tree):
        for leaf, _ in items:
            if leaf.ops.get("fma"):
                read |= {a.buffer for a in leaf.accesses if not a.is_write and a.buffer in registers}
    return frozenset(read)


def _tile_evicted(out: Access, around: list[LoopNode], body: list[LoopNode], spec: HardwareSpec) -> bool:
    """Whether the output lines written between two runs of a reduction on one accumulator tile (the tile loops in
    `body`, the loops in `around` that walk the output inside the reduction loop that revisits the tile) fit L1 but
    hold more lines in one of its sets than it has ways, so that the tile is evicted before it is reloaded."""
    if not spec.l1_ways or not spec.l1_bytes:
        return False
    out_vars = _access_vars(out)
    walk = []
    for lp in reversed(around):
        if lp.var not in out_vars:
            break  # the reduction loop that comes back to the tile
        walk.append(lp)
    else:
        return False  # no loop comes back to it: each tile is loaded once
    ext = {v: 1 for v in out_vars} | {lp.var: lp.extent for lp in walk + body if lp.var in out_vars}
    layout = LineLayout.of(out.mem_shape, out.dtype_bytes, spec.line_bytes)
    acc = [(tuple(out.mem_indices), ())]
    sets = spec.l1_bytes // (spec.line_bytes * spec.l1_ways)
    counter = default_counter()
    crowd = counter.crowding(layout, acc, ext, (sets,))
    # conflict misses only: a walk too large for L1 as a whole streams, and the prefetchers bring its lines back
    return crowd is not None and crowd[0] > spec.l1_ways and counter.count(layout, acc, ext) <= sets * spec.l1_ways


def _tiles_in_body(body: list[LoopNode], out_vars: set[str]) -> bool:
    """Whether the body (loops innermost first) unrolls a reduction loop inside a loop over output tiles: groups of
    chains, one tile after another."""
    return any(lp.var in out_vars and lp.extent > 1 and lp.kind != "vectorized"
               and any(r.var not in out_vars and r.extent > 1 for r in body[:k]) for k, lp in enumerate(body))


def statement_cycles(leaf: StmtLeaf, path: list[LoopNode], spec: HardwareSpec, cfg: KernelConfig,
                     details: dict | None = None, registers: frozenset[str] = frozenset(),
                     fma_inputs: frozenset[str] = frozenset()) -> tuple[float, str]:
    """Cycles of all executions of `leaf` on one core (no parallelism) and the dominant bound's name;
    `registers` are the intermediates held in registers (`register_buffers`: no loads or stores), `fma_inputs`
    those of them that multiply-adds read (`multiply_add_inputs`);
    `details`, when given, receives the body's numbers (for reports and tests)."""
    lanes = spec.vector_lanes(32)
    fp, lane_calls, ints, outer, body, by_llvm = _split_loops(leaf, path, spec, cfg)
    vec_loop = next((lp for lp in body if lp.kind == "vectorized"), None)
    writes = [a for a in leaf.accesses if a.is_write]
    out = writes[0] if writes else None
    # the same element read twice (x * x) is one load after LLVM's common-subexpression elimination
    reads = list({(a.buffer, tuple(map(str, a.indices))): a for a in leaf.accesses if not a.is_write}.values())
    out_vars = _access_vars(out) if out is not None else set()
    vec = vec_loop.var if vec_loop is not None else None
    if vec is not None and out is not None and vec not in out_vars:
        # TVM cannot vectorize a reduction over the vector lanes: the loop runs serially.
        outer = outer + [vec_loop]
        body = [lp for lp in body if lp is not vec_loop]
        vec_loop, vec = None, None
    in_regs = out is not None and out.buffer in registers
    in_memory = [a for a in reads if a.buffer not in registers]

    def no_gathers(var: str) -> bool:  # vectorizing along `var` reads memory contiguously or in small strides
        return all(_access_kind(a, var) != "gather" for a in in_memory)

    lanes_unrolled = None
    slp_fma = False  # a multiply-add body whose copies LLVM's SLP vectorizer packed
    vectorized_iterating = False  # LLVM's loop vectorizer took the loop that iterates the body
    if vec_loop is not None and in_regs and cfg.auto_vectorize:
        # a TVM vector written to a register array is only its elements: LLVM may vectorize the loop around
        lanes_unrolled, vec_loop, vec = vec_loop, None, None
    if vec_loop is None and cfg.auto_vectorize and out is not None:
        # LLVM's loop vectorizer takes the innermost loop left after TVM's unrolling when it is a contiguous
        # spatial loop: the statement's own innermost loop (even one LLVM would unroll; guards become masked
        # loads), or the innermost iterating loop when any loops inside it that LLVM unrolls are free of guards
        # (theirs stay branches, which stops it); remainders run as narrower vectors here
        innermost = next((lp.var for lp in reversed(path) if lp.extent > 1), None)
        masked = cfg.uniform_guard_masks and not leaf.predicated and bool(outer) and not leaf.ops.keys() & FP_OPS \
            and outer[-1].var not in leaf.guard_vars
        branchy_body = bool(by_llvm) and (leaf.predicated or any(a.conditional for a in reads)) and not masked
        around = outer[-1] if outer and not branchy_body else None  # the iterating loop LLVM may vectorize
        if by_llvm and by_llvm[0].var == innermost:
            cand, iterating = by_llvm[0], False
        elif around is not None:
            cand, iterating = around, True
        else:
            cand = None
        if cand is not None and cand.kind == "serial" and cand.extent >= cfg.auto_vectorize_min \
                and (_access_kind(out, cand.var) == "contig" or (in_regs and cand.var in out_vars)) \
                and no_gathers(cand.var):
            vec_loop, vec = cand, cand.var
        elif cfg.gather_vectorize and leaf.ops.get("fma") and around is not None and not in_regs \
                and around.kind == "serial" and around.var in out_vars and around.extent >= cfg.auto_vectorize_min:
            # with AVX-512 the loop around a multiply-add body that leaves no contiguous loop (the channel loop of
            # a depthwise convolution) is vectorized with a gather or scatter per operand. Copies, selects and max
            # are not (pad and pooling candidates' assembly): the multiply-adds pay for the gathers in LLVM's cost
            # model
            cand, iterating = around, True
            vec_loop, vec = cand, cand.var
        if vec_loop is not None and vec_loop is cand:
            if iterating:
                outer = outer[:-1]
                body = body + [cand]
                vectorized_iterating = True
            lanes_unrolled = None
    if lanes_unrolled is not None:  # not vectorized around after all: the TVM vector stays
        vec_loop, vec = lanes_unrolled, lanes_unrolled.var
    if vec_loop is None and cfg.slp_vectorize and out is not None:
        # LLVM's SLP vectorizer packs the copies of an unrolled spatial loop that writes contiguous elements
        # (not across guarded loads, each copy's guard being a branch, unless the guard fails only in edge copies)
        # the relaxations below hold for bodies whose reduction loops iterate outside (checked in the assembly: with
        # the reduction window's loop unrolled too, most copies stay scalar)
        plain = not any(b.extent > 1 and b.var not in out_vars for b in body)

        def packs(a: Access, lp: LoopNode) -> bool:  # the SLP vectorizer packs the copies of a multiply-add's load
            kind = _access_kind(a, lp.var)
            if kind in ("contig", "scalar") or cfg.slp_strided:
                return True
            others = {b.var: b.extent for b in body if b is not lp and b.extent > 1}
            return kind == "strided" and cfg.slp_strided_apart and plain \
                and not _copies_overlap(a, _vector_stride(a, lp.var) or 1, others)

        vec_loop = next((lp for lp in body if lp.extent >= cfg.slp_min and lp.var in out_vars
                         and _access_kind(out, lp.var) == "contig"
                         and (lp.var not in leaf.guard_vars
                              or (plain and lp.extent >= lanes and lp not in by_llvm
                                  and guarded_lanes(leaf, lp.var, lp.extent, path) <= cfg.slp_guarded_lanes
                                  and not (cfg.edge_switches and edge_switch_guarded(leaf, outer))))
                         and no_gathers(lp.var)
                         and (not leaf.ops.get("fma") or all(packs(a, lp) for a in in_memory))), None)
        vec = vec_loop.var if vec_loop is not None else None
        slp_fma = vec_loop is not None and bool(leaf.ops.get("fma"))
    e_v = vec_loop.extent if vec_loop is not None else 1
    llvm_vector = vec_loop is not None and vec_loop.kind != "vectorized"  # vectorized by LLVM, not TVM
    vec_lanes = spec.llvm_vector_bits // 32 if llvm_vector and cfg.llvm_vector_width and spec.llvm_vector_bits \
        else lanes
    vops = _vector_ops(e_v, vec_lanes) if vec_loop is not None else 1
    pieces = _memory_pieces(e_v, vec_lanes) if vec_loop is not None else 1
    unrolled = {lp.var: lp.extent for lp in body if lp is not vec_loop and lp.extent > 1
                and (lp.kind != "vectorized" or lp is lanes_unrolled)}
    stmts = math.prod(unrolled.values())
    is_update = out is not None and any(a.buffer == out.buffer for a in reads)
    fp_ops = stmts * vops * fp
    op_lanes = min(e_v, vec_lanes)  # lanes of one FP operation as issued (joined half vectors issue as full ones)
    guarded = next((a for a in reads if a.conditional), None)
    # guards (padding checks) depend on the guarded load's indices only: LLVM computes them once per distinct
    # index in the unrolled body, not once per statement instance
    sites = _distinct(guarded, unrolled) * (vops if _access_kind(guarded, vec) != "scalar" else 1) if guarded \
        else stmts * vops
    int_ops = sites * ints * cfg.int_cost
    inner_iter = outer[-1] if outer else None
    loads = stores = gathers = shuffles = 0.0
    # inserts or extracts per widened vector access (a TVM vector of e_v lanes moved in more pieces than registers)
    widen = pieces - vops if cfg.widen_cost and vec_loop is not None and vec_loop.kind == "vectorized" else 0
    widened = 0.0  # such shuffles in one body
    outputs = _distinct(out, unrolled) * vops if out is not None else 0  # output vectors of one body
    # LLVM's LICM loads an operand that does not change with the innermost iterating loop once before it (an
    # unconditional load of a noalias buffer), and its cost is shared by that loop's iterations, when the hoisted
    # vectors and the body's outputs fit the registers (otherwise the assembly rebuilds most of them in the loop).
    # Credited for operands assembled lane by lane, where it changes the body's cost by large factors
    # (docs/measurements-costmodel.md)
    # (access, kind, distinct elements in the body, elements loaded per body, invariant in the innermost loop)
    operands = []
    for a in in_memory:
        if is_update and a.buffer == out.buffer:
            continue
        kind = _access_kind(a, vec)
        invariant = inner_iter is not None and not a.conditional and inner_iter.var not in _access_vars(a)
        distinct = n = _distinct(a, unrolled)
        if cfg.register_reuse and kind in ("contig", "scalar"):
            # registers left by the accumulators (all of them when the accumulators go through memory)
            free = cfg.registers - outputs if outputs <= cfg.registers else cfg.registers
            n *= _register_reloads(a, body, unrolled, max(1.0, free))
        operands.append((a, kind, distinct, n, invariant))

    def hoistable(kind: str, invariant: bool) -> bool:  # a gathered or strided operand LLVM assembles once
        return cfg.hoist_invariant and kind in ("gather", "strided") and invariant

    hoisted_vectors = sum(n * vops for _, kind, _, n, inv in operands if hoistable(kind, inv))
    fits = hoisted_vectors + outputs <= cfg.registers
    # the share of hoisted gathered vectors spilled to the stack (`hoisted_gathers_spill`), else None: rebuilt
    spilled_gathers = min(1.0, (hoisted_vectors + outputs - cfg.registers) / hoisted_vectors) \
        if cfg.hoisted_gathers_spill and llvm_vector and not fits and hoisted_vectors else None
    # splats of operands invariant in the innermost iterating loop that LLVM builds again in the loop: the loop holds
    # this statement alone, and they do not fit the registers beside the outputs (`splat_lane_cycles`)
    # a TVM vector wider than a register whose lane count is not a power of two (LLVM's vectorizers pick whole
    # registers): its invariant operands are assembled lane by lane (`hoisted_by_lane`, `splat_lane_cycles`)
    odd_tvm_vector = vec_loop is not None and vec_loop.kind == "vectorized" and e_v > lanes and bool(e_v & (e_v - 1))
    splats = sum(distinct for _, kind, distinct, _, inv in operands if kind == "scalar" and inv)
    rebuilt_splats = bool(cfg.splat_lane_cycles) and odd_tvm_vector and inner_iter is not None \
        and splats * vops + outputs > cfg.registers \
        and all(other is leaf for other, _ in _subtree_paths(inner_iter, []))
    broadcasts = 0.0  # operands invariant in a loop LLVM vectorized: broadcast once before its vector iterations
    preheader = 0.0  # cycles before each run of the innermost iterating loop
    hoisted = 0.0  # vectors of contiguous or broadcast operands that LLVM loads once per run of the innermost loop
    for a, kind, distinct, n, invariant in operands:
        share = inner_iter.extent if hoistable(kind, invariant) and fits else 1
        if cfg.hoisted_spill_cycles and invariant and kind in ("contig", "scalar"):
            hoisted += distinct * (pieces if kind == "contig" else 1)
        if kind == "contig":
            loads += n * pieces
            widened += n * widen
            if cfg.hoisted_by_lane and odd_tvm_vector and invariant:
                preheader += n * e_v * cfg.preheader_lane_cycles
        elif kind == "strided" and vec_loop.kind == "vectorized":
            # TVM's strided vector: one scalar load per distinct element, one insert per lane
            loads += _lane_loads(a, vec, e_v, unrolled) / share
            shuffles += n * e_v * cfg.lane_insert_cost / share
        elif kind == "strided":
            stride = _vector_stride(a, vec) or 1
            if (not slp_fma and cfg.gapped_strides_gather and _interleave_has_gaps(a, stride, unrolled)) or (
                    cfg.overlapping_strides_gather and vectorized_iterating and leaf.ops.get("fma")
                    and _copies_overlap(a, stride, unrolled)) or (
                    cfg.guarded_strides_gather and not slp_fma and leaf.ops.get("fma") and a.conditional
                    and vec in leaf.guard_vars):
                gathers += n * e_v / share
            else:  # LLVM's vectorizers interleave: `stride` full-width loads and as many shuffles per vector
                masked = failing_copies(leaf, unrolled, path) if cfg.guarded_copies_gather and vectorized_iterating \
                    and a.conditional and out is not None and out.buffer in fma_inputs else 0.0
                gathers += masked * n * e_v / share
                loads += (1 - masked) * n * vops * stride / share
                shuffles += (1 - masked) * n * vops * stride / share
        elif kind == "gather" and spilled_gathers is not None and hoistable(kind, invariant):
            gathers += n * e_v / inner_iter.extent
            loads += n * vops * spilled_gathers
        elif kind == "gather":
            gathers += n * e_v / share
        else:
            loads += n
            if vectorized_iterating and vops > 1 and not a.conditional:
                broadcasts += n
            if rebuilt_splats and invariant:
                shuffles += distinct * e_v * cfg.splat_lane_cycles
    chain = 0.0
    reload = 0.0  # cycles per body of storing and reloading register accumulators between runs of the loop
    acc_in_memory = False
    overlap_rows = 0  # rows of accumulators whose chains start one after another (`partial_overlap_cycles`)
    acc_stores = 0  # stores of accumulators that go through memory (counted again on the load ports when so set)
    if out is not None:
        kind = _access_kind(out, vec)
        n_out = _distinct(out, unrolled) * (e_v if kind == "gather" else 1 if kind == "scalar" else vops)
        moved = n_out // vops * pieces if kind == "contig" else n_out  # loads or stores of all outputs
        out_widened = n_out // vops * widen if kind == "contig" else 0  # their inserts, or their extracts
        if is_update and inner_iter is not None and inner_iter.var not in out_vars and n_out <= cfg.registers:
            # accumulators stay in registers across the reduction loop: a chain of dependent FP ops each
            chain = stmts * vops / max(n_out, 1) * cfg.fma_latency
            if len(outer) > 1 and outer[-2].var in out_vars:
                evicted = cfg.evicted_reload_cycles and _tile_evicted(out, outer[:-1], body, spec)
                reload = moved * (cfg.evicted_reload_cycles if evicted else cfg.accumulator_reload_cycles) \
                    / inner_iter.extent
            if cfg.join_half_vectors_above and vec_loop is not None and vec_loop.kind == "vectorized" \
                    and 2 * e_v == lanes and n_out * e_v > cfg.join_half_vectors_above \
                    and any(lp is not vec_loop and lp.extent > 1 and _vector_stride(out, lp.var) == e_v for lp in body):
                fp_ops /= 2
                op_lanes = 2 * e_v
        elif in_regs:
            pass
        elif is_update:
            acc_in_memory = True
            loads += moved
            stores += moved
            acc_stores = moved if cfg.accumulator_stores_load else 0
            if cfg.evicted_reload_cycles and inner_iter is not None and _tile_evicted(out, outer, body, spec):
                # every body loads and stores its outputs (a reduction unrolled inside it, or too many accumulators):
                # when the walk to the next body on the same tile evicts it, each of those loads waits on L2
                reload = moved * cfg.evicted_reload_cycles
            elif inner_iter is not None and stmts * vops > n_out \
                    and (inner_iter.var in out_vars or _tiles_in_body(body, out_vars)):
                # the body runs a reduction's chains from loaded accumulators and stores them, and then the loop around
                # (or the body itself) moves on to another tile: the same wait between two tiles' chains as for
                # accumulators kept in registers (Zen 4, BERT-base's 128 x 768 x 3072 dense layer: a body of 4 row
                # groups x 32 reduction steps of a 4 x 32 tile ran 3.44 ms, the tile kept over the whole reduction
                # 3.17; benchmarks/accumulator_reload.py: a reload costs about a cycle per accumulator there)
                reload = moved * cfg.accumulator_reload_cycles
            widened += 2 * out_widened
            # LLVM's vectorizers move a remainder of 3, 5, 6 or 7 lanes as a masked register on AVX-512 (the TVM
            # vector's remainders, and LLVM's of 2^k lanes, are narrower registers that end where the row ends)
            llvm_lanes = spec.llvm_vector_bits // 32 or lanes
            tail = e_v % llvm_lanes
            if cfg.partial_overlap_cycles and llvm_vector and kind == "contig" and tail & (tail - 1) \
                    and spec.vector_bits >= 512 \
                    and tail_overlaps_next_row(out, e_v, -(-e_v // llvm_lanes) * llvm_lanes):
                overlap_rows = max(1, n_out // vops)
            spill = max(0, n_out - cfg.registers) if inner_iter is not None and inner_iter.var not in out_vars else 0
            loads += spill
        else:
            stores += moved
            widened += out_widened
    if hoisted and hoisted > cfg.registers - (0 if acc_in_memory else outputs):
        preheader += hoisted * cfg.hoisted_spill_cycles
    if broadcasts and cfg.hoist_invariant:
        # the broadcasts beyond the registers left by the outputs are spilled once and each vector iteration
        # reads them back from the stack (seen in the assembly of unrolled 1x1 convolutions)
        spilled = max(0.0, broadcasts - max(0.0, cfg.registers - outputs))
        stores += spilled
        loads += spilled * vops
    int_ops += index_ops(leaf.accesses, inner_iter.var if inner_iter is not None else None, unrolled, cfg)
    uops = fp_ops + int_ops + loads + stores + gathers + shuffles + widened + 1
    if is_update and not chain and stmts * vops > n_out:
        # the reduction is unrolled inside the body: each accumulator's chain runs through it, and the
        # out-of-order window overlaps the chains of only as many bodies as it holds
        chain = stmts * vops / max(n_out, 1) * cfg.fma_latency / max(1.0, cfg.reorder_window / uops)
    if overlap_rows:
        chain = max(chain, overlap_rows * (max(1.0, stmts * vops / max(n_out, 1)) * cfg.fma_latency
                                           + cfg.partial_overlap_cycles))
    large = (acc_in_memory and uops > cfg.large_body_uops) or (cfg.huge_body_uops and uops > cfg.huge_body_uops)
    width = cfg.large_body_width if large else cfg.issue_width  # micro-ops/cycle
    if cfg.fma_issue_width and leaf.ops.get("fma"):
        width = min(width, cfg.fma_issue_width)
    # pipe slots: an operation wider than the datapath occupies a pipe for `pump` cycles (Zen 4's 512-bit ones)
    pumped = cfg.pump if op_lanes > lanes // cfg.pump else 1
    fp_slots = fp_ops * pumped
    store_slots = pumped if cfg.pump_stores else 1
    overhead = cfg.loop_overhead if inner_iter is not None else 0.0  # the iterating loop's increment and branch
    serial_gathers = gathers * cfg.gather_serial_lane_cycles if llvm_vector else 0.0  # gather instructions
    load_ports = cfg.narrow_load_ports if cfg.narrow_load_ports and op_lanes < lanes else cfg.load_ports
    per_body = {
        "fp": (fp_slots + widened * cfg.widen_cost) / cfg.fp_pipes,
        "load": (loads + acc_stores) * (pumped if cfg.pump_loads else 1) / load_ports + gathers * cfg.gather_cost,
        "store": stores * store_slots / cfg.store_ports,
        "shuffle": shuffles / cfg.shuffle_ports,
        "issue": uops / width,
        "latency": chain,
        "branch": overhead if cfg.loop_overhead_overlaps else 0.0,
    }
    bound = max(per_body, key=per_body.get)
    # scalarized calls serialize the body (every vector register is caller-saved): added, not overlapped
    calls = stmts * e_v * lane_calls
    sites = stmts * e_v * cfg.libm_calls(leaf.ops) if lane_calls else 0
    if cfg.cold_call_cycles and sites > cfg.hot_call_sites:
        calls += sites * cfg.cold_call_cycles
    if sites and vec_loop is not None and vec_loop.kind == "vectorized" and e_v >= lanes:
        calls += sites * cfg.libm_vector_lane_cycles
    body_cycles = per_body[bound] + calls + reload + serial_gathers \
        + (0.0 if cfg.loop_overhead_overlaps else overhead)
    if preheader:
        body_cycles += preheader / inner_iter.extent
    executions = leaf.trips / max(1, stmts * e_v)
    if cfg.licm_statements:
        executions /= licm_hoisted(leaf, path)
    if details is not None:
        details.update(per_body, lanes=e_v, vector_ops=vops, statements=stmts, loads=loads, stores=stores,
                       gathers=gathers, widened=widened, int_ops=int_ops, fp_ops=fp_ops, chain=chain,
                       executions=executions, body_cycles=body_cycles,
                       inner_extent=inner_iter.extent if inner_iter is not None else 1,
                       inner_is_reduction=bool(inner_iter is not None and inner_iter.var not in out_vars),
                       accumulators=n_out if out is not None else 0, libm_calls=calls, preheader=preheader,
                       reload=reload, uops=uops, acc_in_memory=acc_in_memory, llvm_vectorized=llvm_vector,
                       serial_gathers=serial_gathers, overlap_rows=overlap_rows)
    return executions * body_cycles, bound


def statement_paths(tree: LoopTree):
    """Per root nest of `tree`: the nest and its statements, each with the loops around it (outer to inner)."""
    def visit(node, path):
        if isinstance(node, StmtLeaf):
            yield node, path
            return
        new = path + [node] if isinstance(node, LoopNode) else path
        for child in getattr(node, "children", ()):
            yield from visit(child, new)

    for root in tree.roots:
        yield root, list(visit(root, []))


def loop_overhead_cycles(tree: LoopTree, cfg: KernelConfig) -> float:
    """Overhead of iterating loops that contain other loops (not unrolled): `loop_overhead` per iteration."""
    total = 0.0

    def visit(node, outer_trips: int) -> None:
        nonlocal total
        if not isinstance(node, LoopNode):
            return
        trips = outer_trips * node.extent
        if node.kind in ("serial", "parallel") and node.extent > 1 and any(
                isinstance(c, LoopNode) for c in node.children):
            total += trips * cfg.loop_overhead
        for c in node.children:
            visit(c, trips)

    for r in tree.roots:
        visit(r, 1)
    return total


def libm_lane_cycles(tree: LoopTree, cfg: KernelConfig | None = None) -> float:
    """Cycles of all libm calls (exp, erf, ...) of the program on one core: one call per element, each
    `KernelConfig.libm_cycles`; what the calls cost no matter how the code around them is vectorized."""
    cfg = cfg or KernelConfig()
    return sum(trips * cfg.call_costs(leaf.ops)[1] for leaf, trips in statement_trips(tree, cfg))


def statement_details(tree: LoopTree, spec: HardwareSpec, cfg: KernelConfig
                      ) -> list[tuple[StmtLeaf, float, str, dict]]:
    """Every statement of `tree` with its cycles, dominant bound and body details, priced as `kernel_cycles` prices
    it (the tree's register-held intermediates and multiply-add inputs), for reports and checks."""
    registers = register_buffers(tree, spec, cfg)
    fma_inputs = multiply_add_inputs(tree, registers)
    out = []
    for _, items in statement_paths(tree):
        for leaf, path in items:
            det: dict = {}
            cycles, bound = statement_cycles(leaf, path, spec, cfg, det, registers, fma_inputs)
            out.append((leaf, cycles, bound, det))
    return out


def kernel_cycles(tree: LoopTree, spec: HardwareSpec, cfg: KernelConfig | None = None) -> KernelEstimate:
    """Compute cycles of the whole program per core: each root nest's statements divided by its parallel
    speed-up on `spec.cores` (ceil load imbalance over the first parallel loop), plus the lines it reads that
    other cores wrote (`remote_lines`)."""
    cfg = cfg or KernelConfig()
    per_core = serial = 0.0
    bounds: dict[str, float] = {}
    registers = register_buffers(tree, spec, cfg)
    fma_inputs = multiply_add_inputs(tree, registers)
    remote = remote_lines(tree, spec.cores) if cfg.remote_line_cycles else [0.0] * len(tree.roots)
    for (root, items), lines in zip(statement_paths(tree), remote, strict=True):
        nest = 0.0
        for leaf, path in items:
            c, b = statement_cycles(leaf, path, spec, cfg, registers=registers, fma_inputs=fma_inputs)
            nest += c
            bounds[b] = bounds.get(b, 0.0) + c
        if lines:
            nest += lines * cfg.remote_line_cycles
            bounds["remote"] = bounds.get("remote", 0.0) + lines * cfg.remote_line_cycles
        serial += nest
        per_core += nest / nest_speedup(root, spec.cores)
    return KernelEstimate(per_core, serial, bounds)


def nest_speedup(root, cores: int) -> float:
    """Speed-up of a root nest on `cores`: its first parallel loop's extent over the rounds it takes (imbalance)."""
    par = _first_parallel_extent(root)
    return par / math.ceil(par / cores) if par > 1 else 1.0


def _first_parallel_loop(root) -> LoopNode | None:
    stack = [root]
    while stack:
        n = stack.pop()
        if isinstance(n, LoopNode):
            if n.kind == "parallel":
                return n
            stack.extend(n.children)
    return None


def _first_parallel_extent(root) -> int:
    loop = _first_parallel_loop(root)
    return loop.extent if loop is not None else 1


def _split_by_thread(acc: Access, loop: LoopNode | None) -> tuple | None:
    """How a nest splits `acc`'s buffer between threads: its indices along the parallel loop alone (every other
    loop at 0, the loop renamed), with the loop's extent; None for a serial nest (all on the calling thread)."""
    if loop is None or loop.extent <= 1:
        return None
    only = {loop.var: loop.extent}
    common = {loop.var: IndexExpr.var("_thread_split")}
    return loop.extent, tuple(str(ix.specialize(only).substitute(common, {"_thread_split": loop.extent}))
                              for ix in acc.indices)


def _thread_lines(acc: Access, loop: LoopNode | None, path: list[LoopNode], cores: int,
                  line_bytes: int) -> list[tuple[int, int]] | None:
    """Per thread, the first and last cache line of `acc`'s buffer that a nest touches through `acc`, with TVM's
    static chunks of the parallel loop `loop` (a serial nest: all on thread 0); None for an opaque index."""
    if any(ix.bounds is not None for ix in acc.indices):
        return None
    flat = IndexExpr.constant(0)
    strides = [math.prod(acc.shape[i + 1:]) for i in range(len(acc.shape))]
    for ix, stride in zip(acc.indices, strides, strict=True):
        flat = flat.add(ix, stride)
    inner = {lp.var: lp.extent for lp in path if lp is not loop}

    def lines(lo: float, hi: float) -> tuple[int, int]:
        return int(lo) * acc.dtype_bytes // line_bytes, int(hi) * acc.dtype_bytes // line_bytes

    if loop is None or loop.extent <= 1:
        return [lines(*flat.interval(inner))] + [(1, 0)] * (cores - 1)
    chunk = -(-loop.extent // cores)
    out = []
    for t in range(cores):
        size = min(loop.extent, (t + 1) * chunk) - t * chunk
        if size <= 0:
            out.append((1, 0))
            continue
        mine = inner | {loop.var: size}  # the thread's iterations t * chunk + [0, size)
        out.append(lines(*flat.substitute({loop.var: IndexExpr.var(loop.var, 1, t * chunk)}, mine).interval(mine)))
    return out


def remote_lines(tree: LoopTree, cores: int, line_bytes: int = 64) -> list[float]:
    """Per root nest, the cache lines it reads of buffers that an earlier nest wrote and that the two nests split
    differently between threads (one of them serial, or another split along their parallel loops): with TVM's
    static chunks, the lines in each thread's span of the buffer outside the span the writer gave that thread,
    at most all but 1/cores of them. Two nests whose parallel loops differ but give each thread the same rows
    (a fused output loop and an element-wise epilogue's) share nothing."""
    written: dict[str, tuple[tuple | None, tuple, int]] = {}  # buffer -> (split, writer's (access, loop, path), lines)
    out: list[float] = []
    for root, items in statement_paths(tree):
        loop = _first_parallel_loop(root)
        lines = 0.0
        counted: set[str] = set()
        for leaf, path in items:
            for acc in leaf.accesses:
                if acc.is_write or acc.buffer not in written or acc.buffer in counted:
                    continue
                split, writer, n_lines = written[acc.buffer]
                mine = _split_by_thread(acc, loop)
                if (split, mine) == (None, None) or split == mine:
                    continue
                counted.add(acc.buffer)
                spans = _thread_lines(*writer, cores, line_bytes)  # only for buffers read under another split
                reads = _thread_lines(acc, loop, path, cores, line_bytes)
                bound = n_lines * (cores - 1) / cores
                if spans is None or reads is None:
                    lines += bound
                    continue
                away = sum(max(0, rh - rl + 1) - max(0, min(rh, wh) - max(rl, wl) + 1)
                           for (rl, rh), (wl, wh) in zip(reads, spans, strict=True))
                lines += min(bound, away)
        for leaf, path in items:
            for acc in leaf.accesses:
                if acc.is_write and acc.storage_shape is None:  # allocated inside a loop: never leaves its nest
                    size = math.prod(acc.shape) * acc.dtype_bytes
                    written[acc.buffer] = (_split_by_thread(acc, loop), (acc, loop, path), -(-size // line_bytes))
        out.append(lines)
    return out
