"""How well coefficient files choose among real search outcomes: each task's picks from several networks.py work
directories (tuned with different files or seeds) are pooled, timed interleaved, and priced by each file; a file's
score is the network sum of the kernels it would choose from each pool.

Random samples (costmodel_fidelity.py) miss what matters for networks: a search returns the candidates its model
prices lowest, which is where the model errs most. The pools here are such candidates. Which file chooses the faster
kernels among them says which file a network is better tuned with, without re-tuning it at many seeds (a file's
search may still reach candidates outside the pool; that part is not measured here).

    python benchmarks/pick_pool.py --model mobilenet_v2 --fast-math --cold \
        --work-dirs drytune-work/networks_znver5_s64,drytune-work/networks_znver5_s65 \
        --files s64=old.json,s65=costmodel/coefficients/x86-znver5-calibrated.json --tag znver5

`--measured` reuses the times of an earlier report (same model and pools; members matched by their TIR), so that
new files are priced without timing again.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time

from network_tasks import either_records, marked_and_plain_tasks, ms_best, open_work_dir, picked_mod, work_dir_parser
from networks import RECORDS_FILE, model_dir
from op_tuning import interleaved
from report_files import write_report
from tvm.s_tir import meta_schedule as ms

from drytune import StaticCostModel
from drytune.records import RecordStore


def named_files(text: str) -> dict[str, str | None]:
    """`name=path,...` as a dict; a bare `name` or `name=` is the file shipped for this CPU."""
    out = {}
    for item in filter(None, text.split(",")):
        name, _, path = item.partition("=")
        out[name] = path or None
    return out


def script_key(mod) -> str:
    return hashlib.sha1(mod.script().encode()).hexdigest()[:16]


def pools(model: str, work_dirs: list[str], threads: int, fast_math: bool, ms_dir: str | None):
    """Per task: (task, {key: module}, {key: [work dirs whose pick it is]}, MetaSchedule's best module or None)."""
    target, _ = open_work_dir(work_dirs[0], model, threads)
    tasks, plain = marked_and_plain_tasks(model, threads, target, fast_math)
    picks = [either_records(RecordStore(os.path.join(model_dir(os.path.abspath(w), model), "drytune")), tasks, plain)
             for w in work_dirs]
    db = ms.database.JSONDatabase(work_dir=ms_dir, allow_missing=False) if ms_dir else None
    for i, (nt, plain_nt) in enumerate(zip(tasks, plain, strict=True)):
        mods: dict[str, object] = {}
        sources: dict[str, list[str]] = {}
        for w, chosen in zip(work_dirs, picks, strict=True):
            if chosen[i].record is None:
                continue  # that run never tuned the task: its default schedule is no search outcome
            mod = picked_mod(chosen[i], nt)
            key = script_key(mod)
            mods.setdefault(key, mod)
            sources.setdefault(key, []).append(os.path.basename(os.path.normpath(w)))
        yield nt, mods, sources, (ms_best(db, plain_nt.task, target) if db is not None else None)


def priced(pricers: dict[str, StaticCostModel], mod) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each model's milliseconds for the module and the features it read (for fitting coefficients to the pools):
    compiled once, features computed once per kernel-model setting."""
    asm = next(iter(pricers.values())).assembly_of_module(mod)
    feats: dict[str, object] = {}
    ms_of, values = {}, {}
    for name, p in pricers.items():
        key = repr(p.kernel)
        if key not in feats:
            feats[key] = p.features_of_module(mod, asm)
        ms_of[name] = p.seconds_from_features(feats[key]) * 1e3
        values[name] = list(feats[key].values)
    return ms_of, values


def main() -> int:
    ap = work_dir_parser(__doc__, rounds=5, require_work_dir=False)
    ap.add_argument("--work-dirs", required=True, help="comma-separated networks.py work directories of the model")
    ap.add_argument("--files", default="shipped",
                    help="coefficient files to compare, name=path,...; a bare name is the file shipped for this CPU")
    ap.add_argument("--ms-work-dir", default=None,
                    help="a work dir whose MetaSchedule long-run database gives a reference kernel per task")
    ap.add_argument("--fast-math", action="store_true", help="the network as networks.py --fast-math tuned it")
    ap.add_argument("--cold", action="store_true", help="time each kernel with its weights flushed (in_network.py)")
    ap.add_argument("--measured", default=None, metavar="JSON", help="reuse the times of an earlier pick_pool report")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    work_dirs = args.work_dirs.split(",")
    files = named_files(args.files)
    target, _ = open_work_dir(work_dirs[0], args.model, args.threads)
    pricers = {name: StaticCostModel(target, coefficients=path) for name, path in files.items()}
    ms_dir = None
    if args.ms_work_dir:
        ms_dir = os.path.join(model_dir(os.path.abspath(args.ms_work_dir), args.model), "ms_long_db")
        if not os.path.exists(os.path.join(ms_dir, RECORDS_FILE)):
            raise SystemExit(f"no MetaSchedule database in {ms_dir}")
    reused: dict[tuple[str, str], float] = {}
    if args.measured:
        with open(args.measured) as f:
            earlier = json.load(f)
        reused = {(r["task"], m["key"]): m["measured_ms"] for r in earlier["rows"] for m in r["members"]}
        reused |= {(r["task"], "metaschedule"): r["metaschedule_ms"] for r in earlier["rows"]
                   if r.get("metaschedule_ms") is not None}
    rows = []
    for nt, mods, sources, ms_mod in pools(args.model, work_dirs, args.threads, args.fast_math, ms_dir):
        if not mods:
            continue
        timed = dict(mods) | ({"metaschedule": ms_mod} if ms_mod is not None else {})
        todo = {k: m for k, m in timed.items() if (nt.name, k) not in reused}
        med = {k: reused[(nt.name, k)] for k in timed if (nt.name, k) in reused}
        if todo:
            times = interleaved(todo, target, rounds=args.rounds, cold=args.cold)
            med |= {k: statistics.median(v) * 1e3 for k, v in times.items()}
        members = []
        for k, mod in mods.items():
            try:
                ms_of, values = priced(pricers, mod)
            except Exception as err:  # noqa: BLE001 - a member that cannot be built or analysed leaves the pool
                print(f"{nt.name}: a pick of {', '.join(sources[k])} cannot be priced, left out: "
                      f"{str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__}")
                continue
            members.append({"key": k, "sources": sources[k], "measured_ms": med[k], "priced_ms": ms_of,
                            "features": values})
        if not members:
            continue
        row = {"task": nt.name, "weight": nt.weight, "members": members,
               "metaschedule_ms": med.get("metaschedule"),
               "best_ms": min(m["measured_ms"] for m in members),
               "chosen_ms": {name: min(members, key=lambda m, n=name: m["priced_ms"][n])["measured_ms"]
                             for name in files}}
        rows.append(row)
        print(f"{nt.name:55s} x{nt.weight:<2d} pool {len(members)}  best {row['best_ms']:.3f} ms  "
              + "  ".join(f"{n} {v:.3f}" for n, v in row["chosen_ms"].items()), flush=True)
    by_dir = {os.path.basename(os.path.normpath(w)): 0.0 for w in work_dirs}
    for r in rows:
        for m in r["members"]:
            for d in m["sources"]:
                by_dir[d] += r["weight"] * m["measured_ms"]
    untuned_in = {d for d in by_dir if sum(d in m["sources"] for r in rows for m in r["members"]) < len(rows)}
    sums = {"best": sum(r["weight"] * r["best_ms"] for r in rows),
            **{n: sum(r["weight"] * r["chosen_ms"][n] for r in rows) for n in files}}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "cold": args.cold, "files": files,
              "work_dirs": work_dirs, "rows": rows, "sum_ms": sums, "own_pick_sum_ms": by_dir,
              "command": "python benchmarks/pick_pool.py " + " ".join(sys.argv[1:])}
    if any(r["metaschedule_ms"] is not None for r in rows):
        report["metaschedule_sum_ms"] = sum(r["weight"] * r["metaschedule_ms"] for r in rows
                                            if r["metaschedule_ms"] is not None)
    lines = [f"# {args.model}: which coefficient file chooses the faster kernel among the search's picks", "",
             f"{report['date']}. `{report['command']}`", "",
             f"Pools: each task's picks from {len(work_dirs)} work directories ({', '.join(by_dir)}), "
             f"de-duplicated, timed interleaved ({'weights flushed, ' if args.cold else ''}median of "
             f"{args.rounds} rounds). A file chooses the member it prices lowest; sums are calls x measured time "
             "over the tasks with a pool.", "",
             "| chooser | sum ms | / best in pools | tasks where it misses the pool's best |", "|---|---|---|---|"]
    for name, total in sums.items():
        misses = sum(r["chosen_ms"].get(name, r["best_ms"]) > r["best_ms"] for r in rows)  # "best" misses none
        lines.append(f"| {name} | {total:.3f} | {total / sums['best']:.3f} | {misses} of {len(rows)} |")
    lines += ["", "Each work directory's own picks over the same tasks (what its run delivered):", "",
              "| work dir | sum ms | / best in pools |", "|---|---|---|"]
    lines += [f"| {d}{' (some tasks untuned)' if d in untuned_in else ''} | {v:.3f} | {v / sums['best']:.3f} |"
              for d, v in by_dir.items()]
    if "metaschedule_sum_ms" in report:
        lines += ["", f"MetaSchedule's long-run kernels over the same tasks: {report['metaschedule_sum_ms']:.3f} ms."]
    lines += ["", "Tasks where the files choose differently (measured ms of each file's choice; pool best):", "",
              "| task | calls | pool | best | " + " | ".join(files) + " |",
              "|---|---|---|---|" + "---|" * len(files)]
    for r in rows:
        if len({r["chosen_ms"][n] for n in files}) > 1:
            lines.append(f"| {r['task']} | {r['weight']} | {len(r['members'])} | {r['best_ms']:.3f} | "
                         + " | ".join(f"{r['chosen_ms'][n]:.3f}" for n in files) + " |")
    write_report(f"pick_pool_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
