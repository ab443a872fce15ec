"""Does the kernel model see the loops LLVM builds? For sampled candidates of a fidelity data file, the
multiply-adds per run of the assembly loop that holds the most of them (instructions in that loop x its trip count:
the same whatever LLVM's partial unrolling) beside the kernel model's for its multiply-add statement (statement
instances per body x vector instructions each x the innermost iterating loop's extent). They differ when the model
takes a loop as rolled that LLVM fully unrolled (or the reverse), or vectorizes another loop or width than LLVM.
Nothing is timed; each candidate is compiled once and every `--setting` of the kernel model is compared with it.

    python benchmarks/loop_structure.py --data benchmarks/results/fidelity_measurements_llvm_znver4_rounds.jsonl \\
        --per-op 30 --setting unroll_distinct_accesses=true --tag znver4_s92
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import multiprocessing
import sys
import time

import numpy as np
from costmodel_fidelity import parse_kernel_settings
from fidelity_eval import suite_operator
from report_files import write_report

from drytune.costmodel.asm import parse_asm
from drytune.costmodel.dataset import MeasuredRow, read_rows
from drytune.costmodel.kernel import statement_details
from drytune.costmodel.looptree import LoopTree

FMA_PREFIXES = ("vfmadd", "vfnmadd", "vfmsub", "vfnmsub", "fmla", "fmadd")
_OPERATORS: dict = {}


def model_multiply_adds(tree: LoopTree, model, cfg) -> int:
    """The kernel model's multiply-add instructions per run of the innermost iterating loop, the largest over the
    statements that multiply-add."""
    return max((round(det["statements"] * det["vector_ops"] * leaf.ops["fma"] * det["inner_extent"])
                for leaf, _, _, det in statement_details(tree, model.spec, cfg) if leaf.ops.get("fma")), default=0)


def asm_multiply_adds(asm: str, arch: str) -> int | None:
    """Multiply-add instructions x trip count of the assembly loop holding the most of them (None: its trip count
    is not a constant)."""
    count: collections.Counter = collections.Counter()
    functions = {}
    for f in parse_asm(asm, arch).functions:
        functions[f.name] = f
        for k, inst in enumerate(f.instructions):
            if inst.mnemonic.startswith(FMA_PREFIXES):
                count[(f.name, f.innermost_loop(k))] += 1
    if not count:
        return 0
    (name, loop), n = max(count.items(), key=lambda kv: kv[1])
    trip = functions[name].loops[loop].trip if loop is not None else 1
    return n * trip if trip else None


def _compare(job: tuple[MeasuredRow, list[dict]]) -> tuple[str, str, list[int], int | None]:
    row, settings = job
    if row.op not in _OPERATORS:
        _OPERATORS[row.op] = suite_operator(row.op)
    _, space, model = _OPERATORS[row.op]
    mod = row.candidate(space).to_mod()
    tree = LoopTree.from_mod(mod)
    predicted = [model_multiply_adds(tree, model, dataclasses.replace(model.kernel, **s)) for s in settings]
    return row.op, row.sketch, predicted, asm_multiply_adds(model.assembly_of_module(mod), model.spec.arch)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a fidelity measurements file (its random rows are sampled)")
    ap.add_argument("--per-op", type=int, default=30, help="candidates per operator")
    ap.add_argument("--setting", action="append", default=[], metavar="FIELD=VALUE[,FIELD=VALUE]",
                    help="kernel-model overrides to compare besides the shipped settings (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    settings = [{}] + [parse_kernel_settings(s.split(","), "--setting") for s in args.setting]
    rows = [r for r in read_rows(args.data) if r.source == "random" and r.ok]
    picked: dict[str, list[MeasuredRow]] = collections.defaultdict(list)
    for i in np.random.default_rng(args.seed).permutation(len(rows)):
        r = rows[i]
        if len(picked[r.op]) < args.per_op:
            picked[r.op].append(r)
    jobs = [(r, settings) for op in sorted(picked) for r in picked[op]]
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(_compare, jobs, chunksize=4)
    print(f"compiled {len(jobs)} candidates in {time.perf_counter() - t0:.0f} s", flush=True)
    per_op: dict[str, dict] = {}
    for op, _, predicted, measured in results:
        if measured == 0 and not any(predicted):
            continue  # no multiply-adds (pooling, softmax)
        entry = per_op.setdefault(op, {"rows": 0, "unknown_trip": 0, "agree": [0] * len(settings)})
        entry["rows"] += 1
        if measured is None:
            entry["unknown_trip"] += 1
            continue
        for j, p in enumerate(predicted):
            entry["agree"][j] += int(p == measured)
    names = ["shipped"] + [", ".join(f"{k}={v}" for k, v in s.items()) for s in settings[1:]]
    totals = [sum(e["agree"][j] for e in per_op.values()) for j in range(len(settings))]
    n_rows = sum(e["rows"] for e in per_op.values())
    command = "python benchmarks/loop_structure.py " + " ".join(sys.argv[1:])
    lines = ["# Multiply-adds per innermost loop run: kernel model against the assembly", "",
             f"{time.strftime('%Y-%m-%d')}. `{command}`", "",
             f"{n_rows} candidates with multiply-adds ({args.per_op} sampled per operator, seed {args.seed}); each "
             "cell counts those whose model count equals the assembly's.", "",
             "| operator | rows | trip unknown | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for op, e in sorted(per_op.items()):
        lines.append(f"| {op} | {e['rows']} | {e['unknown_trip']} | " + " | ".join(map(str, e["agree"])) + " |")
    lines.append(f"| **all** | {n_rows} | {sum(e['unknown_trip'] for e in per_op.values())} | "
                 + " | ".join(f"**{t}**" for t in totals) + " |")
    write_report("loop_structure", args.tag, {"command": command, "settings": settings, "per_op": per_op,
                                              "rows": [list(r) for r in results]}, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
