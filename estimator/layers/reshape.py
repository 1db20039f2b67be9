"""reshape: reshape / flatten / squeeze / unsqueeze (often free: a runtime may alias its input).

Smart padding measures it as ``(1, c, h, w)`` reinterpreted as ``(1, h, c, w)``: the same
contiguous data under another shape, which is all a reshape is. In TFLite it is a RESHAPE of the
NHWC data ``(1, h, w, c)`` to ``(1, c, w, h)``, the same reinterpretation.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op
from .params import io_bytes, positive
from .registry import NCHW, LayerCounts, register
from .shared import MemoryBound, generic_draft

_PRIOR_SMALL = (1, 2, 3, 4, 8, 12, 16, 32, 64, 96, 128, 192, 256, 384)


@register
class Reshape(MemoryBound):
    name = "reshape"
    order = 160
    output_is_view = True
    features = ("h", "w", "c")
    summary = "reshape / flatten / squeeze (often free)"
    onnx_ops = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
    benchable = True
    model_formats = ("onnx", "tflite")
    sampled = True
    examples = (dict(h=14, w=14, c=192), dict(h=1, w=192, c=197))

    through_channels = "c"

    def channel_flow(self, p: Mapping[str, Any]) -> str:
        """A flatten folds ``c x h x w`` into features (:mod:`estimator.pruning` checks the
        output shape is that)."""
        return "flatten"

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                axis: int) -> tuple[str, int] | None:
        """A flatten of a feature map's rows and columns, ``(n, c, h, w) -> (n, c, h w)`` (a
        vision transformer's patch embedding), keeps its channels on axis 1."""
        if len(in_shape) != 4 or axis != 1 or int(p.get("c", 0)) != int(in_shape[1]):
            return None
        n, c, h, w = (int(x) for x in in_shape)
        return ("c", 1) if tuple(int(x) for x in out_shape) == (n, c, h * w) else None

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        el = n * h * w * c
        return LayerCounts(dict(h=h, w=w, c=c), 0, 0, float(el), io_bytes(el, el, 0, eb), (n, h, c, w))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        return [Op("reshape", "lum", tuple(ins), out_name, out_shape)]

    def from_onnx(self, n: Any, g: Any) -> Any:
        return generic_draft(n, g, self.name)

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        if prior:
            t, s = int(r.choice(space.PRIOR_TOKENS)), int(r.choice(_PRIOR_SMALL))
            return dict(h=1, w=s, c=t) if r.random() < 0.5 else dict(h=t, w=s, c=int(r.choice(space.PRIOR_HEADS)))
        return dict(h=space.loguniform_int(r, 1, 1024), w=space.loguniform_int(r, 1, 1024),
                    c=space.loguniform_int(r, 1, 1024))
