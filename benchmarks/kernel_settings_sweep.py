"""Screen kernel-model settings on a machine's fidelity rows in minutes instead of a full feature run each.

Only two features come from the kernel model (`kernel_cycles`, `kernel_serial_cycles`), and it reads the TIR alone.
For each setting this recomputes them for every random row of the data file, puts them into the features stored by
an earlier `costmodel_fidelity.py` run (its `--tag`; everything read from the assembly is kept), and fits and scores
leave-one-operator-out as that script does (same pinned parallel-region cost, same L1 refills hidden). The first
setting is always the stored features' own: its kernel cycles must match them, or the stored file is stale.

    python benchmarks/kernel_settings_sweep.py --features-tag znver4_s91_splat \\
        --data benchmarks/results/fidelity_measurements_llvm_znver4_rounds.jsonl \\
        --setting issue_width=4 --setting fma_issue_width=3,huge_body_uops=1000 --tag znver4_s91

A setting found this way is adopted only after a full `costmodel_fidelity.py` run with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np
from costmodel_fidelity import parse_kernel_settings
from fidelity_eval import (
    TargetArg,
    metrics,
    parse_target,
    read_rows,
    scorable,
    shipped_coefficients,
    stored_features,
    suite_operator,
)
from report_files import RESULTS, write_report

import drytune as dt
from drytune.annotate.candidate import Candidate
from drytune.costmodel.calibrate import fit_log_ranking
from drytune.costmodel.cpu_features import FEATURE_NAMES, hide_l1_refills
from drytune.costmodel.kernel import kernel_cycles
from drytune.costmodel.looptree import LoopTree
from drytune.costmodel.model import COEFF_DIR, Coefficients

KERNEL, KERNEL_SERIAL = FEATURE_NAMES.index("kernel_cycles"), FEATURE_NAMES.index("kernel_serial_cycles")


def kernel_features(rows: list, settings: list[dict[str, float]], target: TargetArg = "llvm") -> np.ndarray:
    """(rows, settings, 2): kernel cycles per core and on one core of each row under each setting, for `target`."""
    out = np.zeros((len(rows), len(settings), 2))
    operators: dict = {}
    for i, row in enumerate(rows):
        if row.op not in operators:
            operators[row.op] = suite_operator(row.op, target=target)
        task, space, model = operators[row.op]
        tree = LoopTree.from_mod(Candidate.from_json(task, space.sketch(row.sketch), row.decisions).to_mod())
        for j, setting in enumerate(settings):
            est = kernel_cycles(tree, model.spec, dataclasses.replace(model.kernel, **setting))
            out[i, j] = est.cycles, est.serial_cycles
    return out


def held_out_predictions(values: np.ndarray, seconds: np.ndarray, ops: np.ndarray, launch_cycles: float,
                         target: TargetArg = "llvm") -> np.ndarray:
    """Each row's prediction (cycles) by the log fit on the other operators' rows, as `fidelity_eval.evaluate`
    fits them."""
    spec = dt.resolve_target(target)[1]
    default = Coefficients.load(os.path.join(COEFF_DIR, f"{spec.arch}-default.json")).vector()
    fixed = {FEATURE_NAMES.index("parallel_launches"): launch_cycles} if launch_cycles else None
    pred = np.zeros(len(seconds))
    for op in sorted(set(ops)):
        train = ops != op
        coef = fit_log_ranking(values[train], seconds[train], spec.freq_ghz, groups=ops[train], init=default,
                               fixed=fixed)
        pred[~train] = values[~train] @ coef
    return pred


def held_out(values: np.ndarray, seconds: np.ndarray, ops: np.ndarray, launch_cycles: float,
             target: TargetArg = "llvm") -> dict[str, dict]:
    """Leave-one-operator-out metrics of the log fit, as `fidelity_eval.evaluate` computes them."""
    pred = held_out_predictions(values, seconds, ops, launch_cycles, target)
    return {op: metrics(pred[ops == op], seconds[ops == op]) for op in sorted(set(ops))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features-tag", required=True, help="tag of the stored fidelity_features_llvm_TAG.jsonl")
    ap.add_argument("--data", required=True, help="the measurements file those features were computed for")
    ap.add_argument("--setting", action="append", default=[], metavar="FIELD=VALUE[,FIELD=VALUE]",
                    help="kernel-model overrides on top of the shipped file's settings (repeatable)")
    ap.add_argument("--launch-cycles", type=float, default=1949.0, help="pinned parallel-region cost (0: fitted)")
    ap.add_argument("--target", default=None, metavar="CPU",
                    help="the CPU the stored features were computed for (costmodel_fidelity.py's --target; "
                         "default: this host)")
    ap.add_argument("--tag", default=None, help="results: kernel_settings_sweep_TAG.md/json")
    args = ap.parse_args()
    target = parse_target(args.target)
    settings = [{}] + [parse_kernel_settings(s.split(","), "--setting") for s in args.setting]
    feats = stored_features(RESULTS, args.features_tag)
    pairs = [(r, e) for r, e in scorable(read_rows(args.data), feats) if r.source == "random"]
    rows = [r for r, _ in pairs]
    stored = np.array([e["values"] for _, e in pairs])
    t0 = time.perf_counter()
    kern = kernel_features(rows, settings, target)
    print(f"kernel cycles of {len(rows)} rows under {len(settings)} settings in {time.perf_counter() - t0:.0f} s",
          flush=True)
    if not np.allclose(kern[:, 0, 0], stored[:, KERNEL], rtol=1e-6):
        raise SystemExit(f"the stored features ({args.features_tag}) were computed with other kernel code or settings "
                         "than today's: run costmodel_fidelity.py for a fresh tag first")
    seconds = np.array([r.seconds for r in rows])
    ops = np.array([r.op for r in rows])
    hidden = shipped_coefficients(target).l1_hidden_per_cycle
    table = []
    for j, setting in enumerate(settings):
        values = stored.copy()
        values[:, KERNEL], values[:, KERNEL_SERIAL] = kern[:, j, 0], kern[:, j, 1]
        per_op = held_out(hide_l1_refills(values, hidden), seconds, ops, args.launch_cycles, target)
        medians = {k: float(np.median([m[k] for m in per_op.values()])) for k in ("spearman", "pairwise", "top1",
                                                                                  "top10")}
        changed = int(np.sum(~np.isclose(kern[:, j, 0], kern[:, 0, 0], rtol=1e-9)))
        table.append({"setting": setting, "rows_changed": changed, "medians": medians, "per_op": per_op})
        scores = ", ".join(f"{k} {v:.3f}" for k, v in medians.items())
        print(f"{setting or 'stored'}: {changed} rows changed, {scores}", flush=True)
    command = "python benchmarks/kernel_settings_sweep.py " + " ".join(sys.argv[1:])
    lines = ["# Kernel-model settings screened on stored fidelity features", "", f"{time.strftime('%Y-%m-%d')}. "
             f"`{command}`", "", f"{len(rows)} random rows; leave-one-operator-out medians over {len(set(ops))} "
             "operators; only the kernel model's two features recomputed.", "",
             "| setting | rows changed | Spearman | pairwise | top-1 | top-10 |", "|---|---|---|---|---|---|"]
    for t in table:
        m = t["medians"]
        name = ", ".join(f"{k}={v:g}" for k, v in t["setting"].items()) or "stored"
        lines.append(f"| {name} | {t['rows_changed']} | {m['spearman']:.3f} | {m['pairwise']:.3f} | {m['top1']:.3f} | "
                     f"{m['top10']:.3f} |")
    write_report("kernel_settings_sweep", args.tag, {"command": command, "features_tag": args.features_tag,
                                                     "table": table}, lines)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
