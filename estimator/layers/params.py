"""Raw-parameter rules shared by the layer-type modules: integer checks with precise errors,
window geometry, activation and resize codes.

A layer is described by its *raw parameters* (what you would write to build it, e.g.
``h, w, c_in, c_out, k_h, k_w, s_h, s_w, groups, d_h, d_w, p_t, p_l, p_b, p_r``). Spatial
tensors are NCHW and ``h, w`` are *input* height and width.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ..errors import UserError

__all__ = [
    "LayerSpecError",
    "dims_text",
    "ACTIVATION_KINDS",
    "RESIZE_MODES",
    "integer",
    "positive",
    "nonneg",
    "flag01",
    "conv_out",
    "hwc",
    "window",
    "same_pads",
    "window_attrs",
    "io_bytes",
    "opt_int",
    "cold",
    "align",
    "fused_act",
    "act_code",
]


class LayerSpecError(UserError, ValueError):
    """Raw parameters that do not describe a valid layer of the named type."""


LayerSpecError.__module__ = "estimator.layers"  # its public home (tracebacks name it there)


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

#: Resize interpolation modes. The integer code is the ``mode`` feature of resize.
RESIZE_MODES: dict[str, int] = {"nearest": 0, "linear": 1, "cubic": 2}

#: Integers up to this size survive the float round trip in :func:`integer` unchanged.
_EXACT_INT = 2**53


def integer(p: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """Raw param ``key`` as an int (``default`` when absent or None)."""
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


def positive(p: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = integer(p, key, default)
    if v < 1:
        raise LayerSpecError(f"parameter {key!r} must be >= 1, got {v}")
    return v


def nonneg(p: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = integer(p, key, default)
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


def rows_chw(shape: Sequence[int]) -> tuple[int, int, int]:
    """``(c, h, w)`` of a tensor read as rows (the importer's ``rows_params``): :func:`hwc`'s, a
    leading dimension above 1 folded into ``c`` (into ``h`` as rows for rank 2)."""
    n, h, w, c = hwc(shape)
    if n > 1:
        return (n, 1, c) if len(shape) == 2 else (n * c, h, w)
    return c, h, w


def _pads(p: Mapping[str, Any], k_h: int, k_w: int, d_h: int, d_w: int) -> tuple[int, int, int, int]:
    """(top, left, bottom, right); the default is 'same'-style symmetric padding."""
    dt, dl = d_h * (k_h - 1) // 2, d_w * (k_w - 1) // 2
    return (
        nonneg(p, "p_t", dt),
        nonneg(p, "p_l", dl),
        nonneg(p, "p_b", dt),
        nonneg(p, "p_r", dl),
    )


def window(p: Mapping[str, Any], *, dilated: bool) -> tuple[int, int, int, int, int, int, int, int]:
    """``(h, w, k_h, k_w, s_h, s_w, h_out, w_out)`` of a convolution or pooling window."""
    h, w = positive(p, "h"), positive(p, "w")
    k_h, k_w = positive(p, "k_h"), positive(p, "k_w")
    s_h, s_w = positive(p, "s_h", 1), positive(p, "s_w", 1)
    d_h, d_w = (positive(p, "d_h", 1), positive(p, "d_w", 1)) if dilated else (1, 1)
    pt, pl, pb, pr = _pads(p, k_h, k_w, d_h, d_w)
    h_out = conv_out(h, k_h, s_h, d_h, pt, pb)
    w_out = conv_out(w, k_w, s_w, d_w, pl, pr)
    if h_out < 1 or w_out < 1:
        raise LayerSpecError(
            f"window {k_h}x{k_w} (dilation {d_h}x{d_w}) does not fit input {h}x{w} with pads {pt, pl, pb, pr}"
        )
    return h, w, k_h, k_w, s_h, s_w, h_out, w_out


#: why :func:`window_renders` refuses a window (a type's ``render_limits``)
WINDOW_RENDER_LIMITS = "TensorFlow, hence TFLite, has no convolution that is dilated and strided at once"


def window_renders(p: Mapping[str, Any], model_format: str) -> bool:
    """Whether a dilated window renders to ``model_format``: not a dilated, strided one in TFLite
    (:data:`WINDOW_RENDER_LIMITS`; its converter refuses them, so no TFLite network holds one
    either); ONNX has them."""
    if model_format != "tflite":
        return True
    return max(opt_int(p, "d_h", 1), opt_int(p, "d_w", 1)) == 1 or max(opt_int(p, "s_h", 1), opt_int(p, "s_w", 1)) == 1


def same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TensorFlow SAME padding along one axis: (begin, end), end >= begin."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _padding_name(h: int, w: int, k_h: int, k_w: int, s_h: int, s_w: int, d_h: int, d_w: int,
                  pads: tuple[int, int, int, int]) -> str:
    if pads == (0, 0, 0, 0):
        return "valid"
    (t, b), (l, r) = same_pads(h, k_h, s_h, d_h), same_pads(w, k_w, s_w, d_w)
    if pads == (t, l, b, r):
        return "same"
    return "explicit"


def flag01(p: Mapping[str, Any], key: str) -> int:
    """Raw param ``key`` as a 0/1 switch (0 when absent); a LayerSpecError otherwise."""
    v = nonneg(p, key, 0)
    if v > 1:
        raise LayerSpecError(f"{key} must be 0 or 1, got {v}")
    return v


def opt_int(p: Mapping[str, Any], key: str, default: int) -> int:
    """Raw param ``key`` as an int, ``default`` when absent or None (no checks: for
    parameters the type's count has validated)."""
    v = p.get(key)
    return default if v is None else int(v)


def window_attrs(p: Mapping[str, Any], *, dilated: bool) -> dict[str, Any]:
    """A window's attributes for a model-IR op (``bench.modelgen``): kernel, strides,
    dilation, pads (top, left, bottom, right) and whether they are SAME, VALID or explicit."""
    k_h, k_w = int(p["k_h"]), int(p["k_w"])
    s_h, s_w = opt_int(p, "s_h", 1), opt_int(p, "s_w", 1)
    d_h, d_w = (opt_int(p, "d_h", 1), opt_int(p, "d_w", 1)) if dilated else (1, 1)
    dt, dl = d_h * (k_h - 1) // 2, d_w * (k_w - 1) // 2  # the vocabulary's default pads
    pads = (opt_int(p, "p_t", dt), opt_int(p, "p_l", dl), opt_int(p, "p_b", dt), opt_int(p, "p_r", dl))
    a: dict[str, Any] = dict(k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w, pads=pads)
    if dilated:
        a.update(d_h=d_h, d_w=d_w)
    a["padding"] = _padding_name(int(p["h"]), int(p["w"]), k_h, k_w, s_h, s_w, d_h, d_w, pads)
    return a


def io_bytes(in_elems: int, out_elems: int, params: int, elem_bytes: int) -> int:
    """Bytes moved: (input elements + output elements + parameters) x element size."""
    return (in_elems + out_elems + params) * elem_bytes


def align(c: int) -> int:
    """Channel alignment feature: the largest power of two dividing ``c``, at most 16.
    CPU kernels vectorise over channels (ONNX Runtime's NCHWc convolutions need multiples
    of the 16-lane AVX-512 block, its depthwise kernel is 5-10x slower per channel off
    multiples of 4), so two convolutions a few channels apart can differ severalfold."""
    return math.gcd(int(c), 16)


def fused_act(p: Mapping[str, Any]) -> str | None:
    """The fused activation kind named by raw param ``act`` (``None``: no activation)."""
    a = p.get("act")
    if a is None or a in ("", "none"):
        return None
    if not isinstance(a, str) or a not in ACTIVATION_KINDS:
        raise LayerSpecError(f"unknown activation {a!r} for param 'act'; known: none, {', '.join(ACTIVATION_KINDS)}")
    return a


def act_code(p: Mapping[str, Any]) -> float:
    """The ``act`` feature: the fused activation's code, -1 for none."""
    a = fused_act(p)
    return -1.0 if a is None else float(ACTIVATION_KINDS[a])


def cold(p: Mapping[str, Any]) -> float:
    """The ``cold`` feature: 1 for a row measured after a cache flush (``bench profile
    --cold-from``) or a layer the estimator predicts as read from DRAM."""
    return float(nonneg(p, "cold", 0) > 0)


def dims_text(*v: Any) -> str:
    """``56x56`` (:meth:`estimator.layers.registry.LayerTypeSpec.brief`'s sizes)."""
    return "x".join(str(int(x)) for x in v)
