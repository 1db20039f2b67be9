"""dwconv2d: depthwise 2D convolution (groups = channels), with a fused activation."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op
from .params import (WINDOW_RENDER_LIMITS, LayerSpecError, act_code, align, dims_text, integer, io_bytes, nonneg, opt_int,
                     positive, window, window_attrs, window_renders)
from .registry import NCHW, LayerCounts, LayerTypeSpec, register
from .shared import CONV_FUSED_ACTIVATIONS, conv_draft, is_depthwise_conv


@register
class DwConv2d(LayerTypeSpec):
    name = "dwconv2d"
    order = 20
    features = ("h", "w", "c", "k_h", "k_w", "s_h", "s_w", "dilation", "flops", "params", "act", "c_align")
    ops_unit = "flops"
    through_channels = "c"
    summary = ("depthwise 2D convolution (groups = channels; c_align: the power-of-two alignment of c, at most 16) "
               "(+ fused activation)")
    required = ("h", "w", "c", "k_h", "k_w")
    benchable = True
    takes_act = True
    fused_activations = CONV_FUSED_ACTIVATIONS
    lum_default_act = "relu"
    prior_acts = (("relu", .35), ("hardswish", .10), ("relu6", .3), ("none", .2), ("hardsigmoid", .05))
    sampled = True
    onnx_ops = ("Conv",)
    #: Network prior: the share of depthwise convolutions whose channel count leaves the
    #: multiple-of-8 ladder (:func:`space.off_ladder`).
    off_ladder_share = 0.25

    def channel_flow(self, p: Mapping[str, Any]) -> str:
        """Depthwise keeps its input's channels (a channel multiplier ties them to groups)."""
        return "through" if opt_int(p, "multiplier", 1) == 1 else ""

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        s = f"{dims_text(g('h'), g('w'))} c{g('c')} k{dims_text(g('k_h'), g('k_w'))} s{dims_text(g('s_h', 1), g('s_w', 1))}"
        return s + (f" x{g('multiplier')}" if g("multiplier", 1) != 1 else "")

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n = positive(p, "n", 1)
        h, w, k_h, k_w, s_h, s_w, h_out, w_out = window(p, dilated=True)
        c = positive(p, "c")
        mult = positive(p, "multiplier", 1)
        if integer(p, "groups", c) != c:  # (a depthwise layer has one group per input channel)
            raise LayerSpecError(f"dwconv2d has groups = c = {c}, got groups={p['groups']}; grouped convolutions are conv2d's")
        bias = nonneg(p, "bias", 1)
        c_out = c * mult
        params = c_out * k_h * k_w + (c_out if bias else 0)
        macs = n * h_out * w_out * c_out * k_h * k_w
        dil = max(positive(p, "d_h", 1), positive(p, "d_w", 1))
        feats = dict(h=h, w=w, c=c, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w, dilation=dil,
                     flops=2 * macs / n, params=params, act=act_code(p), c_align=align(c))
        return LayerCounts(feats, macs, params, 2.0 * macs,
                           io_bytes(n * h * w * c, n * h_out * w_out * c_out, params, eb),
                           (n, c_out, h_out, w_out))

    render_limits = WINDOW_RENDER_LIMITS

    def renders(self, p: Mapping[str, Any], model_format: str) -> bool:
        return super().renders(p, model_format) and window_renders(p, model_format)

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        a = window_attrs(p, dilated=True)
        c_in = int(p["c"])
        a.update(c_in=c_in, c_out=c_in * opt_int(p, "multiplier", 1), groups=c_in, bias=bool(opt_int(p, "bias", 1)),
                 depthwise=True)
        return [Op("conv", "lum", tuple(ins), out_name, out_shape, a, act)]

    def from_onnx(self, n: Any, g: Any) -> Any:
        if not is_depthwise_conv(n, g):
            return None
        return conv_draft(n, g, self.name)

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        c = space.channels(r, prior=prior, h=h)
        if prior:  # depthwise kernels are 3x3, 5x5, now and then 7x7
            k_h = k_w = int(r.choice((3, 5, 7), p=(0.6, 0.3, 0.1)))
        else:
            k_h, k_w = space.kernel(r)
        s_h, s_w = space.strides(r, prior)
        d = 1 if prior or r.random() < 0.93 or max(k_h, k_w) == 1 else int(r.integers(2, space.SPACE_MAX["dilation"] + 1))
        p = dict(h=h, w=w, c=c, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
        if d > 1:
            p.update(d_h=d, d_w=d)
        if r.random() < (0.0 if prior else 0.05):
            p["multiplier"] = int(r.choice((2, 4)))
        p.update(space.pads(r, h, w, k_h, k_w, s_h, s_w, d, d, prior))
        return p

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """Off-ladder channel counts for a share of the depthwise convolutions."""
        if p.get("groups", 1) == 1 and unit(p, "off-ladder") < self.off_ladder_share:
            p["c"] = space.off_ladder(int(p["c"]), unit(p, "off-ladder:c"))
        return p
