"""Shared pieces of the one-thread kernel microbenchmarks (`hoisted_lanes.py`, `register_tiles.py`, `libm_calls.py`,
and the C ones: `widened_vectors.py`, `serial_gathers.py`, `load_widths.py`, `fma_chains.py`)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
C_FLAGS = ["-O2", "-mavx512f", "-mavx512dq", "-mavx512vl", "-mfma"]


def run_c_cases(source: str, rounds: int, iters: int) -> dict[str, list[float]]:
    """Build `source` (a C file beside this one, AVX-512 intrinsics) and run it for `rounds` and `iters`; it prints
    `ROUND CASE NS` lines: ns of each case in each round."""
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, os.path.splitext(source)[0])
        subprocess.run([_c_compiler(), *C_FLAGS, "-o", exe, os.path.join(HERE, source)], check=True)
        out = subprocess.run([exe, str(rounds), str(iters)], check=True, capture_output=True, text=True).stdout
    times: dict[str, list[float]] = {}
    for line in out.splitlines():
        _, name, ns = line.split()
        times.setdefault(name, []).append(float(ns))
    return times


def c_assembly(source: str) -> str:
    """The assembly that `run_c_cases` runs for `source` (same compiler and flags)."""
    return subprocess.run([_c_compiler(), *C_FLAGS, "-S", "-o", "-", os.path.join(HERE, source)], check=True,
                          capture_output=True, text=True).stdout


def _c_compiler() -> str:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise SystemExit("needs a C compiler (gcc or cc) with AVX-512 intrinsics")
    return cc


def excess_rows(times: dict[str, list[float]], cases: dict[str, str], baseline: str) -> list[dict]:
    """Per case (name -> what it does): its median time and the median over rounds of its excess over `baseline`'s
    time in the same round (`run_c_cases` readings, ns)."""
    return [{"case": name, "what": what, "ns": statistics.median(times[name]),
             "excess_ns": statistics.median(t - b for t, b in zip(times[name], times[baseline], strict=True))}
            for name, what in cases.items()]


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


def kernel_timer(lib, mod, rng, min_seconds: float):
    """A call that times the built `lib` once on random float32 arguments shaped as `mod`'s parameters: its mean
    seconds per run over at least `min_seconds`."""
    import numpy as np
    import tvm

    dev = tvm.cpu()
    arrays = [tvm.runtime.tensor(rng.random([int(x) for x in p.shape], dtype=np.float32), dev)
              for p in mod["main"].params]
    evaluator = lib.mod.time_evaluator("main", dev, min_repeat_ms=int(min_seconds * 1e3), number=1, repeat=1)
    return lambda: evaluator(*arrays).mean


def interleaved(timers: dict, rounds: int, between_rounds=None) -> dict:
    """Each timer's readings over `rounds` rounds, the order rotated by one each round (a slow spell of the machine
    then falls on different kernels); `between_rounds`, if given, is called before each round (a reference timed in
    the same phases)."""
    keys = list(timers)
    times: dict = {k: [] for k in keys}
    for r in range(rounds):
        if between_rounds is not None:
            between_rounds()
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            times[k].append(timers[k]())
    return times


def timed_and_predicted(cases: list, build, target, models: dict, min_seconds: float) -> tuple[dict, dict]:
    """For each case, a timer of the module `build(*case)` built for `target` (`kernel_timer`) and its predicted
    seconds by each of `models` (name -> StaticCostModel)."""
    import numpy as np
    import tvm

    timers, predicted = {}, {}
    rng = np.random.default_rng(0)
    for case in cases:
        mod = build(*case)
        timers[case] = kernel_timer(tvm.compile(mod, target=target), mod, rng, min_seconds)
        predicted[case] = {name: m.seconds_of_module(mod) for name, m in models.items()}
    return timers, predicted


def relative_accuracy(row: dict, ref: dict) -> dict:
    """Per model: measured over predicted of `row` relative to the same for `ref` (1.0: the model rates the change
    from `ref` to `row` as it runs); rows hold "measured_s" and "predicted_s" {model: seconds}."""
    return {name: (row["measured_s"] / row["predicted_s"][name]) / (ref["measured_s"] / ref["predicted_s"][name])
            for name in row["predicted_s"]}
