"""CUDA cost-model fidelity against a real NVIDIA GPU, in three phases (only the middle one needs the GPU).

`prepare` (here, no GPU): random candidates of each suite operator for `cuda-sm90`, each built to PTX and
scored by `StaticCostModel` exactly as a search scores it, then assembled to a cubin by ptxas; the bundle holds
the cubins, each kernel's launch (grid, block, dynamic shared memory, argument buffers), the per-kernel GPU
features and a CPU reference of every output at sampled positions.
`measure` (on the GPU machine): `cuda_device_measure.py` runs and times every cubin (numpy and CuPy only).
`rescore` (here, optional): the bundle's candidates scored again by the current model, cubins unchanged.
`search` (here, optional): a static search's best predictions added to the bundle.
`report` (here): Spearman, Kendall, pairwise accuracy and top-k ratios of the static model, a FLOP-count
baseline and MetaSchedule's XGBoost model trained on 32 / 64 measured samples of the same operator.

    python benchmarks/cuda_fidelity.py --phase prepare --samples 64 --bundle .devwork/cuda_bundle
    python benchmarks/cuda_device_measure.py --bundle .devwork/cuda_bundle --out measurements.jsonl  # GPU
    python benchmarks/cuda_fidelity.py --phase report --bundle .devwork/cuda_bundle \
        --measurements benchmarks/results/cuda_fidelity_h100_measurements.jsonl --tag h100
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_device_measure import load_op, seeded_inputs  # noqa: E402 - numpy-only helpers shared with the GPU side

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TARGET = "cuda-sm90"
REFERENCE_POINTS = 2048  # sampled output positions per written buffer
VERIFY_KS = (1, 2, 4, 8, 16, 24, 32)  # a search's k best predictions measured, as `verify_top_k` would on a GPU


def _written(func) -> set[str]:
    from drytune.measure import _written_params

    return {func.params[i].name for i in _written_params(func)}


def workload_info(op: str) -> dict:
    """Builder name and shape parameters of a suite operator (the GPU side rebuilds it in PyTorch from these)."""
    from drytune import workloads

    w = workloads.get(op)
    return {"builder": w.build.func.__name__, "params": dict(w.params)}


def model_description(model) -> str:
    """Which GPU model scored a bundle: the uncalibrated formula or the calibration file's first words."""
    return "uncalibrated formula" if model.coefficients is None else "calibrated: " + model.coefficients.origin[:60]


def rebuilt_candidate(task, space, c: dict):
    """The candidate a bundle entry describes: its sketch and decisions (JSON lists back to tuples)."""
    from drytune.annotate.candidate import Candidate

    return Candidate.from_json(task, space.sketch(c["sketch"]), c["decisions"])


def feature_rows(feats) -> list[dict]:
    """Per-kernel GPU features as the bundle stores them."""
    return [f.numeric() | {"kernel": f.kernel} for f in feats]


def score_candidate(model, mod):
    """Build one candidate to PTX and score it as `StaticCostModel.predict` does: (build, features, seconds, wall)."""
    from drytune.costmodel.cuda_build import build_cuda
    from drytune.costmodel.gpu_features import features_from_build

    t1 = time.perf_counter()
    build = build_cuda(mod, TARGET)
    feats = features_from_build(build, model.spec)
    return build, feats, model.seconds_from_gpu_features(feats), time.perf_counter() - t1


