"""conv2d: 2D convolution, grouped and dilated included, with a fused activation."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op
from .params import (LayerSpecError, WINDOW_RENDER_LIMITS, act_code, align, cold, dims_text, io_bytes, nonneg, opt_int,
                     positive, window, window_attrs, window_renders)
from .registry import NCHW, LayerCounts, LayerTypeSpec, register
from .shared import CONV_FUSED_ACTIVATIONS, conv_draft, is_depthwise_conv


@register
class Conv2d(LayerTypeSpec):
    name = "conv2d"
    order = 10
    features = ("h", "w", "c_in", "c_out", "k_h", "k_w", "s_h", "s_w", "groups", "dilation", "flops", "params", "act",
                "c_in_g", "c_out_g", "c_in_align", "c_out_align", "graph_input", "cold")
    ops_unit = "flops"
    summary = ("2D convolution incl. grouped (c_in_g, c_out_g: channels per group; *_align: their power-of-two "
               "alignment, at most 16) and dilated (+ fused activation; graph_input=1: a stem reading the network's "
               "input; cold=1: weights read from DRAM)")
    required = ("h", "w", "c_in", "c_out", "k_h", "k_w")
    channel_params = ("c_in", "c_out")
    benchable = True
    takes_act = True
    fused_activations = CONV_FUSED_ACTIVATIONS
    lum_default_act = "relu"
    prior_acts = (("relu", .35), ("hardswish", .10), ("relu6", .25), ("none", .15), ("leakyrelu", .05),
                  ("sigmoid", .05), ("hardsigmoid", .05))
    sampled = True
    onnx_ops = ("Conv",)
    #: Network prior: the share of convolutions whose channel counts leave the multiple-of-8
    #: ladder (:func:`space.off_ladder`).
    off_ladder_share = 0.15

    def channel_flow(self, p: Mapping[str, Any]) -> str:
        """A dense conv mixes channels; a grouped one ties them to its groups."""
        return "mix" if opt_int(p, "groups", 1) == 1 else ""

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        s = (f"{dims_text(g('h'), g('w'))} {g('c_in')}->{g('c_out')} k{dims_text(g('k_h'), g('k_w'))} "
             f"s{dims_text(g('s_h', 1), g('s_w', 1))}")
        if g("groups", 1) != 1:
            s += f" g{g('groups')}"
        if max(g("d_h", 1), g("d_w", 1)) > 1:
            s += f" d{dims_text(g('d_h', 1), g('d_w', 1))}"
        return s

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n = positive(p, "n", 1)
        h, w, k_h, k_w, s_h, s_w, h_out, w_out = window(p, dilated=True)
        c_in, c_out, g = positive(p, "c_in"), positive(p, "c_out"), positive(p, "groups", 1)
        if c_in % g or c_out % g:
            raise LayerSpecError(f"groups={g} must divide c_in={c_in} and c_out={c_out}")
        bias = nonneg(p, "bias", 1)
        params = c_out * (c_in // g) * k_h * k_w + (c_out if bias else 0)
        macs = n * h_out * w_out * c_out * (c_in // g) * k_h * k_w
        dil = max(positive(p, "d_h", 1), positive(p, "d_w", 1))
        feats = dict(h=h, w=w, c_in=c_in, c_out=c_out, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w,
                     groups=g, dilation=dil, flops=2 * macs / n, params=params, act=act_code(p),
                     c_in_g=c_in // g, c_out_g=c_out // g, c_in_align=align(c_in // g), c_out_align=align(c_out // g),
                     graph_input=float(nonneg(p, "graph_input", 0) > 0), cold=cold(p))
        return LayerCounts(feats, macs, params, 2.0 * macs,
                           io_bytes(n * h * w * c_in, n * h_out * w_out * c_out, params, eb),
                           (n, c_out, h_out, w_out))

    render_limits = WINDOW_RENDER_LIMITS

    def renders(self, p: Mapping[str, Any], model_format: str) -> bool:
        return super().renders(p, model_format) and window_renders(p, model_format)

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        return ((1, int(p["c_in"]), int(p["h"]), int(p["w"])),)

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        a = window_attrs(p, dilated=True)
        c_in, c_out, g = int(p["c_in"]), int(p["c_out"]), opt_int(p, "groups", 1)
        a.update(c_in=c_in, c_out=c_out, groups=g, bias=bool(opt_int(p, "bias", 1)),
                 depthwise=g == c_in and g > 1 and c_out % c_in == 0)
        return [Op("conv", "lum", tuple(ins), out_name, out_shape, a, act)]

    def reads_graph_input(self, p: Mapping[str, Any]) -> bool:
        """A stem with raw param ``graph_input=1`` reads the network's input, as it does in a
        network where the host writes the image: its padded model pads only the output side
        and Eq. 4 runs with ``T_b1 = 0``. On Vela a pad-in conv writing a 3-channel map costs
        up to 10x its padding pair (a 224x224x3 NHWC write to DRAM), which smart padding
        would charge to the stem."""
        return opt_int(p, "graph_input", 0) > 0

    def from_onnx(self, n: Any, g: Any) -> Any:
        if is_depthwise_conv(n, g):
            return None  # dwconv2d's
        return conv_draft(n, g, self.name)

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        c_in = 3 if prior and r.random() < 0.05 else space.channels(r, prior=prior, h=h)  # 3: an RGB stem
        c_out = space.channels(r, prior=prior, h=h)
        k_h, k_w = space.kernel(r, prior=prior)
        s_h, s_w = space.strides(r, prior)
        d = 1 if prior or r.random() < 0.9 or max(k_h, k_w) == 1 else int(r.integers(2, space.SPACE_MAX["dilation"] + 1))
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
        p.update(space.pads(r, h, w, k_h, k_w, s_h, s_w, d, d, prior))
        return p

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """Off-ladder channel counts (c_in, c_out or both; never an RGB stem's 3 inputs) for
        a share of the convolutions, then RegNet/ResNeXt-style groups for a tenth."""
        if p.get("groups", 1) == 1 and unit(p, "off-ladder") < self.off_ladder_share:
            keys = (("c_in",), ("c_out",), ("c_in", "c_out"))[int(3 * unit(p, "off-ladder-which"))]
            keys = tuple(k for k in keys if p[k] != 3) or ("c_out",)
            p.update({k: space.off_ladder(int(p[k]), unit(p, f"off-ladder:{k}")) for k in keys})
        if p.get("groups", 1) == 1 and unit(p, "groups") < 0.1:
            gw = (8, 16, 32, 64)[int(4 * unit(p, "group-width"))]  # RegNet/ResNeXt group widths
            if p["c_in"] % gw == 0 and p["c_in"] // gw > 1 and p["c_out"] % (p["c_in"] // gw) == 0:
                p["groups"] = p["c_in"] // gw
        return p
