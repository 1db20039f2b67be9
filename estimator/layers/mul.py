"""mul: element-wise mul/div, optionally broadcast (squeeze-excite scales), with a fused activation."""
from __future__ import annotations

from .registry import register
from .shared import BinaryEltwise


@register
class Mul(BinaryEltwise):
    name = "mul"
    order = 90
    summary = "element-wise mul/div, optionally broadcast (+ fused activation)"
    lum_default_act = None
    p_broadcast = 0.6
