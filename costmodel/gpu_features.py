"""GPU features of a candidate: occupancy, waves, work per thread, shared-memory bank conflicts (Tuna III-B).

Everything is static: registers and shared memory come from ptxas, dynamic instruction counts from the
PTX loop analysis, bank conflicts from evaluating the first warp's shared-memory indices in the TIR.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import operator
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx
from tvm.target import Target

from drytune.costmodel import ptx as ptx_mod
from drytune.costmodel.cuda_build import CudaBuild, CudaBuildConfig, LaunchConfig, build_cuda, lower_device
from drytune.costmodel.looptree import dtype_bytes
from drytune.target import HardwareSpec, resolve_target

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------
# Occupancy


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM and which resource limits them."""

    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # resident warps / maximum warps per SM
    limiter: str  # "registers", "shared_memory", "threads", "blocks" or "invalid"
    limits: dict[str, int] = field(default_factory=dict)  # blocks per SM allowed by each resource


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(registers: int, smem_bytes: int, threads_per_block: int, spec: HardwareSpec,
              table: ptx_mod.LatencyTable | None = None) -> Occupancy:
    """Blocks per SM as the CUDA occupancy calculator computes them (registers allocated per warp)."""
    table = table or ptx_mod.load_latency_table(spec.sm_version or 80)
    warps_per_block = -(-threads_per_block // spec.warp_size)
    max_warps = spec.max_threads_per_sm // spec.warp_size
    if (threads_per_block <= 0 or threads_per_block > spec.max_threads_per_block
            or registers > spec.max_regs_per_thread or smem_bytes > spec.smem_per_sm):
        return Occupancy(0, 0, 0.0, "invalid", {})
    regs_per_warp = _round_up(max(registers, 1) * spec.warp_size, table.reg_alloc_unit)
    smem_per_block = _round_up(smem_bytes, table.smem_alloc_unit) + table.smem_reserved_per_block
    limits = {
        "registers": (spec.regs_per_sm // regs_per_warp) // warps_per_block,
        "shared_memory": spec.smem_per_sm // smem_per_block if smem_per_block else spec.max_blocks_per_sm,
        "threads": max_warps // warps_per_block,
        "blocks": spec.max_blocks_per_sm,
    }
    limiter = min(limits, key=lambda k: limits[k])
    blocks = limits[limiter]
    if blocks == 0:
        return Occupancy(0, 0, 0.0, limiter, limits)
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, warps / max_warps, limiter, limits)


def waves(blocks: int, blocks_per_sm: int, sm_count: int) -> float:
    """Number of waves the grid needs: blocks / (resident blocks per SM x SMs)."""
    if blocks_per_sm <= 0 or sm_count <= 0:
        return math.inf
    return blocks / (blocks_per_sm * sm_count)


# ---------------------------------------------------------------------------------------------------
# Shared-memory bank conflicts


class _EvalError(ValueError):
    pass


_BINARY = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul,
    "FloorDiv": operator.floordiv, "FloorMod": operator.mod,
    "Div": lambda a, b: int(a / b), "Mod": lambda a, b: int(math.fmod(a, b)),
    "Min": min, "Max": max, "LShift": operator.lshift, "RShift": operator.rshift,
    "BitwiseAnd": operator.and_, "BitwiseOr": operator.or_, "BitwiseXor": operator.xor,
    "EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le, "GT": operator.gt,
    "GE": operator.ge, "And": lambda a, b: bool(a and b), "Or": lambda a, b: bool(a or b),
}


def _lanes(v) -> int:
    return len(v) if isinstance(v, list) else 1


def _apply(fn, a, b):
    if isinstance(a, list) or isinstance(b, list):
        n = max(_lanes(a), _lanes(b))
        av = a if isinstance(a, list) else [a] * n
        bv = b if isinstance(b, list) else [b] * n
        return [int(fn(x, y)) for x, y in zip(av, bv, strict=True)]
    return int(fn(a, b))


