"""A network task's best records with single decisions changed (or chosen candidates of a suite operator): predicted
against measured, in one run.

For asking the model a precise question about a misranking: take the k-th best record of a task in a `networks.py`
work directory, change one decision (the unroll step, the sketch, i.e. the fusion level, a tile split), and see
whether the model moves the prediction as far as the measurement moves. Every variant is checked against the
unscheduled program and timed in interleaved rounds with the others. Variants are a JSON list of
`[label, record_rank, sketch_index_or_null, {decision: value}]` (record_rank 1 = the pick; a sketch index replays the
decisions in another sketch of the task, e.g. another fusion level), from a file or inline:

    python benchmarks/task_variants.py --model mobilenet_v2 --work-dir drytune-work/networks_znver4_v43 \\
        --task fused_conv2d3_add2_maximum1_minimum1 --variants benchmarks/variants/mobilenet_v2_conv2d3.json \\
        --tag conv2d3_znver4

With `--op` a suite operator takes the network task's place, and each variant names its candidate in full:
`[label, sketch name, {decision: value}]` (no records needed):

    python benchmarks/task_variants.py --op gemm --variants benchmarks/variants/gemm_tiles.json --rounds 7 \\
        --tag emeraldrapids

`--coefficients FILE` (repeatable) adds a column of predictions with another coefficients file (and its kernel-model
settings), to see whether a candidate file moves a misranked variant where the measurement does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from network_tasks import next_best, open_work_dir, work_dir_parser
from networks import load_fused, target_dict
from op_tuning import interleaved
from report_files import write_report
from space_ablation import operator_task
from tvm.target import Target

from drytune.annotate.candidate import Candidate
from drytune.costmodel.model import StaticCostModel
from drytune.extract import extract_tasks
from drytune.records import RecordStore, candidate_from_trace
from drytune.scheduler.build import choose_records
from drytune.space import SearchSpace
from drytune.task import Task
from drytune.verify import check_candidate

SHOWN = ("kernel_cycles", "ilp_cycles", "vec_fma", "vec_mem", "scalar", "l1_lines", "l2_lines")


def variant(base: Candidate, sketches: list, sketch_index: int | None, changes: dict) -> Candidate:
    """`base` with `changes` applied to its decisions, replayed in sketch `sketch_index` (None: its own)."""
    decisions = dict(base.decisions)
    decisions.update({k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
    sketch = base.sketch if sketch_index is None else sketches[sketch_index]
    return Candidate(base.task, sketch, decisions)


def network_variants(args: argparse.Namespace, specs: list) -> tuple[Task, Target, dict[str, Candidate], str]:
    """A network task of a networks.py work directory and its best records with the specs' changes."""
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
    cands: dict[str, Candidate] = {}
    for label, rank, sketch_index, changes in specs:
        if rank > len(bases) or bases[rank - 1] is None:
            print(f"{label}: the task has no replayable record of rank {rank}; skipped", flush=True)
            continue
        cands[label] = variant(bases[rank - 1], space.sketches, sketch_index, changes)
    return nt.task, target, cands, f"{args.task} ({args.model}): variants of its best records"


def operator_variants(op: str, specs: list) -> tuple[Task, Target, dict[str, Candidate], str]:
    """A suite operator on the host CPU ('gemm', or at another shape: 'gemm:M=512') and the candidates the specs name:
    `[label, sketch name, decisions]`."""
    task = operator_task(op)
    space = SearchSpace(task)
    cands = {label: Candidate.from_json(task, space.sketch(sketch), decisions) for label, sketch, decisions in specs}
    return task, task.target, cands, f"{op}: chosen candidates"


def main() -> int:
    ap = work_dir_parser(__doc__, rounds=5, require_work_dir=False)
    ap.add_argument("--task", default=None, help="a task of the --work-dir network")
    ap.add_argument("--op", default=None,
                    help="a suite operator (or one at another shape: gemm:M=512) instead of a network task")
    ap.add_argument("--variants", required=True, help="JSON file, or the JSON list itself")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--coefficients", action="append", default=[], metavar="FILE",
                    help="also predict with this coefficients file (its kernel settings too); repeatable")
    ap.add_argument("--cold", action="store_true",
                    help="flush every argument but the first before each run, as a network's weights come in")
    args = ap.parse_args()
    if args.op is not None and (args.task or args.work_dir):
        raise SystemExit("--op names a suite operator: leave out --work-dir and --task")
    if args.op is None and (args.task is None or args.work_dir is None):
        raise SystemExit("give --op OP, or --work-dir and --task")
    if os.path.exists(args.variants):
        with open(args.variants) as f:
            specs = json.load(f)
    else:
        specs = json.loads(args.variants)
    if args.op is not None:
        task, target, found, title = operator_variants(args.op, specs)
    else:
        task, target, found, title = network_variants(args, specs)
    model = StaticCostModel(target)
    others = {os.path.splitext(os.path.basename(p))[0]: StaticCostModel(target, coefficients=p)
              for p in args.coefficients}
    cands: dict[str, Candidate] = {}
    for label, cand in found.items():
        try:
            check_candidate(task, cand)
        except Exception as err:  # noqa: BLE001 - a variant TVM rejects or that computes wrongly is reported
            print(f"{label}: skipped ({type(err).__name__}: {err})", flush=True)
            continue
        cands[label] = cand
    mods = {k: c.to_mod() for k, c in cands.items()}
    times = interleaved(mods, target, rounds=args.rounds, cold=args.cold)
    rows = []
    for label, cand in cands.items():
        mod = mods[label]
        asm = model.assembly_of_module(mod)  # one build for every file: each weighs features of this assembly
        feats = model.features_of_module(mod, asm)
        shown = feats.as_dict()
        rows.append({"variant": label, "sketch": cand.sketch.name, "decisions": dict(cand.key[1]),
                     "predicted_us": model.seconds_from_features(feats) * 1e6,
                     "predicted_us_with": {name: m.seconds_from_features(m.features_of_module(mod, asm)) * 1e6
                                           for name, m in others.items()},
                     "measured_us": statistics.median(times[label]) * 1e6,
                     "rounds_us": [t * 1e6 for t in times[label]],
                     "features": {k: shown[k] for k in SHOWN}})
    report = {"date": time.strftime("%Y-%m-%d"), "model": None if args.op else args.model, "task": args.op or args.task,
              "cpu": str(dict(target.attrs).get("mcpu", "")), "rows": rows,
              "command": "python benchmarks/task_variants.py " + " ".join(sys.argv[1:])}
    lines = [f"# {title}", "",
             f"{report['date']}, {report['cpu'] or 'host CPU'}. `{report['command']}`", "",
             f"Median of {args.rounds} interleaved rounds{', weights flushed before each run' if args.cold else ''}; "
             "every variant checked against the unscheduled program. "
             "Features per core (kernel and list-scheduler cycles, executed instructions, cache lines).", "",
             "| variant | sketch | predicted us | " + "".join(f"predicted us ({n}) | " for n in others)
             + "measured us | " + " | ".join(SHOWN) + " |",
             "|---|---|---|---|" + "---|" * (len(SHOWN) + len(others))]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['sketch'].rsplit('/', 1)[-1]} | {r['predicted_us']:.1f} | "
                     + "".join(f"{r['predicted_us_with'][n]:.1f} | " for n in others)
                     + f"{r['measured_us']:.1f} | " + " | ".join(f"{r['features'][k]:.0f}" for k in SHOWN) + " |")
    write_report(f"task_variants_{args.op or args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
