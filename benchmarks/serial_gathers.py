"""Why the kernel model adds a gather instruction's lanes to its body on Zen 4
(`KernelConfig.gather_serial_lane_cycles`): a C microbenchmark (`serial_gathers.c`) of gathers beside independent
zmm multiply-adds. Each case runs G gathers (8 lanes with 64-bit indices, as LLVM emits for TVM's addresses, or 16
with 32-bit ones) and F FMAs per iteration, or 16 lanes loaded and inserted one by one as TVM builds a strided
vector. Rounds interleave the cases; the report gives the median ns per iteration, the FMA-alone time's cycle (one
zmm FMA per cycle) as the unit, and what each gather adds beside the FMAs per lane: 0 if it overlapped, its time
alone if it ran serially.

    python benchmarks/serial_gathers.py --tag znver4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from microbench import run_c_cases
from report_files import write_report

# case: (FMA-only case beside it or None, gathers per iteration, lanes per gather)
CASES = {
    "q8x1": (None, 1, 8), "q8x2": (None, 2, 8), "d16x1": (None, 1, 16), "ins16x1": (None, 1, 16),
    "q8x1_fma24": ("fma24", 1, 8), "q8x2_fma48": ("fma48", 2, 8), "d16x1_fma24": ("fma24", 1, 16),
    "ins16x1_fma24": ("fma24", 1, 16), "s8x1": (None, 1, 8), "s8x1_fma24": ("fma24", 1, 8),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=1000000)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    times = run_c_cases("serial_gathers.c", args.rounds, args.iters)
    ns_cycle = statistics.median(t / 24 for t in times["fma24"])  # one zmm FMA per cycle
    rows = []
    for name, (beside, gathers, lanes) in CASES.items():
        alone = statistics.median(times[name]) / ns_cycle
        row = {"case": name, "ns_per_iteration": statistics.median(times[name]), "cycles": alone,
               "cycles_per_lane_alone": None, "added_cycles_per_lane": None}
        if beside is None:
            row["cycles_per_lane_alone"] = alone / (gathers * lanes)
        else:  # per round: the mixed case less the FMAs alone, in that round's cycles
            added = [(m - f) / (f / int(beside[3:])) / (gathers * lanes)
                     for m, f in zip(times[name], times[beside], strict=True)]
            row["added_cycles_per_lane"] = statistics.median(added)
        rows.append(row)
    report = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "iters": args.iters, "ns_per_cycle": ns_cycle,
              "fma_only_ns": {k: statistics.median(times[k]) for k in ("fma24", "fma48")}, "rows": rows,
              "command": "python benchmarks/serial_gathers.py " + " ".join(sys.argv[1:])}
    lines = ["# Gathers beside independent multiply-adds", "", f"{report['date']}. `{report['command']}`", "",
             f"One thread; medians over {args.rounds} interleaved rounds. Cycle = the 24-FMA case's time / 24 "
             f"({ns_cycle:.4f} ns; one zmm FMA per cycle). FMAs alone: 24 in "
             f"{report['fma_only_ns']['fma24']:.3f} ns, 48 in {report['fma_only_ns']['fma48']:.3f} ns. "
             "`q8`: vgatherqps, 8 lanes; `d16`: vgatherdps, 16 lanes; `ins16`: 16 vmovss/vinsertps lanes; `s8`: "
             "vscatterqps, 8 lanes.", "",
             "| case | ns per iteration | cycles | cycles per lane alone | cycles per lane added beside the FMAs |",
             "|---|---|---|---|---|"]

    def cell(x: float | None) -> str:
        return "" if x is None else f"{x:.2f}"

    lines += [f"| {r['case']} | {r['ns_per_iteration']:.3f} | {r['cycles']:.1f} | {cell(r['cycles_per_lane_alone'])} | "
              f"{cell(r['added_cycles_per_lane'])} |" for r in rows]
    write_report("serial_gathers", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
