"""`StaticCostModel`: estimated latency in seconds from static features, never running a candidate.

CPU: seconds = (sum_i a_i * f_i) / frequency, with the per-core features of `cpu_features` and the
coefficients a_i of the target's architecture read from a data file (`coefficients/*.json`), where each
file states its origin. The pre-score is the TIR register-tile kernel model (`kernel`) plus parallel-region
entries: no code generation, no isl. NVIDIA: with a calibration for the GPU generation (measured on such a GPU),
cycles = sum_i a_i * t_i over the `GPU_TERM_NAMES` terms of every kernel; without one, per kernel the largest of
issue, latency and shared-memory work spread over the SMs and resident warps, times the waves, plus DRAM traffic.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import tvm

from ..annotate.candidate import Candidate
from ..errors import InvalidCandidateError
from ..prepack import kernel_as_run
from ..target import HardwareSpec, resolve_target
from ..task import Task
from .base import CostModel
from .cpu_features import (
    ADDED_FEATURES,
    FEATURE_NAMES,
    CPUFeatureExtractor,
    CPUFeatures,
    hide_l1_refills,
    parallel_speedup,
)
from .kernel import KernelConfig, kernel_cycles
from .looptree import LoopTree

log = logging.getLogger(__name__)

COEFF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coefficients")
L1_HIDDEN_KEY = "l1_lines_hidden_per_kernel_cycle"  # coefficients-file entry read by `Coefficients.l1_hidden_per_cycle`
KERNEL_KEY = "kernel"  # coefficients-file entry read by `Coefficients.kernel_settings`


@dataclass(frozen=True)
class Coefficients:
    """Per-feature weights (cycles per unit of feature) for one architecture, with their origin."""

    arch: str
    values: dict[str, float]
    origin: str
    extra: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str, names: Sequence[str] = FEATURE_NAMES) -> Coefficients:
        """Read a coefficients file; `names` are the features it must weigh (CPU features or GPU terms)."""
        with open(path) as f:
            data = json.load(f)
        missing = [n for n in names if n not in data["coefficients"] and n not in ADDED_FEATURES]
        if missing:
            raise ValueError(f"{path}: coefficients missing for features {missing}")
        values = dict.fromkeys(ADDED_FEATURES & set(names), 0.0)
        values |= {k: float(v) for k, v in data["coefficients"].items()}
        return cls(data["arch"], values, data["origin"],
                   {k: v for k, v in data.items() if k not in ("arch", "coefficients", "origin")})

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"arch": self.arch, "origin": self.origin, "coefficients": self.values, **self.extra}, f,
                      indent=1)

    def vector(self, names: Sequence[str] = FEATURE_NAMES) -> np.ndarray:
        return np.array([self.values[n] for n in names])

    @property
    def l1_hidden_per_cycle(self) -> float:
        """L1 refills per kernel cycle that the file's fit took as hidden behind the kernel (`hide_l1_refills`)."""
        return float(self.extra.get(L1_HIDDEN_KEY, 0.0))

    @staticmethod
    def l1_hidden_entry(rate: float) -> dict[str, float]:
        """The extra entry that records `rate` in a file (none for 0: such a file charges every refill)."""
        return {L1_HIDDEN_KEY: rate} if rate else {}

    @property
    def kernel_settings(self) -> dict[str, float]:
        """`KernelConfig` fields the file's fit was made with (a machine's measured rule, e.g. the cycles of an
        accumulator reload from L2); they change feature values, so a model loading the file applies them."""
        settings = dict(self.extra.get(KERNEL_KEY, {}))
        unknown = sorted(set(settings) - {f.name for f in fields(KernelConfig)})
        if unknown:
            raise ValueError(f"coefficients file sets unknown kernel-model fields {unknown}")
        return settings

    @staticmethod
    def kernel_entry(settings: Mapping[str, float] | None) -> dict[str, dict[str, float]]:
        """The extra entry that records kernel-model `settings` in a file (none when there are none)."""
        return {KERNEL_KEY: dict(settings)} if settings else {}


def coefficients_file_name(spec: HardwareSpec, cpu: str | None = None) -> str:
    """File name of a calibration for one CPU model (`x86-znver3-calibrated.json`) or, without one, the arch."""
    return f"{spec.arch}-{cpu}-calibrated.json" if cpu else f"{spec.arch}-calibrated.json"


