"""softmax: softmax (or log-softmax) along one axis.

Smart padding measures it over the last axis of a tensor ``(1, c, h, w)`` (``axis_len == w``:
attention scores ``(1, heads, tokens, tokens)``), fed as ``(1, c h, 1, w)``
(:func:`~estimator.layers.registry.rows_of`: the same contiguous rows, normalised the same
way), or over the channels of ``(1, c, 1, 1)`` (a classifier's ``(1, classes)``). In TFLite the
rows are NHWC ``(1, 1, c h, w)`` and SOFTMAX normalises its last (channel) axis, as it must
(a softmax over another axis converts to TRANSPOSE, SOFTMAX, TRANSPOSE).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .importing import attrs, last_axis_rows
from .ir import Op, tf_axis
from .params import LayerSpecError, io_bytes, nonneg, positive
from .registry import NCHW, ChannelAxis, LayerCounts, register, rows_carry, rows_of
from .shared import MemoryBound, generic_draft


@register
class Softmax(MemoryBound):
    name = "softmax"
    order = 170
    features = ("h", "w", "c", "axis_len")
    summary = "softmax over one axis (axis_len: its length)"
    extra = ("axis_len",)
    onnx_ops = ("Softmax", "LogSoftmax")
    benchable = True
    model_formats = ("onnx", "tflite")
    sampled = True
    examples = (dict(h=197, w=197, c=3, axis_len=197), dict(h=1, w=1, c=1000, axis_len=1000),
                dict(h=49, w=64, c=4, axis_len=64))

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        out = n * h * w * c
        feats = dict(h=h, w=w, c=c, axis_len=nonneg(p, "axis_len", 0))
        return LayerCounts(feats, 0, 0, float(out), io_bytes(out, out, 0, eb), (n, c, h, w))

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A softmax over a later axis than the channels keeps them (attention's scores,
        normalised over the keys of each head): an axis before the normalised one, under
        either opset's meaning of ``axis``."""
        axis = attrs(node).get("axis")
        if axis is None or not 0 <= at.axis < int(axis) % len(in_shape):
            return None
        return rows_carry(p, in_shape, at)

    def _axis(self, p: Mapping[str, Any]) -> int:
        h, w, c, length = int(p["h"]), int(p["w"]), int(p["c"]), int(p.get("axis_len") or 0)
        if length == w:
            return 3
        if h == w == 1 and length == c:
            return 1
        raise LayerSpecError(f"softmax over an axis of length {length} of a {c}x{h}x{w} tensor cannot be "
                             "benchmarked; only over its last axis (axis_len = w) or its channels at h = w = 1 (axis_len = c)")

    def _shape(self, p: Mapping[str, Any], model_format: str) -> NCHW:
        shape = (1, int(p["c"]), int(p["h"]), int(p["w"]))
        return rows_of(shape, model_format) if self._axis(p) == 3 else shape

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        return (self._shape(p, model_format),)

    def lum_output(self, p: Mapping[str, Any], counts: LayerCounts, model_format: str = "onnx") -> NCHW:
        return self._shape(p, model_format)

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        if self._axis(p) == 3:
            return self._rows_in_ranges((*ins, out))
        return super().in_ranges(p, ins, out)

    def single_layer_io(self, p: Mapping[str, Any], ins: tuple[NCHW, ...], out: NCHW,
                        model_format: str = "onnx") -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        shape: tuple[int, ...] = (1, int(p["c"]), int(p["h"]), int(p["w"]))
        if model_format == "tflite" and self._axis(p) == 3:
            shape = shape[1:]  # (c, h, w): softmax over its last axis (rank 4 is NHWC there)
        return (shape,), shape

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        axis = self._axis(p)
        shape: tuple[int, ...] = (1, int(p["c"]), int(p["h"]), int(p["w"])) if single else out_shape
        if model_format == "tflite" and axis == 3:  # the rows' elements lie on the channels there
            shape, axis = (shape[1:], 2) if single else (shape, 1)
        return [Op(self.name, "lum", tuple(ins), out_name, shape, {"axis": axis})]

    def onnx_nodes(self, op: Op, output: str, weights: Mapping[str, np.ndarray], init: Any) -> list[Any]:
        from onnx import helper  # noqa: PLC0415

        return [helper.make_node("Softmax", [op.inputs[0]], [output], name=op.name, axis=int(op.attrs["axis"]))]

    def tflite_ops(self, op: Op, ins: Sequence[Any], weights: Mapping[str, np.ndarray]) -> Any:
        """SOFTMAX over the TensorFlow axis of the IR's."""
        import tensorflow as tf  # noqa: PLC0415

        return tf.nn.softmax(ins[0], axis=tf_axis(int(op.attrs["axis"]), len(op.shape)))

    def from_onnx(self, n: Any, g: Any) -> Any:
        """``axis_len``: the length of the normalised axis (before opset 13, of the
        flattened trailing axes). A tensor of rank 5 or more normalised over its last axis
        (attention over the patch positions of a MobileViT block: ``(b, patches, heads, tokens,
        tokens)``) is its rows: ``(c, h, w)`` = (the leading dimensions' product, the last two),
        as a rank-4 one is."""
        xs = g.shape(n.input[0])
        d = generic_draft(n, g, self.name)
        if xs is not None and xs:
            axis = int(attrs(n).get("axis", 1 if g.opset < 13 else -1)) % len(xs)
            d.params["axis_len"] = int(xs[axis]) if g.opset >= 13 else int(math.prod(xs[axis:]))
            if len(xs) >= 5 and axis == len(xs) - 1:
                last_axis_rows(d, xs)
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        if prior:
            if r.random() < 0.1:  # a classifier's softmax
                c = int(r.choice((10, 100, 1000)))
                return dict(h=1, w=1, c=c, axis_len=c)
            t = int(r.choice(space.PRIOR_TOKENS))
            return dict(h=t, w=t, c=int(r.choice(space.PRIOR_HEADS)), axis_len=t)
        w = space.loguniform_int(r, 2, 1024)
        return dict(h=space.loguniform_int(r, 1, 1024), w=w, c=space.loguniform_int(r, 1, 64), axis_len=w)
