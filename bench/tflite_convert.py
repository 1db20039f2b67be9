"""Whole networks to TFLite: ONNX (or a zoo network built in torch) -> full-integer int8
(or float32) TFLite, offline, for the Vela cost model and for LiteRT/Ethos-U/VX boards.

Needs TensorFlow (the ``tflite`` extra); nothing on the estimation path imports this module.

.. code-block:: python

    from bench.tflite_convert import convert_onnx, convert_zoo

    tfl = convert_zoo("mobilenet_v2", 224)                     # int8, seeded calibration
    tfl = convert_onnx("model.onnx", calibration=my_batches)   # your own representative data

    python -m bench.tflite_convert model.onnx -o model.tflite   # the same from a shell
    python -m bench.tflite_convert --zoo resnet18 --resolution 224 -o resnet18.tflite

Why our own converter
---------------------
The alternatives were checked: ``onnx2tf`` (PyPI) drags in ``onnx_graphsurgeon``,
``sng4onnx``, ``psutil``, ``tf-keras`` and its own pins of TensorFlow/onnx, and its int8
path fetches a calibration image set from the network unless one is supplied; ``onnx-tf``
is unmaintained since 2022; ``ai-edge-torch``/``litert-torch`` needs torch-xla-era pins
that clash with our exact torch pin. The networks we convert are our own (the zoo,
torch-exported ONNX simplified by onnxsim), whose operators form a small set, so this
module renders the simplified ONNX graph directly as a TensorFlow function and lets the
TFLite converter quantise it with a representative dataset. Unsupported operators are
refused with :class:`ConversionError` naming them, never skipped.

Layouts: every tensor carries a permutation
-------------------------------------------
ONNX is NCHW; TFLite kernels (and Ethos-U, VX) are NHWC. Instead of wrapping every
layout-sensitive op in transposes, each tensor is held as ``(value, perm)`` where
``value = transpose(onnx_tensor, perm)``: rank-4 feature maps live as NHWC
(``perm = (0, 2, 3, 1)``), everything else starts in ONNX order. Consequences:

* Conv, pooling, resize and BatchNormalization take NHWC directly;
* an ONNX ``Transpose`` only relabels the permutation (no TFLite op);
* a ``Reshape`` is done in the stored order when the dimensions it merges or splits are
  contiguous and in order there (so ``(1, C, H, W) -> (1, 3, C/3, H, W)`` of a YOLO head
  is a plain RESHAPE of the NHWC tensor); otherwise one TRANSPOSE brings just those
  dimensions together first (ShuffleNet's channel shuffle becomes RESHAPE, one TRANSPOSE,
  RESHAPE, as in a network written for TFLite);
* axes of Concat/Split/Slice/Reduce*/Softmax/Pad are mapped through the permutation;
  constants are permuted in NumPy (free);
* graph inputs of rank 4 are NHWC (as TFLite models are fed); outputs of rank 4 stay
  NHWC (``nhwc_outputs=True``, the default) and other outputs are in ONNX order.

Padding: TFLite knows SAME and VALID. ONNX pads equal to either map directly. PyTorch's
symmetric pads with stride 2 (``k=3, p=1, s=2`` on an even size) give the same output
shape as SAME but place the border row at the other end; by default such ops use SAME
(the same work and the same op, which is what a network written in TensorFlow has, and
what the smart-padding benchmark models use, see :mod:`bench.tflite_models`). With
``exact_padding=True`` an explicit PAD precedes a VALID op instead, and the float32 model
then matches ONNX Runtime to rounding (this is what the tests check). Max pools pad with
edge values (``SYMMETRIC``), which equals ONNX's -inf padding for the windows PyTorch
builds (including ``ceil_mode``); average pools with explicit pads count the zeros.

Grouped convolutions (1 < groups < channels): in float32 one CONV_2D with grouped filters
(``(kh, kw, c_in / groups, c_out)``), the kernel LiteRT's CPU runs and the one the smart-padding
benchmark models of :mod:`bench.tflite_models` measure; in int8, ``groups`` convolutions and a
concatenation, since Vela refuses grouped CONV_2D. Split in float32 too, the networks timed had
other kernels than the layer rows: RegNet-X-400MF took 10.4 and 6.6 ms on LiteRT at 224 and 160
split, 9.1 and 5.1 ms grouped, and a LiteRT profile's estimates missed it by -21 and -24 %.

Quantisation: full-integer post-training quantisation (``TFLITE_BUILTINS_INT8`` only,
int8 inputs and outputs) calibrated on ``calibration`` (a sequence of samples, each one
array per graph input in ONNX layout, NCHW) or, by default, on ``calibration_samples``
seeded N(0, 1) inputs (the ImageNet-normalised range our zoo networks expect). The same
graph, options and seed always give the same bytes.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from estimator.errors import UserError


class ConversionError(UserError):
    """The network contains something this converter cannot render (the message says what)."""


# One guarded TensorFlow import, error class, quantisation list and converter for all TFLite
# writing: bench.tflite_models (which raises MissingTFLiteExtraError without the extra).
from .tflite_models import QUANTIZATIONS, MissingTFLiteExtraError, convert_concrete_function, tf  # noqa: E402

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

__all__ = [
    "ConversionError",
    "MissingTFLiteExtraError",
    "QUANTIZATIONS",
    "SUPPORTED_OPS",
    "convert_onnx",
    "convert_zoo",
    "prepare_onnx",
    "tf_function_from_onnx",
    "calibration_inputs",
    "tflite_io",
    "tflite_ops",
    "main",
]

NHWC = (0, 2, 3, 1)


# ------------------------------------------------------------------- permutation helpers


def _inv(p: Sequence[int]) -> tuple[int, ...]:
    out = [0] * len(p)
    for i, a in enumerate(p):
        out[a] = i
    return tuple(out)


def _ident(n: int) -> tuple[int, ...]:
    return tuple(range(n))


@dataclass
class _T:
    """A tensor: ``value = transpose(onnx_tensor, perm)``."""

    value: Any
    perm: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.perm)

    def onnx_shape(self) -> tuple[int, ...]:
        s = [int(d) for d in self.value.shape]
        inv = _inv(self.perm)
        return tuple(s[inv[i]] for i in range(len(s)))


def _nonunit_order(shape: Sequence[int], perm: Sequence[int]) -> list[int]:
    """The order in which the ONNX dims of size > 1 lie in memory for a stored perm."""
    return [a for a in perm if shape[a] != 1]


def _to_perm(t: _T, perm: Sequence[int]) -> Any:
    """The value of ``t`` stored with ``perm`` (a reshape when only unit dims move)."""
    perm = tuple(perm)
    if t.perm == perm:
        return t.value
    shape = t.onnx_shape()
    if _nonunit_order(shape, t.perm) == _nonunit_order(shape, perm):
        return tf.reshape(t.value, [shape[a] for a in perm])
    # value dims are onnx dims t.perm; we want onnx dims perm: value-axis of onnx dim a is t.perm.index(a)
    pos = _inv(t.perm)
    return tf.transpose(t.value, [pos[a] for a in perm])


def _const_to_perm(c: np.ndarray, rank: int, perm: Sequence[int]) -> np.ndarray:
    """A NumPy constant broadcast-aligned to ``rank`` (ONNX rules), stored with ``perm``."""
    c = np.asarray(c)
    if c.ndim > rank:
        raise ConversionError(f"constant of rank {c.ndim} broadcast to rank {rank}")
    c = c.reshape((1,) * (rank - c.ndim) + c.shape)
    return np.ascontiguousarray(np.transpose(c, perm))


def _reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Split a reshape into groups (input dims, output dims) with equal products.

    Unit dims are attached to a neighbouring group. ``None`` if the shapes do not factor.
    """
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    n, m = len(src), len(dst)
    while i < n or j < m:
        gi: list[int] = []
        gj: list[int] = []
        pi = pj = 1
        # take at least one dim from each side unless a side is exhausted
        if i < n:
            gi.append(i)
            pi *= src[i]
            i += 1
        if j < m:
            gj.append(j)
            pj *= dst[j]
            j += 1
        while pi != pj:
            if pi < pj and i < n:
                gi.append(i)
                pi *= src[i]
                i += 1
            elif pj < pi and j < m:
                gj.append(j)
                pj *= dst[j]
                j += 1
            else:
                return None
        groups.append((gi, gj))
    return groups


