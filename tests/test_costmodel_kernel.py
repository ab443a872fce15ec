"""TIR register-tile kernel model on small hand-checkable programs: body split by unrolling, vector lanes,
accumulator chains, strided and gathered vector accesses, parallel speed-up."""

from __future__ import annotations

import dataclasses

import pytest
import tvm
import tvm_ffi
from tir_programs import compacted, depthwise_window_at_channels, matmul_schedule, max_pool_over_pad, splat_kernel
from tvm import s_tir, te

import drytune as dt
from drytune import workloads
from drytune.annotate.candidate import Candidate
from drytune.costmodel.asm import Instruction, analyze_asm, parse_asm
from drytune.costmodel.kernel import (
    KernelConfig,
    _access_kind,
    _memory_pieces,
    _vector_ops,
    edge_switch_guarded,
    failing_copies,
    guarded_lanes,
    kernel_cycles,
    licm_hoisted,
    multiply_add_inputs,
    register_buffers,
    remote_lines,
    statement_cycles,
    statement_details,
    statement_paths,
    statement_trips,
    tail_overlaps_next_row,
)
from drytune.costmodel.looptree import LoopNode, LoopTree, StmtLeaf

SPEC = dataclasses.replace(dt.spec_for("x86-avx512"), cores=2)  # 16 fp32 lanes
CFG = KernelConfig()


def _leaf_and_path(tree: LoopTree, block: str) -> tuple[StmtLeaf, list[LoopNode]]:
    def visit(node, path):
        if isinstance(node, StmtLeaf):
            return (node, path) if node.block == block else None
        for c in node.children:
            got = visit(c, path + [node])
            if got:
                return got
        return None

    for r in tree.roots:
        got = visit(r, [])
        if got:
            return got
    raise KeyError(block)


def _details(sch: s_tir.Schedule, block: str = "C_update", cfg: KernelConfig = CFG,
             spec: dt.HardwareSpec = SPEC) -> tuple[float, dict]:
    tree = LoopTree.from_mod(sch.mod)
    leaf, path = _leaf_and_path(tree, block)
    det: dict = {}
    cycles, _ = statement_cycles(leaf, path, spec, cfg, det)
    return cycles, det


def test_partial_vectors_take_whole_registers_but_move_memory_in_power_of_two_pieces():
    assert _vector_ops(16, 16) == 1
    assert _vector_ops(64, 16) == 4
    assert _vector_ops(14, 16) == 1  # widened to one zmm
    assert _vector_ops(28, 16) == 2
    assert _memory_pieces(14, 16) == 3  # 8 + 4 + 2
    assert _memory_pieces(24, 16) == 2  # 16 + 8
    assert _memory_pieces(64, 16) == 4


def _scaled_vector(lanes: int) -> s_tir.Schedule:
    """Y = 2 X + 1 over one TVM vector of `lanes` lanes."""
    X = te.placeholder((lanes,), "float32", name="X")
    Y = te.compute((lanes,), lambda i: X[i] * 2.0 + 1.0, name="Y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, Y])}))
    sch.vectorize(sch.get_loops(sch.get_sblock("Y"))[0])
    return sch


@pytest.mark.parametrize("lanes, registers, pieces", [(14, 1, 3), (28, 2, 3), (48, 3, 3)])
def test_a_partial_vector_is_computed_in_whole_registers_and_stored_in_pieces(lanes, registers, pieces):
    """LLVM widens 14 float lanes to one zmm for the arithmetic; the store must not write past the 14th lane,
    so it goes out as 8 + 4 + 2. The model counts the same."""
    sch = _scaled_vector(lanes)
    insts = _kernel_instructions(sch)
    arithmetic = [i for i in insts if i.mnemonic.startswith(("vfmadd", "vmulps", "vaddps"))]
    assert len(arithmetic) == registers
    _, det = _details(sch, "Y")
    assert det["vector_ops"] == registers and det["stores"] == pieces


def test_scalar_reduction_is_latency_bound():
    """Innermost k loop (64 > LLVM's unroll budget): one accumulator, one dependent FMA per iteration."""
    sch = matmul_schedule()
    sch.decompose_reduction(sch.get_sblock("C"), sch.get_loops(sch.get_sblock("C"))[2])
    cycles, det = _details(sch)
    assert det["statements"] == 1 and det["lanes"] == 1 and det["accumulators"] == 1
    assert det["inner_is_reduction"] and det["latency"] == CFG.fma_latency
    # 8 * 64 * 64 executions of (4-cycle chain + 1 cycle loop overhead), and the accumulator stored and the next
    # one loaded once per run of the k loop (the j loop around it moves to another output element)
    assert det["executions"] == 8 * 64 * 64
    assert det["reload"] == pytest.approx(CFG.accumulator_reload_cycles / 64)
    assert cycles == pytest.approx(8 * 64 * 64 * (CFG.fma_latency + CFG.loop_overhead + det["reload"]))


def _register_tile(rows: int, cols: int, M: int = 8, N: int = 64) -> s_tir.Schedule:
    """C = A B with the reduction outside a `rows` x `cols` register tile (rows unrolled, columns vectorized)."""
    sch = matmul_schedule(M=M, N=N)
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, cols])
    sch.reorder(i0, j0, k, i1, j1)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.decompose_reduction(C, k)
    return sch


def test_register_tile_hides_fma_latency():
    """k outside a 4 x 16 tile (i unrolled, j vectorized): four independent accumulators per k step."""
    cycles, det = _details(_register_tile(4, 16))
    assert det["statements"] == 4 and det["lanes"] == 16 and det["vector_ops"] == 1
    assert det["accumulators"] == 4 and det["inner_is_reduction"]
    assert det["latency"] == pytest.approx(CFG.fma_latency)  # 4 FMAs / 4 chains x latency
    assert det["fp"] == pytest.approx(4 / CFG.fp_pipes)
    assert det["loads"] == 5  # 4 broadcasts of A[i, k] and one vector of B[k, j]
    assert det["executions"] == 2 * 4 * 64
    assert det["reload"] == pytest.approx(4 * CFG.accumulator_reload_cycles / 64)  # 4 accumulators per k run
    assert cycles == pytest.approx(det["executions"] * (CFG.fma_latency + CFG.loop_overhead + det["reload"]))
    # the same work with one accumulator per k step is four times as long in the chain
    sch2 = matmul_schedule()
    C2 = sch2.get_sblock("C")
    i, j, k = sch2.get_loops(C2)
    j0, j1 = sch2.split(j, [None, 16])
    sch2.reorder(i, j0, k, j1)
    sch2.vectorize(j1)
    sch2.decompose_reduction(C2, k)
    slow, _ = _details(sch2)
    assert slow > 3 * cycles


def test_loop_overhead_overlapping_the_fp_work_is_a_bound_not_added_cycles():
    """A 6 x 32 tile (12 accumulators, two 16-lane vectors per row): 12 multiply-adds per k step, 6 cycles on 2 FP
    pipes. Added, the loop's branch makes the step 7 cycles; overlapped it is a bound of 1 cycle that the FP work
    hides (Zen 3's 6 x 16 GEMM tile, session 76)."""
    sch = _register_tile(6, 32, M=12)
    added, det = _details(sch)
    assert det["accumulators"] == 12 and det["fp"] == pytest.approx(6.0) and det["branch"] == 0.0
    overlapped, det2 = _details(sch, cfg=dataclasses.replace(CFG, loop_overhead_overlaps=True))
    assert det2["branch"] == pytest.approx(CFG.loop_overhead)
    assert det2["body_cycles"] == pytest.approx(6.0 + det["reload"])
    assert added - overlapped == pytest.approx(det["executions"] * CFG.loop_overhead)


def _tile_8x32(column_blocks_outside: bool) -> s_tir.Schedule:
    """An 8 x 32 tile (two 16-lane column blocks, 16 accumulators) over 8 reduction steps, all unrolled: the
    column-block loop outside the reduction steps and rows, or innermost."""
    sch = matmul_schedule(M=8, N=32, K=64)
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 8])
    sch.reorder(*((k0, j0, k1, i, j1) if column_blocks_outside else (k0, k1, i, j0, j1)))
    for lp in (j0, k1, i):
        sch.unroll(lp)
    sch.vectorize(j1)
    sch.decompose_reduction(C, k0)
    return sch


def test_a_broadcast_reused_across_a_loop_whose_inside_overflows_the_registers_is_loaded_again():
    # column blocks innermost: each A[i, k] broadcast serves both blocks back to back (64 loads of A, 16 of B)
    _, near = _details(_tile_8x32(False))
    # column blocks outside: 63 other broadcasts come between the two uses of one, more than the 14 registers
    # that the 16 accumulators leave
    _, far = _details(_tile_8x32(True))
    assert near["statements"] == far["statements"] == 128 and near["accumulators"] == 16
    assert near["loads"] == 64 + 16
    assert far["loads"] - near["loads"] == 64
    off = dataclasses.replace(CFG, register_reuse=False)
    assert _details(_tile_8x32(True), cfg=off)[1]["loads"] == near["loads"]


def test_gathered_operand_invariant_in_the_innermost_loop_is_assembled_once_before_it():
    """C = A B^T with j vectorized (B[j, k] is a stride-64 gather), k unrolled by 4 and i iterating innermost:
    B does not change with i, and LLVM assembles its 32 lanes once before the i loop (LICM). The model shares
    the gather over i's 64 iterations when the hoisted vectors fit the registers, and the executed
    single-element loads of the assembly agree."""
    sch = matmul_schedule(M=64, N=64, K=64, b_transposed=True)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    j0, j1 = sch.split(j, [None, 8])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(j0, k0, i, k1, j1)
    sch.unroll(k1)
    sch.vectorize(j1)
    sch.decompose_reduction(block, k0)
    tree = LoopTree.from_mod(sch.mod)
    leaf, path = _leaf_and_path(tree, "C_update")
    det: dict = {}
    statement_cycles(leaf, path, SPEC, CFG, det)
    assert det["inner_extent"] == 64 and not det["inner_is_reduction"] and det["lanes"] == 8
    assert det["gathers"] == pytest.approx(4 * 8 / 64)  # 4 k x 8 lanes of B, once per i loop
    no_hoist: dict = {}
    statement_cycles(leaf, path, SPEC, dataclasses.replace(CFG, hoist_invariant=False), no_hoist)
    assert no_hoist["gathers"] == 4 * 8 and no_hoist["load"] > 10 * det["load"]
    # with fewer registers than the 4 hoisted vectors and the output row, nothing is credited
    few: dict = {}
    statement_cycles(leaf, path, SPEC, dataclasses.replace(CFG, registers=4), few)
    assert few["gathers"] == 4 * 8
    counts = analyze_asm(_asm(sch), "x86", tree.preorder())[2]
    bodies = 8 * 16 * 64  # j0 x k0 x i
    assert counts.get("vec_fma") == bodies * 4
    # single-element loads (vmovss, and vinsertps from memory, counted as shuffles): B's 32 lanes once per
    # (j0, k0) = 4096, where one gather per body would execute 32 x 8192
    assert counts.get("scalar_load") + counts.get("shuffle") <= 8 * 16 * 32 * 1.25


def test_broadcasts_hoisted_out_of_a_vectorized_loop_spill_beyond_the_registers():
    """An unrolled 4 x 48 body (i, k) iterated by a contiguous j loop of 32, which LLVM vectorizes (2 x 16 lanes):
    the 192 broadcasts of A[i, k] do not change with j and are hoisted before it; beyond the registers left by
    the 8 output vectors they are spilled once and read back by every vector iteration (the pattern of the 1x1
    convolutions that MobileNet-V2's picks lost on). The assembly's stack stores and reloads agree."""
    sch = matmul_schedule(M=4, N=32, K=48)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    sch.reorder(j, k, i)
    sch.unroll(k)
    sch.unroll(i)
    sch.decompose_reduction(block, j)
    leaf, path = _leaf_and_path(LoopTree.from_mod(sch.mod), "C_update")
    det: dict = {}
    statement_cycles(leaf, path, SPEC, CFG, det)
    assert det["lanes"] == 32 and det["vector_ops"] == 2 and det["statements"] == 192
    spilled = 192 - (CFG.registers - 8)
    assert det["stores"] == 8 + spilled  # the output vectors, and the spills
    no_hoist: dict = {}
    statement_cycles(leaf, path, SPEC, dataclasses.replace(CFG, hoist_invariant=False), no_hoist)
    assert no_hoist["stores"] == 8 and det["loads"] == no_hoist["loads"] + 2 * spilled
    insts = _kernel_instructions(sch)
    stack_stores = sum(1 for inst in insts if inst.mem_write and inst.mem_base == "rsp")
    stack_reads = sum(1 for inst in insts if inst.mem_read and inst.mem_base == "rsp")
    assert _count(insts, "vbroadcastss") == 192
    assert 0.85 * spilled <= stack_stores <= 192 and stack_reads >= 0.85 * spilled


