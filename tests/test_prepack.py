"""Network weights packed once at build time: the mark, the cost model, the timer and the build, with real TVM."""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from drytune.annotate.candidate import Candidate
from drytune.constfold import fold_copies_numpy
from drytune.costmodel.model import StaticCostModel
from drytune.extract import extract_tasks, fuse
from drytune.measure import measure
from drytune.network import load_network
from drytune.prepack import LAYOUT_FREE_ATTR, has_weight_packing, kernel_as_run
from drytune.records import Record, RecordStore, candidate_from_trace
from drytune.scheduler.budget import Budget, TaskBudget
from drytune.scheduler.build import Choice, build_checked, compile_module, run_executable, scheduled_module
from drytune.scheduler.config import NetworkTuneConfig
from drytune.scheduler.network_tuner import NetworkTuner
from drytune.sketch.config import SpaceConfig
from drytune.sketch.steps import pack_steps
from drytune.space import SearchSpace
from drytune.target import resolve_target
from drytune.task import Task

torch = pytest.importorskip("torch")

TARGET = resolve_target("llvm")[0]


@functools.cache
def _linear():
    """A dense layer with constant weights (16 x 64 input, 64 -> 128): network, torch model, input, its task."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 128).eval()
    x = torch.randn(16, 64)
    net = load_network(model, (x,), name="linear")
    fused = fuse(net.mod, TARGET)
    tasks = extract_tasks(fused, TARGET)
    (dense,) = [nt for nt in tasks if nt.kind == "matmul"]
    return net, fused, tasks, dense, model, x


@functools.cache
def _conv():
    """A 3 x 3 convolution with constant weights (32 -> 64 channels, 14 x 14, channels-last; a 72-KiB weight) and a
    depthwise one after it (2.3 KiB): network, fused module, tasks, the first one's task, torch model, input."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(64, 64, 3, padding=1, groups=64)).eval()
    x = torch.randn(1, 32, 14, 14)
    net = load_network(model, (x,), name="conv")
    fused = fuse(net.mod, TARGET, layout="NHWC")
    tasks = extract_tasks(fused, TARGET)
    (conv,) = [nt for nt in tasks if nt.kind == "conv2d" and _weight_shape(nt) == (3, 3, 32, 64)]
    return net, fused, tasks, conv, model, x


def _weight_shape(nt) -> tuple[int, ...]:
    return tuple(int(d) for d in nt.task.func.params[1].shape)


def _packed(task: Task) -> Candidate:
    """A sampled candidate of `task` that packs the weight."""
    for cand in SearchSpace(task).sample(200, seed=1):
        if has_weight_packing(cand.to_mod()):
            return cand
    raise AssertionError("no sampled candidate packs the weight")


def _unmarked(task: Task) -> Task:
    """The same program without the constant-parameter mark (as a single operator is tuned)."""
    return Task.from_prim_func(task.func.without_attr(LAYOUT_FREE_ATTR), task.target, name=task.name, spec=task.spec)


def test_fuse_marks_the_constant_weight() -> None:
    net, fused, _, dense, _, _ = _linear()
    shapes = [tuple(int(s) for s in p.shape) for p in dense.task.func.params]
    marked = [int(i) for i in dense.task.func.attrs[LAYOUT_FREE_ATTR]]
    assert shapes.index((64, 128)) in marked and shapes.index((128,)) in marked  # weight and bias
    assert shapes.index((16, 64)) not in marked  # the input
    plain = fuse(net.mod, TARGET, prepack_weights=False)
    assert all(LAYOUT_FREE_ATTR not in (f.attrs or {}) for _, f in plain.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc))
    # the mark keeps the functions' names (task names that budget files refer to)
    assert {gv.name_hint for gv in fused.functions} == {gv.name_hint for gv in plain.functions}


