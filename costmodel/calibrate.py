"""Calibration: fit the linear coefficients of the static model to measurements on this machine.

The only place in drytune that runs candidates. Coefficients are fitted by non-negative least squares on
relative error (each row divided by its measured time), so fast and slow kernels weigh alike.
"""

from __future__ import annotations

import logging
import math
import platform
import time
from collections.abc import Sequence

import numpy as np
from scipy.optimize import nnls

from ..space import SearchSpace
from ..task import Task
from .cpu_features import FEATURE_NAMES
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


def features_of_rows(model: StaticCostModel, rows: Sequence[MeasuredRow], spaces: dict[str, SearchSpace]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Feature matrix and measured seconds of the rows whose candidates could be analysed."""
    feats, secs = [], []
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
    return np.array(feats), np.array(secs)


def calibrate(tasks: Sequence[Task], samples: int, data_path: str, out_path: str, *, seed: int = 0,
              progress: bool = True) -> Coefficients:
    """Measure `samples` random candidates of each task (resuming `data_path`), fit and save coefficients."""
    if not tasks:
        raise ValueError("calibrate needs at least one task")
    target = tasks[0].target
    model = StaticCostModel(target)
    rows: list[MeasuredRow] = []
    spaces = {}
    for task in tasks:
        spaces[task.name] = SearchSpace(task)
        got = list(collect(task, samples, data_path, seed=seed))
        if progress:
            print(f"  {task.name}: measured {len(got)} new candidates", flush=True)
    from .dataset import read_rows

    rows = [r for r in read_rows(data_path) if r.op in spaces]
    feats, secs = features_of_rows(model, rows, spaces)
    coef = fit_coefficients(feats, secs, model.spec.freq_ghz)
    pred = feats @ coef / (model.spec.freq_ghz * 1e9)
    rel = float(np.median(np.abs(pred / secs - 1)))
    origin = (f"Calibrated by `drytune calibrate` on {time.strftime('%Y-%m-%d')} on {platform.machine()} "
              f"({model.spec.name}); {len(secs)} measured candidates of {', '.join(spaces)}; NNLS on relative "
              f"error; median relative error of the fit {rel:.2f}.")
    result = Coefficients(model.spec.arch, dict(zip(FEATURE_NAMES, map(float, coef), strict=True)), origin,
                          {"fit_median_rel_error": rel if math.isfinite(rel) else None})
    result.save(out_path)
    return result
