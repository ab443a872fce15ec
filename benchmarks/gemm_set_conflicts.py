"""Why the static GEMM pick runs at about half of peak: L1 set conflicts on A's rows, measured by padding them.

The 1024^3 GEMM's search picks (sketch gemm/0: no packing, an 8x32 register tile, accumulators in a compact
C_global tile) read A[i, k] as broadcasts from 8 rows 4 KiB apart: all land in one L1 set, beside the C_global tile
that the reduction keeps there. The same schedules are built on a GEMM whose A rows are 16 floats longer (only the
first 1024 columns read), which spreads those rows over the sets and changes nothing else. Each schedule is measured
on both, interleaved over rounds (median of the per-round ratios), and the static model's prediction and L1 lines
(with and without set conflicts) are printed beside it.

    python benchmarks/gemm_set_conflicts.py --rounds 5 --out benchmarks/results/gemm_set_conflicts_znver5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from tvm import te

sys.path.insert(0, os.path.dirname(__file__))

import drytune as dt  # noqa: E402
from drytune.costmodel.datamove import DataMoveConfig, FootprintCounter, data_movement  # noqa: E402
from drytune.costmodel.dataset import MeasuredRow  # noqa: E402
from drytune.costmodel.looptree import LoopTree  # noqa: E402
from drytune.measure import MeasureWorker, measure_modules  # noqa: E402

# Candidates of session 24's 120 s GEMM search (its 1st and 14th of 585 predictions: ranks 0 and 13 counted from
# 0, as the labels say) and a packed one from the Zen 5 fidelity data's searched rows.
SCHEDULES = {
    "pick (8x32 tile)": ("gemm/0", {"C/S0": [8, 1, 16, 8], "C/S1": [16, 1, 2, 32], "C/R2": [128, 8],
                                    "C/parallel": 0, "C/vectorize": 1, "C/unroll": 3}),
    "rank 13 (4x64 tile)": ("gemm/0", {"C/S0": [16, 1, 16, 4], "C/S1": [8, 1, 2, 64], "C/R2": [128, 8],
                                       "C/parallel": 0, "C/vectorize": 1, "C/unroll": 3}),
    "packed B (4x32 tile)": ("gemm/5", {"B_global/parallel": 0, "B_global/unroll": 0, "B_global/vectorize": 3,
                                        "C/R2": [32, 32], "C/S0": [2, 2, 64, 4], "C/S1": [4, 8, 1, 32],
                                        "C/pack1": 2, "C/parallel": 2, "C/unroll": 3, "C/vectorize": 2}),
}


def gemm(pad: int, n: int = 1024):
    """C = A @ B with A stored as n x (n + pad) (its first n columns used)."""
    A = te.placeholder((n, n + pad), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pad", type=int, default=16, help="floats added to each row of A")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    model = dt.StaticCostModel("llvm")
    spec = model.spec
    counters = {True: FootprintCounter(DataMoveConfig()), False: FootprintCounter(DataMoveConfig(set_conflicts=False))}
    built, facts = {}, {}
    for pad in (0, args.pad):
        task = dt.Task.from_prim_func(gemm(pad), "llvm", name="gemm")
        space = dt.SearchSpace(task)
        for name, (sketch, decisions) in SCHEDULES.items():
            cand = MeasuredRow("gemm", "llvm", sketch, decisions, 0.0, ()).candidate(space)
            mod = cand.to_mod()
            tree = LoopTree.from_mod(mod)
            built[(name, pad)] = (mod, task.target)
            facts[(name, pad)] = {
                "predicted_s": float(model.predict(task, [cand])[0]),
                "l1_lines": data_movement(tree, spec, counter=counters[True]).lines("L1"),
                "l1_lines_fully_associative": data_movement(tree, spec, counter=counters[False]).lines("L1"),
            }
    times = {k: [] for k in built}
    with MeasureWorker() as worker:
        for rnd in range(args.rounds):
            for key, (mod, target) in built.items():
                res = measure_modules([mod], target, number=1, repeat=3, timeout_s=120, worker=worker)[0]
                times[key].append(res.seconds)
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    flops = 2 * 1024 ** 3
    rows = []
    for name in SCHEDULES:
        a, b = times[(name, 0)], times[(name, args.pad)]
        rows.append({"schedule": name, "sketch": SCHEDULES[name][0], "decisions": SCHEDULES[name][1],
                     "unpadded_s": statistics.median(a), "padded_s": statistics.median(b),
                     "ratio_unpadded_over_padded": statistics.median(x / y for x, y in zip(a, b, strict=True)),
                     "gflops_unpadded": flops / statistics.median(a) / 1e9,
                     "gflops_padded": flops / statistics.median(b) / 1e9,
                     "unpadded": facts[(name, 0)], "padded": facts[(name, args.pad)],
                     "times_unpadded": a, "times_padded": b})
    lines = [f"# GEMM 1024^3: the same schedules with A's rows 4 KiB apart and {args.pad} floats longer "
             f"({spec.name}, {args.rounds} interleaved rounds)", "",
             "| schedule | unpadded ms | padded ms | unpadded / padded (median of rounds) | "
             "GFLOP/s unpadded -> padded | predicted ms unpadded / padded | L1 lines unpadded (fully assoc.) | "
             "L1 lines padded |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        u, p = r["unpadded"], r["padded"]
        lines.append(f"| {r['schedule']} | {r['unpadded_s'] * 1e3:.2f} | {r['padded_s'] * 1e3:.2f} | "
                     f"{r['ratio_unpadded_over_padded']:.2f} | "
                     f"{r['gflops_unpadded']:.0f} -> {r['gflops_padded']:.0f} | "
                     f"{u['predicted_s'] * 1e3:.2f} / {p['predicted_s'] * 1e3:.2f} | {u['l1_lines'] / 1e6:.2f}M "
                     f"({u['l1_lines_fully_associative'] / 1e6:.2f}M) | {p['l1_lines'] / 1e6:.2f}M |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(rows, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
