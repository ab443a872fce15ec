"""How much of a change in the fidelity medians is noise of the sample: the held-out predictions of a stored
fidelity run (its `--tag`; the fit as `costmodel_fidelity.py` makes it, leave-one-operator-out) scored again on
bootstrap resamples of each operator's random rows (drawn with replacement, as many as it has). Reports each median
metric with its 5-95% interval over the resamples, and per operator the interval of its top-10 ratio. The model is
not refitted per resample: this is the spread that comes from which 200 candidates were drawn, not from the fit.
`--versus TAG` scores a second stored run on the same resamples and reports the paired difference of the medians
(the first run's less the second's): whether a change between two models is larger than that spread.

    python benchmarks/fidelity_bootstrap.py --features-tag znver4_s92_gather --versus znver4_s91_splat \\
        --data benchmarks/results/fidelity_measurements_llvm_znver4_rounds.jsonl --tag znver4_s92
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from fidelity_eval import _row_key, metrics, read_rows, scorable, shipped_coefficients, stored_features
from kernel_settings_sweep import held_out_predictions
from report_files import RESULTS, write_report

from drytune.costmodel.cpu_features import hide_l1_refills

METRICS = ("spearman", "pairwise", "top1", "top10")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features-tag", required=True, help="tag of the stored fidelity_features_llvm_TAG.jsonl")
    ap.add_argument("--data", required=True, help="the measurements file those features were computed for")
    ap.add_argument("--versus", default=None, help="a second stored run's tag, scored on the same resamples")
    ap.add_argument("--launch-cycles", type=float, default=1949.0, help="pinned parallel-region cost (0: fitted)")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default=None, help="results: fidelity_bootstrap_TAG.md/json")
    args = ap.parse_args()
    measured = read_rows(args.data)
    runs = [args.features_tag] + ([args.versus] if args.versus else [])
    scored = [{_row_key(r): (r, e) for r, e in scorable(measured, stored_features(RESULTS, tag))
               if r.source == "random"} for tag in runs]
    keys = [k for k in scored[0] if all(k in s for s in scored[1:])]  # the first run's order: the fit depends on it
    pairs = [scored[0][k] for k in keys]
    seconds = np.array([r.seconds for r, _ in pairs])
    ops = np.array([r.op for r, _ in pairs])
    hidden = shipped_coefficients().l1_hidden_per_cycle
    preds = [held_out_predictions(hide_l1_refills(np.array([s[k][1]["values"] for k in keys]), hidden), seconds, ops,
                                  args.launch_cycles) for s in scored]
    pred = preds[0]
    names = sorted(set(ops))
    rows = {op: np.flatnonzero(ops == op) for op in names}
    observed = {op: metrics(pred[idx], seconds[idx]) for op, idx in rows.items()}
    rng = np.random.default_rng(args.seed)
    per_op = {op: {m: [] for m in METRICS} for op in names}
    medians = {m: [] for m in METRICS}
    differences = {m: [] for m in METRICS}
    for _ in range(args.resamples):
        scores = [{} for _ in preds]
        for op, idx in rows.items():
            pick = rng.choice(idx, size=len(idx), replace=True)
            for j, p in enumerate(preds):
                scores[j][op] = metrics(p[pick], seconds[pick])
            for m in METRICS:
                per_op[op][m].append(scores[0][op][m])
        for m in METRICS:
            meds = [float(np.median([sc[op][m] for op in names])) for sc in scores]
            medians[m].append(meds[0])
            if args.versus:
                differences[m].append(meds[0] - meds[1])

    def interval(xs: list[float]) -> tuple[float, float]:
        return float(np.percentile(xs, 5)), float(np.percentile(xs, 95))

    summary = {m: {"observed": float(np.median([observed[op][m] for op in names])), "interval": interval(medians[m])}
               for m in METRICS}
    ops_table = {op: {"top10": observed[op]["top10"], "interval": interval(per_op[op]["top10"])} for op in names}
    command = "python benchmarks/fidelity_bootstrap.py " + " ".join(sys.argv[1:])
    lines = ["# Fidelity medians: spread over bootstrap resamples of the candidates", "",
             f"{time.strftime('%Y-%m-%d')}. `{command}`", "",
             f"{len(pairs)} random rows (in every run compared), {len(names)} operators, {args.resamples} resamples "
             f"(seed {args.seed}); "
             "held-out predictions fixed, rows of each operator drawn again with replacement.", "",
             "| median | observed | 5-95% over resamples |", "|---|---|---|"]
    lines += [f"| {m} | {v['observed']:.3f} | {v['interval'][0]:.3f}-{v['interval'][1]:.3f} |"
              for m, v in summary.items()]
    versus = None
    if args.versus:
        observed_b = {op: metrics(preds[1][idx], seconds[idx]) for op, idx in rows.items()}
        versus = {m: {"observed": summary[m]["observed"] - float(np.median([observed_b[op][m] for op in names])),
                      "interval": interval(differences[m]),
                      "share_above_0": float(np.mean(np.array(differences[m]) > 0))} for m in METRICS}
        lines += ["", f"Paired against `{args.versus}` (this run's median less its, on the same resamples):", "",
                  "| median | observed difference | 5-95% | resamples above 0 |", "|---|---|---|---|"]
        lines += [f"| {m} | {v['observed']:+.3f} | {v['interval'][0]:+.3f} to {v['interval'][1]:+.3f} | "
                  f"{v['share_above_0']:.0%} |" for m, v in versus.items()]
    lines += ["", "| operator | top-10 | 5-95% |", "|---|---|---|"]
    lines += [f"| {op} | {v['top10']:.3f} | {v['interval'][0]:.3f}-{v['interval'][1]:.3f} |"
              for op, v in sorted(ops_table.items(), key=lambda kv: kv[1]["top10"])]
    write_report("fidelity_bootstrap", args.tag, {"command": command, "features_tag": args.features_tag,
                                                  "versus": args.versus, "medians": summary, "paired": versus,
                                                  "per_op": ops_table}, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
