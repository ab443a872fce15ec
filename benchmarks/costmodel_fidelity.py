"""Cost-model fidelity: how well the static model ranks measured candidates, per suite operator.

Phase 1 (`--collect`): 200 random candidates per operator measured on this CPU (3 repeats each; the spread
is kept for the noise report), appended to benchmarks/results/fidelity_measurements_llvm.jsonl (resumable).
Phase 2 (default): features of every measured candidate; coefficients fitted leave-one-operator-out
(never on the operator being scored); Spearman rho, Kendall tau, pairwise accuracy and Tuna's top-k
performance ratio (k = 1, 10) for the static model, a FLOP-count baseline and MetaSchedule's XGBoost model
trained on 32 / 64 / 128 measured samples of the same operator.

    python benchmarks/costmodel_fidelity.py --collect --samples 200
    python benchmarks/costmodel_fidelity.py

On another machine, `--tag NAME` keeps its measurements, features and report in files ending in _NAME.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import drytune as dt
from drytune import workloads
from drytune.costmodel.dataset import collect

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA = os.path.join(RESULTS, "fidelity_measurements_llvm.jsonl")


def run_collect(ops: list[str], samples: int, path: str) -> None:
    for name in ops:
        task = dt.Task.from_prim_func(workloads.get(name).prim_func(), "llvm", name=name)
        t0 = time.perf_counter()
        n = fails = 0
        for row in collect(task, samples, path, seed=11):
            n += 1
            fails += not row.ok
        print(f"{name:20s} measured {n:4d} new candidates ({fails} failed) in {time.perf_counter() - t0:6.1f}s",
              flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collect", action="store_true", help="measure candidates (phase 1)")
    ap.add_argument("--ops", default=",".join(workloads.SUITE))
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--data", default=None, help="measurements file (default: by --tag)")
    ap.add_argument("--tag", default="", help="machine tag: files end in _TAG (another CPU than the shipped data's)")
    ap.add_argument("--fit-out", default=None, help="also write coefficients fitted on every operator to this file")
    args = ap.parse_args()
    ops = args.ops.split(",")
    if args.data is None:
        args.data = DATA.replace(".jsonl", f"_{args.tag}.jsonl") if args.tag else DATA
    if args.collect:
        run_collect(ops, args.samples, args.data)
        return 0
    from fidelity_eval import evaluate  # noqa: PLC0415 - phase 2 lives beside this script

    return evaluate(ops, args.data, RESULTS, tag=args.tag, fit_out=args.fit_out)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
