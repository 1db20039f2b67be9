"""Objectives: zero-cost accuracy proxies (the default) and user objectives (``module:function``).

An objective is ``objective(model, trial, **options) -> float``: higher is better. It gets
the freshly built ``torch.nn.Module`` (random init, train mode) and the Optuna trial,
whose user attributes already hold ``input_shape``, ``arch`` (the JSON description) and
the latency estimate (``latency_ms``, ``CM_LV_upper_ms``, ...), so an objective can use
them. A user objective may train the model for real; the latency was estimated before it
is called. If it raises, that trial alone fails (state FAIL, the message in the trial's
``fail_reason``) and the search goes on.

These proxies are **not accuracy**. They are cheap scores computed at initialisation
that correlate, loosely and space-dependently, with the accuracy a network reaches after
training. Use them to rank candidates inside one search space, and plug in real training
(``--objective my_train:evaluate``) for decisions that matter.

``naswot`` (default): Mellor et al., "Neural Architecture Search without Training", ICML 2021
------------------------------------------------------------------------------------------
A batch of ``batch`` inputs is pushed through the network in train mode (BatchNorm uses
batch statistics, as in the authors' code). Every activation unit gives a binary code
per input: 1 where its pre-activation is positive (the ReLU is "on"). With ``c_i`` the
concatenated code of input ``i`` over all ``N_A`` units, the kernel is
``K[i, j] = N_A - d_H(c_i, c_j)`` (number of units on which inputs ``i`` and ``j``
agree) and the score is ``log |det K|``. Networks that map different inputs to more
different activation patterns score higher. The original is defined for ReLU; here every
activation module (ReLU, ReLU6, HardSwish, SiLU, GELU, ...) contributes the sign of its
input, which for a ReLU network is exactly the original code. Modules without activation
modules (functional activations) fall back to the signs of every Conv2d/Linear output.

The inputs are produced offline by :func:`synthetic_images` (no data set download): each
image is a sum of random oriented sinusoidal gratings and Gaussian blobs with a little
noise, normalised per channel, deterministic for a seed. Cost control: the batch is run
at ``scale`` times the candidate's resolution (default 1/4, at least 16 pixels), which
keeps the proxy's cost a fraction of one full-resolution forward pass while keeping its
dependence on the resolution (the number of units scales with it). The module's 4-D weights
are put in channels-last memory format for the pass (same values; faster convolutions on
CPUs). Defaults: ``batch=16,
scale=0.25, seed=0``; change them with ``--objective-option``.

``synflow``: Tanaka et al., "Pruning neural networks without any data by iteratively conserving synaptic flow", NeurIPS 2020
-------------------------------------------------------------------------------------------------------------------------
On a float64 copy in eval mode with every parameter replaced by its absolute value, an
all-ones input is pushed through and ``R = sum(output)`` back-propagated; the score is
``log(sum |theta * dR/dtheta|)`` (the log keeps it in a sane range; the ranking is the
paper's). Data-free. Same ``scale`` option as ``naswot``.
"""
from __future__ import annotations

import copy
import functools
import math
import numbers
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from estimator.errors import UserError

from .spaces import SpaceError, load_callable

__all__ = ["ProxyError", "OBJECTIVES", "DETERMINISTIC", "resolve_objective", "check_objective_options", "naswot", "synflow",
           "synthetic_images", "proxy_resolution"]


class ProxyError(UserError):
    """The proxy cannot score this network (e.g. degenerate activation codes)."""


#: activation modules whose input sign is the NASWOT code
_ACT_TYPES: tuple[type[nn.Module], ...] = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU, nn.GELU, nn.LeakyReLU, nn.ELU,
                                          nn.Mish, nn.SELU, nn.CELU, nn.PReLU, nn.Hardtanh, nn.Softplus)


@functools.lru_cache(maxsize=16)
def _synthetic(n: int, c: int, h: int, w: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    out = np.empty((n, c, h, w), dtype=np.float32)
    for i in range(n):
        img = np.zeros((c, h, w))
        for _ in range(4):  # oriented gratings, per-channel amplitude (colour)
            theta, freq, phase = r.uniform(0, np.pi), r.uniform(1, 12), r.uniform(0, 2 * np.pi)
            g = np.sin(freq * np.pi * (xx * np.cos(theta) + yy * np.sin(theta)) + phase)
            img += r.uniform(-1, 1, size=(c, 1, 1)) * g
        for _ in range(3):  # blobs
            cx, cy, s = r.uniform(-1, 1), r.uniform(-1, 1), r.uniform(0.05, 0.5)
            b = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * s * s))
            img += r.uniform(-2, 2, size=(c, 1, 1)) * b
        img += 0.1 * r.standard_normal((c, h, w))
        mu = img.mean(axis=(1, 2), keepdims=True)
        sd = img.std(axis=(1, 2), keepdims=True) + 1e-6
        out[i] = (img - mu) / sd
    out.setflags(write=False)
    return out


