"""Why the kernel model puts a widened vector's inserts and extracts on the FP pipes: a C microbenchmark of
accumulator updates (load, four FMAs with broadcasts, store) with whole registers (16 lanes in a zmm, 8 in a
ymm) and widened ones (10 or 12 lanes assembled in a zmm, 6 in a ymm, as LLVM emits TVM vectors of those
lengths), at their own stride and at an aligned one. Rounds interleave the cases; the report gives the median
ns per update and the median per-round ratio to the whole register of the same width.

    python benchmarks/widened_vectors.py --tag znver5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from microbench import run_c_cases
from report_files import write_report

BASELINE = {"zmm": "zmm16_stride16", "ymm": "ymm8_stride8"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    times = run_c_cases("widened_vectors.c", args.rounds, args.iters)
    rows = []
    for name, ts in times.items():
        base = BASELINE[name[:3]]
        rows.append({"case": name, "ns_per_update": statistics.median(ts),
                     "ratio_to_whole_register": statistics.median(t / b for t, b in zip(ts, times[base], strict=True))})
    report = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "iters": args.iters, "rows": rows,
              "command": "python benchmarks/widened_vectors.py " + " ".join(sys.argv[1:])}
    lines = ["# Accumulator updates with whole and widened vector registers", "",
             f"{report['date']}. `{report['command']}`", "",
             "56 accumulators, each loaded, updated by 4 FMAs and stored; median over interleaved rounds. The ratio "
             "is to the whole register of the same width (16 lanes for zmm, 8 for ymm), per round, then the median.",
             "", "| case | ns per update | ratio |", "|---|---|---|"]
    lines += [f"| {r['case']} | {r['ns_per_update']:.3f} | {r['ratio_to_whole_register']:.2f} |" for r in rows]
    write_report("widened_vectors", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
