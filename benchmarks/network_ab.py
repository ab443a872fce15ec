"""Whole-network A/B of two tuning settings: same model, budget and seeds, every run in its own process.

Each (setting, seed) is tuned in a fresh process (fresh Ray, fresh thread pools); then every tuned network is timed in
one process, interleaved over rounds, and each seed's ratio is the median over rounds of B's latency over A's
(< 1: B is faster). Settings (`SETTINGS`): `independent` / `transfer` (schedules carried over between similar tasks,
`NetworkTuneConfig.transfer_seeds`), `lane-hoist` / `no-lane-hoist` (`KernelConfig.hoisted_by_lane`), `session-30` /
`current` (all of session 31's kernel-model changes), `no-conv-panels` / `conv-panels` (a network's convolution weights
packed in panels, `SpaceConfig.cpu_pack_conv_weights`), `current` / `huge-bodies` (`KernelConfig.huge_body_uops` 600).

    python benchmarks/network_ab.py --settings independent,transfer --model mobilenet_v2 --budget 150 --seeds 0,1
    python benchmarks/network_ab.py --settings no-lane-hoist,lane-hoist --coefficients no-lane-hoist=OLD.json ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from networks import random_arrays, seconds_per_call, target_dict
from report_files import write_report


@dataclass(frozen=True)
class Setting:
    """What one arm of the A/B changes: `NetworkTuneConfig` fields (its `space` as a dict of `SpaceConfig` fields) and
    `KernelConfig` fields of the cost model."""

    config: dict = field(default_factory=dict)
    kernel: dict = field(default_factory=dict)


SETTINGS = {
    "independent": Setting(config={"transfer_seeds": 0}),
    "transfer": Setting(config={"transfer_seeds": 4}),
    "lane-hoist": Setting(kernel={"hoisted_by_lane": True}),
    "no-lane-hoist": Setting(kernel={"hoisted_by_lane": False}),
    # the kernel model as session 31 found it (run with that session's starting coefficients) and as it left it
    "session-30": Setting(kernel={"hoisted_by_lane": False, "join_half_vectors_above": 0,
                                  "llvm_unroll_nest_factor": 1.0}),
    "current": Setting(),
    # network weights of convolutions packed in panels of output channels (SpaceConfig.cpu_pack_conv_weights)
    "conv-panels": Setting(config={"space": {"cpu_pack_conv_weights": True}}),
    "no-conv-panels": Setting(config={"space": {"cpu_pack_conv_weights": False}}),
    # an unrolled body of more than 600 micro-ops issues at `large_body_width` with its accumulators in registers too
    # (KernelConfig.huge_body_uops; session 78, Zen 3)
    "huge-bodies": Setting(kernel={"huge_body_uops": 600.0}),
}


def run_name(setting: str, seed: int) -> str:
    return f"{setting}_s{seed}"


def tune(model: str, setting: str, seed: int, budget: float, work: str, threads: int,
         coefficients: str | None, layout: str = "keep") -> None:
    """One tuning run; writes the exported library and a JSON summary beside it."""
    import functools

    from drytune import zoo
    from drytune.costmodel.model import StaticCostModel
    from drytune.scheduler.config import NetworkTuneConfig
    from drytune.scheduler.tune_network import tune_network
    from drytune.sketch.config import SpaceConfig

    name, arm = run_name(setting, seed), SETTINGS[setting]
    cost_model = None
    if arm.kernel or coefficients:
        cost_model = functools.partial(StaticCostModel, coefficients=coefficients, kernel_overrides=arm.kernel)
    t0 = time.perf_counter()
    torch_model, inputs = zoo.get_model(model)
    tuned = tune_network(torch_model, inputs, target=target_dict(threads), budget=budget,
                         work_dir=os.path.join(work, name), seed=seed, progress=False, cost_model=cost_model,
                         layout=layout,
                         config=NetworkTuneConfig(**{k: SpaceConfig(**v) if k == "space" else v
                                                     for k, v in arm.config.items()}))
    wall = time.perf_counter() - t0
    tuned.export(os.path.join(work, name + ".so"))
    report = tuned.report()
    with open(os.path.join(work, name + ".json"), "w") as f:
        json.dump({"setting": setting, "seed": seed, "wall_s": wall, "predicted_s": report.predicted_total,
                   "trials": sum(r.trials for r in report.rows), "check": tuned.check,
                   "coefficients": coefficients}, f)


def library_call(path: str, inputs: list) -> Callable[[], object]:
    """A zero-argument call of the network built into the library at `path` on `inputs` (numpy arrays)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
    args = [tvm.runtime.tensor(x, tvm.cpu()) for x in inputs]
    return lambda main=vm["main"], args=args: main(*args)


