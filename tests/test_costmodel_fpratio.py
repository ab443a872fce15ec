"""Cycles per FP lane of generated code: a rate that does not depend on the loop counts being right."""

from __future__ import annotations

import pytest
import tvm
from tir_programs import matmul_schedule, splat_kernel
from tvm import s_tir, te

import drytune as dt
from drytune.costmodel import asm
from drytune.costmodel.fpratio import (
    cycles_per_fp_lane,
    fp_lanes,
    repair_fma_counts,
    stack_accesses_per_fp_lane,
    tir_fma_lanes,
    tir_fp_lanes,
)
from drytune.costmodel.kernel import KernelConfig, libm_lane_cycles
from drytune.costmodel.listsched import ListScheduler, SchedConfig
from drytune.costmodel.looptree import LoopTree

# Outer loop of 10 (or of an unreadable bound), inner loop of 4 trips with two 512-bit FMAs (32 lanes).
LOOPS_X86 = """
main_compute_:
    xorl    %eax, %eax
.LBB0_1:
    movq    $-256, %rcx
    vxorps  %xmm0, %xmm0, %xmm0
.LBB0_2:
    vmovups 256(%rsi,%rcx), %zmm1
    vfmadd231ps (%rdx,%rcx){1to16}, %zmm1, %zmm0
    vfmadd231ps 64(%rdx,%rcx){1to16}, %zmm1, %zmm0
    addq    $64, %rcx
    jne     .LBB0_2
    vmovups %zmm0, (%rdi,%rax)
    incq    %rax
    cmpq    $10, %rax
    jne     .LBB0_1
    retq
"""


def _before_fp_loop(extra: str) -> str:
    """LOOPS_X86 with `extra` in the outer loop's block, before the inner FP loop."""
    return LOOPS_X86.replace("    vxorps  %xmm0, %xmm0, %xmm0\n", "    vxorps  %xmm0, %xmm0, %xmm0\n" + extra)


def _analyzed(text: str) -> tuple[asm.AsmProgram, asm.InstructionCounts]:
    """The parsed x86 program and its execution counts (no IR loops to map)."""
    prog = asm.parse_asm(text, "x86")
    return prog, asm.count_instructions(prog, asm.map_loops(prog, []))


def _fp_lane_runs(counts: asm.InstructionCounts) -> float:
    """FP lane operations the program executes, by its counts."""
    return sum(b.executions * fp_lanes(b.block.instructions) for b in counts.blocks)


def test_rate_is_inner_loop_cycles_per_lane_whatever_the_counts():
    sched = ListScheduler.for_spec(dt.spec_for("x86-avx512"))
    rates = []
    for text in (LOOPS_X86, LOOPS_X86.replace("cmpq    $10, %rax", "cmpq    %r9, %rax")):
        prog = asm.parse_asm(text, "x86")
        counts = asm.count_instructions(prog, asm.map_loops(prog, []))
        inner = prog.functions[0].blocks[2]
        assert fp_lanes(inner.instructions) == 32
        assert fp_lanes(prog.functions[0].blocks[1].instructions) == 0  # vxorps zeroing is no arithmetic
        rates.append(cycles_per_fp_lane(prog, counts, sched))
        assert rates[-1] == pytest.approx(sched.block_cycles(inner.instructions, True) / 32)
    assert rates[0] == rates[1]  # outer trip 10 or an assumed 1: the same rate



def test_gathers_before_the_multiply_add_loop_are_cycles_outside_the_fp_code():
    """Four 16-lane gathers in the outer loop's block, before the inner loop that multiplies what they gathered: the
    FP rate of the inner loop does not change, and `outside_cycles_per_fp_lane` grows per run of the outer block by at
    least the 16 cycles that the second pair of gathers waits for the two load pipes, over the 4 x 32 FP lanes of the
    inner loop's runs."""
    from drytune.costmodel.fpratio import outside_cycles_per_fp_lane

    sched = ListScheduler.for_spec(dt.spec_for("x86-avx512"), SchedConfig(gather_lane_cycles=1.0))
    gathers = "".join(f"    vgatherdps (%r8,%zmm30,4), %zmm{20 + g} {{%k1}}\n" for g in range(4))
    rates, outside = [], []
    for text in (LOOPS_X86, _before_fp_loop(gathers)):
        prog, counts = _analyzed(text)
        rates.append(cycles_per_fp_lane(prog, counts, sched))
        outside.append(outside_cycles_per_fp_lane(prog, counts, sched))
    assert rates[0] == rates[1]
    assert 0 < outside[0] < outside[1]
    assert sched.table.resources["load"] == 2
    assert outside[1] - outside[0] >= 16 / (4 * 32)


