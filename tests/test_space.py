"""The search space: sketches by rules, random candidates that build and compute the right thing."""

from __future__ import annotations

import collections
import dataclasses
import math
import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tir_programs import loop_kinds, with_parallel
from tvm import s_tir, te, tirx

import drytune as dt
from drytune import workloads
from drytune.annotate.encode import decode, dimension, encode
from drytune.annotate.mutate import mutate
from drytune.annotate.sample import repair, sample_decisions
from drytune.records import RecordStore, candidate_from_trace
from drytune.sketch.rules import SketchRule, Skip, Verdict
from drytune.sketch.sketch import PanelLimit, ReplayDecider
from drytune.sketch.steps import Inline, PackOperand, PadRows
from drytune.sketch.unchecked import UncheckedSchedule
from drytune.verify import check_candidate, random_inputs, run_module

SMALL = sorted(workloads.SMALL)


def _task(name: str, target: str = "llvm") -> dt.Task:
    return workloads.small(name).task(target)


@pytest.mark.parametrize("name", SMALL)
def test_cpu_candidates_build_and_match_unscheduled(name: str) -> None:
    task = _task(name)
    space = dt.SearchSpace(task)
    assert 0 < len(space.sketches) <= dt.SpaceConfig().max_sketches
    reference = run_module(task.mod, task, random_inputs(task))
    for cand in space.sample(4, seed=7):
        result = check_candidate(task, cand, reference=reference)
        assert result.ok, (cand, result)


_CTYPE_BYTES = {"float": 4, "half": 2, "double": 8, "int": 4, "signed char": 1}


def _shared_bytes(cuda_source: str) -> int:
    """Bytes of all `__shared__` arrays declared in generated CUDA C."""
    total = 0
    for ctype, count in re.findall(r"__shared__\s+(?:alignas\(\d+\)\s+)?([a-z ]+?)\s+\w+\[(\d+)\]", cuda_source):
        total += _CTYPE_BYTES[ctype.strip()] * int(count)
    return total


def _thread_extents(mod: tvm.IRModule) -> tuple[int, int]:
    threads, shared = collections.Counter(), 0
    loops: list[tuple[str, int]] = []

    def on_for(f: tirx.For) -> None:
        if f.thread_binding is not None:
            loops.append((str(f.thread_binding.thread_tag), int(f.extent)))

    def on_block(b: s_tir.SBlock) -> None:
        nonlocal shared
        for buf in b.alloc_buffers:
            if buf.scope() == "shared":
                n = 1
                for s in buf.shape:
                    n *= int(s)
                shared += n * tvm.DataType(buf.dtype).bits // 8

    tvm_ffi.structural_walk(mod["main"], [(tirx.For, on_for), (s_tir.SBlock, on_block)], order="pre")
    per_tag: dict[str, int] = {}
    for tag, ext in loops:
        per_tag[tag] = max(per_tag.get(tag, 1), ext)
    for tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
        threads[tag] = per_tag.get(tag, 1)
    return threads["threadIdx.x"] * threads["threadIdx.y"] * threads["threadIdx.z"], shared


@pytest.mark.parametrize("name", ["gemm", "conv2d_nchw", "softmax", "depthwise_conv2d", "norm2", "dense_bias_gelu"])
def test_cuda_candidates_respect_spec_limits(name: str) -> None:
    task = workloads.get(name).task("cuda-sm90")
    space = dt.SearchSpace(task)
    assert 0 < len(space.sketches) < 10
    for cand in space.sample(6, seed=3):
        mod = cand.to_mod()
        threads, _ = _thread_extents(mod)
        assert threads <= task.spec.max_threads_per_block
        built = tvm.compile(mod, target=task.target)  # lowers, verifies and generates CUDA C
        source = built.mod.imports[0].inspect_source("cuda")
        assert _shared_bytes(source) <= task.spec.smem_per_block


def test_encode_decode_round_trip_and_any_vector_decodes() -> None:
    rng = np.random.default_rng(0)
    for name in ("gemm", "conv2d_bias_relu", "softmax", "norm2"):
        space = dt.SearchSpace(_task(name))
        for cand in space.sample(10, seed=1):
            vec = encode(cand.sketch, cand.decisions)
            assert vec.shape == (dimension(cand.sketch),)
            assert decode(cand.sketch, vec) == {k: (tuple(v) if isinstance(v, tuple) else v)
                                                 for k, v in cand.decisions.items()}
        for sketch in space.sketches:
            decisions = decode(sketch, rng.uniform(-0.5, 1.5, size=dimension(sketch)))
            dt.Candidate(space.task, sketch, decisions).to_mod()  # replays without error


