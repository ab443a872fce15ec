"""Can the static model's features rank kernels by their cold time? Reads `cold_weights.py`'s results (each task's best
predictions and MetaSchedule's kernel, timed hot and cold) and the work directory they came from, computes the features
of every kernel again, and reports the pairwise accuracy within each task (pairs closer than 3% skipped) of: the shipped
coefficients, and coefficients refitted (`calibrate.fit_log_ranking`, tasks as groups) on the hot or on the cold times
of the other tasks (leave one task out), each against hot and cold times.

    python benchmarks/cold_ranking.py --model resnet50 --work-dir drytune-work/networks_rocketlake_s59r_b150 \\
        --results benchmarks/results/cold_weights_resnet50_rocketlake_s59.json --tag rocketlake_s59
"""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
from cold_weights import task_kernels
from network_tasks import marked_and_plain_tasks, open_work_dir, work_dir_parser
from report_files import write_report
from tvm.s_tir import meta_schedule as ms

from drytune.costmodel.calibrate import fit_log_ranking
from drytune.costmodel.cpu_features import FEATURE_NAMES, hide_l1_refills
from drytune.costmodel.model import StaticCostModel
from drytune.records import RecordStore


def pairwise_accuracy(groups: np.ndarray, predicted: np.ndarray, measured: np.ndarray) -> tuple[float, int]:
    """Share of the kernel pairs of one task ordered alike by `predicted` and `measured` (pairs within 3% skipped)."""
    right = total = 0
    for g in np.unique(groups):
        for a, b in itertools.combinations(np.where(groups == g)[0], 2):
            if abs(measured[a] / measured[b] - 1) < 0.03:
                continue
            total += 1
            right += int((predicted[a] < predicted[b]) == (measured[a] < measured[b]))
    return right / max(total, 1), total


def main() -> int:
    ap = work_dir_parser(__doc__)
    ap.add_argument("--results", required=True, help="cold_weights.py's JSON for the same work directory")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    timed = {(r["task"], r["kernel"]): r for r in json.load(open(args.results))["rows"]}
    per_task = max(int(k[2:]) for _, k in timed if k.startswith("dt")) + 1
    tasks, plain = marked_and_plain_tasks(args.model, args.threads, target)
    store = RecordStore(os.path.join(mdir, "drytune"))
    db = ms.database.JSONDatabase(work_dir=os.path.join(mdir, "ms_long_db"), allow_missing=False)
    model = StaticCostModel(target)
    groups, feats, hot, cold, shipped = [], [], [], [], []
    for nt, pt in zip(tasks, plain, strict=True):
        for name, mod in task_kernels(nt, pt, store, db, target, per_task).items():
            row = timed.get((nt.name, name))
            if row is None or not np.isfinite(row["cold_s"]):
                continue
            groups.append(nt.name)
            feats.append(hide_l1_refills(model.features_of_module(mod).values, model.coefficients.l1_hidden_per_cycle))
            hot.append(row["hot_s"])
            cold.append(row["cold_s"])
            shipped.append(model.seconds_of_module(mod))
    g, f = np.array(groups), np.array(feats)
    times = {"hot": np.array(hot), "cold": np.array(cold)}
    predictions = {"shipped coefficients": np.array(shipped)}
    launches = {FEATURE_NAMES.index("parallel_launches"): model.coefficients.values["parallel_launches"]}
    for fitted_on, y in times.items():
        pred = np.zeros(len(g))
        for task in np.unique(g):
            train = g != task
            coef = fit_log_ranking(f[train], y[train], model.spec.freq_ghz, groups=g[train],
                                   init=model.coefficients.vector(), fixed=launches)
            pred[g == task] = f[g == task] @ coef
        predictions[f"refitted on {fitted_on} times, task held out"] = pred
    table = {name: {kind: pairwise_accuracy(g, p, t) for kind, t in times.items()} for name, p in predictions.items()}
    lines = [f"# {args.model}: ranking kernels by their cold time", "",
             f"`python benchmarks/cold_ranking.py --model {args.model} --work-dir {args.work_dir} "
             f"--results {args.results}" + (f" --tag {args.tag}`" if args.tag else "`"), "",
             f"{len(g)} kernels of {len(np.unique(g))} tasks (each task's {per_task} best predictions and "
             "MetaSchedule's kernel). Pairwise accuracy within each task, pairs closer than 3% skipped (pairs "
             "counted):", "",
             "| model | against hot times | against cold times |", "|---|---|---|"]
    lines += [f"| {name} | {acc['hot'][0]:.0%} ({acc['hot'][1]}) | {acc['cold'][0]:.0%} ({acc['cold'][1]}) |"
              for name, acc in table.items()]
    write_report(f"cold_ranking_{args.model}", args.tag, {"accuracy": table, "kernels": len(g)}, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
