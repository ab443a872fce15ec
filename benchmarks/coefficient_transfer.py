"""Does a calibration made on one machine rank another? Every shipped coefficients file of the host's architecture
ranks this machine's measured random candidates (the features cached by costmodel_fidelity.py), per operator; with
`--reference TAG`, the same candidates as measured on another machine rank them too (what a perfect model of that
machine would get here).

    python benchmarks/coefficient_transfer.py --tag znver5 --reference znver4
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fidelity_eval import _row_key, compute_features, metrics, save_report  # noqa: E402

import drytune as dt  # noqa: E402
from drytune.costmodel.cpu_features import FEATURE_NAMES  # noqa: E402
from drytune.costmodel.dataset import read_rows  # noqa: E402
from drytune.costmodel.model import COEFF_DIR, Coefficients  # noqa: E402

METRICS = ("spearman", "pairwise", "top1", "top10")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA = os.path.join(RESULTS, "fidelity_measurements_llvm.jsonl")


def tagged(tag: str, stem: str = DATA) -> str:
    return stem.replace(".jsonl", f"_{tag}.jsonl")


def medians(per_op: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Median over operators of each ranking metric of (prediction, measurement) pairs."""
    got = [metrics(pred, meas) for pred, meas in per_op.values()]
    return {m: float(np.median([g[m] for g in got])) for m in METRICS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", required=True, help="machine whose measurements are ranked")
    ap.add_argument("--reference", default=None, help="machine tag whose measurements of the same rows also rank")
    args = ap.parse_args()
    rows = [r for r in read_rows(tagged(args.tag)) if r.ok and r.source == "random"]
    feats = compute_features(rows, tagged(args.tag, os.path.join(RESULTS, "fidelity_features_llvm.jsonl")),
                             workers=os.cpu_count() or 1)
    rows = [r for r in rows if "values" in feats.get(_row_key(r), {})]
    ops = sorted({r.op for r in rows})
    _, spec = dt.resolve_target("llvm")
    by_op = {op: [r for r in rows if r.op == op] for op in ops}
    features = {op: np.array([feats[_row_key(r)]["values"] for r in mine]) for op, mine in by_op.items()}
    seconds = {op: np.array([r.seconds for r in mine]) for op, mine in by_op.items()}
    table: dict[str, dict[str, float]] = {}
    for path in sorted(glob.glob(os.path.join(COEFF_DIR, f"{spec.arch}-*.json"))):
        coef = Coefficients.load(path).vector(FEATURE_NAMES)
        table[os.path.basename(path)] = medians({op: (features[op] @ coef, seconds[op]) for op in ops})
    if args.reference:
        other = {_row_key(r): r.seconds for r in read_rows(tagged(args.reference)) if r.ok}
        per_op = {}
        for op, mine in by_op.items():
            both = [r for r in mine if _row_key(r) in other]
            if len(both) >= 20:
                per_op[op] = (np.array([other[_row_key(r)] for r in both]), np.array([r.seconds for r in both]))
        table[f"measured on {args.reference} ({sum(len(p) for p, _ in per_op.values())} rows)"] = medians(per_op)
    lines = [f"Rankings of the {len(rows)} measured random candidates of {len(ops)} operators on `{args.tag}`; "
             "medians over operators. No file here was fitted leave-one-operator-out: a file fitted on this "
             "machine's rows is in-sample.", "", "| ranked by | " + " | ".join(METRICS) + " |",
             "|---|" + "---|" * len(METRICS)]
    for name, med in table.items():
        lines.append(f"| {name} | " + " | ".join(f"{med[m]:.2f}" for m in METRICS) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    save_report(os.path.join(RESULTS, f"coefficient_transfer_{args.tag}"), text, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
