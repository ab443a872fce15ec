"""Do L1 refills add to a kernel's compute time, or overlap it? The score of sessions 14-36 added every line moved into
L1 at its fitted cycles; the variant charges only the refills beyond `rate` lines per kernel-model cycle (per core),
the part that the prefetchers and the out-of-order window could not hide behind the kernel's own work.

Suite: leave-one-operator-out fits on the fidelity benchmark's stored features and measurements (no builds), with
the ranking of a search's measured best predictions. Records (`--records`): a network run's records as measured by
`network_records.py`, plus MetaSchedule's kernel of each of those tasks (times from `network_tasks.py`'s table), with
features computed here and coefficients fitted on the whole suite for each variant.

    python benchmarks/l1_overlap.py --tag znver4 --rates 0.1,0.2,0.3 \\
        --records benchmarks/results/network_records_mobilenet_v2_znver4_v30_s31.json \\
        --work-dir drytune-work/networks_znver4_v30 \\
        --tasks-table benchmarks/results/network_tasks_mobilenet_v2_znver4_v30.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from fidelity_eval import metrics, stored_rows
from report_files import RESULTS, write_report

import drytune as dt
from drytune.costmodel.calibrate import fit_log_ranking
from drytune.costmodel.cpu_features import FEATURE_NAMES, hide_l1_refills
from drytune.costmodel.model import COEFF_DIR, Coefficients

LAUNCHES = FEATURE_NAMES.index("parallel_launches")


def overlapped(X: np.ndarray, rate: float | None) -> np.ndarray:
    """Features with the L1 column cut to the refills beyond `rate` lines per kernel cycle (None: every refill)."""
    return hide_l1_refills(X, rate or 0.0)


def load_suite(tag: str) -> tuple[dict[str, list], dict[str, list]]:
    """Per operator: (seconds, feature values) of the random samples, and of a search's measured best predictions."""
    random_rows: dict[str, list] = {}
    searched: dict[str, list] = {}
    for r, e in stored_rows(RESULTS, tag):
        into = random_rows if r.source == "random" else searched
        into.setdefault(r.op, []).append((r.seconds, e["values"]))
    return random_rows, searched


def fit(rows: list, rate: float | None, freq_ghz: float, init: np.ndarray, fixed: dict[int, float]) -> np.ndarray:
    X = overlapped(np.array([v for _, _, v in rows], dtype=float), rate)
    return fit_log_ranking(X, np.array([s for _, s, _ in rows]), freq_ghz, groups=[op for op, _, _ in rows],
                           init=init, fixed=fixed)


def suite_row(random_rows: dict, searched: dict, rate: float | None, freq_ghz: float, init: np.ndarray,
              fixed: dict[int, float]) -> dict:
    """Leave-one-operator-out medians, and the mean over operators of best searched / the pick among them."""
    per_op, search_top1 = {}, []
    for op, data in random_rows.items():
        coef = fit([(o, s, v) for o, d in random_rows.items() if o != op for s, v in d], rate, freq_ghz, init, fixed)
        per_op[op] = metrics(overlapped(np.array([v for _, v in data], float), rate) @ coef,
                             np.array([s for s, _ in data]))
        if len(searched.get(op, [])) >= 8:
            meas = np.array([s for s, _ in searched[op]])
            pred = overlapped(np.array([v for _, v in searched[op]], float), rate) @ coef
            search_top1.append(float(meas.min() / meas[np.argmin(pred)]))
    out = {k: float(np.median([m[k] for m in per_op.values()])) for k in ("spearman", "pairwise", "top1", "top10")}
    out["search_top1_mean"] = float(np.mean(search_top1)) if search_top1 else math.nan
    return out | {"per_op": per_op}


def record_features(records_path: str, work_dir: str, tasks_table: str, model_name: str, threads: int) -> list[dict]:
    """Features of the measured records (in the report's order) and of MetaSchedule's kernel of the same tasks."""
    from network_tasks import ms_best, open_work_dir
    from networks import load_fused, target_dict
    from tvm.s_tir import meta_schedule as ms

    from drytune.costmodel.cpu_features import CPUFeatureExtractor
    from drytune.costmodel.model import StaticCostModel
    from drytune.extract import extract_tasks
    from drytune.records import RecordStore

    with open(records_path) as f:
        measured = json.load(f)["records"]
    with open(tasks_table) as f:
        table = {r["task"]: r for r in json.load(f)["rows"]}
    target, mdir = open_work_dir(work_dir, model_name, threads)
    tasks = {nt.name: nt for nt in extract_tasks(load_fused(model_name, target_dict(threads)), target)}
    store = RecordStore(os.path.join(mdir, "drytune"))
    model = StaticCostModel(target)
    ex = CPUFeatureExtractor(model.target, model.spec, model.kernel)
    db = ms.database.JSONDatabase(work_dir=os.path.join(mdir, "ms_long_db"), allow_missing=False)
    names = list(dict.fromkeys(m["task"] for m in measured))
    mods = [(name, rec.to_schedule().mod) for name in names for rec in store.records(tasks[name].task)]
    if [n for n, _ in mods] != [m["task"] for m in measured]:
        raise SystemExit(f"{records_path} holds other records than {work_dir}")
    out = [{"task": n, "kind": "record", "measured_s": m["measured_s"], "values": list(ex.extract(mod).values)}
           for (n, mod), m in zip(mods, measured, strict=True)]
    out += [{"task": n, "kind": "metaschedule", "measured_s": table[n]["metaschedule_ms"] / 1e3,
             "values": list(ex.extract(ms_best(db, tasks[n].task, target)).values)} for n in names]
    print(f"features of {len(out)} kernels", flush=True)
    return out