def _guarded_copy_loop(elements: int) -> str:
    """LOOPS_X86 with a second inner loop after the FP one that does no FP work: each iteration copies `elements`
    inputs, each behind a guard that stores a zero instead (a padded input's copy, branches in place of selects)."""
    body = ""
    for e in range(elements):
        body += (f"    cmpq    $56, %r{8 + e}\n    jae     .LBB0_{20 + 3 * e}\n.LBB0_{19 + 3 * e}:\n"
                 f"    vmovss  {4 * e}(%r12,%r10,4), %xmm1\n    vmovss  %xmm1, {4 * e}(%r13,%r10,4)\n"
                 f"    jmp     .LBB0_{21 + 3 * e}\n.LBB0_{20 + 3 * e}:\n    movl    $0, {4 * e}(%r13,%r10,4)\n"
                 f".LBB0_{21 + 3 * e}:\n")
    loop = f"    movq    $-64, %r10\n.LBB0_18:\n{body}    incq    %r10\n    jne     .LBB0_18\n"
    return LOOPS_X86.replace("    vmovups %zmm0, (%rdi,%rax)\n", "    vmovups %zmm0, (%rdi,%rax)\n" + loop)


def test_a_branchy_loop_outside_the_fp_code_costs_its_dearest_path():
    """`path_cycles`: the copy loop's iteration runs one arm per guarded element, so it costs the header, the copying
    arms and the latch scheduled as one sequence, less than every block scheduled alone and summed; a loop of one
    block costs the same either way."""
    from drytune.costmodel.fpratio import outside_cycles_per_fp_lane

    sched = ListScheduler.for_spec(dt.spec_for("x86-avx512"))
    prog, counts = _analyzed(_guarded_copy_loop(3))
    f = prog.functions[0]
    copy = next(lp for lp in f.loops if not lp.children and not any(
        i.iclass == asm.VEC_FMA for b in lp.blocks for i in f.blocks[b].instructions))
    blocks = [f.blocks[b] for b in sorted(copy.blocks)]
    assert len(blocks) == 1 + 3 * 3  # header, then per element: the copying arm, the zeroing arm, the join
    runs = next(b.executions for b in counts.blocks if b.block.start == copy.header)
    fp_runs = _fp_lane_runs(counts)
    copying = [i for b in blocks if not any(i.text.startswith("movl") for i in b.instructions) for i in b.instructions]
    whole, path = (outside_cycles_per_fp_lane(prog, counts, sched, path_cycles=p) for p in (False, True))
    others = whole - runs * sum(sched.block_cycles(b.instructions) for b in blocks) / fp_runs
    assert path == pytest.approx(others + runs * sched.block_cycles(copying) / fp_runs)
    assert path < whole
    plain, plain_counts = _analyzed(LOOPS_X86)
    assert (outside_cycles_per_fp_lane(plain, plain_counts, sched, path_cycles=True)
            == outside_cycles_per_fp_lane(plain, plain_counts, sched))


