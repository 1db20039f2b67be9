"""TFLite models (full-integer int8, or float32) from the framework-neutral IR of
:mod:`bench.modelgen`, for the ``litert`` and ``vela`` runners and LiteRT bench agents.

Needs TensorFlow (the ``tflite`` extra); importing this module without it raises
:class:`MissingTFLiteExtraError` (a :class:`~estimator.errors.UserError`). Nothing on the
estimation path imports it.

How the IR is rendered
----------------------
The IR is NCHW; TensorFlow/TFLite are NHWC. Every IR tensor of shape ``(1, C, H, W)`` is
the NHWC tensor ``(1, H, W, C)`` (same data, channels last); rank-2 ``(1, C)`` tensors are
unchanged. Graph inputs keep their IR names and are fed NHWC. Each IR op becomes TF ops
under ``tf.name_scope(op.name)``, so TFLite tensor names (which Vela's per-layer report
and LiteRT use) start with the IR op name: ``pad_in/...``, ``lum/...`` (see
:func:`ir_op_of_tensor`); the graph output keeps the converter's name
(``PartitionedCall:0``; in float32 models of one input ``Identity``, and the input is named
``x``, not ``serving_default_x:0``: :func:`convert_concrete_function`). Weights are the
IR's own (:func:`bench.modelgen.make_weights`), transposed to TensorFlow's layouts
(padding convs' weights are non-negative, see :func:`bench.modelgen.make_weights`):

* ``conv`` (groups 1 or grouped): OIHW ``(O, I/g, kh, kw)`` -> HWIO ``(kh, kw, I/g, O)``
  for ``tf.nn.conv2d`` (grouped when ``I/g < I``: TFLite CONV_2D with grouped filters).
* depthwise ``conv`` (groups == c_in, ``c_out = c_in * m``): output channel ``i*m + j``
  is input channel ``i``'s ``j``-th filter in both ONNX and TF, so
  ``(c*m, 1, kh, kw)`` -> ``(kh, kw, c, m)`` for ``tf.nn.depthwise_conv2d``.
* ``gemm``: ``(c_out, c_in)`` -> ``(c_in, c_out)`` (``tf.matmul``; becomes FULLY_CONNECTED).
* Padding: TFLite knows only SAME and VALID. IR pads equal to TensorFlow SAME or VALID
  map directly. Other explicit pads (e.g. PyTorch-style symmetric pads with stride 2)
  use SAME when SAME yields the same output shape (the same work; the border placement
  differs by one row/column, which does not change latency); otherwise an explicit PAD
  op (zeros) precedes a VALID window op, as converted PyTorch models have.
* Fused activations: ``conv``/``gemm``/``add``/``mul`` + act are emitted as the op
  followed by the activation, which the converter fuses where TFLite can (ReLU, ReLU6,
  ReLU_N1_TO_1, ...).
* ``avgpool`` with SAME padding excludes padded cells, as the IR specifies.
* ``resize``: nearest with asymmetric coordinates (``half_pixel_centers=False``),
  linear with half-pixel centres; cubic has no TFLite builtin and is refused.
* ``globalpool``: avg -> MEAN, max -> REDUCE_MAX (keepdims), output ``(1, 1, 1, C)``.
* ``reshape``: a RESHAPE to the NHWC form of the IR shape; glue with ``stored_order``
  (:func:`estimator.layers.registry.reshape_op`) relabels the stored data, which is what a
  LUM padded in TFLite's token-row layout needs.
* an op of a layer type's own kind (layer norm, softmax, matmul, transpose, slice, fc over
  token rows): the type's ``tflite_ops`` (:mod:`estimator.layers`); models of those types
  are built for ``model_format="tflite"`` (``bench.modelgen.padded_model``), which lays
  token rows out as NHWC ``(1, 1, rows, width)``.

Quantisation: ``"int8"`` is TFLite full-integer post-training quantisation
(``TFLITE_BUILTINS_INT8`` only, int8 inputs and outputs), calibrated on a representative
dataset of ``calibration_samples`` N(0, 1) inputs drawn with a fixed seed, so the same
IR and seed always give the same bytes. ``"float32"`` is a plain conversion (for LiteRT
on a host CPU).

What the TFLite converter does to some padded models (it optimises them as it would a
real network; check ``Prepared.info["ops"]`` of the LiteRT runner, or the Vela runner's
``cpu_ops``):

* a standalone ``relu`` LUM right after the padding conv's ReLU is removed
  (``relu(relu(x)) = relu(x)``): the padded model then has no LUM op, and the smart-padding
  time of such a ReLU is ~0, which is what TFLite makes of it;
* ``prelu`` after a ReLU is not matched into one PRELU op (its negative branch is dead)
  and ``elu`` has no int8 path in the converter: both leave float operators between
  DEQUANTIZE/QUANTIZE, which Vela places on the CPU;
* hard-sigmoid's final multiplication by 1/6 may be folded into the next convolution.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import warnings
from typing import Any, Iterator, Sequence

import numpy as np

from estimator.errors import UserError


class MissingTFLiteExtraError(UserError, ImportError):
    """TensorFlow is not installed: the ``tflite`` extra is needed."""


class TFLiteModelError(UserError):
    """The IR contains something that has no TFLite rendering (the message says what)."""


@contextlib.contextmanager
def native_stderr() -> Iterator[list[str]]:
    """Hold what TensorFlow's C++ code writes to the process's stderr (file descriptor 2) while
    the block runs: its start-up lines (oneDNN, CUDA drivers not found, absl's "log messages
    before InitializeLog"), the converter's per-model "fully_quantize: ..." line and the
    deprecation warning its int8 calibration raises about its own ``tf.lite.Interpreter``,
    none of which a user can act on, would otherwise come between a bench command's lines, once
    per benchmark model. The list yielded gets the held lines after the block, for an error
    message; they are not printed. ``TF_CPP_MIN_LOG_LEVEL`` does not reach these lines
    (TensorFlow 2.21 writes them before it reads it)."""
    held: list[str] = []
    fd = 2  # the C++ code writes there, whatever sys.stderr is
    try:
        saved = os.dup(fd)
    except OSError:  # no stderr at all: nothing to hold
        yield held
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"(?s).*tf\.lite\.Interpreter is deprecated")
                yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            held += sink.read().decode("utf-8", "replace").splitlines()


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
with native_stderr() as _held:
    try:
        import tensorflow as tf
    except ImportError as _e:  # pragma: no cover - depends on the environment
        _import_error: ImportError | None = _e
    else:
        _import_error = None
        tf.config.list_physical_devices()  # the device platforms start here, not amid a measurement ("cuInit")
if _import_error is not None:  # pragma: no cover - depends on the environment
    raise MissingTFLiteExtraError(
        "writing TFLite models needs TensorFlow: pip install 'confident-latency[tflite]' "
        f"(the 'tflite' extra); import failed: {_import_error}"
        + (f" ({_held[-1].strip()})" if _held else "")) from _import_error

from estimator.layers import SPECS, LayerSpecError  # noqa: E402

from .modelgen import ModelIR, Op, make_weights  # noqa: E402

__all__ = [
    "MissingTFLiteExtraError",
    "TFLiteModelError",
    "QUANTIZATIONS",
    "to_tflite",
    "tf_function",
    "nhwc",
    "representative_inputs",
    "ir_op_of_tensor",
    "convert_concrete_function",
]

QUANTIZATIONS = ("int8", "float32")


def nhwc(shape: Sequence[int]) -> tuple[int, ...]:
    """The NHWC shape of an IR (NCHW) shape; other ranks unchanged."""
    s = tuple(int(d) for d in shape)
    if len(s) == 4:
        n, c, h, w = s
        return (n, h, w, c)
    return s


def _nhwc_array(a: np.ndarray) -> np.ndarray:
    """An NCHW rank-4 constant stored NHWC (other ranks as they are)."""
    return np.ascontiguousarray(np.transpose(a, (0, 2, 3, 1))) if a.ndim == 4 else a


def ir_op_of_tensor(tensor_name: str, ir: ModelIR) -> str | None:
    """The IR op a TFLite tensor/op name belongs to (the longest IR op name that is a
    prefix of one of its ``;``-separated parts, followed by ``/``), or ``None``."""
    names = sorted((op.name for op in ir.ops), key=len, reverse=True)
    for part in tensor_name.split(";"):
        for n in names:
            scope = _scope(n)
            if part == scope or part.startswith(scope + "/") or f"/{scope}/" in part:
                return n
    return None


def _scope(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_.-/" else "_" for ch in name)


def _rng(seed: int, name: str) -> np.random.Generator:
    h = int.from_bytes(hashlib.sha256(f"tflite:{seed}:{name}".encode()).digest()[:8], "little")
    return np.random.default_rng(h)


def representative_inputs(ir: ModelIR, n: int = 8, seed: int = 0) -> list[list[np.ndarray]]:
    """``n`` calibration samples: for each, one NHWC float32 N(0, 1) array per graph input."""
    r = _rng(seed, ir.name)
    return [[r.standard_normal(nhwc(t.shape)).astype(np.float32) for t in ir.inputs] for _ in range(n)]


# --------------------------------------------------------------------------- op rendering


def _same_shape(size: int, s: int) -> int:
    return -(-size // s)


def _window_padding(x_shape: Sequence[int], op: Op) -> tuple[str, list[list[int]] | None]:
    """``("SAME" | "VALID", explicit pad spec or None)`` for a window op on NHWC input."""
    a = op.attrs
    padding = a.get("padding", "explicit")
    if padding == "same":
        return "SAME", None
    if padding == "valid":
        return "VALID", None
    _, h, w, _ = x_shape
    s_h, s_w = a["s_h"], a["s_w"]
    want = (op.shape[2], op.shape[3])
    if (_same_shape(h, s_h), _same_shape(w, s_w)) == want:
        return "SAME", None
    t, left, b, r = a["pads"]
    return "VALID", [[0, 0], [t, b], [left, r], [0, 0]]


def _act(kind: str | None, x: Any, attrs: dict[str, Any], weights: dict[str, np.ndarray]) -> Any:
    if kind is None:
        return x
    if kind == "relu":
        return tf.nn.relu(x)
    if kind == "relu6":
        return tf.nn.relu6(x)
    if kind == "clip":
        return tf.clip_by_value(x, float(attrs.get("min", -1.0)), float(attrs.get("max", 1.0)))
    if kind == "sigmoid":
        return tf.math.sigmoid(x)
    if kind == "hardsigmoid":  # ONNX HardSigmoid(alpha=1/6, beta=0.5) = relu6(x + 3) / 6
        return tf.nn.relu6(x + 3.0) * (1.0 / 6.0)
    if kind == "hardswish":
        return x * tf.nn.relu6(x + 3.0) * (1.0 / 6.0)
    if kind == "silu":
        return x * tf.math.sigmoid(x)
    if kind == "tanh":
        return tf.math.tanh(x)
    if kind == "leakyrelu":
        return tf.nn.leaky_relu(x, alpha=float(attrs.get("alpha", 0.1)))
    if kind == "prelu":
        # Keras' PReLU formulation (alpha of rank 3, (1, 1, C)), which the converter
        # pattern-matches into one PRELU op; other forms stay RELU/NEG/MUL/ADD.
        slope = tf.constant(weights["slope"].reshape(1, 1, -1))
        return tf.nn.relu(x) + (-slope) * tf.nn.relu(-x)
    if kind == "elu":
        if float(attrs.get("alpha", 1.0)) != 1.0:
            raise TFLiteModelError("ELU with alpha != 1 has no TFLite builtin")
        return tf.nn.elu(x)
    if kind == "gelu":
        return tf.nn.gelu(x, approximate=False)
    if kind == "softplus":
        return tf.math.softplus(x)
    if kind == "mish":
        return x * tf.math.tanh(tf.math.softplus(x))
    raise TFLiteModelError(f"activation {kind!r} has no TFLite rendering")


def _conv(op: Op, x: Any, w: dict[str, np.ndarray]) -> Any:
    a = op.attrs
    padding, explicit = _window_padding(x.shape, op)
    if explicit is not None:
        x = tf.pad(x, explicit)
    strides = [1, a["s_h"], a["s_w"], 1]
    dil = [a.get("d_h", 1), a.get("d_w", 1)]
    if max(dil) > 1 and max(a["s_h"], a["s_w"]) > 1:
        raise TFLiteModelError(f"{op.name}: TensorFlow cannot combine dilation {dil} with stride "
                               f"{[a['s_h'], a['s_w']]} in one convolution")
    c_in, c_out, g = a["c_in"], a["c_out"], a["groups"]
    kernel = w["w"]  # OIHW (c_out, c_in/g, k_h, k_w)
    if a.get("depthwise") and g == c_in:
        mult = c_out // c_in
        dw = kernel.reshape(c_in, mult, a["k_h"], a["k_w"]).transpose(2, 3, 0, 1)
        y = tf.nn.depthwise_conv2d(x, tf.constant(dw), strides=strides, padding=padding, dilations=dil)
    else:
        y = tf.nn.conv2d(x, tf.constant(kernel.transpose(2, 3, 1, 0)), strides=strides, padding=padding,
                         dilations=dil)
    if "b" in w:
        y = tf.nn.bias_add(y, tf.constant(w["b"]))
    return y


def _pool(op: Op, x: Any) -> Any:
    a = op.attrs
    padding, explicit = _window_padding(x.shape, op)
    if explicit is not None:
        x = tf.pad(x, explicit)
    ksize, strides = [1, a["k_h"], a["k_w"], 1], [1, a["s_h"], a["s_w"], 1]
    if op.kind == "maxpool":
        return tf.nn.max_pool2d(x, ksize, strides, padding)
    return tf.nn.avg_pool2d(x, ksize, strides, padding)


def _render(op: Op, ins: list[Any], weights: dict[str, dict[str, np.ndarray]]) -> Any:
    a = dict(op.attrs)
    w = weights.get(op.name, {})
    k = op.kind
    if k == "conv":
        y = _conv(op, ins[0], w)
    elif k == "gemm":
        y = tf.matmul(ins[0], tf.constant(np.ascontiguousarray(w["w"].T)))
        if "b" in w:
            y = y + tf.constant(w["b"])
    elif k in ("maxpool", "avgpool"):
        y = _pool(op, ins[0])
    elif k == "globalpool":
        y = (tf.reduce_max if a.get("mode") == "max" else tf.reduce_mean)(ins[0], axis=[1, 2], keepdims=True)
    elif k in ("add", "mul"):
        b = tf.constant(_nhwc_array(w["b"])) if a.get("const") else ins[1]
        y = (tf.add if k == "add" else tf.multiply)(ins[0], b)
    elif k == "batchnorm":  # as the TFLite converter lowers an inference BatchNormalization
        inv = w["scale"] / np.sqrt(w["var"] + np.float32(1e-5))
        y = tf.add(tf.multiply(ins[0], tf.constant(inv.astype(np.float32))),
                   tf.constant((w["shift"] - w["mean"] * inv).astype(np.float32)))
    elif k == "concat":
        if a.get("axis", 1) != 1:
            raise TFLiteModelError(f"{op.name}: only channel concatenation (axis 1) is supported")
        y = tf.concat(ins, axis=3)
    elif k == "resize":
        size = [int(a["h_out"]), int(a["w_out"])]
        if a["mode"] == "nearest":
            y = tf.raw_ops.ResizeNearestNeighbor(  # the op itself: TensorFlow 2's resize has no asymmetric mode
                images=ins[0], size=size, align_corners=False, half_pixel_centers=a.get("coord") == "half_pixel")
        elif a["mode"] == "linear":
            y = tf.raw_ops.ResizeBilinear(
                images=ins[0], size=size, align_corners=False,
                half_pixel_centers=a.get("coord", "half_pixel") == "half_pixel")
        else:
            raise TFLiteModelError(f"{op.name}: resize mode {a['mode']!r} has no TFLite builtin (nearest, linear only)")
    elif k == "act":
        y = _act(a["kind"], ins[0], a, w)
    elif k == "flatten":
        y = tf.reshape(ins[0], [int(d) for d in op.shape])
    elif k == "reshape":
        src = [int(d) for d in ins[0].shape]
        dst = [int(d) for d in op.shape]
        if (len(dst) == 4 and dst[2] * dst[3] != 1 and dst[1] != 1 and len(src) != 4
                and not a.get("stored_order")):
            raise TFLiteModelError(f"{op.name}: a reshape to {dst} is not layout-neutral in NHWC")
        y = tf.reshape(ins[0], list(nhwc(dst)))
    elif k in SPECS:  # an op kind of the layer type's own (estimator.layers)
        try:
            y = SPECS[k].tflite_ops(op, ins, w)
        except LayerSpecError as e:
            raise TFLiteModelError(str(e)) from e
    else:
        raise TFLiteModelError(f"IR op kind {k!r} ({op.name}) has no TFLite rendering")
    if op.act:
        y = _act(op.act, y, {}, w)
    return y


def tf_function(ir: ModelIR, seed: int = 0) -> Any:
    """A concrete ``tf.function`` computing ``ir`` on NHWC float32 inputs."""
    weights = make_weights(ir, seed)
    signature = [tf.TensorSpec(nhwc(t.shape), tf.float32, name=t.name) for t in ir.inputs]

    def forward(*args: Any) -> Any:
        env: dict[str, Any] = {t.name: x for t, x in zip(ir.inputs, args)}
        for op in ir.ops:
            missing = [i for i in op.inputs if i not in env]
            if missing:
                raise TFLiteModelError(f"{op.name}: inputs {missing} are not produced earlier in the IR")
            with tf.name_scope(_scope(op.name)):
                env[op.output] = _render(op, [env[i] for i in op.inputs], weights)
        outs = []
        for t in ir.outputs:
            y = env[t.name]
            want = nhwc(t.shape)
            if tuple(int(d) for d in y.shape) != want:
                raise TFLiteModelError(f"output {t.name}: rendered shape {tuple(y.shape)} != IR {want}")
            outs.append(tf.identity(y, name=t.name))
        return outs[0] if len(outs) == 1 else tuple(outs)

    return tf.function(forward, input_signature=signature, autograph=False).get_concrete_function()


def to_tflite(ir: ModelIR, quantization: str = "int8", *, seed: int = 0, calibration_samples: int = 8) -> bytes:
    """Serialize ``ir`` to a TFLite flatbuffer.

    ``quantization="int8"``: full-integer (int8 weights, activations, inputs and outputs)
    with a seeded random representative dataset; ``"float32"``: no quantisation.
    Raises :class:`TFLiteModelError` when the IR cannot be rendered or converted.
    """
    if quantization not in QUANTIZATIONS:
        raise TFLiteModelError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    fn = tf_function(ir, seed)
    samples: list[Any] = []
    if quantization == "int8":
        # By input name: the converted model may order its inputs otherwise than the
        # signature (a matmul's two padded operands came out reversed).
        names = [t.name for t in ir.inputs]
        samples = [dict(zip(names, s)) for s in representative_inputs(ir, max(int(calibration_samples), 1), seed)]
    try:
        return convert_concrete_function(fn, quantization, samples)
    except RuntimeError as e:
        raise TFLiteModelError(f"{ir.name}: {e}") from e


def convert_concrete_function(fn: Any, quantization: str, samples: Sequence[Any]) -> bytes:
    """THE TFLite conversion, shared by benchmark models and whole networks.

    ``"int8"``: full-integer post-training quantisation (``TFLITE_BUILTINS_INT8`` only,
    int8 inputs and outputs) calibrated on ``samples`` (per sample, the NHWC arrays as a list
    in ``fn``'s input order or a dict by input name); ``"float32"``: no quantisation. Converter failures raise
    ``RuntimeError`` with the converter's own error line.

    Float32 functions of one input skip the converter's SavedModel round trip
    (``experimental_lower_to_saved_model = False``; the round trip exports and re-loads
    ``fn`` as a SavedModel before converting it): 0.06 s instead of 0.15 s a benchmark model
    (mean over 291 models, one core, TensorFlow 2.21). Checked on 252 single-input benchmark
    models (padded and single-layer models of every benchable type, padding-only pairs) and
    8 zoo networks: the same operators and options, tensor shapes and types, constant
    buffers and graph input/output wiring; only names differ (input ``x``, not
    ``serving_default_x:0``; output ``Identity``, not ``PartitionedCall:0``) and there is no
    SignatureDef, which the runners do not use. Functions of several inputs keep the round
    trip: without it their graph inputs come out in the function's order, not in the order
    the round trip gives (reversed, for the two-input add/mul/concat/matmul models checked).
    Int8 keeps it too: calibration feeds the dataset through the SignatureDef.
    """
    module = tf.Module()
    module.f = fn
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn], module)
    if quantization == "float32" and len(tf.nest.flatten(fn.structured_input_signature)) == 1:
        converter.experimental_lower_to_saved_model = False  # the same model, faster (docstring)
    if quantization == "int8":
        def dataset() -> Any:
            yield from samples

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = dataset
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    try:
        with native_stderr() as held:
            return bytes(converter.convert())
    except Exception as e:  # noqa: BLE001 - the converter raises ConverterError and friends
        msg = str(e).strip().splitlines() or [line for line in held if "error" in line.lower()]
        detail = next((line for line in msg if "error" in line.lower()), msg[0] if msg else type(e).__name__)
        raise RuntimeError(f"TFLite conversion ({quantization}) failed: {detail}") from e


def output_shapes(ir: ModelIR) -> list[tuple[int, ...]]:
    """NHWC shapes of the TFLite model's outputs."""
    return [nhwc(t.shape) for t in ir.outputs]