def test_mutations_always_replay() -> None:
    rng = np.random.default_rng(1)
    kinds = collections.Counter()
    for name in ("gemm", "conv2d_nchw", "avg_pool2d", "layer_norm", "norm2"):
        space = dt.SearchSpace(_task(name))
        for cand in space.sample(8, seed=2):
            new = mutate(cand.sketch, cand.decisions, rng)
            if new is None:
                continue
            changed = [k for k in new if new[k] != cand.decisions[k]]
            assert len(changed) == 1
            kinds[cand.sketch.hole(changed[0]).kind] += 1
            dt.Candidate(space.task, cand.sketch, new).to_mod()
    assert kinds["tile"] > 0


@pytest.mark.parametrize("target", ["llvm", "cuda-sm90"])
def test_replay_without_type_checks_gives_the_checked_program(target: str) -> None:
    """Sketch.apply skips TVM's Python type checks; stepping a plain Schedule must give the same program."""
    for name in SMALL:
        space = dt.SearchSpace(_task(name, target))
        for cand in space.sample(3, seed=4):
            checked = s_tir.Schedule(space.task.mod)
            assert not isinstance(checked, UncheckedSchedule)
            decider = ReplayDecider(cand.decisions, cand.sketch.holes)
            for step in cand.sketch.steps:
                step.apply(checked, decider)
            tvm.ir.assert_structural_equal(checked.mod, cand.to_mod())


def test_records_round_trip_to_same_program(tmp_path) -> None:
    for target in ("llvm", "cuda-sm90"):
        task = workloads.small("conv2d_bias_relu").task(target, name="cbr")
        space = dt.SearchSpace(task)
        cands = space.sample(4, seed=5)
        store = RecordStore(str(tmp_path / target))
        for i, c in enumerate(cands):
            store.add(c, 1e-3 * (i + 1))
        records = RecordStore(str(tmp_path / target)).records(task)
        assert [r.seconds for r in records] == pytest.approx([1e-3, 2e-3, 3e-3, 4e-3])
        for rec, cand in zip(records, cands, strict=True):
            assert tvm_ffi.structural_equal(rec.to_schedule().mod, cand.to_mod())
            assert candidate_from_trace(task, space.sketches, rec.trace) == cand


def test_corrupt_records_file_gets_clear_error(tmp_path) -> None:
    (tmp_path / "database_tuning_record.json").write_text('[0, [[["GetSBlock"\n')
    with pytest.raises(ValueError, match="corrupt"):
        RecordStore(str(tmp_path))


def test_dynamic_shape_is_rejected_clearly() -> None:
    n = te.var("n")
    A = te.placeholder((n, 16), name="A")
    B = te.compute((n, 16), lambda i, j: A[i, j] * 2.0, name="B")
    with pytest.raises(dt.UnsupportedProgramError, match="dynamic shapes are not supported"):
        dt.Task.from_te([A, B], "llvm")


def test_elementwise_gets_parallel_and_vectorized_sketch() -> None:
    A = te.placeholder((64, 256), name="A")
    B = te.compute((64, 256), lambda i, j: te.exp(A[i, j]) + 1.0, name="B")
    task = dt.Task.from_te([A, B], "llvm", name="ew")
    space = dt.SearchSpace(task)
    assert len(space.sketches) == 1
    kinds = {h.kind for h in space.sketches[0].holes}
    assert {"parallel", "vectorize", "unroll"} <= kinds
    found = loop_kinds(with_parallel(space.sample(1, seed=0)[0], serial=False).to_mod())
    assert "PARALLEL" in found and "VECTORIZED" in found


def test_cpu_nest_may_stay_serial_and_still_match_the_unscheduled_program() -> None:
    task = workloads.small("global_avg_pool").task("llvm", name="gap")
    space = dt.SearchSpace(task)
    cand = space.sample(1, seed=0)[0]
    holes = [h for h in cand.sketch.holes if h.kind == "parallel"]
    assert holes and all(h.options[-1] == 0 for h in holes)  # serial is the last option: older records keep theirs
    serial = with_parallel(cand, serial=True)
    assert "PARALLEL" not in loop_kinds(serial.to_mod())
    assert check_candidate(task, serial).ok
    off = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_serial_option=False))
    assert all(0 not in h.options for s in off.sketches for h in s.holes if h.kind == "parallel")


def test_inner_rfactor_indexes_its_vector_of_partial_sums_last() -> None:
    # the vectorized loop over the inner reduction part then writes consecutive floats of one output's sums
    task = workloads.small("global_avg_pool").task("llvm", name="gap")
    space = dt.SearchSpace(task)
    sketch = next(s for s in space.sketches if any(getattr(st, "variant", "") == "inner" for st in s.steps))
    cand = dt.Candidate(task, sketch, sample_decisions(sketch, np.random.default_rng(0)))
    buffers = {b.name: [int(x) for x in b.shape] for b in cand.to_mod()["main"].body.block.alloc_buffers}
    assert buffers["pool_sum.rf"][:-1] == buffers["pool_sum"]  # (1, C, 1, 1, lanes), not (lanes, 1, C, 1, 1)
    assert check_candidate(task, cand).ok


