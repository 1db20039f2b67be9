"""softmax: softmax."""
from __future__ import annotations

from .registry import register
from .shared import MemoryBound


@register
class Softmax(MemoryBound):
    name = "softmax"
    order = 170
    features = ("h", "w", "c", "axis_len")
    summary = "softmax"
    extra = ("axis_len",)
