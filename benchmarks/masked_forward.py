"""Why the list scheduler can make a load of a masked store's bytes wait (`SchedConfig.failed_forward_masked`): a C
microbenchmark (`masked_forward.c`) of a store loaded back at once in a dependent chain, with and without AVX-512
masks on the store and the load. The report gives the median ns per iteration of each case and its excess over the
unmasked case (per round): the cycles a load loses when the store before it cannot be forwarded.

    python benchmarks/masked_forward.py --tag emeraldrapids
"""

from __future__ import annotations

import sys
import time

from microbench import excess_rows, parse_args, run_c_cases
from report_files import write_report

CASES = {
    "plain": "vmovups load and store",
    "all_lanes": "both masked with all 8 lanes (0xff)",
    "tail": "both masked with 6 lanes (0x3f), as a row of 14's tail",
    "tail_store": "the store masked with 6 lanes, the load not",
    "tail_load": "the load masked with 6 lanes, the store not",
}


def main() -> int:
    args = parse_args(__doc__)
    rows = excess_rows(run_c_cases("masked_forward.c", args.rounds, 5_000_000), CASES, "plain")
    report = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "rows": rows,
              "command": "python benchmarks/masked_forward.py " + " ".join(sys.argv[1:])}
    lines = ["# A store loaded back at once, masked and not", "", f"{report['date']}. `{report['command']}`", "",
             f"One thread; medians over {args.rounds} interleaved rounds of a dependent chain: load 8 floats, add, "
             "store them to the same address. Excess: over the unmasked case, per round.", "",
             "| case | what | ns per iteration | excess ns |", "|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['what']} | {r['ns']:.2f} | {r['excess_ns']:.2f} |" for r in rows]
    write_report("masked_forward", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