def test_a_reduction_to_fewer_outputs_than_cores_is_also_split_between_cores_and_vector_lanes() -> None:
    # rf[ro * RI + ri] in a nest ro (parallel), rm, ri (vectorized); appended after the sketches named before it
    # (and before the variants that place the final sum in its consumer)
    task = _task("norm2")
    plain = dt.SearchSpace(task, config=dt.SpaceConfig(rfactor_split=False, rfactor_compute_location="none"))
    space = dt.SearchSpace(task)
    assert [s.steps for s in space.sketches[:len(plain.sketches)]] == [s.steps for s in plain.sketches]
    (sketch,) = [s for s in space.sketches if any(getattr(st, "variant", "") == "split" for st in s.steps)]
    assert sketch is space.sketches[len(plain.sketches)]
    decisions = sample_decisions(sketch, np.random.default_rng(0))
    rf = next(h for h in sketch.holes if h.key == "sum_sq/rf")
    decisions["sum_sq/rf"] = (2, rf.extent // 32, 16)
    decisions["sum_sq_rf/parallel"] = next(h for h in sketch.holes if h.key == "sum_sq_rf/parallel").options.index(2)
    decisions["sum_sq_rf/vectorize"] = next(h for h in sketch.holes if h.key == "sum_sq_rf/vectorize").options.index(16)
    cand = dt.Candidate(task, sketch, decisions)
    func = cand.to_mod()["main"]
    assert [int(x) for x in next(b for b in func.body.block.alloc_buffers if b.name == "sum_sq.rf").shape] == [1, 32]
    kinds = []
    tvm_ffi.structural_walk(func, [(tirx.For, lambda loop: kinds.append((loop.kind, int(loop.extent))))],
                            order="pre")
    assert (tirx.ForKind.PARALLEL, 2) in kinds and (tirx.ForKind.VECTORIZED, 16) in kinds
    assert check_candidate(task, cand).ok
    # a reduction with an output per core or more keeps its cores busy without it
    assert not any(getattr(st, "variant", "") == "split" for s in dt.SearchSpace(_task("softmax")).sketches
                   for st in s.steps)


def test_rfactor_variants_place_the_final_sum_in_its_consumer_after_the_plain_sketches() -> None:
    # as MetaSchedule's space has: the sum of the partial sums in the mean's loop
    task = workloads.small("global_avg_pool").task("llvm", name="gap")
    plain = dt.SearchSpace(task, config=dt.SpaceConfig(rfactor_compute_location="none"))
    space = dt.SearchSpace(task, config=dt.SpaceConfig(rfactor_compute_location="all"))
    assert [s.steps for s in space.sketches[:len(plain.sketches)]] == [s.steps for s in plain.sketches]
    placed = [s for s in space.sketches[len(plain.sketches):] if s.rules[:2] == ("rfactor(pool_sum)",
                                                                                 "compute-location(pool_sum)")]
    assert len(placed) == 2  # outer and inner partial sums
    for sketch in placed:
        at = next(h for h in sketch.holes if h.key == "pool_sum/at")
        decisions = sample_decisions(sketch, np.random.default_rng(0)) | {"pool_sum/at": at.options.index(1)}
        cand = dt.Candidate(task, sketch, decisions)
        assert len(cand.to_mod()["main"].body.block.body.seq) == 2  # partial sums; sum and mean in one nest
        assert check_candidate(task, cand).ok


def test_by_default_only_a_sum_read_elementwise_is_placed_in_its_consumer() -> None:
    # a pool's mean reads its sum elementwise: the variants are there by default; softmax's normalisation reads
    # each row's sum for every element of the row: only with "all" (its nested variants, which also place the
    # partial sums, are another knob)
    def rules(op: str, **config: str) -> list[tuple[str, ...]]:
        task = workloads.small(op).task()
        space_config = dt.SpaceConfig(rfactor_nest_partials=False, **config)
        return [s.rules for s in dt.SearchSpace(task, config=space_config).sketches]

    assert rules("global_avg_pool") == rules("global_avg_pool", rfactor_compute_location="all")
    assert len(rules("global_avg_pool")) > len(rules("global_avg_pool", rfactor_compute_location="none"))
    assert rules("softmax") == rules("softmax", rfactor_compute_location="none")
    assert len(rules("softmax", rfactor_compute_location="all")) > len(rules("softmax"))
    with pytest.raises(ValueError, match="rfactor_compute_location"):
        dt.SpaceConfig(rfactor_compute_location="yes")


def test_nested_rfactor_variants_let_softmax_run_every_stage_under_one_batch_loop() -> None:
    # MetaSchedule's structure: a row sum read by every element of its row is computed in the normalisation's
    # loop, its partial sums in the sum's, and then the maxima and exp fit under the same batch loop
    task = _task("softmax")
    nested = [s for s in dt.SearchSpace(task).sketches if "nest-partials(exp_sum_rf)" in s.rules
              and ("rfactor(max_elem)" not in s.rules or "nest-partials(max_elem_rf)" in s.rules)]
    assert len(nested) == 3  # the maxima's partials nested too (outer or inner) or the maxima not factored
    for sketch in nested:
        outermost = {h.key: h.options.index(0) for h in sketch.holes if h.key.endswith("/at")}
        assert {"exp_sum/at", "exp_sum_rf/at", "exp/at", "max_elem/at"} <= set(outermost)
        cand = dt.Candidate(task, sketch, sample_decisions(sketch, np.random.default_rng(0)) | outermost)
        body = cand.to_mod()["main"].body.block.body
        assert isinstance(body, tirx.For)  # one nest at the root: the batch loop
        assert check_candidate(task, cand).ok
    without = dt.SearchSpace(task, config=dt.SpaceConfig(rfactor_nest_partials=False)).sketches
    assert not any("nest-partials(exp_sum_rf)" in s.rules for s in without)


def _unroll_steps_and_lanes(mod: tvm.IRModule) -> tuple[set[int], set[int]]:
    steps: set[int] = set()
    lanes: set[int] = set()

    def on_for(loop: tirx.For) -> None:
        if "pragma_auto_unroll_max_step" in loop.annotations:
            steps.add(int(loop.annotations["pragma_auto_unroll_max_step"]))
        if loop.kind == tirx.ForKind.VECTORIZED:
            lanes.add(int(loop.extent))

    tvm_ffi.structural_walk(mod, [(tirx.For, on_for)], order="pre")
    return steps, lanes


def _matmul(transposed_b: bool) -> dt.Task:
    A = te.placeholder((64, 32), name="A")
    B = te.placeholder((48, 32) if transposed_b else (32, 48), name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * (B[j, k] if transposed_b else B[k, j]), axis=k), name="C")
    return dt.Task.from_te([A, B, C], "llvm", name="nt" if transposed_b else "nn")


