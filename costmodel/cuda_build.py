"""CUDA build of a scheduled module without a GPU: CUDA C from TVM, PTX from nvcc, resources from ptxas.

Also reads the launch configuration (grid, block, virtual threads) of each kernel from the TIR thread
bindings, so that the static GPU cost model never needs to run anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.target import Target

from drytune.errors import DrytuneError
from drytune.target import resolve_target

log = logging.getLogger(__name__)

# Flags TVM itself gives nvcc when it JIT-compiles CUDA source (tvm.support.nvcc), so that the PTX we
# analyse is the PTX the runtime would run.
_TVM_NVCC_FLAGS = (
    "-O3",
    "--use_fast_math",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
)


class CudaBuildError(DrytuneError):
    """TVM codegen, nvcc or ptxas failed; `stage` names the step and `log` holds the compiler message."""

    def __init__(self, stage: str, message: str, log_text: str = ""):
        super().__init__(f"{stage}: {message}" + (f"\n{log_text}" if log_text else ""))
        self.stage = stage
        self.log = log_text


@dataclass(frozen=True)
class CudaBuildConfig:
    """Compiler commands, flags and cache settings of the CUDA build."""

    nvcc: str = "nvcc"
    ptxas: str = "ptxas"
    nvcc_flags: tuple[str, ...] = _TVM_NVCC_FLAGS
    ptxas_flags: tuple[str, ...] = ("--register-usage-level=10",)  # same level TVM's runtime build uses
    timeout_s: float = 120.0
    cache_entries: int = 512
    cache_dir: str | None = None  # optional on-disk cache shared between processes


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block dimensions of one kernel, read from the TIR thread bindings."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    vthreads: int = 1  # product of vthread extents: work each thread does for several virtual threads

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        return self.blocks * self.threads_per_block


@dataclass(frozen=True)
class KernelResources:
    """What `ptxas -v` reports for one kernel."""

    registers: int
    smem_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0
    cmem_bytes: int = 0

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass(frozen=True)
class CudaBuild:
    """Everything the static GPU model reads from one candidate's build."""

    arch: str
    cuda_source: str
    ptx: str
    resources: dict[str, KernelResources]
    launch: tuple[LaunchConfig, ...]
    device_funcs: dict[str, tirx.PrimFunc] = field(default_factory=dict)  # lowered kernels, flat buffers
    ptxas_log: str = ""
    dynamic_smem: dict[str, int] = field(default_factory=dict)  # bytes of "shared.dyn", set at launch
    kernel_args: dict[str, tuple[str, ...]] = field(default_factory=dict)  # buffer of each kernel parameter
    workspace: dict[str, int] = field(default_factory=dict)  # bytes of global intermediates (host-allocated)

    def smem_bytes(self, kernel: str) -> int:
        """Static (ptxas) plus dynamic shared memory of one block of `kernel`."""
        res = self.resources.get(kernel)
        return (res.smem_bytes if res else 0) + self.dynamic_smem.get(kernel, 0)


# ---------------------------------------------------------------------------------------------------
# Launch configuration from the scheduled TIR


def _is_thread_binding(loop: tirx.For) -> bool:
    return tirx.ForKind(int(loop.kind)).name == "THREAD_BINDING" and loop.thread_binding is not None


def _thread_loops(node) -> list[tirx.For]:
    found: list[tirx.For] = []
    tvm_ffi.structural_walk(node, [(tirx.For, lambda f: found.append(f) if _is_thread_binding(f) else None)],
                            order="pre")
    return found


def _kernel_name(func_name: str, k: int) -> str:
    return f"{func_name}_kernel" if k == 0 else f"{func_name}_kernel_{k}"


