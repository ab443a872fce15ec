"""Budget adherence with slow-to-build candidates: one operator tuned for a time budget under two scorer settings.

A candidate that LLVM cannot build within the per-candidate time limit hangs its Ray actor until the limit (times
the batch size) runs out; this script measures how far each setting overruns the budget.

    python benchmarks/scorer_timeout.py --op batch_matmul --seconds 90
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import drytune as dt
from drytune import workloads
from drytune.search.config import ScorerConfig
from drytune.search.ray_scorer import RayScorer

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="batch_matmul")
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--before", default="4,60", help="the setting to compare with the default: BATCH,SECONDS")
    ap.add_argument("--out", default=os.path.join(RESULTS, "scorer_timeout"))
    args = ap.parse_args()
    task = workloads.get(args.op).task()
    batch, limit = args.before.split(",")
    settings = {f"before (batch {batch}, {limit} s)": ScorerConfig(batch_size=int(batch),
                                                                   timeout_s_per_candidate=float(limit)),
                "default": ScorerConfig()}
    rows = {}
    for name, config in settings.items():
        scorer = RayScorer(config=config)
        t0 = time.perf_counter()
        try:
            res = dt.tune(task, seconds=args.seconds, scorer=scorer, progress=False, seed=args.seed,
                          work_dir=tempfile.mkdtemp(prefix="dt-"))
        finally:
            wall = time.perf_counter() - t0
            scorer.close()
        rows[name] = {"batch_size": config.batch_size, "timeout_s_per_candidate": config.timeout_s_per_candidate,
                      "wall_s": wall, "trials": res.trials, "invalid": len(res.invalid),
                      "invalid_reasons": sorted({why for _, why in res.invalid}), "predicted_s": res.predicted,
                      "actors_replaced": scorer.replaced}
        print(name, json.dumps(rows[name]), flush=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "op": args.op, "budget_s": args.seconds, "rows": rows}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
