"""Reference architectures built in torch (random init, no downloads) and their ONNX export.

The builders follow the layer structure of the original networks (torchvision's
definitions where torchvision has one, the papers or the reference code otherwise), so
that whole-network evaluation of the estimator sees the layers real networks contain.
Only the weights are random. Every builder takes the input ``resolution`` (square) and
returns a module in ``eval()`` mode; the classification heads use global pooling, so any
resolution that survives the network's downsampling works (YOLO needs a multiple of 32,
VGG a multiple of 32 as well since its classifier is sized from it, Inception-v4 at least 75;
DeiT sizes its position embedding and EfficientFormer its attention bias from the resolution).

============================  =============================================================
name                          structure
============================  =============================================================
``resnet18``                  torchvision ResNet-18 (BasicBlock, [2, 2, 2, 2])
``resnet50``                  torchvision ResNet-50 v1.5 (Bottleneck, stride on the 3x3)
``mobilenet_v1``              MobileNetV1 1.0 (Howard et al. 2017), ReLU
``mobilenet_v2``              torchvision MobileNetV2 1.0, ReLU6
``mobilenet_v3``              torchvision MobileNetV3-Large: SE (hardsigmoid gate) + HardSwish
``efficientnet_b0``           torchvision EfficientNet-B0: MBConv, SiLU, SE (sigmoid gate)
``shufflenet_v2``             torchvision ShuffleNetV2 x1.0: chunk, concat, channel shuffle
``squeezenet``                torchvision SqueezeNet 1.1: Fire modules, ceil-mode max pools
``densenet121``               torchvision DenseNet-121 (growth 32, blocks 6-12-24-16);
                              ``block_config``/``growth_rate`` shrink it
``googlenet``                 GoogLeNet / Inception v1 with BN convs (5x5 branch as in the paper)
``inception_v4``              Inception-v4 (Szegedy et al. 2016) with BN convs, 299 by default:
                              stem, 4x A, reduction A, 7x B (1x7/7x1), reduction B, 3x C
``yolov5s``                   YOLOv5s v6 (Conv-BN-SiLU, C3, SPPF, PAN neck with nearest
                              upsample + concat, Detect head with sigmoid + box decode)
``yolov5m``, ``yolov5l``      width/depth 0.75/0.67 and 1.0/1.0 (s: 0.5/0.33)
``yolov8n`` ... ``yolov8x``   YOLOv8 detection, scales n/s/m/l/x (Conv-BN-SiLU, C2f, SPPF, PAN
                              neck, anchor-free decoupled head; its DFL and box decode are in
                              the graph, as Ultralytics' ONNX export and ``yolov5s`` have them)
``mnasnet``                   torchvision MNASNet 1.0
``regnet_x_400mf``            torchvision RegNetX-400MF (grouped 3x3 convs, group width 16)
``vgg16``                     VGG-16 (configuration D), classifier sized from the resolution
``deit_tiny``                 DeiT-Tiny/16 (Touvron et al. 2021): 16x16 conv patch embedding, dim 192,
                              12 pre-norm blocks of 3 heads, GELU MLP x4, class token, learned
                              position embedding sized from the resolution (a multiple of 16)
``mobilevit_xs``              MobileViT-XS (Mehta & Rastegari 2022), 256 by default: MV2 blocks
                              (expansion 4, SiLU), MobileViT blocks of dims 96/120/144 and depths
                              2/4/3 on 2x2 patches (unfold/fold as reshapes and transposes)
``efficientformer_l1``        EfficientFormer-L1 (Li et al. 2022): Meta4D blocks (3x3 avg-pool
                              mixer, conv-BN GELU MLP), one Meta3D block (8-head attention with
                              learned bias, LayerNorm, GELU MLP); classifier and distillation heads
``mobilenet_v4_conv_small``   MobileNetV4-Conv-Small (Qin et al. 2024): FusedIB and Universal
                              Inverted Bottleneck blocks (ExtraDW, IB, ConvNext-like), ReLU
============================  =============================================================

The transformers write attention in plain ops (qkv ``Linear``, ``q @ k^T * scale``, softmax,
``@ v``, output ``Linear``), GELU as ``nn.GELU`` (``Erf``) and LayerNorm as ``nn.LayerNorm``
(``LayerNormalization`` at opset 17). :func:`default_resolution` gives each network's input
side (640 for the YOLOs, 299 for ``inception_v4``, 256 for ``mobilevit_xs``, 224 otherwise);
:func:`build` and :func:`export_onnx` use it when no resolution is given.

:func:`export_onnx` uses torch's TorchScript-based exporter (``dynamo=False``): it works
offline with no extra dependency (the dynamo exporter needs ``onnxscript``), is
deterministic, and constant-folds the shape arithmetic of fixed-size inputs.
"""
from __future__ import annotations

import inspect
import io
import math
import warnings
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .errors import UserError

__all__ = ["ZOO", "ZooError", "build", "default_resolution", "export_onnx", "names", "param_count", "DEFAULT_OPSET"]

#: Opset used by :func:`export_onnx` when none is given.
DEFAULT_OPSET = 17


class ZooError(UserError, ValueError):
    """Unknown architecture name or an impossible configuration."""


def _make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _cbr(c_in: int, c_out: int, k: int = 3, s: int = 1, groups: int = 1,
         act: Callable[[], nn.Module] | None = nn.ReLU, p: int | None = None, bias: bool = False) -> nn.Sequential:
    """Conv (no bias) + BatchNorm (+ activation), torchvision's Conv2dNormActivation."""
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, k, s, (k - 1) // 2 if p is None else p, groups=groups, bias=bias),
        nn.BatchNorm2d(c_out),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# ----------------------------------------------------------------------------- ResNet


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block: type[_BasicBlock] | type[_Bottleneck], layers: Sequence[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.c = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._layer(block, 64, layers[0], 1)
        self.layer2 = self._layer(block, 128, layers[1], 2)
        self.layer3 = self._layer(block, 256, layers[2], 2)
        self.layer4 = self._layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _layer(self, block: Any, planes: int, n: int, stride: int) -> nn.Sequential:
        down = None
        if stride != 1 or self.c != planes * block.expansion:
            down = nn.Sequential(nn.Conv2d(self.c, planes * block.expansion, 1, stride, bias=False),
                                 nn.BatchNorm2d(planes * block.expansion))
        blocks = [block(self.c, planes, stride, down)]
        self.c = planes * block.expansion
        blocks += [block(self.c, planes) for _ in range(1, n)]
        return nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -------------------------------------------------------------------------- MobileNets


class MobileNetV1(nn.Module):
    CFG = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0) -> None:
        super().__init__()
        c = _make_divisible(32 * width_mult)
        layers: list[nn.Module] = [_cbr(3, c, 3, 2)]
        for out, s in self.CFG:
            out = _make_divisible(out * width_mult)
            layers += [_cbr(c, c, 3, s, groups=c), _cbr(c, out, 1)]
            c = out
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))


