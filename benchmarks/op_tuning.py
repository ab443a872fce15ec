"""Tuning one operator: drytune (static, nothing run) vs MetaSchedule (measured trials, XGBoost) at equal
wall-clock budgets, both final kernels measured the same way, interleaved, in this process.

Also: the measured FMA peak of this machine (a register-resident FMA loop with the CPU's widest vectors,
AVX-512 or AVX2, one thread per core) and the tuned GEMM's fraction of it;
drytune strategies compared; scoring throughput with 1 and 2 Ray workers. Each operator's kernels are timed
right after its tuning and again after all operators are tuned (`--passes`): on this machine a slow phase can last
an operator's whole measurement and hits small two-thread kernels harder than one-thread ones.

    python benchmarks/op_tuning.py --ops gemm,conv2d_nchw,softmax --budgets 60
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import drytune as dt
from drytune import workloads
from drytune.costmodel.model import StaticCostModel
from drytune.errors import TVM_ERRORS
from drytune.measure import MeasureWorker, cold_timing, measure_modules
from drytune.search.config import TuneConfig, VerifyConfig

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

FMA_PEAK_C = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMADD _mm512_fmadd_ps
#define STORE _mm512_storeu_ps
#else
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMADD _mm256_fmadd_ps
#define STORE _mm256_storeu_ps
#endif
int main(void) {
  const long iters = 200000000L; double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = omp_get_wtime(); float sink = 0;
    #pragma omp parallel reduction(+:sink)
    {
      vec a[10]; vec b = SET1(1.0000001f), c = SET1(1e-7f); float out[LANES];
      for (int i = 0; i < 10; ++i) a[i] = SET1((float)i);
      for (long it = 0; it < iters / 10; ++it)
        for (int i = 0; i < 10; ++i) a[i] = FMADD(a[i], b, c);
      for (int i = 0; i < 10; ++i) { STORE(out, a[i]); for (int k = 0; k < LANES; ++k) sink += out[k]; }
    }
    double dt = omp_get_wtime() - t0;
    double flops = 2.0 * LANES * iters * omp_get_max_threads();
    if (flops / dt > best) best = flops / dt;
    if (sink == 12345.f) printf("!");
  }
  printf("%d %f\n", LANES * 32, best / 1e9);
  return 0;
}
"""


def build_c(source: str, exe: str, flags: tuple[str, ...] = ()) -> str:
    """Compile an OpenMP C benchmark for this CPU (gcc -O3 -march=native) into `exe`; returns `exe`."""
    src = exe + ".c"
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", *flags, src, "-o", exe], check=True)
    return exe


def run_gflops(exe: str, threads: int | None = None) -> float:
    """The GFLOP/s a C benchmark built by `build_c` prints last, run on `threads` threads (default: every CPU)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads or os.cpu_count()))
    return float(subprocess.run([exe], capture_output=True, text=True, env=env, check=True).stdout.split()[-1])


def fma_peak_gflops(threads: int | None = None) -> float:
    """GFLOP/s of a register-resident FMA loop with the widest vectors this CPU has (AVX-512, else AVX2), on
    `threads` threads (default: every CPU)."""
    with tempfile.TemporaryDirectory() as d:
        return run_gflops(build_c(FMA_PEAK_C, os.path.join(d, "peak"), ("-funroll-loops",)), threads)


def _ms_worker(op: str, work_dir: str, seed: int) -> None:
    os.setpgrp()  # its builder and runner processes join this group, so that the parent can stop them all
    import tvm
    from tvm.s_tir import meta_schedule as ms

    task = workloads.get(op).task()

    def warm() -> None:
        import tvm.s_tir.tensor_intrin  # noqa: F401 - the 30 s import every builder worker pays

    builder = ms.builder.LocalBuilder(max_workers=1, timeout_sec=120, initializer=warm)
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=50))
    ms.tune_tir(task.mod, task.target, work_dir=work_dir, max_trials_global=100000, num_trials_per_iter=16,
                builder=builder, runner=runner, cost_model="xgb", seed=seed)
    del tvm


def metaschedule_at_budget(op: str, seconds: float, seed: int = 0,
                           keep_dir: str | None = None) -> tuple[object | None, int, float]:
    """Run MetaSchedule's tune_tir for `seconds` of wall clock (then stop it); best schedule and trials. Its
    database is deleted, unless `keep_dir` names where it is written and kept."""
    from tvm.s_tir import meta_schedule as ms

    work_dir = keep_dir or tempfile.mkdtemp(prefix="ms-")
    os.makedirs(work_dir, exist_ok=True)
    proc = multiprocessing.get_context("spawn").Process(target=_ms_worker, args=(op, work_dir, seed))
    t0 = time.perf_counter()
    proc.start()
    proc.join(seconds)
    wall = time.perf_counter() - t0
    if proc.is_alive():
        # killing only the tuner would leave its builder finishing a batch of builds while we measure
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.join()
    task = workloads.get(op).task()
    try:
        db = ms.database.JSONDatabase(work_dir=work_dir, allow_missing=True)
        records = db.get_all_tuning_records()
        sch = db.query_schedule(task.mod, task.target, workload_name="main") if records else None
        mod = sch.mod if sch is not None else None
    except TVM_ERRORS:
        mod, records = None, []
    if keep_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    return mod, len(records), wall


def torch_matmul_timer(op: str):
    """For a plain matmul of the suite (A[M, K] x B[K, N]), a function timing torch.matmul (oneDNN/MKL, the vendor
    library a user would keep) on this process's threads: median of 3 repeats of >= 50 ms; else None."""
    w = workloads.get(op)
    if w.build.func is not workloads.gemm:
        return None
    try:
        import torch
    except ImportError:
        return None
    kw = w.params
    torch.set_num_threads(int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1))  # as TVM's runtime
    a, b = torch.randn(kw["M"], kw["K"]), torch.randn(kw["K"], kw["N"])

    def timed() -> float:
        torch.matmul(a, b)
        runs = []
        for _ in range(3):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.05:
                torch.matmul(a, b)
                n += 1
            runs.append((time.perf_counter() - t0) / n)
        return statistics.median(runs)

    return timed


