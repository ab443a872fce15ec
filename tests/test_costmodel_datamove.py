"""Data movement (Tuna Algorithm 2) on real TVM schedules with real islpy: the paper's 2MM example against
its hand-derived closed form, reuse flips with cache capacity, footprints against brute-force enumeration,
and the counted fallbacks for non-affine indices and isl limits."""

import dataclasses
import itertools
import random

import tvm
from tvm import s_tir, te

from drytune.costmodel.datamove import DataMoveConfig, FootprintCounter, LineLayout, data_movement
from drytune.costmodel.looptree import DivMod, IndexExpr, LoopTree
from drytune.target import HardwareSpec

CPU = HardwareSpec(kind="cpu", arch="x86", l1_bytes=48 * 1024, l2_bytes=1 << 20, line_bytes=64)


def element_spec(l1_elems: int, l2_elems: int) -> HardwareSpec:
    """A cache with one float32 per line, so that lines are elements, as in the paper's derivation."""
    return dataclasses.replace(CPU, line_bytes=4, l1_bytes=4 * l1_elems, l2_bytes=4 * l2_elems)


def isl_only() -> FootprintCounter:
    return FootprintCounter(DataMoveConfig(engine="isl"))


def brute_footprint(tree: LoopTree, nodes, line_bytes: int) -> dict[str, int]:
    """Distinct lines per global buffer touched by executing `nodes` (outer loops at 0), by enumeration."""
    lines: dict[str, set] = {}

    def run(ns, vals):
        for n in ns:
            if n.is_loop and n.alias_of:  # re-bound GPU thread loop: same thread, no iterations
                run(n.children, vals)
                continue
            if n.is_loop:
                for v in range(n.extent):
                    run(n.children, {**vals, n.var: v})
                continue
            if any(c.evaluate(vals) < 0 for c in n.conditions):
                continue
            for a in n.accesses:
                if a.scope != "global":
                    continue
                idx = [e.evaluate(vals) for e in a.mem_indices]
                lay = LineLayout.of(a.mem_shape, a.dtype_bytes, line_bytes)
                addr = 0
                for d, s in enumerate(a.mem_shape):
                    addr = addr * s + idx[d]
                lines.setdefault(a.buffer, set()).add(addr // lay.epl)

    run(nodes, {})
    return {b: len(s) for b, s in lines.items()}


# --------------------------------------------------------------------------------------------------
# 2MM (Tuna, Listing 1 and Fig. 2)
# --------------------------------------------------------------------------------------------------


def two_mm(Ni, Nj, Nk, Nl, Ti, Tj) -> LoopTree:
    """C = A B, E = C D, tiled and fused as in Listing 1: it, jt / {k, i1, j1 : C} {l, i2, j2 : E}."""
    A = te.placeholder((Ni, Nk), "float32", name="A")
    B = te.placeholder((Nk, Nj), "float32", name="B")
    D = te.placeholder((Nj, Nl), "float32", name="D")
    k = te.reduce_axis((0, Nk), name="k")
    C = te.compute((Ni, Nj), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    j = te.reduce_axis((0, Nj), name="j")
    E = te.compute((Ni, Nl), lambda i, l: te.sum(C[i, j] * D[j, l], axis=j), name="E")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, D, E])}))
    i, l, jj = sch.get_loops(sch.get_sblock("E"))
    it, i2 = sch.split(i, [None, Ti])
    jt, j2 = sch.split(jj, [None, Tj])
    sch.reorder(it, jt, l, i2, j2)
    sch.compute_at(sch.get_sblock("C"), jt)
    i1, j1, kk = sch.get_loops(sch.get_sblock("C"))[2:]
    sch.reorder(kk, i1, j1)
    # the paper's C is a whole array (tmp, an argument in PolyBench's 2mm); TVM would shrink it to a Ti x Tj tile
    return LoopTree.from_mod(sch.mod, compact=False)


