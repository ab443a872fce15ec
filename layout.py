"""Data layout of a network's convolutions: channels-last (NHWC activations, HWIO weights) for CPU targets.

With NCHW, a convolution vectorizes along the output width: a stride-2 convolution then reads its input lane by
lane (LLVM assembles a strided vector from scalar loads), and the 7x7 stem of a ResNet has 112 output columns to
split. In NHWC the output channels are innermost in the output and in HWIO weights, so the register tile
vectorizes along them with contiguous loads at any stride, as oneDNN does with its blocked layouts. Relax's
ConvertLayout rewrites the graph; weights are constants, so their transposes fold away when the module is built,
and the only extra kernels are the transposes at the network's edges.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax import Call, Expr, PyExprMutator, expr_functor
from tvm.target import Target

from .relaxpass import mutator_pass

LAYOUTS = ("auto", "NHWC", "keep")

# Desired layouts by operator: [data, kernel]. Everything between convolutions follows them through Relax's
# layout inference (batch norm, element-wise ops, pooling, reductions).
CHANNELS_LAST = {"relax.nn.conv2d": ["NHWC", "HWIO"]}


@expr_functor.mutator
class _ClipAsMinMax(PyExprMutator):
    """clip(x, lo, hi) -> minimum(maximum(x, lo), hi): Relax has no layout inference for clip (ReLU6), so
    ConvertLayout would put a transpose on either side of every one; the element-wise pair follows the layout."""

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if getattr(call.op, "name", "") != "relax.clip":
            return call
        dtype = getattr(getattr(call, "ty", None), "dtype", None)
        bounds = call.args[1:3]
        if dtype is None or not all(isinstance(v, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) for v in bounds):
            return call  # symbolic bounds: left as a clip (and transposed around)
        lo, hi = (relax.const(float(v.value), str(dtype)) for v in bounds)
        return self.builder_.normalize(relax.op.minimum(relax.op.maximum(call.args[0], lo), hi))


def clip_as_min_max() -> tvm.transform.Pass:
    """Module pass around `_ClipAsMinMax` for every Relax function."""
    return mutator_pass(_ClipAsMinMax, "DrytuneClipAsMinMax")


def resolve_layout(layout: str, target: Target) -> str:
    """"auto" is channels-last ("NHWC") on CPU targets and the imported layout ("keep") on GPUs, where the
    sketches bind threads along the output's innermost axes either way and NHWC is not measured."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if layout == "auto":
        return "keep" if target.kind.name == "cuda" else "NHWC"
    return layout


def layout_passes(layout: str) -> list[tvm.transform.Pass]:
    """The passes to run on an imported (unlegalized) Relax module for a resolved layout."""
    if layout == "keep":
        return []
    return [clip_as_min_max(), relax.transform.ConvertLayout(CHANNELS_LAST)]
