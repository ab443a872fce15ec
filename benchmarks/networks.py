"""End-to-end networks at batch 1 on this CPU: drytune at a wall-clock budget against MetaSchedule (measured
trials, XGBoost cost model) at the same wall clock and at a longer one, PyTorch eager and the untuned TVM build,
all with the same thread count. Latencies are measured interleaved in one process, and every TVM build's
output is checked against torch eager on the same random inputs.

Phases (each keeps a model's finished result, so a failed or killed run is resumed by running it again):

    tune-drytune  drytune's tune_network at --budget; exports drytune.so; total wall time recorded
    verify        drytune's records as tuned, then each task's --verify-top-k best predictions measured on this
                  CPU and the fastest built (tune_network's verify_top_k, on a copy of the work directory);
                  exports drytune_verified.so; its wall time is added to drytune's
    tune-ms       MetaSchedule tune_relax in a child process killed at --long-budget; its JSON database is
                  copied at the short mark (drytune's total wall time for that model, else --budget)
    build         MetaSchedule's databases applied to the fused module (short, long) and the untuned build
    measure       every library and torch eager, interleaved rounds; output error against torch eager
    report        results JSON and Markdown table (--out)
    all           the phases above in order, each in its own process

    python benchmarks/networks.py --tiny --budget 60 --long-budget 180            # smoke run, small models
    python benchmarks/networks.py --phase all --budget 10m --long-budget 60m      # ResNet-50, MobileNet-V2, BERT
"""

from __future__ import annotations

import argparse
import ast
import copy
import functools
import json
import logging
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass

log = logging.getLogger("networks")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FULL_MODELS = ("resnet50", "mobilenet_v2", "bert_base")
TINY_MODELS = ("resnet_tiny", "mobilenet_tiny", "bert_tiny")
PHASES = ("tune-drytune", "verify", "tune-ms", "build", "measure", "report")
# measurement and table order; torch_cl: torch eager with channels-last tensors (models with 4-D inputs)
SYSTEMS = ("drytune", "drytune_verified", "ms_short", "ms_long", "torch", "torch_cl", "untuned")
DRYTUNE_SYSTEMS = ("drytune", "drytune_verified")  # the ratios' numerators
LIBRARIES = {"drytune": "drytune.so", "drytune_verified": "drytune_verified.so", "ms_short": "ms_short.so",
             "ms_long": "ms_long.so", "untuned": "untuned.so"}
RECORDS_FILE, WORKLOADS_FILE = "database_tuning_record.json", "database_workload.json"
FAILED_RUN_SECS = 1e9  # MetaSchedule records failed builds and runs with run_secs 1e10


def _fields(items: tuple[str, ...]) -> dict:
    """FIELD=VALUE items (VALUE a Python literal, or a bare word taken as a string) as keyword arguments."""
    out = {}
    for k, v in (item.split("=", 1) for item in items):
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


@dataclass(frozen=True)
class BenchConfig:
    """Every knob of the benchmark, with its default."""

    budget_s: float = 600.0  # drytune's budget, and MetaSchedule's short mark when drytune has not run
    long_budget_s: float = 3600.0  # MetaSchedule's long mark (its child process is killed there)
    threads: int = 2
    seed: int = 0  # tuning seeds and the random inputs
    ms_trials_per_iter: int = 16  # MetaSchedule trials per task round (tune_relax's default 64 would not
    # finish ResNet-50's warm-up round in 10 minutes here)
    ms_builder_timeout_s: float = 120.0  # each new builder worker imports tvm.s_tir.tensor_intrin (~30 s)
    rounds: int = 5  # measurement rounds; each measures every system once
    repeats: int = 3  # timed repeats of a system in a round (1 for calls slower than slow_call_s)
    min_repeat_s: float = 0.2  # a repeat calls the system until this much time has passed
    slow_call_s: float = 1.0
    slow_rounds: int = 1  # rounds that time a system slower than slow_call_s (BERT-base untuned: 50 s a call, so 11
    # rounds took 18 minutes for a figure no goal compares with)
    pause_s: float = 0.2  # between systems, so one's spinning thread pool does not steal the next one's cores
    fast_math: bool = False  # every TVM build (drytune, MetaSchedule, untuned) gets drytune.fastmath's module
    layout: str = "auto"  # every TVM build gets the same graph: drytune.layout's ("auto": NHWC convs on CPU)
    verify_top_k: int = 3  # the verify phase measures each task's k best predictions
    coefficients: str | None = None  # drytune's cost model with this coefficients file (None: the shipped one)
    space: tuple[str, ...] = ()  # SpaceConfig fields set for drytune's tuning, as FIELD=VALUE (a Python literal)
    verify: tuple[str, ...] = ()  # VerifyConfig fields set for the verify phase, as FIELD=VALUE
    gradient: tuple[str, ...] = ()  # GradientConfig fields set for drytune's task scheduler, as FIELD=VALUE

    def tune_config(self):
        """The NetworkTuneConfig that tune_network gets (None: the defaults)."""
        if not self.space and not self.verify:
            return None
        from drytune.scheduler.config import NetworkTuneConfig
        from drytune.search.config import VerifyConfig
        from drytune.sketch.config import SpaceConfig

        return NetworkTuneConfig(space=SpaceConfig(**_fields(self.space)), verify=VerifyConfig(**_fields(self.verify)))

    def gradient_config(self):
        """The GradientConfig that tune_network gets (None: the defaults)."""
        from drytune.scheduler.config import GradientConfig

        return GradientConfig(**_fields(self.gradient)) if self.gradient else None

    def cost_model(self) -> functools.partial | None:
        """The cost-model spec that tune_network gets (None: the static model with the shipped file)."""
        from drytune.costmodel.model import StaticCostModel

        return functools.partial(StaticCostModel, coefficients=self.coefficients) if self.coefficients else None


