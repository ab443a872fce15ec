"""Where a network's latency gap comes from: each task's kernel as drytune chose it and as MetaSchedule measured
it best, built alone and timed interleaved, weighted by the task's calls per network run.

Reads a work directory of `benchmarks/networks.py` (drytune's records in MODEL/drytune, MetaSchedule's long-run
database in MODEL/ms_long_db); runs after its tune phases.

    python benchmarks/network_tasks.py --model mobilenet_v2 --work-dir drytune-work/networks_znver4_v2 --tag znver4

With `--baseline-work-dir`, the picks of a second work directory of the same model (tuned with an earlier model, say)
are timed in the same rounds, so that two models' picks compare without the machine's phase between them; a work
directory without a MetaSchedule database is then compared with the baseline alone:

    python benchmarks/network_tasks.py --model bert_base --work-dir drytune-work/networks_emeraldrapids_s50b \
        --baseline-work-dir drytune-work/networks_emeraldrapids_s49b --fast-math --tag emeraldrapids_s50_vs_s49

With
`--top-k K`, each task's next K-1 best predictions are timed in the same rounds too: what `verify_top_k=k` could gain
for k = 1..K (the fastest of the k by the same medians, so slightly optimistic). `--one-per-sketch` also times the
candidates that `verify_top_k=k` with `VerifyConfig.one_per_sketch` would measure (each sketch's best prediction first)
and sums both choices.

With a baseline, the baseline's pick is also priced by the cost model (`--coefficients`, default the file shipped
for this CPU: the one the work directory was tuned with). A task whose model prices the baseline's pick below its
own is a search miss (the search never reached a schedule its own model prefers); the others are the model's choice.
The report splits the gap between the two.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import tvm
from networks import RECORDS_FILE, load_fused, model_dir, target_dict
from op_tuning import interleaved
from report_files import write_report
from tvm.s_tir import meta_schedule as ms

from drytune import StaticCostModel
from drytune.extract import extract_tasks
from drytune.records import RecordStore, candidate_from_trace
from drytune.scheduler.build import choose_records
from drytune.search.select import verification_set
from drytune.space import SearchSpace


def ms_best(db: ms.database.JSONDatabase, task, target: tvm.target.Target) -> tvm.IRModule | None:
    """MetaSchedule's fastest measured schedule of the task's program, or None if it has none."""
    if not db.has_workload(task.mod):
        return None
    sch = db.query_schedule(task.mod, target, workload_name="main")
    return sch.mod if sch is not None else None


def picked_mod(choice, nt) -> tvm.IRModule:
    """The kernel a record choice of `choose_records` builds for its task: its record's, else the unscheduled one."""
    return choice.record.to_schedule().mod if choice.record is not None else nt.task.mod


def either_records(store: RecordStore, tasks, plain) -> list:
    """`choose_records` of the tasks with the constant-weight mark, or, for a task with no such record (a work dir
    tuned before the mark existed), of the same task without it (`plain`: the tasks without it, in the same order)."""
    marked, unmarked = choose_records(store, tasks), choose_records(store, plain)
    return [m if m.record is not None else u for m, u in zip(marked, unmarked, strict=True)]


def marked_and_plain_tasks(model: str, threads: int, target: tvm.target.Target, fast_math: bool = False) -> tuple:
    """The network's tasks with the constant-weight mark (as drytune tunes them) and, in the same order, without it
    (as MetaSchedule tuned them, and drytune before session 52)."""
    tasks = extract_tasks(load_fused(model, target_dict(threads), fast_math), target)
    plain = extract_tasks(load_fused(model, target_dict(threads), fast_math, prepack=False), target)
    return tasks, same_order(tasks, plain)


def same_order(tasks, plain) -> list:
    """The tasks extracted without the constant-weight mark, in the order of `tasks` (matched by name)."""
    by_name = {nt.name: nt for nt in plain}
    if set(by_name) != {nt.name for nt in tasks}:
        raise SystemExit("the network's tasks differ with and without the constant-weight mark")
    return [by_name[nt.name] for nt in tasks]


