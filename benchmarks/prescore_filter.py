"""How much the pre-score filter buys: from the fidelity benchmark's measured candidates, the measured quality of
the candidate a round keeps when it proposes `n_full x oversample` candidates, keeps the `n_full` with the best
pre-score, fully scores those and keeps the best full score. Quality = best measured latency of the operator's
sample / measured latency of the kept candidate (1 = the truly best), averaged over random draws, median over
operators. Full scores use the shipped coefficients of this CPU (in-sample: an optimistic view of the full score).

    python benchmarks/prescore_filter.py --tag znver3
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

import numpy as np
from fidelity_eval import stored_rows

import drytune as dt
from drytune.costmodel.model import Coefficients, default_coefficients_path

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def load(tag: str, coef: np.ndarray) -> dict[str, np.ndarray]:
    """Per operator: rows of (measured seconds, pre-score, full score)."""
    rows = collections.defaultdict(list)
    for r, e in stored_rows(RESULTS, tag):
        rows[r.op].append((r.seconds, e["prescore"], float(np.dot(coef, e["values"]))))
    return {op: np.array(r) for op, r in rows.items()}


def quality(rows: np.ndarray, n_full: int, oversample: int, rng: np.random.Generator, draws: int) -> float:
    best = rows[:, 0].min()
    out = []
    for _ in range(draws):
        sub = rows[rng.choice(len(rows), n_full * oversample, replace=False)]
        kept = sub[np.argsort(sub[:, 1], kind="stable")[:n_full]]
        out.append(best / kept[np.argmin(kept[:, 2]), 0])
    return float(np.mean(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", default="")
    ap.add_argument("--draws", type=int, default=300)
    args = ap.parse_args()
    target, spec = dt.resolve_target("llvm")
    path = default_coefficients_path(spec, str(dict(target.attrs).get("mcpu", "")) or None)
    data = load(args.tag, Coefficients.load(path).vector())
    rng = np.random.default_rng(0)
    lines = [f"Pre-score filter ({os.path.basename(path)}, data tag {args.tag or '-'}, {len(data)} operators): "
             "median over operators of the kept candidate's quality (1 = best of the sample)", "",
             "| full scores per round | oversample 1 | 2 | 4 | 8 | 16 |", "|---|---|---|---|---|---|"]
    for n_full in (3, 6):
        cells = []
        for over in (1, 2, 4, 8, 16):
            vals = [quality(r, n_full, over, rng, args.draws) for r in data.values() if len(r) >= n_full * over]
            cells.append(f"{np.median(vals):.2f} ({len(vals)} ops)" if vals else "-")
        lines.append(f"| {n_full} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(RESULTS, f"prescore_filter{'_' + args.tag if args.tag else ''}.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
