"""Targets: short names and TVM target dicts, each paired with the `HardwareSpec` the cost model needs."""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm.target import Target

from .threads import usable_cores


@dataclass(frozen=True)
class HardwareSpec:
    """What the sketch rules, annotations and cost model need to know about a machine.

    CPU fields are used for CPU targets, GPU fields for CUDA targets; both have defaults so that a spec
    can be built from a plain dict (e.g. a calibration file).
    """

    kind: str  # "cpu" or "gpu"
    arch: str  # "x86", "aarch64" or "nvidia"
    name: str = ""
    cores: int = 1
    vector_bits: int = 128
    freq_ghz: float = 2.5
    fma_units: int = 2  # vector FMA pipes per core
    datapath_bits: int = 0  # width of the FP and load pipes; 0: vector_bits (narrower: wide ops take several slots)
    issue_width: int = 4  # instructions issued per cycle (list scheduler)
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024
    l3_bytes: int = 8 * 1024 * 1024
    line_bytes: int = 64
    l1_ways: int = 0  # set associativity; 0: treated as fully associative (no set conflicts)
    l2_ways: int = 0
    # LLVM's cost tables for this CPU price vector gathers low, so its loop vectorizer gathers a strided load whose
    # copies leave elements unread where for other CPUs it loads the rows whole and shuffles (`_GATHERING_CPUS`)
    llvm_gathers: bool = False
    # cycles per lane a gather instruction adds beside other work where gathers are microcoded and stall the rest
    # (`_SERIAL_GATHER_LANE_CYCLES`, `KernelConfig.gather_serial_lane_cycles`); 0: not measured or not so
    gather_serial_lane_cycles: float = 0.0
    # width of the vectors LLVM's own loop and SLP vectorizers build, where its tuning for the CPU prefers narrower
    # ones than the registers (`_LLVM_256_BIT_CPUS`); TVM's explicit vectors keep the full width. 0: vector_bits
    llvm_vector_bits: int = 0
    # the CPU whose calibration fits these cores when it is not the target's LLVM CPU: a virtual machine whose
    # hypervisor reports a server core with a client CPU model (`_MISREPORTED_CORES`); "" for the target's own
    core: str = ""
    # GPU
    sm_count: int = 0
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    smem_per_sm: int = 0
    smem_per_block: int = 49152
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    smem_banks: int = 32
    sm_version: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def vector_lanes(self, dtype_bits: int = 32) -> int:
        """Number of elements of `dtype_bits` in one SIMD register."""
        return max(1, self.vector_bits // dtype_bits)

    @property
    def pump(self) -> int:
        """Pipe slots one full-width vector operation takes (2 where 512-bit ops run on 256-bit pipes)."""
        return max(1, self.vector_bits // self.datapath_bits) if self.datapath_bits else 1

    def peak_flops(self) -> float:
        """Theoretical fp32 FMA peak of the whole machine (flop/s) from the spec alone."""
        if self.is_gpu:
            return 2.0 * 128 * self.sm_count * self.freq_ghz * 1e9
        return 2.0 * self.vector_lanes(32) * self.fma_units * self.cores * self.freq_ghz * 1e9 / self.pump

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# CPUs whose FP and load pipes are narrower than their widest vectors, by LLVM CPU name: Zen 4 runs each
# 512-bit operation on its 256-bit pipes for two cycles (AMD's Zen 4 software optimization guide, 57647).
# Server Zen 5 (EPYC, LLVM `znver5`) has 512-bit pipes: 530 GFLOP/s measured on 2 cores here against Zen 4's 234.
_DATAPATH_BITS = {"znver4": 256}
# CPUs for which LLVM's vectorizer (22, in apache-tvm 0.27) emits vgather for a gapped stride-2 load
# (tests/test_costmodel_kernel.py checks znver5 against skylake-avx512; znver4 seen the same way, znver3 and
# sapphirerapids not)
_GATHERING_CPUS = frozenset({"znver4", "znver5"})
# Measured with benchmarks/serial_gathers.py (session 92, Zen 4): a vgatherqps of 8 lanes beside 24 independent zmm
# FMAs adds 0.67 cycles per lane, a 16-lane vgatherdps 0.73. Other cores are not measured.
_SERIAL_GATHER_LANE_CYCLES = {"znver4": 0.7}
# AVX-512 CPUs whose LLVM tuning prefers 256-bit vectors: its loop and SLP vectorizers build ymm operations there, while
# TVM's vectors of 16 floats still compile to zmm ones (tests/test_costmodel_kernel.py checks a few in the assembly;
# knl, znver4 and znver5 vectorize at 512 bits)
_LLVM_256_BIT_CPUS = frozenset({"skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                                "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
                                "graniterapids", "graniterapids-d", "x86-64-v4"})


# Hypervisors can hand a guest another CPU model number than the silicon's, and LLVM names the host by it. A host
# named (LLVM CPU) whose /proc/cpuinfo has (a flag that CPU never had) has the cores of (CPU). Seen in session 53: a
# 2-core Xeon guest with AMX, AVX512-FP16, 2 MiB of L2 per core and 480 MiB of L3 (Granite Rapids sizes; Emerald
# Rapids has at most 320) reported family 6 model 167, which LLVM names rocketlake (a desktop core without AMX).
_MISREPORTED_CORES: tuple[tuple[str, str, str], ...] = (
    ("rocketlake", "amx_tile", "graniterapids"),
)


def _cpu_flags() -> frozenset[str]:
    """The host's CPU flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def host_core(cpu: str, flags: frozenset[str]) -> str:
    """The CPU whose cores the host has when LLVM's name `cpu` is a hypervisor's model number (`_MISREPORTED_CORES`),
    else ""."""
    return next((core for name, flag, core in _MISREPORTED_CORES if name == cpu and flag in flags), "")


# Per-core data caches of CPUs named by LLVM, for targets that are not this host (whose sizes come from sysfs):
# (L1 bytes, L1 ways, L2 bytes, L2 ways) from the vendors' optimization guides. A CPU not listed keeps the base
# spec's sizes.
_CPU_CACHES: dict[str, tuple[int, int, int, int]] = {
    "znver3": (32 * 1024, 8, 512 * 1024, 8),
    "znver4": (32 * 1024, 8, 1024 * 1024, 8),
    "znver5": (48 * 1024, 12, 1024 * 1024, 16),
    "skylake-avx512": (32 * 1024, 8, 1024 * 1024, 16),
    "cascadelake": (32 * 1024, 8, 1024 * 1024, 16),
    "icelake-server": (48 * 1024, 12, 1280 * 1024, 20),
    "sapphirerapids": (48 * 1024, 12, 2048 * 1024, 16),
    "emeraldrapids": (48 * 1024, 12, 2048 * 1024, 16),
    "graniterapids": (48 * 1024, 12, 2048 * 1024, 16),
}


def _cpu_traits(cpu: str) -> dict[str, Any]:
    """The `HardwareSpec` fields that follow from the LLVM CPU name alone."""
    traits: dict[str, Any] = {"datapath_bits": _DATAPATH_BITS.get(cpu, 0), "llvm_gathers": cpu in _GATHERING_CPUS,
                              "gather_serial_lane_cycles": _SERIAL_GATHER_LANE_CYCLES.get(cpu, 0.0),
                              "llvm_vector_bits": 256 if cpu in _LLVM_256_BIT_CPUS else 0}
    if cpu in _CPU_CACHES:
        l1, l1_ways, l2, l2_ways = _CPU_CACHES[cpu]
        traits.update(l1_bytes=l1, l1_ways=l1_ways, l2_bytes=l2, l2_ways=l2_ways)
    return traits


def _cpu_cores() -> int:
    return usable_cores()


def _cache_value(level: int, default: int, field: str = "size") -> int:
    """Per-core data cache size (or `field`, e.g. ways_of_associativity) of `level` from sysfs, or `default`."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            path = os.path.join(base, entry)
            with open(os.path.join(path, "level")) as f:
                lvl = int(f.read())
            with open(os.path.join(path, "type")) as f:
                typ = f.read().strip()
            if lvl != level or typ == "Instruction":
                continue
            with open(os.path.join(path, field)) as f:
                text = f.read().strip()
            mult = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
            return int(text.rstrip("KM")) * mult
    except (OSError, ValueError):
        pass
    return default


@functools.lru_cache(maxsize=1)
def _host_spec() -> tuple[dict[str, Any], HardwareSpec]:
    cpu = str(tvm.target.codegen.llvm_get_system_cpu())
    triple = str(tvm.target.codegen.llvm_get_system_triple())
    cores = _cpu_cores()
    if triple.startswith("aarch64") or triple.startswith("arm64"):
        tdict = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": cpu, "num-cores": cores}
        spec = dataclasses.replace(_SPECS["aarch64"], cores=cores, name=f"host-{cpu}")
        return tdict, spec
    tdict = {"kind": "llvm", "mcpu": cpu, "num-cores": cores}
    features = [str(f) for f in tvm.target.codegen.llvm_get_cpu_features(Target(tdict))]
    base = _SPECS["x86-avx512"] if "avx512f" in features else _SPECS["x86-avx2"]
    spec = dataclasses.replace(
        base,
        cores=cores,
        name=f"host-{cpu}",
        core=host_core(cpu, _cpu_flags()),
        **_cpu_traits(cpu),
    )
    spec = dataclasses.replace(
        spec,
        l1_bytes=_cache_value(1, spec.l1_bytes),
        l2_bytes=_cache_value(2, spec.l2_bytes),
        l3_bytes=_cache_value(3, spec.l3_bytes),
        l1_ways=_cache_value(1, spec.l1_ways, "ways_of_associativity"),
        l2_ways=_cache_value(2, spec.l2_ways, "ways_of_associativity"),
    )
    return tdict, spec


# Documented specs of the short names. CPU numbers are per core; frequencies are nominal.
_SPECS: dict[str, HardwareSpec] = {
    "x86-avx512": HardwareSpec(
        kind="cpu", arch="x86", name="x86-avx512", cores=2, vector_bits=512, freq_ghz=2.6, fma_units=2,
        issue_width=6, l1_bytes=48 * 1024, l2_bytes=1024 * 1024, l3_bytes=32 * 1024 * 1024, l1_ways=12, l2_ways=16,
    ),
    "x86-avx2": HardwareSpec(
        kind="cpu", arch="x86", name="x86-avx2", cores=4, vector_bits=256, freq_ghz=3.0, fma_units=2,
        issue_width=4, l1_bytes=32 * 1024, l2_bytes=256 * 1024, l3_bytes=8 * 1024 * 1024, l1_ways=8, l2_ways=4,
    ),
    "aarch64": HardwareSpec(
        kind="cpu", arch="aarch64", name="aarch64-neon", cores=4, vector_bits=128, freq_ghz=2.5, fma_units=2,
        issue_width=4, l1_bytes=64 * 1024, l2_bytes=1024 * 1024, l3_bytes=8 * 1024 * 1024, l1_ways=4, l2_ways=8,
    ),
    # A100 (sm_80) and H100 SXM (sm_90) from NVIDIA's architecture whitepapers.
    "cuda-sm80": HardwareSpec(
        kind="gpu", arch="nvidia", name="cuda-sm80", freq_ghz=1.41, sm_count=108, regs_per_sm=65536,
        smem_per_sm=164 * 1024, smem_per_block=48 * 1024, max_threads_per_sm=2048, max_blocks_per_sm=32,
        l2_bytes=40 * 1024 * 1024, line_bytes=128, sm_version=80,
    ),
    "cuda-sm90": HardwareSpec(
        kind="gpu", arch="nvidia", name="cuda-sm90", freq_ghz=1.98, sm_count=132, regs_per_sm=65536,
        smem_per_sm=228 * 1024, smem_per_block=48 * 1024, max_threads_per_sm=2048, max_blocks_per_sm=32,
        l2_bytes=50 * 1024 * 1024, line_bytes=128, sm_version=90,
    ),
}

_TARGET_DICTS: dict[str, dict[str, Any]] = {
    "x86-avx512": {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "skylake-avx512", "num-cores": 2},
    "x86-avx2": {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell", "num-cores": 4},
    "aarch64": {
        "kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1", "mattr": ["+neon"],
        "num-cores": 4,
    },
    # max_threads_per_block / max_shared_memory_per_block: what MetaSchedule's GPU rules read
    "cuda-sm80": {"kind": "cuda", "arch": "sm_80", "max_num_threads": 1024, "thread_warp_size": 32,
                  "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152},
    "cuda-sm90": {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "thread_warp_size": 32,
                  "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152},
}

SHORT_NAMES = ("llvm", *_TARGET_DICTS)


def _spec_from_target(target: Target) -> HardwareSpec:
    """Best-effort spec for a target given as a dict rather than a short name."""
    kind = target.kind.name
    attrs = dict(target.attrs)
    if kind == "cuda":
        arch = str(attrs.get("arch", "sm_80"))
        base = _SPECS["cuda-sm90"] if arch >= "sm_90" else _SPECS["cuda-sm80"]
        return dataclasses.replace(base, max_threads_per_block=int(attrs.get("max_num_threads", 1024)))
    if kind != "llvm":
        raise ValueError(f"unsupported target kind {kind!r}: drytune supports 'llvm' (x86, aarch64) and 'cuda'")
    triple = str(attrs.get("mtriple", ""))
    cores = int(attrs.get("num-cores", _cpu_cores()))
    cpu = str(attrs.get("mcpu", ""))
    if cpu:  # LLVM would build an unknown CPU as `generic` with only a log line: a typo would tune for the wrong CPU
        on = triple or str(tvm.target.codegen.llvm_get_system_triple())
        if not tvm.target.codegen.llvm_is_valid_cpu(cpu, on):
            raise ValueError(f"LLVM knows no CPU {cpu!r} for {on}; give an LLVM CPU name such as znver4, "
                             "sapphirerapids or neoverse-n1")
    if triple.startswith("aarch64"):
        return dataclasses.replace(_SPECS["aarch64"], cores=cores)
    if not triple and "mcpu" not in attrs:
        return _host_spec()[1]
    features = [str(f) for f in tvm.target.codegen.llvm_get_cpu_features(target)]
    base = _SPECS["x86-avx512"] if "avx512f" in features else _SPECS["x86-avx2"]
    # the host's own target, given as a dict or `Target` (a Task's, a records file's): the host's spec, with the caches
    # read from sysfs and the cores it has also where LLVM's name for them is a hypervisor's model number
    host_tdict, host = _host_spec()
    is_host_cpu = not triple and cpu == host_tdict["mcpu"]
    if is_host_cpu and host.arch == "x86" and host.vector_bits == base.vector_bits:
        return dataclasses.replace(host, cores=cores)
    return dataclasses.replace(base, cores=cores, core=host.core if is_host_cpu else "", **_cpu_traits(cpu))


def resolve_target(target: str | dict | Target, spec: HardwareSpec | None = None) -> tuple[Target, HardwareSpec]:
    """Turn a short name, target dict or `Target` into a TVM target with host set, plus its spec.

    LLVM targets always carry `num-cores` (MetaSchedule requires it); CUDA targets get this machine's
    CPU as host so that they can be built without a GPU.
    """
    if isinstance(target, str):
        if target == "llvm":
            tdict, auto_spec = _host_spec()
        elif target in _TARGET_DICTS:
            tdict, auto_spec = dict(_TARGET_DICTS[target]), _SPECS[target]
        else:
            raise ValueError(
                f"unknown target name {target!r}; use one of {', '.join(SHORT_NAMES)} or a TVM target dict "
                "such as {'kind': 'llvm', 'mcpu': 'znver4'}"
            )
        tvm_target = Target(tdict)
    else:
        tvm_target = target if isinstance(target, Target) else Target(dict(target))
        if tvm_target.kind.name == "llvm" and "num-cores" not in dict(tvm_target.attrs):
            tdict = dict(tvm_target.export())
            tdict.pop("host", None)
            tdict["num-cores"] = _cpu_cores()
            tvm_target = Target(tdict)
        auto_spec = _spec_from_target(tvm_target)
    if tvm_target.kind.name == "cuda" and tvm_target.host is None:
        tvm_target = tvm_target.with_host(Target(_host_spec()[0]))
    return tvm_target, spec or auto_spec


def spec_for(target: str | dict | Target) -> HardwareSpec:
    """The `HardwareSpec` of a target (see `resolve_target`)."""
    return resolve_target(target)[1]


def target_identity(target: Target) -> str:
    """What makes code for one target wrong for another: kind, CPU/GPU architecture and triple."""
    attrs = dict(target.attrs)
    parts = [target.kind.name] + [f"{k}={attrs[k]}" for k in ("mcpu", "arch", "mtriple") if attrs.get(k)]
    return " ".join(parts)
