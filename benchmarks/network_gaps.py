"""Why a network task trails MetaSchedule: a ranking error or a search that never got there.

Reads a `networks.py` work directory and the task table of `network_tasks.py` for it. For each task whose kernel
trails MetaSchedule's by more than `--min-gap-us` (calls x time), MetaSchedule's best schedule is scored by the
static model as it is, and so is drytune's pick (by the same coefficients, which need not be the ones it was
tuned with): MetaSchedule's kernel predicted faster than drytune's pick means the search did not reach such a kernel
("search"), predicted slower means the model ranked a slower kernel first ("ranking"). With `--alone SECONDS`, the
search-limited tasks are also tuned alone for that long and their picks timed interleaved with MetaSchedule's and
the network run's.

    python benchmarks/network_gaps.py --model mobilenet_v2 --work-dir drytune-work/networks_znver5_v28 \\
        --tasks-table benchmarks/results/network_tasks_mobilenet_v2_znver5_v28.json --alone 15 --tag znver5_v28
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from network_tasks import either_records, marked_and_plain_tasks, ms_best, open_work_dir
from op_tuning import interleaved
from report_files import write_report
from tvm.s_tir import meta_schedule as ms

import drytune as dt
from drytune.costmodel.model import StaticCostModel
from drytune.records import RecordStore


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--tasks-table", required=True, help="network_tasks.py's JSON for the same work directory")
    ap.add_argument("--min-gap-us", type=float, default=4.0)
    ap.add_argument("--alone", type=float, default=0.0, help="seconds to tune each search-limited task alone")
    ap.add_argument("--max-alone", type=int, default=4, help="search-limited tasks tuned alone, largest gap first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--coefficients", default=None, metavar="FILE",
                    help="score both kernels with this coefficients file (default: the one shipped for this CPU)")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    tasks, plain = marked_and_plain_tasks(args.model, args.threads, target)  # MetaSchedule's records: the plain ones
    store = RecordStore(os.path.join(mdir, "drytune"))
    choices = either_records(store, tasks, plain)
    db = ms.database.JSONDatabase(work_dir=os.path.join(mdir, "ms_long_db"), allow_missing=False)
    with open(args.tasks_table) as f:
        measured = {r["task"]: r for r in json.load(f)["rows"]}
    model = StaticCostModel(target, coefficients=args.coefficients)
    rows = []
    for nt, plain_nt, choice in zip(tasks, plain, choices, strict=True):
        m = measured.get(nt.name)
        if m is None or choice.record is None or m["gap_ms"] * 1e3 < args.min_gap_us:
            continue
        ms_mod = ms_best(db, plain_nt.task, target)
        if ms_mod is None:
            print(f"{nt.name}: no MetaSchedule record for it; skipped", flush=True)
            continue
        ms_pred = model.seconds_of_module(ms_mod)
        pick_pred = model.seconds_of_module(choice.record.to_schedule().mod)
        rows.append({"task": nt.name, "calls": nt.weight, "records": len(store.records(nt.task)),
                     "drytune_ms": m["drytune_ms"], "metaschedule_ms": m["metaschedule_ms"],
                     "predicted_pick_ms": pick_pred * 1e3, "predicted_when_tuned_ms": choice.record.seconds * 1e3,
                     "predicted_metaschedule_ms": ms_pred * 1e3,
                     "cause": "search" if ms_pred < pick_pred else "ranking"})
        r = rows[-1]
        print(f"{nt.name:45s} {r['records']:4d} records | measured {r['drytune_ms']:.4f} vs {r['metaschedule_ms']:.4f}"
              f" ms | predicted {r['predicted_pick_ms']:.4f} vs {r['predicted_metaschedule_ms']:.4f} ms: {r['cause']}",
              flush=True)
    by_name = {nt.name: (nt, choice) for nt, choice in zip(tasks, choices, strict=True)}
    searched = sorted((r for r in rows if r["cause"] == "search"),
                      key=lambda r: -r["calls"] * (r["drytune_ms"] - r["metaschedule_ms"]))
    for r in searched[:args.max_alone] if args.alone > 0 else []:
        nt, choice = by_name[r["task"]]
        with tempfile.TemporaryDirectory() as d:
            res = dt.tune(nt.task, seconds=args.alone, work_dir=d, progress=False)
        mods = {"alone": res.best.to_mod(), "network_run": choice.record.to_schedule().mod,
                "metaschedule": ms_best(db, nt.task, target)}
        times = interleaved(mods, target, rounds=3)
        r["alone"] = {"seconds": args.alone, "candidates": res.trials, "predicted_ms": res.predicted * 1e3,
                      **{f"{k}_ms": statistics.median(v) * 1e3 for k, v in times.items()}}
        print(r["task"], r["alone"], flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "rows": rows,
              "command": "python benchmarks/network_gaps.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: tasks behind MetaSchedule, ranking or search", "", f"{report['date']}. "
             f"`{report['command']}`", "", "Measured times from the task table; MetaSchedule's best schedule scored by "
             "the static model" + (f" ({args.coefficients})" if args.coefficients else "")
             + ", and so is our pick. search: the model predicts MetaSchedule's kernel faster than our pick.", "",
             "| task | calls | candidates | measured ms (ours / MS) | predicted ms (ours / MS's kernel) | cause | "
             "tuned alone: candidates, ms (alone / network run / MS) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r.get("alone")
        alone = (f"{a['candidates']}, {a['alone_ms']:.4f} / {a['network_run_ms']:.4f} / {a['metaschedule_ms']:.4f}"
                 if a else "")
        lines.append(f"| {r['task']} | {r['calls']} | {r['records']} | {r['drytune_ms']:.4f} / "
                     f"{r['metaschedule_ms']:.4f} | {r['predicted_pick_ms']:.4f} / {r['predicted_metaschedule_ms']:.4f}"
                     f" | {r['cause']} | {alone} |")
    n_search = sum(r["cause"] == "search" for r in rows)
    lines.append(f"\n{n_search} of {len(rows)} tasks search-limited, {len(rows) - n_search} ranking errors.")
    write_report(f"network_gaps_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
