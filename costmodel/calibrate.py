"""Calibration: fit the linear coefficients of the static model to measurements on this machine.

The only place in drytune that runs candidates. Two fits: `fit_coefficients`, non-negative least squares
on relative error (each row divided by its measured time), and `fit_log_ranking`, which fits log latency
after removing each operator's mean (what a search needs is the order of an operator's candidates, not
the operators' relative scale) with a robust loss, then sets the overall scale from the median ratio so
that the result is still cycles. `calibrate` uses the second.
"""

from __future__ import annotations

import functools
import logging
import math
import platform
import time
from collections.abc import Sequence

import numpy as np
import tvm
from scipy.optimize import least_squares, nnls
from tvm import s_tir, te

from ..measure import cold_timing, measure_modules
from ..space import SearchSpace
from ..task import Task
from .cpu_features import FEATURE_NAMES, hide_l1_refills
from .dataset import MeasuredRow, collect
from .model import Coefficients, StaticCostModel

log = logging.getLogger(__name__)


def fit_coefficients(features: np.ndarray, seconds: np.ndarray, freq_ghz: float) -> np.ndarray:
    """Non-negative a minimising sum_i (a . f_i / (freq * t_i) - 1)^2 over the measured rows."""
    features = np.asarray(features, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    ok = np.isfinite(seconds) & (seconds > 0) & np.all(np.isfinite(features), axis=1)
    if ok.sum() < features.shape[1]:
        raise ValueError(f"need at least {features.shape[1]} valid measurements to fit, got {int(ok.sum())}")
    cycles = seconds[ok] * freq_ghz * 1e9
    a_mat = features[ok] / cycles[:, None]
    scale = np.maximum(np.abs(a_mat).max(axis=0), 1e-30)  # conditioning: columns of unit size
    coef, _ = nnls(a_mat / scale, np.ones(len(cycles)), maxiter=50 * features.shape[1])
    return coef / scale


def fit_log_ranking(features: np.ndarray, seconds: np.ndarray, freq_ghz: float, groups: Sequence | None = None,
                    init: np.ndarray | None = None, fixed: dict[int, float] | None = None,
                    weights: np.ndarray | None = None) -> np.ndarray:
    """Non-negative a minimising a soft-L1 loss of log(a . f_i) - log(cycles_i) with each group's mean removed;
    the scale of a is then set so that the median of cycles_i / (a . f_i) is 1.

    `fixed` pins columns to coefficients measured elsewhere (column -> cycles per unit): their cycles are taken
    off each row's measured cycles (keeping at least a tenth of them) and the other columns fit the rest. This is
    for a cost that hardly varies within an operator (parallel-region entries), which the fit cannot see.
    `weights` (one per row, default 1) scale each row's squared residual, and its group's mean is weighted alike.
    """
    features = np.asarray(features, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    ok = np.isfinite(seconds) & (seconds > 0) & np.all(np.isfinite(features), axis=1)
    if ok.sum() < features.shape[1]:
        raise ValueError(f"need at least {features.shape[1]} valid measurements to fit, got {int(ok.sum())}")
    feats = features[ok].copy()
    cycles = seconds[ok] * freq_ghz * 1e9
    w = np.ones(len(feats)) if weights is None else np.asarray(weights, dtype=np.float64)[ok]
    pinned = np.zeros(feats.shape[1])
    for col, value in (fixed or {}).items():
        pinned[col] = value
        feats[:, col] = 0.0
    cycles = np.maximum(cycles - features[ok] @ pinned, 0.1 * cycles)
    log_cycles = np.log(cycles)
    labels = np.zeros(len(feats), dtype=int) if groups is None else np.unique(np.asarray(groups)[ok],
                                                                               return_inverse=True)[1]
    totals = np.bincount(labels, w)

    def centred(v: np.ndarray) -> np.ndarray:
        return v - (np.bincount(labels, v * w) / totals)[labels]

    scale = np.array([np.median(c[c > 0]) if np.any(c > 0) else 1.0 for c in feats.T])  # columns of unit size
    target = centred(log_cycles)
    root_w = np.sqrt(w)

    def residual(theta: np.ndarray) -> np.ndarray:
        return root_w * (centred(np.log(feats / scale @ np.exp(theta) + 1e-300)) - target)

    # weights are exp(theta): a start near zero has no gradient, so equal column weights are always tried
    starts = [np.zeros(feats.shape[1])]
    if init is not None:
        starts.append(np.log(np.maximum(np.asarray(init, dtype=np.float64) * scale, 1e-3)))
    fit = min((least_squares(residual, s0, loss="soft_l1", f_scale=0.3, bounds=(-40.0, 40.0)) for s0 in starts),
              key=lambda r: r.cost)
    coef = np.exp(fit.x) / scale
    coef[fit.x <= -39.0] = 0.0  # at the bound: the feature is not used
    coef = coef * np.exp(np.median(log_cycles - np.log(feats @ coef + 1e-300)))
    for col, value in (fixed or {}).items():
        coef[col] = value
    return coef


def fast_end_weights(seconds: Sequence[float], groups: Sequence, fraction: float = 0.25,
                     weight: float = 3.0) -> np.ndarray:
    """Row weights for `fit_log_ranking`: `weight` for the rows in the fastest `fraction` of their group, 1 for the
    rest. A search keeps only an operator's fastest candidates, so the order there matters most."""
    seconds = np.asarray(seconds, dtype=np.float64)
    groups = np.asarray(groups)
    out = np.ones(len(seconds))
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        rank = np.argsort(np.argsort(seconds[idx], kind="stable"), kind="stable")
        out[idx[rank < fraction * len(idx)]] = weight
    return out


def _plus(a: te.Tensor, value: float, i: tvm.tirx.Var) -> tvm.tirx.PrimExpr:
    return a[i] + value


def parallel_regions_module(regions: int, parallel: bool, n: int = 64) -> tvm.IRModule:
    """`regions` loop nests of `n` additions each (almost no work), each a parallel loop or a serial one."""
    a = te.placeholder((n,), "float32", name="a")
    outs = [te.compute((n,), functools.partial(_plus, a, float(k)), name=f"r{k}") for k in range(regions)]
    sch = s_tir.Schedule(te.create_prim_func([a, *outs]))
    if parallel:
        for k in range(regions):
            sch.parallel(sch.get_loops(sch.get_sblock(f"r{k}"))[0])
    return sch.mod


def parallel_region_cycles(target: tvm.target.Target, freq_ghz: float, regions: int = 8, rounds: int = 3) -> float:
    """Measured cycles of entering (and leaving) one parallel region of TVM's runtime on this machine: a module of
    `regions` near-empty parallel nests against the same nests serial, interleaved over `rounds` (built once),
    median."""
    mods = [parallel_regions_module(regions, True), parallel_regions_module(regions, False)]
    par, ser = measure_modules(mods, target, number=10, repeat=5, min_repeat_ms=20, rounds=rounds)
    if not (par.ok and ser.ok):
        raise RuntimeError(f"the parallel-region microbenchmark failed to build or run: {par.error or ser.error}")
    pairs = zip(par.times, ser.times, strict=True) if rounds > 1 else [(par.seconds, ser.seconds)]
    per_round = [max(p - s, 0.0) / regions for p, s in pairs]
    return float(np.median(per_round)) * freq_ghz * 1e9


def burst_store_module(mib: int = 4, width: int = 1024) -> tuple[tvm.IRModule, float]:
    """A fill of `mib` MiB (rows of `width` floats, parallel over the rows, 16-lane vectors) from a small input, and
    the cache lines it stores: nothing but a burst of stores."""
    rows = mib * 1024 * 1024 // 4 // width
    a = te.placeholder((width,), "float32", name="a")
    out = te.compute((rows, width), lambda i, j: a[j] + 1.0, name="out")
    sch = s_tir.Schedule(te.create_prim_func([a, out]))
    i, j = sch.get_loops(sch.get_sblock("out"))
    sch.parallel(i)
    sch.vectorize(sch.split(j, [None, 16])[1])
    return sch.mod, rows * width * 4 / 64


def burst_store_cycles(target: tvm.target.Target, freq_ghz: float, cores: int, rounds: int = 5) -> float:
    """Measured cycles per cache line, per core, that a burst of stores to memory evicted from the caches (a network
    kernel's output) costs beyond the same stores to cached memory: `burst_store_module` with its output flushed
    before each run against it repeated, interleaved over `rounds`, median."""
    mod, lines = burst_store_module()
    per_round = []
    for _ in range(rounds):
        cold = measure_modules([mod], target, **cold_timing(15))[0].seconds
        warm = measure_modules([mod], target, number=3, repeat=3, min_repeat_ms=50)[0].seconds
        if not (math.isfinite(cold) and math.isfinite(warm)):
            raise RuntimeError("the burst-store microbenchmark failed to build or run")
        per_round.append(max(cold - warm, 0.0) * freq_ghz * 1e9 / (lines / cores))
    return float(np.median(per_round))


def features_of_rows(model: StaticCostModel, rows: Sequence[MeasuredRow], spaces: dict[str, SearchSpace]
                     ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Feature matrix, measured seconds and operator names of the rows whose candidates could be analysed."""
    feats, secs, ops = [], [], []
    for row in rows:
        if not row.ok:
            continue
        try:
            f = model.features(spaces[row.op].task, row.candidate(spaces[row.op]))
        except Exception as err:  # noqa: BLE001 - counted and skipped
            log.info("skipped %s (%s)", row.sketch, err)
            continue
        feats.append(f.values)
        secs.append(row.seconds)
        ops.append(row.op)
    return np.array(feats), np.array(secs), ops


def calibrate(tasks: Sequence[Task], samples: int, data_path: str, out_path: str, *, seed: int = 0,
              rounds: int = 3, progress: bool = True) -> Coefficients:
    """Measure `samples` random candidates of each task (resuming `data_path`), fit and save coefficients.

    Each task's candidates are timed in turn over `rounds` rounds (the median is kept), so that a slow phase of
    the machine does not fall on a few of them only."""
    if not tasks:
        raise ValueError("calibrate needs at least one task")
    target = tasks[0].target
    model = StaticCostModel(target)
    rows: list[MeasuredRow] = []
    spaces = {}
    for task in tasks:
        spaces[task.name] = SearchSpace(task)
        # one timing per round (the rounds' median decides); a single round takes the median of 3 repeats instead
        got = list(collect(task, samples, data_path, seed=seed, repeat=1 if rounds > 1 else 3, rounds=rounds))
        if progress:
            print(f"  {task.name}: measured {len(got)} new candidates", flush=True)
    from .dataset import read_rows

    rows = [r for r in read_rows(data_path) if r.op in spaces]
    feats, secs, ops = features_of_rows(model, rows, spaces)
    hidden = model.coefficients.l1_hidden_per_cycle  # kept from the file being replaced: a choice, not fitted here
    feats = hide_l1_refills(feats, hidden)
    launch = parallel_region_cycles(target, model.spec.freq_ghz)
    burst = burst_store_cycles(target, model.spec.freq_ghz, model.spec.cores)
    coef = fit_log_ranking(feats, secs, model.spec.freq_ghz, groups=ops, init=model.coefficients.vector(),
                           fixed={FEATURE_NAMES.index("parallel_launches"): launch,
                                  FEATURE_NAMES.index("burst_store_lines"): burst})
    pred = feats @ coef / (model.spec.freq_ghz * 1e9)
    rel = float(np.median(np.abs(pred / secs - 1)))
    origin = (f"Calibrated by `drytune calibrate` on {time.strftime('%Y-%m-%d')} on {platform.machine()} "
              f"({model.spec.name}); {len(secs)} measured candidates of {', '.join(spaces)}; non-negative fit "
              f"of log latency with each operator's mean removed (soft-L1 loss); median relative error of the fit "
              f"{rel:.2f}. parallel_launches is not fitted but measured ({launch:.0f} cycles per parallel-region "
              f"entry: 8 near-empty parallel nests against the same nests serial); burst_store_lines neither "
              f"({burst:.1f} cycles per line per core: a 4-MiB fill with its output flushed against warm).")
    if hidden:
        origin += f" L1 refills up to {hidden} lines per kernel cycle taken as hidden (not fitted)."
    kernel = model.coefficients.kernel_settings  # the features above were computed with them: kept, not fitted
    if kernel:
        origin += f" Kernel-model settings {kernel} kept from the file replaced (not fitted)."
    result = Coefficients(model.spec.arch, dict(zip(FEATURE_NAMES, map(float, coef), strict=True)), origin,
                          {"fit_median_rel_error": rel if math.isfinite(rel) else None}
                          | Coefficients.l1_hidden_entry(hidden) | Coefficients.kernel_entry(kernel))
    result.save(out_path)
    return result
