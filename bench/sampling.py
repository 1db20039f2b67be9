"""The sampling plan: which layer configurations ``bench run`` measures.

For each benchable layer type, random raw parameters are drawn from the type's space
(below), invalid or over-limit ones are rejected, and the survivors are **balanced across
the operation count** (Sec. III-B: "sub-sampled randomly and then balanced across the
FLOPs dimension"):

1. draw a candidate pool of ``pool_factor x samples`` valid, distinct configurations;
2. split ``log10(ops)`` (``estimator.layers.describe(...).ops``: FLOPs for conv/fc,
   window-ops for pools, elements for element-wise types) over the pool's range into
   ``bins`` equal-width bins;
3. take the same number of configurations from each bin (``samples / bins``, rounded
   so the total is ``samples``), at random; a bin with too few candidates gives all it
   has and the remainder is spread over the other bins the same way.

So small layers (dominated by fixed overheads) and large ones (compute or bandwidth
bound) are equally represented, instead of the random draw's natural pile-up.

Limits (:class:`Limits`) keep a run finite and each model loadable on the device: a cap
on ops per layer, on elements of any LUM input or output tensor, and on weights. They are
per device class (:data:`DEFAULT_LIMITS`, chosen by runner name) and overridable
(``bench run --max-ops``). The raw space itself is the paper's: h, w <= 1024, kernels
<= 11, strides 1-2 (asymmetric kernels and strides included), channels up to 2048 (fc up
to 4096), which covers ResNet (2048-channel 1x1 convs, 7x7/2 stem, 3x3/2 maxpool,
fc 2048->1000), MobileNetV2/V3 and EfficientNet (depthwise 3x3/5x5 with stride 2,
SE-style broadcast mul, hardswish/silu, 1280-channel heads), Inception (1x7/7x1) and
YOLO-style detectors (640x640 inputs, 5x5/1 SPPF maxpools, 4-way concats, nearest x2
upsampling).

**The network prior.** FLOPs-balanced draws from that broad space put few samples where
real CNNs live (a broad draw is rarely a square 3x3 conv on 56x56x64), and the layer
models' error there is what network estimates inherit. So a plan adds, per type,
``prior_samples`` configurations drawn from a *network prior* (``prior=True`` in the
draws below): square inputs from the resolutions CNNs use (7..320, the ladder a 224 or
320 input is divided down to, plus YOLO-style 10/20/40/80), channels that are multiples
of 8 (3 for stems), square kernels 1/3/5/7 (1xk/kx1 now and then), strides 1/2, SAME
padding, and the type-specific shapes of real blocks (3x3/2 and 5x5/1 max pools, SE-style
broadcast mul, x2 nearest upsampling), with the fused activations networks use (ReLU,
ReLU6, none, ...: ``act``), RegNet/ResNeXt-style grouped convolutions and, for a
share of the convolutions, channel counts off the multiple-of-8 ladder (ShuffleNetV2's 58,
pruned networks; :func:`_prior_variants`). They are *not* FLOPs-balanced: the point is the
prior's own density (balancing would turn the rare 7x7 depthwise and 3-channel stems into
a third of the draws). They come from their own generator, so the broad part of a plan is
unchanged by them (a database
measured with ``prior_samples=0`` is resumed, not redone). The prior lies inside the
broad space, so :func:`in_space` is the same for both.

Everything is seeded: the plan for ``(types, samples, prior_samples, seed, limits)`` is identical on
every run (that is what lets ``bench run`` resume). Each type draws from its own
generator (seeded by ``seed`` and the type name), so adding a type to ``--layers`` does
not change the others' configurations. Configurations are deduplicated by
:func:`config_key`, a stable hash of the type and the canonical JSON of the raw params.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from estimator.layers import ACTIVATION_KINDS, LayerSpecError, LayerType, describe

from .modelgen import BENCHABLE_TYPES, lum_io_shapes, same_pads

__all__ = ["Config", "Limits", "DEFAULT_LIMITS", "limits_for", "config_key", "canonical_params",
           "sample_type", "make_plan", "in_space", "neighbours", "SPACE_MAX", "SAMPLED_TYPES"]


@dataclass(frozen=True)
class Limits:
    """Caps on one configuration: ``max_ops`` (describe().ops), ``max_elems`` (elements of
    any LUM input/output tensor), ``max_params`` (weights)."""

    max_ops: float = 2e9
    max_elems: int = 1 << 24
    max_params: int = 1 << 24

    def to_dict(self) -> dict[str, float]:
        return {"max_ops": float(self.max_ops), "max_elems": int(self.max_elems), "max_params": int(self.max_params)}


#: Limits per runner (device class). CPUs: ~2 GFLOP per layer is ~0.1 s at a few
#: GFLOP/s single-threaded; MCU-class NPUs (Ethos-U via vela/litert) have little SRAM.
DEFAULT_LIMITS: dict[str, Limits] = {
    "onnxruntime": Limits(2e9, 1 << 24, 1 << 24),
    "litert": Limits(1e9, 1 << 22, 1 << 22),
    "vela": Limits(5e8, 1 << 20, 1 << 21),
    "tensorrt": Limits(2e10, 1 << 25, 1 << 25),
    "agent": Limits(1e9, 1 << 22, 1 << 22),
}

#: The raw parameter space.
SPACE_MAX = dict(hw=1024, k=11, s=2, c=2048, fc_c=4096, dilation=4)


def limits_for(runner: str, *, max_ops: float | None = None, max_elems: int | None = None,
               max_params: int | None = None) -> Limits:
    """The runner's default limits, with the given caps overridden."""
    lim = DEFAULT_LIMITS.get(runner, Limits())
    return Limits(lim.max_ops if max_ops is None else float(max_ops),
                  lim.max_elems if max_elems is None else int(max_elems),
                  lim.max_params if max_params is None else int(max_params))


