"""The operator suite: every small workload builds, runs and matches an independent numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
import tvm_ffi
from numpy.lib.stride_tricks import sliding_window_view
from tvm import s_tir

from drytune import workloads as W

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
_erf = np.vectorize(math.erf)


def _conv_nchw(x, w, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[-1]
    win = sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]  # n c y x kh kw
    return np.einsum("ncyxhw,fchw->nfyx", win, w)


def _pool(x, k, stride, pad, fill, reduce):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    return reduce(sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride], axis=(-2, -1))


def _conv_transpose(x, w, stride, pad):
    """Scatter form: every input pixel adds w * x to a k x k output patch (independent of the TE gather)."""
    n, _, h, wd = x.shape
    co, k = w.shape[1], w.shape[-1]
    full = np.zeros((n, co, (h - 1) * stride + k, (wd - 1) * stride + k))
    for kh in range(k):
        for kw in range(k):
            contrib = np.einsum("ncyx,cf->nfyx", x, w[:, :, kh, kw])
            rows = slice(kh, kh + (h - 1) * stride + 1, stride)
            cols = slice(kw, kw + (wd - 1) * stride + 1, stride)
            full[:, :, rows, cols] += contrib
    oh, ow = (h - 1) * stride - 2 * pad + k, (wd - 1) * stride - 2 * pad + k
    return full[:, :, pad : pad + oh, pad : pad + ow]


def _layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-12) * g + b


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _conv1d(x, w, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    win = sliding_window_view(x, w.shape[-1], axis=2)[:, :, ::stride]  # n c x kw
    return np.einsum("ncxk,fck->nfx", win, w)


def _depthwise(x, w, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[-1]
    win = sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxhw,chw->ncyx", win, w[:, 0])


def _gelu(y):
    return 0.5 * y * (1 + _erf(y / math.sqrt(2)))


def _conv_nhwc(x, w, stride, pad):
    return _conv_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), stride, pad).transpose(0, 2, 3, 1)


def _conv_bias_relu(x, w, b, stride, pad):
    return np.maximum(_conv_nchw(x, w, stride, pad) + b[None, :, None, None], 0)


# name -> reference(shape kwargs of the small variant, *inputs), computed in float64
REFERENCE = {
    "gemm": lambda p, a, b: a @ b,
    "gemm_bert": lambda p, a, b: a @ b,
    "batch_matmul": lambda p, a, b: np.einsum("bik,bjk->bij", a, b),
    "dense_bias_gelu": lambda p, x, w, bias: _gelu(x @ w.T + bias),
    "conv1d": lambda p, x, w: _conv1d(x, w, p["stride"], p["pad"]),
    "conv2d_nchw": lambda p, x, w: _conv_nchw(x, w, p["stride"], p["pad"]),
    "conv2d_nhwc": lambda p, x, w: _conv_nhwc(x, w, p["stride"], p["pad"]),
    "conv2d_s2": lambda p, x, w: _conv_nchw(x, w, p["stride"], p["pad"]),
    "conv2d_bias_relu": lambda p, x, w, b: _conv_bias_relu(x, w, b, p["stride"], p["pad"]),
    "depthwise_conv2d": lambda p, x, w: _depthwise(x, w, p["stride"], p["pad"]),
    "depthwise_conv2d_s2": lambda p, x, w: _depthwise(x, w, p["stride"], p["pad"]),
    "conv2d_transpose": lambda p, x, w: _conv_transpose(x, w, p["stride"], p["pad"]),
    "norm2": lambda p, a: np.array([np.linalg.norm(a)]),
    "softmax": lambda p, x: _softmax(x),
    "layer_norm": lambda p, x, g, b: _layer_norm(x, g, b),
    "max_pool2d": lambda p, x: _pool(x, p["K"], p["stride"], p["pad"], -np.inf, np.max),
    "avg_pool2d": lambda p, x: _pool(x, p["K"], p["stride"], p["pad"], 0.0, np.mean),
    "global_avg_pool": lambda p, x: x.mean(axis=(2, 3), keepdims=True),
}


def _block_names(func) -> list[str]:
    names: list[str] = []
    tvm_ffi.structural_walk(func, [(s_tir.SBlock, lambda b: names.append(b.name_hint))], order="pre")
    return [n for n in names if n != "root"]


def test_suite_names_and_kinds():
    expected = {
        "gemm", "gemm_bert", "batch_matmul", "dense_bias_gelu", "conv1d", "conv2d_nchw", "conv2d_nhwc",
        "conv2d_s2", "conv2d_bias_relu", "depthwise_conv2d", "depthwise_conv2d_s2", "conv2d_transpose",
        "norm2", "softmax", "layer_norm", "max_pool2d", "avg_pool2d", "global_avg_pool",
    }  # fmt: skip
    assert set(W.SUITE) == expected == set(W.SMALL) == set(REFERENCE)
    for name, wl in W.SUITE.items():
        assert wl.name == name == W.get(name).name == W.small(name).name
        assert wl.kind == W.small(name).kind
        assert wl.kind in {"matmul", "conv", "depthwise", "reduction", "pool"}


def test_get_unknown_name_lists_valid_names():
    with pytest.raises(KeyError, match="conv2d_nchw") as info:
        W.get("conv3d")
    assert "conv3d" in str(info.value)
    with pytest.raises(KeyError, match="softmax"):
        W.small("nope")


def test_gemm_flops_are_2mnk():
    assert W.get("gemm").flops() == 2 * 1024**3
    assert W.get("gemm_bert").flops() == 2 * 128 * 3072 * 768
    assert W.small("gemm").flops() == 2 * 64**3
    assert W.get("batch_matmul").flops() == 2 * 12 * 128 * 128 * 64


def test_reshaped_replaces_some_shape_arguments_and_rejects_unknown_ones():
    ffn_down = W.reshaped("dense_bias_gelu", N=768, K=3072)
    assert ffn_down.params == {"M": 128, "N": 768, "K": 3072}
    assert [tuple(int(d) for d in p.shape) for p in ffn_down.prim_func().params] == [
        (128, 3072), (768, 3072), (768,), (128, 768)]
    assert W.get("dense_bias_gelu").params["K"] == 768  # the suite is unchanged
    with pytest.raises(KeyError, match="has no shape arguments .'Q'.; it has .'K', 'M', 'N'."):
        W.reshaped("gemm", Q=1)


def test_full_size_output_shapes():
    def out_shape(name):
        return tuple(int(s) for s in W.get(name).tensors()[-1].shape)

    assert out_shape("conv2d_nchw") == (1, 64, 56, 56)
    assert out_shape("conv2d_nhwc") == (1, 56, 56, 64)
    assert out_shape("conv2d_s2") == (1, 128, 28, 28)
    assert out_shape("depthwise_conv2d") == (1, 144, 56, 56)
    assert out_shape("depthwise_conv2d_s2") == (1, 96, 56, 56)
    assert out_shape("conv2d_transpose") == (1, 32, 56, 56)
    assert out_shape("max_pool2d") == out_shape("avg_pool2d") == (1, 64, 56, 56)
    assert out_shape("global_avg_pool") == (1, 2048, 1, 1)
    assert out_shape("softmax") == (12, 128, 128)
    assert out_shape("dense_bias_gelu") == (128, 3072)


@pytest.mark.parametrize("name", sorted(W.SUITE))
def test_small_variant_has_same_stages_and_is_small(name):
    full, small = W.get(name).prim_func(), W.small(name).prim_func()
    assert _block_names(full) == _block_names(small)
    assert len(full.params) == len(small.params)
    assert 0 < W.small(name).flops() < 2.2e6
    assert W.small(name).flops() < W.get(name).flops()
    # every stage carries a chosen name, never TE's default "compute"
    assert all(not n.startswith("compute") for n in _block_names(full))


@pytest.mark.parametrize("name", sorted(W.SUITE))
def test_small_workload_builds_runs_and_matches_numpy(name):
    wl = W.small(name)
    func = wl.prim_func()
    rt = tvm.compile(wl.ir_module(), target=TARGET).jit()
    rng = np.random.default_rng(1)
    shapes = [tuple(int(s) for s in p.shape) for p in func.params]
    inputs = [rng.uniform(-1, 1, size=s).astype("float32") for s in shapes[:-1]]
    args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.empty(shapes[-1], "float32", tvm.cpu(0))]
    rt["main"](*args)
    expected = REFERENCE[name](wl.params, *[a.astype(np.float64) for a in inputs])
    assert expected.shape == shapes[-1]
    np.testing.assert_allclose(args[-1].numpy(), expected, rtol=1e-4, atol=1e-4)
