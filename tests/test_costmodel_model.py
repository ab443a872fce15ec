"""The assembled static cost model: seconds from real builds, calibration fit, fallbacks."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
from tir_programs import loop_kinds, with_parallel

import drytune as dt
from drytune import workloads
from drytune.costmodel.calibrate import (
    calibrate,
    fast_end_weights,
    fit_coefficients,
    fit_log_ranking,
    parallel_region_cycles,
    parallel_regions_module,
)
from drytune.costmodel.cpu_features import FEATURE_NAMES
from drytune.costmodel.dataset import measure_candidates, merge_timings, program_digest, read_rows, write_rows
from drytune.costmodel.model import (
    COEFF_DIR,
    GPU_TERM_NAMES,
    Coefficients,
    StaticCostModel,
    default_coefficients_path,
    gpu_cycles,
    gpu_terms,
)
from drytune.target import host_core, resolve_target


def _task(name: str, target: str | dict = "llvm") -> dt.Task:
    return workloads.small(name).task(target)


def test_fit_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(0)
    true = np.array([1.0, 0.0, 0.5, 0.0, 2.0, 6.0, 0.0, 100.0, 0.0, 0.0, 0.3, 0.0, 1.5, 4.0, 0.8, 0.6])
    feats = rng.uniform(1e3, 1e6, size=(60, len(FEATURE_NAMES)))
    seconds = feats @ true / 2.5e9
    fitted = fit_coefficients(feats, seconds, freq_ghz=2.5)
    np.testing.assert_allclose(fitted, true, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="at least"):
        fit_coefficients(feats[:3], seconds[:3], 2.5)


def test_log_ranking_fit_ignores_per_operator_scale() -> None:
    """Each operator's latencies off by its own factor: the order within operators still fixes the weights."""
    rng = np.random.default_rng(1)
    true = np.array([1.0, 0.0, 0.5, 0.0, 2.0, 6.0, 0.0, 100.0, 3.0, 0.5, 0.0, 1.0, 0.0, 4.0, 0.0, 0.0])
    feats = rng.uniform(1e3, 1e6, size=(90, len(FEATURE_NAMES)))
    groups = np.repeat(["a", "b", "c"], 30)
    factor = np.repeat([1.0, 3.0, 0.2], 30)
    seconds = factor * (feats @ true) / 2.5e9
    fitted = fit_log_ranking(feats, seconds, 2.5, groups=groups)
    np.testing.assert_allclose(fitted / fitted.sum(), true / true.sum(), atol=1e-4)
    ratio = seconds * 2.5e9 / (feats @ fitted)
    assert np.median(ratio) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least"):
        fit_log_ranking(feats[:3], seconds[:3], 2.5)


def test_fit_keeps_a_pinned_coefficient_and_fits_the_rest() -> None:
    rng = np.random.default_rng(2)
    col = FEATURE_NAMES.index("parallel_launches")
    true = np.zeros(len(FEATURE_NAMES))
    true[[0, 4, 5]] = [1.0, 2.0, 6.0]
    true[col] = 5000.0
    feats = rng.uniform(1e3, 1e6, size=(90, len(FEATURE_NAMES)))
    groups = np.repeat(["a", "b", "c"], 30)
    feats *= np.repeat([[1.0], [20.0], [300.0]], 30, axis=0)
    feats[:, col] = np.repeat([1, 2, 3], 30)  # as in real data: an operator's candidates enter as many regions
    seconds = feats @ true / 2.5e9
    fitted = fit_log_ranking(feats, seconds, 2.5, groups=groups, fixed={col: 5000.0})
    assert fitted[col] == 5000.0
    free = [i for i in range(len(FEATURE_NAMES)) if i != col]
    np.testing.assert_allclose(fitted[free], true[free], rtol=1e-3, atol=1e-3)


