"""depthwise_conv2d_s2 in MetaSchedule's SSRSRS shape: what LLVM makes of padded stride-2 rows, and the model's price.

Each variant keeps MetaSchedule's 120-s kernel on Zen 5 (session 62: 4 channels x 14 x 4 output rows per parallel
iteration, the whole 56-wide row as the innermost tile, accumulating in a cache-write buffer over the kernel rows)
and changes one thing: the padding inlined or at the root, the x tile (56, 2 x 28, 7 x 8), the auto-unroll step
(0, 64, 128, 512: with 512 the kernel-row loop is unrolled with the 4 x 56 copies), x vectorized or only unrolled.
Per variant: vector instructions of the assembly, the shipped model's prediction, and the median of 5 interleaved
rounds of measurement.

    python benchmarks/padded_rows.py --out benchmarks/results/padded_rows_znver5_s63
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import time

import tvm
from op_tuning import interleaved
from tvm import s_tir

from drytune import workloads
from drytune.costmodel.model import StaticCostModel

# name -> (x tile factors, where the padding goes, auto-unroll step, x vectorized)
VARIANTS = {
    "metaschedule": ((1, 1, 1, 56), "inline", 512, True),
    "no_unroll": ((1, 1, 1, 56), "inline", 0, True),
    "x28": ((1, 1, 2, 28), "inline", 512, True),
    "x28_unroll128": ((1, 1, 2, 28), "inline", 128, True),
    "x28_outer_unroll128": ((1, 2, 1, 28), "inline", 128, True),
    "x8": ((1, 1, 7, 8), "inline", 512, True),
    "x8_unroll64": ((1, 1, 7, 8), "inline", 64, True),
    "pad_root_unrolled": ((1, 1, 1, 56), "root", 512, False),
}
ASM_OPS = ("vfmadd231ps", "vfmadd231ss", "vpermt2ps", "vinsertps", "vgatherdps", "vmovss")


def schedule(mod: tvm.IRModule, x: tuple[int, ...], pad: str, unroll: int, vectorize: bool) -> tvm.IRModule:
    """MetaSchedule's trace for this operator with the variant's changes."""
    sch = s_tir.Schedule(mod)
    conv = sch.get_sblock("depthwise_conv")
    n, c, y, xl, rh, rw = sch.get_loops(conv)
    tiles = [sch.split(lp, list(f), preserve_unit_iters=True)
             for lp, f in zip((n, c, y, xl), ((1, 1, 1, 1), (24, 1, 4, 1), (1, 1, 14, 4), x), strict=True)]
    rhs = sch.split(rh, [1, 3], preserve_unit_iters=True)
    rws = sch.split(rw, [3, 1], preserve_unit_iters=True)
    sch.reorder(*[t[0] for t in tiles], *[t[1] for t in tiles], rhs[0], rws[0], *[t[2] for t in tiles],
                rhs[1], rws[1], *[t[3] for t in tiles])
    write = sch.cache_write(conv, 0, "global")
    sch.reverse_compute_at(write, tiles[3][0], preserve_unit_loops=True)
    if pad == "inline":
        sch.compute_inline(sch.get_sblock("pad"))
    outer = sch.fuse(*sch.get_loops(conv)[:4], preserve_unit_iters=True)
    sch.parallel(outer)
    if vectorize:
        sch.vectorize(sch.get_loops(conv)[-1])
    sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
    sch.annotate(outer, "pragma_unroll_explicit", 1)
    sch.vectorize(sch.get_loops(write)[-1])
    sch.decompose_reduction(conv, sch.get_loops(conv)[4])
    return sch.mod


def asm_counts(mod: tvm.IRModule, target) -> dict[str, int]:
    asm = tvm.compile(mod, target=target).mod.inspect_source("asm")
    found = collections.Counter(re.findall(r"^\s+(v\w+)", asm, re.M))
    return {op: found[op] for op in ASM_OPS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", required=True, help="results path without extension (.json and .md are written)")
    args = ap.parse_args()
    task = workloads.get("depthwise_conv2d_s2").task()
    model = StaticCostModel(task.target)
    mods, rows = {}, {}
    for name, (x, pad, unroll, vec) in VARIANTS.items():
        mod = mods[name] = schedule(task.mod, x, pad, unroll, vec)
        rows[name] = {"x": x, "pad": pad, "unroll": unroll, "vectorized": vec, "asm": asm_counts(mod, task.target),
                      "predicted_us": model.seconds_of_module(mod) * 1e6}
        print(name, rows[name], flush=True)
    times = interleaved(mods, task.target, rounds=args.rounds)
    for name, ts in times.items():
        rows[name]["measured_us"] = statistics.median(ts) * 1e6
        rows[name]["rounds_us"] = [t * 1e6 for t in ts]
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(task.target), "rows": rows}
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    lines = [f"# depthwise_conv2d_s2 in MetaSchedule's shape ({report['date']}, {task.target.attrs['mcpu']})", "",
             "| variant | x tile | padding | auto-unroll | x vectorized | " + " | ".join(ASM_OPS)
             + " | predicted (us) | measured (us) |", "|---" * (7 + len(ASM_OPS)) + "|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {'x'.join(map(str, r['x']))} | {r['pad']} | {r['unroll']} | {r['vectorized']} | "
                     + " | ".join(str(r["asm"][op]) for op in ASM_OPS)
                     + f" | {r['predicted_us']:.1f} | {r['measured_us']:.1f} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