# LLVM CPU models whose cores are those of a calibrated one: LLVM builds Sapphire Rapids and Emerald Rapids code with
# the same features and scheduling model, and both are Golden Cove-class cores with 2 MiB of L2. Granite Rapids-class
# cores have their own file since session 57, the same Emerald Rapids rows fitted hiding half an L1 refill per kernel
# cycle (its origin says why); before it they took the Emerald Rapids file, which on one picked a 1.2x faster GEMM and
# a 1.4x faster BERT-base than x86-calibrated.json (session 53) and a 1.3x faster GEMM than a file fitted on 1800
# candidates measured there (session 54; benchmarks/results/coefficients_graniterapids_fit_s53.json)
_SAME_CORES = {"sapphirerapids": "emeraldrapids"}


def calibration_cpu(spec: HardwareSpec, cpu: str | None) -> str | None:
    """The CPU model whose calibration applies: the spec's `core` where the host's LLVM name is a hypervisor's model
    number, else `cpu` (the target's LLVM CPU)."""
    return spec.core or cpu or None


def default_coefficients_path(spec: HardwareSpec, cpu: str | None = None) -> str:
    """The shipped file for the target: calibrated for its CPU model (the spec's `core` where the host's LLVM name is
    a hypervisor's model number; or one with the same cores), else for its architecture, else defaults.

    Calibrations are per CPU model because thread count, cache sizes and port counts change the weights.
    """
    cpu = calibration_cpu(spec, cpu)
    cpus = [c for c in (cpu, _SAME_CORES.get(cpu or "")) if c]
    names = [coefficients_file_name(spec, c) for c in cpus] + [coefficients_file_name(spec),
                                                               f"{spec.arch}-default.json"]
    for name in names:
        path = os.path.join(COEFF_DIR, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no coefficients file for architecture {spec.arch!r} in {COEFF_DIR}")


def _gpu_calibration(path: str) -> Coefficients:
    """A GPU calibration file, read again only when it changes (the tuner asks about pre-score weights each round)."""
    return _load_gpu_calibration(path, os.path.getmtime(path))


@functools.lru_cache(maxsize=8)
def _load_gpu_calibration(path: str, _mtime: float) -> Coefficients:
    return Coefficients.load(path, GPU_TERM_NAMES)


def gpu_coefficients_path(spec: HardwareSpec) -> str | None:
    """The shipped calibration of a GPU generation (`nvidia-sm90-calibrated.json`), or None."""
    path = os.path.join(COEFF_DIR, coefficients_file_name(spec, f"sm{spec.sm_version}"))
    return path if os.path.exists(path) else None


def prescore_cycles(tree: LoopTree, spec: HardwareSpec, kernel: KernelConfig | None = None) -> float:
    """A TIR-only estimate in cycles: the register-tile kernel model per core plus parallel-region entries.

    No code generation and no isl: the kernel model's execution counts come from the TIR and its body
    costs from the vector lanes, unrolling, accumulator chains and loads of each statement. It does not
    depend on the coefficients file, so a calibration never changes which candidates it filters out.
    """
    kernel = kernel or KernelConfig.for_spec(spec)
    _, launches = parallel_speedup(tree, spec.cores)
    return kernel_cycles(tree, spec, kernel).cycles + kernel.launch_cycles * launches


MAX_LOCAL_BYTES = 512 * 1024  # CUDA's local memory per thread (stack frame); a larger kernel does not launch

# The calibrated GPU score is a weighted sum of these per-kernel terms (summed over a candidate's kernels):
# issue and shared-memory work of the busiest SM, global bytes moved per SM (at 64 B/cycle), launches, and the
# dependent latency (and the part of it loads leave exposed) of one thread per wave, hidden by resident warps.
GPU_TERM_NAMES = ("issue", "shared", "load_bytes", "store_bytes", "launch", "latency", "exposed_latency")


def launchable(k, spec: HardwareSpec) -> bool:
    """Whether a kernel's resources allow a launch at all (a block fits on an SM, the stack fits local memory)."""
    return k.occupancy > 0 and k.threads_per_block <= spec.max_threads_per_block and k.stack_bytes <= MAX_LOCAL_BYTES


def gpu_terms(features: Sequence, spec: HardwareSpec) -> np.ndarray | None:
    """The `GPU_TERM_NAMES` terms of a CUDA program from its kernels' features; None if a kernel cannot launch."""
    total = np.zeros(len(GPU_TERM_NAMES))
    for k in features:
        if not launchable(k, spec):
            return None
        warps = math.ceil(k.threads_per_block / spec.warp_size)
        per_sm = math.ceil(k.blocks / spec.sm_count)  # blocks the busiest SM runs over the whole launch
        resident = min(max(1, k.blocks_per_sm), per_sm) * warps
        hiding = max(1.0, resident / 4.0)  # four warp schedulers per SM
        waves = max(1.0, math.ceil(k.waves))
        total += (k.issue_cycles * warps * per_sm / 4.0, k.shared_ops_adjusted * warps * per_sm / 4.0,
                  k.global_load_bytes * k.threads / (spec.sm_count * 64.0),
                  k.global_store_bytes * k.threads / (spec.sm_count * 64.0), 1.0,
                  k.work_cycles / hiding * waves, k.exposed_load_cycles / hiding * waves)
    return total


def gpu_cycles(features: Sequence, spec: HardwareSpec) -> float:
    """Cycles of a CUDA program from its kernels' PTX/ptxas features (uncalibrated, see module doc)."""
    total = 0.0
    for k in features:
        if not launchable(k, spec):
            return math.inf
        warps = math.ceil(k.threads_per_block / spec.warp_size)
        resident = max(1, k.blocks_per_sm) * warps  # warps one SM interleaves
        issue = k.issue_cycles * warps * max(1, k.blocks_per_sm) / 4.0  # four schedulers per SM
        latency = (k.work_cycles + k.exposed_load_cycles) / max(1.0, resident / 4.0)
        shared = k.shared_ops_adjusted * warps * max(1, k.blocks_per_sm) / 4.0
        dram = (k.global_load_bytes + k.global_store_bytes) * k.threads / (spec.sm_count * 64.0)
        per_wave = max(issue, latency, shared)
        total += per_wave * max(1.0, math.ceil(k.waves)) + dram / max(1.0, k.waves)
    return total


class StaticCostModel(CostModel):
    """Tuna-style static cost model for CPU (x86, AArch64) and NVIDIA targets; predicts seconds."""

    def __init__(self, target: str | dict | tvm.target.Target, coefficients: str | Coefficients | None = None,
                 spec: HardwareSpec | None = None, kernel_overrides: Mapping[str, Any] | None = None):
        """`kernel_overrides`: `KernelConfig` fields replaced in the spec's defaults (ablations, A/B runs)."""
        self.target, self.spec = resolve_target(target, spec)
        self.is_gpu = self.spec.is_gpu
        self.failures: Counter[str] = Counter()
        if self.is_gpu:
            if isinstance(coefficients, Coefficients):
                self.coefficients = coefficients
            else:  # the uncalibrated formula when no calibration for this GPU generation ships
                path = coefficients or gpu_coefficients_path(self.spec)
                self.coefficients = _gpu_calibration(path) if path else None
            self._cpu = None
        else:
            if not isinstance(coefficients, Coefficients):
                cpu = str(dict(self.target.attrs).get("mcpu", "")) or None
                coefficients = Coefficients.load(coefficients or default_coefficients_path(self.spec, cpu))
            self.coefficients = coefficients
        # the calibration's kernel-model settings first (its features were computed with them), then the caller's
        settings = {} if self.coefficients is None else self.coefficients.kernel_settings
        self.kernel = replace(KernelConfig.for_spec(self.spec), **(settings | dict(kernel_overrides or {})))
        if not self.is_gpu:
            self._cpu = CPUFeatureExtractor(self.target, self.spec, self.kernel)

    @classmethod
    def prescore_is_cheap(cls, target: str | dict | tvm.target.Target) -> bool:
        """The pre-score skips code generation on CPU targets, and on CUDA when the GPU generation's calibration
        has pre-score weights (TIR-only terms); otherwise it is the full score."""
        spec = resolve_target(target)[1]
        if not spec.is_gpu:
            return True
        path = gpu_coefficients_path(spec)
        return path is not None and "prescore" in _gpu_calibration(path).extra

    def features(self, task: Task, candidate: Candidate) -> CPUFeatures:
        """CPU features of one candidate (raises on a candidate that cannot be built or analysed)."""
        if self._cpu is None:
            raise ValueError("features() is for CPU targets; use gpu_features for CUDA")
        return self._cpu.extract(kernel_as_run(candidate.to_mod()))

    def features_of_module(self, mod: tvm.IRModule, asm: str | None = None) -> CPUFeatures:
        """CPU features of an already scheduled module (one scheduled elsewhere, e.g. by MetaSchedule), as the built
        network runs it: weights packed ahead of time are taken packed. `asm`: its assembly from `assembly_of_module`
        (several models with different kernel settings can then share one compilation)."""
        if self._cpu is None:
            raise ValueError("features_of_module() is for CPU targets; use gpu_features for CUDA")
        return self._cpu.extract(kernel_as_run(mod), asm)

    def assembly_of_module(self, mod: tvm.IRModule) -> str:
        """The assembly that `features_of_module` reads (CPU targets)."""
        if self._cpu is None:
            raise ValueError("assembly_of_module() is for CPU targets")
        return self._cpu.assembly(kernel_as_run(mod))

    def seconds_from_features(self, feats: CPUFeatures) -> float:
        values = hide_l1_refills(feats.values, self.coefficients.l1_hidden_per_cycle)
        cycles = float(np.dot(self.coefficients.vector(), values))
        return cycles / (self.spec.freq_ghz * 1e9)

    def seconds_from_gpu_features(self, feats: Sequence) -> float:
        """Seconds of a CUDA program from its kernels' features: calibrated terms if a file ships, else the formula."""
        if self.coefficients is None:
            cycles = gpu_cycles(feats, self.spec)
        else:
            terms = gpu_terms(feats, self.spec)
            cycles = math.inf if terms is None else float(self.coefficients.vector(GPU_TERM_NAMES) @ terms)
        return cycles / (self.spec.freq_ghz * 1e9)

    def seconds_of_module(self, mod: tvm.IRModule) -> float:
        """Predicted seconds of an already scheduled module (a candidate's, or one scheduled elsewhere, e.g. by
        MetaSchedule); raises when it cannot be built or analysed. Weights packed at build time are not counted."""
        mod = kernel_as_run(mod)
        if self.is_gpu:
            from .gpu_features import extract_gpu_features

            return self.seconds_from_gpu_features(extract_gpu_features(mod, self.target, self.spec))
        return self.seconds_from_features(self._cpu.extract(mod))

    def _predict_one(self, task: Task, cand: Candidate) -> float:
        try:
            return self.seconds_of_module(cand.to_mod())
        except InvalidCandidateError as err:
            self._fail("replay", err)
        except Exception as err:  # noqa: BLE001 - any build/analysis failure is an invalid score, counted
            self._fail(type(err).__name__, err)
        return math.inf

    def _fail(self, kind: str, err: BaseException) -> None:
        self.failures[kind] += 1
        text = str(err).strip()
        log.info("candidate scored invalid (%s): %s", kind, text.splitlines()[-1][:200] if text else kind)

    def predict(self, task: Task, candidates: Sequence[Candidate]) -> np.ndarray:
        return np.array([self._predict_one(task, c) for c in candidates], dtype=np.float64)

    def prescore(self, task: Task, candidates: Sequence[Candidate]) -> np.ndarray:
        """A cheap estimate without code generation: the TIR kernel model on CPU; on CUDA the TIR-only GPU terms
        when the calibration weighs them, else the full score."""
        if self.is_gpu:
            gpu_weights = self.coefficients.extra.get("prescore") if self.coefficients is not None else None
            if gpu_weights is None:
                return self.predict(task, candidates)
            from .gpu_prescore import PRESCORE_TERM_NAMES, kernel_work, prescore_terms

            weights = np.array([gpu_weights[n] for n in PRESCORE_TERM_NAMES])

            def cycles_of(mod: tvm.IRModule) -> float:
                terms = prescore_terms(kernel_work(mod, self.target), self.spec)
                return math.inf if terms is None else float(weights @ terms)
        else:
            def cycles_of(mod: tvm.IRModule) -> float:
                return prescore_cycles(LoopTree.from_mod(mod), self.spec, self.kernel)
        out = []
        for cand in candidates:
            try:
                out.append(cycles_of(kernel_as_run(cand.to_mod())) / (self.spec.freq_ghz * 1e9))
            except Exception as err:  # noqa: BLE001 - counted like a full-score failure
                self._fail("prescore:" + type(err).__name__, err)
                out.append(math.inf)
        return np.array(out, dtype=np.float64)
