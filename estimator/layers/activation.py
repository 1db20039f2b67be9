"""activation: a standalone activation (one the runtime did not fuse into its producer)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .ir import Op
from .params import ACTIVATION_KINDS, LayerSpecError, io_bytes, nonneg, positive
from .registry import NCHW, LayerCounts, LayerTypeSpec, register

#: Kinds the sampler draws (``other`` has no operator, ``clip`` is ReLU6's general form).
_DRAWN_KINDS = tuple(k for k in ACTIVATION_KINDS if k not in ("other", "clip"))


def benchable_kind(p: Mapping[str, Any]) -> str:
    """Raw param ``kind`` (a name or its code) as a kind a benchmark model can be built with."""
    kind = p.get("kind", "relu")
    if not isinstance(kind, str):
        names = {v: k for k, v in ACTIVATION_KINDS.items()}
        kind = names.get(int(kind), "other")
    if kind not in ACTIVATION_KINDS or kind == "other":
        raise LayerSpecError(f"activation kind {kind!r} cannot be benchmarked; known: "
                             f"{', '.join(k for k in ACTIVATION_KINDS if k != 'other')}")
    return kind


@register
class Activation(LayerTypeSpec):
    name = "activation"
    order = 110
    features = ("h", "w", "c", "kind")
    ops_unit = "elements"
    summary = "standalone activation (kind coded by ACTIVATION_KINDS)"
    required = ("h", "w", "c")
    benchable = True
    sampled = True

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        kind = p.get("kind", "relu")
        code = ACTIVATION_KINDS.get(kind, ACTIVATION_KINDS["other"]) if isinstance(kind, str) else nonneg(p, "kind")
        out = n * h * w * c
        cp = nonneg(p, "const_params", 0)  # learned parameters, e.g. PReLU slopes
        return LayerCounts(dict(h=h, w=w, c=c, kind=code), 0, cp, float(out), io_bytes(out, out, cp, eb), (n, c, h, w))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False) -> list[Op]:
        kind = benchable_kind(p)
        aa: dict[str, Any] = {"kind": kind}
        if kind == "leakyrelu":
            aa["alpha"] = float(p.get("alpha", 0.1))
        elif kind == "elu":
            aa["alpha"] = float(p.get("alpha", 1.0))
        elif kind == "clip":
            aa["min"], aa["max"] = float(p.get("min", -1.0)), float(p.get("max", 1.0))
        return [Op("act", "lum", tuple(ins), out_name, out_shape, aa)]

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        return dict(h=h, w=w, c=space.channels(r, prior=prior, h=h),
                    kind=str(_DRAWN_KINDS[r.integers(len(_DRAWN_KINDS))]))
