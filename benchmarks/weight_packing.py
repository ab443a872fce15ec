"""Packed or not: a network's dense layers timed with their weight packed at build time and without.

For each task that reads a constant weight, times interleaved: the pick of a work directory tuned without the
constant-weight mark (`--baseline-work-dir`, its weight read in place), the pick of one tuned with it
(`--work-dir`), and that directory's best-predicted records that pack the weight (`--top`). Each kernel runs as the
built network runs it (a packed weight is passed packed), warm and with its weight and output flushed from the
caches before each run (`cold`: all arguments but the first, as in a network whose weights outgrow the caches).

    python benchmarks/weight_packing.py --model bert_base --fast-math \
        --work-dir drytune-work/networks_emeraldrapids_s52b \
        --baseline-work-dir drytune-work/networks_emeraldrapids_s51b --tag emeraldrapids_s52
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from network_tasks import marked_and_plain_tasks, open_work_dir, picked_mod, work_dir_parser
from networks import model_dir
from report_files import write_report

from drytune.measure import MeasureWorker, measure_modules
from drytune.prepack import LAYOUT_FREE_ATTR, has_weight_packing
from drytune.records import RecordStore
from drytune.scheduler.build import choose_records


def packed_records(store: RecordStore, task, top: int) -> list:
    """The `top` best-predicted records of the task whose schedule packs a constant weight."""
    out = []
    for rec in sorted(store.records(task), key=lambda r: r.seconds):
        if len(out) == top:
            break
        if has_weight_packing(rec.to_schedule().mod):
            out.append(rec)
    return out


def main() -> int:
    ap = work_dir_parser(__doc__, rounds=5)
    ap.add_argument("--baseline-work-dir", required=True, help="a networks.py work dir tuned without the mark")
    ap.add_argument("--fast-math", action="store_true")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    marked, plain = marked_and_plain_tasks(args.model, args.threads, target, args.fast_math)
    store = RecordStore(os.path.join(mdir, "drytune"))
    base_store = RecordStore(os.path.join(model_dir(os.path.abspath(args.baseline_work_dir), args.model), "drytune"))
    rows = []
    with MeasureWorker() as worker:
        for nt, plain_nt, pick, base in zip(marked, plain, choose_records(store, marked),
                                            choose_records(base_store, plain), strict=True):
            packed = packed_records(store, nt.task, args.top) if LAYOUT_FREE_ATTR in (nt.task.func.attrs or {}) else []
            if not packed or pick.record is None:
                continue  # no constant weight, or no schedule that packs it
            mods = {"baseline": (picked_mod(base, plain_nt), base.predicted), "pick": (picked_mod(pick, nt),
                                                                                       pick.predicted)}
            for i, rec in enumerate(packed, 1):
                mods[f"packed{i}"] = (rec.to_schedule().mod, rec.seconds)
            times = {k: {"warm": [], "cold": []} for k in mods}
            for _ in range(args.rounds):
                for name, (mod, _) in mods.items():
                    for mode in ("warm", "cold"):
                        res = measure_modules([mod], target, number=3, repeat=3, min_repeat_ms=50, worker=worker,
                                              flush_cache=mode == "cold")[0]
                        times[name][mode].append(res.seconds)
            for name, (mod, predicted) in mods.items():
                row = {"task": nt.name, "calls": nt.weight, "kernel": name, "packs_weight": has_weight_packing(mod),
                       "predicted_ms": predicted * 1e3 if predicted is not None else None,
                       **{f"{m}_ms": statistics.median(times[name][m]) * 1e3 for m in ("warm", "cold")}}
                rows.append(row)
                print(row, flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "rows": rows,
              "command": "python benchmarks/weight_packing.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: dense layers with the weight packed at build time and without", "",
             f"{report['date']}. `{report['command']}`", "",
             "baseline: the pick of the work dir tuned without the constant-weight mark; pick: the pick of the one "
             "tuned with it; packedN: its N-th best-predicted record that packs the weight. Each kernel alone as the "
             "network runs it, median of interleaved rounds; cold: every argument but the first (the weight, bias "
             "and output) flushed from the caches before each run.", "",
             "| task | calls | kernel | packs weight | predicted ms | warm ms | cold ms |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = f"{r['predicted_ms']:.3f}" if r["predicted_ms"] is not None else "default"
        lines.append(f"| {r['task']} | {r['calls']} | {r['kernel']} | {'yes' if r['packs_weight'] else 'no'} | "
                     f"{pred} | {r['warm_ms']:.3f} | {r['cold_ms']:.3f} |")
    write_report(f"weight_packing_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
