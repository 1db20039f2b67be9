"""layernorm: layer normalisation over the last axis (transformers' LayerNorm), with its scale
and bias.

A LayerNorm normalises ``rows`` vectors of length ``c`` (a token tensor ``(n, rows, c)``).
Smart padding measures it on the same data laid out as ``(1, rows, 1, c)``
(:func:`~estimator.layers.registry.rows_of`), normalised over its last axis: the padding convs
are 1x1 convs 1 -> rows at ``1 x c`` and the LUM is the same ONNX operator on the same
contiguous data as in the network, with no glue charged to it. In TFLite the same rows are
NHWC ``(1, 1, rows, c)`` (``rows`` pixels of ``c`` channels) and the LUM is what the TFLite
converter makes of a LayerNorm (TFLite has no layer-norm builtin): MEAN, SQUARED_DIFFERENCE,
MEAN, ADD, RSQRT, MUL, MUL, ADD over the channels.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .importing import Unsupported, attrs, is_const, reduce_axes
from .ir import Op, tf_axis
from .params import LayerSpecError, io_bytes, positive
from .registry import NCHW, ChannelAxis, LayerCounts, LayerTypeSpec, register, rows_of

#: Network prior: embedding widths.
_PRIOR_C = (32, 48, 64, 80, 96, 120, 128, 144, 160, 192, 224, 240, 256, 320, 384, 448, 512, 640, 768)
#: The broad space's cap on the normalised length.
_MAX_C = 4096


@register
class LayerNorm(LayerTypeSpec):
    name = "layernorm"
    order = 175
    features = ("rows", "c", "params")
    ops_unit = "elements"
    summary = "layer normalisation of rows vectors of length c (LayerNormalization over the trailing axes)"
    required = ("rows", "c")
    benchable = True
    model_formats = ("onnx", "tflite")
    sampled = True
    onnx_ops = ("LayerNormalization",)
    onnx_patterns = ("ReduceMean",)  # where an opset < 17 export's decomposed LayerNorm starts
    examples = (dict(rows=197, c=192), dict(rows=49, c=96), dict(rows=1, c=8))

    def brief(self, p: Mapping[str, Any]) -> str:
        return f"{p.get('rows')} rows x {p.get('c')}"

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A layer norm over the channel axis alone (a transformer's, over its features) keeps
        the channels: a pruner cuts its scale and bias with them."""
        rank = len(in_shape)
        if node.op_type != "LayerNormalization" or not rank or at.axis != rank - 1:
            return None
        if int(attrs(node).get("axis", -1)) % rank != at.axis or int(p.get("c", 0)) != int(in_shape[at.axis]):
            return None
        return "c", at

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, rows, c = positive(p, "n", 1), positive(p, "rows"), positive(p, "c")
        params = 2 * c  # scale and bias
        out = n * rows * c
        return LayerCounts(dict(rows=rows, c=c, params=params), 0, params, float(out), io_bytes(out, out, params, eb),
                           (n, rows, c))

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        return (rows_of((1, int(p["rows"]), int(p["c"])), model_format),)

    def lum_output(self, p: Mapping[str, Any], counts: LayerCounts, model_format: str = "onnx") -> NCHW:
        return rows_of((1, int(p["rows"]), int(p["c"])), model_format)

    def single_layer_io(self, p: Mapping[str, Any], ins: tuple[NCHW, ...], out: NCHW,
                        model_format: str = "onnx") -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        shape = (1, int(p["rows"]), int(p["c"]))  # the token tensor
        return (shape,), shape

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        shape = (1, int(p["rows"]), int(p["c"])) if single else out_shape
        axis = len(shape) - 1 if single or model_format != "tflite" else 1  # where rows_of put c
        return [Op(self.name, "lum", tuple(ins), out_name, shape, {"c": int(p["c"]), "epsilon": 1e-5, "axis": axis})]

    def op_weights(self, op: Op, rng: np.random.Generator) -> dict[str, np.ndarray]:
        c = int(op.attrs["c"])
        return {"scale": (1.0 + 0.1 * rng.standard_normal(c)).astype(np.float32),
                "bias": (0.1 * rng.standard_normal(c)).astype(np.float32)}

    def onnx_nodes(self, op: Op, output: str, weights: Mapping[str, np.ndarray], init: Any) -> list[Any]:
        from onnx import helper  # noqa: PLC0415

        ins = [op.inputs[0], init(f"{op.name}/scale", weights["scale"]), init(f"{op.name}/bias", weights["bias"])]
        if int(op.attrs.get("axis", -1)) % len(op.shape) != len(op.shape) - 1:
            raise LayerSpecError(f"{op.name}: ONNX LayerNormalization normalises trailing axes, not axis "
                                 f"{op.attrs['axis']} of {op.shape}")
        return [helper.make_node("LayerNormalization", ins, [output], name=op.name, axis=-1,
                                 epsilon=float(op.attrs["epsilon"]))]

    def tflite_ops(self, op: Op, ins: Sequence[Any], weights: Mapping[str, np.ndarray]) -> Any:
        """Mean and variance over the channels, as the TFLite converter lowers a LayerNorm."""
        import tensorflow as tf  # noqa: PLC0415

        x = ins[0]
        axis = tf_axis(int(op.attrs.get("axis", -1)), len(op.shape))
        if axis != len(op.shape) - 1:
            raise LayerSpecError(f"{op.name}: the TFLite layer norm normalises the last (channel) axis")
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
        y = (x - mean) * tf.math.rsqrt(var + float(op.attrs["epsilon"]))
        return y * tf.constant(weights["scale"]) + tf.constant(weights["bias"])

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A LayerNormalization: rows = the elements before ``axis`` per batch item, c = from
        ``axis`` on (the last axis for transformers' LayerNorm)."""
        if n.op_type == "ReduceMean":
            return self._decomposed(n, g)
        xs = g.shape(n.input[0])
        if xs is None:
            raise Unsupported("unknown_shape")
        axis = int(attrs(n).get("axis", -1)) % len(xs)
        if axis == 0:
            raise Unsupported("normalises_batch")
        d = g.base(n, self.name)
        d.inputs = [g.canon(n.input[0])]
        d.outputs = d.outputs[:1]  # (the optional mean and inverse-std outputs are not used in inference)
        # every vector normalised, whatever the leading dims (a batch, MobileViT's patches)
        d.params = dict(n=1, rows=max(int(math.prod(xs[:axis])), 1), c=int(math.prod(xs[axis:])))
        return d

    def _decomposed(self, n: Any, g: Any) -> Any:
        """LayerNorm as torch exports it below opset 17, from its first ReduceMean over the last
        axis: ``d = x - mean(x)``, ``d / sqrt(mean(d^2) + eps)``, then the scale ``Mul`` and the
        bias ``Add`` where present. ONNX Runtime fuses the chain into one LayerNormalization
        kernel (docs/layer-types.md, "Fusion on ONNX Runtime"), so it is one layer here too.
        None where the chain differs (the ReduceMean is then another type's, e.g. a pool)."""
        x = g.canon(n.input[0])
        xs = g.shape(x)
        if xs is None or len(xs) < 2 or g.is_static(x) or not self._last_axis(n, g, len(xs)):
            return None
        m = g.canon(n.output[0])
        sub = [c for c in g.cons(m) if c.op_type == "Sub"]
        if len(g.cons(m)) != 1 or len(sub) != 1 or [g.canon(i) for i in sub[0].input] != [x, m]:
            return None
        d = g.canon(sub[0].output[0])
        by_op = {c.op_type: c for c in g.cons(d)}
        if len(g.cons(d)) != 2 or set(by_op) != {"Pow", "Div"} or d in g.graph_outputs:
            return None
        pw, div = by_op["Pow"], by_op["Div"]
        if g.canon(div.input[0]) != d or not is_const(g, pw.input[1], 2.0):
            return None
        chain = [pw]
        for op in ("ReduceMean", "Add", "Sqrt"):
            t = g.canon(chain[-1].output[0])
            cons = g.cons(t)
            if len(cons) != 1 or cons[0].op_type != op or t in g.graph_outputs or cons[0].name in g.claimed:
                return None
            chain.append(cons[0])
        if not self._last_axis(chain[1], g, len(xs)) or g.canon(div.input[1]) != g.canon(chain[-1].output[0]):
            return None
        nodes = [n, sub[0], *chain, div]
        for op in ("Mul", "Add"):  # the scale and the bias
            t = g.canon(nodes[-1].output[0])
            cons = g.cons(t)
            if len(cons) != 1 or cons[0].op_type != op or t in g.graph_outputs or cons[0].name in g.claimed:
                break
            other = [i for i in cons[0].input if i and g.canon(i) != t]
            if len(other) != 1 or not g.is_static(other[0]):
                break
            nodes.append(cons[0])
        if any(k.name in g.claimed for k in nodes):
            return None
        dr = g.base(n, self.name, [k.name for k in nodes])
        dr.inputs = [x]
        dr.outputs = g.outs(nodes[-1])
        dr.op_type = "LayerNormalization"
        dr.params = dict(n=1, rows=max(int(math.prod(xs[:-1])), 1), c=int(xs[-1]))
        return dr

    @staticmethod
    def _last_axis(n: Any, g: Any, rank: int) -> bool:
        """Whether ReduceMean ``n`` averages over the last axis alone, keeping it."""
        axes = reduce_axes(n, g)
        return axes is not None and [t % rank for t in axes] == [rank - 1] and int(attrs(n).get("keepdims", 1)) == 1

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        if prior:
            return dict(rows=int(r.choice(space.PRIOR_TOKENS)), c=int(r.choice(_PRIOR_C)))
        c = space.loguniform_int(r, 8, 2048)
        if r.random() < 0.6 and c >= 16:
            c = int(round(c / 16)) * 16
        return dict(rows=space.loguniform_int(r, 1, space.MAX_ROWS), c=c)

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        return int(p["rows"]) <= space.MAX_ROWS and int(p["c"]) <= _MAX_C
