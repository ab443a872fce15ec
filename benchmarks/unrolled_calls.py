"""What a libm call costs when TVM unrolls thousands of them into straight-line code.

y = exp(x) over 16384 x 16 floats, one zmm (16 lanes) per row: the row loop is split and its inner part of U rows
unrolled explicitly, so that the body holds 16 x U call sites (LLVM scalarizes exp into one call per lane). The same
calls are executed whatever U is; only the size of the straight-line code changes. A control with no call
(y = x * 1.5 + 0.5) is unrolled the same way. Each kernel is timed on one thread in interleaved rounds and predicted by
the kernel model with and without the cold-call rule (`KernelConfig.hot_call_sites`, `cold_call_cycles`).

    python benchmarks/unrolled_calls.py --tag emeraldrapids
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from microbench import interleaved, kernel_timer, one_core_target, parse_args
from report_files import write_report

ROWS, LANES = 16384, 16
UNROLLS = (1, 8, 16, 32, 64, 128, 256, 512, 1024)


def kernel(body: str, unroll: int):
    """y[i, j] = exp(x[i, j]) (body "exp") or x * 1.5 + 0.5 ("fma"): rows in runs of `unroll` unrolled, 16 lanes
    vectorized."""
    import tvm
    from tvm import s_tir, te

    x = te.placeholder((ROWS, LANES), "float32", name="x")
    fn = (lambda i, j: te.exp(x[i, j])) if body == "exp" else (lambda i, j: x[i, j] * 1.5 + 0.5)
    y = te.compute((ROWS, LANES), fn, name="y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([x, y])}))
    i, j = sch.get_loops(sch.get_sblock("y"))
    if unroll > 1:
        _, inner = sch.split(i, [None, unroll])
        sch.unroll(inner)
    sch.vectorize(j)
    return sch.mod


def main() -> int:
    args = parse_args(__doc__)
    import tvm

    from drytune.costmodel.kernel import KernelConfig
    from drytune.costmodel.model import StaticCostModel

    target = one_core_target()
    cold = KernelConfig.cold_call_cycles
    models = {"rule": StaticCostModel(target, kernel_overrides={"cold_call_cycles": cold}),
              "no rule": StaticCostModel(target, kernel_overrides={"cold_call_cycles": 0.0})}
    cases = [(body, u) for body in ("exp", "fma") for u in UNROLLS]
    timers, predicted = {}, {}
    rng = np.random.default_rng(0)
    for case in cases:
        mod = kernel(*case)
        timers[case] = kernel_timer(tvm.compile(mod, target=target), mod, rng, args.min_seconds)
        predicted[case] = {name: m.seconds_of_module(mod) for name, m in models.items()}
    times = interleaved(timers, args.rounds)
    rows = []
    for body, u in cases:
        t = statistics.median(times[(body, u)])
        rows.append({"body": body, "unroll": u, "call_sites": u * LANES if body == "exp" else 0, "measured_s": t,
                     "ns_per_element": t / (ROWS * LANES) * 1e9, "predicted_s": predicted[(body, u)]})
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(target), "cold_call_cycles": cold,
              "hot_call_sites": KernelConfig.hot_call_sites, "rows": rows,
              "command": "python benchmarks/unrolled_calls.py " + " ".join(sys.argv[1:])}
    lines = ["# Unrolled libm calls: measured and predicted", "", f"{report['date']}. `{report['command']}`", "",
             f"One thread, {args.rounds} interleaved rounds (median); {ROWS} x {LANES} elements. measured / predicted "
             f"is relative to the same body not unrolled (1.00: the model rates the unrolling as it runs); the rule "
             f"charges {cold:g} cycles per call in bodies of more than {KernelConfig.hot_call_sites} call sites.", "",
             "| body | rows unrolled | call sites in the body | measured us | ns per element | "
             "measured / predicted, rule | same, no rule |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = next(x for x in rows if x["body"] == r["body"] and x["unroll"] == 1)
        rel = {name: (r["measured_s"] / r["predicted_s"][name]) / (ref["measured_s"] / ref["predicted_s"][name])
               for name in models}
        r["relative_measured_over_predicted"] = rel
        lines.append(f"| {r['body']} | {r['unroll']} | {r['call_sites']} | {r['measured_s'] * 1e6:.1f} | "
                     f"{r['ns_per_element']:.2f} | {rel['rule']:.2f} | {rel['no rule']:.2f} |")
    write_report("unrolled_calls", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
