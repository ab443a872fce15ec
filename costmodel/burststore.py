"""Output lines a network's kernel stores in bursts: writes that the compute around them does not hide.

Inside a network a kernel writes its output to memory that the kernels before it have evicted from the caches.
Stores spread through a multiply-add loop (an epilogue over a few accumulators) drain while the loop runs; a loop nest
that only stores, over more lines than the core keeps in flight (an epilogue over a whole tile, a copy), waits on
memory for each line. Zen 5, MobileNet-V2's 112 x 112 x 96 expansion convolution: a pick whose epilogue walks
14 x 14 x 48 tiles ran 1.76x slower with its output flushed than warm, one that applies it to four accumulators at a
time 1.14x; the init and epilogue alone of eight picks cost 3.7-9.6 cycles more per output line and core flushed
(docs/measurements-costmodel.md, "Session 69").
"""

from __future__ import annotations

import tvm

from .kernel import nest_speedup, statement_paths
from .looptree import LoopTree, StmtLeaf


def output_params(mod: tvm.IRModule, tree: LoopTree) -> set[str]:
    """The parameters of the module's main function that it writes (`tree` is its loop tree)."""
    params = {str(p.name) for p in mod["main"].params}
    return {a.buffer for a in tree.accesses() if a.is_write and a.buffer in params}


def _own_run(leaf: StmtLeaf, path: list) -> int:
    """Iterations of the loops around `leaf` that hold no other statement: what it does with nothing in between."""
    run = 1
    for loop in reversed(path):
        if any(s is not leaf for s in loop.statements()):
            break
        run *= loop.extent
    return run


def burst_store_lines(tree: LoopTree, outputs: set[str], burst_lines: float, cores: int = 1,
                      line_bytes: int = 64) -> float:
    """Lines of the `outputs` buffers that one of `cores` writes in statements storing more than `burst_lines`
    lines in a row (each root nest's lines over its parallel speed-up). Reductions into an output (an init and its
    update) are left out: their stores wait on the update's arithmetic."""
    total = 0.0
    for root, items in statement_paths(tree):
        lines = 0.0
        for leaf, path in items:
            out = next((a for a in leaf.accesses if a.is_write and a.buffer in outputs), None)
            if out is None or leaf.init or any(not a.is_write and a.buffer == out.buffer for a in leaf.accesses):
                continue
            if _own_run(leaf, path) * out.dtype_bytes / line_bytes > burst_lines:
                lines += leaf.trips * out.dtype_bytes / line_bytes
        total += lines / nest_speedup(root, cores)
    return total
