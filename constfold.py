"""Fold a network's constant arithmetic (batch norms folded into weights, weight transposes) with numpy.

Relax's FoldConstant compiles one kernel per constant call; on MobileNet-V2 that is ~500 LLVM builds and ~20 s
of a 3-minute tuning run, for a few kilobytes of arithmetic. This pass evaluates the calls whose operator is in
`NUMPY_OPS` and whose tensor arguments are all constants, in order, so that whole chains fold; FoldConstant still
runs afterwards for anything else. The operators are exact in IEEE float32 (add, multiply, divide, sqrt) or move
data, so the constants equal FoldConstant's bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax import Call, Expr, PyExprMutator, expr_functor

from .relaxpass import mutator_pass


def _shape(expr: Any) -> tuple[int, ...] | None:
    """A static shape argument (ShapeExpr of integers), else None."""
    values = getattr(expr, "values", None)
    if values is None or not all(isinstance(v, tvm.tirx.IntImm) for v in values):
        return None
    return tuple(int(v) for v in values)


def _axes(attrs: Any, name: str) -> list[int] | None:
    value = getattr(attrs, name, None)
    return None if value is None else [int(a) for a in value]


def _reshape(call: Call, x: np.ndarray) -> np.ndarray | None:
    shape = _shape(call.args[1])
    return None if shape is None else x.reshape(shape)


def _permute_dims(call: Call, x: np.ndarray) -> np.ndarray:
    return np.transpose(x, _axes(call.attrs, "axes"))


def _expand_dims(call: Call, x: np.ndarray) -> np.ndarray:
    return np.expand_dims(x, tuple(_axes(call.attrs, "axis")))


def _squeeze(call: Call, x: np.ndarray) -> np.ndarray:
    axes = _axes(call.attrs, "axis")
    return np.squeeze(x, None if axes is None else tuple(axes))


def _elementwise(fn: Callable[..., np.ndarray], floats_only: bool = False) -> Callable[..., np.ndarray | None]:
    def apply(call: Call, *xs: np.ndarray) -> np.ndarray | None:
        if floats_only and not all(np.issubdtype(x.dtype, np.floating) for x in xs):
            return None  # integer division rounds differently in numpy and in TVM
        with np.errstate(all="ignore"):
            return fn(*xs)

    return apply


# operator -> (number of tensor arguments, numpy evaluation returning None when it declines)
NUMPY_OPS: dict[str, tuple[int, Callable[..., np.ndarray | None]]] = {
    "relax.add": (2, _elementwise(np.add)),
    "relax.subtract": (2, _elementwise(np.subtract)),
    "relax.multiply": (2, _elementwise(np.multiply)),
    "relax.divide": (2, _elementwise(np.divide, floats_only=True)),
    "relax.sqrt": (1, _elementwise(np.sqrt, floats_only=True)),
    "relax.negative": (1, _elementwise(np.negative)),
    "relax.reshape": (1, _reshape),
    "relax.permute_dims": (1, _permute_dims),
    "relax.expand_dims": (1, _expand_dims),
    "relax.squeeze": (1, _squeeze),
    "relax.astype": (1, lambda call, x: x),  # the cast to the call's dtype below does it
}


@expr_functor.mutator
class _NumpyConstantFolder(PyExprMutator):
    """Replace each call of `NUMPY_OPS` whose tensor arguments are constants (directly or through a variable bound
    to one) with its value."""

    def _constant(self, expr: Expr) -> np.ndarray | None:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        if isinstance(expr, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):
            return np.asarray(expr.value, dtype=str(expr.ty.dtype))
        if isinstance(expr, tvm.ir.expr.Constant) and hasattr(expr.value, "numpy"):
            return expr.value.numpy()
        return None

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        entry = NUMPY_OPS.get(getattr(call.op, "name", ""))
        ty = getattr(call, "ty", None)
        if entry is None or not isinstance(ty, relax.TensorType) or ty.shape is None:
            return call
        arity, evaluate = entry
        if len(call.args) < arity:
            return call
        values = [self._constant(a) for a in call.args[:arity]]
        shape = _shape(ty.shape)
        if shape is None or any(v is None for v in values):
            return call
        result = evaluate(call, *values)
        if result is None or tuple(result.shape) != shape:
            return call
        return relax.const(np.ascontiguousarray(result.astype(str(ty.dtype))), str(ty.dtype))


def fold_constants_numpy() -> tvm.transform.Pass:
    """Module pass around `_NumpyConstantFolder` for every Relax function."""
    return mutator_pass(_NumpyConstantFolder, "DrytuneFoldConstantsNumpy")


# index arithmetic of a copy's indices, evaluated elementwise over numpy arrays of the block's iterator values
_INDEX_OPS: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    tvm.tirx.Add: np.add, tvm.tirx.Sub: np.subtract, tvm.tirx.Mul: np.multiply,
    tvm.tirx.FloorDiv: np.floor_divide, tvm.tirx.FloorMod: np.mod,
}


def _index_value(expr: Any, env: dict[str, np.ndarray]) -> np.ndarray:
    if isinstance(expr, tvm.tirx.IntImm):
        return np.asarray(int(expr.value), dtype=np.int64)
    if isinstance(expr, tvm.tirx.Var):
        return env[expr.name]
    if isinstance(expr, tvm.tirx.Cast) and "int" in str(expr.dtype):
        return _index_value(expr.value, env)
    op = _INDEX_OPS.get(type(expr))
    if op is None:
        raise ValueError(f"not an index expression: {type(expr).__name__}")
    return op(_index_value(expr.a, env), _index_value(expr.b, env))


def copy_in_numpy(func: tvm.tirx.PrimFunc, inputs: list[np.ndarray]) -> np.ndarray | None:
    """The output of a PrimFunc that only copies its one input to its output at other indices (a weight packing
    split off a kernel), computed with numpy; None for any other function. A block over spatial iterators whose
    points cover the output exactly, with no predicate: each point is one element, whatever the loops around it."""
    import tvm_ffi
    from tvm import s_tir

    realizes: list[s_tir.SBlockRealize] = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, realizes.append)], order="pre")
    inner = [r for r in realizes if r.block.name_hint != "root"]
    params = list(func.params)
    if len(inner) != 1 or len(params) != 2 or len(inputs) != 1:
        return None
    realize, block = inner[0], inner[0].block
    store = block.body
    if (block.init is not None or not isinstance(store, tvm.tirx.BufferStore)
            or not isinstance(store.value, tvm.ir.TensorLoad)
            or not (isinstance(realize.predicate, tvm.tirx.IntImm) and int(realize.predicate.value) == 1)
            or store.buffer.name != params[1].name or store.value.source.name != params[0].name
            or any(iv.iter_type != tvm.tirx.IterVar.DataPar for iv in block.iter_vars)):
        return None
    try:
        out_shape = tuple(int(d) for d in params[1].shape)
        ranges = [np.arange(int(iv.dom.min), int(iv.dom.min) + int(iv.dom.extent)) for iv in block.iter_vars]
        env = dict(zip([iv.var.name for iv in block.iter_vars], np.meshgrid(*ranges, indexing="ij", sparse=True),
                       strict=True))
        if int(np.prod([len(r) for r in ranges])) != int(np.prod(out_shape)):
            return None
        full = tuple(len(r) for r in ranges)
        write = tuple(np.broadcast_to(_index_value(i, env), full) for i in store.indices)
        read = tuple(np.broadcast_to(_index_value(i, env), full) for i in store.value.indices)
        out = np.empty(out_shape, dtype=str(params[1].dtype))
        out[write] = inputs[0][read]
    except (ValueError, IndexError, TypeError):
        return None
    return out


@expr_functor.mutator
class _CopyCallFolder(PyExprMutator):
    """Replace each `call_tir` of a pure copy (`copy_in_numpy`) on a constant with its value."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod = mod

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if getattr(call.op, "name", "") != "relax.call_tir" or not isinstance(call.args[0], relax.GlobalVar):
            return call
        func = self.mod[call.args[0]]
        args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
        if not isinstance(func, tvm.tirx.PrimFunc) or not all(
                isinstance(a, tvm.ir.expr.Constant) and hasattr(a.value, "numpy") for a in args):
            return call
        value = copy_in_numpy(func, [a.value.numpy() for a in args])
        if value is None:
            return call
        return relax.const(value, str(value.dtype))


def fold_copies_numpy() -> tvm.transform.Pass:
    """Module pass around `_CopyCallFolder`: weight packings folded without compiling a kernel for each."""
    return mutator_pass(_CopyCallFolder, "DrytuneFoldCopiesNumpy")
