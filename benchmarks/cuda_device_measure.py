"""Measure prepared CUDA candidates on an NVIDIA GPU: the GPU half of `cuda_fidelity.py`.

Runs on the GPU machine with numpy and CuPy alone (no TVM there): each candidate arrives as a cubin built by
ptxas on the machine that prepared the bundle, with its kernels' names, grid, block, dynamic shared memory and
argument buffers. Every candidate's outputs are poisoned with NaN, computed once and compared with the CPU
reference at sampled positions before it is timed with CUDA events (median of repeats, each repeat at least
`--min-repeat-ms` of back-to-back runs). Each operator runs in a child process: a candidate that faults or
hangs costs that child, is recorded as an error, and the next child resumes after it.

    python benchmarks/cuda_device_measure.py --bundle DIR --out measurements.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def seeded_inputs(params: list[dict], seed: int) -> list[np.ndarray]:
    """Random arrays for the task's parameters: floats in [-1, 1), integers in [0, 8) (both machines use this)."""
    rng = np.random.default_rng(seed)
    out = []
    for p in params:
        shape, dtype = tuple(p["shape"]), p["dtype"]
        if dtype.startswith("float"):
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        else:
            out.append(rng.integers(0, 8, size=shape).astype(dtype))
    return out


def output_matches(got: np.ndarray, expected: np.ndarray, rtol: float = 1e-3) -> bool:
    """All sampled outputs finite and within rtol of the reference (absolute slack scaled by its magnitude)."""
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    return bool(np.all(np.isfinite(got)) and np.allclose(got, expected, rtol=rtol, atol=rtol * scale))


def warm_up(cp, seconds: float = 0.5) -> None:
    """Keep the GPU busy for a moment so that it leaves its idle clock before anything is timed."""
    a = cp.ones((2048, 2048), dtype=cp.float32)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = a @ a * (1.0 / 2048)
        cp.cuda.Device().synchronize()


def load_op(bundle: str, op: str) -> dict:
    """One operator's bundle document (ops/OP.json)."""
    with open(os.path.join(bundle, "ops", f"{op}.json")) as f:
        return json.load(f)


