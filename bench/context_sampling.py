"""Targeted sampling plans that :mod:`bench.sampling` does not draw (seeded, documented).

``bench.sampling``'s broad space and network prior leave regions thin that real CNNs
put a large share of their time in on an Ethos-U-class NPU (issue 5: the ``imx93``
profile under-predicted every network's stem convolution by 40-60 % and SiLU/sigmoid
activations on large feature maps by 20-80 %; for the activations the smart-padding
benchmark agreed with Vela's whole-network numbers, so the models lacked data; for the
stems it also needed the ``stem-input`` variant below):

* ``stem``: the first convolution of a network, on an RGB (or grey / RGBA) image:
  ``c_in`` 3 (1 or 4 now and then), square inputs from the resolutions detectors and
  classifiers take (96..640, within the runner's limits), kernels 3..7 (YOLOv5's 6x6/2
  included), stride 2 (stride 1 now and then), 8..96 output channels, SAME padding, the
  fused activations of stems (ReLU, none, ReLU6, LeakyReLU). The broad space draws
  ``c_in`` <= 4 rarely and at any size; the network prior draws ``c_in = 3`` in 5 % of
  its conv2d configurations, mostly at small sizes and stride 1.
* ``stem-input``: the ``stem`` plan's configurations (the same draws) with
  ``graph_input=1``: the stem reads the graph input, as a network's first convolution
  reads the image the host wrote, and only its output side is padded
  (:func:`bench.modelgen.padded_model`; Eq. 4 with ``T_b1 = 0``). With a pad-in conv
  writing the 3-channel input, Vela charges the stem for that write (a 224x224x3 map:
  ~0.9 ms in the padded model against ~0.1 ms in its padding pair), and smart padding
  over-estimated MobileNet's 3x3/2 stem by 85 % (1.58 ms against 0.82 ms for the
  convolution inside the padded model); the estimator sets ``graph_input`` on convs that
  read a network input (:mod:`estimator.onnx_import`).
* ``activation-large``: the same kinds at 2^20..2^22 elements (the runner's element limit
  raised to 2^22 for this plan), the sizes of EfficientNet-B0's first SiLUs (112x112x96)
  and of 640-input detectors.
* ``fused-act``: convolutions (60 %) and depthwise convolutions (40 %) from
  :mod:`bench.sampling`'s network prior, each with a fused activation other than the
  LUM's default ReLU (already measured): hard-swish, sigmoid, hard-sigmoid, tanh,
  leaky ReLU, ReLU6 or none, uniformly. These are the kinds the Vela
  profile's fusion rules fold into a convolution, and the importer gives folded
  convolutions the activation as their ``act`` feature; the earlier passes measured
  conv2d with ReLU6, none, leaky ReLU, sigmoid and hard-sigmoid only through the prior's
  variants, never with hard-swish or tanh, and depthwise convolutions only with ReLU. On
  Vela a fused hard-swish is a second pass over the output (a ``HardSwish`` operator
  under the convolution's name), so those layers cost more than the ReLU rows predict.
* ``large-maps``: depthwise convolutions (50 %), residual adds (25 %) and pointwise (1x1)
  convolutions (25 %) on the large square feature maps of a CNN's first stages (48..160),
  with a tensor size drawn log-uniformly between 2^17 and 2^20 elements (the runner's
  limit), i.e. across the size where a layer's input and output stop fitting Vela's
  384 KiB SRAM together, and the channel count that gives it (a multiple of 8).
  Depthwise kernels 3x3 (70 %) or 5x5, stride 1 (70 %) or 2, the fused activations of
  such blocks (ReLU, ReLU6, none, hard-swish); pointwise convolutions expand or project
  by 1/4..6. The broad space draws such maps mostly rectangular and the prior caps the
  channels at ``14336 / h``: the profile had 2 square 3x3 stride-1 depthwise rows at
  112x112 and 12 adds above 56x56.
* ``huge-maps``: pointwise (1x1) convolutions (65 %) and depthwise convolutions (35 %) on the
  maps of a network's first stages at high input resolutions (112..320, compound-scaled
  networks at 450-640 pixels), with an output of 2^20..2^23 elements (the runner's element
  limit raised to 2^23 for this plan) and 8..48 input channels; pointwise convolutions
  expand by 1..6 or project, fused hard-swish (40 %), none, ReLU or ReLU6; depthwise 3x3 or
  5x5 with hard-swish, ReLU or none. Every earlier row stayed within 2^20 elements, so the
  profile predicted a 272x272 24 -> 144 convolution with hard-swish at 1.9 ms where Vela
  takes 10.7 ms (its exact benchmark agrees: 10.7 ms), and the ``scaled`` space at its
  larger resolutions 15-22 % low.
* ``pass-act``: convolutions from :mod:`bench.sampling`'s network prior with the fused
  activations Vela runs as a second pass over the output: hard-swish (55 %), sigmoid,
  hard-sigmoid, tanh (15 % each). ``fused-act`` spreads its draws over seven kinds and two
  types, which left 17 1x1 convolutions with hard-swish among 2,328 conv2d rows; the
  model then predicted a fused hard-swish at 1.12x the ReLU convolution where the rows
  measured it at 1.19x that prediction again (a MobileNet block's 1x1 convolutions with
  hard-swish ran about 2x their estimate in Vela's whole networks).
* ``basic-block``: dense 3x3 convolutions at the shapes of residual basic blocks (ResNet-18/34,
  RegNet, detector backbones): square maps 4..112, 16..512 channels, 70 % ``c -> c`` at stride
  1, 30 % a stage's first ``c -> 2c`` (or 1.5c) at stride 2, SAME padding, ReLU or (45 %) none,
  the convolution before the residual add. The network prior draws dense 3x3 convolutions
  rarely at these shapes: the profile had no row within 1.5x of a 40x40 32 -> 32 one and one
  within 1.6x of a 5x5 256 -> 256 one, which it then predicted at 1.7x its exact benchmark.
* ``concat-shared``: concatenations whose inputs another layer also reads (raw param
  ``shared``, each input with probability 1/2, so a quarter of the two-input draws share
  none), half from :mod:`bench.sampling`'s network prior, half with 2-4 inputs on the
  square maps of detectors and DenseNets (20..160, 2^14..2^20 elements in all). Vela
  writes a producer with no other reader straight into the concatenation's output, so the
  earlier concat rows, each input fed by its own pad-in conv, measured a concatenation that
  costs almost nothing; one whose input is also read elsewhere is a copy (the YOLOs'
  C3/C2f/SPPF blocks and necks, every DenseNet block): on ``yolov5s`` at 320, Vela's
  concatenations took 2.85 ms where the profile predicted 0.42 ms.
* ``const-operand``: element-wise ops whose second operand is a constant (raw param
  ``const_b``): standalone batch normalizations (``batchnorm=1``, a per-channel scale and
  shift after a concatenation: every DenseNet layer; 35 %), per-channel scales (layer
  scale, 30 %), scalar scales (15 %) and additions of a per-channel, full-shape (a
  detector's grid) or scalar constant (20 %), on the network prior's maps with 2^10..2^20
  elements, ReLU or none; a scalar always with ReLU: Vela folds a scalar multiply or add
  without an activation into the requantization of the tensor (0 ms: 21 such rows measured
  nothing), and a row of 0 ms trains at its type's floor, which in a forest on log time per
  element pulled every large ``mul`` estimate to a tenth of its rows. An Ethos-U fetches a
  per-channel or full-shape operand from memory and broadcasts it:
  a 40x40x64 multiply by a per-channel constant takes 0.22 ms on Vela, 5.7x the same multiply
  by an SE branch's tensor (the only kind the earlier rows had), and a standalone batch
  normalization is a multiply and an add, each that dear (DenseNet-121 at 160: 14.6 ms in
  Vela's network against 2.0 ms predicted).
* ``activation``: standalone activations of the kinds networks use (SiLU, sigmoid,
  hard-swish, hard-sigmoid, ReLU6, ReLU, LeakyReLU, tanh, with those weights), with a
  tensor size drawn log-uniformly between 2**10 and 2**20 elements (the runner's limit)
  and split into a square feature map from the network prior's ladder and a channel
  count (a multiple of 8). The element count decides whether a layer's input and output
  fit the NPU's SRAM together (Vela, ``Dedicated_Sram_384KB``: about 196 k int8
  elements), which doubles or halves the time per element; the network prior's
  channel cap (``14336 / h``) leaves the region above that threshold with few rows.

Every draw comes from its own generator, seeded by ``seed`` and the plan's name, and
configurations are deduplicated by :func:`bench.sampling.config_key`, so a plan is
identical on every run and a run resumes. The weights above are a generic prior over
what CNNs contain; the *regions* were chosen because the issue-5 breakdown of the
validation networks showed them thin, but no configuration or weight is fitted to those
networks and none of their layers is measured.

Run a plan into a benchmark database with ``bench run --context`` (resumable; with
``--warmup 0 --runs 1`` the rows join the Vela environment of ``bench run --runner vela
--warmup 0 --runs 1``)::

    bench run --device imx93 --runner vela --warmup 0 --runs 1 --context stem:120,activation:240 --seed 0
    bench run --device imx93 --runner vela --warmup 0 --runs 1 --context stem-input:120 --seed 0

``bench run --context ... --dry-run`` prints the plan, one configuration a line, and
measures nothing.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from estimator.errors import UserError
from estimator.layers import SPECS, LayerType

from .modelgen import same_pads
from .sampling import Config, Limits, _within

__all__ = ["PLANS", "context_plan", "parse_context_spec"]

_STEM_HW = (96, 112, 128, 160, 192, 224, 256, 288, 320, 384, 416, 448, 512, 640)
_STEM_K = ((3, .45), (5, .1), (6, .1), (7, .25), (4, .05), (2, .05))
_STEM_COUT = (8, 12, 16, 24, 32, 40, 48, 64, 96)
_STEM_ACT = (("relu", .45), ("none", .3), ("relu6", .2), ("leakyrelu", .05))  # relu: the LUM default

_ACT_KINDS = (("silu", .3), ("sigmoid", .2), ("hardswish", .15), ("hardsigmoid", .1), ("relu6", .08),
              ("relu", .07), ("leakyrelu", .05), ("tanh", .05))
_ACT_HW = (7, 8, 10, 13, 14, 16, 20, 26, 28, 32, 40, 52, 56, 64, 80, 112, 128, 160, 224, 320)


def _choice(r: np.random.Generator, items: Sequence[tuple[Any, float]]) -> Any:
    w = np.array([p for _, p in items], dtype=float)
    return items[int(r.choice(len(items), p=w / w.sum()))][0]


def _draw_stem(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    h = int(_STEM_HW[r.integers(len(_STEM_HW))])
    c_in = int(_choice(r, ((3, .85), (1, .1), (4, .05))))
    k = int(_choice(r, _STEM_K))
    s = 2 if r.random() < 0.85 else 1
    c_out = int(_STEM_COUT[r.integers(len(_STEM_COUT))])
    (t, b), (left, right) = same_pads(h, k, s), same_pads(h, k, s)
    p: dict[str, Any] = dict(h=h, w=h, c_in=c_in, c_out=c_out, k_h=k, k_w=k, s_h=s, s_w=s,
                             p_t=t, p_l=left, p_b=b, p_r=right)
    act = _choice(r, _STEM_ACT)
    if act != "relu":
        p["act"] = act
    return LayerType.CONV2D, p


def _draw_activation(r: np.random.Generator, lo: int = 10, hi: int = 20,
                     ladder: Sequence[int] = _ACT_HW) -> tuple[str, dict[str, Any]]:
    kind = str(_choice(r, _ACT_KINDS))
    elems = math.exp(r.uniform(math.log(2 ** lo), math.log(2 ** hi)))
    fits = [x for x in ladder if x * x * 8 <= elems] or [ladder[0]]
    h = int(fits[r.integers(len(fits))])
    c = max(8, int(round(elems / (h * h) / 8)) * 8)
    return LayerType.ACTIVATION, dict(h=h, w=h, c=c, kind=kind)


def _draw_stem_input(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    t, p = _draw_stem(r)
    p["graph_input"] = 1
    return t, p


_FUSED_ACTS = (("hardswish", 1.0), ("sigmoid", 1.0), ("hardsigmoid", 1.0), ("tanh", 1.0), ("leakyrelu", 1.0),
               ("relu6", 1.0), ("none", 1.0))


def _draw_fused_act(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    t = LayerType.CONV2D if r.random() < 0.6 else LayerType.DWCONV2D
    p = SPECS[t].draw(r, True)
    p["act"] = str(_choice(r, _FUSED_ACTS))
    return t, p


_MAP_HW = (48, 56, 64, 80, 96, 112, 128, 160)


def _draw_large_map(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    h = int(_MAP_HW[r.integers(len(_MAP_HW))])
    elems = math.exp(r.uniform(math.log(2 ** 17), math.log(2 ** 20)))
    c = max(8, int(round(elems / (h * h) / 8)) * 8)
    u = r.random()
    if u < 0.5:
        k = 3 if r.random() < 0.7 else 5
        s = 1 if r.random() < 0.7 else 2
        (t, b), (left, right) = same_pads(h, k, s), same_pads(h, k, s)
        p: dict[str, Any] = dict(h=h, w=h, c=c, k_h=k, k_w=k, s_h=s, s_w=s, p_t=t, p_l=left, p_b=b, p_r=right,
                                 act=str(_choice(r, (("relu", .35), ("relu6", .3), ("none", .15), ("hardswish", .2)))))
        return LayerType.DWCONV2D, p
    if u < 0.75:
        return LayerType.ADD, dict(h=h, w=h, c=c, act="relu" if r.random() < 0.5 else "none")
    f = float(_choice(r, ((0.25, 1.0), (0.5, 1.0), (1.0, 0.5), (2.0, 1.0), (4.0, 1.0), (6.0, 1.0))))
    c_out = max(8, int(round(c * f / 8)) * 8)
    return LayerType.CONV2D, dict(h=h, w=h, c_in=c, c_out=c_out, k_h=1, k_w=1, s_h=1, s_w=1, p_t=0, p_l=0, p_b=0,
                                  p_r=0, act=str(_choice(r, (("relu", .4), ("none", .4), ("relu6", .2)))))


_HUGE_HW = (112, 128, 136, 144, 160, 176, 192, 224, 240, 256, 272, 288, 320)


def _draw_huge_map(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    h = int(_HUGE_HW[r.integers(len(_HUGE_HW))])
    elems = math.exp(r.uniform(math.log(2 ** 20), math.log(2 ** 23)))
    c_out = max(8, int(round(elems / (h * h) / 8)) * 8)
    if r.random() < 0.35:  # depthwise, its channels from the output size
        k = 3 if r.random() < 0.6 else 5
        s = 1 if r.random() < 0.75 else 2
        (t, b), (left, right) = same_pads(h, k, s), same_pads(h, k, s)
        return LayerType.DWCONV2D, dict(h=h, w=h, c=c_out, k_h=k, k_w=k, s_h=s, s_w=s, p_t=t, p_l=left, p_b=b, p_r=right,
                                        act=str(_choice(r, (("hardswish", .45), ("relu", .3), ("none", .25)))))
    c_in = int(r.choice((8, 16, 24, 32, 40, 48)))
    if r.random() < 0.3:  # a projection: the larger map of the two is the input
        c_in, c_out = max(c_in, c_out), min(c_in, c_out)
    return LayerType.CONV2D, dict(h=h, w=h, c_in=c_in, c_out=c_out, k_h=1, k_w=1, s_h=1, s_w=1, p_t=0, p_l=0, p_b=0,
                                  p_r=0, act=str(_choice(r, (("hardswish", .4), ("none", .35), ("relu", .15),
                                                             ("relu6", .1)))))


#: the fused activations Vela runs as a second pass over a convolution's output (a LUT or a
#: hard-swish operator under the convolution's name), hard-swish first: MobileNetV3-style blocks
PASS_ACTS = (("hardswish", .55), ("sigmoid", .15), ("hardsigmoid", .15), ("tanh", .15))


def _draw_pass_act(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    p = SPECS[LayerType.CONV2D].draw(r, True)
    p["act"] = str(_choice(r, PASS_ACTS))
    return LayerType.CONV2D, p


_BLOCK_HW = (4, 5, 7, 8, 10, 13, 14, 16, 20, 26, 28, 32, 40, 52, 56, 64, 80, 112)
_BLOCK_C = (16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512)


def _draw_basic_block(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    h = int(_BLOCK_HW[r.integers(len(_BLOCK_HW))])
    c = int(_BLOCK_C[r.integers(len(_BLOCK_C))])
    if r.random() < 0.7:  # the block's own convolutions: c -> c, stride 1
        c_in, c_out, s = c, c, 1
    else:  # a stage's first: c -> 2c (or 1.5c), stride 2
        c_in, c_out, s = c, max(8, int(round(c * float(r.choice((2.0, 1.5))) / 8)) * 8), 2
    (t, b), (left, right) = same_pads(h, 3, s), same_pads(h, 3, s)
    p: dict[str, Any] = dict(h=h, w=h, c_in=c_in, c_out=c_out, k_h=3, k_w=3, s_h=s, s_w=s, p_t=t, p_l=left, p_b=b,
                             p_r=right)
    if r.random() < 0.45:
        p["act"] = "none"  # the second convolution, before the residual add
    return LayerType.CONV2D, p


def _draw_concat_shared(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    if r.random() < 0.5:  # the network prior's concatenations
        p = SPECS[LayerType.CONCAT].draw(r, True)
    else:  # a detector's or a DenseNet's: 2-4 inputs on a large map
        h = int(_MAP_HW[r.integers(len(_MAP_HW))]) if r.random() < 0.7 else int(r.choice((20, 28, 40)))
        k = 2 if r.random() < 0.7 else int(r.integers(3, 5))
        elems = math.exp(r.uniform(math.log(2 ** 14), math.log(2 ** 20)))
        c = max(8, int(round(elems / (h * h * k) / 8)) * 8)
        p = dict(h=h, w=h, channels=[c] * k if r.random() < 0.5 else [max(8, c // 2 * int(r.integers(1, 4))) for _ in range(k)])
    k = len(p["channels"]) if "channels" in p else 2
    shared = [i for i in range(k) if r.random() < 0.5]
    if shared:
        p["shared"] = shared
    return LayerType.CONCAT, p


def _draw_const_operand(r: np.random.Generator) -> tuple[str, dict[str, Any]]:
    elems = math.exp(r.uniform(math.log(2 ** 10), math.log(2 ** 20)))
    fits = [x for x in _ACT_HW if x * x * 8 <= elems] or [_ACT_HW[0]]
    h = int(fits[r.integers(len(fits))])
    c = max(8, int(round(elems / (h * h) / 8)) * 8)
    act = "relu" if r.random() < 0.5 else "none"
    u = r.random()
    if u < 0.35:  # a standalone batch normalization
        return LayerType.MUL, dict(h=h, w=h, c=c, broadcast=1, elems_b=c, const_params=2 * c, const_b=1,
                                   batchnorm=1, act="relu" if r.random() < 0.7 else "none")
    if u < 0.8:  # a per-channel (layer scale) or a scalar scale
        eb = c if u < 0.65 else 1
        return LayerType.MUL, dict(h=h, w=h, c=c, broadcast=1, elems_b=eb, const_b=1, act="relu" if eb == 1 else act)
    v = r.random()  # a constant shift: per channel, full shape (a detector's grid), scalar
    p: dict[str, Any] = dict(h=h, w=h, c=c, const_b=1, act=act)
    if v < 0.8:
        p.update(broadcast=1, elems_b=c if v < 0.5 else 1)
        if v >= 0.5:
            p["act"] = "relu"  # a scalar without an activation is no operation on Vela (below)
    return LayerType.ADD, p


#: plan name -> draw function (one configuration per call)
PLANS: dict[str, Callable[[np.random.Generator], tuple[str, dict[str, Any]]]] = {
    "stem": _draw_stem,
    "stem-input": _draw_stem_input,
    "activation": _draw_activation,
    "fused-act": _draw_fused_act,
    "large-maps": _draw_large_map,
    "concat-shared": _draw_concat_shared,
    "pass-act": _draw_pass_act,
    "basic-block": _draw_basic_block,
    "const-operand": _draw_const_operand,
    "huge-maps": _draw_huge_map,
    # the same kinds at 2^20..2^22 elements (112x112x96 in EfficientNet-B0, 640-input detectors)
    "activation-large": lambda r: _draw_activation(r, 20, 22, _ACT_HW + (416, 640)),
}
#: per-plan overrides of the runner's limits (``max_elems``: elements of any LUM tensor)
_PLAN_LIMITS: dict[str, dict[str, float]] = {"activation-large": {"max_elems": 1 << 22},
                                              "huge-maps": {"max_elems": 1 << 23, "max_ops": 2e9}}
#: plans that draw from another plan's generator (the same configurations, a variant each)
_RNG_NAME = {"stem-input": "stem"}


def _rng(seed: int, name: str) -> np.random.Generator:
    import hashlib

    h = int.from_bytes(hashlib.sha256(f"context-sampling:{name}".encode()).digest()[:8], "little")
    return np.random.default_rng([int(seed), h])


def context_plan(spec: dict[str, int], *, seed: int = 0, limits: Limits = Limits()) -> list[Config]:
    """``spec`` = {plan name: n}: the first ``n`` distinct valid draws of each plan (within
    ``limits``), in the order drawn, plans in the order given."""
    out: dict[str, Config] = {}
    for name, n in spec.items():
        if name not in PLANS:
            raise ValueError(f"unknown context plan {name!r}; known: {', '.join(PLANS)}")
        r = _rng(seed, _RNG_NAME.get(name, name))
        got, attempts = 0, 0
        while got < n and attempts < 1000 * max(n, 1):
            attempts += 1
            t, p = PLANS[name](r)
            cfg = _within(t, p, Limits(**{**limits.to_dict(), **_PLAN_LIMITS.get(name, {})}))
            if cfg is not None and cfg.key not in out:
                out[cfg.key] = cfg
                got += 1
    return list(out.values())


def parse_context_spec(text: str) -> dict[str, int]:
    """``"stem:120,activation:240"`` -> ``{"stem": 120, "activation": 240}``; a UserError
    naming the known plans otherwise."""
    spec: dict[str, int] = {}
    for part in (x.strip() for x in text.split(",") if x.strip()):
        name, _, n = part.partition(":")
        if name not in PLANS or not n.strip().isdigit() or int(n) < 1:
            raise UserError(f"--context {text!r}: expected NAME:N[,NAME:N] with N >= 1 and NAME one of "
                            f"{', '.join(PLANS)}")
        spec[name] = int(n)
    if not spec:
        raise UserError(f"--context {text!r}: no plan given")
    return spec