def test_2mm_matches_the_paper_closed_form():
    """Paper example with S = L1 capacity (elements: one float per line here).

    Capacity assumptions of the paper: S >= Ti Tj + Ti Nl + Tj Nl + Tj Nk + Ti Nk (= 576 < 1024) while the
    tiling loops do not fit: Ni, Nj > S (2048 > 1024).

    One iteration of jt touches A[Ti, Nk], B[Nk, Tj], C[Ti, Tj], D[Tj, Nl], E[Ti, Nl]: 576 elements, fits,
    so every loop inside jt and jt itself move their footprint. Over all of jt: A Ti Nk, B Nk Nj, C Ti Nj,
    D Nj Nl, E Ti Nl. B, C and D exceed S (Nj > S): their reuse flips to false at jt; A and E (Ti Nk,
    Ti Nl <= S) keep it.
    One iteration of it does not fit (Nj Nk > S), so at it: A and E (reuse true) move their footprint over
    it, Ni Nk and Ni Nl; B, C, D move trip x (their movement at jt) = Ni/Ti x (Nk Nj, Ti Nj, Nj Nl).
    Total L1 movement = (Ti Nj + Ti Nl + Nj Nl + Nj Nk + Ti Nk) * Ni / Ti, the paper's result.
    L2 (131072 >= one iteration of it, 82176) moves only the compulsory footprint of every buffer.
    """
    Ni, Nj, Nk, Nl, Ti, Tj = 2048, 2048, 16, 16, 8, 8
    S = 1024
    tree = two_mm(Ni, Nj, Nk, Nl, Ti, Tj)
    assert [(n.extent) for n in tree.preorder()] == [Ni // Ti, Nj // Tj, Nk, Ti, Tj, Nl, Ti, Tj]
    assert S >= Ti * Tj + Ti * Nl + Tj * Nl + Tj * Nk + Ti * Nk and Ni > S and Nj > S
    spec = element_spec(S, 1 << 17)
    expect_l1 = {
        "A": Ni * Nk,
        "E": Ni * Nl,
        "B": Ni // Ti * Nk * Nj,
        "C": Ni // Ti * Ti * Nj,
        "D": Ni // Ti * Nj * Nl,
    }
    expect_l2 = {"A": Ni * Nk, "B": Nk * Nj, "C": Ni * Nj, "D": Nj * Nl, "E": Ni * Nl}
    for counter in (None, isl_only()):
        dm = data_movement(tree, spec, counter=counter)
        l1 = dm.levels["L1"]
        assert l1.per_buffer_lines == expect_l1
        assert l1.lines == (Ti * Nj + Ti * Nl + Nj * Nl + Nj * Nk + Ti * Nk) * Ni // Ti
        assert l1.bytes == 4 * l1.lines
        assert dm.levels["L2"].per_buffer_lines == expect_l2 == dm.footprint_lines
        jt, it = l1.record("j_0"), l1.record("i_0")
        assert jt.fits and jt.single_lines == Ti * Tj + Ti * Nl + Tj * Nl + Tj * Nk + Ti * Nk
        assert jt.footprint == {"A": Ti * Nk, "B": Nk * Nj, "C": Ti * Nj, "D": Nj * Nl, "E": Ti * Nl}
        assert jt.reuse == {"A": True, "B": False, "C": False, "D": False, "E": True}
        assert not it.fits and it.single_lines == sum(jt.footprint.values())
        assert dm.stats.fallbacks == 0
    assert dm.stats.isl > 0 and dm.stats.closed_form == 0  # the second run counted with isl only


def test_2mm_in_64_byte_lines():
    """Same structure on 48 KiB / 64 B lines (768 lines, 16 floats per line): every row-contiguous extent
    is divided by 16, e.g. the jt iteration touches Ti Nk/16 + Nk Tj/16 + Ti Tj/16 + Tj Nl/16 + Ti Nl/16
    = 32 + 32 + 16 + 32 + 32 = 144 lines; B, C, D flip at jt (4096, 2048, 4096 lines > 768)."""
    Ni, Nj, Nk, Nl, Ti, Tj = 2048, 2048, 32, 32, 16, 16
    tree = two_mm(Ni, Nj, Nk, Nl, Ti, Tj)
    dm = data_movement(tree, CPU)
    l1 = dm.levels["L1"]
    assert l1.capacity_lines == 768 and l1.record("j_0").single_lines == 144
    trips = Ni // Ti
    assert l1.per_buffer_lines == {
        "A": Ni * Nk // 16,
        "E": Ni * Nl // 16,
        "B": trips * Nk * Nj // 16,
        "C": trips * Ti * Nj // 16,
        "D": trips * Nj * Nl // 16,
    }
    assert l1.bytes == 64 * (Ti * Nk + Nk * Nj + Ti * Nj + Nj * Nl + Ti * Nl) // 16 * trips
    assert data_movement(tree, CPU, counter=isl_only()).levels["L1"].per_buffer_lines == l1.per_buffer_lines


# --------------------------------------------------------------------------------------------------
# Reuse status
# --------------------------------------------------------------------------------------------------


def plain_matmul(N: int) -> LoopTree:
    A = te.placeholder((N, N), "float32", name="A")
    B = te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return LoopTree.from_mod(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))