class _IndexEvaluator:
    """Integer value of an index expression for one thread; variables without a value count as 0."""

    def __init__(self, env: dict, binds: dict):
        self.env = env  # thread variables -> value
        self.binds = binds  # Bind/LetStmt variables -> expression
        self.memo: dict = {}

    def __call__(self, e):
        kind = type(e).__name__
        if kind == "IntImm":
            return int(e.value)
        if kind in ("Var", "SizeVar"):
            if e in self.env:
                return self.env[e]
            if e in self.binds:
                if e not in self.memo:
                    self.memo[e] = self(self.binds[e])
                return self.memo[e]
            return 0
        if kind in _BINARY:
            a, b = self(e.a), self(e.b)
            if kind in ("FloorDiv", "FloorMod", "Div", "Mod") and (b == 0 or (isinstance(b, list) and 0 in b)):
                raise _EvalError("division by zero")
            return _apply(_BINARY[kind], a, b)
        if kind == "Not":
            a = self(e.a)
            return [int(not x) for x in a] if isinstance(a, list) else int(not a)
        if kind == "Cast":
            return self(e.value)
        if kind == "Ramp":
            base, stride = self(e.base), self(e.stride)
            return [base + k * stride for k in range(int(e.lanes))]
        if kind == "Broadcast":
            return [self(e.value)] * int(e.lanes)
        if kind == "Select":
            return self(e.true_value) if self(e.condition) else self(e.false_value)
        if kind == "Let":
            self.binds[e.var] = e.value
            return self(e.body)
        if kind == "Call" and str(e.op.name).endswith("if_then_else"):
            return self(e.args[1]) if self(e.args[0]) else self(e.args[2])
        raise _EvalError(f"cannot evaluate {kind}")


@dataclass(frozen=True)
class SharedAccess:
    """One shared-memory load or store of the first warp and the wavefronts it needs."""

    buffer: str
    is_store: bool
    executions: float  # per thread: product of the enclosing loop extents
    degree: int  # most distinct 4-byte words that fall in one bank during one phase
    wavefronts: int  # shared-memory transactions of the warp
    ideal_wavefronts: int  # transactions without conflicts


@dataclass(frozen=True)
class BankConflicts:
    """Shared-memory accesses of a kernel and their weighted excess of transactions."""

    accesses: tuple[SharedAccess, ...]
    max_degree: int
    transaction_ratio: float  # sum(executions x wavefronts) / sum(executions x ideal); 1.0 = no conflict
    skipped: int = 0  # accesses whose index could not be evaluated

    @property
    def conflict_free(self) -> bool:
        return self.max_degree <= 1


