"""Operator suite (TE) at ResNet-50 / MobileNet-V2 / BERT-base shapes, shared by tests and benchmarks.

Every workload is written as plain TE compute with explicit padding stages and a name for every stage, so the
sketch rules see the same structure a frontend would produce. `small(name)` gives the same structure at a
shape below ~2 MFLOP for fast tests.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import s_tir, te, tirx

from .task import Task

DTYPE = "float32"


@dataclass(frozen=True)
class Workload:
    """One operator: `build()` returns its TE tensors in argument order (inputs first, outputs last)."""

    name: str
    build: Callable[[], list[te.Tensor]]
    kind: str
    description: str
    params: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)  # shape arguments

    def tensors(self) -> list[te.Tensor]:
        return self.build()

    def prim_func(self) -> tirx.PrimFunc:
        return te.create_prim_func(self.build())

    def ir_module(self) -> tvm.IRModule:
        """The unscheduled PrimFunc as an IRModule with entry "main"."""
        return tvm.IRModule({"main": self.prim_func()})

    def task(self, target: Any = "llvm", name: str | None = None) -> Task:
        """The tuning task of this operator for `target` (named after the workload unless `name` is given)."""
        return Task.from_prim_func(self.prim_func(), target, name=name or self.name)

    def flops(self) -> float:
        """Floating-point operation count as TVM estimates it for the unscheduled PrimFunc."""
        return float(s_tir.analysis.estimate_tir_flops(self.ir_module()))


def _zero() -> tirx.PrimExpr:
    return tirx.const(0.0, DTYPE)


def _pad(data: te.Tensor, pads: tuple[int, ...], value: tirx.PrimExpr, name: str = "pad") -> te.Tensor:
    """Pad `data` by pads[i] elements on both sides of axis i (a no-op pad of 0 keeps the stage)."""
    shape = [int(s) + 2 * p for s, p in zip(data.shape, pads, strict=True)]

    def body(*idx):
        inside = [
            cond
            for axis, (i, p) in enumerate(zip(idx, pads, strict=True))
            if p
            for cond in (i >= p, i < int(data.shape[axis]) + p)
        ]
        src = data[tuple(i - p for i, p in zip(idx, pads, strict=True))]
        return tirx.if_then_else(tirx.all(*inside), src, value) if inside else src

    return te.compute(shape, body, name=name)


def _out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


# ----------------------------------------------------------------------------------------------- matmul


def gemm(M: int, N: int, K: int) -> list[te.Tensor]:
    """C[i, j] = sum_k A[i, k] * B[k, j]."""
    A = te.placeholder((M, K), DTYPE, name="A")
    B = te.placeholder((K, N), DTYPE, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def batch_matmul(batch: int, M: int, N: int, K: int) -> list[te.Tensor]:
    """C[b, i, j] = sum_k A[b, i, k] * B[b, j, k] (B transposed, as Q.K^T in attention)."""
    A = te.placeholder((batch, M, K), DTYPE, name="A")
    B = te.placeholder((batch, N, K), DTYPE, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((batch, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, j, k], axis=k), name="C")
    return [A, B, C]


def dense_bias_gelu(M: int, N: int, K: int) -> list[te.Tensor]:
    """out = gelu(X W^T + bias) with the exact (erf) GELU, as in the BERT FFN."""
    X = te.placeholder((M, K), DTYPE, name="X")
    W = te.placeholder((N, K), DTYPE, name="W")
    bias = te.placeholder((N,), DTYPE, name="bias")
    k = te.reduce_axis((0, K), name="k")
    dense = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="dense")
    biased = te.compute((M, N), lambda i, j: dense[i, j] + bias[j], name="bias_add")
    inv_sqrt2 = tirx.const(1.0 / math.sqrt(2.0), DTYPE)
    half = tirx.const(0.5, DTYPE)
    one = tirx.const(1.0, DTYPE)
    gelu = te.compute(
        (M, N), lambda i, j: half * biased[i, j] * (one + te.erf(biased[i, j] * inv_sqrt2)), name="gelu"
    )
    return [X, W, bias, gelu]


# ------------------------------------------------------------------------------------------------- conv


def conv1d(N: int, CI: int, W: int, CO: int, KW: int, stride: int, pad: int) -> list[te.Tensor]:
    """NCW conv1d with OIW weights."""
    data = te.placeholder((N, CI, W), DTYPE, name="data")
    weight = te.placeholder((CO, CI, KW), DTYPE, name="weight")
    padded = _pad(data, (0, 0, pad), _zero())
    OW = _out_size(W, KW, stride, pad)
    rc = te.reduce_axis((0, CI), name="rc")
    rw = te.reduce_axis((0, KW), name="rw")
    conv = te.compute(
        (N, CO, OW),
        lambda n, f, x: te.sum(padded[n, rc, x * stride + rw] * weight[f, rc, rw], axis=[rc, rw]),
        name="conv",
    )
    return [data, weight, conv]


def _conv2d_nchw_stages(
    N: int, CI: int, H: int, W: int, CO: int, K: int, stride: int, pad: int
) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    data = te.placeholder((N, CI, H, W), DTYPE, name="data")
    weight = te.placeholder((CO, CI, K, K), DTYPE, name="weight")
    padded = _pad(data, (0, 0, pad, pad), _zero())
    OH, OW = _out_size(H, K, stride, pad), _out_size(W, K, stride, pad)
    rc = te.reduce_axis((0, CI), name="rc")
    rh = te.reduce_axis((0, K), name="rh")
    rw = te.reduce_axis((0, K), name="rw")
    conv = te.compute(
        (N, CO, OH, OW),
        lambda n, f, y, x: te.sum(
            padded[n, rc, y * stride + rh, x * stride + rw] * weight[f, rc, rh, rw], axis=[rc, rh, rw]
        ),
        name="conv",
    )
    return data, weight, conv


def conv2d_nchw(N: int, CI: int, H: int, W: int, CO: int, K: int, stride: int, pad: int) -> list[te.Tensor]:
    """NCHW conv2d with OIHW weights."""
    return list(_conv2d_nchw_stages(N, CI, H, W, CO, K, stride, pad))


def conv2d_nhwc(N: int, H: int, W: int, CI: int, CO: int, K: int, stride: int, pad: int) -> list[te.Tensor]:
    """NHWC conv2d with HWIO weights."""
    data = te.placeholder((N, H, W, CI), DTYPE, name="data")
    weight = te.placeholder((K, K, CI, CO), DTYPE, name="weight")
    padded = _pad(data, (0, pad, pad, 0), _zero())
    OH, OW = _out_size(H, K, stride, pad), _out_size(W, K, stride, pad)
    rh = te.reduce_axis((0, K), name="rh")
    rw = te.reduce_axis((0, K), name="rw")
    rc = te.reduce_axis((0, CI), name="rc")
    conv = te.compute(
        (N, OH, OW, CO),
        lambda n, y, x, f: te.sum(
            padded[n, y * stride + rh, x * stride + rw, rc] * weight[rh, rw, rc, f], axis=[rh, rw, rc]
        ),
        name="conv",
    )
    return [data, weight, conv]


def conv2d_bias_relu(
    N: int, CI: int, H: int, W: int, CO: int, K: int, stride: int, pad: int
) -> list[te.Tensor]:
    """relu(conv2d_nchw(data, weight) + bias[f]): the fused conv block of a ResNet."""
    data, weight, conv = _conv2d_nchw_stages(N, CI, H, W, CO, K, stride, pad)
    bias = te.placeholder((CO,), DTYPE, name="bias")
    biased = te.compute(conv.shape, lambda n, f, y, x: conv[n, f, y, x] + bias[f], name="bias_add")
    relu = te.compute(conv.shape, lambda n, f, y, x: te.max(biased[n, f, y, x], _zero()), name="relu")
    return [data, weight, bias, relu]


def depthwise_conv2d(N: int, C: int, H: int, W: int, K: int, stride: int, pad: int) -> list[te.Tensor]:
    """NCHW depthwise conv2d (channel multiplier 1) with (C, 1, K, K) weights."""
    data = te.placeholder((N, C, H, W), DTYPE, name="data")
    weight = te.placeholder((C, 1, K, K), DTYPE, name="weight")
    padded = _pad(data, (0, 0, pad, pad), _zero())
    OH, OW = _out_size(H, K, stride, pad), _out_size(W, K, stride, pad)
    rh = te.reduce_axis((0, K), name="rh")
    rw = te.reduce_axis((0, K), name="rw")
    conv = te.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: te.sum(
            padded[n, c, y * stride + rh, x * stride + rw] * weight[c, 0, rh, rw], axis=[rh, rw]
        ),
        name="depthwise_conv",
    )
    return [data, weight, conv]


def conv2d_transpose(
    N: int, CI: int, H: int, W: int, CO: int, K: int, stride: int, pad: int
) -> list[te.Tensor]:
    """NCHW transposed conv2d with (CI, CO, K, K) weights: dilate+pad the input, then a flipped-kernel conv.

    Output size is (H - 1) * stride - 2 * pad + K, as in PyTorch's ConvTranspose2d without output_padding.
    """
    data = te.placeholder((N, CI, H, W), DTYPE, name="data")
    weight = te.placeholder((CI, CO, K, K), DTYPE, name="weight")
    border = K - 1 - pad
    PH, PW = (H - 1) * stride + 1 + 2 * border, (W - 1) * stride + 1 + 2 * border

    def dilate_pad(n, c, h, w):
        hh, ww = h - border, w - border
        inside = tirx.all(
            hh >= 0, hh < (H - 1) * stride + 1, ww >= 0, ww < (W - 1) * stride + 1,
            hh % stride == 0, ww % stride == 0,
        )  # fmt: skip
        return tirx.if_then_else(inside, data[n, c, hh // stride, ww // stride], _zero())

    padded = te.compute((N, CI, PH, PW), dilate_pad, name="pad")
    OH, OW = PH - K + 1, PW - K + 1
    rc = te.reduce_axis((0, CI), name="rc")
    rh = te.reduce_axis((0, K), name="rh")
    rw = te.reduce_axis((0, K), name="rw")
    conv = te.compute(
        (N, CO, OH, OW),
        lambda n, f, y, x: te.sum(
            padded[n, rc, y + rh, x + rw] * weight[rc, f, K - 1 - rh, K - 1 - rw], axis=[rc, rh, rw]
        ),
        name="conv_transpose",
    )
    return [data, weight, conv]


# -------------------------------------------------------------------------------------------- reductions


def norm2(M: int, N: int) -> list[te.Tensor]:
    """Frobenius (2-)norm of a matrix: sqrt(sum of squares)."""
    A = te.placeholder((M, N), DTYPE, name="A")
    i = te.reduce_axis((0, M), name="i")
    j = te.reduce_axis((0, N), name="j")
    sum_sq = te.compute((1,), lambda _: te.sum(A[i, j] * A[i, j], axis=[i, j]), name="sum_sq")
    out = te.compute((1,), lambda z: te.sqrt(sum_sq[z]), name="norm")
    return [A, out]


def softmax(batch: int, M: int, N: int) -> list[te.Tensor]:
    """Numerically stable softmax of a (batch, M, N) tensor along the last axis."""
    X = te.placeholder((batch, M, N), DTYPE, name="X")
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    max_elem = te.compute((batch, M), lambda b, i: te.max(X[b, i, k1], axis=k1), name="max_elem")
    expo = te.compute((batch, M, N), lambda b, i, j: te.exp(X[b, i, j] - max_elem[b, i]), name="exp")
    exp_sum = te.compute((batch, M), lambda b, i: te.sum(expo[b, i, k2], axis=k2), name="exp_sum")
    out = te.compute((batch, M, N), lambda b, i, j: expo[b, i, j] / exp_sum[b, i], name="softmax")
    return [X, out]


def layer_norm(M: int, N: int, eps: float = 1e-12) -> list[te.Tensor]:
    """LayerNorm over the last axis with affine gamma/beta (BERT uses eps=1e-12), two-pass variance."""
    X = te.placeholder((M, N), DTYPE, name="X")
    gamma = te.placeholder((N,), DTYPE, name="gamma")
    beta = te.placeholder((N,), DTYPE, name="beta")
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    inv_n = tirx.const(1.0 / N, DTYPE)
    x_sum = te.compute((M,), lambda i: te.sum(X[i, k1], axis=k1), name="x_sum")
    mean = te.compute((M,), lambda i: x_sum[i] * inv_n, name="mean")
    var_sum = te.compute(
        (M,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2), name="var_sum"
    )
    out = te.compute(
        (M, N),
        lambda i, j: (X[i, j] - mean[i]) * te.rsqrt(var_sum[i] * inv_n + tirx.const(eps, DTYPE)) * gamma[j]
        + beta[j],
        name="layer_norm",
    )
    return [X, gamma, beta, out]


# ------------------------------------------------------------------------------------------------ pooling


def max_pool2d(N: int, C: int, H: int, W: int, K: int, stride: int, pad: int) -> list[te.Tensor]:
    """NCHW max pooling; padding with the lowest float so that it never wins."""
    data = te.placeholder((N, C, H, W), DTYPE, name="data")
    padded = _pad(data, (0, 0, pad, pad), te.min_value(DTYPE))
    OH, OW = _out_size(H, K, stride, pad), _out_size(W, K, stride, pad)
    rh = te.reduce_axis((0, K), name="rh")
    rw = te.reduce_axis((0, K), name="rw")
    pool = te.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: te.max(padded[n, c, y * stride + rh, x * stride + rw], axis=[rh, rw]),
        name="pool_max",
    )
    return [data, pool]


def avg_pool2d(N: int, C: int, H: int, W: int, K: int, stride: int, pad: int) -> list[te.Tensor]:
    """NCHW average pooling, padding counted in the divisor (PyTorch's count_include_pad=True)."""
    data = te.placeholder((N, C, H, W), DTYPE, name="data")
    padded = _pad(data, (0, 0, pad, pad), _zero())
    OH, OW = _out_size(H, K, stride, pad), _out_size(W, K, stride, pad)
    rh = te.reduce_axis((0, K), name="rh")
    rw = te.reduce_axis((0, K), name="rw")
    pool_sum = te.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: te.sum(padded[n, c, y * stride + rh, x * stride + rw], axis=[rh, rw]),
        name="pool_sum",
    )
    inv = tirx.const(1.0 / (K * K), DTYPE)
    pool = te.compute((N, C, OH, OW), lambda n, c, y, x: pool_sum[n, c, y, x] * inv, name="pool_avg")
    return [data, pool]


