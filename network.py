"""Network import: a torch module, a saved torch.export program (.pt2), an ONNX file or a Relax IRModule
becomes one unfused Relax module with its weights bound as constants, plus what is needed to check it."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from .errors import DrytuneError
from .zoo import require_torch

log = logging.getLogger(__name__)

ONNX_HINT = 'pip install "drytune[onnx]"'

InputSpec = tuple[str, tuple[int, ...], str]
ShapesArg = Mapping[str, Sequence[int]] | Sequence[Sequence[int]] | None


class ModelImportError(DrytuneError, ValueError):
    """A model that cannot be imported: unreadable file, missing shapes, or rejected by TVM's frontend."""


class UnsupportedOperatorError(ModelImportError):
    """The model uses operators that TVM's frontend cannot import; `operators` lists them when known."""

    def __init__(self, message: str, operators: Sequence[str] = ()):
        super().__init__(message)
        self.operators = list(operators)


@dataclass
class Network:
    """An imported network: its unfused Relax module (weights as constants), inputs and a framework reference."""

    name: str
    mod: tvm.IRModule
    inputs: list[InputSpec]
    source: str  # "torch", "onnx" or "relax"
    fingerprint: str
    reference_fn: Callable[..., list[np.ndarray]] | None = field(default=None, repr=False)

    def reference(self, *inputs: np.ndarray) -> list[np.ndarray] | None:
        """The framework's own outputs for `inputs` (torch eager; onnx's reference evaluator for ONNX files), or
        None when no framework can run the model (a Relax input, or an ONNX operator the evaluator lacks);
        callers then compare with the untuned TVM build."""
        if self.reference_fn is None:
            return None
        if len(inputs) != len(self.inputs):
            raise ValueError(f"{self.name} takes {len(self.inputs)} input(s), got {len(inputs)}")
        return self.reference_fn(*inputs)


def flatten_outputs(value: Any) -> list[np.ndarray]:
    """Numpy arrays of a VM result or framework output, which may be a tensor or a (nested) tuple of them."""
    if isinstance(value, np.ndarray):
        return [value]
    if hasattr(value, "numpy"):
        return [np.asarray(value.numpy())]
    if isinstance(value, (str, bytes)):
        raise TypeError(f"cannot turn a {type(value).__name__} into numpy arrays")
    if isinstance(value, (list, tuple)) or (hasattr(value, "__len__") and hasattr(value, "__getitem__")):
        return [a for item in value for a in flatten_outputs(item)]
    raise TypeError(f"cannot turn a {type(value).__name__} into numpy arrays")


def random_inputs(network: Network, seed: int = 0) -> list[np.ndarray]:
    """Seeded random arrays for the network's inputs: floats in [-1, 1), integers in [0, 8), random booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for _, shape, dtype in network.inputs:
        if dtype == "bool":
            out.append(rng.integers(0, 2, size=shape).astype(bool))
        elif np.issubdtype(np.dtype(dtype), np.integer):
            out.append(rng.integers(0, 8, size=shape).astype(dtype))
        else:
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
    return out


def fingerprint(mod: tvm.IRModule) -> str:
    """A stable hash of a module's structure and constants, so records of another network can be told apart."""
    return f"{int(tvm_ffi.structural_hash(mod)) & (2**64 - 1):016x}"


def relax_inputs(mod: tvm.IRModule) -> list[InputSpec]:
    """(name, static shape, dtype) of each parameter of the module's "main"; symbolic dimensions are an error."""
    out = []
    for param in mod["main"].params:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
            raise ModelImportError(f"input {param.name!r} of main is not a tensor of known rank ({ty})")
        dims = []
        for dim in ty.shape.values:
            if not isinstance(dim, tvm.tirx.IntImm):
                raise ModelImportError(
                    f"input {param.name!r} has a symbolic dimension {dim} in shape {list(ty.shape.values)}; "
                    "give static shapes (input_shapes=...) or bind them with relax.transform.BindSymbolicVars"
                )
            dims.append(int(dim))
        out.append((param.name, tuple(dims), str(ty.dtype)))
    return out


