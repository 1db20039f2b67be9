"""avgpool: average pooling over a window (padded cells excluded from the mean)."""
from __future__ import annotations

from .registry import register
from .shared import WindowPool


@register
class AvgPool(WindowPool):
    name = "avgpool"
    order = 60
    onnx_ops = ("AveragePool",)
    summary = "average pooling"
