"""Search-space ablation: drytune tuned at equal budgets over two search spaces, both picks measured interleaved.

A space variant is a set of `SpaceConfig` overrides. The question it answers: does leaving a region out of the
space (where the static model is known to err) give faster picks than searching it? A variant may instead (or
also) name a coefficients file, `coefficients=FILE`: do a new calibration's picks run faster than the shipped one's?

    python benchmarks/space_ablation.py --ops gemm,dense_bias_gelu --budget 120 \\
        --variant "no512:cpu_unroll_steps=0,16,64"
    python benchmarks/space_ablation.py --ops "dense_bias_gelu:M=128,N=768,K=3072" --budget 120 \\
        --variant "norows:pack_row_widths="
    python benchmarks/space_ablation.py --ops gemm,conv1d --budget 90 --variant "refit:coefficients=new.json"
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys
import tempfile
import time

import drytune as dt
from drytune import workloads
from drytune.costmodel.model import StaticCostModel
from drytune.measure import MeasureWorker, measure_modules
from drytune.sketch.config import SpaceConfig

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def parse_variant(text: str) -> tuple[str, SpaceConfig, str | None]:
    """'NAME:field=v1,v2;field2=v' -> (NAME, SpaceConfig with those fields, coefficients file or None); tuples of
    ints (empty: 'field='), a bool/int or none; the field `coefficients` names a coefficients file."""
    name, _, body = text.partition(":")
    overrides, coefficients = {}, None
    for item in filter(None, body.split(";")):
        key, _, value = item.partition("=")
        if key == "coefficients":
            if not os.path.exists(value):
                raise SystemExit(f"variant {name}: no coefficients file {value}")
            coefficients = value
            continue
        default = getattr(SpaceConfig(), key)
        if value.lower() == "none":
            overrides[key] = None
        elif isinstance(default, tuple):
            overrides[key] = tuple(int(v) for v in value.split(",") if v)
        elif isinstance(default, bool):
            overrides[key] = value.lower() in ("1", "true", "yes")
        else:
            overrides[key] = type(default)(value)
    return name, dataclasses.replace(SpaceConfig(), **overrides), coefficients


def operator_task(text: str) -> dt.Task:
    """'gemm' -> the suite operator; 'dense_bias_gelu:M=128,N=768,K=3072' -> the same operator at another shape."""
    name, _, shape = text.partition(":")
    params = {k: int(v) for k, v in (item.split("=") for item in filter(None, shape.split(",")))}
    wl = workloads.reshaped(name, **params) if params else workloads.get(name)
    label = "_".join([name, *(f"{k}{v}" for k, v in params.items())])
    return wl.task("llvm", name=label)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="gemm,dense_bias_gelu",
                    help="suite operators, comma-separated; OP:K=V,... sets a shape (operators then separated by ';')")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds of tuning per operator and variant")
    ap.add_argument("--variant", action="append", required=True, help="NAME:field=values;... (repeatable)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(RESULTS, "space_ablation"))
    args = ap.parse_args()
    variants = [("default", SpaceConfig(), None), *map(parse_variant, args.variant)]
    report = {"date": time.strftime("%Y-%m-%d"), "budget_s": args.budget,
              "variants": {n: dataclasses.asdict(c) for n, c, _ in variants},
              "coefficients": {n: f or "shipped" for n, _, f in variants}, "rows": []}
    for op in args.ops.split(";" if ":" in args.ops else ","):
        task = operator_task(op)
        mods, info = {}, {}
        for name, config, coefficients in variants:
            model = functools.partial(StaticCostModel, coefficients=coefficients) if coefficients else None
            res = dt.tune(task, seconds=args.budget, progress=False, work_dir=tempfile.mkdtemp(prefix="dt-"),
                          space=dt.SearchSpace(task, config=config), cost_model=model)
            mods[name] = res.best.to_mod()
            info[name] = {"trials": res.trials, "predicted_s": res.predicted,
                          "best": {"sketch": res.best.sketch.name, "decisions": res.best.decisions}}
        times: dict[str, list[float]] = {n: [] for n in mods}
        with MeasureWorker() as worker:
            for r in range(args.rounds):
                names = list(mods)[r % len(mods):] + list(mods)[:r % len(mods)]
                for name in names:
                    res = measure_modules([mods[name]], task.target, number=3, repeat=3, min_repeat_ms=50,
                                          worker=worker)[0]
                    times[name].append(res.seconds)
        row = {"op": op, "info": info, "median_s": {n: statistics.median(v) for n, v in times.items()},
               "rounds_s": times}
        for name in mods:
            if name != "default":  # > 1: the variant's pick is faster than the default space's
                row[f"speedup[{name}]"] = statistics.median(
                    d / v for d, v in zip(times["default"], times[name], strict=True))
        report["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "rounds_s"}), flush=True)
        with open(args.out + ".json", "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
