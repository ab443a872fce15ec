"""One helper for drytune's Relax graph rewrites: run an expression mutator over every Relax function."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax


def mutator_pass(make_mutator: Callable[[tvm.IRModule], relax.PyExprMutator], name: str) -> tvm.transform.Pass:
    """A module pass that rewrites each Relax function of a module with a fresh `make_mutator(mod)`'s visit."""

    def transform(mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        mutator = make_mutator(mod)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gv, mutator.visit_expr(func))
        return mutator.builder_.get()

    return tvm.transform.module_pass(transform, opt_level=0, name=name)