class _InvertedResidualV2(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = int(round(c_in * expand))
        self.use_res = stride == 1 and c_in == c_out
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_cbr(c_in, hidden, 1, act=nn.ReLU6))
        layers += [_cbr(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0) -> None:
        super().__init__()
        c = _make_divisible(32 * width_mult)
        last = _make_divisible(1280 * max(1.0, width_mult))
        layers: list[nn.Module] = [_cbr(3, c, 3, 2, act=nn.ReLU6)]
        for t, ch, n, s in self.CFG:
            out = _make_divisible(ch * width_mult)
            for i in range(n):
                layers.append(_InvertedResidualV2(c, out, s if i == 0 else 1, t))
                c = out
        layers.append(_cbr(c, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class _SqueezeExcitation(nn.Module):
    """torchvision's SqueezeExcitation: pool -> 1x1 conv -> act -> 1x1 conv -> gate, times x."""

    def __init__(self, c: int, squeeze: int, act: Callable[[], nn.Module] = nn.ReLU,
                 gate: Callable[[], nn.Module] = nn.Sigmoid) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.activation = act()
        self.scale_activation = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(s) * x


class _InvertedResidualV3(nn.Module):
    def __init__(self, c_in: int, k: int, c_exp: int, c_out: int, se: bool, hs: bool, stride: int) -> None:
        super().__init__()
        act = nn.Hardswish if hs else nn.ReLU
        self.use_res = stride == 1 and c_in == c_out
        layers: list[nn.Module] = []
        if c_exp != c_in:
            layers.append(_cbr(c_in, c_exp, 1, act=act))
        layers.append(_cbr(c_exp, c_exp, k, stride, groups=c_exp, act=act))
        if se:
            layers.append(_SqueezeExcitation(c_exp, _make_divisible(c_exp // 4, 8), nn.ReLU, nn.Hardsigmoid))
        layers.append(_cbr(c_exp, c_out, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res else self.block(x)


class MobileNetV3(nn.Module):
    """MobileNetV3-Large as in torchvision (width 1.0)."""

    CFG = [  # c_in, k, c_exp, c_out, SE, HS, stride
        (16, 3, 16, 16, False, False, 1), (16, 3, 64, 24, False, False, 2), (24, 3, 72, 24, False, False, 1),
        (24, 5, 72, 40, True, False, 2), (40, 5, 120, 40, True, False, 1), (40, 5, 120, 40, True, False, 1),
        (40, 3, 240, 80, False, True, 2), (80, 3, 200, 80, False, True, 1), (80, 3, 184, 80, False, True, 1),
        (80, 3, 184, 80, False, True, 1), (80, 3, 480, 112, True, True, 1), (112, 3, 672, 112, True, True, 1),
        (112, 5, 672, 160, True, True, 2), (160, 5, 960, 160, True, True, 1), (160, 5, 960, 160, True, True, 1),
    ]

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbr(3, 16, 3, 2, act=nn.Hardswish)]
        layers += [_InvertedResidualV3(*cfg) for cfg in self.CFG]
        layers.append(_cbr(160, 960, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ------------------------------------------------------------------------ EfficientNet


class _MBConv(nn.Module):
    def __init__(self, expand: int, k: int, stride: int, c_in: int, c_out: int) -> None:
        super().__init__()
        self.use_res = stride == 1 and c_in == c_out
        c_exp = _make_divisible(c_in * expand, 8)
        layers: list[nn.Module] = []
        if c_exp != c_in:
            layers.append(_cbr(c_in, c_exp, 1, act=nn.SiLU))
        layers.append(_cbr(c_exp, c_exp, k, stride, groups=c_exp, act=nn.SiLU))
        layers.append(_SqueezeExcitation(c_exp, max(1, c_in // 4), nn.SiLU, nn.Sigmoid))
        layers.append(_cbr(c_exp, c_out, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Stochastic depth is the identity at inference.
        return x + self.block(x) if self.use_res else self.block(x)


class EfficientNetB0(nn.Module):
    CFG = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
           (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbr(3, 32, 3, 2, act=nn.SiLU)]
        for t, k, s, c_in, c_out, n in self.CFG:
            for i in range(n):
                layers.append(_MBConv(t, k, s if i == 0 else 1, c_in if i == 0 else c_out, c_out))
        layers.append(_cbr(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ------------------------------------------------------------------------- ShuffleNetV2


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class _ShuffleUnit(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        bf = c_out // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), nn.BatchNorm2d(c_in),
                nn.Conv2d(c_in, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(c_in if stride > 1 else bf, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            nn.Conv2d(bf, bf, 3, stride, 1, groups=bf, bias=False), nn.BatchNorm2d(bf),
            nn.Conv2d(bf, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats: Sequence[int] = (4, 8, 4), channels: Sequence[int] = (24, 116, 232, 464, 1024),
                 num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = _cbr(3, channels[0], 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        c = channels[0]
        stages: list[nn.Module] = []
        for n, out in zip(repeats, channels[1:4]):
            stages.append(nn.Sequential(_ShuffleUnit(c, out, 2), *[_ShuffleUnit(out, out, 1) for _ in range(n - 1)]))
            c = out
        self.stages = nn.Sequential(*stages)
        self.conv5 = _cbr(c, channels[-1], 1)
        self.fc = nn.Linear(channels[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))  # a ReduceMean over H, W, as in torchvision


# --------------------------------------------------------------------------- SqueezeNet


class _Fire(nn.Module):
    def __init__(self, c_in: int, squeeze: int, e1: int, e3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(c_in, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.squeeze(x))
        return torch.cat([self.relu(self.expand1x1(x)), self.relu(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 as in torchvision."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(64, 16, 64, 64), _Fire(128, 16, 64, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(128, 32, 128, 128), _Fire(256, 32, 128, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(256, 48, 192, 192), _Fire(384, 48, 192, 192), _Fire(384, 64, 256, 256), _Fire(512, 64, 256, 256))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, num_classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


# ----------------------------------------------------------------------------- DenseNet


class _DenseLayer(nn.Module):
    def __init__(self, c_in: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(c_in)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(c_in, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, prev: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(prev, 1)  # torchvision concatenates all previous features in each layer
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class _DenseBlock(nn.Module):
    def __init__(self, n: int, c_in: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_DenseLayer(c_in + i * growth, growth, bn_size) for i in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for layer in self.layers:
            feats.append(layer(feats))
        return torch.cat(feats, 1)


class DenseNet(nn.Module):
    def __init__(self, growth_rate: int = 32, block_config: Sequence[int] = (6, 12, 24, 16),
                 num_init_features: int = 64, bn_size: int = 4, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, num_init_features, 7, 2, 3, bias=False),
                                   nn.BatchNorm2d(num_init_features), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        c = num_init_features
        for i, n in enumerate(block_config):
            layers.append(_DenseBlock(n, c, growth_rate, bn_size))
            c += n * growth_rate
            if i != len(block_config) - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                c //= 2
        layers.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.features(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.classifier(x)


# ---------------------------------------------------------------------------- GoogLeNet


class _Inception(nn.Module):
    def __init__(self, c_in: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool_proj: int) -> None:
        super().__init__()
        self.branch1 = _cbr(c_in, c1, 1)
        self.branch2 = nn.Sequential(_cbr(c_in, c3r, 1), _cbr(c3r, c3, 3))
        self.branch3 = nn.Sequential(_cbr(c_in, c5r, 1), _cbr(c5r, c5, 5))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), _cbr(c_in, pool_proj, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """Inception v1 (Szegedy et al. 2015) with BN after each conv, as torchvision builds it,
    but with the paper's 5x5 convolutions in the third branch."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _cbr(3, 64, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), _cbr(64, 64, 1), _cbr(64, 192, 3),
            nn.MaxPool2d(3, 2, ceil_mode=True))
        self.blocks = nn.Sequential(
            _Inception(192, 64, 96, 128, 16, 32, 32), _Inception(256, 128, 128, 192, 32, 96, 64),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            _Inception(480, 192, 96, 208, 16, 48, 64), _Inception(512, 160, 112, 224, 24, 64, 64),
            _Inception(512, 128, 128, 256, 24, 64, 64), _Inception(512, 112, 144, 288, 32, 64, 64),
            _Inception(528, 256, 160, 320, 32, 128, 128), nn.MaxPool2d(2, 2, ceil_mode=True),
            _Inception(832, 256, 160, 320, 32, 128, 128), _Inception(832, 384, 192, 384, 48, 128, 128))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.blocks(self.stem(x)))
        return self.fc(self.dropout(torch.flatten(x, 1)))


# -------------------------------------------------------------------------- InceptionV4


def _icbr(c_in: int, c_out: int, k: int | tuple[int, int], s: int = 1, p: int | tuple[int, int] = 0) -> nn.Sequential:
    """Inception-v4's BasicConv2d: conv (no bias, explicit padding) + BN + ReLU."""
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, s, p, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class _InceptionCat(nn.Module):
    """Parallel branches concatenated on channels (Inception-v4's stem mixes, A, B, reductions)."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], 1)


def _avg_proj(c_in: int, c_out: int) -> nn.Sequential:
    """Inception-v4's pool branch: 3x3 average pool (padding not counted) + 1x1 conv."""
    return nn.Sequential(nn.AvgPool2d(3, 1, 1, count_include_pad=False), _icbr(c_in, c_out, 1))


def _inception_a() -> _InceptionCat:
    return _InceptionCat(
        _icbr(384, 96, 1),
        nn.Sequential(_icbr(384, 64, 1), _icbr(64, 96, 3, p=1)),
        nn.Sequential(_icbr(384, 64, 1), _icbr(64, 96, 3, p=1), _icbr(96, 96, 3, p=1)),
        _avg_proj(384, 96))


def _inception_b() -> _InceptionCat:
    return _InceptionCat(
        _icbr(1024, 384, 1),
        nn.Sequential(_icbr(1024, 192, 1), _icbr(192, 224, (1, 7), p=(0, 3)), _icbr(224, 256, (7, 1), p=(3, 0))),
        nn.Sequential(_icbr(1024, 192, 1), _icbr(192, 192, (7, 1), p=(3, 0)), _icbr(192, 224, (1, 7), p=(0, 3)),
                      _icbr(224, 224, (7, 1), p=(3, 0)), _icbr(224, 256, (1, 7), p=(0, 3))),
        _avg_proj(1024, 128))


class _InceptionC(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b0 = _icbr(1536, 256, 1)
        self.b1 = _icbr(1536, 384, 1)
        self.b1a = _icbr(384, 256, (1, 3), p=(0, 1))
        self.b1b = _icbr(384, 256, (3, 1), p=(1, 0))
        self.b2 = nn.Sequential(_icbr(1536, 384, 1), _icbr(384, 448, (3, 1), p=(1, 0)),
                                _icbr(448, 512, (1, 3), p=(0, 1)))
        self.b2a = _icbr(512, 256, (1, 3), p=(0, 1))
        self.b2b = _icbr(512, 256, (3, 1), p=(1, 0))
        self.b3 = _avg_proj(1536, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = self.b1(x), self.b2(x)
        return torch.cat((self.b0(x), self.b1a(x1), self.b1b(x1), self.b2a(x2), self.b2b(x2), self.b3(x)), 1)


class InceptionV4(nn.Module):
    """Inception-v4 (Szegedy et al. 2016, Figs. 3-9) with BN after each conv, as timm and
    Cadene's ``pretrainedmodels`` build it: 42.7 M parameters, 299x299 input, an 8x8x1536 map
    before the global pool. Needs a resolution of at least 75 (the stem's
    unpadded convolutions and the two reductions)."""

    def __init__(self, resolution: int = 299, num_classes: int = 1000) -> None:
        super().__init__()
        if resolution < 75:
            raise ZooError(f"inception_v4 needs a resolution of at least 75, got {resolution}")
        self.stem = nn.Sequential(
            _icbr(3, 32, 3, 2), _icbr(32, 32, 3), _icbr(32, 64, 3, p=1),
            _InceptionCat(nn.MaxPool2d(3, 2), _icbr(64, 96, 3, 2)),                       # mixed_3a: 160
            _InceptionCat(nn.Sequential(_icbr(160, 64, 1), _icbr(64, 96, 3)),             # mixed_4a: 192
                          nn.Sequential(_icbr(160, 64, 1), _icbr(64, 64, (1, 7), p=(0, 3)),
                                        _icbr(64, 64, (7, 1), p=(3, 0)), _icbr(64, 96, 3))),
            _InceptionCat(_icbr(192, 192, 3, 2), nn.MaxPool2d(3, 2)))                     # mixed_5a: 384
        reduction_a = _InceptionCat(
            _icbr(384, 384, 3, 2),
            nn.Sequential(_icbr(384, 192, 1), _icbr(192, 224, 3, p=1), _icbr(224, 256, 3, 2)),
            nn.MaxPool2d(3, 2))                                                           # 1024
        reduction_b = _InceptionCat(
            nn.Sequential(_icbr(1024, 192, 1), _icbr(192, 192, 3, 2)),
            nn.Sequential(_icbr(1024, 256, 1), _icbr(256, 256, (1, 7), p=(0, 3)), _icbr(256, 320, (7, 1), p=(3, 0)),
                          _icbr(320, 320, 3, 2)),
            nn.MaxPool2d(3, 2))                                                           # 1536
        self.blocks = nn.Sequential(*[_inception_a() for _ in range(4)], reduction_a,
                                    *[_inception_b() for _ in range(7)], reduction_b,
                                    *[_InceptionC() for _ in range(3)])
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(1536, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.blocks(self.stem(x))), 1))


# ------------------------------------------------------------------------------- YOLOv5


def _yconv(c_in: int, c_out: int, k: int = 1, s: int = 1, p: int | None = None) -> nn.Sequential:
    return _cbr(c_in, c_out, k, s, act=nn.SiLU, p=k // 2 if p is None else p)


class _YBottleneck(nn.Module):
    """YOLO bottleneck: ``k1`` x ``k1`` then 3x3 conv (1x1 first in v5, 3x3 in v8), residual."""

    def __init__(self, c_in: int, c_out: int, shortcut: bool = True, k1: int = 1) -> None:
        super().__init__()
        self.cv1 = _yconv(c_in, c_out, k1)
        self.cv2 = _yconv(c_out, c_out, 3)
        self.add = shortcut and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class _C3(nn.Module):
    def __init__(self, c_in: int, c_out: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        c_ = c_out // 2
        self.cv1 = _yconv(c_in, c_, 1)
        self.cv2 = _yconv(c_in, c_, 1)
        self.cv3 = _yconv(2 * c_, c_out, 1)
        self.m = nn.Sequential(*[_YBottleneck(c_, c_, shortcut) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class _SPPF(nn.Module):
    def __init__(self, c_in: int, c_out: int, k: int = 5) -> None:
        super().__init__()
        c_ = c_in // 2
        self.cv1 = _yconv(c_in, c_, 1)
        self.cv2 = _yconv(c_ * 4, c_out, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class _Detect(nn.Module):
    ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))
    STRIDES = (8, 16, 32)

    def __init__(self, nc: int, ch: Sequence[int], resolution: int, decode: bool) -> None:
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, 3
        self.decode = decode
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        for i, s in enumerate(self.STRIDES):
            ny = nx = resolution // s
            yv, xv = torch.meshgrid(torch.arange(ny, dtype=torch.float32), torch.arange(nx, dtype=torch.float32),
                                    indexing="ij")
            grid = torch.stack((xv, yv), 2).expand(1, self.na, ny, nx, 2) - 0.5
            anchors = torch.tensor(self.ANCHORS[i], dtype=torch.float32).view(1, self.na, 1, 1, 2)
            self.register_buffer(f"grid{i}", grid.contiguous(), persistent=False)
            self.register_buffer(f"anchor_grid{i}", anchors.expand(1, self.na, ny, nx, 2).contiguous(),
                                 persistent=False)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        z = []
        for i, x in enumerate(xs):
            x = self.m[i](x)
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            y = x.sigmoid()
            if self.decode:
                xy, wh, conf = y.split((2, 2, self.nc + 1), 4)
                xy = (xy * 2 + getattr(self, f"grid{i}")) * self.STRIDES[i]
                wh = (wh * 2) ** 2 * getattr(self, f"anchor_grid{i}")
                y = torch.cat((xy, wh, conf), 4)
            z.append(y.view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


class YOLOv5(nn.Module):
    """YOLOv5 (v6.0+ layout). ``width``/``depth`` multiples: n 0.25/0.33, s 0.5/0.33, m 0.75/0.67,
    l 1.0/1.0."""

    def __init__(self, resolution: int = 640, nc: int = 80, width: float = 0.5, depth: float = 0.33,
                 decode: bool = True) -> None:
        super().__init__()
        if resolution % 32:
            raise ZooError(f"yolov5 needs a resolution divisible by 32, got {resolution}")

        def c(x: int) -> int:
            return _make_divisible(x * width, 8)

        def n(x: int) -> int:
            return max(round(x * depth), 1)

        self.b0 = _yconv(3, c(64), 6, 2, 2)
        self.b1 = _yconv(c(64), c(128), 3, 2)
        self.b2 = _C3(c(128), c(128), n(3))
        self.b3 = _yconv(c(128), c(256), 3, 2)
        self.b4 = _C3(c(256), c(256), n(6))
        self.b5 = _yconv(c(256), c(512), 3, 2)
        self.b6 = _C3(c(512), c(512), n(9))
        self.b7 = _yconv(c(512), c(1024), 3, 2)
        self.b8 = _C3(c(1024), c(1024), n(3))
        self.b9 = _SPPF(c(1024), c(1024), 5)
        self.h10 = _yconv(c(1024), c(512), 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h13 = _C3(c(1024), c(512), n(3), False)
        self.h14 = _yconv(c(512), c(256), 1)
        self.h17 = _C3(c(512), c(256), n(3), False)
        self.h18 = _yconv(c(256), c(256), 3, 2)
        self.h20 = _C3(c(512), c(512), n(3), False)
        self.h21 = _yconv(c(512), c(512), 3, 2)
        self.h23 = _C3(c(1024), c(1024), n(3), False)
        self.detect = _Detect(nc, (c(256), c(512), c(1024)), resolution, decode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        x10 = self.h10(self.b9(self.b8(self.b7(p4))))
        x14 = self.h14(self.h13(torch.cat((self.up(x10), p4), 1)))
        x17 = self.h17(torch.cat((self.up(x14), p3), 1))
        x20 = self.h20(torch.cat((self.h18(x17), x14), 1))
        x23 = self.h23(torch.cat((self.h21(x20), x10), 1))
        return self.detect([x17, x20, x23])


# ------------------------------------------------------------------------------- YOLOv8


class _C2f(nn.Module):
    """YOLOv8's C2f: a 1x1 conv split in two halves, ``n`` bottlenecks (3x3, 3x3) chained on
    the second half, every intermediate concatenated into a final 1x1 conv."""

    def __init__(self, c_in: int, c_out: int, n: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        self.c = c_out // 2
        self.cv1 = _yconv(c_in, 2 * self.c, 1)
        self.cv2 = _yconv((2 + n) * self.c, c_out, 1)
        self.m = nn.ModuleList(_YBottleneck(self.c, self.c, shortcut, k1=3) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class _DetectV8(nn.Module):
    """Anchor-free decoupled head: per level a box branch (two 3x3 convs, 1x1 to 4 x
    ``reg_max`` distance bins) and a class branch (two 3x3 convs, 1x1 to ``nc``); then the
    DFL (softmax over the bins, a fixed 1x1 conv with weights 0..reg_max-1) and the
    distance-to-box decode (xywh in pixels), as Ultralytics' ONNX export ends."""

    STRIDES = (8, 16, 32)

    def __init__(self, nc: int, ch: Sequence[int], resolution: int, reg_max: int = 16) -> None:
        super().__init__()
        self.nc, self.reg_max = nc, reg_max
        c2, c3 = max(16, ch[0] // 4, reg_max * 4), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(_yconv(c, c2, 3), _yconv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1)) for c in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(_yconv(c, c3, 3), _yconv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in ch)
        self.dfl = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        with torch.no_grad():
            self.dfl.weight.copy_(torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1))
        points, strides = [], []
        for s in self.STRIDES:  # anchor points at the cell centres, in grid units
            n = resolution // s
            sy, sx = torch.meshgrid(torch.arange(n, dtype=torch.float32) + 0.5,
                                    torch.arange(n, dtype=torch.float32) + 0.5, indexing="ij")
            points.append(torch.stack((sx, sy), -1).view(-1, 2))
            strides.append(torch.full((n * n, 1), float(s)))
        self.register_buffer("anchors", torch.cat(points).T.unsqueeze(0).contiguous(), persistent=False)
        self.register_buffer("strides", torch.cat(strides).T.contiguous(), persistent=False)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        b = xs[0].shape[0]
        no = self.nc + 4 * self.reg_max
        x = torch.cat([torch.cat((self.cv2[i](xi), self.cv3[i](xi)), 1).view(b, no, -1) for i, xi in enumerate(xs)], 2)
        box, cls = x.split((4 * self.reg_max, self.nc), 1)
        a = box.shape[2]
        dist = self.dfl(box.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = self.anchors - lt, self.anchors + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
        return torch.cat((dbox, cls.sigmoid()), 1)


class YOLOv8(nn.Module):
    """YOLOv8 detection (Ultralytics ``yolov8.yaml``): Conv-BN-SiLU, C2f, SPPF, a PAN neck
    with nearest upsample + concat, and the :class:`_DetectV8` head with its DFL and box
    decode in the graph (as the YOLOv5 builder keeps its decode); the output is
    ``(1, 4 + nc, anchors)``. ``depth``/``width``/``max_channels`` per scale: n 0.33/0.25/1024,
    s 0.33/0.50/1024, m 0.67/0.75/768, l 1.00/1.00/512, x 1.00/1.25/512."""

    def __init__(self, resolution: int = 640, nc: int = 80, depth: float = 0.33, width: float = 0.25,
                 max_channels: int = 1024) -> None:
        super().__init__()
        if resolution % 32:
            raise ZooError(f"yolov8 needs a resolution divisible by 32, got {resolution}")

        def c(x: int) -> int:  # Ultralytics' make_divisible: round up to a multiple of 8
            return math.ceil(min(x, max_channels) * width / 8) * 8

        def n(x: int) -> int:
            return max(round(x * depth), 1)

        self.b0 = _yconv(3, c(64), 3, 2)
        self.b1 = _yconv(c(64), c(128), 3, 2)
        self.b2 = _C2f(c(128), c(128), n(3), True)
        self.b3 = _yconv(c(128), c(256), 3, 2)
        self.b4 = _C2f(c(256), c(256), n(6), True)
        self.b5 = _yconv(c(256), c(512), 3, 2)
        self.b6 = _C2f(c(512), c(512), n(6), True)
        self.b7 = _yconv(c(512), c(1024), 3, 2)
        self.b8 = _C2f(c(1024), c(1024), n(3), True)
        self.b9 = _SPPF(c(1024), c(1024), 5)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h12 = _C2f(c(1024) + c(512), c(512), n(3))
        self.h15 = _C2f(c(512) + c(256), c(256), n(3))
        self.h16 = _yconv(c(256), c(256), 3, 2)
        self.h18 = _C2f(c(256) + c(512), c(512), n(3))
        self.h19 = _yconv(c(512), c(512), 3, 2)
        self.h21 = _C2f(c(512) + c(1024), c(1024), n(3))
        self.detect = _DetectV8(nc, (c(256), c(512), c(1024)), resolution)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        x12 = self.h12(torch.cat((self.up(p5), p4), 1))
        x15 = self.h15(torch.cat((self.up(x12), p3), 1))
        x18 = self.h18(torch.cat((self.h16(x15), x12), 1))
        x21 = self.h21(torch.cat((self.h19(x18), p5), 1))
        return self.detect([x15, x18, x21])


# ------------------------------------------------------------------------------ MNASNet


class _MnasInvRes(nn.Module):
    def __init__(self, c_in: int, c_out: int, k: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = c_in * expand
        self.use_res = c_in == c_out and stride == 1
        self.layers = nn.Sequential(_cbr(c_in, mid, 1), _cbr(mid, mid, k, stride, groups=mid),
                                    _cbr(mid, c_out, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x) + x if self.use_res else self.layers(x)


class MNASNet(nn.Module):
    """torchvision MNASNet 1.0."""

    STACKS = [(16, 24, 3, 2, 3, 3), (24, 40, 5, 2, 3, 3), (40, 80, 5, 2, 6, 3), (80, 96, 3, 1, 6, 2),
              (96, 192, 5, 2, 6, 4), (192, 320, 3, 1, 6, 1)]

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbr(3, 32, 3, 2), _cbr(32, 32, 3, 1, groups=32), _cbr(32, 16, 1, act=None)]
        for c_in, c_out, k, s, e, r in self.STACKS:
            layers.append(_MnasInvRes(c_in, c_out, k, s, e))
            layers += [_MnasInvRes(c_out, c_out, k, 1, e) for _ in range(r - 1)]
        layers.append(_cbr(320, 1280, 1))
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))


# ------------------------------------------------------------------------------- RegNet


class _RegBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, group_width: int) -> None:
        super().__init__()
        groups = c_out // group_width
        self.proj = (_cbr(c_in, c_out, 1, stride, act=None) if c_in != c_out or stride != 1 else None)
        self.f = nn.Sequential(_cbr(c_in, c_out, 1), _cbr(c_out, c_out, 3, stride, groups=groups),
                               _cbr(c_out, c_out, 1, act=None))
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sc = x if self.proj is None else self.proj(x)
        return self.activation(sc + self.f(x))


class RegNetX(nn.Module):
    """torchvision RegNetX-400MF: depths 1-2-7-12, widths 32-64-160-400, group width 16."""

    def __init__(self, depths: Sequence[int] = (1, 2, 7, 12), widths: Sequence[int] = (32, 64, 160, 400),
                 group_width: int = 16, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = _cbr(3, 32, 3, 2)
        c = 32
        stages: list[nn.Module] = []
        for d, w in zip(depths, widths):
            stages.append(nn.Sequential(*[_RegBlock(c if i == 0 else w, w, 2 if i == 0 else 1, group_width)
                                          for i in range(d)]))
            c = w
        self.trunk = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.trunk(self.stem(x))), 1))


# ---------------------------------------------------------------------------------- VGG


class VGG(nn.Module):
    CFG_D: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]

    def __init__(self, resolution: int = 224, num_classes: int = 1000) -> None:
        super().__init__()
        if resolution % 32:
            raise ZooError(f"vgg16 needs a resolution divisible by 32, got {resolution}")
        layers: list[nn.Module] = []
        c = 3
        for v in self.CFG_D:
            if isinstance(v, str):  # "M"
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        side = resolution // 32
        self.classifier = nn.Sequential(
            nn.Linear(512 * side * side, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(), nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


# ------------------------------------------------------------------ attention (shared)


class _Attention(nn.Module):
    """Multi-head self-attention on ``(B, N, C)`` tokens in plain ops: one fused qkv Linear,
    ``softmax(q @ k^T * scale) @ v`` per head, an output Linear."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class _TransformerBlock(nn.Module):
    """Pre-norm transformer encoder block: x + attn(LN(x)), x + mlp(LN(x))."""

    def __init__(self, dim: int, heads: int, mlp_dim: int, act: Callable[[], nn.Module] = nn.GELU,
                 eps: float = 1e-5) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = _Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), act(), nn.Linear(mlp_dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# -------------------------------------------------------------------------------- DeiT


class DeiT(nn.Module):
    """DeiT-Tiny/16 (Touvron et al. 2021; timm's ``deit_tiny_patch16_224``): ViT with a 16x16/16
    conv patch embedding, class token, learned position embedding sized for the resolution,
    pre-norm blocks (LayerNorm eps 1e-6, GELU MLP), head on the class token."""

    def __init__(self, resolution: int = 224, patch: int = 16, dim: int = 192, depth: int = 12, heads: int = 3,
                 mlp_ratio: float = 4.0, num_classes: int = 1000) -> None:
        super().__init__()
        if resolution % patch:
            raise ZooError(f"deit needs a resolution divisible by the patch size {patch}, got {resolution}")
        tokens = (resolution // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[_TransformerBlock(dim, heads, int(dim * mlp_ratio), eps=1e-6)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), 1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


# --------------------------------------------------------------------------- MobileViT


class _MV2(nn.Module):
    """MobileViT's MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 project (SiLU)."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = _make_divisible(c_in * expand, 8)
        self.use_res = stride == 1 and c_in == c_out
        self.block = nn.Sequential(_cbr(c_in, hidden, 1, act=nn.SiLU),
                                   _cbr(hidden, hidden, 3, stride, groups=hidden, act=nn.SiLU),
                                   _cbr(hidden, c_out, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res else self.block(x)


class _MobileViTBlock(nn.Module):
    """MobileViT block (ml-cvnets v1): 3x3 conv + 1x1 to ``dim`` (local), unfold into 2x2 patches,
    ``depth`` transformer blocks (SiLU MLP of 2 x dim, 4 heads) + LayerNorm (global), fold,
    1x1 back to ``c``, concat with the input and a 3x3 fusion conv. Feature maps not divisible
    by the patch are resized to the next multiple and back (bilinear), as the reference does."""

    def __init__(self, c: int, dim: int, depth: int, patch: int = 2, heads: int = 4, mlp_ratio: float = 2.0) -> None:
        super().__init__()
        self.patch = patch
        self.local = nn.Sequential(_cbr(c, c, 3, act=nn.SiLU), nn.Conv2d(c, dim, 1, bias=False))
        self.transformer = nn.Sequential(*[_TransformerBlock(dim, heads, int(dim * mlp_ratio), act=nn.SiLU)
                                           for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.proj = _cbr(dim, c, 1, act=nn.SiLU)
        self.fusion = _cbr(2 * c, c, 3, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fm = self.local(x)
        b, d, h, w = fm.shape
        p = self.patch
        nh, nw = -(-h // p), -(-w // p)
        resized = (nh * p, nw * p) != (h, w)
        if resized:
            fm = F.interpolate(fm, size=(nh * p, nw * p), mode="bilinear", align_corners=False)
        # [B, D, H, W] -> [B * P, N, D] with P = p * p pixels per patch, N patches
        t = fm.reshape(b * d * nh, p, nw, p).transpose(1, 2).reshape(b, d, nh * nw, p * p)
        t = t.transpose(1, 3).reshape(b * p * p, nh * nw, d)
        t = self.norm(self.transformer(t))
        t = t.reshape(b, p * p, nh * nw, d).transpose(1, 3).reshape(b * d * nh, nw, p, p)
        fm = t.transpose(1, 2).reshape(b, d, nh * p, nw * p)
        if resized:
            fm = F.interpolate(fm, size=(h, w), mode="bilinear", align_corners=False)
        return self.fusion(torch.cat((x, self.proj(fm)), 1))


class MobileViT(nn.Module):
    """MobileViT-XS (Mehta & Rastegari 2022; ml-cvnets ``x_small``): MV2 blocks (expansion 4)
    and three MobileViT blocks of dims 96/120/144, depths 2/4/3, 2x2 patches, SiLU."""

    def __init__(self, channels: Sequence[int] = (16, 32, 48, 64, 80, 96, 384), dims: Sequence[int] = (96, 120, 144),
                 depths: Sequence[int] = (2, 4, 3), expand: int = 4, num_classes: int = 1000) -> None:
        super().__init__()
        c0, c1, c2, c3, c4, c5, c_last = channels
        self.stem = _cbr(3, c0, 3, 2, act=nn.SiLU)
        self.layer1 = _MV2(c0, c1, 1, expand)
        self.layer2 = nn.Sequential(_MV2(c1, c2, 2, expand), _MV2(c2, c2, 1, expand), _MV2(c2, c2, 1, expand))
        self.layer3 = nn.Sequential(_MV2(c2, c3, 2, expand), _MobileViTBlock(c3, dims[0], depths[0]))
        self.layer4 = nn.Sequential(_MV2(c3, c4, 2, expand), _MobileViTBlock(c4, dims[1], depths[1]))
        self.layer5 = nn.Sequential(_MV2(c4, c5, 2, expand), _MobileViTBlock(c5, dims[2], depths[2]))
        self.conv_exp = _cbr(c5, c_last, 1, act=nn.SiLU)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.1), nn.Linear(c_last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        x = self.conv_exp(self.layer5(self.layer4(self.layer3(x))))
        return self.classifier(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------------- EfficientFormer


class _Meta4D(nn.Module):
    """EfficientFormer's 4D block: x + ls1 * (avgpool3x3(x) - x), x + ls2 * conv-BN MLP (GELU)."""

    def __init__(self, dim: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.mlp = nn.Sequential(nn.Conv2d(dim, hidden, 1), nn.BatchNorm2d(hidden), nn.GELU(),
                                 nn.Conv2d(hidden, dim, 1), nn.BatchNorm2d(dim))
        self.layer_scale_1 = nn.Parameter(torch.full((dim, 1, 1), 1e-5))
        self.layer_scale_2 = nn.Parameter(torch.full((dim, 1, 1), 1e-5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.layer_scale_1 * (self.pool(x) - x)
        return x + self.layer_scale_2 * self.mlp(x)


class _EFAttention(nn.Module):
    """EfficientFormer's attention: 8 heads, key dim 32, value dim 4 x 32, a learned bias per
    head and relative offset on the ``side x side`` grid, added to the scaled logits."""

    def __init__(self, dim: int, side: int, key_dim: int = 32, heads: int = 8, attn_ratio: int = 4) -> None:
        super().__init__()
        self.heads, self.key_dim, self.d = heads, key_dim, attn_ratio * key_dim
        self.scale = key_dim ** -0.5
        self.qkv = nn.Linear(dim, heads * (2 * key_dim + self.d))
        self.proj = nn.Linear(heads * self.d, dim)
        points = [(i, j) for i in range(side) for j in range(side)]
        offsets: dict[tuple[int, int], int] = {}
        idxs = [offsets.setdefault((abs(a[0] - b[0]), abs(a[1] - b[1])), len(offsets)) for a in points for b in points]
        self.attention_biases = nn.Parameter(torch.randn(heads, len(offsets)) * 0.02)
        self.register_buffer("attention_bias_idxs", torch.tensor(idxs, dtype=torch.long).view(len(points), len(points)),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.d], dim=3)
        attn = q @ k.transpose(-2, -1) * self.scale + self.attention_biases[:, self.attention_bias_idxs]
        attn = torch.softmax(attn, dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, self.heads * self.d))


class _Meta3D(nn.Module):
    """EfficientFormer's 3D block on tokens: x + ls1 * attn(LN(x)), x + ls2 * MLP(LN(x)) (GELU)."""

    def __init__(self, dim: int, side: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.token_mixer = _EFAttention(dim, side)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.layer_scale_1 = nn.Parameter(torch.full((dim,), 1e-5))
        self.layer_scale_2 = nn.Parameter(torch.full((dim,), 1e-5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.layer_scale_1 * self.token_mixer(self.norm1(x))
        return x + self.layer_scale_2 * self.mlp(self.norm2(x))


class _Flat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2).transpose(1, 2)


class EfficientFormer(nn.Module):
    """EfficientFormer-L1 (Li et al. 2022; snap-research reference): stem of two 3x3/2 conv-BN-ReLU,
    Meta4D stages 48-96-224-448 (depths 3-2-6-4) joined by 3x3/2 conv-BN embeddings, the last
    ``vit_num`` blocks of stage 4 Meta3D, LayerNorm, token mean, and the classifier and
    distillation heads averaged (inference mode of the reference)."""

    def __init__(self, resolution: int = 224, widths: Sequence[int] = (48, 96, 224, 448),
                 depths: Sequence[int] = (3, 2, 6, 4), vit_num: int = 1, num_classes: int = 1000) -> None:
        super().__init__()
        if not 1 <= vit_num <= depths[-1]:
            raise ZooError(f"vit_num must be in 1..{depths[-1]}, got {vit_num}")
        side = int(resolution)
        for _ in range(5):  # two stem convs and three embeddings, 3x3/2 pad 1 each
            side = (side + 1) // 2
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0] // 2, 3, 2, 1), nn.BatchNorm2d(widths[0] // 2), nn.ReLU(),
                                  nn.Conv2d(widths[0] // 2, widths[0], 3, 2, 1), nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers: list[nn.Module] = []
        last = len(widths) - 1
        for i, (w, d) in enumerate(zip(widths, depths)):
            if i:
                layers.append(nn.Sequential(nn.Conv2d(widths[i - 1], w, 3, 2, 1), nn.BatchNorm2d(w)))
            n4d = d - vit_num if i == last else d
            layers += [_Meta4D(w) for _ in range(n4d)]
            if i == last:
                layers.append(_Flat())
                layers += [_Meta3D(w, side) for _ in range(vit_num)]
        self.network = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(widths[-1])
        self.head = nn.Linear(widths[-1], num_classes)
        self.dist_head = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.network(self.stem(x))).mean(-2)
        return (self.head(x) + self.dist_head(x)) / 2


# ----------------------------------------------------------------------- MobileNetV4


class _FusedIB(nn.Module):
    """Fused inverted bottleneck: kxk conv-BN-ReLU expansion (carrying the stride), 1x1 conv-BN projection."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, expand: float) -> None:
        super().__init__()
        hidden = _make_divisible(c_in * expand, 8)
        self.use_res = stride == 1 and c_in == c_out
        self.block = nn.Sequential(_cbr(c_in, hidden, k, stride), _cbr(hidden, c_out, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res else self.block(x)


class _UIB(nn.Module):
    """Universal Inverted Bottleneck (MobileNetV4): optional start depthwise kxk (BN, no act) on the
    input, 1x1 expansion (BN, ReLU), optional middle depthwise kxk (BN, ReLU), 1x1 projection (BN).
    ``start_k``/``mid_k`` of 0 leave that depthwise out: (k, k) ExtraDW, (0, k) IB, (k, 0)
    ConvNext-like, (0, 0) FFN. The stride goes to the middle depthwise when there is one."""

    def __init__(self, c_in: int, c_out: int, start_k: int, mid_k: int, stride: int, expand: float) -> None:
        super().__init__()
        hidden = _make_divisible(c_in * expand, 8)
        self.use_res = stride == 1 and c_in == c_out
        layers: list[nn.Module] = []
        if start_k:
            layers.append(_cbr(c_in, c_in, start_k, 1 if mid_k else stride, groups=c_in, act=None))
        layers.append(_cbr(c_in, hidden, 1))
        if mid_k:
            layers.append(_cbr(hidden, hidden, mid_k, stride, groups=hidden))
        layers.append(_cbr(hidden, c_out, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res else self.block(x)


class MobileNetV4(nn.Module):
    """MobileNetV4-Conv-Small (Qin et al. 2024, Table for MNv4-Conv-S; the TF reference's
    ``MobileNetV4ConvSmall`` spec): ReLU, BN; head 1x1 conv to 960, global pool, 1x1 conv-BN-ReLU
    to 1280, classifier."""

    FUSED = [(32, 3, 2, 1.0), (64, 3, 2, 3.0)]  # c_out, k, stride, expansion
    UIB = [  # c_out, start_k, mid_k, stride, expansion
        (96, 5, 5, 2, 3.0),  # ExtraDW
        (96, 0, 3, 1, 2.0), (96, 0, 3, 1, 2.0), (96, 0, 3, 1, 2.0), (96, 0, 3, 1, 2.0),  # IB
        (96, 3, 0, 1, 4.0),  # ConvNext-like
        (128, 3, 3, 2, 6.0), (128, 5, 5, 1, 4.0),  # ExtraDW
        (128, 0, 5, 1, 4.0), (128, 0, 5, 1, 3.0), (128, 0, 3, 1, 4.0), (128, 0, 3, 1, 4.0),  # IB
    ]

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbr(3, 32, 3, 2)]
        c = 32
        for c_out, k, s, e in self.FUSED:
            layers.append(_FusedIB(c, c_out, k, s, e))
            c = c_out
        for c_out, ks, km, s, e in self.UIB:
            layers.append(_UIB(c, c_out, ks, km, s, e))
            c = c_out
        layers.append(_cbr(c, 960, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.conv_head = _cbr(960, 1280, 1)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_head(self.avgpool(self.features(x)))
        return self.classifier(torch.flatten(x, 1))


# ------------------------------------------------------------------------------- registry

#: YOLOv8 scale -> (depth, width, max_channels), Ultralytics' ``yolov8.yaml``
_YOLOV8_SCALES = {"n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768),
                  "l": (1.00, 1.00, 512), "x": (1.00, 1.25, 512)}


def _yolov8(depth: float, width: float, max_channels: int) -> Callable[..., nn.Module]:
    def builder(resolution: int = 640, **kw: Any) -> nn.Module:
        return YOLOv8(resolution, **{"depth": depth, "width": width, "max_channels": max_channels, **kw})
    return builder


#: name -> builder(resolution, **kwargs). Builders that do not depend on the resolution
#: ignore it (their global pooling adapts).
ZOO: dict[str, Callable[..., nn.Module]] = {
    "resnet18": lambda resolution=224, **kw: ResNet(_BasicBlock, (2, 2, 2, 2), **kw),
    "resnet50": lambda resolution=224, **kw: ResNet(_Bottleneck, (3, 4, 6, 3), **kw),
    "mobilenet_v1": lambda resolution=224, **kw: MobileNetV1(**kw),
    "mobilenet_v2": lambda resolution=224, **kw: MobileNetV2(**kw),
    "mobilenet_v3": lambda resolution=224, **kw: MobileNetV3(**kw),
    "efficientnet_b0": lambda resolution=224, **kw: EfficientNetB0(**kw),
    "shufflenet_v2": lambda resolution=224, **kw: ShuffleNetV2(**kw),
    "squeezenet": lambda resolution=224, **kw: SqueezeNet(**kw),
    "densenet121": lambda resolution=224, **kw: DenseNet(**kw),
    "googlenet": lambda resolution=224, **kw: GoogLeNet(**kw),
    "inception_v4": lambda resolution=299, **kw: InceptionV4(resolution, **kw),
    "yolov5s": lambda resolution=640, **kw: YOLOv5(resolution, **kw),
    "yolov5m": lambda resolution=640, **kw: YOLOv5(resolution, **{"width": 0.75, "depth": 0.67, **kw}),
    "yolov5l": lambda resolution=640, **kw: YOLOv5(resolution, **{"width": 1.0, "depth": 1.0, **kw}),
    **{f"yolov8{s}": _yolov8(*scale) for s, scale in _YOLOV8_SCALES.items()},
    "mnasnet": lambda resolution=224, **kw: MNASNet(**kw),
    "regnet_x_400mf": lambda resolution=224, **kw: RegNetX(**kw),
    "vgg16": lambda resolution=224, **kw: VGG(resolution, **kw),
    "deit_tiny": lambda resolution=224, **kw: DeiT(resolution, **kw),
    "mobilevit_xs": lambda resolution=256, **kw: MobileViT(**kw),
    "efficientformer_l1": lambda resolution=224, **kw: EfficientFormer(resolution, **kw),
    "mobilenet_v4_conv_small": lambda resolution=224, **kw: MobileNetV4(**kw),
}


def names() -> list[str]:
    return list(ZOO)


def default_resolution(name: str) -> int:
    """The input side ``name`` is built at when no resolution is given (its builder's default)."""
    try:
        builder = ZOO[name]
    except KeyError:
        raise ZooError(f"unknown architecture {name!r}; known: {', '.join(ZOO)}") from None
    return int(inspect.signature(builder).parameters["resolution"].default)


def build(name: str, resolution: int | None = None, *, seed: int = 0, **kwargs: Any) -> nn.Module:
    """Build architecture ``name`` with random weights (deterministic for a ``seed``), in eval mode.

    ``resolution`` defaults to :func:`default_resolution`.

    BatchNorm running statistics are randomised too (as after training), so that BN folding
    and the numeric checks downstream see realistic, non-trivial values.
    """
    try:
        builder = ZOO[name]
    except KeyError:
        raise ZooError(f"unknown architecture {name!r}; known: {', '.join(ZOO)}") from None
    if resolution is None:
        resolution = default_resolution(name)
    if int(resolution) < 32:
        raise ZooError(f"resolution must be >= 32, got {resolution}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            model = builder(resolution=int(resolution), **kwargs)
        except TypeError as e:
            raise ZooError(f"bad arguments for {name!r}: {e}") from None
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None and m.running_var is not None:
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
    return model.eval()


def export_onnx(module_or_name: nn.Module | str, resolution: int | None = None, opset: int | None = None, *,
                batch: int = 1, in_channels: int = 3, input_shape: Sequence[int] | None = None,
                input_name: str = "input", dynamic_batch: bool = False) -> bytes:
    """Export a module (or a :data:`ZOO` name, built at ``resolution``) to ONNX bytes.

    The input is ``(batch, in_channels, resolution, resolution)`` unless ``input_shape`` is
    given; ``resolution`` defaults to the name's :func:`default_resolution` (224 for a
    module). ``dynamic_batch`` marks dim 0 as a named dynamic dimension ``batch``.
    Uses the TorchScript-based exporter (see the module docstring); ``opset`` defaults to
    :data:`DEFAULT_OPSET`.
    """
    if resolution is None:
        resolution = default_resolution(module_or_name) if isinstance(module_or_name, str) else 224
    module = build(module_or_name, resolution) if isinstance(module_or_name, str) else module_or_name
    module = module.eval()
    shape = tuple(int(d) for d in input_shape) if input_shape is not None else (batch, in_channels, resolution, resolution)
    example = torch.zeros(shape)
    opset = DEFAULT_OPSET if opset is None else int(opset)
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(  # a file-like object is accepted
            module, (example,), buf,  # type: ignore[arg-type]
            dynamo=False, opset_version=opset, do_constant_folding=True,
            input_names=[input_name], output_names=["output"],
            dynamic_axes={input_name: {0: "batch"}, "output": {0: "batch"}} if dynamic_batch else None,
        )
    return buf.getvalue()


def param_count(module: nn.Module) -> int:
    """Trainable parameter count, as torch reports it."""
    return sum(p.numel() for p in module.parameters())

