"""Small TIR programs and TVM lowering steps shared by the cost-model tests."""

from __future__ import annotations

import tvm
from tvm import s_tir, te, tirx

# TVM's own placement and compaction of intermediate buffers, as the default pipeline runs them
COMPACTION_PASSES = ("LowerInitBlock", "PlanAndUpdateBufferAllocationLocation", "ConvertBlocksToOpaque",
                     "CompactBufferAllocation")


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
