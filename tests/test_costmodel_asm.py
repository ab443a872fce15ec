"""CPU assembly features: parsing, loops and trip counts, Tuna's Algorithm 1 and executed-instruction counts,
on hand-written snippets (counts checked by hand) and on real TVM builds for x86 and AArch64."""

import pytest
import tvm
import tvm_ffi
from tir_programs import depthwise_window_at_channels, padded_rows_at_channels
from tvm import s_tir, te, tirx

from drytune import workloads
from drytune.costmodel import asm
from drytune.costmodel.asm import IRLoop
from drytune.target import resolve_target

# Two-level loop: the outer loop runs rax = 0..9 (10 trips), the inner one counts rcx from -256 to 0 by 64
# (4 trips). Per outer trip: 2 setup instructions, 4 x 5 inner ones, 4 after the inner loop.
TWO_LEVEL_X86 = """
    .text
main_compute_:
    xorl    %eax, %eax
.LBB0_1:
    movq    $-256, %rcx
    vxorps  %xmm0, %xmm0, %xmm0
.LBB0_2:                                # inner loop
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

# Same nest, but the outer bound is a function argument (r9): not a constant in the assembly.
UNKNOWN_BOUND_X86 = TWO_LEVEL_X86.replace("cmpq    $10, %rax", "cmpq    %r9, %rax")

# AArch64 loop entered by a jump to its test at the bottom of the body ("while" form): x8 counts 0, 1, .., 6
# while x8 != 6, so the body runs 6 times and the header (with the test) 7 times.
TOP_TESTED_A64 = """
main_compute_:
    mov     x8, xzr
    b       .LBB0_2
