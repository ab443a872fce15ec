"""What the gathers and the masked accumulator tail of one strided-convolution body cost on this core: a C
microbenchmark (`gather_body.c`) of conv2d_s2's mispriced pick's innermost loop (64 multiply-adds, 32 broadcasts,
8 input rows of 14 stride-2 lanes), with the inputs gathered or loaded and the tail accumulators in memory or in
registers. The report gives each case's median ns per iteration, its cycles at the spec's clock, and its excess
over the case with neither (per round). Grounds `SchedConfig.gather_lane_cycles` and `failed_forward_masked`.

    python benchmarks/gather_body.py --tag emeraldrapids
"""

from __future__ import annotations

import sys
import time

from microbench import excess_rows, parse_args, run_c_cases
from report_files import write_report

import drytune as dt

CASES = {
    "loads_regs": "inputs loaded, tail accumulators in registers",
    "loads_mem": "inputs loaded, tail accumulators loaded and stored under the mask each iteration",
    "gather_regs": "inputs gathered (vgatherdps), tail accumulators in registers",
    "gather_mem": "inputs gathered, tail accumulators through memory (LLVM's build)",
}


def main() -> int:
    args = parse_args(__doc__)
    ghz = dt.resolve_target("llvm")[1].freq_ghz
    rows = [r | {"cycles": r["ns"] * ghz, "excess_cycles": r["excess_ns"] * ghz}
            for r in excess_rows(run_c_cases("gather_body.c", args.rounds, 2_000_000), CASES, "loads_regs")]
    report = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "ghz": ghz, "rows": rows,
              "command": "python benchmarks/gather_body.py " + " ".join(sys.argv[1:])}
    lines = ["# One strided-convolution body: gathers and a masked accumulator tail", "",
             f"{report['date']}. `{report['command']}`", "",
             f"One thread; medians over {args.rounds} interleaved rounds; cycles at {ghz} GHz. Each iteration: 64 "
             "ymm multiply-adds, 32 broadcasts, 8 input rows of 14 lanes (8 + a masked 6).", "",
             "| case | what | ns per iteration | cycles | excess cycles |", "|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['what']} | {r['ns']:.2f} | {r['cycles']:.1f} | {r['excess_cycles']:.1f} |"
              for r in rows]
    write_report("gather_body", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