def test_reuse_flips_when_the_footprint_exceeds_l1():
    """i, j, k matmul, N = 64, in elements. One j iteration touches a row of A, a column of B and one C
    (129); over j, B is N^2 = 4096. With L1 = 8192 one i iteration (N + N^2 + N) fits: every buffer moves
    its footprint N^2. With L1 = 1024, B's reuse flips at j and one i iteration does not fit: B moves
    N x N^2 while A and C (reuse kept) still move N^2."""
    N = 64
    tree = plain_matmul(N)
    big = data_movement(tree, element_spec(8192, 1 << 16)).levels["L1"]
    small = data_movement(tree, element_spec(1024, 1 << 16)).levels["L1"]
    assert big.record("i").fits and big.record("j").reuse == {"A": True, "B": True, "C": True}
    assert big.per_buffer_lines == {"A": N * N, "B": N * N, "C": N * N}
    assert small.record("j").fits and not small.record("i").fits
    assert small.record("j").reuse == {"A": True, "B": False, "C": True}
    assert small.per_buffer_lines == {"A": N * N, "B": N * N * N, "C": N * N}


def column_sums(rows: int, row_elems: int, repeats: int) -> LoopTree:
    """S[r] = sum_i A[i, 0], repeated `repeats` times: one float of every row of A, rows `row_elems` apart."""
    A = te.placeholder((rows, row_elems), "float32", name="A")
    i = te.reduce_axis((0, rows), name="i")
    S = te.compute((repeats,), lambda r: te.sum(A[i, 0], axis=i), name="S")
    return LoopTree.from_mod(tvm.IRModule({"main": te.create_prim_func([A, S])}))


def test_rows_4_kib_apart_conflict_in_one_l1_set():
    """64 rows, one line each: 64 lines fit a 32 KiB L1 (512 lines) as a count, and a fully associative cache
    keeps them across r (64 lines moved). With 8 ways (64 sets of 64-byte lines), rows 4 KiB apart all map to
    one set, 64 > 8 lines: nothing survives to the next r and A moves 64 lines per r. Rows of 1040 floats
    (65 lines apart) spread over all 64 sets and fit again."""
    l1 = dataclasses.replace(CPU, l1_bytes=32 * 1024, l1_ways=8, l2_ways=8)
    full = dataclasses.replace(l1, l1_ways=0)
    aligned = column_sums(64, 1024, 16)
    assert data_movement(aligned, full).levels["L1"].per_buffer_lines["A"] == 64
    assert data_movement(aligned, l1).levels["L1"].per_buffer_lines["A"] == 64 * 16
    assert data_movement(aligned, l1, DataMoveConfig(set_conflicts=False)).levels["L1"].per_buffer_lines["A"] == 64
    assert data_movement(column_sums(64, 1040, 16), l1).levels["L1"].per_buffer_lines["A"] == 64
    # L2 (1 MiB, 8 ways: 2048 sets) sees the 64 rows in distinct sets: A stays, 64 lines
    assert data_movement(aligned, l1).levels["L2"].per_buffer_lines["A"] == 64


