"""Small TIR programs, TVM lowering steps and candidate edits shared by the tests."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, te, tirx

import drytune as dt

# TVM's own placement and compaction of intermediate buffers, as the default pipeline runs them
COMPACTION_PASSES = ("LowerInitBlock", "PlanAndUpdateBufferAllocationLocation", "ConvertBlocksToOpaque",
                     "CompactBufferAllocation")


def loop_kinds(mod: tvm.IRModule) -> list[str]:
    """Kinds of the module's loops in pre-order ("SERIAL", "PARALLEL", "VECTORIZED", ...)."""
    found: list[str] = []
    tvm_ffi.structural_walk(mod, [(tirx.For, lambda f: found.append(tirx.ForKind(int(f.kind)).name))], order="pre")
    return found


def with_parallel(cand: dt.Candidate, serial: bool) -> dt.Candidate:
    """`cand` with every CPU nest serial (parallel depth 0) or at its deepest parallel fusion."""
    pick = {h.key: h.options.index(0 if serial else max(h.options)) for h in cand.sketch.holes if h.kind == "parallel"}
    return dt.Candidate(cand.task, cand.sketch, {**cand.decisions, **pick})


def compacted(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` after TVM's compaction passes (intermediates allocated where used, shrunk to one iteration)."""
    for name in COMPACTION_PASSES:
        mod = getattr(s_tir.transform, name)()(mod)
    return mod


def max_pool_over_pad(size: int, channels: int, pad_inside_x: bool) -> s_tir.Schedule:
    """3x3 stride-2 max pooling (block "pool") over a padded copy (block "pad") of a (1, channels, size, size)
    input; the pad computed at the root or inside the pool's output-column loop x."""
    data = te.placeholder((1, channels, size, size), "float32", name="data")
    pad = te.compute((1, channels, size + 2, size + 2), lambda n, c, h, w: tirx.if_then_else(
        tirx.all(h >= 1, h < size + 1, w >= 1, w < size + 1), data[n, c, h - 1, w - 1],
        tirx.const(-3.0e38, "float32")), name="pad")
    rh, rw = te.reduce_axis((0, 3), name="rh"), te.reduce_axis((0, 3), name="rw")
    out = size // 2
    pool = te.compute((1, channels, out, out), lambda n, c, y, x: te.max(pad[n, c, 2 * y + rh, 2 * x + rw],
                                                                       axis=[rh, rw]), name="pool")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([data, pool])}))
    if pad_inside_x:
        sch.compute_at(sch.get_sblock("pad"), sch.get_loops(sch.get_sblock("pool"))[3])
    return sch


def depthwise_window_at_channels(channels: int, stride: int = 1, unroll_step: int = 512) -> s_tir.Schedule:
    """A padded 3 x 3 depthwise convolution to 14 x 14 x `channels` (input 14 * `stride` square) as MetaSchedule
    schedules MobileNet-V2's: blocks of two output columns parallel, then pairs of output rows, the padded input window
    computed at the channel loop (serial, for LLVM's loop vectorizer), TVM's auto-unroll at `unroll_step`, the ReLU in
    its own parallel nest (so the convolution's output is an intermediate buffer)."""
    size = 14 * stride
    X = te.placeholder((size, size, channels), "float32", name="X")
    W = te.placeholder((3, 3, channels), "float32", name="W")
    P = te.compute((size + 2, size + 2, channels), lambda h, w, c: tirx.if_then_else(
        tirx.all(h >= 1, h <= size, w >= 1, w <= size), X[h - 1, w - 1, c], tirx.const(0.0, "float32")), name="P")
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    D = te.compute((14, 14, channels), lambda y, x, c: te.sum(
        P[stride * y + ry, stride * x + rx, c] * W[ry, rx, c], axis=[ry, rx]), name="D")
    E = te.compute((14, 14, channels), lambda y, x, c: te.max(D[y, x, c], tirx.const(0.0, "float32")), name="E")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, W, E])}))
    d = sch.get_sblock("D")
    y, x, c, r1, r2 = sch.get_loops(d)
    x0, x2 = sch.split(x, [7, 2])
    y1, y2 = sch.split(y, [7, 2])
    sch.reorder(x0, y1, c, r2, y2, x2, r1)
    sch.parallel(x0)
    sch.annotate(x0, "pragma_auto_unroll_max_step", unroll_step)
    sch.annotate(x0, "pragma_unroll_explicit", 1)
    sch.compute_at(sch.get_sblock("P"), c)
    sch.decompose_reduction(d, r2)
    sch.parallel(sch.get_loops(sch.get_sblock("E"))[0])
    return sch


def padded_rows_at_channels(channels: int = 6, rows: int = 10) -> s_tir.Schedule:
    """A zero-padded copy of `rows` x 56 rows (to 58 columns) computed at a parallel channel loop and vectorized, then
    read by a vectorized stencil: TVM leaves the guarded row copy a serial loop that LLVM vectorizes itself."""
    X = te.placeholder((channels, rows, 56), "float32", name="X")
    P = te.compute((channels, rows + 2, 58), lambda c, h, w: tirx.if_then_else(
        tirx.all(h >= 1, h <= rows, w >= 1, w <= 56), X[c, h - 1, w - 1], tirx.const(0.0, "float32")), name="P")
    D = te.compute((channels, rows, 56), lambda c, y, x: P[c, y, x] + P[c, y + 2, x + 2] * P[c, y + 1, x + 1], name="D")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, D])}))
    c, _, x = sch.get_loops(sch.get_sblock("D"))
    sch.parallel(c)
    sch.vectorize(x)
    sch.compute_at(sch.get_sblock("P"), c)
    sch.vectorize(sch.get_loops(sch.get_sblock("P"))[-1])
    return sch


def matmul_schedule(M: int = 8, N: int = 64, K: int = 64, b_transposed: bool = False) -> s_tir.Schedule:
    """C = A B (or A B^T, B stored N x K) as a schedule to transform."""
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((N, K) if b_transposed else (K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * (B[j, k] if b_transposed else B[k, j]), axis=k), name="C")
    return s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))


def splat_kernel(lanes: int, unroll: int) -> s_tir.Schedule:
    """C[i, b] += W[i, k] X[b, k] on a TVM vector of `lanes` columns: the row loop b iterates the body, `unroll`
    reduction steps unrolled in it, each broadcasting one W element that does not change with b."""
    W = te.placeholder((16, 64), "float32", name="W")
    X = te.placeholder((32, 64, lanes), "float32", name="X")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((16, 32, lanes), lambda i, b, x: te.sum(W[i, k] * X[b, k, x], axis=k), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([W, X, C])}))
    block = sch.get_sblock("C")
    i, b, x, r = sch.get_loops(block)
    k0, k1 = sch.split(r, [None, unroll])
    sch.reorder(i, k0, b, k1, x)
    sch.unroll(k1)
    sch.vectorize(x)
    sch.decompose_reduction(block, k0)
    return sch
