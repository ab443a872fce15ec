"""How well two measurements of the same candidates agree, per operator: the ceiling a cost model can reach.

Compares a fidelity data file with its `costmodel_fidelity.py --remeasure` copy (rows matched by operator,
sketch, decisions and source; random rows only, as the fidelity metrics use): Spearman rho between the two
timings, and the spread of their ratio. An operator whose two measurements rank its candidates at 0.6 cannot be
ranked much better than that by any model fitted to either.

    python benchmarks/remeasure_agreement.py benchmarks/results/fidelity_measurements_llvm_znver3_v2.jsonl \
        benchmarks/results/fidelity_measurements_llvm_znver3_v3.jsonl --tag znver3_v2_v3
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from report_files import write_report
from scipy.stats import spearmanr

from drytune.costmodel.dataset import MeasuredRow, read_rows, row_key


def agreement(first: list[MeasuredRow], second: list[MeasuredRow]) -> dict[str, dict]:
    """Per operator: rows timed validly in both files, Spearman between the timings, ratio quantiles."""
    later = {row_key(r): r for r in second if r.error is None and r.seconds > 0}
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in first:
        other = later.get(row_key(row))
        if row.source == "random" and row.error is None and row.seconds > 0 and other is not None:
            pairs[row.op].append((row.seconds, other.seconds))
    out = {}
    for op, p in pairs.items():
        a = np.array(p)
        ratio = a[:, 1] / a[:, 0]
        out[op] = {"n": len(p), "spearman": float(spearmanr(a[:, 0], a[:, 1])[0]),
                   "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
                   "ratio_max": float(ratio.max())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first", help="a fidelity measurements file")
    ap.add_argument("second", help="the same candidates measured again")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    per_op = agreement(read_rows(args.first), read_rows(args.second))
    lines = [f"Two measurements of the same random candidates: `{args.first}` and `{args.second}`.", "",
             "| op | n | Spearman between the two | second / first: median | min | max |", "|---|---|---|---|---|---|"]
    for op, r in per_op.items():
        lines.append(f"| {op} | {r['n']} | {r['spearman']:.3f} | {r['ratio_median']:.3f} | {r['ratio_min']:.2f} | "
                     f"{r['ratio_max']:.2f} |")
    median = float(np.median([r["spearman"] for r in per_op.values()])) if per_op else float("nan")
    lines.append(f"| **median** | | {median:.3f} | | | |")
    write_report("remeasure_agreement", args.tag,
                 {"first": args.first, "second": args.second, "per_op": per_op, "median_spearman": median}, lines)


if __name__ == "__main__":
    main()
