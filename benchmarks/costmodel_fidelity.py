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

`--target CPU` (an LLVM CPU name such as znver4, or a target dict as JSON) computes phase 2's features for that CPU
instead of this host's, cross-compiled: rows measured on another machine are scored for the CPU that ran them, with
that CPU's shipped file as the in-sample column. `--launch-cycles` (and with `--fit-out` `--burst-store-cycles`) must
then be given, since they cannot be measured for another CPU here.

    python benchmarks/costmodel_fidelity.py --target znver4 --tag znver4_cross --launch-cycles 1949 \
        --data benchmarks/results/fidelity_measurements_llvm_znver4_rounds.jsonl

`--collect-searched` adds, per operator, the best predictions of a short tuning run with the current model
(source "search"): the region a search drives to, where a model fitted on random samples alone errs most.
Fits use the random rows only (searched rows in the fits ranked held-out operators worse); the searched rows
are reported apart: how the held-out model ranks them.

    python benchmarks/costmodel_fidelity.py --collect-searched --search-seconds 90 --top 24

`--remeasure OUT` measures every row of the data file again (same candidates, same sources) into OUT, e.g. after
a collection that shared the machine with other work (resumable: rows already in OUT are kept); with
`--remeasure-limit N`, only the first N rows of each operator and source: a smaller calibration of a new machine
from another machine's candidates (session 19 cut the Zen 5 subset, Zen 4's first 100 random rows per operator,
with a script before this option existed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from fidelity_eval import static_search_picks

import drytune as dt
from drytune import workloads
from drytune.costmodel.dataset import collect, measure_candidates, read_rows

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA = os.path.join(RESULTS, "fidelity_measurements_llvm.jsonl")


def timing(rounds: int) -> dict[str, int]:
    """How each candidate is timed: 3 repeats back to back, or one per round over `rounds` interleaved rounds."""
    return {"repeat": 3} if rounds == 1 else {"repeat": 1, "rounds": rounds}


def run_collect(ops: list[str], samples: int, path: str, rounds: int = 1) -> None:
    for name in ops:
        task = workloads.get(name).task()
        t0 = time.perf_counter()
        n = fails = 0
        for row in collect(task, samples, path, seed=11, **timing(rounds)):
            n += 1
            fails += not row.ok
        print(f"{name:20s} measured {n:4d} new candidates ({fails} failed) in {time.perf_counter() - t0:6.1f}s",
              flush=True)


def run_collect_searched(ops: list[str], seconds: float, top: int, path: str) -> None:
    """Tune each operator for `seconds` with the shipped model, then measure its `top` best predictions."""
    for name in ops:
        task = workloads.get(name).task()
        t0 = time.perf_counter()
        cands, _ = static_search_picks(task, seconds, top)
        rows = list(measure_candidates(cands, path, source="search"))
        fails = sum(not r.ok for r in rows)
        print(f"{name:20s} searched {seconds:.0f}s, measured {len(rows):3d} new of its {len(cands)} best predictions "
              f"({fails} failed) in {time.perf_counter() - t0:6.1f}s", flush=True)


def run_remeasure(ops: list[str], data: str, out: str, limit: int | None = None, rounds: int = 1) -> None:
    """Measure the candidates of `data` again into `out`, operator by operator, keeping each row's source; with
    `limit`, only the first `limit` rows of each operator and source (a smaller calibration of a new machine);
    with `rounds` > 1, all of an operator's candidates (both sources) are timed in turn, once per round."""
    rows = [r for r in read_rows(data) if r.op in ops]
    for name in ops:
        task = workloads.get(name).task()
        space = dt.SearchSpace(task)
        t0 = time.perf_counter()
        # both sources in one call: with rounds, they are timed in the same rounds
        picked = [r for src in ("random", "search")
                  for r in [r for r in rows if r.op == name and r.source == src][:limit]]
        n = sum(1 for _ in measure_candidates([r.candidate(space) for r in picked], out,
                                               source=[r.source for r in picked], **timing(rounds)))
        print(f"{name:20s} measured {n:4d} candidates again in {time.perf_counter() - t0:6.1f}s", flush=True)


