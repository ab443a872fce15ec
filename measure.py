"""Measure scheduled IRModules on the local CPU in a separate worker process.

Building and running a candidate can crash (segfault, abort) or hang, so it happens in a spawned worker that
is reused across candidates (importing tvm costs seconds) and replaced when it dies or times out. Modules
travel as `tvm.ir.save_json` text, which round-trips exactly in TVM 0.27.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import hashlib
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from drytune.errors import DrytuneError
from drytune.prepack import has_weight_packing, kernel_as_run


@dataclass(frozen=True)
class MeasureConfig:
    """Defaults of `measure_modules` (one place)."""

    number: int = 3  # runs averaged into one repeat
    repeat: int = 5  # repeats; `seconds` is their median
    min_repeat_ms: int = 20  # `number` grows until one repeat lasts this long
    flush_cache: bool = False  # flush the CPU caches (all args but the first) before each repeat
    timeout_s: float = 60.0  # per candidate: build + check + timing
    startup_timeout_s: float = 300.0  # worker start (imports tvm; slow on a loaded machine)
    rtol: float = 1e-3
    atol: float = 1e-3
    seed: int = 0  # seed of the random inputs
    build_workers: int = 1  # > 1: compile every module first, in that many processes at once, then time them


DEFAULTS = MeasureConfig()


def cold_timing(repeat: int) -> dict[str, Any]:
    """`measure_modules` arguments for runs with every argument but the first flushed from the caches (a network's
    weights, read an inference ago): one run per repeat, since TVM flushes before each repeat, not each run."""
    return {"number": 1, "repeat": repeat, "min_repeat_ms": 0, "flush_cache": True}


@dataclass(frozen=True)
class MeasureResult:
    """Outcome of one candidate: median seconds (inf if it failed), every repeat, and why it failed."""

    seconds: float
    times: tuple[float, ...] = ()  # each repeat's mean time over `number` runs (with rounds: each round's median)
    error: str | None = None
    max_abs_err: float | None = None  # set when checked against a reference
    build_s: float = 0.0  # 0 when the worker still held the module built by an earlier job

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats: a simple noise figure (nan without times)."""
        if not self.times or not math.isfinite(self.seconds) or self.seconds <= 0:
            return math.nan
        return (max(self.times) - min(self.times)) / self.seconds


class WorkerStartError(DrytuneError, RuntimeError):
    """The measurement worker could not be started (environment problem, not a candidate problem)."""


def _failed(error: str, build_s: float = 0.0, max_abs_err: float | None = None) -> MeasureResult:
    return MeasureResult(seconds=math.inf, error=error, build_s=build_s, max_abs_err=max_abs_err)


# --------------------------------------------------------------------------------------------- worker side


def _entry_name(mod: tvm.IRModule) -> str:
    names = [gv.name_hint for gv in mod.functions]
    if "main" in names:
        return "main"
    if len(names) == 1:
        return names[0]
    raise ValueError(f"module has no 'main' and {len(names)} functions: {names}")


def _signature(func: tirx.PrimFunc) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each buffer parameter."""
    return [(tuple(int(s) for s in p.shape), str(p.dtype)) for p in func.params]


def _written_params(func: tirx.PrimFunc) -> list[int]:
    """Indices of the parameters the function stores into (its outputs); the last one if none is found."""
    stored: list[Any] = []
    tvm_ffi.structural_walk(func, [(tirx.BufferStore, lambda s: stored.append(s.buffer))], order="pre")
    written = [i for i, p in enumerate(func.params) if any(s.same_as(p) for s in stored)]
    return written or [len(func.params) - 1]


def random_arrays(signature: list[tuple[tuple[int, ...], str]], seed: int) -> list[np.ndarray]:
    """Seeded random arrays for (shape, dtype) pairs: floats in [-1, 1), integers in [0, 8), booleans."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in signature:
        if dtype.startswith(("float", "bfloat")):
            arrays.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        elif dtype == "bool":
            arrays.append(rng.random(size=shape) < 0.5)
        else:
            arrays.append(rng.integers(0, 8, size=shape).astype(dtype))
    return arrays