def canonical_params(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def config_key(layer_type: str, params: Mapping[str, Any]) -> str:
    """Stable id of a configuration: sha256 of the type and canonical params (16 hex)."""
    return hashlib.sha256(f"{layer_type}|{canonical_params(params)}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Config:
    layer_type: str
    params: dict[str, Any] = field(hash=False)
    key: str = ""
    ops: float = 0.0

    @classmethod
    def make(cls, layer_type: str, params: Mapping[str, Any]) -> "Config":
        p = dict(params)
        return cls(layer_type, p, config_key(layer_type, p), float(describe(layer_type, p).ops))


# --------------------------------------------------------------------- raw space draws


def _loguniform_int(r: np.random.Generator, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, math.floor(math.exp(r.uniform(math.log(lo), math.log(hi + 1)))))))


_COMMON_C = (3, 8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 144, 160, 192, 240, 256, 320, 384, 480, 512, 576,
             640, 672, 768, 960, 1024, 1152, 1280, 1536, 2048)
_COMMON_HW = (7, 8, 13, 14, 16, 20, 26, 28, 32, 40, 52, 56, 64, 80, 104, 112, 128, 160, 208, 224, 256, 320, 416,
              512, 640)
#: Network prior: feature-map sizes of 224/256/320-input CNNs and 320/640-input detectors.
_PRIOR_HW = (7, 8, 10, 13, 14, 16, 20, 26, 28, 32, 40, 52, 56, 64, 80, 112, 128, 160, 224, 320)
#: Network prior: channel counts (multiples of 8, the MobileNet/EfficientNet/ResNet ladders).
_PRIOR_C = tuple(sorted(set(c for c in _COMMON_C if c % 8 == 0) | {56, 72, 88, 120, 136, 184, 200, 232, 272, 288, 336, 400,
                                                       432, 528, 720, 816, 864, 896, 1088, 1232, 1344, 1824}))


