"""Output stores in bursts (costmodel/burststore.py): which statements count, and only in a network's kernel."""

from __future__ import annotations

import json
import math

import numpy as np
import tvm
from tvm import s_tir, te

from drytune.costmodel.burststore import burst_store_lines
from drytune.costmodel.calibrate import burst_store_cycles, burst_store_module
from drytune.costmodel.cpu_features import FEATURE_NAMES, CPUFeatureExtractor
from drytune.costmodel.looptree import LoopTree
from drytune.costmodel.model import Coefficients
from drytune.measure import measure_modules
from drytune.prepack import LAYOUT_FREE_ATTR
from drytune.target import resolve_target

M, N, K = 64, 256, 32  # the output: 64 x 256 floats, 1024 lines


def _matmul() -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """The operands and the product C = A @ W."""
    a = te.placeholder((M, K), "float32", name="a")
    w = te.placeholder((K, N), "float32", name="w")
    k = te.reduce_axis((0, K), name="k")
    return a, w, te.compute((M, N), lambda i, j: te.sum(a[i, k] * w[k, j], axis=k), name="c")


def _matmul_relu(epilogue_rows: int | None) -> tvm.IRModule:
    """relu(A @ W + 1) with 8 x 64 tiles; the epilogue applied to the tile's rows `epilogue_rows` at a time (inside
    the tile, right after its reduction), or (None) over the whole 8 x 64 tile after it."""
    a, w, c = _matmul()
    d = te.compute((M, N), lambda i, j: te.max(c[i, j] + 1.0, 0.0), name="d")
    sch = s_tir.Schedule(te.create_prim_func([a, w, d]))
    i, j, kk = sch.get_loops(sch.get_sblock("c"))
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 64])
    sch.reorder(io, jo, ii, kk, ji)
    sch.parallel(sch.fuse(io, jo))
    sch.vectorize(ji)
    at = sch.get_loops(sch.get_sblock("c"))[0] if epilogue_rows is None else sch.get_loops(sch.get_sblock("c"))[1]
    sch.reverse_compute_at(sch.get_sblock("d"), at)
    sch.vectorize(sch.get_loops(sch.get_sblock("d"))[-1])
    return sch.mod


def _marked(mod: tvm.IRModule) -> tvm.IRModule:
    """The module as a network's task: its weight `w` marked constant (as the importer marks it)."""
    return tvm.IRModule({"main": mod["main"].with_attr(LAYOUT_FREE_ATTR, [1])})


def test_an_epilogue_over_a_whole_tile_stores_in_bursts_one_over_a_row_does_not() -> None:
    whole, by_row = LoopTree.from_mod(_matmul_relu(None)), LoopTree.from_mod(_matmul_relu(1))
    # whole tile: 8 rows x 64 floats = 32 lines in a row, every line of the output counted
    assert burst_store_lines(whole, {"d"}, 8) == M * N * 4 / 64
    # one row of the tile after each row's reduction: 4 lines, drained beside the next row's multiply-adds
    assert burst_store_lines(by_row, {"d"}, 8) == 0
    assert burst_store_lines(by_row, {"d"}, 2) == M * N * 4 / 64  # ... unless the core keeps fewer in flight
    assert burst_store_lines(whole, {"d"}, 32) == 0  # a burst no longer than the threshold is hidden too


def test_a_reduction_into_the_output_is_not_a_burst() -> None:
    a, w, c = _matmul()
    tree = LoopTree.from_mod(tvm.IRModule({"main": te.create_prim_func([a, w, c])}))
    assert burst_store_lines(tree, {"c"}, 8) == 0


def test_only_a_network_kernel_pays_for_its_bursts_per_core() -> None:
    target, spec = resolve_target("llvm")
    extractor = CPUFeatureExtractor(target, spec)
    col = FEATURE_NAMES.index("burst_store_lines")
    whole = _matmul_relu(None)
    alone, in_network = extractor.extract(whole), extractor.extract(_marked(whole))
    assert alone.values[col] == 0  # timed alone and repeated, the output stays in the caches
    # one parallel nest: its lines shared by the cores as the program's work is
    assert math.isclose(in_network.values[col], M * N * 4 / 64 / in_network.speedup)
    assert extractor.extract(_marked(_matmul_relu(1))).values[col] == 0


def test_a_coefficients_file_older_than_the_feature_weighs_it_zero(tmp_path) -> None:
    values = {n: 1.0 for n in FEATURE_NAMES if n != "burst_store_lines"}
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"arch": "x86", "origin": "test", "coefficients": values}))
    coef = Coefficients.load(str(path))
    assert coef.values["burst_store_lines"] == 0.0
    assert coef.vector()[FEATURE_NAMES.index("burst_store_lines")] == 0.0


def test_burst_store_microbenchmark_fills_its_output_and_measures_a_cost() -> None:
    mod, lines = burst_store_module(mib=1)
    assert lines == 1024 * 1024 / 64
    target = resolve_target("llvm")[0]
    lib = tvm.compile(mod, target=target)
    a = np.random.default_rng(0).random(1024, dtype=np.float32)
    out = tvm.runtime.tensor(np.zeros((256, 1024), np.float32))
    lib["main"](tvm.runtime.tensor(a), out)
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(a + 1, (256, 1024)))
    assert measure_modules([mod], target)[0].ok
    cycles = burst_store_cycles(target, 2.5, 2, rounds=1)
    assert math.isfinite(cycles) and cycles >= 0
