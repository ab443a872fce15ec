"""Networks defined in code with seeded random weights, for tests and benchmarks (no torchvision needed).

Full-size models: ResNet-50, MobileNet-V2 and a BERT-base encoder at batch 1; small versions of each
("*_tiny") tune and compile in seconds. torch is an optional extra and is imported only when a model is built.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TORCH_HINT = 'pip install "drytune[torch]"'


def require_torch() -> Any:
    """Import torch, or raise an ImportError that names the extra to install."""
    try:
        import torch
    except ImportError as err:
        raise ImportError(f"this needs PyTorch, which is not installed: {TORCH_HINT}") from err
    return torch


@dataclass(frozen=True)
class ResNetConfig:
    """A bottleneck ResNet: stem conv (+ optional max-pool), stages of bottleneck blocks, pool, classifier."""

    blocks: tuple[int, ...]  # bottleneck blocks per stage
    widths: tuple[int, ...]  # bottleneck (middle) channels per stage; output is 4x
    stem_channels: int
    stem_kernel: int
    stem_stride: int
    stem_pool: bool
    image_size: int
    classes: int


@dataclass(frozen=True)
class MobileNetV2Config:
    """MobileNet-V2: stem conv, inverted-residual stages (expansion t, channels c, repeats n, stride s), head."""

    stages: tuple[tuple[int, int, int, int], ...]
    stem_channels: int
    stem_stride: int
    head_channels: int
    image_size: int
    classes: int


@dataclass(frozen=True)
class BertConfig:
    """A post-LayerNorm BERT encoder stack fed with float embeddings [1, seq, hidden]."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    seq: int


RESNET50 = ResNetConfig(blocks=(3, 4, 6, 3), widths=(64, 128, 256, 512), stem_channels=64, stem_kernel=7,
                        stem_stride=2, stem_pool=True, image_size=224, classes=1000)
RESNET_TINY = ResNetConfig(blocks=(2,), widths=(8,), stem_channels=16, stem_kernel=3, stem_stride=1,
                           stem_pool=False, image_size=32, classes=10)
MOBILENET_V2 = MobileNetV2Config(
    stages=((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)),
    stem_channels=32, stem_stride=2, head_channels=1280, image_size=224, classes=1000)
MOBILENET_TINY = MobileNetV2Config(stages=((1, 8, 1, 1), (4, 16, 2, 2), (4, 24, 2, 2)), stem_channels=8,
                                   stem_stride=1, head_channels=64, image_size=32, classes=10)
BERT_BASE = BertConfig(layers=12, hidden=768, heads=12, ffn=3072, seq=128)
BERT_TINY = BertConfig(layers=2, hidden=64, heads=2, ffn=256, seq=16)

SEED = 0


def _resnet(cfg: ResNetConfig) -> Any:
    torch = require_torch()
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int):
            super().__init__()
            cout = 4 * mid
            self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(mid)
            self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(mid)
            self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            stem: list[Any] = [
                nn.Conv2d(3, cfg.stem_channels, cfg.stem_kernel, stride=cfg.stem_stride,
                          padding=cfg.stem_kernel // 2, bias=False),
                nn.BatchNorm2d(cfg.stem_channels), nn.ReLU()]
            if cfg.stem_pool:
                stem.append(nn.MaxPool2d(3, stride=2, padding=1))
            self.stem = nn.Sequential(*stem)
            blocks, cin = [], cfg.stem_channels
            for stage, (count, mid) in enumerate(zip(cfg.blocks, cfg.widths, strict=True)):
                for i in range(count):
                    stride = 2 if stage > 0 and i == 0 else 1
                    blocks.append(Bottleneck(cin, mid, stride))
                    cin = 4 * mid
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, cfg.classes)

        def forward(self, x):
            x = self.pool(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(x, 1))

    return ResNet(), (1, 3, cfg.image_size, cfg.image_size)


