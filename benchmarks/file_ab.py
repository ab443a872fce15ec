"""Two coefficients files, each tuning the same operators: drytune's static search at the same budget and seed with
file A and with file B, then both picks timed interleaved over `--rounds` (median of the per-round ratios B / A;
below 1: B's pick is faster). How a refitted file is checked before it is shipped: the fidelity tables score random
candidates, this scores what a search with each file hands its user. With `--trials` both searches score the same
number of candidates. Each file also prices both picks: where both order them as they timed, the ratio comes from
what the two searches met, not from the files. Nothing else may run on the machine meanwhile.

    python benchmarks/file_ab.py --a old=costmodel/coefficients/x86-emeraldrapids-calibrated.json \\
        --b new=benchmarks/results/coefficients_emeraldrapids_s93_narrow.json --ops gemm,max_pool2d --trials 200 \\
        --tag emeraldrapids_s93
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time

from op_tuning import interleaved
from report_files import write_report

import drytune as dt
from drytune import workloads
from drytune.costmodel.model import StaticCostModel


def named_file(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {text!r}")
    return name, path


def cross_prices(task, files: dict[str, str], picks: dict) -> dict[str, dict[str, float]]:
    """Each file's price of each file's pick (seconds): file -> pick's file -> price."""
    names = list(picks)
    prices = {f: StaticCostModel(task.target, coefficients=path).predict(task, [picks[n] for n in names])
              for f, path in files.items()}
    return {f: {n: float(p) for n, p in zip(names, prices[f], strict=True)} for f in files}


def ordered_as_timed(row: dict, file: str, a: str, b: str) -> str:
    """"yes" when `file` prices the two picks of `row` in the order their per-round ratio came out, "no" when not,
    "tie" when it prices them the same (the same kernel)."""
    prices = row["prices_s"][file]
    if abs(prices[b] - prices[a]) <= 1e-9 * max(prices[a], prices[b]):
        return "tie"
    return "yes" if (prices[b] < prices[a]) == (row["ratio_b_over_a"] < 1) else "no"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=named_file, required=True, metavar="NAME=FILE")
    ap.add_argument("--b", type=named_file, required=True, metavar="NAME=FILE")
    ap.add_argument("--ops", required=True, help="comma-separated suite operators")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds of tuning per operator and file")
    ap.add_argument("--trials", type=int, default=None,
                    help="candidates scored per operator and file instead of --budget: a file that scores faster "
                         "then searches no further than the other, and the picks differ by the files alone")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    (a, pa), (b, pb) = args.a, args.b
    files = {a: pa, b: pb}
    if len(files) != 2:
        raise SystemExit("the two files need different names")
    rows = []
    for op in args.ops.split(","):
        task = workloads.get(op).task()
        mods, info, picks = {}, {}, {}
        for name, path in files.items():
            res = dt.tune(task, seconds=None if args.trials else args.budget, trials=args.trials, progress=False,
                          work_dir=tempfile.mkdtemp(prefix="dt-ab-"), seed=args.seed,
                          cost_model=functools.partial(StaticCostModel, coefficients=path))
            mods[name], picks[name] = res.best.to_mod(), res.best
            info[name] = {"trials": res.trials, "predicted_s": res.predicted, "sketch": res.best.sketch.name,
                          "decisions": json.loads(res.best.decisions_json())}
            print(f"{op} {name}: {res.trials} candidates, predicted {res.predicted * 1e3:.4f} ms", flush=True)
        times = interleaved(mods, task.target, rounds=args.rounds)
        ratio = statistics.median(tb / ta for ta, tb in zip(times[a], times[b], strict=True))
        row = {"op": op, "info": info, "round_s": times, "ratio_b_over_a": ratio,
               "median_s": {k: statistics.median(v) for k, v in times.items()},
               "prices_s": cross_prices(task, files, picks)}
        rows.append(row)
        print(f"{op}: {b} / {a} = {ratio:.3f} ({row['median_s'][a] * 1e3:.4f} vs {row['median_s'][b] * 1e3:.4f} ms)",
              flush=True)
    command = "python benchmarks/file_ab.py " + " ".join(sys.argv[1:])
    effort = f"{args.trials} candidates" if args.trials else f"{args.budget:g} s"
    lines = ["# Two coefficients files tuning the same operators", "", f"{time.strftime('%Y-%m-%d')}. `{command}`", "",
             f"A = `{a}` ({pa}), B = `{b}` ({pb}); {effort} of static search each (seed {args.seed}), picks "
             f"timed interleaved over {args.rounds} rounds; ratio = median of per-round B / A (below 1: B faster).",
             "A file that orders the two picks as they timed would have handed over the faster one had its search met "
             "both; where both files do, a ratio away from 1 comes from the searches, not the files.",
             "", f"| op | {a} (ms) | {b} (ms) | {b} / {a} | sketches | orders the picks as timed |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['op']} | {r['median_s'][a] * 1e3:.4f} | {r['median_s'][b] * 1e3:.4f} | "
              f"{r['ratio_b_over_a']:.3f} | {r['info'][a]['sketch']} / {r['info'][b]['sketch']} | "
              + ", ".join(f"{f}: {ordered_as_timed(r, f, a, b)}" for f in files) + " |"
              for r in rows]
    if rows:
        lines += ["", f"Median over operators: {statistics.median(r['ratio_b_over_a'] for r in rows):.3f}."]
    effort_fields = {"trials": args.trials} if args.trials else {"budget_s": args.budget}
    write_report("file_ab", args.tag, {"command": command, "files": files, **effort_fields, "rows": rows}, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