def bundle_candidate(task, model, cand, cid: str, source: str, bundle: str, params: list[dict]) -> dict:
    """Score one candidate as a search would, assemble its cubin and describe its launches; raises if it cannot run."""
    import tvm

    from drytune.costmodel.cuda_build import assemble_cubin

    mod = cand.to_mod()
    build, feats, predicted, score_s = score_candidate(model, mod)
    if not np.isfinite(predicted):
        raise ValueError("scored invalid by the static model")
    args, scratch = build.kernel_args, build.workspace
    known = {p["name"] for p in params} | set(scratch)
    unknown = sorted({a for k in build.launch for a in args.get(k.kernel, ("?",)) if a not in known})
    if unknown:
        raise ValueError(f"kernel arguments with no buffer: {unknown}")
    cubin = os.path.join("cubin", task.name, f"{cid}.cubin")
    os.makedirs(os.path.join(bundle, "cubin", task.name), exist_ok=True)
    assemble_cubin(build.ptx, build.arch, os.path.join(bundle, cubin))
    used = {a for k in build.launch for a in args[k.kernel]}
    return {
        "id": cid, "source": source, "sketch": cand.sketch.name,
        "decisions": {k: list(v) if isinstance(v, tuple) else v for k, v in cand.decisions.items()},
        "predicted_s": predicted, "score_s": score_s,
        "tir_flops": float(tvm.s_tir.analysis.estimate_tir_flops(mod)),
        "cubin": cubin, "scratch": {n: b for n, b in scratch.items() if n in used},
        "kernels": [{"name": k.kernel, "grid": list(k.grid), "block": list(k.block),
                     "dyn_smem": build.dynamic_smem.get(k.kernel, 0), "args": list(args[k.kernel])}
                    for k in build.launch],
        "features": feature_rows(feats),
    }


def _bundle_all(task, model, cands: list, prefix: str, source: str, bundle: str, params: list[dict]):
    out, skipped = [], {}
    for i, cand in enumerate(cands):
        try:
            out.append(bundle_candidate(task, model, cand, f"{prefix}{i:04d}", source, bundle, params))
        except Exception as err:  # noqa: BLE001 - counted per reason; the bundle keeps only runnable candidates
            reason = f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"
            skipped[reason] = skipped.get(reason, 0) + 1
    return out, skipped


def prepare_op(job: tuple[str, int, int, str]) -> dict:
    """Sample, score and assemble one operator's candidates; writes ops/OP.json and cubin/OP/*.cubin."""
    op, samples, seed, bundle = job
    import drytune as dt
    from drytune import workloads
    from drytune.verify import run_module

    t0 = time.perf_counter()
    prim = workloads.get(op).prim_func()
    task = dt.Task.from_prim_func(prim, TARGET, name=op)
    model = dt.StaticCostModel(TARGET)
    params = [{"name": n, "shape": list(s), "dtype": d, "written": n in _written(task.func)}
              for n, s, d in task.params]
    inputs = seeded_inputs(params, seed)
    cpu = dt.Task.from_prim_func(prim, "llvm", name=op)
    outputs = run_module(cpu.mod, cpu, inputs)
    rng = np.random.default_rng(seed + 1)
    reference = {}
    for p, arr in zip(params, outputs, strict=True):
        if p["written"]:
            idx = np.sort(rng.choice(arr.size, size=min(REFERENCE_POINTS, arr.size), replace=False))
            reference[p["name"]] = {"index": idx.tolist(), "value": arr.ravel()[idx].astype(np.float64).tolist()}
    cands, skipped = _bundle_all(task, model, dt.SearchSpace(task).sample(samples, seed=seed), "r", "random",
                                 bundle, params)
    doc = {"op": op, "target": TARGET, "flops": task.flops, "seed": seed, "params": params,
           "workload": workload_info(op), "model": model_description(model), "reference": reference,
           "candidates": cands, "skipped": skipped,
           "prepare_s": time.perf_counter() - t0}
    _write_op(bundle, doc)
    return {"op": op, "n": len(cands), "skipped": skipped, "s": doc["prepare_s"]}


