"""Search spaces as code: sample an architecture with ``trial.suggest_*``, build a torch module.

A search space is a function ``space(trial, **options) -> Architecture``. It draws every
choice from the Optuna ``trial`` (so the sampler sees the space) and returns the built
``torch.nn.Module`` with its input shape and a JSON description of what was sampled.
Building is deterministic given the trial's parameters, so any trial is rebuilt with
:func:`rebuild` (``optuna.trial.FixedTrial``): that is how the best architecture is
exported at the end of a search and how a retried trial gets the same network.

Built-in spaces (:data:`SPACES`, ``--space NAME``)
-------------------------------------------------
``scaled`` (the default)
    The ``mobilenet`` network below over the ranges that compound scaling (EfficientNet)
    walks: input resolution 224-544 (steps of 64: camera frames and detection inputs, not
    only ImageNet's 224), width multiplier 0.5-2.0, depth 1-5 per stage. Why: on ``imx93``
    (Ethos-U65 as Vela models it) the ``mobilenet`` space's largest candidates estimate
    about 20 ms, so a 50 ms budget changed nothing and NASWOT simply climbed to the largest
    network. Here 60 random samples have CM_LV 90 % upper bounds of 6.9-322 ms (median 47
    ms, 45 % above 50 ms), so budgets of 10-100 ms bind. The ranges were set on the README's
    first command: the constrained sampler learns to avoid the infeasible region, and with
    160-480 and depth 1-4 (28 % of random samples above 50 ms) it rejected only 17-27 % of
    a 100-trial search; with 224-544 and depth 1-4 (37 %) 17-31 %; with this space 29-41 %.
``mobilenet``
    MobileNetV2/V3-style inverted residuals. A stem conv (3x3/2, 16 channels), one fixed
    depthwise-separable block, then five searched stages (base channels 24, 40, 80, 112,
    160; strides 2, 2, 2, 1, 2), a 1x1 head conv to ``6 x`` the last stage's channels,
    global average pooling and a two-layer classifier (1280 hidden units). Per stage:
    depth (1..``max_depth``), expansion ratio, depthwise kernel (3/5/7), squeeze-and-
    excitation on/off (hard-sigmoid gate, as MobileNetV3) and activation (relu,
    hardswish, silu). Global: width multiplier (channels rounded to multiples of 8) and
    input resolution.
``resnet``
    ResNet-style: stem conv (3x3 or 7x7, stride 2) + 3x3/2 max pool, four stages (strides
    1, 2, 2, 2) of basic or bottleneck blocks (one choice for the network), per-stage
    depth (1..``max_depth``), base width (stage widths ``base x 1, 2, 4, 8``), input
    resolution.
``hybrid``
    MobileNet stages at high resolution, MobileViT stages (Mehta & Rastegari, ICLR 2022) at
    the low-resolution end. A stem conv (3x3/2, 16 channels) and one inverted residual (32
    channels), then four stride-2 stages (output strides 4, 8, 16, 32; base channels 48, 64,
    96, 128), the last ``n_attention`` of them (1..``max_attention_stages``, 3) MobileViT
    stages, the others MV2 stages; a 1x1 head conv to ``4 x`` the last stage's channels,
    global average pooling and a linear classifier. MV2 stage: depth (1..``max_depth``, 3),
    expansion (``expansions``: 2, 4, 6), depthwise kernel (``kernels``: 3, 5). MobileViT
    stage: a stride-2 inverted residual (expansion searched, kernel 3), then a MobileViT
    block: 3x3 conv, 1x1 projection to dim d (``dims``: 72, 96, 120, 144, 192), unfolding
    into 2x2 patches, L transformer layers (1..``max_layers``, 4: pre-norm LayerNorm,
    multi-head self-attention with ``heads`` 2-4 written as ``softmax(q @ k^T * scale) @ v``,
    LayerNorm, MLP with ratio ``mlp_ratios`` 2-4 and ``mlp_activations`` exact GELU or SiLU),
    a final LayerNorm, folding back, 1x1 projection to the stage's channels, concatenation
    with the block's input and a 3x3 fusion conv. Global: input resolution (``resolutions``:
    128, 192, 256, 320; multiples of 64 only, so that the 2x2 patches tile the stride-32
    map), width multiplier (``widths``: 0.5-1.5, channels rounded to multiples of 8) and the
    conv activation (``activations``: silu). The dims are multiples of 24, so every head
    count divides every dim; options that break this are refused. There is no
    :mod:`nas.direct` writer for this family: its candidates go through the torch export and
    onnxsim (LayerNorm becomes ``LayerNormalization``, exact GELU ``Div, Erf, Add, Mul, Mul``;
    attention ``Gemm``, ``Reshape``, ``Transpose``, ``Gather``, ``MatMul``, ``Softmax``), and
    layers a device profile has no rows for are estimated by the fallback and count as
    outside the design space.

Every option of a built-in space is a keyword argument (``--space-option KEY=VALUE``),
e.g. ``resolutions=[96,128]`` or ``kernels=[3,5]``. Options must stay the same for the
whole life of a study (Optuna requires each parameter's choices to be fixed).

Global pooling is written as ``x.mean((2, 3))``: it exports as one ``ReduceMean`` that the
estimator reads as a global pool, so no ``Flatten``/``Reshape`` layer (which device
profiles usually do not benchmark) enters the network.

User spaces
-----------
``--space my_pkg.spaces:tiny`` (or ``path/to/file.py:tiny``) names any function with the
signature above. It may return an :class:`Architecture`, or a tuple ``(module,
input_shape)`` / ``(module, input_shape, description)``; a missing description defaults
to the trial's parameters. :func:`register_space` adds a function to the registry.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import optuna
import torch
from torch import nn

from estimator.errors import UserError

__all__ = [
    "Architecture",
    "SpaceError",
    "SPACES",
    "SpaceFn",
    "register_space",
    "resolve_space",
    "load_callable",
    "sample",
    "rebuild",
    "mobilenet",
    "scaled",
    "resnet",
    "hybrid",
    "DEFAULT_SPACE",
    "make_divisible",
    "ACTIVATIONS",
]


class SpaceError(UserError):
    """An unknown or broken search space, or a bad space option."""


@dataclass
class Architecture:
    """One sampled architecture: the module, its input shape and a JSON description."""

    module: nn.Module
    #: full input shape, batch included, e.g. ``(1, 3, 160, 160)``
    input_shape: tuple[int, ...]
    #: JSON-ready description of the sampled architecture (what a human reads)
    description: dict[str, Any] = field(default_factory=dict)

    @property
    def resolution(self) -> int:
        return int(self.input_shape[-1])


SpaceFn = Callable[..., Any]

#: name -> space function ``(trial, **options) -> Architecture``
SPACES: dict[str, SpaceFn] = {}
#: the space ``nas search`` uses without ``--space``
DEFAULT_SPACE = "scaled"


def register_space(name: str) -> Callable[[SpaceFn], SpaceFn]:
    """Decorator: make ``fn`` available as ``--space name``."""

    def deco(fn: SpaceFn) -> SpaceFn:
        SPACES[name] = fn
        return fn

    return deco


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round channels to a multiple of ``divisor`` without losing more than 10 % (MobileNet)."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


#: activation name -> module factory (SiLU exports as Sigmoid + Mul, HardSwish as one op)
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": lambda: nn.ReLU(inplace=True),
    "relu6": lambda: nn.ReLU6(inplace=True),
    "hardswish": lambda: nn.Hardswish(inplace=True),
    "silu": lambda: nn.SiLU(inplace=True),
}


def _act(name: str) -> nn.Module:
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise SpaceError(f"unknown activation {name!r}; known: {', '.join(ACTIVATIONS)}") from None


def _cba(c_in: int, c_out: int, k: int = 1, s: int = 1, groups: int = 1, act: str | None = "relu") -> nn.Sequential:
    """Conv (no bias) + BatchNorm (+ activation); Conv and BN adjacent so they fold."""
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, k, s, (k - 1) // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(c_out)]
    if act is not None:
        layers.append(_act(act))
    return nn.Sequential(*layers)


class GlobalPool(nn.Module):
    """Global average pooling as ``mean`` over H, W (one ReduceMean in ONNX)."""

    def __init__(self, keepdim: bool = False) -> None:
        super().__init__()
        self.keepdim = keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean((2, 3), keepdim=self.keepdim)


class SqueezeExcite(nn.Module):
    """MobileNetV3 SE: pool, 1x1 reduce + ReLU, 1x1 expand + hard sigmoid, scale."""

    def __init__(self, c: int, reduction: int = 4) -> None:
        super().__init__()
        mid = make_divisible(c / reduction)
        self.pool = GlobalPool(keepdim=True)
        self.fc1 = nn.Conv2d(c, mid, 1)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(mid, c, 1)
        self.gate = nn.Hardsigmoid(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


class InvertedResidual(nn.Module):
    """MBConv: 1x1 expand (skipped at ratio 1), kxk depthwise, optional SE, 1x1 project."""

    def __init__(self, c_in: int, c_out: int, *, stride: int, expansion: float, kernel: int, se: bool,
                 act: str) -> None:
        super().__init__()
        mid = make_divisible(c_in * expansion)
        layers: list[nn.Module] = []
        if mid != c_in:
            layers.append(_cba(c_in, mid, 1, act=act))
        layers.append(_cba(mid, mid, kernel, stride, groups=mid, act=act))
        if se:
            layers.append(SqueezeExcite(mid))
        layers.append(_cba(mid, c_out, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class _Classifier(nn.Module):
    def __init__(self, c_in: int, hidden: int, classes: int, act: str, dropout: float = 0.2) -> None:
        super().__init__()
        self.pool = GlobalPool()
        self.fc1 = nn.Linear(c_in, hidden)
        self.act = _act(act)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(self.pool(x)))))


class MobileNetSpaceNet(nn.Module):
    """The network a ``mobilenet`` description builds."""

    def __init__(self, desc: Mapping[str, Any]) -> None:
        super().__init__()
        stem_c = desc["stem_channels"]
        first_act = desc["stages"][0]["activation"] if desc["stages"] else "relu"
        self.stem = _cba(3, stem_c, 3, 2, act=first_act)
        blocks: list[nn.Module] = [InvertedResidual(stem_c, desc["first_channels"], stride=1, expansion=1, kernel=3,
                                                    se=False, act=first_act)]
        c = desc["first_channels"]
        for st in desc["stages"]:
            for i in range(st["depth"]):
                blocks.append(InvertedResidual(c, st["channels"], stride=st["stride"] if i == 0 else 1,
                                               expansion=st["expansion"], kernel=st["kernel"], se=st["se"],
                                               act=st["activation"]))
                c = st["channels"]
        self.blocks = nn.Sequential(*blocks)
        last_act = desc["stages"][-1]["activation"] if desc["stages"] else first_act
        self.head = _cba(c, desc["head_channels"], 1, act=last_act)
        self.classifier = _Classifier(desc["head_channels"], desc["hidden"], desc["classes"], last_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.head(self.blocks(self.stem(x))))


#: (base channels, stride) of the searched MobileNet stages
MOBILENET_STAGES: tuple[tuple[int, int], ...] = ((24, 2), (40, 2), (80, 2), (112, 1), (160, 2))


def _choices(name: str, values: Any, kind: type | tuple[type, ...]) -> tuple[Any, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        values = (values,)
    out = tuple(values)
    if not out:
        raise SpaceError(f"space option {name!r} needs at least one value")
    for v in out:
        if not isinstance(v, kind) or (isinstance(v, bool) and kind in (int, float, (int, float))):
            raise SpaceError(f"space option {name!r}: {v!r} is not a valid choice")
    return out


def _resolution_choices(resolutions: Any, minimum: int) -> tuple[int, ...]:
    res = _choices("resolutions", resolutions, int)
    bad = [r for r in res if r < minimum]
    if bad:
        raise SpaceError(f"space option 'resolutions': {bad} below the minimum {minimum}")
    return tuple(sorted(set(res)))


def _mobilenet_arch(trial: optuna.Trial, *, resolutions: Sequence[int], widths: Sequence[float], max_depth: int,
                    expansions: Sequence[int], kernels: Sequence[int], se: Sequence[bool],
                    activations: Sequence[str], classes: int) -> Architecture:
    """Sample and build a MobileNet-block network (``mobilenet`` and ``scaled`` differ in ranges only)."""
    resolutions = _resolution_choices(resolutions, 32)
    widths = _choices("widths", widths, (int, float))
    expansions = _choices("expansions", expansions, (int, float))
    kernels = _choices("kernels", kernels, int)
    se = _choices("se", se, bool)
    activations = _choices("activations", activations, str)
    for a in activations:
        if a not in ACTIVATIONS:
            raise SpaceError(f"space option 'activations': unknown {a!r}; known: {', '.join(ACTIVATIONS)}")
    if not (isinstance(max_depth, int) and 1 <= max_depth <= 8):
        raise SpaceError(f"space option 'max_depth' must be an integer in [1, 8], got {max_depth!r}")
    if any(k < 1 or k % 2 == 0 for k in kernels):
        raise SpaceError(f"space option 'kernels' must be odd positive integers, got {list(kernels)}")

    res = trial.suggest_categorical("resolution", resolutions)
    width = float(trial.suggest_categorical("width", widths))
    stages = []
    for i, (base, stride) in enumerate(MOBILENET_STAGES):
        stages.append({
            "channels": make_divisible(base * width),
            "stride": stride,
            "depth": trial.suggest_int(f"s{i}_depth", 1, max_depth),
            "expansion": trial.suggest_categorical(f"s{i}_expansion", expansions),
            "kernel": trial.suggest_categorical(f"s{i}_kernel", kernels),
            "se": trial.suggest_categorical(f"s{i}_se", se),
            "activation": trial.suggest_categorical(f"s{i}_act", activations),
        })
    desc = {
        "family": "mobilenet",
        "resolution": int(res),
        "width": width,
        "stem_channels": make_divisible(16 * width),
        "first_channels": make_divisible(16 * width),
        "stages": stages,
        "head_channels": make_divisible(6 * stages[-1]["channels"]),
        "hidden": 1280,
        "classes": int(classes),
    }
    return Architecture(MobileNetSpaceNet(desc), (1, 3, int(res), int(res)), desc)


@register_space("mobilenet")
def mobilenet(trial: optuna.Trial, *, resolutions: Sequence[int] = (96, 128, 160, 192, 224),
              widths: Sequence[float] = (0.5, 0.75, 1.0), max_depth: int = 4,
              expansions: Sequence[int] = (3, 4, 6), kernels: Sequence[int] = (3, 5, 7),
              se: Sequence[bool] = (False, True), activations: Sequence[str] = ("relu", "hardswish", "silu"),
              classes: int = 1000) -> Architecture:
    """MobileNetV2/V3-style space (see the module docstring)."""
    return _mobilenet_arch(trial, resolutions=resolutions, widths=widths, max_depth=max_depth,
                           expansions=expansions, kernels=kernels, se=se, activations=activations, classes=classes)


#: input resolutions of the default ``scaled`` space
SCALED_RESOLUTIONS: tuple[int, ...] = (224, 288, 352, 416, 480, 544)
#: width multipliers of the default ``scaled`` space
SCALED_WIDTHS: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0)


@register_space("scaled")
def scaled(trial: optuna.Trial, *, resolutions: Sequence[int] = SCALED_RESOLUTIONS,
           widths: Sequence[float] = SCALED_WIDTHS, max_depth: int = 5,
           expansions: Sequence[int] = (3, 4, 6), kernels: Sequence[int] = (3, 5, 7),
           se: Sequence[bool] = (False, True), activations: Sequence[str] = ("relu", "hardswish", "silu"),
           classes: int = 1000) -> Architecture:
    """The default: MobileNet blocks over compound-scaling ranges (see the module docstring)."""
    return _mobilenet_arch(trial, resolutions=resolutions, widths=widths, max_depth=max_depth,
                           expansions=expansions, kernels=kernels, se=se, activations=activations, classes=classes)


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_cba(c_in, planes, 3, stride), _cba(planes, planes, 3, act=None))
        out = planes * self.expansion
        self.down = None if stride == 1 and c_in == out else _cba(c_in, out, 1, stride, act=None)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + (x if self.down is None else self.down(x)))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.body = nn.Sequential(_cba(c_in, planes, 1), _cba(planes, planes, 3, stride), _cba(planes, out, 1, act=None))
        self.down = None if stride == 1 and c_in == out else _cba(c_in, out, 1, stride, act=None)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + (x if self.down is None else self.down(x)))


class ResNetSpaceNet(nn.Module):
    """The network a ``resnet`` description builds."""

    def __init__(self, desc: Mapping[str, Any]) -> None:
        super().__init__()
        block = _Bottleneck if desc["block"] == "bottleneck" else _Basic
        base = desc["base_width"]
        k = desc["stem_kernel"]
        self.stem = nn.Sequential(_cba(3, base, k, 2), nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        c = base
        for i, st in enumerate(desc["stages"]):
            for j in range(st["depth"]):
                layers.append(block(c, st["planes"], st["stride"] if j == 0 else 1))
                c = st["planes"] * block.expansion
        self.layers = nn.Sequential(*layers)
        self.pool = GlobalPool()
        self.fc = nn.Linear(c, desc["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.layers(self.stem(x))))


@register_space("resnet")
def resnet(trial: optuna.Trial, *, resolutions: Sequence[int] = (128, 160, 192, 224),
           base_widths: Sequence[int] = (32, 48, 64), max_depth: int = 4,
           blocks: Sequence[str] = ("basic", "bottleneck"), stem_kernels: Sequence[int] = (3, 7),
           classes: int = 1000) -> Architecture:
    """ResNet-style space (see the module docstring)."""
    resolutions = _resolution_choices(resolutions, 32)
    base_widths = _choices("base_widths", base_widths, int)
    blocks = _choices("blocks", blocks, str)
    stem_kernels = _choices("stem_kernels", stem_kernels, int)
    for b in blocks:
        if b not in ("basic", "bottleneck"):
            raise SpaceError(f"space option 'blocks': unknown {b!r}; known: basic, bottleneck")
    if not (isinstance(max_depth, int) and 1 <= max_depth <= 8):
        raise SpaceError(f"space option 'max_depth' must be an integer in [1, 8], got {max_depth!r}")
    res = trial.suggest_categorical("resolution", resolutions)
    block = trial.suggest_categorical("block", blocks)
    base = trial.suggest_categorical("base_width", base_widths)
    stem_k = trial.suggest_categorical("stem_kernel", stem_kernels)
    stages = [{"planes": int(base) * 2 ** i, "stride": 1 if i == 0 else 2,
               "depth": trial.suggest_int(f"s{i}_depth", 1, max_depth)} for i in range(4)]
    desc = {"family": "resnet", "resolution": int(res), "block": block, "base_width": int(base),
            "stem_kernel": int(stem_k), "stages": stages, "classes": int(classes)}
    return Architecture(ResNetSpaceNet(desc), (1, 3, int(res), int(res)), desc)


class SelfAttention(nn.Module):
    """Multi-head self-attention written out: one qkv projection, ``softmax(q @ k^T * scale) @ v``
    per head, an output projection. Tokens ``(B, P, N, dim)``: ``P`` independent sequences of
    ``N`` tokens per input (the patch positions of a MobileViT block), batch first."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise SpaceError(f"attention dim {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, p, n, d = x.shape
        qkv = self.qkv(x).reshape(b, p, n, 3, self.heads, self.head_dim).permute(3, 0, 1, 4, 2, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        return self.proj((attn @ v).transpose(2, 3).reshape(b, p, n, d))


#: transformer MLP activation name -> module factory (GELU exact: Erf in ONNX)
MLP_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "gelu": lambda: nn.GELU(),
    "silu": lambda: nn.SiLU(),
}


class TransformerLayer(nn.Module):
    """Pre-norm transformer encoder layer: ``x + attn(LN(x))``, then ``x + mlp(LN(x))``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int, act: str) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), MLP_ACTIVATIONS[act](),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class MobileViTBlock(nn.Module):
    """MobileViT block (Mehta & Rastegari, ICLR 2022): local 3x3 conv and 1x1 projection to
    ``dim``, unfold into ``patch x patch`` patches (``patch**2`` sequences of ``H W / patch**2``
    tokens, one per position in the patch), transformer layers and a final LayerNorm, fold
    back, 1x1 projection to the block's channels, concatenation with the block's input and a
    3x3 fusion conv. The tokens are ``(B, patch**2, N, dim)``, batch first like every other
    tensor of the network (the NASWOT proxy reads each activation's first dimension as the
    batch).

    A feature map that the patches do not tile (an input other than the sampled resolution,
    e.g. the proxies' quarter-resolution batch) is resized bilinearly to the next multiple of
    the patch and back, as MobileViT does; at the sampled resolution they always tile it, so
    the exported graph has no resize."""

    def __init__(self, channels: int, dim: int, *, layers: int, heads: int, mlp_ratio: int, mlp_act: str,
                 act: str, patch: int = 2) -> None:
        super().__init__()
        self.patch = patch
        self.local = nn.Sequential(_cba(channels, channels, 3, act=act), nn.Conv2d(channels, dim, 1, bias=False))
        self.transformer = nn.Sequential(*[TransformerLayer(dim, heads, mlp_ratio, mlp_act) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.proj = _cba(dim, channels, 1, act=act)
        self.fusion = _cba(2 * channels, channels, 3, act=act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.local(x)
        b, d, h, w = y.shape
        p = self.patch
        ph, pw = -(-h // p) * p, -(-w // p) * p
        resized = (ph, pw) != (h, w)
        if resized:
            y = nn.functional.interpolate(y, size=(ph, pw), mode="bilinear", align_corners=False)
        nh, nw = ph // p, pw // p
        t = y.reshape(b, d, nh, p, nw, p).permute(0, 3, 5, 2, 4, 1).reshape(b, p * p, nh * nw, d)
        t = self.norm(self.transformer(t))
        y = t.reshape(b, p, p, nh, nw, d).permute(0, 5, 3, 1, 4, 2).reshape(b, d, ph, pw)
        if resized:
            y = nn.functional.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
        return self.fusion(torch.cat([x, self.proj(y)], 1))


class HybridSpaceNet(nn.Module):
    """The network a ``hybrid`` description builds."""

    def __init__(self, desc: Mapping[str, Any]) -> None:
        super().__init__()
        act = desc["activation"]
        stem_c, c = desc["stem_channels"], desc["first_channels"]
        self.stem = _cba(3, stem_c, 3, 2, act=act)
        blocks: list[nn.Module] = [InvertedResidual(stem_c, c, stride=1, expansion=1, kernel=3, se=False, act=act)]
        for st in desc["stages"]:
            if st["type"] == "mv2":
                for i in range(st["depth"]):
                    blocks.append(InvertedResidual(c, st["channels"], stride=st["stride"] if i == 0 else 1,
                                                   expansion=st["expansion"], kernel=st["kernel"], se=False, act=act))
                    c = st["channels"]
            else:
                blocks.append(InvertedResidual(c, st["channels"], stride=st["stride"], expansion=st["expansion"],
                                               kernel=3, se=False, act=act))
                c = st["channels"]
                blocks.append(MobileViTBlock(c, st["dim"], layers=st["layers"], heads=st["heads"],
                                             mlp_ratio=st["mlp_ratio"], mlp_act=st["mlp_activation"], act=act,
                                             patch=st["patch"]))
        self.blocks = nn.Sequential(*blocks)
        self.head = _cba(c, desc["head_channels"], 1, act=act)
        self.pool = GlobalPool()
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(desc["head_channels"], desc["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(self.pool(self.head(self.blocks(self.stem(x))))))


#: base channels of the four stride-2 stages of ``hybrid`` (output strides 4, 8, 16, 32)
HYBRID_STAGE_CHANNELS: tuple[int, ...] = (48, 64, 96, 128)
#: side of the square patches a MobileViT block unfolds
HYBRID_PATCH = 2


@register_space("hybrid")
def hybrid(trial: optuna.Trial, *, resolutions: Sequence[int] = (128, 192, 256, 320),
           widths: Sequence[float] = (0.5, 0.75, 1.0, 1.5), max_depth: int = 3,
           expansions: Sequence[int] = (2, 4, 6), kernels: Sequence[int] = (3, 5),
           activations: Sequence[str] = ("silu",), max_attention_stages: int = 3,
           dims: Sequence[int] = (72, 96, 120, 144, 192), max_layers: int = 4, heads: Sequence[int] = (2, 3, 4),
           mlp_ratios: Sequence[int] = (2, 3, 4), mlp_activations: Sequence[str] = ("gelu", "silu"),
           classes: int = 1000) -> Architecture:
    """MobileNet stages, then MobileViT stages at the low-resolution end (see the module docstring)."""
    stride = 2 ** (len(HYBRID_STAGE_CHANNELS) + 1)
    resolutions = _resolution_choices(resolutions, stride * HYBRID_PATCH)
    bad = [r for r in resolutions if r % (stride * HYBRID_PATCH)]
    if bad:
        raise SpaceError(f"space option 'resolutions': {bad} not multiples of {stride * HYBRID_PATCH} (the output "
                         f"stride {stride} times the {HYBRID_PATCH}x{HYBRID_PATCH} patch of the last attention stage)")
    widths = _choices("widths", widths, (int, float))
    expansions = _choices("expansions", expansions, (int, float))
    kernels = _choices("kernels", kernels, int)
    activations = _choices("activations", activations, str)
    dims = _choices("dims", dims, int)
    heads = _choices("heads", heads, int)
    mlp_ratios = _choices("mlp_ratios", mlp_ratios, int)
    mlp_activations = _choices("mlp_activations", mlp_activations, str)
    for a in activations:
        if a not in ACTIVATIONS:
            raise SpaceError(f"space option 'activations': unknown {a!r}; known: {', '.join(ACTIVATIONS)}")
    for a in mlp_activations:
        if a not in MLP_ACTIVATIONS:
            raise SpaceError(f"space option 'mlp_activations': unknown {a!r}; known: {', '.join(MLP_ACTIVATIONS)}")
    for name, value, hi in (("max_depth", max_depth, 8), ("max_layers", max_layers, 12),
                            ("max_attention_stages", max_attention_stages, len(HYBRID_STAGE_CHANNELS) - 1)):
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= hi):
            raise SpaceError(f"space option {name!r} must be an integer in [1, {hi}], got {value!r}")
    if any(k < 1 or k % 2 == 0 for k in kernels):
        raise SpaceError(f"space option 'kernels' must be odd positive integers, got {list(kernels)}")
    if any(v < 1 for v in (*dims, *heads, *mlp_ratios)):
        raise SpaceError("space options 'dims', 'heads' and 'mlp_ratios' must be positive integers")
    pairs = [(d, h) for d in dims for h in heads if d % h]
    if pairs:
        raise SpaceError(f"space options 'dims' and 'heads': every dim must be divisible by every head count; "
                         f"{', '.join(f'{d}/{h}' for d, h in pairs)} are not")

    res = trial.suggest_categorical("resolution", resolutions)
    width = float(trial.suggest_categorical("width", widths))
    act = trial.suggest_categorical("activation", activations)
    n_attn = trial.suggest_int("n_attention", 1, max_attention_stages)
    n_mv2 = len(HYBRID_STAGE_CHANNELS) - n_attn
    stages: list[dict[str, Any]] = []
    for i, base in enumerate(HYBRID_STAGE_CHANNELS):
        channels = make_divisible(base * width)
        if i < n_mv2:
            stages.append({"type": "mv2", "channels": channels, "stride": 2,
                           "depth": trial.suggest_int(f"s{i}_depth", 1, max_depth),
                           "expansion": trial.suggest_categorical(f"s{i}_expansion", expansions),
                           "kernel": trial.suggest_categorical(f"s{i}_kernel", kernels)})
        else:
            stages.append({"type": "mobilevit", "channels": channels, "stride": 2,
                           "expansion": trial.suggest_categorical(f"a{i}_expansion", expansions),
                           "dim": int(trial.suggest_categorical(f"a{i}_dim", dims)),
                           "layers": trial.suggest_int(f"a{i}_layers", 1, max_layers),
                           "heads": int(trial.suggest_categorical(f"a{i}_heads", heads)),
                           "mlp_ratio": int(trial.suggest_categorical(f"a{i}_mlp_ratio", mlp_ratios)),
                           "mlp_activation": trial.suggest_categorical(f"a{i}_mlp_act", mlp_activations),
                           "patch": HYBRID_PATCH})
    desc = {
        "family": "hybrid",
        "resolution": int(res),
        "width": width,
        "activation": act,
        "stem_channels": make_divisible(16 * width),
        "first_channels": make_divisible(32 * width),
        "stages": stages,
        "head_channels": make_divisible(4 * stages[-1]["channels"]),
        "classes": int(classes),
    }
    return Architecture(HybridSpaceNet(desc), (1, 3, int(res), int(res)), desc)


# ------------------------------------------------------------------------- resolving


def load_callable(spec: str, what: str) -> Callable[..., Any]:
    """``package.module:function`` or ``path/to/file.py:function`` -> the function."""
    if ":" not in spec:
        raise SpaceError(f"{what} {spec!r}: give a registered name or MODULE:FUNCTION (or FILE.py:FUNCTION)")
    mod_name, _, fn_name = spec.rpartition(":")
    if not mod_name or not fn_name:
        raise SpaceError(f"{what} {spec!r}: give MODULE:FUNCTION")
    try:
        if mod_name.endswith(".py") or "/" in mod_name or "\\" in mod_name:
            path = Path(mod_name).expanduser().resolve()
            if not path.is_file():
                raise SpaceError(f"{what} {spec!r}: no such file {path}")
            unique = f"_nas_user_{abs(hash(str(path)))}_{path.stem}"
            module = sys.modules.get(unique)
            if module is None:
                sp = importlib.util.spec_from_file_location(unique, path)
                if sp is None or sp.loader is None:
                    raise SpaceError(f"{what} {spec!r}: cannot import {path}")
                module = importlib.util.module_from_spec(sp)
                sys.modules[unique] = module
                try:
                    sp.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(unique, None)
                    raise
        else:
            module = importlib.import_module(mod_name)
    except SpaceError:
        raise
    except ModuleNotFoundError as e:
        raise SpaceError(f"{what} {spec!r}: cannot import module {mod_name!r} ({e})") from None
    except Exception as e:  # noqa: BLE001 - the user's module failed at import
        raise SpaceError(f"{what} {spec!r}: importing {mod_name!r} failed: {type(e).__name__}: {e}") from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        raise SpaceError(f"{what} {spec!r}: module {mod_name!r} has no function {fn_name!r}")
    return fn


def resolve_space(spec: str) -> tuple[str, SpaceFn]:
    """A registered space name or ``module:function`` -> ``(name, function)``."""
    if spec in SPACES:
        return spec, SPACES[spec]
    if ":" not in spec:
        raise SpaceError(f"unknown search space {spec!r}; built-in: {', '.join(sorted(SPACES))} "
                         "(or give MODULE:FUNCTION)")
    return spec, load_callable(spec, "search space")


def check_options(fn: Callable[..., Any], options: Mapping[str, Any], what: str, positional: int = 1) -> None:
    """Fail early, with the accepted names, if ``fn`` does not take these keyword options
    (``fn``'s first ``positional`` parameters are not options: a space's trial, an
    objective's model and trial)."""
    if not options:
        return
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = list(sig.parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = [p.name for p in params[positional:] if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise SpaceError(f"{what} does not take option(s) {', '.join(unknown)}; it takes: {', '.join(names) or 'none'}")


def _as_architecture(out: Any, trial: Any, where: str) -> Architecture:
    if isinstance(out, Architecture):
        arch = out
    elif isinstance(out, tuple) and len(out) in (2, 3) and isinstance(out[0], nn.Module):
        desc = dict(out[2]) if len(out) == 3 and out[2] is not None else {}
        arch = Architecture(out[0], tuple(int(d) for d in out[1]), desc)
    else:
        raise SpaceError(f"search space {where} returned {type(out).__name__}; return nas.spaces.Architecture "
                         "or (module, input_shape[, description])")
    if not isinstance(arch.module, nn.Module):
        raise SpaceError(f"search space {where}: the module is a {type(arch.module).__name__}, not a torch.nn.Module")
    shape = tuple(int(d) for d in arch.input_shape)
    if len(shape) != 4 or any(d < 1 for d in shape):
        raise SpaceError(f"search space {where}: input_shape must be (N, C, H, W) with positive dims, got {shape}")
    arch.input_shape = shape
    if not arch.description:
        arch.description = dict(getattr(trial, "params", {}) or {})
    return arch


def sample(space_fn: SpaceFn, trial: Any, options: Mapping[str, Any] | None = None, *, name: str = "") -> Architecture:
    """Run the space on ``trial`` and validate what it returns."""
    out = space_fn(trial, **dict(options or {}))
    return _as_architecture(out, trial, name or getattr(space_fn, "__name__", "?"))


def rebuild(space_fn: SpaceFn, params: Mapping[str, Any], options: Mapping[str, Any] | None = None, *,
            name: str = "") -> Architecture:
    """Rebuild the architecture of a finished trial from its parameters."""
    return sample(space_fn, optuna.trial.FixedTrial(dict(params)), options, name=name)


def param_count(module: nn.Module) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def is_finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False