def _warp_wavefronts(addresses: list[list[int]], elem_bytes: int, banks: int) -> tuple[int, int, int]:
    """(max degree, wavefronts, ideal wavefronts) of a warp whose threads touch these byte addresses."""
    per_thread = max(len(a) for a in addresses) * elem_bytes
    threads_per_phase = max(1, min(len(addresses), 128 // max(4, per_thread)))
    degree, total, phases = 1, 0, 0
    for start in range(0, len(addresses), threads_per_phase):
        words: set[int] = set()
        for addrs in addresses[start:start + threads_per_phase]:
            for a in addrs:
                words.update(range(a // 4, (a + elem_bytes - 1) // 4 + 1))
        per_bank: dict[int, int] = {}
        for w in words:
            per_bank[w % banks] = per_bank.get(w % banks, 0) + 1
        phase_degree = max(per_bank.values(), default=1)
        degree, total, phases = max(degree, phase_degree), total + phase_degree, phases + 1
    return degree, total, phases


def _thread_vars(func: tirx.PrimFunc) -> dict[str, tuple[object, int]]:
    found: dict[str, tuple[object, int]] = {}

    def visit(a: tirx.AttrStmt) -> None:
        if str(a.attr_key) == "thread_extent" and isinstance(a.value, tirx.IntImm):
            found[str(a.node.thread_tag)] = (a.node.var, int(a.value))

    tvm_ffi.structural_walk(func.body, [(tirx.AttrStmt, visit)], order="pre")
    return found


def kernel_dims(func: tirx.PrimFunc) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of a lowered kernel from its thread_extent attributes."""
    tv = _thread_vars(func)
    grid = tuple(tv.get(f"blockIdx.{a}", (None, 1))[1] for a in "xyz")
    block = tuple(tv.get(f"threadIdx.{a}", (None, 1))[1] for a in "xyz")
    return grid, block  # type: ignore[return-value]


def bank_conflicts(func: tirx.PrimFunc, spec: HardwareSpec) -> BankConflicts:
    """Bank conflicts of every shared-memory access of a lowered kernel, for threads 0..31 of block 0."""
    tv = _thread_vars(func)
    bx, by, bz = (tv.get(f"threadIdx.{a}", (None, 1))[1] for a in "xyz")
    nthreads = min(spec.warp_size, bx * by * bz)
    envs = []
    for t in range(nthreads):
        coords = {"x": t % bx, "y": (t // bx) % by, "z": t // (bx * by)}
        envs.append({tv[f"threadIdx.{a}"][0]: coords[a] for a in "xyz" if f"threadIdx.{a}" in tv})
    binds: dict = {}
    accesses: list[SharedAccess] = []
    skipped = 0

    def record(buffer, indices, is_store: bool, mult: float) -> None:
        nonlocal skipped
        if not str(buffer.scope()).startswith("shared"):
            return
        shape = [int(s) if isinstance(s, tirx.IntImm) else 0 for s in buffer.shape]
        elem = dtype_bytes(buffer.dtype)
        try:
            addresses = []
            for env in envs:
                ev = _IndexEvaluator(env, binds)
                flat: int | list[int] = 0
                for k, idx in enumerate(indices):
                    stride = math.prod(shape[k + 1:]) if k + 1 < len(shape) else 1
                    flat = _apply(operator.add, flat, _apply(operator.mul, ev(idx), stride))
                addresses.append([a * elem for a in flat] if isinstance(flat, list) else [flat * elem])
        except Exception as err:  # any unexpected index form (e.g. indirect loads) is a counted skip
            skipped += 1
            log.debug("shared access to %s not evaluated: %s", buffer.name, err)
            return
        degree, wf, ideal = _warp_wavefronts(addresses, elem, spec.smem_banks)
        accesses.append(SharedAccess(str(buffer.name), is_store, mult, degree, wf, ideal))

    def loads_in(expr, mult: float) -> None:
        found: list = []
        tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, found.append)], order="pre")
        for ld in found:
            record(ld.source, list(ld.indices), False, mult)

    def visit(stmt, mult: float) -> None:
        kind = type(stmt).__name__
        if kind == "SeqStmt":
            for s in stmt.seq:
                visit(s, mult)
        elif kind == "For":
            ext = stmt.extent
            visit(stmt.body, mult * (int(ext.value) if isinstance(ext, tirx.IntImm) else 1))
        elif kind == "IfThenElse":
            visit(stmt.then_case, mult)
            if stmt.else_case is not None:
                visit(stmt.else_case, mult)
        elif kind in ("Bind", "LetStmt"):
            binds[stmt.var] = stmt.value
            loads_in(stmt.value, mult)
        elif kind == "BufferStore":
            record(stmt.buffer, list(stmt.indices), True, mult)
            loads_in(stmt.value, mult)
        elif kind == "Evaluate":
            loads_in(stmt.value, mult)
        elif hasattr(stmt, "body"):
            visit(stmt.body, mult)

    visit(func.body, 1.0)
    total = sum(a.executions * a.wavefronts for a in accesses)
    ideal = sum(a.executions * a.ideal_wavefronts for a in accesses)
    return BankConflicts(
        accesses=tuple(accesses),
        max_degree=max((a.degree for a in accesses), default=1),
        transaction_ratio=total / ideal if ideal else 1.0,
        skipped=skipped,
    )


def module_bank_conflicts(mod: tvm.IRModule, target: str | dict | Target = "cuda-sm90",
                          spec: HardwareSpec | None = None) -> dict[str, BankConflicts]:
    """Bank conflicts of each kernel of a scheduled module (lowered with TVM's default pipeline)."""
    spec = spec or resolve_target(target)[1]
    return {name: bank_conflicts(f, spec) for name, f in lower_device(mod, target).items()}


# ---------------------------------------------------------------------------------------------------
# Aggregate


@dataclass(frozen=True)
class GPUFeatures:
    """Static features of one CUDA kernel of a candidate (all counts are per thread unless named)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    vthreads: int
    threads_per_block: int
    blocks: int
    threads: int
    # ptxas
    registers: int
    smem_bytes: int  # static (ptxas) + dynamic shared memory per block
    spill_bytes: int
    stack_bytes: int
    barriers: int
    # occupancy and waves
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float
    occupancy_limiter: str
    waves: float
    sm_utilization: float  # min(1, blocks / SMs): Tuna's penalty for grids smaller than the GPU
    # work per thread (PTX, Algorithm 3)
    dyn_instructions: float
    dyn_by_class: dict[str, float]
    fma: float  # CUDA-core FMAs plus the thread's share of tensor-core multiply-adds
    flops: float
    global_load_bytes: float
    global_store_bytes: float
    shared_load_bytes: float
    shared_store_bytes: float
    shared_ops: float
    work_cycles: float  # Tuna eq. (3): sum count x latency
    issue_cycles: float
    # latency hiding (XFEATUR)
    global_load_gap: float
    shared_load_gap: float
    exposed_load_cycles: float
    # shared-memory banks
    bank_conflict_degree: int
    shared_transaction_ratio: float
    shared_ops_adjusted: float  # shared ops x transaction ratio (Tuna)
    # fallbacks
    unknown_loops: int = 0
    skipped_shared_accesses: int = 0

    def numeric(self) -> dict[str, float]:
        """The scalar features by name (for cost-model formulas and regressions)."""
        return {k: float(v) for k, v in dataclasses.asdict(self).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}


_FMA = ("fp32.fma", "fp64.fma", "fp16.fma")
_ADDMUL = ("fp32.add", "fp32.mul", "fp64.add", "fp64.mul", "fp16.add", "fp16.mul")


def kernel_features(name: str, build: CudaBuild, module: ptx_mod.PtxModule, spec: HardwareSpec,
                    table: ptx_mod.LatencyTable) -> GPUFeatures:
    """Features of one kernel of a finished build."""
    func = module.functions[name]
    launch = next((lc for lc in build.launch if lc.kernel == name), None)
    lowered = build.device_funcs.get(name)
    if launch is None:
        grid, block = kernel_dims(lowered) if lowered is not None else ((1, 1, 1), (1, 1, 1))
        log.warning("no launch configuration for kernel %s; using the lowered TIR's thread extents", name)
        launch = LaunchConfig(name, grid, block)
    res = build.resources.get(name)
    if res is None:
        raise ptx_mod.PtxParseError(f"ptxas reported no resources for kernel {name!r}")
    smem = build.smem_bytes(name)
    occ = occupancy(res.registers, smem, launch.threads_per_block, spec, table)
    profile = ptx_mod.dynamic_profile(func, module)
    xf = ptx_mod.xfeatur_features(func, table, launch.grid, launch.block, module, profile)
    banks = bank_conflicts(lowered, spec) if lowered is not None else BankConflicts((), 1, 1.0)
    shared_ops = profile.count("ld.shared", "st.shared")
    fma = profile.count(*_FMA) + profile.mma_fma
    return GPUFeatures(
        kernel=name, grid=launch.grid, block=launch.block, vthreads=launch.vthreads,
        threads_per_block=launch.threads_per_block, blocks=launch.blocks, threads=launch.threads,
        registers=res.registers, smem_bytes=smem, spill_bytes=res.spill_bytes,
        stack_bytes=res.stack_bytes, barriers=res.barriers,
        blocks_per_sm=occ.blocks_per_sm, warps_per_sm=occ.warps_per_sm, occupancy=occ.occupancy,
        occupancy_limiter=occ.limiter, waves=waves(launch.blocks, occ.blocks_per_sm, spec.sm_count),
        sm_utilization=min(1.0, launch.blocks / spec.sm_count) if spec.sm_count else 0.0,
        dyn_instructions=profile.total, dyn_by_class=dict(profile.counts), fma=fma,
        flops=2.0 * fma + profile.count(*_ADDMUL),
        global_load_bytes=profile.bytes.get("ld.global", 0.0),
        global_store_bytes=profile.bytes.get("st.global", 0.0),
        shared_load_bytes=profile.bytes.get("ld.shared", 0.0),
        shared_store_bytes=profile.bytes.get("st.shared", 0.0),
        shared_ops=shared_ops,
        work_cycles=ptx_mod.work_cycles(profile, table),
        issue_cycles=ptx_mod.issue_cycles(profile, table, spec.warp_size),
        global_load_gap=xf.global_load_gap, shared_load_gap=xf.shared_load_gap,
        exposed_load_cycles=xf.exposed_load_cycles,
        bank_conflict_degree=banks.max_degree, shared_transaction_ratio=banks.transaction_ratio,
        shared_ops_adjusted=shared_ops * banks.transaction_ratio,
        unknown_loops=profile.unknown_loops, skipped_shared_accesses=banks.skipped,
    )


def features_from_build(build: CudaBuild, spec: HardwareSpec) -> tuple[GPUFeatures, ...]:
    """Features of every kernel of a build, in launch order."""
    module = ptx_mod.parse_ptx(build.ptx)
    table = ptx_mod.load_latency_table(spec.sm_version or int(build.arch.removeprefix("sm_")))
    order = [lc.kernel for lc in build.launch if lc.kernel in module.kernels]
    order += sorted(k for k in module.kernels if k not in order)
    return tuple(kernel_features(name, build, module, spec, table) for name in order)


def extract_gpu_features(mod: tvm.IRModule, target: str | dict | Target = "cuda-sm90",
                         spec: HardwareSpec | None = None,
                         config: CudaBuildConfig | None = None) -> tuple[GPUFeatures, ...]:
    """Build a scheduled CUDA module and return one `GPUFeatures` per kernel.

    Raises `CudaBuildError` when TVM, nvcc or ptxas fail and `PtxParseError` on PTX it cannot read.
    """
    spec = spec or resolve_target(target)[1]
    return features_from_build(build_cuda(mod, target, config), spec)
