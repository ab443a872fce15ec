"""Wins against MetaSchedule per operator over several full draws of `op_tuning.py` (one JSON file per draw).

One draw's count of operators at least as fast as MetaSchedule moves by several operators between draws of the
same model, so the issue-3 goal is read here over many draws: the count per draw, and for each operator how often
it won and the spread of its speedups.

    python benchmarks/draw_tally.py benchmarks/results/op_tuning_znver4_120s_s3?_all.json \
        benchmarks/results/op_tuning_znver4_120s_s4?_all.json --tag znver4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from report_files import write_report

SPEEDUP = "speedup_vs_ms[drytune-portfolio]"


def read_draw(path: str) -> dict[str, float]:
    """Operator -> drytune's speedup over MetaSchedule (median of per-round ratios) in one draw's file."""
    with open(path) as f:
        rows = json.load(f)["rows"]
    return {r["op"]: float(r[SPEEDUP]) for r in rows if SPEEDUP in r}


def tally(draws: dict[str, dict[str, float]]) -> tuple[dict, list[str]]:
    """Per-draw counts and per-operator win rates; the report and its Markdown lines."""
    ops = list(dict.fromkeys(op for d in draws.values() for op in d))
    per_draw = {name: sum(s >= 1.0 for s in d.values()) for name, d in draws.items()}
    per_op = {}
    for op in ops:
        s = [d[op] for d in draws.values() if op in d]
        per_op[op] = {"draws": len(s), "wins": sum(x >= 1.0 for x in s), "median": statistics.median(s),
                      "min": min(s), "max": max(s)}
    total = sum(v["draws"] for v in per_op.values())
    won = sum(v["wins"] for v in per_op.values())
    lines = ["Operators at least as fast as MetaSchedule, per draw:", "",
             "| draw | operators | wins |", "|---|---|---|"]
    lines += [f"| {name} | {len(draws[name])} | {n} |" for name, n in per_draw.items()]
    lines += ["", f"All draws: {won} of {total} operator comparisons won ({won / total:.1%}); median count per draw "
              f"{statistics.median(per_draw.values())}.", "",
              "| operator | wins / draws | median speedup | lowest | highest |", "|---|---|---|---|---|"]
    lines += [f"| {op} | {v['wins']} / {v['draws']} | {v['median']:.2f} | {v['min']:.2f} | {v['max']:.2f} |"
              for op, v in sorted(per_op.items(), key=lambda kv: kv[1]["wins"] / kv[1]["draws"])]
    return {"per_draw": per_draw, "per_operator": per_op, "won": won, "compared": total}, lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="op_tuning.py result files, one per draw")
    ap.add_argument("--tag", default=None, help="results/draw_tally_TAG.json and .md")
    args = ap.parse_args()
    draws = {os.path.splitext(os.path.basename(p))[0]: read_draw(p) for p in sorted(args.files)}
    report, lines = tally(draws)
    write_report("draw_tally", args.tag, report | {"files": sorted(args.files)}, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
