"""The benchmarked design space's raw draws, shared by the layer-type modules' samplers.

The broad space is the smart-padding paper's: h, w <= 1024, kernels <= 11, strides 1-2
(asymmetric kernels and strides included), channels up to 2048 (fc up to 4096). The
*network prior* (``prior=True``) draws where real CNNs live: square inputs from the
resolutions a 224/320 input is divided down to (plus YOLO-style 10/20/40/80), channels that
are multiples of 8 (3 for stems), square kernels 1/3/5/7, strides 1/2, SAME padding.
``bench.sampling`` turns a type's draws into a FLOPs-balanced, seeded plan.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Any

import numpy as np

from .params import same_pads

__all__ = ["SPACE_MAX", "PRIOR_HW", "PRIOR_C", "PRIOR_TOKENS", "PRIOR_WIDTHS", "PRIOR_HEADS", "MAX_ROWS", "MAX_ROW_ELEMS", "UnitHash", "loguniform_int", "channels", "hw", "kernel",
           "strides", "pads", "off_ladder"]

#: The raw parameter space.
SPACE_MAX = dict(hw=1024, k=11, s=2, c=2048, fc_c=4096, dilation=4)

#: A uniform number in [0, 1) fixed by a configuration and a salt (``bench.sampling``):
#: the network prior's variants are chosen by it, not by the generator, so that adding a
#: variant leaves the other draws (and configurations measured before) unchanged.
UnitHash = Callable[[Mapping[str, Any], str], float]

_COMMON_C = (3, 8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 144, 160, 192, 240, 256, 320, 384, 480, 512, 576,
             640, 672, 768, 960, 1024, 1152, 1280, 1536, 2048)
_COMMON_HW = (7, 8, 13, 14, 16, 20, 26, 28, 32, 40, 52, 56, 64, 80, 104, 112, 128, 160, 208, 224, 256, 320, 416,
              512, 640)
#: Network prior: feature-map sizes of 224/256/320-input CNNs and 320/640-input detectors.
PRIOR_HW = (7, 8, 10, 13, 14, 16, 20, 26, 28, 32, 40, 52, 56, 64, 80, 112, 128, 160, 224, 320)
#: Network prior: channel counts (multiples of 8, the MobileNet/EfficientNet/ResNet ladders).
PRIOR_C = tuple(sorted(set(c for c in _COMMON_C if c % 8 == 0) | {56, 72, 88, 120, 136, 184, 200, 232, 272, 288, 336, 400,
                                                      432, 528, 720, 816, 864, 896, 1088, 1232, 1344, 1824}))

#: Network prior of transformer layers: token counts (7x7..56x56 maps, +1 class token), widths
#: and attention heads.
PRIOR_TOKENS = (16, 49, 50, 64, 65, 144, 196, 197, 256, 257, 576, 784, 1024)
PRIOR_WIDTHS = (64, 96, 128, 192, 240, 256, 288, 384, 480, 576, 768, 1024, 1536)
PRIOR_HEADS = (1, 2, 3, 4, 6, 8, 12)
#: The broad space's cap on rows of a token tensor.
MAX_ROWS = 4096
#: The broad space's cap on the elements of a tensor padded as rows
#: (:func:`~estimator.layers.registry.rows_of`): what it allows a ``(1, c, 1, w)`` map. A row
#: tensor's two dimensions are not a map's channels and width: attention's ``(heads, tokens,
#: d)`` folds into ``(1, heads tokens, 1, d)`` or, sliced along its first axis, ``(1, 3 heads,
#: 1, tokens d)`` (DeiT-Tiny's q/k/v: 12,608-element rows), and MobileViT's unfolded patches
#: into ``(1, 49152, 1, 2)``.
MAX_ROW_ELEMS = SPACE_MAX["c"] * SPACE_MAX["hw"]


def loguniform_int(r: np.random.Generator, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, math.floor(math.exp(r.uniform(math.log(lo), math.log(hi + 1)))))))


def channels(r: np.random.Generator, hi: int = SPACE_MAX["c"], prior: bool = False, h: int | None = None) -> int:
    if prior:  # CNNs widen as they downsample: at h x h, about 14336/h channels at most, /16 at least
        top = min(hi, max(64, 14336 // h)) if h else hi
        cands = [c for c in PRIOR_C if top // 16 <= c <= top]
        return int(cands[r.integers(len(cands))])
    u = r.random()
    if u < 0.4:
        cands = [c for c in _COMMON_C if c <= hi]
        return int(cands[r.integers(len(cands))])
    c = loguniform_int(r, 1, hi)
    if u < 0.7 and c >= 8:  # networks like multiples of 8
        c = min(hi, int(round(c / 8)) * 8)
    return c


def hw(r: np.random.Generator, prior: bool = False) -> tuple[int, int]:
    if prior:
        h = int(PRIOR_HW[r.integers(len(PRIOR_HW))])
        return h, h
    u = r.random()
    if u < 0.35:
        h = int(_COMMON_HW[r.integers(len(_COMMON_HW))])
    else:
        h = loguniform_int(r, 1, SPACE_MAX["hw"])
    if r.random() < 0.75:
        return h, h
    return h, loguniform_int(r, 1, SPACE_MAX["hw"])


def kernel(r: np.random.Generator, *, pool: bool = False, prior: bool = False) -> tuple[int, int]:
    ks: tuple[int, ...]
    ps: tuple[float, ...]
    if prior:
        k = int(r.choice((2, 3, 5, 7), p=(0.25, 0.55, 0.15, 0.05)) if pool else
                r.choice((1, 3, 5, 7), p=(0.45, 0.4, 0.08, 0.07)))
        if not pool and k > 1 and r.random() < 0.06:  # Inception-style 1xk / kx1
            return (1, k) if r.random() < 0.5 else (k, 1)
        return k, k
    if pool:
        ks, ps = (2, 3, 5, 7, 9, 11, 4, 6, 8, 10), (0.3, 0.35, 0.12, 0.05, 0.04, 0.02, 0.03, 0.03, 0.03, 0.03)
    else:
        ks, ps = (1, 3, 5, 7, 2, 4, 6, 8, 9, 10, 11), (0.3, 0.33, 0.1, 0.08, 0.03, 0.03, 0.03, 0.03, 0.03, 0.02, 0.02)
    k = int(r.choice(ks, p=np.array(ps) / sum(ps)))
    u = r.random()
    if u < 0.12 and not pool and k > 1:  # Inception-style 1xk / kx1
        return (1, k) if r.random() < 0.5 else (k, 1)
    if u < 0.17:  # any asymmetric pair
        return int(r.integers(1, SPACE_MAX["k"] + 1)), int(r.integers(1, SPACE_MAX["k"] + 1))
    return k, k


def strides(r: np.random.Generator, prior: bool = False) -> tuple[int, int]:
    if prior:
        return (1, 1) if r.random() < 0.75 else (2, 2)
    u = r.random()
    if u < 0.6:
        return 1, 1
    if u < 0.95:
        return 2, 2
    return (1, 2) if r.random() < 0.5 else (2, 1)


def pads(r: np.random.Generator, h: int, w: int, k_h: int, k_w: int, s_h: int, s_w: int,
         d_h: int = 1, d_w: int = 1, prior: bool = False) -> dict[str, int]:
    """TensorFlow SAME (80 %; always in the network prior) or VALID (20 %) padding, written
    out explicitly."""
    if prior or r.random() < 0.8:
        (t, b), (l, rr) = same_pads(h, k_h, s_h, d_h), same_pads(w, k_w, s_w, d_w)
        return dict(p_t=t, p_l=l, p_b=b, p_r=rr)
    return dict(p_t=0, p_l=0, p_b=0, p_r=0)


#: Offsets that move a channel count off the multiple-of-8 ladder: every residue but 0.
_OFF_LADDER_OFFSETS = (-7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7)


def off_ladder(c: int, u: float) -> int:
    """Channel count ``c`` moved by the offset that ``u`` in [0, 1) picks off the
    multiple-of-8 ladder (kept within 1..SPACE_MAX["c"]). Networks use such counts
    (ShuffleNetV2's 58, width multipliers, channel pruning), and kernels care: ONNX
    Runtime's depthwise kernel runs 5-10x slower per channel when c is not a multiple of 4
    (3x3 depthwise at 56x56 on host-cpu: c=56 0.89 us per channel, c=58 5.5 us)."""
    d = _OFF_LADDER_OFFSETS[int(len(_OFF_LADDER_OFFSETS) * u)]
    if not 1 <= c + d <= SPACE_MAX["c"]:
        d = -d
    return max(1, c + d)
