"""activation: a standalone activation (one the runtime did not fuse into its producer)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import math

import numpy as np

from . import space
from .importing import Draft, attrs, is_const
from .ir import Op
from .params import ACTIVATION_KINDS, LayerSpecError, dims_text, io_bytes, nonneg, positive
from .registry import NCHW, LayerCounts, LayerTypeSpec, register

#: ONNX activation op -> activation kind (Clip is decided by its bounds).
ONNX_KINDS = {
    "Relu": "relu", "Sigmoid": "sigmoid", "HardSigmoid": "hardsigmoid", "HardSwish": "hardswish",
    "Tanh": "tanh", "LeakyRelu": "leakyrelu", "PRelu": "prelu", "Elu": "elu", "Gelu": "gelu",
    "Mish": "mish", "Softplus": "softplus", "Swish": "silu", "Selu": "other", "Celu": "other",
    "Softsign": "other", "ThresholdedRelu": "other",
}

_SQRT2 = math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
#: An operand that is the pattern's input itself.
_X = object()


def _follow(g: Any, start: Any, x: str, steps: Sequence[tuple[str, Any]]) -> list[Any] | None:
    """``[start, *nodes]`` where each node is the only consumer of the previous one's output
    (not a graph output, not in a layer yet), of the step's operator, its other operand the
    step's constant or ``x`` (``_X``); None where the chain breaks."""
    chain = [start]
    for op, operand in steps:
        prev = g.canon(chain[-1].output[0])
        cons = g.cons(prev)
        if len(cons) != 1 or prev in g.graph_outputs:
            return None
        m = cons[0]
        if m.op_type != op or m.name in g.claimed or m.domain not in ("", "ai.onnx"):
            return None
        others = [i for i in m.input if i and g.canon(i) != prev]
        if operand is None:
            if others:
                return None
        elif operand is _X:
            if [g.canon(i) for i in others] != [x]:
                return None
        elif len(others) != 1 or not is_const(g, others[0], operand):
            return None
        chain.append(m)
    return chain


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
    through_channels = "c"
    summary = "standalone activation (kind coded by ACTIVATION_KINDS)"
    required = ("h", "w", "c")
    benchable = True
    sampled = True
    onnx_ops = (*ONNX_KINDS, "Clip")
    onnx_patterns = ("Div", "Mul")  # where GELU's Erf and tanh forms start

    def brief(self, p: Mapping[str, Any]) -> str:
        return f"{p.get('kind')} {dims_text(p.get('h'), p.get('w'))} c{p.get('c')}"

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        kind = p.get("kind", "relu")
        if isinstance(kind, str) and kind not in ACTIVATION_KINDS:
            raise LayerSpecError(f"activation kind {kind!r} unknown; known: {', '.join(ACTIVATION_KINDS)}")
        code = ACTIVATION_KINDS[kind] if isinstance(kind, str) else nonneg(p, "kind")
        out = n * h * w * c
        cp = nonneg(p, "const_params", 0)  # learned parameters, e.g. PReLU slopes
        for key in ("alpha", "min", "max"):  # the op's constants (leakyrelu, elu, clip): no count depends on them
            if p.get(key) is not None and not _number(p[key]):
                raise LayerSpecError(f"parameter {key!r} must be a number, got {p[key]!r}")
        return LayerCounts(dict(h=h, w=w, c=c, kind=code), 0, cp, float(out), io_bytes(out, out, cp, eb), (n, c, h, w))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        kind = benchable_kind(p)
        aa: dict[str, Any] = {"kind": kind}
        if kind == "leakyrelu":
            aa["alpha"] = float(p.get("alpha", 0.1))
        elif kind == "elu":
            aa["alpha"] = float(p.get("alpha", 1.0))
        elif kind == "clip":
            aa["min"], aa["max"] = float(p.get("min", -1.0)), float(p.get("max", 1.0))
        return [Op("act", "lum", tuple(ins), out_name, out_shape, aa)]

    def from_onnx(self, n: Any, g: Any) -> Any:
        if n.op_type in ("Div", "Mul"):
            return self._gelu(n, g)
        return self._single(n, g)

    @staticmethod
    def _gelu(n: Any, g: Any) -> Any:
        """GELU as torch exports it: exact, ``x * (1 + erf(x / sqrt 2)) * 0.5`` (from a Div),
        or the tanh form ``x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) * 0.5`` (from
        ``Mul(x, x)``); the two final products in either order, or the product with x alone where
        onnxsim folded the 0.5 into the next layer's weights. None if ``n`` starts neither."""
        ins = n.input
        if len(ins) != 2 or not ins[0] or not ins[1]:
            ins = [i for i in ins if i]
            if len(ins) != 2:
                return None
        x = g.canon(ins[0])
        if g.is_static(x):
            return None
        if n.op_type == "Div":
            if not is_const(g, ins[1], _SQRT2):
                return None
            steps: tuple[tuple[str, Any], ...] = (("Erf", None), ("Add", 1.0))
        elif g.canon(ins[1]) == x:
            steps = (("Mul", _X), ("Mul", 0.044715), ("Add", _X), ("Mul", _SQRT_2_PI), ("Tanh", None), ("Add", 1.0))
        else:
            return None
        nodes = _follow(g, n, x, steps)
        if nodes is None:
            return None
        tail = (_follow(g, nodes[-1], x, (("Mul", _X), ("Mul", 0.5)))
                or _follow(g, nodes[-1], x, (("Mul", 0.5), ("Mul", _X)))
                or _follow(g, nodes[-1], x, (("Mul", _X),)))  # the 0.5 folded into the consumer (onnxsim)
        if tail is None:
            return None
        chain = [*nodes, *tail[1:]]
        d = Draft(type="activation", params={}, op_type="Gelu", nodes=[m.name for m in chain], inputs=[x],
                  outputs=g.outs(chain[-1]), kind="gelu")
        g.rows_params(d, x)
        d.params["kind"] = "gelu"
        return d

    def _single(self, n: Any, g: Any) -> Any:
        """An activation node; SiLU = x * Sigmoid(x) and HardSwish = x * HardSigmoid(x)
        (alpha 1/6, beta 1/2) are one activation each. Fusion rules may later fold it into
        its producer (``estimator.fusion``)."""
        kind = self._kind(n, g)
        nodes = [n.name]
        outputs = g.outs(n)
        x = g.canon(n.input[0])
        if n.op_type in ("Sigmoid", "HardSigmoid"):
            a = attrs(n)
            hs_ok = n.op_type == "Sigmoid" or (abs(a.get("alpha", 0.2) - 1 / 6) < 1e-3
                                               and abs(a.get("beta", 0.5) - 0.5) < 1e-6)
            s = g.canon(n.output[0])
            cons = g.cons(s)
            if hs_ok and len(cons) == 1 and cons[0].op_type == "Mul" and s not in g.graph_outputs:
                mul = cons[0]
                ins = [g.canon(i) for i in mul.input if i]
                if len(ins) == 2 and sorted(ins) == sorted([x, s]) and x != s and mul.name not in g.claimed:
                    nodes.append(mul.name)
                    outputs = g.outs(mul)
                    kind = "silu" if n.op_type == "Sigmoid" else "hardswish"
        d = Draft(type=self.name, params={}, op_type=n.op_type, nodes=nodes, inputs=[x], outputs=outputs, kind=kind)
        g.rows_params(d, n.input[0])
        d.params["kind"] = kind
        if n.op_type == "PRelu" and len(n.input) > 1:
            slopes = g.elems(n.input[1]) or 0
            if g.is_static(n.input[1]):
                d.params["const_params"] = slopes
            d.inputs = [x]
        return d

    @staticmethod
    def _kind(n: Any, g: Any) -> str:
        if n.op_type != "Clip":
            return ONNX_KINDS[n.op_type]
        a = attrs(n)
        lo, hi = a.get("min", -math.inf), a.get("max", math.inf)
        for idx in (1, 2):
            if len(n.input) > idx and n.input[idx]:
                v = g.value(n.input[idx])
                if v is None or v.size != 1:
                    return "clip"
                if idx == 1:
                    lo = float(v.item())
                else:
                    hi = float(v.item())
        if lo == 0 and hi == 6:
            return "relu6"
        if lo == 0 and hi == math.inf:
            return "relu"
        return "clip"

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        return dict(h=h, w=w, c=space.channels(r, prior=prior, h=h),
                    kind=str(_DRAWN_KINDS[r.integers(len(_DRAWN_KINDS))]))

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """A third of the prior's activations act on token rows, ``(1, tokens, 1, width)``, as
        a transformer's MLP does, mostly with GELU or SiLU."""
        if unit(p, "token-rows") < 1 / 3:
            p.update(h=1, w=space.PRIOR_WIDTHS[int(len(space.PRIOR_WIDTHS) * unit(p, "width"))],
                     c=space.PRIOR_TOKENS[int(len(space.PRIOR_TOKENS) * unit(p, "tokens"))])
            if unit(p, "token-kind") < 0.7:
                p["kind"] = "gelu" if unit(p, "gelu-or-silu") < 0.6 else "silu"
        return p


def _number(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False