def _mobilenet_v2(cfg: MobileNetV2Config) -> Any:
    torch = require_torch()
    nn = torch.nn

    def conv_bn(cin: int, cout: int, kernel: int, stride: int, groups: int = 1, relu: bool = True) -> Any:
        layers = [nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if relu:
            layers.append(nn.ReLU6())
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int):
            super().__init__()
            hidden = cin * expand
            layers = [conv_bn(cin, hidden, 1, 1)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, 1, relu=False)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cin = [conv_bn(3, cfg.stem_channels, 3, cfg.stem_stride)], cfg.stem_channels
            for expand, cout, repeats, stride in cfg.stages:
                for i in range(repeats):
                    layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                    cin = cout
            layers.append(conv_bn(cin, cfg.head_channels, 1, 1))
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(cfg.head_channels, cfg.classes)

        def forward(self, x):
            return self.classifier(torch.flatten(self.pool(self.features(x)), 1))

    return MobileNetV2(), (1, 3, cfg.image_size, cfg.image_size)


def _bert(cfg: BertConfig) -> Any:
    torch = require_torch()
    nn = torch.nn
    head_dim = cfg.hidden // cfg.heads

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(cfg.hidden, cfg.hidden)
            self.key = nn.Linear(cfg.hidden, cfg.hidden)
            self.value = nn.Linear(cfg.hidden, cfg.hidden)
            self.attn_out = nn.Linear(cfg.hidden, cfg.hidden)
            self.attn_norm = nn.LayerNorm(cfg.hidden, eps=1e-12)
            self.ffn_in = nn.Linear(cfg.hidden, cfg.ffn)
            self.gelu = nn.GELU()
            self.ffn_out = nn.Linear(cfg.ffn, cfg.hidden)
            self.ffn_norm = nn.LayerNorm(cfg.hidden, eps=1e-12)

        def heads(self, x):
            return x.reshape(1, cfg.seq, cfg.heads, head_dim).permute(0, 2, 1, 3)

        def forward(self, x):
            q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / (head_dim**0.5)
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            ctx = ctx.permute(0, 2, 1, 3).reshape(1, cfg.seq, cfg.hidden)
            x = self.attn_norm(x + self.attn_out(ctx))
            return self.ffn_norm(x + self.ffn_out(self.gelu(self.ffn_in(x))))

    model = nn.Sequential(*[EncoderLayer() for _ in range(cfg.layers)])
    return model, (1, cfg.seq, cfg.hidden)


_BUILDERS: dict[str, Callable[[], Any]] = {
    "resnet50": lambda: _resnet(RESNET50),
    "mobilenet_v2": lambda: _mobilenet_v2(MOBILENET_V2),
    "bert_base": lambda: _bert(BERT_BASE),
    "resnet_tiny": lambda: _resnet(RESNET_TINY),
    "mobilenet_tiny": lambda: _mobilenet_v2(MOBILENET_TINY),
    "bert_tiny": lambda: _bert(BERT_TINY),
}
MODELS: tuple[str, ...] = tuple(_BUILDERS)


def _randomize_batchnorm(model: Any, gen: Any) -> None:
    """Give every BatchNorm non-trivial affine parameters and running statistics (not the 0/1 defaults)."""
    torch = require_torch()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)


def get_model(name: str) -> tuple[Any, tuple[Any, ...]]:
    """(torch module in eval mode, example input tensors) of zoo model `name`; weights are seeded, so every
    call returns the same network."""
    if name not in _BUILDERS:
        raise KeyError(f"unknown model {name!r}; the zoo has {', '.join(MODELS)}")
    torch = require_torch()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model, input_shape = _BUILDERS[name]()
        gen = torch.Generator().manual_seed(SEED + 1)
        _randomize_batchnorm(model, gen)
        example = torch.randn(*input_shape, generator=gen)
    return model.eval(), (example,)


def input_names(count: int) -> list[str]:
    """Names given to a zoo model's inputs when it is exported."""
    return ["input"] if count == 1 else [f"input{i}" for i in range(count)]


def export_onnx(name: str, path: str, opset: int = 17) -> str:
    """Write zoo model `name` to an ONNX file at `path` (TorchScript exporter; needs the onnx extra)."""
    torch = require_torch()
    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError as err:
        raise ImportError('exporting ONNX needs the onnx package: pip install "drytune[onnx]"') from err
    model, inputs = get_model(name)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, path, input_names=input_names(len(inputs)), output_names=["output"],
                          opset_version=opset, dynamo=False)
    return path