@pytest.mark.parametrize("transposed_b", [True, False])
def test_reduction_gathering_vector_lanes_gets_16_lanes_and_64_unrolled_steps(transposed_b: bool) -> None:
    task = _matmul(transposed_b)
    space = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_pack_operands=False))
    cand = space.sample(1, seed=3)[0]
    pick = {h.key: h.options.index(512) for h in cand.sketch.holes if h.kind == "unroll"}
    pick |= {h.key: h.options.index(32) for h in cand.sketch.holes if h.kind == "vectorize"}
    tiles = {h.key: (1,) * (h.parts - 1) + (h.extent,) for h in cand.sketch.holes if h.is_tile}  # j all innermost
    cand = dt.Candidate(task, cand.sketch, {**cand.decisions, **tiles, **pick})
    # B[j, k] along j: lanes 128 bytes apart, a load each; B[k, j]: contiguous (48 = 2 x 24 lanes)
    assert _unroll_steps_and_lanes(cand.to_mod()) == (({64}, {16}) if transposed_b else ({512}, {24}))
    assert check_candidate(task, cand).ok
    off = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_pack_operands=False, cpu_gather_lanes=None,
                                                      cpu_gather_unroll=None))
    same = off.sketches[space.sketches.index(cand.sketch)]
    assert _unroll_steps_and_lanes(dt.Candidate(task, same, cand.decisions).to_mod()) == ({512}, {24})


