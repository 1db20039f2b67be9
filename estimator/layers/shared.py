"""Bases that families of layer types share (each type still is its own module):
window pools, binary element-wise ops, and memory-bound ops counted by elements moved."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .importing import (Draft, ImpossibleShapeError, Unsupported, attrs, check_window, last_axis_rows,
                        window_params)
from .ir import Op
from .params import LayerSpecError, act_code, dims_text, flag01, io_bytes, nonneg, opt_int, positive, window, window_attrs
from .registry import NCHW, ChannelAxis, LayerCounts, LayerTypeSpec, rows_carry

__all__ = ["WindowPool", "BinaryEltwise", "MemoryBound", "is_depthwise_conv", "conv_draft", "gemm_dims", "generic_draft"]


#: Activation kinds several producer types fuse on one runtime (their
#: :attr:`~estimator.layers.registry.LayerTypeSpec.fused_activations`). ONNX Runtime (CPU, graph
#: optimisation 'all'): a convolution's MLAS kernel applies these inside or as a pass over its
#: output; SiLU and GELU stay kernels of their own.
ORT_CONV_ACTS = ("clip", "hardsigmoid", "hardswish", "leakyrelu", "relu", "relu6", "sigmoid", "tanh")
#: LiteRT (XNNPACK), for networks converted by ``bench.tflite_convert``: what stays the
#: operator's fused activation function (ReLU, ReLU6, ReLU_N1_TO_1), which XNNPACK applies as the
#: kernel's output clamp; ``clip`` in its benchmarked range (-1, 1). Every other kind stays an
#: operator of its own (LOGISTIC, HARD_SWISH, LOGISTIC + MUL for SiLU, TANH, LEAKY_RELU, ...).
#: Checked by converting producer -> activation -> convolution for every kind
#: (``tests/test_tflite_models.py``). With every activation folded, an adapted LiteRT profile
#: predicted SiLU and hard-swish convolutions like ReLU ones: the ``mobilenet`` NAS space's
#: samples 12 % under their measured time, their ReLU variants 9 %.
LITERT_CLAMP_ACTS = ("clip", "relu", "relu6")
#: Vela for an Ethos-U target: the TFLite converter fuses ReLU/ReLU6/ReLU_N1_TO_1 (and clips)
#: into CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, ADD and MUL; Vela's graph optimiser moves
#: LUT activations (LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU) into the preceding NPU operation when
#: it is its only consumer and has no activation yet (``fuse_activation_function_with_prev``).
#: HardSigmoid (``relu6(x + 3) / 6``) folds its ``+3`` into the bias and its ReLU6 into the op;
#: the ``/6`` stays a MUL on the (usually 1x1) SE gate. SiLU does not fold: the producer's output
#: has two consumers (LOGISTIC and MUL), so it stays a layer of its own.
VELA_FUSED_ACTS = ("clip", "hardsigmoid", "hardswish", "leakyrelu", "relu", "relu6", "sigmoid", "tanh")
#: The convolutions' (``conv2d``, ``dwconv2d``) ``fused_activations``: on LiteRT a convolution's
#: HardSigmoid folds too (its ``+3`` into the bias, ReLU6 fused, the ``/6`` into the consumer's
#: weights).
CONV_FUSED_ACTIVATIONS = {"onnxruntime": ORT_CONV_ACTS, "litert": tuple(sorted((*LITERT_CLAMP_ACTS, "hardsigmoid"))),
                          "vela": VELA_FUSED_ACTS}


class WindowPool(LayerTypeSpec):
    """max or average pooling over a k_h x k_w window; IR op kind = the type's name."""

    features = ("h", "w", "c", "k_h", "k_w", "s_h", "s_w")
    ops_unit = "window-ops"
    through_channels = "c"
    required = ("h", "w", "c", "k_h", "k_w")
    benchable = True
    sampled = True

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        return f"{dims_text(g('h'), g('w'))} c{g('c')} k{dims_text(g('k_h'), g('k_w'))} s{dims_text(g('s_h', 1), g('s_w', 1))}"

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n = positive(p, "n", 1)
        h, w, k_h, k_w, s_h, s_w, h_out, w_out = window(p, dilated=False)
        c = positive(p, "c")
        out = n * c * h_out * w_out
        feats = dict(h=h, w=w, c=c, k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
        return LayerCounts(feats, 0, 0, float(out * k_h * k_w), io_bytes(n * h * w * c, out, 0, eb),
                           (n, c, h_out, w_out))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        return [Op(self.name, "lum", tuple(ins), out_name, out_shape, window_attrs(p, dilated=False))]

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A 1-D or 2-D pool; ceil mode extends the bottom/right pads so that floor-mode
        counting gives ONNX's output size (flag ``ceil_mode``)."""
        x = n.input[0]
        xs = g.shape(x)
        if xs is None:
            raise Unsupported("unknown_shape")
        if len(xs) not in (3, 4):
            raise Unsupported(f"pool{len(xs) - 2}d")
        a = attrs(n)
        d = g.base(n, self.name)
        d.outputs = d.outputs[:1]
        k = list(a.get("kernel_shape", []))
        if len(k) != len(xs) - 2:
            raise Unsupported("bad_kernel_shape")
        win = window_params(n, d, xs, k)
        if any(v != 1 for v in a.get("dilations", [])):
            d.flag("dilated_pool")
        ys = g.shape(n.output[0])
        if a.get("ceil_mode", 0):
            d.flag("ceil_mode")
            if ys is not None and len(ys) == len(xs):
                outs = list(ys[2:]) if len(ys) == 4 else [1, ys[2]]
                for (size, kk, s, pb, pe, o) in (("h", "k_h", "s_h", "p_t", "p_b", 0), ("w", "k_w", "s_w", "p_l", "p_r", 1)):
                    need = (outs[o] - 1) * win[s] + win[kk] - win[size] - win[pb]
                    win[pe] = max(win[pe], need)
        check_window(n, win, dilated=False)
        win.pop("d_h"), win.pop("d_w")
        if len(xs) == 3:
            d.flag("pool1d")
        n_, c = xs[0], xs[1]
        if n_ > 1:
            d.flag("batch_gt_1")
        d.params = dict(n=n_, c=c, **win)
        d.check_shape = True
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        k_h, k_w = space.kernel(r, pool=True, prior=prior)
        if prior and k_h == 5 and r.random() < 0.5:
            s_h, s_w = 1, 1  # SPPF 5x5/1
        elif r.random() < (0.6 if prior else 0.4):
            s_h, s_w = (2, 2) if k_h > 1 else (1, 1)  # 2x2/2, 3x3/2
        else:
            s_h, s_w = space.strides(r, prior)
        p = dict(h=h, w=w, c=space.channels(r, prior=prior, h=h), k_h=k_h, k_w=k_w, s_h=s_h, s_w=s_w)
        p.update(space.pads(r, h, w, k_h, k_w, s_h, s_w, prior=prior))
        return p


class BinaryEltwise(LayerTypeSpec):
    """Element-wise binary op, optionally broadcast, with a fused activation.

    Smart padding: with equal shapes, two inputs each from its own pad-in conv 1 -> c
    reading the same 1-channel graph input (no extra data transfer); with a broadcast
    operand (``broadcast=1``: SE-style ``(1, c, 1, 1)``, or ``elems_b=1``: ``(1, 1, 1, 1)``)
    that operand comes from its own pad-in conv from a ``(1, 1, 1, 1)`` graph input, like the
    SE branch it stands for. With a constant second operand (raw param ``const_b=1``: a
    weight such as a layer scale, a normalisation's shift, a detector's grid) the LUM reads
    one activation input and the operand is a constant of the shape ``broadcast`` and
    ``elems_b`` give: on an NPU such an operand is fetched from flash or DRAM and broadcast
    by the compiler, which costs an Ethos-U 5-6x the same op on two activation tensors.
    Feature ``const_b`` codes the constant's kind: 0 none, 1 a scalar, 2 per channel, 3 the
    full shape."""

    features = ("h", "w", "c", "broadcast", "act", "const_b")
    ops_unit = "elements"
    through_channels = "c"
    required = ("h", "w", "c")
    benchable = True
    takes_act = True
    sampled = True
    #: Share of broadcast draws.
    p_broadcast: float = 0.0

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        return (f"{dims_text(g('h'), g('w'))} c{g('c')}" + (" bcast" if g("broadcast") else "")
                + (" batchnorm" if g("batchnorm") else " const" if g("const_b") else ""))

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        bc = nonneg(p, "broadcast", 0)  # 0: same shapes, 1: second input broadcast (e.g. SE scale, bias)
        out = n * h * w * c
        second = out if bc == 0 else positive(p, "elems_b", c)
        # Constant parameter operands, e.g. a standalone BatchNormalization's scale and shift.
        cp = nonneg(p, "const_params", 0)
        # the constant operand's kind (a feature): 0 none, 1 a scalar, 2 per channel, 3 the full shape; an Ethos-U
        # folds a scalar multiply into its rescale (0 ms without an activation) and fetches a per-channel one
        kind = 0 if not flag01(p, "const_b") else 3 if bc == 0 else 1 if second == 1 else 2
        feats = dict(h=h, w=w, c=c, broadcast=float(bc > 0), act=act_code(p), const_b=float(kind))
        feats.update(self.extra_features(p))
        return LayerCounts(feats, 0, cp, float(out), io_bytes(out + second, out, cp, eb), (n, c, h, w))

    def extra_features(self, p: Mapping[str, Any]) -> dict[str, float]:
        """Features of a subclass beyond the shared ones (:attr:`features` lists them)."""
        return {}

    def with_flags(self, p: Mapping[str, Any], flags: Sequence[str]) -> dict[str, Any]:
        """A constant operand (the importer's flag ``const_operand``) is raw param ``const_b``."""
        return {**p, "const_b": 1} if "const_operand" in flags else dict(p)

    def _operand_b(self, p: Mapping[str, Any]) -> NCHW:
        c, h, w = int(p["c"]), int(p["h"]), int(p["w"])
        if not opt_int(p, "broadcast", 0):
            return (1, c, h, w)
        eb = opt_int(p, "elems_b", c)
        if eb not in (c, 1):
            raise LayerSpecError(f"broadcast operand with elems_b={eb} cannot be benchmarked; "
                                 f"use elems_b={c} (shape (1,c,1,1)) or 1")
        return (1, eb, 1, 1)

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """Where its rows fold the channels with a leading axis (MobileViT's patches times
        attention's heads), the parameter that holds them."""
        return rows_carry(p, in_shape, at) if list(in_shape) == list(out_shape) else None

    def with_channels(self, p: Mapping[str, Any], port: str | int, n: int) -> dict[str, Any]:
        """A broadcast operand of ``c`` elements (an SE scale) follows the channels."""
        q = super().with_channels(p, port, n)
        if opt_int(p, "broadcast", 0) and opt_int(p, "elems_b", int(p["c"])) == int(p["c"]) and "elems_b" in p:
            q["elems_b"] = int(n)
        return q

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        x = (1, int(p["c"]), int(p["h"]), int(p["w"]))
        b = self._operand_b(p)
        return (x,) if flag01(p, "const_b") else (x, b)

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        if flag01(p, "const_b"):  # the operand is an initializer of the model (IR attr ``const``)
            return [Op(self.name, "lum", tuple(ins[:1]), out_name, out_shape, {"const": self._operand_b(p)}, act)]
        return [Op(self.name, "lum", tuple(ins), out_name, out_shape, {}, act)]

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A two-input element-wise node; an operand of fewer elements is broadcast
        (``elems_b``), a constant operand is flagged ``const_operand``. A tensor of rank 5 or
        more with a scalar operand (attention's scale over a MobileViT block's patches,
        ``(b, patches, heads, tokens, tokens)``) is its rows, ``(c, h, w)`` = (the leading
        dimensions' product, the last two), as the softmax it feeds is."""
        ins = n.input
        if len(ins) != 2 or not ins[0] or not ins[1]:
            ins = [x for x in ins if x]
            if len(ins) != 2:
                return None
        a, b = ins
        d = g.base(n, self.name)
        out = n.output[0]
        g.rows_params(d, out)
        size_a, size_b, total = g.elems(a), g.elems(b), g.elems(out)
        if size_a is None or size_b is None or total is None:
            d.flag("unknown_shape")
            return d
        small, big = sorted((int(size_a), int(size_b)))
        if small != total or big != total:
            d.params.update(broadcast=1, elems_b=max(small, 1))
        ys = g.shape(out)
        if small == 1 and ys is not None and len(ys) >= 5:  # a scalar operand: the layout is the rows'
            last_axis_rows(d, ys)
        if g.is_static(a) or g.is_static(b):
            d.flag("const_operand")
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        p: dict[str, Any] = dict(h=h, w=w, c=space.channels(r, prior=prior, h=h))
        if r.random() < self.p_broadcast:
            p["broadcast"] = 1
        return p


class MemoryBound(LayerTypeSpec):
    """A layer counted by the elements it moves: input ``(n, h, w, c)``, optionally
    ``elems_out`` output elements, plus integer features :attr:`extra`."""

    ops_unit = "elements"
    required = ("h", "w", "c")
    #: Whether the output size is a raw param (``elems_out``) and a feature.
    with_out: bool = False
    #: Further integer raw params that are features (0 by default).
    extra: tuple[str, ...] = ()

    def brief(self, p: Mapping[str, Any]) -> str:
        g = p.get
        s = f"{dims_text(g('h'), g('w'))} c{g('c')}" + (f" -> {g('elems_out')}" if self.with_out and g("elems_out") else "")
        return s + "".join(f" {k}={g(k)}" for k in self.extra if g(k))

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w, c = positive(p, "n", 1), positive(p, "h"), positive(p, "w"), positive(p, "c")
        in_el = n * h * w * c
        out_el = positive(p, "elems_out", in_el) if self.with_out else in_el
        feats: dict[str, float] = dict(h=h, w=w, c=c)
        if self.with_out:
            feats["elems_out"] = out_el
        for key in self.extra:
            feats[key] = nonneg(p, key, 0)
        return LayerCounts(feats, 0, 0, float(max(in_el, out_el)), io_bytes(in_el, out_el, 0, eb), (out_el,))


# ------------------------------------------------------------------------ ONNX patterns


def is_depthwise_conv(n: Any, g: Any) -> bool:
    """Whether Conv node ``n`` is depthwise (groups = input channels, output a multiple)."""
    xs, ws = g.shape(n.input[0]), g.shape(n.input[1])
    if xs is None or ws is None or len(xs) < 2:
        return False
    groups = int(attrs(n).get("group", 1))
    return groups > 1 and groups == xs[1] and ws[0] % xs[1] == 0


def conv_draft(n: Any, g: Any, layer_type: str) -> Draft:
    """A Conv node (1-D or 2-D), with a BatchNormalization right after it folded in where the
    device's rules fold it (onnxsim folds it first where it can): conv2d params, or dwconv2d's
    (``c``, ``multiplier``) for ``layer_type`` dwconv2d."""
    x, w = n.input[0], n.input[1]
    xs, ws = g.shape(x), g.shape(w)
    if xs is None or ws is None:
        raise Unsupported("unknown_shape")
    if len(xs) not in (3, 4):
        raise Unsupported(f"conv{len(xs) - 2}d")
    d = g.base(n, layer_type)
    d.inputs = [g.canon(x)] if not g.is_static(x) else []
    if not g.is_static(w):
        d.flag("dynamic_weight")
    if len(xs) == 3:
        d.flag("conv1d")
    groups = int(attrs(n).get("group", 1))
    c_in, c_out = xs[1], ws[0]
    win = window_params(n, d, xs, list(ws[2:]))
    check_window(n, win, dilated=True)
    if groups < 1 or c_in % groups or c_out % groups:
        raise ImpossibleShapeError(
            f"impossible shapes: node {n.name!r} (Conv): group={groups} does not divide the {c_in} input "
            f"channels and the {c_out} output channels (input {'x'.join(map(str, xs))}, "
            f"weight {'x'.join(map(str, ws))})")
    if len(ws) != len(xs) or ws[1] * groups != c_in:
        raise ImpossibleShapeError(
            f"impossible shapes: node {n.name!r} (Conv): the weight {'x'.join(map(str, ws))} (group={groups}) does not "
            f"fit the input {'x'.join(map(str, xs))}: it needs rank {len(xs)} and {c_in // groups} input channels per group")
    bias = 1 if len(n.input) > 2 and n.input[2] else 0
    out = g.canon(n.output[0])
    cons = g.cons(out)
    if (g.rules.bn_into_conv and len(cons) == 1 and cons[0].op_type == "BatchNormalization"
            and out not in g.graph_outputs and all(g.is_static(i) for i in cons[0].input[1:5] if i)
            and cons[0].name not in g.claimed):
        bn = cons[0]
        d.nodes.append(bn.name)
        d.outputs = [g.canon(bn.output[0])]
        d.flag("bn_folded")
        bias = 1
    n_ = xs[0]
    if n_ > 1:
        d.flag("batch_gt_1")
    if layer_type == "dwconv2d":
        d.params = dict(n=n_, c=c_in, multiplier=c_out // c_in, bias=bias, **win)
    else:
        d.params = dict(n=n_, c_in=c_in, c_out=c_out, groups=groups, bias=bias, **win)
    d.check_shape = True
    return d


def generic_draft(n: Any, g: Any, layer_type: str, **extra: int) -> Draft:
    """A one-input node counted by the elements it moves: ``(h, w, c)`` of its input, leading
    dimensions as rows."""
    d = g.base(n, layer_type)
    d.inputs = [g.canon(n.input[0])]
    g.rows_params(d, n.input[0])
    d.params.update(extra)
    return d


def gemm_dims(n: Any, g: Any) -> tuple[int, int, int, int, int]:
    """``(m, k, n_cols, batch, bias)`` of a Gemm or MatMul node; a MatMul of ``(..., M, K)``
    by a constant ``(K, N)`` is a linear layer over all leading dims (batch 1, m rows)."""
    sa, sb = g.shape(n.input[0]), g.shape(n.input[1])
    if sa is None or sb is None:
        raise Unsupported("unknown_shape")
    if n.op_type == "Gemm":
        at = attrs(n)
        m, k = (sa[1], sa[0]) if at.get("transA", 0) else (sa[0], sa[1])
        cols = sb[0] if at.get("transB", 0) else sb[1]
        return m, k, cols, 1, 1 if len(n.input) > 2 and n.input[2] else 0
    a_ = sa if len(sa) > 1 else (1, *sa)
    b_ = sb if len(sb) > 1 else (*sb, 1)
    m, k, cols = a_[-2], a_[-1], b_[-1]
    rows = math.prod(a_[:-2])
    if len(b_) == 2 and g.is_static(n.input[1]):
        return m * rows, k, cols, 1, 0
    return m, k, cols, max(rows, math.prod(b_[:-2])), 0
