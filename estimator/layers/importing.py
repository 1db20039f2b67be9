"""The contract between the ONNX importer (:mod:`estimator.onnx_import`) and the layer-type
modules: a type lists the ONNX operators it claims (``onnx_ops``) and turns such a node into a
:class:`Draft` (``from_onnx``), reading the graph through an :class:`ImportContext`.

A layer that runs one kernel over all its elements whatever their leading dimensions
(element-wise, activation, softmax, transpose, slice, reshape) reads its tensor through
``rows_params``: a leading dimension above 1 (a batch, the 3 of a fused q/k/v tensor, the
patches of MobileViT) is folded into the channels, ``(n, c, h, w)`` -> ``(1, n c, h, w)`` and
``(rows, c)`` -> ``(1, rows, 1, c)``, instead of multiplying one item's time by ``n`` (which
counted a kernel's fixed cost ``n`` times: GELU on DeiT's ``(197, 768)`` tokens 0.84 ms
predicted against 0.12 ms measured).

A draft is a layer before fusion and counting: its type, raw parameters, the ONNX nodes it
covers (a pattern may claim several, e.g. Conv + BatchNormalization), its activation input
and output tensors, and flags. ``from_onnx`` returns ``None`` for a node of its operator that
it does not cover (the next type claiming the operator is asked, then ``other``), or raises
:class:`Unsupported` with flags to keep the node as type ``other`` with those flags.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from ..errors import UserError
from ..onnx_shapes import node_attrs
from .params import conv_out

__all__ = ["Draft", "Unsupported", "ImportContext", "OnnxImportError", "ImpossibleShapeError", "attrs", "is_const", "reduce_axes",
           "impossible", "window_params", "check_window", "last_axis_rows"]

Shape = tuple[int, ...]


class OnnxImportError(UserError, ValueError):
    """The input is not a usable ONNX model (not ONNX, truncated, empty, malformed)."""


class ImpossibleShapeError(OnnxImportError):
    """A node no runtime could execute with the model's shapes: a convolution or pooling
    window that does not fit its (padded) input, a non-positive kernel, stride or dilation,
    or convolution groups that do not divide the input and output channels."""


class Unsupported(Exception):
    """A node of a known op in a form the vocabulary does not cover; args are flags."""


@dataclass(slots=True)
class Draft:
    """A layer before fusion and counting (the native core returns these fields in order)."""

    type: str
    params: dict[str, Any]
    op_type: str
    nodes: list[str]
    inputs: list[str]  # activation (non-constant) input tensors
    outputs: list[str]
    flags: list[str] = field(default_factory=list)
    kind: str | None = None  # for type activation: its kind
    activation: str | None = None  # fused activation kind
    extra_params: int = 0  # parameters of a fused activation (PReLU slopes)
    check_shape: bool = False  # compare describe()'s output shape with ONNX's

    def flag(self, f: str) -> None:
        if f not in self.flags:
            self.flags.append(f)


class ImportContext(Protocol):
    """What the importer offers a type's ``from_onnx``. Tensor names are canonical (aliases
    of Identity, Dropout and no-op nodes resolved) where the method says so."""

    opset: int
    rules: Any  # the device's estimator.fusion.FusionRules
    graph_outputs: set[str]  # canonical names of the graph's outputs
    claimed: set[str]  # names of nodes already in a layer

    def shape(self, t: str) -> Shape | None: ...
    def value(self, t: str) -> Any: ...  # a constant's ndarray, or None
    def canon(self, t: str) -> str: ...
    def is_static(self, t: str) -> bool: ...  # a constant, or computed from constants and shapes only
    def cons(self, t: str) -> list[Any]: ...  # the live nodes consuming tensor t
    def outs(self, node: Any) -> list[str]: ...  # a node's canonical outputs
    def elems(self, t: str) -> int | None: ...
    def nchw(self, t: str, d: Draft | None = None) -> tuple[int, int, int, int]: ...
    def base(self, node: Any, layer_type: str, nodes: list[str] | None = None) -> Draft: ...
    def spatial_params(self, d: Draft, t: str) -> tuple[int, int, int, int]: ...  # n, c, h, w; flags a batch
    def rows_params(self, d: Draft, t: str) -> tuple[int, int, int, int]: ...  # the same, leading dims as rows
    def other(self, node: Any, extra_flags: Sequence[str] = ()) -> Draft: ...


def last_axis_rows(d: Draft, shape: Sequence[int]) -> None:
    """Raw params ``(c, h, w)`` of a tensor read as rows along its last axis: (the leading
    dimensions' product, the last two), as ``rows_params`` reads a rank-4 tensor. For ranks of 5
    and more, where the shared reading (:func:`~estimator.layers.params.hwc`) lumps the trailing
    dimensions into ``w``: a softmax over MobileViT's ``(b, patches, heads, tokens, tokens)``
    and the scalar scale before it."""
    d.params.update(n=1, c=int(math.prod(shape[:-2])), h=int(shape[-2]), w=int(shape[-1]))


def is_const(g: Any, t: str, value: float) -> bool:
    """Whether tensor ``t`` is a constant scalar equal to ``value`` (to 1e-3 relative), read
    through import context ``g``: the constants of an operator pattern (GELU's sqrt 2, a
    LayerNorm's exponent 2)."""
    if not g.is_static(t):
        return False
    v = g.value(t)
    return v is not None and v.size == 1 and abs(float(v.item()) - value) <= 1e-3 * abs(value)


def reduce_axes(n: Any, g: Any) -> list[int] | None:
    """A Reduce* node's ``axes``: its attribute (opset < 18) or its constant second input
    (opset 18); None where neither gives them."""
    axes = attrs(n).get("axes")
    if axes is None and len(n.input) > 1 and n.input[1]:
        v = g.value(n.input[1])
        axes = None if v is None else [int(x) for x in np.ravel(v)]
    return None if axes is None else [int(x) for x in axes]


def attrs(node: Any) -> dict[str, Any]:
    """A node's attributes (``helper.get_attribute_value``, strings decoded); read-only."""
    try:
        cached = node.attrs_cache  # a GraphNode
    except AttributeError:
        cached = None
    return cached if cached is not None else node_attrs(node)


def impossible(n: Any) -> str:
    """The start of an :class:`ImpossibleShapeError` message about node ``n``."""
    return f"impossible shapes: node {n.name!r} ({n.op_type})"


def window_params(n: Any, d: Draft, x_shape: Shape, k: Sequence[int]) -> dict[str, int]:
    """Strides, dilations and pads of a 1D/2D window op (Conv, pools), as raw params."""
    a = attrs(n)
    nd = len(k)
    strides = list(a.get("strides", [1] * nd))
    dil = list(a.get("dilations", [1] * nd))
    pads = list(a.get("pads", [0] * (2 * nd)))
    auto = a.get("auto_pad", "NOTSET")
    spatial = list(x_shape[2:])
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        d.flag("auto_pad")
        pads = [0] * (2 * nd)
        for i in range(nd):
            out = -(-spatial[i] // strides[i])
            total = max((out - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - spatial[i], 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        d.flag("auto_pad")
        pads = [0] * (2 * nd)
    if nd == 1:  # (N, C, L): h = 1
        return dict(h=1, w=spatial[0], k_h=1, k_w=k[0], s_h=1, s_w=strides[0], d_h=1, d_w=dil[0],
                    p_t=0, p_b=0, p_l=pads[0], p_r=pads[1])
    return dict(h=spatial[0], w=spatial[1], k_h=k[0], k_w=k[1], s_h=strides[0], s_w=strides[1],
                d_h=dil[0], d_w=dil[1], p_t=pads[0], p_l=pads[1], p_b=pads[2], p_r=pads[3])


def check_window(n: Any, win: Mapping[str, int], *, dilated: bool) -> None:
    """Raise :class:`ImpossibleShapeError` for a window the vocabulary cannot describe."""
    for key in ("k_h", "k_w", "s_h", "s_w") + (("d_h", "d_w") if dilated else ()):
        if win[key] < 1:
            what = {"k": "kernel size", "s": "stride", "d": "dilation"}[key[0]]
            raise ImpossibleShapeError(f"{impossible(n)}: {what} {win[key]} along {'hw'[key[-1] == 'w']}; "
                                       "it must be >= 1")
    if min(win["p_t"], win["p_l"], win["p_b"], win["p_r"]) < 0:
        raise ImpossibleShapeError(
            f"{impossible(n)}: negative pads {(win['p_t'], win['p_l'], win['p_b'], win['p_r'])}")
    d_h, d_w = (win["d_h"], win["d_w"]) if dilated else (1, 1)
    h_out = conv_out(win["h"], win["k_h"], win["s_h"], d_h, win["p_t"], win["p_b"])
    w_out = conv_out(win["w"], win["k_w"], win["s_w"], d_w, win["p_l"], win["p_r"])
    if h_out < 1 or w_out < 1:
        raise ImpossibleShapeError(
            f"{impossible(n)}: the {win['k_h']}x{win['k_w']} window (stride {win['s_h']}x{win['s_w']}, dilation "
            f"{d_h}x{d_w}) does not fit the {win['h']}x{win['w']} input with pads (top, left, bottom, right) = "
            f"({win['p_t']}, {win['p_l']}, {win['p_b']}, {win['p_r']})")
