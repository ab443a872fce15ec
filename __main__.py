"""Command line of drytune: operators (ops, space, tune-op, calibrate) and networks (tasks, tune, report)."""

from __future__ import annotations

import argparse
import collections
import sys
import time


def _suite_task(op: str, args: argparse.Namespace):
    """The task of suite operator `op` for `args.target`, its small version with `--small`."""
    from . import workloads

    return (workloads.small(op) if args.small else workloads.get(op)).task(args.target)


def _cmd_ops(args: argparse.Namespace) -> int:
    from . import workloads

    for name, wl in workloads.SUITE.items():
        print(f"{name:22s} {wl.kind:10s} {wl.flops() / 1e9:8.3f} GFLOP  {wl.description}")
    return 0


def _cmd_space(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .errors import TVM_ERRORS, DrytuneError
    from .space import SearchSpace
    from .verify import check_candidate, random_inputs, run_module

    task = _suite_task(args.op, args)
    t0 = time.perf_counter()
    space = SearchSpace(task)
    print(f"{task}: {len(space.derived)} sketches in {time.perf_counter() - t0:.2f}s, {len(space.sketches)} "
          f"searched, space ~{space.size():.3g} candidates")
    for sketch in space.derived:
        print(sketch.describe() + ("" if sketch in space.sketches else
                                   "\n  (not searched: leaves an input with critical-stride rows unpacked)"))
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
        except (DrytuneError, *TVM_ERRORS) as err:
            failures[str(err).strip().splitlines()[-1][:120]] += 1
    ok = args.samples - sum(failures.values())
    what = "built and matched the unscheduled program" if reference is not None else "built"
    print(f"{ok}/{args.samples} random candidates {what}")
    for text, n in failures.most_common():
        print(f"  {n} x {text}")
    return 0 if not failures else 1


def _cmd_tune_op(args: argparse.Namespace) -> int:
    import logging

    from .search import tune

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    task = _suite_task(args.op, args)
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

    from .costmodel.calibrate import calibrate

    ops = args.ops.split(",")
    tasks = [_suite_task(o, args) for o in ops]
    if tasks[0].is_gpu:
        raise ValueError("calibrate measures on this machine's CPU. CUDA weights are fitted from a GPU machine's "
                         "measurements: benchmarks/cuda_fidelity.py --phase prepare here, "
                         "benchmarks/cuda_device_measure.py on the GPU machine (numpy and CuPy only), then "
                         "cuda_fidelity.py --phase report --fit-out FILE (README: the static cost model, NVIDIA)")
    from .costmodel.model import calibration_cpu, coefficients_file_name

    cpu = calibration_cpu(tasks[0].spec, str(dict(tasks[0].target.attrs).get("mcpu", "")))
    name = coefficients_file_name(tasks[0].spec, cpu)
    out = args.out or os.path.join(args.work_dir, name)
    data = os.path.join(args.work_dir, "calibration_measurements.jsonl")
    print(f"measuring {args.samples} candidates of each of {', '.join(ops)} (resumable: {data})")
    coeffs = calibrate(tasks, args.samples, data, out, seed=args.seed, rounds=args.rounds)
    print(coeffs.origin)
    for feature, value in coeffs.values.items():
        print(f"  {feature:18s} {value:.4g}")
    print(f"wrote {out}; use it with StaticCostModel(target, coefficients={out!r}) or copy it to "
          f"drytune/costmodel/coefficients/{name}, where targets with that CPU pick it up")
    return 0


def load_model_arg(spec: str):
    """MODEL on the command line: an .onnx file, a zoo model name, or `file.py:function` returning
    (torch module, example inputs)."""
    import os

    from . import zoo

    if spec.endswith(".onnx") or (os.path.exists(spec) and not spec.endswith(".py")):
        if not os.path.exists(spec):
            raise ValueError(f"model file {spec} does not exist")
        return spec, None
    if ":" in spec:
        import importlib.util

        path, func = spec.rsplit(":", 1)
        if not os.path.exists(path):
            raise ValueError(f"model file {path} does not exist")
        module_spec = importlib.util.spec_from_file_location("drytune_user_model", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        if not hasattr(module, func):
            raise ValueError(f"{path} defines no function {func!r}")
        model, inputs = getattr(module, func)()
        return model, inputs
    if spec in zoo.MODELS:
        return zoo.get_model(spec)
    raise ValueError(f"unknown model {spec!r}: give an .onnx file, file.py:function, or one of {', '.join(zoo.MODELS)}")


def _input_shapes(items: list[str] | None) -> dict[str, list[int]] | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            out[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ValueError(f"--input-shape {item!r}: expected NAME=D1,D2,...") from None
    return out


def _graph_options(p: argparse.ArgumentParser) -> None:
    """Options that change the network's graph before its tasks are extracted (shared by `tasks` and `tune`)."""
    from .layout import LAYOUTS

    p.add_argument("--input-shape", action="append", help="NAME=D1,D2,... for an ONNX input with symbolic dims")
    p.add_argument("--fast-math", action="store_true",
                   help="exp/erf/tanh as vectorizing polynomials instead of libm calls (softmax, GELU)")
    p.add_argument("--layout", default="auto", choices=LAYOUTS,
                   help="convolution layout: auto (channels-last NHWC on CPU, as imported on GPU), NHWC, keep")


def _cmd_tasks(args: argparse.Namespace) -> int:
    import os

    from .scheduler.tune_network import prepare

    model, inputs = load_model_arg(args.model)
    network, target, _, tasks, skipped = prepare(model, inputs, args.target, name=os.path.basename(args.model),
                                                  input_shapes=_input_shapes(args.input_shape),
                                                  fast_math=args.fast_math, layout=args.layout)
    print(f"{network.name}: {len(tasks)} tasks for {target.kind.name}")
    print(f"{'#':>3}  {'task':<60} {'kind':<14} {'calls':>5} {'GFLOP':>9}")
    for i, nt in enumerate(tasks):
        print(f"{i:>3}  {nt.name:<60} {nt.kind:<14} {nt.weight:>5g} {nt.flops / 1e9:>9.4f}")
    for item in skipped:
        print(f"not tunable (default schedule): {item.name}: {item.reason}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    import logging
    import os

    from .scheduler.tune_network import tune_network

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    model, inputs = load_model_arg(args.model)
    net = tune_network(model, inputs, target=args.target, budget=args.budget, task_budgets=args.budgets,
                       ray_address=args.ray_address, work_dir=args.work_dir, num_workers=args.num_workers,
                       strategy=args.strategy, seed=args.seed, progress=not args.quiet,
                       verify_top_k=args.verify_top_k,
                       input_shapes=_input_shapes(args.input_shape), name=os.path.basename(args.model),
                       fast_math=args.fast_math, layout=args.layout)
    report = net.report()
    print(report.table())
    print(f"check: {net.check}")
    if args.export:
        print(f"exported {net.export(args.export)}")
    png = report.plot(os.path.join(args.work_dir, "tuning_curve.png"))
    print(f"tuning curve: {png}; records: {args.work_dir}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    import os

    from .scheduler.report import load_report

    report = load_report(args.work_dir)
    print(report.table())
    png = report.plot(args.png or os.path.join(args.work_dir, "tuning_curve.png"))
    print(f"tuning curve: {png}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="drytune", description="Static auto-scheduling of tensor programs.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("calibrate", help="measure suite candidates on this CPU and fit the cost-model coefficients")
    p.add_argument("--target", default="llvm")
    p.add_argument("--ops", default="gemm,conv2d_nchw,depthwise_conv2d,softmax,layer_norm,avg_pool2d")
    p.add_argument("--samples", type=int, default=40, help="measured candidates per operator")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds that time each operator's candidates in turn (the median is kept)")
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

    model_help = "an .onnx file, file.py:function returning (torch module, example inputs), or a zoo model"
    p = sub.add_parser("tasks", help="list a model's tasks (fused subgraphs) with calls and FLOPs")
    p.add_argument("model", help=model_help)
    p.add_argument("--target", default="llvm")
    _graph_options(p)
    p.set_defaults(func=_cmd_tasks)
    p = sub.add_parser("tune", help="tune a whole network and build it")
    p.add_argument("model", help=model_help)
    p.add_argument("--budget", default=None, help='e.g. 10m, 600, "2000 trials" (default: the budgets file, else 10m)')
    p.add_argument("--target", default="llvm", help="short name (llvm, x86-avx512, aarch64, cuda-sm90...) or JSON")
    p.add_argument("--budgets", default=None, help="per-task budgets, a TOML or JSON file (see `drytune tasks`)")
    p.add_argument("--ray-address", default=None, help="join this Ray cluster (default: $RAY_ADDRESS or local Ray)")
    p.add_argument("--num-workers", type=int, default=None, help="scoring actors (default: one per CPU)")
    p.add_argument("--work-dir", default="drytune-work", help="records and round log; a rerun resumes from it")
    p.add_argument("--strategy", default="portfolio", choices=("portfolio", "evolutionary", "cmaes", "random"))
    _graph_options(p)
    p.add_argument("--verify-top-k", type=int, default=0,
                   help="measure each task's k best predictions on this CPU and build the fastest (default: no runs)")
    p.add_argument("--export", default=None, help="write the tuned network as a shared library (.so)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_tune)
    p = sub.add_parser("report", help="per-task table and tuning-curve PNG of a network work directory")
    p.add_argument("work_dir")
    p.add_argument("--png", default=None, help="where to write the PNG (default: WORK_DIR/tuning_curve.png)")
    p.set_defaults(func=_cmd_report)
    return ap


def main(argv: list[str] | None = None) -> int:
    from .errors import DrytuneError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (KeyError, ValueError, ImportError, DrytuneError) as err:
        print(f"drytune: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
