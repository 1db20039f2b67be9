"""matmul: MatMul of two activations, (b, m, k) x (b, k, n_cols): attention's products.

Smart padding measures it as in a transformer, on operands ``(1, b, m, k)`` and
``(1, b, k, n_cols)`` and output ``(1, b, m, n_cols)``; the padding convs feed and read them
as ``(1, b m, 1, k)``, ``(1, b k, 1, n_cols)`` and ``(1, b m, 1, n_cols)``
(:func:`~estimator.layers.registry.rows_of`, reshaped to the operands as views). In TFLite the
rows are NHWC ``(1, 1, b m, k)`` and ``(1, 1, b k, n_cols)`` and the operands ``(b, m, k)``, ``(b, k, n_cols)``: one
BATCH_MATMUL between RESHAPEs that only relabel the stored data.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op
from .params import act_code, io_bytes, positive
from .registry import NCHW, ChannelAxis, LayerCounts, LayerTypeSpec, register, reshape_op, rows_of
from .shared import gemm_dims

#: Network prior: attention head dimensions (heads and tokens: :mod:`space`).
_PRIOR_HEAD_DIM = (16, 24, 32, 48, 64)


@register
class MatMul(LayerTypeSpec):
    name = "matmul"
    order = 40
    features = ("b", "m", "k", "n_cols", "flops", "act")
    ops_unit = "flops"
    summary = "MatMul of two activations: (b, m, k) x (b, k, n_cols)"
    required = ("m", "k", "n_cols")
    channel_params = ()
    takes_act = True
    onnx_ops = ("Gemm", "MatMul")
    benchable = True
    model_formats = ("onnx", "tflite")
    sampled = True
    examples = (dict(b=3, m=197, k=64, n_cols=197), dict(b=3, m=197, k=197, n_cols=64), dict(m=8, k=16, n_cols=4))

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        return f"b{g('b', 1)} {g('m')}x{g('k')} @ {g('k')}x{g('n_cols')}"

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        b, m, k, nn = positive(p, "b", 1), positive(p, "m"), positive(p, "k"), positive(p, "n_cols")
        macs = b * m * k * nn
        feats = dict(b=b, m=m, k=k, n_cols=nn, flops=2 * macs, act=act_code(p))
        return LayerCounts(feats, macs, 0, 2.0 * macs, io_bytes(b * (m * k + k * nn), b * m * nn, 0, eb), (b, m, nn))

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A product of two activations keeps channels on a batch axis, one product per
        channel (attention's heads: ``q k^T`` and ``scores v`` per head); ``b`` counts them."""
        rank, lead = len(in_shape), len(out_shape) - len(in_shape)
        if node.op_type != "MatMul" or rank < 3 or lead < 0 or not 0 <= at.axis < rank - 2 or at.inner != 1:
            return None
        out = at.axis + lead
        if int(out_shape[out]) != int(in_shape[at.axis]) or int(p.get("b") or 1) != math.prod(out_shape[:-2]):
            return None
        return "b", at.moved(out)

    @staticmethod
    def _shapes(p: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        b, m, k, nn = int(p.get("b") or 1), int(p["m"]), int(p["k"]), int(p["n_cols"])
        return (1, b, m, k), (1, b, k, nn), (1, b, m, nn)

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        a, b, _ = self._shapes(p)
        return rows_of(a, model_format), rows_of(b, model_format)

    def lum_output(self, p: Mapping[str, Any], counts: LayerCounts, model_format: str = "onnx") -> NCHW:
        return rows_of(self._shapes(p)[2], model_format)

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        return self._rows_in_ranges((*ins, out))

    def single_layer_io(self, p: Mapping[str, Any], ins: tuple[NCHW, ...], out: NCHW,
                        model_format: str = "onnx") -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        a, b, y = self._shapes(p)
        return (a[1:], b[1:]), y[1:]  # (b, m, k) x (b, k, n_cols)

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        a, b, y = self._shapes(p)
        if single:
            return [Op(self.name, "lum", tuple(ins), out_name, y[1:], {}, act)]
        if model_format == "tflite":  # BATCH_MATMUL on rank 3: rank 4 would be NHWC there
            a, b, y = a[1:], b[1:], y[1:]
        return [reshape_op("lum/reshape_a", ins[0], "lum_a", a), reshape_op("lum/reshape_b", ins[1], "lum_b", b),
                Op(self.name, "lum", ("lum_a", "lum_b"), "lum_y", y, {}, act),
                reshape_op("lum/reshape_out", "lum_y", out_name, out_shape)]

    def onnx_nodes(self, op: Op, output: str, weights: Mapping[str, np.ndarray], init: Any) -> list[Any]:
        from onnx import helper  # noqa: PLC0415

        return [helper.make_node("MatMul", list(op.inputs), [output], name=op.name)]

    def tflite_ops(self, op: Op, ins: Sequence[Any], weights: Mapping[str, np.ndarray]) -> Any:
        """BATCH_MATMUL of the two operands."""
        import tensorflow as tf  # noqa: PLC0415

        return tf.matmul(ins[0], ins[1])

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A Gemm or MatMul that is not fc's: both operands computed (attention's products), a
        batch of products, or a computed weight (flag ``dynamic_weight``)."""
        m, k, cols, batch, _ = gemm_dims(n, g)
        d = g.base(n, self.name)
        if n.op_type == "Gemm" and not g.is_static(n.input[1]):
            d.flag("dynamic_weight")
        if g.is_static(n.input[0]) or g.is_static(n.input[1]):
            d.flag("const_operand")
        d.params = dict(b=batch, m=m, k=k, n_cols=cols)
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        if prior:
            heads, t, dim = int(r.choice(space.PRIOR_HEADS)), int(r.choice(space.PRIOR_TOKENS)), int(r.choice(_PRIOR_HEAD_DIM))
            if r.random() < 0.5:
                return dict(b=heads, m=t, k=dim, n_cols=t)  # q @ k^T
            return dict(b=heads, m=t, k=t, n_cols=dim)  # softmax(q k^T) @ v
        return dict(b=space.loguniform_int(r, 1, 16), m=space.loguniform_int(r, 1, 1024),
                    k=space.loguniform_int(r, 1, 1024), n_cols=space.loguniform_int(r, 1, 1024))