def launch_configs(mod: tvm.IRModule) -> tuple[LaunchConfig, ...]:
    """One `LaunchConfig` per kernel, in the order TVM splits kernels and with TVM's kernel names.

    A kernel is a thread-bound loop nest that is not inside another thread-bound loop; inside it each tag
    (blockIdx.*, threadIdx.*, vthread*) takes the largest extent bound to it.
    """
    configs: list[LaunchConfig] = []
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        loops = _thread_loops(func.body)
        nested: list[tirx.For] = []
        for loop in loops:
            nested.extend(inner for inner in _thread_loops(loop.body))
        roots = [lp for lp in loops if not any(lp.same_as(n) for n in nested)]
        for k, root in enumerate(roots):
            extents: dict[str, int] = {}
            vthreads: dict[str, int] = {}
            for loop in [root, *_thread_loops(root.body)]:
                tag = str(loop.thread_binding.thread_tag)
                ext = int(loop.extent) if isinstance(loop.extent, tirx.IntImm) else 1
                table = vthreads if tag.startswith(("vthread", "cthread")) else extents
                table[tag] = max(table.get(tag, 1), ext)
            grid = tuple(extents.get(f"blockIdx.{a}", 1) for a in "xyz")
            block = tuple(extents.get(f"threadIdx.{a}", 1) for a in "xyz")
            nvt = 1
            for ext in vthreads.values():
                nvt *= ext
            configs.append(LaunchConfig(_kernel_name(gv.name_hint, k), grid, block, nvt))  # type: ignore[arg-type]
    return tuple(configs)


# ---------------------------------------------------------------------------------------------------
# TVM: CUDA C and lowered device functions


def _cuda_target(target: str | dict | Target) -> Target:
    tgt, _ = resolve_target(target)
    if tgt.kind.name != "cuda":
        raise CudaBuildError("target", f"expected a cuda target, got {tgt.kind.name!r}")
    return tgt


def target_arch(target: str | dict | Target) -> str:
    """The `sm_XX` architecture of a CUDA target."""
    return str(dict(_cuda_target(target).attrs).get("arch", "sm_80"))


def cuda_source(mod: tvm.IRModule, target: str | dict | Target) -> str:
    """CUDA C that TVM generates for `mod` (all kernels in one translation unit)."""
    tgt = _cuda_target(target)
    try:
        ex = tvm.compile(mod, target=tgt)
    except Exception as err:  # TVM raises many error types (TVMError, ValueError, InternalError...)
        raise CudaBuildError("tvm", f"tvm.compile failed: {type(err).__name__}", str(err)) from err
    devices = [m for m in ex.mod.imports if m.kind == "cuda"]
    if not devices:
        raise CudaBuildError("tvm", "the build has no CUDA device module (no thread-bound loops?)")
    return "\n".join(str(m.inspect_source("cuda")) for m in devices)


def lower_device(mod: tvm.IRModule, target: str | dict | Target) -> dict[str, tirx.PrimFunc]:
    """The kernels after TVM's default TIR pipeline: flattened, compacted buffers, thread_extent attributes."""
    tgt = _cuda_target(target)
    pipeline = tvm.tirx.get_tir_pipeline("default")[0]
    try:
        lowered = pipeline(tvm.tirx.transform.BindTarget(tgt)(mod))
    except Exception as err:
        raise CudaBuildError("tvm", f"TIR lowering failed: {type(err).__name__}", str(err)) from err
    out: dict[str, tirx.PrimFunc] = {}
    for gv, func in lowered.functions.items():
        if isinstance(func, tirx.PrimFunc) and func.attrs is not None and "tirx.is_global_func" in func.attrs:
            out[gv.name_hint] = func
    return out


