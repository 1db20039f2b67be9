"""Bases that families of layer types share (each type still is its own module):
window pools, binary element-wise ops, and memory-bound ops counted by elements moved."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op
from .params import LayerSpecError, act_code, io_bytes, nonneg, opt_int, positive, window, window_attrs
from .registry import NCHW, LayerCounts, LayerTypeSpec

__all__ = ["WindowPool", "BinaryEltwise", "MemoryBound"]


class WindowPool(LayerTypeSpec):
    """max or average pooling over a k_h x k_w window; IR op kind = the type's name."""

    features = ("h", "w", "c", "k_h", "k_w", "s_h", "s_w")
    ops_unit = "window-ops"
    required = ("h", "w", "c", "k_h", "k_w")
    benchable = True
    sampled = True

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n = positive(p, "n", 1)
        h, w, k_h, k_w, s_h, s_w, h_out, w_out = window(p, dilated=False)
        c = positive(p, "c")
        out = n * c * h_out * w_out
        feats = dict(h=h, w=w, c=c, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
        return LayerCounts(feats, 0, 0, float(out * k_h * k_w), io_bytes(n * h * w * c, out, 0, eb),
                           (n, c, h_out, w_out))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False) -> list[Op]:
        return [Op(self.name, "lum", tuple(ins), out_name, out_shape, window_attrs(p, dilated=False))]

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        k_h, k_w = space.kernel(r, pool=True, prior=prior)
        if prior and k_h == 5 and r.random() < 0.5:
            s_h, s_w = 1, 1  # SPPF 5x5/1
        elif r.random() < (0.6 if prior else 0.4):
            s_h, s_w = (2, 2) if k_h > 1 else (1, 1)  # 2x2/2, 3x3/2
        else:
            s_h, s_w = space.strides(r, prior)
        p = dict(h=h, w=w, c=space.channels(r, prior=prior, h=h), k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
        p.update(space.pads(r, h, w, k_h, k_w, s_h, s_w, prior=prior))
        return p


class BinaryEltwise(LayerTypeSpec):
    """Element-wise binary op, optionally broadcast, with a fused activation.

    Smart padding: with equal shapes, two inputs each from its own pad-in conv 1 -> c
    reading the same 1-channel graph input (no extra data transfer); with a broadcast
    operand (``broadcast=1``: SE-style ``(1, c, 1, 1)``, or ``elems_b=1``: ``(1, 1, 1, 1)``)
    that operand comes from its own pad-in conv from a ``(1, 1, 1, 1)`` graph input, like the
    SE branch it stands for."""

    features = ("h", "w", "c", "broadcast", "act")
    ops_unit = "elements"
    required = ("h", "w", "c")
    benchable = True
    takes_act = True
    sampled = True
    #: Share of broadcast draws.
    p_broadcast: float = 0.0

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        bc = nonneg(p, "broadcast", 0)  # 0: same shapes, 1: second input broadcast (e.g. SE scale, bias)
        out = n * h * w * c
        second = out if bc == 0 else positive(p, "elems_b", c)
        # Constant parameter operands, e.g. a standalone BatchNormalization's scale and shift.
        cp = nonneg(p, "const_params", 0)
        return LayerCounts(dict(h=h, w=w, c=c, broadcast=float(bc > 0), act=act_code(p)), 0, cp, float(out),
                           io_bytes(out + second, out, cp, eb), (n, c, h, w))

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts) -> tuple[NCHW, ...]:
        c, h, w = int(p["c"]), int(p["h"]), int(p["w"])
        if opt_int(p, "broadcast", 0):
            eb = opt_int(p, "elems_b", c)
            if eb not in (c, 1):
                raise LayerSpecError(f"broadcast operand with elems_b={eb} cannot be benchmarked; "
                                     f"use elems_b={c} (shape (1,c,1,1)) or 1")
            return (1, c, h, w), (1, eb, 1, 1)
        return (1, c, h, w), (1, c, h, w)

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False) -> list[Op]:
        return [Op(self.name, "lum", tuple(ins), out_name, out_shape, {}, act)]

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        p: dict[str, Any] = dict(h=h, w=w, c=space.channels(r, prior=prior, h=h))
        if r.random() < self.p_broadcast:
            p["broadcast"] = 1
        return p


class MemoryBound(LayerTypeSpec):
    """A layer counted by the elements it moves: input ``(n, h, w, c)``, optionally
    ``elems_out`` output elements, plus integer features :attr:`extra`."""

    ops_unit = "elements"
    required = ("h", "w", "c")
    #: Whether the output size is a raw param (``elems_out``) and a feature.
    with_out: bool = False
    #: Further integer raw params that are features (0 by default).
    extra: tuple[str, ...] = ()

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        in_el = n * h * w * c
        out_el = positive(p, "elems_out", in_el) if self.with_out else in_el
        feats: dict[str, float] = dict(h=h, w=w, c=c)
        if self.with_out:
            feats["elems_out"] = out_el
        for key in self.extra:
            feats[key] = nonneg(p, key, 0)
        return LayerCounts(feats, 0, 0, float(max(in_el, out_el)), io_bytes(in_el, out_el, 0, eb), (out_el,))
