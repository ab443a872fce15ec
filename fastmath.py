"""Fast math for whole networks: exp, erf and tanh as polynomials that LLVM vectorizes.

Without it LLVM turns every vector lane of an `exp` or `erf` into a scalar libm call (softmax, GELU: about 3-4 ns
per element here). TVM's FastMathTransform rewrites `exp`, `erf`, `tanh` and softmax, but a GELU imported as
`nn.gelu` only becomes `erf` during legalization, after that pass; so GELU is spelled out in Relax ops first.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax import Call, Expr, PyExprMutator, expr_functor

from .relaxpass import mutator_pass


@expr_functor.mutator
class _SpellOutGelu(PyExprMutator):
    """nn.gelu -> x * (0.5 + 0.5 * erf(x / sqrt 2)); nn.gelu_tanh -> its tanh formula, as elementwise Relax ops."""

    def visit_call_(self, call: Call) -> Expr:
        dtype = getattr(getattr(call, "ty", None), "dtype", None)
        dtype = str(dtype) if dtype is not None else None
        call = super().visit_call_(call)
        name = getattr(call.op, "name", "")
        if name not in ("relax.nn.gelu", "relax.nn.gelu_tanh") or dtype is None:
            return call
        x = call.args[0]
        op = relax.op

        def c(v: float) -> relax.Constant:
            return relax.const(v, dtype)

        if name == "relax.nn.gelu":
            inner = op.erf(op.multiply(x, c(math.sqrt(0.5))))
        else:
            cube = op.multiply(op.multiply(x, x), c(0.044715))
            inner = op.tanh(op.multiply(c(math.sqrt(2.0 / math.pi)), op.multiply(x, op.add(c(1.0), cube))))
        return self.builder_.normalize(op.multiply(x, op.add(c(0.5), op.multiply(inner, c(0.5)))))


def spell_out_gelu() -> tvm.transform.Pass:
    """Module pass around `_SpellOutGelu` for every Relax function."""
    return mutator_pass(_SpellOutGelu, "DrytuneSpellOutGelu")


def fast_math_passes() -> list[tvm.transform.Pass]:
    """The passes to run on an imported (unlegalized) Relax module."""
    return [spell_out_gelu(), relax.transform.FastMathTransform()]