def column_block_sums(rows: int, row_elems: int, cols: int, repeats: int) -> LoopTree:
    """S[r] = sum over i, j of W[i, j] for the first `cols` columns of W (j innermost), repeated `repeats` times."""
    W = te.placeholder((rows, row_elems), "float32", name="W")
    i = te.reduce_axis((0, rows), name="i")
    j = te.reduce_axis((0, cols), name="j")
    S = te.compute((repeats,), lambda r: te.sum(W[i, j], axis=[i, j]), name="S")
    return LoopTree.from_mod(tvm.IRModule({"main": te.create_prim_func([W, S])}))


def test_a_large_footprint_crowding_l2_sets_is_checked():
    """A 3 x 3 conv's weight slice as ResNet-50 reads it: 2304 rows 1 KiB apart, 64 floats (4 lines) of each,
    147k iteration points. 9216 lines fit a 2 MiB L2 (32768 lines) by count, but with 16 ways (2048 sets) they land
    in 512 sets, 18 per set: nothing survives to the next r, so W moves 9216 lines per r. Enumerating at most
    1 << 16 points (the limit before session 58) skipped the check and kept W in L2."""
    spec = dataclasses.replace(CPU, l1_bytes=48 * 1024, l1_ways=12, l2_bytes=2 * 1024 * 1024, l2_ways=16)
    tree = column_block_sums(2304, 256, 64, 4)
    assert data_movement(tree, spec).levels["L2"].per_buffer_lines["W"] == 9216 * 4
    small = DataMoveConfig(max_crowd_points=1 << 16)
    assert data_movement(tree, spec, small, FootprintCounter(small)).levels["L2"].per_buffer_lines["W"] == 9216
    # rows of 272 floats spread the lines over all sets: W stays in L2
    assert data_movement(column_block_sums(2304, 272, 64, 4), spec).levels["L2"].per_buffer_lines["W"] == 9216


def test_l2_sets_beyond_a_page_are_not_conflicts():
    """16 rows 64 KiB apart, 64 lines of each, read 4 times: 1024 lines fit a 512 KiB 8-way L2 (8192 lines) by
    count. By virtual address all 16 rows land in the same 64 of its 1024 sets, 16 > 8 ways, and nothing would
    survive to the next repeat; but the L2 is physically indexed and 4 KiB pages land anywhere, so lines compete
    only by their offset in a page: 16 per offset against 8 ways x 16 page colours. W stays: 1024 lines."""
    spec = dataclasses.replace(CPU, l1_bytes=32 * 1024, l1_ways=8, l2_bytes=512 * 1024, l2_ways=8)
    tree = column_block_sums(16, 16384, 1024, 4)
    assert data_movement(tree, spec).levels["L2"].per_buffer_lines["W"] == 1024
    virtual = DataMoveConfig(page_bytes=0)
    by_address = data_movement(tree, spec, virtual, FootprintCounter(virtual)).levels["L2"]
    assert by_address.per_buffer_lines["W"] == 1024 * 4


def test_most_crowded_set_equals_a_count_by_hand():
    """Lines 0, 64, 128, ... (a column of a 4 KiB-row buffer): with 64 sets every line is in set 0; with 128
    sets they alternate between sets 0 and 64."""
    counter = FootprintCounter()
    layout = LineLayout.of((32, 1024), 4, 64)
    acc = ((IndexExpr.var("i"), IndexExpr.constant(0)), ())
    assert counter.crowding(layout, [acc], {"i": 32}, (64, 128, 4096)) == (32, 16, 1)


