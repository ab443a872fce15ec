"""Network import, fusion and task extraction on small models: real torch/ONNX import, real TVM builds."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from drytune import zoo
from drytune.extract import NetworkTask, extract_tasks, fuse, task_kind
from drytune.network import (
    ModelImportError,
    UnsupportedOperatorError,
    flatten_outputs,
    load_network,
    random_inputs,
)
from drytune.records import RecordStore
from drytune.space import SearchSpace
from drytune.target import resolve_target
from drytune.task import Task

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

TARGET = resolve_target("llvm")[0]
TINY = ("resnet_tiny", "mobilenet_tiny", "bert_tiny")


@functools.cache
def _imported(name: str):
    """(network, fused module, tasks) of a zoo model, imported from torch once per test session."""
    net = load_network(*zoo.get_model(name), name=name)
    fused = fuse(net.mod, TARGET)
    return net, fused, extract_tasks(fused, TARGET)


def _run_untuned(mod: tvm.IRModule, inputs: list[np.ndarray]) -> list[np.ndarray]:
    vm = relax.VirtualMachine(tvm.compile(mod, TARGET), tvm.cpu())
    return flatten_outputs(vm["main"](*[tvm.runtime.tensor(x) for x in inputs]))


def _call_tir_counts(fused: tvm.IRModule) -> dict[str, int]:
    counts: dict[str, int] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.call_tir":
            counts[expr.args[0].name_hint] = counts.get(expr.args[0].name_hint, 0) + 1

    relax.analysis.post_order_visit(fused["main"], visit)
    return counts


# --- zoo -------------------------------------------------------------------------------------------------------


def test_zoo_weights_are_seeded_and_batchnorm_statistics_random():
    model, (x,) = zoo.get_model("resnet_tiny")
    again, (y,) = zoo.get_model("resnet_tiny")
    assert torch.equal(x, y)
    with torch.no_grad():
        assert torch.equal(model(x), again(y))
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and not model.training
    for bn in norms:
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
        assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))


def test_zoo_full_size_models_have_the_published_parameter_counts():
    # torchvision's resnet50 / mobilenet_v2 and 12 BERT-base encoder layers (without embeddings or pooler)
    expected = {"resnet50": 25_557_032, "mobilenet_v2": 3_504_872, "bert_base": 12 * 7_087_872}
    for name, count in expected.items():
        model, inputs = zoo.get_model(name)
        assert sum(p.numel() for p in model.parameters()) == count, name
    assert tuple(inputs[0].shape) == (1, 128, 768)


def test_zoo_unknown_name_lists_the_models():
    with pytest.raises(KeyError, match="resnet_tiny"):
        zoo.get_model("resnet18")


# --- torch import, fusion, extraction ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", TINY)
def test_torch_import_untuned_build_matches_eager(name):
    net, fused, tasks = _imported(name)
    assert net.source == "torch" and net.name == name
    _, (example,) = zoo.get_model(name)
    assert net.inputs == [(net.inputs[0][0], tuple(example.shape), "float32")]
    inputs = random_inputs(net, seed=3)
    assert inputs[0].shape == tuple(example.shape) and inputs[0].dtype == np.float32
    expected = net.reference(*inputs)
    got = _run_untuned(fused, inputs)
    assert len(got) == len(expected) == 1
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)
    assert tasks and not tasks.skipped


def test_fingerprint_is_stable_and_changes_with_weights():
    net = _imported("resnet_tiny")[0]
    model, inputs = zoo.get_model("resnet_tiny")
    assert load_network(model, inputs).fingerprint == net.fingerprint
    with torch.no_grad():
        model.fc.weight.mul_(2.0)
    assert load_network(model, inputs).fingerprint != net.fingerprint


def test_tasks_cover_every_call_with_weights_and_flops():
    _, fused, tasks = _imported("resnet_tiny")
    counts = _call_tir_counts(fused)
    assert sum(t.weight for t in tasks) == sum(counts.values())
    assert len({t.name for t in tasks}) == len(tasks)
    assert [t.index for t in tasks] == list(range(len(tasks)))
    workloads = {name: Task.from_prim_func(fused[name], TARGET).mod for name in counts}
    for t in tasks:
        assert isinstance(t, NetworkTask) and t.task.weight == t.weight and t.flops == t.task.flops
        # weight = calls of every PrimFunc that is structurally this task's workload
        assert t.weight == sum(n for name, n in counts.items() if tvm_ffi.structural_equal(workloads[name], t.task.mod))
        if t.kind in ("conv2d", "matmul"):
            assert t.flops > 0
    convs = [t for t in tasks if t.kind == "conv2d"]
    # the two bottleneck blocks share their 3x3 conv (same shapes), so one task is called twice
    assert any(t.weight == 2 for t in convs)
    # BatchNorm and ReLU fuse into the conv kernel (no separate relu or batch_norm task)
    assert all(t.kind not in ("relu", "batch_norm") for t in tasks)
    assert any(t.name.endswith("relu") or "_relu" in t.name for t in convs)


def test_bert_tasks_weights_and_flops_match_the_architecture():
    _, _, tasks = _imported("bert_tiny")
    cfg = zoo.BERT_TINY
    by_kind: dict[str, list] = {}
    for t in tasks:
        by_kind.setdefault(t.kind, []).append(t)
    # q, k, v and attention-output projections share one [seq, h] x [h, h] + bias task
    square = [t for t in by_kind["matmul"] if t.weight == 4 * cfg.layers]
    assert len(square) == 1
    matmul_flops = sum(t.flops * t.weight for t in by_kind["matmul"])
    macs = cfg.layers * (cfg.seq * (4 * cfg.hidden**2 + 2 * cfg.hidden * cfg.ffn) + 2 * cfg.seq**2 * cfg.hidden)
    bias_adds = cfg.layers * cfg.seq * (4 * cfg.hidden + cfg.ffn + cfg.hidden)
    assert matmul_flops == pytest.approx(2 * macs + bias_adds, rel=1e-6)
    assert {"softmax", "layer_norm", "gelu"} <= set(by_kind)
    assert sum(t.weight for t in by_kind["layer_norm"]) == 2 * cfg.layers


def test_task_kind_names_the_first_computing_operator():
    assert task_kind("fused_conv2d3_subtract2_divide2_multiply2_add5_add6_relu2") == "conv2d"
    assert task_kind("fused_reshape9_gelu_reshape10") == "gelu"
    assert task_kind("matmul1") == "matmul"
    assert task_kind("layer_norm") == "layer_norm"
    assert task_kind("fused_conv2d_transpose2_add") == "conv2d_transpose"
    assert task_kind("fused_reshape1_transpose1_reshape3") == "reshape"


def test_extract_tasks_rejects_an_unfused_module():
    net = _imported("bert_tiny")[0]
    with pytest.raises(ValueError, match="fuse"):
        extract_tasks(net.mod, TARGET)


def test_record_of_an_extracted_task_is_applied_by_metaschedule(tmp_path):
    net, fused, tasks = _imported("resnet_tiny")
    conv = max((t for t in tasks if t.kind == "conv2d"), key=lambda t: t.weight)
    cand = SearchSpace(conv.task).sample(1, seed=0)[0]
    RecordStore(str(tmp_path)).add(cand, 1e-3)
    store = RecordStore(str(tmp_path))  # read back from disk, as a later build would
    with TARGET, store.db:
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    scheduled = []
    for gv, func in applied.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        original = Task.from_prim_func(fused[gv.name_hint], TARGET).mod
        is_task = tvm_ffi.structural_equal(original, conv.task.mod)
        assert bool(func.attrs.get("tirx.is_scheduled", False)) == is_task, gv.name_hint
        if is_task:
            scheduled.append(gv.name_hint)
            assert not tvm_ffi.structural_equal(func, fused[gv.name_hint])
            assert tvm_ffi.structural_equal(func.body, cand.to_mod()["main"].body)
    assert conv.name in scheduled
    inputs = random_inputs(net, seed=5)
    np.testing.assert_allclose(_run_untuned(applied, inputs)[0], net.reference(*inputs)[0], rtol=1e-4, atol=1e-5)


# --- other sources ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny"])
def test_onnx_import_matches_onnx_reference_and_torch(tmp_path, name):
    path = zoo.export_onnx(name, str(tmp_path / f"{name}.onnx"))
    net = load_network(path)
    assert net.source == "onnx" and net.name == name
    inputs = random_inputs(net, seed=1)
    got = _run_untuned(fuse(net.mod, TARGET), inputs)
    onnx_ref = net.reference(*inputs)
    np.testing.assert_allclose(got[0], onnx_ref[0], rtol=1e-4, atol=1e-5)
    model, _ = zoo.get_model(name)
    with torch.no_grad():
        eager = model(torch.from_numpy(inputs[0])).numpy()
    np.testing.assert_allclose(got[0], eager, rtol=1e-4, atol=1e-5)


def test_pt2_file_import(tmp_path):
    model, inputs = zoo.get_model("bert_tiny")
    path = str(tmp_path / "bert.pt2")
    torch.export.save(torch.export.export(model, inputs), path)
    net = load_network(path)
    assert net.source == "torch" and net.name == "bert"
    x = random_inputs(net, seed=2)
    np.testing.assert_allclose(_run_untuned(fuse(net.mod, TARGET), x)[0], net.reference(*x)[0], rtol=1e-4, atol=1e-5)


def _relax_module(weight: np.ndarray) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    k = relax.Var("k", relax.TensorType((4, 6), "int32"))
    with bb.function("main", [x, k]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(relax.op.matmul(x, relax.const(weight))))
            out = bb.emit_output(relax.op.add(y, relax.op.astype(k, "float32")))
        bb.emit_func_output(relax.Tuple([out, y]))
    return bb.get()


def test_relax_module_import_and_random_inputs():
    weight = np.random.default_rng(0).standard_normal((8, 6)).astype("float32")
    net = load_network(_relax_module(weight), name="mlp")
    assert net.source == "relax" and net.reference(*random_inputs(net)) is None
    assert net.inputs == [("x", (4, 8), "float32"), ("k", (4, 6), "int32")]
    x, k = random_inputs(net, seed=4)
    assert x.dtype == np.float32 and np.abs(x).max() <= 1.0
    assert k.dtype == np.int32 and k.min() >= 0
    fused = fuse(net.mod, TARGET)
    tasks = extract_tasks(fused, TARGET)
    assert "matmul" in {t.kind for t in tasks if t.flops > 0}
    out, hidden = _run_untuned(fused, [x, k])
    np.testing.assert_allclose(hidden, np.maximum(x @ weight, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, hidden + k, rtol=1e-5, atol=1e-5)


def test_relax_module_without_main_is_rejected():
    bad = _relax_module(np.ones((8, 6), "float32"))
    renamed = tvm.IRModule({"forward": bad["main"]})
    with pytest.raises(ModelImportError, match="main"):
        load_network(renamed)


def test_flatten_outputs_handles_nested_results():
    a, b = np.ones(2), np.zeros((1, 3))
    flat = flatten_outputs((a, [tvm.runtime.tensor(b), (a,)]))
    assert [x.shape for x in flat] == [(2,), (1, 3), (2,)]


# --- errors -----------------------------------------------------------------------------------------------------


def test_malformed_onnx_files_give_a_clear_error(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n")
    with pytest.raises(ModelImportError, match="notes.onnx is not a readable ONNX model"):
        load_network(str(text))
    whole = zoo.export_onnx("resnet_tiny", str(tmp_path / "whole.onnx"))
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(open(whole, "rb").read()[: os.path.getsize(whole) // 2])
    with pytest.raises(ModelImportError, match="cut.onnx"):
        load_network(str(cut))
    with pytest.raises(FileNotFoundError):
        load_network(str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelImportError, match="unknown model file type"):
        load_network(str(text.rename(tmp_path / "notes.txt")))


def _one_node_onnx(path, op: str, dims: list) -> str:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_symbolic_onnx_dims_need_input_shapes(tmp_path):
    path = _one_node_onnx(tmp_path / "dyn.onnx", "Relu", ["batch", 8])
    with pytest.raises(ModelImportError, match="symbolic dimension.*batch.*input_shapes"):
        load_network(path)
    net = load_network(path, input_shapes={"x": [3, 8]})
    assert net.inputs == [("x", (3, 8), "float32")]
    x = random_inputs(net, seed=0)
    np.testing.assert_allclose(_run_untuned(fuse(net.mod, TARGET), x)[0], np.maximum(x[0], 0))
    with pytest.raises(ModelImportError, match="not inputs"):
        load_network(path, input_shapes={"y": [3, 8]})


def test_unsupported_operators_are_named(tmp_path):
    with pytest.raises(UnsupportedOperatorError, match="Celu") as onnx_err:
        load_network(_one_node_onnx(tmp_path / "celu.onnx", "Celu", [2, 8]))
    assert onnx_err.value.operators == ["Celu"]

    class Erfinv(torch.nn.Module):
        def forward(self, x):
            return torch.special.erfinv(x) * 2.0

    with pytest.raises(UnsupportedOperatorError, match="erfinv") as torch_err:
        load_network(Erfinv(), (torch.rand(4),))
    assert any("erfinv" in op for op in torch_err.value.operators)


def test_missing_extras_name_the_install_command(monkeypatch, tmp_path):
    path = _one_node_onnx(tmp_path / "relu.onnx", "Relu", [2, 8])
    pt2 = tmp_path / "model.pt2"
    pt2.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r'pip install "drytune\[onnx\]"'):
        load_network(path)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r'pip install "drytune\[torch\]"'):
        zoo.get_model("resnet_tiny")
    with pytest.raises(ImportError, match=r'pip install "drytune\[torch\]"'):
        load_network(str(pt2))


def test_modules_import_without_torch_or_onnx():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['onnx'] = None\n"
            "import drytune.zoo, drytune.network, drytune.extract\n"
            "print(sorted(drytune.zoo.MODELS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "resnet_tiny" in out.stdout


# --- fast math ---------------------------------------------------------------------------------------------------


def _libm_calls(mod: tvm.IRModule) -> set[str]:
    names: set[str] = set()

    def visit(call) -> None:
        if isinstance(call.op, tvm.ir.Op) and call.op.name in ("tirx.exp", "tirx.erf", "tirx.tanh"):
            names.add(call.op.name)

    for _, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, visit)], order="pre")
    return names


def test_fast_math_replaces_softmax_and_gelu_libm_calls_and_keeps_the_output():
    net, fused, _ = _imported("bert_tiny")
    fast = fuse(net.mod, TARGET, fast_math=True)
    assert _libm_calls(fused) == {"tirx.exp", "tirx.erf"}
    assert _libm_calls(fast) == set()
    x = random_inputs(net, seed=3)
    np.testing.assert_allclose(_run_untuned(fast, x)[0], net.reference(*x)[0], rtol=1e-4, atol=1e-5)


def test_fast_math_spells_out_tanh_gelu():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.gelu_tanh(x))
        bb.emit_func_output(out)
    plain, fast = fuse(bb.get(), TARGET), fuse(bb.get(), TARGET, fast_math=True)
    assert _libm_calls(plain) == {"tirx.tanh"} and _libm_calls(fast) == set()
    v = np.linspace(-6, 6, 256, dtype="float32").reshape(4, 64)
    want = 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))
    np.testing.assert_allclose(_run_untuned(fast, [v])[0], want, rtol=1e-5, atol=1e-6)


def _conv_blocks(tasks) -> set[str]:
    from tvm import s_tir

    from drytune.sketch.analysis import block_names

    return {b for t in tasks for b in block_names(s_tir.Schedule(t.task.mod)) if "conv2d" in b}


def test_channels_last_layout_converts_every_convolution_and_keeps_the_output():
    net, fused, tasks = _imported("mobilenet_tiny")
    nhwc = fuse(net.mod, TARGET, layout="NHWC")
    nhwc_tasks = extract_tasks(nhwc, TARGET)
    assert _conv_blocks(tasks) == {"conv2d_nchw", "group_conv2d_nchw"}
    assert _conv_blocks(nhwc_tasks) == {"conv2d_nhwc", "group_conv2d_nhwc"}
    # ReLU6 (clip) follows the layout: the only transposes are the input's and the classifier's
    assert [t.kind for t in tasks].count("transpose") == 0
    assert [t.kind for t in nhwc_tasks].count("transpose") == 2
    assert sum(t.weight for t in nhwc_tasks if t.kind == "conv2d") == sum(t.weight for t in tasks if t.kind == "conv2d")
    x = random_inputs(net, seed=3)
    np.testing.assert_allclose(_run_untuned(nhwc, x)[0], net.reference(*x)[0], rtol=1e-4, atol=1e-5)


def test_batch_norm_after_a_convolution_folds_into_its_weights():
    _, _, tasks = _imported("resnet_tiny")
    convs = [t for t in tasks if t.kind == "conv2d"]
    # the epilogue is the folded bias (and the residual add and relu), not batch norm's four element-wise ops
    assert convs and not any(op in t.name for t in convs for op in ("subtract", "divide", "multiply"))


def test_layout_auto_is_channels_last_on_cpu_only_and_unknown_layouts_are_rejected():
    from drytune.layout import resolve_layout

    assert resolve_layout("auto", TARGET) == "NHWC"
    assert resolve_layout("auto", resolve_target("cuda-sm90")[0]) == "keep"
    assert resolve_layout("keep", TARGET) == "keep"
    with pytest.raises(ValueError, match="NCHWc.*auto, NHWC, keep"):
        resolve_layout("NCHWc", TARGET)


def test_tasks_command_lists_the_layout_transposes_only_for_channels_last(capsys) -> None:
    from drytune.__main__ import main  # in this process: the command's own code, without a second torch import

    def listed(*flags: str) -> list[str]:
        assert main(["tasks", "resnet_tiny", *flags]) == 0
        out = capsys.readouterr().out
        return [line.split()[2] for line in out.splitlines()[2:] if line.split() and line.split()[0].isdigit()]

    assert listed().count("transpose") == 2  # auto: NHWC on this CPU, a transpose at each edge
    assert listed("--layout", "keep").count("transpose") == 0
    with pytest.raises(SystemExit) as bad:
        main(["tasks", "resnet_tiny", "--layout", "NCHWc"])
    assert bad.value.code != 0 and "invalid choice" in capsys.readouterr().err