def test_gather_behind_reshape_index_arithmetic_is_recognised() -> None:
    """A transpose written through reshapes (BERT's attention heads) reads its input through floordiv/floormod that
    are linear within the block's ranges: its lanes are a row apart, so the gather limits apply (unlimited, LLVM took
    5-15 s per candidate on such a nest)."""
    from tvm import topi

    x = te.placeholder((128, 768), name="x")
    heads = topi.transpose(topi.reshape(x, (128, 12, 64)), (1, 2, 0))  # out[h, d, s] = x[s, h * 64 + d]
    task = dt.Task.from_te([x, topi.reshape(heads, (12, 64, 128))], "llvm", name="heads")
    space = dt.SearchSpace(task)
    cand = space.sample(1, seed=0)[0]
    pick = {h.key: h.options.index(512) for h in cand.sketch.holes if h.kind == "unroll"}
    pick |= {h.key: h.options.index(64) for h in cand.sketch.holes if h.kind == "vectorize"}
    cand = dt.Candidate(task, cand.sketch, {**cand.decisions, **pick})
    # the first reshape's nest copies rows (64 contiguous lanes, 512 steps); the transposing nest is limited
    assert _unroll_steps_and_lanes(cand.to_mod()) == ({512, 64}, {64, 16})
    assert check_candidate(task, cand).ok
    off = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_gather_lanes=None, cpu_gather_unroll=None))
    assert _unroll_steps_and_lanes(dt.Candidate(task, off.sketches[0], cand.decisions).to_mod()) == ({512}, {64})


class InlineEverythingSpatial(SketchRule):
    """A user rule: inline any spatial non-output block, even one the default rules would keep."""

    name = "user-inline"

    def condition(self, state, info, ctx):
        return Verdict.APPLY_AND_SKIP_REST if info.name == "bias_add" else Verdict.PASS

    def apply(self, state, info, ctx):
        return [state.then(Inline(info.name), self.name)]


def test_user_rule_is_applied() -> None:
    task = _task("conv2d_bias_relu")
    rules = [InlineEverythingSpatial(), *dt.default_rules()]
    space = dt.SearchSpace(task, rules=rules)
    assert all(any(r.startswith("user-inline") for r in s.rules) for s in space.sketches)
    only_skip = dt.SearchSpace(task, rules=[Skip()])
    assert all(not s.rules[:-1] for s in only_skip.sketches)


def test_short_target_names_resolve() -> None:
    for name in ("llvm", "x86-avx512", "x86-avx2", "aarch64", "cuda-sm80", "cuda-sm90"):
        target, spec = dt.resolve_target(name)
        assert spec.is_gpu == (target.kind.name == "cuda")
        assert spec.cores >= 1 and spec.vector_bits >= 128
    with pytest.raises(ValueError, match="unknown target name"):
        dt.resolve_target("tpu")


def test_a_cpu_llvm_does_not_know_is_rejected_not_built_as_generic() -> None:
    """LLVM turns an unknown `mcpu` into `generic` with a log line only: a typo would tune for another CPU."""
    assert dt.resolve_target({"kind": "llvm", "mcpu": "znver4"})[1].vector_bits == 512
    with pytest.raises(ValueError, match="LLVM knows no CPU 'znver44'"):
        dt.resolve_target({"kind": "llvm", "mcpu": "znver44"})
    with pytest.raises(ValueError, match="LLVM knows no CPU 'znver4' for aarch64"):  # a CPU of another architecture
        dt.resolve_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "znver4"})


def test_padding_is_computed_at_a_loop_or_inlined_by_a_hole_on_cpu_and_always_inlined_on_gpu() -> None:
    """On CPU the pad block gets a compute-location hole whose last option inlines it (inlined padding guards the
    convolution's loads, so it is a choice, not a rule); every candidate, inlined or not, computes the same output.
    Without that option the pad block always keeps its own loop nest; on GPU it is always inlined."""
    task = _task("conv2d_bias_relu")
    cpu = dt.SearchSpace(task)
    assert all("compute-location(pad)" in s.rules for s in cpu.sketches)
    reference = run_module(task.mod, task, random_inputs(task))
    kept = set()
    for cand in cpu.sample(12, seed=11):
        kept.add("pad" in {b.name_hint for b in _blocks(cand.to_mod())})
        assert check_candidate(task, cand, reference=reference).ok
    assert kept == {True, False}
    located = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_inline_conditional_hole=False))
    for cand in located.sample(6, seed=11):
        assert "pad" in {b.name_hint for b in _blocks(cand.to_mod())}
    inlined = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_inline_conditional=True))
    assert all("always-inline(pad)" in s.rules for s in inlined.sketches)
    gpu = dt.SearchSpace(_task("conv2d_bias_relu", "cuda-sm90"))
    assert all("always-inline(pad)" in s.rules for s in gpu.sketches)


def _shared_loops(mod: tvm.IRModule, a: str, b: str) -> int:
    """How many loops (outermost first) enclose both block `a` and block `b`."""
    sch = s_tir.Schedule(mod)
    loops_a, loops_b = (sch.get_loops(sch.get_sblock(name)) for name in (a, b))
    return sum(1 for x, y in zip(loops_a, loops_b, strict=False) if sch.get(x).same_as(sch.get(y)))


