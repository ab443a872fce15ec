"""Two timings of the same fidelity candidates as one file: each candidate's rounds from both, and their median.

After `costmodel_fidelity.py --remeasure OUT --rounds N` on a file timed in rounds, the merged file judges the
model against twice the rounds (rows whose program changed between the two keep the later timing only):

    python benchmarks/merge_timings.py benchmarks/results/fidelity_measurements_llvm_emeraldrapids.jsonl \
        benchmarks/results/fidelity_measurements_llvm_emeraldrapids_s94.jsonl \
        --out benchmarks/results/fidelity_measurements_llvm_emeraldrapids_merged.jsonl
"""

from __future__ import annotations

import argparse

from drytune.costmodel.dataset import merge_timings, read_rows, write_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first", help="a fidelity measurements file")
    ap.add_argument("second", help="the same candidates timed again (`--remeasure`)")
    ap.add_argument("--out", required=True, help="the merged file (replaced)")
    args = ap.parse_args()
    rows, counts = merge_timings(read_rows(args.first), read_rows(args.second))
    write_rows(args.out, rows)
    print(f"{len(rows)} rows written to {args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
