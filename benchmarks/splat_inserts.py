"""What a broadcast operand of odd width costs: C[i, b] += W[i, k] X[b, k] on TVM vectors of `lanes` columns.

W's elements do not change with the row loop b, the loop that iterates the body; LLVM hoists their scalar loads out
of it. At 20, 24, 28, 48 or 56 lanes (wider than a register, not a power of two) it builds each element's splat in
the loop with vinsertps, three per 128-bit piece, instead of one vbroadcastss (`KernelConfig.splat_lane_cycles`).
For each lane count and body (`--unroll` reduction steps, each one splat) the script counts the assembly's vinsertps
and FMAs inside loops, then times the kernels (one thread, interleaved rounds) and predicts them with the kernel
model with and without the rule. `--cpus` adds the assembly counts for other CPUs (nothing is timed for them).

    python benchmarks/splat_inserts.py --tag znver4 --cpus znver3,skylake-avx512
"""

from __future__ import annotations

import statistics
import sys
import time

from microbench import interleaved, one_core_target, parse_args, relative_accuracy, timed_and_predicted
from report_files import write_report

LANES = (16, 32, 20, 24, 28, 48, 56)
UNROLLS = (4, 16)
ROWS, K, M = 32, 64, 16
CHECKED_CPUS = ("znver3", "skylake-avx512")


def kernel(lanes: int, unroll: int):
    """C (M x ROWS x lanes) += W (M x K) . X (ROWS x K x lanes): loops i, k0, b (iterating), k1 (`unroll`, unrolled),
    x (`lanes`, a TVM vector); W[i, k] is a scalar broadcast to the vector, invariant in b."""
    import tvm
    from tvm import s_tir, te

    W = te.placeholder((M, K), "float32", name="W")
    X = te.placeholder((ROWS, K, lanes), "float32", name="X")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, ROWS, lanes), lambda i, b, x: te.sum(W[i, k] * X[b, k, x], axis=k), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([W, X, C])}))
    block = sch.get_sblock("C")
    i, b, x, r = sch.get_loops(block)
    k0, k1 = sch.split(r, [None, unroll])
    sch.reorder(i, k0, b, k1, x)
    sch.unroll(k1)
    sch.vectorize(x)
    sch.decompose_reduction(block, k0)
    return sch.mod


def loop_counts(mod, target) -> dict[str, int]:
    """vinsertps and vector FMAs of the assembly, those inside a loop apart."""
    import tvm

    from drytune.costmodel.asm import parse_asm

    program = parse_asm(tvm.compile(mod, target=target).mod.inspect_source("asm"), "x86")
    counts = {"vinsertps_in_loops": 0, "vinsertps": 0, "fma_in_loops": 0}
    for f in program.functions:
        for index, ins in enumerate(f.instructions):
            in_loop = bool(f.blocks) and bool(f.loops_at(index))
            if ins.mnemonic.startswith("vinsertps"):
                counts["vinsertps"] += 1
                counts["vinsertps_in_loops"] += in_loop
            elif ins.mnemonic.startswith("vfmadd") and ins.mnemonic.endswith("ps"):
                counts["fma_in_loops"] += in_loop
    return counts


def main() -> int:
    import argparse

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--cpus", default=",".join(CHECKED_CPUS))
    known, rest = extra.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    args = parse_args(__doc__)

    import tvm

    from drytune.costmodel.model import StaticCostModel

    target = one_core_target()
    models = {"rule": StaticCostModel(target), "no rule": StaticCostModel(target, kernel_overrides={
        "splat_lane_cycles": 0.0})}
    cases = [(lanes, unroll) for unroll in UNROLLS for lanes in LANES]
    asm = {case: loop_counts(kernel(*case), target) for case in cases}
    others = {}
    for cpu in filter(None, known.cpus.split(",")):
        other = tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": 1})
        others[cpu] = {case: loop_counts(kernel(*case), other) for case in cases}
    timers, predicted = timed_and_predicted(cases, kernel, target, models, args.min_seconds)
    times = interleaved(timers, args.rounds)
    rows = []
    for lanes, unroll in cases:
        t = statistics.median(times[(lanes, unroll)])
        fmas = M * ROWS * K * lanes
        rows.append({"lanes": lanes, "unroll": unroll, "measured_s": t, "gfma_per_s": fmas / t / 1e9,
                     "predicted_s": predicted[(lanes, unroll)], "asm": asm[(lanes, unroll)],
                     "asm_other_cpus": {cpu: c[(lanes, unroll)] for cpu, c in others.items()}})
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(target), "rows": rows,
              "command": "python benchmarks/splat_inserts.py " + " ".join(sys.argv[1:])}
    other_cols = "".join(f" | vinsertps in loops, {cpu}" for cpu in others)
    lines = ["# Broadcast operands of odd width: assembly, measured and predicted", "",
             f"{report['date']}. `{report['command']}`", "",
             f"One thread, {args.rounds} interleaved rounds (median). measured / predicted is relative to the 16-lane "
             "kernel of the same unroll (1.00: the model rates the change as it runs). The rule applies when the "
             "body's splats and outputs do not fit the registers (unroll 16 at 20 lanes and more; not unroll 4).", "",
             f"| lanes | unroll | vinsertps in loops | FMAs in loops{other_cols} | measured us | GFMA/s | "
             "measured / predicted, rule | same, no rule |",
             "|---|---|---|---|" + "---|" * len(others) + "---|---|---|---|"]
    for r in rows:
        ref = next(x for x in rows if x["lanes"] == 16 and x["unroll"] == r["unroll"])
        rel = relative_accuracy(r, ref)
        r["relative_measured_over_predicted"] = rel
        other_cells = "".join(f" | {c['vinsertps_in_loops']}" for c in r["asm_other_cpus"].values())
        lines.append(f"| {r['lanes']} | {r['unroll']} | {r['asm']['vinsertps_in_loops']} | {r['asm']['fma_in_loops']}"
                     f"{other_cells} | {r['measured_s'] * 1e6:.1f} | {r['gfma_per_s']:.1f} | {rel['rule']:.2f} | "
                     f"{rel['no rule']:.2f} |")
    write_report("splat_inserts", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
