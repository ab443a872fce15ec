"""How far off the static model is, by the size of the largest loop body in the generated assembly.

Each measured random candidate of a machine's fidelity data is built to assembly again (no run) and its largest
innermost loop (or straight-line block) doing FP work is counted in instructions; the log residual
log(measured / predicted), with each operator's mean removed, is then summarised per size bucket. A positive
residual means slower than predicted. Predictions use the cached features of `costmodel_fidelity.py` and a
coefficients file; pass an older features file and coefficients file (e.g. from `git show`) to see a model before
a change.

    python benchmarks/body_size_residuals.py --tag znver5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fidelity_eval import _row_key, save_report, suite_operator  # noqa: E402

import drytune as dt  # noqa: E402
from drytune.costmodel.asm import analyze_asm  # noqa: E402
from drytune.costmodel.cpu_features import FEATURE_NAMES  # noqa: E402
from drytune.costmodel.dataset import MeasuredRow, read_rows  # noqa: E402
from drytune.costmodel.fpratio import _fp_units  # noqa: E402
from drytune.costmodel.looptree import LoopTree  # noqa: E402
from drytune.costmodel.model import Coefficients, default_coefficients_path  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BUCKETS = (0, 100, 300, 600, 1000, 2000, 4000)


def largest_body(args: tuple[str, list[dict]]) -> list[tuple[str, int | None]]:
    """(row key, instructions of the largest FP unit of its assembly, None if it cannot be built) per row."""
    op, rows = args
    _, space, model = suite_operator(op)
    out = []
    for d in rows:
        row = MeasuredRow(**d)
        try:
            mod = row.candidate(space).to_mod()
            program, _, counts = analyze_asm(model._cpu.assembly(mod), model.spec.arch,
                                             LoopTree.from_mod(mod).preorder())
            sizes = [sum(len(b) for b in blocks) for blocks, _, n, _ in _fp_units(program, counts) if n > 0]
            out.append((_row_key(row), max(sizes, default=0)))
        except Exception:  # noqa: BLE001 - an unbuildable row has no size; it is left out
            out.append((_row_key(row), None))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", required=True, help="machine tag of the fidelity data")
    ap.add_argument("--features", default=None, help="features file (default: the tag's cache)")
    ap.add_argument("--coefficients", default=None, help="coefficients file (default: the host's shipped one)")
    ap.add_argument("--label", default="current", help="name of this model in the output files")
    args = ap.parse_args()
    data = os.path.join(RESULTS, f"fidelity_measurements_llvm_{args.tag}.jsonl")
    feat_path = args.features or os.path.join(RESULTS, f"fidelity_features_llvm_{args.tag}.jsonl")
    with open(feat_path) as f:
        feats = {e["key"]: e for e in map(json.loads, f) if "values" in e}
    rows = [r for r in read_rows(data) if r.ok and r.source == "random" and _row_key(r) in feats]
    target, spec = dt.resolve_target("llvm")
    cpu = str(dict(target.attrs).get("mcpu", "")) or None
    coef = Coefficients.load(args.coefficients or default_coefficients_path(spec, cpu)).vector(FEATURE_NAMES)
    by_op: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_op[r.op].append(dataclasses.asdict(r))
    jobs = [(op, rs[i:i + 25]) for op, rs in by_op.items() for i in range(0, len(rs), 25)]
    sizes: dict[str, int | None] = {}
    with multiprocessing.Pool(os.cpu_count() or 1) as pool:
        for got in pool.imap_unordered(largest_body, jobs):
            sizes.update(got)
    rows = [r for r in rows if sizes.get(_row_key(r)) is not None]
    resid = {}
    for op in by_op:
        mine = [r for r in rows if r.op == op]
        logs = np.array([np.log(r.seconds / float(np.dot(coef, feats[_row_key(r)]["values"]))) for r in mine])
        for r, x in zip(mine, logs - logs.mean(), strict=True):
            resid[_row_key(r)] = float(x)
    table = []
    edges = (*BUCKETS, float("inf"))
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        sel = [r for r in rows if lo <= sizes[_row_key(r)] < hi]
        if sel:
            x = np.array([resid[_row_key(r)] for r in sel])
            table.append({"instructions": f"{lo}-{hi if hi != float('inf') else ''}", "rows": len(sel),
                          "operators": len({r.op for r in sel}), "mean": float(x.mean()),
                          "median": float(np.median(x))})
    lines = [f"Log residual log(measured / predicted), each operator's mean removed, of {len(rows)} random rows on "
             f"`{args.tag}` by the largest FP loop body of their assembly ({args.label} model: {feat_path}, "
             f"coefficients {args.coefficients or 'shipped'}). Positive: slower than predicted.", "",
             "| largest body (instructions) | rows | operators | mean | median |", "|---|---|---|---|---|"]
    lines += [f"| {t['instructions']} | {t['rows']} | {t['operators']} | {t['mean']:+.3f} | {t['median']:+.3f} |"
              for t in table]
    text = "\n".join(lines) + "\n"
    print(text)
    save_report(os.path.join(RESULTS, f"body_size_residuals_{args.tag}_{args.label}"), text,
                {"rows": table, "features": feat_path, "coefficients": args.coefficients})
    return 0


if __name__ == "__main__":
    sys.exit(main())
