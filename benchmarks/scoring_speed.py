"""Where the static score's time goes: each stage of the full score and the pre-score, per suite operator, timed on
the same random candidates in one process (one core).

Stages of the full score: replay the sketch (TVM schedule primitives), lower the TIR and optimise the LLVM IR
(`tvm.compile`), LLVM's back end to assembly, the assembly analysis (parse, loop mapping, counts), the list
scheduler, the isl data movement and the TIR kernel model. The replay is also timed through TVM's type-checked
Python primitives (what it cost before `sketch/unchecked.py`), and the build with the calling wrapper's argument
checks (what it cost before `without_argument_checks`), so both gains are measured in the same run.
`replay_tvm_calls` is the part of a replay spent creating the schedule and inside its methods: with LLVM's stages it
gives the floors that TVM itself puts under the two scores.
Last, pre-scoring through two Ray actors in batches of 2 (the full score's batch size, used for both before
`ScorerConfig.prescore_batch_size`) and of 16, interleaved over a few rounds.

    python benchmarks/scoring_speed.py --samples 16 --tag znver4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import tvm
from tvm import s_tir

import drytune as dt
from drytune import workloads
from drytune.costmodel.asm import analyze_asm
from drytune.costmodel.cpu_features import CPUFeatureExtractor, without_argument_checks
from drytune.costmodel.datamove import data_movement
from drytune.costmodel.kernel import kernel_cycles
from drytune.costmodel.looptree import LoopTree
from drytune.costmodel.model import StaticCostModel
from drytune.search.ray_scorer import RayScorer
from drytune.sketch.sketch import ReplayDecider
from drytune.sketch.unchecked import UncheckedSchedule

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
STAGES = ("replay_checked", "replay", "replay_tvm_calls", "loop_tree", "llvm_with_checks", "lower_and_llvm_opt",
          "llvm_backend_asm", "asm_analysis", "list_scheduler", "data_movement", "kernel_model")
LLVM_STAGES = ("lower_and_llvm_opt", "llvm_backend_asm")


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _checked_replay(cand: dt.Candidate) -> tvm.IRModule:
    sch = s_tir.Schedule(cand.task.mod)
    decider = ReplayDecider(cand.decisions, cand.sketch.holes)
    for step in cand.sketch.steps:
        step.apply(sch, decider)
    return sch.mod


class _TimedSchedule(UncheckedSchedule):
    """An unchecked schedule that adds up the seconds spent inside TVM's `Schedule` methods (primitives, `get`,
    `get_loops`, samples): the part of a replay that no Python of ours can make cheaper."""

    __slots__ = ("seconds",)

    def __init__(self, schedule: s_tir.Schedule):
        super().__init__(schedule)
        self.seconds = 0.0

    def __getattr__(self, name: str):
        fn = super().__getattr__(name)
        if not callable(fn):
            return fn

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed


def _tvm_call_seconds(cand: dt.Candidate) -> float:
    """Seconds of a replay spent creating the schedule and inside its methods."""
    t0 = time.perf_counter()
    sch = _TimedSchedule(s_tir.Schedule(cand.task.mod))
    created = time.perf_counter() - t0
    decider = ReplayDecider(cand.decisions, cand.sketch.holes)
    for step in cand.sketch.steps:
        step.apply(sch, decider)
    return created + sch.seconds


def stage_times(model: StaticCostModel, ex: CPUFeatureExtractor, cand: dt.Candidate) -> dict[str, float]:
    """Seconds of each stage for one candidate, then of the whole full score and pre-score as the model runs them."""
    t: dict[str, float] = {}
    _, t["replay_checked"] = _timed(lambda: _checked_replay(cand))
    mod, t["replay"] = _timed(cand.to_mod)
    t["replay_tvm_calls"] = _tvm_call_seconds(cand)
    tree, t["loop_tree"] = _timed(lambda: LoopTree.from_mod(mod))
    _, t["llvm_with_checks"] = _timed(lambda: tvm.compile(mod, target=ex.target).mod.inspect_source("asm"))
    with without_argument_checks():  # as the full score builds
        lib, t["lower_and_llvm_opt"] = _timed(lambda: tvm.compile(mod, target=ex.target))
        text, t["llvm_backend_asm"] = _timed(lambda: lib.mod.inspect_source("asm"))
    (_, _, counts), t["asm_analysis"] = _timed(lambda: analyze_asm(text, ex.arch, tree.preorder()))
    _, t["list_scheduler"] = _timed(lambda: ex.scheduler.program_cycles(counts.blocks))
    _, t["data_movement"] = _timed(lambda: data_movement(tree, ex.spec, counter=ex.footprints))
    _, t["kernel_model"] = _timed(lambda: kernel_cycles(tree, ex.spec, ex.kernel))
    _, t["full_score"] = _timed(lambda: model.predict(cand.task, [cand]))
    _, t["pre_score"] = _timed(lambda: model.prescore(cand.task, [cand]))
    return t


def op_row(op: str, samples: int, seed: int) -> dict:
    task = workloads.get(op).task()
    model = StaticCostModel(task.target)
    cands = dt.SearchSpace(task).sample(samples + 1, seed=seed)
    ex = CPUFeatureExtractor(model.target, model.spec)
    model.predict(task, cands[:1])  # first-call costs (imports, caches of the task) are not per candidate
    times = [stage_times(model, ex, c) for c in cands[1:]]
    med = {k: statistics.median(t[k] for t in times) for k in times[0]}
    row = {"op": op, "candidates": len(times), "median_ms": {k: v * 1e3 for k, v in med.items()},
           "full_per_s": 1.0 / med["full_score"], "pre_per_s": 1.0 / med["pre_score"],
           "llvm_share": sum(med[k] for k in LLVM_STAGES) / med["full_score"],
           "replay_speedup": med["replay_checked"] / med["replay"],
           "llvm_floor_per_s": 1.0 / sum(med[k] for k in LLVM_STAGES),
           "tvm_floor_per_s": 1.0 / med["replay_tvm_calls"],
           "tvm_share_of_pre": med["replay_tvm_calls"] / med["pre_score"],
           "no_checks_speedup": statistics.median(
               x["llvm_with_checks"] / (x["lower_and_llvm_opt"] + x["llvm_backend_asm"]) for x in times)}
    print(f"{op:20s} full {row['full_per_s']:5.1f}/s  pre {row['pre_per_s']:5.0f}/s  "
          f"LLVM {100 * row['llvm_share']:3.0f}% of the full score  replay x{row['replay_speedup']:.1f}  "
          f"LLVM without argument checks x{row['no_checks_speedup']:.2f}", flush=True)
    return row


def ray_prescore(op: str, n: int, rounds: int, batches: tuple[int, ...] = (2, 16)) -> dict:
    """Pre-scores per second through two Ray actors for each batch size; rounds interleave the sizes on the
    same actors (the local Ray has one CPU per actor, so a second scorer's actors would never start)."""
    task = workloads.get(op).task()
    cands = dt.SearchSpace(task).sample(n, seed=1)
    rates: dict[int, list[float]] = {b: [] for b in batches}
    scorer = RayScorer(num_workers=2)
    try:
        scorer.score(task, cands[:8], "prescore")  # actors up, task cached
        for _ in range(rounds):
            for b in batches:
                scorer.config = dataclasses.replace(scorer.config, prescore_batch_size=b)
                t0 = time.perf_counter()
                scorer.score(task, cands, "prescore")
                rates[b].append(n / (time.perf_counter() - t0))
    finally:
        scorer.close()
    out = {"op": op, "candidates": n, "rounds": rounds,
           "per_s": {str(b): statistics.median(r) for b, r in rates.items()},
           "ratio_16_over_2": statistics.median(a / b for a, b in zip(rates[16], rates[2], strict=True))}
    print(f"Ray pre-score, 2 actors, {op}: " + ", ".join(f"batches of {b}: {v:.0f}/s" for b, v in out["per_s"].items())
          + f" (x{out['ratio_16_over_2']:.2f})", flush=True)
    return out


def markdown(report: dict) -> str:
    rows = report["rows"]
    head = ["op", "full/s", "pre/s", "LLVM share", *[f"{s} ms" for s in STAGES]]
    lines = [f"# Static scoring speed, one process ({report['cpu']})", "", f"{report['date']}. `{report['command']}`",
             "", "Medians per operator over random candidates; each stage timed on the same candidate.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ms = r["median_ms"]
        lines.append(f"| {r['op']} | {r['full_per_s']:.1f} | {r['pre_per_s']:.0f} | {100 * r['llvm_share']:.0f}% | "
                     + " | ".join(f"{ms[s]:.1f}" for s in STAGES) + " |")
    s = report["summary"]
    lines += ["", f"Median over operators: full score {s['full_per_s']:.1f}/s, pre-score {s['pre_per_s']:.0f}/s, "
              f"LLVM (lowering, IR optimisation, back end) {100 * s['llvm_share']:.0f}% of the full score, "
              f"replay {s['replay_speedup']:.1f}x faster without TVM's Python type checks, LLVM "
              f"{s['no_checks_speedup']:.2f}x faster without the wrapper's argument checks (median over operators of "
              "the per-candidate ratios; `llvm_with_checks` is lowering, optimisation and back end with them)."]
    if "tvm_floor_per_s" in s:
        lines += ["", f"Floors set by TVM itself (medians over operators): LLVM alone (`lower_and_llvm_opt` + "
                  f"`llvm_backend_asm`) allows at most {s['llvm_floor_per_s']:.1f} full scores/s; creating the "
                  f"schedule and calling its methods during a replay (`replay_tvm_calls`, "
                  f"{100 * s['tvm_share_of_pre']:.0f}% of the pre-score) allows at most {s['tvm_floor_per_s']:.0f} "
                  "pre-scores/s, whatever our own Python costs."]
    ray = report.get("ray_prescore")
    if ray:
        lines += ["", f"Pre-scoring {ray['candidates']} {ray['op']} candidates through two Ray actors (median of "
                  f"{ray['rounds']} interleaved rounds): " + ", ".join(f"batches of {b}: {v:.0f}/s" for b, v in
                                                                   ray["per_s"].items())
                  + f"; batches of 16 / batches of 2: {ray['ratio_16_over_2']:.2f} (median of per-round ratios)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(sorted(workloads.SUITE)))
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray-op", default="conv2d_nchw", help="operator of the Ray pre-score measurement")
    ap.add_argument("--ray-candidates", type=int, default=256)
    ap.add_argument("--ray-rounds", type=int, default=5)
    ap.add_argument("--tag", default=None, help="suffix of the results files (e.g. the CPU class)")
    args = ap.parse_args()
    rows = [op_row(op, args.samples, args.seed) for op in args.ops.split(",")]
    ray = ray_prescore(args.ray_op, args.ray_candidates, args.ray_rounds) if args.ray_rounds > 0 else None
    report = {"date": time.strftime("%Y-%m-%d"), "cpu": tvm.target.codegen.llvm_get_system_cpu(),
              "command": "python benchmarks/scoring_speed.py " + " ".join(sys.argv[1:]), "rows": rows,
              "ray_prescore": ray,
              "summary": {k: statistics.median(r[k] for r in rows)
                          for k in ("full_per_s", "pre_per_s", "llvm_share", "replay_speedup", "no_checks_speedup",
                                    "llvm_floor_per_s", "tvm_floor_per_s", "tvm_share_of_pre")}}
    out = os.path.join(RESULTS, "scoring_speed" + (f"_{args.tag}" if args.tag else ""))
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
