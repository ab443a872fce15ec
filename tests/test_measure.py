"""Local measurement in a worker process: timing, build failures, crashes, hangs and the numeric check."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys

import pytest
import tvm
from tvm import s_tir, te, tirx

from drytune import workloads as W
from drytune.measure import MeasureWorker, _Runner, measure_modules

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


@pytest.fixture(scope="module")
def worker():
    with MeasureWorker() as w:
        yield w


def _gemm() -> tvm.IRModule:
    return W.small("gemm").ir_module()


def _scheduled_gemm() -> tvm.IRModule:
    sch = s_tir.Schedule(_gemm())
    c = sch.get_sblock("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    sch.parallel(i0)
    sch.vectorize(j1)
    sch.decompose_reduction(c, k0)
    return sch.mod


def _wrong_gemm() -> tvm.IRModule:
    """Same signature as the small gemm but the reduction skips its last step, like a broken schedule."""
    A = te.placeholder((64, 64), "float32", name="A")
    B = te.placeholder((64, 64), "float32", name="B")
    k = te.reduce_axis((0, 63), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([A, B, C])})


def _elementwise(body, size: int = 4) -> tvm.IRModule:
    A = te.placeholder((size,), "float32", name="A")
    B = te.compute((size,), lambda i: body(A, i), name="B")
    return tvm.IRModule({"main": te.create_prim_func([A, B])})


def _aborting() -> tvm.IRModule:
    return _elementwise(lambda A, i: A[i] + tirx.Cast("float32", tirx.call_extern("int32", "abort")))


def _unresolved_symbol() -> tvm.IRModule:
    """Builds, but the JIT cannot resolve the extern symbol and the run segfaults."""
    return _elementwise(lambda A, i: A[i] + tirx.call_extern("float32", "drytune_no_such_symbol", A[i]))


def _foreign_intrinsic() -> tvm.IRModule:
    """An AArch64 NEON intrinsic, which the x86 LLVM backend cannot declare."""
    neon = "llvm.aarch64.neon.frecpe"
    return _elementwise(lambda A, i: tirx.call_llvm_pure_intrin("float32", neon, 1, A[i]))


def _endless() -> tvm.IRModule:
    A = te.placeholder((4,), "float32", name="A")
    k = te.reduce_axis((0, tirx.const(1 << 42, "int64")), name="k")
    B = te.compute((1,), lambda _: te.sum(A[k % 4] * A[(k + 1) % 4], axis=k), name="B")
    return tvm.IRModule({"main": te.create_prim_func([A, B])})


def _assert_ok(r, repeat):
    assert r.ok, r.error
    assert len(r.times) == repeat
    assert all(t > 0 and math.isfinite(t) for t in r.times)
    assert r.seconds == statistics.median(r.times)
    assert r.build_s >= 0  # 0: the worker kept the module built by an earlier test


def test_two_modules_get_finite_positive_times():
    """Uses the shared default worker."""
    mods = [_gemm(), W.small("conv2d_nchw").ir_module()]
    results = measure_modules(mods, TARGET, number=2, repeat=3, min_repeat_ms=1)
    assert len(results) == 2
    for r in results:
        _assert_ok(r, 3)
        assert r.max_abs_err is None
        assert r.spread >= 0


def test_a_module_timed_again_is_not_built_again(worker):
    # interleaved rounds (verification, benchmarks) time the same modules again and again
    mods = [_gemm(), W.small("conv2d_nchw").ir_module()]
    first = measure_modules(mods, TARGET, number=1, repeat=2, min_repeat_ms=1, worker=worker)
    again = measure_modules(mods, TARGET, number=1, repeat=2, min_repeat_ms=1, worker=worker)
    assert all(r.ok and r.build_s > 0 for r in first)
    assert all(r.ok and r.build_s == 0.0 for r in again)


class _JobLog(MeasureWorker):
    """A real worker that also keeps, for each job it was sent, the module text, whether it carried a reference to
    check against, the number of modules to keep built, and the reply."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[tuple[str, bool, int, dict]] = []

    def run(self, job, timeout_s):
        reply = super().run(job, timeout_s)
        self.jobs.append((job["mod"], job["ref"] is not None, job["keep"], reply))
        return reply


