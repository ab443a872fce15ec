"""Command line of drytune: `drytune ops`, `drytune space OP` (more commands arrive with search and networks)."""

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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="drytune", description="Static auto-scheduling of tensor programs.")
    sub = ap.add_subparsers(dest="command", required=True)
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
