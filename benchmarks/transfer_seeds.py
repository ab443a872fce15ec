"""Network tuning with and without schedules carried over between similar tasks (`NetworkTuneConfig.transfer_seeds`).

Each setting is tuned at the same budget with the same seeds, each run in its own process (fresh Ray, fresh thread
pools); then every tuned network is timed in one process, interleaved over rounds, and the ratio of the two settings
is the median over rounds of their per-round latencies (< 1: carrying schedules over is faster).

    python benchmarks/transfer_seeds.py --model mobilenet_v2 --budget 150 --seeds 0,1 --tag znver5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from networks import random_arrays, seconds_per_call, target_dict
from report_files import write_report

SETTINGS = {"independent": 0, "transfer": 4}  # transfer_seeds of each setting


def run_name(setting: str, seed: int) -> str:
    return f"{setting}_s{seed}"


def tune(model: str, setting: str, seed: int, budget: float, work: str, threads: int) -> None:
    """One tuning run; writes the exported library and a JSON summary beside it."""
    from drytune import zoo
    from drytune.scheduler.config import NetworkTuneConfig
    from drytune.scheduler.tune_network import tune_network

    name = run_name(setting, seed)
    t0 = time.perf_counter()
    torch_model, inputs = zoo.get_model(model)
    tuned = tune_network(torch_model, inputs, target=target_dict(threads), budget=budget,
                         work_dir=os.path.join(work, name), seed=seed, progress=False,
                         config=NetworkTuneConfig(transfer_seeds=SETTINGS[setting]))
    wall = time.perf_counter() - t0
    tuned.export(os.path.join(work, name + ".so"))
    report = tuned.report()
    with open(os.path.join(work, name + ".json"), "w") as f:
        json.dump({"setting": setting, "seed": seed, "wall_s": wall, "predicted_s": report.predicted_total,
                   "trials": sum(r.trials for r in report.rows), "check": tuned.check}, f)


def measure(model: str, work: str, names: list[str], rounds: int, threads: int, min_seconds: float) -> dict:
    """Per-round latency of every tuned network, in an order rotated by round."""
    import tvm
    from tvm import relax

    from drytune import zoo

    _, examples = zoo.get_model(model)
    inputs = random_arrays(examples, 0)
    calls = {}
    for name in names:
        vm = relax.VirtualMachine(tvm.runtime.load_module(os.path.join(work, name + ".so")), tvm.cpu())
        args = [tvm.runtime.tensor(x, tvm.cpu()) for x in inputs]
        calls[name] = lambda main=vm["main"], args=args: main(*args)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            calls[name]()  # warm the caches after the previous network
            times[name].append(seconds_per_call(calls[name], min_seconds))
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds per tuning run")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-seconds", type=float, default=0.5, help="time per network per round")
    ap.add_argument("--work-dir", default=os.path.join("drytune-work", "transfer_seeds"))
    ap.add_argument("--tag", default=None)
    ap.add_argument("--child", nargs=2, metavar=("SETTING", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    work = os.path.abspath(os.path.join(args.work_dir, args.model))
    if args.child:
        tune(args.model, args.child[0], int(args.child[1]), args.budget, work, args.threads)
        return 0
    os.makedirs(work, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    names = [run_name(s, seed) for seed in seeds for s in SETTINGS]
    for name in names:
        if os.path.exists(os.path.join(work, name + ".so")):
            print(f"{name}: tuned before, kept", flush=True)
            continue
        setting, seed = name.rsplit("_s", 1)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--model", args.model, "--budget",
                        str(args.budget), "--threads", str(args.threads), "--work-dir", args.work_dir,
                        "--child", setting, seed], check=True)
        print(f"{name}: tuned", flush=True)
    runs = {n: json.load(open(os.path.join(work, n + ".json"))) for n in names}
    times = measure(args.model, work, names, args.rounds, args.threads, args.min_seconds)
    ratios = {seed: statistics.median(a / b for a, b in zip(times[run_name("transfer", seed)],
                                                            times[run_name("independent", seed)], strict=True))
              for seed in seeds}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "budget_s": args.budget, "runs": runs,
              "rounds_s": times, "ratio_transfer_over_independent": ratios,
              "command": "python benchmarks/transfer_seeds.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: schedules carried over between similar tasks, or not", "",
             f"{report['date']}. `{report['command']}`", "",
             f"Each run tuned for {args.budget:g} s in its own process; the networks timed in one process over "
             f"{args.rounds} interleaved rounds (median).", "",
             "| seed | setting | candidates scored | predicted ms | measured ms | transfer / independent |",
             "|---|---|---|---|---|---|"]
    for seed in seeds:
        for s in SETTINGS:
            n = run_name(s, seed)
            lines.append(f"| {seed} | {s} | {runs[n]['trials']} | {runs[n]['predicted_s'] * 1e3:.2f} | "
                         f"{statistics.median(times[n]) * 1e3:.3f} | "
                         + (f"{ratios[seed]:.3f} |" if s == "transfer" else "|"))
    lines.append(f"\nMedian over seeds of the per-round ratio: {statistics.median(ratios.values()):.3f}.")
    write_report(f"transfer_seeds_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
