"""other: an operator outside the vocabulary; carries its ONNX op_type, never dropped."""
from __future__ import annotations

from .registry import register
from .shared import MemoryBound


@register
class Other(MemoryBound):
    name = "other"
    order = 1000
    features = ("h", "w", "c", "elems_out")
    summary = "an operator outside the vocabulary; carries its ONNX op_type, never dropped"
    with_out = True
