"""Loop tree of scheduled TIR: loop extents/kinds/annotations, affine indices over loop variables,
floordiv/floormod of fused loops, GPU thread bindings, guards, op counts and the structural key."""

import itertools

import pytest
import tvm
import tvm_ffi
from tir_programs import compacted, max_pool_over_pad
from tvm import s_tir, te, tirx

from drytune.costmodel.looptree import DivMod, IndexExpr, LoopTree, LoopTreeError, make_divmod


def matmul_relu(M=512, N=512, K=512):
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: te.max(C[i, j], tirx.const(0, "float32")), name="D")
    return te.create_prim_func([A, B, D])


def tiled_matmul(fuse: bool) -> s_tir.Schedule:
    sch = s_tir.Schedule(tvm.IRModule({"main": matmul_relu()}))
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    i0, i1, i2 = sch.split(i, [None, 8, 4])
    j0, j1, j2 = sch.split(j, [None, 4, 32])
    k0, k1 = sch.split(k, [None, 8])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    CW = sch.cache_write(C, 0, "local")
    sch.reverse_compute_at(CW, j1)
    outer = sch.fuse(i0, j0) if fuse else i0
    sch.parallel(outer)
    sch.vectorize(j2)
    sch.unroll(i2)
    sch.annotate(outer, "pragma_auto_unroll_max_step", 64)
    sch.decompose_reduction(C, k0)
    sch.reverse_compute_inline(sch.get_sblock("D"))
    return sch


def _stmt(tree, block):
    return next(s for s in tree.statements() if s.block == block)


def _acc(stmt, buffer, write=False):
    return next(a for a in stmt.accesses if a.buffer == buffer and a.is_write == write)


def test_matmul_loops_kinds_and_affine_indices():
    tree = LoopTree.from_mod(tiled_matmul(fuse=False).mod)
    loops = [(n.var, n.extent, n.kind, n.depth) for n in tree.preorder()]
    assert loops == [
        ("i_0", 16, "parallel", 0),
        ("j_0", 4, "serial", 1),
        ("i_1", 8, "serial", 2),
        ("j_1", 4, "serial", 3),
        ("i_2_init", 4, "unrolled", 4),
        ("j_2_init", 32, "vectorized", 5),
        ("k_0", 64, "serial", 4),
        ("k_1", 8, "serial", 5),
        ("i_2", 4, "unrolled", 6),
        ("j_2", 32, "vectorized", 7),
        ("ax0", 4, "serial", 4),
        ("ax1", 32, "serial", 5),
    ]
    assert tree.preorder()[0].annotations == {"pragma_auto_unroll_max_step": 64}

    upd = _stmt(tree, "C_update")
    a = _acc(upd, "A")
    assert a.affine and a.shape == (512, 512) and a.dtype_bytes == 4 and a.scope == "global"
    assert a.indices[0].coeffs == {"i_0": 32, "i_1": 4, "i_2": 1} and a.indices[0].const == 0
    assert a.indices[1].coeffs == {"k_0": 8, "k_1": 1}
    b = _acc(upd, "B")
    assert b.indices[1].coeffs == {"j_0": 128, "j_1": 32, "j_2": 1}
    c = _acc(upd, "C_local", write=True)
    assert c.scope == "local" and c.is_write
    # C_local = C_local + A * B: one fused multiply-add, three loads, one store, per innermost iteration.
    assert upd.ops["fma"] == 1 and upd.ops["load"] == 3 and upd.ops["store"] == 1
    assert upd.trips == 512**3
    relu = _stmt(tree, "C_local")
    assert relu.ops["fminmax"] == 1 and _acc(relu, "D", write=True).indices[0].coeffs == {"i_0": 32, "i_1": 4, "ax0": 1}
    assert tree.total_ops()["fma"] == 512**3


