"""Search strategies compared: evolutionary, CMA-ES and portfolio on the same operators at the same budget.

Reads an `op_tuning.py` result file run with several `--strategies`. For each operator and strategy: candidates
scored, the best prediction found (what the search optimizes, free of measurement noise) and the pick's measured
time; each strategy against the reference strategy as the ratio of predictions and the median of per-round ratios
of measured times (all kernels of an operator were timed in the same interleaved rounds).

    python benchmarks/op_tuning.py --ops gemm,conv2d_nchw,softmax --budgets 60 --no-scaling \
        --strategies evolutionary,cmaes,portfolio --out benchmarks/results/op_tuning_strategies_znver4
    python benchmarks/strategy_table.py benchmarks/results/op_tuning_strategies_znver4.json --tag znver4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from statistics import geometric_mean

from report_files import write_report

PREFIX = "drytune-"


def strategies_of(row: dict) -> list[str]:
    """The drytune strategies timed in one result row (verified variants left out), in run order."""
    return [k[len(PREFIX):] for k in row["round_s"] if k.startswith(PREFIX) and "+verify" not in k]


def compare(rows: list[dict], reference: str) -> tuple[dict, list[str]]:
    """Per operator and strategy: candidates, best prediction, measured time and ratios to `reference`."""
    per_op: dict[str, dict] = {}
    for row in rows:
        names = strategies_of(row)
        if reference not in names or len(names) < 2:
            continue
        ref_rounds = row["round_s"][PREFIX + reference]
        ref_pred = row["info"][PREFIX + reference]["predicted_s"]
        entry = {}
        for s in names:
            rounds = row["round_s"][PREFIX + s]
            info = row["info"][PREFIX + s]
            entry[s] = {"trials": info["trials"], "predicted_s": info["predicted_s"],
                        "measured_s": statistics.median(rounds),
                        "predicted_vs_ref": info["predicted_s"] / ref_pred,
                        "measured_vs_ref": statistics.median(a / b for a, b in zip(rounds, ref_rounds, strict=True))}
        per_op[f"{row['op']}@{row['budget_s']:g}s"] = entry
    if not per_op:
        raise SystemExit(f"no row holds '{reference}' and another strategy: run op_tuning.py with --strategies")
    names = list(dict.fromkeys(s for e in per_op.values() for s in e))
    summary = {}
    for s in names:
        pred = [e[s]["predicted_vs_ref"] for e in per_op.values() if s in e]
        meas = [e[s]["measured_vs_ref"] for e in per_op.values() if s in e]
        best_pred = sum(min(e, key=lambda k: e[k]["predicted_s"]) == s for e in per_op.values())
        best_meas = sum(min(e, key=lambda k: e[k]["measured_s"]) == s for e in per_op.values())
        summary[s] = {"operators": len(pred), "geomean_predicted_vs_ref": geometric_mean(pred),
                      "geomean_measured_vs_ref": geometric_mean(meas),
                      "best_predicted": best_pred, "best_measured": best_meas}
    lines = [f"Search strategies at equal budget; ratios are strategy / {reference} (< 1: the strategy found a faster "
             "kernel); measured ratios are medians of per-round ratios.", "",
             "| operator | strategy | candidates scored | best prediction (ms) | measured (ms) | predicted / ref "
             "| measured / ref |", "|---|---|---|---|---|---|---|"]
    for op, e in per_op.items():
        lines += [f"| {op} | {s} | {v['trials']} | {v['predicted_s'] * 1e3:.4g} | {v['measured_s'] * 1e3:.4g} "
                  f"| {v['predicted_vs_ref']:.3f} | {v['measured_vs_ref']:.3f} |" for s, v in e.items()]
    lines += ["", "| strategy | operators | geometric mean predicted / ref | geometric mean measured / ref "
              "| best prediction on | fastest measured on |", "|---|---|---|---|---|---|"]
    lines += [f"| {s} | {v['operators']} | {v['geomean_predicted_vs_ref']:.3f} | {v['geomean_measured_vs_ref']:.3f} "
              f"| {v['best_predicted']} | {v['best_measured']} |" for s, v in summary.items()]
    return {"reference": reference, "per_operator": per_op, "summary": summary}, lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", help="an op_tuning.py result file run with several --strategies")
    ap.add_argument("--reference", default="portfolio", help="the strategy the others are compared with")
    ap.add_argument("--tag", default=None, help="results/strategy_table_TAG.json and .md")
    args = ap.parse_args()
    with open(args.file) as f:
        rows = json.load(f)["rows"]
    report, lines = compare(rows, args.reference)
    write_report("strategy_table", args.tag, report | {"file": args.file}, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
