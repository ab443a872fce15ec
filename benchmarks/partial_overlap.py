"""What a masked accumulator tail costs when it reaches into the next vector (`KernelConfig.partial_overlap_cycles`).

A body that loads and stores its accumulators, vectorized with a masked tail (14 lanes as 8 + a masked 6 of a ymm),
stores past the end of its row into the start of the next row; the next row's first load then overlaps that store
in part and waits until it is written to L1. The script takes measured fidelity rows whose kernel model flags that
(some statement with `overlap_rows`), and as controls rows with accumulators through memory that it does not flag,
and times each as scheduled against the same schedule with the output tile's rows padded to a multiple of 16 floats
(`storage_align` on the accumulator buffer; the instructions stay the same), one thread, interleaved rounds. Both
variants' outputs are compared. The kernel model's prediction of each variant, with the rule off and on, is given.

    python benchmarks/partial_overlap.py --tag emeraldrapids --data \\
        benchmarks/results/fidelity_measurements_llvm_emeraldrapids_merged.jsonl --ops conv2d_s2,conv2d_nchw
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

os.environ["TVM_NUM_THREADS"] = "1"  # one thread, as the other kernel microbenchmarks

import numpy as np
from fidelity_eval import read_rows, suite_operator
from microbench import interleaved, kernel_timer, one_core_target
from report_files import write_report

from drytune.costmodel.kernel import statement_details
from drytune.costmodel.looptree import LoopTree
from drytune.costmodel.model import StaticCostModel
from drytune.errors import TVM_ERRORS

ALIGN = 16  # floats: rows of the padded tile start on a 64-byte boundary
RULE = 20.0  # partial_overlap_cycles with the rule on


def flagged_statements(tree: LoopTree, model: StaticCostModel) -> tuple[list[str], list[str]]:
    """Blocks of the statements with accumulators through memory: those the rule flags, and the others."""
    cfg = dataclasses.replace(model.kernel, partial_overlap_cycles=RULE)
    flagged, others = [], []
    for leaf, _, _, det in statement_details(tree, model.spec, cfg):
        if det.get("acc_in_memory") and not leaf.init:
            (flagged if det.get("overlap_rows") else others).append(leaf.block)
    return flagged, others


def padded(cand, block: str):
    """The candidate's module with the rows of `block`'s output (the accumulators) padded to a multiple of ALIGN
    floats."""
    sch = cand.to_schedule()
    rv = sch.get_sblock(block)
    sch.storage_align(rv, 0, len(sch.get(rv).writes[0].source.shape) - 2, ALIGN, 0)
    return sch.mod


def same_outputs(lib_a, lib_b, mod) -> bool:
    """Whether both builds of `mod` write the same output from the same random inputs."""
    import tvm

    dev = tvm.cpu()
    outs = []
    for lib in (lib_a, lib_b):
        rng = np.random.default_rng(1)  # the same inputs for both
        arrays = [tvm.runtime.tensor(rng.random([int(x) for x in p.shape], dtype=np.float32), dev)
                  for p in mod["main"].params]
        lib(*arrays)
        outs.append(arrays[-1].numpy())
    return bool(np.allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a fidelity measurements file (its candidates are replayed)")
    ap.add_argument("--ops", default="conv2d_s2,conv2d_nchw,conv2d_bias_relu,gemm")
    ap.add_argument("--flagged", type=int, default=4, help="flagged rows per operator (the fastest measured first)")
    ap.add_argument("--controls", type=int, default=2, help="unflagged rows per operator")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=0.2, help="time per kernel per round")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()

    import tvm

    target = one_core_target()
    models = {"rule off": StaticCostModel(target), "rule on": StaticCostModel(
        target, kernel_overrides={"partial_overlap_cycles": RULE})}
    rows = [r for r in read_rows(args.data) if r.ok and r.source == "random"]
    cases, timers = [], {}
    rng = np.random.default_rng(0)
    for op in args.ops.split(","):
        task, space, model = suite_operator(op)
        picked = {"flagged": 0, "control": 0}
        for row in sorted((r for r in rows if r.op == op), key=lambda r: r.seconds):
            cand = row.candidate(space)
            flagged, others = flagged_statements(LoopTree.from_mod(cand.to_mod()), model)
            kind = "flagged" if flagged else "control" if others else None
            if kind is None or picked[kind] >= (args.flagged if kind == "flagged" else args.controls):
                continue
            try:
                mods = {"as scheduled": cand.to_mod(), "rows padded": padded(cand, (flagged or others)[0])}
            except TVM_ERRORS as err:  # e.g. a statement that writes the output parameter: no buffer to pad
                print(f"{op}: {kind} row skipped, its rows cannot be padded: {str(err).strip().splitlines()[-1]}",
                      flush=True)
                continue
            libs = {k: tvm.compile(m, target=target) for k, m in mods.items()}
            if not same_outputs(libs["as scheduled"], libs["rows padded"], mods["as scheduled"]):
                print(f"{op}: padded variant of a row computes another output; skipped", flush=True)
                continue
            picked[kind] += 1
            case = {"op": op, "kind": kind, "sketch": row.sketch, "decisions": row.decisions,
                    "block": (flagged or others)[0], "fidelity_seconds": row.seconds,
                    "predicted_s": {v: {name: m.seconds_of_module(mods[v]) for name, m in models.items()}
                                    for v in mods}}
            cases.append(case)
            for v in mods:
                timers[(len(cases) - 1, v)] = kernel_timer(libs[v], mods[v], rng, args.min_seconds)
            print(f"{op}: {kind} row {row.sketch} ({row.seconds * 1e3:.2f} ms with all threads)", flush=True)
    times = interleaved(timers, args.rounds)
    for i, case in enumerate(cases):
        a, b = times[(i, "as scheduled")], times[(i, "rows padded")]
        case["measured_s"] = {"as scheduled": statistics.median(a), "rows padded": statistics.median(b)}
        case["measured_ratio"] = statistics.median(x / y for x, y in zip(a, b, strict=True))
        case["predicted_ratio"] = {name: case["predicted_s"]["as scheduled"][name]
                                   / case["predicted_s"]["rows padded"][name] for name in models}
    command = "python benchmarks/partial_overlap.py " + " ".join(sys.argv[1:])
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(target), "command": command, "rule_cycles": RULE,
              "cases": cases}
    lines = ["# Masked accumulator tails that reach into the next vector: measured and predicted", "",
             f"{report['date']}. `{command}`", "",
             f"One thread, {args.rounds} interleaved rounds. Ratio: as scheduled over the same schedule with the "
             f"accumulator tile's rows padded to {ALIGN} floats (median of per-round ratios); predicted with "
             f"`partial_overlap_cycles` 0 and {RULE:g}.", "",
             "| op | row | block | as scheduled ms | padded ms | measured ratio | predicted, rule off | "
             "predicted, rule on |", "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        lines.append(f"| {c['op']} | {c['kind']} | {c['block']} | {c['measured_s']['as scheduled'] * 1e3:.3f} | "
                     f"{c['measured_s']['rows padded'] * 1e3:.3f} | {c['measured_ratio']:.2f} | "
                     f"{c['predicted_ratio']['rule off']:.2f} | {c['predicted_ratio']['rule on']:.2f} |")
    for kind in ("flagged", "control"):
        ratios = [c["measured_ratio"] for c in cases if c["kind"] == kind]
        if ratios:
            lines.append(f"\n{kind}: {len(ratios)} rows, measured ratio median {statistics.median(ratios):.2f} "
                         f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    write_report("partial_overlap", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