def test_packing_a_weight_is_left_out_of_the_kernel_as_run() -> None:
    dense = _linear()[3]
    cand = _packed(dense.task)
    as_run = kernel_as_run(cand.to_mod())
    assert not has_weight_packing(as_run)
    shapes = [tuple(int(s) for s in p.shape) for p in as_run["main"].params]
    assert (64, 128) not in shapes and any(len(s) == 3 and int(np.prod(s)) == 64 * 128 for s in shapes)
    # the same schedule of the same program without the mark copies the weight on every call
    same = Candidate(_unmarked(dense.task), cand.sketch, cand.decisions)
    assert not has_weight_packing(same.to_mod())
    model = StaticCostModel(TARGET)
    packed_once, packed_per_call = model.predict(dense.task, [cand])[0], model.predict(same.task, [same])[0]
    assert np.isfinite(packed_once) and packed_once < packed_per_call


def test_measure_checks_the_whole_program_and_times_the_kernel_as_run() -> None:
    dense = _linear()[3]
    cand = _packed(dense.task)
    seconds = measure(dense.task, [cand], check=True)
    assert np.isfinite(seconds[0]) and seconds[0] > 0


def test_build_packs_the_weight_once(tmp_path) -> None:
    net, fused, tasks, dense, model, x = _linear()
    store = RecordStore(str(tmp_path))
    store.add(_packed(dense.task), 1e-6)  # the best record of its task
    built = build_checked(fused, tasks, store, TARGET, reference=lambda: [model(x).detach().numpy()],
                          inputs=[x.numpy()], rtol=1e-4, atol=1e-5)
    assert "matches the reference" in built.check
    names = [gv.name_hint for gv, _ in built.module.functions_items()]
    assert f"{dense.name}_prepacked" in names and not any("weight_prepack" in n for n in names)
    calls: list[str] = []
    tvm_ffi.structural_walk(built.module["main"], [(relax.GlobalVar, lambda gv: calls.append(gv.name_hint))],
                            order="pre")
    assert f"{dense.name}_prepacked" in calls  # main calls the kernel on the packed constant directly
    got = run_executable(compile_module(built.module, TARGET), [x.numpy()])[0]
    want = model(x).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the library carries the packed weight: it runs in a fresh process with the input alone
    lib, data = str(tmp_path / "dense.so"), str(tmp_path / "xy.npy")
    built.executable.export_library(lib)
    np.save(data, x.numpy())
    script = ("import numpy as np, tvm; from tvm import relax; "
              f"vm = relax.VirtualMachine(tvm.runtime.load_module({lib!r}), tvm.cpu()); "
              f"y = vm['main'](tvm.runtime.tensor(np.load({data!r}))); "
              f"np.save({data!r}, (y if hasattr(y, 'numpy') else y[0]).numpy())")
    subprocess.run([sys.executable, "-c", script], check=True)
    np.testing.assert_allclose(np.load(data), want, rtol=1e-4, atol=1e-5)


def test_every_searched_sketch_packs_a_constant_weight() -> None:
    dense = _linear()[3]
    marked, unmarked = SearchSpace(dense.task), SearchSpace(_unmarked(dense.task))
    assert len(marked.sketches) < len(marked.derived)
    for cand in marked.sample(16, seed=2):
        assert has_weight_packing(cand.to_mod())
    assert any(not has_weight_packing(c.to_mod()) for c in unmarked.sample(32, seed=2))