def _child(bundle: str, op: str, skip: set[str], out: str, progress: str, min_repeat_ms: float,
           repeats: int) -> None:
    import cupy as cp

    spec = load_op(bundle, op)
    host = seeded_inputs(spec["params"], spec["seed"])
    params = {p["name"]: cp.asarray(x) for p, x in zip(spec["params"], host, strict=True)}
    written = [p["name"] for p in spec["params"] if p["written"]]
    refs = {name: (np.asarray(r["index"], dtype=np.int64), np.asarray(r["value"], dtype=np.float64))
            for name, r in spec["reference"].items()}
    warm_up(cp)
    for cand in spec["candidates"]:
        if cand["id"] in skip:
            continue
        with open(progress, "w") as f:
            f.write(cand["id"])
        row = {"op": op, "id": cand["id"], "source": cand["source"]}
        t0 = time.perf_counter()
        try:
            module = cp.RawModule(path=os.path.join(bundle, cand["cubin"]))
            scratch = {n: cp.empty(max(1, b // 4), dtype=cp.float32) for n, b in cand["scratch"].items()}
            buffers = {**params, **scratch}
            launches = []
            for k in cand["kernels"]:
                fn = module.get_function(k["name"])
                if k["dyn_smem"] > 48 * 1024:
                    fn.max_dynamic_shared_size_bytes = k["dyn_smem"]
                launches.append((fn, tuple(k["grid"]), tuple(k["block"]), tuple(buffers[a] for a in k["args"]),
                                 k["dyn_smem"]))

            def run(n: int, launches: list = launches) -> None:
                for _ in range(n):
                    for fn, grid, block, args, smem in launches:
                        fn(grid, block, args, shared_mem=smem)

            for name in written:
                params[name].fill(np.nan)
            run(1)
            cp.cuda.Device().synchronize()
            bad = [name for name in written
                   if not output_matches(params[name].ravel()[cp.asarray(refs[name][0])].get(), refs[name][1])]
            if bad:
                row["error"] = f"wrong result in {bad}"
            else:
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                run(1)
                stop.record()
                stop.synchronize()
                one_ms = max(cp.cuda.get_elapsed_time(start, stop), 1e-3)
                number = int(min(10000, max(1, math.ceil(min_repeat_ms / one_ms))))
                times = []
                for _ in range(repeats):
                    start.record()
                    run(number)
                    stop.record()
                    stop.synchronize()
                    times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3 / number)
                row.update(seconds=float(np.median(times)), times=times, number=number)
        except Exception as err:  # noqa: BLE001 - recorded with the candidate; a sticky CUDA error ends the child
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        row["wall_s"] = time.perf_counter() - t0
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        if "error" in row and not _context_usable(cp):
            sys.exit(3)  # a fault poisons the CUDA context: the parent restarts after this candidate


def _context_usable(cp) -> bool:
    """Whether the CUDA context still works after an error (a kernel fault makes every later call fail)."""
    try:
        cp.cuda.Device().synchronize()
        cp.zeros(1).get()
        return True
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False


def _done_ids(out: str, op: str) -> set[str]:
    done: set[str] = set()
    if os.path.exists(out):
        with open(out) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if row.get("op") == op:
                    done.add(row["id"])
    return done


def measure_op(bundle: str, op: str, out: str, min_repeat_ms: float, repeats: int, stall_s: float) -> None:
    """Run the op's candidates in children until each has a row; a child that dies or stalls loses one candidate."""
    state = os.path.join(tempfile.gettempdir(), f"drytune_cuda_measure_{os.getpid()}")
    os.makedirs(state, exist_ok=True)
    progress, skip_file = os.path.join(state, f"{op}.progress"), os.path.join(state, f"{op}.skip")
    ids = [c["id"] for c in load_op(bundle, op)["candidates"]]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{op}: the bundle repeats candidate ids")
    while True:
        done = _done_ids(out, op)
        if set(ids) <= done:
            return
        with open(skip_file, "w") as f:
            json.dump(sorted(done), f)
        if os.path.exists(progress):
            os.remove(progress)
        child = subprocess.Popen([sys.executable, __file__, "--child", op, "--bundle", bundle, "--out", out,
                                  "--skip", skip_file, "--progress", progress, "--min-repeat-ms", str(min_repeat_ms),
                                  "--repeats", str(repeats)])
        last, seen = time.time(), None
        while child.poll() is None:
            time.sleep(0.5)
            now_at = open(progress).read() if os.path.exists(progress) else None
            if now_at != seen:
                seen, last = now_at, time.time()
            elif time.time() - last > stall_s:
                child.kill()
                child.wait()
                break
        after = _done_ids(out, op)
        if set(ids) <= after:
            return
        stuck = open(progress).read() if os.path.exists(progress) else None
        if stuck and stuck not in after:
            reason = "stalled" if child.returncode in (None, -9) else f"child exited with {child.returncode}"
            with open(out, "a") as f:
                f.write(json.dumps({"op": op, "id": stuck, "error": reason}) + "\n")
        elif after == done:  # no row and no candidate in progress: retrying would loop forever
            raise RuntimeError(f"{op}: measuring child exited with {child.returncode} without measuring anything")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ops", default="", help="comma-separated; default: every operator in the bundle")
    ap.add_argument("--min-repeat-ms", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--stall-s", type=float, default=60.0)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--skip", default="", help=argparse.SUPPRESS)
    ap.add_argument("--progress", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        with open(args.skip) as f:
            skip = set(json.load(f))
        _child(args.bundle, args.child, skip, args.out, args.progress, args.min_repeat_ms,
               args.repeats)
        return 0
    ops = [o for o in args.ops.split(",") if o] or sorted(
        f[:-5] for f in os.listdir(os.path.join(args.bundle, "ops")) if f.endswith(".json"))
    for op in ops:
        t0 = time.perf_counter()
        measure_op(args.bundle, op, args.out, args.min_repeat_ms, args.repeats, args.stall_s)
        rows = [json.loads(line) for line in open(args.out)]
        mine = [r for r in rows if r["op"] == op]
        good = [r["seconds"] for r in mine if "seconds" in r]
        print(f"{op:20s} {len(good):4d}/{len(mine)} measured, best {min(good) * 1e6 if good else float('nan'):9.2f} us"
              f" in {time.perf_counter() - t0:6.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