.LBB0_1:
    ldr     q0, [x0, x8, lsl #4]
    fmla    v1.4s, v0.4s, v2.4s
    add     x8, x8, #1
.LBB0_2:
    cmp     x8, #6
    b.ne    .LBB0_1
    str     q1, [x1]
    ret
"""

# A reduction loop keeping the `k == 0` initialisation inside it, as LLVM does for a TIR reduction that
# was not decomposed: the first iteration runs the zeroing path, the other 7 the accumulating one.
GUARDED_X86 = """
main_compute_:
    xorl    %ecx, %ecx
.LBB0_1:
    testq   %rcx, %rcx
    jne     .LBB0_3
    vxorps  %xmm0, %xmm0, %xmm0
    jmp     .LBB0_4
.LBB0_3:
    vfmadd231ps (%rsi,%rcx,4){1to16}, %zmm1, %zmm0
.LBB0_4:
    incq    %rcx
    cmpq    $8, %rcx
    jne     .LBB0_1
    retq
"""


def test_two_level_loop_counts_by_hand():
    prog = asm.parse_asm(TWO_LEVEL_X86, "x86")
    (f,) = prog.functions
    assert f.name == "main_compute_"
    assert [b.label for b in f.blocks] == ["main_compute_", ".LBB0_1", ".LBB0_2", "main_compute_+8",
                                           "main_compute_+12"]
    outer, inner = f.loops
    assert (outer.trip, inner.trip) == (10, 4)
    assert inner.parent == 0 and outer.parent is None and inner.depth == 1
    counts = asm.count_instructions(prog, asm.map_loops(prog, []))
    assert counts.get(asm.VEC_FMA) == 2 * 4 * 10
    assert counts.get(asm.VEC_FMA, 512) == 80
    assert counts.get(asm.VEC_LOAD, 512) == 40
    assert counts.get(asm.VEC_STORE, 512) == 10
    assert counts.get(asm.BRANCH) == 40 + 10 + 1
    assert counts.folded_loads == 80
    assert counts.total == 1 + 2 * 10 + 5 * 40 + 4 * 10 + 1
    assert counts.fallbacks == 0
    execs = {be.block.label: be.executions for be in counts.blocks}
    assert execs == {"main_compute_": 1, ".LBB0_1": 10, ".LBB0_2": 40, "main_compute_+8": 10,
                     "main_compute_+12": 1}
    body = [be for be in counts.blocks if be.block.label == ".LBB0_2"][0]
    assert body.loop_body and body.block.instructions[1].mnemonic == "vfmadd231ps"


def test_instruction_operands_and_registers():
    fma = asm.parse_instruction("vfmadd231ps\t-1036(%r8,%r13){1to16}, %zmm4, %zmm0", "x86")
    assert fma.iclass == asm.VEC_FMA and fma.width == 512 and fma.folded_load
    assert fma.reads == {"r8", "r13", "v4", "v0"} and fma.writes == {"v0"}
    assert fma.addr_reads == {"r8", "r13"} and fma.mem_base == "r8"
    zero = asm.parse_instruction("vxorps\t%xmm0, %xmm0, %xmm0", "x86")
    assert zero.reads == frozenset() and zero.writes == {"v0"}
    cmp = asm.parse_instruction("cmpq\t$10, %rax", "x86")
    assert cmp.writes == {asm.FLAGS} and cmp.reads == {"rax"}
    ld = asm.parse_instruction("ld1r\t{ v24.4s }, [x18], #4", "aarch64")
    assert ld.iclass == asm.BROADCAST and ld.width == 128 and ld.writeback
    assert ld.writes == {"v24", "r18"} and ld.reads == {"r18"}
    fmla = asm.parse_instruction("fmla\tv6.4s, v27.4s, v25.s[0]", "aarch64")
    assert fmla.iclass == asm.VEC_FMA and fmla.reads == {"v6", "v27", "v25"} and fmla.writes == {"v6"}
    assert asm.parse_instruction("ldr\ts25, [x0, #512]", "aarch64").iclass == asm.SCALAR_LOAD
    assert asm.parse_instruction("stp\tq1, q2, [x16]", "aarch64").iclass == asm.VEC_STORE
    assert asm.parse_instruction("fmadd\ts0, s1, s2, s3", "aarch64").iclass == asm.SCALAR_FP


def test_algorithm1_matches_by_bounds_and_nesting():
    prog = asm.parse_asm(TWO_LEVEL_X86, "x86")
    ir = [IRLoop(10, "serial", 0), IRLoop(4, "unrolled", 1), IRLoop(64, "serial", 1), IRLoop(16, "vectorized", 2)]
    m = asm.map_loops(prog, ir)
    # the inner loop (4 trips) is the 64-extent IR loop unrolled 16 times by LLVM, not the unrolled IR loop
    assert [(x.ir_index, x.how, x.source) for x in m.matches] == [(0, "exact", "asm"), (2, "unrolled", "asm")]
    assert m.unmatched_ir == [] and m.fallbacks == 0

    unknown = asm.parse_asm(UNKNOWN_BOUND_X86, "x86")
    assert unknown.functions[0].loops[0].trip is None
    m2 = asm.map_loops(unknown, [IRLoop(10, "serial", 0), IRLoop(4, "serial", 1)])
    assert [(x.ir_index, x.trip, x.source, x.how) for x in m2.matches] == [(0, 10, "ir", "nesting"),
                                                                         (1, 4, "asm", "exact")]
    assert m2.fallbacks == 1
    assert asm.count_instructions(unknown, m2).get(asm.VEC_FMA) == 80
    no_ir = asm.map_loops(unknown, [])
    assert no_ir.matches[0].source == "default" and no_ir.fallbacks == 1
    assert asm.count_instructions(unknown, no_ir).get(asm.VEC_FMA) == 8


# Two parallel bodies launched in turn. LLVM unrolled the first one's chunk loop at run time: a main loop and a
# remainder loop, both with bounds from the chunk (not constants). The second body's chunk loop holds one FMA.
TWO_PARALLEL_BODIES_X86 = """
    .text
    .globl  main_compute_
    .type   main_compute_,@function
    .type   .L__tvm_parallel_lambda,@function
    .type   .L__tvm_parallel_lambda.1,@function
main_compute_:
    leaq    .L__tvm_parallel_lambda(%rip), %rdi
    callq   *(%rbp)
    leaq    .L__tvm_parallel_lambda.1(%rip), %rdi
    callq   *(%rbp)
    retq
.L__tvm_parallel_lambda:
    movl    (%rsi), %eax
.LBB1_1:
    vmovups (%rdx,%rax), %zmm0
    vmovups %zmm0, (%rcx,%rax)
    addq    $4, %rax
    cmpq    %r8, %rax
    jne     .LBB1_1
.LBB1_2:
    vmovups (%rdx,%rax), %zmm0
    incq    %rax
    cmpq    %r9, %rax
    jne     .LBB1_2
    retq
.L__tvm_parallel_lambda.1:
    movl    (%rsi), %eax
.LBB2_1:
    vfmadd231ps (%rdx,%rax){1to16}, %zmm1, %zmm0
    incq    %rax
    cmpq    %r8, %rax
    jne     .LBB2_1
    retq
"""


def test_a_parallel_body_with_two_top_level_loops_keeps_to_its_own_parallel_loop():
    """The remainder loop of the first body is matched to that body's parallel loop and counted once; it does not
    take the second body's parallel loop, which would shift every later body onto the wrong IR loop."""
    prog = asm.parse_asm(TWO_PARALLEL_BODIES_X86, "x86")
    ir = [IRLoop(100, "parallel", 0), IRLoop(16, "vectorized", 1), IRLoop(10, "parallel", 0)]
    m = asm.map_loops(prog, ir)
    assert [(x.function, x.ir_index, x.trip, x.how) for x in m.matches] == [
        (".L__tvm_parallel_lambda", 0, 100, "nesting"), (".L__tvm_parallel_lambda", 0, 1, "duplicate"),
        (".L__tvm_parallel_lambda.1", 2, 10, "nesting")]
    assert asm.count_instructions(prog, m).get(asm.VEC_FMA) == 10


# A serial copy (8 outer trips, 64 inner) whose last outer iteration LLVM peeled into a loop of its own (32 trips:
# the 64 iterations unrolled twice), then a parallel body whose chunk loop of 16 multiply-adds per trip runs 256 times
# (IR: a parallel loop of 4 chunks, a serial loop of 64 inside).
PEELED_COPY_THEN_PARALLEL_X86 = """
    .text
    .globl  main_compute_
    .type   main_compute_,@function
    .type   .L__tvm_parallel_lambda,@function
main_compute_:
    xorl    %esi, %esi
.LBB0_1:
    movq    $-64, %rdi
.LBB0_2:
    vmovss  (%rdx,%rdi), %xmm0
    vmovss  %xmm0, (%rcx,%rdi)
    incq    %rdi
    jne     .LBB0_2
    incq    %rsi
    cmpq    $7, %rsi
    jne     .LBB0_1
    xorl    %eax, %eax
.LBB0_4:
    vmovss  (%rdx,%rax), %xmm0
    vmovss  %xmm0, (%rcx,%rax)
    addq    $2, %rax
    cmpq    $64, %rax
    jne     .LBB0_4
    leaq    .L__tvm_parallel_lambda(%rip), %rdi
    callq   *(%rbp)
    retq
.L__tvm_parallel_lambda:
    movl    (%rsi), %eax
.LBB1_1:
    movq    $-64, %rcx
.LBB1_2:
    vfmadd231ps (%rdx,%rcx){1to16}, %zmm1, %zmm0
    incq    %rcx
    jne     .LBB1_2
    incq    %rax
    cmpq    %r8, %rax
    jne     .LBB1_1
    retq
"""


def test_a_loop_outside_parallel_bodies_matches_no_loop_inside_a_parallel_nest():
    """The peeled copy loop (32 trips) fits the parallel nest's 64-extent loop as 'unrolled' and comes before it in
    pre-order; it must stay with the serial copy (whose 64 it also divides), or the parallel body would be matched
    past its own nest and its multiply-adds counted with the wrong trips."""
    prog = asm.parse_asm(PEELED_COPY_THEN_PARALLEL_X86, "x86")
    ir = [IRLoop(8, "serial", 0), IRLoop(64, "serial", 1),
          IRLoop(4, "parallel", 0), IRLoop(64, "serial", 1), IRLoop(16, "vectorized", 2)]
    m = asm.map_loops(prog, ir)
    assert [(x.function, x.ir_index, x.trip) for x in m.matches] == [
        ("main_compute_", 0, 7), ("main_compute_", 1, 64), ("main_compute_", 1, 32),
        (".L__tvm_parallel_lambda", 2, 4), (".L__tvm_parallel_lambda", 3, 64)]
    assert asm.count_instructions(prog, m).get(asm.VEC_FMA) == 4 * 64


def test_top_tested_loop_and_guarded_first_iteration():
    prog = asm.parse_asm(TOP_TESTED_A64, "aarch64")
    (lp,) = prog.functions[0].loops
    assert lp.trip == 6 and lp.top_tested
    counts = asm.count_instructions(prog)
    assert counts.get(asm.VEC_FMA, 128) == 6 and counts.get(asm.VEC_LOAD, 128) == 6
    execs = {be.block.label: be.executions for be in counts.blocks}
    assert execs[".LBB0_1"] == 6 and execs[".LBB0_2"] == 7

    guarded = asm.parse_asm(GUARDED_X86, "x86")
    assert guarded.functions[0].loops[0].trip == 8
    counts = asm.count_instructions(guarded)
    assert counts.get(asm.VEC_FMA) == 7
    assert counts.get(asm.VEC_ARITH) == 1


@pytest.mark.parametrize("text, arch", [
    ("", "x86"),
    ("   \n\t\n", "aarch64"),
    ("hello, world!\n", "x86"),
    (TWO_LEVEL_X86, "riscv"),
    (TOP_TESTED_A64, "x86"),  # b.ne is no x86 mnemonic
    (TWO_LEVEL_X86, "aarch64"),  # no AArch64 register anywhere
    ("main:\n    .p2align 4\n", "x86"),  # no instructions
])
def test_malformed_assembly_raises_asm_parse_error(text, arch):
    with pytest.raises(asm.AsmParseError):
        asm.parse_asm(text, arch)
    with pytest.raises(asm.AsmParseError):
        asm.analyze_asm(text, arch, [IRLoop(4, "serial", 0)])


# ---------------------------------------------------------------------------------------------------------
# Real builds
# ---------------------------------------------------------------------------------------------------------

M = N = K = 128


def _matmul():
    return te.create_prim_func(workloads.gemm(M, N, K))


def _schedule(lanes: int, decompose: bool = True) -> s_tir.Schedule:
    """Tiled matmul: parallel i tiles, 4x(2*lanes) register tile, vectorized j, unrolled i."""
    sch = s_tir.Schedule(tvm.IRModule({"main": _matmul()}), seed=1)
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 2 * lanes])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, k1, i1, j1)
    sch.parallel(i0)
    sch.vectorize(j1)
    sch.unroll(i1)
    if decompose:
        sch.decompose_reduction(C, k0)
    return sch