def test_blocks_only_leaves_the_loops_outside_the_fp_code_out():
    """`blocks_only`: the guarded copy loop (a scalar version that a runtime alias check may skip) no longer counts,
    the straight-line blocks still do, and so do gathers hoisted before the FP loop."""
    from drytune.costmodel.fpratio import outside_cycles_per_fp_lane

    sched = ListScheduler.for_spec(dt.spec_for("x86-avx512"), SchedConfig(gather_lane_cycles=1.0))
    prog, counts = _analyzed(_guarded_copy_loop(3))
    f = prog.functions[0]
    copy = next(lp for lp in f.loops if len(lp.blocks) > 1 and not lp.children)
    runs = next(b.executions for b in counts.blocks if b.block.start == copy.header)
    fp_runs = _fp_lane_runs(counts)
    whole, blocks_only = (outside_cycles_per_fp_lane(prog, counts, sched, blocks_only=k) for k in (False, True))
    loop = runs * sum(sched.block_cycles(f.blocks[b].instructions) for b in copy.blocks) / fp_runs
    assert blocks_only == pytest.approx(whole - loop)
    assert blocks_only > 0
    gathers = "".join(f"    vgatherdps (%r8,%zmm30,4), %zmm{20 + g} {{%k1}}\n" for g in range(4))
    costs = [outside_cycles_per_fp_lane(*_analyzed(_before_fp_loop(extra)), sched, blocks_only=True)
             for extra in ("", gathers)]
    assert costs[1] - costs[0] >= 16 / (4 * 32)


def test_steady_outside_code_overlaps_unless_it_is_one_long_chain():
    """`steady`: eight independent multiplies before the FP loop cost less per run of the outer block than alone,
    where they wait on one multiply pipe and then their latency; eight multiplies chained through one register,
    each run continuing the last run's chain, still cost their 8 x 3 cycles of latency a run."""
    from drytune.costmodel.fpratio import outside_cycles_per_fp_lane

    spec = dt.spec_for("x86-avx512")
    alone = ListScheduler.for_spec(spec)
    steady = ListScheduler.for_spec(spec, SchedConfig(steady_state=True, steady_state_slope=True))
    independent = "".join(f"    imulq   $3, %r{8 + k}, %r{8 + k}\n" for k in range(8))
    chain = "    imulq   $3, %r11, %r11\n" * 8
    cost = {}
    for name, extra in (("base", ""), ("independent", independent), ("chain", chain)):
        prog, counts = _analyzed(_before_fp_loop(extra))
        runs = next(b.executions for b in counts.blocks if b.block.start == prog.functions[0].blocks[1].start)
        fp_runs = _fp_lane_runs(counts)
        cost[name] = {k: outside_cycles_per_fp_lane(prog, counts, sched, steady=k == "steady") * fp_runs / runs
                      for k, sched in (("alone", alone), ("steady", steady))}
    assert 8 <= cost["independent"]["steady"] < cost["independent"]["alone"]
    assert cost["chain"]["steady"] >= 8 * 3


# Inner loop of three blocks: a guarded load (a padded input read in place), then the two FMAs on what was loaded.
GUARDED_X86 = LOOPS_X86.replace(
    ".LBB0_2:\n    vmovups 256(%rsi,%rcx), %zmm1\n",
    ".LBB0_2:\n    vxorps  %xmm1, %xmm1, %xmm1\n    testq   %r8, %rcx\n    je      .LBB0_4\n.LBB0_3:\n"
    "    vmovups 256(%rsi,%rcx), %zmm1\n.LBB0_4:\n")


def test_merged_loop_blocks_overlap_where_isolated_blocks_add_their_latencies():
    """`merge_loop_blocks`: the three blocks of the guarded inner loop scheduled as one sequence take fewer cycles
    than each alone, summed (the load's latency no longer stands by itself); a one-block loop is unchanged."""
    sched = ListScheduler.for_spec(dt.spec_for("x86-avx512"))
    prog = asm.parse_asm(GUARDED_X86, "x86")
    counts = asm.count_instructions(prog, asm.map_loops(prog, []))
    inner = [b for b in prog.functions[0].blocks if any(i.iclass == asm.VEC_FMA for i in b.instructions)]
    assert len(inner) == 1 and fp_lanes(inner[0].instructions) == 32
    apart, merged = (cycles_per_fp_lane(prog, counts, sched, merge) for merge in (False, True))
    assert merged < apart
    plain = asm.parse_asm(LOOPS_X86, "x86")
    plain_counts = asm.count_instructions(plain, asm.map_loops(plain, []))
    assert (cycles_per_fp_lane(plain, plain_counts, sched, True)
            == cycles_per_fp_lane(plain, plain_counts, sched, False))


