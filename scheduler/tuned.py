"""`TunedNetwork`: what `tune_network` hands back: run it, export it, read its report."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tvm.target import Target

from .build import BuiltNetwork, run_executable
from .task_scheduler import TaskState


@dataclass
class TunedNetwork:
    """A built, checked network with the tasks and tuning state it came from."""

    network: object  # drytune.network.Network
    target: Target
    tasks: list
    skipped: list
    states: list[TaskState]
    built: BuiltNetwork
    work_dir: str
    # this run's rounds (propose/prescore/predict) and, with verify_top_k, the measuring of the best (verify)
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def check(self) -> str:
        return self.built.check

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run the network on this CPU: numpy arrays in (in the model's input order), a list of arrays out."""
        if self.target.kind.name != "llvm":
            raise RuntimeError(f"this network is built for {self.target.kind.name}; export it and load it there")
        return run_executable(self.built.executable, inputs)

    def time(self, inputs: Sequence[np.ndarray] | None = None, *, number: int = 5, repeat: int = 3) -> float:
        """Median measured seconds of one run on this CPU."""
        import tvm
        from tvm import relax

        from ..network import random_inputs

        inputs = list(inputs) if inputs is not None else random_inputs(self.network, seed=0)
        vm = relax.VirtualMachine(self.built.executable, tvm.cpu())
        args = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in inputs]
        res = vm.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat)(*args)
        return float(np.median(res.results))

    def export(self, path: str | os.PathLike) -> str:
        """Write a shared library that `tvm.runtime.load_module` + `relax.VirtualMachine` run in a fresh process."""
        path = os.fspath(path)
        self.built.executable.export_library(path)
        return path

    def report(self):
        """The per-task table of this run's work directory (print it; `.plot(png)` draws the tuning curve)."""
        from .report import load_report

        return load_report(self.work_dir)