def _make(name: str, mod: tvm.IRModule, source: str,
          reference_fn: Callable[..., list[np.ndarray]] | None) -> Network:
    return Network(name=name, mod=mod, inputs=relax_inputs(mod), source=source, fingerprint=fingerprint(mod),
                   reference_fn=reference_fn)


# --- torch ---------------------------------------------------------------------------------------------------


def _is_torch_module(model: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _torch_examples(example_inputs: Any, input_shapes: ShapesArg) -> tuple[Any, ...]:
    torch = require_torch()
    if example_inputs is None:
        if input_shapes is None:
            raise ValueError("a torch module needs example_inputs (or input_shapes for float32 inputs)")
        shapes = list(input_shapes.values()) if isinstance(input_shapes, Mapping) else list(input_shapes)
        gen = torch.Generator().manual_seed(0)
        return tuple(torch.randn(*s, generator=gen) for s in shapes)
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    return tuple(torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x
                 for x in example_inputs)


def _torch_reference(model: Callable[..., Any]) -> Callable[..., list[np.ndarray]]:
    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        torch = require_torch()
        with torch.no_grad():
            out = model(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        return [np.asarray(a) for a in flatten_outputs(_detach(out))]

    return run


def _detach(value: Any) -> Any:
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)):
        return [_detach(v) for v in value]
    return value


def _from_exported(program: Any, name: str) -> tvm.IRModule:
    """Relax module of a torch ExportedProgram; an operator TVM lacks becomes `UnsupportedOperatorError`."""
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with warnings.catch_warnings():
            # run_decompositions deep-copies the program and torch warns about its own deprecated LeafSpec
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            return from_exported_program(program, keep_params_as_input=False)
    except AssertionError as err:  # the frontend asserts on unknown aten ops
        text = str(err)
        if "Unsupported function types" not in text:
            raise
        ops = text.split("[", 1)[-1].rstrip("]").replace("'", "").split(", ")
        raise UnsupportedOperatorError(
            f"{name}: TVM's torch frontend does not support operator(s) {', '.join(ops)}", ops) from None


def _load_torch(model: Any, example_inputs: Any, name: str | None, input_shapes: ShapesArg) -> Network:
    torch = require_torch()
    examples = _torch_examples(example_inputs, input_shapes)
    name = name or type(model).__name__.lower()
    model = model.eval()
    try:
        with torch.no_grad():
            program = torch.export.export(model, examples)
    except Exception as err:
        raise ModelImportError(f"{name}: torch.export could not trace the model: {str(err).splitlines()[0]}") from err
    return _make(name, _from_exported(program, name), "torch", _torch_reference(model))


def _load_pt2(path: str, name: str | None) -> Network:
    torch = require_torch()
    try:
        program = torch.export.load(path)
    except Exception as err:
        raise ModelImportError(f"{path} is not a readable torch.export program (.pt2): {err}") from None
    name = name or os.path.splitext(os.path.basename(path))[0]
    return _make(name, _from_exported(program, name), "torch", _torch_reference(program.module()))


# --- ONNX ----------------------------------------------------------------------------------------------------


def _require_onnx() -> Any:
    try:
        import onnx
    except ImportError as err:
        raise ImportError(f"importing ONNX models needs the onnx package, which is not installed: {ONNX_HINT}") from err
    return onnx


def _onnx_input_shapes(model: Any, path: str, input_shapes: ShapesArg) -> dict[str, list[int]]:
    """Static shape of every graph input (initializers excluded), from `input_shapes` or the file."""
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    if isinstance(input_shapes, Mapping):
        given = {k: list(v) for k, v in input_shapes.items()}
        unknown = sorted(set(given) - {i.name for i in graph_inputs})
        if unknown:
            raise ModelImportError(f"{path}: input_shapes names {unknown} are not inputs of the model "
                                   f"(inputs: {[i.name for i in graph_inputs]})")
    elif input_shapes is not None:
        shapes = list(input_shapes)
        if len(shapes) != len(graph_inputs):
            raise ModelImportError(f"{path}: {len(shapes)} input shape(s) given for {len(graph_inputs)} input(s)")
        given = {i.name: list(s) for i, s in zip(graph_inputs, shapes, strict=True)}
    else:
        given = {}
    out = {}
    for inp in graph_inputs:
        if inp.name in given:
            out[inp.name] = [int(d) for d in given[inp.name]]
            continue
        if not inp.type.HasField("tensor_type") or not inp.type.tensor_type.HasField("shape"):
            raise ModelImportError(f"{path}: input {inp.name!r} has no shape in the file; pass input_shapes")
        dims = inp.type.tensor_type.shape.dim
        symbolic = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
        if symbolic:
            raise ModelImportError(
                f"{path}: input {inp.name!r} has symbolic dimension(s) {symbolic}; "
                f"pass input_shapes={{{inp.name!r}: [...]}} with static sizes")
        out[inp.name] = [int(d.dim_value) for d in dims]
    return out


