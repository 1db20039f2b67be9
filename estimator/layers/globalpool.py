"""globalpool: global average or max pooling to (n, c, 1, 1)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .importing import reduce_axes
from .ir import Op
from .params import LayerSpecError, dims_text, io_bytes, positive
from .registry import NCHW, LayerCounts, LayerTypeSpec, register


@register
class GlobalPool(LayerTypeSpec):
    name = "globalpool"
    order = 70
    features = ("h", "w", "c")
    ops_unit = "elements"
    through_channels = "c"
    summary = "global average/max pooling"
    required = ("h", "w", "c")
    benchable = True
    sampled = True
    onnx_ops = ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax")

    def brief(self, p: Mapping[str, Any]) -> str:
        return f"{dims_text(p.get('h'), p.get('w'))} c{p.get('c')} {p.get('mode', 'avg')}"

    @staticmethod
    def mode(p: Mapping[str, Any]) -> str:
        mode = p.get("mode", "avg")
        if mode not in ("avg", "max"):
            raise LayerSpecError(f"globalpool mode {mode!r} unknown; use 'avg' or 'max'")
        return mode

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        self.mode(p)  # (the same element count either way)
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        return LayerCounts(dict(h=h, w=w, c=c), 0, 0, float(n * h * w * c), io_bytes(n * h * w * c, n * c, 0, eb),
                           (n, c, 1, 1))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        return [Op("globalpool", "lum", tuple(ins), out_name, out_shape, {"mode": self.mode(p)})]

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A global pool, a ReduceMean/ReduceMax over both spatial axes of an NCHW tensor, or
        over the tokens of a token tensor ``(n, tokens, c)`` (as ``h = 1, w = tokens``)."""
        d = None
        if n.op_type.startswith("Reduce"):
            xs = g.shape(n.input[0])
            if xs is None or len(xs) not in (3, 4):
                return None
            axes = reduce_axes(n, g)
            if axes is None:
                return None
            axes = sorted(int(x) % len(xs) for x in axes)
            if len(xs) == 3 and axes == [1]:  # the mean over the tokens of (n, tokens, c)
                d = g.base(n, self.name)
                d.params.update(n=int(xs[0]), h=1, w=int(xs[1]), c=int(xs[2]))
                if xs[0] > 1:
                    d.flag("batch_gt_1")
            elif len(xs) != 4 or axes != [2, 3]:
                return None
        if d is None:
            d = g.base(n, self.name)
            g.spatial_params(d, n.input[0])
        d.params["mode"] = "max" if n.op_type in ("GlobalMaxPool", "ReduceMax") else "avg"
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        p: dict[str, Any] = dict(h=h, w=w, c=space.channels(r, prior=prior, h=h))
        if r.random() < (0.05 if prior else 0.2):
            p["mode"] = "max"
        return p