def ir_loops(mod) -> list[IRLoop]:
    """TIR loops of `mod` in pre-order with extent, kind and depth (depth from subtree sizes)."""
    fors = []
    tvm_ffi.structural_walk(mod, [(tirx.For, fors.append)], order="pre")
    out, stack = [], []  # stack: loops still owning unvisited descendants, with their remaining count
    for f in fors:
        below = []
        tvm_ffi.structural_walk(f.body, [(tirx.For, below.append)], order="pre")
        while stack and stack[-1][1] == 0:
            stack.pop()
        for s in stack:
            s[1] -= 1
        out.append(IRLoop(int(f.extent), tirx.ForKind(int(f.kind)).name.lower(), len(stack), f.loop_var.name))
        stack.append([f, len(below)])
    return out


def _build_asm(sch: s_tir.Schedule, target_name: str) -> str:
    target, _ = resolve_target(target_name)
    return tvm.compile(sch.mod, target=target).mod.inspect_source("asm")


def test_ir_loops_of_a_schedule():
    loops = ir_loops(_schedule(16).mod)
    assert [(lp.name, lp.extent, lp.kind, lp.depth) for lp in loops] == [
        ("i_0", 32, "parallel", 0), ("j_0", 4, "serial", 1), ("i_1_init", 4, "unrolled", 2),
        ("j_1_init", 32, "vectorized", 3), ("k_0", 32, "serial", 2), ("k_1", 4, "serial", 3),
        ("i_1", 4, "unrolled", 4), ("j_1", 32, "vectorized", 5)]