def test_accumulators_beyond_the_vector_registers_go_through_memory():
    """A 16 x 8 tile (16 accumulators) under k fits AVX-512's 32 registers, not AVX2's 16."""
    sch = matmul_schedule(M=16, N=64)
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(j0, k, i, j1)
    sch.unroll(i)
    sch.vectorize(j1)
    sch.decompose_reduction(C, k)
    leaf, path = _leaf_and_path(LoopTree.from_mod(sch.mod), "C_update")
    avx2 = dt.spec_for("x86-avx2")
    assert KernelConfig.for_spec(SPEC).registers == 30 and KernelConfig.for_spec(avx2).registers == 14
    for spec, in_registers in ((SPEC, True), (avx2, False)):
        det: dict = {}
        statement_cycles(leaf, path, spec, KernelConfig.for_spec(spec), det)
        assert det["accumulators"] == 16
        assert (det["stores"] == 0) == in_registers, (spec.name, det)
        assert det["loads"] == 16 + 1 + (0 if in_registers else 16 + 2)  # broadcasts, B, accumulators, spills


def test_strided_and_gathered_vector_accesses():
    n = 64
    X = te.placeholder((4 * n,), "float32", name="X")
    Y = te.compute((n,), lambda i: X[2 * i], name="Y")
    Z = te.compute((n, n), lambda i, j: X[j * 4 + i], name="Z")  # stride 4 along j
    W = te.compute((n,), lambda i: X[(i * i) % (4 * n)], name="W")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, Y, Z, W])}))
    for blk in ("Y", "W"):
        (i,) = sch.get_loops(sch.get_sblock(blk))
        sch.vectorize(sch.split(i, [None, 16])[1])
    _, j = sch.get_loops(sch.get_sblock("Z"))
    sch.vectorize(sch.split(j, [None, 16])[1])
    tree = LoopTree.from_mod(sch.mod)
    for blk, want in (("Y", "strided"), ("Z", "strided"), ("W", "gather")):
        leaf, path = _leaf_and_path(tree, blk)
        vec = next(lp.var for lp in path if lp.kind == "vectorized")
        src = next(a for a in leaf.accesses if not a.is_write)
        dst = next(a for a in leaf.accesses if a.is_write)
        assert _access_kind(src, vec) == want, blk
        assert _access_kind(dst, vec) == "contig"
    leaf, path = _leaf_and_path(tree, "Y")
    det: dict = {}
    statement_cycles(leaf, path, SPEC, CFG, det)
    # per statement (LLVM unrolls the 4-trip outer loop): TVM's strided vector is one scalar load and one insert
    # per lane, as the assembly shows (no vector load of X)
    assert det["statements"] == 4 and det["loads"] == 16 * 4
    assert det["shuffle"] == 16 * 4 * CFG.lane_insert_cost / CFG.shuffle_ports
    y_only = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, Y])}))
    (i,) = y_only.get_loops(y_only.get_sblock("Y"))
    y_only.vectorize(y_only.split(i, [None, 16])[1])
    insts = _kernel_instructions(y_only)
    stores = sum(1 for inst in insts if inst.mnemonic in ("vmovaps", "vmovups") and inst.mem_write)
    assert _count(insts, "vinsertps") >= 12 and _scalar_loads(insts) == 16 * stores


def _kernel_instructions(sch: s_tir.Schedule, target: str | dict = "x86-avx512") -> list[Instruction]:
    """The instructions of the compute function (main_compute_) of the schedule's assembly."""
    return parse_asm(_asm(sch, target), "x86").function("main_compute_").instructions


def _count(insts: list[Instruction], *mnemonics: str) -> int:
    return sum(1 for inst in insts if inst.mnemonic in mnemonics)


def _scalar_loads(insts: list[Instruction]) -> int:
    """Single-element loads: vmovss from memory and vinsertps with a memory source."""
    return sum(1 for inst in insts if inst.mnemonic in ("vmovss", "vinsertps") and inst.mem_read)


def test_overlapping_strided_windows_load_each_element_once():
    """3x3 stride-2 max pooling vectorized by TVM along x: each window column is a strided vector, and LLVM
    loads an element that neighbouring windows share once (33 scalar loads for 3 columns of 16 lanes, not 48);
    the model counts the same distinct elements."""
    data = te.placeholder((8, 33, 33), "float32", name="data")
    rh, rw = te.reduce_axis((0, 3), name="rh"), te.reduce_axis((0, 3), name="rw")
    pool = te.compute((8, 16, 16), lambda c, y, x: te.max(data[c, 2 * y + rh, 2 * x + rw], axis=[rh, rw]),
                      name="pool")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([data, pool])}))
    c, _, x, rh_loop, rw_loop = sch.get_loops(sch.get_sblock("pool"))
    sch.reorder(rh_loop, rw_loop, x)
    sch.vectorize(x)
    sch.annotate(c, "pragma_auto_unroll_max_step", 16)
    sch.annotate(c, "pragma_unroll_explicit", 1)
    insts = _kernel_instructions(sch)
    assert _scalar_loads(insts) == 11 * _count(insts, "vmaxps")  # 33 per 3 windows of 16 lanes
    tree = LoopTree.from_mod(sch.mod)
    leaf, path = next((leaf, path) for _, items in statement_paths(tree) for leaf, path in items
                      if "fminmax" in leaf.ops)
    det: dict = {}
    statement_cycles(leaf, path, SPEC, CFG, det)
    accumulator = 1  # pool's element, loaded once per body (y iterates)
    assert det["lanes"] == 16 and det["loads"] - accumulator == 11 * det["statements"]


def test_parallel_loop_divides_by_balanced_speedup():
    sch = matmul_schedule(M=6)
    C = sch.get_sblock("C")
    i, _, _ = sch.get_loops(C)
    serial = kernel_cycles(LoopTree.from_mod(sch.mod), SPEC)
    sch.parallel(i)
    par = kernel_cycles(LoopTree.from_mod(sch.mod), SPEC)
    assert par.serial_cycles == pytest.approx(serial.serial_cycles)
    assert par.cycles == pytest.approx(serial.cycles / 2)  # 6 iterations on 2 cores
    three = kernel_cycles(LoopTree.from_mod(sch.mod), dataclasses.replace(SPEC, cores=4))
    assert three.cycles == pytest.approx(serial.cycles / 3)  # 6 on 4 cores: 2 rounds, speed-up 3


def _two_stages() -> s_tir.Schedule:
    """B = 2A then C = B + 1 over 64 x 256 floats, as two loop nests (B: 1024 cache lines)."""
    A = te.placeholder((64, 256), "float32", name="A")
    B = te.compute((64, 256), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((64, 256), lambda i, j: B[i, j] + 1.0, name="C")
    return s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, C])}))


@pytest.mark.parametrize("split, remote", [
    ("serial, serial", 0.0),
    ("rows, serial", 512.0),  # half of B was written by the other core
    ("rows, rows", 0.0),  # both nests give each core the same rows
    ("rows, columns", 512.0),
    ("serial, rows", 512.0),
    ("rows, row blocks", 0.0),  # parallel loops of different extents that still give each core the same rows
])
def test_lines_written_by_another_core_are_counted_where_nests_split_a_buffer_differently(split, remote):
    sch = _two_stages()
    for block, how in zip(("B", "C"), split.split(", "), strict=True):
        i, j = sch.get_loops(sch.get_sblock(block))
        if how == "rows":
            sch.parallel(i)
        elif how == "columns":
            sch.reorder(j, i)
            sch.parallel(j)
        elif how == "row blocks":
            blocks, _ = sch.split(sch.fuse(i, j), [8, None])
            sch.parallel(blocks)
    tree = LoopTree.from_mod(sch.mod)
    assert remote_lines(tree, cores=2) == [0.0, remote]
    off = kernel_cycles(tree, SPEC, dataclasses.replace(CFG, remote_line_cycles=0.0))
    on = kernel_cycles(tree, SPEC, CFG)
    speed = 2.0 if split.endswith("rows") or split.endswith("columns") else 1.0
    assert on.cycles - off.cycles == pytest.approx(remote * CFG.remote_line_cycles / speed)


def _tile_with_split_reduction(k_inner: int, M: int = 8, N: int = 64, K: int = 64) -> s_tir.Schedule:
    """C = A B (M x N x K) with a 4 x 16 accumulator tile (rows unrolled, columns vectorized) and k split as
    (K / k_inner, k_inner): the outer k loop sits outside the tile's row-block loop, the inner one inside it."""
    sch = matmul_schedule(M=M, N=N, K=K)
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, k_inner])
    sch.reorder(j0, k0, i0, k1, i1, j1)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.decompose_reduction(C, k0)
    return sch


@pytest.mark.parametrize(("M", "N", "evicted"),
                         [(64, 1024, True), (64, 1040, False), (8, 1024, False), (1024, 1024, False)])