def rescore_op(job: tuple[str, str]) -> dict:
    """Score a bundled operator's candidates again with the current model (features and predictions; the cubins
    stay, since the same decisions build the same kernels), so that a model change is judged on measured kernels."""
    op, bundle = job
    import drytune as dt
    from drytune import workloads

    doc = load_op(bundle, op)
    task = workloads.get(op).task(TARGET)
    space, model = dt.SearchSpace(task), dt.StaticCostModel(TARGET)
    changed = 0
    for c in doc["candidates"]:
        build, feats, predicted, _ = score_candidate(model, rebuilt_candidate(task, space, c).to_mod())
        if [[k.kernel, list(k.grid), list(k.block)] for k in build.launch] != [
                [k["name"], k["grid"], k["block"]] for k in c["kernels"]]:
            raise RuntimeError(f"{op} {c['id']}: the rebuilt kernels differ from the bundled cubin's")
        changed += not np.isclose(predicted, c["predicted_s"], rtol=1e-9)
        c["predicted_s"], c["features"] = predicted, feature_rows(feats)
    doc["model"] = model_description(model)
    _write_op(bundle, doc)
    return {"op": op, "n": len(doc["candidates"]), "changed": changed}


def _write_op(bundle: str, doc: dict) -> None:
    os.makedirs(os.path.join(bundle, "ops"), exist_ok=True)
    path = os.path.join(bundle, "ops", f"{doc['op']}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def add_search_picks(op: str, seconds: float, top: int, bundle: str, label: str = "search") -> dict:
    """Tune the operator statically for `seconds` (as `drytune tune-op` would) and add its `top` best predictions
    as candidates of source `label` (ids: `label-RANK`; rank 0 is the search's pick)."""
    from fidelity_eval import static_search_picks

    import drytune as dt
    from drytune import workloads

    doc = load_op(bundle, op)
    task = workloads.get(op).task(TARGET)
    model = dt.StaticCostModel(TARGET)
    t0 = time.perf_counter()
    picks, n_records = static_search_picks(task, seconds, top)
    cands, skipped = _bundle_all(task, model, picks, f"{label}-", label, bundle, doc["params"])
    doc["candidates"] = [c for c in doc["candidates"] if c["source"] != label] + cands
    doc.setdefault("searches", {})[label] = {"seconds": seconds, "records": n_records, "skipped": skipped,
                                             "wall_s": time.perf_counter() - t0, "model": model_description(model)}
    _write_op(bundle, doc)
    return {"op": op, "n": len(cands), "records": n_records, "s": time.perf_counter() - t0}


def run_prepare(ops: list[str], samples: int, seed: int, bundle: str, workers: int) -> None:
    jobs = [(op, samples, seed, bundle) for op in ops]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for res in pool.imap_unordered(prepare_op, jobs):
            print(f"{res['op']:20s} {res['n']:4d} candidates in {res['s']:6.1f}s; skipped {res['skipped']}",
                  flush=True)


def _metrics():
    from fidelity_eval import metrics

    return metrics


def xgb_cuda(op: str, cands: list[dict], meas: np.ndarray, sizes: tuple[int, ...]) -> dict:
    """MetaSchedule's XGBoost model trained on n measured candidates of the operator, scored on the others."""
    from fidelity_eval import xgb_metrics_for

    import drytune as dt
    from drytune import workloads

    task = workloads.get(op).task(TARGET)
    space = dt.SearchSpace(task)
    built = [rebuilt_candidate(task, space, c) for c in cands]
    return {str(n): m for n, m in xgb_metrics_for(task, built, meas, sizes).items()}


def _read_jsonl(path: str) -> list[dict]:
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def candidate_terms(cand: dict, spec) -> np.ndarray | None:
    """`GPU_TERM_NAMES` terms of a bundled candidate, from the per-kernel features stored at prepare time."""
    from types import SimpleNamespace

    from drytune.costmodel.model import gpu_terms

    return gpu_terms([SimpleNamespace(**f) for f in cand["features"]], spec)


def fit_terms(pairs: list[tuple[np.ndarray, float, str]], spec) -> np.ndarray:
    """Non-negative term weights (cycles per unit), fitted as the CPU coefficients are (log ranking per operator)."""
    from drytune.costmodel.calibrate import fit_log_ranking

    return fit_log_ranking(np.array([t for t, _, _ in pairs]), np.array([s for _, s, _ in pairs]), spec.freq_ghz,
                           groups=[o for _, _, o in pairs], init=np.ones(len(pairs[0][0])))


def prescore_terms_of(op: str, cands: list[dict], spec) -> dict[str, np.ndarray]:
    """TIR-only pre-score terms (`gpu_prescore`) of bundled candidates, by id (those that fit an SM)."""
    import drytune as dt
    from drytune import workloads
    from drytune.costmodel.gpu_prescore import kernel_work, prescore_terms

    task = workloads.get(op).task(TARGET)
    space = dt.SearchSpace(task)
    out = {}
    for c in cands:
        terms = prescore_terms(kernel_work(rebuilt_candidate(task, space, c).to_mod(), TARGET), spec)
        if terms is not None:
            out[c["id"]] = terms
    return out


def write_fit(pairs: list[tuple[np.ndarray, float, str]], spec, device: str, measurements: str, out: str,
              pre_pairs: list[tuple[np.ndarray, float, str]] | None = None) -> None:
    from drytune.costmodel.gpu_prescore import PRESCORE_TERM_NAMES
    from drytune.costmodel.model import GPU_TERM_NAMES, Coefficients

    coef = fit_terms(pairs, spec)
    extra: dict = {}
    if pre_pairs:
        pre = fit_terms(pre_pairs, spec)
        extra["prescore"] = dict(zip(PRESCORE_TERM_NAMES, map(float, pre), strict=True))
        extra["prescore_origin"] = (f"Fitted the same way to {len(pre_pairs)} of the same candidates: the weights of "
                                    "drytune.costmodel.gpu_prescore's TIR-only terms (per-thread operation counts of "
                                    "the lowered kernels and their launch; no CUDA C, nvcc or ptxas).")
    pred = np.array([t @ coef for t, _, _ in pairs]) / (spec.freq_ghz * 1e9)
    rel = float(np.median(np.abs(pred / np.array([s for _, s, _ in pairs]) - 1)))
    origin = (f"Fitted on {time.strftime('%Y-%m-%d')} by benchmarks/cuda_fidelity.py --phase report --fit-out with "
              "drytune.costmodel.calibrate.fit_log_ranking (non-negative, log latency with each operator's mean "
              f"removed, soft-L1 loss, scale from the median ratio) to {len(pairs)} random {TARGET} candidates of "
              f"{len({o for _, _, o in pairs})} suite operators measured on {device} "
              f"(benchmarks/results/{os.path.basename(measurements)}: cubins from ptxas, CUDA events, L2 warm); "
              f"median relative error of the fit {rel:.2f}. Its leave-one-operator-out quality is the cuda_fidelity "
              "report's table.")
    Coefficients("nvidia", dict(zip(GPU_TERM_NAMES, map(float, coef), strict=True)), origin,
                 {"fit_median_rel_error": rel, **extra}).save(out)
    print(f"wrote {out} (median relative error {rel:.2f})", flush=True)


def run_report(bundle: str, measurements: str, tag: str, device: str, xgb_sizes: tuple[int, ...],
               torch_path: str = "", fit_out: str = "", with_prescore: bool = True) -> None:
    import drytune as dt
    from drytune.costmodel.gpu_prescore import PRESCORE_TERM_NAMES

    metrics = _metrics()
    _, spec = dt.resolve_target(TARGET)
    rows = {(r["op"], r["id"]): r for r in _read_jsonl(measurements)}
    torch_rows: dict[str, dict] = {}  # the fastest of the op's PyTorch rows (several runs: the baseline's best)
    for r in _read_jsonl(torch_path):
        if "seconds" in r and r["seconds"] < torch_rows.get(r["op"], {}).get("seconds", float("inf")):
            torch_rows[r["op"]] = r
        torch_rows.setdefault(r["op"], r)
    docs = []
    for name in sorted(os.listdir(os.path.join(bundle, "ops"))):
        with open(os.path.join(bundle, "ops", name)) as f:
            docs.append(json.load(f))
    measured: dict[str, list[tuple[dict, dict, np.ndarray]]] = {}  # op -> (candidate, row, terms), runnable ones
    for doc in docs:
        for c in doc["candidates"]:
            r = rows.get((doc["op"], c["id"]))
            terms = candidate_terms(c, spec)
            if r is not None and "seconds" in r and terms is not None:
                measured.setdefault(doc["op"], []).append((c, r, terms))
    random_pairs = [(t, r["seconds"], op) for op, L in measured.items() for c, r, t in L if c["source"] == "random"]
    pre: dict[str, dict[str, np.ndarray]] = {}
    if with_prescore:
        for op, L in measured.items():
            pre[op] = prescore_terms_of(op, [c for c, _, _ in L if c["source"] == "random"], spec)
    pre_pairs = [(pre[op][c["id"]], r["seconds"], op) for op, L in measured.items() for c, r, _ in L
                 if c["id"] in pre.get(op, {})]
    if fit_out:
        write_fit(random_pairs, spec, device, measurements, fit_out, pre_pairs)
    model = dt.StaticCostModel(TARGET)  # the shipped calibration, for its pre-score weights
    shipped_pre = (model.coefficients.extra.get("prescore") if model.coefficients is not None else None)
    shipped_w = None if shipped_pre is None else np.array([shipped_pre[n] for n in PRESCORE_TERM_NAMES])
    table = []
    for doc in docs:
        op = doc["op"]
        pairs = [(c, rows[(op, c["id"])]) for c in doc["candidates"] if (op, c["id"]) in rows]
        errors: dict[str, int] = {}
        for _, r in pairs:
            if "error" in r:
                errors[r["error"][:60]] = errors.get(r["error"][:60], 0) + 1
        good = [(c, r, t) for c, r, t in measured.get(op, []) if c["source"] == "random"]
        if len(good) < 10:
            print(f"{op}: only {len(good)} measured candidates, left out", flush=True)
            continue
        meas = np.array([r["seconds"] for _, r, _ in good])
        scored = np.array([c["predicted_s"] for c, _, _ in good])
        coef = fit_terms([p for p in random_pairs if p[2] != op], spec)
        loo = np.array([t @ coef for _, _, t in good]) / (spec.freq_ghz * 1e9)
        spread = np.array([(max(r["times"]) - min(r["times"])) / r["seconds"] for _, r, _ in good])
        invalid = sum(1 for c, r in pairs if "seconds" in r and c["source"] == "random"
                      and candidate_terms(c, spec) is None)
        row = {"op": op, "n": len(good), "errors": errors, "scored_invalid_but_ran": invalid,
               "skipped_at_prepare": doc["skipped"], "noise_median_spread": float(np.median(spread)),
               "model": doc.get("model", "uncalibrated formula"), "scored": metrics(scored, meas),
               "calibrated_loo": metrics(loo, meas),
               "flops": metrics(np.array([c["tir_flops"] for c, _, _ in good]), meas),
               "best_measured_s": float(meas.min()),
               "scored_pick_s": float(meas[np.argmin(scored)]), "calibrated_pick_s": float(meas[np.argmin(loo)]),
               "scored_over_meas": float(np.median(scored / meas)),
               "calibrated_over_meas": float(np.median(loo / meas)),
               "gflops_best": doc["flops"] / float(meas.min()) / 1e9,
               "score_s_median": float(np.median([c["score_s"] for c in doc["candidates"]]))}
        if pre.get(op):
            mine = [(pre[op][c["id"]], r["seconds"]) for c, r, _ in good if c["id"] in pre[op]]
            coef = fit_terms([p for p in pre_pairs if p[2] != op], spec)
            pm = np.array([s for _, s in mine])
            row["prescore_loo"] = metrics(np.array([t @ coef for t, _ in mine]), pm)
            if shipped_w is not None:
                row["prescore_shipped"] = metrics(np.array([t @ shipped_w for t, _ in mine]), pm)
        kernels = [k for c in doc["candidates"] if c["source"] == "random" for k in c["features"]]
        row["ptx"] = {"kernels_per_candidate": float(np.median([len(c["features"]) for c in doc["candidates"]])),
                      **{name: float(np.median([k[name] for k in kernels])) for name in
                         ("registers", "occupancy", "waves", "dyn_instructions", "bank_conflict_degree")},
                      "with_spills": float(np.mean([k["spill_bytes"] > 0 for k in kernels])),
                      "fma_share": float(np.median([k["fma"] / max(1.0, k["dyn_instructions"]) for k in kernels]))}
        row["searches"] = {}
        for label in sorted({c["source"] for c in doc["candidates"]} - {"random"}):
            mine = sorted((c for c in doc["candidates"] if c["source"] == label), key=lambda c: c["id"])
            pick = rows.get((op, mine[0]["id"]), {})  # rank 0: the search's pick
            ranked = [rows.get((op, c["id"]), {}).get("seconds", float("inf")) for c in mine]  # in predicted order
            done = [s for s in ranked if np.isfinite(s)]
            row["searches"][label] = {"n": len(mine), "pick_s": pick.get("seconds"), "pick_error": pick.get("error"),
                                      "best_s": min(done) if done else None,
                                      # what verifying the k best predictions on the device would keep
                                      "best_of_k": {str(k): min(ranked[:k]) for k in VERIFY_KS if k <= len(ranked)},
                                      "predicted_s": [c["predicted_s"] for c in mine], "measured_s": ranked,
                                      "seconds": doc.get("searches", {}).get(label, doc.get("search", {})).get(
                                          "seconds")}
        if op in torch_rows:
            row["torch_s"] = torch_rows[op].get("seconds")
            row["torch_error"] = torch_rows[op].get("error")
        if xgb_sizes:
            try:
                row["xgb"] = xgb_cuda(op, [c for c, _, _ in good], meas, xgb_sizes)
            except Exception as err:  # noqa: BLE001 - reported in the table
                row["xgb_error"] = f"{type(err).__name__}: {str(err)[:160]}"
        table.append(row)
        f, c = row["scored"], row["calibrated_loo"]
        print(f"{op:20s} n={len(good):3d} scored rho={f['spearman']:.2f} top1={f['top1']:.2f} | calibrated LOO "
              f"rho={c['spearman']:.2f} top1={c['top1']:.2f} top10={c['top10']:.2f} | flops rho="
              f"{row['flops']['spearman']:.2f} | errors {errors}", flush=True)
    suffix = f"_{tag}" if tag else ""
    with open(os.path.join(RESULTS, f"cuda_fidelity{suffix}.json"), "w") as f:
        json.dump({"device": device, "target": TARGET, "table": table}, f, indent=1)
    write_markdown(table, os.path.join(RESULTS, f"cuda_fidelity{suffix}.md"), device, xgb_sizes)


def write_markdown(table: list[dict], path: str, device: str, xgb_sizes: tuple[int, ...]) -> None:
    keys = ("spearman", "kendall", "pairwise", "top1", "top10")

    def med(get) -> str:
        vals = [v for v in map(get, table) if v is not None]
        return f"{np.median(vals):.2f}" if vals else "-"

    def us(x) -> str:
        return "-" if x is None else f"{x * 1e6:.1f}"

    lines = [f"CUDA cost-model fidelity ({time.strftime('%Y-%m-%d')}): random `{TARGET}` candidates scored here from "
             f"PTX and ptxas (no GPU), then measured on {device}. 'scored': the model that scored them when the "
             f"bundle was made ({'; '.join(sorted({t['model'] for t in table}))}); 'calibrated': the GPU terms with "
             "weights fitted leave-one-operator-out (never on the operator "
             "scored).", "",
             "| op | n | failed on GPU | noise | scored rho | calibrated rho | Kendall | pairwise | top-1 | top-10 "
             "| FLOP rho | " + "".join(f"XGB-{n} rho | " for n in xgb_sizes),
             "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(xgb_sizes)]
    for t in table:
        c = t["calibrated_loo"]
        xs = "".join((f"{t['xgb'][str(n)]['spearman']:.2f}" if str(n) in t.get("xgb", {}) else "-") + " | "
                     for n in xgb_sizes)
        lines.append(f"| {t['op']} | {t['n']} | {sum(t['errors'].values())} | {t['noise_median_spread']:.2f} | "
                     f"{t['scored']['spearman']:.2f} | " + " | ".join(f"{c[k]:.2f}" for k in keys)
                     + f" | {t['flops']['spearman']:.2f} | " + xs)
    xm = "".join(med(lambda t, n=n: t.get("xgb", {}).get(str(n), {}).get("spearman")) + " | " for n in xgb_sizes)
    lines.append("| **median** | | | | " + med(lambda t: t["scored"]["spearman"]) + " | "
                 + " | ".join(med(lambda t, k=k: t["calibrated_loo"][k]) for k in keys) + " | "
                 + med(lambda t: t["flops"]["spearman"]) + " | " + xm)
    labels = sorted({lb for t in table for lb in t.get("searches", {})})
    lines += ["", "Kernels, measured in the same run (microseconds): the best of the random candidates (found by "
              "measuring all of them), the one the calibrated model ranks first among them, each static search's pick "
              "(its best prediction, nothing measured) and PyTorch (cuBLAS/cuDNN, TF32 off, the faster of its runs); "
              "then each pick over PyTorch.", "",
              "| op | best random | calibrated pick | " + "".join(f"{lb} pick | " for lb in labels) + "PyTorch | "
              + "".join(f"{lb} / PyTorch | " for lb in labels), "|---|---|---|" + "---|" * (2 * len(labels) + 1)]
    for t in table:
        picks = [t["searches"].get(lb, {}).get("pick_s") for lb in labels]
        ratios = [f"{x / t['torch_s']:.2f}" if x and t.get("torch_s") else "-" for x in picks]
        lines.append(f"| {t['op']} | {us(t['best_measured_s'])} | {us(t['calibrated_pick_s'])} | "
                     + "".join(f"{us(x)} | " for x in picks) + f"{us(t.get('torch_s'))} | "
                     + "".join(f"{r} | " for r in ratios))
    for lb in labels:
        r = [t["searches"][lb]["pick_s"] / t["torch_s"] for t in table
             if t.get("torch_s") and t["searches"].get(lb, {}).get("pick_s")]
        if r:
            lines.append(f"\n{lb}: pick faster than PyTorch on {sum(x < 1 for x in r)} of {len(r)} operators, "
                         f"median pick / PyTorch {np.median(r):.2f}.")
    deep = [lb for lb in labels if max(t["searches"].get(lb, {}).get("n", 0) for t in table) > 4]
    for lb in deep:  # searches with many picks bundled: what measuring the k best predictions would keep
        ks = sorted({int(k) for t in table for k in t["searches"].get(lb, {}).get("best_of_k", {})})
        lines += ["", f"{lb}: the fastest of the search's k best predictions, measured (what `verify_top_k=k` keeps), "
                  "over PyTorch in the same run; and the rank correlation of the predictions with the measured times "
                  "among the picks.", "",
                  "| op | PyTorch us | " + "".join(f"k={k} | " for k in ks) + "rho among picks |",
                  "|---|---|" + "---|" * (len(ks) + 1)]
        wins = {k: [] for k in ks}
        for t in table:
            s = t["searches"].get(lb)
            if not s or not t.get("torch_s"):
                continue
            cells = []
            for k in ks:
                b = s["best_of_k"].get(str(k))
                cells.append("-" if b is None else f"{b / t['torch_s']:.2f}")
                if b is not None and np.isfinite(b):
                    wins[k].append(b / t["torch_s"])
            ok = [(p, m) for p, m in zip(s["predicted_s"], s["measured_s"], strict=True) if np.isfinite(m)]
            rho = _metrics()(np.array([p for p, _ in ok]), np.array([m for _, m in ok]))["spearman"] \
                if len(ok) > 2 else float("nan")
            lines.append(f"| {t['op']} | {us(t['torch_s'])} | " + "".join(f"{c} | " for c in cells) + f"{rho:.2f} |")
        lines.append("\nFaster than PyTorch: " + ", ".join(
            f"k={k} {sum(x < 1 for x in v)} of {len(v)} (median {np.median(v):.2f})" for k, v in wins.items() if v)
            + ".")
    lines += ["", "PTX and ptxas features of the random candidates (medians over their kernels; no GPU needed):", "",
              "| op | kernels | registers | occupancy | waves | kernels with spills | bank-conflict degree | "
              "dynamic instructions per thread | FMA share |", "|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        x = t["ptx"]
        lines.append(f"| {t['op']} | {x['kernels_per_candidate']:.0f} | {x['registers']:.0f} | {x['occupancy']:.2f} | "
                     f"{x['waves']:.2f} | {x['with_spills']:.0%} | {x['bank_conflict_degree']:.0f} | "
                     f"{x['dyn_instructions']:.0f} | {x['fma_share']:.2f} |")
    if any("prescore_loo" in t for t in table):
        lines += ["", "TIR-only GPU pre-score (`costmodel/gpu_prescore.py`: lowering only, no CUDA C, nvcc or "
                  "ptxas), medians: weights fitted leave-one-operator-out: " + ", ".join(
                      f"{k} {med(lambda t, k=k: t.get('prescore_loo', {}).get(k))}" for k in keys)
                  + "; the shipped weights: " + ", ".join(
                      f"{k} {med(lambda t, k=k: t.get('prescore_shipped', {}).get(k))}" for k in keys) + "."]
    lines += ["", "Medians of the scoring model: " + ", ".join(
        f"{k} {med(lambda t, k=k: t['scored'][k])}" for k in keys) + ".",
        f"Median predicted / measured latency: scoring model {med(lambda t: t['scored_over_meas'])}, calibrated "
        f"{med(lambda t: t['calibrated_over_meas'])}.",
        f"Full CUDA score (build to PTX, ptxas, features): {1 / float(med(lambda t: t['score_s_median'])):.1f} "
        "candidates/s in one process (median over operators). Noise: median (max - min) / median of each "
        "candidate's repeats."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("prepare", "rescore", "search", "report"), required=True)
    ap.add_argument("--search-seconds", type=float, default=30.0)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--search-label", default="search", help="source name of the search's candidates")
    ap.add_argument("--ops", default="", help="comma-separated suite operators (default: all)")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--bundle", default=".devwork/cuda_bundle")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--measurements", default="")
    ap.add_argument("--tag", default="")
    ap.add_argument("--device", default="an NVIDIA GPU")
    ap.add_argument("--xgb-sizes", default="32,64")
    ap.add_argument("--torch", default="", help="PyTorch baseline rows from cuda_torch_baselines.py")
    ap.add_argument("--fit-out", default="", help="write GPU term weights fitted on every operator to this file")
    ap.add_argument("--no-prescore", action="store_true", help="skip the TIR-only pre-score evaluation")
    args = ap.parse_args()
    from drytune import workloads

    ops = [o for o in args.ops.split(",") if o] or list(workloads.SUITE)
    if args.phase == "prepare":
        run_prepare(ops, args.samples, args.seed, args.bundle, args.workers)
    elif args.phase == "rescore":
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            for res in pool.imap_unordered(rescore_op, [(op, args.bundle) for op in ops]):
                print(f"{res['op']:20s} {res['changed']:4d} of {res['n']} predictions changed", flush=True)
    elif args.phase == "search":
        for op in ops:
            res = add_search_picks(op, args.search_seconds, args.top, args.bundle, args.search_label)
            print(f"{op:20s} searched {args.search_seconds:.0f}s ({res['records']} records): {res['n']} picks added "
                  f"in {res['s']:.0f}s", flush=True)
    else:
        if not args.measurements:
            ap.error("--phase report needs --measurements")
        run_report(args.bundle, args.measurements, args.tag, args.device,
                   tuple(int(x) for x in args.xgb_sizes.split(",") if x), args.torch, args.fit_out,
                   not args.no_prescore)
    return 0


if __name__ == "__main__":
    sys.exit(main())
