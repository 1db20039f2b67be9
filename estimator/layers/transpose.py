"""transpose: transpose / channel shuffle."""
from __future__ import annotations

from typing import Any

from .registry import register
from .shared import MemoryBound, generic_draft


@register
class Transpose(MemoryBound):
    name = "transpose"
    order = 150
    features = ("h", "w", "c", "rank")
    summary = "transpose / channel shuffle"
    extra = ("rank",)
    onnx_ops = ("Transpose", "DepthToSpace", "SpaceToDepth")

    def from_onnx(self, n: Any, g: Any) -> Any:
        return generic_draft(n, g, self.name, rank=len(g.shape(n.input[0]) or ()) or 4)