def interleaved(mods: dict[str, object], target, rounds: int = 5, extra: dict | None = None,
                cold: bool = False) -> dict[str, list[float]]:
    """Median seconds of each module (and of each `extra` timing function) in each round, alternating in a round.
    `cold`: every argument but the first flushed before each run, as a network's weights come in."""
    times: dict[str, list[float]] = {k: [] for k in [*mods, *(extra or {})]}
    timing = cold_timing(15) if cold else {"number": 3, "repeat": 3, "min_repeat_ms": 50}
    with MeasureWorker() as worker:
        for _ in range(rounds):
            for name, mod in mods.items():
                res = measure_modules([mod], target, worker=worker, **timing)[0]
                times[name].append(res.seconds)
            for name, timed in (extra or {}).items():
                times[name].append(timed())
    return times


def scaling(op: str, n: int = 64) -> dict[str, float]:
    """Candidates scored per second with 1 and 2 Ray workers, and the efficiency of 2."""
    from drytune.search.ray_scorer import RayScorer

    task = workloads.get(op).task()
    cands = dt.SearchSpace(task).sample(n, seed=5)
    out = {}
    for workers in (1, 2):
        scorer = RayScorer(num_workers=workers)
        scorer.score(task, cands[:4])  # start-up and warm caches
        t0 = time.perf_counter()
        scorer.score(task, cands)
        out[f"per_s_{workers}"] = n / (time.perf_counter() - t0)
        scorer.close()
    out["efficiency"] = out["per_s_2"] / (2 * out["per_s_1"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="gemm,conv2d_nchw,softmax")
    ap.add_argument("--budgets", default="60", help="comma-separated wall-clock budgets in seconds")
    ap.add_argument("--strategies", default="portfolio", help="drytune strategies to run")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--verify-top-k", type=int, default=0,
                    help="also report each drytune run with its k best predictions measured and the fastest kept "
                         "(the same records; the verification's wall time is added to the tuning's)")
    ap.add_argument("--verify-one-per-sketch", action="store_true",
                    help="with --verify-top-k: measure the best prediction of each sketch first (VerifyConfig)")
    ap.add_argument("--passes", type=int, default=2,
                    help="interleaved measurement passes per operator: right after its tuning, then again after every "
                         "operator's tuning; ratios are medians over the rounds of all passes")
    ap.add_argument("--coefficients", default=None, metavar="FILE",
                    help="drytune's static cost model with this coefficients file (default: the one shipped for "
                         "this CPU)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "op_tuning"))
    args = ap.parse_args()
    cost_model = functools.partial(StaticCostModel, coefficients=args.coefficients) if args.coefficients else None
    kept: list[tuple[dict, dict, object, dict | None]] = []  # each row's kernels, for the later passes
    report: dict = {"date": time.strftime("%Y-%m-%d"), "rows": [], "coefficients": args.coefficients or "shipped"}
    report["fma_peak_gflops"] = fma_peak_gflops()
    print(f"measured FMA peak: {report['fma_peak_gflops']:.0f} GFLOP/s", flush=True)
    if not args.no_scaling:
        report["scaling"] = scaling("gemm")
        print("scaling:", report["scaling"], flush=True)
    for op in args.ops.split(","):
        task = workloads.get(op).task()
        for budget in map(float, args.budgets.split(",")):
            mods, info = {}, {}
            for strategy in args.strategies.split(","):
                t0 = time.perf_counter()
                work_dir = tempfile.mkdtemp(prefix="dt-")
                res = dt.tune(task, seconds=budget, strategy=strategy, progress=False, work_dir=work_dir,
                              cost_model=cost_model)
                wall = time.perf_counter() - t0
                info[f"drytune-{strategy}"] = {"wall_s": wall, "trials": res.trials, "predicted_s": res.predicted,
                                               "phase_s": res.phase_seconds, "work_dir": work_dir,
                                               "best": {"sketch": res.best.sketch.name,
                                                        "decisions": json.loads(res.best.decisions_json())}}
                mods[f"drytune-{strategy}"] = res.best.to_mod()
                if args.verify_top_k > 0:  # no new candidates: the run's records read back, the k best measured
                    t0 = time.perf_counter()
                    verify = VerifyConfig(one_per_sketch=args.verify_one_per_sketch)
                    ver = dt.tune(task, trials=0, strategy=strategy, progress=False, work_dir=work_dir,
                                  verify_top_k=args.verify_top_k, cost_model=cost_model,
                                  config=TuneConfig(verify=verify))
                    verify_s = time.perf_counter() - t0
                    per_sketch = "-per-sketch" if args.verify_one_per_sketch else ""
                    name = f"drytune-{strategy}+verify{args.verify_top_k}{per_sketch}"
                    info[name] = {"wall_s": wall + verify_s, "verify_s": verify_s,
                                  "predicted_s": ver.predicted, "measured_s": ver.measured,
                                  "measured_top": [(p, m) for _, p, m in ver.measured_top]}
                    mods[name] = ver.best.to_mod()
            ms_mod, ms_trials, ms_wall = metaschedule_at_budget(op, budget)
            info["metaschedule"] = {"wall_s": ms_wall, "trials": ms_trials}
            if ms_mod is None:
                # no measured trial in the budget: what MetaSchedule leaves its user is the unscheduled program
                info["metaschedule"]["fallback"] = "unscheduled program (no MetaSchedule record in the budget)"
                ms_mod = task.mod
            mods["metaschedule"] = ms_mod
            timer = torch_matmul_timer(op)
            extra = {"torch": timer} if timer else None
            times = interleaved(mods, task.target, extra=extra)
            row = {"op": op, "budget_s": budget, "flops": task.flops, "info": info, "pass_round_s": [times]}
            summarize(row, times, report["fma_peak_gflops"])
            report["rows"].append(row)
            kept.append((row, mods, task.target, extra))
            print(json.dumps(row), flush=True)
            write(report, args.out)
    for _ in range(args.passes - 1):  # every pair again, after all the tuning: a slow phase of the machine during
        for row, mods, target, extra in kept:  # one operator's rounds no longer decides its ratio alone
            times = interleaved(mods, target, extra=extra)
            row["pass_round_s"].append(times)
            summarize(row, {k: [t for p in row["pass_round_s"] for t in p[k]] for k in times},
                      report["fma_peak_gflops"])
            print(json.dumps({"op": row["op"], "pass": len(row["pass_round_s"]), "round_s": times}), flush=True)
            write(report, args.out)
    return 0


def summarize(row: dict, times: dict[str, list[float]], peak_gflops: float) -> None:
    """Medians, per-round speedups against MetaSchedule and torch, GFLOP/s and fraction of peak, from all rounds."""
    row["round_s"] = times
    row["median_s"] = {k: statistics.median(v) for k, v in times.items()}
    references = {"metaschedule": "ms", "torch": "torch"}
    for ref, label in references.items():
        if ref not in times:
            continue
        for k in times:
            if k not in references:
                ratios = [r / d for r, d in zip(times[ref], times[k], strict=True)]
                row[f"speedup_vs_{label}[{k}]"] = statistics.median(ratios)
    row["gflops"] = {k: row["flops"] / v / 1e9 for k, v in row["median_s"].items()}
    row["fraction_of_peak"] = {k: g / peak_gflops for k, g in row["gflops"].items()}


def write(report: dict, out: str) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
