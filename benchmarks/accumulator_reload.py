"""What loading and storing a GEMM body's accumulators costs beside keeping them in registers (one thread, C).

`csrc/accumulator_reload.c` runs a 4 x 64 register tile (16 zmm accumulators) over 32 row blocks with 8 or 16
unrolled reduction steps per body, the accumulators either kept in registers or loaded and stored by every body
(the bodies of TVM's cache-write sketches that walk row blocks inside a reduction run). The same instructions with
the accumulator buffer placed at four offsets modulo 4 KiB from the B slice ask whether 4K aliasing of the stores
and the next body's loads matters. Interleaved rounds; ratios are medians of per-round ratios to the register
variant. Needs a C compiler (`cc`, AVX-512).

    python benchmarks/accumulator_reload.py --tag rocketlake_s57
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from report_files import write_report

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "accumulator_reload.c")
BLOCKS = 32


def run(steps: int, rounds: int, reps: int, workdir: str) -> dict[str, list[float]]:
    """Seconds per variant per round for bodies of `steps` reduction steps."""
    exe = os.path.join(workdir, f"reload{steps}")
    subprocess.run([os.environ.get("CC", "cc"), "-O3", "-march=native", f"-DSTEPS={steps}", "-o", exe, SOURCE],
                   check=True)
    out = subprocess.run([exe, str(rounds), str(reps)], check=True, capture_output=True, text=True).stdout
    times: dict[str, list[float]] = collections.defaultdict(list)
    for line in out.splitlines()[1:]:
        _, name, sec = line.split("\t")
        times[name].append(float(sec))
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20000, help="passes over the row blocks per variant per round")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    if shutil.which(os.environ.get("CC", "cc")) is None:
        raise SystemExit("needs a C compiler: cc (or set CC)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for steps in (8, 16):
            times = run(steps, args.rounds, args.reps, tmp)
            base = times["registers"]
            bodies = BLOCKS * args.reps
            for name, ts in times.items():
                pairs = list(zip(ts, base, strict=True))
                rows.append({"steps": steps, "variant": name, "ns_per_body": statistics.median(ts) / bodies * 1e9,
                             "ratio": statistics.median(t / b for t, b in pairs),
                             "extra_ns_per_body": statistics.median((t - b) / bodies * 1e9 for t, b in pairs),
                             "rounds_s": ts})
    report = {"date": time.strftime("%Y-%m-%d"), "rows": rows,
              "command": "python benchmarks/accumulator_reload.py " + " ".join(sys.argv[1:])}
    lines = ["# Accumulators reloaded by every body against kept in registers", "",
             f"{report['date']}. `{report['command']}`", "",
             f"One thread; a 4 x 64 tile (16 accumulators), {BLOCKS} row blocks; median of {args.rounds} interleaved "
             "rounds; ratio and extra time are medians of per-round differences to the register variant.", "",
             "| reduction steps per body | variant | ns per body | ratio to registers | extra ns per body |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['steps']} | {r['variant']} | {r['ns_per_body']:.1f} | {r['ratio']:.3f} | "
                     f"{r['extra_ns_per_body']:.1f} |")
    write_report("accumulator_reload", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
