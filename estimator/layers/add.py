"""add: element-wise add/sub, optionally broadcast, with a fused activation."""
from __future__ import annotations

from .registry import register
from .shared import BinaryEltwise


@register
class Add(BinaryEltwise):
    name = "add"
    order = 80
    onnx_ops = ("Add", "Sub", "Sum")
    summary = "element-wise add/sub, optionally broadcast (+ fused activation)"
    lum_default_act = "relu"
    prior_acts = (("relu", .5), ("none", .5))
    p_broadcast = 0.05
