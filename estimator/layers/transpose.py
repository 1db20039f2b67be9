"""transpose: transpose / channel shuffle."""
from __future__ import annotations

from .registry import register
from .shared import MemoryBound


@register
class Transpose(MemoryBound):
    name = "transpose"
    order = 150
    features = ("h", "w", "c", "rank")
    summary = "transpose / channel shuffle"
    extra = ("rank",)
