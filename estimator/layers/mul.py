"""mul: element-wise mul/div, optionally broadcast (squeeze-excite scales), with a fused activation."""
from __future__ import annotations

from typing import Any

from .registry import register
from .shared import BinaryEltwise


@register
class Mul(BinaryEltwise):
    name = "mul"
    order = 90
    onnx_ops = ("Mul", "Div", "BatchNormalization")
    summary = "element-wise mul/div, optionally broadcast (+ fused activation)"
    lum_default_act = None
    p_broadcast = 0.6

    def from_onnx(self, n: Any, g: Any) -> Any:
        """Mul/Div, and a BatchNormalization no convolution absorbed (e.g. DenseNet's
        pre-activation BN after a concat): a broadcast mul (flag ``batchnorm``) whose scale
        and shift (2 x channels) are its parameters, as torch counts them."""
        if n.op_type != "BatchNormalization":
            return super().from_onnx(n, g)
        d = g.base(n, self.name)
        d.outputs = d.outputs[:1]
        _, c, _, _ = g.spatial_params(d, n.input[0])  # per-channel: a batch stays a batch
        d.params.update(broadcast=1, elems_b=c, const_params=2 * c)
        d.flag("batchnorm")
        return d