def test_x86_avx512_build_counts_fma_per_zmm_lane():
    sch = _schedule(16)
    text = _build_asm(sch, "x86-avx512")
    prog, mapping, counts = asm.analyze_asm(text, "x86", ir_loops(sch.mod))
    assert "main_compute_" in [f.name for f in prog.functions]
    # every multiply-add of the matmul is one lane of a 512-bit FMA
    assert counts.get(asm.VEC_FMA, 512) == M * N * K // 16
    assert counts.get(asm.VEC_FMA) == M * N * K // 16
    # the parallel chunk loop has no constant bound: it takes the extent of the parallel IR loop
    par = [m for m in mapping.matches if m.source == "ir"]
    assert par and all(mapping.ir_loops[m.ir_index].kind == "parallel" for m in par)
    assert not [m for m in mapping.matches if m.source == "default"]
    assert counts.get(asm.VEC_STORE, 512) >= M * N // 16
    # blocks holding the FMAs run in the parallel body; the argument checks of the entry do not
    fma_blocks = [b for b in counts.blocks if any(i.iclass == asm.VEC_FMA for i in b.block.instructions)]
    assert fma_blocks and all(b.parallel for b in fma_blocks)
    assert not any(b.parallel for b in counts.blocks if b.function == "__tvm_ffi_main")