def global_avg_pool(N: int, C: int, H: int, W: int) -> list[te.Tensor]:
    """NCHW global average pooling to (N, C, 1, 1)."""
    data = te.placeholder((N, C, H, W), DTYPE, name="data")
    rh = te.reduce_axis((0, H), name="rh")
    rw = te.reduce_axis((0, W), name="rw")
    pool_sum = te.compute(
        (N, C, 1, 1), lambda n, c, _y, _x: te.sum(data[n, c, rh, rw], axis=[rh, rw]), name="pool_sum"
    )
    inv = tirx.const(1.0 / (H * W), DTYPE)
    pool = te.compute((N, C, 1, 1), lambda n, c, y, x: pool_sum[n, c, y, x] * inv, name="pool_avg")
    return [data, pool]


# ----------------------------------------------------------------------------------------------- registry

# name -> (builder, kind, description, full-size kwargs, small kwargs)
_TABLE: dict[str, tuple[Callable[..., list[te.Tensor]], str, str, dict[str, Any], dict[str, Any]]] = {
    "gemm": (gemm, "matmul", "GEMM 1024x1024x1024",
             dict(M=1024, N=1024, K=1024), dict(M=64, N=64, K=64)),
    "gemm_bert": (gemm, "matmul", "BERT-base FFN GEMM M=128 N=3072 K=768",
                  dict(M=128, N=3072, K=768), dict(M=32, N=96, K=48)),
    "batch_matmul": (batch_matmul, "matmul", "BERT-base attention Q.K^T 12x128x128x64",
                     dict(batch=12, M=128, N=128, K=64), dict(batch=4, M=32, N=32, K=16)),
    "dense_bias_gelu": (dense_bias_gelu, "matmul", "BERT-base FFN dense+bias+GELU(erf) 128x768 -> 3072",
                        dict(M=128, N=3072, K=768), dict(M=16, N=96, K=64)),
    "conv1d": (conv1d, "conv", "conv1d NCW 1x64x256 -> 128, k3 s1 p1",
               dict(N=1, CI=64, W=256, CO=128, KW=3, stride=1, pad=1),
               dict(N=1, CI=16, W=64, CO=32, KW=3, stride=1, pad=1)),
    "conv2d_nchw": (conv2d_nchw, "conv", "ResNet-50 stage-1 3x3 conv NCHW 1x64x56x56 -> 64, s1 p1",
                    dict(N=1, CI=64, H=56, W=56, CO=64, K=3, stride=1, pad=1),
                    dict(N=1, CI=16, H=14, W=14, CO=16, K=3, stride=1, pad=1)),
    "conv2d_nhwc": (conv2d_nhwc, "conv", "ResNet-50 stage-1 3x3 conv NHWC 1x56x56x64 -> 64, s1 p1",
                    dict(N=1, H=56, W=56, CI=64, CO=64, K=3, stride=1, pad=1),
                    dict(N=1, H=14, W=14, CI=16, CO=16, K=3, stride=1, pad=1)),
    "conv2d_s2": (conv2d_nchw, "conv", "ResNet-50 stage-2 strided 3x3 conv NCHW 1x128x56x56 -> 128, s2 p1",
                  dict(N=1, CI=128, H=56, W=56, CO=128, K=3, stride=2, pad=1),
                  dict(N=1, CI=16, H=16, W=16, CO=16, K=3, stride=2, pad=1)),
    "conv2d_bias_relu": (conv2d_bias_relu, "conv",
                         "ResNet-50 stage-3 3x3 conv+bias+ReLU NCHW 1x256x14x14 -> 256, s1 p1",
                         dict(N=1, CI=256, H=14, W=14, CO=256, K=3, stride=1, pad=1),
                         dict(N=1, CI=16, H=8, W=8, CO=16, K=3, stride=1, pad=1)),
    "depthwise_conv2d": (depthwise_conv2d, "depthwise", "MobileNet-V2 depthwise 3x3 1x144x56x56, s1 p1",
                         dict(N=1, C=144, H=56, W=56, K=3, stride=1, pad=1),
                         dict(N=1, C=32, H=16, W=16, K=3, stride=1, pad=1)),
    "depthwise_conv2d_s2": (depthwise_conv2d, "depthwise", "MobileNet-V2 depthwise 3x3 1x96x112x112, s2 p1",
                            dict(N=1, C=96, H=112, W=112, K=3, stride=2, pad=1),
                            dict(N=1, C=32, H=32, W=32, K=3, stride=2, pad=1)),
    "conv2d_transpose": (conv2d_transpose, "conv", "transposed conv NCHW 1x64x28x28 -> 32, k4 s2 p1 (56x56)",
                         dict(N=1, CI=64, H=28, W=28, CO=32, K=4, stride=2, pad=1),
                         dict(N=1, CI=16, H=8, W=8, CO=8, K=4, stride=2, pad=1)),
    "norm2": (norm2, "reduction", "matrix 2-norm sqrt(sum(A^2)) of 1024x1024",
              dict(M=1024, N=1024), dict(M=256, N=256)),
    "softmax": (softmax, "reduction", "BERT-base attention softmax 12x128x128, last axis",
                dict(batch=12, M=128, N=128), dict(batch=4, M=32, N=32)),
    "layer_norm": (layer_norm, "reduction", "BERT-base LayerNorm 128x768",
                   dict(M=128, N=768), dict(M=16, N=64)),
    "max_pool2d": (max_pool2d, "pool", "ResNet-50 stem max pool 1x64x112x112, 3x3 s2 p1",
                   dict(N=1, C=64, H=112, W=112, K=3, stride=2, pad=1),
                   dict(N=1, C=16, H=32, W=32, K=3, stride=2, pad=1)),
    "avg_pool2d": (avg_pool2d, "pool", "avg pool 1x64x112x112, 3x3 s2 p1 (stem-pool shape)",
                   dict(N=1, C=64, H=112, W=112, K=3, stride=2, pad=1),
                   dict(N=1, C=16, H=32, W=32, K=3, stride=2, pad=1)),
    "global_avg_pool": (global_avg_pool, "pool", "ResNet-50 global avg pool 1x2048x7x7",
                        dict(N=1, C=2048, H=7, W=7), dict(N=1, C=64, H=7, W=7)),
}  # fmt: skip


