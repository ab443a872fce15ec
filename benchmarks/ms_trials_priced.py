"""MetaSchedule's measured trials of one suite operator, priced by the static model: does the model rank the
candidates that MetaSchedule measured as the machine does, and where does it put MetaSchedule's best against the
static search's own picks?

MetaSchedule's `tune_tir` runs for `--seconds` and keeps its database (each record carries its measured time);
drytune's `tune` runs for the same wall clock and keeps its records (predicted times). Every MetaSchedule record is
priced with the static model (Spearman and Kendall against its measurement); then MetaSchedule's `--top-ms` fastest
records and drytune's `--top-dt` best predictions are timed in the same interleaved rounds. A rerun with the same
`--work-dir` reuses both databases and only prices and times again (after a cost-model change, say).

    python benchmarks/ms_trials_priced.py --op depthwise_conv2d_s2 --seconds 300 \\
        --work-dir drytune-work/ms_trials_depthwise_conv2d_s2 --tag znver3_s78
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

from networks import FAILED_RUN_SECS
from op_tuning import interleaved, metaschedule_at_budget
from report_files import write_report
from scipy.stats import kendalltau, spearmanr

import drytune as dt
from drytune import workloads
from drytune.costmodel.model import StaticCostModel
from drytune.records import RECORD_FILE, RecordStore


def price(model: StaticCostModel, mod) -> float:
    """The model's seconds for a scheduled module; inf (reported, left out of the correlations) when it cannot be
    built or analysed."""
    try:
        return model.seconds_of_module(mod)
    except Exception as err:  # noqa: BLE001 - any build or analysis failure is an unpriced trial, counted
        print(f"unpriced: {type(err).__name__}: {str(err).strip().splitlines()[-1][:160] if str(err).strip() else ''}",
              flush=True)
        return math.inf


def measured_records(db_dir: str, task: dt.Task) -> list[tuple[float, object]]:
    """(seconds, scheduled module) of the task's records in a work directory's MetaSchedule JSON database, fastest
    first, without MetaSchedule's failed builds and runs (MetaSchedule's: measured; drytune's: predicted)."""
    return [(rec.seconds, rec.to_schedule().mod) for rec in RecordStore(db_dir).records(task)
            if rec.seconds < FAILED_RUN_SECS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", required=True, help="a suite operator (drytune.workloads)")
    ap.add_argument("--seconds", type=float, default=300.0, help="wall clock of each tuner")
    ap.add_argument("--work-dir", required=True, help="keeps ms/ and drytune/ databases; reused when present")
    ap.add_argument("--top-ms", type=int, default=4)
    ap.add_argument("--top-dt", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    task = workloads.get(args.op).task()
    ms_dir, dt_dir = (os.path.join(args.work_dir, d) for d in ("ms", "drytune"))
    walls = {}
    if not os.path.exists(os.path.join(ms_dir, RECORD_FILE)):
        _, trials, walls["metaschedule"] = metaschedule_at_budget(args.op, args.seconds, keep_dir=ms_dir)
        print(f"MetaSchedule: {trials} records in {walls['metaschedule']:.0f} s", flush=True)
    if not os.path.exists(os.path.join(dt_dir, RECORD_FILE)):
        t0 = time.perf_counter()
        res = dt.tune(task, seconds=args.seconds, strategy="portfolio", progress=False, work_dir=dt_dir)
        walls["drytune"] = time.perf_counter() - t0
        print(f"drytune: {res}", flush=True)
    ms_recs = measured_records(ms_dir, task)
    dt_recs = measured_records(dt_dir, task)
    if len(ms_recs) < 2 or not dt_recs:
        raise SystemExit(f"too few records to compare: MetaSchedule {len(ms_recs)}, drytune {len(dt_recs)}")
    model = StaticCostModel(task.target)
    priced = [price(model, mod) for _, mod in ms_recs]
    measured = [s for s, _ in ms_recs]
    ok = [(m, p) for m, p in zip(measured, priced, strict=True) if math.isfinite(p)]
    if len(ok) < 2:
        raise SystemExit(f"the model priced {len(ok)} of MetaSchedule's {len(ms_recs)} records")
    ok_measured, ok_priced = [m for m, _ in ok], [p for _, p in ok]
    rho, tau = spearmanr(ok_measured, ok_priced)[0], kendalltau(ok_measured, ok_priced)[0]
    mods = {f"ms{i + 1}": mod for i, (_, mod) in enumerate(ms_recs[:args.top_ms])}
    predicted = {f"ms{i + 1}": p for i, p in enumerate(priced[:args.top_ms])}
    mods |= {f"dt{i + 1}": mod for i, (_, mod) in enumerate(dt_recs[:args.top_dt])}
    predicted |= {f"dt{i + 1}": price(model, mod) for i, (_, mod) in enumerate(dt_recs[:args.top_dt])}
    times = interleaved(mods, task.target, rounds=args.rounds)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    rows = [{"name": name, "predicted_us": predicted[name] * 1e6, "measured_us": med[name] * 1e6,
             "rounds_us": [t * 1e6 for t in times[name]],
             "metaschedule_measured_us": measured[int(name[2:]) - 1] * 1e6 if name.startswith("ms") else None}
            for name in mods]
    report = {"date": time.strftime("%Y-%m-%d"), "op": args.op, "target": str(task.target),
              "command": "python benchmarks/ms_trials_priced.py " + " ".join(sys.argv[1:]), "tuning_wall_s": walls,
              "ms_records": len(ms_recs), "ms_unpriced": len(ms_recs) - len(ok), "dt_records": len(dt_recs),
              "spearman": rho, "kendall": tau,
              "ms_trials": [{"measured_us": m * 1e6, "predicted_us": p * 1e6} for m, p in zip(measured, priced,
                                                                                            strict=True)],
              "rows": rows}
    best_ms_rank = 1 + sum(p < priced[0] for p in priced)
    lines = [f"# {args.op}: MetaSchedule's measured trials priced by the static model ({report['date']})", "",
             f"`{report['command']}`", "",
             f"MetaSchedule's measured records against the model's prices ({len(ok)} priced, "
             f"{len(ms_recs) - len(ok)} could not be): Spearman **{rho:.2f}**, "
             f"Kendall {tau:.2f}. The model ranks MetaSchedule's fastest record {best_ms_rank} of {len(ms_recs)}, "
             f"at {priced[0] * 1e6:.1f} us against drytune's best prediction of {dt_recs[0][0] * 1e6:.1f} us "
             f"({len(dt_recs)} drytune records).", "",
             f"Timed in the same {args.rounds} interleaved rounds (median):", "",
             "| kernel | MetaSchedule's measurement (us) | predicted (us) | measured here (us) |", "|---|---|---|---|"]
    for r in rows:
        ms_meas = f"{r['metaschedule_measured_us']:.1f}" if r["metaschedule_measured_us"] is not None else "-"
        lines.append(f"| {r['name']} | {ms_meas} | {r['predicted_us']:.1f} | {r['measured_us']:.1f} |")
    write_report(f"ms_trials_priced_{args.op}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
