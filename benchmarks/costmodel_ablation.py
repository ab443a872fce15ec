"""Cost-model ablation: leave-one-operator-out ranking of the fidelity data under model variants.

Each measured candidate is built to assembly once; its features are then extracted under every variant
(list scheduler with or without Tuna's false dependences, one iteration of a loop body or its steady state when
iterations overlap, data movement with or without cache set conflicts),
coefficients are fitted leave-one-operator-out per variant exactly as in `costmodel_fidelity.py`, and the
medians over operators are printed and written to benchmarks/results/costmodel_ablation_TAG.md.

    python benchmarks/costmodel_ablation.py --tag znver3_v2
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# name -> (set conflicts in data movement, false dependences in the list scheduler, steady-state loop bodies)
VARIANTS = {
    "Tuna's rules (no set conflicts, false dependences)": (False, True, False),
    "set conflicts": (True, True, False),
    "register renaming": (False, False, False),
    "set conflicts + register renaming (default)": (True, False, False),
    "default + steady-state loop bodies": (True, False, True),
}


def _features_job(args: tuple[str, list[dict]]) -> list[dict]:
    """Features of each row under every variant (one assembly build per row)."""
    import drytune as dt
    from drytune import workloads
    from drytune.costmodel.cpu_features import CPUFeatureExtractor
    from drytune.costmodel.datamove import DataMoveConfig, default_counter
    from drytune.costmodel.dataset import MeasuredRow
    from drytune.costmodel.listsched import ListScheduler, SchedConfig

    op, rows = args
    task = workloads.get(op).task()
    space = dt.SearchSpace(task)
    target, spec = dt.resolve_target("llvm")
    mcpu = str(dict(target.attrs).get("mcpu", "")) or None
    extractors = {}
    for name, (conflicts, false_deps, steady) in VARIANTS.items():
        ex = CPUFeatureExtractor(target, spec)
        ex.scheduler = ListScheduler.for_spec(spec, SchedConfig(false_dependences=false_deps, steady_state=steady),
                                              cpu=mcpu)
        ex.footprints = default_counter(DataMoveConfig(set_conflicts=conflicts))
        extractors[name] = ex
    out = []
    for d in rows:
        row = MeasuredRow(**d)
        try:
            mod = row.candidate(space).to_mod()
            asm = next(iter(extractors.values())).assembly(mod)
            entry = {"op": op, "seconds": row.seconds, "source": row.source}
            for name, ex in extractors.items():
                entry[name] = list(ex.extract(mod, asm).values)
        except Exception as err:  # noqa: BLE001 - a row that no longer replays or builds is left out, counted
            print(f"{op}: row left out ({type(err).__name__}: {str(err)[:100]})", flush=True)
            continue
        out.append(entry)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", default="", help="machine tag of the fidelity data (files ending in _TAG)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    suffix = f"_{args.tag}" if args.tag else ""
    from drytune.costmodel.dataset import read_rows

    rows = [r for r in read_rows(os.path.join(RESULTS, f"fidelity_measurements_llvm{suffix}.jsonl")) if r.ok]
    by_op: dict[str, list[dict]] = {}
    for r in rows:
        by_op.setdefault(r.op, []).append(r.__dict__ | {"times": list(r.times)})
    jobs = [(op, chunk[i:i + 12]) for op, chunk in by_op.items() for i in range(0, len(chunk), 12)]
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        entries = [e for part in pool.imap_unordered(_features_job, jobs) for e in part]
    print(f"features of {len(entries)} candidates under {len(VARIANTS)} variants in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)

    from fidelity_eval import metrics, save_report

    import drytune as dt
    from drytune.costmodel.calibrate import fit_log_ranking
    from drytune.costmodel.model import COEFF_DIR, Coefficients

    _, spec = dt.resolve_target("llvm")
    init = Coefficients.load(os.path.join(COEFF_DIR, f"{spec.arch}-default.json")).vector()
    ops = sorted({e["op"] for e in entries})
    random = [e for e in entries if e["source"] == "random"]
    searched = [e for e in entries if e["source"] != "random"]
    lines = [f"Cost-model ablation on this CPU ({time.strftime('%Y-%m-%d')}), {len(random)} measured random "
             f"candidates of {len(ops)} operators, coefficients fitted on the other operators' random rows per "
             "variant; searched rows (a search's measured best predictions, never fitted) ranked by the same "
             "held-out fit, where an operator has 8 or more. Medians over operators.", "",
             "| variant | Spearman | pairwise | top-1 | top-10 | searched rows: Spearman / top-1 / top-10 |",
             "|---|---|---|---|---|---|"]
    keys = ("spearman", "pairwise", "top1", "top10")
    table = {}
    for name in VARIANTS:
        per_op, per_op_searched = {}, {}
        for op in ops:
            train = [e for e in random if e["op"] != op]
            coef = fit_log_ranking(np.array([e[name] for e in train]), np.array([e["seconds"] for e in train]),
                                   spec.freq_ghz, groups=[e["op"] for e in train], init=init)
            for test, out in (([e for e in random if e["op"] == op], per_op),
                              ([e for e in searched if e["op"] == op], per_op_searched)):
                if len(test) >= 8:
                    out[op] = metrics(np.array([e[name] for e in test]) @ coef, np.array([e["seconds"] for e in test]))
        med = {k: float(np.median([m[k] for m in per_op.values()])) for k in keys}
        med_s = {k: float(np.median([m[k] for m in per_op_searched.values()])) for k in keys} if per_op_searched \
            else None
        table[name] = {"median": med, "per_op": per_op, "searched_median": med_s, "searched_per_op": per_op_searched}
        srch = f"{med_s['spearman']:.2f} / {med_s['top1']:.2f} / {med_s['top10']:.2f} ({len(per_op_searched)} ops)" \
            if med_s else "-"
        lines.append(f"| {name} | {med['spearman']:.2f} | {med['pairwise']:.2f} | {med['top1']:.2f} | "
                     f"{med['top10']:.2f} | {srch} |")
        print(lines[-1], flush=True)
    save_report(os.path.join(RESULTS, f"costmodel_ablation{suffix}"), "\n".join(lines) + "\n", table)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