def interleaved_rounds(calls: dict[str, Callable[[], object]], rounds: int, min_seconds: float, repeats: int = 1,
                       pause_s: float = 0.0) -> dict[str, list[float]]:
    """Per-round seconds per call of every system, in an order rotated by round: each after `pause_s`, one warm-up
    call and the median of `repeats` timings of `min_seconds` each."""
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if pause_s:
                time.sleep(pause_s)
            calls[name]()  # warm the caches after the previous network
            times[name].append(statistics.median(seconds_per_call(calls[name], min_seconds) for _ in range(repeats)))
    return times


def measure(model: str, work: str, names: list[str], rounds: int, threads: int, min_seconds: float) -> dict:
    """Per-round latency of every tuned network, in an order rotated by round."""
    from drytune import zoo

    _, examples = zoo.get_model(model)
    inputs = random_arrays(examples, 0)
    calls = {name: library_call(os.path.join(work, name + ".so"), inputs) for name in names}
    return interleaved_rounds(calls, rounds, min_seconds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="independent,transfer", help="A,B among " + ", ".join(SETTINGS))
    ap.add_argument("--coefficients", action="append", default=[], metavar="SETTING=PATH",
                    help="a coefficients file for one setting's cost model (default: the shipped one)")
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds per tuning run")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layout", default="keep", help="tune_network's layout (auto: channels-last convolutions on CPU, "
                    "as networks.py builds them)")
    ap.add_argument("--min-seconds", type=float, default=0.5, help="time per network per round")
    ap.add_argument("--work-dir", default=os.path.join("drytune-work", "network_ab"))
    ap.add_argument("--tag", default=None)
    ap.add_argument("--child", nargs=2, metavar=("SETTING", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    pair = args.settings.split(",")
    unknown = [s for s in pair if s not in SETTINGS]
    if len(pair) != 2 or unknown:
        ap.error(f"--settings takes two of {', '.join(SETTINGS)} (got {args.settings!r})")
    coefficients = dict(item.split("=", 1) for item in args.coefficients)
    if set(coefficients) - set(pair):
        ap.error(f"--coefficients names a setting not compared: {sorted(set(coefficients) - set(pair))}")
    coefficients = {s: os.path.abspath(p) for s, p in coefficients.items()}
    work = os.path.abspath(os.path.join(args.work_dir, args.model))
    if args.child:
        setting = args.child[0]
        tune(args.model, setting, int(args.child[1]), args.budget, work, args.threads, coefficients.get(setting),
             args.layout)
        return 0
    os.makedirs(work, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    names = [run_name(s, seed) for seed in seeds for s in pair]
    for name in names:
        if os.path.exists(os.path.join(work, name + ".so")):
            print(f"{name}: tuned before, kept", flush=True)
            continue
        setting, seed = name.rsplit("_s", 1)
        subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--child", setting, seed],
                       check=True)
        print(f"{name}: tuned", flush=True)
    runs = {n: json.load(open(os.path.join(work, n + ".json"))) for n in names}
    times = measure(args.model, work, names, args.rounds, args.threads, args.min_seconds)
    a, b = pair
    ratios = {seed: statistics.median(tb / ta for ta, tb in zip(times[run_name(a, seed)], times[run_name(b, seed)],
                                                                  strict=True))
              for seed in seeds}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "budget_s": args.budget, "settings": pair,
              "coefficients": coefficients, "runs": runs, "rounds_s": times, f"ratio_{b}_over_{a}": ratios,
              "command": "python benchmarks/network_ab.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: {b} against {a}", "", f"{report['date']}. `{report['command']}`", "",
             f"Each run tuned for {args.budget:g} s in its own process; the networks timed in one process over "
             f"{args.rounds} interleaved rounds (median).", "",
             f"| seed | setting | candidates scored | predicted ms | measured ms | {b} / {a} |",
             "|---|---|---|---|---|---|"]
    for seed in seeds:
        for s in pair:
            n = run_name(s, seed)
            lines.append(f"| {seed} | {s} | {runs[n]['trials']} | {runs[n]['predicted_s'] * 1e3:.2f} | "
                         f"{statistics.median(times[n]) * 1e3:.3f} | " + (f"{ratios[seed]:.3f} |" if s == b else "|"))
    lines.append(f"\nMedian over seeds of the per-round ratio {b} / {a}: {statistics.median(ratios.values()):.3f}.")
    write_report(f"network_ab_{args.model}_{a}_vs_{b}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