def test_accumulator_tiles_evicted_between_runs_are_reloaded_at_the_evicted_rate(M, N, evicted):
    """Rows of 1024 floats are 4 KiB apart and all map to one L1 set (12 ways here): walking 64 of them between two
    runs on a tile evicts it, walking 8 does not, and rows of 1040 floats spread over the sets (gemm_bert's 8 x 32
    tile over 128 rows 12 KiB apart reloaded at L2 latency). A walk over 1024 rows is more than L1 holds at all:
    it streams, and its reloads are not charged as conflicts."""
    sch = _tile_with_split_reduction(32, M=M, N=N, K=128)  # between two runs on a tile, the walk over all M rows
    cfg = dataclasses.replace(CFG, evicted_reload_cycles=10.0)
    _, det = _details(sch, cfg=cfg)
    _, plain = _details(sch)
    runs = (N // 16) * 4 * (M // 4)  # column blocks x outer k x row blocks
    assert det["accumulators"] == 4 and det["inner_extent"] == 32
    rate = cfg.evicted_reload_cycles if evicted else CFG.accumulator_reload_cycles
    assert det["executions"] * det["reload"] == pytest.approx(runs * 4 * rate)
    assert plain["executions"] * plain["reload"] == pytest.approx(runs * 4 * CFG.accumulator_reload_cycles)


def test_double_pumped_vectors_take_two_pipe_cycles_where_the_datapath_is_half_their_width():
    """Zen 4 runs a 512-bit FMA on a 256-bit pipe for two cycles: the spec halves the peak, and the kernel model
    counts two pipe slots per 16-lane operation there, one per 8-lane operation, one everywhere on Skylake-X."""
    zen4 = dt.spec_for({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    skx = dt.spec_for({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    assert zen4.vector_bits == skx.vector_bits == 512
    assert (zen4.datapath_bits, zen4.pump, skx.pump) == (256, 2, 1)
    assert zen4.peak_flops() == pytest.approx(skx.peak_flops() / 2)
    zen4_cfg, skx_cfg = KernelConfig.for_spec(zen4), KernelConfig.for_spec(skx)
    assert zen4_cfg == dataclasses.replace(skx_cfg, gapped_strides_gather=True, pump=2, gather_serial_lane_cycles=0.7)
    _, wide_zen4 = _details(_tile_with_split_reduction(64), cfg=zen4_cfg, spec=zen4)
    _, wide_skx = _details(_tile_with_split_reduction(64), cfg=skx_cfg, spec=skx)
    assert wide_zen4["lanes"] == 16 and wide_zen4["fp_ops"] == wide_skx["fp_ops"] == 4
    assert wide_zen4["fp"] == pytest.approx(2 * wide_skx["fp"]) == pytest.approx(8 / zen4_cfg.fp_pipes)
    narrow = _scaled_vector(8)  # one 8-lane (256-bit) operation: one slot on either machine
    _, half_zen4 = _details(narrow, "Y", cfg=zen4_cfg, spec=zen4)
    _, half_skx = _details(narrow, "Y", cfg=skx_cfg, spec=skx)
    assert half_zen4["fp"] == pytest.approx(half_skx["fp"])


def test_double_pumped_stores_of_full_width_vectors():
    """Zen 4 moves a 512-bit vector as two 256-bit halves: a 16-lane copy is bound by one zmm store every two
    cycles, twice Skylake-X's; an 8-lane copy stores twice as many vectors at one per cycle on either."""
    zen4 = dt.spec_for({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    skx = dt.spec_for({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    zen4_cfg, skx_cfg = KernelConfig.for_spec(zen4), KernelConfig.for_spec(skx)
    copy16, copy8 = _unary(lambda x: x, vector=16), _unary(lambda x: x, vector=8)
    _, wide_zen4 = _details(copy16, "B", cfg=zen4_cfg, spec=zen4)
    _, wide_skx = _details(copy16, "B", cfg=skx_cfg, spec=skx)
    _, wide_off = _details(copy16, "B", cfg=dataclasses.replace(zen4_cfg, pump_stores=False), spec=zen4)
    _, half_zen4 = _details(copy8, "B", cfg=zen4_cfg, spec=zen4)
    _, half_skx = _details(copy8, "B", cfg=skx_cfg, spec=skx)
    assert wide_zen4["store"] == pytest.approx(2 * wide_skx["store"]) == pytest.approx(2 * wide_off["store"])
    assert wide_zen4["load"] == pytest.approx(wide_skx["load"])
    assert half_zen4["store"] == pytest.approx(half_skx["store"]) == pytest.approx(wide_zen4["store"])


def test_pumped_loads_take_two_port_slots_per_full_width_vector():
    """With `pump_loads` (Zen 4: one 512-bit load per cycle) a 16-lane copy's loads take twice the load-port time,
    an 8-lane copy's the same as without it."""
    zen4 = dt.spec_for({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    cfg = KernelConfig.for_spec(zen4)
    pumped = dataclasses.replace(cfg, pump_loads=True)
    copy16, copy8 = _unary(lambda x: x, vector=16), _unary(lambda x: x, vector=8)
    _, wide = _details(copy16, "B", cfg=cfg, spec=zen4)
    _, wide_pumped = _details(copy16, "B", cfg=pumped, spec=zen4)
    _, half = _details(copy8, "B", cfg=cfg, spec=zen4)
    _, half_pumped = _details(copy8, "B", cfg=pumped, spec=zen4)
    assert wide_pumped["load"] == pytest.approx(2 * wide["load"]) and wide["load"] > 0
    assert half_pumped["load"] == pytest.approx(half["load"])


def test_loads_of_operations_narrower_than_a_register_take_the_narrow_load_ports():
    """`narrow_load_ports` (Emerald Rapids: benchmarks/load_widths.py measured scalar loads at 1.42x and xmm at 1.33x
    the rate of zmm ones) divides the loads of a 2- or 4-lane copy, not those of a 16-lane one nor of an unsplit copy
    loop, which LLVM's vectorizer runs on whole registers."""
    one_port = dataclasses.replace(CFG, load_ports=1.0)
    narrow = dataclasses.replace(one_port, narrow_load_ports=1.4)
    for vector, faster in ((2, True), (4, True), (16, False), (1, False)):
        copy = _unary(lambda x: x, vector=vector)
        _, base = _details(copy, "B", cfg=one_port)
        _, got = _details(copy, "B", cfg=narrow)
        assert base["load"] > 0 and got["loads"] == base["loads"]
        assert got["load"] == pytest.approx(base["load"] / 1.4 if faster else base["load"])


@pytest.mark.parametrize("k_inner", [32, 64])
def test_accumulators_are_stored_and_reloaded_at_every_run_of_the_reduction_loop(k_inner):
    """Each run of the inner k loop works on another 4 x 16 tile (the row-block loop around it moves the output),
    so its four accumulators are stored and the next tile's loaded between runs: with k split 2 x 32 around the row
    blocks that is twice as often as with k whole (1 x 1 convolutions of MobileNet-V2 ran 16% slower so)."""
    sch = _tile_with_split_reduction(k_inner)
    _, det = _details(sch)
    _, off = _details(sch, cfg=dataclasses.replace(CFG, accumulator_reload_cycles=0.0))
    assert det["accumulators"] == 4 and det["inner_extent"] == k_inner and det["stores"] == 0
    runs = 4 * (64 // k_inner) * 2  # column blocks x outer k x row blocks
    assert det["executions"] * det["reload"] == pytest.approx(runs * 4 * CFG.accumulator_reload_cycles)
    assert det["body_cycles"] == pytest.approx(off["body_cycles"] + det["reload"])


def test_rfactor_partial_sums_over_a_fused_index_are_contiguous_vectors():
    # sum(A*A) of a 64x64 matrix, rfactor-ed by 16: partial sums R[16, 1] (a unit trailing dimension) read
    # A[(16*o + l) // 64, (16*o + l) % 64] with the lane l vectorized: one contiguous load per vector (the
    # square reads A once), 16-lane accumulator chains, no gathers
    A = te.placeholder((64, 64), "float32", name="A")
    i, j = te.reduce_axis((0, 64), name="i"), te.reduce_axis((0, 64), name="j")
    S = te.compute((1,), lambda z: te.sum(A[i, j] * A[i, j], axis=[i, j]), name="S")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, S])}))
    blk = sch.get_sblock("S")
    _, ri, rj = sch.get_loops(blk)
    fused = sch.fuse(ri, rj)
    _, lane = sch.split(fused, [None, 16])
    rf = sch.rfactor(lane, 0)
    sch.vectorize(sch.get_loops(rf)[-1])
    sch.decompose_reduction(rf, sch.get_loops(rf)[1])
    tree = LoopTree.from_mod(sch.mod)
    leaf, path = _leaf_and_path(tree, "S_rf_update")
    det: dict = {}
    statement_cycles(leaf, path, SPEC, CFG, det)
    assert det["lanes"] == 16 and det["gathers"] == 0
    assert det["loads"] == 1 and det["stores"] == 0 and det["inner_is_reduction"]
    assert det["latency"] == CFG.fma_latency  # one accumulator: a latency-bound chain


def test_reduction_unrolled_in_the_body_pays_its_chain_over_the_reorder_window():
    # S[i] = sum_k X[i, k], k (49) unrolled: one accumulator chain of 49 adds per body; the out-of-order window
    # overlaps only the bodies it holds, so the chain, not the 49 loads, bounds the body
    X = te.placeholder((256, 49), "float32", name="X")
    k = te.reduce_axis((0, 49), name="k")
    S = te.compute((256,), lambda i: te.sum(X[i, k], axis=k), name="S")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, S])}))
    blk = sch.get_sblock("S")
    _, kk = sch.get_loops(blk)
    sch.unroll(kk)
    sch.decompose_reduction(blk, kk)
    _, det = _details(sch, "S_update")
    uops = det["fp_ops"] + det["int_ops"] + det["loads"] + det["stores"] + det["gathers"] + 1
    assert det["statements"] == 49 and det["accumulators"] == 1 and not det["inner_is_reduction"]
    assert det["latency"] == pytest.approx(49 * CFG.fma_latency / (CFG.reorder_window / uops))
    # and the row loop around moves to another accumulator between two bodies' chains
    assert det["reload"] == pytest.approx(CFG.accumulator_reload_cycles)
    assert det["latency"] > det["load"]
    assert det["body_cycles"] == pytest.approx(det["latency"] + det["reload"] + CFG.loop_overhead)


def _unary(fn, n: int = 1024, vector: int = 16) -> s_tir.Schedule:
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B])}))
    if vector > 1:
        _, inner = sch.split(sch.get_loops(sch.get_sblock("B"))[0], [None, vector])
        sch.vectorize(inner)
    return sch


def test_libm_calls_cost_one_call_per_lane_and_vector_intrinsics_one_op_per_vector():
    # LLVM scalarizes exp on CPU targets: 1024 elements are 1024 calls whether or not the loop is vectorized
    exp_vec, _ = _details(_unary(te.exp), "B")
    exp_scalar, _ = _details(_unary(te.exp, vector=1), "B")
    assert exp_vec >= 1024 * CFG.libm_cycles["exp"]
    assert exp_scalar >= 1024 * CFG.libm_cycles["exp"]
    erf_vec, _ = _details(_unary(te.erf), "B")
    assert erf_vec - exp_vec == pytest.approx(1024 * (CFG.libm_cycles["erf"] - CFG.libm_cycles["exp"]))
    # sqrt stays a vector instruction: 64 vector square roots, far below one call per element
    sqrt_vec, det = _details(_unary(te.sqrt), "B")
    assert det["libm_calls"] == 0
    assert sqrt_vec < 1024


def _unrolled_exp(rows_unrolled: int) -> s_tir.Schedule:
    """exp over 2048 rows of 16 lanes, runs of `rows_unrolled` rows unrolled: 16 call sites per unrolled row."""
    sch = _unary(te.exp, n=2048 * 16)
    _, inner = sch.split(sch.get_loops(sch.get_sblock("B"))[0], [None, rows_unrolled])
    sch.unroll(inner)
    return sch


def test_libm_calls_unrolled_beyond_the_hot_call_sites_pay_the_cold_call_cost():
    # 1024 rows x 16 lanes = 16384 call sites in one straight-line body, beyond the 12288 the front end keeps
    cold, det = _details(_unrolled_exp(1024), "B")
    assert det["statements"] * det["lanes"] == 16384 > CFG.hot_call_sites
    warm, det = _details(_unrolled_exp(8), "B")
    assert det["statements"] * det["lanes"] == 128
    calls = 2048 * 16
    assert cold - warm == pytest.approx(calls * CFG.cold_call_cycles, rel=0.01)
    # below the threshold, or with the rule off, the same calls cost the same however they are unrolled
    for cfg in (dataclasses.replace(CFG, hot_call_sites=16384), dataclasses.replace(CFG, cold_call_cycles=0.0)):
        off, _ = _details(_unrolled_exp(1024), "B", cfg=cfg)
        assert off == pytest.approx(warm, rel=0.01)


def test_libm_calls_on_full_vector_registers_cost_more_per_lane_than_on_narrower_ones():
    full, _ = _details(_unary(te.exp, vector=16), "B")
    half, _ = _details(_unary(te.exp, vector=8), "B")
    scalar, _ = _details(_unary(te.exp, vector=1), "B")
    assert full - half == pytest.approx(1024 * CFG.libm_vector_lane_cycles, rel=0.05)
    off = dataclasses.replace(CFG, libm_vector_lane_cycles=0.0)
    assert _details(_unary(te.exp, vector=16), "B", cfg=off)[0] == pytest.approx(half, rel=0.05)
    assert scalar < full


def _asm(sch: s_tir.Schedule, target: str | dict = "x86-avx512") -> str:
    resolved, _ = dt.resolve_target(target)
    return tvm.compile(sch.mod, target=resolved).mod.inspect_source("asm")


def _packed(asm: str, op: str) -> int:
    """Packed (ymm/zmm) instructions `op` in the assembly: LLVM vectorized the code."""
    return sum(1 for line in asm.splitlines() if line.strip().startswith(op) and ("%zmm" in line or "%ymm" in line))


