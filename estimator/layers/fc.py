"""fc: fully connected / Gemm / MatMul with constant weights, with a fused activation."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op, tf_axis
from .params import LayerSpecError, act_code, cold, io_bytes, nonneg, opt_int, positive
from .registry import NCHW, LayerCounts, LayerTypeSpec, register, rows_of
from .shared import LITERT_CLAMP_ACTS, VELA_FUSED_ACTS, gemm_dims


@register
class Fc(LayerTypeSpec):
    name = "fc"
    order = 30
    features = ("m", "c_in", "c_out", "flops", "params", "act", "cold")
    ops_unit = "flops"
    summary = "fully connected / Gemm / MatMul with constant weights (+ fused activation; cold=1: weights read from DRAM)"
    required = ("c_in", "c_out")
    channel_params = ("c_in", "c_out")
    benchable = True
    takes_act = True
    #: ONNX Runtime fuses a one-row Gemm with these (an fc over token rows is measured with its
    #: activation in the same padded model)
    fused_activations = {"onnxruntime": ("elu", "hardsigmoid", "leakyrelu", "relu", "sigmoid", "softplus", "tanh"),
                         "litert": LITERT_CLAMP_ACTS, "vela": VELA_FUSED_ACTS}
    lum_default_act = None
    prior_acts = ((None, .6), ("relu", .3), ("sigmoid", .05), ("hardsigmoid", .05))
    sampled = True
    onnx_ops = ("Gemm", "MatMul")
    examples = (dict(m=197, c_in=192, c_out=576), dict(m=49, c_in=64, c_out=32, bias=0))

    def channel_flow(self, p: Mapping[str, Any]) -> str:
        return "mix"

    def brief(self, p: Mapping[str, Any]) -> str:
        return f"m{p.get('m', 1)} {p.get('c_in')}->{p.get('c_out')}"

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        m = positive(p, "m", 1)  # rows (batch x tokens)
        c_in, c_out = positive(p, "c_in"), positive(p, "c_out")
        bias = nonneg(p, "bias", 1)
        params = c_in * c_out + (c_out if bias else 0)
        macs = m * c_in * c_out
        feats = dict(m=m, c_in=c_in, c_out=c_out, flops=2 * macs, params=params, act=act_code(p), cold=cold(p))
        return LayerCounts(feats, macs, params, 2.0 * macs, io_bytes(m * c_in, m * c_out, params, eb), (m, c_out))

    # Smart padding. One row (m = 1, a classifier) pads spatially 1x1: graph input
    # (1, 1, 1, 1) -> conv 1 -> c_in -> flatten (1, c_in) -> Gemm -> reshape (1, c_out, 1, 1)
    # -> conv c_out -> 1, i.e. the padding pairs of a global-pool output; the flatten/reshape
    # glue is counted in T_c (real networks have the same flatten before their classifier).
    # Rows of tokens (m > 1, a transformer's Linear on (1, m, c_in)) are measured on their own
    # data as (1, m, 1, c_in) (rows_of): conv 1 -> m -> MatMul by the (c_in, c_out) weight +
    # bias (IR op kind "fc") -> (1, m, 1, c_out) -> conv m -> 1; no glue. In TFLite the rows
    # are NHWC (1, 1, m, c_in) (rows_of) and the LUM one FULLY_CONNECTED that keeps the
    # leading dims, as converted transformers have it.

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        m = opt_int(p, "m", 1)
        if m > 1:
            return (rows_of((1, m, int(p["c_in"])), model_format),)
        return ((1, int(p["c_in"]), 1, 1),)

    def lum_output(self, p: Mapping[str, Any], counts: LayerCounts, model_format: str = "onnx") -> NCHW:
        m = opt_int(p, "m", 1)
        if m > 1:
            return rows_of((1, m, int(p["c_out"])), model_format)
        return 1, int(p["c_out"]), 1, 1

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        c_in, c_out = int(p["c_in"]), int(p["c_out"])
        gemm_attrs = dict(c_in=c_in, c_out=c_out, bias=bool(opt_int(p, "bias", 1)))
        m = opt_int(p, "m", 1)
        if m > 1:
            shape = (m, c_out) if single else out_shape
            gemm_attrs["axis"] = 1 if model_format == "tflite" and not single else len(shape) - 1  # c_in's axis
            return [Op(self.name, "lum", tuple(ins), out_name, shape, gemm_attrs, act)]
        if single:
            return [Op("gemm", "lum", tuple(ins), out_name, (1, c_out), gemm_attrs, act)]
        return [
            Op("flatten", "lum/flatten_in", tuple(ins), "lum_flat", (1, c_in), {}, None, "aux"),
            Op("gemm", "lum", ("lum_flat",), "lum_gemm", (1, c_out), gemm_attrs, act),
            Op("reshape", "lum/reshape_out", ("lum_gemm",), out_name, out_shape, {}, None, "aux"),
        ]

    def single_layer_io(self, p: Mapping[str, Any], ins: tuple[NCHW, ...], out: NCHW,
                        model_format: str = "onnx") -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        m = opt_int(p, "m", 1)  # rows of tokens: (m, c_in) -> (m, c_out); one row: a (1, c_in) Gemm
        return ((m, int(p["c_in"])),), (m, int(p["c_out"]))

    def op_weights(self, op: Op, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """The token-rows LUM's weight ``(c_in, c_out)`` (MatMul layout) and bias."""
        a = op.attrs
        d = {"w": rng.standard_normal((a["c_in"], a["c_out"]), dtype=np.float32) / np.float32(math.sqrt(a["c_in"]))}
        if a.get("bias", True):
            d["b"] = (0.1 * rng.standard_normal(a["c_out"], dtype=np.float32)).astype(np.float32)
        return d

    def onnx_nodes(self, op: Op, output: str, weights: Mapping[str, np.ndarray], init: Any) -> list[Any]:
        """MatMul by the weight, then the bias Add: how torch exports Linear on token rows."""
        from onnx import helper  # noqa: PLC0415

        if int(op.attrs.get("axis", -1)) % len(op.shape) != len(op.shape) - 1:
            raise LayerSpecError(f"{op.name}: an ONNX MatMul contracts the last axis, not axis {op.attrs['axis']}")
        w = init(f"{op.name}/W", weights["w"])
        if "b" not in weights:
            return [helper.make_node("MatMul", [op.inputs[0], w], [output], name=op.name)]
        return [helper.make_node("MatMul", [op.inputs[0], w], [f"{op.name}/mm"], name=op.name),
                helper.make_node("Add", [f"{op.name}/mm", init(f"{op.name}/B", weights["b"])], [output],
                                 name=f"{op.name}/bias")]

    def tflite_ops(self, op: Op, ins: Sequence[Any], weights: Mapping[str, np.ndarray]) -> Any:
        """The token rows times the weight, plus the bias, over the last (channel) axis: the
        converter makes it one FULLY_CONNECTED (``keep_num_dims``)."""
        import tensorflow as tf  # noqa: PLC0415

        if tf_axis(int(op.attrs.get("axis", -1)), len(op.shape)) != len(op.shape) - 1:
            raise LayerSpecError(f"{op.name}: the TFLite fc contracts the last (channel) axis")
        y = tf.matmul(ins[0], tf.constant(weights["w"]))
        return y + tf.constant(weights["b"]) if "b" in weights else y

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A Gemm or MatMul with a constant weight and one batch (else matmul's), with a bias
        Add right after it folded in (torch exports Linear on >2-D inputs as MatMul + Add)."""
        a_name, b_name = n.input[0], n.input[1]
        if not g.is_static(b_name) or g.is_static(a_name):
            return None
        m, k, cols, batch, bias = gemm_dims(n, g)
        if batch != 1:
            return None
        d = g.base(n, self.name)
        out = g.canon(n.output[0])
        cons = g.cons(out)
        if (not bias and len(cons) == 1 and cons[0].op_type == "Add" and out not in g.graph_outputs
                and cons[0].name not in g.claimed):
            add = cons[0]
            other = [x for x in add.input if x and g.canon(x) != out]
            if len(other) == 1 and g.is_static(other[0]) and g.elems(other[0]) == cols:
                d.nodes.append(add.name)
                d.outputs = [g.canon(add.output[0])]
                bias = 1
        d.params = dict(m=m, c_in=k, c_out=cols, bias=bias)
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        c_out = 1000 if r.random() < (0.4 if prior else 0.1) else space.channels(r, space.SPACE_MAX["fc_c"], prior)
        return dict(c_in=space.channels(r, space.SPACE_MAX["fc_c"], prior), c_out=c_out)

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """Half of the prior's classifiers become a transformer's Linear over token rows, with a
        transformer's widths: the attention's q/k/v (d -> 3d) or output projection (d -> d), or
        the MLP's up (d -> e d) or down (e d -> d) projection, d one of the prior's widths and e
        2 or 4. (Drawn from the classifiers' channels, every token row had both widths >= 256:
        DeiT-Tiny's d = 192 layers lay outside the rows, and an AMD VM's profile predicted them
        1.3-2.2x slow.)"""
        if unit(p, "token-rows") < 0.5:
            rows, width, role, ratio = (unit(p, s) for s in ("rows", "token-width", "token-role", "mlp-ratio"))
            d = space.PRIOR_WIDTHS[int(len(space.PRIOR_WIDTHS) * width)]
            e = 2 if ratio < 0.5 else 4
            c_in, c_out = ((d, 3 * d), (d, d), (d, e * d), (e * d, d))[int(4 * role)]
            top = space.SPACE_MAX["fc_c"]
            p.update(m=space.PRIOR_TOKENS[int(len(space.PRIOR_TOKENS) * rows)], c_in=min(c_in, top),
                     c_out=min(c_out, top))
        return p

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        return max(int(p["c_in"]), int(p["c_out"])) <= space.SPACE_MAX["fc_c"] and opt_int(p, "m", 1) <= space.MAX_ROWS