def test_shared_exp_is_computed_once_at_the_row_loop_on_cpu() -> None:
    """Softmax's exp feeds the row sum and the normalisation: on CPU it is not inlined into both (two exps per
    element) but gets a compute-location hole on the normalisation's loops, moved out to the loops that also
    enclose the sum; row-wise fusion of max, exp, sum and normalisation is then in the space."""
    task = _task("softmax")
    space = dt.SearchSpace(task)
    assert all("compute-location(exp)" in s.rules for s in space.sketches)
    fused = next(s for s in space.sketches if "compute-location(exp_sum)" in s.rules
                 and "compute-location(max_elem)" in s.rules)
    reference = run_module(task.mod, task, random_inputs(task))
    base = sample_decisions(fused, np.random.default_rng(3))
    # option i of a compute-location hole is loop i - 1 of the consumer (option 0: the root)
    cases = {(2, 3, 2): (2, 2), (2, 1, 1): (1, 1), (0, 3, 0): (0, 0), (1, 3, 1): (1, 1)}
    for (sum_at, exp_at, max_at), (exp_depth, max_depth) in cases.items():
        cand = dt.Candidate(task, fused, {**base, "exp_sum/at": sum_at, "exp/at": exp_at,
                                          "max_elem/at": max_at})
        mod = cand.to_mod()
        assert _shared_loops(mod, "exp", "softmax") == exp_depth
        assert _shared_loops(mod, "exp", "exp_sum_update") == exp_depth
        assert _shared_loops(mod, "max_elem_update", "softmax") == max_depth
        assert check_candidate(task, cand, reference=reference).ok
    for cand in space.sample(6, seed=5):
        assert check_candidate(task, cand, reference=reference).ok
    inlined = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_inline_shared_math=True))
    assert all("always-inline(exp)" in s.rules for s in inlined.sketches)
    gpu = dt.SearchSpace(_task("softmax", "cuda-sm90"))
    assert all("always-inline(exp)" in s.rules for s in gpu.sketches)


def _blocks(mod: tvm.IRModule) -> list[s_tir.SBlock]:
    found: list[s_tir.SBlock] = []
    tvm_ffi.structural_walk(mod["main"], [(s_tir.SBlock, found.append)], order="pre")
    return found


def _packed_buffers(mod: tvm.IRModule) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}

    def on_block(block: s_tir.SBlock) -> None:
        for buf in block.alloc_buffers:
            shapes[buf.name] = tuple(int(s) for s in buf.shape)

    tvm_ffi.structural_walk(mod["main"], [(s_tir.SBlock, on_block)], order="pre")
    return shapes


@pytest.mark.parametrize(("name", "operand", "k_extent"),
                         [("gemm", "B", 64), ("dense_bias_gelu", "W", 64), ("batch_matmul", "B", 16)])
def test_matmul_operand_is_packed_into_panels_in_extra_sketches(name: str, operand: str, k_extent: int,
                                                                tmp_path) -> None:
    """GEMM's B[k, j], dense's W[j, k] and batch_matmul's B[b, j, k] get sketches that copy them to
    [(b,) j // P, k, j % P] first; the plain sketches keep their names (packed ones come after), packed candidates
    compute the right thing and round-trip through the records, and the rule can be switched off."""
    task = _task(name)
    space = dt.SearchSpace(task)
    packed = [s for s in space.sketches if any(r.startswith("pack-operand") for r in s.rules)]
    plain = [s for s in space.sketches if s not in packed]
    assert packed and plain
    assert max(space.sketches.index(s) for s in plain) < min(space.sketches.index(s) for s in packed)
    off = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_pack_operands=False))
    assert [s.steps for s in off.sketches] == [s.steps for s in plain]
    lanes = task.spec.vector_lanes(32)
    reference = run_module(task.mod, task, random_inputs(task))
    store = RecordStore(str(tmp_path))
    rng = np.random.default_rng(1)
    cands = []
    for sketch in packed:
        hole = next(h for h in sketch.holes if h.kind == "pack")
        for choice in range(len(hole.options)):
            decisions = sample_decisions(sketch, rng) | {hole.key: choice}
            cand = dt.Candidate(task, sketch, decisions)
            width = hole.options[choice]
            assert width % lanes == 0
            out_shape = [int(d) for d in task.mod["main"].params[-1].shape]
            batch = tuple(out_shape[:-2])
            assert _packed_buffers(cand.to_mod())[f"{operand}_global"] == (*batch, out_shape[-1] // width, k_extent,
                                                                           width)
            assert check_candidate(task, cand, reference=reference).ok
            cands.append(cand)
            store.add(cand, 1e-3)
    for rec, cand in zip(RecordStore(str(tmp_path)).records(task), cands, strict=True):
        assert candidate_from_trace(task, space.sketches, rec.trace) == cand