def test_fused_loop_gives_quasi_affine_indices_that_evaluate_like_tir():
    tree = LoopTree.from_mod(tiled_matmul(fuse=True).mod)
    top = tree.preorder()[0]
    assert (top.var, top.extent, top.kind) == ("i_0_j_0_fused", 64, "parallel")
    a = _acc(_stmt(tree, "C_update"), "A")
    row = a.indices[0]
    assert not a.affine and a.quasi_affine
    assert {t.op for t, _ in row.terms if isinstance(t, DivMod)} == {"floordiv"}
    col_b = _acc(_stmt(tree, "C_update"), "B").indices[1]
    # row = (f // 4) * 32 + 4 * i_1 + i_2 and col = (f % 4) * 128 + 32 * j_1 + j_2, as fuse(i_0, j_0) defines.
    for f, i1, i2, j1, j2 in itertools.product(range(64), range(0, 8, 3), range(4), range(4), (0, 31)):
        vals = {"i_0_j_0_fused": f, "i_1": i1, "i_2": i2, "j_1": j1, "j_2": j2}
        assert row.evaluate(vals) == (f // 4) * 32 + 4 * i1 + i2
        assert col_b.evaluate(vals) == (f % 4) * 128 + 32 * j1 + j2


def gpu_matmul(BM=64, BN=64, BK=16, TM=4, TN=4):
    sch = s_tir.Schedule(tvm.IRModule({"main": matmul_relu(256, 256, 256)}))
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    bi, ti, ii = sch.split(i, [None, BM // TM, TM])
    bj, tj, jj = sch.split(j, [None, BN // TN, TN])
    ko, ki = sch.split(k, [None, BK])
    sch.reorder(bi, bj, ti, tj, ko, ki, ii, jj)
    for loop, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        sch.bind(loop, tag)
    CL = sch.cache_write(C, 0, "local")
    sch.reverse_compute_at(CL, tj)
    for idx in (0, 1):
        S = sch.cache_read(C, idx, "shared")
        sch.compute_at(S, ko)
        fused = sch.fuse(*sch.get_loops(S)[-2:])
        _, ty, tx = sch.split(fused, [None, BM // TM, BN // TN])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    sch.decompose_reduction(C, ko)
    sch.reverse_compute_inline(sch.get_sblock("D"))
    return sch


def test_gpu_thread_bindings_and_rebound_loops():
    tree = LoopTree.from_mod(gpu_matmul().mod)
    bound = [(n.var, n.extent, n.thread_tag, n.alias_of) for n in tree.preorder() if n.kind == "thread_binding"]
    assert bound[:4] == [
        ("i_0", 4, "blockIdx.y", None),
        ("j_0", 4, "blockIdx.x", None),
        ("i_1", 16, "threadIdx.y", None),
        ("j_1", 16, "threadIdx.x", None),
    ]
    # The cooperative-fetch loops bind the same threads again: aliases that add no iterations.
    rebound = bound[4:]
    assert len(rebound) == 4 and {b[3] for b in rebound} == {"i_1", "j_1"}
    assert all(n.trips == 1 for n in tree.preorder() if n.alias_of)
    fetch = next(s for s in tree.statements() if s.block == "A_shared")
    assert fetch.trips == 4 * 4 * 16 * 16 * (256 // 16) * 4  # blocks x threads x k_0 x per-thread trips
    glob = _acc(fetch, "A")
    assert glob.scope == "global" and _acc(fetch, "A_shared", write=True).scope == "shared"
    assert glob.indices[0].loop_vars() >= {"i_0", "i_1"}  # thread index of the enclosing binding
    assert _acc(_stmt(tree, "C_update"), "C_local", write=True).scope == "local"


def test_guards_predicates_and_selects():
    A = te.placeholder((128, 1000), "float32", name="A")
    k = te.reduce_axis((0, 1000), name="k")
    R = te.compute((128,), lambda i: te.sum(A[i, k], axis=k), name="R")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, R])}))
    _, kk = sch.get_loops(sch.get_sblock("R"))
    _, ki = sch.split(kk, [None, 16])  # 63 * 16 > 1000: the rfactor block gets a predicate
    sch.rfactor(ki, factor_axis=0)
    tree = LoopTree.from_mod(sch.mod)
    rf = [s for s in tree.statements() if s.block == "R_rf"]
    assert {s.init for s in rf} == {True, False}
    upd = next(s for s in rf if not s.init)
    assert upd.predicated and len(upd.conditions) == 1
    cond = upd.conditions[0]  # k_0 * 16 + k_1 < 1000  <=>  999 - 16 k_0 - k_1 >= 0
    assert cond.coeffs == {"k_0": -16, "k_1": -1} and cond.const == 999
    assert upd.ops["fadd"] == 1

    data = te.placeholder((1, 4, 8, 8), "float32", name="data")
    pad = te.compute(
        (1, 4, 10, 10),
        lambda n, c, h, w: tirx.if_then_else(
            tirx.all(h >= 1, h < 9, w >= 1, w < 9), data[n, c, h - 1, w - 1], tirx.const(0.0, "float32")
        ),
        name="pad",
    )
    tree = LoopTree.from_mod(tvm.IRModule({"main": te.create_prim_func([data, pad])}))
    (st,) = tree.statements()
    assert st.has_select and st.ops["select"] == 1
    load = _acc(st, "data")
    assert load.conditional and load.indices[2].coeffs == {"h": 1} and load.indices[2].const == -1


def test_structural_key_follows_the_schedule():
    k1 = LoopTree.from_mod(tiled_matmul(fuse=True).mod).shape_key()
    k2 = LoopTree.from_mod(tiled_matmul(fuse=True).mod).shape_key()
    k3 = LoopTree.from_mod(tiled_matmul(fuse=False).mod).shape_key()
    assert k1 == k2 and hash(k1) == hash(k2) and k1 != k3


def test_symbolic_extent_is_a_clear_error():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(LoopTreeError):
        LoopTree.from_mod(tvm.IRModule({"main": te.create_prim_func([A, B])}))


def test_division_of_a_fused_index_keeps_inner_loops_outside():
    # (64*i + 8*j + v) // 1024 and % 1024 with 8*j + v < 64: the inner loops leave the division, so a vector
    # lane v reads as contiguous; the rewritten forms equal Python's floor division everywhere
    ext = {"i": 40, "j": 8, "v": 8}
    arg = IndexExpr.from_terms({"i": 64, "j": 8, "v": 1}, 0)
    div, mod = make_divmod("floordiv", arg, 1024, ext), make_divmod("floormod", arg, 1024, ext)
    assert mod.coeffs == {"j": 8, "v": 1}
    assert all(t.arg.loop_vars() == {"i"} for t, _ in (*div.terms, *mod.terms) if isinstance(t, DivMod))
    for i, j, v in itertools.product(range(40), range(8), range(8)):
        a = 64 * i + 8 * j + v
        vals = {"i": i, "j": j, "v": v}
        assert (div.evaluate(vals), mod.evaluate(vals)) == (a // 1024, a % 1024)
    # a low part that can reach the common factor is not split (5 + 8*j + v reaches 68 >= 64)
    shifted = IndexExpr.from_terms({"i": 64, "j": 8, "v": 1}, 5)
    kept = make_divmod("floormod", shifted, 1024, ext)
    assert [type(t) for t, _ in kept.terms] == [DivMod]


def test_repeated_subexpressions_are_counted_once():
    # inlining copies a producer's expression into every use; LLVM computes the copies once
    A = te.placeholder((64,), "float32", name="A")
    t = te.compute((64,), lambda i: te.max(A[i] * 2.0 + 1.0, tirx.const(0.0, "float32")), name="t")
    B = te.compute((64,), lambda i: t[i] * t[i] + t[i], name="B")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B])}))
    sch.compute_inline(sch.get_sblock("t"))
    stmt = _stmt(LoopTree.from_mod(sch.mod), "B")
    # max(A*2+1, 0) once: one fma (A*2+1), one max; then t*t+t: one fma
    assert stmt.ops["fma"] == 2 and stmt.ops["fminmax"] == 1
    assert stmt.ops["load"] == 1 and len([a for a in stmt.accesses if not a.is_write]) == 1