def test_fast_end_weights_mark_each_groups_fastest_quarter() -> None:
    seconds = [4.0, 1.0, 3.0, 2.0, 0.5, 9.0, 7.0, 8.0]
    groups = ["a", "a", "a", "a", "b", "b", "b", "b"]
    assert fast_end_weights(seconds, groups, weight=5.0).tolist() == [1, 5, 1, 1, 5, 1, 1, 1]
    assert fast_end_weights(seconds, groups, fraction=0.5).tolist() == [1, 3, 1, 3, 3, 1, 3, 1]


def test_weighted_fit_follows_the_rows_it_weights() -> None:
    """Two groups of rows obey different coefficients; weighting one group pulls the fit to that group's law."""
    rng = np.random.default_rng(3)
    fast_law, slow_law = np.zeros(len(FEATURE_NAMES)), np.zeros(len(FEATURE_NAMES))
    fast_law[[0, 4]] = [1.0, 4.0]
    slow_law[[0, 4]] = [4.0, 1.0]
    feats = np.zeros((120, len(FEATURE_NAMES)))
    feats[:, [0, 4]] = rng.uniform(1e3, 1e6, size=(120, 2))
    fast = np.arange(120) % 4 == 0
    seconds = np.where(fast, feats @ fast_law, feats @ slow_law) / 2.5e9
    groups = np.repeat(["a", "b"], 60)

    def fast_error(coef: np.ndarray) -> float:
        log_ratio = np.log(seconds[fast] * 2.5e9 / (feats[fast] @ coef))
        return float(np.std(log_ratio))

    plain = fit_log_ranking(feats, seconds, 2.5, groups=groups)
    weighted = fit_log_ranking(feats, seconds, 2.5, groups=groups, weights=np.where(fast, 100.0, 1.0))
    assert fast_error(weighted) < 0.5 * fast_error(plain)
    assert weighted[0] / weighted[4] < plain[0] / plain[4]


def test_parallel_region_microbenchmark_measures_parallel_against_serial_nests() -> None:
    par, ser = parallel_regions_module(3, True), parallel_regions_module(3, False)
    assert (loop_kinds(par), loop_kinds(ser)) == (["PARALLEL"] * 3, ["SERIAL"] * 3)
    cycles = parallel_region_cycles(resolve_target("llvm")[0], 2.5, regions=3, rounds=2)
    assert math.isfinite(cycles) and cycles >= 0


def test_parallel_region_cost_makes_a_tiny_kernel_serial_and_a_large_one_parallel() -> None:
    model = StaticCostModel("llvm", coefficients=os.path.join(COEFF_DIR, "x86-default.json"))

    def serial_and_parallel(task: dt.Task) -> tuple[float, float]:
        cand = dt.SearchSpace(task).sample(1, seed=0)[0]
        ser, par = model.predict(task, [with_parallel(cand, serial=s) for s in (True, False)])
        return ser, par

    ser, par = serial_and_parallel(_task("global_avg_pool"))  # 64 channels x 7 x 7: ~3000 additions
    assert ser < par
    gemm = workloads.get("gemm_bert").task()
    ser, par = serial_and_parallel(gemm)
    assert par < ser


