"""Phase 2 of the fidelity benchmark: features, leave-one-operator-out fits, ranking metrics, baselines."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import numpy as np
from scipy import stats

import drytune as dt
from drytune import workloads
from drytune.costmodel.calibrate import burst_store_cycles, fast_end_weights, fit_log_ranking, parallel_region_cycles
from drytune.costmodel.cpu_features import FEATURE_NAMES, hide_l1_refills
from drytune.costmodel.dataset import MeasuredRow, program_digest, read_rows
from drytune.costmodel.model import COEFF_DIR, Coefficients, StaticCostModel, default_coefficients_path
from drytune.target import target_identity

TargetArg = str | dict  # what dt.resolve_target takes: "llvm" (the host) or a target dict

XGB_SIZES = (32, 64, 128)  # 128 needs more than 138 measured candidates of the operator


# The modules whose code decides a feature value: a change to any of them makes the cached features stale.
_FEATURE_SOURCES = ("asm", "cpu_features", "datamove", "fpratio", "kernel", "listsched", "looptree", "model")


def feature_code_version(kernel: dict[str, float] | None = None, target: TargetArg = "llvm") -> str:
    """A digest of the cost model's feature code, of the kernel-model settings and of the target when it is not the
    host's, stored with each cached entry."""
    import hashlib

    from drytune import costmodel

    digest = hashlib.sha1()
    for name in _FEATURE_SOURCES:
        with open(os.path.join(os.path.dirname(costmodel.__file__), name + ".py"), "rb") as f:
            digest.update(f.read())
    if kernel:
        digest.update(json.dumps(kernel, sort_keys=True).encode())
    if not is_host(target):
        digest.update(target_identity(dt.resolve_target(target)[0]).encode())
    return digest.hexdigest()[:12]


def is_host(target: TargetArg) -> bool:
    """Whether `target` builds for this machine's CPU (its candidates can be timed here)."""
    return target_identity(dt.resolve_target(target)[0]) == target_identity(dt.resolve_target("llvm")[0])


def parse_target(text: str | None) -> TargetArg:
    """`--target`: an LLVM CPU name (e.g. znver4) or a target dict as JSON; none: the host."""
    if not text:
        return "llvm"
    target = json.loads(text) if text.lstrip().startswith("{") else {"kind": "llvm", "mcpu": text}
    dt.resolve_target(target)  # an unknown CPU or kind fails here, before any work
    return target


def shipped_coefficients_path(target: TargetArg = "llvm") -> str:
    """The coefficients file StaticCostModel loads for `target` (default: the host CPU)."""
    tvm_target, spec = dt.resolve_target(target)
    return default_coefficients_path(spec, str(dict(tvm_target.attrs).get("mcpu", "")) or None)


def shipped_coefficients(target: TargetArg = "llvm") -> Coefficients:
    return Coefficients.load(shipped_coefficients_path(target))


def _row_key(row: MeasuredRow) -> str:
    return json.dumps([row.op, row.sketch, row.decisions], sort_keys=True)


def suite_operator(op: str, kernel: dict[str, float] | None = None,
                   target: TargetArg = "llvm") -> tuple[dt.Task, dt.SearchSpace, StaticCostModel]:
    """A suite operator's task for `target` (default: the host CPU), its search space and the shipped static model;
    with `kernel`, a model whose features use exactly these kernel-model settings (none: the defaults) instead of
    the file's."""
    task = workloads.get(op).task(target)
    if kernel is None:
        return task, dt.SearchSpace(task), StaticCostModel(task.target)
    spec = dt.resolve_target(task.target)[1]
    default = Coefficients.load(os.path.join(COEFF_DIR, f"{spec.arch}-default.json"))  # sets no kernel fields
    return task, dt.SearchSpace(task), StaticCostModel(task.target, default, kernel_overrides=kernel)


def save_report(stem: str, text: str, data: object) -> None:
    """A benchmark's report beside its data: the markdown `text` in STEM.md, `data` as JSON in STEM.json."""
    with open(stem + ".md", "w") as f:
        f.write(text)
    with open(stem + ".json", "w") as f:
        json.dump(data, f, indent=1)