def _reshape(t: _T, dst: Sequence[int]) -> _T:
    """ONNX Reshape of ``t`` to ``dst``, done in the stored layout when possible."""
    src = t.onnx_shape()
    dst = [int(d) for d in dst]
    if math.prod(src) != math.prod(dst):
        raise ConversionError(f"reshape {src} -> {dst} changes the element count")
    groups = _reshape_groups(src, dst)
    if groups is None:  # pragma: no cover - prod equal always factors
        v = _to_perm(t, _ident(t.rank))
        return _T(tf.reshape(v, dst), _ident(len(dst)))
    def contiguous(order: Sequence[int]) -> bool:
        nz = [d for d in order if src[d] != 1]
        for gi, _ in groups:
            ps = [nz.index(d) for d in gi if src[d] != 1]
            if ps != sorted(ps) or (ps and ps[-1] - ps[0] != len(ps) - 1):
                return False
        return True

    stored = list(t.perm)
    value = t.value
    if not contiguous(stored):
        # bring each group's dims together, in order, at the position of its first member
        order: list[int] = []
        owner = {d: k for k, (gi, _) in enumerate(groups) for d in gi}
        for d in stored:
            if d in order:
                continue
            order += [e for e in groups[owner[d]][0] if e not in order]
        value = _to_perm(t, order)
        stored = order

    # groups in stored order (a group without input dims follows the group before it)
    keys: list[float] = []
    for k, (gi, _) in enumerate(groups):
        if gi:
            big = [d for d in gi if src[d] != 1] or gi
            keys.append(float(stored.index(big[0])))
        else:
            keys.append((keys[-1] if keys else -1.0) + 1e-3 * (k + 1))
    gorder = sorted(range(len(groups)), key=lambda k: keys[k])
    new_perm: list[int] = []
    for k in gorder:
        new_perm += groups[k][1]
    new_shape = [dst[d] for d in new_perm]
    return _T(tf.reshape(value, new_shape), tuple(new_perm))


def _sanitize(name: str) -> str:
    s = "".join(ch if ch.isalnum() or ch in "_.-/" else "_" for ch in name).strip("/")
    if not s or not (s[0].isalnum() or s[0] == "."):
        s = "n" + s
    return s


# -------------------------------------------------------------------------- ONNX front


def prepare_onnx(src: Any, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 simplify: bool = True) -> onnx.ModelProto:
    """Load an ONNX model (path, bytes or ModelProto), fix input shapes and simplify it
    with onnxsim (constant folding, BN folding), falling back to the original graph."""
    if isinstance(src, onnx.ModelProto):
        model = src
    elif isinstance(src, (bytes, bytearray, memoryview)):
        model = onnx.load_from_string(bytes(src))
    else:
        p = Path(src)
        if not p.is_file():
            raise ConversionError(f"{p}: no such ONNX file")
        model = onnx.load(str(p))
    if input_shapes:
        for inp in model.graph.input:
            if inp.name in input_shapes:
                dims = inp.type.tensor_type.shape.dim
                for d, v in zip(dims, input_shapes[inp.name]):
                    d.ClearField("dim_param")
                    d.dim_value = int(v)
    if simplify:
        try:
            import onnxsim  # noqa: PLC0415

            simplified, ok = onnxsim.simplify(model)
            if ok:
                model = simplified
        except Exception:  # noqa: BLE001 - the unsimplified graph still converts (BN is handled)
            pass
    return _fuse_gelu(model)


