"""What a scalarized libm call costs by the code around it: vector width, and thousands of calls unrolled.

LLVM turns exp on a TVM vector into one call per lane. Two sweeps over y = exp(x), 262144 floats, one thread:
(1) the loop vectorized at 1 (a scalar loop), 4, 8, 16, 32 or 64 lanes; (2) 16384 rows of 16 lanes whose row loop is
split and its inner part of U rows unrolled explicitly, so that the body holds 16 x U call sites: the same calls are
executed whatever U is, only the size of the straight-line code changes. A control with no call (y = x * 1.5 + 0.5)
is unrolled the same way. Each kernel is timed in interleaved rounds and predicted by the kernel model with its
libm rules (`KernelConfig.libm_vector_lane_cycles`, `hot_call_sites`, `cold_call_cycles`) and without them.

    python benchmarks/libm_calls.py --tag emeraldrapids
"""

from __future__ import annotations

import statistics
import sys
import time

from microbench import interleaved, one_core_target, parse_args, relative_accuracy, timed_and_predicted
from report_files import write_report

ROWS, LANES = 16384, 16
WIDTHS = (1, 4, 8, 16, 32, 64)
UNROLLS = (1, 8, 64, 256, 512, 1024)
RULES_OFF = {"libm_vector_lane_cycles": 0.0, "cold_call_cycles": 0.0}


def kernel(body: str, lanes: int, unroll: int):
    """y[i, j] = exp(x[i, j]) (body "exp") or x * 1.5 + 0.5 ("fma") over ROWS x LANES: the flat loop vectorized at
    `lanes` (1: not at all) when `unroll` is 1, else rows in runs of `unroll` unrolled and the 16 columns vectorized."""
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
    elif lanes > 1:
        _, inner = sch.split(sch.fuse(i, j), [None, lanes])
        sch.vectorize(inner)
    return sch.mod


def main() -> int:
    args = parse_args(__doc__)

    from drytune.costmodel.kernel import KernelConfig
    from drytune.costmodel.model import StaticCostModel

    target = one_core_target()
    models = {"rules": StaticCostModel(target), "no rules": StaticCostModel(target, kernel_overrides=RULES_OFF)}
    cases = [("exp", w, 1) for w in WIDTHS] + [(body, LANES, u) for body in ("exp", "fma") for u in UNROLLS]
    cases = list(dict.fromkeys(cases))
    timers, predicted = timed_and_predicted(cases, kernel, target, models, args.min_seconds)
    times = interleaved(timers, args.rounds)
    rows = []
    for body, lanes, u in cases:
        t = statistics.median(times[(body, lanes, u)])
        rows.append({"body": body, "lanes": lanes, "unroll": u, "call_sites": u * lanes if body == "exp" else 0,
                     "measured_s": t, "ns_per_element": t / (ROWS * LANES) * 1e9,
                     "predicted_s": predicted[(body, lanes, u)]})

    cfg = KernelConfig()
    report = {"date": time.strftime("%Y-%m-%d"), "target": str(target), "rows": rows,
              "rules": {k: getattr(cfg, k) for k in ("libm_vector_lane_cycles", "hot_call_sites", "cold_call_cycles")},
              "command": "python benchmarks/libm_calls.py " + " ".join(sys.argv[1:])}
    lines = ["# Scalarized libm calls: measured and predicted", "", f"{report['date']}. `{report['command']}`", "",
             f"One thread, {args.rounds} interleaved rounds (median), {ROWS * LANES} elements. measured / predicted is "
             "relative to the first row of each table (1.00: the model rates the change as it runs). Rules: "
             f"{cfg.libm_vector_lane_cycles:g} cycles more per call on a full vector register or wider (nothing on "
             "narrower ones), "
             f"{cfg.cold_call_cycles:g} more per call in bodies of more than {cfg.hot_call_sites} call sites.", "",
             "Vector width (exp, flat loop):", "",
             "| lanes | measured us | ns per element | measured / predicted, rules | same, no rules |",
             "|---|---|---|---|---|"]
    width_rows = [r for r in rows if r["body"] == "exp" and r["unroll"] == 1]
    for r in width_rows:
        rel = r["relative_measured_over_predicted"] = relative_accuracy(r, width_rows[0])
        lines.append(f"| {r['lanes']} | {r['measured_s'] * 1e6:.1f} | {r['ns_per_element']:.2f} | {rel['rules']:.2f} | "
                     f"{rel['no rules']:.2f} |")
    lines += ["", "Unrolled rows of 16 lanes:", "",
              "| body | rows unrolled | call sites in the body | measured us | ns per element | "
              "measured / predicted, rules | same, no rules |", "|---|---|---|---|---|---|---|"]
    for body in ("exp", "fma"):
        unrolled = [r for r in rows if r["body"] == body and r["lanes"] == LANES]
        for r in unrolled:
            rel = relative_accuracy(r, unrolled[0])
            r.setdefault("relative_measured_over_predicted", rel)
            lines.append(f"| {body} | {r['unroll']} | {r['call_sites']} | {r['measured_s'] * 1e6:.1f} | "
                         f"{r['ns_per_element']:.2f} | {rel['rules']:.2f} | {rel['no rules']:.2f} |")
    write_report("libm_calls", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
