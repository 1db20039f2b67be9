"""add: element-wise add/sub, optionally broadcast, with a fused activation."""
from __future__ import annotations

from typing import Any

from . import space
from .registry import register
from .shared import LITERT_CLAMP_ACTS, VELA_FUSED_ACTS, BinaryEltwise


@register
class Add(BinaryEltwise):
    name = "add"
    order = 80
    onnx_ops = ("Add", "Sub", "Sum")
    summary = "element-wise add/sub, optionally broadcast (+ fused activation)"
    #: ONNX Runtime: an Add followed by Relu is measured as one LUM (Table 2) and folds into the
    #: producing convolution's sum input
    fused_activations = {"onnxruntime": ("relu",), "litert": LITERT_CLAMP_ACTS, "vela": VELA_FUSED_ACTS}
    lum_default_act = "relu"
    prior_acts = (("relu", .5), ("none", .5))
    p_broadcast = 0.05

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """A quarter of the prior's adds are residual adds over token rows, (1, tokens, 1, width);
        a tenth of the others add a constant."""
        if unit(p, "token-rows") < 0.25 and not p.get("broadcast"):
            p.update(h=1, w=space.PRIOR_WIDTHS[int(len(space.PRIOR_WIDTHS) * unit(p, "width"))],
                     c=space.PRIOR_TOKENS[int(len(space.PRIOR_TOKENS) * unit(p, "tokens"))])
        elif (u := unit(p, "const")) < 0.10:  # a constant shift: per channel (a BN's), the full shape (a grid)
            p.update(const_b=1, **(dict(broadcast=1, elems_b=int(p["c"])) if u < 0.07 else {}))
        return p
