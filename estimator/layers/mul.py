"""mul: element-wise mul/div, optionally broadcast (squeeze-excite scales), with a fused activation."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from . import space
from .ir import Op
from .params import LayerSpecError, flag01
from .registry import NCHW, register
from .shared import LITERT_CLAMP_ACTS, VELA_FUSED_ACTS, BinaryEltwise


@register
class Mul(BinaryEltwise):
    """Raw param ``batchnorm=1``: a BatchNormalization no convolution absorbed, a per-channel
    scale and shift (both constants). Its LUM is IR op ``batchnorm``: ONNX Runtime runs one
    BatchNormalization kernel, the TFLite converter lowers it to a MUL and an ADD, which an
    Ethos-U runs as two passes over the tensor, each reading its constant."""

    name = "mul"
    order = 90
    onnx_ops = ("Mul", "Div", "BatchNormalization")
    summary = "element-wise mul/div, optionally broadcast (+ fused activation); standalone batch norm"
    features = (*BinaryEltwise.features, "batchnorm")
    fused_activations = {"onnxruntime": (), "litert": LITERT_CLAMP_ACTS, "vela": VELA_FUSED_ACTS}
    lum_default_act = None
    p_broadcast = 0.6

    def extra_features(self, p: Mapping[str, Any]) -> dict[str, float]:
        return {"batchnorm": float(flag01(p, "batchnorm"))}

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """A quarter of the prior's multiplies have a constant operand, as networks have them:
        standalone batch normalisations (DenseNet's pre-activation BN), per-channel layer scales
        (EfficientFormer, ConvNeXt) and scalar attention scales; a profile without such rows
        flags those layers ``unbenchmarked:const_b``."""
        u, c = unit(p, "const"), int(p["c"])
        if u < 0.10:
            p.update(broadcast=1, elems_b=c, const_params=2 * c, const_b=1, batchnorm=1)
        elif u < 0.20:
            p.update(broadcast=1, elems_b=c, const_b=1)
        elif u < 0.25:  # a scalar without an activation is no operation on an Ethos-U
            p.update(broadcast=1, elems_b=1, const_b=1, act="relu")
        return p

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        if flag01(p, "batchnorm"):
            if not flag01(p, "const_b"):
                raise LayerSpecError("batchnorm=1 needs const_b=1 (its scale and shift are constants)")
            return [Op("batchnorm", "lum", tuple(ins[:1]), out_name, out_shape, {"c": int(p["c"])}, act)]
        return super().lum_ops(p, ins, out_shape, out_name, act, single=single, model_format=model_format)

    def from_onnx(self, n: Any, g: Any) -> Any:
        """Mul/Div, and a BatchNormalization no convolution absorbed (e.g. DenseNet's
        pre-activation BN after a concat): a broadcast mul (flag and raw param ``batchnorm``,
        ``const_b=1``) whose scale and shift (2 x channels) are its parameters, as torch
        counts them."""
        if n.op_type != "BatchNormalization":
            return super().from_onnx(n, g)
        d = g.base(n, self.name)
        d.outputs = d.outputs[:1]
        _, c, _, _ = g.spatial_params(d, n.input[0])  # per-channel: a batch stays a batch
        d.params.update(broadcast=1, elems_b=c, const_params=2 * c, const_b=1, batchnorm=1)
        d.flag("batchnorm")
        return d