# One reduction step of a 6 x 16 register tile: a broadcast and a vector loaded, six FMAs into six accumulators.
TILE_X86 = """
main_compute_:
    movq    $-256, %rcx
.LBB0_1:
    vbroadcastss (%rdx,%rcx), %zmm8
    vmovups 256(%rsi,%rcx), %zmm9
""" + "".join(f"    vfmadd231ps %zmm9, %zmm8, %zmm{k}\n" for k in range(6)) + """    addq    $4, %rcx
    jne     .LBB0_1
    retq
"""


def test_steady_state_prices_a_short_multiply_add_loop_at_its_throughput_not_its_latencies():
    """A loop body of six independent FMAs alone pays the load's and the FMAs' latencies every iteration; with its
    iterations overlapped (`KernelConfig.steady_state_fp_rate`) it takes the four cycles of each accumulator's FMA
    latency, the bound of a tile this small. A loop of additions instead keeps its single-body schedule."""
    spec = dt.spec_for("x86-avx512")
    prog = asm.parse_asm(TILE_X86, "x86")
    counts = asm.count_instructions(prog, asm.map_loops(prog, []))
    alone = cycles_per_fp_lane(prog, counts, ListScheduler.for_spec(spec))
    steady = cycles_per_fp_lane(prog, counts, ListScheduler.for_spec(spec, SchedConfig(steady_state=True)))
    assert steady * 96 == pytest.approx(4.0)
    assert alone > 1.5 * steady
    # as the feature extractor uses it: the steady schedule for units with vector multiply-adds only
    sched, steady_sched = ListScheduler.for_spec(spec), ListScheduler.for_spec(spec, SchedConfig(steady_state=True))
    assert cycles_per_fp_lane(prog, counts, sched, fma_scheduler=steady_sched) == steady
    adds = asm.parse_asm(TILE_X86.replace("vfmadd231ps %zmm9, %zmm8,", "vaddps %zmm9,"), "x86")
    add_counts = asm.count_instructions(adds, asm.map_loops(adds, []))
    assert (cycles_per_fp_lane(adds, add_counts, sched, fma_scheduler=steady_sched)
            == cycles_per_fp_lane(adds, add_counts, sched))
    assert cycles_per_fp_lane(adds, add_counts, steady_sched) < cycles_per_fp_lane(adds, add_counts, sched)


def test_the_feature_extractor_takes_the_steady_state_fp_rate_from_its_kernel_settings():
    """The setting reaches the assembly's FP rate of a real build: a GEMM whose reduction loop around a 4 x 16
    register tile LLVM keeps rolled is priced lower per FP lane with it; the instruction-level cycles keep the
    single-iteration schedule."""
    from drytune.costmodel.cpu_features import FEATURE_NAMES, CPUFeatureExtractor

    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1})
    spec = dt.spec_for({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1})
    sch = matmul_schedule(M=64, N=64, K=512)
    block = sch.get_sblock("C")
    i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, kk, ii, ji)
    sch.vectorize(ji)
    sch.unroll(ii)
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), jo)
    sch.decompose_reduction(block, kk)
    values = {}
    for on in (False, True):
        extractor = CPUFeatureExtractor(target, spec, KernelConfig(steady_state_fp_rate=on))
        values[on] = extractor.extract(sch.mod).values
    fp = FEATURE_NAMES.index("asm_fp_cycles")
    assert values[True][fp] < values[False][fp]
    assert values[True][FEATURE_NAMES.index("ilp_cycles")] == values[False][FEATURE_NAMES.index("ilp_cycles")]


def test_spills_are_stack_accesses_per_fp_lane_in_the_fp_code():
    """The inner loop reads one spilled broadcast per FMA from the stack (2 per 32 lanes) and %rbp is a data
    pointer (no frame), so only the %rsp operands count; the spill store outside any FP unit does not."""
    spilled = LOOPS_X86.replace("(%rdx,%rcx){1to16}", "-64(%rsp)").replace("64(%rdx,%rcx){1to16}", "-128(%rsp)")
    spilled = spilled.replace("vmovups 256(%rsi,%rcx), %zmm1", "vmovups 256(%rbp,%rcx), %zmm1")
    spilled = spilled.replace("    movq    $-256, %rcx\n", "    movq    $-256, %rcx\n    vmovups %zmm3, -64(%rsp)\n")
    for text, expected in ((LOOPS_X86, 0.0), (spilled, 2 / 32)):
        prog = asm.parse_asm(text, "x86")
        counts = asm.count_instructions(prog, asm.map_loops(prog, []))
        assert stack_accesses_per_fp_lane(prog, counts) == pytest.approx(expected)


