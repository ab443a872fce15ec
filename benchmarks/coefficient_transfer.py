"""Does a calibration made on one machine rank another? Every shipped coefficients file of the host's architecture
ranks this machine's measured random candidates, per operator, with features computed under that file's own
kernel-model settings and its hidden L1 refills (cached in one file per setting); with
`--reference TAG`, the same candidates as measured on another machine rank them too (what a perfect model of that
machine would get here).

    python benchmarks/coefficient_transfer.py --tag znver5 --reference znver4
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fidelity_eval import _row_key, compute_features, metrics, save_report  # noqa: E402

import drytune as dt  # noqa: E402
from drytune.costmodel.cpu_features import FEATURE_NAMES, hide_l1_refills  # noqa: E402
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


def per_operator(rows: list, tag: str, kernel: dict[str, float]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Feature matrices and measured seconds of `rows` per operator, the features computed with the kernel-model
    settings `kernel` (cached in a file per setting: costmodel_fidelity.py rewrites its own cache whenever it runs
    with another setting)."""
    setting = "_".join(f"{k}{v:g}" for k, v in sorted(kernel.items())) or "default"
    cache = tagged(f"{tag}_kernel_{setting}", os.path.join(RESULTS, "fidelity_features_llvm.jsonl"))
    feats = compute_features(rows, cache, workers=os.cpu_count() or 1, kernel=kernel)
    mine = [r for r in rows if "values" in feats.get(_row_key(r), {})]
    ops = sorted({r.op for r in mine})
    features = {op: np.array([feats[_row_key(r)]["values"] for r in mine if r.op == op]) for op in ops}
    seconds = {op: np.array([r.seconds for r in mine if r.op == op]) for op in ops}
    return features, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", required=True, help="machine whose measurements are ranked")
    ap.add_argument("--reference", default=None, help="machine tag whose measurements of the same rows also rank")
    args = ap.parse_args()
    rows = [r for r in read_rows(tagged(args.tag)) if r.ok and r.source == "random"]
    _, spec = dt.resolve_target("llvm")
    files = {os.path.basename(p): Coefficients.load(p) for p in sorted(glob.glob(os.path.join(COEFF_DIR,
                                                                                          f"{spec.arch}-*.json")))}
    by_settings: dict[str, list[str]] = {}
    for name, coef in files.items():
        by_settings.setdefault(json.dumps(coef.kernel_settings, sort_keys=True), []).append(name)
    table: dict[str, dict[str, float]] = {}
    ops: list[str] = []
    for settings_key, names in by_settings.items():
        features, seconds = per_operator(rows, args.tag, json.loads(settings_key))
        ops = sorted(features)
        for name in names:
            coef, hidden = files[name].vector(FEATURE_NAMES), files[name].l1_hidden_per_cycle
            table[name] = medians({op: (hide_l1_refills(features[op], hidden) @ coef, seconds[op]) for op in ops})
    table = dict(sorted(table.items()))
    by_op = {op: [r for r in rows if r.op == op] for op in ops}
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