def _make(name: str, small_shape: bool) -> Workload:
    fn, kind, desc, full, small_kw = _TABLE[name]
    kwargs = small_kw if small_shape else full
    if small_shape:
        desc = f"{desc} [small: {', '.join(f'{k}={v}' for k, v in kwargs.items())}]"
    return Workload(
        name=name, build=functools.partial(fn, **kwargs), kind=kind, description=desc, params=dict(kwargs)
    )


SUITE: dict[str, Workload] = {name: _make(name, False) for name in _TABLE}
SMALL: dict[str, Workload] = {name: _make(name, True) for name in _TABLE}


def _lookup(table: dict[str, Workload], name: str) -> Workload:
    try:
        return table[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; valid names: {', '.join(table)}") from None


def get(name: str) -> Workload:
    """The full-size workload `name`; KeyError lists the valid names."""
    return _lookup(SUITE, name)


def reshaped(name: str, **params: Any) -> Workload:
    """Workload `name` with some of its shape arguments replaced (e.g. `reshaped("gemm", K=3072)`)."""
    full = get(name)
    unknown = set(params) - set(full.params)
    if unknown:
        raise KeyError(f"{name} has no shape arguments {sorted(unknown)}; it has {sorted(full.params)}")
    kwargs = {**full.params, **params}
    shape = ", ".join(f"{k}={v}" for k, v in params.items())
    return Workload(name=name, build=functools.partial(_TABLE[name][0], **kwargs), kind=full.kind,
                    description=f"{full.description} [{shape}]", params=kwargs)


def small(name: str) -> Workload:
    """The small-shape variant (< ~2 MFLOP) of workload `name`, same stages and structure."""
    return _lookup(SMALL, name)
