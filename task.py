"""`Task`: one tensor program (a static-shape PrimFunc) to tune for one target."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir, te, tirx
from tvm.target import Target

from .errors import UnsupportedProgramError
from .target import HardwareSpec, resolve_target


def param_info(func: tirx.PrimFunc) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, static shape, dtype) of each buffer parameter of `func`."""
    out = []
    for p in func.params:
        ty = getattr(p, "ty", None)
        if ty is None or not hasattr(ty, "shape"):
            raise UnsupportedProgramError(f"parameter {p.name!r} is not a buffer; only buffer parameters are supported")
        shape = tuple(int(s) if isinstance(s, tirx.IntImm) else s for s in ty.shape)
        out.append((p.name, shape, str(ty.dtype)))
    return out


def check_static(func: tirx.PrimFunc) -> None:
    """Raise `UnsupportedProgramError` unless every buffer shape and loop extent of `func` is a constant."""
    for name, shape, _ in param_info(func):
        dyn = [str(s) for s in shape if not isinstance(s, int)]
        if dyn:
            raise UnsupportedProgramError(
                f"dynamic shapes are not supported: parameter {name!r} has symbolic dimension(s) {dyn}; "
                "bind them to constants (e.g. with tvm.relax.transform.BindSymbolicVars) before tuning"
            )
    bad: list[str] = []

    def on_for(loop: tirx.For) -> None:
        if not isinstance(loop.extent, tirx.IntImm):
            bad.append(f"loop {loop.loop_var.name} extent {loop.extent}")

    def on_block(block: s_tir.SBlock) -> None:
        for iv in block.iter_vars:
            if not isinstance(iv.dom.extent, tirx.IntImm):
                bad.append(f"block {block.name_hint} iterator {iv.var.name} extent {iv.dom.extent}")

    tvm_ffi.structural_walk(func, [(tirx.For, on_for), (s_tir.SBlock, on_block)], order="pre")
    if bad:
        raise UnsupportedProgramError("dynamic shapes are not supported: " + "; ".join(bad[:4]))


@dataclass
class Task:
    """One static-shape tensor program to tune: its PrimFunc ("main"), target, hardware spec and weight."""

    name: str
    mod: tvm.IRModule
    target: Target
    spec: HardwareSpec
    weight: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_prim_func(
        cls,
        func: tirx.PrimFunc,
        target: str | dict | Target = "llvm",
        *,
        name: str = "main",
        spec: HardwareSpec | None = None,
        weight: float = 1.0,
    ) -> Task:
        """Build a task from a PrimFunc; rejects dynamic shapes with a clear error."""
        if isinstance(func, tvm.IRModule):
            funcs = [f for f in func.functions.values() if isinstance(f, tirx.PrimFunc)]
            if len(funcs) != 1:
                raise ValueError(f"expected an IRModule with one PrimFunc, got {len(funcs)}")
            func = funcs[0]
        if not isinstance(func, tirx.PrimFunc):
            raise TypeError(f"expected a tvm.tirx.PrimFunc, got {type(func).__name__}")
        check_static(func)
        func = func.with_attr("global_symbol", "main")
        tvm_target, tvm_spec = resolve_target(target, spec)
        return cls(name=name, mod=tvm.IRModule({"main": func}), target=tvm_target, spec=tvm_spec, weight=weight)

    @classmethod
    def from_te(
        cls,
        tensors: Sequence[te.Tensor],
        target: str | dict | Target = "llvm",
        *,
        name: str = "main",
        spec: HardwareSpec | None = None,
        weight: float = 1.0,
    ) -> Task:
        """Build a task from TE tensors (inputs and outputs, as for `te.create_prim_func`)."""
        return cls.from_prim_func(te.create_prim_func(list(tensors)), target, name=name, spec=spec, weight=weight)

    @property
    def func(self) -> tirx.PrimFunc:
        return self.mod["main"]

    @property
    def is_gpu(self) -> bool:
        return self.target.kind.name == "cuda"

    @cached_property
    def flops(self) -> float:
        """Floating-point operations of one run, as TVM estimates them."""
        return float(s_tir.analysis.estimate_tir_flops(self.mod))

    @cached_property
    def params(self) -> list[tuple[str, tuple[int, ...], str]]:
        return param_info(self.func)

    @cached_property
    def workload_hash(self) -> int:
        return int(tvm_ffi.structural_hash(self.mod))

    def __repr__(self) -> str:
        return f"Task({self.name!r}, target={self.target.kind.name}, flops={self.flops:.3g})"