def _load_onnx(path: str, name: str | None, input_shapes: ShapesArg) -> Network:
    onnx = _require_onnx()
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(path)
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as err:
        raise ModelImportError(f"{path} is not a readable ONNX model ({type(err).__name__}: {err})") from None
    if not model.graph.node:
        raise ModelImportError(f"{path} is not a readable ONNX model (it holds no graph nodes)")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise ModelImportError(f"{path} fails the ONNX checker: {str(err).splitlines()[0]}") from None
    shapes = _onnx_input_shapes(model, path, input_shapes)
    from tvm.relax.frontend.onnx import from_onnx

    try:
        mod = from_onnx(model, shape_dict=shapes, keep_params_in_input=False)
    except tvm.error.OpNotImplemented as err:
        text = str(err)
        ops = text.split(":")[-1].strip().split(", ") if "not supported" in text else []
        raise UnsupportedOperatorError(f"{path}: TVM's ONNX frontend does not support operator(s) "
                                       f"{', '.join(ops) or text}", ops) from None
    return _make(name or os.path.splitext(os.path.basename(path))[0], mod, "onnx", _onnx_reference(model, path))


def _onnx_reference(model: Any, path: str) -> Callable[..., list[np.ndarray]] | None:
    """onnx's own reference evaluator (numpy, independent of TVM), or None if it lacks the model's operators."""
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(model)
    except Exception as err:  # it resolves every node's implementation here and rejects unknown operators
        log.warning("onnx's reference evaluator cannot run %s (%s: %s); the network has no framework reference",
                    path, type(err).__name__, err)
        return None
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        return flatten_outputs(evaluator.run(None, dict(zip(names, inputs, strict=True))))

    return run


# --- Relax ---------------------------------------------------------------------------------------------------


def _load_relax(mod: tvm.IRModule, name: str | None) -> Network:
    if not any(gv.name_hint == "main" for gv in mod.get_global_vars()):
        raise ModelImportError("the Relax IRModule has no function named 'main'")
    if not isinstance(mod["main"], relax.Function):
        raise ModelImportError(f"'main' of the IRModule is a {type(mod['main']).__name__}, not a Relax function")
    lowered = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    if lowered:
        log.warning("the Relax module already holds PrimFuncs (%s); if it was fused before, fusing it again merges "
                    "kernels further; pass the module as imported, before any lowering", ", ".join(lowered[:3]))
    return _make(name or "relax_module", mod, "relax", None)


def load_network(
    model: Any,
    example_inputs: Any = None,
    *,
    name: str | None = None,
    input_shapes: ShapesArg = None,
) -> Network:
    """Import a network: a torch.nn.Module with example inputs, a path to an .onnx or .pt2 (torch.export) file,
    or a Relax IRModule with a "main" function. Weights are bound as constants; shapes must be static."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no model file at {path}")
        ext = os.path.splitext(path)[1].lower()
        if ext == ".onnx":
            return _load_onnx(path, name, input_shapes)
        if ext == ".pt2":
            return _load_pt2(path, name)
        raise ModelImportError(f"{path}: unknown model file type {ext!r}; expected .onnx or .pt2")
    if isinstance(model, tvm.IRModule):
        return _load_relax(model, name)
    if _is_torch_module(model):
        return _load_torch(model, example_inputs, name, input_shapes)
    if type(model).__module__.split(".")[0] == "torch":
        require_torch()
    raise TypeError(f"cannot import a {type(model).__name__}: expected a torch.nn.Module, a path to an .onnx or "
                    ".pt2 file, or a tvm.IRModule")