def _adds(n: int) -> list[tvm.IRModule]:
    """`n` distinct tiny modules (vector adds of different lengths)."""
    return [_elementwise(lambda A, i: A[i] + 1.0, size) for size in range(16, 16 + n)]


def test_rounds_time_modules_in_turn_keep_them_built_and_drop_failures():
    mods = [_scheduled_gemm(), _wrong_gemm(), *_adds(_Runner.built_kept)]  # more than a worker keeps by default
    texts = [tvm.ir.save_json(m) for m in mods]
    with _JobLog() as log:
        checked = measure_modules(mods[:2], TARGET, number=1, repeat=1, min_repeat_ms=1, rounds=3,
                                  check_against=_gemm(), worker=log)
        check_jobs, log.jobs = log.jobs, []
        results = measure_modules(mods, TARGET, number=1, repeat=1, min_repeat_ms=1, rounds=3, worker=log)
    # the check runs in the first round only; a module that fails it is not timed again
    assert [(texts.index(mod), ref) for mod, ref, _, _ in check_jobs] == [(0, True), (1, True), (0, False), (0, False)]
    assert checked[0].ok and len(checked[0].times) == 3
    assert not checked[1].ok and "wrong result" in checked[1].error
    # in turn, every module once per round, each built once (the first two were kept from the checked rounds)
    assert [texts.index(mod) for mod, _, _, _ in log.jobs] == list(range(len(mods))) * 3
    assert all(keep == len(mods) for _, _, keep, _ in log.jobs)
    assert [texts.index(mod) for mod, _, _, reply in log.jobs if reply["build_s"] > 0] == list(range(2, len(mods)))
    for r in results:
        assert r.ok, r.error
        assert len(r.times) == 3 and r.seconds == statistics.median(r.times)


def test_cache_flush_timing(worker):
    (r,) = measure_modules([_scheduled_gemm()], TARGET, number=1, repeat=2, flush_cache=True, worker=worker)
    _assert_ok(r, 2)


def test_check_accepts_correct_schedule_and_catches_wrong_output(worker):
    good, bad = measure_modules(
        [_scheduled_gemm(), _wrong_gemm()], TARGET, repeat=2, check_against=_gemm(), worker=worker
    )
    _assert_ok(good, 2)
    assert good.max_abs_err is not None and good.max_abs_err < 1e-4
    assert not bad.ok and bad.seconds == math.inf and bad.times == ()
    assert "wrong result" in bad.error
    assert bad.max_abs_err is not None and bad.max_abs_err > 1e-3


def test_signature_mismatch_with_reference_is_an_error(worker):
    (r,) = measure_modules([_gemm()], TARGET, check_against=W.small("gemm_bert").ir_module(), worker=worker)
    assert not r.ok and "signature" in r.error


def test_build_failure_is_reported_without_restarting_the_worker(worker):
    starts = worker.starts
    bad, good = measure_modules([_foreign_intrinsic(), _gemm()], TARGET, repeat=2, worker=worker)
    assert bad.seconds == math.inf
    assert bad.error.startswith("build failed") and "llvm.aarch64.neon.frecpe" in bad.error
    _assert_ok(good, 2)
    assert worker.starts == max(starts, 1)


def test_unparseable_module_text_is_reported(worker):
    reply = worker.run({"mod": '{"root": 1, "nodes": [', "target": str(TARGET)}, timeout_s=60)
    assert reply["error"].startswith("cannot parse module")


