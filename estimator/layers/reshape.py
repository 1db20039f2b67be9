"""reshape: reshape / flatten / squeeze / unsqueeze (often free: a runtime may alias its input).

Smart padding measures it as ``(1, c, h, w)`` reinterpreted as ``(1, h, c, w)``: the same
contiguous data under another shape, which is all a reshape is. In TFLite it is a RESHAPE of the
NHWC data ``(1, h, w, c)`` to ``(1, c, w, h)``, the same reinterpretation.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op
from .params import io_bytes, positive
from .registry import NCHW, ChannelAxis, LayerCounts, register, rows_carry
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
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A reshape that keeps the channels within one output axis: read in row-major order, the
        axes before them span as many entries in the output as in the input, and the output axis
        that holds them starts no later and ends no earlier. A patch embedding's ``(n, c, h, w) ->
        (n, c, h w)`` keeps them on axis 1; MobileViT's unfolding ``(1, c, h, w) -> (c h/2, 2,
        w/2, 2)`` puts them on axis 0, ``h/2`` entries each."""
        if not in_shape or not out_shape or math.prod(in_shape) != math.prod(out_shape):
            return None
        size = int(in_shape[at.axis])
        if size % (at.size * at.inner):
            return None
        start = math.prod(in_shape[:at.axis]) * (size // (at.size * at.inner))  # entries before the channels
        end = start * at.size
        before = 1
        for b, d in enumerate(int(x) for x in out_shape):
            if d > 1 and start % before == 0 and (before * d) % end == 0 and before <= start:
                return rows_carry(p, in_shape, at, ChannelAxis(b, at.size, before * d // end))
            before *= d
        return self._split(p, in_shape, out_shape, at)

    @staticmethod
    def _split(p: Mapping[str, Any], in_shape: Sequence[int], out_shape: Sequence[int],
               at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A reshape that splits a whole channel axis over several output axes (attention's
        ``(n, tokens, 3 heads head_dim) -> (n, tokens, 3, heads, head_dim)``) carries them as
        the second-to-last of those axes: the heads, in the ``(..., heads, head_dim)`` layout of
        multi-head attention. Each of its entries is ``size / heads`` of the input's channels."""
        if at.inner != 1 or at.size != int(in_shape[at.axis]):
            return None
        out = [int(x) for x in out_shape]
        lead, before, b0 = math.prod(int(x) for x in in_shape[:at.axis]), 1, 0
        while b0 < len(out) and before < lead:
            before, b0 = before * out[b0], b0 + 1
        span, b1 = 1, b0
        while b1 < len(out) and span < at.size:
            span, b1 = span * out[b1], b1 + 1
        if before != lead or span != at.size or b1 - b0 < 2 or out[b1 - 2] < 2:
            return None
        return rows_carry(p, in_shape, at, ChannelAxis(b1 - 2, out[b1 - 2], 1))

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
