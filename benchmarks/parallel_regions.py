"""What a parallel region costs on this CPU, and whether the static model now leaves tiny nests serial.

Part 1: modules of 1, 2, 4 and 8 near-empty nests (64 additions each), every nest a parallel loop or a serial one,
measured interleaved over --rounds rounds; the cost of one region is (parallel - serial) / regions, per round.
Also `drytune.costmodel.calibrate.parallel_region_cycles`, the figure a calibration pins.

Part 2: for each operator of --ops, the candidate the pre-score ranks best among 64 random ones (seed 0: a good
kernel, as a search would reach, where a region's cost matters most) in two versions, every nest at its deepest
parallel fusion and every nest serial; measured interleaved, with the shipped model's predictions beside them.

    python benchmarks/parallel_regions.py --tag znver5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from fidelity_eval import save_report, suite_operator  # noqa: E402
from op_tuning import interleaved  # noqa: E402

import drytune as dt  # noqa: E402
from drytune.costmodel.calibrate import parallel_region_cycles, parallel_regions_module  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DEFAULT_OPS = "global_avg_pool,layer_norm,softmax,avg_pool2d,norm2,gemm_bert"


def region_costs(target, rounds: int) -> dict[str, dict[str, float]]:
    """Median seconds of k parallel / serial near-empty nests, and the median per-round cost of one region."""
    mods = {f"{kind}{k}": parallel_regions_module(k, kind == "parallel")
            for k in (1, 2, 4, 8) for kind in ("parallel", "serial")}
    times = interleaved(mods, target, rounds=rounds)
    out = {}
    for k in (1, 2, 4, 8):
        per_round = [(p - s) / k for p, s in zip(times[f"parallel{k}"], times[f"serial{k}"], strict=True)]
        out[str(k)] = {"parallel_s": statistics.median(times[f"parallel{k}"]),
                       "serial_s": statistics.median(times[f"serial{k}"]),
                       "per_region_s": statistics.median(per_round)}
    return out


def serial_vs_parallel(op: str, rounds: int) -> dict:
    """The pre-score's best of 64 random candidates of `op`, every nest at its deepest parallel fusion and serial."""
    task, space, model = suite_operator(op)
    pool = space.sample(64, seed=0)
    cand = pool[int(model.prescore(task, pool).argmin())]
    holes = [h for h in cand.sketch.holes if h.kind == "parallel"]
    versions = {
        "parallel": {h.key: h.options.index(max(h.options)) for h in holes},
        "serial": {h.key: h.options.index(0) for h in holes},
    }
    cands = {k: dt.Candidate(task, cand.sketch, {**cand.decisions, **v}) for k, v in versions.items()}
    predicted = dict(zip(cands, model.predict(task, list(cands.values())).tolist(), strict=True))
    times = interleaved({k: c.to_mod() for k, c in cands.items()}, task.target, rounds=rounds)
    measured = {k: statistics.median(v) for k, v in times.items()}
    ratios = [s / p for s, p in zip(times["serial"], times["parallel"], strict=True)]
    return {"op": op, "sketch": cand.sketch.name, "predicted_s": predicted, "measured_s": measured,
            "serial_over_parallel_measured": statistics.median(ratios),
            "serial_over_parallel_predicted": predicted["serial"] / predicted["parallel"],
            "model_picks": min(predicted, key=predicted.get), "faster": min(measured, key=measured.get)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=DEFAULT_OPS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tag", default="", help="machine tag: the report is parallel_regions_TAG")
    args = ap.parse_args()
    target, spec = dt.resolve_target("llvm")
    regions = region_costs(target, args.rounds)
    pinned = parallel_region_cycles(target, spec.freq_ghz)
    rows = []
    for op in args.ops.split(","):
        rows.append(serial_vs_parallel(op, args.rounds))
        r = rows[-1]
        print(f"{op:16s} measured serial/parallel {r['serial_over_parallel_measured']:.2f}, predicted "
              f"{r['serial_over_parallel_predicted']:.2f}", flush=True)
    lines = [f"Parallel regions on this CPU ({time.strftime('%Y-%m-%d')}, {spec.name}, "
             f"{dt.threads.default_runtime_threads()} runtime threads, {args.rounds} interleaved rounds)", "",
             "| nests | parallel (us) | serial (us) | per region (us) |", "|---|---|---|---|"]
    for k, v in regions.items():
        lines.append(f"| {k} | {v['parallel_s'] * 1e6:.2f} | {v['serial_s'] * 1e6:.3f} | "
                     f"{v['per_region_s'] * 1e6:.2f} |")
    lines += ["", f"`parallel_region_cycles`: {pinned:.0f} cycles at the spec's {spec.freq_ghz} GHz "
              f"({pinned / spec.freq_ghz / 1e3:.2f} us).", "",
              "| operator | sketch | parallel measured / predicted (us) | serial measured / predicted (us) | "
              "serial / parallel measured | predicted | model picks | faster |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m, p = r["measured_s"], r["predicted_s"]
        lines.append(f"| {r['op']} | {r['sketch']} | {m['parallel'] * 1e6:.1f} / {p['parallel'] * 1e6:.1f} | "
                     f"{m['serial'] * 1e6:.1f} / {p['serial'] * 1e6:.1f} | {r['serial_over_parallel_measured']:.2f} | "
                     f"{r['serial_over_parallel_predicted']:.2f} | {r['model_picks']} | {r['faster']} |")
    suffix = f"_{args.tag}" if args.tag else ""
    save_report(os.path.join(RESULTS, f"parallel_regions{suffix}"), "\n".join(lines) + "\n",
                {"regions": regions, "parallel_region_cycles": pinned, "freq_ghz": spec.freq_ghz, "operators": rows})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