def test_crashes_are_reported_and_the_next_module_is_still_measured(worker):
    (warm,) = measure_modules([_gemm()], TARGET, repeat=1, worker=worker)
    assert warm.ok
    starts = worker.starts
    aborted, after_abort, segv, after_segv = measure_modules(
        [_aborting(), _gemm(), _unresolved_symbol(), _gemm()], TARGET, repeat=2, worker=worker
    )
    assert aborted.seconds == math.inf
    assert aborted.error.startswith("worker crashed (signal 6")
    assert segv.error.startswith("worker crashed (signal 11")
    assert "drytune_no_such_symbol" in segv.error  # the JIT's message, quoted from the worker's log
    _assert_ok(after_abort, 2)
    _assert_ok(after_segv, 2)
    assert worker.starts == starts + 2


def test_hang_times_out_and_the_worker_is_replaced(worker):
    hung, good = measure_modules([_endless(), _gemm()], TARGET, repeat=2, timeout_s=3, worker=worker)
    assert hung.seconds == math.inf and hung.error == "timeout after 3 s"
    _assert_ok(good, 2)


def test_non_cpu_target_is_rejected():
    with pytest.raises(ValueError, match="local CPU"):
        measure_modules([_gemm()], tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))


def test_runtime_uses_every_core_unless_the_user_set_threads() -> None:
    """TVM on x86 would take half the logical CPUs; drytune's import makes its pool use every usable core."""
    code = ("import os, drytune, tvm; print(os.environ['TVM_NUM_THREADS'], "
            "tvm.get_global_func('runtime.NumThreads')())")
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    cores = len(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(cores), str(cores)]
    out = subprocess.run([sys.executable, "-c", code], env={**env, "TVM_NUM_THREADS": "1"}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["1", "1"]


def test_modules_compiled_side_by_side_are_timed_and_checked_like_the_rest(worker, tmp_path):
    from drytune.measure import BuildPool

    pool = BuildPool(2)
    try:
        built = pool.compile([(tvm.ir.save_json(m), str(TARGET), str(tmp_path / f"{i}.so"))
                              for i, m in enumerate([_scheduled_gemm(), _foreign_intrinsic()])])
    finally:
        pool.close()
    assert built[0]["lib"] == str(tmp_path / "0.so") and os.path.exists(built[0]["lib"]) and built[0]["build_s"] > 0
    assert built[1] == {}  # a failed build is left to the worker, which reports it

    good, wrong, broken = measure_modules([_scheduled_gemm(), _wrong_gemm(), _foreign_intrinsic()], TARGET, repeat=2,
                                          rounds=2, check_against=_gemm(), worker=worker, build_workers=2)
    assert good.ok and len(good.times) == 2 and good.build_s > 0
    assert good.max_abs_err is not None and good.max_abs_err < 1e-4
    assert "wrong result" in wrong.error
    assert broken.error.startswith("build failed") and "llvm.aarch64.neon.frecpe" in broken.error


def test_prebuilt_libraries_are_the_ones_timed_until_the_pools_close(worker):
    # verification compiles every task's candidates in one batch, then times them task by task
    from drytune.measure import _libraries, _prebuilt, close_build_pools, prebuild

    mods = [_scheduled_gemm(), _wrong_gemm()]
    prebuild(mods, TARGET, 2, references=[_gemm()])
    folder = _prebuilt.folder
    jobs = [(tvm.ir.save_json(m), None) for m in mods] + [(tvm.ir.save_json(_gemm()), 0)]
    libs = _libraries(jobs, str(TARGET), 2, "/nonexistent")  # all prebuilt: nothing is compiled into that folder
    assert all(lib["lib"].startswith(folder) and os.path.exists(lib["lib"]) for lib in libs)
    assert "ref_outputs" not in libs[0] and os.path.exists(libs[2]["ref_outputs"])  # the reference was run there
    good, wrong = measure_modules(mods, TARGET, repeat=2, rounds=2, check_against=_gemm(), worker=worker,
                                  build_workers=2)
    assert good.ok and len(good.times) == 2 and good.max_abs_err < 1e-4
    assert "wrong result" in wrong.error
    close_build_pools()
    assert not os.path.exists(folder) and _prebuilt.libs == {}