def _fused_copy(shape: tuple[int, ...]) -> s_tir.Schedule:
    X = te.placeholder(shape, "float32", name="X")
    Y = te.compute(shape, lambda *i: X(*i) + 1.0, name="Y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, Y])}))
    sch.fuse(*sch.get_loops(sch.get_sblock("Y")))
    return sch


def test_fused_loop_indices_pay_their_divisions_every_iteration():
    """A fused loop over (8, 56, 56) is split back into indices with f // 3136, f % 3136, (f % 3136) // 56 and
    f % 56 in every iteration (constant divisors: multiply-high sequences); over (8, 64, 64) they are shifts and
    masks, one micro-op each."""
    _, odd = _details(_fused_copy((8, 56, 56)), "Y")
    _, pow2 = _details(_fused_copy((8, 64, 64)), "Y")
    assert odd["int_ops"] == 4 * CFG.divmod_cost
    assert pow2["int_ops"] == 4
    assert odd["issue"] > pow2["issue"]


def _max_pool(pad_inside_x: bool, unroll: int = 64) -> s_tir.Schedule:
    """`max_pool_over_pad` on 32x32 (16 output columns: one AVX-512 vector) under auto-unroll `unroll`."""
    sch = max_pool_over_pad(32, 8, pad_inside_x)
    n = sch.get_loops(sch.get_sblock("pool"))[0]
    sch.annotate(n, "pragma_auto_unroll_max_step", unroll)
    sch.annotate(n, "pragma_unroll_explicit", 1)
    return sch


def test_small_intermediate_inside_the_loop_is_kept_in_registers_and_the_loop_vectorized():
    """A 3x3 pad computed inside the pooling loop x (its window unrolled) becomes registers: no stores or
    loads of it, and LLVM's loop vectorizer runs x (stride-2 loads of the input) in vector lanes. At the root,
    the pad is a whole buffer and stays one. LLVM's output shows the packed max instructions."""
    inside = _max_pool(pad_inside_x=True)
    tree = LoopTree.from_mod(inside.mod)
    assert register_buffers(tree, SPEC, CFG) == frozenset({"pad"})
    assert register_buffers(LoopTree.from_mod(_max_pool(pad_inside_x=False).mod), SPEC, CFG) == frozenset()
    regs = register_buffers(tree, SPEC, CFG)
    for block in ("pad", "pool"):
        leaf, path = _leaf_and_path(tree, block)
        det: dict = {}
        statement_cycles(leaf, path, SPEC, CFG, det, registers=regs)
        assert det["lanes"] == 16, (block, det)  # x, vectorized by LLVM
        if block == "pad":
            assert det["stores"] == 0, det
        else:
            assert det["loads"] == 0, det  # the pool's accumulator lives in registers; the pad too
    assert _packed(_asm(inside), "vmaxps") > 0
    # without the flag (the previous model) neither statement is vectorized
    off = dataclasses.replace(CFG, auto_vectorize=False, slp_vectorize=False)
    leaf, path = _leaf_and_path(tree, "pad")
    det = {}
    statement_cycles(leaf, path, SPEC, off, det, registers=regs)
    assert det["lanes"] == 1


def test_unrolled_contiguous_spatial_loop_is_slp_vectorized():
    """x of the pool unrolled by TVM (auto-unroll 512 covers 16 x 9 statements): LLVM's SLP vectorizer packs
    the 16 copies into vector lanes; the model credits them, and the assembly has packed max instructions."""
    sch = _max_pool(pad_inside_x=False, unroll=512)
    tree = LoopTree.from_mod(sch.mod)
    leaf, path = _leaf_and_path(tree, "pool")
    det: dict = {}
    statement_cycles(leaf, path, SPEC, CFG, det)
    assert det["lanes"] == 16 and det["inner_extent"] == 16  # x packed; y iterates
    det_off: dict = {}
    statement_cycles(leaf, path, SPEC, dataclasses.replace(CFG, slp_vectorize=False), det_off)
    assert det_off["lanes"] == 1 and det_off["statements"] == 16 * 9
    assert _packed(_asm(sch), "vmaxps") > 0


def _vector_stores(mod: tvm.IRModule) -> bool:
    """Whether TVM's lowering up to VectorizeLoop leaves vector (Ramp-indexed) stores in the program."""
    passes = [s_tir.transform.LowerOpaqueBlock(), tvm.tirx.transform.FlattenBuffer(),
              tvm.tirx.transform.VectorizeLoop(True)]
    return "T.Ramp" in tvm.ir.transform.Sequential(passes)(compacted(mod)).script()


def test_vectorized_padding_guard_is_scalarized_as_tvm_does():
    """A pad vectorized along its padded width: the if_then_else condition changes across the lanes, so TVM's
    VectorizeLoop emits scalar stores in a serial loop; the model runs that loop serially (and may give it to
    LLVM's loop vectorizer, not as one TVM vector). Padding only the height keeps TVM's vector."""
    def padded(pad_width: bool) -> s_tir.Schedule:
        X = te.placeholder((8, 30, 30), "float32", name="X")
        w0 = 1 if pad_width else 0
        P = te.compute((8, 32, 30 + 2 * w0), lambda c, h, w: tvm.tirx.if_then_else(
            tvm.tirx.all(h >= 1, h < 31, *((w >= 1, w < 31) if pad_width else ())), X[c, h - 1, w - w0],
            tvm.tirx.const(0.0, "float32")), name="P")
        sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, P])}))
        sch.vectorize(sch.get_loops(sch.get_sblock("P"))[-1])
        return sch

    wide, tall = padded(pad_width=True), padded(pad_width=False)
    assert not _vector_stores(wide.mod) and _vector_stores(tall.mod)
    _, det = _details(wide, "P")
    assert det["lanes"] == 32 and det["inner_extent"] == 32  # the serial loop, vectorized by LLVM as a loop
    leaf, path = _leaf_and_path(LoopTree.from_mod(wide.mod), "P")
    det_off: dict = {}
    statement_cycles(leaf, path, SPEC, dataclasses.replace(CFG, auto_vectorize=False), det_off)
    assert det_off["lanes"] == 1
    _, det_tall = _details(tall, "P")
    assert det_tall["lanes"] == 30 and det_tall["inner_extent"] == 32  # TVM's vector; h iterates


def test_a_body_beyond_the_large_body_limit_issues_at_the_narrow_width():
    """k1 (8) x i (16) unrolled around a 256-lane j: 2048 FMAs and 256 accumulators (through memory) in one body,
    issue-bound at `large_body_width` beyond the limit (FP-bound without it); a body of 2 rows stays under the
    limit at the full issue width."""
    def tile(rows: int) -> tuple[StmtLeaf, list[LoopNode]]:
        sch = matmul_schedule(M=rows, N=256, K=64)
        C = sch.get_sblock("C")
        i, j, k = sch.get_loops(C)
        k0, k1 = sch.split(k, [None, 8])
        sch.reorder(k0, k1, i, j)
        sch.unroll(k1)
        sch.unroll(i)
        sch.vectorize(j)
        sch.decompose_reduction(C, k0)
        return _leaf_and_path(LoopTree.from_mod(sch.mod), "C_update")

    def uops(det: dict) -> float:
        return det["fp_ops"] + det["loads"] + det["stores"] + det["int_ops"] + 1

    big, small, relaxed = {}, {}, {}
    statement_cycles(*tile(16), SPEC, CFG, big)
    statement_cycles(*tile(2), SPEC, CFG, small)
    statement_cycles(*tile(16), SPEC, dataclasses.replace(CFG, large_body_uops=float("inf")), relaxed)
    assert big["fp_ops"] == 8 * 16 * 16 and small["fp_ops"] == 8 * 2 * 16
    assert big["accumulators"] == 256 and big["stores"] == 256  # beyond the registers: loaded and stored
    assert uops(big) > CFG.large_body_uops >= uops(small)
    assert big["issue"] == pytest.approx(uops(big) / CFG.large_body_width) and big["issue"] > big["fp"]
    assert small["issue"] == pytest.approx(uops(small) / CFG.issue_width)
    assert relaxed["issue"] == pytest.approx(uops(big) / CFG.issue_width) and relaxed["issue"] < relaxed["fp"]


def test_a_body_beyond_the_huge_body_limit_issues_at_the_narrow_width_with_its_accumulators_in_registers():
    """An 8 x 32 tile (16 accumulators, kept in registers over the outer reduction loop) with 64 reduction steps
    unrolled: 1024 FMAs in one body. FP-bound by default; issue-bound at `large_body_width` beyond `huge_body_uops`."""
    sch = _unrolled_tile(8, 32, 128, rows=8, lanes=32, k_inner=64, outer="jik")
    _, base = _details(sch)
    assert not base["acc_in_memory"] and base["fp_ops"] == 1024 and base["fp"] > base["issue"]
    _, huge = _details(sch, cfg=dataclasses.replace(CFG, huge_body_uops=1200))
    assert base["uops"] > 1200 and huge["issue"] == pytest.approx(huge["uops"] / CFG.large_body_width)
    assert huge["issue"] > huge["fp"]


def _strided_conv(gapless: bool) -> s_tir.Schedule:
    """Y[f, x] = sum over c, r of X[c, 2x + r] W[f, c, r] with x innermost (LLVM's loop vectorizer takes it) and the
    f copies unrolled; with `gapless` the r copies are unrolled around x as well, so together they read every
    element of X's rows, otherwise only the even ones."""
    X = te.placeholder((16, 32), "float32", name="X")
    W = te.placeholder((8, 16, 3), "float32", name="W")
    c, r = te.reduce_axis((0, 16), name="c"), te.reduce_axis((0, 3), name="r")
    Y = te.compute((8, 14), lambda f, x: te.sum(X[c, 2 * x + r] * W[f, c, r], axis=[c, r]), name="Y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, W, Y])}))
    f, x, c_loop, r_loop = sch.get_loops(sch.get_sblock("Y"))
    if gapless:
        sch.reorder(c_loop, f, r_loop, x)
        sch.unroll(r_loop)
    else:
        sch.reorder(c_loop, r_loop, f, x)
    sch.unroll(f)
    sch.decompose_reduction(sch.get_sblock("Y"), c_loop)
    return sch


@pytest.mark.parametrize("gapless", [False, True])
def test_zen_gathers_a_strided_load_whose_copies_leave_gaps(gapless):
    """For Zen 4 and 5 LLVM's vectorizer gathers (vgather) a stride-2 load whose copies read only the even
    elements, and interleaves (wide loads and shuffles) when they cover every element; for other x86 CPUs it
    interleaves both. The model follows `HardwareSpec.llvm_gathers`."""
    sch = _strided_conv(gapless)
    for mcpu, gathers in (("znver5", not gapless), ("skylake-avx512", False)):
        target, spec = dt.resolve_target({"kind": "llvm", "mcpu": mcpu})
        asm = tvm.compile(sch.mod, target=target).mod.inspect_source("asm")
        assert ("\tvgather" in asm) == gathers, mcpu
        assert spec.llvm_gathers == (mcpu == "znver5")
        leaf, path = _leaf_and_path(LoopTree.from_mod(sch.mod), "Y_update")
        det: dict = {}
        statement_cycles(leaf, path, spec, KernelConfig.for_spec(spec), det)
        assert (det["gathers"] > 0) == gathers, mcpu
        assert (det["shuffle"] > 0) == (not gathers), mcpu


def _depthwise_channel_loop() -> s_tir.Schedule:
    """Y[c, y, x] = sum over r, s of P[c, y + r, x + s] W[c, r, s] with the y, x and s copies unrolled inside the
    channel loop: the loop around the body is c, whose lanes are a channel (14 elements of Y) apart."""
    P = te.placeholder((32, 4, 9), "float32", name="P")
    W = te.placeholder((32, 3, 3), "float32", name="W")
    r, s = te.reduce_axis((0, 3), name="r"), te.reduce_axis((0, 3), name="s")
    Y = te.compute((32, 2, 7), lambda c, y, x: te.sum(P[c, y + r, x + s] * W[c, r, s], axis=[r, s]), name="Y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([P, W, Y])}))
    c, y, x, r_loop, s_loop = sch.get_loops(sch.get_sblock("Y"))
    sch.reorder(r_loop, c, y, x, s_loop)
    for loop in (y, x, s_loop):
        sch.unroll(loop)
    sch.decompose_reduction(sch.get_sblock("Y"), r_loop)
    return sch


def test_avx512_vectorizes_a_channel_loop_with_gathers_and_scatters():
    """With AVX-512 LLVM's loop vectorizer takes the channel loop around an unrolled depthwise body, gathering the
    inputs and scattering the outputs (a depthwise candidate's 7-lane SLP estimate measured 3x too fast); with
    AVX2 it has no scatter and leaves the loop alone. The model vectorizes the channel loop only with AVX-512."""
    sch = _depthwise_channel_loop()
    for mcpu, avx512 in (("znver5", True), ("skylake-avx512", True), ("znver3", False)):
        target, spec = dt.resolve_target({"kind": "llvm", "mcpu": mcpu})
        asm = tvm.compile(sch.mod, target=target).mod.inspect_source("asm")
        assert ("\tvscatter" in asm) == avx512, mcpu
        leaf, path = _leaf_and_path(LoopTree.from_mod(sch.mod), "Y_update")
        det: dict = {}
        statement_cycles(leaf, path, spec, KernelConfig.for_spec(spec), det)
        assert (det["lanes"] == 32) == avx512, mcpu  # the channel loop's 32 lanes
        assert (det["gathers"] > 0) == avx512, mcpu


def _unrolled_tile(M: int, N: int, K: int, rows: int, lanes: int, k_inner: int, outer: str) -> s_tir.Schedule:
    """C = A B with a body of `k_inner` reduction steps x `rows` rows (both unrolled) on one `lanes`-wide vector;
    `outer` orders the three loops around it ("jki": column blocks, outer reduction, row blocks innermost)."""
    sch = matmul_schedule(M=M, N=N, K=K)
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, lanes])
    k0, k1 = sch.split(k, [None, k_inner])
    sch.reorder(*({"i": i0, "j": j0, "k": k0}[c] for c in outer), k1, i1, j1)
    sch.unroll(k1)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.decompose_reduction(C, k0)
    return sch


def _tile_through_memory(lanes: int) -> s_tir.Schedule:
    """C += A B with a body of 8 rows x 4 reduction steps on one `lanes`-wide vector, iterated over row blocks
    inside the outer reduction loop (as a 1x1 convolution's pick does): each accumulator is loaded, updated
    and stored in every iteration."""
    return _unrolled_tile(40, lanes * 4, 32, rows=8, lanes=lanes, k_inner=4, outer="jki")


