"""Shared pieces of the one-thread kernel microbenchmarks (`hoisted_lanes.py`, `register_tiles.py`)."""

from __future__ import annotations

import argparse
import os


def parse_args(doc: str | None) -> argparse.Namespace:
    """Rounds, time per kernel per round and the results tag; pins TVM's thread pool to one thread."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=0.2, help="time per kernel per round")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = "1"
    return args


def one_core_target():
    """This CPU's LLVM target (drytune's host detection) with one core."""
    import tvm

    from drytune.target import resolve_target

    target, _ = resolve_target("llvm")
    return tvm.target.Target({**dict(target.export()), "num-cores": 1})