def distinct_records(store: RecordStore, task) -> list:
    """The task's records, best prediction first, one per distinct schedule."""
    seen, out = set(), []
    for rec in sorted(store.records(task), key=lambda r: r.seconds):
        if str(rec.trace) not in seen:
            seen.add(str(rec.trace))
            out.append(rec)
    return out


def next_best(store: RecordStore, task, pick, n: int) -> list:
    """Up to `n` records of the task with the best predictions after `pick`'s, one per distinct schedule."""
    skip = str(pick.trace) if pick is not None else None
    return [rec for rec in distinct_records(store, task) if str(rec.trace) != skip][:n]


def sketch_first_sets(store: RecordStore, task, k: int) -> list[list]:
    """For j = 1..k, the records `verify_top_k=j` measures with `VerifyConfig.one_per_sketch` (each sketch's best
    prediction first, by `search.select.verification_set`)."""
    derived = SearchSpace(task).derived
    top = [(cand, rec) for rec in distinct_records(store, task)
           if (cand := candidate_from_trace(task, derived, rec.trace)) is not None]
    return [[rec for _, rec in verification_set(top, j, True)] for j in range(1, k + 1)]


def open_work_dir(work_dir: str, model: str, threads: int) -> tuple[tvm.target.Target, str]:
    """The runtime's thread count set, the benchmark's target, and the model's folder in a networks.py work dir."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    return tvm.target.Target(target_dict(threads)), model_dir(os.path.abspath(work_dir), model)


def work_dir_parser(doc: str | None, rounds: int = 3, require_work_dir: bool = True) -> argparse.ArgumentParser:
    """The options shared by the scripts that time kernels of a networks.py work directory."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--work-dir", required=require_work_dir)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=rounds)
    return ap


