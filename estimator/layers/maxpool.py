"""maxpool: max pooling over a window."""
from __future__ import annotations

from .registry import register
from .shared import WindowPool


@register
class MaxPool(WindowPool):
    name = "maxpool"
    order = 50
    onnx_ops = ("MaxPool",)
    summary = "max pooling"
