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


def check_options(fn: Callable[..., Any], options: Mapping[str, Any], what: str) -> None:
    """Fail early, with the accepted names, if ``fn`` does not take these keyword options."""
    if not options:
        return
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = list(sig.parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = [p.name for p in params[1:] if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
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