def _features_job(args: tuple[str, list[dict], str, dict[str, float], TargetArg]) -> list[dict]:
    op, rows, version, kernel, target = args
    task, space, model = suite_operator(op, kernel, target)
    out = []
    for d in rows:
        row = MeasuredRow(**d)
        cand = row.candidate(space)
        entry = {"key": _row_key(row), "code": version}
        t0 = time.perf_counter()
        try:
            f = model.features(task, cand)
            entry |= {"values": list(f.values), "flops": f.flops, "speedup": f.speedup}
        except Exception as err:  # noqa: BLE001 - the row is reported as unscorable
            entry["error"] = f"{type(err).__name__}: {str(err).strip()[:160]}"
        entry["full_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        entry["prescore"] = float(model.prescore(task, [cand])[0])
        entry["pre_s"] = time.perf_counter() - t0
        mod = cand.to_mod()
        import tvm

        entry["program"] = program_digest(mod)
        entry["tir_flops"] = float(tvm.s_tir.analysis.estimate_tir_flops(mod))
        out.append(entry)
    return out


def compute_features(rows: list[MeasuredRow], cache_path: str, workers: int = 1,
                     kernel: dict[str, float] | None = None, target: TargetArg = "llvm") -> dict[str, dict]:
    """Features for `target` (default: the host) of every measured row with the kernel-model settings `kernel`
    (None: the target's shipped calibration's), cached in `cache_path`; entries computed by other feature code,
    settings or target (another `feature_code_version`) or from another program than the row's are recomputed."""
    if kernel is None:
        kernel = shipped_coefficients(target).kernel_settings
    cache: dict[str, dict] = {}
    stale = 0
    version = feature_code_version(kernel, target)
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    if d.get("code") != version or ("values" in d and len(d["values"]) != len(FEATURE_NAMES)):
                        stale += 1
                        continue
                    cache[d["key"]] = d
    if stale:
        print(f"dropping {stale} cached entries computed by other feature code", flush=True)
        with open(cache_path, "w") as out:
            out.writelines(json.dumps(e) + "\n" for e in cache.values())
    todo: dict[str, list[dict]] = {}
    redone = 0  # entries already in the file that are computed again (the file keeps both until rewritten)
    for r in rows:
        cached = cache.get(_row_key(r))
        # a row that records the program it timed gets features of that program (entries computed before digests,
        # or from the program the candidate replayed to before the row was measured again, are redone)
        redo = cached is None or (r.program is not None and cached.get("program") != r.program)
        if r.ok and redo:
            todo.setdefault(r.op, []).append(r.__dict__ | {"times": list(r.times)})
            redone += cached is not None
    jobs = [(op, chunk[i:i + 25], version, kernel, target)
            for op, chunk in todo.items() for i in range(0, len(chunk), 25)]
    if jobs:
        count = sum(len(job[1]) for job in jobs)
        print(f"computing features of {count} candidates in {workers} process(es)", flush=True)
        if workers > 1:
            ctx = multiprocessing.get_context("spawn")
            pool = ctx.Pool(workers)
            results = pool.imap_unordered(_features_job, jobs)
        else:
            pool, results = None, map(_features_job, jobs)
        with open(cache_path, "a") as out:
            for entries in results:
                for e in entries:
                    cache[e["key"]] = e
                    out.write(json.dumps(e) + "\n")
                out.flush()
        if pool is not None:
            pool.close()
        if redone:  # keep only the latest entry of each row
            with open(cache_path, "w") as out:
                out.writelines(json.dumps(e) + "\n" for e in cache.values())
    return cache


def scorable(rows: list[MeasuredRow], feats: dict[str, dict]) -> list[tuple[MeasuredRow, dict]]:
    """Rows paired with their feature entries where both are usable: measured, scored, and timed on the program
    their candidate replays to now (rows older than program digests cannot be checked and are kept)."""
    out, stale, unchecked = [], 0, 0
    for r in rows:
        e = feats.get(_row_key(r))
        if r.ok and e is not None and "values" in e:
            if r.program is None or "program" not in e:
                unchecked += 1
            elif r.program != e["program"]:  # the candidate now replays to another program than the one timed
                stale += 1
                continue
            out.append((r, e))
    print(f"{stale} measured rows dropped: their candidates replay to other programs than those timed; {unchecked} "
          "rows predate program digests and are not checked", flush=True)
    return out


def stored_features(results_dir: str, tag: str) -> dict[str, dict]:
    """The feature entries last stored for each row key in a tag's features file (none computed)."""
    suffix = f"_{tag}" if tag else ""
    feats = {}
    with open(os.path.join(results_dir, f"fidelity_features_llvm{suffix}.jsonl")) as f:
        for line in f:
            e = json.loads(line) if line.strip() else {}
            if "values" in e:
                feats[e["key"]] = e
    return feats


def stored_rows(results_dir: str, tag: str) -> list[tuple[MeasuredRow, dict]]:
    """`scorable` rows of a machine's fidelity data with the feature entries last stored for them (none computed)."""
    suffix = f"_{tag}" if tag else ""
    return scorable(read_rows(os.path.join(results_dir, f"fidelity_measurements_llvm{suffix}.jsonl")),
                    stored_features(results_dir, tag))


def pairwise_accuracy(pred: np.ndarray, meas: np.ndarray) -> float:
    i, j = np.triu_indices(len(pred), 1)
    keep = meas[i] != meas[j]
    return float(np.mean(np.sign(pred[i] - pred[j])[keep] == np.sign(meas[i] - meas[j])[keep]))


def top_k_ratio(pred: np.ndarray, meas: np.ndarray, k: int) -> float:
    """Tuna's metric: sum of the k truly best measured times over that of the k predicted best."""
    k = min(k, len(meas))
    best = np.sort(meas)[:k].sum()
    chosen = meas[np.argsort(pred, kind="stable")[:k]].sum()
    return float(best / chosen)


def metrics(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    finite = np.isfinite(pred)
    pred = np.where(finite, pred, np.nanmax(np.where(finite, pred, np.nan)) * 10 if finite.any() else 1.0)
    rho = stats.spearmanr(pred, meas).statistic
    tau = stats.kendalltau(pred, meas).statistic
    return {"spearman": float(np.nan_to_num(rho)), "kendall": float(np.nan_to_num(tau)),
            "pairwise": pairwise_accuracy(pred, meas), "top1": top_k_ratio(pred, meas, 1),
            "top10": top_k_ratio(pred, meas, 10)}


def xgb_metrics_for(task: dt.Task, cands: list, meas: np.ndarray, sizes: tuple[int, ...] = XGB_SIZES,
                    seed: int = 0) -> dict[int, dict[str, float]]:
    """MetaSchedule's XGBoost cost model trained on n of the measured candidates, scored on the others."""
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=task.mod, target=task.target, space_generator="post-order-apply",
                         search_strategy="evolutionary", num_threads=1)
    args_info = ms.arg_info.ArgInfo.from_prim_func(task.func)
    scheds = [ms.MeasureCandidate(c.to_schedule(), args_info) for c in cands]
    order = np.random.default_rng(seed).permutation(len(cands))
    out = {}
    for n in sizes:
        if n >= len(cands) - 10:
            continue
        train, test = order[:n], order[n:]
        model = ms.cost_model.XGBModel(num_warmup_samples=0, adaptive_training=False)
        model.update(ctx, [scheds[i] for i in train], [ms.runner.RunnerResult([float(meas[i])], None) for i in train])
        score = np.asarray(model.predict(ctx, [scheds[i] for i in test]))  # higher = faster
        out[n] = metrics(-score, meas[test])
    return out


def xgb_metrics(op: str, rows: list[MeasuredRow], seed: int = 0,
                target: TargetArg = "llvm") -> dict[int, dict[str, float]]:
    """`xgb_metrics_for` on the measured rows of a CPU suite operator (MetaSchedule's features for `target`)."""
    task = workloads.get(op).task(target)
    space = dt.SearchSpace(task)
    return xgb_metrics_for(task, [r.candidate(space) for r in rows], np.array([r.seconds for r in rows]), seed=seed)


def static_search_picks(task: dt.Task, seconds: float, top: int, seed: int = 7) -> tuple[list, int]:
    """Tune `task` statically for `seconds` in a scratch directory; its `top` best predictions and the record count."""
    import tempfile

    from drytune.records import RecordStore, candidate_from_trace

    with tempfile.TemporaryDirectory() as d:
        dt.tune(task, seconds=seconds, work_dir=d, progress=False, seed=seed)
        records = RecordStore(d).records(task)
    space = dt.SearchSpace(task)
    return [c for c in (candidate_from_trace(task, space.sketches, r.trace) for r in records[:top]) if c], len(records)


def evaluate(ops: list[str], data_path: str, results_dir: str, with_xgb: bool = True, tag: str = "",
             fit_out: str | None = None, launch_cycles: float | None = None, l1_hidden: float | None = None,
             kernel: dict[str, float] | None = None, burst_cycles: float | None = None,
             fast_weight: float = 1.0, target: TargetArg = "llvm", pins: dict[str, float] | None = None) -> int:
    """Features, fits and metrics of the measured rows in `data_path`; files of a tagged machine end in _TAG.
    `launch_cycles` pins the parallel-region coefficient in every fit (None: measured here; 0: fitted);
    `burst_cycles` the burst-store one (None: measured here; suite operators are no network kernels, so it is
    never fitted: the file records it);
    `l1_hidden` is the L1 refills per kernel cycle taken as hidden in every fit (None: the shipped file's);
    `kernel` the kernel-model settings of the features (None: the shipped file's; {}: the defaults);
    `fast_weight` the weight of the rows in each operator's fastest quarter in every fit (1: unweighted);
    `target` the CPU the features are computed for (default: the host; another one, e.g. the CPU the rows were
    measured on, is cross-compiled and needs `launch_cycles`, and with `fit_out` `burst_cycles`, given);
    `pins` coefficients (feature name -> cycles per unit) pinned in every fit, e.g. 0 to leave a feature out."""
    unknown = sorted(set(pins or {}) - set(FEATURE_NAMES))
    if unknown:
        raise SystemExit(f"--pin: no feature named {', '.join(unknown)}; the features are {', '.join(FEATURE_NAMES)}")
    host = is_host(target)
    if not host and (launch_cycles is None or (fit_out and burst_cycles is None)):
        raise SystemExit("features for another CPU than this host's: give --launch-cycles (and with --fit-out "
                         "--burst-store-cycles), measured on that CPU; this machine cannot measure them for it")
    rows = [r for r in read_rows(data_path) if r.op in ops]
    suffix = f"_{tag}" if tag else ""
    shipped = shipped_coefficients(target)  # the defaults of the choices the fits do not make
    if kernel is None:
        kernel = shipped.kernel_settings
    if l1_hidden is None:
        l1_hidden = shipped.l1_hidden_per_cycle
    print(f"kernel-model settings: {kernel or 'defaults'}", flush=True)
    feats = compute_features(rows, os.path.join(results_dir, f"fidelity_features_llvm{suffix}.jsonl"),
                             workers=os.cpu_count() or 1, kernel=kernel, target=target)
    by_op: dict[str, list[tuple[MeasuredRow, dict]]] = {}
    for r, e in scorable(rows, feats):
        by_op.setdefault(r.op, []).append((r, e))
    tvm_target, spec = dt.resolve_target(target)
    print(f"features for {target_identity(tvm_target)} ({spec.name}{'' if host else ', cross-compiled'})", flush=True)
    # first-principles file (never fitted), and the shipped calibrated one for this CPU if any (fitted on every
    # operator: in-sample here, reported apart)
    default_path = os.path.join(COEFF_DIR, f"{spec.arch}-default.json")
    default = Coefficients.load(default_path).vector()
    print(f"L1 refills hidden per kernel cycle: {l1_hidden}", flush=True)
    for d in by_op.values():  # the fits and the metrics see the charged refills only (the cache keeps raw values)
        d[:] = [(r, e | {"values": hide_l1_refills(e["values"], l1_hidden).tolist()}) for r, e in d]
    measured = launch_cycles is None
    if measured:
        launch_cycles = parallel_region_cycles(tvm_target, spec.freq_ghz)
        print(f"measured parallel-region entry: {launch_cycles:.0f} cycles", flush=True)
    fixed = {FEATURE_NAMES.index("parallel_launches"): launch_cycles} if launch_cycles else {}
    if pins:
        print(f"pinned in every fit: {pins}", flush=True)
        fixed |= {FEATURE_NAMES.index(name): value for name, value in pins.items()}
    if fit_out:
        burst_measured = burst_cycles is None
        if burst_measured:
            burst_cycles = burst_store_cycles(tvm_target, spec.freq_ghz, spec.cores)
            print(f"measured burst-store cost: {burst_cycles:.1f} cycles per line per core", flush=True)
        write_fit(by_op, spec, data_path, default, fit_out, fixed, l1_hidden, kernel, launch_measured=measured,
                  cross=None if host else target_identity(tvm_target), pins=pins,
                  burst=(burst_cycles, burst_measured), fast_weight=fast_weight)
    calibrated_path = shipped_coefficients_path(target)  # read after a --fit-out that may have rewritten it
    calibrated = Coefficients.load(calibrated_path) if calibrated_path != default_path else None
    if calibrated is not None and calibrated.l1_hidden_per_cycle != l1_hidden:
        print(f"note: {calibrated_path} hides {calibrated.l1_hidden_per_cycle} lines per cycle, this run {l1_hidden}; "
              "its in-sample column is computed with this run's", flush=True)
    if calibrated is not None and calibrated.kernel_settings != kernel:
        print(f"note: {calibrated_path} was fitted with kernel-model settings {calibrated.kernel_settings}, this run's "
              f"features with {kernel}; its in-sample column uses this run's features", flush=True)
    calibrated = calibrated.vector() if calibrated is not None else None
    table = []
    for op in ops:
        if op not in by_op or len(by_op[op]) < 20:
            continue
        searched = [(r, e) for r, e in by_op[op] if r.source != "random"]
        data = [(r, e) for r, e in by_op[op] if r.source == "random"]  # the fidelity metrics: random samples
        meas = np.array([r.seconds for r, _ in data])
        spreads = np.array([(max(r.times) - min(r.times)) / r.seconds for r, _ in data if len(r.times) > 1])
        # fits on random rows only: other operators' searched rows made the held-out ranking worse on both machines
        # (top-1 of a search's best predictions 0.60 -> 0.50 on Zen 3, 0.68 -> 0.59 on Zen 4;
        # docs/measurements-costmodel.md)
        others = [(r, e) for o, d in by_op.items() if o != op for r, e in d if r.source == "random"]
        F_train = np.array([e["values"] for _, e in others])
        y_train = np.array([r.seconds for r, _ in others])
        groups = [r.op for r, _ in others]
        coef = fit_log_ranking(F_train, y_train, spec.freq_ghz, groups=groups, init=default, fixed=fixed,
                               weights=fast_end_weights(y_train, groups, weight=fast_weight))
        F = np.array([e["values"] for _, e in data])
        pred = F @ coef
        if len(searched) >= 8:  # how the held-out model ranks a search's best predictions, once measured
            Fs = np.array([e["values"] for _, e in searched])
            searched_row = {"n": len(searched), "loo": metrics(Fs @ coef, np.array([r.seconds for r, _ in searched])),
                            "best_random_s": float(meas.min()),
                            "best_searched_s": float(min(r.seconds for r, _ in searched))}
        else:
            searched_row = None
        row = {"op": op, "n": len(data), "noise_median_spread": float(np.median(spreads)) if len(spreads) else None,
               "static_loo": metrics(pred, meas), "static_default": metrics(F @ default, meas),
               "static_calibrated_in_sample": metrics(F @ calibrated, meas) if calibrated is not None else None,
               "prescore": metrics(np.array([e["prescore"] for _, e in data]), meas),
               "flops": metrics(np.array([e["tir_flops"] for _, e in data]), meas),
               "full_s_median": float(np.median([e["full_s"] for _, e in data])),
               "pre_s_median": float(np.median([e["pre_s"] for _, e in data])),
               "coef_loo": dict(zip(FEATURE_NAMES, coef.tolist(), strict=True)), "searched": searched_row}
        if with_xgb:
            try:
                row["xgb"] = {str(k): v for k, v in xgb_metrics(op, [r for r, _ in data], target=target).items()}
            except Exception as err:  # noqa: BLE001 - reported in the table
                row["xgb_error"] = f"{type(err).__name__}: {str(err)[:160]}"
        table.append(row)
        s = row["static_loo"]
        print(f"{op:20s} n={len(data):3d} rho={s['spearman']:.2f} tau={s['kendall']:.2f} pair={s['pairwise']:.2f} "
              f"top1={s['top1']:.2f} top10={s['top10']:.2f} | flops rho={row['flops']['spearman']:.2f} "
              f"| xgb64 rho={row.get('xgb', {}).get('64', {}).get('spearman', float('nan')):.2f}", flush=True)
    write_report(table, results_dir, suffix)
    return 0


def write_fit(by_op: dict, spec: dt.HardwareSpec, data_path: str, init: np.ndarray, out: str,
              fixed: dict[int, float] | None = None, l1_hidden: float = 0.0,
              kernel: dict[str, float] | None = None, launch_measured: bool = True,
              burst: tuple[float, bool] = (0.0, False), fast_weight: float = 1.0, cross: str | None = None,
              pins: dict[str, float] | None = None) -> None:
    """Coefficients fitted on every measured operator (the file StaticCostModel loads for this CPU);
    `cross`: the target the features were cross-compiled for when it is not this host (None: the host);
    `pins`: coefficients given to the fit (`fixed` holds them too), named in the file's origin;
    `launch_measured`: whether the pinned parallel-region cost was measured by this run or given (--launch-cycles);
    `burst`: the burst-store cycles per line the file records and whether this run measured them."""
    pairs = [(r, e) for d in by_op.values() for r, e in d if r.source == "random"]  # as the held-out fits
    feats = np.array([e["values"] for _, e in pairs])
    secs = np.array([r.seconds for r, _ in pairs])
    pinned = (fixed or {}) | {FEATURE_NAMES.index("burst_store_lines"): burst[0]}
    groups = [r.op for r, _ in pairs]
    coef = fit_log_ranking(feats, secs, spec.freq_ghz, groups=groups, init=init, fixed=pinned,
                           weights=fast_end_weights(secs, groups, weight=fast_weight))
    rel = float(np.median(np.abs(feats @ coef / (spec.freq_ghz * 1e9) / secs - 1)))
    threads = dt.threads.default_runtime_threads()
    origin = (f"Fitted on {time.strftime('%Y-%m-%d')} by benchmarks/costmodel_fidelity.py --fit-out with "
              f"drytune.costmodel.calibrate.fit_log_ranking (non-negative, log latency with each operator's mean "
              f"removed, soft-L1 loss, scale from the median ratio) to the {len(secs)} measured candidates "
              f"(random samples; a search's best predictions are measured but left out of the fit) of "
              f"{len(by_op)} suite operators in benchmarks/results/{os.path.basename(data_path)} ({spec.name}, "
              f"{spec.cores} cores, {spec.vector_bits}-bit vectors, "
              + (f"measured with {threads} runtime threads" if cross is None else
                 f"features cross-compiled for {cross} on another machine than the rows were measured on")
              + f"); median relative error of the fit {rel:.2f}. In-sample: its leave-one-operator-out quality is "
              "the table of the matching costmodel_fidelity report.")
    if fast_weight != 1.0:
        origin += (f" Rows in each operator's fastest quarter weigh {fast_weight:g} in the fit "
                   "(drytune.costmodel.calibrate.fast_end_weights): a search keeps only the fast end.")
    for name, value in (pins or {}).items():
        origin += f" {name} is not fitted but pinned by --pin at {value:g} cycles per unit."
    for col, value in (fixed or {}).items():
        if FEATURE_NAMES[col] in (pins or {}):
            continue
        how = "measured before the fit" if launch_measured else "given to the fit (--launch-cycles)"
        origin += (f" {FEATURE_NAMES[col]} is not fitted but {how}: {value:.0f} cycles per "
                   "parallel-region entry (drytune.costmodel.calibrate.parallel_region_cycles: 8 near-empty "
                   "parallel nests against the same nests serial).")
    how = "measured before the fit" if burst[1] else "given to the fit (--burst-store-cycles)"
    origin += (f" burst_store_lines is not fitted (suite operators are no network kernels) but {how}: {burst[0]:.1f} "
               "cycles per line per core (drytune.costmodel.calibrate.burst_store_cycles: a 4-MiB fill with its output "
               "flushed against warm).")
    if l1_hidden:
        origin += (f" L1 refills up to {l1_hidden} lines per kernel-model cycle are taken as hidden behind the kernel "
                   "(not fitted: chosen with benchmarks/l1_overlap.py, docs/measurements-costmodel.md 'L1 refills "
                   "hidden behind the kernel, adopted').")
    if kernel:
        origin += (f" Features computed with the kernel-model settings {kernel} (not fitted: each chosen from "
                   "measurements, documented at its field of drytune.costmodel.kernel.KernelConfig).")
    Coefficients(spec.arch, dict(zip(FEATURE_NAMES, map(float, coef), strict=True)), origin,
                 {"fit_median_rel_error": rel} | Coefficients.l1_hidden_entry(l1_hidden)
                 | Coefficients.kernel_entry(kernel)).save(out)
    print(f"wrote {out} (median relative error {rel:.2f})", flush=True)


def write_report(table: list[dict], results_dir: str, suffix: str = "") -> None:
    with open(os.path.join(results_dir, f"costmodel_fidelity{suffix}.json"), "w") as f:
        json.dump(table, f, indent=1)
    med = {k: float(np.median([t["static_loo"][k] for t in table])) for k in ("spearman", "kendall", "pairwise",
                                                                               "top1", "top10")}
    lines = [f"Cost-model fidelity on this CPU ({time.strftime('%Y-%m-%d')}); static model with coefficients fitted "
             "leave-one-operator-out.", "",
             "| op | n | noise (median spread) | Spearman | Kendall | pairwise | top-1 | top-10 | default coeffs rho | "
             "pre-score rho | FLOP rho | XGB-32 rho | XGB-64 rho | XGB-128 rho |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        s = t["static_loo"]
        xgb = [t.get("xgb", {}).get(str(n), {}).get("spearman") for n in XGB_SIZES]
        xs = " | ".join("-" if x is None else f"{x:.2f}" for x in xgb)
        noise = t["noise_median_spread"]
        lines.append(f"| {t['op']} | {t['n']} | {noise:.2f} | {s['spearman']:.2f} | {s['kendall']:.2f} | "
                     f"{s['pairwise']:.2f} | {s['top1']:.2f} | {s['top10']:.2f} | "
                     f"{t['static_default']['spearman']:.2f} | {t['prescore']['spearman']:.2f} | "
                     f"{t['flops']['spearman']:.2f} | {xs} |")
    def col(get) -> str:
        vals = [v for v in map(get, table) if v is not None]
        return f"{np.median(vals):.2f}" if vals else "-"

    xgb_med = " | ".join(col(lambda t, n=n: t.get("xgb", {}).get(str(n), {}).get("spearman")) for n in XGB_SIZES)
    lines.append(f"| **median** | | | {med['spearman']:.2f} | {med['kendall']:.2f} | {med['pairwise']:.2f} | "
                 f"{med['top1']:.2f} | {med['top10']:.2f} | {col(lambda t: t['static_default']['spearman'])} | "
                 f"{col(lambda t: t['prescore']['spearman'])} | {col(lambda t: t['flops']['spearman'])} | {xgb_med} |")
    for name, key in (("first-principles default coefficients", "static_default"),
                      ("the shipped calibrated coefficients (in-sample: fitted on all operators)",
                       "static_calibrated_in_sample"), ("pre-score", "prescore")):
        if any(t.get(key) is None for t in table):
            continue
        m = {k: np.median([t[key][k] for t in table]) for k in ("spearman", "pairwise", "top1", "top10")}
        lines.append(f"\nMedians with {name}: Spearman {m['spearman']:.2f}, pairwise {m['pairwise']:.2f}, "
                     f"top-1 {m['top1']:.2f}, top-10 {m['top10']:.2f}.")
    searched = [t for t in table if t.get("searched")]
    if searched:
        lines += ["", "A search's best predictions, measured (rows of source \"search\", not in the metrics above), "
                  "ranked by the same held-out coefficients; best measured time among them vs among the random "
                  "samples:", "", "| op | n | Spearman | top-1 | best searched (ms) | best random (ms) |",
                  "|---|---|---|---|---|---|"]
        for t in searched:
            sr = t["searched"]
            lines.append(f"| {t['op']} | {sr['n']} | {sr['loo']['spearman']:.2f} | {sr['loo']['top1']:.2f} | "
                         f"{sr['best_searched_s'] * 1e3:.3g} | {sr['best_random_s'] * 1e3:.3g} |")
    full = np.median([t["full_s_median"] for t in table])
    pre = np.median([t["pre_s_median"] for t in table])
    lines += ["", f"Scoring speed (one process): full score {1 / full:.1f} candidates/s, pre-score {1 / pre:.0f} "
              "candidates/s (medians over operators)."]
    with open(os.path.join(results_dir, f"costmodel_fidelity{suffix}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