def test_no_fp_code_gives_no_rate():
    prog = asm.parse_asm("main_compute_:\n    movq %rdi, %rax\n    retq\n", "x86")
    sched = ListScheduler.for_spec(dt.spec_for("x86-avx512"))
    assert cycles_per_fp_lane(prog, asm.count_instructions(prog), sched) is None


def test_tir_fp_lanes_count_every_element_operation():
    A = te.placeholder((16, 32), "float32", name="A")
    B = te.placeholder((32, 8), "float32", name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((16, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((16, 8), lambda i, j: te.exp(C[i, j]) + te.sqrt(C[i, j]) + C[i, j], name="D")
    tree = LoopTree.from_mod(s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, D])})).mod)
    # 16*8*32 FMAs, then per element two adds and a sqrt (one instruction); the exp call is priced apart
    assert tir_fp_lanes(tree) == 16 * 8 * 32 + 16 * 8 * 3
    cfg = KernelConfig()
    assert libm_lane_cycles(tree, cfg) == pytest.approx(16 * 8 * cfg.libm_cycles["exp"])


def _matvec_tree(rows: int, cols: int, with_exp: bool = False) -> LoopTree:
    """y = A x (`rows` x `cols` multiply-adds), optionally followed by an exp of each output."""
    A = te.placeholder((rows, cols), "float32", name="A")
    x = te.placeholder((cols,), "float32", name="x")
    k = te.reduce_axis((0, cols), name="k")
    y = te.compute((rows,), lambda i: te.sum(A[i, k] * x[k], axis=k), name="y")
    out = te.compute((rows,), lambda i: te.exp(y[i]), name="e") if with_exp else y
    return LoopTree.from_mod(s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, x, out])})).mod)


def test_multiply_adds_miscounted_by_the_loop_mapping_are_scaled_to_the_tirs_count():
    """The outer loop of LOOPS_X86 runs 10 times; with its bound in a register the mapping takes 1 trip and counts
    128 FMA lanes where the TIR (10 x 128 multiply-adds) has 1280. The repair scales the inner loop's executions
    by 10 and leaves the blocks without multiply-adds alone; a count within the tolerance, a TIR that calls a
    function (an inlined exp brings FMAs of its own) or a tolerance of 0 leaves the counts as they are."""
    tree = _matvec_tree(10, 128)
    assert tir_fma_lanes(tree) == 1280
    assert tir_fma_lanes(_matvec_tree(10, 128, with_exp=True)) is None
    readable = asm.parse_asm(LOOPS_X86, "x86")
    right = asm.count_instructions(readable, asm.map_loops(readable, []))
    assert repair_fma_counts(readable, right, tree, 1.25) is right
    prog = asm.parse_asm(LOOPS_X86.replace("cmpq    $10, %rax", "cmpq    %r9, %rax"), "x86")
    wrong = asm.count_instructions(prog, asm.map_loops(prog, []))
    assert wrong.get("vec_fma") * 16 == 128
    for tolerance, other_tree in ((0.0, tree), (1.25, _matvec_tree(10, 128, with_exp=True)), (12.0, tree)):
        assert repair_fma_counts(prog, wrong, other_tree, tolerance) is wrong
    fixed = repair_fma_counts(prog, wrong, tree, 1.25)
    assert fixed.get("vec_fma") * 16 == 1280 and fixed.get("vec_fma", 512) == 80
    inner = prog.functions[0].blocks[2].start
    for before, after in zip(wrong.blocks, fixed.blocks, strict=True):
        assert after.executions == before.executions * (10 if before.block.start == inner else 1)
    assert fixed.total == wrong.total + 9 * len(prog.functions[0].blocks[2].instructions) * 4
    assert fixed.fallbacks == wrong.fallbacks + 1


