"""Every task's pick of a network with each auto-unroll option, measured: what the unroll decision is worth.

The model barely moves between unroll options where the measured time moves 20-90% (`task_variants.py` on
MobileNet-V2's 1x1 convolutions). This times, task by task in interleaved rounds, the pick of a `networks.py` work
directory with every unroll option of the space set on all of its nests, beside MetaSchedule's best kernel, and sums
calls x time over the network for: the picks, each fixed option, the fastest option per task, and the option the
model predicts fastest per task. Every variant is checked against the unscheduled program.

    python benchmarks/unroll_sweep.py --model mobilenet_v2 --work-dir drytune-work/networks_znver4_v43 --tag znver4_v43

With `--top-k K` the next K-1 best predictions of each task and their unroll siblings are timed in the same rounds,
and a second table compares what a verification step could measure (the k best predictions, with or without the
unroll siblings of some of them): each strategy chooses its fastest kernel by the first half of the rounds and is
scored by the second half, so the choice does not profit from the noise it is scored with.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from network_tasks import ms_best, next_best, open_work_dir, work_dir_parser
from networks import RECORDS_FILE, load_fused, target_dict
from op_tuning import interleaved
from report_files import write_report
from task_variants import variant
from tvm.s_tir import meta_schedule as ms

from drytune.costmodel.model import StaticCostModel
from drytune.extract import extract_tasks
from drytune.records import RecordStore, candidate_from_trace
from drytune.scheduler.build import choose_records
from drytune.sketch.config import SpaceConfig
from drytune.space import SearchSpace
from drytune.verify import check_candidate


def unroll_variants(cand, sketches, steps: tuple[int, ...]) -> dict[int, object]:
    """The candidate with every nest's unroll decision set to each option index (one entry per step)."""
    keys = [k for k in cand.decisions if k.endswith("/unroll")]
    return {step: variant(cand, sketches, None, dict.fromkeys(keys, i)) for i, step in enumerate(steps)}


def strategies(top_k: int, steps: tuple[int, ...]) -> dict[str, list[tuple[int, int | None]]]:
    """What a verification step could measure per task, as (rank, unroll step or None for the record as found)."""
    out: dict[str, list[tuple[int, int | None]]] = {"pick (nothing measured)": [(1, None)]}
    for k in range(2, top_k + 1):
        out[f"{k} best predictions"] = [(r, None) for r in range(1, k + 1)]
    for k in range(1, top_k + 1):
        for sib in sorted({1, k}):
            out[f"{k} best prediction(s) + unroll options of the {sib} best"] = (
                [(r, None) for r in range(1, k + 1)] + [(r, s) for r in range(1, sib + 1) for s in steps])
    return out


def held_out_choice(times: dict[str, list[float]], labels: list[str], half: int) -> str:
    """The label fastest by the median of the first `half` rounds (the rest score the choice)."""
    return min(labels, key=lambda k: statistics.median(times[k][:half]))


