"""reshape: reshape / flatten / squeeze (often free)."""
from __future__ import annotations

from .registry import register
from .shared import MemoryBound


@register
class Reshape(MemoryBound):
    name = "reshape"
    order = 160
    features = ("h", "w", "c")
    summary = "reshape / flatten / squeeze (often free)"