def _fuse_gelu(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each exact GELU (the Erf form torch exports) as one ``Gelu`` node: LiteRT has a GELU
    operator and no Erf. The GELUs are the ``gelu`` activation layers the estimator's importer
    finds (:class:`estimator.layers.activation`'s pattern, the one definition of a GELU); where
    onnxsim moved the 0.5 into the consumer's weights (four nodes, not five) the node carries
    ``scale`` 2. Other Erf nodes stay, and are refused."""
    g = model.graph
    if not any(n.op_type == "Erf" for n in g.node):
        return model
    from estimator.fusion import NO_FUSION  # noqa: PLC0415
    from estimator.onnx_import import load_network  # noqa: PLC0415

    seen: set[str] = set()
    for k, n in enumerate(g.node):  # unique names: the layers name their nodes
        if not n.name or n.name in seen:
            n.name = f"{n.op_type}_{k}"
        seen.add(n.name)
    index = {n.name: k for k, n in enumerate(g.node)}
    drop: set[int] = set()
    replace: dict[int, onnx.NodeProto] = {}
    for layer in load_network(model, fusion=NO_FUSION, simplify=False).layers:
        chain = [index[n] for n in layer.nodes if n in index]
        if layer.type != "activation" or layer.params.get("kind") != "gelu" or len(chain) != len(layer.nodes) \
                or all(g.node[k].op_type != "Erf" for k in chain):
            continue  # the tanh form converts operator by operator
        head, last = g.node[chain[0]], g.node[chain[-1]]
        replace[chain[0]] = onnx.helper.make_node("Gelu", [head.input[0]], [last.output[0]], name=f"{head.name}/gelu",
                                                  scale=1.0 if len(chain) == 5 else 2.0)
        drop.update(chain[1:])
    if not replace:
        return model
    kept = []
    for k, n in enumerate(g.node):
        if k not in drop:
            kept.append(onnx.NodeProto())
            kept[-1].CopyFrom(replace.get(k, n))  # copies: clearing g.node releases its elements
    del g.node[:]
    g.node.extend(kept)
    return model


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _static_input_shapes(model: onnx.ModelProto, inits: set[str]) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = []
        for d in inp.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                raise ConversionError(f"input {inp.name!r} has a dynamic dimension "
                                      f"({d.dim_param or '?'}); give input_shapes")
        out.append((inp.name, tuple(dims)))
    return out


# ---------------------------------------------------------------------------- rendering


class _Graph:
    def __init__(self, model: onnx.ModelProto, exact_padding: bool, grouped_conv: bool = False) -> None:
        self.model = model
        self.exact = exact_padding
        self.grouped_conv = grouped_conv
        self.consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.inputs = _static_input_shapes(model, set(self.consts))
        self.env: dict[str, _T] = {}

    # ------------------------------------------------------------------ operands
    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str, what: str = "operand") -> np.ndarray:
        if name not in self.consts:
            raise ConversionError(f"{what} {name!r} must be a constant (computed at run time here)")
        return self.consts[name]

    def t(self, name: str) -> _T:
        if name in self.env:
            return self.env[name]
        if name in self.consts:
            c = self.consts[name]
            return _T(tf.constant(c), _ident(c.ndim))
        raise ConversionError(f"tensor {name!r} is used before it is produced")

    def nhwc(self, name: str) -> Any:
        t = self.t(name)
        if t.rank != 4:
            raise ConversionError(f"{name!r}: expected a rank-4 feature map, got rank {t.rank}")
        return _to_perm(t, NHWC)

    # ------------------------------------------------------------------- run
    def forward(self, *args: Any, nhwc_outputs: bool = True) -> Any:
        for (name, shape), x in zip(self.inputs, args):
            self.env[name] = _T(x, NHWC if len(shape) == 4 else _ident(len(shape)))
        for node in self.model.graph.node:
            fn = _OPS.get(node.op_type)
            if fn is None or node.domain not in ("", "ai.onnx"):
                raise ConversionError(f"ONNX operator {node.op_type!r} (node {node.name or node.output[0]!r}) "
                                      f"is not supported by bench.tflite_convert; supported: "
                                      f"{', '.join(sorted(_OPS))}")
            with tf.name_scope(_sanitize(node.name or node.output[0])):
                outs = fn(self, node, _attrs(node))
            if isinstance(outs, (_T, np.ndarray)):
                outs = [outs]
            for name, o in zip(node.output, outs):
                if isinstance(o, np.ndarray):
                    self.consts[name] = o
                else:
                    self.env[name] = o
        results = []
        for out in self.model.graph.output:
            t = self.t(out.name)
            perm = NHWC if (t.rank == 4 and nhwc_outputs) else _ident(t.rank)
            results.append(tf.identity(_to_perm(t, perm), name=_sanitize(out.name)))
        return results[0] if len(results) == 1 else tuple(results)


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _window(g: _Graph, node: onnx.NodeProto, x_shape: Sequence[int], k: Sequence[int], s: Sequence[int],
            d: Sequence[int], at: Mapping[str, Any], out_hw: Sequence[int] | None = None
            ) -> tuple[str, list[list[int]] | None]:
    """TF padding for a 2-D window op on an NHWC input: ("SAME"|"VALID", explicit pads)."""
    _, h, w, _ = x_shape
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("SAME_UPPER",):
        return "SAME", None
    if auto == "VALID":
        return "VALID", None
    if auto == "SAME_LOWER":
        raise ConversionError(f"{node.name}: auto_pad SAME_LOWER has no TFLite equivalent")
    pads = list(at.get("pads", [0, 0, 0, 0]))
    t, l, b, r = pads[0], pads[1], pads[2], pads[3]
    ceil = bool(at.get("ceil_mode", 0))

    def osz(n: int, kk: int, ss: int, dd: int, p0: int, p1: int) -> int:
        eff = (kk - 1) * dd + 1
        num = n + p0 + p1 - eff
        o = (-(-num // ss) if ceil else num // ss) + 1
        if ceil and (o - 1) * ss >= n + p0:  # PyTorch: the last window must start inside
            o -= 1
        return o

    want = (osz(h, k[0], s[0], d[0], t, b), osz(w, k[1], s[1], d[1], l, r))
    if out_hw is not None:
        want = tuple(out_hw)

    def same_pads(n: int, kk: int, ss: int, dd: int) -> tuple[int, int]:
        o = -(-n // ss)
        tot = max((o - 1) * ss + (kk - 1) * dd + 1 - n, 0)
        return tot // 2, tot - tot // 2

    (st, sb), (sl, sr) = same_pads(h, k[0], s[0], d[0]), same_pads(w, k[1], s[1], d[1])
    same_out = (-(-h // s[0]), -(-w // s[1]))
    valid_out = ((h - (k[0] - 1) * d[0] - 1) // s[0] + 1, (w - (k[1] - 1) * d[1] - 1) // s[1] + 1)
    if (t, l, b, r) == (0, 0, 0, 0) and valid_out == want:
        return "VALID", None
    if (t, l, b, r) == (st, sl, sb, sr) and same_out == want:
        return "SAME", None
    if not g.exact and same_out == want:
        return "SAME", None
    # explicit: pad so that a VALID window yields `want`
    eb = max((want[0] - 1) * s[0] + (k[0] - 1) * d[0] + 1 - (h + t), 0)
    er = max((want[1] - 1) * s[1] + (k[1] - 1) * d[1] + 1 - (w + l), 0)
    return "VALID", [[0, 0], [t, eb], [l, er], [0, 0]]


def _op_conv(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    x = g.nhwc(node.input[0])
    wt = g.const(node.input[1], "Conv weight").astype(np.float32)
    if wt.ndim != 4:
        raise ConversionError(f"{node.name}: only 2-D convolutions are supported (weight rank {wt.ndim})")
    bias = g.const(node.input[2], "Conv bias").astype(np.float32) if len(node.input) > 2 and node.input[2] else None
    c_out, cig, kh, kw = wt.shape
    c_in = int(x.shape[3])
    groups = int(at.get("group", 1))
    s = list(at.get("strides", [1, 1]))
    d = list(at.get("dilations", [1, 1]))
    padding, explicit = _window(g, node, [int(v) for v in x.shape], (kh, kw), s, d, at)
    if explicit is not None:
        x = tf.pad(x, explicit)
    if max(d) > 1 and max(s) > 1:
        raise ConversionError(f"{node.name}: TensorFlow cannot combine dilation {d} with stride {s}")
    strides = [1, s[0], s[1], 1]
    if groups == 1:
        y = tf.nn.conv2d(x, tf.constant(wt.transpose(2, 3, 1, 0)), strides, padding, dilations=d)
    elif groups == c_in and cig == 1 and c_out % c_in == 0:
        m = c_out // c_in
        dw = wt.reshape(c_in, m, kh, kw).transpose(2, 3, 0, 1)
        y = tf.nn.depthwise_conv2d(x, tf.constant(dw), strides, padding, dilations=d)
    elif g.grouped_conv:  # one CONV_2D with grouped filters (see the module docstring)
        y = tf.nn.conv2d(x, tf.constant(wt.transpose(2, 3, 1, 0)), strides, padding, dilations=d)
    else:
        xs = tf.split(x, groups, axis=3)
        og = c_out // groups
        ys = []
        for i, xi in enumerate(xs):  # the bias per group, so that it stays fused into each CONV_2D
            yi = tf.nn.conv2d(xi, tf.constant(wt[i * og:(i + 1) * og].transpose(2, 3, 1, 0)), strides, padding,
                              dilations=d)
            ys.append(tf.nn.bias_add(yi, tf.constant(bias[i * og:(i + 1) * og])) if bias is not None else yi)
        return _T(tf.concat(ys, axis=3), NHWC)
    if bias is not None:
        y = tf.nn.bias_add(y, tf.constant(bias))
    return _T(y, NHWC)


def _op_pool(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    x = g.nhwc(node.input[0])
    k = list(at["kernel_shape"])
    if len(k) != 2:
        raise ConversionError(f"{node.name}: only 2-D pooling is supported")
    s = list(at.get("strides", [1, 1]))
    d = list(at.get("dilations", [1, 1]))
    if max(d) > 1:
        raise ConversionError(f"{node.name}: dilated pooling has no TFLite builtin")
    padding, explicit = _window(g, node, [int(v) for v in x.shape], k, s, d, at)
    if explicit is not None:
        x = tf.pad(x, explicit, mode="SYMMETRIC" if node.op_type == "MaxPool" else "CONSTANT")
    ksize, strides = [1, k[0], k[1], 1], [1, s[0], s[1], 1]
    if node.op_type == "MaxPool":
        return _T(tf.nn.max_pool2d(x, ksize, strides, padding), NHWC)
    return _T(tf.nn.avg_pool2d(x, ksize, strides, padding), NHWC)


def _op_global(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    x = g.nhwc(node.input[0])
    f = tf.reduce_max if node.op_type == "GlobalMaxPool" else tf.reduce_mean
    return _T(f(x, axis=[1, 2], keepdims=True), NHWC)


def _op_reduce(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    axes = at.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(a) for a in g.const(node.input[1], "axes").reshape(-1)]
    axes = sorted(_axis(int(a), t.rank) for a in (axes if axes is not None else range(t.rank)))
    keep = bool(at.get("keepdims", 1))
    pos = _inv(t.perm)
    vaxes = [pos[a] for a in axes]
    f = {"ReduceMean": tf.reduce_mean, "ReduceMax": tf.reduce_max, "ReduceSum": tf.reduce_sum,
         "ReduceMin": tf.reduce_min}[node.op_type]
    y = f(t.value, axis=vaxes, keepdims=keep)
    if keep:
        return _T(y, t.perm)
    rest = [a for a in t.perm if a not in axes]
    ren = {a: i for i, a in enumerate(sorted(rest))}
    return _T(y, tuple(ren[a] for a in rest))


def _op_layernorm(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    """LayerNormalization (opset 17) as TFLite has it: mean, subtract, mean of squares,
    rsqrt, then the scale and bias constants (TFLite has no LayerNorm builtin)."""
    t = g.t(node.input[0])
    axis = _axis(int(at.get("axis", -1)), t.rank)
    pos = _inv(t.perm)
    vaxes = [pos[a] for a in range(axis, t.rank)]
    d = t.value - tf.reduce_mean(t.value, axis=vaxes, keepdims=True)
    y = d * tf.math.rsqrt(tf.reduce_mean(d * d, axis=vaxes, keepdims=True) + float(at.get("epsilon", 1e-5)))
    for i, inp in enumerate(node.input[1:3]):
        if inp:
            c = _const_to_perm(g.const(inp, "LayerNormalization parameter").astype(np.float32), t.rank, t.perm)
            y = y * tf.constant(c) if i == 0 else y + tf.constant(c)
    return _T(y, t.perm)


def _op_bn(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    scale, bias, mean, var = (g.const(n, "BatchNormalization parameter").astype(np.float64) for n in node.input[1:5])
    k = scale / np.sqrt(var + float(at.get("epsilon", 1e-5)))
    b = bias - mean * k
    shape = [1] * t.rank
    shape[1] = -1
    kk = _const_to_perm(k.reshape(shape).astype(np.float32), t.rank, t.perm)
    bb = _const_to_perm(b.reshape(shape).astype(np.float32), t.rank, t.perm)
    return _T(t.value * tf.constant(kk) + tf.constant(bb), t.perm)


def _hardsigmoid(x: Any, alpha: float, beta: float) -> Any:
    if abs(alpha - 1 / 6) < 1e-6 and abs(beta - 0.5) < 1e-6:
        return tf.nn.relu6(x + 3.0) * (1.0 / 6.0)
    return tf.clip_by_value(x * alpha + beta, 0.0, 1.0)


def _op_unary(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    x = t.value
    op = node.op_type
    if op == "Relu":
        y = tf.nn.relu(x)
    elif op == "Clip":
        lo = at.get("min")
        hi = at.get("max")
        if len(node.input) > 1 and node.input[1]:
            lo = float(g.const(node.input[1], "Clip min"))
        if len(node.input) > 2 and node.input[2]:
            hi = float(g.const(node.input[2], "Clip max"))
        lo = -math.inf if lo is None else float(lo)
        hi = math.inf if hi is None else float(hi)
        if lo == 0.0 and hi == 6.0:
            y = tf.nn.relu6(x)
        elif lo == 0.0 and hi == math.inf:
            y = tf.nn.relu(x)
        else:
            y = tf.clip_by_value(x, lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (
                tf.maximum(x, lo) if math.isfinite(lo) else tf.minimum(x, hi))
    elif op == "Sigmoid":
        y = tf.math.sigmoid(x)
    elif op == "Tanh":
        y = tf.math.tanh(x)
    elif op == "HardSigmoid":
        y = _hardsigmoid(x, float(at.get("alpha", 0.2)), float(at.get("beta", 0.5)))
    elif op == "HardSwish":
        y = x * tf.nn.relu6(x + 3.0) * (1.0 / 6.0)
    elif op == "LeakyRelu":
        y = tf.nn.leaky_relu(x, alpha=float(at.get("alpha", 0.01)))
    elif op == "Elu":
        y = tf.nn.elu(x)
    elif op == "Softplus":
        y = tf.math.softplus(x)
    elif op == "Gelu":  # exact, from prepare_onnx's fusion of the Erf form (_fuse_gelu)
        y = tf.nn.gelu(x, approximate=False)
        if float(at.get("scale", 1.0)) != 1.0:
            y = y * float(at["scale"])
    elif op == "Exp":
        y = tf.math.exp(x)
    elif op == "Neg":
        y = -x
    elif op in ("Identity", "Dropout"):
        y = x
    else:  # pragma: no cover - table and branches agree
        raise ConversionError(f"unary {op}")
    return _T(y, t.perm)


def _op_identity(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> Any:
    if g.is_const(node.input[0]):
        return g.consts[node.input[0]]
    return g.t(node.input[0])


def _op_prelu(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    slope = _const_to_perm(g.const(node.input[1], "PRelu slope").astype(np.float32), t.rank, t.perm)
    # Keras' formulation, which the converter matches into one PRELU op
    s = tf.constant(slope[0] if slope.ndim == t.rank and slope.shape[0] == 1 else slope)
    return _T(tf.nn.relu(t.value) + (-s) * tf.nn.relu(-t.value), t.perm)


def _op_binary(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> Any:
    names = list(node.input[:2])
    op = node.op_type
    if all(g.is_const(n) for n in names):  # constant folding onnxsim left behind
        a, b = (g.consts[n] for n in names)
        return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
                "Max": np.maximum, "Min": np.minimum}[op](a, b).astype(a.dtype)
    tensors = [g.t(n) for n in names if not g.is_const(n)]
    rank = max([t.rank for t in tensors] + [g.consts[n].ndim for n in names if g.is_const(n)])
    # the layout of the largest tensor operand (by element count) wins
    ref = max((t for t in tensors if t.rank == rank), key=lambda t: math.prod(t.onnx_shape()), default=None)
    perm = ref.perm if ref is not None else _ident(rank)

    def operand(n: str) -> Any:
        if g.is_const(n):
            c = g.consts[n].astype(np.float32)
            return _const_to_perm(c, rank, perm)
        t = g.t(n)
        if t.rank < rank:  # lower-rank run-time operand: align (ONNX broadcasting), then permute
            shape = (1,) * (rank - t.rank) + t.onnx_shape()
            v = tf.reshape(_to_perm(t, _ident(t.rank)), shape)
            return _to_perm(_T(v, _ident(rank)), perm)
        return _to_perm(t, perm)

    a, b = operand(names[0]), operand(names[1])
    if op == "Add":
        y = tf.add(a, b)
    elif op == "Sub":
        y = tf.subtract(a, b)
    elif op == "Mul":
        y = tf.multiply(a, b)
    elif op == "Div":
        y = tf.multiply(a, np.float32(1.0) / b) if isinstance(b, np.ndarray) else tf.divide(a, b)
    elif op == "Pow":
        if isinstance(b, np.ndarray) and b.size == 1 and float(b.reshape(-1)[0]) == 2.0:
            y = tf.multiply(a, a)
        elif isinstance(b, np.ndarray) and b.size == 1 and float(b.reshape(-1)[0]) == 1.0:
            y = a
        else:
            y = tf.pow(a, b)
    elif op == "Max":
        y = tf.maximum(a, b)
    elif op == "Min":
        y = tf.minimum(a, b)
    else:  # pragma: no cover
        raise ConversionError(f"binary {op}")
    return _T(y, perm)


def _op_concat(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> Any:
    names = [n for n in node.input if n]
    axis = int(at["axis"])
    if all(g.is_const(n) for n in names):
        return np.concatenate([g.consts[n] for n in names], axis=axis)
    tensors = [g.t(n) for n in names if not g.is_const(n)]
    rank = tensors[0].rank
    ref = max(tensors, key=lambda t: math.prod(t.onnx_shape()))
    perm = ref.perm
    axis = _axis(axis, rank)
    vals = [tf.constant(_const_to_perm(g.consts[n].astype(np.float32), rank, perm)) if g.is_const(n)
            else _to_perm(g.t(n), perm) for n in names]
    return _T(tf.concat(vals, axis=list(perm).index(axis)), perm)


def _op_split(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> list[_T]:
    t = g.t(node.input[0])
    axis = _axis(int(at.get("axis", 0)), t.rank)
    size = t.onnx_shape()[axis]
    if len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in g.const(node.input[1], "split").reshape(-1)]
    elif "split" in at:
        sizes = [int(v) for v in at["split"]]
    else:
        n = int(at.get("num_outputs", len(node.output)))
        part = -(-size // n)
        sizes = [part] * (n - 1) + [size - part * (n - 1)]
    vaxis = list(t.perm).index(axis)
    return [_T(v, t.perm) for v in tf.split(t.value, sizes, axis=vaxis)]


def _op_slice(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    shape = t.onnx_shape()
    if len(node.input) > 1:
        starts = [int(v) for v in g.const(node.input[1], "Slice starts").reshape(-1)]
        ends = [int(v) for v in g.const(node.input[2], "Slice ends").reshape(-1)]
        axes = ([int(v) for v in g.const(node.input[3], "Slice axes").reshape(-1)]
                if len(node.input) > 3 and node.input[3] else list(range(len(starts))))
        steps = ([int(v) for v in g.const(node.input[4], "Slice steps").reshape(-1)]
                 if len(node.input) > 4 and node.input[4] else [1] * len(starts))
    else:
        starts, ends = list(at["starts"]), list(at["ends"])
        axes = list(at.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    begin = [0] * t.rank
    end = list(t.value.shape)
    stride = [1] * t.rank
    for s0, e0, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, t.rank)
        n = shape[a]
        if st < 0:
            raise ConversionError(f"{node.name}: negative Slice steps are not supported")
        s0 = max(0, min(n, s0 + n if s0 < 0 else s0))
        e0 = max(0, min(n, e0 + n if e0 < 0 else e0))
        va = list(t.perm).index(a)
        begin[va], end[va], stride[va] = s0, e0, st
    if all(s == 1 for s in stride):
        y = tf.slice(t.value, begin, [e - b for b, e in zip(begin, end)])
    else:
        y = tf.strided_slice(t.value, begin, end, stride)
    return _T(y, t.perm)


def _op_gather(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    """Gather with constant indices (an attention block's q/k/v picked from one tensor): a
    scalar index drops the axis, a 1-D one keeps it."""
    t = g.t(node.input[0])
    idx = np.asarray(g.const(node.input[1], "Gather indices")).astype(np.int64)
    if idx.ndim > 1:
        raise ConversionError(f"{node.name}: Gather indices of rank {idx.ndim} are not supported")
    axis = _axis(int(at.get("axis", 0)), t.rank)
    n = t.onnx_shape()[axis]
    idx = np.where(idx < 0, idx + n, idx)
    va = list(t.perm).index(axis)
    y = tf.gather(t.value, tf.constant(idx.astype(np.int32)), axis=va)
    if idx.ndim == 1:
        return _T(y, t.perm)
    rest = [a for a in t.perm if a != axis]
    return _T(y, tuple(a - (a > axis) for a in rest))


def _target_shape(src: Sequence[int], spec: Sequence[int], allowzero: bool) -> list[int]:
    out = [int(v) for v in spec]
    for i, v in enumerate(out):
        if v == 0 and not allowzero:
            out[i] = int(src[i])
    if -1 in out:
        known = math.prod(v for v in out if v != -1)
        out[out.index(-1)] = math.prod(src) // max(known, 1)
    return out


def _op_reshape(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> Any:
    spec = g.const(node.input[1], "Reshape shape").reshape(-1)
    if g.is_const(node.input[0]):
        c = g.consts[node.input[0]]
        return c.reshape(_target_shape(c.shape, spec, bool(at.get("allowzero", 0))))
    t = g.t(node.input[0])
    return _reshape(t, _target_shape(t.onnx_shape(), spec, bool(at.get("allowzero", 0))))


def _op_flatten(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    s = t.onnx_shape()
    axis = _axis(int(at.get("axis", 1)), t.rank)
    return _reshape(t, [math.prod(s[:axis]), math.prod(s[axis:])])


def _op_squeeze(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> Any:
    src = g.consts[node.input[0]].shape if g.is_const(node.input[0]) else g.t(node.input[0]).onnx_shape()
    axes = at.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(a) for a in g.const(node.input[1], "axes").reshape(-1)]
    if node.op_type == "Squeeze":
        ax = {_axis(int(a), len(src)) for a in axes} if axes is not None else {i for i, d in enumerate(src) if d == 1}
        dst = [d for i, d in enumerate(src) if i not in ax]
    else:
        r = len(src) + len(axes)
        ax = sorted(_axis(int(a), r) for a in axes)
        it = iter(src)
        dst = [1 if i in ax else next(it) for i in range(r)]
    if g.is_const(node.input[0]):
        return g.consts[node.input[0]].reshape(dst)
    return _reshape(g.t(node.input[0]), dst)


def _op_transpose(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> Any:
    if g.is_const(node.input[0]):
        c = g.consts[node.input[0]]
        return np.transpose(c, at.get("perm"))
    t = g.t(node.input[0])
    q = tuple(int(a) for a in at.get("perm", reversed(range(t.rank))))
    # new onnx tensor T' = transpose(T, q): T' dim i is T dim q[i]. The stored value keeps its
    # data; it holds T dims in order t.perm, i.e. T' dims in order [q.index(a) for a in t.perm].
    qi = _inv(q)
    return _T(t.value, tuple(qi[a] for a in t.perm))


def _op_gemm(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    a = _to_perm(g.t(node.input[0]), (0, 1))
    if at.get("transA", 0):
        a = tf.transpose(a)
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    if g.is_const(node.input[1]):
        b = g.consts[node.input[1]].astype(np.float32)
        if at.get("transB", 0):
            b = b.T
        y = tf.matmul(a, tf.constant(np.ascontiguousarray(b * alpha)))
    else:
        b = _to_perm(g.t(node.input[1]), (0, 1))
        y = tf.matmul(a, b, transpose_b=bool(at.get("transB", 0))) * alpha
    if len(node.input) > 2 and node.input[2]:
        y = y + tf.constant((g.const(node.input[2], "Gemm C") * beta).astype(np.float32))
    return _T(y, (0, 1))


def _op_matmul(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    a = _to_perm(t, _ident(t.rank))
    if g.is_const(node.input[1]):
        b = tf.constant(g.consts[node.input[1]].astype(np.float32))
    else:
        tb = g.t(node.input[1])
        b = _to_perm(tb, _ident(tb.rank))
    y = tf.matmul(a, b)
    return _T(y, _ident(len(y.shape)))


def _op_softmax(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    axis = _axis(int(at.get("axis", -1)), t.rank)
    return _T(tf.nn.softmax(t.value, axis=list(t.perm).index(axis)), t.perm)


def _op_resize(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    x = g.nhwc(node.input[0])
    n, h, w, c = (int(v) for v in x.shape)
    sizes = None
    if len(node.input) > 3 and node.input[3]:
        sizes = [int(v) for v in g.const(node.input[3], "Resize sizes").reshape(-1)]
    elif len(node.input) > 2 and node.input[2]:
        sc = g.const(node.input[2], "Resize scales").reshape(-1)
        if sc.size:
            sizes = [int(math.floor(d * float(f))) for d, f in zip((n, c, h, w), sc)]
    if sizes is None:
        raise ConversionError(f"{node.name}: Resize needs constant scales or sizes")
    if sizes[0] != n or sizes[1] != c:
        raise ConversionError(f"{node.name}: Resize of batch or channels is not supported")
    mode = at.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    ctm = at.get("coordinate_transformation_mode", b"half_pixel")
    ctm = ctm.decode() if isinstance(ctm, bytes) else str(ctm)
    align = ctm == "align_corners"
    half = ctm in ("half_pixel", "pytorch_half_pixel")
    size = [sizes[2], sizes[3]]
    if mode == "nearest":
        y = tf.raw_ops.ResizeNearestNeighbor(images=x, size=size, align_corners=align, half_pixel_centers=half)
    elif mode == "linear":
        y = tf.raw_ops.ResizeBilinear(images=x, size=size, align_corners=align, half_pixel_centers=half)
    else:
        raise ConversionError(f"{node.name}: Resize mode {mode!r} has no TFLite builtin (nearest, linear)")
    return _T(y, NHWC)


def _op_pad(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> _T:
    t = g.t(node.input[0])
    pads = [int(v) for v in (g.const(node.input[1], "Pad pads").reshape(-1) if len(node.input) > 1 else at["pads"])]
    value = 0.0
    if len(node.input) > 2 and node.input[2]:
        value = float(g.const(node.input[2], "Pad value").reshape(-1)[0])
    mode = at.get("mode", b"constant")
    mode = (mode.decode() if isinstance(mode, bytes) else str(mode)).upper()
    r = t.rank
    spec = [[pads[a], pads[a + r]] for a in t.perm]
    if mode == "CONSTANT":
        y = tf.pad(t.value, spec, constant_values=value)
    elif mode == "REFLECT":
        y = tf.pad(t.value, spec, mode="REFLECT")
    else:
        raise ConversionError(f"{node.name}: Pad mode {mode.lower()!r} is not supported")
    return _T(y, t.perm)


def _op_constant(g: _Graph, node: onnx.NodeProto, at: dict[str, Any]) -> np.ndarray:
    if "value" in at:
        return numpy_helper.to_array(at["value"])
    for k in ("value_float", "value_int"):
        if k in at:
            return np.array(at[k])
    for k in ("value_floats", "value_ints"):
        if k in at:
            return np.array(list(at[k]))
    raise ConversionError(f"{node.name}: unsupported Constant form {sorted(at)}")


_OPS: dict[str, Callable[[_Graph, onnx.NodeProto, dict[str, Any]], Any]] = {
    "Conv": _op_conv,
    "MaxPool": _op_pool,
    "AveragePool": _op_pool,
    "GlobalAveragePool": _op_global,
    "GlobalMaxPool": _op_global,
    "ReduceMean": _op_reduce,
    "ReduceMax": _op_reduce,
    "ReduceMin": _op_reduce,
    "ReduceSum": _op_reduce,
    "BatchNormalization": _op_bn,
    "LayerNormalization": _op_layernorm,
    "Gather": _op_gather,
    "Relu": _op_unary,
    "Clip": _op_unary,
    "Sigmoid": _op_unary,
    "Tanh": _op_unary,
    "HardSigmoid": _op_unary,
    "HardSwish": _op_unary,
    "LeakyRelu": _op_unary,
    "Elu": _op_unary,
    "Softplus": _op_unary,
    "Gelu": _op_unary,
    "Exp": _op_unary,
    "Neg": _op_unary,
    "Identity": _op_identity,
    "Dropout": _op_identity,
    "PRelu": _op_prelu,
    "Add": _op_binary,
    "Sub": _op_binary,
    "Mul": _op_binary,
    "Div": _op_binary,
    "Pow": _op_binary,
    "Max": _op_binary,
    "Min": _op_binary,
    "Concat": _op_concat,
    "Split": _op_split,
    "Slice": _op_slice,
    "Reshape": _op_reshape,
    "Flatten": _op_flatten,
    "Squeeze": _op_squeeze,
    "Unsqueeze": _op_squeeze,
    "Transpose": _op_transpose,
    "Gemm": _op_gemm,
    "MatMul": _op_matmul,
    "Softmax": _op_softmax,
    "Resize": _op_resize,
    "Pad": _op_pad,
    "Constant": _op_constant,
}

#: ONNX operators this converter renders.
SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(_OPS))


# ------------------------------------------------------------------------- public API


def tf_function_from_onnx(model: onnx.ModelProto, *, exact_padding: bool = False, nhwc_outputs: bool = True,
                          grouped_conv: bool = False) -> tuple[Any, list[tuple[str, tuple[int, ...]]]]:
    """A concrete ``tf.function`` computing a (simplified) ONNX model on NHWC inputs, and the
    graph inputs as ``(name, ONNX shape)``. ``grouped_conv``: grouped convolutions as one
    convolution with grouped filters, not split (see the module docstring)."""
    graph = _Graph(model, exact_padding, grouped_conv)
    inputs = graph.inputs
    sig = [tf.TensorSpec(_nhwc_shape(s), tf.float32, name=_sanitize(n)) for n, s in inputs]

    def forward(*args: Any) -> Any:
        graph.env.clear()
        return graph.forward(*args, nhwc_outputs=nhwc_outputs)

    fn = tf.function(forward, input_signature=sig, autograph=False).get_concrete_function()
    return fn, inputs


def _nhwc_shape(s: Sequence[int]) -> tuple[int, ...]:
    return (s[0], s[2], s[3], s[1]) if len(s) == 4 else tuple(s)


def calibration_inputs(inputs: Sequence[tuple[str, Sequence[int]]], n: int = 8, seed: int = 0
                       ) -> list[list[np.ndarray]]:
    """``n`` seeded N(0, 1) samples in ONNX layout, one array per graph input."""
    h = int.from_bytes(hashlib.sha256(f"tflite_convert:{seed}".encode()).digest()[:8], "little")
    r = np.random.default_rng(h)
    return [[r.standard_normal(tuple(s)).astype(np.float32) for _, s in inputs] for _ in range(max(int(n), 1))]


def convert_onnx(src: Any, quantization: str = "int8", *, calibration: Iterable[Sequence[np.ndarray]] | None = None,
                 calibration_samples: int = 8, seed: int = 0, exact_padding: bool = False,
                 nhwc_outputs: bool = True, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 simplify: bool = True) -> bytes:
    """Convert an ONNX network (path, bytes or ModelProto) to a TFLite flatbuffer.

    ``quantization="int8"``: full-integer (int8 weights, activations, inputs, outputs),
    calibrated on ``calibration`` (samples in ONNX layout: NCHW arrays, one per graph
    input) or on ``calibration_samples`` seeded N(0, 1) samples. ``"float32"``: no
    quantisation. Raises :class:`ConversionError` for anything it cannot render.
    """
    if quantization not in QUANTIZATIONS:
        raise ConversionError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    model = prepare_onnx(src, input_shapes=input_shapes, simplify=simplify)
    try:
        fn, inputs = tf_function_from_onnx(model, exact_padding=exact_padding, nhwc_outputs=nhwc_outputs,
                                           grouped_conv=quantization == "float32")
    except ConversionError:
        raise
    except (ValueError, TypeError) as e:  # TensorFlow shape errors while tracing
        raise ConversionError(f"cannot render the network in TensorFlow: {str(e).splitlines()[0]}") from e
    nhwc_samples: list[list[np.ndarray]] = []
    if quantization == "int8":
        samples = list(calibration) if calibration is not None else calibration_inputs(inputs, calibration_samples, seed)
        for s in samples:
            if len(s) != len(inputs):
                raise ConversionError(f"a calibration sample has {len(s)} arrays; the network has {len(inputs)} inputs")
            arrs = []
            for (name, shape), a in zip(inputs, s):
                a = np.asarray(a, dtype=np.float32)
                if tuple(a.shape) != tuple(shape):
                    raise ConversionError(f"calibration array for {name!r} has shape {a.shape}, expected {tuple(shape)} "
                                          "(ONNX layout)")
                arrs.append(np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 else a)
            nhwc_samples.append(arrs)
        if not nhwc_samples:
            raise ConversionError("the calibration set is empty")
    try:
        return convert_concrete_function(fn, quantization, nhwc_samples)
    except RuntimeError as e:
        raise ConversionError(str(e)) from e


def convert_zoo(name: str, resolution: int = 224, quantization: str = "int8", **kw: Any) -> bytes:
    """Build a :mod:`estimator.zoo` network (random weights), export it to ONNX and convert it."""
    from estimator import zoo  # noqa: PLC0415

    return convert_onnx(zoo.export_onnx(name, resolution), quantization, **kw)


def tflite_io(model: bytes) -> dict[str, list[dict[str, Any]]]:
    """Inputs and outputs of a TFLite model (name, shape, dtype), via LiteRT when present."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: PLC0415
    except ImportError:  # pragma: no cover
        Interpreter = tf.lite.Interpreter  # noqa: N806
    it = Interpreter(model_content=bytes(model))
    f = lambda ds: [{"name": d["name"], "shape": [int(v) for v in d["shape"]], "dtype": np.dtype(d["dtype"]).name}  # noqa: E731
                    for d in ds]
    return {"inputs": f(it.get_input_details()), "outputs": f(it.get_output_details())}


def tflite_ops(model: bytes) -> dict[str, int]:
    """Builtin operator counts of a TFLite model (what a runtime or Vela will see)."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: PLC0415
    except ImportError:  # pragma: no cover
        Interpreter = tf.lite.Interpreter  # noqa: N806
    it = Interpreter(model_content=bytes(model))
    counts: dict[str, int] = {}
    for d in it._get_ops_details():  # noqa: SLF001 - the only op listing LiteRT offers
        counts[d["op_name"]] = counts.get(d["op_name"], 0) + 1
    return counts


# ------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tflite_convert",
                                description="Convert an ONNX network (or a zoo network) to full-integer int8 TFLite.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("onnx", nargs="?", help="ONNX file")
    src.add_argument("--zoo", metavar="NAME", help="an estimator.zoo network instead of a file")
    p.add_argument("--resolution", type=int, default=224, help="zoo input resolution (default 224)")
    p.add_argument("-o", "--output", required=True, help="TFLite file to write")
    p.add_argument("--float32", action="store_true", help="no quantisation")
    p.add_argument("--calibration", metavar="NPZ", help="calibration samples: an .npz whose arrays are samples of the "
                   "(single) input in ONNX layout, each (1, C, H, W) or stacked (N, C, H, W)")
    p.add_argument("--calibration-samples", type=int, default=8, help="seeded N(0,1) samples (default 8)")
    p.add_argument("--exact-padding", action="store_true", help="explicit PAD where ONNX pads differ from SAME")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=1,3,224,224",
                   help="fix a dynamic input shape")
    a = p.parse_args(argv)
    try:
        shapes = {}
        for spec in a.input_shape:
            name, _, dims = spec.partition("=")
            shapes[name] = [int(d) for d in dims.split(",")]
        cal = None
        if a.calibration:
            data = np.load(a.calibration)
            cal = []
            for k in data.files:
                arr = data[k].astype(np.float32)
                for i in range(arr.shape[0]):
                    cal.append([arr[i:i + 1]])
        q = "float32" if a.float32 else "int8"
        if a.zoo:
            out = convert_zoo(a.zoo, a.resolution, q, calibration=cal, calibration_samples=a.calibration_samples,
                              exact_padding=a.exact_padding)
        else:
            out = convert_onnx(a.onnx, q, calibration=cal, calibration_samples=a.calibration_samples,
                               exact_padding=a.exact_padding, input_shapes=shapes or None)
    except UserError as e:
        print(f"tflite_convert: error: {e}", file=sys.stderr)
        return 2
    Path(a.output).write_bytes(out)
    ops = tflite_ops(out)
    print(f"wrote {a.output} ({len(out)} bytes, {q}; ops: {', '.join(f'{k} x{v}' for k, v in sorted(ops.items()))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