def test_accumulators_through_memory_pay_the_reload_between_two_bodies_chains():
    """A body that loads its accumulators, runs the unrolled reduction steps' chains on them and stores them, inside
    a loop that walks to other output tiles, waits between two bodies' chains as a tile kept in registers does between
    two runs of its reduction loop (Zen 4, BERT-base's 128 x 768 x 3072 dense layer: its 4 x 32 tile run 32 steps per
    body over 4 row groups ran 3.44 ms, kept over the whole reduction 3.17 ms, session 85)."""
    sch = _tile_through_memory(16)
    _, det = _details(sch)
    _, off = _details(sch, cfg=dataclasses.replace(CFG, accumulator_reload_cycles=0.0))
    assert det["acc_in_memory"] and det["accumulators"] == 8 and det["statements"] == 32
    assert det["reload"] == pytest.approx(8 * CFG.accumulator_reload_cycles) and off["reload"] == 0.0
    assert det["body_cycles"] == pytest.approx(off["body_cycles"] + det["reload"])


def test_a_widened_vector_pays_an_insert_per_load_and_an_extract_per_store_on_the_fp_pipes():
    """LLVM assembles a 10-lane vector in a zmm from an 8- and a 2-lane load (vinsertf64x4) and takes it apart for
    its stores (vextractf32x4); on Zen 5 these shuffles slow an accumulator update by 1.7x, as if they took FMA
    slots (benchmarks/widened_vectors.py). A 16-lane vector has none."""
    for lanes, widened in ((16, 0), (10, 4 + 2 * 8)):  # B's 4 vectors, then each accumulator's load and store
        sch = _tile_through_memory(lanes)
        _, det = _details(sch)
        assert det["accumulators"] == 8 and det["stores"] > 0
        assert det["widened"] == widened
        assert det["fp"] == pytest.approx((det["fp_ops"] + widened) / CFG.fp_pipes)
        insts = _kernel_instructions(sch)
        shuffles = _count(insts, "vinsertf64x4", "vinsertf32x4", "vextractf32x4", "vextractf64x4")
        assert (shuffles > 0) == (widened > 0)
        if widened:
            assert abs(shuffles - widened) <= 0.1 * widened, (shuffles, widened)


def _blocks(asm: str, function: str = "main_compute_") -> list[list[str]]:
    """The mnemonics of each labelled basic block of `function` in x86 assembly text."""
    blocks: list[list[str]] = [[]]
    for line in asm.split(function + ":", 1)[1].splitlines():
        if line.startswith(".LBB"):
            blocks.append([])
        elif line and not line.startswith(("\t", ".")):
            break  # the next function
        elif line.startswith("\t") and not line.startswith("\t."):
            blocks[-1].append(line.split()[0])
    return blocks


def test_hoisted_operands_of_odd_width_are_built_lane_by_lane_before_the_loop():
    """LICM hoists B's rows (invariant in the row-block loop) out of `_tile_through_memory`'s iterating loop; a vector
    wider than a register whose lane count is not a power of two (24, 40, 48, 80) is then assembled from one scalar
    load and one insert per lane (vmovss, vinsertps) in the loop's preheader, once per run of the loop, while the loop
    itself (the FMAs, the accumulators' vector loads and stores) has none. 16, 32 and 64 lanes load whole registers.
    The model adds a lane's cost per hoisted lane to each run of the loop."""
    k1 = 4  # B's rows in the body
    for lanes, by_lane in ((16, False), (32, False), (64, False), (24, True), (40, True), (48, True), (80, True)):
        sch = _tile_through_memory(lanes)
        blocks = _blocks(_asm(sch))
        loop = next(b for b in blocks if "vfmadd231ps" in b)
        assert "vinsertps" not in loop and "vmovss" not in loop, lanes
        scalar_loads = sum(b.count("vmovss") for b in blocks)
        assert scalar_loads == (k1 * lanes if by_lane else 0), lanes
        _, det = _details(sch)
        assert det["preheader"] == (k1 * lanes * CFG.preheader_lane_cycles if by_lane else 0), lanes
        cycles, _ = _details(sch)
        off, _ = _details(sch, cfg=dataclasses.replace(CFG, hoisted_by_lane=False))
        assert (cycles > off) == by_lane, lanes
    for lanes, by_lane in ((8, False), (16, False), (12, True), (24, True)):  # AVX2's 8-lane registers
        insts = _kernel_instructions(_tile_through_memory(lanes), "x86-avx2")
        assert (_count(insts, "vinsertps") > 0) == by_lane, lanes


def _tile_at_epilogue(rows: int, cols: int, lanes: int = 8) -> s_tir.Schedule:
    """D = A B + 1 with the matmul computed at D's rows x cols tile (a compacted accumulator buffer, as a convolution
    fused with its epilogue has), the reduction outermost in the tile; the tile's loops are left to LLVM."""
    A = te.placeholder((rows * 4, 64), "float32", name="A")
    B = te.placeholder((64, cols * 2), "float32", name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((rows * 4, cols * 2), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((rows * 4, cols * 2), lambda i, j: C[i, j] + 1.0, name="D")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, D])}))
    i, j = sch.get_loops(sch.get_sblock("D"))
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, cols])
    sch.reorder(i0, j0, i1, j1)
    block = sch.get_sblock("C")
    sch.compute_at(block, j0)
    ci, cj, ck = sch.get_loops(block)[-3:]
    cj2, cj3 = sch.split(cj, [None, lanes])
    k0, k1 = sch.split(ck, [None, 4])
    sch.reorder(k0, ci, cj2, k1, cj3)
    sch.vectorize(cj3)
    sch.unroll(k1)
    sch.decompose_reduction(block, k0)
    return sch


def test_half_register_columns_of_a_large_register_tile_are_joined_into_full_registers():
    """An accumulator tile held in registers across the reduction, of 8-lane TVM vectors on AVX-512: LLVM runs its
    FMAs on zmm registers, two adjacent columns each, when the tile has more than 128 elements (2 x 80, 4 x 48), and
    on ymm registers when it has 128 or fewer (2 x 64, 4 x 32). The model halves its FP operations in the first case."""
    for rows, cols, joined in ((2, 80, True), (4, 48, True), (2, 64, False), (4, 32, False)):
        sch = _tile_at_epilogue(rows, cols)
        fmas = [line for line in _asm(sch, {"kind": "llvm", "mcpu": "znver4"}).splitlines()
                if line.strip().startswith("vfmadd")]
        assert fmas and all(("%zmm" in f) == joined and ("%ymm" in f) != joined for f in fmas), (rows, cols)
        _, det = _details(sch, "C_update")
        _, apart = _details(sch, "C_update", cfg=dataclasses.replace(CFG, join_half_vectors_above=0))
        assert det["stores"] == 0, (rows, cols)  # held in registers across the reduction loop
        assert det["fp_ops"] * (2 if joined else 1) == apart["fp_ops"], (rows, cols)


def _strided_window(unroll_x: bool) -> s_tir.Schedule:
    """Y[c, y, x] = sum over r, s of P[c, 2y + r, 2x + s] W[c, r, s] (a stride-2 3x3 depthwise window) with r, s
    and the two output rows unrolled inside the x loop, or x unrolled as well."""
    P = te.placeholder((4, 5, 33), "float32", name="P")
    W = te.placeholder((4, 3, 3), "float32", name="W")
    r, s = te.reduce_axis((0, 3), name="r"), te.reduce_axis((0, 3), name="s")
    Y = te.compute((4, 2, 14), lambda c, y, x: te.sum(P[c, y * 2 + r, x * 2 + s] * W[c, r, s], axis=[r, s]), name="Y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([P, W, Y])}))
    c, y, x, r_loop, s_loop = sch.get_loops(sch.get_sblock("Y"))
    sch.reorder(c, x, r_loop, s_loop, y)
    for loop in (r_loop, s_loop, y) + ((x,) if unroll_x else ()):
        sch.unroll(loop)
    sch.decompose_reduction(sch.get_sblock("Y"), x)
    return sch


def test_avx512_gathers_a_stride_2_window_whose_copies_overlap_the_next_lane():
    """The copies of P[..., 2x + s] for s = 0, 1, 2 reach the next lane's first element, so no interleave group
    holds them: with AVX-512 LLVM's loop vectorizer gathers them (every CPU checked, not only the Zen parts whose
    gapped strides gather too). The model counts gathers there instead of wide loads and shuffles."""
    sch = _strided_window(unroll_x=False)
    for mcpu in ("znver4", "skylake-avx512"):
        target, spec = dt.resolve_target({"kind": "llvm", "mcpu": mcpu})
        assert "\tvgather" in tvm.compile(sch.mod, target=target).mod.inspect_source("asm"), mcpu
        cfg = KernelConfig.for_spec(spec)
        _, det = _details(sch, "Y_update", cfg, spec)
        assert det["lanes"] == 14 and det["gathers"] > 0 and det["shuffle"] == 0, mcpu
        _, det_off = _details(sch, "Y_update", dataclasses.replace(cfg, overlapping_strides_gather=False), spec)
        assert det_off["gathers"] == 0 and det_off["shuffle"] > 0, mcpu


def test_slp_packing_is_not_credited_over_strided_copies():
    """With x unrolled as well, LLVM does not pack the x copies of the stride-2 loads with wide loads and
    shuffles (the assembly gathers some and leaves others scalar); the model leaves such copies scalar rather than
    credit a 14-lane vector (which ranked depthwise_conv2d_s2's random samples worse: top-10 0.69 against 0.81)."""
    sch = _strided_window(unroll_x=True)
    target, spec = dt.resolve_target({"kind": "llvm", "mcpu": "znver4"})
    asm = tvm.compile(sch.mod, target=target).mod.inspect_source("asm")
    assert "vfmadd231ss" in asm or "vfmadd213ss" in asm  # some copies stay scalar
    cfg = KernelConfig.for_spec(spec)
    _, det = _details(sch, "Y_update", cfg, spec)
    assert det["lanes"] == 1
    _, packed = _details(sch, "Y_update", dataclasses.replace(cfg, slp_strided=True), spec)
    assert packed["lanes"] == 14 and packed["fp"] < det["fp"]


def test_a_multiply_add_body_issues_at_the_fma_issue_width():
    """With `fma_issue_width` (a calibration's setting; 2 measured on Emerald Rapids) an 8 x 32 register tile (16 FMAs,
    8 broadcasts and 2 vector loads per reduction step, accumulators in registers) is issue-bound at that width; with
    the default it is FP-bound; a body without FMAs (the tile's initialisation) keeps the full issue width."""
    narrow = dataclasses.replace(CFG, fma_issue_width=2.0)
    _, there = _details(_tile_8x32(False), cfg=narrow)
    _, default = _details(_tile_8x32(False))
    assert there["accumulators"] == 16 and there["fp_ops"] == 128 and not there["acc_in_memory"]
    assert there["issue"] == pytest.approx(there["uops"] / 2) and there["issue"] > there["fp"]
    assert default["issue"] == pytest.approx(default["uops"] / CFG.issue_width) and default["fp"] > default["issue"]
    _, init = _details(_tile_8x32(False), block="C_init", cfg=narrow)
    assert init["issue"] == pytest.approx(init["uops"] / CFG.issue_width)


def test_accumulator_stores_can_take_load_port_slots():
    """`accumulator_stores_load` (measured by benchmarks/accumulator_reload.py: reloading 16 accumulators per body cost
    about two cycles each) puts the stores of accumulators that go through memory on the load ports too; a body whose
    accumulators stay in registers is unchanged."""
    cfg = dataclasses.replace(CFG, load_ports=1.0)
    on = dataclasses.replace(cfg, accumulator_stores_load=True)
    _, plain = _details(_tile_through_memory(16), cfg=cfg)
    _, shared = _details(_tile_through_memory(16), cfg=on)
    assert plain["acc_in_memory"] and plain["accumulators"] == 8 and plain["stores"] == 8
    assert plain["loads"] == 32 + 4 + 8  # broadcasts of A, vectors of B, accumulators
    assert plain["load"] == pytest.approx(44.0) and shared["load"] == pytest.approx(52.0)
    assert shared["stores"] == plain["stores"] and shared["store"] == plain["store"]
    _, regs = _details(_tile_8x32(False), cfg=cfg)
    _, regs_on = _details(_tile_8x32(False), cfg=on)
    assert not regs["acc_in_memory"] and regs_on["load"] == regs["load"]


def _depthwise_s2_rows(pad_inlined: bool) -> s_tir.Schedule:
    """The small depthwise_conv2d_s2 (32 channels, 32 x 32 -> 16 x 16) in MetaSchedule's shape: 4 output rows x
    the whole 16-wide row accumulate in a cache-write buffer while the kernel rows iterate around them; TVM unrolls
    the 64 copies (auto-unroll 64). The padding inlined (x vectorized: its guard scalarizes TVM's vector) or at
    the root (x only unrolled)."""
    sch = s_tir.Schedule(workloads.small("depthwise_conv2d_s2").task().mod)
    conv = sch.get_sblock("depthwise_conv")
    n, c, y, x, rh, rw = sch.get_loops(conv)
    yo, yi = sch.split(y, [4, 4])
    sch.reorder(n, c, rw, yo, rh, yi, x)
    sch.reverse_compute_at(sch.cache_write(conv, 0, "global"), c)
    if pad_inlined:
        sch.compute_inline(sch.get_sblock("pad"))
        sch.vectorize(x)
    outer = sch.fuse(n, c)
    sch.parallel(outer)
    sch.annotate(outer, "pragma_auto_unroll_max_step", 64)
    sch.annotate(outer, "pragma_unroll_explicit", 1)
    sch.decompose_reduction(conv, rw)
    return sch


def test_guarded_lanes_counts_the_copies_whose_padding_guard_can_fail():
    """With the padding inlined, x * 2 + rw - 1 >= 0 can fail only in copy x = 0 (rw iterates outside the copies,
    from 0) and x * 2 + rw < 33 in none: one guarded lane of 16. The row guards do not change across the x copies
    and are not counted; an unknown guard counts every copy."""
    leaf, path = _leaf_and_path(LoopTree.from_mod(_depthwise_s2_rows(True).mod), "depthwise_conv_update")
    x = path[-1]
    assert x.extent == 16 and len(leaf.guard_conditions) == 4
    assert guarded_lanes(leaf, x.var, x.extent, path) == 1
    unknown = dataclasses.replace(leaf, guard_conditions=None)
    assert guarded_lanes(unknown, x.var, x.extent, path) == 16


def test_failing_copies_counts_the_unrolled_copies_whose_padding_guard_can_fail():
    """The same padded body, every loop but the parallel one unrolled: a row guard fails only in the copies of the
    first row block's first row (yo = yi = rh = 0: 3 x 16 copies), a column guard only in those of the first column
    (x = rw = 0: 4 x 4 x 3), 95 of 2304 in all. With x alone unrolled, the row guards can fail in every copy."""
    leaf, path = _leaf_and_path(LoopTree.from_mod(_depthwise_s2_rows(True).mod), "depthwise_conv_update")
    unrolled = {lp.var: lp.extent for lp in path[1:]}
    assert sorted(unrolled.values()) == [3, 3, 4, 4, 16]
    assert failing_copies(leaf, unrolled, path) == pytest.approx(95 / 2304)
    assert failing_copies(leaf, {path[-1].var: 16}, path) == 1.0
    assert failing_copies(dataclasses.replace(leaf, guard_conditions=None), unrolled, path) == 1.0


def test_slp_packs_unrolled_stride_2_copies_with_wide_loads_and_permutes():
    """TVM scalarizes the 16-lane vector (the padding guard changes across it) and unrolls the copies; LLVM's SLP
    vectorizer packs them with wide loads and permutes (`vpermt2ps` on znver5), the guard failing only in the first
    copy. With the padding at the root the x copies are plain stride-2 loads, packed the same way. The model credits
    both (lanes 16); without the two relaxations it left them scalar."""
    target, spec = dt.resolve_target({"kind": "llvm", "mcpu": "znver5"})
    cfg = KernelConfig.for_spec(spec)
    for inlined in (True, False):
        sch = _depthwise_s2_rows(inlined)
        asm = tvm.compile(sch.mod, target=target).mod.inspect_source("asm")
        assert "vpermt2ps" in asm and _packed(asm, "vfmadd") > 0, inlined
        _, det = _details(sch, "depthwise_conv_update", cfg, spec)
        assert det["lanes"] == 16 and det["gathers"] == 0, inlined
        off = dataclasses.replace(cfg, slp_guarded_lanes=0) if inlined else dataclasses.replace(
            cfg, slp_strided_apart=False)
        _, det_off = _details(sch, "depthwise_conv_update", off, spec)
        assert det_off["lanes"] == 1 and det_off["body_cycles"] > 2 * det["body_cycles"], inlined


def _padded_plane(split_rows: bool) -> s_tir.Schedule:
    """A 56 x 56 plane padded by one on every side, vectorized along the padded width (58 lanes, scalarized by TVM
    for the guard and unrolled by the pragma), its rows one loop over the padded height or split in two."""
    X = te.placeholder((8, 56, 56), "float32", name="X")
    P = te.compute((8, 58, 58), lambda c, h, w: tvm.tirx.if_then_else(
        tvm.tirx.all(h >= 1, h < 57, w >= 1, w < 57), X[c, h - 1, w - 1], tvm.tirx.const(0.0, "float32")), name="P")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, P])}))
    c, h, w = sch.get_loops(sch.get_sblock("P"))
    if split_rows:
        sch.split(h, [None, 2])
    sch.vectorize(w)
    sch.annotate(c, "pragma_auto_unroll_max_step", 64)
    sch.annotate(c, "pragma_unroll_explicit", 1)
    return sch


