"""Time the networks that two (or more) `networks.py` work directories built for one model, interleaved in one
process.

A network's latency in `networks.py`'s measure phase moves with the machine's phase between runs; this times the
libraries of the work directories (each one's `drytune.so` and `drytune_verified.so`) and PyTorch eager over the same
rounds, so that sessions' builds compare without the phase between them. Ratio: median over rounds of B's (C's...)
latency over A's (< 1: B faster). `--libraries` picks other builds of the work directories (MetaSchedule's `ms_long`,
say), and `--reference` adds a column of ratios to one build (e.g. `A/ms_long`: each drytune build against
MetaSchedule's long run in the same rounds).

    python benchmarks/builds_ab.py --model mobilenet_v2 --tag znver5_s63_vs_s64 \
        --work-dirs drytune-work/networks_znver5_s63,drytune-work/networks_znver5_s64
    python benchmarks/builds_ab.py --model mobilenet_v2 --libraries drytune,ms_long --reference A/ms_long \
        --work-dirs drytune-work/networks_znver3_s77_mobilenet_v2,drytune-work/networks_znver3_s78_mobilenet_v2_huge600
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from network_ab import interleaved_rounds, library_call
from networks import LIBRARIES, model_dir, random_arrays
from report_files import write_report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--work-dirs", required=True, help="A,B: two networks.py work directories")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-seconds", type=float, default=0.3, help="time per network per repeat")
    ap.add_argument("--libraries", default="drytune,drytune_verified",
                    help="builds of each work directory to time, among " + ", ".join(LIBRARIES)
                         + "; LABEL:LIBRARY times it for that directory only (e.g. A:ms_long, one copy of a "
                         "baseline that every work directory shares)")
    ap.add_argument("--reference", default=None, metavar="LABEL/LIBRARY",
                    help="a build every other is also compared with, e.g. A/ms_long")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    wanted = [entry.rpartition(":")[::2] for entry in args.libraries.split(",")]  # (label or "", library)
    libraries = list(dict.fromkeys(lib for _, lib in wanted))
    if unknown := [lib for lib in libraries if lib not in LIBRARIES]:
        ap.error(f"--libraries: unknown {unknown}; choose among {', '.join(LIBRARIES)}")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import torch

    from drytune import zoo

    dirs = args.work_dirs.split(",")
    if not 2 <= len(dirs) <= 26:
        ap.error("--work-dirs takes two or more directories, A,B[,C...]")
    labels = [chr(ord("A") + i) for i in range(len(dirs))]
    torch.set_num_threads(args.threads)
    torch_model, examples = zoo.get_model(args.model)
    inputs = random_arrays(examples, 0)
    xs = [torch.from_numpy(x) for x in inputs]

    def run_torch():
        with torch.inference_mode():
            return torch_model(*xs)

    calls = {"torch": run_torch}
    for label, work in zip(labels, dirs, strict=True):
        for lib in dict.fromkeys(lib for only, lib in wanted if only in ("", label)):
            path = os.path.join(model_dir(os.path.abspath(work), args.model), LIBRARIES[lib])
            if not os.path.exists(path):
                raise SystemExit(f"{path} is missing: run networks.py's build phase for that work directory")
            calls[f"{label}/{lib}"] = library_call(path, inputs)
    names = list(calls)
    if args.reference is not None and args.reference not in calls:
        raise SystemExit(f"--reference {args.reference!r} is not timed here; builds: {', '.join(names)}")
    times = interleaved_rounds(calls, args.rounds, args.min_seconds, repeats=3, pause_s=0.2)
    over_a = {label: {lib: statistics.median(b / a for a, b in zip(times[f"A/{lib}"], times[f"{label}/{lib}"],
                                                                     strict=True))
                      for lib in libraries if f"A/{lib}" in times and f"{label}/{lib}" in times}
              for label in labels[1:]}
    report = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "work_dirs": dirs, "rounds_s": times,
              "ratio_over_a": over_a,
              "command": "python benchmarks/builds_ab.py " + " ".join(sys.argv[1:])}
    lines = [f"# {args.model}: {len(dirs)} work directories' builds timed together", "", f"{report['date']}. "
             f"`{report['command']}`", "", ", ".join(f"{label} = `{d}`" for label, d in zip(labels, dirs, strict=True))
             + f"; median of {args.rounds} interleaved rounds; / A: median over rounds of the build's latency over A's "
             "build of the same kind.", "", "| build | median ms | / torch | / A |"
             + (f" / {args.reference} |" if args.reference else ""),
             "|---|---|---|---|" + ("---|" if args.reference else "")]
    if args.reference:
        report["ratio_over_reference"] = {name: statistics.median(
            x / r for x, r in zip(times[name], times[args.reference], strict=True)) for name in names}
    for name in names:
        label, _, lib = name.partition("/")
        to_torch = statistics.median(x / t for x, t in zip(times[name], times["torch"], strict=True))
        lines.append(f"| {name} | {statistics.median(times[name]) * 1e3:.3f} | {to_torch:.3f} | "
                     + (f"{over_a[label][lib]:.3f} |" if lib in over_a.get(label, {}) else "|")
                     + (f" {report['ratio_over_reference'][name]:.3f} |" if args.reference else ""))
    write_report(f"builds_ab_{args.model}", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