def test_x86_non_decomposed_reduction_counts_guarded_paths_once():
    sch = _schedule(16, decompose=False)
    prog, _, counts = asm.analyze_asm(_build_asm(sch, "x86-avx512"), "x86", ir_loops(sch.mod))
    lanes = sum(n * w // 32 for (c, w), n in counts.by_class_width.items() if c == asm.VEC_FMA)
    assert lanes == M * N * K


def test_aarch64_cross_build_counts_fma_per_q_lane():
    sch = _schedule(4)
    text = _build_asm(sch, "aarch64")
    assert "fmla" in text and "zmm" not in text
    prog, mapping, counts = asm.analyze_asm(text, "aarch64", ir_loops(sch.mod))
    assert counts.get(asm.VEC_FMA, 128) == M * N * K // 4
    assert counts.get(asm.VEC_FMA) == M * N * K // 4
    assert mapping.fallbacks == 1  # only the parallel chunk loop


def test_scalar_copy_behind_a_runtime_alias_check_never_runs():
    """LLVM vectorizes the channel loop but cannot prove that the intermediate it writes and the input it reads
    are distinct, so it tests their address ranges first and keeps a scalar copy of the loop for a conflict.
    TVM's buffers never overlap: the copy's scalar multiply-adds are in the text but count zero, and the
    vector ones alone make the convolution's 14 x 14 x 48 x 9 multiply-adds."""
    sch = depthwise_window_at_channels(48)
    text = _build_asm(sch, "x86-avx512")
    assert "vfmadd231ss" in text or "vfmadd213ss" in text
    prog, _, counts = asm.analyze_asm(text, "x86", ir_loops(sch.mod))
    lam = next(f for f in prog.functions if asm._alias_check_branches(f))
    assert asm._alias_check_fallbacks(lam)
    scalar_fma = sum(b.executions for b in counts.blocks for i in b.block.instructions
                     if i.iclass == asm.SCALAR_FP and "fmadd" in i.mnemonic)
    assert scalar_fma == 0
    lanes = sum(n * w // 32 for (c, w), n in counts.by_class_width.items() if c == asm.VEC_FMA)
    assert lanes == 14 * 14 * 48 * 9


def test_scalar_copy_behind_a_pointer_distance_check_never_runs():
    """LLVM vectorizes a padded row copy into an intermediate and tests the distance between the two pointers
    (`subq`, offsets added, `cmpq $64` then `jb`; `cmpq $63` then `ja` before the scalar loop itself): closer than a
    vector, a scalar copy unrolled by 8 runs instead. With `MapConfig.more_alias_checks` that copy counts zero and only
    the two columns past the vector part of each of the 6 x 10 copied rows are stored one by one."""
    sch = padded_rows_at_channels(6, 10)
    text = _build_asm(sch, "x86-avx512")

    def scalar_stores(more: bool) -> int:
        _, _, counts = asm.analyze_asm(text, "x86", ir_loops(sch.mod), asm.MapConfig(more_alias_checks=more))
        return sum(b.executions for b in counts.blocks for i in b.block.instructions
                   if i.mnemonic == "vmovss" and i.mem_write)

    assert scalar_stores(False) > 6 * 10 * 56
    assert scalar_stores(True) == 6 * 10 * 2


_APART_TEST = """
	.text
	.globl	copy
	.type	copy,@function
copy:
	leaq	64(%rsi), %rdx
	cmpq	%rdx, %rdi
	setae	%r8b
	leaq	64(%rdi), %rdx
	cmpq	%rdx, %rsi
	setae	%r9b
	orb	%r9b, %r8b
	testb	%r8b, %r8b
	je	.LBB0_2
	vmovups	(%rsi), %zmm0
	vmovups	%zmm0, (%rdi)
	retq
.LBB0_2:
	xorl	%ecx, %ecx
.LBB0_3:
	movl	(%rsi,%rcx,4), %eax
	movl	%eax, (%rdi,%rcx,4)
	incq	%rcx
	cmpq	$16, %rcx
	jne	.LBB0_3
	retq
"""


def test_ranges_found_apart_take_the_vector_copy():
    """`setae` twice and `orb`: the two 64-byte ranges lie apart, so `je` after testing that bit jumps to the scalar
    copy on a conflict. With `more_alias_checks` the scalar loop (and the block entering it) is the dead side, the
    vector copy is not; the original rule (strict comparisons and `jne` only) leaves this test alone."""
    f = asm.parse_asm(_APART_TEST, "x86").function("copy")
    scalar = {".LBB0_2", ".LBB0_3", "copy+18"}  # (the return after the scalar loop)
    assert {f.blocks[k].label for k in asm._alias_check_fallbacks(f, more_shapes=True)} == scalar
    assert not asm._alias_check_fallbacks(f)
    # strict comparisons (`setb`, `andb`) find an overlap: `jne` then takes the conflict, under either rule
    overlap = _APART_TEST.replace("setae", "setb").replace("orb", "andb").replace("je\t", "jne\t")
    g = asm.parse_asm(overlap, "x86").function("copy")
    assert {g.blocks[k].label for k in asm._alias_check_fallbacks(g)} == scalar
    assert {g.blocks[k].label for k in asm._alias_check_fallbacks(g, more_shapes=True)} == scalar
