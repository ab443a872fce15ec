"""Loads per cycle by vector width on this core (`KernelConfig.narrow_load_ports`): a C microbenchmark
(`load_widths.c`) of multiply-adds whose two operands are loaded from L1 (scalar, xmm, ymm, zmm, and a zmm with a
broadcast operand as GEMM tiles load it), 12 independent accumulators so the loads bound them, beside the same
multiply-adds on registers. Rounds interleave the cases; the report gives median ns per iteration and loads per
cycle, with the cycle taken from the scalar register case at `--scalar-fmas-per-cycle` (2 on the x86 cores drytune
targets: two FMA pipes).

    python benchmarks/load_widths.py --tag emeraldrapids
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from microbench import run_c_cases
from report_files import write_report

WIDTHS = ("ss", "xmm", "ymm", "zmm", "zmm_bcast")
FMAS, LOADS = 12, 24  # per iteration


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=2000000)
    ap.add_argument("--scalar-fmas-per-cycle", type=float, default=2.0)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    times = run_c_cases("load_widths.c", args.rounds, args.iters)
    # per round, so a slow phase scales a round's cases together
    cycle = [t / FMAS * args.scalar_fmas_per_cycle for t in times["ss_reg"]]
    rows = []
    for w in WIDTHS:
        mem = times[f"{w}_mem"]
        reg = times.get(f"{w}_reg") or times["zmm_reg"]
        rows.append({"width": w, "ns_loaded": statistics.median(mem), "ns_registers": statistics.median(reg),
                     "loads_per_cycle": statistics.median(LOADS * c / m for c, m in zip(cycle, mem, strict=True)),
                     "fmas_per_cycle_registers": statistics.median(FMAS * c / r for c, r in zip(cycle, reg,
                                                                                                strict=True))})
    report = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "iters": args.iters,
              "ns_per_cycle": statistics.median(cycle), "rows": rows,
              "command": "python benchmarks/load_widths.py " + " ".join(sys.argv[1:])}
    lines = ["# Loads per cycle by width", "", f"{report['date']}. `{report['command']}`", "",
             f"One thread; medians over {args.rounds} interleaved rounds of {args.iters} iterations. Each iteration: "
             f"{FMAS} multiply-adds into independent accumulators, each with its two operands loaded from L1 "
             f"({LOADS} loads), or on registers alone. Cycle = the scalar register case's time / {FMAS} x "
             f"{args.scalar_fmas_per_cycle:g} ({report['ns_per_cycle']:.4f} ns). `zmm_bcast`: one operand a full "
             "vector, the other a scalar broadcast (`vbroadcastss`), as a GEMM register tile loads them.", "",
             "| width | ns per iteration, loaded | ns per iteration, registers | loads per cycle | FMAs per cycle on "
             "registers |", "|---|---|---|---|---|"]
    lines += [f"| {r['width']} | {r['ns_loaded']:.3f} | {r['ns_registers']:.3f} | {r['loads_per_cycle']:.2f} | "
              f"{r['fmas_per_cycle_registers']:.2f} |" for r in rows]
    write_report("load_widths", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