def synthetic_images(n: int, channels: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """``n`` deterministic synthetic images (N, C, H, W), float32, per-channel normalised."""
    return torch.from_numpy(_synthetic(int(n), int(channels), int(height), int(width), int(seed)).copy())


def proxy_resolution(input_shape: tuple[int, ...], scale: float) -> tuple[int, int]:
    h, w = int(input_shape[-2]), int(input_shape[-1])
    return max(16, round(h * scale)), max(16, round(w * scale))


def _input_shape(trial: Any) -> tuple[int, ...]:
    shape = (getattr(trial, "user_attrs", None) or {}).get("input_shape")
    if not shape:
        raise ProxyError("the trial carries no 'input_shape' user attribute (set by the NAS loop)")
    return tuple(int(d) for d in shape)


def _integer(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_options(batch: Any = None, scale: Any = None, seed: Any = None) -> None:
    """The built-in objectives' options, those given (:func:`check_objective_options`)."""
    if batch is not None and not (_integer(batch) and batch >= 2):
        raise UserError(f"objective option batch must be an integer >= 2, got {batch!r}")
    if scale is not None and not (isinstance(scale, numbers.Real) and not isinstance(scale, bool) and 0 < scale <= 1):
        raise UserError(f"objective option scale must be a number in (0, 1], got {scale!r}")
    if seed is not None and not (_integer(seed) and seed >= 0):
        raise UserError(f"objective option seed must be an integer >= 0, got {seed!r}")


def check_objective_options(name: str, options: Mapping[str, Any]) -> None:
    """Refuse a built-in objective's option value that every trial would refuse, before a study
    exists (``nas search`` calls it with the parsed ``--objective-option`` values, whose names
    :func:`nas.spaces.check_options` has checked)."""
    if OBJECTIVES.get(name) is not None:
        _check_options(**options)


def naswot(model: nn.Module, trial: Any, *, batch: int = 16, scale: float = 0.25, seed: int = 0) -> float:
    """NASWOT score ``log|det K|`` (see the module docstring). Higher is better."""
    _check_options(batch, scale, seed)
    shape = _input_shape(trial)
    h, w = proxy_resolution(shape, scale)
    x = synthetic_images(batch, shape[1], h, w, seed)
    K = torch.zeros(batch, batch, dtype=torch.float64)
    n_units = [0]

    def code(t: torch.Tensor) -> None:
        # agreements = c_i.c_j + (1 - c_i).(1 - c_j) = 2 c_i.c_j + N - |c_i| - |c_j|: one matmul,
        # whose diagonal is |c_i| (float32 is exact on 0/1 codes: each count is below 2^24 units
        # per layer; the separate row sums were a third of the code's time)
        x = t.detach().reshape(t.shape[0], -1)
        # the 0/1 codes written as float32 by the comparison itself: (x > 0).to(float32) made a
        # bool tensor first and converted it, 4-10x slower
        c = torch.gt(x, 0, out=torch.empty(x.shape, dtype=torch.float32))
        n = c.shape[1]
        g = (c @ c.T).to(torch.float64)
        ones = torch.diagonal(g)
        K.add_(2.0 * g + n - ones[:, None] - ones[None, :])
        n_units[0] += n

    acts = [m for m in model.modules() if isinstance(m, _ACT_TYPES)]
    hooks = []
    if acts:
        for m in acts:
            hooks.append(m.register_forward_pre_hook(lambda _m, inp: code(inp[0])))
    else:
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                hooks.append(m.register_forward_hook(lambda _m, _i, out: code(out)))
    was_training = model.training
    try:
        model.train()
        # channels-last weights: oneDNN's fast layout on CPUs, about 20 % less time for the
        # same network (values unchanged; the score moves by float rounding, ~1e-8 relative)
        model.to(memory_format=torch.channels_last)
        with torch.inference_mode():
            model(x)
    finally:
        for hk in hooks:
            hk.remove()
        model.train(was_training)
    if not n_units[0]:
        raise ProxyError("naswot found no activation, Conv2d or Linear module to read codes from")
    sign, logdet = np.linalg.slogdet(K.numpy())
    if sign <= 0 or not math.isfinite(logdet):
        raise ProxyError(f"naswot: the activation-code kernel is singular ({n_units[0]} units, batch {batch}): "
                         "inputs are not told apart (dead activations?)")
    return float(logdet)


def synflow(model: nn.Module, trial: Any, *, scale: float = 0.25) -> float:
    """log SynFlow (see the module docstring). Higher is better."""
    _check_options(scale=scale)
    shape = _input_shape(trial)
    h, w = proxy_resolution(shape, scale)
    m = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.abs_()
    for p in m.parameters():
        p.requires_grad_(True)
        p.grad = None
    out = m(torch.ones((1, shape[1], h, w), dtype=torch.float64))
    torch.sum(out).backward()
    total = 0.0
    for p in m.parameters():
        if p.grad is not None:
            total += float((p.detach() * p.grad).abs().sum())
    if not (total > 0 and math.isfinite(total)):
        raise ProxyError(f"synflow: the score is {total} (overflow or a network that does not propagate)")
    return math.log(total)


#: built-in objectives (``--objective NAME``)
OBJECTIVES: dict[str, Callable[..., float]] = {"naswot": naswot, "synflow": synflow}
#: built-ins whose value depends only on the architecture (safe to reuse for a repeated one)
DETERMINISTIC = frozenset(OBJECTIVES)


def resolve_objective(spec: str) -> tuple[str, Callable[..., float], bool]:
    """A built-in name or ``module:function`` -> ``(name, function, deterministic)``."""
    if spec in OBJECTIVES:
        return spec, OBJECTIVES[spec], spec in DETERMINISTIC
    if ":" not in spec:
        raise SpaceError(f"unknown objective {spec!r}; built-in: {', '.join(OBJECTIVES)} (or give MODULE:FUNCTION)")
    return spec, load_callable(spec, "objective"), False


def call_objective(fn: Callable[..., float], model: nn.Module, trial: Any, options: Mapping[str, Any]) -> float:
    return fn(model, trial, **dict(options))
