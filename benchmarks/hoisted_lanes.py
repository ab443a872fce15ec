"""What a hoisted operand of odd width costs: C += A B tiles whose B rows are invariant in the row-block loop.

LLVM hoists B's rows out of the row-block loop; at 24, 40, 48 or 80 lanes (wider than a register, not a power of two)
it assembles them lane by lane before each run of that loop (`KernelConfig.hoisted_by_lane`). Each lane count is
timed (one thread) with a short row-block loop (2 iterations per run: the preheader weighs) and a long one (40), in
rounds with the order rotated, and predicted by the kernel model with and without the rule.

    python benchmarks/hoisted_lanes.py --tag znver4
"""

from __future__ import annotations

import statistics
import sys
import time

from microbench import interleaved, one_core_target, parse_args, relative_accuracy, timed_and_predicted
from report_files import write_report

LANES = (16, 32, 64, 20, 24, 40, 48, 80)
ROWS, K, K_INNER = 7, 256, 4
N = 960  # columns: a multiple of every lane count, so that all tiles read the same matrices


def tile(lanes: int, blocks: int):
    """C (blocks x 7 rows, 960 columns) += A B: body 7 rows x 4 reduction steps on one `lanes`-wide vector, iterated
    over row blocks inside the outer reduction loop (B's 4 rows invariant there), column tile by column tile."""
    import tvm
    from tvm import s_tir, te

    M = blocks * ROWS
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    block = sch.get_sblock("C")
    i, j, r = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, ROWS])
    j0, j1 = sch.split(j, [None, lanes])
    k0, k1 = sch.split(r, [None, K_INNER])
    sch.reorder(j0, k0, i0, k1, i1, j1)
    sch.unroll(k1)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.decompose_reduction(block, k0)
    return sch.mod


def main() -> int:
    args = parse_args(__doc__)

    from drytune.costmodel.model import StaticCostModel

    target = one_core_target()
    models = {"rule": StaticCostModel(target), "no rule": StaticCostModel(target, kernel_overrides={
        "hoisted_by_lane": False})}
    cases = [(lanes, blocks) for blocks in (2, 40) for lanes in LANES]
    timers, predicted = timed_and_predicted(cases, tile, target, models, args.min_seconds)
    times = interleaved(timers, args.rounds)
    rows = []
    for lanes, blocks in cases:
        t = statistics.median(times[(lanes, blocks)])
        fmas = blocks * ROWS * N * K
        rows.append({"lanes": lanes, "row_blocks": blocks, "measured_s": t, "gfma_per_s": fmas / t / 1e9,
                     "predicted_s": predicted[(lanes, blocks)]})
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(target), "rows": rows,
              "command": "python benchmarks/hoisted_lanes.py " + " ".join(sys.argv[1:])}
    lines = ["# Hoisted operands of odd width: measured and predicted", "", f"{report['date']}. `{report['command']}`",
             "", f"One thread, {args.rounds} interleaved rounds (median). measured / predicted is relative to the "
             "16-lane tile of the same row-block count (1.00: the model rates the tile as it runs).", "",
             "| lanes | row blocks per run | measured us | GFMA/s | measured / predicted, rule | same, no rule |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ref = next(x for x in rows if x["lanes"] == 16 and x["row_blocks"] == r["row_blocks"])
        rel = relative_accuracy(r, ref)
        r["relative_measured_over_predicted"] = rel
        lines.append(f"| {r['lanes']} | {r['row_blocks']} | {r['measured_s'] * 1e6:.1f} | {r['gfma_per_s']:.1f} | "
                     f"{rel['rule']:.2f} | {rel['no rule']:.2f} |")
    write_report("hoisted_lanes", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