@pytest.mark.parametrize(("name", "axis"), [("gemm", 1), ("dense_bias_gelu", 1), ("batch_matmul", 2)])
def test_vector_panels_are_as_wide_as_the_tiles_innermost_part(name: str, axis: int) -> None:
    """A register tile narrower than its operand's panels reads a piece of every panel row per reduction step, a
    strided stream (BERT-base's weight on Zen 4, flushed as in the network: 4.37 ms against 2.80-3.13 ms for tiles on
    panels of their own width): sampled, mutated and repaired decisions keep the panel width equal to the innermost
    part of the tile along the packed axis (the output's last one)."""
    task = _task(name)
    space = dt.SearchSpace(task)
    rng = np.random.default_rng(3)
    packed = [s for s in space.sketches if any(isinstance(lim, PanelLimit) for lim in s.limits)]
    assert packed and all(any(r.startswith("pack-operand") for r in s.rules) for s in packed)
    for sketch in packed:
        lim = next(lim for lim in sketch.limits if isinstance(lim, PanelLimit))
        keys = {h.key for h in sketch.holes}
        assert lim.pack_key in keys and lim.tile_key in keys and lim.tile_key.endswith(f"/S{axis}")
        for _ in range(16):
            decisions = sample_decisions(sketch, rng)
            assert lim.widths[decisions[lim.pack_key]] == decisions[lim.tile_key][-1]
            mutated = mutate(sketch, decisions, rng)
            assert mutated is None or lim.holds(mutated)
        tile = decisions[lim.tile_key]
        wider = decisions | {lim.pack_key: (decisions[lim.pack_key] + 1) % len(lim.widths)}
        unvectorized = decisions | {lim.tile_key: (tile[0] * tile[-1], *tile[1:-1], 1)}
        for broken in (wider, unvectorized) if len(lim.widths) > 1 else (unvectorized,):
            assert not lim.holds(broken)
            fixed = repair(sketch, broken, rng)
            assert fixed is not None and lim.holds(fixed)
            assert math.prod(fixed[lim.tile_key]) == math.prod(tile)


def test_operands_that_are_not_matmul_inputs_are_not_packed() -> None:
    for name in ("conv2d_nchw", "softmax"):
        assert not any(r.startswith("pack-operand") for s in dt.SearchSpace(_task(name)).sketches for r in s.rules)


def test_candidate_that_tvm_rejects_while_replaying_is_an_invalid_candidate():
    # a GEMM sketch replayed on a softmax program: TVM's schedule (no block "C") refuses the first step, and that
    # refusal (a RuntimeError subclass in TVM 0.27, which has no tvm.TVMError) must come back as our own error
    gemm = workloads.small("gemm").task()
    softmax = workloads.small("softmax").task()
    cand = dt.SearchSpace(gemm).sample(1, seed=0)[0]
    alien = dt.Candidate(softmax, cand.sketch, cand.decisions)
    with pytest.raises(dt.InvalidCandidateError, match="schedule rejected"):
        alien.to_mod()
    model = dt.StaticCostModel("llvm")
    assert np.isinf(model.predict(softmax, [alien])[0])
    assert model.failures == {"replay": 1}


def test_a_decision_outside_its_domain_is_told_apart_from_tvms_refusal():
    # our own replay errors say "bad decisions"; TVM's (which include ValueError and KeyError) say "schedule rejected"
    gemm = workloads.small("gemm").task()
    cand = dt.SearchSpace(gemm).sample(1, seed=0)[0]
    tile = next(k for k, v in cand.decisions.items() if isinstance(v, tuple))
    broken = dt.Candidate(gemm, cand.sketch, {**cand.decisions, tile: (7,) * len(cand.decisions[tile])})
    with pytest.raises(dt.InvalidCandidateError, match="bad decisions: tile decision"):
        broken.to_mod()
    missing = dt.Candidate(gemm, cand.sketch, {k: v for k, v in cand.decisions.items() if k != tile})
    with pytest.raises(dt.InvalidCandidateError, match="bad decisions: no decision for hole"):
        missing.to_mod()


def _gemm_task(m: int, n: int, k: int, ways: int = 12) -> dt.Task:
    """C[m, n] = A[m, k] @ B[k, n] on the host, as if its L1 were 48 KiB with `ways` ways."""
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    spec = dataclasses.replace(dt.Task.from_prim_func(te.create_prim_func([A, B, C]), "llvm").spec,
                               l1_bytes=48 * 1024, l1_ways=ways)
    return dt.Task.from_prim_func(te.create_prim_func([A, B, C]), "llvm", name="gemm", spec=spec)


def _packs(sketch) -> list[tuple[int, bool]]:
    return [(s.read_index, s.rows) for s in sketch.steps if isinstance(s, PackOperand)]


