"""slice: slice / split / gather."""
from __future__ import annotations

from .registry import register
from .shared import MemoryBound


@register
class Slice(MemoryBound):
    name = "slice"
    order = 140
    features = ("h", "w", "c", "elems_out", "n_outputs")
    summary = "slice / split / gather"
    with_out = True
    extra = ("n_outputs",)
