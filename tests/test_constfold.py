"""The numpy constant folder: same module as Relax's FoldConstant, bit for bit, without compiling a kernel per call."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from drytune import extract, zoo
from drytune.constfold import fold_constants_numpy
from drytune.network import load_network
from drytune.target import resolve_target

TARGET = resolve_target("llvm")[0]


def _bn_chain_module(var: np.ndarray, gamma: np.ndarray, weight: np.ndarray) -> tvm.IRModule:
    """weight * reshape(gamma / sqrt(var + eps)) feeding a matmul with the input: batch norm folded into a weight."""
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.add(relax.const(var), tvm.tirx.FloatImm("float32", 1e-5)))
            s = bb.emit(relax.op.divide(relax.const(gamma), relax.op.sqrt(s)))
            s = bb.emit(relax.op.reshape(s, (4, 1)))
            w = bb.emit(relax.op.permute_dims(relax.op.multiply(relax.const(weight), s), [1, 0]))
            out = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(out)
    return bb.get()


def _constants(mod: tvm.IRModule) -> list[np.ndarray]:
    found = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e.value.numpy()) if isinstance(e, tvm.ir.expr.Constant)
        and hasattr(e.value, "numpy") else None)
    return found


def test_a_batch_norm_chain_folds_to_one_weight_equal_to_fold_constant_s():
    rng = np.random.default_rng(0)
    var, gamma = rng.uniform(0.1, 2, 4).astype("float32"), rng.uniform(-1, 1, 4).astype("float32")
    weight = rng.uniform(-1, 1, (4, 3)).astype("float32")
    mod = _bn_chain_module(var, gamma, weight)
    ours = relax.transform.DeadCodeElimination()(fold_constants_numpy()(mod))
    theirs = relax.transform.FoldConstant()(mod)
    # everything but the matmul folded: one constant left, the 3 x 4 weight, equal to FoldConstant's bit for bit
    (folded,) = _constants(ours)
    expected = (weight * (gamma / np.sqrt(var + np.float32(1e-5))).reshape(4, 1)).T
    np.testing.assert_array_equal(folded, expected)
    # FoldConstant, which follows in `fuse`, then only substitutes the bound constant into its use
    tvm.ir.assert_structural_equal(relax.transform.FoldConstant()(ours), theirs)


def test_calls_it_cannot_evaluate_are_left_for_fold_constant():
    x = relax.Var("x", relax.TensorType((4,), "int32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit(relax.op.divide(relax.const(np.array([7, -7, 5, 9], "int32")),
                                        relax.const(np.array([2, 2, 3, 4], "int32"))))  # integer division: declined
            e = bb.emit(relax.op.exp(relax.const(np.ones(4, "float32"))))  # not in the table
            out = bb.emit_output(relax.op.add(x, relax.op.astype(q, "int32")))
        bb.emit_func_output(relax.Tuple([out, e]))
    mod = bb.get()
    ops = set()
    relax.analysis.post_order_visit(fold_constants_numpy()(mod)["main"], lambda e: ops.add(e.op.name)
                                    if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    assert {"relax.divide", "relax.exp", "relax.add"} <= ops


@pytest.mark.parametrize("name", ["mobilenet_tiny", "resnet_tiny"])
def test_fused_network_is_the_same_with_and_without_the_numpy_folder(monkeypatch, name):
    pytest.importorskip("torch")
    net = load_network(*zoo.get_model(name), name=name)
    fast = extract.fuse(net.mod, TARGET)
    monkeypatch.setattr(extract, "fold_constants_numpy", lambda: tvm.transform.Sequential([]))
    slow = extract.fuse(net.mod, TARGET)
    tvm.ir.assert_structural_equal(fast, slow)
