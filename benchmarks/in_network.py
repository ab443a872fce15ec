"""Which isolated timing tells how a kernel runs inside its network: hot (repeated, its weights cached) or cold
(every argument but the activation flushed before each run).

For a `networks.py` work directory after its build phase: each kernel call of drytune's and MetaSchedule's built
networks is timed in place (the relax VM's instrument hook around every call, rounds alternating between the two
libraries), and each task's two kernels are built alone and timed hot and cold (rounds alternating). Reported: the
median of in-network / isolated time per kernel, and how well each isolated timing predicts the ratio of drytune's
kernel to MetaSchedule's inside the network (correlation of log ratios, agreement on which is faster).

    python benchmarks/in_network.py --model resnet50 --work-dir drytune-work/networks_rocketlake_s59r_b150 \\
        --tag rocketlake_s59
"""

from __future__ import annotations

import collections
import os
import statistics
import sys
import time

import numpy as np
import tvm
from network_tasks import either_records, marked_and_plain_tasks, ms_best, open_work_dir, picked_mod, work_dir_parser
from networks import model_dir, random_arrays
from report_files import write_report
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from drytune import zoo
from drytune.measure import MeasureWorker, cold_timing, measure_modules
from drytune.records import RecordStore

LIBRARIES = {"drytune": "drytune.so", "metaschedule": "ms_long.so"}


def in_place_times(path: str, inputs: list, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per library: seconds spent in each called function per network run, one entry per round."""
    timed, per_run = {}, {}
    for name, lib in LIBRARIES.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(os.path.join(path, lib)), tvm.cpu())
        spent: dict[str, float] = collections.defaultdict(float)
        started: dict[str, float] = {}

        def hook(func, symbol, before, ret, *args, spent=spent, started=started) -> int:
            if before:
                started[symbol] = time.perf_counter()
            else:
                spent[symbol] += time.perf_counter() - started[symbol]
            return 0  # carry on

        vm.set_instrument(hook)
        args = [tvm.runtime.tensor(x, tvm.cpu()) for x in inputs]
        vm["main"](*args)  # first run: allocations, caches
        timed[name] = (vm, args, spent)
        per_run[name] = collections.defaultdict(list)
    for _ in range(rounds):
        for name, (vm, args, spent) in timed.items():
            spent.clear()
            vm["main"](*args)
            for symbol, s in spent.items():
                per_run[name][symbol].append(s)
    return per_run


def isolated_times(mods: list, target, worker: MeasureWorker, rounds: int) -> tuple[list[float], list[float]]:
    """Median hot and cold seconds of each module, hot and cold alternating round by round."""
    hot: list[list[float]] = [[] for _ in mods]
    cold: list[list[float]] = [[] for _ in mods]
    for _ in range(rounds):
        for flush, out in ((False, hot), (True, cold)):
            timing = cold_timing(15) if flush else {"number": 3, "repeat": 3, "min_repeat_ms": 50}
            res = measure_modules(mods, target, worker=worker, **timing)
            for got, r in zip(out, res, strict=True):
                got.append(r.seconds)
    return [statistics.median(t) for t in hot], [statistics.median(t) for t in cold]


def main() -> int:
    ap = work_dir_parser(__doc__, rounds=5)
    ap.add_argument("--fast-math", action="store_true", help="the network as networks.py --fast-math tuned it")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    _, examples = zoo.get_model(args.model)
    in_place = in_place_times(model_dir(os.path.abspath(args.work_dir), args.model), random_arrays(examples, 0),
                              args.rounds)
    tasks, plain = marked_and_plain_tasks(args.model, args.threads, target, args.fast_math)
    choices = either_records(RecordStore(os.path.join(mdir, "drytune")), tasks, plain)
    db = ms.database.JSONDatabase(work_dir=os.path.join(mdir, "ms_long_db"), allow_missing=False)
    rows = []
    with MeasureWorker() as worker:
        for nt, pt, choice in zip(tasks, plain, choices, strict=True):
            theirs = ms_best(db, pt.task, target)
            if theirs is None or any(nt.name not in in_place[lib] for lib in LIBRARIES):
                continue  # no MetaSchedule kernel, or the name is not called as such in a built network
            hot, cold = isolated_times([picked_mod(choice, nt), theirs], target, worker, 3)
            row = {"task": nt.name, "calls": nt.weight}
            for i, lib in enumerate(LIBRARIES):
                row[lib] = {"in_network_s": statistics.median(in_place[lib][nt.name]) / nt.weight,
                            "hot_s": hot[i], "cold_s": cold[i]}
            rows.append(row)
            print(nt.name, {lib: {k: f"{v * 1e3:.3f}" for k, v in row[lib].items()} for lib in LIBRARIES}, flush=True)
    stats = {}
    for kind in ("hot", "cold"):
        per_kernel = [r[lib]["in_network_s"] / r[lib][f"{kind}_s"] for r in rows for lib in LIBRARIES]
        ours_over_theirs = np.log([r["drytune"][f"{kind}_s"] / r["metaschedule"][f"{kind}_s"] for r in rows])
        in_net = np.log([r["drytune"]["in_network_s"] / r["metaschedule"]["in_network_s"] for r in rows])
        stats[kind] = {"median_in_network_over_isolated": float(np.median(per_kernel)),
                       "median_abs_log_error": float(np.median(np.abs(np.log(per_kernel)))),
                       "ratio_correlation": float(np.corrcoef(ours_over_theirs, in_net)[0, 1]),
                       "faster_agrees": float(np.mean(np.sign(ours_over_theirs) == np.sign(in_net)))}
    command = "python benchmarks/in_network.py " + " ".join(sys.argv[1:])
    lines = [f"# {args.model}: kernels inside the network against the same kernels alone", "", f"`{command}`", "",
             f"{len(rows)} tasks, drytune's pick and MetaSchedule's kernel each. In network: seconds per call inside "
             f"the built network (median of {args.rounds} runs, the VM's instrument hook around each call). Hot: "
             "timed alone, repeated; cold: alone, every argument but the activation flushed before each run.", "",
             "| isolated timing | in network / isolated (median) | median abs log error | correlation of log "
             "(drytune / MetaSchedule) with in network | same faster kernel |", "|---|---|---|---|---|"]
    lines += [f"| {kind} | {s['median_in_network_over_isolated']:.2f} | {s['median_abs_log_error']:.3f} | "
              f"{s['ratio_correlation']:.2f} | {s['faster_agrees']:.0%} |" for kind, s in stats.items()]
    lines += ["", "| task | calls | drytune ms: in network / hot / cold | MetaSchedule ms: in network / hot / cold |",
              "|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['calls']:.0f} | " + " | ".join(
        " / ".join(f"{r[lib][k] * 1e3:.3f}" for k in ("in_network_s", "hot_s", "cold_s")) for lib in LIBRARIES) + " |"
        for r in rows]
    write_report(f"in_network_{args.model}", args.tag, {"rows": rows, "stats": stats, "command": command}, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