class _Runner:
    """Worker-side state: builds, checks and times modules; caches the reference outputs."""

    built_kept = 8  # modules kept built, so that timing the same ones again (interleaved rounds) skips the build

    def __init__(self) -> None:
        self.dev = tvm.cpu(0)
        self.refs: dict[str, tuple[list[np.ndarray], list[int]]] = {}
        self.built: collections.OrderedDict[str, tuple[Any, str]] = collections.OrderedDict()
        # a module's parsed form and the kernel as the network runs it, kept as long as its build: later rounds of
        # interleaved timing skip parsing the JSON again (a fifth of a round's time on ResNet-50's convolutions)
        self.parsed: collections.OrderedDict[str, tuple[tvm.IRModule, tvm.IRModule | None]] = \
            collections.OrderedDict()

    def _build(self, mod: tvm.IRModule, target: tvm.target.Target, lib: str | None = None) -> tuple[Any, str]:
        """Compile `mod`, or load `lib`, the library a build process already compiled it into."""
        if lib is not None:
            return tvm.runtime.load_module(lib), _entry_name(mod)
        return tvm.compile(mod, target=target).jit(), _entry_name(mod)

    def _build_kept(self, key: str, mod: tvm.IRModule, target: tvm.target.Target,
                    keep: int = 0, lib: str | None = None) -> tuple[Any, str, bool]:
        """The built module and its entry name, and whether it was built now (False: kept from an earlier job);
        `keep` raises the number of modules kept (interleaved rounds over many modules)."""
        fresh = key not in self.built
        if fresh:
            self.built[key] = self._build(mod, target, lib)
        _keep_recent(self.built, key, max(self.built_kept, keep))
        return (*self.built[key], fresh)

    def _parse_kept(self, key: str, mod_json: str, keep: int) -> tuple[tvm.IRModule, tvm.IRModule | None]:
        """The module parsed from its JSON and, where it packs weights, the kernel as the network runs it."""
        if key not in self.parsed:
            mod = tvm.ir.load_json(mod_json)
            self.parsed[key] = (mod, kernel_as_run(mod) if has_weight_packing(mod) else None)
        _keep_recent(self.parsed, key, max(self.built_kept, keep))
        return self.parsed[key]

    def _reference(self, ref_json: str, target: tvm.target.Target, seed: int, lib: str | None = None,
                   outputs: str | None = None) -> tuple[list[np.ndarray], list[int]]:
        """The reference's parameter arrays after one run on the seeded inputs, and its output indices: read from
        `outputs` where a build process ran it (`_compile_library`), else built (or loaded from `lib`) and run."""
        key = hashlib.sha1(f"{seed}:{ref_json}".encode()).hexdigest()
        if key not in self.refs:
            self.refs.clear()  # keep one reference: they can be large
            if outputs is not None:
                self.refs[key] = _load_reference_outputs(outputs)
            else:
                ref = tvm.ir.load_json(ref_json)
                self.refs[key] = _run_reference(self._build(ref, target, lib)[0], ref, seed)
        return self.refs[key]

    def measure(self, job: dict[str, Any]) -> dict[str, Any]:
        target = tvm.target.Target(json.loads(job["target"]))
        key = hashlib.sha1(f"{target}:{job['mod']}".encode()).hexdigest()
        keep, build_s = job.get("keep", 0), 0.0
        try:
            # a weight packed at build time: the whole program is checked, the kernel as the network runs it timed
            mod, as_run = self._parse_kept(key, job["mod"], keep)
        except Exception as e:  # any parse error is the candidate's failure
            return {"error": f"cannot parse module: {type(e).__name__}: {_first_lines(str(e))}"}
        try:
            t0 = time.perf_counter()
            if job["ref"] is not None or as_run is None:
                rt_mod, name, fresh = self._build_kept(key, mod, target, keep, job.get("lib"))
                build_s += time.perf_counter() - t0 if fresh else 0.0
            if as_run is not None:
                t0 = time.perf_counter()
                timed_mod, timed_name, fresh = self._build_kept("as-run:" + key, as_run, target, keep,
                                                                job.get("as_run_lib"))
                build_s += time.perf_counter() - t0 if fresh else 0.0
            else:
                timed_mod, timed_name = rt_mod, name
        except Exception as e:
            return {"error": f"build failed: {type(e).__name__}: {_first_lines(str(e))}"}
        out: dict[str, Any] = {"build_s": build_s}
        inputs = random_arrays(_signature((as_run if as_run is not None else mod)[timed_name]), job["seed"])
        try:
            if job["ref"] is not None:
                func = mod[name]
                signature = _signature(func)
                expected, ref_outputs = self._reference(job["ref"], target, job["seed"], job.get("ref_lib"),
                                                        job.get("ref_outputs"))
                if [(a.shape, str(a.dtype)) for a in expected] != signature:
                    return {**out, "error": "signature differs from the reference module"}
                got = _run_once(rt_mod, name, inputs if as_run is None else random_arrays(signature, job["seed"]))
                err = 0.0
                close = True
                for i in sorted(set(ref_outputs) | set(_written_params(func))):
                    g, e = got[i].numpy(), expected[i]
                    diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
                    err = max(err, float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0)))
                    close = close and bool(np.allclose(g, e, rtol=job["rtol"], atol=job["atol"]))
                out["max_abs_err"] = err
                if not close:
                    return {**out, "error": f"wrong result: max abs error {err:.3g} vs reference"}
            args = [tvm.runtime.tensor(a, self.dev) for a in inputs]
            evaluator = timed_mod.time_evaluator(
                timed_name,
                self.dev,
                number=job["number"],
                repeat=job["repeat"],
                min_repeat_ms=job["min_repeat_ms"],
                f_preproc="cache_flush_cpu_non_first_arg" if job["flush_cache"] else "",
            )
            out["times"] = [float(t) for t in evaluator(*args).results]
        except Exception as e:
            return {**out, "error": f"run failed: {type(e).__name__}: {_first_lines(str(e))}"}
        return out


