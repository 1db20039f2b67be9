"""The layer vocabulary: the one place that defines layer types, their feature vectors,
and how their operations, parameters and bytes moved are counted.

Everything else uses this module:

* ``bench`` samples raw parameters for a type and builds models from them,
* ``estimator`` extracts raw parameters from ONNX nodes and turns them into features,
* the proto ``LayerSpec`` carries ``type`` + the raw parameter map,
* the service answers ``EstimateLayers`` from the same raw parameters.

A layer is described by its *raw parameters* (``params``: what you would write to build
it, e.g. ``h, w, c_in, c_out, k_h, k_w, s_h, s_w, groups, d_h, d_w, pads``).
:func:`describe` turns raw parameters into a :class:`LayerCounts`: the feature vector the
models see (Table 2 of the smart-padding paper, extended), MACs, parameters, the number of
operations the latency model normalises by (``latency = t_op * ops``, Eq. 7), bytes moved,
and the output shape.

Conventions
-----------
* Spatial tensors are NCHW. ``h, w`` are *input* height and width.
* ``ops`` is ``2 * MACs`` (FLOPs) for compute layers; for pools it is output elements x
  window; for memory-bound layers it is elements moved (for concat: bytes moved / element
  size, i.e. the element count of the output).
* ``bytes`` is (input elements + output elements + parameters) x ``elem_bytes``.
* Batch ``n`` multiplies MACs, ops and bytes but is not a feature: profiles are
  benchmarked at batch 1 and a batch > 1 is flagged by the estimator.
* ``act`` (conv2d, dwconv2d, fc, add, mul) is the fused activation kind (a key of
  :data:`ACTIVATION_KINDS`; absent, ``None`` or ``"none"``: no activation), and the
  ``act`` feature its code (-1 for none): backends run different kernels for different
  fused activations (ONNX Runtime's CPU convolutions apply ReLU in the kernel but ReLU6
  as a second pass). A *benchmark* row without ``act`` carries its LUM's default
  activation (:data:`LUM_DEFAULT_ACT`, Table 2 of the paper); :func:`bench_params`
  writes it out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .errors import UserError

__all__ = [
    "COLD_TYPES",
    "weight_bound",
    "LayerType",
    "LayerTypeSpec",
    "LayerCounts",
    "Layer",
    "SPECS",
    "LAYER_TYPES",
    "ACTIVATION_KINDS",
    "LUM_DEFAULT_ACT",
    "FUSED_ACT_TYPES",
    "fused_act",
    "RESIZE_MODES",
    "bench_params",
    "layer_bench_params",
    "describe",
    "feature_names",
    "feature_vector",
    "conv_out",
    "hwc",
    "LayerSpecError",
]


class LayerSpecError(UserError, ValueError):
    """Raw parameters that do not describe a valid layer of the named type."""


class LayerType:
    """String constants for the layer types (use these, never bare strings)."""

    CONV2D = "conv2d"
    DWCONV2D = "dwconv2d"
    FC = "fc"
    MATMUL = "matmul"
    MAXPOOL = "maxpool"
    AVGPOOL = "avgpool"
    GLOBALPOOL = "globalpool"
    ADD = "add"
    MUL = "mul"
    CONCAT = "concat"
    ACTIVATION = "activation"
    RESIZE = "resize"
    PAD = "pad"
    SLICE = "slice"
    TRANSPOSE = "transpose"
    RESHAPE = "reshape"
    SOFTMAX = "softmax"
    OTHER = "other"


#: Activation kinds. The integer code is the ``kind`` feature of standalone activations.
ACTIVATION_KINDS: dict[str, int] = {
    "relu": 0,
    "relu6": 1,  # Clip(0, 6)
    "clip": 2,  # any other Clip
    "sigmoid": 3,
    "hardsigmoid": 4,
    "hardswish": 5,
    "silu": 6,  # x * sigmoid(x), a.k.a. swish
    "tanh": 7,
    "leakyrelu": 8,
    "prelu": 9,
    "elu": 10,
    "gelu": 11,
    "mish": 12,
    "softplus": 13,
    "other": 14,
}

#: Layer types that take a fused activation (raw param ``act``, feature ``act``); the
#: producers device fusion rules may fold an activation into (:mod:`estimator.fusion`).
FUSED_ACT_TYPES = (LayerType.CONV2D, LayerType.DWCONV2D, LayerType.FC, LayerType.MATMUL, LayerType.ADD,
                   LayerType.MUL)

#: Fused activation of the benchmarked LUM per type when a benchmark row's raw params
#: name none (Table 2 of the paper).
LUM_DEFAULT_ACT: dict[str, str | None] = {
    LayerType.CONV2D: "relu",
    LayerType.DWCONV2D: "relu",
    LayerType.ADD: "relu",
    LayerType.FC: None,
    LayerType.MUL: None,
}


def fused_act(p: Mapping[str, Any]) -> str | None:
    """The fused activation kind named by raw param ``act`` (``None``: no activation)."""
    a = p.get("act")
    if a is None or a in ("", "none"):
        return None
    if not isinstance(a, str) or a not in ACTIVATION_KINDS:
        raise LayerSpecError(f"unknown activation {a!r} for param 'act'; known: none, {', '.join(ACTIVATION_KINDS)}")
    return a


def bench_params(layer_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A benchmark row's raw parameters with its LUM's activation written out as ``act``
    (rows store only what the plan drew; a missing ``act`` means the LUM's default)."""
    p = dict(params)
    if layer_type in LUM_DEFAULT_ACT and "act" not in p:
        p["act"] = LUM_DEFAULT_ACT[layer_type] or "none"
    return p