def main() -> int:
    ap = work_dir_parser(__doc__)
    ap.add_argument("--top-k", type=int, default=1, help="also sweep the next K-1 best predictions of each task")
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: every tuned task)")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    ms_dir = os.path.join(mdir, "ms_long_db")
    db = (ms.database.JSONDatabase(work_dir=ms_dir, allow_missing=False)
          if os.path.exists(os.path.join(ms_dir, RECORDS_FILE)) else None)
    tasks = extract_tasks(load_fused(args.model, target_dict(args.threads)), target)
    if args.tasks:
        wanted = set(args.tasks.split(","))
        tasks = [t for t in tasks if t.name in wanted]
    store = RecordStore(os.path.join(mdir, "drytune"))
    model = StaticCostModel(target)
    steps = SpaceConfig().cpu_unroll_steps
    plans = strategies(args.top_k, steps)
    half = max(1, args.rounds // 2)  # rounds that choose a strategy's kernel; the others score it
    rows = []
    for nt, choice in zip(tasks, choose_records(store, tasks), strict=True):
        if choice.record is None:
            continue
        space = SearchSpace(nt.task)
        records = [choice.record, *next_best(store, nt.task, choice.record, args.top_k - 1)]
        bases = [candidate_from_trace(nt.task, space.derived, r.trace) for r in records]
        if bases[0] is None or not any(k.endswith("/unroll") for k in bases[0].decisions):
            print(f"{nt.name}: no replayable pick with an unroll decision; skipped", flush=True)
            continue
        own = {}  # (rank, None) -> the (rank, step) it equals
        cands = {}
        for rank, base in enumerate(bases, 1):
            if base is None:
                continue
            own[(rank, None)] = (rank, steps[next(v for k, v in base.decisions.items() if k.endswith("/unroll"))])
            for step, cand in unroll_variants(base, space.sketches, steps).items():
                try:
                    check_candidate(nt.task, cand)
                except Exception as err:  # noqa: BLE001 - reported and left out, as task_variants does
                    print(f"{nt.name} rank {rank} unroll {step}: skipped ({type(err).__name__}: {err})", flush=True)
                    continue
                cands[(rank, step)] = cand
        mods = {f"r{r}u{s}": c.to_mod() for (r, s), c in cands.items()}
        ms_mod = ms_best(db, nt.task, target) if db is not None else None
        if ms_mod is not None:
            mods["metaschedule"] = ms_mod
        times = interleaved(mods, target, rounds=args.rounds)
        preds = model.predict(nt.task, list(cands.values()))
        label = {key: f"r{key[0]}u{key[1]}" for key in cands}
        row = {"task": nt.name, "weight": nt.weight, "picked_step": own[(1, None)][1],
               "measured_ms": {str(k): statistics.median(times[v]) * 1e3 for k, v in label.items()},
               "predicted_ms": {str(k): float(p) * 1e3 for k, p in zip(cands, preds, strict=True)},
               "metaschedule_ms": statistics.median(times["metaschedule"]) * 1e3 if ms_mod is not None else None,
               "strategies": {}}
        for name, plan in plans.items():
            keys = {own.get(k, k) for k in plan}
            keys = [label[k] for k in keys if k in label]
            if not keys:
                continue
            chosen = held_out_choice(times, keys, half) if len(keys) > 1 else keys[0]
            row["strategies"][name] = {"kernels": len(keys), "ms": statistics.median(times[chosen][half:]) * 1e3}
        rows.append(row)
        pick = {s: row["measured_ms"].get(str((1, s))) for s in steps}
        print(f"{nt.name:55s} x{nt.weight:<2d} pick {row['picked_step']:>3d}  " + "  ".join(
            f"{s}: {v:.4f}" for s, v in pick.items() if v is not None)
            + (f"  MS {row['metaschedule_ms']:.4f}" if ms_mod is not None else ""), flush=True)

    def total(f) -> float:
        return sum(r["weight"] * f(r) for r in rows)

    def first(r: dict) -> dict:
        """The pick's unroll options: step -> (measured, predicted)."""
        return {s: (r["measured_ms"][str((1, s))], r["predicted_ms"][str((1, s))]) for s in steps
                if str((1, s)) in r["measured_ms"]}

    sums = {"picks": total(lambda r: first(r)[r["picked_step"]][0]),
            "fastest option per task": total(lambda r: min(m for m, _ in first(r).values())),
            "option predicted fastest per task": total(lambda r: min(first(r).values(), key=lambda mp: mp[1])[0])}
    for s in steps:
        if all(s in first(r) for r in rows):
            sums[f"unroll {s} everywhere"] = total(lambda r, s=s: first(r)[s][0])
    with_ms = [r for r in rows if r["metaschedule_ms"] is not None]
    ms_sum = sum(r["weight"] * r["metaschedule_ms"] for r in with_ms) if len(with_ms) == len(rows) else None
    plan_sums = {name: {"sum_ms": total(lambda r, n=name: r["strategies"][n]["ms"]),
                        "kernels": sum(r["strategies"][name]["kernels"] for r in rows)}
                 for name in plans if all(name in r["strategies"] for r in rows)}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "rows": rows, "sums_ms": sums,
              "strategy_sums": plan_sums, "metaschedule_sum_ms": ms_sum,
              "command": "python benchmarks/unroll_sweep.py " + " ".join(sys.argv[1:])}
    head = " | ".join(f"unroll {s} ms (pred.)" for s in steps)
    lines = [f"# {args.model}: each task's pick with every unroll option", "",
             f"{report['date']}. `{report['command']}`", "",
             f"Median of {args.rounds} interleaved rounds per task; predictions in brackets; every variant checked "
             "against the unscheduled program.", "",
             f"| task | calls | pick's step | {head} | MetaSchedule ms |",
             "|---|---|---|" + "---|" * len(steps) + "---|"]
    for r in rows:
        opts = first(r)
        cells = " | ".join(f"{opts[s][0]:.4f} ({opts[s][1]:.4f})" if s in opts else "-" for s in steps)
        msc = f"{r['metaschedule_ms']:.4f}" if r["metaschedule_ms"] is not None else "-"
        lines.append(f"| {r['task']} | {r['weight']} | {r['picked_step']} | {cells} | {msc} |")
    lines += ["", "Sum of calls x kernel time over the tasks above (chosen by the same medians that are summed):", "",
              "| choice | sum ms | / picks |" + (" / MetaSchedule |" if ms_sum else ""),
              "|---|---|---|" + ("---|" if ms_sum else "")]
    for k, v in sums.items():
        lines.append(f"| {k} | {v:.3f} | {v / sums['picks']:.3f} |" + (f" {v / ms_sum:.3f} |" if ms_sum else ""))
    if ms_sum:
        lines.append(f"| MetaSchedule's kernels | {ms_sum:.3f} | {ms_sum / sums['picks']:.3f} | 1 |")
    if len(plan_sums) > 1:
        base = plan_sums["pick (nothing measured)"]["sum_ms"]
        lines += ["", f"What verification could measure per task: each strategy's fastest kernel chosen by the first "
                  f"{half} round(s), its time the median of the other {args.rounds - half}:", "",
                  "| kernels measured per task | kernels in all | sum ms | / picks |"
                  + (" / MetaSchedule |" if ms_sum else ""), "|---|---|---|---|" + ("---|" if ms_sum else "")]
        for name, v in plan_sums.items():
            lines.append(f"| {name} | {v['kernels']} | {v['sum_ms']:.3f} | {v['sum_ms'] / base:.3f} |"
                         + (f" {v['sum_ms'] / ms_sum:.3f} |" if ms_sum else ""))
    write_report(f"unroll_sweep_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