def test_tiled_vectorized_gemm_predicted_faster_than_unscheduled() -> None:
    task = workloads.get("gemm_bert").task()
    model = StaticCostModel(task.target)
    naive = model.seconds_of_module(task.mod)
    space = dt.SearchSpace(task)
    cand = space.sample(1, seed=0)[0]
    sketch = cand.sketch
    decisions = dict(cand.decisions)
    s_keys = [h for h in sketch.holes if h.is_tile and "/S" in h.key]
    decisions[s_keys[0].key] = (s_keys[0].extent // 16, 2, 1, 8)  # rows: 8 per register tile
    decisions[s_keys[1].key] = (s_keys[1].extent // 64, 1, 1, 64)  # columns: 64 wide, vectorized
    r = next(h for h in sketch.holes if h.is_tile and "/R" in h.key)
    decisions[r.key] = (r.extent // 8, 8)
    for h in sketch.holes:
        if h.kind == "vectorize":
            decisions[h.key] = h.options.index(64)
        if h.kind == "parallel":
            decisions[h.key] = h.options.index(max(h.options))
    tuned = model.predict(task, [dt.Candidate(task, sketch, decisions)])[0]
    assert 0 < tuned < naive / 5


def test_zen5_calibration_prices_accumulators_stored_every_two_reduction_steps_above_every_eight() -> None:
    """Session 64's 300-s GEMM pick walks 16 output tiles of 8 x 32 inside each run of its reduction and stores the
    tile every 2 steps; it ran 8.2-8.6 ms, the same tiles storing every 8 steps 5.1 ms. The Zen 5 calibration
    (FMA bodies issue 3 micro-ops per cycle; accumulator stores take load-port slots) prices them in that order,
    which the file shipped before session 65 did not (3.51 ms for both)."""
    task = workloads.get("gemm").task({"kind": "llvm", "mcpu": "znver5", "num-cores": 2})
    model = StaticCostModel(task.target)
    assert model.kernel.fma_issue_width == 3.0 and model.kernel.accumulator_stores_load
    sketch = dt.SearchSpace(task).sketch("gemm/7")
    pick = {"A_global/parallel": 2, "A_global/unroll": 0, "A_global/vectorize": 1, "B_global/parallel": 0,
            "B_global/unroll": 0, "B_global/vectorize": 2, "C/R2": [512, 2], "C/S0": [1, 8, 16, 8],
            "C/S1": [16, 1, 2, 32], "C/pack0": 1, "C/pack1": 2, "C/parallel": 1, "C/unroll": 3, "C/vectorize": 1}
    every2, every8 = (dt.Candidate.from_json(task, sketch, pick | {"C/R2": r2}) for r2 in ([512, 2], [128, 8]))
    p2, p8 = model.predict(task, [every2, every8])
    assert p2 > 1.15 * p8


def test_predictions_are_seconds_and_invalid_is_inf() -> None:
    task = _task("conv2d_bias_relu")
    model = StaticCostModel(task.target)
    cands = dt.SearchSpace(task).sample(4, seed=1)
    pred = model.predict(task, cands)
    assert np.all(np.isfinite(pred)) and np.all(pred > 0) and np.all(pred < 10)
    pre = model.prescore(task, cands)
    assert np.all(np.isfinite(pre)) and np.all(pre > 0)
    bad = cands[0].with_decisions(**{next(iter(cands[0].decisions)): (7, 7, 7, 7)})
    assert math.isinf(model.predict(task, [bad])[0])
    assert model.failures["replay"] == 1


def test_kernel_overrides_reach_the_full_score_and_the_prescore() -> None:
    task = _task("gemm_bert")
    cands = dt.SearchSpace(task).sample(4, seed=3)
    base = StaticCostModel(task.target)
    one_pipe = StaticCostModel(task.target, kernel_overrides={"fp_pipes": 0.25})
    assert one_pipe.kernel.fp_pipes == 0.25 and base.kernel.fp_pipes > 0.25
    assert np.all(one_pipe.prescore(task, cands) > base.prescore(task, cands))
    assert np.all(one_pipe.predict(task, cands) > base.predict(task, cands))
    with pytest.raises(TypeError):
        StaticCostModel(task.target, kernel_overrides={"no_such_field": 1})


@pytest.mark.parametrize("target", ["aarch64", "cuda-sm90"])
def test_cross_targets_score_without_a_device(target: str) -> None:
    task = _task("gemm", target)
    model = StaticCostModel(task.target)
    pred = model.predict(task, dt.SearchSpace(task).sample(3, seed=2))
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)


def test_l1_refills_up_to_the_files_rate_per_kernel_cycle_cost_nothing(tmp_path) -> None:
    """A coefficients file may take L1 refills as hidden behind the kernel's work: only the lines beyond its rate
    per kernel-model cycle are charged, and the rate survives saving and loading the file."""
    task = _task("gemm")
    cand = dt.SearchSpace(task).sample(1, seed=5)[0]
    base = StaticCostModel(task.target)
    feats = base.features(task, cand)
    k, lines = feats.as_dict()["kernel_cycles"], feats.as_dict()["l1_lines"]
    assert k > 0 and lines > 0
    weights = {n: 0.0 for n in FEATURE_NAMES} | {"kernel_cycles": 1.0, "l1_lines": 2.0}
    hz = base.spec.freq_ghz * 1e9
    for rate, charged in ((0.0, lines), (0.5 * lines / k, 0.5 * lines), (2.0 * lines / k, 0.0)):
        path = str(tmp_path / f"x86-{rate}.json")
        Coefficients("x86", weights, "test", Coefficients.l1_hidden_entry(rate)).save(path)
        model = StaticCostModel(task.target, coefficients=path)
        assert model.coefficients.l1_hidden_per_cycle == rate
        assert model.seconds_from_features(feats) * hz == pytest.approx(k + 2.0 * charged, rel=1e-9)


def test_kernel_settings_of_a_coefficients_file_change_the_features_and_yield_to_overrides(tmp_path) -> None:
    """A file fitted on features computed with some kernel-model setting carries it: the model loading the file
    computes its features with it, a caller's override still wins, and an unknown field is refused (an AVX-512
    target, whatever the host: the sampled tile's accumulators are reloaded there, not on Zen 3's AVX2)."""
    task = _task("gemm", {"kind": "llvm", "mcpu": "znver5"})
    cand = dt.SearchSpace(task).sample(1, seed=5)[0]
    weights = Coefficients.load(default_coefficients_path(StaticCostModel(task.target).spec)).values
    path = str(tmp_path / "x86-slow-reloads.json")
    Coefficients("x86", weights, "test", Coefficients.kernel_entry({"accumulator_reload_cycles": 50.0})).save(path)
    plain = StaticCostModel(task.target, coefficients=path, kernel_overrides={"accumulator_reload_cycles": 0.0})
    slow = StaticCostModel(task.target, coefficients=path)
    assert slow.coefficients.kernel_settings == {"accumulator_reload_cycles": 50.0}
    assert (slow.kernel.accumulator_reload_cycles, plain.kernel.accumulator_reload_cycles) == (50.0, 0.0)
    k_slow = slow.features(task, cand).as_dict()["kernel_cycles"]
    k_plain = plain.features(task, cand).as_dict()["kernel_cycles"]
    assert k_slow > k_plain > 0
    Coefficients("x86", weights, "test", Coefficients.kernel_entry({"no_such_field": 1.0})).save(path)
    with pytest.raises(ValueError, match="no_such_field"):
        StaticCostModel(task.target, coefficients=path)


def test_calibrate_writes_loadable_coefficients(tmp_path) -> None:
    tasks = [_task("gemm"), _task("softmax")]
    out = tmp_path / "x86-calibrated.json"
    data = str(tmp_path / "work" / "data.jsonl")  # a work directory that does not exist yet
    coeffs = calibrate(tasks, 8, data, str(out), rounds=2, progress=False)
    rows = read_rows(data)
    assert len(rows) == 16 and all(len(r.times) == 2 and r.seconds == np.median(r.times) for r in rows if r.ok)
    loaded = Coefficients.load(str(out))
    assert loaded.values == coeffs.values and "Calibrated" in loaded.origin
    assert "burst_store_lines neither" in loaded.origin  # measured, not fitted (the rows are no network kernels)
    assert all(v >= 0 for v in loaded.values.values())
    model = StaticCostModel(tasks[0].target, coefficients=str(out))
    assert np.all(np.isfinite(model.predict(tasks[0], dt.SearchSpace(tasks[0]).sample(2, seed=3))))
    # a single round times 3 repeats, not 1: the same rows but each operator's last, which calibrate then measures
    with open(data) as f:
        lines = [line for line in f if line.strip()]
    last = {json.loads(line)["op"]: i for i, line in enumerate(lines)}
    one = str(tmp_path / "one.jsonl")
    with open(one, "w") as f:
        f.writelines(line for i, line in enumerate(lines) if i not in last.values())
    calibrate(tasks, 8, one, str(tmp_path / "one.json"), rounds=1, progress=False)
    rows_one = read_rows(one)
    measured = rows_one[len(lines) - len(last):]
    assert len(rows_one) == 16 and [r.op for r in measured] == [t.name for t in tasks]
    assert all(len(r.times) == 3 and r.seconds == np.median(r.times) for r in measured if r.ok)


def test_measured_rows_keep_their_source_and_are_not_measured_twice(tmp_path) -> None:
    task = _task("softmax")
    path = str(tmp_path / "data.jsonl")
    cands = dt.SearchSpace(task).sample(3, seed=4)
    rows = list(measure_candidates(cands[:2], path, source="search", repeat=1))
    assert len(rows) == 2 and all(r.ok and r.source == "search" for r in rows)
    with open(path) as f:  # a row written before rows had a source or a program digest
        old = json.loads(f.readline())
    del old["source"], old["program"]
    with open(path, "a") as f:
        f.write(json.dumps(old | {"decisions": {**old["decisions"], "legacy": 1}}) + "\n")
    again = list(measure_candidates(cands, path, repeat=1))  # the first two are in the file already
    assert len(again) == 1 and again[0].source == "random"
    assert again[0].decisions not in [r.decisions for r in rows]
    assert [r.source for r in read_rows(path)] == ["search", "search", "random", "random"]
    # each row names the program it timed, so a later change to the replay shows up as a different digest
    assert [r.program for r in read_rows(path)][:2] == [program_digest(c.to_mod()) for c in cands[:2]]
    assert read_rows(path)[2].program is None and read_rows(path)[3].program == program_digest(cands[2].to_mod())
    assert len({r.program for r in rows}) == 2


def test_two_timings_of_the_same_candidates_merge_into_one_row_with_the_rounds_of_both(tmp_path) -> None:
    cands = dt.SearchSpace(_task("softmax")).sample(3, seed=5)
    first = list(measure_candidates(cands, str(tmp_path / "a.jsonl"), repeat=1, rounds=2))
    second = list(measure_candidates(cands[1:], str(tmp_path / "b.jsonl"), repeat=1, rounds=3))
    assert all(r.ok for r in first + second)
    # the third candidate replayed to another program at the second timing: its first times must not be mixed in
    second[1] = dataclasses.replace(second[1], program="0" * 16)
    merged, counts = merge_timings(first, second)
    assert counts == {"merged": 1, "program_changed": 1, "failed_in_one": 0, "first_only": 1, "second_only": 0}
    assert merged[0] == first[0] and merged[2] == second[1]
    assert merged[1].times == first[1].times + second[0].times and len(merged[1].times) == 5
    assert merged[1].seconds == float(np.median(merged[1].times))
    write_rows(str(tmp_path / "merged.jsonl"), merged)
    assert read_rows(str(tmp_path / "merged.jsonl")) == merged


def test_coefficients_are_chosen_by_cpu_model_then_architecture() -> None:
    """A calibration for the target's CPU model wins; another x86 CPU gets the architecture's file."""
    zen3 = StaticCostModel({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver3", "num-cores": 2})
    other = StaticCostModel({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "skylake-avx512",
                             "num-cores": 2})
    assert "Zen 3" in zen3.coefficients.origin or "znver3" in zen3.coefficients.origin
    assert other.coefficients.origin == Coefficients.load(
        os.path.join(COEFF_DIR, "x86-calibrated.json")).origin
    assert zen3.coefficients.values != other.coefficients.values


def _kernel(**kw):
    """A kernel's features with round numbers (only the fields the GPU terms read)."""
    base = dict(occupancy=0.5, threads_per_block=128, stack_bytes=0, blocks=264, blocks_per_sm=4, waves=0.5,
                threads=264 * 128, issue_cycles=100.0, shared_ops_adjusted=10.0, global_load_bytes=64.0,
                global_store_bytes=16.0, work_cycles=400.0, exposed_load_cycles=80.0)
    return SimpleNamespace(**(base | kw))


def test_gpu_terms_hand_computed():
    _, spec = resolve_target("cuda-sm90")  # 132 SMs
    terms = dict(zip(GPU_TERM_NAMES, gpu_terms([_kernel()], spec), strict=True))
    # 264 blocks over 132 SMs: the busiest SM runs 2 blocks of 4 warps; 8 resident warps hide latency 2x
    assert terms["issue"] == 100.0 * 4 * 2 / 4
    assert terms["shared"] == 10.0 * 4 * 2 / 4
    assert terms["load_bytes"] == 64.0 * 264 * 128 / (132 * 64) and terms["store_bytes"] == 16.0 * 2 * 128 / 64
    assert terms["latency"] == 400.0 / 2 and terms["exposed_latency"] == 80.0 / 2
    assert terms["launch"] == 1.0
    # kernels add up; a stack frame beyond CUDA's 512 KiB of local memory per thread cannot launch
    assert np.allclose(gpu_terms([_kernel(), _kernel()], spec), 2 * gpu_terms([_kernel()], spec))
    assert gpu_terms([_kernel(), _kernel(stack_bytes=802864)], spec) is None
    assert gpu_cycles([_kernel(stack_bytes=802864)], spec) == math.inf


def test_calibrated_gpu_model_weighs_the_terms():
    weights = dict.fromkeys(GPU_TERM_NAMES, 0.0) | {"issue": 2.0, "launch": 5000.0}
    model = StaticCostModel("cuda-sm90", coefficients=Coefficients("nvidia", weights, "test"))
    expected = (2.0 * 200.0 * 2 + 5000.0 * 2) / (model.spec.freq_ghz * 1e9)
    assert model.seconds_from_gpu_features([_kernel(), _kernel()]) == pytest.approx(expected)
    assert model.seconds_from_gpu_features([_kernel(occupancy=0.0)]) == math.inf
    uncalibrated = StaticCostModel("cuda-sm90")
    uncalibrated.coefficients = None
    assert uncalibrated.seconds_from_gpu_features([_kernel()]) == pytest.approx(
        gpu_cycles([_kernel()], uncalibrated.spec) / (uncalibrated.spec.freq_ghz * 1e9))


def test_shipped_coefficients_follow_the_cpu_model_then_its_cores_then_the_architecture() -> None:
    """Each CPU model with a calibration gets its own file, Sapphire Rapids (the cores of Emerald Rapids) gets the
    Emerald Rapids file, and a CPU model without either gets the architecture's."""
    _, spec = dt.resolve_target("x86-avx512")

    def name(cpu: str | None) -> str:
        return os.path.basename(default_coefficients_path(spec, cpu))

    assert name("znver4") == "x86-znver4-calibrated.json"
    assert name("emeraldrapids") == name("sapphirerapids") == "x86-emeraldrapids-calibrated.json"
    assert name("skylake-avx512") == name(None) == "x86-calibrated.json"


def test_a_host_whose_llvm_name_is_a_hypervisors_model_number_gets_the_calibration_of_its_real_cores() -> None:
    """A guest named rocketlake by LLVM but with AMX (which Rocket Lake lacks) has Granite Rapids-class cores and gets
    the calibration of their class; a real Rocket Lake, or a cross target naming it, keeps the architecture's file;
    Sapphire Rapids takes the Emerald Rapids file (the same cores)."""
    assert host_core("rocketlake", frozenset({"avx512f", "amx_tile"})) == "graniterapids"
    assert host_core("rocketlake", frozenset({"avx512f"})) == ""
    assert host_core("znver4", frozenset({"avx512f", "amx_tile"})) == ""
    _, spec = dt.resolve_target("x86-avx512")
    assert spec.core == ""
    guest = dataclasses.replace(spec, core="graniterapids")
    assert os.path.basename(default_coefficients_path(guest, "rocketlake")) == "x86-graniterapids-calibrated.json"
    assert os.path.basename(default_coefficients_path(spec, "sapphirerapids")) == "x86-emeraldrapids-calibrated.json"
    assert os.path.basename(default_coefficients_path(spec, "rocketlake")) == "x86-calibrated.json"


def test_the_hosts_own_target_given_as_a_dict_keeps_the_calibration_of_its_real_cores(monkeypatch) -> None:
    """A task carries its target as a TVM `Target`, and the cost model resolves that again: on a guest whose LLVM name
    is a hypervisor's model number, the host's own target must still get its real cores' calibration (session 53's
    runs on such a guest scored with the architecture's file because this was lost); another CPU named in a target
    keeps its own."""
    import drytune.target as target_mod

    host_tdict = {"kind": "llvm", "mcpu": "rocketlake", "num-cores": 2}
    host_spec = dataclasses.replace(dt.resolve_target("x86-avx512")[1], name="host-rocketlake", core="graniterapids")
    monkeypatch.setattr(target_mod, "_host_spec", lambda: (host_tdict, host_spec))
    task = workloads.get("gemm").task(host_tdict)
    assert task.spec.core == "graniterapids"
    model = StaticCostModel(task.target)
    assert model.spec.core == "graniterapids"
    gnr = Coefficients.load(os.path.join(COEFF_DIR, "x86-graniterapids-calibrated.json"))
    assert np.array_equal(model.coefficients.vector(), gnr.vector())
    assert model.kernel.load_ports == gnr.kernel_settings["load_ports"]
    assert model.coefficients.l1_hidden_per_cycle == gnr.l1_hidden_per_cycle == 0.5
    other = StaticCostModel({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    assert other.spec.core == ""
    assert os.path.basename(default_coefficients_path(other.spec, "znver4")) == "x86-znver4-calibrated.json"


def test_the_hosts_own_target_given_as_a_dict_keeps_the_caches_read_from_the_host(monkeypatch) -> None:
    """A task's `Target` resolved again must keep the host's measured caches (until session 86 a Zen 4 host's tasks
    were scored with the AVX-512 base spec's 48 KiB, 12-way L1 instead of its 32 KiB, 8-way one); a CPU named in a
    cross target gets its own sizes from the table, and an unlisted one the base spec's."""
    import drytune.target as target_mod

    host_tdict = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    base = dt.resolve_target("x86-avx512")[1]
    host_spec = dataclasses.replace(base, name="host-znver4", l1_bytes=24 * 1024, l1_ways=6, l2_bytes=3 << 20,
                                    l2_ways=12, datapath_bits=256)
    monkeypatch.setattr(target_mod, "_host_spec", lambda: (host_tdict, host_spec))
    task = workloads.get("gemm").task(host_tdict)
    spec = StaticCostModel(task.target).spec
    assert (spec.l1_bytes, spec.l1_ways, spec.l2_bytes, spec.l2_ways) == (24 * 1024, 6, 3 << 20, 12)
    assert spec.datapath_bits == 256 and spec.cores == 2
    cross = dt.spec_for({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 4})
    assert (cross.l1_bytes, cross.l1_ways, cross.l2_bytes, cross.l2_ways) == (48 * 1024, 12, 2 << 20, 16)
    assert cross.cores == 4
    unlisted = dt.spec_for({"kind": "llvm", "mcpu": "x86-64-v4", "num-cores": 2})
    assert (unlisted.l1_bytes, unlisted.l2_bytes) == (base.l1_bytes, base.l2_bytes)


def test_the_hosts_cpu_with_other_vector_features_keeps_the_hosts_real_core(monkeypatch) -> None:
    """A target naming the host's CPU whose vector features differ from the host spec's gets the base spec, but still
    the host's real core (a hypervisor's model number must not pick another calibration file)."""
    import drytune.target as target_mod

    host_tdict = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    host_spec = dataclasses.replace(dt.resolve_target("x86-avx2")[1], name="host-znver4", core="graniterapids")
    monkeypatch.setattr(target_mod, "_host_spec", lambda: (host_tdict, host_spec))
    spec = dt.spec_for(host_tdict)
    assert spec.vector_bits == 512 and spec.core == "graniterapids"
    assert dt.spec_for({"kind": "llvm", "mcpu": "znver5", "num-cores": 2}).core == ""


def test_one_assembly_serves_models_with_different_kernel_settings() -> None:
    """`features_of_module(mod, asm)` reads the given assembly (no second build) and still computes the kernel
    model with each model's own settings: the same features as building again."""
    task = _task("gemm")
    mod = dt.SearchSpace(task).sample(1, seed=3)[0].to_mod()
    wide = StaticCostModel(task.target, kernel_overrides={"fma_issue_width": 4.0})
    narrow = StaticCostModel(task.target, kernel_overrides={"fma_issue_width": 1.0})
    asm = wide.assembly_of_module(mod)
    assert "vfmadd" in asm or "fma" in asm
    for model in (wide, narrow):
        assert model.features_of_module(mod, asm).values == model.features_of_module(mod).values
    kernel = FEATURE_NAMES.index("kernel_cycles")
    assert narrow.features_of_module(mod, asm).values[kernel] > wide.features_of_module(mod, asm).values[kernel]


def _zen3_gemm_variant(variants_file: str, label_start: str) -> tuple[dt.Task, dt.Candidate]:
    """A GEMM candidate on Zen 3 as a committed `task_variants.py` file names it (`[label, sketch, decisions]`)."""
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "variants", variants_file)
    with open(path) as f:
        _, sketch, decisions = next(v for v in json.load(f) if v[0].startswith(label_start))
    task = workloads.get("gemm").task({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    return task, dt.Candidate.from_json(task, dt.SearchSpace(task).sketch(sketch), decisions)


def test_the_zen3_file_prices_a_gemm_tile_whose_hoisted_broadcasts_spill_above_the_tile_unrolled_less() -> None:
    """Session 74's 300-s Zen 3 GEMM pick unrolls 32 reduction steps x 2 rows, so LLVM hoists 64 broadcasts of A out
    of a 2-iteration column loop and spills them; it ran 1.4-1.8x the time of the same tile unrolled 16 steps, which
    the Zen 3 file priced below it until it set `hoisted_spill_cycles` (benchmarks/results/
    task_variants_gemm_gemm_znver3_s75.md). Only the spilled tile's price moves."""
    task, spilled = _zen3_gemm_variant("gemm_picks_znver3_s75.json", "300-s pick (session 74)")
    rolled = spilled.with_decisions(**{"C/unroll": 1})  # a 16-step unroll budget: the reduction stays a loop
    shipped = StaticCostModel(task.target)
    assert shipped.kernel.hoisted_spill_cycles == 5.0
    without = StaticCostModel(task.target, kernel_overrides={"hoisted_spill_cycles": 0.0})
    priced, unpriced = shipped.predict(task, [spilled, rolled]), without.predict(task, [spilled, rolled])
    assert unpriced[0] < unpriced[1]  # the misranking the setting mends
    assert priced[0] > 1.2 * priced[1]
    assert priced[1] == unpriced[1]


def test_the_zen3_file_counts_the_multiply_adds_of_a_gemm_whose_loops_llvm_rearranged() -> None:
    """The Zen 3 GEMM search's pick of session 75 (a 4 x 16 tile under a 2-block row loop) has loops that LLVM
    duplicates; Algorithm 1 then counts 1/8 of its multiply-adds, and the candidate was priced below the same tile
    under other outer loops. With `repair_fma_counts` its FMA count is the TIR's: two cores, 2^30 / 8 each half."""
    task, cand = _zen3_gemm_variant("gemm_tiles_znver3_s75.json", "300-s pick with the hoisted-spill setting")
    shipped = StaticCostModel(task.target)
    assert shipped.kernel.repair_fma_counts == 1.25
    fma = FEATURE_NAMES.index("vec_fma")
    unrepaired = StaticCostModel(task.target, kernel_overrides={"repair_fma_counts": 0.0}).features(task, cand)
    assert unrepaired.values[fma] < 0.2 * 2**30 / 8 / 2
    assert shipped.features(task, cand).values[fma] == pytest.approx(2**30 / 8 / 2, rel=0.01)