def test_a_convolution_weight_is_packed_in_panels_of_output_channels(tmp_path) -> None:
    net, fused, tasks, conv, model, x = _conv()
    space = SearchSpace(conv.task)
    assert space.sketches and all(has_weight_packing(c.to_mod()) for c in space.sample(8, seed=3))
    cand = _packed(conv.task)
    shapes = [tuple(int(s) for s in p.shape) for p in kernel_as_run(cand.to_mod())["main"].params]
    # HWIO (3, 3, 32, 64) -> (64 / P, 3, 3, 32, P): each panel holds all the reduction of P output channels
    (packed,) = [s for s in shapes if len(s) == 5]
    assert packed[1:4] == (3, 3, 32) and packed[0] * packed[4] == 64 and packed[4] % 16 == 0
    assert (3, 3, 32, 64) not in shapes
    # the depthwise convolution's weight is a small share of its data (2.3 of 100 KiB): not packed
    (depthwise,) = [nt for nt in tasks if _weight_shape(nt) == (3, 3, 1, 64)]
    assert not any(pack_steps(s.steps) for s in SearchSpace(depthwise.task).derived)
    # a convolution whose weight is an input (a single operator) is not packed: that would copy it on every call
    assert not any(pack_steps(s.steps) for s in SearchSpace(_unmarked(conv.task)).derived)
    off = SpaceConfig(cpu_pack_conv_weights=False)
    unpacked = SearchSpace(conv.task, config=off).derived
    assert not any(pack_steps(s.steps) for s in unpacked)
    # the packed sketches choose the panel width and nothing else more: the packing's own nest, dropped at build
    # time, gets no parallel, vector or unroll holes
    assert sorted(len(s.holes) for s in space.sketches) == sorted(len(s.holes) + 1 for s in unpacked)
    store = RecordStore(str(tmp_path))
    store.add(cand, 1e-6)
    built = build_checked(fused, tasks, store, TARGET, reference=lambda: [model(x).detach().numpy()],
                          inputs=[x.numpy()], rtol=1e-4, atol=1e-4)
    assert "matches the reference" in built.check
    assert f"{conv.name}_prepacked" in [gv.name_hint for gv, _ in built.module.functions_items()]


@pytest.mark.parametrize("layer", [_linear, _conv], ids=["dense", "conv"])
def test_a_packed_record_read_back_is_its_candidate(tmp_path, layer) -> None:
    # the verify phase and a resumed run rebuild candidates from stored traces; the packing's mark comes back from
    # JSON as 1, and while the sketch wrote True no packed record was recognised (verification skipped those tasks)
    task = layer()[3].task
    cand = _packed(task)
    RecordStore(str(tmp_path)).add(cand, 1e-6)
    (rec,) = RecordStore(str(tmp_path)).records(task)
    assert candidate_from_trace(task, SearchSpace(task).derived, rec.trace) == cand


def _relax_nodes(mod: tvm.IRModule) -> tuple[int, list[bytes]]:
    """The calls of kernels in main, and the bytes of every constant it holds, sorted."""
    calls, consts = [], []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "").startswith("relax.call_tir"):
            calls.append(expr)
        if isinstance(expr, tvm.ir.expr.Constant) and hasattr(expr.value, "numpy"):
            consts.append(expr.value.numpy().tobytes())

    relax.analysis.post_order_visit(mod["main"], visit)
    return len(calls), sorted(consts)


@pytest.mark.parametrize("layer", [_linear, _conv], ids=["dense", "conv"])
def test_weight_packings_fold_in_numpy_as_fold_constant_folds_them(layer) -> None:
    # FoldConstant compiled a kernel for each packing (37 s of a ResNet-50 build); numpy does the copy instead
    _, fused, tasks, nt, _, _ = layer()
    record = Record(_packed(nt.task).to_schedule().trace, 1e-6, nt.task.mod, str(TARGET))
    scheduled = scheduled_module(fused, tasks, [Choice(t.name, record if t is nt else None, []) for t in tasks], TARGET)
    split = relax.transform.SplitLayoutRewritePreproc()(scheduled)
    ours, theirs = fold_copies_numpy()(split), relax.transform.FoldConstant()(split)
    calls, _ = _relax_nodes(split)
    assert _relax_nodes(ours)[0] == calls - 1  # the packing's call is gone, folded into a constant
    assert _relax_nodes(ours) == _relax_nodes(theirs)  # the same packed weight, bit for bit


def test_a_network_tuning_config_sets_every_task_space() -> None:
    _, _, tasks, conv, _, _ = _conv()
    i = tasks.index(conv)

    def conv_sketches(config: NetworkTuneConfig | None) -> list:
        net = NetworkTuner(tasks, [TaskBudget()] * len(tasks), scorer=None, budget=Budget(trials=10), store=None,
                           work_dir=None, config=config)
        return net.tuner(i).space.sketches

    assert all(pack_steps(s.steps) for s in conv_sketches(None))
    off = NetworkTuneConfig(space=SpaceConfig(cpu_pack_conv_weights=False))
    assert not any(pack_steps(s.steps) for s in conv_sketches(off))