def parse_kernel_settings(items: list[str] | None, option: str = "--kernel") -> dict[str, float | bool] | None:
    """`--kernel FIELD=VALUE` arguments (or another `option`'s) as a dict (None when none are given, {} for
    'none'); VALUE is a number, or true/false for a switch."""
    if items is None:
        return None
    settings = {}
    for item in items:
        if item == "none":
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{option} expects FIELD=VALUE or 'none', got {item!r}")
        switch = {"true": True, "false": False}.get(value.lower())
        settings[name] = float(value) if switch is None else switch
    return settings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collect", action="store_true", help="measure candidates (phase 1)")
    ap.add_argument("--collect-searched", action="store_true",
                    help="measure the best predictions of a short tuning run per operator")
    ap.add_argument("--search-seconds", type=float, default=90.0)
    ap.add_argument("--top", type=int, default=24, help="best predictions measured per operator")
    ap.add_argument("--remeasure", default=None, metavar="OUT", help="measure every row of the data file again")
    ap.add_argument("--remeasure-limit", type=int, default=None, metavar="N",
                    help="with --remeasure: only the first N rows of each operator and source")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --collect or --remeasure: time each operator's candidates in turn over this many "
                         "rounds, one timing per round (default 1: 3 repeats of each candidate back to back)")
    ap.add_argument("--ops", default=",".join(workloads.SUITE))
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--data", default=None, help="measurements file (default: by --tag)")
    ap.add_argument("--tag", default="", help="machine tag: files end in _TAG (another CPU than the shipped data's)")
    ap.add_argument("--fit-out", default=None, help="also write coefficients fitted on every operator to this file")
    ap.add_argument("--launch-cycles", type=float, default=None,
                    help="cycles per parallel-region entry pinned in every fit (default: measured now; 0: fitted)")
    ap.add_argument("--burst-store-cycles", type=float, default=None,
                    help="with --fit-out: cycles per line of a network kernel's burst of stores, recorded in the file "
                         "(default: measured now)")
    ap.add_argument("--l1-hidden", type=float, default=None,
                    help="L1 refills per kernel cycle taken as hidden in every fit (default: the shipped file's)")
    ap.add_argument("--kernel", action="append", default=None, metavar="FIELD=VALUE",
                    help="kernel-model setting of the features (repeatable; default: the shipped file's; "
                         "'none': the defaults), recorded in a --fit-out file")
    ap.add_argument("--target", default=None, metavar="CPU",
                    help="phase 2: features for this LLVM CPU (or JSON target dict) instead of the host's, "
                         "cross-compiled; needs --launch-cycles")
    ap.add_argument("--pin", action="append", default=None, metavar="FEATURE=CYCLES",
                    help="pin a feature's coefficient in every fit (repeatable; e.g. asm_outside_shuffles=0 leaves "
                         "that feature out)")
    ap.add_argument("--fast-weight", type=float, default=1.0,
                    help="weight of the rows in each operator's fastest quarter in every fit (default 1: unweighted)")
    args = ap.parse_args()
    if args.target and (args.collect or args.collect_searched or args.remeasure):
        raise SystemExit("--target scores rows for another CPU; measuring (--collect, --collect-searched, "
                         "--remeasure) times candidates on this host's CPU only")
    ops = args.ops.split(",")
    if args.data is None:
        args.data = DATA.replace(".jsonl", f"_{args.tag}.jsonl") if args.tag else DATA
    if args.remeasure:
        run_remeasure(ops, args.data, args.remeasure, args.remeasure_limit, args.rounds)
        return 0
    if args.collect or args.collect_searched:
        if args.collect:
            run_collect(ops, args.samples, args.data, args.rounds)
        if args.collect_searched:
            run_collect_searched(ops, args.search_seconds, args.top, args.data)
        return 0
    from fidelity_eval import evaluate, parse_target  # noqa: PLC0415 - phase 2 lives beside this script

    return evaluate(ops, args.data, RESULTS, tag=args.tag, fit_out=args.fit_out, launch_cycles=args.launch_cycles,
                    l1_hidden=args.l1_hidden, kernel=parse_kernel_settings(args.kernel),
                    burst_cycles=args.burst_store_cycles, fast_weight=args.fast_weight,
                    target=parse_target(args.target), pins=parse_kernel_settings(args.pin, "--pin"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