def test_a_row_guard_on_one_counter_at_both_ends_keeps_the_padded_copies_scalar():
    """Over the whole padded height the row guard tests one loop counter at both ends (row 0 and row 57): LLVM makes
    it a switch in each of the 58 copies and leaves them scalar stores. With the rows split in two, each unrolled
    row's guard can fail at one end only, LLVM merges the copies' branches and packs them into vector stores. The
    model prices the first as 58 scalar copies (`edge_switch_guarded`), the second as one 58-lane vector."""
    znver5 = {"kind": "llvm", "mcpu": "znver5"}
    _, spec = dt.resolve_target(znver5)
    cfg = KernelConfig.for_spec(spec)
    for split in (False, True):
        sch = _padded_plane(split)
        stores = [inst for inst in _kernel_instructions(sch, znver5) if inst.mem_write]
        scalar_stores = _count(stores, "vmovss")
        vector_stores = sum(1 for inst in stores if inst.mnemonic in ("vmovups", "vmovaps") and inst.width >= 256)
        leaf, path = _leaf_and_path(LoopTree.from_mod(sch.mod), "P")
        _, det = _details(sch, "P", cfg, spec)
        if split:
            assert scalar_stores < 16 and vector_stores >= 3
            assert not edge_switch_guarded(leaf, path[:-1]) and det["lanes"] == 58
        else:
            assert scalar_stores >= 56 and vector_stores < 3
            assert edge_switch_guarded(leaf, path[:-1]) and det["lanes"] == 1 and det["statements"] == 58
            _, det_off = _details(sch, "P", dataclasses.replace(cfg, edge_switches=False), spec)
            assert det_off["lanes"] == 58 and det["body_cycles"] > 5 * det_off["body_cycles"]


def _lowered_loop_extents(mod: tvm.IRModule) -> list[int]:
    """Extents of the loops left in `mod` after the passes of TVM's CPU lowering up to its UnrollLoop."""
    passes = [s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
              s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
              s_tir.transform.LowerOpaqueBlock(), tvm.tirx.transform.FlattenBuffer(),
              tvm.tirx.transform.VectorizeLoop(True), tvm.tirx.transform.StorageRewrite(),
              s_tir.transform.HoistIfThenElse(), tvm.tirx.transform.UnrollLoop()]
    lowered = tvm.transform.Sequential(passes)(mod)
    extents: list[int] = []
    tvm_ffi.structural_walk(lowered["main"].body, [(tvm.tirx.For, lambda n: extents.append(int(n.extent)))],
                            order="pre")
    return extents


@pytest.mark.parametrize("max_step", [64, 512])
def test_auto_unroll_counts_every_statement_under_the_loop(max_step):
    """TVM's UnrollLoop weighs a loop by all the stores of its body: the padding's 9 copies per output column fit
    a step budget of 512 x 56 columns, but with the pooling's own stores beside them the column loop stays rolled."""
    sch = max_pool_over_pad(112, 4, pad_inside_x=True)
    outer = sch.get_loops(sch.get_sblock("pool"))[0]
    sch.annotate(outer, "pragma_auto_unroll_max_step", max_step)
    sch.annotate(outer, "pragma_unroll_explicit", 1)
    assert 56 in _lowered_loop_extents(sch.mod)  # the column loop, as TVM leaves it
    _, det = _details(sch, "pad")
    assert det["statements"] == 9 and det["inner_extent"] == 56


def _tile_over_column_blocks(k_inner: int, blocks: int) -> s_tir.Schedule:
    """C = A B with a body of `k_inner` reduction steps x 4 rows on 64 lanes (4 vectors), unrolled, iterated by a
    loop over `blocks` column blocks: the body's broadcasts of A do not change with that loop (the Zen 5 GEMM
    search's pick of session 67, small)."""
    return _unrolled_tile(16, 64 * blocks, 64, rows=4, lanes=64, k_inner=k_inner, outer="kij")


def test_hoisted_operands_beyond_the_registers_are_spilled_before_each_run_of_the_loop():
    """LICM hoists the body's broadcasts of A out of the column-block loop whether or not they fit: with 16
    reduction steps (64 broadcasts) the preheader broadcasts them and stores most to the stack, and the loop reads
    them back; with 4 steps (16) they stay in registers. The model charges `hoisted_spill_cycles` per hoisted vector
    to each run of the loop only when they do not fit."""
    cfg = dataclasses.replace(CFG, hoisted_spill_cycles=1.0)
    for k_inner, columns, spilled in ((16, 2, True), (4, 8, False)):
        sch = _tile_over_column_blocks(k_inner, columns)
        loop = max(_blocks(_asm(sch)), key=lambda b: b.count("vfmadd231ps") + b.count("vfmadd213ps"))
        assert "vbroadcastss" not in loop, k_inner  # each broadcast is made once per run of the column loop
        insts = _kernel_instructions(sch)
        assert _count(insts, "vbroadcastss") == 4 * k_inner, k_inner
        spills = sum(1 for inst in insts if inst.mem_write and inst.mem_base == "rsp" and inst.mnemonic.startswith("v"))
        assert (spills >= 4 * k_inner - CFG.registers) if spilled else spills < 4, k_inner
        _, det = _details(sch, cfg=cfg)
        assert det["inner_extent"] == columns and det["accumulators"] == 16
        assert det["preheader"] == (4 * k_inner * cfg.hoisted_spill_cycles if spilled else 0), k_inner
        assert _details(sch)[1]["preheader"] == 0