def two_stage(M: int, O=8, K=512) -> LoopTree:
    """Out[o] = sum_k X[k] W[o,k] + sum_m Z[o,m], both reductions computed at o."""
    X = te.placeholder((K,), "float32", name="X")
    W = te.placeholder((O, K), "float32", name="W")
    Z = te.placeholder((O, M), "float32", name="Z")
    k = te.reduce_axis((0, K), name="k")
    m = te.reduce_axis((0, M), name="m")
    P = te.compute((O,), lambda o: te.sum(X[k] * W[o, k], axis=k), name="P")
    Q = te.compute((O,), lambda o: te.sum(Z[o, m], axis=m), name="Q")
    Out = te.compute((O,), lambda o: P[o] + Q[o], name="Out")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, W, Z, Out])}))
    (o,) = sch.get_loops(sch.get_sblock("Out"))
    sch.compute_at(sch.get_sblock("Q"), o)
    sch.compute_at(sch.get_sblock("P"), o)
    return LoopTree.from_mod(sch.mod)


def test_a_large_sibling_between_uses_breaks_reuse():
    """X (512 elements) is read by the first child of loop o only. With Z rows of 256 the other children
    (257 + 3 elements) fit in L1 = 1024 between two uses of X: X keeps reuse and moves once (512) although
    one o iteration (1283) does not fit. With Z rows of 2048 the gap exceeds L1: X moves 8 x 512."""
    spec = element_spec(1024, 1 << 16)
    short = data_movement(two_stage(256), spec).levels["L1"]
    long = data_movement(two_stage(2048), spec).levels["L1"]
    assert not short.record("o").fits and short.record("o").reuse["X"]
    assert short.per_buffer_lines["X"] == 512
    assert not long.record("o").reuse["X"] and long.per_buffer_lines["X"] == 8 * 512


# --------------------------------------------------------------------------------------------------
# Footprints against enumeration; fallbacks
# --------------------------------------------------------------------------------------------------


def fused_matmul() -> LoopTree:
    """Small matmul with fused parallel outer tiles (floordiv/floormod indices) and a global write-back."""
    A = te.placeholder((32, 48), "float32", name="A")
    B = te.placeholder((48, 40), "float32", name="B")
    k = te.reduce_axis((0, 48), name="k")
    C = te.compute((32, 40), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 20])
    k0, k1 = sch.split(kk, [None, 16])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    cw = sch.cache_write(blk, 0, "global")
    sch.reverse_compute_at(cw, j0)
    sch.parallel(sch.fuse(i0, j0))
    sch.decompose_reduction(blk, k0)
    return LoopTree.from_mod(sch.mod)


def assert_footprints_match_enumeration(tree: LoopTree, spec: HardwareSpec) -> None:
    dm = data_movement(tree, spec, counter=FootprintCounter())
    recs = {r.var: r for r in dm.levels["L1"].loops}
    for node in tree.preorder():
        if node.var in recs:
            rec = recs[node.var]
        else:  # analysed as the nest of its digits: the outermost one covers the whole loop
            rec = min((r for v, r in recs.items() if v.startswith(node.var + "@")), key=lambda r: r.depth)
        assert rec.footprint == brute_footprint(tree, [node], spec.line_bytes), node.var
    assert dm.footprint_lines == brute_footprint(tree, tree.roots, spec.line_bytes)
    assert dm.stats.fallbacks == 0
    assert data_movement(tree, spec, counter=isl_only()).levels["L1"].loops == dm.levels["L1"].loops


def test_footprints_equal_enumeration_with_fused_loops():
    tree = fused_matmul()
    assert tree.preorder()[0].kind == "parallel" and "fused" in tree.preorder()[0].var
    assert_footprints_match_enumeration(tree, CPU)


