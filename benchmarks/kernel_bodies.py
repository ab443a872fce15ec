"""Measured cycles per unrolled body of chosen candidates against the kernel model's bounds for that body.

Reads reports of `task_variants.py --op` (candidates already measured in interleaved rounds, nothing is run here),
finds each candidate's costliest statement in the kernel model (`costmodel/kernel.py`) and converts the measured
time into cycles per execution of that statement's body on one core (at the spec's clock, work divided by the
program's parallel speed-up). Side by side with the body's throughput bounds (FP pipes, loads, stores, issue) this
shows which bound a kernel really runs at, e.g. whether a body that moves its accumulators through memory issues at
`large_body_width` micro-ops per cycle whatever its size:

    python benchmarks/kernel_bodies.py --reports task_variants_gemm_emeraldrapids_s48_kruns \\
        task_variants_gemm_emeraldrapids_s48_factors task_variants_gemm_emeraldrapids --tag gemm_emeraldrapids

`--kernel FIELD=VALUE` computes the bounds with other kernel-model settings (as in costmodel_fidelity.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from costmodel_fidelity import parse_kernel_settings
from report_files import RESULTS, write_report
from space_ablation import operator_task

from drytune.annotate.candidate import Candidate
from drytune.costmodel.cpu_features import parallel_speedup
from drytune.costmodel.kernel import statement_details
from drytune.costmodel.looptree import LoopTree
from drytune.costmodel.model import StaticCostModel
from drytune.space import SearchSpace

BOUNDS = ("fp", "load", "store", "issue", "latency")


def body_row(model: StaticCostModel, cand: Candidate, measured_us: float) -> dict:
    """The costliest statement's body of `cand`: the model's bounds and cycles per body, and the measured cycles."""
    tree = LoopTree.from_mod(cand.to_mod())
    _, _, bound, det = max(statement_details(tree, model.spec, model.kernel), key=lambda s: s[1])
    speedup, _ = parallel_speedup(tree, model.spec.cores)
    per_core_bodies = det["executions"] / speedup
    return {"sketch": cand.sketch.name, "bound": bound, "bounds": {b: det[b] for b in BOUNDS},
            "uops": det["uops"], "accumulators": det["accumulators"], "statements": det["statements"],
            "inner": det["inner_extent"], "inner_is_reduction": det["inner_is_reduction"],
            "predicted_body": det["body_cycles"], "fp_ops": det["fp_ops"],
            "measured_body": measured_us * 1e-6 * model.spec.freq_ghz * 1e9 / per_core_bodies,
            "acc_in_memory": det["acc_in_memory"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", nargs="+", required=True,
                    help="task_variants.py --op reports (names under benchmarks/results, without .json, or paths)")
    ap.add_argument("--kernel", action="append", default=None, metavar="FIELD=VALUE",
                    help="kernel-model setting (repeatable; default: the shipped coefficients file's)")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    settings = parse_kernel_settings(args.kernel) or {}
    model = None
    rows = []
    for name in args.reports:
        path = name if os.path.exists(name) else os.path.join(RESULTS, name + ".json")
        with open(path) as f:
            report = json.load(f)
        if report.get("model"):
            raise SystemExit(f"{path}: a network task's report; only --op reports name their candidates in full")
        task = operator_task(report["task"])
        if model is None:
            model = StaticCostModel(task.target, kernel_overrides=settings)
        space = SearchSpace(task)
        for r in report["rows"]:
            cand = Candidate.from_json(task, space.sketch(r["sketch"]), r["decisions"])
            rows.append({"report": os.path.basename(path)[:-5], "variant": r["variant"],
                         "measured_us": r["measured_us"], **body_row(model, cand, r["measured_us"])})
            print(f"{r['variant']}: done", flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "cpu": str(dict(model.target.attrs).get("mcpu", "")),
              "kernel_settings": settings, "freq_ghz": model.spec.freq_ghz, "rows": rows,
              "command": "python benchmarks/kernel_bodies.py " + " ".join(sys.argv[1:])}
    lines = ["# Measured cycles per body against the kernel model's bounds", "",
             f"{report['date']}, {report['cpu']}. `{report['command']}`", "",
             f"The costliest statement of each candidate; measured: the report's median time of the whole candidate x "
             f"{model.spec.freq_ghz} GHz / that statement's body executions per core. Bounds in cycles per body; "
             "'in memory': every body loads and stores its accumulators.", "",
             "| report | variant | sketch | FP ops | accumulators | in memory | uops | " + " | ".join(BOUNDS)
             + " | predicted | measured | measured / predicted | uops / measured |",
             "|---|---|---|---|---|---|---|" + "---|" * len(BOUNDS) + "---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['report']} | {r['variant']} | {r['sketch'].rsplit('/', 1)[-1]} | {r['fp_ops']:.0f} | "
                     f"{r['accumulators']} | {'yes' if r['acc_in_memory'] else 'no'} | {r['uops']:.0f} | "
                     + " | ".join(f"{r['bounds'][b]:.1f}" for b in BOUNDS)
                     + f" | {r['predicted_body']:.1f} | {r['measured_body']:.1f} | "
                       f"{r['measured_body'] / r['predicted_body']:.2f} | {r['uops'] / r['measured_body']:.2f} |")
    write_report("kernel_bodies", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
