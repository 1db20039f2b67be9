"""softmax: softmax."""
from __future__ import annotations

import math
from typing import Any

from .importing import attrs
from .registry import register
from .shared import MemoryBound, generic_draft


@register
class Softmax(MemoryBound):
    name = "softmax"
    order = 170
    features = ("h", "w", "c", "axis_len")
    summary = "softmax"
    extra = ("axis_len",)
    onnx_ops = ("Softmax", "LogSoftmax")

    def from_onnx(self, n: Any, g: Any) -> Any:
        """``axis_len``: the length of the normalised axis (before opset 13, of the
        flattened trailing axes)."""
        xs = g.shape(n.input[0])
        d = generic_draft(n, g, self.name)
        if xs is not None and xs:
            axis = int(attrs(n).get("axis", 1 if g.opset < 13 else -1)) % len(xs)
            d.params["axis_len"] = int(xs[axis]) if g.opset >= 13 else int(math.prod(xs[axis:]))
        return d