def test_integer_vector_arithmetic_is_no_fp_lane_when_float_lanes_only():
    """LLVM computes a gather's indices with integer vector instructions; counted as FP lanes they made a loop
    look cheap per FP operation. With `float_only` only floating-point vector arithmetic counts (x86 packed FP
    mnemonics, AArch64 f-prefixed ones); conversions are not FP operations of the TIR either."""
    x86 = asm.parse_asm("main_compute_:\n    vpsllq $4, %zmm0, %zmm7\n    vaddps %ymm4, %ymm8, %ymm8\n"
                        "    vcvtdq2ps %ymm1, %ymm2\n    vmaxps %zmm1, %zmm2, %zmm3\n    retq\n", "x86")
    a64 = asm.parse_asm("main_compute_:\n    add v0.4s, v1.4s, v2.4s\n    fadd v3.4s, v4.4s, v5.4s\n"
                        "    fmax v6.4s, v7.4s, v8.4s\n    ret\n", "aarch64")
    for prog, every, floats in ((x86, 16 + 8 + 8 + 16, 8 + 16), (a64, 12, 8)):
        insts = prog.functions[0].instructions
        assert fp_lanes(insts) == every
        assert fp_lanes(insts, float_only=True) == floats


def _parallel_elementwise(parallel: bool) -> s_tir.Schedule:
    """y = max(x, 0.5) * 3 over 4096 elements (two FP operations each), its loop parallel or not."""
    x = te.placeholder((4096,), "float32", name="x")
    y = te.compute((4096,), lambda i: te.max(x[i], tvm.tirx.const(0.5, "float32")) * 3.0, name="y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([x, y])}))
    if parallel:
        sch.parallel(sch.get_loops(sch.get_sblock("y"))[0])
    return sch


def test_a_chunk_loop_llvm_vectorized_runs_its_extent_over_its_step():
    """A parallel body's chunk loop has no constant bounds, so the mapping counts it at the TIR loop's extent (4096);
    LLVM vectorized and unrolled it 32 wide, so its FP lanes came to 32x the TIR's 8192 operations. The repair
    divides its executions by the induction step, as its FP lanes per iteration (64 = 32 x 2) agree with the TIR;
    a loop whose bounds the assembly gives is left alone."""
    from drytune.costmodel.cpu_features import FEATURE_NAMES, CPUFeatureExtractor
    from drytune.costmodel.fpratio import _fp_units, repair_chunk_counts

    target = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
    extractor = CPUFeatureExtractor(tvm.target.Target(target), dt.spec_for(target), KernelConfig())

    def executed_lanes(prog, counts) -> float:
        return sum(n * lanes for _, _, n, lanes in _fp_units(prog, counts))

    for parallel in (False, True):
        sch = _parallel_elementwise(parallel)
        tree = LoopTree.from_mod(sch.mod)
        assert tir_fp_lanes(tree) == 8192
        prog, mapping, counts = asm.analyze_asm(extractor.assembly(sch.mod), "x86", tree.preorder())
        repaired = repair_chunk_counts(prog, mapping, counts, tree)
        if not parallel:
            assert repaired is counts
            continue
        chunk = next(m for m in mapping.matches if m.source == "ir")
        assert chunk.trip == 4096 and asm.induction_step(prog.function(chunk.function), chunk.loop) == 32
        assert executed_lanes(prog, counts) > 30 * 8192
        assert executed_lanes(prog, repaired) == pytest.approx(8192, rel=0.01)
    values = {on: CPUFeatureExtractor(tvm.target.Target(target), dt.spec_for(target), KernelConfig(
        repair_chunk_steps=on)).extract(sch.mod).values for on in (False, True)}  # the parallel one
    vec_mem = FEATURE_NAMES.index("vec_mem")
    assert values[True][vec_mem] < values[False][vec_mem] / 10


def test_units_that_call_libm_leave_the_fp_rate_to_the_per_call_price():
    """exp over a TVM vector of 8 lanes is 8 calls to expf per iteration, with the argument's vsubps the only FP
    lanes. The list scheduler prices the code around the calls (the callee unseen); `libm_cycles` were measured over
    whole kernels of such calls. With `rate_skips_call_units` the calling units leave the rate, and where all the FP
    code calls, the assembly's FP cycles are the libm cycles alone."""
    from drytune.costmodel.cpu_features import FEATURE_NAMES, CPUFeatureExtractor

    target = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}
    x = te.placeholder((64, 64), "float32", name="x")
    y = te.compute((64, 64), lambda i, j: te.exp(x[i, j] - 1.0), name="y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([x, y])}))
    _, j = sch.get_loops(sch.get_sblock("y"))
    sch.vectorize(sch.split(j, [None, 8])[1])
    tree = LoopTree.from_mod(sch.mod)
    fp = FEATURE_NAMES.index("asm_fp_cycles")
    values = {}
    for skip in (False, True):
        extractor = CPUFeatureExtractor(tvm.target.Target(target), dt.spec_for(target),
                                        KernelConfig(rate_skips_call_units=skip))
        text = extractor.assembly(sch.mod)
        prog, _, counts = asm.analyze_asm(text, "x86", tree.preorder())
        assert (cycles_per_fp_lane(prog, counts, extractor.scheduler, skip_calls=skip) is None) == skip
        values[skip] = extractor.extract(sch.mod, text).values[fp]
    libm = libm_lane_cycles(tree, KernelConfig())
    assert values[True] == pytest.approx(libm)
    assert values[False] > libm + 64 * 64  # the scheduled call sequences: more than a cycle per call on top


def test_only_libm_calls_take_a_unit_out_of_the_rate():
    """A parallel launch inside a loop (a call through a pointer) or LLVM's memset of a zeroed buffer leave the
    loop's FP work in the rate; a call of expf or erff takes it out."""
    sched = ListScheduler.for_spec(dt.spec_for("x86-avx512"))
    for call, kept in (("callq   *(%rax)", True), ("callq   memset@PLT", True), ("callq   expf@PLT", False),
                       ("callq   erff", False)):
        step = "    addq    $64, %rcx\n"
        prog = asm.parse_asm(LOOPS_X86.replace(step, f"    {call}\n{step}"), "x86")
        counts = asm.count_instructions(prog, asm.map_loops(prog, []))
        assert (cycles_per_fp_lane(prog, counts, sched, skip_calls=True) is not None) == kept
        assert cycles_per_fp_lane(prog, counts, sched) is not None


def test_splats_of_an_odd_width_vector_are_shuffles_outside_the_fp_code():
    """A 56-lane splat is built with vinsertps, three per 128-bit piece, and joined with wider inserts; at 32 lanes it
    is one broadcast. LLVM builds it before the row loop, in code without FP arithmetic, which the FP rate and the
    stack accesses do not look at: `outside_shuffles_per_fp_lane` counts it, and the feature `asm_outside_shuffles`
    is that rate times the TIR's FP operations."""
    from drytune.costmodel.cpu_features import FEATURE_NAMES, CPUFeatureExtractor
    from drytune.costmodel.fpratio import outside_shuffles_per_fp_lane

    target = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}
    extractor = CPUFeatureExtractor(tvm.target.Target(target), dt.spec_for(target), KernelConfig())
    col = FEATURE_NAMES.index("asm_outside_shuffles")
    rates = {}
    for lanes in (32, 56):
        mod = splat_kernel(lanes, 4).mod
        tree = LoopTree.from_mod(mod)
        text = extractor.assembly(mod)
        prog, _, counts = asm.analyze_asm(text, "x86", tree.preorder())
        rates[lanes] = outside_shuffles_per_fp_lane(prog, counts)
        assert extractor.extract(mod, text).values[col] == pytest.approx(rates[lanes] * tir_fp_lanes(tree))
        assert stack_accesses_per_fp_lane(prog, counts) == 0
    assert rates[32] == 0
    # per run of the row loop (32 rows of 4 x 56 FP lanes): four splats of 42 vinsertps and 3 wider inserts each
    assert rates[56] == pytest.approx(4 * 45 / (32 * 4 * 56), rel=0.3)
