"""add: element-wise add/sub, optionally broadcast, with a fused activation."""
from __future__ import annotations

from typing import Any

from . import space
from .registry import register
from .shared import BinaryEltwise

#: Network prior: token counts and widths of transformer layers.
_PRIOR_TOKENS = (16, 49, 50, 64, 65, 144, 196, 197, 256, 257, 576, 784, 1024)
_PRIOR_WIDTHS = (64, 96, 128, 192, 240, 256, 288, 384, 480, 576, 768)


@register
class Add(BinaryEltwise):
    name = "add"
    order = 80
    onnx_ops = ("Add", "Sub", "Sum")
    summary = "element-wise add/sub, optionally broadcast (+ fused activation)"
    lum_default_act = "relu"
    prior_acts = (("relu", .5), ("none", .5))
    p_broadcast = 0.05

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """A quarter of the prior's adds are residual adds over token rows, (1, tokens, 1, width)."""
        if unit(p, "token-rows") < 0.25 and not p.get("broadcast"):
            p.update(h=1, w=_PRIOR_WIDTHS[int(len(_PRIOR_WIDTHS) * unit(p, "width"))],
                     c=_PRIOR_TOKENS[int(len(_PRIOR_TOKENS) * unit(p, "tokens"))])
        return p
