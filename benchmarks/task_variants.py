"""One network task's best records with single decisions changed: predicted against measured, in one run.

For asking the model a precise question about a misranking: take the k-th best record of a task in a `networks.py`
work directory, change one decision (the unroll step, the sketch, i.e. the fusion level, a tile split), and see
whether the model moves the prediction as far as the measurement moves. Every variant is checked against the
unscheduled program and timed in interleaved rounds with the others. Variants are a JSON list of
`[label, record_rank, sketch_index_or_null, {decision: value}]` (record_rank 1 = the pick; a sketch index replays the
decisions in another sketch of the task, e.g. another fusion level), from a file or inline:

    python benchmarks/task_variants.py --model mobilenet_v2 --work-dir drytune-work/networks_znver4_v43 \\
        --task fused_conv2d3_add2_maximum1_minimum1 --variants benchmarks/variants/mobilenet_v2_conv2d3.json \\
        --tag conv2d3_znver4
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from network_tasks import next_best, open_work_dir, work_dir_parser
from networks import load_fused, target_dict
from op_tuning import interleaved
from report_files import write_report

from drytune.annotate.candidate import Candidate
from drytune.costmodel.model import StaticCostModel
from drytune.extract import extract_tasks
from drytune.records import RecordStore, candidate_from_trace
from drytune.scheduler.build import choose_records
from drytune.space import SearchSpace
from drytune.verify import check_candidate

SHOWN = ("kernel_cycles", "ilp_cycles", "vec_fma", "vec_mem", "scalar", "l1_lines", "l2_lines")


def variant(base: Candidate, sketches: list, sketch_index: int | None, changes: dict) -> Candidate:
    """`base` with `changes` applied to its decisions, replayed in sketch `sketch_index` (None: its own)."""
    decisions = dict(base.decisions)
    decisions.update({k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
    sketch = base.sketch if sketch_index is None else sketches[sketch_index]
    return Candidate(base.task, sketch, decisions)


def main() -> int:
    ap = work_dir_parser(__doc__, rounds=5)
    ap.add_argument("--task", required=True)
    ap.add_argument("--variants", required=True, help="JSON file, or the JSON list itself")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    if os.path.exists(args.variants):
        with open(args.variants) as f:
            specs = json.load(f)
    else:
        specs = json.loads(args.variants)
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    tasks = extract_tasks(load_fused(args.model, target_dict(args.threads)), target)
    nt = next((t for t in tasks if t.name == args.task), None)
    if nt is None:
        raise SystemExit(f"no task {args.task!r}; tasks: {', '.join(t.name for t in tasks)}")
    store = RecordStore(os.path.join(mdir, "drytune"))
    space = SearchSpace(nt.task)
    pick = choose_records(store, [nt])[0].record
    if pick is None:
        raise SystemExit(f"task {args.task!r} has no record in {mdir}")
    ranks = max(s[1] for s in specs)
    records = [pick, *next_best(store, nt.task, pick, ranks - 1)]
    bases = [candidate_from_trace(nt.task, space.derived, r.trace) for r in records]
    model = StaticCostModel(target)
    cands: dict[str, Candidate] = {}
    for label, rank, sketch_index, changes in specs:
        if rank > len(bases) or bases[rank - 1] is None:
            print(f"{label}: the task has no replayable record of rank {rank}; skipped", flush=True)
            continue
        cand = variant(bases[rank - 1], space.sketches, sketch_index, changes)
        try:
            check_candidate(nt.task, cand)
        except Exception as err:  # noqa: BLE001 - a variant TVM rejects or that computes wrongly is reported
            print(f"{label}: skipped ({type(err).__name__}: {err})", flush=True)
            continue
        cands[label] = cand
    times = interleaved({k: c.to_mod() for k, c in cands.items()}, target, rounds=args.rounds)
    rows = []
    for label, cand in cands.items():
        feats = model.features(nt.task, cand)  # one build for both: the prediction is these features weighted
        shown = feats.as_dict()
        rows.append({"variant": label, "sketch": cand.sketch.name, "decisions": dict(cand.key[1]),
                     "predicted_us": model.seconds_from_features(feats) * 1e6,
                     "measured_us": statistics.median(times[label]) * 1e6,
                     "features": {k: shown[k] for k in SHOWN}})
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "task": args.task, "rows": rows,
              "command": "python benchmarks/task_variants.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.task} ({args.model}): variants of its best records", "",
             f"{report['date']}. `{report['command']}`", "",
             f"Median of {args.rounds} interleaved rounds; every variant checked against the unscheduled program. "
             "Features per core (kernel and list-scheduler cycles, executed instructions, cache lines).", "",
             "| variant | sketch | predicted us | measured us | " + " | ".join(SHOWN) + " |",
             "|---|---|---|---|" + "---|" * len(SHOWN)]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['sketch'].rsplit('/', 1)[-1]} | {r['predicted_us']:.1f} | "
                     f"{r['measured_us']:.1f} | " + " | ".join(f"{r['features'][k]:.0f}" for k in SHOWN) + " |")
    write_report(f"task_variants_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
