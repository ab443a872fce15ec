"""Command line of drytune: `drytune ops`, `drytune space OP`, `drytune tune-op OP` (networks arrive later)."""

from __future__ import annotations

import argparse
import collections
import sys
import time


def _cmd_ops(args: argparse.Namespace) -> int:
    from . import workloads

    for name, wl in workloads.SUITE.items():
        print(f"{name:22s} {wl.kind:10s} {wl.flops() / 1e9:8.3f} GFLOP  {wl.description}")
    return 0


def _cmd_space(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from . import workloads
    from .errors import DrytuneError
    from .space import SearchSpace
    from .task import Task
    from .verify import check_candidate, random_inputs, run_module

    wl = workloads.small(args.op) if args.small else workloads.get(args.op)
    task = Task.from_prim_func(wl.prim_func(), args.target, name=args.op)
    t0 = time.perf_counter()
    space = SearchSpace(task)
    print(f"{task}: {len(space.sketches)} sketches in {time.perf_counter() - t0:.2f}s, "
          f"space ~{space.size():.3g} candidates")
    for sketch in space.sketches:
        print(sketch.describe())
    if not args.samples:
        return 0
    import tvm

    failures: collections.Counter[str] = collections.Counter()
    reference = None if task.is_gpu or not args.check else run_module(task.mod, task, random_inputs(task))
    for cand in tqdm(space.sample(args.samples, seed=args.seed), desc="build", unit="cand"):
        try:
            if reference is not None:
                check_candidate(task, cand, reference=reference)
            else:
                tvm.compile(cand.to_mod(), target=task.target)
        except (DrytuneError, tvm.TVMError) as err:
            failures[str(err).strip().splitlines()[-1][:120]] += 1
    ok = args.samples - sum(failures.values())
    what = "built and matched the unscheduled program" if reference is not None else "built"
    print(f"{ok}/{args.samples} random candidates {what}")
    for text, n in failures.most_common():
        print(f"  {n} x {text}")
    return 0 if not failures else 1


def _cmd_tune_op(args: argparse.Namespace) -> int:
    import logging

    from . import workloads
    from .search import tune
    from .task import Task

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    wl = workloads.small(args.op) if args.small else workloads.get(args.op)
    task = Task.from_prim_func(wl.prim_func(), args.target, name=args.op)
    result = tune(task, trials=args.trials, seconds=args.seconds, strategy=args.strategy, work_dir=args.work_dir,
                  verify_top_k=args.verify_top_k, ray_address=args.ray_address, num_workers=args.num_workers,
                  seed=args.seed, progress=not args.quiet)
    gflops = task.flops / result.predicted / 1e9
    print(f"{task}: best predicted latency {result.predicted * 1e3:.4g} ms ({gflops:.3g} GFLOP/s) after "
          f"{result.trials} trials ({result.resumed} resumed, {len(result.invalid)} invalid), {result.strategy}")
    if result.measured is not None:
        print(f"measured latency of the best: {result.measured * 1e3:.4g} ms")
    print(f"check: {result.check}")
    print(f"records: {result.records_path}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import os

    from . import workloads
    from .costmodel.calibrate import calibrate
    from .task import Task

    ops = args.ops.split(",")
    tasks = [Task.from_prim_func((workloads.small(o) if args.small else workloads.get(o)).prim_func(), args.target,
                                 name=o) for o in ops]
    if tasks[0].is_gpu:
        raise ValueError("calibration measures on this machine's CPU; CUDA coefficients need a GPU machine")
    out = args.out or os.path.join(args.work_dir, f"{tasks[0].spec.arch}-calibrated.json")
    data = os.path.join(args.work_dir, "calibration_measurements.jsonl")
    print(f"measuring {args.samples} candidates of each of {', '.join(ops)} (resumable: {data})")
    coeffs = calibrate(tasks, args.samples, data, out, seed=args.seed)
    print(coeffs.origin)
    for name, value in coeffs.values.items():
        print(f"  {name:18s} {value:.4g}")
    print(f"wrote {out}; use it with StaticCostModel(target, coefficients={out!r}) or copy it to "
          f"drytune/costmodel/coefficients/{tasks[0].spec.arch}-calibrated.json")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="drytune", description="Static auto-scheduling of tensor programs.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("calibrate", help="measure suite candidates on this CPU and fit the cost-model coefficients")
    p.add_argument("--target", default="llvm")
    p.add_argument("--ops", default="gemm,conv2d_nchw,depthwise_conv2d,softmax,layer_norm,avg_pool2d")
    p.add_argument("--samples", type=int, default=40, help="measured candidates per operator")
    p.add_argument("--small", action="store_true", help="use the operators' small test shapes (fast)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default="drytune-calibration")
    p.add_argument("--out", default=None, help="coefficients file to write")
    p.set_defaults(func=_cmd_calibrate)
    p = sub.add_parser("ops", help="list the operator suite")
    p.set_defaults(func=_cmd_ops)
    p = sub.add_parser("space", help="derive an operator's sketches and build random candidates")
    p.add_argument("op", help="suite operator name (see `drytune ops`)")
    p.add_argument("--target", default="llvm", help="short name (llvm, x86-avx512, aarch64, cuda-sm90...)")
    p.add_argument("--samples", type=int, default=8, help="random candidates to build (0: only list sketches)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small", action="store_true", help="use the operator's small test shape")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="only build; by default CPU candidates are also run and compared with the unscheduled program")
    p.set_defaults(func=_cmd_space)
    p = sub.add_parser("tune-op", help="tune one operator of the suite with the static cost model")
    p.add_argument("op", help="suite operator name (see `drytune ops`)")
    p.add_argument("--target", default="llvm", help="short name (llvm, x86-avx512, aarch64, cuda-sm90...)")
    p.add_argument("--trials", type=int, default=None, help="candidates to score in this run")
    p.add_argument("--seconds", type=float, default=None, help="time budget (with --trials: whichever ends first)")
    p.add_argument("--strategy", default="portfolio", choices=("portfolio", "evolutionary", "cmaes", "random"))
    p.add_argument("--work-dir", default="drytune-work", help="records (MetaSchedule JSON database); reruns resume")
    p.add_argument("--verify-top-k", type=int, default=0, help="measure the k best predictions on this CPU")
    p.add_argument("--ray-address", default=None, help="join this Ray cluster (default: $RAY_ADDRESS or local Ray)")
    p.add_argument("--num-workers", type=int, default=None,
                   help="scoring actors (default: one per CPU; 0: score in this process)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small", action="store_true", help="use the operator's small test shape")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_tune_op)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (KeyError, ValueError) as err:
        print(f"drytune: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
