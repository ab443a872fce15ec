"""MetaSchedule's measured trials of a whole network, priced by the static model: per task, does the model rank the
kernels MetaSchedule measured (its network schedules: epilogues in their own nests, loops left to LLVM's vectorizer)
as its measurements do?

Reads the long-run database of a `benchmarks/networks.py` work directory (MODEL/ms_long_db, after its tune-ms phase);
measures nothing. Per task with at least `--min-trials` valid trials: Spearman between MetaSchedule's measured
seconds and the model's, and the top-1 ratio (the fastest measured over the measured time of the model's pick).
Summaries: medians over tasks, and means weighted by the task's calls per network run.

    python benchmarks/network_ms_trials.py --model mobilenet_v2 \\
        --work-dir drytune-work/networks_znver4_s81_mobilenet_v2 --fast-math --tag znver4_s82
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

from ms_trials_priced import measured_records, price
from network_tasks import marked_and_plain_tasks, open_work_dir
from report_files import write_report
from scipy.stats import spearmanr

from drytune.costmodel.model import StaticCostModel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fast-math", action="store_true", help="the network as networks.py --fast-math tuned it")
    ap.add_argument("--min-trials", type=int, default=8)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    db_dir = os.path.join(mdir, "ms_long_db")
    if not os.path.isdir(db_dir):
        raise SystemExit(f"no MetaSchedule database in {db_dir}: run networks.py --phase tune-ms first")
    tasks, plain = marked_and_plain_tasks(args.model, args.threads, target, args.fast_math)
    model = StaticCostModel(target)
    rows = []
    for nt, plain_nt in zip(tasks, plain, strict=True):
        recs = measured_records(db_dir, plain_nt.task)  # MetaSchedule tuned the tasks without the weight mark
        pairs = [(s, p) for s, mod in recs if math.isfinite(p := price(model, mod))]
        if len(pairs) < args.min_trials:
            print(f"{nt.name}: {len(pairs)} priced trials, skipped", flush=True)
            continue
        measured, predicted = zip(*pairs, strict=True)
        pick = min(range(len(pairs)), key=predicted.__getitem__)
        rows.append({"task": nt.name, "weight": nt.weight, "trials": len(pairs),
                     "spearman": float(spearmanr(measured, predicted).statistic),
                     "top1": min(measured) / measured[pick]})
        r = rows[-1]
        print(f"{nt.name:55s} x{nt.weight:<2d} n={r['trials']:3d} rho {r['spearman']:.3f} top-1 {r['top1']:.3f}",
              flush=True)
    if not rows:
        raise SystemExit("no task has enough priced trials")
    calls = sum(r["weight"] for r in rows)
    summary = {f"{kind}_{k}": (statistics.median(r[k] for r in rows) if kind == "median"
                               else sum(r["weight"] * r[k] for r in rows) / calls)
               for kind in ("median", "weighted") for k in ("spearman", "top1")}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "rows": rows, **summary,
              "command": "python benchmarks/network_ms_trials.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: MetaSchedule's measured trials priced by the static model", "",
             f"{report['date']}. `{report['command']}`", "",
             "Per task: Spearman between MetaSchedule's measured seconds and the model's; top-1 = fastest measured / "
             "measured time of the model's pick.", "",
             "| task | calls | trials | Spearman | top-1 |", "|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['weight']} | {r['trials']} | {r['spearman']:.3f} | {r['top1']:.3f} |" for r in rows]
    lines += ["", f"Over {len(rows)} tasks ({sum(r['trials'] for r in rows)} trials): median Spearman "
              f"{summary['median_spearman']:.3f}, median top-1 {summary['median_top1']:.3f}; weighted by calls: "
              f"Spearman {summary['weighted_spearman']:.3f}, top-1 {summary['weighted_top1']:.3f}."]
    write_report(f"network_ms_trials_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
