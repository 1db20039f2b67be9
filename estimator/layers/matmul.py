"""matmul: MatMul of two activations, (b, m, k) x (b, k, n_cols), e.g. attention's products."""
from __future__ import annotations

from typing import Any

from .params import act_code, io_bytes, positive
from .registry import LayerCounts, LayerTypeSpec, register
from .shared import gemm_dims


@register
class MatMul(LayerTypeSpec):
    name = "matmul"
    order = 40
    features = ("b", "m", "k", "n_cols", "flops", "act")
    ops_unit = "flops"
    summary = "MatMul of two activations: (b, m, k) x (b, k, n_cols)"
    required = ("m", "k", "n_cols")
    takes_act = True
    onnx_ops = ("Gemm", "MatMul")

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        b, m, k, nn = positive(p, "b", 1), positive(p, "m"), positive(p, "k"), positive(p, "n_cols")
        macs = b * m * k * nn
        feats = dict(b=b, m=m, k=k, n_cols=nn, flops=2 * macs, act=act_code(p))
        return LayerCounts(feats, macs, 0, 2.0 * macs, io_bytes(b * (m * k + k * nn), b * m * nn, 0, eb), (b, m, nn))

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