def gpu_matmul_uneven_fetch() -> LoopTree:
    """48 x 48 x 32 matmul, 24 x 24 block tiles, 6 x 6 threads, k tiles of 8: each shared-memory fetch of
    a 24 x 8 tile (192 elements) is fused and split over 36 threads, which needs a guard (192 < 6 x 36)."""
    A = te.placeholder((48, 32), "float32", name="A")
    B = te.placeholder((32, 48), "float32", name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((48, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    bi, ti, ii = sch.split(i, [None, 6, 4])
    bj, tj, jj = sch.split(j, [None, 6, 4])
    ko, ki = sch.split(kk, [None, 8])
    sch.reorder(bi, bj, ti, tj, ko, ki, ii, jj)
    for loop, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        sch.bind(loop, tag)
    for idx in (0, 1):
        sh = sch.cache_read(blk, idx, "shared")
        sch.compute_at(sh, ko)
        fused = sch.fuse(*sch.get_loops(sh)[-2:])
        _, ty, tx = sch.split(fused, [None, 6, 6])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    return LoopTree.from_mod(sch.mod)


def test_footprints_equal_enumeration_for_guarded_cooperative_fetch():
    tree = gpu_matmul_uneven_fetch()
    fetch = next(s for s in tree.statements() if s.block == "A_shared")
    assert fetch.predicated and fetch.conditions
    assert any(n.alias_of for n in tree.preorder())
    assert_footprints_match_enumeration(tree, dataclasses.replace(CPU, kind="gpu", line_bytes=32))


def gather(index_fn, n_in: int) -> LoopTree:
    X = te.placeholder((n_in,), "float32", name="X")
    Y = te.compute((16, 24), lambda i, j: X[index_fn(i, j)] * 2.0, name="Y")
    return LoopTree.from_mod(tvm.IRModule({"main": te.create_prim_func([X, Y])}))


def test_non_affine_index_falls_back_and_is_counted():
    tree = gather(lambda i, j: i * j, 16 * 24)
    (st,) = tree.statements()
    x = next(a for a in st.accesses if a.buffer == "X")
    assert not x.affine and not x.quasi_affine and x.indices[0].loop_vars() == {"i", "j"}
    dm = data_movement(tree, CPU)
    assert dm.stats.fallbacks > 0 and dm.stats.fallback_reasons["non_affine"] > 0
    exact_x = len({i * j // 16 for i in range(16) for j in range(24)})
    assert dm.footprint_lines["X"] >= exact_x  # conservative: the whole range 0 .. 15*23
    assert dm.footprint_lines["X"] == (15 * 23) // 16 + 1 and dm.footprint_lines["Y"] == 16 * 24 // 16


def test_floordiv_index_is_exact():
    tree = gather(lambda i, j: (i + j) // 4 * 16 + j % 3, 6 * 16 + 3)
    (st,) = tree.statements()
    x = next(a for a in st.accesses if a.buffer == "X")
    assert not x.affine and x.quasi_affine
    exact = brute_footprint(tree, tree.roots, 64)
    auto = data_movement(tree, CPU, counter=FootprintCounter(DataMoveConfig()))
    assert auto.stats.fallbacks == 0 and auto.footprint_lines == exact
    through_isl = data_movement(tree, CPU, counter=FootprintCounter(DataMoveConfig(max_enum_points=0)))
    assert through_isl.stats.isl > 0 and through_isl.stats.fallbacks == 0
    assert through_isl.footprint_lines == exact


def test_isl_running_out_of_operations_is_detected():
    """isl's count_val returns a partial count when the operation limit hits mid-way: that must not be
    taken as the footprint. A 2048 x 2048 box needs more than 5000 operations; its box estimate is exact."""
    layout = LineLayout.of((2048, 2048), 4, 4)
    access = ((IndexExpr.from_terms({"a": 8, "b": 1}, 0), IndexExpr.from_terms({"c": 8, "d": 1}, 0)), ())
    ext = {"a": 256, "b": 8, "c": 256, "d": 8}
    tight = FootprintCounter(DataMoveConfig(engine="isl", max_isl_operations=5000))
    assert tight.count(layout, [access], ext) == 2048 * 2048
    assert tight.stats.fallback_reasons["isl_limit"] == 1
    roomy = FootprintCounter(DataMoveConfig(engine="isl", max_isl_operations=0))  # 0: unlimited
    assert roomy.count(layout, [access], ext) == 2048 * 2048 and roomy.stats.isl == 1


def test_isl_operation_limit_falls_back_to_a_box_and_is_counted():
    tree = fused_matmul()
    tight = FootprintCounter(DataMoveConfig(engine="isl", max_isl_operations=50))
    dm = data_movement(tree, CPU, counter=tight)
    assert dm.stats.fallbacks > 0 and dm.stats.fallback_reasons["isl_limit"] > 0
    exact = brute_footprint(tree, tree.roots, 64)
    assert set(dm.footprint_lines) == set(exact)
    assert all(dm.footprint_lines[b] >= n for b, n in exact.items())


def gpu_copy_through_shared() -> LoopTree:
    """B = A + 1 (256 x 256) with blocks of 32 x 32, a shared-memory copy of A and a local result."""
    A = te.placeholder((256, 256), "float32", name="A")
    B = te.compute((256, 256), lambda i, j: A[i, j] + 1.0, name="B")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B])}))
    blk = sch.get_sblock("B")
    i, j = sch.get_loops(blk)
    bi, ti = sch.split(i, [None, 32])
    bj, tj = sch.split(j, [None, 32])
    sch.reorder(bi, bj, ti, tj)
    for loop, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        sch.bind(loop, tag)
    sh = sch.cache_read(blk, 0, "shared")
    sch.compute_at(sh, bj)
    for loop, tag in zip(sch.get_loops(sh)[-2:], ("threadIdx.y", "threadIdx.x"), strict=True):
        sch.bind(loop, tag)
    loc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(loc, tj)
    return LoopTree.from_mod(sch.mod)


def test_on_chip_buffers_are_not_cached_data():
    """Shared and local copies are scratchpad/registers: only A and B move through the caches, each once
    (every block reads its own 32 x 32 tile of A and writes its tile of B)."""
    tree = gpu_copy_through_shared()
    assert {a.scope for a in tree.accesses()} == {"global", "shared", "local"}
    spec = dataclasses.replace(CPU, kind="gpu", line_bytes=128, l1_bytes=128 * 1024)
    dm = data_movement(tree, spec)
    assert dm.buffers == ("A", "B")
    assert dm.footprint_lines == {"A": 256 * 256 // 32, "B": 256 * 256 // 32}
    assert dm.levels["L1"].per_buffer_lines == dm.footprint_lines


def test_counting_paths_agree_with_enumeration_on_random_accesses():
    """Closed form (dense/outer split, covering box, flattened floordiv), numpy enumeration, isl and a
    brute-force Python loop give the same line counts on random unions of affine and floordiv/floormod
    accesses, with and without guards."""
    rng = random.Random(7)
    roomy = 2_000_000  # some floormod unions of tiny sets need ~10^5 isl operations
    auto = FootprintCounter(DataMoveConfig(max_isl_operations=roomy))
    isl_c = FootprintCounter(DataMoveConfig(engine="isl", max_isl_operations=roomy))
    for _ in range(150):
        shape = tuple(rng.choice([3, 7, 16, 20, 58, 64]) for _ in range(rng.randint(1, 3)))
        layout = LineLayout.of(shape, 4, 4 * rng.choice([1, 4, 16]))
        ext = {f"x{i}": rng.randint(1, 6) for i in range(rng.randint(1, 4))}
        accs = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            idx = []
            for size in shape:
                e = IndexExpr.from_terms({v: rng.choice([1, 1, 2, 3, 8, -1]) for v in ext if rng.random() < 0.5}, 0)
                if rng.random() < 0.2:
                    e = IndexExpr.from_terms({DivMod(rng.choice(["floordiv", "floormod"]), e, 3): 1}, 0)
                lo, hi = e.interval(ext)
                e = e.add(IndexExpr.constant(int(-lo) + rng.randint(0, 2)))
                if e.interval(ext)[1] >= size:
                    e = IndexExpr.constant(rng.randrange(size))
                idx.append(e)
            v = rng.choice(list(ext))
            conds = (IndexExpr.var(v, -1, ext[v] // 2),) if rng.random() < 0.2 else ()
            accs.append((tuple(idx), conds))
        lines = set()
        for idx, conds in accs:
            for point in itertools.product(*(range(ext[v]) for v in ext)):
                vals = dict(zip(ext, point, strict=True))
                if all(c.evaluate(vals) >= 0 for c in conds):
                    addr = 0
                    for e, size in zip(idx, shape, strict=True):
                        addr = addr * size + e.evaluate(vals)
                    lines.add(addr // layout.epl)
        assert auto.count(layout, accs, ext) == isl_c.count(layout, accs, ext) == len(lines)
    assert auto.stats.closed_form > 30 and auto.stats.enumerated > 30 and auto.stats.fallbacks == 0
    assert isl_c.stats.isl == isl_c.stats.queries  # cache hits count with the method that computed them


def split_by_pixels_or_channels(channels_outer: bool, parallel: bool = True) -> tvm.IRModule:
    """Out[p, o] = sum_k X[p, k] W[k, o] (a 1 x 1 convolution), 64 pixels, 64 -> 128 channels, tiled 8 x 16 with
    the tile loops fused into one parallel loop: pixel tiles outer, or channel tiles outer."""
    X = te.placeholder((64, 64), "float32", name="X")
    W = te.placeholder((64, 128), "float32", name="W")
    k = te.reduce_axis((0, 64), name="k")
    Out = te.compute((64, 128), lambda p, o: te.sum(X[p, k] * W[k, o], axis=k), name="Out")
    func = te.create_prim_func([X, W, Out]).with_attr("layout_free_buffers", [1])
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    p, o, kk = sch.get_loops(sch.get_sblock("Out"))
    po, pi = sch.split(p, [8, 8])
    oo, oi = sch.split(o, [8, 16])
    sch.reorder(*((oo, po) if channels_outer else (po, oo)), pi, oi, kk)
    fused = sch.fuse(*((oo, po) if channels_outer else (po, oo)))
    if parallel:
        sch.parallel(fused)
    return sch.mod


def test_the_first_core_reads_a_whole_weight_only_when_split_by_pixels():
    """W is 64 rows of 128 floats (8 lines each, 512 lines). The runtime gives each of 2 cores half of the fused
    parallel loop: with pixel tiles outer, core 0 runs 4 pixel tiles x all 8 channel tiles and reads all of W; with
    channel tiles outer it runs 4 channel tiles (64 floats = 4 lines of each row), 256 lines, and all of X. Serial:
    all of both."""
    from drytune.costmodel.cpu_features import weight_lines_per_core
    from drytune.costmodel.datamove import core_footprint_lines

    spec = dataclasses.replace(CPU, cores=2)
    by_pixels, by_channels = split_by_pixels_or_channels(False), split_by_pixels_or_channels(True)
    serial = split_by_pixels_or_channels(True, parallel=False)
    lines = {name: core_footprint_lines(LoopTree.from_mod(mod), spec, {"W", "X"})
             for name, mod in (("pixels", by_pixels), ("channels", by_channels), ("serial", serial))}
    assert lines["pixels"] == {"W": 512, "X": 128}  # X: 32 of its 64 rows, 4 lines each
    assert lines["channels"] == {"W": 256, "X": 256}  # 4 channel tiles x all 8 pixel tiles
    assert lines["serial"] == {"W": 512, "X": 256}
    # only the marked constant weight counts; the same program unmarked has none
    assert weight_lines_per_core(by_channels, LoopTree.from_mod(by_channels), spec) == 256
    unmarked = tvm.IRModule({"main": by_channels["main"].without_attr("layout_free_buffers")})
    assert weight_lines_per_core(unmarked, LoopTree.from_mod(unmarked), spec) == 0
