"""resize: spatial resize / upsample (nearest, linear, cubic)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .importing import Unsupported, attrs
from .ir import Op
from .params import LayerSpecError, RESIZE_MODES, dims_text, io_bytes, nonneg, positive
from .registry import NCHW, LayerCounts, LayerTypeSpec, register


def resize_mode(p: Mapping[str, Any]) -> str:
    """Raw param ``mode`` (a name or its code) as a mode name."""
    mode = p.get("mode", "nearest")
    if not isinstance(mode, str):
        names = {v: k for k, v in RESIZE_MODES.items()}
        mode = names.get(int(mode), "")
    if mode not in RESIZE_MODES:
        raise LayerSpecError(f"resize mode {mode!r} unknown; known: {', '.join(RESIZE_MODES)}")
    return mode


@register
class Resize(LayerTypeSpec):
    name = "resize"
    order = 120
    features = ("h", "w", "c", "h_out", "w_out", "mode")
    ops_unit = "elements"
    through_channels = "c"
    summary = "spatial resize / upsample (mode coded by RESIZE_MODES)"
    required = ("h", "w", "c", "h_out", "w_out")
    benchable = True
    sampled = True
    onnx_ops = ("Resize", "Upsample")

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        return f"{dims_text(g('h'), g('w'))}->{dims_text(g('h_out'), g('w_out'))} c{g('c')} {g('mode')}"

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        h_out, w_out = positive(p, "h_out"), positive(p, "w_out")
        mode = p.get("mode", "nearest")
        code = RESIZE_MODES.get(mode, 1) if isinstance(mode, str) else nonneg(p, "mode")
        out = n * c * h_out * w_out
        return LayerCounts(dict(h=h, w=w, c=c, h_out=h_out, w_out=w_out, mode=code), 0, 0, float(out),
                           io_bytes(n * h * w * c, out, 0, eb), (n, c, h_out, w_out))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        mode = resize_mode(p)
        coord = "asymmetric" if mode == "nearest" else "half_pixel"  # PyTorch/TF defaults
        return [Op("resize", "lum", tuple(ins), out_name, out_shape,
                   dict(h_out=int(p["h_out"]), w_out=int(p["w_out"]), mode=mode, coord=coord))]

    def from_onnx(self, n: Any, g: Any) -> Any:
        d = g.base(n, self.name)
        d.inputs = [g.canon(n.input[0])]
        xs, ys = g.shape(n.input[0]), g.shape(n.output[0])
        if xs is None or ys is None or len(xs) != 4 or len(ys) != 4:
            raise Unsupported("unknown_shape" if xs is None or ys is None else "resize_rank")
        mode = str(attrs(n).get("mode", "nearest"))
        mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
        if (xs[0], xs[1]) != (ys[0], ys[1]):
            d.flag("resizes_batch_or_channels")
        g.spatial_params(d, n.input[0])
        d.params.update(h_out=ys[2], w_out=ys[3], mode=mode)
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        u = r.random()
        if prior:  # FPN/YOLO upsampling: x2 nearest, sometimes bilinear
            return dict(h=h, w=w, c=space.channels(r, prior=True, h=h), h_out=2 * h, w_out=2 * w,
                        mode="nearest" if u < 0.8 else "linear")
        if u < 0.6:
            h_out, w_out = h * 2, w * 2
        elif u < 0.75:
            h_out, w_out = h * 4, w * 4
        elif u < 0.85:
            h_out, w_out = max(1, h // 2), max(1, w // 2)
        else:
            h_out = space.loguniform_int(r, 1, space.SPACE_MAX["hw"])
            w_out = space.loguniform_int(r, 1, space.SPACE_MAX["hw"])
        mode = "nearest" if r.random() < 0.6 else "linear"
        return dict(h=h, w=w, c=space.channels(r), h_out=h_out, w_out=w_out, mode=mode)
