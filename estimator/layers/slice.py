"""slice: slice / split / gather of a computed tensor, counted by the elements it reads and
writes.

Smart padding measures a one-output slice as the first ``k`` channels of ``(1, c, h, w)``
(``k = elems_out / (h w)``: the same elements copied out), fed and read as rows
(:func:`~estimator.layers.registry.rows_of`: the first ``k h`` rows of ``(1, c h, 1, w)``); a
split into several outputs is not benchmarked (a fallback, flagged). In TFLite the rows are
NHWC ``(1, 1, c h, w)`` and the LUM a SLICE of the first ``k h`` of them.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .importing import attrs
from .ir import Op, tf_axis
from .params import LayerSpecError, opt_int
from .registry import NCHW, ChannelAxis, LayerCounts, register, rows_carry, rows_of
from .shared import MemoryBound



@register
class Slice(MemoryBound):
    name = "slice"
    order = 140
    output_is_view = True
    features = ("h", "w", "c", "elems_out", "n_outputs")
    summary = "slice / split / gather"
    with_out = True
    onnx_ops = ("Slice", "Split", "Gather")
    extra = ("n_outputs",)
    benchable = True
    model_formats = ("onnx", "tflite")
    sampled = True
    examples = (dict(h=3, w=12608, c=3, elems_out=37824, n_outputs=1), dict(h=8, w=8, c=16, elems_out=512))

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        counts = super().count(p, eb)
        h, w = int(p["h"]), int(p["w"])
        out = int(counts.output_shape[0])
        if out % (h * w) == 0 and opt_int(p, "n_outputs", 1) == 1:  # whole channels: (n, k, h, w)
            n = opt_int(p, "n", 1)
            if out % (n * h * w) == 0:
                counts = LayerCounts(counts.features, 0, 0, counts.ops, counts.bytes, (n, out // (n * h * w), h, w))
        return counts

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A gather, slice or split along another axis than the channels keeps them: a vision
        transformer's class token (``x[:, 0]``: the features, ``w`` of the rows the importer
        reads), and attention's q, k and v out of one projection (``qkv[0]``, or a split of
        each head's entries: the heads)."""
        rank, axis = len(in_shape), at.axis
        if node.op_type not in ("Gather", "Slice", "Split") or rank < 2 or not 0 <= axis < rank:
            return None
        out = axis
        if node.op_type == "Gather":
            g = int(attrs(node).get("axis", 0)) % rank
            if g == axis or opt_int(p, "n_outputs", 1) != 1:
                return None
            out = axis - (1 if len(out_shape) < rank and g < axis else 0)
        elif len(out_shape) != rank:
            return None
        if len(out_shape) <= out or int(out_shape[out]) != int(in_shape[axis]):
            return None
        return rows_carry(p, in_shape, at, at.moved(out))

    def with_channels(self, p: Mapping[str, Any], port: str | int, n: int) -> dict[str, Any]:
        """The elements gathered scale with the rows' parameter that holds the channels."""
        q = super().with_channels(p, port, n)
        if port in ("c", "h", "w") and "elems_out" in p:
            q["elems_out"] = int(p["elems_out"]) // int(p[port]) * int(n)
        return q

    def _kept(self, p: Mapping[str, Any]) -> int:
        h, w, c = int(p["h"]), int(p["w"]), int(p["c"])
        out, k = opt_int(p, "elems_out", h * w * c), opt_int(p, "n_outputs", 1)
        if k != 1 or out % (h * w) or not 1 <= out // (h * w) <= c:
            raise LayerSpecError(f"slice to {out} elements in {k} output(s) of a {c}x{h}x{w} tensor cannot be "
                                 "benchmarked; only one output of whole channels")
        return out // (h * w)

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        return (rows_of((1, int(p["c"]), int(p["h"]), int(p["w"])), model_format),)

    def lum_output(self, p: Mapping[str, Any], counts: LayerCounts, model_format: str = "onnx") -> NCHW:
        return rows_of((1, self._kept(p), int(p["h"]), int(p["w"])), model_format)

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        return self._rows_in_ranges((*ins, out))

    def single_layer_io(self, p: Mapping[str, Any], ins: tuple[NCHW, ...], out: NCHW,
                        model_format: str = "onnx") -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        return ((1, int(p["c"]), int(p["h"]), int(p["w"])),), (1, self._kept(p), int(p["h"]), int(p["w"]))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        k = self._kept(p) if single else self._kept(p) * int(p["h"])  # channels, or rows of (1, c h, 1, w)
        shape = (1, self._kept(p), int(p["h"]), int(p["w"])) if single else out_shape
        axis = 3 if model_format == "tflite" and not single else 1  # where rows_of put the rows
        return [Op(self.name, "lum", tuple(ins), out_name, shape, {"axis": axis, "end": k})]

    def onnx_nodes(self, op: Op, output: str, weights: Mapping[str, np.ndarray], init: Any) -> list[Any]:
        from onnx import helper  # noqa: PLC0415

        i = np.array
        ins = [op.inputs[0], init(f"{op.name}/starts", i([0])), init(f"{op.name}/ends", i([op.attrs["end"]])),
               init(f"{op.name}/axes", i([op.attrs["axis"]]))]
        return [helper.make_node("Slice", ins, [output], name=op.name)]

    def tflite_ops(self, op: Op, ins: Sequence[Any], weights: Mapping[str, np.ndarray]) -> Any:
        """SLICE of the first ``end`` entries of the axis (STRIDED_SLICE where the converter
        prefers it)."""
        import tensorflow as tf  # noqa: PLC0415

        x = ins[0]
        size = [int(d) for d in x.shape]
        size[tf_axis(int(op.attrs["axis"]), len(size))] = int(op.attrs["end"])
        return tf.slice(x, [0] * len(size), size)

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        if prior:  # q, k, v out of a fused projection; a class token out of the tokens
            t, d = int(r.choice(space.PRIOR_TOKENS)), int(r.choice((16, 32, 64, 96, 192, 384)))
            if r.random() < 0.5:
                heads = int(r.choice(space.PRIOR_HEADS))
                return dict(h=heads, w=t * d // heads or 1, c=3, elems_out=heads * (t * d // heads or 1), n_outputs=1)
            return dict(h=1, w=d, c=t, elems_out=d, n_outputs=1)
        h, w, c = space.loguniform_int(r, 1, 256), space.loguniform_int(r, 1, 1024), space.loguniform_int(r, 1, 512)
        return dict(h=h, w=w, c=c, elems_out=h * w * int(r.integers(1, c + 1)), n_outputs=1)

    def from_onnx(self, n: Any, g: Any) -> Any:
        """Slice, Split or Gather of a computed tensor (a Gather from a constant table is an
        embedding lookup: type other, flag ``embedding``)."""
        data = n.input[0]
        if g.is_static(data):
            return g.other(n, ["embedding"])
        d = g.base(n, self.name)
        d.inputs = [g.canon(data)]
        g.rows_params(d, data)
        sizes = [g.elems(o) for o in n.output if o]
        if any(s is None for s in sizes):
            d.flag("unknown_shape")
        d.params.update(elems_out=max(sum(s or 0 for s in sizes), 1), n_outputs=len(sizes))
        return d
