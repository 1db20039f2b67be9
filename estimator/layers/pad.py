"""pad: explicit padding (not benchmarked: a roofline fallback, flagged)."""
from __future__ import annotations

from typing import Any, Mapping

from .importing import attrs
from .params import LayerSpecError, dims_text, io_bytes, positive
from .registry import LayerCounts, LayerTypeSpec, register

#: ONNX Pad's modes
PAD_MODES = ("constant", "reflect", "edge", "wrap")


@register
class Pad(LayerTypeSpec):
    name = "pad"
    order = 130
    features = ("h", "w", "c", "h_out", "w_out", "c_out")
    ops_unit = "elements"
    summary = "explicit padding"
    required = ("h", "w", "c")
    onnx_ops = ("Pad",)

    through_channels = "c"

    def channel_flow(self, p: Mapping[str, Any]) -> str:
        """Spatial padding keeps channels; padding along channels is not followed."""
        return "through" if int(p.get("c_out", p["c"])) == int(p["c"]) else ""

    def with_channels(self, p: Mapping[str, Any], port: str | int, n: int) -> dict[str, Any]:
        return {**super().with_channels(p, port, n), "c_out": int(n)} if "c_out" in p else \
            super().with_channels(p, port, n)

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        return (f"{dims_text(g('h'), g('w'))}->{dims_text(g('h_out', g('h')), g('w_out', g('w')))} "
                f"c{g('c')}->{g('c_out', g('c'))}")

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        h_out, w_out = positive(p, "h_out", h), positive(p, "w_out", w)
        c_out = positive(p, "c_out", c)
        if p.get("mode", "constant") not in PAD_MODES:
            raise LayerSpecError(f"pad mode {p['mode']!r} unknown; use one of {', '.join(PAD_MODES)}")
        out = n * c_out * h_out * w_out
        return LayerCounts(dict(h=h, w=w, c=c, h_out=h_out, w_out=w_out, c_out=c_out), 0, 0, float(out),
                           io_bytes(n * h * w * c, out, 0, eb), (n, c_out, h_out, w_out))

    def from_onnx(self, n: Any, g: Any) -> Any:
        d = g.base(n, self.name)
        d.inputs = [g.canon(n.input[0])]
        xs, ys = g.shape(n.input[0]), g.shape(n.output[0])
        g.spatial_params(d, n.input[0])
        if ys is None:
            d.flag("unknown_shape")
            return d
        n2, c2, h2, w2 = g.nchw(n.output[0])
        if xs is not None and len(xs) != len(ys):
            d.flag("unknown_shape")
        d.params.update(h_out=h2, w_out=w2, c_out=c2, mode=str(attrs(n).get("mode", "constant")))
        if n2 != d.params["n"]:
            d.flag("pads_batch")
        return d