def _channels(r: np.random.Generator, hi: int = SPACE_MAX["c"], prior: bool = False, h: int | None = None) -> int:
    if prior:  # CNNs widen as they downsample: at h x h, about 14336/h channels at most, /16 at least
        top = min(hi, max(64, 14336 // h)) if h else hi
        cands = [c for c in _PRIOR_C if top // 16 <= c <= top]
        return int(cands[r.integers(len(cands))])
    u = r.random()
    if u < 0.4:
        cands = [c for c in _COMMON_C if c <= hi]
        return int(cands[r.integers(len(cands))])
    c = _loguniform_int(r, 1, hi)
    if u < 0.7 and c >= 8:  # networks like multiples of 8
        c = min(hi, int(round(c / 8)) * 8)
    return c


def _hw(r: np.random.Generator, prior: bool = False) -> tuple[int, int]:
    if prior:
        h = int(_PRIOR_HW[r.integers(len(_PRIOR_HW))])
        return h, h
    u = r.random()
    if u < 0.35:
        h = int(_COMMON_HW[r.integers(len(_COMMON_HW))])
    else:
        h = _loguniform_int(r, 1, SPACE_MAX["hw"])
    if r.random() < 0.75:
        return h, h
    return h, _loguniform_int(r, 1, SPACE_MAX["hw"])


def _kernel(r: np.random.Generator, *, pool: bool = False, prior: bool = False) -> tuple[int, int]:
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


def _strides(r: np.random.Generator, prior: bool = False) -> tuple[int, int]:
    if prior:
        return (1, 1) if r.random() < 0.75 else (2, 2)
    u = r.random()
    if u < 0.6:
        return 1, 1
    if u < 0.95:
        return 2, 2
    return (1, 2) if r.random() < 0.5 else (2, 1)


def _pads(r: np.random.Generator, h: int, w: int, k_h: int, k_w: int, s_h: int, s_w: int,
          d_h: int = 1, d_w: int = 1, prior: bool = False) -> dict[str, int]:
    """TensorFlow SAME (80 %; always in the network prior) or VALID (20 %) padding, written
    out explicitly."""
    if prior or r.random() < 0.8:
        (t, b), (l, rr) = same_pads(h, k_h, s_h, d_h), same_pads(w, k_w, s_w, d_w)
        return dict(p_t=t, p_l=l, p_b=b, p_r=rr)
    return dict(p_t=0, p_l=0, p_b=0, p_r=0)


def _draw_conv2d(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    c_in = 3 if prior and r.random() < 0.05 else _channels(r, prior=prior, h=h)  # 3: an RGB stem
    c_out = _channels(r, prior=prior, h=h)
    k_h, k_w = _kernel(r, prior=prior)
    s_h, s_w = _strides(r, prior)
    d = 1 if prior or r.random() < 0.9 or max(k_h, k_w) == 1 else int(r.integers(2, SPACE_MAX["dilation"] + 1))
    g = 1
    if r.random() < (0.05 if prior else 0.15):
        gcd = math.gcd(c_in, c_out)
        divs = [x for x in (2, 4, 8, 16, 32, 64) if gcd % x == 0 and x < gcd]
        if divs:
            g = int(divs[r.integers(len(divs))])
    p = dict(h=h, w=w, c_in=c_in, c_out=c_out, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
    if g > 1:
        p["groups"] = g
    if d > 1:
        p.update(d_h=d, d_w=d)
    p.update(_pads(r, h, w, k_h, k_w, s_h, s_w, d, d, prior))
    return p


def _draw_dwconv2d(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    c = _channels(r, prior=prior, h=h)
    if prior:  # depthwise kernels are 3x3, 5x5, now and then 7x7
        k_h = k_w = int(r.choice((3, 5, 7), p=(0.6, 0.3, 0.1)))
    else:
        k_h, k_w = _kernel(r)
    s_h, s_w = _strides(r, prior)
    d = 1 if prior or r.random() < 0.93 or max(k_h, k_w) == 1 else int(r.integers(2, SPACE_MAX["dilation"] + 1))
    p = dict(h=h, w=w, c=c, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
    if d > 1:
        p.update(d_h=d, d_w=d)
    if r.random() < (0.0 if prior else 0.05):
        p["multiplier"] = int(r.choice((2, 4)))
    p.update(_pads(r, h, w, k_h, k_w, s_h, s_w, d, d, prior))
    return p


def _draw_fc(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    c_out = 1000 if r.random() < (0.4 if prior else 0.1) else _channels(r, SPACE_MAX["fc_c"], prior)
    return dict(c_in=_channels(r, SPACE_MAX["fc_c"], prior), c_out=c_out)


def _draw_pool(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    k_h, k_w = _kernel(r, pool=True, prior=prior)
    if prior and k_h == 5 and r.random() < 0.5:
        s_h, s_w = 1, 1  # SPPF 5x5/1
    elif r.random() < (0.6 if prior else 0.4):
        s_h, s_w = (2, 2) if k_h > 1 else (1, 1)  # 2x2/2, 3x3/2
    else:
        s_h, s_w = _strides(r, prior)
    p = dict(h=h, w=w, c=_channels(r, prior=prior, h=h), k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
    p.update(_pads(r, h, w, k_h, k_w, s_h, s_w, prior=prior))
    return p


def _draw_globalpool(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    p: dict[str, Any] = dict(h=h, w=w, c=_channels(r, prior=prior, h=h))
    if r.random() < (0.05 if prior else 0.2):
        p["mode"] = "max"
    return p


def _draw_eltwise(r: np.random.Generator, p_broadcast: float, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    p: dict[str, Any] = dict(h=h, w=w, c=_channels(r, prior=prior, h=h))
    if r.random() < p_broadcast:
        p["broadcast"] = 1
    return p


def _draw_concat(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    k = 2 if r.random() < 0.8 else int(r.integers(3, 5))
    if k == 2:
        return dict(h=h, w=w, c_in1=_channels(r, 1024, prior, h), c_in2=_channels(r, 1024, prior, h))
    c = _channels(r, 512, prior, h)
    chans = [c] * k if r.random() < 0.6 else [_channels(r, 512, prior, h) for _ in range(k)]  # SPPF: equal
    return dict(h=h, w=w, channels=chans)


_ACT_KINDS = tuple(k for k in ACTIVATION_KINDS if k not in ("other", "clip"))


def _draw_activation(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    return dict(h=h, w=w, c=_channels(r, prior=prior, h=h), kind=str(_ACT_KINDS[r.integers(len(_ACT_KINDS))]))


def _draw_resize(r: np.random.Generator, prior: bool = False) -> dict[str, Any]:
    h, w = _hw(r, prior)
    u = r.random()
    if prior:  # FPN/YOLO upsampling: x2 nearest, sometimes bilinear
        return dict(h=h, w=w, c=_channels(r, prior=True, h=h), h_out=2 * h, w_out=2 * w,
                    mode="nearest" if u < 0.8 else "linear")
    if u < 0.6:
        f = 2
        h_out, w_out = h * f, w * f
    elif u < 0.75:
        h_out, w_out = h * 4, w * 4
    elif u < 0.85:
        h_out, w_out = max(1, h // 2), max(1, w // 2)
    else:
        h_out, w_out = _loguniform_int(r, 1, SPACE_MAX["hw"]), _loguniform_int(r, 1, SPACE_MAX["hw"])
    mode = "nearest" if r.random() < 0.6 else "linear"
    return dict(h=h, w=w, c=_channels(r), h_out=h_out, w_out=w_out, mode=mode)


#: Network prior: the fused activation of the LUM, by layer type (``act`` raw param; the
#: first entry is the LUM's default and leaves ``act`` out). Kernels differ by activation
#: (ONNX Runtime fuses ReLU into its convolution kernels but applies Clip/ReLU6 as a second
#: pass: 40 % slower depthwise convs), and networks use more than ReLU. Hard-swish, the
#: activation of MobileNetV3 and of the ``mobilenet``/``scaled`` NAS spaces, folds into the
#: convolution on ONNX Runtime 1.32 and on Vela (:mod:`bench.cmd_profile`), so the forests
#: need convolutions with it fused; its 10 % came out of ReLU's share, after ReLU in the
#: order, so that only the configurations whose hash falls in that tenth changed.
_PRIOR_ACTS: dict[str, tuple[tuple[str | None, float], ...]] = {
    LayerType.CONV2D: (("relu", .35), ("hardswish", .10), ("relu6", .25), ("none", .15), ("leakyrelu", .05),
                       ("sigmoid", .05), ("hardsigmoid", .05)),
    LayerType.DWCONV2D: (("relu", .35), ("hardswish", .10), ("relu6", .3), ("none", .2), ("hardsigmoid", .05)),
    LayerType.FC: ((None, .6), ("relu", .3), ("sigmoid", .05), ("hardsigmoid", .05)),
    LayerType.ADD: (("relu", .5), ("none", .5)),
}


def _unit_hash(layer_type: str, params: Mapping[str, Any], salt: str) -> float:
    """A uniform number in [0, 1) fixed by the configuration."""
    h = hashlib.sha256(f"{salt}|{layer_type}|{canonical_params(params)}".encode()).digest()
    return int.from_bytes(h[:8], "little") / 2.0**64


#: Network prior: the share of drawn convolutions whose channel counts are moved off the
#: multiple-of-8 ladder (:func:`_prior_variants`). Networks do use such counts: ShuffleNetV2
#: 1.0x splits 116 channels into two branches of 58, width multipliers and channel
#: pruning give arbitrary ones. Kernels care: ONNX Runtime's NCHWc convolutions need
#: channels in multiples of its vector block (16 fp32 lanes with AVX-512) and its
#: depthwise kernel runs 5-10x slower per channel when c is not a multiple of 4 (measured
#: on host-cpu: 3x3 depthwise at 56x56, c=56: 0.89 us per channel, c=58: 5.5 us).
_PRIOR_OFF_LADDER: dict[str, float] = {LayerType.CONV2D: 0.15, LayerType.DWCONV2D: 0.25}
#: Offsets that move a channel count off the ladder: every residue modulo 8 except 0.
_OFF_LADDER_OFFSETS = (-7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7)


def _off_ladder(layer_type: str, p: Mapping[str, Any], key: str) -> int:
    """Channel count ``p[key]`` moved by a hash-chosen offset off the multiple-of-8 ladder
    (kept within 1..SPACE_MAX["c"])."""
    c = int(p[key])
    d = _OFF_LADDER_OFFSETS[int(len(_OFF_LADDER_OFFSETS) * _unit_hash(layer_type, p, f"off-ladder:{key}"))]
    if not 1 <= c + d <= SPACE_MAX["c"]:
        d = -d
    return max(1, c + d)


def _prior_variants(layer_type: str, p: dict[str, Any]) -> dict[str, Any]:
    """The prior's off-ladder channel counts (conv2d, dwconv2d), fused activation and
    (conv2d) grouped variants, chosen by a hash of the drawn configuration instead of the
    generator, so that adding them left the other draws (and configurations measured
    before) unchanged: a configuration that keeps its drawn channels, the LUM's default
    activation and no groups has the key it had without this step."""
    p = dict(p)
    share = _PRIOR_OFF_LADDER.get(layer_type, 0.0)
    if share and p.get("groups", 1) == 1 and _unit_hash(layer_type, p, "off-ladder") < share:
        if layer_type == LayerType.DWCONV2D:
            keys: tuple[str, ...] = ("c",)
        else:  # c_in, c_out or both (never the RGB stem's 3 input channels)
            keys = (("c_in",), ("c_out",), ("c_in", "c_out"))[int(3 * _unit_hash(layer_type, p, "off-ladder-which"))]
            keys = tuple(k for k in keys if p[k] != 3) or ("c_out",)
        moved = {k: _off_ladder(layer_type, p, k) for k in keys}
        p.update(moved)
    if layer_type == LayerType.CONV2D and p.get("groups", 1) == 1 and _unit_hash(layer_type, p, "groups") < 0.1:
        gw = (8, 16, 32, 64)[int(4 * _unit_hash(layer_type, p, "group-width"))]  # RegNet/ResNeXt group widths
        if p["c_in"] % gw == 0 and p["c_in"] // gw > 1 and p["c_out"] % (p["c_in"] // gw) == 0:
            p["groups"] = p["c_in"] // gw
    acts = _PRIOR_ACTS.get(layer_type)
    if acts:
        u, acc = _unit_hash(layer_type, p, "act"), 0.0
        for i, (a, w) in enumerate(acts):
            acc += w
            if u < acc or i == len(acts) - 1:
                if i:
                    p["act"] = a if a is not None else "none"
                break
    return p


_DRAW: dict[str, Callable[[np.random.Generator, bool], dict[str, Any]]] = {
    LayerType.CONV2D: _draw_conv2d,
    LayerType.DWCONV2D: _draw_dwconv2d,
    LayerType.FC: _draw_fc,
    LayerType.MAXPOOL: _draw_pool,
    LayerType.AVGPOOL: _draw_pool,
    LayerType.GLOBALPOOL: _draw_globalpool,
    LayerType.ADD: lambda r, prior: _draw_eltwise(r, 0.05, prior),
    LayerType.MUL: lambda r, prior: _draw_eltwise(r, 0.6, prior),
    LayerType.CONCAT: _draw_concat,
    LayerType.ACTIVATION: _draw_activation,
    LayerType.RESIZE: _draw_resize,
}

#: Types with a sampler (the benchable types, in vocabulary order).
SAMPLED_TYPES: tuple[str, ...] = tuple(t for t in BENCHABLE_TYPES if t in _DRAW)


def _in_ranges(layer_type: str, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
    if layer_type == LayerType.FC:
        return max(int(p["c_in"]), int(p["c_out"])) <= SPACE_MAX["fc_c"]
    if max(max(s[2], s[3]) for s in (*ins, out)) > SPACE_MAX["hw"]:
        return False
    chans = [s[1] for s in ins] if layer_type == LayerType.CONCAT else [s[1] for s in (*ins, out)]
    if max(chans) > SPACE_MAX["c"]:
        return False
    if max(int(p.get(k) or 1) for k in ("k_h", "k_w")) > SPACE_MAX["k"]:
        return False
    if max(int(p.get(k) or 1) for k in ("s_h", "s_w")) > SPACE_MAX["s"]:
        return False
    return max(int(p.get(k) or 1) for k in ("d_h", "d_w")) <= SPACE_MAX["dilation"]


def limit_reason(layer_type: str, params: Mapping[str, Any], lim: Limits) -> str | None:
    """Why a configuration cannot be measured: ``"invalid"`` (the vocabulary or the padded
    model cannot describe it), ``"limits"`` (ops, weights or a LUM tensor over ``lim``), or None."""
    try:
        counts = describe(layer_type, params)
        ins, out = lum_io_shapes(layer_type, params)
    except LayerSpecError:
        return "invalid"
    if counts.ops > lim.max_ops or counts.params > lim.max_params or counts.ops < 1:
        return "limits"
    if any(math.prod(s) > lim.max_elems for s in (*ins, out)):
        return "limits"
    return None


def _within(layer_type: str, params: Mapping[str, Any], lim: Limits) -> Config | None:
    """The configuration if it is valid, benchable, inside the space and within limits."""
    if limit_reason(layer_type, params, lim) is not None:
        return None
    ins, out = lum_io_shapes(layer_type, params)
    if not _in_ranges(layer_type, params, ins, out):
        return None
    p = dict(params)
    return Config(layer_type, p, config_key(layer_type, p), float(describe(layer_type, p).ops))


def in_space(layer_type: str, params: Mapping[str, Any], limits: Limits = Limits()) -> bool:
    """Whether a configuration lies inside the sampled space: valid and benchable, within
    :data:`SPACE_MAX` (h, w, kernels, strides, channels, dilation) and within ``limits``."""
    return _within(layer_type, params, limits) is not None


def _type_rng(seed: int, layer_type: str, prior: bool = False) -> np.random.Generator:
    name = f"sampling:{layer_type}" + (":prior" if prior else "")
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.default_rng([int(seed), h])


def sample_type(layer_type: str, samples: int, *, seed: int = 0, limits: Limits = Limits(), bins: int = 10,
                pool_factor: int = 10, prior: bool = False) -> list[Config]:
    """``samples`` distinct configurations of one type, balanced across log10(ops), from the
    broad space or (``prior=True``) from the network prior."""
    if layer_type not in _DRAW:
        raise LayerSpecError(f"no sampler for layer type {layer_type!r}; sampled types: {', '.join(SAMPLED_TYPES)}")
    if samples < 1:
        return []
    r = _type_rng(seed, layer_type, prior)
    want = samples * pool_factor
    if bins > 1:  # balancing needs a pool to choose from, even for a few samples
        want = max(want, 200)
    pool: dict[str, Config] = {}
    attempts = 0
    max_attempts = want * 50
    while len(pool) < want and attempts < max_attempts:
        attempts += 1
        raw = _DRAW[layer_type](r, prior)
        cfg = _within(layer_type, _prior_variants(layer_type, raw) if prior else raw, limits)
        if cfg is not None and cfg.key not in pool:
            pool[cfg.key] = cfg
    cands = list(pool.values())
    if len(cands) <= samples:
        return cands
    logops = np.log10(np.array([c.ops for c in cands]))
    lo, hi = float(logops.min()), float(logops.max())
    width = (hi - lo) / bins or 1.0
    idx = np.minimum(((logops - lo) / width).astype(int), bins - 1)
    members = [list(r.permutation(np.flatnonzero(idx == b))) for b in range(bins)]
    chosen: list[int] = []
    remaining = samples
    open_bins = [b for b in range(bins) if members[b]]
    while remaining > 0 and open_bins:
        share, extra = divmod(remaining, len(open_bins))
        # the bins that get one more are chosen at random, so no bin is favoured
        bonus = set(r.permutation(open_bins)[:extra].tolist())
        for b in open_bins:
            n = share + (1 if b in bonus else 0)
            take, members[b] = members[b][:n], members[b][n:]
            chosen += take
            remaining -= len(take)
        open_bins = [b for b in open_bins if members[b]]
    return [cands[i] for i in chosen]


def make_plan(layer_types: Sequence[str], samples: int, *, prior_samples: int = 0, seed: int = 0,
              limits: Limits = Limits(), bins: int = 10) -> list[Config]:
    """The measurement plan: per type, ``samples`` configurations from the broad space
    (balanced over ``bins`` log-ops bins) and ``prior_samples`` from the network prior (at
    its own density), deduplicated, in a seeded shuffled order (so
    a partial run covers every type, and machine drift does not line up with layer size)."""
    seen: dict[str, Config] = {}
    for t in layer_types:
        for prior, n in ((False, samples), (True, prior_samples)):
            # the prior at its own density: the first n distinct draws, no pool, no bins
            kw = dict(bins=1, pool_factor=1) if prior else dict(bins=bins)
            for c in sample_type(t, n, seed=seed, limits=limits, prior=prior, **kw):
                seen.setdefault(c.key, c)
    plan = list(seen.values())
    order = np.random.default_rng([int(seed), 7]).permutation(len(plan))
    return [plan[i] for i in order]


# ------------------------------------------------------------------------ neighbours

#: Raw params that are channel counts (``concat``'s ``channels`` list moves as a whole).
_CHANNEL_KEYS = ("c", "c_in", "c_out", "c_in1", "c_in2")


def _ladder_step(v: int, ladder: Sequence[int], up: bool) -> int | None:
    """The next value of ``ladder`` above (``up``) or below ``v``, or None at its end."""
    cands = [x for x in ladder if (x > v if up else x < v)]
    return (min(cands) if up else max(cands)) if cands else None


def _resized(p: Mapping[str, Any], h: int, w: int) -> dict[str, Any]:
    """``p`` at input size ``h`` x ``w``: SAME pads follow the size, fixed pads stay, a
    resize keeps its scale."""
    q = dict(p)
    q["h"], q["w"] = h, w
    if "h_out" in p:
        q["h_out"], q["w_out"] = max(1, int(p["h_out"]) * h // int(p["h"])), max(1, int(p["w_out"]) * w // int(p["w"]))
    if all(k in p for k in ("p_t", "p_l", "p_b", "p_r")) and "k_h" in p:
        k_h, k_w, s_h, s_w = (int(p[k]) for k in ("k_h", "k_w", "s_h", "s_w"))
        d_h, d_w = int(p.get("d_h") or 1), int(p.get("d_w") or 1)
        (t, b), (l, r) = same_pads(int(p["h"]), k_h, s_h, d_h), same_pads(int(p["w"]), k_w, s_w, d_w)
        if (p["p_t"], p["p_l"], p["p_b"], p["p_r"]) == (t, l, b, r) != (0, 0, 0, 0):
            (t, b), (l, r) = same_pads(h, k_h, s_h, d_h), same_pads(w, k_w, s_w, d_w)
            q.update(p_t=t, p_l=l, p_b=b, p_r=r)
    return q


def neighbours(layer_type: str, params: Mapping[str, Any], limits: Limits = Limits()) -> list[Config]:
    """The configurations one ladder step from ``params``: the spatial size one step up and
    down the network prior's feature-map sizes (:data:`_PRIOR_HW`; square sizes move
    together, SAME pads follow, a resize keeps its scale) and each channel count one step up
    and down its channel ladder (:data:`_PRIOR_C`; a grouped convolution keeps its group
    width). Only those :func:`in_space` within ``limits`` are kept, in that order, distinct
    and without ``params`` itself: what ``bench refine`` measures around a configuration
    whose estimates are uncertain."""
    p = dict(params)
    out: dict[str, Config] = {}
    own = config_key(layer_type, p)
    cands: list[dict[str, Any]] = []
    if "h" in p and "w" in p:
        h, w = int(p["h"]), int(p["w"])
        for up in (False, True):
            nh = _ladder_step(h, _PRIOR_HW, up)
            nw = nh if h == w else _ladder_step(w, _PRIOR_HW, up)
            if nh is not None and nw is not None:
                cands.append(_resized(p, nh, nw))
    for key in _CHANNEL_KEYS:
        if key not in p:
            continue
        for up in (False, True):
            c = _ladder_step(int(p[key]), _PRIOR_C, up)
            if c is None:
                continue
            q = dict(p)
            q[key] = c
            g = int(p.get("groups") or 1)
            if g > 1 and key in ("c_in", "c_out"):  # the same group width: groups follow c_in
                q["groups"] = max(1, g * int(q["c_in"]) // int(p["c_in"]))
            cands.append(q)
    if "channels" in p:
        for up in (False, True):
            chans = [_ladder_step(int(c), _PRIOR_C, up) for c in p["channels"]]
            if all(c is not None for c in chans):
                cands.append({**p, "channels": chans})
    for q in cands:
        cfg = _within(layer_type, q, limits)
        if cfg is not None and cfg.key != own:
            out.setdefault(cfg.key, cfg)
    return list(out.values())
