"""Weights packed once, when the network is built, instead of on every call.

A network's weights are constants. When a schedule copies one into panels (`PackOperand`), the copy is marked as a
layout rewrite; the build splits it into its own function and folds it on the constant, so the kernel that runs
reads the packed weight straight away (TVM's own mechanism: the PrimFunc attribute `layout_free_buffers` names the
constant parameters, `SplitLayoutRewritePreproc` and `FoldConstant` do the rest). The cost model and the timer therefore
look at the kernel without the copy. Before this, BERT-base's 768 x 3072 layer (an unpacked tile reading its 9.4-MB
weight in 192-byte pieces 12 KB apart) took 3.5 ms per call in the network against 2.6 ms timed alone.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

PREPROC_ATTR = "meta_schedule.layout_rewrite_preproc"  # TVM's mark for a block that rewrites a weight's layout
LAYOUT_FREE_ATTR = "layout_free_buffers"  # TVM's PrimFunc attribute: the parameters that are constants
PREPACKED_SUFFIX = "_prepacked"  # SplitLayoutRewritePreproc's name for a kernel whose packing it split off


def _constant_params(mod: tvm.IRModule) -> dict[str, set[int]]:
    """For each PrimFunc called with `call_tir` (or its in-place and gradient forms), the parameters that every call
    passes a relax constant."""
    found: dict[str, set[int]] = {}

    def visit(expr) -> None:
        if (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)
                and expr.op.name.startswith("relax.call_tir")):
            callee, args = expr.args[0], expr.args[1]
            args = args.fields if isinstance(args, relax.Tuple) else [args]
            here = {i for i, a in enumerate(args) if isinstance(a, tvm.ir.expr.GenericConst)}
            found[callee.name_hint] = found[callee.name_hint] & here if callee.name_hint in found else here

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


@tvm.transform.module_pass(opt_level=0, name="MarkConstantWeights")
def mark_constant_weights(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Record on each PrimFunc which parameters every call site passes a constant (TVM's `layout_free_buffers`,
    as `AttachAttrLayoutFreeBuffers` does, but keeping the functions' names: that pass renames them all)."""
    mod = mod.clone()
    for name, params in _constant_params(mod).items():
        gv = mod.get_global_var(name)
        if params and isinstance(mod[gv], tirx.PrimFunc):
            mod.update_func(gv, mod[gv].with_attr(LAYOUT_FREE_ATTR, sorted(params)))
    return mod


def constant_weight_params(func: tirx.PrimFunc) -> list[tirx.Buffer]:
    """The parameters of `func` that the network always passes a constant (weights), as the importer marked them."""
    free = func.attrs.get(LAYOUT_FREE_ATTR) if func.attrs is not None else None
    params = list(func.params)  # buffers, in TVM 0.27's PrimFunc
    return [params[int(i)] for i in free or () if int(i) < len(params)]


def is_constant_weight(func: tirx.PrimFunc, buffer: tirx.Buffer) -> bool:
    """Whether `buffer` is a parameter of `func` that the network always passes a constant (a weight)."""
    return any(p.same_as(buffer) for p in constant_weight_params(func))


def constant_weight_share(mod: tvm.IRModule) -> float:
    """Bytes of the parameters that the module's main function marks as constant weights (a network's task) over the
    bytes of all its parameters; 0 when none is marked."""
    func = mod["main"]
    weights = constant_weight_params(func)
    if not weights or any(not isinstance(d, tirx.IntImm) for buf in func.params for d in buf.shape):
        return 0.0  # no weight, or a dynamic shape whose bytes are unknown

    def size(buf: tirx.Buffer) -> int:
        return math.prod(int(d) for d in buf.shape) * buf.dtype.bits // 8

    total = sum(size(buf) for buf in func.params)
    return sum(size(buf) for buf in weights) / total if total else 0.0


def has_weight_packing(mod: tvm.IRModule) -> bool:
    """Whether a block of the module packs a weight ahead of time (carries the layout-rewrite mark)."""
    return any(PREPROC_ATTR in block.annotations for _, func in mod.functions_items()
               if isinstance(func, tirx.PrimFunc) for block in _blocks(func.body))


def _blocks(stmt) -> list[s_tir.SBlock]:
    found: list[s_tir.SBlock] = []
    tvm_ffi.structural_walk(stmt, [(s_tir.SBlock, found.append)], order="pre")
    return found


def _without_packing_nests(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Drop the root loop nests whose only block is a packing (TVM's removal leaves them, emptied)."""
    realize = func.body
    root = realize.block
    if not isinstance(root.body, tirx.SeqStmt):
        return func
    kept = [s for s in root.body.seq if not all(PREPROC_ATTR in b.annotations for b in _blocks(s))]
    if not kept or len(kept) == len(root.body.seq):
        return func
    body = kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                            root.alloc_buffers, root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, new_root))


def kernel_as_run(mod: tvm.IRModule) -> tvm.IRModule:
    """The scheduled module as the built network runs it: weight packings removed, their weights taken packed."""
    if not has_weight_packing(mod):
        return mod
    mod = s_tir.transform.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.IRModule({gv: _without_packing_nests(f) if isinstance(f, tirx.PrimFunc) else f
                         for gv, f in mod.functions_items()}, attrs=mod.attrs)


def fold_weight_packing(mod: tvm.IRModule) -> tvm.IRModule:
    """Split each marked packing out of its kernel and evaluate it on the constant weight (a relax module)."""
    from .constfold import fold_copies_numpy

    return tvm.transform.Sequential([
        relax.transform.SplitLayoutRewritePreproc(),
        fold_copies_numpy(),  # FoldConstant compiled one kernel per weight: 37 s of a ResNet-50 build
        relax.transform.FoldConstant(),
        relax.transform.DeadCodeElimination(),
    ])(mod)