def _row_max_at_each_column(rows: int, cols: int, unroll: bool) -> s_tir.Schedule:
    """Y[i, j] = X[i, j] - max_k X[i, k], with the row maximum computed again inside the column loop (as a
    candidate's compute_at puts it), its reduction loop unrolled or not."""
    X = te.placeholder((rows, cols), "float32", name="X")
    k = te.reduce_axis((0, cols), name="k")
    M = te.compute((rows,), lambda i: te.max(X[i, k], axis=k), name="M")
    Y = te.compute((rows, cols), lambda i, j: X[i, j] - M[i], name="Y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, Y])}))
    sch.compute_at(sch.get_sblock("M"), sch.get_loops(sch.get_sblock("Y"))[1])
    if unroll:
        sch.unroll(sch.get_loops(sch.get_sblock("M"))[-1])
    return sch


def test_a_reduction_recomputed_in_a_loop_that_does_not_index_it_runs_once_per_row_when_unrolled():
    """LLVM's LICM takes a row maximum that TVM unrolled out of the column loop around it (it reads nothing that
    loop changes), so its max instructions run once per row; rolled, the reduction loop stays inside and runs at
    every column. The model divides the statement's executions by the hoisted loop's extent only in the first case."""
    rows, cols = 64, 128
    for unroll, hoisted in ((True, cols), (False, 1)):
        sch = _row_max_at_each_column(rows, cols, unroll)
        tree = LoopTree.from_mod(sch.mod)
        counts = analyze_asm(_asm(sch), "x86", tree.preorder())[2]
        maxes = sum(b.executions * sum(1 for i in b.block.instructions if "max" in i.mnemonic) for b in counts.blocks)
        # rolled, LLVM peels the first step of each reduction (folded against the initial value): within 1%
        assert maxes == (rows * cols if unroll else pytest.approx(rows * cols * cols, rel=0.01)), unroll
        (_, items), = statement_paths(tree)
        (leaf, path), = [(s, p) for s, p in items if s.block == "M" and not s.init]
        assert licm_hoisted(leaf, path) == hoisted
        for licm, runs in ((True, rows if unroll else rows * cols * cols), (False, rows * cols if unroll else None)):
            det: dict = {}
            statement_cycles(leaf, path, SPEC, dataclasses.replace(CFG, licm_statements=licm), det)
            assert det["executions"] == (runs or rows * cols * cols), (unroll, licm)
        # the subtraction reads the column: it stays, and it does not write what the maximum reads
        (y_leaf, y_path), = [(s, p) for s, p in items if s.block == "Y"]
        assert licm_hoisted(y_leaf, y_path) == 1
        trips = {(s.block, s.init): t for s, t in statement_trips(tree)}
        assert trips["M", False] == rows * cols * cols / hoisted and trips["Y", False] == rows * cols


ZEN4 = {"kind": "llvm", "mcpu": "znver4", "mtriple": "x86_64-linux-gnu", "num-cores": 2}


def test_guarded_window_at_a_loop_its_guards_ignore_is_vectorized_with_masks():
    """The window's rows are left to LLVM (25 copies exceed TVM's unroll step of 16), its padding guards depend on
    the rows and columns, not on the channel loop around: LLVM vectorizes the channel loop and turns each guard into
    a mask of all or no lanes. `uniform_guard_masks` (on for x86) prices the window as vectors; without it, as
    scalar code behind branches."""
    sch = depthwise_window_at_channels(64, stride=2, unroll_step=16)
    text = _asm(sch, ZEN4)
    masked = [ln for ln in text.splitlines() if ln.strip().startswith("vmovups") and "{%k" in ln and "mm" in ln]
    assert masked and _packed(text, "vfmadd") > 0
    _, det = _details(sch, "P", dataclasses.replace(CFG, uniform_guard_masks=True))
    assert det["lanes"] == 64
    _, off = _details(sch, "P", CFG)
    assert off["lanes"] == 1
    assert KernelConfig.for_spec(SPEC).uniform_guard_masks


def test_loop_vectorized_by_llvm_loads_its_invariant_operands_as_whole_registers():
    """The multiply-adds' weights do not change with the output columns around the 48-channel loop that LLVM
    vectorizes; LLVM loads them as whole zmm registers in every column (no lane-by-lane assembly, no vinsertps), so
    the lane-by-lane preheader of a 48-lane TVM vector (`hoisted_by_lane`) does not apply to it."""
    sch = depthwise_window_at_channels(48, stride=2)
    text = _asm(sch, ZEN4)
    assert "vinsertps" not in text and _packed(text, "vfmadd") > 0
    _, det = _details(sch, "D_update")
    assert det["lanes"] == 48 and det["preheader"] == 0


def _znver4_pick(op: str, sketch: str, decisions: dict) -> tuple[tvm.IRModule, str, dt.HardwareSpec]:
    """A suite operator's candidate (a search's pick), its module and its assembly for Zen 4."""
    task = workloads.get(op).task()
    cand = Candidate.from_json(task, dt.SearchSpace(task).sketch(sketch), decisions)
    mod = cand.to_mod()
    target, spec = dt.resolve_target({"kind": "llvm", "mcpu": "znver4"})
    return mod, tvm.compile(mod, target=target).mod.inspect_source("asm"), spec


def test_avx512_gathers_a_stride_2_load_under_a_guard_that_changes_across_the_lanes():
    """depthwise_conv2d_s2 with its padding read in place and 14 output columns as the vector: the guard on the
    input column changes across the lanes, so no load can be widened past it; LLVM builds each lane on its own
    (inserts and masked gathers). Priced as interleaved wide loads, this pick of session 89's draw was predicted at
    0.13 ms and ran 0.71-1.34 ms; the model now counts a gathered lane per element."""
    mod, asm, spec = _znver4_pick("depthwise_conv2d_s2", "depthwise_conv2d_s2/2", {
        "depthwise_conv/R4": [1, 3], "depthwise_conv/R5": [1, 3], "depthwise_conv/S0": [1, 1, 1, 1],
        "depthwise_conv/S1": [12, 1, 4, 2], "depthwise_conv/S2": [4, 1, 14, 1], "depthwise_conv/S3": [1, 1, 4, 14],
        "depthwise_conv/parallel": 7, "depthwise_conv/unroll": 0, "depthwise_conv/vectorize": 2, "pad/at": 9,
        "pad/parallel": 2, "pad/unroll": 2, "pad/vectorize": 3})
    assert "\tvgather" in asm and "\tvinsertps" in asm
    sch = s_tir.Schedule(mod)
    cfg = KernelConfig.for_spec(spec)
    _, det = _details(sch, "depthwise_conv_update", cfg, spec)
    assert det["lanes"] == 14 and det["gathers"] == 6 * 14 and det["shuffle"] == 0  # 2 channels x 3 columns
    _, det_off = _details(sch, "depthwise_conv_update", dataclasses.replace(cfg, guarded_strides_gather=False), spec)
    assert det_off["gathers"] == 0 and det_off["shuffle"] > 0
    assert det["body_cycles"] > 4 * det_off["body_cycles"]


def test_avx512_gathers_the_guarded_strided_copies_of_a_window_that_the_loop_vectorizer_takes():
    """depthwise_conv2d_s2 with a 5 x 3 padded window copied per output column into registers and the 56 columns
    left to LLVM: its loop vectorizer takes them and gathers the window's guarded stride-2 loads (masked
    `vgatherqps`, the copy forwarded into the multiply-adds). Priced as interleaved loads, this pick of session 89's
    second draw was predicted at 0.126 ms and ran 0.340 ms; the row guard here reads a floormod, so every copy counts
    as guarded."""
    mod, asm, spec = _znver4_pick("depthwise_conv2d_s2", "depthwise_conv2d_s2/2", {
        "depthwise_conv/R4": [1, 3], "depthwise_conv/R5": [3, 1], "depthwise_conv/S0": [1, 1, 1, 1],
        "depthwise_conv/S1": [4, 24, 1, 1], "depthwise_conv/S2": [14, 2, 1, 2], "depthwise_conv/S3": [1, 56, 1, 1],
        "depthwise_conv/parallel": 4, "depthwise_conv/unroll": 3, "depthwise_conv/vectorize": 0, "pad/at": 8,
        "pad/parallel": 3, "pad/unroll": 3, "pad/vectorize": 0})
    assert "\tvgatherqps" in asm and "\tvpermt2ps" in asm
    tree = LoopTree.from_mod(mod)
    cfg = KernelConfig.for_spec(spec)
    leaf, path = _leaf_and_path(tree, "pad")
    regs = register_buffers(tree, spec, cfg)
    assert multiply_add_inputs(tree, regs) == {"pad"}  # the copy feeds the multiply-adds through registers

    def pad_details(config: KernelConfig, fma_inputs: frozenset[str]) -> dict:
        det: dict = {}
        statement_cycles(leaf, path, spec, config, det, regs, fma_inputs)
        return det

    det = pad_details(cfg, frozenset({"pad"}))
    det_off = pad_details(dataclasses.replace(cfg, guarded_copies_gather=False), frozenset({"pad"}))
    assert det["lanes"] == 56 and det["statements"] == 15
    assert det["gathers"] == 15 * 56 and det["shuffle"] == 0
    assert det_off["gathers"] == 0 and det_off["shuffle"] > 0
    assert det["body_cycles"] > 4 * det_off["body_cycles"]
    assert pad_details(cfg, frozenset()) == det_off  # a window that max or add reads stays interleaved


def test_a_pooling_window_copied_into_registers_keeps_its_interleaved_loads():
    """max_pool2d with the same 3 x 3 padded window copied per output column into registers and the 56 columns
    left to LLVM: the assembly has `vpermt2ps` and no gather (a row of this shape ran 48.6 us, among the operator's
    fastest measured), and the model prices no gather: nothing multiplies and adds the window."""
    mod, asm, spec = _znver4_pick("max_pool2d", "max_pool2d/0", {
        "pad/at": 4, "pad/parallel": 2, "pad/unroll": 2, "pad/vectorize": 2, "pool_max/parallel": 2,
        "pool_max/unroll": 0, "pool_max/vectorize": 3})
    assert "\tvpermt2ps" in asm and "\tvgather" not in asm
    tree = LoopTree.from_mod(mod)
    cfg = KernelConfig.for_spec(spec)
    regs = register_buffers(tree, spec, cfg)
    assert "pad" in regs and not multiply_add_inputs(tree, regs)
    leaf, path = _leaf_and_path(tree, "pad")
    det: dict = {}
    statement_cycles(leaf, path, spec, cfg, det, regs, multiply_add_inputs(tree, regs))
    assert det["lanes"] == 56 and det["gathers"] == 0 and det["shuffle"] > 0


def test_an_odd_width_splat_is_built_with_inserts_in_the_loop_and_priced_so():
    """At 28 lanes (wider than a zmm, not a power of two) LLVM splats each hoisted W element with vinsertps in the
    row loop, 21 per element; at 32 it broadcasts. With 16 such splats the body's registers overflow and the model
    prices shuffle cycles per lane of each (`splat_lane_cycles`, on for x86)."""
    spec = dt.resolve_target(ZEN4)[1]
    cfg = KernelConfig.for_spec(spec)
    assert cfg.splat_lane_cycles > 0
    odd, even = splat_kernel(28, 16), splat_kernel(32, 16)
    assert _count(_kernel_instructions(odd, ZEN4), "vinsertps") == 16 * 21
    assert _count(_kernel_instructions(even, ZEN4), "vinsertps") == 0
    _, det = _details(odd, "C_update", cfg, spec)
    _, det_off = _details(odd, "C_update", dataclasses.replace(cfg, splat_lane_cycles=0.0), spec)
    assert det["shuffle"] == 16 * 28 * cfg.splat_lane_cycles / cfg.shuffle_ports and det_off["shuffle"] == 0
    assert det["body_cycles"] > 1.5 * det_off["body_cycles"]
    assert _details(even, "C_update", cfg, spec)[1]["shuffle"] == 0


def test_a_convolution_pick_that_splats_its_weights_lane_by_lane_is_priced_with_the_inserts():
    """conv2d_nchw with 28 output columns as the TVM vector and 64 weights per body, invariant in the row loop that
    iterates it: 1,344 vinsertps build the weights' splats (21 each) beside 128 FMAs. Without the inserts this Zen 4
    row was predicted 2.0 ms (third of 200) and ran 5.1 (48th); a depthwise row whose loop also holds its padding
    (weights broadcast from memory, no vinsertps) is not charged."""
    mod, asm, spec = _znver4_pick("conv2d_nchw", "conv2d_nchw/1", {
        "conv/R4": [4, 16], "conv/R5": [3, 1], "conv/R6": [3, 1], "conv/S0": [1, 1, 1, 1], "conv/S1": [2, 2, 4, 4],
        "conv/S2": [7, 4, 2, 1], "conv/S3": [1, 2, 1, 28], "conv/parallel": 6, "conv/unroll": 2, "conv/vectorize": 2,
        "pad/at": 0, "pad/parallel": 1, "pad/unroll": 2, "pad/vectorize": 1})
    assert asm.count("\tvinsertps") == 64 * 21
    cfg = KernelConfig.for_spec(spec)
    _, det = _details(s_tir.Schedule(mod), "conv_update", cfg, spec)
    _, det_off = _details(s_tir.Schedule(mod), "conv_update", dataclasses.replace(cfg, splat_lane_cycles=0.0), spec)
    assert det["lanes"] == 28 and det["shuffle"] == 64 * 28 * cfg.splat_lane_cycles and det_off["shuffle"] == 0
    mod, asm, spec = _znver4_pick("depthwise_conv2d", "depthwise_conv2d/1", {
        "depthwise_conv/R4": [1, 3], "depthwise_conv/R5": [3, 1], "depthwise_conv/S0": [1, 1, 1, 1],
        "depthwise_conv/S1": [1, 2, 36, 2], "depthwise_conv/S2": [7, 2, 2, 2], "depthwise_conv/S3": [1, 1, 2, 28],
        "depthwise_conv/parallel": 5, "depthwise_conv/unroll": 3, "depthwise_conv/vectorize": 0, "pad/at": 7,
        "pad/parallel": 2, "pad/unroll": 1, "pad/vectorize": 3})
    assert "\tvinsertps" not in asm and "\tvbroadcastss" in asm
    _, det = _details(s_tir.Schedule(mod), "depthwise_conv_update", cfg, spec)
    assert det["lanes"] == 28 and det["shuffle"] == 0


def test_gather_instructions_from_llvms_vectorizer_add_their_lanes_to_the_body_on_zen4():
    """batch_matmul with no TVM vector: LLVM vectorizes the 16-column loop around 24 unrolled multiply-adds and
    gathers B (64 floats apart) with 12 vgatherqps of 8 lanes each, hoisted out of the 8-row loop. On Zen 4 a
    gather adds 0.7 cycles per lane beside the FMAs (benchmarks/serial_gathers.py), so the body pays 12 x 8 x 0.7 / 8
    cycles on top of its bound; skylake-avx512 is not measured and pays nothing. TVM's own 8-lane vector of the same
    operand is built with vinsertps, no gather instruction, and is not charged."""
    mod, asm, spec = _znver4_pick("batch_matmul", "batch_matmul/1", {
        "C/R3": [32, 2], "C/S0": [1, 1, 4, 3], "C/S1": [2, 2, 8, 4], "C/S2": [1, 8, 16, 1], "C/parallel": 4,
        "C/unroll": 2, "C/vectorize": 0})
    assert asm.count("\tvgatherqps") == 12
    cfg = KernelConfig.for_spec(spec)
    assert cfg.gather_serial_lane_cycles == 0.7
    _, det = _details(s_tir.Schedule(mod), "C_update", cfg, spec)
    assert det["llvm_vectorized"] and det["lanes"] == 16 and det["gathers"] == 12 * 8 / 8
    assert det["serial_gathers"] == pytest.approx(det["gathers"] * 0.7)
    _, det_off = _details(s_tir.Schedule(mod), "C_update", dataclasses.replace(cfg, gather_serial_lane_cycles=0), spec)
    assert det_off["serial_gathers"] == 0
    assert det["body_cycles"] == pytest.approx(det_off["body_cycles"] + det["serial_gathers"])
    assert KernelConfig.for_spec(dt.resolve_target({"kind": "llvm", "mcpu": "skylake-avx512"})[1]
                                 ).gather_serial_lane_cycles == 0
    mod, asm, spec = _znver4_pick("batch_matmul", "batch_matmul/0", {
        "C/R3": [8, 8], "C/S0": [6, 1, 2, 1], "C/S1": [2, 2, 4, 8], "C/S2": [4, 1, 4, 8], "C/parallel": 0,
        "C/unroll": 1, "C/vectorize": 0})
    assert "\tvgather" not in asm and "\tvinsertps" in asm
    _, det = _details(s_tir.Schedule(mod), "C_update", cfg, spec)
    assert det["gathers"] > 0 and not det["llvm_vectorized"] and det["serial_gathers"] == 0


def test_sizing_llvms_full_unroll_by_distinct_addresses_unrolls_a_reduction_over_promoted_accumulators():
    """batch_matmul with 4 rows unrolled by TVM inside a 16-step reduction loop: LLVM promotes the 4 accumulators
    (invariant in that loop) to registers, so the unrolled loop holds 64 multiply-adds, 64 loads of A and 16 of B, and
    it unrolls it, then vectorizes the 16-column loop around (64 vfmadd, B gathered). Counting every access of every
    copy the model kept it rolled (4 scalar statements per body, priced 6x the measured time);
    `unroll_distinct_accesses` sizes the body as LLVM does."""
    mod, asm, spec = _znver4_pick("batch_matmul", "batch_matmul/1", {
        "C/R3": [4, 16], "C/S0": [3, 4, 1, 1], "C/S1": [2, 4, 4, 4], "C/S2": [2, 4, 16, 1], "C/parallel": 1,
        "C/unroll": 1, "C/vectorize": 3})
    assert asm.count("\tvfmadd") == 64 and asm.count("\tvgatherqps") == 32
    cfg = KernelConfig.for_spec(spec)
    _, rolled = _details(s_tir.Schedule(mod), "C_update", cfg, spec)
    assert rolled["statements"] == 4 and rolled["lanes"] == 1 and rolled["inner_extent"] == 16
    _, unrolled = _details(s_tir.Schedule(mod), "C_update", dataclasses.replace(cfg, unroll_distinct_accesses=True),
                           spec)
    assert unrolled["statements"] == 64 and unrolled["lanes"] == 16 and unrolled["llvm_vectorized"]


def test_statement_details_price_each_statement_as_kernel_cycles_does():
    """The per-statement details that reports and checks read add up to the program's serial kernel cycles (no
    cross-core lines), one entry per statement, with its bound and body numbers."""
    sch = matmul_schedule(M=8, N=64, K=64)
    tree = LoopTree.from_mod(sch.mod)
    cfg = dataclasses.replace(CFG, remote_line_cycles=0.0)
    details = statement_details(tree, SPEC, cfg)
    assert [leaf.block for leaf, _, _, _ in details] == ["C", "C"]  # the init and the update of the reduction
    assert sum(cycles for _, cycles, _, _ in details) == pytest.approx(kernel_cycles(tree, SPEC, cfg).serial_cycles)
    assert all(bound in det and det["body_cycles"] > 0 for _, _, bound, det in details)


def _elementwise_multiply_add(tvm_vector: bool) -> s_tir.Schedule:
    """C = A * B + A over 64 x 256 floats; the 256-column loop split by 16, the 16 columns a TVM vector or left
    to LLVM's loop vectorizer."""
    A = te.placeholder((64, 256), "float32", name="A")
    B = te.placeholder((64, 256), "float32", name="B")
    C = te.compute((64, 256), lambda i, j: A[i, j] * B[i, j] + A[i, j], name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    _, j = sch.get_loops(sch.get_sblock("C"))
    _, lanes = sch.split(j, [None, 16])
    if tvm_vector:
        sch.vectorize(lanes)
    return sch


@pytest.mark.parametrize("cpu", ["emeraldrapids", "skylake-avx512", "znver4"])
def test_llvms_own_vectorizers_build_the_cpus_preferred_width_and_the_model_prices_it_so(cpu):
    """LLVM tunes Intel's AVX-512 cores to prefer 256-bit vectors: its loop vectorizer builds ymm operations there,
    zmm on Zen 4, while a TVM vector of 16 floats is one zmm on all three. With `llvm_vector_width` the kernel
    model counts LLVM's vector operations at that width (two per 16 lanes on Intel) and TVM's at the register's."""
    _, spec = dt.resolve_target({"kind": "llvm", "mcpu": cpu})
    width = spec.llvm_vector_bits or spec.vector_bits
    assert spec.vector_bits == 512 and width == (512 if cpu == "znver4" else 256)
    cfg = dataclasses.replace(KernelConfig.for_spec(spec), llvm_vector_width=True)
    for tvm_vector in (False, True):
        sch = _elementwise_multiply_add(tvm_vector)
        asm = _asm(sch, {"kind": "llvm", "mcpu": cpu})
        registers = {ins.operands[-1][1] for f in parse_asm(asm, "x86").functions for ins in f.instructions
                     if ins.mnemonic.startswith("vfmadd")}
        assert registers == {"z" if tvm_vector else {256: "y", 512: "z"}[width]}, (cpu, tvm_vector, registers)
        _, det = _details(sch, "C", cfg, spec)
        _, det_off = _details(sch, "C", KernelConfig.for_spec(spec), spec)
        lanes = 16 if tvm_vector else width // 32
        assert det["vector_ops"] == det["lanes"] // lanes and det_off["vector_ops"] == det_off["lanes"] // 16
        assert det["llvm_vectorized"] is not tvm_vector


def test_gathers_hoisted_beyond_the_registers_are_spilled_to_the_stack_not_rebuilt_in_the_loop():
    """batch_matmul's fastest Emerald Rapids row: LLVM vectorizes the 32 output columns in ymm pieces and gathers B
    (64 floats apart), invariant in the innermost loop, before it. At 256 bits the gathered vectors and the
    accumulators overflow the registers, and the excess goes to the stack: no gather in the innermost loop, some of
    its FMAs read the stack. With `hoisted_gathers_spill` the model shares the gathers over that loop and adds the
    reloads, instead of gathering in every body."""
    task = workloads.get("batch_matmul").task()
    cand = Candidate.from_json(task, dt.SearchSpace(task).sketch("batch_matmul/2"), {
        "C/R3": [8, 8], "C/S0": [3, 2, 2, 1], "C/S1": [1, 2, 16, 4], "C/S2": [1, 4, 32, 1], "C/parallel": 4,
        "C/unroll": 2, "C/vectorize": 2})
    target = {"kind": "llvm", "mcpu": "emeraldrapids"}
    _, spec = dt.resolve_target(target)
    sch = s_tir.Schedule(cand.to_mod())
    program = parse_asm(_asm(sch, target), "x86")
    depths: dict[str, set[int]] = {"gather": set(), "fma": set(), "fma_stack": set()}
    for f in program.functions:
        for index, ins in enumerate(f.instructions):
            depth = len(f.loops_at(index)) if f.blocks else 0
            if ins.mnemonic.startswith("vgather"):
                depths["gather"].add(depth)
            elif ins.mnemonic.startswith("vfmadd"):
                depths["fma_stack" if any("(%rsp)" in op for op in ins.operands) else "fma"].add(depth)
    innermost = max(depths["fma"])
    assert max(depths["gather"]) < innermost and innermost in depths["fma_stack"]
    cfg = dataclasses.replace(KernelConfig.for_spec(spec), llvm_vector_width=True)
    _, rebuilt = _details(sch, "C_update", cfg, spec)
    _, spilled = _details(sch, "C_update", dataclasses.replace(cfg, hoisted_gathers_spill=True), spec)
    assert rebuilt["gathers"] > 0 and spilled["gathers"] == rebuilt["gathers"] / spilled["inner_extent"]
    assert spilled["loads"] > rebuilt["loads"] and spilled["body_cycles"] < rebuilt["body_cycles"]


def test_a_masked_accumulator_tail_that_reaches_into_the_next_row_serializes_the_rows_chains():
    """conv2d_s2's row that the held-out Intel model ranked first (measured 28th of 200): its 2 x 14 output tile,
    compacted to rows of 14 floats, is loaded and stored in every body as 8 lanes plus a masked 6 of a ymm. The masked
    store covers the next row's first 2 floats, so the next row's load cannot take its value from the store buffer
    and the rows' 8-step chains run one after the other (10.0 ms; 2.32 ms with the rows padded to 16 floats,
    benchmarks/partial_overlap.py). With `partial_overlap_cycles` the body pays 2 x (8 x 4 + that); padded, nothing."""
    task = workloads.get("conv2d_s2").task()
    cand = Candidate.from_json(task, dt.SearchSpace(task).sketch("conv2d_s2/1"), {
        "conv/R4": [16, 8], "conv/R5": [3, 1], "conv/R6": [3, 1], "conv/S0": [1, 1, 1, 1], "conv/S1": [1, 4, 32, 1],
        "conv/S2": [1, 14, 1, 2], "conv/S3": [2, 1, 14, 1], "conv/parallel": 7, "conv/unroll": 3,
        "conv/vectorize": 3, "pad/at": 4, "pad/parallel": 3, "pad/unroll": 0, "pad/vectorize": 0})
    target, spec = dt.resolve_target({"kind": "llvm", "mcpu": "emeraldrapids"})
    sch = cand.to_schedule()
    asm = tvm.compile(sch.mod, target=target).mod.inspect_source("asm")
    assert any(line.strip().startswith("vmovups\t%ymm") and "{%k" in line for line in asm.splitlines())  # masked store
    cfg = dataclasses.replace(KernelConfig.for_spec(spec), partial_overlap_cycles=20.0)
    _, det = _details(sch, "conv_update", cfg, spec)
    assert det["acc_in_memory"] and det["lanes"] == 14 and det["statements"] == 16 and det["accumulators"] == 2
    assert det["overlap_rows"] == 2 and det["chain"] == 2 * (8 * cfg.fma_latency + 20.0)
    _, off = _details(sch, "conv_update", dataclasses.replace(cfg, partial_overlap_cycles=0.0), spec)
    assert off["overlap_rows"] == 0 and off["chain"] < 8 * cfg.fma_latency
    sch.storage_align(sch.get_sblock("conv_update"), 0, 2, 16, 0)  # rows of 16 floats: the tail ends in padding
    _, padded = _details(sch, "conv_update", cfg, spec)
    assert padded["overlap_rows"] == 0 and padded["chain"] == off["chain"]
    assert not tail_overlaps_next_row(_out_access(sch, "conv_update"), 14, 16)
    assert tail_overlaps_next_row(_out_access(cand.to_schedule(), "conv_update"), 14, 16)
    assert not tail_overlaps_next_row(_out_access(cand.to_schedule(), "conv_update"), 16, 16)  # no masked tail


def _out_access(sch: s_tir.Schedule, block: str):
    leaf, _ = _leaf_and_path(LoopTree.from_mod(sch.mod), block)
    return next(a for a in leaf.accesses if a.is_write)