def _keep_recent(kept: collections.OrderedDict, key: str, limit: int) -> None:
    """Mark `key` as the most recently used entry of `kept` and drop the oldest beyond `limit`."""
    kept.move_to_end(key)
    while len(kept) > limit:
        kept.popitem(last=False)


def _first_lines(text: str, n: int = 6) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(lines[:n])


def _worker_main(conn: multiprocessing.connection.Connection, log_path: str) -> None:
    """Entry of the worker process: serve jobs from `conn` until it closes."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(fd, 1)  # native crash messages go to the log so that the parent can quote them
    os.dup2(fd, 2)
    runner = _Runner()
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        try:
            reply = runner.measure(job)
        except Exception:  # a bug here must still answer the parent
            reply = {"error": "worker error: " + traceback.format_exc(limit=3)}
        conn.send(reply)


# --------------------------------------------------------------------------------------------- parent side


@dataclass
class MeasureWorker:
    """A replaceable worker process; `run(job, timeout_s)` never raises for a candidate's failure."""

    startup_timeout_s: float = DEFAULTS.startup_timeout_s
    _proc: Any = field(default=None, init=False, repr=False)
    _conn: Any = field(default=None, init=False, repr=False)
    _log: str = field(default="", init=False, repr=False)
    starts: int = field(default=0, init=False)

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        fd, self._log = tempfile.mkstemp(prefix="drytune-measure-", suffix=".log")
        os.close(fd)
        proc = ctx.Process(target=_worker_main, args=(child, self._log), daemon=True, name="drytune-measure")
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.starts += 1
        ready = multiprocessing.connection.wait([parent, proc.sentinel], self.startup_timeout_s)
        if parent in ready:
            try:
                if parent.recv() == "ready":
                    return
            except EOFError:
                pass
        tail = self._log_since(0, from_end=True)
        self.close()
        raise WorkerStartError(f"measurement worker did not start: {tail or 'no output'}")

    def _log_since(self, offset: int, n: int = 3, from_end: bool = False) -> str:
        """First (or last) `n` lines the worker printed since `offset`.

        A native crash prints its cause before the backtrace; a Python start-up failure prints it last.
        """
        try:
            with open(self._log, errors="replace") as f:
                f.seek(offset)
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
        except OSError:
            return ""
        return " | ".join(lines[-n:] if from_end else lines[:n])[:400]

    def run(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._proc is None or not self._proc.is_alive():
            self.close()
            self._start()
        offset = os.path.getsize(self._log)
        try:
            self._conn.send(job)
        except (BrokenPipeError, OSError):
            self.close()
            return {"error": "worker died before the job was sent"}
        ready = multiprocessing.connection.wait([self._conn, self._proc.sentinel], timeout_s)
        if self._conn in ready:
            with contextlib.suppress(EOFError, OSError):
                return self._conn.recv()
        if not ready:
            self.close()
            return {"error": f"timeout after {timeout_s:g} s"}
        self._proc.join(5)
        code = self._proc.exitcode
        tail = self._log_since(offset)
        self.close()
        if code is not None and code < 0:
            why = f"worker crashed (signal {-code}: {signal.Signals(-code).name})"
        else:
            why = f"worker exited unexpectedly (exit code {code})"
        return {"error": f"{why}: {tail}" if tail else why}

    def close(self) -> None:
        """Stop the worker process (killing it if it does not exit at once) and remove its log."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(5)
        if self._log:
            with contextlib.suppress(OSError):
                os.unlink(self._log)
        self._proc, self._conn, self._log = None, None, ""

    def __enter__(self) -> MeasureWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared_worker: MeasureWorker | None = None
_shared_lock = threading.Lock()


def _default_worker() -> MeasureWorker:
    global _shared_worker
    if _shared_worker is None:
        _shared_worker = MeasureWorker()
        atexit.register(_shared_worker.close)
    return _shared_worker


def _compile_library(mod_json: str, target_json: str, path: str, run_seed: int | None = None) -> dict[str, Any]:
    """Build-process side: compile a module (and, where it packs weights, the kernel as the network runs it) into
    shared libraries; their paths and the seconds it took, or {} when it fails (the worker then builds it and
    reports the failure as usual). With `run_seed` (a reference to check against) it is also run once on the seeded
    inputs and its arrays saved, so that the measuring worker does not spend its time on the unscheduled program."""
    t0 = time.perf_counter()
    try:
        target = tvm.target.Target(json.loads(target_json))
        mod = tvm.ir.load_json(mod_json)
        tvm.compile(mod, target=target).export_library(path)
        out: dict[str, Any] = {"lib": path}
        if run_seed is not None:
            arrays, written = _run_reference(tvm.runtime.load_module(path), mod, run_seed)
            np.savez(path + ".out.npz", written=np.array(written), **{f"a{i}": a for i, a in enumerate(arrays)})
            out["ref_outputs"] = path + ".out.npz"
        if has_weight_packing(mod):
            tvm.compile(kernel_as_run(mod), target=target).export_library(path + ".as_run.so")
            out["as_run_lib"] = path + ".as_run.so"
    except Exception:
        return {}
    return {**out, "build_s": time.perf_counter() - t0}


def _run_reference(rt_mod: Any, ref: tvm.IRModule, seed: int) -> tuple[list[np.ndarray], list[int]]:
    """The reference's parameter arrays after one run of its built `rt_mod` on the seeded inputs, and its output
    indices (the measuring worker's check, or a build process running it ahead of the worker)."""
    name = _entry_name(ref)
    args = _run_once(rt_mod, name, random_arrays(_signature(ref[name]), seed))
    return [a.numpy() for a in args], _written_params(ref[name])


def _run_once(rt_mod: Any, name: str, inputs: list[np.ndarray]) -> list[Any]:
    """The device arrays of `inputs` after one call of `rt_mod`'s `name` on them (on the CPU)."""
    args = [tvm.runtime.tensor(a, tvm.cpu(0)) for a in inputs]
    rt_mod[name](*args)
    return args


def _load_reference_outputs(path: str) -> tuple[list[np.ndarray], list[int]]:
    """A reference's arrays after its run and its output indices, as `_compile_library` saved them."""
    with np.load(path) as saved:
        n = sum(1 for key in saved.files if key.startswith("a"))
        return [saved[f"a{i}"] for i in range(n)], [int(i) for i in saved["written"]]


class BuildPool:
    """Processes that compile modules into shared libraries side by side, so that `measure_modules` with
    `build_workers` > 1 spends its time compiling on every core and only the timing on one worker."""

    def __init__(self, workers: int, timeout_s: float = DEFAULTS.timeout_s):
        self.workers = workers
        self.timeout_s = timeout_s
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def compile(self, jobs: list[tuple]) -> list[dict[str, Any]]:
        """One result of `_compile_library` per (module JSON, target JSON, library path[, run seed]); {} where a
        build failed, crashed its process or timed out (the pool is then replaced)."""
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(self.workers, multiprocessing.get_context("spawn"))
        futures = [self._pool.submit(_compile_library, *job) for job in jobs]
        results: list[dict[str, Any]] = []
        broken = False
        for future in futures:
            try:
                results.append({} if broken else future.result(timeout=self.timeout_s))
            except Exception:  # a crashed (BrokenProcessPool) or hung build process
                results.append({})
                broken = True
        if broken:
            self.close()
        return results

    def close(self) -> None:
        """Stop the build processes, killing any that still run."""
        if self._pool is None:
            return
        processes = list(getattr(self._pool, "_processes", {}).values())  # shutdown() does not stop a hung build
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            with contextlib.suppress(Exception):
                proc.kill()
        self._pool = None


_build_pools: dict[int, BuildPool] = {}


@dataclass
class _Prebuilt:
    """Libraries that `prebuild` compiled: hash of (target, run seed, module JSON) -> `_compile_library`'s result."""

    libs: dict[str, dict[str, Any]] = field(default_factory=dict)
    folder: str | None = None


_prebuilt = _Prebuilt()


def _library_key(text: str, target_json: str, run_seed: int | None) -> str:
    return hashlib.sha1(f"{target_json}:{run_seed}:{text}".encode()).hexdigest()


def _libraries(jobs: list[tuple[str, int | None]], target_json: str, workers: int,
               lib_dir: str) -> list[dict[str, Any]]:
    """`_compile_library`'s result for each (module JSON, run seed): from `prebuild` where it compiled it, else
    compiled now into `lib_dir`, all in one batch on `workers` processes."""
    keys = [_library_key(text, target_json, seed) for text, seed in jobs]
    missing = [i for i, key in enumerate(keys) if key not in _prebuilt.libs]
    fresh = dict(zip(missing, _build_pool(workers).compile(
        [(jobs[i][0], target_json, os.path.join(lib_dir, f"m{i}.so"), jobs[i][1]) for i in missing]) if missing else [],
        strict=True))
    return [fresh[i] if i in fresh else _prebuilt.libs[key] for i, key in enumerate(keys)]


def prebuild(mods: list[tvm.IRModule], target: tvm.target.Target, build_workers: int, *,
             references: Sequence[tvm.IRModule] = (), seed: int = DEFAULTS.seed) -> None:
    """Compile modules that later `measure_modules(..., build_workers=...)` calls will time, all in one batch, and
    compile and run the `references` they will be checked against (on the inputs of `seed`).

    A caller that measures many small sets (verification: two candidates and a reference per task) otherwise
    leaves build processes idle at the end of every set. The libraries are kept until `close_build_pools()`."""
    if build_workers < 2:
        return
    target_json = str(target)
    wanted = [(_serialize(m), None) for m in mods] + [(_serialize(m), seed) for m in references]
    jobs = [j for j in dict.fromkeys(wanted) if _library_key(j[0], target_json, j[1]) not in _prebuilt.libs]
    if not jobs:
        return
    if _prebuilt.folder is None:
        _prebuilt.folder = tempfile.mkdtemp(prefix="drytune-prebuilt-")
    n = len(_prebuilt.libs)
    results = _build_pool(build_workers).compile(
        [(text, target_json, os.path.join(_prebuilt.folder, f"p{n + i}.so"), run_seed)
         for i, (text, run_seed) in enumerate(jobs)])
    for (text, run_seed), result in zip(jobs, results, strict=True):
        _prebuilt.libs[_library_key(text, target_json, run_seed)] = result


def _build_pool(workers: int) -> BuildPool:
    if workers not in _build_pools:
        _build_pools[workers] = BuildPool(workers)
    return _build_pools[workers]


def close_build_pools() -> None:
    """Stop the build processes that `measure_modules(build_workers=...)` keeps between calls, and remove the
    libraries `prebuild` compiled."""
    for pool in _build_pools.values():
        pool.close()
    _prebuilt.libs.clear()
    if _prebuilt.folder is not None:
        shutil.rmtree(_prebuilt.folder, ignore_errors=True)
        _prebuilt.folder = None


atexit.register(close_build_pools)


def _serialize(mod: tvm.IRModule) -> str:
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"expected tvm.IRModule, got {type(mod).__name__}")
    return tvm.ir.save_json(mod)


def measure_modules(
    mods: list[tvm.IRModule],
    target: tvm.target.Target,
    *,
    number: int = DEFAULTS.number,
    repeat: int = DEFAULTS.repeat,
    min_repeat_ms: int = DEFAULTS.min_repeat_ms,
    flush_cache: bool = DEFAULTS.flush_cache,
    timeout_s: float = DEFAULTS.timeout_s,
    check_against: tvm.IRModule | None = None,
    rtol: float = DEFAULTS.rtol,
    atol: float = DEFAULTS.atol,
    seed: int = DEFAULTS.seed,
    rounds: int = 1,
    worker: MeasureWorker | None = None,
    build_workers: int = DEFAULTS.build_workers,
) -> list[MeasureResult]:
    """Build and time each module on the local CPU, one result per module, in order.

    A candidate that fails to build, crashes or hangs the worker, or (with `check_against`, the unscheduled
    module) computes a wrong result gets `seconds=inf` and an `error`; the caller never sees an exception
    for it. With `rounds` > 1 the modules are timed in turn, once per round, and kept built between rounds, so
    that a slow phase of the machine falls on all of them alike: `times` then holds each round's median and
    `seconds` their median (the check runs in the first round only). `worker` defaults to one shared, reused
    worker process. The worker is started with "spawn", so a calling script needs the usual
    `if __name__ == "__main__":` guard. With `build_workers` > 1 every module (and the reference) is first compiled
    in that many processes at once (`BuildPool`, kept for later calls); the worker then loads the libraries.
    """
    if target.kind.name != "llvm":
        raise ValueError(f"measure_modules runs on the local CPU, not on a {target.kind.name!r} target")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    ref_json = _serialize(check_against) if check_against is not None else None
    base = {
        "target": str(target),
        "ref": ref_json,
        "number": number,
        "repeat": repeat,
        "min_repeat_ms": min_repeat_ms,
        "flush_cache": flush_cache,
        "rtol": rtol,
        "atol": atol,
        "seed": seed,
        "keep": len(mods) if rounds > 1 else 0,
    }
    texts: list[str | None] = []
    results: list[MeasureResult | None] = []
    for mod in mods:
        try:
            texts.append(_serialize(mod))
            results.append(None)
        except Exception as e:
            texts.append(None)
            results.append(_failed(f"cannot serialise module: {type(e).__name__}: {e}"))
    per_round: list[list[float]] = [[] for _ in mods]
    libs: list[dict[str, Any]] = [{} for _ in mods]
    lib_dir = tempfile.mkdtemp(prefix="drytune-libs-") if build_workers > 1 else None
    try:
        if lib_dir is not None:
            wanted = [(text, None) for text in texts if text] + ([(ref_json, seed)] if ref_json is not None else [])
            built = iter(_libraries(wanted, base["target"], build_workers, lib_dir))
            libs = [next(built) if text else {} for text in texts]
            if ref_json is not None:
                ref = next(built)
                base["ref_lib"], base["ref_outputs"] = ref.get("lib"), ref.get("ref_outputs")
        _time_rounds(texts, libs, base, results, per_round, rounds, timeout_s, worker)
    finally:
        if lib_dir is not None:
            shutil.rmtree(lib_dir, ignore_errors=True)
    if rounds == 1:  # the repeats' times as they came
        return results
    return [res if not res.ok else replace(res, seconds=statistics.median(t), times=tuple(t))
            for res, t in zip(results, per_round, strict=True)]


def _time_rounds(texts: list[str | None], libs: list[dict[str, Any]], base: dict[str, Any],
                 results: list[MeasureResult | None], per_round: list[list[float]], rounds: int, timeout_s: float,
                 worker: MeasureWorker | None) -> None:
    """Time every module once per round on the worker, filling `results` (first round) and `per_round`."""
    with _shared_lock if worker is None else contextlib.nullcontext():
        w = worker if worker is not None else _default_worker()
        for r in range(rounds):
            for i, text in enumerate(texts):
                if text is None or (results[i] is not None and not results[i].ok):
                    continue
                job = {**base, "mod": text, **libs[i]} | ({"ref": None} if r else {})
                res = _to_result(w.run(job, timeout_s))
                if r == 0 and libs[i].get("build_s"):
                    res = replace(res, build_s=libs[i]["build_s"])
                if r == 0:
                    results[i] = res
                elif not res.ok:  # a module that fails in a later round fails
                    results[i] = replace(res, error=f"round {r + 1}: {res.error}", build_s=results[i].build_s)
                per_round[i].append(res.seconds)


def _to_result(reply: dict[str, Any]) -> MeasureResult:
    build_s = float(reply.get("build_s", 0.0))
    max_abs_err = reply.get("max_abs_err")
    if reply.get("error"):
        return _failed(reply["error"], build_s, max_abs_err)
    times = tuple(reply["times"])
    return MeasureResult(
        seconds=statistics.median(times), times=times, build_s=build_s, max_abs_err=max_abs_err
    )


def measure(task: Any, candidates: list[Any], *, check: bool = False, **kwargs: Any) -> np.ndarray:
    """Measured seconds of each candidate of `task` on this machine (`inf` where it failed).

    Candidates that TVM rejects while replaying are failures too. With `check=True` each output is also
    compared with the unscheduled program's. For verification and benchmarks: tuning never needs this.
    """
    from .errors import InvalidCandidateError

    mods: list[tvm.IRModule | None] = []
    for cand in candidates:
        try:
            mods.append(cand.to_mod())
        except InvalidCandidateError:
            mods.append(None)
    valid = [m for m in mods if m is not None]
    results = iter(measure_modules(valid, task.target, check_against=task.mod if check else None, **kwargs))
    return np.array([next(results).seconds if m is not None else np.inf for m in mods])
