"""reshape: reshape / flatten / squeeze (often free)."""
from __future__ import annotations

from typing import Any

from .registry import register
from .shared import MemoryBound, generic_draft


@register
class Reshape(MemoryBound):
    name = "reshape"
    order = 160
    features = ("h", "w", "c")
    summary = "reshape / flatten / squeeze (often free)"
    onnx_ops = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")

    def from_onnx(self, n: Any, g: Any) -> Any:
        return generic_draft(n, g, self.name)