def records_row(entries: list[dict], coef: np.ndarray, rate: float | None) -> dict:
    """Per task medians: Spearman over the records, the first choice over the fastest, and the same with
    MetaSchedule's kernel among the candidates."""
    rho, pick, pick_ms, ms_first = [], [], [], 0
    for name in dict.fromkeys(e["task"] for e in entries):
        recs = [e for e in entries if e["task"] == name and e["kind"] == "record" and math.isfinite(e["measured_s"])]
        meas = np.array([e["measured_s"] for e in recs])
        pred = overlapped(np.array([e["values"] for e in recs], float), rate) @ coef
        rho.append(metrics(pred, meas)["spearman"])
        pick.append(float(meas[np.argmin(pred)] / meas.min()))
        ms_entry = next(e for e in entries if e["task"] == name and e["kind"] == "metaschedule")
        all_meas = np.append(meas, ms_entry["measured_s"])
        all_pred = np.append(pred, overlapped(np.array([ms_entry["values"]], float), rate) @ coef)
        pick_ms.append(float(all_meas[np.argmin(all_pred)] / all_meas.min()))
        ms_first += int(np.argmin(all_pred) == len(all_pred) - 1)
    return {"tasks": len(rho), "spearman": float(np.median(rho)), "pick_over_best": float(np.median(pick)),
            "pick_over_best_mean": float(np.mean(pick)), "with_ms_pick_over_best": float(np.median(pick_ms)),
            "with_ms_pick_over_best_mean": float(np.mean(pick_ms)), "ms_picked": ms_first}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", required=True, help="the fidelity data's machine tag (e.g. znver4)")
    ap.add_argument("--rates", default="0.1,0.2,0.3", help="hidden L1 lines per kernel cycle to compare")
    ap.add_argument("--launch-cycles", type=float, default=1949.0, help="pinned as in the shipped fit")
    ap.add_argument("--records", default=None, help="network_records.py's JSON (times of the records)")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--tasks-table", default=None)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    _, spec = dt.resolve_target("llvm")
    init = Coefficients.load(os.path.join(COEFF_DIR, f"{spec.arch}-default.json")).vector()
    fixed = {LAUNCHES: args.launch_cycles}
    random_rows, searched = load_suite(args.tag)
    entries = (record_features(args.records, args.work_dir, args.tasks_table, args.model, args.threads)
               if args.records else [])
    variants: list[float | None] = [None, *(float(r) for r in args.rates.split(","))]
    rows = []
    for rate in variants:
        row = {"rate": rate, "suite": suite_row(random_rows, searched, rate, spec.freq_ghz, init, fixed)}
        if entries:
            everything = [(op, s, v) for op, d in random_rows.items() for s, v in d]
            row["records"] = records_row(entries, fit(everything, rate, spec.freq_ghz, init, fixed), rate)
        rows.append(row)
        print(json.dumps({"rate": rate, "suite": {k: v for k, v in row["suite"].items() if k != "per_op"},
                          "records": row.get("records")}), flush=True)
    lines = [f"# L1 refills: added to compute, or overlapping it ({args.tag})", "",
             f"{time.strftime('%Y-%m-%d')}. `python benchmarks/l1_overlap.py {' '.join(sys.argv[1:])}`", "",
             "rate: L1 lines per kernel-model cycle hidden behind compute (none: every line adds its cycles, as "
             "shipped before session 37). Suite: leave-one-operator-out medians over operators of random samples; "
             "search top-1: mean over operators of the best measured / the pick among a search's measured best "
             "predictions. Records: per task of the network run, Spearman and first choice / fastest (median, "
             "mean), then with MetaSchedule's kernel added to the task's records (and how often it is the first "
             "choice).", "",
             "| rate | suite Spearman | pairwise | top-1 | top-10 | search top-1 | records Spearman | first / fastest "
             "(mean) | with MetaSchedule's kernel: first / fastest (mean), its kernel first |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        s, r = row["suite"], row.get("records")
        rec = (f"{r['spearman']:.2f} | {r['pick_over_best']:.3f} ({r['pick_over_best_mean']:.3f}) | "
               f"{r['with_ms_pick_over_best']:.3f} ({r['with_ms_pick_over_best_mean']:.3f}), {r['ms_picked']} of "
               f"{r['tasks']}") if r else "- | - | -"
        rate = "none" if row["rate"] is None else row["rate"]
        lines.append(f"| {rate} | {s['spearman']:.3f} | {s['pairwise']:.3f} | {s['top1']:.3f} | "
                     f"{s['top10']:.3f} | {s['search_top1_mean']:.3f} | {rec} |")
    write_report("l1_overlap", args.tag, {"rows": rows, "command": " ".join(sys.argv)}, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