def main() -> int:
    ap = work_dir_parser(__doc__)
    ap.add_argument("--tag", default=None)
    ap.add_argument("--baseline-work-dir", default=None,
                    help="another networks.py work dir of the same model (e.g. tuned with an earlier model): its picks "
                         "are timed in the same rounds, as a third column")
    ap.add_argument("--fast-math", action="store_true", help="the network as networks.py --fast-math tuned it")
    ap.add_argument("--top-k", type=int, default=1,
                    help="also time each task's next K-1 best predictions: the network sum for verify_top_k = 1..K")
    ap.add_argument("--cold", action="store_true",
                    help="time each kernel with its weights flushed, as it runs inside the network (in_network.py)")
    ap.add_argument("--coefficients", default=None, metavar="FILE",
                    help="with --baseline-work-dir: price the baseline's picks with this coefficients file (default: "
                         "the one shipped for this CPU)")
    ap.add_argument("--one-per-sketch", action="store_true",
                    help="with --top-k: also the sum when verify_top_k measures each sketch's best prediction first")
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    ms_dir = os.path.join(mdir, "ms_long_db")
    has_ms = os.path.exists(os.path.join(ms_dir, RECORDS_FILE))
    if not has_ms and not args.baseline_work_dir:
        raise SystemExit(f"no MetaSchedule database in {ms_dir}: run networks.py --phase tune-ms first, or compare "
                         "with another drytune work dir (--baseline-work-dir)")
    tasks, plain = marked_and_plain_tasks(args.model, args.threads, target, args.fast_math)
    store = RecordStore(os.path.join(mdir, "drytune"))
    choices = either_records(store, tasks, plain)
    baseline = None
    if args.baseline_work_dir:
        bdir = model_dir(os.path.abspath(args.baseline_work_dir), args.model)
        baseline = either_records(RecordStore(os.path.join(bdir, "drytune")), tasks, plain)
    db = ms.database.JSONDatabase(work_dir=ms_dir, allow_missing=False) if has_ms else None
    pricer = StaticCostModel(target, coefficients=args.coefficients) if baseline is not None else None
    ref = "metaschedule" if has_ms else "baseline"  # what the ratio and the gap are taken against
    rows = []
    for nt, plain_nt, choice, base in zip(tasks, plain, choices, baseline or [None] * len(tasks), strict=True):
        mods = {"drytune": picked_mod(choice, nt)}
        if db is not None:
            mods["metaschedule"] = ms_best(db, plain_nt.task, target)
            if mods["metaschedule"] is None:
                print(f"{nt.name}: MetaSchedule has no record; skipped", flush=True)
                continue
        if base is not None:
            mods["baseline"] = picked_mod(base, nt)
        more = next_best(store, nt.task, choice.record, args.top_k - 1) if choice.record is not None else []
        mods.update({f"top{i}": rec.to_schedule().mod for i, rec in enumerate(more, 2)})
        sketch_sets = sketch_first_sets(store, nt.task, args.top_k) if args.one_per_sketch and more else []
        by_trace = {str(rec.trace): f"top{i}" for i, rec in enumerate(more, 2)}
        if sketch_sets:  # `more` is not empty, so drytune's pick is a record
            by_trace[str(choice.record.trace)] = "drytune"
        for rec in (rec for chosen in sketch_sets for rec in chosen):
            if str(rec.trace) not in by_trace:
                by_trace[str(rec.trace)] = f"sketch{len(by_trace)}"
                mods[by_trace[str(rec.trace)]] = rec.to_schedule().mod
        times = interleaved(mods, target, rounds=args.rounds, cold=args.cold)
        med = {k: statistics.median(v) for k, v in times.items()}
        r = {"task": nt.name, "kind": nt.kind, "weight": nt.weight, "gflop": nt.flops / 1e9,
             "drytune_tuned": choice.record is not None,
             "predicted_ms": choice.record.seconds * 1e3 if choice.record is not None else None,
             **{f"{k}_ms": med[k] * 1e3 for k in ("drytune", "metaschedule", "baseline") if k in med},
             "ratio": statistics.median(a / b for a, b in zip(times["drytune"], times[ref], strict=True)),
             "gap_ms": nt.weight * (med["drytune"] - med[ref]) * 1e3}
        r["top_ms"] = [r["drytune_ms"]] + [med[f"top{i}"] * 1e3 for i in range(2, len(more) + 2)]
        if sketch_sets:  # the fastest of what verify_top_k=j measures with one_per_sketch, j = 1..K
            r["sketch_ms"] = [min(med[by_trace[str(rec.trace)]] for rec in chosen) * 1e3 for chosen in sketch_sets]
        if pricer is not None and choice.record is not None and base.record is not None:
            r["search_miss"] = None  # the same schedule in both: neither a miss nor a choice
            if str(choice.record.trace) != str(base.record.trace):
                r["baseline_priced_ms"] = pricer.seconds_of_module(mods["baseline"]) * 1e3
                r["own_priced_ms"] = pricer.seconds_of_module(mods["drytune"]) * 1e3
                r["search_miss"] = r["baseline_priced_ms"] < r["own_priced_ms"]
        if baseline is not None and has_ms:
            r["ratio_to_baseline"] = statistics.median(a / b for a, b in zip(times["drytune"], times["baseline"],
                                                                             strict=True))
        rows.append(r)
        print(f"{nt.name:60s} x{nt.weight:<3d} drytune {r['drytune_ms']:8.3f} ms  {ref} {r[f'{ref}_ms']:8.3f} ms  "
              f"ratio {r['ratio']:.2f}", flush=True)
    rows.sort(key=lambda r: -r["gap_ms"])
    systems = ("drytune",) + (("metaschedule",) if has_ms else ()) + (("baseline",) if baseline is not None else ())
    total = {k: sum(r["weight"] * r[f"{k}_ms"] for r in rows) for k in systems}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "reference": ref, "rows": rows, "sum_ms": total,
              "command": "python benchmarks/network_tasks.py " + " ".join(sys.argv[1:])}
    ref_name = "MetaSchedule" if has_ms else "baseline"
    third = baseline is not None and has_ms  # the baseline as a third column beside MetaSchedule
    lines = [f"# {args.model}: drytune's kernels against {ref_name}'s, task by task", "",
             f"{report['date']}. `{report['command']}`", "",
             "Each task's kernel built alone and timed interleaved (median of rounds"
             + ("; weights flushed before each run" if args.cold else "; hot: inside the network kernels run ~1.3x "
                "slower and closer to `--cold` times, in_network.py")
             + f"); gap = calls x (drytune - {ref_name}). Sorted by gap.", "",
             f"| task | kind | calls | GFLOP | drytune ms (predicted) | {ref_name} ms | ratio | gap ms |"
             + (" baseline ms | drytune / baseline |" if third else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|---|" if third else "")]
    if baseline is not None:
        lines[4] = f"Baseline: the picks of {args.baseline_work_dir}, timed in the same rounds. " + lines[4]
    for r in rows:
        pred = f" ({r['predicted_ms']:.3f})" if r["predicted_ms"] is not None else " (default)"
        extra = f" {r['baseline_ms']:.3f} | {r['ratio_to_baseline']:.2f} |" if third else ""
        lines.append(f"| {r['task']} | {r['kind']} | {r['weight']} | {r['gflop']:.3f} | {r['drytune_ms']:.3f}{pred} | "
                     f"{r[f'{ref}_ms']:.3f} | {r['ratio']:.2f} | {r['gap_ms']:.3f} |{extra}")
    lines += ["", "Sum of calls x kernel time: " + ", ".join(f"{k} {v:.2f} ms" for k, v in total.items()) + "."]
    if any("search_miss" in r for r in rows):
        report["gap_split_ms"] = {kind: sum(r["weight"] * (r["drytune_ms"] - r["baseline_ms"]) for r in rows
                                            if r.get("search_miss") is want)
                                  for kind, want in (("search_miss", True), ("model_choice", False))}
        misses = [r["task"] for r in rows if r.get("search_miss")]
        split = report["gap_split_ms"]
        lines += ["", f"Priced by {args.coefficients or 'the shipped coefficients file'}: in {len(misses)} tasks the "
                  "model prices the baseline's pick below drytune's own (search misses), and they make "
                  f"{split['search_miss']:+.3f} ms of the gap; the tasks where the model prefers its own pick make "
                  f"{split['model_choice']:+.3f} ms (a task with the same pick in both is in neither). Search misses: "
                  + (", ".join(misses) or "none") + "."]
    if args.top_k > 1:
        report["verify_sum_ms"] = [sum(r["weight"] * min(r["top_ms"][:k]) for r in rows)
                                   for k in range(1, args.top_k + 1)]
        lines += ["", "The fastest of each task's k best predictions (what verify_top_k=k builds, chosen here by the "
                  "same medians that are summed), summed over calls:", "",
                  f"| k | sum ms | / {ref_name} |", "|---|---|---|"]
        lines += [f"| {k} | {v:.2f} | {v / total[ref]:.3f} |"
                  for k, v in enumerate(report["verify_sum_ms"], 1)]
    if args.one_per_sketch and args.top_k > 1:
        report["verify_sketch_sum_ms"] = [sum(r["weight"] * (r["sketch_ms"][k - 1] if "sketch_ms" in r
                                                               else r["drytune_ms"]) for r in rows)
                                          for k in range(1, args.top_k + 1)]
        lines += ["", "The same with each sketch's best prediction measured first (`VerifyConfig.one_per_sketch`):", "",
                  f"| k | sum ms | / {ref_name} |", "|---|---|---|"]
        lines += [f"| {k} | {v:.2f} | {v / total[ref]:.3f} |"
                  for k, v in enumerate(report["verify_sketch_sum_ms"], 1)]
    write_report(f"network_tasks_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
