"""How the burst-store rule would choose among the searches' picks, for several thresholds and costs per line.

Reads a `pick_pool.py` report (each task's pool of picks, timed cold, with the features a coefficients file read),
rebuilds the pools' schedules from the same work directories, counts each member's output lines stored in bursts
(`drytune.costmodel.burststore.burst_store_lines`, per core) at each `--thresholds` value, and adds `--cycles` per
line to the file's price. Reported per setting: calls x measured time of the members so chosen over the pools' best,
and the share of member pairs of a task (apart by 3% or more) that the prices order as the cold times do.

    python benchmarks/burst_sweep.py --report benchmarks/results/pick_pool_mobilenet_v2_znver5_s68_hoist.json \\
        --file s68_hoist --tag mobilenet_v2_znver5_s69
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import numpy as np
from pick_pool import pools
from report_files import write_report

from drytune.costmodel.burststore import burst_store_lines, output_params
from drytune.costmodel.looptree import LoopTree


def choice_quality(rows: list[dict], extra_ms: dict[tuple[str, str], float]) -> tuple[float, float]:
    """(chosen / best, pairwise agreement) when each member's price is the file's plus `extra_ms`."""
    best = chosen = 0.0
    agree = pairs = 0
    for r in rows:
        ms = r["members"]
        price = [m["priced"] + extra_ms[(r["task"], m["key"])] for m in ms]
        meas = [m["measured_ms"] for m in ms]
        best += r["weight"] * min(meas)
        chosen += r["weight"] * meas[int(np.argmin(price))]
        for i, j in itertools.combinations(range(len(ms)), 2):
            if abs(meas[i] / meas[j] - 1) >= 0.03:
                pairs += 1
                agree += (price[i] < price[j]) == (meas[i] < meas[j])
    return chosen / best, agree / max(pairs, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", required=True, help="a pick_pool.py JSON report")
    ap.add_argument("--file", required=True, help="the report's coefficients file whose prices are the base")
    ap.add_argument("--thresholds", default="4,8,16,32,96", help="lines stored in a row beyond which they wait")
    ap.add_argument("--cycles", default="0,2,4,4.6,6,8,10,16", help="cycles per burst line (the spec's clock)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--freq-ghz", type=float, default=2.6, help="the clock the model's cycles are counted at")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    with open(args.report) as f:
        report = json.load(f)
    by_task = {r["task"]: r for r in report["rows"]}
    thresholds = [float(t) for t in args.thresholds.split(",")]
    rows, lines = [], {}
    for nt, mods, _sources, _ms in pools(report["model"], report["work_dirs"], args.cores, True, None):
        r = by_task.get(nt.name)
        if r is None:
            continue
        members = []
        for m in r["members"]:
            mod = mods.get(m["key"])
            if mod is None:
                continue
            tree = LoopTree.from_mod(mod)
            outs = output_params(mod, tree)
            for t in thresholds:
                lines[(t, nt.name, m["key"])] = burst_store_lines(tree, outs, t, args.cores)
            members.append({"key": m["key"], "measured_ms": m["measured_ms"], "priced": m["priced_ms"][args.file]})
        if members:
            rows.append({"task": nt.name, "weight": r["weight"], "members": members})
    table = []
    for t in thresholds:
        for c in (float(x) for x in args.cycles.split(",")):
            extra = {(task, key): c * n / (args.freq_ghz * 1e9) * 1e3 for (tt, task, key), n in lines.items()
                     if tt == t}
            ratio, pairwise = choice_quality(rows, extra)
            table.append({"threshold_lines": t, "cycles_per_line": c, "chosen_over_best": ratio,
                          "pairwise": pairwise})
            print(f"threshold {t:5.0f}  cycles {c:5.1f}  chosen/best {ratio:.3f}  pairwise {pairwise:.3f}", flush=True)
    command = "python benchmarks/burst_sweep.py " + " ".join(sys.argv[1:])
    out = [f"# Burst-store rule on the pools of `{args.report}`", "", f"{time.strftime('%Y-%m-%d')}. `{command}`", "",
           f"Base: the prices of `{args.file}`; {len(rows)} tasks. Chosen / best: calls x cold time of the member each "
           "setting prices lowest, over the pools' fastest. Pairwise: member pairs of a task 3% or more apart that "
           "the prices order as the cold times do.", "",
           "| threshold (lines) | cycles per line | chosen / best | pairwise |", "|---|---|---|---|"]
    out += [f"| {r['threshold_lines']:.0f} | {r['cycles_per_line']:g} | {r['chosen_over_best']:.3f} | "
            f"{r['pairwise']:.3f} |" for r in table]
    write_report(f"burst_sweep_{report['model']}", args.tag, {"command": command, "rows": table}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
