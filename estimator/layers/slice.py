"""slice: slice / split / gather."""
from __future__ import annotations

from typing import Any

from .registry import register
from .shared import MemoryBound


@register
class Slice(MemoryBound):
    name = "slice"
    order = 140
    features = ("h", "w", "c", "elems_out", "n_outputs")
    summary = "slice / split / gather"
    with_out = True
    onnx_ops = ("Slice", "Split", "Gather")
    extra = ("n_outputs",)

    def from_onnx(self, n: Any, g: Any) -> Any:
        """Slice, Split or Gather of a computed tensor (a Gather from a constant table is an
        embedding lookup: type other, flag ``embedding``)."""
        data = n.input[0]
        if g.is_static(data):
            return g.other(n, ["embedding"])
        d = g.base(n, self.name)
        d.inputs = [g.canon(data)]
        g.spatial_params(d, data)
        sizes = [g.elems(o) for o in n.output if o]
        if any(s is None for s in sizes):
            d.flag("unknown_shape")
        d.params.update(elems_out=max(sum(s or 0 for s in sizes), 1), n_outputs=len(sizes))
        return d
