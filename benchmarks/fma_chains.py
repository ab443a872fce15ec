"""Why the list scheduler can bound the instructions waiting to start (`SchedConfig.scheduler_entries`): a C
microbenchmark (`fma_chains.c`) of 32 multiply-adds per iteration split into accumulator chains of 32, 16, 8 or 4,
each loaded from and stored back to its own row, as LLVM builds a reduction loop unrolled inside the accumulator
loop. Iterations are independent, so an unbounded out-of-order core runs every case at the pipes' rate; a bounded
scheduler fills with the waiting multiply-adds of long chains and overlaps fewer iterations.

The report gives each case's median cycles per iteration (the unit: the rate of 32 independent multiply-adds, two
per cycle), its ratio to the chains of 4 (per round, median), and the list scheduler's steady state of the same
assembly for each scheduler size; the size whose ratios come closest is the one to use for this core.

    python benchmarks/fma_chains.py --rounds 9 --tag emeraldrapids
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from microbench import c_assembly, run_c_cases
from report_files import write_report

from drytune.costmodel.asm import VEC_FMA, parse_asm
from drytune.costmodel.listsched import ListScheduler, SchedConfig
from drytune.target import resolve_target

CHAINS = ["chain32", "chain16", "chain8", "chain4"]
PIPE_CYCLES = 16  # 32 independent ymm multiply-adds on two FMA pipes


def loop_bodies(asm_text: str) -> dict[str, list]:
    """Function name -> instructions of its single-block innermost loop with the most multiply-adds."""
    bodies = {}
    for f in parse_asm(asm_text, "x86").functions:
        best = []
        for loop in f.loops:
            if loop.children or len(loop.blocks) != 1:
                continue
            insts = f.blocks[next(iter(loop.blocks))].instructions
            if sum(i.iclass == VEC_FMA for i in insts) > sum(i.iclass == VEC_FMA for i in best):
                best = list(insts)
        if best:
            bodies[f.name] = best
    return bodies


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=3_000_000)
    ap.add_argument("--sizes", default="0,32,36,40,44,48,56,64,97", help="scheduler entries to model (0: unbounded)")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    times = run_c_cases("fma_chains.c", args.rounds, args.iters)
    unit = [t / PIPE_CYCLES for t in times["independent"]]  # ns per cycle, per round
    measured = {n: statistics.median(t / u for t, u in zip(times[n], unit, strict=True)) for n in CHAINS}
    ratio = {n: statistics.median(a / b for a, b in zip(times[n], times["chain4"], strict=True)) for n in CHAINS}

    target, spec = resolve_target("llvm")
    mcpu = str(dict(target.attrs).get("mcpu", "")) or None
    bodies = loop_bodies(c_assembly("fma_chains.c"))
    modeled = {}
    for size in (int(s) for s in args.sizes.split(",")):
        sched = ListScheduler.for_spec(spec, SchedConfig(steady_state=True, steady_state_slope=True,
                                                         scheduler_entries=size), cpu=mcpu)
        modeled[size] = {n: sched.block_cycles(bodies[n], loop_body=True) for n in CHAINS}
    error = {size: max(abs(math.log(m[n] / m["chain4"] / ratio[n])) for n in CHAINS) for size, m in modeled.items()}
    best = min(error, key=error.get)
    report = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "mcpu": mcpu, "ns_per_cycle":
              statistics.median(unit), "cycles": measured, "ratio_to_chain4": ratio, "modeled_cycles": modeled,
              "worst_log_error": error, "closest_size": best,
              "command": "python benchmarks/fma_chains.py " + " ".join(sys.argv[1:])}
    lines = ["# Multiply-add chains of different lengths at the same work", "",
             f"{report['date']}, LLVM cpu `{mcpu}`. `{report['command']}`", "",
             f"One thread; medians over {args.rounds} interleaved rounds. A cycle: the time of 32 independent "
             f"multiply-adds / {PIPE_CYCLES} ({report['ns_per_cycle']:.3f} ns). Modeled: the list scheduler's steady "
             "state of the same assembly with a scheduler of that many entries (0: unbounded).", "",
             "| case | cycles per iteration | / chain4 | " + " | ".join(f"modeled {s}" for s in modeled) + " |",
             "|---|---|---|" + "---|" * len(modeled)]
    for n in CHAINS:
        lines.append(f"| {n} | {measured[n]:.1f} | {ratio[n]:.3f} | "
                     + " | ".join(f"{m[n]:.1f} ({m[n] / m['chain4']:.2f})" for m in modeled.values()) + " |")
    lines += ["", "Worst |log(modeled ratio / measured ratio)| by size: "
              + ", ".join(f"{s}: {e:.3f}" for s, e in error.items()) + f". Closest: **{best}** entries."]
    write_report("fma_chains", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
