"""What a network's cold weights cost: each task's kernels timed hot and with their weights flushed from the caches.

In a network every weight was last read an inference ago, so it comes from memory; the calibration times kernels
hot. For each task of a `networks.py` work directory (its drytune records and MetaSchedule's best kernel), the
`--per-task` best predictions and MetaSchedule's kernel are timed both ways (`cache_flush_cpu_non_first_arg`: every
argument but the activation flushed before each run), interleaved over `--rounds`, and scored by the static model
(its hot prediction) and by `weight_lines_per_core` (the weight lines the first core reads: a schedule parallel over
pixels has every core read the whole weight). The extra seconds of the cold runs are fitted as cycles per such line
(least squares through the origin), and the table says, per task, whether the hot prediction plus that price orders
the kernels' cold times better than the hot prediction alone.

    python benchmarks/cold_weights.py --model resnet50 --work-dir drytune-work/networks_rocketlake_s59r_b150 \\
        --tag rocketlake_s59
"""

from __future__ import annotations

import os

import numpy as np
import tvm
from in_network import isolated_times
from network_tasks import (
    distinct_records,
    marked_and_plain_tasks,
    ms_best,
    open_work_dir,
    work_dir_parser,
)
from report_files import write_report
from scipy.stats import spearmanr
from tvm.s_tir import meta_schedule as ms

from drytune.costmodel.cpu_features import weight_lines_per_core
from drytune.costmodel.looptree import LoopTree
from drytune.costmodel.model import StaticCostModel
from drytune.measure import MeasureWorker
from drytune.prepack import LAYOUT_FREE_ATTR, kernel_as_run
from drytune.records import RecordStore


def main() -> int:
    ap = work_dir_parser(__doc__, rounds=3)
    ap.add_argument("--per-task", type=int, default=3, help="drytune's best predictions timed per task")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    tasks, plain = marked_and_plain_tasks(args.model, args.threads, target)
    store = RecordStore(os.path.join(mdir, "drytune"))
    db = ms.database.JSONDatabase(work_dir=os.path.join(mdir, "ms_long_db"), allow_missing=False)
    model = StaticCostModel(target)
    rows, per_task = [], []
    with MeasureWorker() as worker:
        for nt, pt in zip(tasks, plain, strict=True):
            mods = task_kernels(nt, pt, store, db, target, args.per_task)
            if not mods:
                continue  # no constant weight: nothing is cold
            names = list(mods)
            hot, cold = isolated_times([mods[n] for n in names], target, worker, args.rounds)
            task_rows = []
            for n, h, c in zip(names, hot, cold, strict=True):
                as_run = kernel_as_run(mods[n])
                lines = weight_lines_per_core(as_run, LoopTree.from_mod(as_run), model.spec)
                task_rows.append({"task": nt.name, "kernel": n, "hot_s": h, "cold_s": c,
                                  "predicted_hot_s": model.seconds_of_module(mods[n]), "cold_lines": lines})
            rows.extend(task_rows)
            per_task.append(nt.name)
            print(f"{nt.name}: " + ", ".join(f"{r['kernel']} {r['hot_s'] * 1e3:.3f}/{r['cold_s'] * 1e3:.3f} ms "
                                             f"{r['cold_lines']:.0f} lines" for r in task_rows), flush=True)
    ok = [r for r in rows if np.isfinite(r["hot_s"]) and np.isfinite(r["cold_s"])]
    x = np.array([r["cold_lines"] for r in ok])
    y = np.array([r["cold_s"] - r["hot_s"] for r in ok])
    per_line_s = float(x @ y / (x @ x)) if (x @ x) > 0 else 0.0
    cycles = per_line_s * model.spec.freq_ghz * 1e9
    better = worse = 0
    for name in per_task:
        rs = [r for r in ok if r["task"] == name]
        if len(rs) < 3:
            continue
        cold_t = [r["cold_s"] for r in rs]
        rho_hot = spearmanr([r["predicted_hot_s"] for r in rs], cold_t).statistic
        rho_cold = spearmanr([r["predicted_hot_s"] + per_line_s * r["cold_lines"] for r in rs], cold_t).statistic
        better += int(rho_cold > rho_hot)
        worse += int(rho_cold < rho_hot)
    lines = [f"# {args.model}: weights cold against hot", "",
             f"`python benchmarks/cold_weights.py --model {args.model} --work-dir {args.work_dir}"
             f" --per-task {args.per_task} --rounds {args.rounds}" + (f" --tag {args.tag}`" if args.tag else "`"), "",
             f"{len(ok)} kernels of {len(per_task)} tasks. Extra seconds of a cold run per weight line the first core "
             f"reads (least squares through the origin): {per_line_s * 1e9:.2f} ns = **{cycles:.1f} cycles** at "
             f"{model.spec.freq_ghz} GHz. Ordering of each task's cold times (tasks with 3 or more kernels): the "
             f"hot prediction plus that price ranks better on {better}, worse on {worse}.", "",
             "| task | kernel | hot ms | cold ms | predicted hot ms | weight lines, first core |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['kernel']} | {r['hot_s'] * 1e3:.3f} | {r['cold_s'] * 1e3:.3f} | "
              f"{r['predicted_hot_s'] * 1e3:.3f} | {r['cold_lines']:.0f} |" for r in ok]
    write_report(f"cold_weights_{args.model}", args.tag, {"rows": rows, "per_line_s": per_line_s,
                                                          "per_line_cycles": cycles, "better": better,
                                                          "worse": worse}, lines)
    return 0


def task_kernels(nt, plain_nt, store: RecordStore, db, target, per_task: int) -> dict:
    """A network task's `per_task` best predictions (dt0, dt1, ...) and MetaSchedule's kernel (ms), by name; empty for
    a task with no constant weight. MetaSchedule tuned the unmarked program: its weights are marked as drytune's are."""
    free = nt.task.mod["main"].attrs.get(LAYOUT_FREE_ATTR) if nt.task.mod["main"].attrs else None
    if not free:
        return {}
    mods = {f"dt{i}": rec.to_schedule().mod for i, rec in enumerate(distinct_records(store, nt.task)[:per_task])}
    theirs = ms_best(db, plain_nt.task, target)
    if theirs is not None:
        mods["ms"] = _marked(theirs, free)
    return mods


def _marked(mod, free):
    """`mod` with its function's constant-weight parameters marked as `free` lists them."""
    return tvm.IRModule({gv: f.with_attr(LAYOUT_FREE_ATTR, free) if gv.name_hint == "main" else f
                         for gv, f in mod.functions_items()}, attrs=mod.attrs)


if __name__ == "__main__":
    raise SystemExit(main())
