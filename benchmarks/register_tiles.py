"""Accumulator tiles in a compacted intermediate: when LLVM keeps them in registers, and what the model predicts.

D = A B + 1 with the matmul computed at D's tile (its accumulators a small local buffer, as in a convolution fused with
its epilogue). The tile's row and column-chunk loops are unrolled either by TVM (explicit unroll) or left to LLVM;
columns are vectorized in 8 or 16 lanes. Each variant is timed (one thread, interleaved rounds), predicted by the
static model, and its reduction loop read in the assembly: FMAs by register width and accumulator stores per iteration
(none: the tile stays in registers).

    python benchmarks/register_tiles.py --tag znver4
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections import Counter

import numpy as np
from microbench import interleaved, kernel_timer, one_core_target, parse_args
from report_files import write_report

K = 256
# (rows, columns, vector lanes, unrolled by TVM): rows x columns is the accumulator tile
CASES = [(2, 96, 8, True), (2, 96, 8, False), (4, 48, 8, True), (4, 48, 8, False), (2, 96, 16, True),
         (2, 96, 16, False), (2, 32, 8, False)]


def tile_module(rows: int, cols: int, lanes: int, tvm_unroll: bool, k_inner: int = 4, steps_outside: bool = False):
    """D = A B + 1 computed tile by tile; the `k_inner` unrolled reduction steps run inside the tile's loops, or
    around them with `steps_outside` (each step then updates every accumulator once: the usual GEMM micro-kernel)."""
    import tvm
    from tvm import s_tir, te

    M, N = rows * 4, cols * 2
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: C[i, j] + 1.0, name="D")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, D])}))
    d, c = sch.get_sblock("D"), sch.get_sblock("C")
    i, j = sch.get_loops(d)
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, cols])
    sch.reorder(i0, j0, i1, j1)
    sch.compute_at(c, j0)
    ci, cj, ck = sch.get_loops(c)[-3:]
    cj2, cj3 = sch.split(cj, [None, lanes])
    k0, k1 = sch.split(ck, [None, k_inner])
    if steps_outside:
        sch.reorder(k0, k1, ci, cj2, cj3)
    else:
        sch.reorder(k0, ci, cj2, k1, cj3)
    sch.vectorize(cj3)
    sch.unroll(k1)
    if tvm_unroll:
        sch.unroll(ci)
        sch.unroll(cj2)
    sch.decompose_reduction(c, k0)
    return sch.mod


def reduction_loop(asm: str) -> dict[str, int]:
    """FMAs by register width, vector stores and all instructions in the self-looping block of main_compute_ with
    the most FMAs."""
    best: Counter = Counter()
    name, body = None, []
    for line in asm.split("main_compute_:", 1)[1].splitlines():
        if line.startswith(".LBB"):
            name, body = line.split(":")[0], []
        elif line and not line.startswith(("\t", ".")):
            break
        elif line.startswith("\t") and not line.startswith("\t."):
            body.append(line.strip())
            jump = re.match(r"j\w+\s+(\.LBB\w+)", line.strip())
            if jump and jump.group(1) == name:
                c = Counter(instructions=len(body))
                for ins in body:
                    m = re.match(r"(vfmadd\w+|vmov[au]ps)\s.*%([xyz])mm", ins)
                    if m and m.group(1).startswith("vfmadd"):
                        c[f"fma_{m.group(2)}mm"] += 1
                    elif m and re.search(r"%[xyz]mm\d+, -?\d*\(", ins):
                        c["vector_stores"] += 1
                if sum(v for k, v in c.items() if k.startswith("fma")) > sum(
                        v for k, v in best.items() if k.startswith("fma")):
                    best = c
    return dict(best)


def timed_tile(mod, target, rng, min_seconds: float) -> tuple:
    """`mod` built for `target`: a timer of it (`microbench.kernel_timer`) and its reduction loop as read in the
    assembly (`reduction_loop`)."""
    import tvm

    lib = tvm.compile(mod, target=target)
    return kernel_timer(lib, mod, rng, min_seconds), reduction_loop(lib.mod.inspect_source("asm"))


def main() -> int:
    args = parse_args(__doc__)
    from drytune.costmodel.kernel import kernel_cycles
    from drytune.costmodel.looptree import LoopTree
    from drytune.costmodel.model import StaticCostModel

    target = one_core_target()
    model = StaticCostModel(target)
    rng = np.random.default_rng(0)
    timers, rows = {}, []
    for case in CASES:
        mod = tile_module(*case)
        timers[case], loop = timed_tile(mod, target, rng, args.min_seconds)
        est = kernel_cycles(LoopTree.from_mod(mod), model.spec, model.kernel)
        rows.append({"rows": case[0], "columns": case[1], "lanes": case[2], "unrolled_by": "TVM" if case[3] else "LLVM",
                     "asm_loop": loop,
                     "predicted_s": model.seconds_of_module(mod),
                     "kernel_cycles": est.cycles, "kernel_bound": max(est.bound_counts, key=est.bound_counts.get)})
    times = interleaved(timers, args.rounds)
    for row, case in zip(rows, CASES, strict=True):
        row["times_s"] = times[case]
        row["measured_s"] = statistics.median(times[case])
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(target), "rows": rows,
              "command": "python benchmarks/register_tiles.py " + " ".join(sys.argv[1:])}
    lines = ["# Accumulator tiles in a compacted intermediate", "", f"{report['date']}. `{report['command']}`", "",
             f"One thread, {args.rounds} interleaved rounds (median); K = {K}. Reduction loop as read in the assembly.",
             "", "| tile (rows x columns, lanes) | unrolled by | loop: FMAs, vector stores | measured us | "
             "predicted us | kernel model: cycles, bound |", "|---|---|---|---|---|---|"]
    for r in rows:
        loop = r["asm_loop"]
        fmas = ", ".join(f"{v} {k[4:]}" for k, v in sorted(loop.items()) if k.startswith("fma")) or "none"
        lines.append(f"| {r['rows']} x {r['columns']}, {r['lanes']} | {r['unrolled_by']} | {fmas}; "
                     f"{loop.get('vector_stores', 0)} stores | {r['measured_s'] * 1e6:.2f} | "
                     f"{r['predicted_s'] * 1e6:.2f} | {r['kernel_cycles']:.0f}, {r['kernel_bound']} |")
    write_report("register_tiles", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
