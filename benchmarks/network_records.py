"""How the static model ranks a network run's own candidates: every record of the tasks with the largest gaps,
measured.

Reads a `networks.py` work directory and the task table of `network_tasks.py` for it. For the `--tasks` tasks with
the largest gap to MetaSchedule, every candidate drytune recorded (with its predicted latency) is built and timed on
this CPU, in `--passes` whole passes over all of them (the fastest time kept: a kernel on a busy or slow machine only
runs slower). Reported per task: Spearman between predicted and measured, the pick's measured time over the fastest
record's, and the widest vectorized loop of both; over all tasks, measured / predicted by vector width relative to
its task's median (which widths the model underrates). The same records are also scored again by the current model
("rescored"): how a model change ranks candidates it was not tuned with.

    python benchmarks/network_records.py --model mobilenet_v2 --work-dir drytune-work/networks_znver4_v30 \\
        --tasks-table benchmarks/results/network_tasks_mobilenet_v2_znver4_v30.json --tasks 14 --tag znver4_v30
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
from collections import defaultdict

import numpy as np
from fidelity_eval import top_k_ratio
from network_tasks import open_work_dir
from networks import load_fused, target_dict
from report_files import write_report
from scipy import stats

from drytune.costmodel.model import StaticCostModel
from drytune.extract import extract_tasks
from drytune.measure import measure_modules
from drytune.records import RecordStore

_VECTORIZED = re.compile(r"T\.vectorized\((?:T\.int64\()?(\d+)")


def widest_vector(script: str) -> int:
    """Lanes of the widest vectorized loop in a printed TIR module (0: none)."""
    return max((int(x) for x in _VECTORIZED.findall(script)), default=0)


def width_class(lanes: int) -> str:
    return "none" if lanes == 0 else f"{lanes} (power of 2)" if lanes & (lanes - 1) == 0 else str(lanes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--tasks-table", required=True, help="network_tasks.py's JSON for the same work directory")
    ap.add_argument("--tasks", type=int, default=14, help="tasks with the largest gaps measured")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=2, help="measurement passes over all records (the fastest kept)")
    ap.add_argument("--measured", default=None, metavar="JSON",
                    help="take the times from an earlier report of this script on the same records (rescore only)")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    tasks = {nt.name: nt for nt in extract_tasks(load_fused(args.model, target_dict(args.threads)), target)}
    store = RecordStore(os.path.join(mdir, "drytune"))
    with open(args.tasks_table) as f:
        table = sorted(json.load(f)["rows"], key=lambda r: -r["gap_ms"])[:args.tasks]
    model = StaticCostModel(target)
    measured: list[dict] = []
    mods = []
    for row in table:
        for rec in store.records(tasks[row["task"]].task):
            mod = rec.to_schedule().mod
            mods.append(mod)
            measured.append({"task": row["task"], "predicted_s": rec.seconds, "measured_s": math.inf,
                             "passes_s": [], "rescored_s": model.seconds_of_module(mod),
                             "lanes": widest_vector(mod.script()), "error": None})
    if args.measured:  # the times of an earlier report on the same records: only the rescoring is new
        with open(args.measured) as f:
            earlier = json.load(f)["records"]
        if [e["task"] for e in earlier] != [m["task"] for m in measured]:
            raise SystemExit(f"{args.measured} holds other records than {args.work_dir} with these tasks")
        for m, e in zip(measured, earlier, strict=True):
            m.update(measured_s=e["measured_s"], passes_s=e.get("passes_s", [e["measured_s"]]), error=e["error"])
    for p in range(0 if args.measured else args.passes):  # whole passes: a slow spell hits one pass of a candidate
        for m, res in zip(measured, measure_modules(mods, target), strict=True):
            m["passes_s"].append(res.seconds)
            m["measured_s"] = min(m["measured_s"], res.seconds)  # interference only slows a kernel down
            m["error"] = m["error"] or res.error
        print(f"pass {p + 1}: {len(mods)} records measured", flush=True)
    by_task: dict[str, list[dict]] = defaultdict(list)
    for m in measured:
        if math.isfinite(m["measured_s"]) and m["predicted_s"] > 0:
            by_task[m["task"]].append(m)
    rows, relative = [], defaultdict(list)
    for name, ms in by_task.items():
        pred = np.array([m["predicted_s"] for m in ms])
        meas = np.array([m["measured_s"] for m in ms])
        again = np.array([m["rescored_s"] for m in ms])
        pick, best = ms[int(pred.argmin())], ms[int(meas.argmin())]
        rows.append({"task": name, "n": len(ms), "spearman": float(stats.spearmanr(pred, meas).statistic),
                     "top10": top_k_ratio(pred, meas, 10), "rescored_top10": top_k_ratio(again, meas, 10),
                     "pick_over_best": pick["measured_s"] / best["measured_s"], "pick": pick, "best": best,
                     "best_predicted_rank": int((pred < best["predicted_s"]).sum()),
                     "rescored_spearman": float(stats.spearmanr(again, meas).statistic),
                     "rescored_pick_over_best": float(meas[again.argmin()] / meas.min())})
        log_ratio = np.log(meas / pred)
        centre = float(np.median(log_ratio))
        for m, lr in zip(ms, log_ratio, strict=True):
            relative[width_class(m["lanes"])].append(float(lr) - centre)
    widths = {k: {"n": len(v), "relative_measured_over_predicted": math.exp(statistics.median(v))}
              for k, v in sorted(relative.items(), key=lambda kv: int(kv[0].split()[0]) if kv[0] != "none" else 0)}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "tasks": rows, "widths": widths,
              "records": measured, "command": "python benchmarks/network_records.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: the network run's own candidates, measured", "", f"{report['date']}. "
             f"`{report['command']}`", "", "Every recorded candidate of each task built and timed on this CPU. "
             "pick = the model's first choice among them; best = the fastest measured.", "",
             "| task | records | Spearman | pick / best | pick: lanes, predicted / measured ms "
             "| best: lanes, predicted / measured ms (its predicted rank) | rescored: Spearman, pick / best |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        p, b = r["pick"], r["best"]
        lines.append(f"| {r['task']} | {r['n']} | {r['spearman']:.2f} | {r['pick_over_best']:.2f} | {p['lanes']}, "
                     f"{p['predicted_s'] * 1e3:.4f} / {p['measured_s'] * 1e3:.4f} | {b['lanes']}, "
                     f"{b['predicted_s'] * 1e3:.4f} / {b['measured_s'] * 1e3:.4f} ({r['best_predicted_rank']}) | "
                     f"{r['rescored_spearman']:.2f}, {r['rescored_pick_over_best']:.2f} |")
    lines += ["", f"Median Spearman {statistics.median(r['spearman'] for r in rows):.2f}, median pick / best "
              f"{statistics.median(r['pick_over_best'] for r in rows):.2f} over {len(rows)} tasks; rescored by the "
              f"current model: {statistics.median(r['rescored_spearman'] for r in rows):.2f} and "
              f"{statistics.median(r['rescored_pick_over_best'] for r in rows):.2f}. Median top-10 ratio (the 10 "
              "fastest records' time over the 10 best predicted ones'): "
              f"{statistics.median(r['top10'] for r in rows):.2f} by the run's predictions, "
              f"{statistics.median(r['rescored_top10'] for r in rows):.2f} rescored. Each record timed in "
              f"{max(len(m['passes_s']) for m in measured)} whole passes, the fastest kept"
              + (f" (times from {args.measured})" if args.measured else "") + ".", "",
              "Measured / predicted by the widest vectorized loop, relative to its task's median (> 1: the model "
              "underrates such candidates):", "", "| lanes | candidates | measured / predicted |", "|---|---|---|"]
    lines += [f"| {k} | {v['n']} | {v['relative_measured_over_predicted']:.2f} |" for k, v in widths.items()]
    write_report(f"network_records_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
