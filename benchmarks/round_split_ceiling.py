"""The ranking a perfect model could show on a fidelity file whose rows were timed in several interleaved rounds.

Each random row's rounds are split in two halves (every split of the rounds into two and the rest); the median of
one half ranks the candidates, the median of the other is the truth. Per operator, averaged over the splits: Spearman
and Tuna's top-1 / top-10 ratio. This is how far measurement noise alone keeps the metrics below 1:

    python benchmarks/round_split_ceiling.py benchmarks/results/fidelity_measurements_llvm_znver4_rounds.jsonl \
        --tag znver4_rounds
"""

from __future__ import annotations

import argparse
import itertools
from collections import defaultdict

import numpy as np
from fidelity_eval import top_k_ratio
from report_files import write_report
from scipy.stats import spearmanr

from drytune.costmodel.dataset import MeasuredRow, read_rows


def ceiling(rows: list[MeasuredRow], ranker_rounds: int = 2) -> dict[str, dict]:
    """Per operator: metrics of one half of the rounds ranking the other, averaged over the splits."""
    times: dict[str, list[list[float]]] = defaultdict(list)
    for r in rows:
        if r.source == "random" and r.ok and len(r.times) >= ranker_rounds + 1:
            times[r.op].append(list(r.times))
    out = {}
    for op, ts in times.items():
        rounds = min(map(len, ts))
        t = np.array([x[:rounds] for x in ts])
        per_split = []
        for half in itertools.combinations(range(rounds), ranker_rounds):
            rest = [i for i in range(rounds) if i not in half]
            pred, meas = np.median(t[:, list(half)], axis=1), np.median(t[:, rest], axis=1)
            per_split.append((spearmanr(pred, meas)[0], top_k_ratio(pred, meas, 1), top_k_ratio(pred, meas, 10)))
        rho, top1, top10 = np.mean(per_split, axis=0)
        out[op] = {"n": len(t), "rounds": rounds, "spearman": float(rho), "top1": float(top1), "top10": float(top10)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="a fidelity measurements file timed in rounds (`--rounds`)")
    ap.add_argument("--ranker-rounds", type=int, default=2, help="rounds whose median ranks; the rest are the truth")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    per_op = ceiling(read_rows(args.data), args.ranker_rounds)
    lines = [f"Measurement noise as a ceiling: in `{args.data}`, the median of {args.ranker_rounds} rounds ranks the "
             "median of the others (every split, averaged).", "",
             "| op | n | rounds | Spearman | top-1 | top-10 |", "|---|---|---|---|---|---|"]
    for op, r in per_op.items():
        lines.append(f"| {op} | {r['n']} | {r['rounds']} | {r['spearman']:.3f} | {r['top1']:.3f} | {r['top10']:.3f} |")
    med = {k: float(np.median([r[k] for r in per_op.values()])) for k in ("spearman", "top1", "top10")}
    lines.append(f"| **median** | | | {med['spearman']:.3f} | {med['top1']:.3f} | {med['top10']:.3f} |")
    write_report("round_split_ceiling", args.tag, {"data": args.data, "per_op": per_op, "median": med}, lines)


if __name__ == "__main__":
    main()