def _tvm_alloc_shapes(mod: tvm.IRModule) -> dict[str, tuple[int, ...]]:
    """Shapes of the buffers TVM allocates after planning their location and compacting them."""
    mod = compacted(mod)
    shapes = {}

    def visit(block) -> None:
        for buf in block.alloc_buffers:
            shapes[str(buf.name)] = tuple(int(s) for s in buf.shape)

    tvm_ffi.structural_walk(mod["main"].body, [(s_tir.SBlock, visit)], order="pre")
    return shapes


@pytest.mark.parametrize("at_consumer", [False, True])
def test_intermediate_buffers_are_indexed_as_tvm_compacts_them(at_consumer):
    mod = max_pool_over_pad(16, 4, pad_inside_x=at_consumer).mod
    tree = LoopTree.from_mod(mod)
    pads = [a for a in tree.accesses() if a.buffer == "pad"]
    assert {a.mem_shape for a in pads} == {_tvm_alloc_shapes(mod)["pad"]}
    expected = (1, 1, 3, 3) if at_consumer else (1, 4, 18, 18)
    assert pads[0].mem_shape == expected
    for a in pads:  # every index stays inside the compacted buffer
        for ix, size in zip(a.mem_indices, a.mem_shape, strict=True):
            lo, hi = ix.interval(tree.extents)
            assert 0 <= lo and hi < size
        assert a.shape == (1, 4, 18, 18)  # the logical view (kernel model) is unchanged
    if at_consumer:  # the loops outside the allocation no longer address the storage
        assert all(not ix.loop_vars() & {"n", "c", "y", "x"} for a in pads for ix in a.mem_indices)
        assert any({"y", "x"} <= set().union(*(ix.loop_vars() for ix in a.indices)) for a in pads)
    assert all(a.mem_shape == (1, 4, 16, 16) for a in tree.accesses() if a.buffer == "data")
