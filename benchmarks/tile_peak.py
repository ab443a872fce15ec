"""How close a GEMM register tile runs to this core's FMA peak, by tile shape and unrolled reduction steps.

The micro-kernel alone: D = A B + 1 (K = 256) computed tile by tile with the reduction steps around the tile
(`register_tiles.tile_module(..., steps_outside=True)`): each step broadcasts the tile's A elements, loads its B
vectors and updates every accumulator once. One thread, interleaved rounds; the fraction is of the FMA peak measured
on one thread in the same run (`op_tuning.fma_peak_gflops(1)`), the instruction rate assumes the peak's two FMAs per
cycle. Separates what the register tile costs from what a whole GEMM's memory traffic costs.

    python benchmarks/tile_peak.py --tag emeraldrapids
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from microbench import interleaved, one_core_target, parse_args
from op_tuning import fma_peak_gflops
from register_tiles import K, tile_module, timed_tile
from report_files import write_report

# (rows, columns, unrolled reduction steps); 16 lanes
CASES = [(8, 32, 4), (8, 32, 32), (8, 32, 64), (4, 64, 4), (4, 64, 32), (4, 32, 4), (4, 32, 64), (2, 64, 4),
         (2, 32, 4), (6, 64, 4), (6, 64, 32), (12, 32, 4), (14, 16, 4), (28, 16, 4),
         (8, 16, 4), (8, 16, 32), (4, 16, 4), (4, 16, 16), (4, 32, 32)]


def main() -> int:
    args = parse_args(__doc__)
    from drytune.costmodel.model import StaticCostModel

    target = one_core_target()
    model = StaticCostModel(target)
    rng = np.random.default_rng(0)
    timers, rows = {}, []
    for rows_, cols, steps in CASES:
        mod = tile_module(rows_, cols, 16, True, k_inner=steps, steps_outside=True)
        timers[(rows_, cols, steps)], loop = timed_tile(mod, target, rng, args.min_seconds)
        m, n = (int(x) for x in mod["main"].params[2].shape)
        rows.append({"rows": rows_, "columns": cols, "steps": steps, "flops": 2 * m * n * K, "asm_loop": loop,
                     "predicted_s": model.seconds_of_module(mod)})
    peaks: list[float] = []  # the peak measured between rounds, so that both see the same phases
    times = interleaved(timers, args.rounds, between_rounds=lambda: peaks.append(fma_peak_gflops(1)))
    peak = statistics.median(peaks)
    for row, key in zip(rows, timers, strict=True):
        row["times_s"] = times[key]
        row["measured_s"] = statistics.median(times[key])
        row["gflops"] = row["flops"] / row["measured_s"] / 1e9
        row["fraction_of_peak"] = row["gflops"] / peak
        loop = row["asm_loop"]
        fmas = sum(v for k, v in loop.items() if k.startswith("fma"))
        row["loop_fmas"] = fmas
        row["instructions_per_cycle"] = loop.get("instructions", 0) / fmas * 2 * row["fraction_of_peak"] \
            if fmas else None
    command = "python benchmarks/tile_peak.py " + " ".join(sys.argv[1:])
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(target), "one_thread_peak_gflops": peak,
              "peaks_gflops": peaks, "rows": rows, "command": command}
    lines = ["# GEMM register tiles against the FMA peak", "", f"{report['date']}. `{report['command']}`", "",
             f"One thread, {args.rounds} interleaved rounds (median); K = {K}, 16 lanes, the reduction steps unrolled "
             f"around the tile. One-thread FMA peak {peak:.1f} GFLOP/s (median of {len(peaks)} runs between the "
             f"rounds: {min(peaks):.1f}-{max(peaks):.1f}).", "",
             "| tile | unrolled steps | loop: instructions, FMAs, vector stores | GFLOP/s | of peak | "
             "instructions per cycle | predicted / measured |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        loop = r["asm_loop"]
        ipc = f"{r['instructions_per_cycle']:.2f}" if r["instructions_per_cycle"] else "-"
        lines.append(f"| {r['rows']} x {r['columns']} | {r['steps']} | {loop.get('instructions', 0)}, "
                     f"{r['loop_fmas']}, {loop.get('vector_stores', 0)} | {r['gflops']:.1f} | "
                     f"{100 * r['fraction_of_peak']:.1f}% | {ipc} | {r['predicted_s'] / r['measured_s']:.2f} |")
    write_report("tile_peak", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