def layer_bench_params(layer_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark configuration of an imported layer: its raw parameters, with ``act``
    written out as ``"none"`` where the layer has no fused activation and its LUM's default
    is one (a benchmark row without ``act`` means the default, :func:`bench_params`)."""
    p = dict(params)
    if LUM_DEFAULT_ACT.get(layer_type) is not None and "act" not in p:
        p["act"] = "none"
    return p


def _act_code(p: Mapping[str, Any]) -> float:
    a = fused_act(p)
    return -1.0 if a is None else float(ACTIVATION_KINDS[a])


#: Resize interpolation modes. The integer code is the ``mode`` feature of resize.
RESIZE_MODES: dict[str, int] = {"nearest": 0, "linear": 1, "cubic": 2}


@dataclass(frozen=True)
class LayerCounts:
    """What :func:`describe` derives from raw parameters."""

    features: dict[str, float]
    macs: int
    params: int
    ops: float
    bytes: int
    output_shape: tuple[int, ...]


@dataclass(frozen=True)
class LayerTypeSpec:
    """One entry of the vocabulary."""

    name: str
    features: tuple[str, ...]
    ops_unit: str  # "flops", "window-ops" or "elements"
    summary: str
    counter: Callable[[dict[str, Any], int], LayerCounts] = field(repr=False, compare=False)
    #: Raw parameters that must be given (others have defaults).
    required: tuple[str, ...] = ()
    #: Whether smart-padding benchmarking can measure this type (input and output are
    #: single NCHW tensors a 1x1 padding conv can feed and consume).
    benchable: bool = False


# --------------------------------------------------------------------------- helpers

#: Integers up to this size survive the float round trip in _i unchanged.
_EXACT_INT = 2**53


def _i(p: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = p.get(key)
    if type(v) is int and -_EXACT_INT <= v <= _EXACT_INT:  # the common case: what the checks below return
        return v
    if key in p and p[key] is not None:
        v = p[key]
    elif default is not None:
        v = default
    else:
        raise LayerSpecError(f"missing parameter {key!r}")
    try:
        fv = float(v)
    except (TypeError, ValueError):
        raise LayerSpecError(f"parameter {key!r} must be a number, got {v!r}") from None
    if not math.isfinite(fv) or fv != int(fv):
        raise LayerSpecError(f"parameter {key!r} must be an integer, got {v!r}")
    return int(fv)


def _pos(p: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = _i(p, key, default)
    if v < 1:
        raise LayerSpecError(f"parameter {key!r} must be >= 1, got {v}")
    return v


def _nonneg(p: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = _i(p, key, default)
    if v < 0:
        raise LayerSpecError(f"parameter {key!r} must be >= 0, got {v}")
    return v


def conv_out(size: int, k: int, s: int, d: int, pad_begin: int, pad_end: int) -> int:
    """Output length of a convolution/pooling window along one axis."""
    return (size + pad_begin + pad_end - d * (k - 1) - 1) // s + 1


def hwc(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """Map any tensor shape to ``(n, h, w, c)`` with ``n*h*w*c`` = element count.

    NCHW (rank 4) maps directly; rank >= 5 folds the trailing dims into ``w``; rank 3
    ``(N, C, L)`` gives ``h=1, w=L``; rank 2 ``(N, C)`` gives ``h=w=1``; rank 1 and
    scalars give ``n=1``.
    """
    s = [max(int(d), 1) for d in shape]
    if len(s) == 0:
        return 1, 1, 1, 1
    if len(s) == 1:
        return 1, 1, 1, s[0]
    if len(s) == 2:
        return s[0], 1, 1, s[1]
    if len(s) == 3:
        return s[0], 1, s[2], s[1]
    return s[0], s[2], math.prod(s[3:]), s[1]


def _pads(p: Mapping[str, Any], k_h: int, k_w: int, d_h: int, d_w: int) -> tuple[int, int, int, int]:
    """(top, left, bottom, right); the default is 'same'-style symmetric padding."""
    dt, dl = d_h * (k_h - 1) // 2, d_w * (k_w - 1) // 2
    return (
        _nonneg(p, "p_t", dt),
        _nonneg(p, "p_l", dl),
        _nonneg(p, "p_b", dt),
        _nonneg(p, "p_r", dl),
    )


def _window(p: Mapping[str, Any], *, dilated: bool) -> tuple[int, int, int, int, int, int, int, int]:
    h, w = _pos(p, "h"), _pos(p, "w")
    k_h, k_w = _pos(p, "k_h"), _pos(p, "k_w")
    s_h, s_w = _pos(p, "s_h", 1), _pos(p, "s_w", 1)
    d_h, d_w = (_pos(p, "d_h", 1), _pos(p, "d_w", 1)) if dilated else (1, 1)
    pt, pl, pb, pr = _pads(p, k_h, k_w, d_h, d_w)
    h_out = conv_out(h, k_h, s_h, d_h, pt, pb)
    w_out = conv_out(w, k_w, s_w, d_w, pl, pr)
    if h_out < 1 or w_out < 1:
        raise LayerSpecError(
            f"window {k_h}x{k_w} (dilation {d_h}x{d_w}) does not fit input {h}x{w} with pads {pt, pl, pb, pr}"
        )
    return h, w, k_h, k_w, s_h, s_w, h_out, w_out


def _bytes(in_elems: int, out_elems: int, params: int, elem_bytes: int) -> int:
    return (in_elems + out_elems + params) * elem_bytes


def _cold(p: Mapping[str, Any]) -> float:
    """The ``cold`` feature: 1 for a row measured after a cache flush (``bench profile
    --cold-from``) or a layer the estimator predicts as read from DRAM."""
    return float(_nonneg(p, "cold", 0) > 0)


#: Layer types with the ``cold`` feature: those whose weights can outweigh their activations.
COLD_TYPES = ("conv2d", "fc")


def weight_bound(counts: LayerCounts) -> bool:
    """Whether a layer of :data:`COLD_TYPES` has more weights than input and output elements
    (a classifier; a wide convolution on a small map): inside a network big enough not to
    keep its weights in the last-level cache, its time is their trip from DRAM."""
    f, out = counts.features, counts.output_shape
    n = out[0] if out else 1
    inputs = n * (f["c_in"] if "m" in f else f.get("h", 1) * f.get("w", 1) * f.get("c_in", f.get("c", 1)))
    return counts.params > inputs + math.prod(out)


# ------------------------------------------------------------------------- counters


def _align(c: int) -> int:
    """Channel alignment feature: the largest power of two dividing ``c``, at most 16.
    CPU kernels vectorise over channels (ONNX Runtime's NCHWc convolutions need multiples
    of the 16-lane AVX-512 block, its depthwise kernel is 5-10x slower per channel off
    multiples of 4), so two convolutions a few channels apart can differ severalfold."""
    return math.gcd(int(c), 16)


def _conv2d(p: dict[str, Any], eb: int) -> LayerCounts:
    n = _pos(p, "n", 1)
    h, w, k_h, k_w, s_h, s_w, h_out, w_out = _window(p, dilated=True)
    c_in, c_out, g = _pos(p, "c_in"), _pos(p, "c_out"), _pos(p, "groups", 1)
    if c_in % g or c_out % g:
        raise LayerSpecError(f"groups={g} must divide c_in={c_in} and c_out={c_out}")
    bias = _nonneg(p, "bias", 1)
    params = c_out * (c_in // g) * k_h * k_w + (c_out if bias else 0)
    macs = n * h_out * w_out * c_out * (c_in // g) * k_h * k_w
    dil = max(_pos(p, "d_h", 1), _pos(p, "d_w", 1))
    feats = dict(h=h, w=w, c_in=c_in, c_out=c_out, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w,
                 groups=g, dilation=dil, flops=2 * macs / n, params=params, act=_act_code(p),
                 c_in_g=c_in // g, c_out_g=c_out // g, c_in_align=_align(c_in // g), c_out_align=_align(c_out // g),
                 graph_input=float(_nonneg(p, "graph_input", 0) > 0), cold=_cold(p))
    return LayerCounts(feats, macs, params, 2.0 * macs,
                       _bytes(n * h * w * c_in, n * h_out * w_out * c_out, params, eb),
                       (n, c_out, h_out, w_out))


def _dwconv2d(p: dict[str, Any], eb: int) -> LayerCounts:
    n = _pos(p, "n", 1)
    h, w, k_h, k_w, s_h, s_w, h_out, w_out = _window(p, dilated=True)
    c = _pos(p, "c")
    mult = _pos(p, "multiplier", 1)
    bias = _nonneg(p, "bias", 1)
    c_out = c * mult
    params = c_out * k_h * k_w + (c_out if bias else 0)
    macs = n * h_out * w_out * c_out * k_h * k_w
    dil = max(_pos(p, "d_h", 1), _pos(p, "d_w", 1))
    feats = dict(h=h, w=w, c=c, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w, dilation=dil,
                 flops=2 * macs / n, params=params, act=_act_code(p), c_align=_align(c))
    return LayerCounts(feats, macs, params, 2.0 * macs,
                       _bytes(n * h * w * c, n * h_out * w_out * c_out, params, eb),
                       (n, c_out, h_out, w_out))


def _fc(p: dict[str, Any], eb: int) -> LayerCounts:
    m = _pos(p, "m", 1)  # rows (batch x tokens)
    c_in, c_out = _pos(p, "c_in"), _pos(p, "c_out")
    bias = _nonneg(p, "bias", 1)
    params = c_in * c_out + (c_out if bias else 0)
    macs = m * c_in * c_out
    feats = dict(m=m, c_in=c_in, c_out=c_out, flops=2 * macs, params=params, act=_act_code(p), cold=_cold(p))
    return LayerCounts(feats, macs, params, 2.0 * macs, _bytes(m * c_in, m * c_out, params, eb), (m, c_out))


def _matmul(p: dict[str, Any], eb: int) -> LayerCounts:
    b, m, k, nn = _pos(p, "b", 1), _pos(p, "m"), _pos(p, "k"), _pos(p, "n_cols")
    macs = b * m * k * nn
    feats = dict(b=b, m=m, k=k, n_cols=nn, flops=2 * macs, act=_act_code(p))
    return LayerCounts(feats, macs, 0, 2.0 * macs, _bytes(b * (m * k + k * nn), b * m * nn, 0, eb), (b, m, nn))


def _pool(p: dict[str, Any], eb: int) -> LayerCounts:
    n = _pos(p, "n", 1)
    h, w, k_h, k_w, s_h, s_w, h_out, w_out = _window(p, dilated=False)
    c = _pos(p, "c")
    out = n * c * h_out * w_out
    feats = dict(h=h, w=w, c=c, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
    return LayerCounts(feats, 0, 0, float(out * k_h * k_w), _bytes(n * h * w * c, out, 0, eb), (n, c, h_out, w_out))


def _globalpool(p: dict[str, Any], eb: int) -> LayerCounts:
    n, h, w, c = _pos(p, "n", 1), _pos(p, "h"), _pos(p, "w"), _pos(p, "c")
    return LayerCounts(dict(h=h, w=w, c=c), 0, 0, float(n * h * w * c), _bytes(n * h * w * c, n * c, 0, eb), (n, c, 1, 1))


def _eltwise(p: dict[str, Any], eb: int) -> LayerCounts:
    n, h, w, c = _pos(p, "n", 1), _pos(p, "h"), _pos(p, "w"), _pos(p, "c")
    bc = _nonneg(p, "broadcast", 0)  # 0: same shapes, 1: second input broadcast (e.g. SE scale, bias)
    out = n * h * w * c
    second = out if bc == 0 else _pos(p, "elems_b", c)
    # Constant parameter operands, e.g. a standalone BatchNormalization's scale and shift.
    cp = _nonneg(p, "const_params", 0)
    return LayerCounts(dict(h=h, w=w, c=c, broadcast=float(bc > 0), act=_act_code(p)), 0, cp, float(out),
                       _bytes(out + second, out, cp, eb), (n, c, h, w))


def _concat_channels(p: Mapping[str, Any]) -> list[int]:
    chans = p.get("channels")
    if chans is None:
        k = _pos(p, "n_inputs", 2)
        chans = [_pos(p, f"c_in{i + 1}") for i in range(k)]
    if isinstance(chans, str):
        chans = [int(x) for x in chans.replace(",", " ").split()]
    chans = [int(c) for c in chans]
    if len(chans) < 1 or min(chans) < 1:
        raise LayerSpecError(f"concat needs >= 1 input with >= 1 channel, got {chans}")
    return chans


def _concat(p: dict[str, Any], eb: int) -> LayerCounts:
    n, h, w = _pos(p, "n", 1), _pos(p, "h"), _pos(p, "w")
    chans = _concat_channels(p)
    c_out = sum(chans)
    out = n * h * w * c_out
    feats = dict(h=h, w=w, c_out=c_out, n_inputs=len(chans), c_in1=chans[0],
                 c_in2=chans[1] if len(chans) > 1 else 0)
    return LayerCounts(feats, 0, 0, float(out), _bytes(out, out, 0, eb), (n, c_out, h, w))


def _activation(p: dict[str, Any], eb: int) -> LayerCounts:
    n, h, w, c = _pos(p, "n", 1), _pos(p, "h"), _pos(p, "w"), _pos(p, "c")
    kind = p.get("kind", "relu")
    code = ACTIVATION_KINDS.get(kind, ACTIVATION_KINDS["other"]) if isinstance(kind, str) else _nonneg(p, "kind")
    out = n * h * w * c
    cp = _nonneg(p, "const_params", 0)  # learned parameters, e.g. PReLU slopes
    return LayerCounts(dict(h=h, w=w, c=c, kind=code), 0, cp, float(out), _bytes(out, out, cp, eb), (n, c, h, w))


def _resize(p: dict[str, Any], eb: int) -> LayerCounts:
    n, h, w, c = _pos(p, "n", 1), _pos(p, "h"), _pos(p, "w"), _pos(p, "c")
    h_out, w_out = _pos(p, "h_out"), _pos(p, "w_out")
    mode = p.get("mode", "nearest")
    code = RESIZE_MODES.get(mode, 1) if isinstance(mode, str) else _nonneg(p, "mode")
    out = n * c * h_out * w_out
    return LayerCounts(dict(h=h, w=w, c=c, h_out=h_out, w_out=w_out, mode=code), 0, 0, float(out),
                       _bytes(n * h * w * c, out, 0, eb), (n, c, h_out, w_out))


def _pad(p: dict[str, Any], eb: int) -> LayerCounts:
    n, h, w, c = _pos(p, "n", 1), _pos(p, "h"), _pos(p, "w"), _pos(p, "c")
    h_out, w_out = _pos(p, "h_out", h), _pos(p, "w_out", w)
    c_out = _pos(p, "c_out", c)
    out = n * c_out * h_out * w_out
    return LayerCounts(dict(h=h, w=w, c=c, h_out=h_out, w_out=w_out, c_out=c_out), 0, 0, float(out),
                       _bytes(n * h * w * c, out, 0, eb), (n, c_out, h_out, w_out))


def _generic(p: dict[str, Any], eb: int, *, with_out: bool = False, extra: Sequence[str] = ()) -> LayerCounts:
    n, h, w, c = _pos(p, "n", 1), _pos(p, "h"), _pos(p, "w"), _pos(p, "c")
    in_el = n * h * w * c
    out_el = _pos(p, "elems_out", in_el) if with_out else in_el
    feats: dict[str, float] = dict(h=h, w=w, c=c)
    if with_out:
        feats["elems_out"] = out_el
    for key in extra:
        feats[key] = _nonneg(p, key, 0)
    return LayerCounts(feats, 0, 0, float(max(in_el, out_el)), _bytes(in_el, out_el, 0, eb), (out_el,))


def _slice(p: dict[str, Any], eb: int) -> LayerCounts:
    return _generic(p, eb, with_out=True, extra=("n_outputs",))


def _transpose(p: dict[str, Any], eb: int) -> LayerCounts:
    return _generic(p, eb, extra=("rank",))


def _reshape(p: dict[str, Any], eb: int) -> LayerCounts:
    return _generic(p, eb)


def _softmax(p: dict[str, Any], eb: int) -> LayerCounts:
    return _generic(p, eb, extra=("axis_len",))


def _other(p: dict[str, Any], eb: int) -> LayerCounts:
    return _generic(p, eb, with_out=True)


def _spec(name: str, features: Sequence[str], ops_unit: str, summary: str, counter: Callable,
          required: Sequence[str] = (), benchable: bool = False) -> LayerTypeSpec:
    return LayerTypeSpec(name, tuple(features), ops_unit, summary, counter, tuple(required), benchable)


_WIN = ("h", "w", "c", "k_h", "k_w", "s_h", "s_w")
_SPECS = [
    _spec(LayerType.CONV2D,
          ("h", "w", "c_in", "c_out", "k_h", "k_w", "s_h", "s_w", "groups", "dilation", "flops", "params", "act",
           "c_in_g", "c_out_g", "c_in_align", "c_out_align", "graph_input", "cold"),
          "flops", "2D convolution incl. grouped (c_in_g, c_out_g: channels per group; *_align: their "
          "power-of-two alignment, at most 16) and dilated (+ fused activation; graph_input=1: a stem reading "
          "the network's input; cold=1: weights read from DRAM)", _conv2d,
          ("h", "w", "c_in", "c_out", "k_h", "k_w"), True),
    _spec(LayerType.DWCONV2D,
          ("h", "w", "c", "k_h", "k_w", "s_h", "s_w", "dilation", "flops", "params", "act", "c_align"),
          "flops", "depthwise 2D convolution (groups = channels; c_align: the power-of-two alignment of c, at "
          "most 16) (+ fused activation)", _dwconv2d,
          ("h", "w", "c", "k_h", "k_w"), True),
    _spec(LayerType.FC, ("m", "c_in", "c_out", "flops", "params", "act", "cold"), "flops",
          "fully connected / Gemm / MatMul with constant weights (+ fused activation; cold=1: weights read from "
          "DRAM)", _fc, ("c_in", "c_out"), True),
    _spec(LayerType.MATMUL, ("b", "m", "k", "n_cols", "flops", "act"), "flops",
          "MatMul of two activations: (b, m, k) x (b, k, n_cols)", _matmul, ("m", "k", "n_cols")),
    _spec(LayerType.MAXPOOL, _WIN, "window-ops", "max pooling", _pool, ("h", "w", "c", "k_h", "k_w"), True),
    _spec(LayerType.AVGPOOL, _WIN, "window-ops", "average pooling", _pool, ("h", "w", "c", "k_h", "k_w"), True),
    _spec(LayerType.GLOBALPOOL, ("h", "w", "c"), "elements", "global average/max pooling", _globalpool,
          ("h", "w", "c"), True),
    _spec(LayerType.ADD, ("h", "w", "c", "broadcast", "act"), "elements",
          "element-wise add/sub, optionally broadcast (+ fused activation)", _eltwise, ("h", "w", "c"), True),
    _spec(LayerType.MUL, ("h", "w", "c", "broadcast", "act"), "elements",
          "element-wise mul/div, optionally broadcast (+ fused activation)", _eltwise, ("h", "w", "c"), True),
    _spec(LayerType.CONCAT, ("h", "w", "c_out", "n_inputs", "c_in1", "c_in2"), "elements",
          "channel concatenation (ops = elements moved = bytes moved / element size)", _concat, ("h", "w"), True),
    _spec(LayerType.ACTIVATION, ("h", "w", "c", "kind"), "elements",
          "standalone activation (kind coded by ACTIVATION_KINDS)", _activation, ("h", "w", "c"), True),
    _spec(LayerType.RESIZE, ("h", "w", "c", "h_out", "w_out", "mode"), "elements",
          "spatial resize / upsample (mode coded by RESIZE_MODES)", _resize, ("h", "w", "c", "h_out", "w_out"), True),
    _spec(LayerType.PAD, ("h", "w", "c", "h_out", "w_out", "c_out"), "elements", "explicit padding", _pad,
          ("h", "w", "c")),
    _spec(LayerType.SLICE, ("h", "w", "c", "elems_out", "n_outputs"), "elements", "slice / split / gather",
          _slice, ("h", "w", "c")),
    _spec(LayerType.TRANSPOSE, ("h", "w", "c", "rank"), "elements", "transpose / channel shuffle", _transpose,
          ("h", "w", "c")),
    _spec(LayerType.RESHAPE, ("h", "w", "c"), "elements", "reshape / flatten / squeeze (often free)", _reshape,
          ("h", "w", "c")),
    _spec(LayerType.SOFTMAX, ("h", "w", "c", "axis_len"), "elements", "softmax", _softmax, ("h", "w", "c")),
    _spec(LayerType.OTHER, ("h", "w", "c", "elems_out"), "elements",
          "an operator outside the vocabulary; carries its ONNX op_type, never dropped", _other, ("h", "w", "c")),
]

#: The vocabulary, by type name.
SPECS: dict[str, LayerTypeSpec] = {s.name: s for s in _SPECS}
#: All type names, in a stable order.
LAYER_TYPES: tuple[str, ...] = tuple(SPECS)


def _spec_for(layer_type: str) -> LayerTypeSpec:
    try:
        return SPECS[layer_type]
    except KeyError:
        raise LayerSpecError(f"unknown layer type {layer_type!r}; known: {', '.join(LAYER_TYPES)}") from None


def feature_names(layer_type: str) -> tuple[str, ...]:
    return _spec_for(layer_type).features


def describe(layer_type: str, params: Mapping[str, Any], *, elem_bytes: int = 4) -> LayerCounts:
    """Counts and features of a layer from its raw parameters.

    Raises :class:`LayerSpecError` with a precise message for an unknown type, a missing
    parameter, or an impossible configuration.
    """
    spec = _spec_for(layer_type)
    return spec.counter(dict(params), elem_bytes)


def feature_vector(layer_type: str, features: Mapping[str, float]) -> list[float]:
    """The model input for a layer: its features in the vocabulary's order."""
    return [float(features[k]) for k in feature_names(layer_type)]


@dataclass
class Layer:
    """One layer of a network, as the estimator sees it (after fusion)."""

    name: str
    type: str
    params: dict[str, Any]
    counts: LayerCounts
    op_type: str = ""  # main ONNX op (for type 'other', the unknown op)
    nodes: list[str] = field(default_factory=list)  # ONNX node names folded into this layer
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    output_shapes: list[tuple[int, ...]] = field(default_factory=list)
    activation: str | None = None  # fused activation kind
    flags: list[str] = field(default_factory=list)

    @property
    def features(self) -> dict[str, float]:
        return self.counts.features

    @property
    def macs(self) -> int:
        return self.counts.macs

    @property
    def n_params(self) -> int:
        return self.counts.params

    @property
    def ops(self) -> float:
        return self.counts.ops

    @property
    def bytes(self) -> int:
        return self.counts.bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "op_type": self.op_type,
            "params": dict(self.params),
            "features": dict(self.features),
            "macs": self.macs,
            "n_params": self.n_params,
            "ops": self.ops,
            "bytes": self.bytes,
            "input_shapes": [list(s) for s in self.input_shapes],
            "output_shapes": [list(s) for s in self.output_shapes],
            "activation": self.activation,
            "nodes": list(self.nodes),
            "flags": list(self.flags),
        }