def test_a_whose_rows_share_an_l1_set_is_packed_into_row_panels_and_only_those_sketches_are_searched() -> None:
    """A[i, k] with 1024-float rows (4 KiB, one L1 way of a 48 KiB 12-way cache): the B-packed sketches get
    variants that also pack A into panels A_global[i // P, k, i % P] of a few rows; they come after every earlier
    sketch, whose names and steps do not change; the search draws only from them (all stay derived, for records
    and datasets), and their candidates compute the right thing for every panel height."""
    task = _gemm_task(16, 64, 1024)
    space = dt.SearchSpace(task)
    both = [s for s in space.derived if _packs(s) == [(1, False), (0, True)]]
    assert both and space.derived[-len(both):] == both and space.sketches == both
    before = dt.SearchSpace(task, config=dt.SpaceConfig(pack_row_widths=()))
    assert [(s.name, s.steps) for s in before.sketches] == [(s.name, s.steps) for s in space.derived[:-len(both)]]
    assert all(space.sketch(s.name) is s for s in space.derived)
    assert all(c.sketch in both for c in space.sample(20, seed=0))
    every = dt.SearchSpace(task, config=dt.SpaceConfig(cpu_pack_critical_rows=False))
    assert every.sketches == every.derived == space.derived
    reference = run_module(task.mod, task, random_inputs(task))
    rng = np.random.default_rng(3)
    for sketch in both:
        hole = sketch.hole("C/pack0")
        assert hole.options == (4, 8)  # 16 rows: a panel of all of them would be no panel
        for choice, rows in enumerate(hole.options):
            cand = dt.Candidate(task, sketch, sample_decisions(sketch, rng) | {hole.key: choice})
            assert _packed_buffers(cand.to_mod())["A_global"] == (16 // rows, 1024, rows)
            assert check_candidate(task, cand, reference=reference).ok


def test_row_panels_of_a_power_of_two_extent_also_come_padded_for_six_and_twelve_row_tiles() -> None:
    """512 rows (A's rows sharing an L1 set): besides the packed sketches, sketches that first pad the rows to 516
    (a multiple of 6 and 12; 0.8% more work) and pack A in panels of 6 or 12 rows, derived after every other
    sketch, whose names and steps do not change; the search draws from them too, and their candidates compute
    the right thing for both panel heights, writing only the 512 real rows."""
    task = _gemm_task(512, 64, 1024)
    space = dt.SearchSpace(task)
    padded = [s for s in space.derived if any(isinstance(step, PadRows) for step in s.steps)]
    assert padded and space.derived[-len(padded):] == padded and set(padded) <= set(space.sketches)
    before = dt.SearchSpace(task, config=dt.SpaceConfig(pack_row_pad_widths=()))
    assert [(s.name, s.steps) for s in before.derived] == [(s.name, s.steps) for s in space.derived[:-len(padded)]]
    reference = run_module(task.mod, task, random_inputs(task))
    rng = np.random.default_rng(5)
    for sketch in padded:
        assert sketch.hole("C/S0").extent == 516
        hole = sketch.hole("C/pack0")
        assert hole.options == (6, 12)
        for choice, rows in enumerate(hole.options):
            cand = dt.Candidate(task, sketch, sample_decisions(sketch, rng) | {hole.key: choice})
            assert _packed_buffers(cand.to_mod())["A_pad_global"] == (516 // rows, 1024, rows)
            assert check_candidate(task, cand, reference=reference).ok
            assert candidate_from_trace(task, space.derived, cand.to_schedule().trace) == cand  # records replay


@pytest.mark.parametrize("m", [16, 504])
def test_rows_are_not_padded_when_that_adds_much_work_or_they_already_fit(m: int) -> None:
    """16 rows would become 24 (50% more work); 504 rows are a multiple of 12 already."""
    space = dt.SearchSpace(_gemm_task(m, 64, 1024))
    assert any(rows for s in space.derived for _, rows in _packs(s))
    assert not any(isinstance(step, PadRows) for s in space.derived for step in s.steps)


@pytest.mark.parametrize(("k", "ways"), [(1008, 12), (1024, 0), (768, 12)])
def test_rows_that_spread_over_the_l1_sets_are_not_row_packed(k: int, ways: int) -> None:
    """1008-float rows, a cache of unknown associativity, or 3 KiB rows on 4 KiB ways: no row packing, every
    sketch searched (extra sketches only thin the search there)."""
    space = dt.SearchSpace(_gemm_task(16, 64, k, ways))
    assert space.sketches == space.derived
    assert all(not rows for s in space.derived for _, rows in _packs(s))
    assert any(_packs(s) for s in space.derived)