# ----------------------------------------------------------------------------------------------- files


def model_dir(work: str, model: str) -> str:
    return os.path.join(work, model)


def read_json(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def done(path: str) -> bool:
    """A phase result that exists and is not an error (errors are retried)."""
    data = read_json(path)
    return data is not None and "error" not in data


def target_dict(threads: int) -> dict:
    """This machine's LLVM target (drytune's host detection) with `threads` cores, shared by every system."""
    from drytune.target import resolve_target

    tvm_target, _ = resolve_target("llvm")
    attrs = {k: v for k, v in dict(tvm_target.export()).items() if k in ("kind", "mtriple", "mcpu", "mattr")}
    return {**attrs, "num-cores": threads}


def load_fused(model: str, target: dict, fast_math: bool = False, layout: str = "auto", prepack: bool = True):
    """The zoo model imported and fused once (drytune's `fuse`). MetaSchedule gets it with `prepack=False`: its
    relax pipeline's default (`cpu_weight_prepack=False`), and the databases of earlier sessions match it."""
    from drytune import zoo
    from drytune.extract import fuse
    from drytune.network import load_network

    torch_model, inputs = zoo.get_model(model)
    network = load_network(torch_model, inputs, name=model)
    return fuse(network.mod, target, fast_math=fast_math, layout=layout, prepack_weights=prepack)


def record_counts(path: str) -> tuple[int, int]:
    """(records, records of a successful run) in a MetaSchedule tuning-record file; a cut last line is ignored."""
    if not os.path.exists(path):
        return 0, 0
    total = valid = 0
    with open(path) as f:
        for line in f:
            try:
                run_secs = json.loads(line)[1][1]
            except (ValueError, IndexError, TypeError):
                continue
            total += 1
            valid += bool(run_secs) and max(float(s) for s in run_secs) < FAILED_RUN_SECS
    return total, valid


def copy_complete_lines(src: str, dst: str) -> None:
    data = b""
    if os.path.exists(src):
        with open(src, "rb") as f:
            data = f.read()
    with open(dst, "wb") as f:
        f.write(data[: data.rfind(b"\n") + 1])


def snapshot_database(src_dir: str, dst_dir: str) -> None:
    """Copy a JSON database that another process is appending to: records first, then the workloads (a
    superset of what those records refer to), each cut after its last complete line."""
    os.makedirs(dst_dir, exist_ok=True)
    copy_complete_lines(os.path.join(src_dir, RECORDS_FILE), os.path.join(dst_dir, RECORDS_FILE))
    copy_complete_lines(os.path.join(src_dir, WORKLOADS_FILE), os.path.join(dst_dir, WORKLOADS_FILE))


# ----------------------------------------------------------------------------------------------- tune-drytune


def tune_drytune(model: str, work: str, cfg: BenchConfig) -> dict:
    """drytune's tune_network at the budget; wall time from building the torch model to the checked build."""
    from drytune import zoo
    from drytune.scheduler.tune_network import tune_network
    from drytune.scheduler.workdir import read_rounds

    mdir = model_dir(work, model)
    tune_dir = os.path.join(mdir, "drytune")
    shutil.rmtree(tune_dir, ignore_errors=True)  # a fresh run: tune_network would resume a spent budget
    t0 = time.perf_counter()
    torch_model, inputs = zoo.get_model(model)
    tuned = tune_network(torch_model, inputs, target=target_dict(cfg.threads), budget=cfg.budget_s,
                         work_dir=tune_dir, seed=cfg.seed, progress=True, fast_math=cfg.fast_math,
                         layout=cfg.layout, cost_model=cfg.cost_model(), config=cfg.tune_config(),
                         gradient=cfg.gradient_config())
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    tuned.export(os.path.join(mdir, LIBRARIES["drytune"]))
    report = tuned.report()
    rounds = read_rounds(tune_dir)
    return {"wall_s": wall, "export_s": time.perf_counter() - t1, "budget_s": cfg.budget_s,
            "tuning_loop_s": rounds[-1].elapsed if rounds else 0.0, "trials": sum(r.trials for r in report.rows),
            "tasks": len(report.rows), "untuned_tasks": report.untuned, "skipped_tasks": [s[0] for s in report.skipped],
            "predicted_s": report.predicted_total, "check": tuned.check, "round_seconds": tuned.phase_seconds}


def verify_drytune(model: str, work: str, cfg: BenchConfig) -> dict:
    """drytune's tuned records with each task's k best predictions measured here and the fastest built: the same
    tune_network call on a copy of the tuning work directory, whose budget is spent, so it only verifies."""
    from drytune import zoo
    from drytune.scheduler.report import MEASURED_FILE
    from drytune.scheduler.tune_network import tune_network

    mdir = model_dir(work, model)
    src, dst = os.path.join(mdir, "drytune"), os.path.join(mdir, "drytune_verified")
    tuning = read_json(os.path.join(mdir, "drytune.json"))
    if tuning is None or "error" in tuning:
        raise RuntimeError(f"{model}: run --phase tune-drytune first")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    t0 = time.perf_counter()
    torch_model, inputs = zoo.get_model(model)
    tuned = tune_network(torch_model, inputs, target=target_dict(cfg.threads), budget=cfg.budget_s, work_dir=dst,
                         seed=cfg.seed, progress=False, fast_math=cfg.fast_math, layout=cfg.layout,
                         verify_top_k=cfg.verify_top_k, cost_model=cfg.cost_model(),
                         config=cfg.tune_config())
    wall = time.perf_counter() - t0
    tuned.export(os.path.join(mdir, LIBRARIES["drytune_verified"]))
    measured = read_json(os.path.join(dst, MEASURED_FILE)) or {}
    verify_s = tuned.phase_seconds.get("verify", math.nan)
    # one tune_network(..., verify_top_k=k) call pays the measuring on top of the tuning run; this phase's second
    # call also imports, extracts, restores the records and builds again
    return {"verify_wall_s": wall, "wall_s": tuning["wall_s"] + wall, "verify_s": verify_s,
            "one_call_wall_s": tuning["wall_s"] + verify_s, "verify_top_k": cfg.verify_top_k,
            "tasks_measured": len(measured), "measured_s": measured,
            "predicted_s": tuned.report().predicted_total, "check": tuned.check,
            "phase_seconds": tuned.phase_seconds}


# ----------------------------------------------------------------------------------------------- tune-ms


def warm_builder_worker() -> None:
    """Runs first in each MetaSchedule builder worker: the import its first build would otherwise pay."""
    import tvm.s_tir.tensor_intrin  # noqa: F401


def ms_child(model: str, ms_dir: str, cfg: BenchConfig) -> None:
    """MetaSchedule on the fused network with effectively unlimited trials; the parent kills this process."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    target = Target(target_dict(cfg.threads))
    fused = load_fused(model, target_dict(cfg.threads), cfg.fast_math, cfg.layout, prepack=False)
    builder = ms.builder.LocalBuilder(timeout_sec=cfg.ms_builder_timeout_s, initializer=warm_builder_worker)
    ms.relax_integration.tune_relax(fused, params={}, target=target, work_dir=ms_dir, max_trials_global=1_000_000,
                                    num_trials_per_iter=cfg.ms_trials_per_iter, builder=builder, runner="local",
                                    cost_model="xgb", task_scheduler="gradient", seed=cfg.seed)


def short_mark(model: str, work: str, cfg: BenchConfig) -> tuple[float, str]:
    """MetaSchedule's short mark: drytune's total wall time for this model if it has run, else the budget."""
    dt = read_json(os.path.join(model_dir(work, model), "drytune.json"))
    if dt is not None and "wall_s" in dt:
        return float(dt["wall_s"]), "drytune wall time"
    return cfg.budget_s, "budget (drytune has not run)"


def tune_ms(model: str, work: str, cfg: BenchConfig, args: argparse.Namespace) -> dict:
    """Run MetaSchedule in its own process group, copy its database at the short mark, kill it at the long one."""
    mdir = model_dir(work, model)
    ms_dir = os.path.join(mdir, "ms")
    snaps = {k: os.path.join(mdir, f"ms_{k}_db") for k in ("short", "long")}
    for d in (ms_dir, *snaps.values()):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(ms_dir)
    short_s, short_from = short_mark(model, work, cfg)
    long_s = max(cfg.long_budget_s, short_s)
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", "ms-child", "--models", model,
           "--work-dir", work, *config_args(args)]
    records = os.path.join(ms_dir, RECORDS_FILE)
    timeline: list[tuple[float, int]] = []
    info: dict = {"short_mark_s": short_s, "short_mark_from": short_from, "long_mark_s": long_s,
                  "trials_per_iter": cfg.ms_trials_per_iter}
    with open(os.path.join(mdir, "ms_child.log"), "w") as logf:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            next_point = 0.0
            while True:
                elapsed = time.perf_counter() - t0
                exited = child.poll() is not None
                if elapsed >= next_point:
                    timeline.append((round(elapsed, 1), record_counts(records)[0]))
                    next_point += 10.0
                if "short" not in info.get("snapshots", {}) and (elapsed >= short_s or exited):
                    snapshot_database(ms_dir, snaps["short"])
                    info.setdefault("snapshots", {})["short"] = elapsed
                if elapsed >= long_s or exited:
                    break
                time.sleep(0.5)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)  # the child and its builder/runner workers
            child.wait()
        wall = time.perf_counter() - t0
    snapshot_database(ms_dir, snaps["long"])
    info["snapshots"]["long"] = wall
    info["exit_code"] = child.returncode
    info["stopped"] = "killed at the long mark" if child.returncode == -signal.SIGKILL else "exited by itself"
    for k, d in snaps.items():
        total, valid = record_counts(os.path.join(d, RECORDS_FILE))
        info[f"trials_{k}"], info[f"valid_trials_{k}"] = total, valid
    info["first_record_s"] = next((t for t, n in timeline if n > 0), None)  # MetaSchedule writes no record
    info["timeline"] = timeline  # before every task has had its first round (its gradient scheduler's warm-up)
    if info["stopped"] == "exited by itself" and child.returncode != 0:
        with open(os.path.join(mdir, "ms_child.log")) as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"MetaSchedule's process failed (exit code {child.returncode}):\n{tail}")
    return info


# ----------------------------------------------------------------------------------------------- build


def build(model: str, work: str, cfg: BenchConfig) -> dict:
    """Export the untuned build and MetaSchedule's short and long databases applied to the fused module."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    from drytune.scheduler.build import applied_tasks

    mdir = model_dir(work, model)
    target = Target(target_dict(cfg.threads))
    t0 = time.perf_counter()
    fused = load_fused(model, target_dict(cfg.threads), cfg.fast_math, cfg.layout, prepack=False)
    prim_funcs = [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    out: dict = {"import_fuse_s": time.perf_counter() - t0, "prim_funcs": len(prim_funcs)}
    t0 = time.perf_counter()
    tvm.compile(fused, target=target).export_library(os.path.join(mdir, LIBRARIES["untuned"]))
    out["untuned_build_s"] = time.perf_counter() - t0
    for k in ("short", "long"):
        db_dir = os.path.join(mdir, f"ms_{k}_db")
        if not os.path.exists(os.path.join(db_dir, RECORDS_FILE)):
            log.warning("%s: no MetaSchedule %s database (run --phase tune-ms); skipped", model, k)
            continue
        t0 = time.perf_counter()
        db = ms.database.JSONDatabase(work_dir=db_dir, allow_missing=False)
        with target, db:
            mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
        tvm.compile(mod, target=target).export_library(os.path.join(mdir, LIBRARIES[f"ms_{k}"]))
        out[f"ms_{k}_build_s"] = time.perf_counter() - t0
        out[f"ms_{k}_scheduled_funcs"] = len(applied_tasks(mod))
    return out


# ----------------------------------------------------------------------------------------------- measure


def random_arrays(examples, seed: int) -> list:
    """Seeded inputs shaped like the model's example tensors: floats uniform in [-1, 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=tuple(x.shape)).astype(str(x.dtype).replace("torch.", "")) for x in examples]


def output_error(got: list, want: list) -> dict:
    import numpy as np

    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want, strict=True)):
        return {"max_abs": math.inf, "max_rel": math.inf}
    abs_err = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want, strict=True))
    scale = max(float(np.max(np.abs(w))) for w in want) or 1.0
    return {"max_abs": abs_err, "max_rel": abs_err / scale}


def systems_of(model: str, work: str, inputs: list) -> tuple[dict[str, Callable[[], object]], list, dict]:
    """Zero-argument callables running each built system on `inputs`, torch's outputs, each library's error."""
    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from drytune import zoo
    from drytune.network import flatten_outputs

    torch_model, _ = zoo.get_model(model)
    xs = [torch.from_numpy(x) for x in inputs]

    def run_torch():
        with torch.inference_mode():
            return torch_model(*xs)

    want = [np.asarray(a, dtype=np.float64) for a in flatten_outputs(run_torch())]
    calls: dict[str, Callable[[], object]] = {"torch": run_torch}
    errors = {}
    if all(x.dim() == 4 for x in xs):  # oneDNN's preferred layout for convolutions, as a user could ask for it
        cl_model = copy.deepcopy(torch_model).to(memory_format=torch.channels_last)
        xs_cl = [x.contiguous(memory_format=torch.channels_last) for x in xs]

        def run_torch_cl():
            with torch.inference_mode():
                return cl_model(*xs_cl)

        errors["torch_cl"] = output_error(flatten_outputs(run_torch_cl()), want)
        calls["torch_cl"] = run_torch_cl
    for name, lib in LIBRARIES.items():
        path = os.path.join(model_dir(work, model), lib)
        if not os.path.exists(path):
            log.warning("%s: %s is missing; %s is not measured", model, path, name)
            continue
        vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
        args = [tvm.runtime.tensor(x, tvm.cpu()) for x in inputs]
        main = vm["main"]
        errors[name] = output_error(flatten_outputs(main(*args)), want)
        calls[name] = lambda main=main, args=args: main(*args)
    return calls, want, errors


def seconds_per_call(fn: Callable[[], object], min_seconds: float) -> float:
    """Mean seconds of `fn()` over calls repeated until `min_seconds` have passed (at least one call)."""
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return elapsed / calls


def measure(model: str, work: str, cfg: BenchConfig) -> dict:
    """Interleaved rounds: each round times every system once (order rotated by round); per-round medians."""
    import torch

    from drytune import zoo

    torch.set_num_threads(cfg.threads)
    _, examples = zoo.get_model(model)
    inputs = random_arrays(examples, cfg.seed)
    calls, _, errors = systems_of(model, work, inputs)
    names = [s for s in SYSTEMS if s in calls]
    slow = {name: seconds_per_call(calls[name], 0.0) >= cfg.slow_call_s for name in names}  # first calls
    repeats = {name: 1 if slow[name] else cfg.repeats for name in names}
    rounds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(cfg.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            if slow[name] and r >= cfg.slow_rounds:
                continue
            time.sleep(cfg.pause_s)
            if not slow[name]:
                calls[name]()  # warm caches after the previous system
            rounds[name].append(statistics.median(
                seconds_per_call(calls[name], cfg.min_repeat_s) for _ in range(repeats[name])))
        log.info("%s round %d: %s", model, r + 1, {n: f"{v[-1] * 1e3:.3f} ms" for n, v in rounds.items() if v})
    out: dict = {"rounds_s": rounds, "median_s": {n: statistics.median(v) for n, v in rounds.items()},
                 "repeats": repeats, "min_repeat_s": cfg.min_repeat_s, "threads": cfg.threads,
                 "error_vs_torch": errors, "ratios": {}}
    for ours in (s for s in DRYTUNE_SYSTEMS if s in rounds):
        # each drytune system against the others and against the drytune systems before it (verified / plain)
        before = DRYTUNE_SYSTEMS[:DRYTUNE_SYSTEMS.index(ours)]
        for other in (n for n in names if n not in DRYTUNE_SYSTEMS or n in before):
            # over the rounds both were timed in (a slow system only in the first slow_rounds)
            per_round = [d / o for d, o in zip(rounds[ours], rounds[other], strict=False)]
            out["ratios"][f"{ours}/{other}"] = statistics.median(per_round)
    return out


# ----------------------------------------------------------------------------------------------- report


def machine() -> dict:
    info = {"cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return info


def collect(models: list[str], work: str, cfg: BenchConfig, command: str) -> dict:
    rows = {}
    for model in models:
        mdir = model_dir(work, model)
        rows[model] = {k: read_json(os.path.join(mdir, f"{k}.json"))
                       for k in ("drytune", "verified", "ms", "build", "measure")}
    return {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "config": asdict(cfg), "command": command,
            "models": rows}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.3g}"


def markdown(report: dict) -> str:
    rows = report["models"].values()
    threads = sorted({(r.get("measure") or {}).get("threads", report["config"]["threads"]) for r in rows})
    per_iter = sorted({(r.get("ms") or {}).get("trials_per_iter") for r in rows} - {None})
    lines = [
        f"# End-to-end networks, batch 1, {'/'.join(map(str, threads))} threads "
        f"({report['machine'].get('cpu', 'CPU')})",
        "",
        f"{report['date']}. `{report['command']}`",
        "",
        "drytune at its budget (wall time = model import to checked build); MetaSchedule (tune_relax, XGBoost, "
        f"measured, {'/'.join(map(str, per_iter)) or '-'} trials per task round, killed at the long mark) with its "
        "database as it was at drytune's wall time (short) and at the long mark. Latency: median over interleaved "
        "rounds (a system slower than a second a call, such as an untuned build, timed in the first round only); "
        "ratios: median over rounds of drytune's latency / the other's (< 1: drytune faster). "
        "Error: max abs difference from torch eager on the same random inputs.",
        "",
        "| model | drytune ms | drytune wall s (budget) | MS short ms (trials) | MS long ms (trials, s) | torch ms "
        "| torch channels-last ms | untuned ms | dt/MS-short | dt/MS-long | dt/torch | dt/torch-cl "
        "| max abs error dt / MS-s / MS-l / untuned |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, row in report["models"].items():
        dt, ms, meas = row.get("drytune") or {}, row.get("ms") or {}, row.get("measure") or {}
        lat = meas.get("median_s", {})
        ratios = meas.get("ratios", {})
        err = meas.get("error_vs_torch", {})
        dt_ms_short, dt_ms_long, dt_torch, dt_torch_cl = (
            f"{ratios[k]:.3f}" if k in ratios else "-"
            for k in ("drytune/ms_short", "drytune/ms_long", "drytune/torch", "drytune/torch_cl"))
        errs = " / ".join(f"{err[k]['max_abs']:.1e}" if k in err else "-"
                          for k in ("drytune", "ms_short", "ms_long", "untuned"))
        ms_short = f"{_ms(lat.get('ms_short'))} ({ms.get('trials_short', '-')})"
        ms_long = (f"{_ms(lat.get('ms_long'))} ({ms.get('trials_long', '-')}, "
                   f"{ms.get('snapshots', {}).get('long', math.nan):.0f})") if ms else "-"
        lines.append(
            f"| {model} | {_ms(lat.get('drytune'))} | {dt.get('wall_s', math.nan):.0f} "
            f"({dt.get('budget_s', math.nan):g}) | {ms_short} | {ms_long} "
            f"| {_ms(lat.get('torch'))} | {_ms(lat.get('torch_cl'))} | {_ms(lat.get('untuned'))} | {dt_ms_short} "
            f"| {dt_ms_long} | {dt_torch} | {dt_torch_cl} | {errs} |")
    verified = {m: row for m, row in report["models"].items() if row.get("verified")}
    if verified:
        lines += ["", "drytune with verification: the same records, each task's k best predictions measured on this "
                  "CPU and the fastest built. One call: drytune's wall time + the measuring, what one "
                  "tune_network(..., verify_top_k=k) call takes; two calls: drytune's + the whole verify phase, "
                  "which imports, extracts, restores the records and builds again.", "",
                  "| model | dt+verify ms | wall s, one call (measuring s) | wall s, two calls | k | tasks measured "
                  "| dt+v/dt | dt+v/MS-short | dt+v/MS-long | dt+v/torch | max abs error |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for model, row in verified.items():
            v, meas = row["verified"], row.get("measure") or {}
            ratios, err = meas.get("ratios", {}), meas.get("error_vs_torch", {}).get("drytune_verified")
            cells = (f"{ratios[k]:.3f}" if k in ratios else "-" for k in (
                "drytune_verified/drytune", "drytune_verified/ms_short", "drytune_verified/ms_long",
                "drytune_verified/torch"))
            err_text = "-" if err is None else f"{err['max_abs']:.1e}"
            lines.append(f"| {model} | {_ms(meas.get('median_s', {}).get('drytune_verified'))} "
                         f"| {v.get('one_call_wall_s', math.nan):.0f} ({v.get('verify_s', math.nan):.0f}) "
                         f"| {v.get('wall_s', math.nan):.0f} "
                         f"| {v.get('verify_top_k', '-')} | {v.get('tasks_measured', '-')} | {' | '.join(cells)} "
                         f"| {err_text} |")
    failed = [(m, k, d["error"].strip().splitlines()[-1]) for m, row in report["models"].items()
              for k, d in row.items() if d and "error" in d]
    if failed:
        lines += ["", "Failed phases:", *[f"- {m} {k}: {why}" for m, k, why in failed]]
    notes = []
    for model, row in report["models"].items():
        dt, ms, build_info = row.get("drytune") or {}, row.get("ms") or {}, row.get("build") or {}
        parts = []
        if dt.get("trials") is not None:
            parts.append(f"drytune scored {dt['trials']} candidates in {dt.get('tuning_loop_s', 0):.0f} s of its "
                         f"tuning loop ({dt['wall_s']:.0f} s with import, extraction, build and check); "
                         f"{len(dt.get('untuned_tasks', []))} of {dt.get('tasks')} tasks on default schedules")
        if ms.get("trials_long") is not None:
            first = ms.get("first_record_s")
            parts.append(f"MetaSchedule's first record after {'-' if first is None else f'{first:.0f}'} s (it saves "
                         f"none before every task has had one round), valid trials {ms.get('valid_trials_short')} "
                         f"(short) / {ms.get('valid_trials_long')} (long), its schedules applied to "
                         f"{build_info.get('ms_short_scheduled_funcs', '-')} / "
                         f"{build_info.get('ms_long_scheduled_funcs', '-')} of {build_info.get('prim_funcs', '-')} "
                         "PrimFuncs")
        if parts:
            notes.append(f"- {model}: " + "; ".join(parts) + ".")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- driver


def config_args(args: argparse.Namespace) -> list[str]:
    """The command-line flags that shape a run, to hand to a child process."""
    return ["--budget", str(args.budget), "--long-budget", str(args.long_budget), "--threads", str(args.threads),
            "--seed", str(args.seed), "--ms-trials-per-iter", str(args.ms_trials_per_iter),
            "--rounds", str(args.rounds), "--verify-top-k", str(args.verify_top_k),
            "--layout", args.layout, *(["--fast-math"] if args.fast_math else []),
            *(["--coefficients", args.coefficients] if args.coefficients else [])]


def parse_duration(text: str) -> float:
    from drytune.scheduler.budget import parse_seconds

    return parse_seconds(text)


def run_phase(phase: str, models: list[str], work: str, cfg: BenchConfig, args: argparse.Namespace) -> bool:
    """One phase for each model; a model's failure is written to its result file and the others go on."""
    steps = {"tune-drytune": ("drytune", lambda m: tune_drytune(m, work, cfg)),
             "verify": ("verified", lambda m: verify_drytune(m, work, cfg)),
             "tune-ms": ("ms", lambda m: tune_ms(m, work, cfg, args)),
             "build": ("build", lambda m: build(m, work, cfg)),
             "measure": ("measure", lambda m: measure(m, work, cfg))}
    key, step = steps[phase]
    ok = True
    for model in models:
        path = os.path.join(model_dir(work, model), f"{key}.json")
        if done(path) and not args.force:
            log.info("%s %s: done before (%s); --force redoes it", phase, model, path)
            continue
        log.info("%s %s", phase, model)
        t0 = time.perf_counter()
        try:
            result = step(model)
        except Exception:  # noqa: BLE001 - recorded for the report; the other models still run
            ok = False
            result = {"error": traceback.format_exc()}
            log.error("%s %s failed:\n%s", phase, model, result["error"])
        result["phase_s"] = time.perf_counter() - t0
        write_json(path, result)
        log.info("%s %s: %s", phase, model, json.dumps({k: v for k, v in result.items() if k != "timeline"})[:600])
    return ok


def main() -> int:
    from drytune.layout import LAYOUTS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", default="all", choices=("all", *PHASES, "ms-child"))
    ap.add_argument("--models", default=None, help=f"comma-separated zoo names (default {','.join(FULL_MODELS)})")
    ap.add_argument("--tiny", action="store_true", help=f"the small models {','.join(TINY_MODELS)}")
    ap.add_argument("--budget", default="10m", help="drytune's budget: seconds or 90s / 10m / 1h")
    ap.add_argument("--long-budget", default="60m", help="MetaSchedule's long run")
    ap.add_argument("--threads", type=int, default=BenchConfig.threads)
    ap.add_argument("--seed", type=int, default=BenchConfig.seed)
    ap.add_argument("--ms-trials-per-iter", type=int, default=BenchConfig.ms_trials_per_iter)
    ap.add_argument("--rounds", type=int, default=BenchConfig.rounds)
    ap.add_argument("--verify-top-k", type=int, default=BenchConfig.verify_top_k,
                    help="the verify phase measures each task's k best predictions")
    ap.add_argument("--fast-math", action="store_true",
                    help="exp/erf/tanh as vectorizing polynomials in every TVM build (drytune.fastmath)")
    ap.add_argument("--layout", default=BenchConfig.layout, choices=LAYOUTS,
                    help="convolution layout of every TVM build (drytune.layout; auto: NHWC on CPU)")
    ap.add_argument("--work-dir", default=os.path.join(REPO, "drytune-work", "networks"),
                    help="tuning work directories and built libraries (not committed)")
    ap.add_argument("--out", default=None, help="results path without extension "
                    "(default benchmarks/results/networks, or networks_tiny with --tiny)")
    ap.add_argument("--coefficients", default=None, metavar="FILE",
                    help="drytune's static cost model with this coefficients file (default: the one shipped for "
                         "this CPU)")
    ap.add_argument("--space", action="append", default=[], metavar="FIELD=VALUE",
                    help="a SpaceConfig field of drytune's search spaces, e.g. cpu_pack_conv_weights=False")
    ap.add_argument("--verify", action="append", default=[], metavar="FIELD=VALUE",
                    help="a VerifyConfig field of the verify phase, e.g. cold_weight_share=0.0")
    ap.add_argument("--gradient", action="append", default=[], metavar="FIELD=VALUE",
                    help="a GradientConfig field of drytune's task scheduler, e.g. time_unit=rounds")
    ap.add_argument("--force", action="store_true", help="redo phases that finished before")
    ap.add_argument("--command", default=None, help=argparse.SUPPRESS)  # the user's command, for the report
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts its thread pool
    models = args.models.split(",") if args.models else list(TINY_MODELS if args.tiny else FULL_MODELS)
    cfg = BenchConfig(budget_s=parse_duration(args.budget), long_budget_s=parse_duration(args.long_budget),
                      threads=args.threads, seed=args.seed, ms_trials_per_iter=args.ms_trials_per_iter,
                      rounds=args.rounds, fast_math=args.fast_math, layout=args.layout,
                      verify_top_k=args.verify_top_k, coefficients=args.coefficients, space=tuple(args.space),
                      verify=tuple(args.verify), gradient=tuple(args.gradient))
    work = os.path.abspath(args.work_dir)
    out = args.out or os.path.join(HERE, "results", "networks_tiny" if args.tiny else "networks")

    if args.phase == "ms-child":
        ms_child(models[0], os.path.join(model_dir(work, models[0]), "ms"), cfg)
        return 0
    command = args.command or "python benchmarks/networks.py " + " ".join(sys.argv[1:])
    if args.phase == "all":  # each phase in a fresh process: no Ray or thread pools left over between them
        ok = True
        for phase in PHASES:
            cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--models", ",".join(models),
                   "--work-dir", work, "--out", out, "--command", command, *config_args(args),
                   *(["--force"] if args.force else [])]
            ok = subprocess.run(cmd).returncode == 0 and ok
        return 0 if ok else 1
    if args.phase == "report":
        report = collect(models, work, cfg, command)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        write_json(out + ".json", report)
        with open(out + ".md", "w") as f:
            f.write(markdown(report))
        print(markdown(report))
        return 0
    return 0 if run_phase(args.phase, models, work, cfg, args) else 1


if __name__ == "__main__":
    sys.exit(main())
