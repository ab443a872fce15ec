"""A network's convolutions tuned in the imported layout (NCHW) and channels-last (NHWC), timed interleaved.

Each selected task is tuned by drytune with the same budget in both layouts (static model, nothing measured
while tuning), then both picks are measured alternately over several rounds; the ratio is the median of the
per-round NCHW / NHWC times (> 1: channels-last faster).

    python benchmarks/layout_convs.py --model resnet50 --tasks 6 --seconds 45 --tag znver4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def conv_tasks(model: str, target: dict, layout: str) -> dict:
    from drytune import zoo
    from drytune.extract import extract_tasks, fuse
    from drytune.network import load_network

    network = load_network(*zoo.get_model(model), name=model)
    return {nt.name: nt for nt in extract_tasks(fuse(network.mod, target, layout=layout), target)
            if nt.kind == "conv2d"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--tasks", type=int, default=6, help="the convolutions with the most weight x FLOPs")
    ap.add_argument("--seconds", type=float, default=45.0, help="drytune's budget per task and layout")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, HERE)
    from networks import target_dict

    import drytune as dt

    target = target_dict(args.threads)
    by_layout = {lay: conv_tasks(args.model, target, lay) for lay in ("keep", "NHWC")}
    common = [n for n in by_layout["NHWC"] if n in by_layout["keep"]]
    for n in common:
        if by_layout["NHWC"][n].flops != by_layout["keep"][n].flops:
            raise SystemExit(f"{n}: the two layouts' tasks differ in FLOPs; names do not pair them")
    chosen = sorted(common, key=lambda n: -by_layout["keep"][n].weight * by_layout["keep"][n].flops)[:args.tasks]
    rows = []
    for name in chosen:
        picks = {}
        for lay in ("keep", "NHWC"):
            task = by_layout[lay][name].task
            res = dt.tune(task, seconds=args.seconds, seed=0, progress=False)
            picks[lay] = (task, res)
        times: dict[str, list[float]] = {"keep": [], "NHWC": []}
        for r in range(args.rounds):
            for lay in (("keep", "NHWC") if r % 2 == 0 else ("NHWC", "keep")):
                task, res = picks[lay]
                times[lay].append(float(dt.measure(task, [res.best])[0]))
        ratio = statistics.median(a / b for a, b in zip(times["keep"], times["NHWC"], strict=True))
        nt = by_layout["keep"][name]
        row = {"task": name, "calls": nt.weight, "gflop": nt.flops / 1e9,
               "nchw_ms": statistics.median(times["keep"]) * 1e3, "nhwc_ms": statistics.median(times["NHWC"]) * 1e3,
               "nchw_over_nhwc": ratio, "trials": {lay: picks[lay][1].trials for lay in picks},
               "predicted_ms": {lay: picks[lay][1].predicted * 1e3 for lay in picks}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = os.path.join(HERE, "results", f"layout_convs_{args.model}" + (f"_{args.tag}" if args.tag else ""))
    command = "python benchmarks/layout_convs.py " + " ".join(sys.argv[1:])
    with open(out + ".json", "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "command": command, "rows": rows}, f, indent=1)
    lines = [f"# {args.model}: convolutions in NCHW and NHWC, {args.seconds:g} s of drytune each", "",
             f"{time.strftime('%Y-%m-%d')}. `{command}`", "",
             "| task | calls | GFLOP | NCHW ms | NHWC ms | NCHW / NHWC (median of rounds) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['calls']} | {r['gflop']:.3f} | {r['nchw_ms']:.3f} | {r['nhwc_ms']:.3f} "
              f"| {r['nchw_over_nhwc']:.2f} |" for r in rows]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
