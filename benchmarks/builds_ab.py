"""Time the networks two `networks.py` work directories built for one model, interleaved in one process.

A network's latency in `networks.py`'s measure phase moves with the machine's phase between runs; this times the
libraries of two work directories (each one's `drytune.so` and `drytune_verified.so`) and PyTorch eager over the same
rounds, so that two sessions' builds compare without the phase between them. Ratio: median over rounds of B's
latency over A's (< 1: B faster).

    python benchmarks/builds_ab.py --model mobilenet_v2 --tag znver5_s63_vs_s64 \
        --work-dirs drytune-work/networks_znver5_s63,drytune-work/networks_znver5_s64
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from network_ab import interleaved_rounds, library_call
from networks import model_dir, random_arrays
from report_files import write_report

LIBRARIES = ("drytune", "drytune_verified")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--work-dirs", required=True, help="A,B: two networks.py work directories")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-seconds", type=float, default=0.3, help="time per network per repeat")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import torch

    from drytune import zoo

    dirs = args.work_dirs.split(",")
    if len(dirs) != 2:
        ap.error("--work-dirs takes two directories, A,B")
    torch.set_num_threads(args.threads)
    torch_model, examples = zoo.get_model(args.model)
    inputs = random_arrays(examples, 0)
    xs = [torch.from_numpy(x) for x in inputs]

    def run_torch():
        with torch.inference_mode():
            return torch_model(*xs)

    calls = {"torch": run_torch}
    for label, work in zip("AB", dirs, strict=True):
        for lib in LIBRARIES:
            path = os.path.join(model_dir(os.path.abspath(work), args.model), lib + ".so")
            if not os.path.exists(path):
                raise SystemExit(f"{path} is missing: run networks.py's build phase for that work directory")
            calls[f"{label}/{lib}"] = library_call(path, inputs)
    names = list(calls)
    times = interleaved_rounds(calls, args.rounds, args.min_seconds, repeats=3, pause_s=0.2)
    ratio = {lib: statistics.median(b / a for a, b in zip(times[f"A/{lib}"], times[f"B/{lib}"], strict=True))
             for lib in LIBRARIES}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "work_dirs": dirs, "rounds_s": times,
              "ratio_b_over_a": ratio, "command": "python benchmarks/builds_ab.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: two work directories' builds timed together", "", f"{report['date']}. "
             f"`{report['command']}`", "", f"A = `{dirs[0]}`, B = `{dirs[1]}`; median of {args.rounds} interleaved "
             "rounds.", "", "| build | median ms | / torch | B / A |", "|---|---|---|---|"]
    for name in names:
        lib = name.split("/")[-1]
        to_torch = statistics.median(x / t for x, t in zip(times[name], times["torch"], strict=True))
        lines.append(f"| {name} | {statistics.median(times[name]) * 1e3:.3f} | {to_torch:.3f} | "
                     + (f"{ratio[lib]:.3f} |" if name.startswith("B/") else "|"))
    write_report(f"builds_ab_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