def static_bytes(buf: tirx.Buffer) -> int | None:
    """Bytes of a buffer with a constant shape (None for a symbolic one)."""
    if not all(isinstance(d, tirx.IntImm) for d in buf.shape):
        return None
    bits = re.match(r"^[a-z]+?(\d+)", str(buf.dtype))
    count = max(1, int(bits.group(1)) // 8) if bits else 1
    for d in buf.shape:
        count *= int(d)
    return count


def dynamic_smem_bytes(func: tirx.PrimFunc) -> int:
    """Bytes of dynamic shared memory a lowered kernel allocates (ptxas does not see them)."""
    total = 0

    def visit(node: tirx.AllocBuffer) -> None:
        nonlocal total
        if str(node.buffer.scope()) == "shared.dyn":
            total += static_bytes(node.buffer) or 0

    tvm_ffi.structural_walk(func.body, [(tirx.AllocBuffer, visit)], order="pre")
    return total


_RE_SIGNATURE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)\s*\{')


def kernel_arguments(source: str) -> dict[str, tuple[str, ...]]:
    """The buffer behind each parameter of each kernel in TVM's CUDA C (`float* __restrict__ X_ptr` -> "X").

    With the launch configurations and the workspace sizes this is what running the PTX needs without TVM.
    A scalar parameter (only dynamic shapes have them) is named with a leading "$".
    """
    out: dict[str, tuple[str, ...]] = {}
    for name, params in _RE_SIGNATURE.findall(source):
        names = []
        for p in filter(None, (s.strip() for s in params.split(","))):
            ident = p.split()[-1]
            names.append(ident.removesuffix("_ptr") if "*" in p else f"${ident}")
        out[name] = tuple(names)
    return out


def workspace_bytes(func: tirx.PrimFunc) -> dict[str, int]:
    """Bytes of each global-memory buffer a scheduled PrimFunc allocates; TVM's host passes them to the kernels."""
    found: dict[str, int] = {}

    def visit(block: s_tir.SBlock) -> None:
        for buf in block.alloc_buffers:
            size = static_bytes(buf) if str(buf.scope()) == "global" else None
            if size is not None:
                found[buf.name] = size

    tvm_ffi.structural_walk(func, [(s_tir.SBlock, visit)], order="pre")
    return found


# ---------------------------------------------------------------------------------------------------
# nvcc / ptxas with a cache keyed by the source hash

_cache: OrderedDict[str, str] = OrderedDict()
_cache_lock = threading.Lock()
_stats = {"hits": 0, "misses": 0}


def _cache_key(kind: str, text: str, arch: str, flags: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for part in (kind, arch, " ".join(flags), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _cached(key: str, config: CudaBuildConfig, produce) -> str:
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            _stats["hits"] += 1
            return _cache[key]
    path = os.path.join(config.cache_dir, key) if config.cache_dir else None
    hit = bool(path and os.path.exists(path))
    if hit:
        with open(path, encoding="utf-8") as f:  # type: ignore[arg-type]
            value = f.read()
    else:
        value = produce()
        if path:
            os.makedirs(config.cache_dir, exist_ok=True)  # type: ignore[arg-type]
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(value)
            os.replace(tmp, path)
    with _cache_lock:
        _stats["hits" if hit else "misses"] += 1
        _cache[key] = value
        while len(_cache) > config.cache_entries:
            _cache.popitem(last=False)
    return value


def cache_stats() -> dict[str, int]:
    """Hits and misses of the nvcc/ptxas cache in this process."""
    with _cache_lock:
        return {**_stats, "entries": len(_cache)}


def clear_cache() -> None:
    """Forget the in-memory nvcc/ptxas results (the on-disk cache, if any, stays)."""
    with _cache_lock:
        _cache.clear()
        _stats.update(hits=0, misses=0)


def _run(stage: str, cmd: list[str], config: CudaBuildConfig) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=config.timeout_s, check=False)
    except FileNotFoundError as err:
        raise CudaBuildError(stage, f"{cmd[0]!r} not found on PATH") from err
    except subprocess.TimeoutExpired as err:
        raise CudaBuildError(stage, f"timed out after {config.timeout_s} s") from err
    if proc.returncode != 0:
        raise CudaBuildError(stage, f"{os.path.basename(cmd[0])} exited with {proc.returncode}",
                             (proc.stderr + proc.stdout).strip())
    return proc


def compile_ptx(source: str, arch: str, config: CudaBuildConfig | None = None) -> str:
    """PTX of CUDA C `source` for `arch` (e.g. "sm_90") from nvcc; cached by source hash."""
    config = config or CudaBuildConfig()

    def produce() -> str:
        with tempfile.TemporaryDirectory(prefix="drytune_nvcc_") as tmp:
            src, out = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.ptx")
            with open(src, "w", encoding="utf-8") as f:
                f.write(source)
            _run("nvcc", [config.nvcc, "-ptx", f"-arch={arch}", *config.nvcc_flags, "-o", out, src], config)
            with open(out, encoding="utf-8") as f:
                return f.read()

    return _cached(_cache_key("ptx", source, arch, config.nvcc_flags), config, produce)


def _ptxas(ptx: str, arch: str, out: str, config: CudaBuildConfig) -> str:
    """Assemble `ptx` to the cubin `out` with `ptxas -v`; returns the verbose report."""
    with tempfile.TemporaryDirectory(prefix="drytune_ptxas_") as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w", encoding="utf-8") as f:
            f.write(ptx)
        proc = _run("ptxas", [config.ptxas, "-v", f"-arch={arch}", *config.ptxas_flags, "-o", out, src], config)
        return proc.stderr + proc.stdout


def ptxas_log(ptx: str, arch: str, config: CudaBuildConfig | None = None) -> str:
    """The verbose report of `ptxas -v` on `ptx`; cached by PTX hash."""
    config = config or CudaBuildConfig()

    def produce() -> str:
        with tempfile.TemporaryDirectory(prefix="drytune_cubin_") as tmp:
            return _ptxas(ptx, arch, os.path.join(tmp, "k.cubin"), config)

    return _cached(_cache_key("ptxas", ptx, arch, config.ptxas_flags), config, produce)


def assemble_cubin(ptx: str, arch: str, path: str, config: CudaBuildConfig | None = None) -> None:
    """Write the cubin of `ptx` to `path` with the same ptxas flags as the resource report (to run it elsewhere)."""
    _ptxas(ptx, arch, path, config or CudaBuildConfig())


_RE_ENTRY = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_RE_FIELDS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "smem_bytes": re.compile(r"(\d+) bytes smem"),
    "cmem_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
}


def parse_ptxas_log(text: str) -> dict[str, KernelResources]:
    """Per-kernel resources from a `ptxas -v` report (lines belong to the last named function)."""
    values: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _RE_ENTRY.search(line)
        if m:
            current = m.group(1)
            values.setdefault(current, {})
        if current is None:
            continue
        for name, rx in _RE_FIELDS.items():
            hit = rx.search(line)
            if hit:
                values[current][name] = int(hit.group(1))
    return {k: KernelResources(**v) for k, v in values.items() if "registers" in v}


def ptxas_resources(ptx: str, arch: str, config: CudaBuildConfig | None = None) -> dict[str, KernelResources]:
    """Registers, shared memory, spills and barriers of each kernel in `ptx`."""
    return parse_ptxas_log(ptxas_log(ptx, arch, config))


# ---------------------------------------------------------------------------------------------------


def build_cuda(mod: tvm.IRModule, target: str | dict | Target = "cuda-sm90",
               config: CudaBuildConfig | None = None) -> CudaBuild:
    """Build a scheduled, thread-bound module down to PTX and ptxas resources; raises `CudaBuildError`."""
    config = config or CudaBuildConfig()
    arch = target_arch(target)
    source = cuda_source(mod, target)
    ptx = compile_ptx(source, arch, config)
    report = ptxas_log(ptx, arch, config)
    resources = parse_ptxas_log(report)
    launch = launch_configs(mod)
    missing = [lc.kernel for lc in launch if lc.kernel not in resources]
    if missing:
        log.warning("kernels %s of the launch configuration are not in the ptxas report (%s)",
                    missing, sorted(resources))
    device = lower_device(mod, target)
    workspace: dict[str, int] = {}
    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            workspace.update(workspace_bytes(func))
    return CudaBuild(arch=arch, cuda_source=source, ptx=ptx, resources=resources, launch=launch,
                     device_funcs=device, ptxas_log=report,
                     dynamic_smem={name: dynamic_smem_bytes(f) for name, f in device.items()},
                     kernel_args=kernel_arguments(source), workspace=workspace)
