"""Framework-neutral model IR for smart-padding benchmarks (Fig. 5 of the paper), and its
ONNX emitter.

For a layer under measurement (LUM), given ``(layer_type, raw params)`` from the
vocabulary (:mod:`estimator.layers`), three kinds of model are built:

(a) :func:`single_layer_model`: the LUM alone; its inputs are graph inputs (fc: a plain
    ``(1, c_in)`` -> ``(1, c_out)`` Gemm).
(b) :func:`padding_model` ``(h, w, c)``: the padding-only pair. Graph input ``(1, 1, h, w)``
    -> 1x1 conv 1 -> c + ReLU -> 1x1 conv c -> 1 + ReLU -> ``(1, 1, h, w)``.
(c) :func:`padded_model`: 1x1 conv (1 -> c_in) + ReLU for *each* LUM input, then the LUM,
    then 1x1 conv (c_out -> 1) + ReLU. A LUM input that another layer of the network also
    reads (:meth:`~estimator.layers.registry.LayerTypeSpec.shared_inputs`: a concat's)
    gets a second reader, its padding pair's pad-out conv (c_i -> 1) writing a graph output
    of its own.

A model is a :class:`ModelIR`: graph inputs, outputs, and a topologically ordered list of
:class:`Op` with NCHW shapes. The ONNX emitter here (:func:`to_onnx`) and the TFLite/Keras
emitter (``bench.tflite_models``) both render it. Weights are not part of the IR; both
emitters draw them from :func:`make_weights` (seeded, deterministic, documented layouts)
and feed inputs from :func:`make_inputs`.

Op kinds (``Op.kind``) and their attributes
-------------------------------------------
``conv``        c_in, c_out, k_h, k_w, s_h, s_w, d_h, d_w, groups, pads (top, left,
                bottom, right), bias (bool), depthwise (bool: groups == c_in and c_out a
                multiple of c_in), padding ("same" | "valid" | "explicit": whether
                ``pads`` equal TensorFlow SAME / VALID padding, for emitters that only
                know those; see :func:`same_pads`)
``gemm``        c_in, c_out, bias. Input ``(1, c_in)``, output ``(1, c_out)``.
``maxpool``     k_h, k_w, s_h, s_w, pads, padding (as conv)
``avgpool``     k_h, k_w, s_h, s_w, pads, padding; padded cells are excluded from the mean
                (ONNX ``count_include_pad=0``, as TensorFlow SAME does)
``globalpool``  mode ("avg" | "max"); output ``(1, c, 1, 1)``
``add``/``mul`` element-wise, NumPy broadcasting of the second input; with attr ``const``
                (an NCHW shape) the op reads one input and the second operand is a
                constant of that shape (weights ``"b"``)
``batchnorm``   c: inference batch normalization over the channels, constant scale,
                shift, mean and variance (weights ``"scale"``, ``"shift"``, ``"mean"``,
                ``"var"``); ONNX BatchNormalization, TFLite a multiply and an add by
                constants (what the TFLite converter lowers a BatchNormalization to)
``concat``      axis (always 1: channels)
``resize``      h_out, w_out, mode ("nearest" | "linear" | "cubic"), coord
                ("asymmetric" for nearest, as PyTorch/TF default; "half_pixel" otherwise)
``act``         kind (an :data:`estimator.layers.ACTIVATION_KINDS` name), alpha, min, max
``flatten``     NCHW ``(1, c, 1, 1)`` -> ``(1, c)``
``reshape``     to ``Op.shape``

``conv``, ``gemm``, ``add`` and ``mul`` carry an optional fused activation ``Op.act``
(``"relu"``...). The ONNX emitter renders it as a separate node named ``<op>/act``; a
TFLite emitter may fuse it. ``Op.role`` is ``"pad_in"``, ``"lum"``, ``"pad_out"`` or
``"aux"`` (flatten/reshape glue). The LUM's ONNX nodes are named ``lum`` and ``lum/...``
so per-node profiles can be matched with :meth:`ModelIR.lum_op_names` (ONNX Runtime
renames fused nodes; :func:`bench.smartpad.lum_profile_ms` handles that).

Public API for emitters: :class:`ModelIR` (``inputs``, ``outputs``: :class:`TensorSpec`
with NCHW shapes; ``ops``: :class:`Op` in topological order; ``to_dict``/``from_dict``
for JSON), :func:`make_weights`, :func:`make_inputs`, :func:`same_pads`; builders
:func:`single_layer_model`, :func:`padding_model`, :func:`padded_model` (and
:func:`chained_model`, two LUMs in a row, for fusion tests); LUT keys
:func:`padding_keys`.

How each benchable type is padded (Fig. 5c) and which LUT keys it uses
----------------------------------------------------------------------
Each type's LUM (its input shapes and its IR ops) comes from its module in
:mod:`estimator.layers` (``lum_inputs``, ``lum_output``, ``lum_ops``); this module wraps it
in padding convolutions and never names a type.

Padding-only pairs live in a lookup table keyed by ``(h, w, c)``. :func:`padding_keys`
returns, for a LUM, the keys of its *input side* (one per LUM input) and its *output
side*. Eq. 4 then uses

    T_b1 = sum of LUT[k] over the input-side keys,      T_b2 = LUT[output key].

With a single input this is exactly the paper. For multi-input LUMs it generalises it:
the padded model contains one input padding conv per LUM input and one output padding
conv, i.e. padding time ``sum_i t_in(k_i) + t_out(k_out)``, while ``T_b1`` contains
``sum_i (t_in(k_i) + t_out(k_i))`` and ``T_b2 = t_in(k_out) + t_out(k_out)``. Under the
paper's assumption that each pair's time splits between its two convs in proportion to
their (equal) work, the true padding time lies between them (for two equal inputs it is
exactly their midpoint, and so is the number of op dispatches), which is what Eq. 4
needs. A shared input's second reader adds its ``t_out(k_i)``, which ``T_b1`` already
counts: the padding time stays within the same bounds, nearer the upper one.

Each type's module says how its LUM is fed and read (a one-input map, two operands, a
broadcast SE-style operand from a ``(1, 1, 1, 1)`` graph input, a constant operand as an
initializer, token tensors padded as rows, ...); ``docs/layer-types.md`` has the table.

LUM activations follow Table 2 of the paper: conv2d, dwconv2d and add carry a fused ReLU,
fc and mul none. A raw param ``act`` (an activation name, or ``"none"``) overrides it.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from estimator.layers import BENCHABLE_TYPES, SPECS, LayerSpecError, bench_params, describe, fused_act
from estimator.layers.ir import Op, TensorSpec, jsonable as _jsonable
from estimator.layers.params import opt_int as _int, same_pads

__all__ = [
    "Op",
    "TensorSpec",
    "ModelIR",
    "PaddingKeys",
    "HWC",
    "OPSET",
    "BENCHABLE_TYPES",
    "single_layer_model",
    "padding_model",
    "padded_model",
    "chained_model",
    "padding_keys",
    "lum_io_shapes",
    "same_pads",
    "make_weights",
    "make_inputs",
    "to_onnx",
]

#: ONNX opset of emitted models.
OPSET = 17

#: ``(h, w, c)``: the key of a padding-only pair.
HWC = tuple[int, int, int]

#: Activation of the padding convs.
PAD_ACT = "relu"


@dataclass(frozen=True)
class ModelIR:
    """A benchmark model: ``kind`` is ``"single"`` (Fig. 5a), ``"padding"`` (5b),
    ``"padded"`` (5c) or ``"chain"`` (:func:`chained_model`)."""

    name: str
    kind: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    ops: tuple[Op, ...]
    layer_type: str | None = None
    params: Mapping[str, Any] | None = None
    pad_key: HWC | None = None  # for kind == "padding"

    def lum_op_names(self) -> tuple[str, ...]:
        """Names of the IR ops that form the LUM (their ONNX nodes are these names and
        ``<name>/...``)."""
        return tuple(op.name for op in self.ops if op.role == "lum")

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind,
            "inputs": [{"name": t.name, "shape": list(t.shape)} for t in self.inputs],
            "outputs": [{"name": t.name, "shape": list(t.shape)} for t in self.outputs],
            "ops": [o.to_dict() for o in self.ops],
            "layer_type": self.layer_type,
            "params": _jsonable(dict(self.params)) if self.params is not None else None,
            "pad_key": list(self.pad_key) if self.pad_key else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelIR":
        return cls(
            d["name"], d["kind"],
            tuple(TensorSpec(t["name"], tuple(t["shape"])) for t in d["inputs"]),
            tuple(TensorSpec(t["name"], tuple(t["shape"])) for t in d["outputs"]),
            tuple(Op.from_dict(o) for o in d["ops"]),
            d.get("layer_type"), d.get("params"),
            tuple(d["pad_key"]) if d.get("pad_key") else None,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class PaddingKeys:
    """LUT keys of a LUM: ``T_b1 = sum(LUT[k] for k in inputs)``, ``T_b2 = LUT[output]``."""

    inputs: tuple[HWC, ...]
    output: HWC

    def all(self) -> tuple[HWC, ...]:
        """Distinct keys, in a stable order."""
        return tuple(dict.fromkeys((*self.inputs, self.output)))


# ----------------------------------------------------------------------- param helpers


def _lum_act(layer_type: str, p: Mapping[str, Any]) -> str | None:
    """The LUM's fused activation: raw param ``act``, else the type's default (Table 2)."""
    a = fused_act(bench_params(layer_type, p))
    if a == "other":
        raise LayerSpecError("act='other' names no operator a benchmark model can be built with")
    return a


# ------------------------------------------------------------------------- LUM building


@dataclass(frozen=True)
class _LumSpec:
    """What the builders need to know about a LUM: its input shapes, its op(s)."""

    input_shapes: tuple[tuple[int, int, int, int], ...]  # NCHW
    output_shape: tuple[int, int, int, int]  # NCHW (fc: (1, c_out, 1, 1) around the gemm)


def _check_benchable(layer_type: str, params: Mapping[str, Any]) -> None:
    spec = SPECS.get(layer_type)
    if spec is None:
        describe(layer_type, params)  # raises the vocabulary's precise error
    if not spec or not spec.benchable:
        raise LayerSpecError(f"layer type {layer_type!r} cannot be benchmarked with smart padding; "
                             f"benchable: {', '.join(BENCHABLE_TYPES)}")
    if _int(params, "n", 1) != 1:
        raise LayerSpecError(f"benchmarks run at batch 1, got n={params['n']}")


def _lum_spec(layer_type: str, params: Mapping[str, Any], model_format: str = "onnx") -> _LumSpec:
    _check_benchable(layer_type, params)
    counts = describe(layer_type, params)  # validates and gives the output shape
    spec = SPECS[layer_type]
    if not spec.renders(params, model_format):
        why = (spec.render_limits if model_format in spec.model_formats and spec.render_limits
               else f"the type renders to {', '.join(spec.model_formats)}")
        raise LayerSpecError(f"{layer_type} {dict(params)} has no {model_format} rendering ({why})")
    return _LumSpec(tuple(spec.lum_inputs(params, counts, model_format)), spec.lum_output(params, counts, model_format))


def _lum_ops(layer_type: str, p: Mapping[str, Any], ins: Sequence[str], spec: _LumSpec,
             out_name: str, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
    """The LUM as IR ops, reading tensors ``ins``, writing ``out_name`` (NCHW; for a
    single-layer fc, ``(1, c_in)`` -> ``(1, c_out)`` without flatten/reshape glue)."""
    return SPECS[layer_type].lum_ops(p, ins, spec.output_shape, out_name, _lum_act(layer_type, p), single=single,
                                     model_format=model_format)


def _hwc_of(shape: Sequence[int]) -> HWC:
    return int(shape[2]), int(shape[3]), int(shape[1])


def lum_io_shapes(layer_type: str, params: Mapping[str, Any], model_format: str = "onnx"
                  ) -> tuple[tuple[tuple[int, int, int, int], ...], tuple[int, int, int, int]]:
    """NCHW shapes of the LUM's inputs and output (fc: ``(1, c, 1, 1)`` around the Gemm)."""
    s = _lum_spec(layer_type, params, model_format)
    return s.input_shapes, s.output_shape


def _reads_graph_input(layer_type: str, params: Mapping[str, Any]) -> bool:
    """Whether the LUM reads the network's input (a stem): its padded model has no
    input-side padding, see :func:`padded_model`."""
    return SPECS[layer_type].reads_graph_input(params)


def padding_keys(layer_type: str, params: Mapping[str, Any], model_format: str = "onnx") -> PaddingKeys:
    """LUT keys ``(h, w, c)`` of the LUM's input side(s) and output side (Eq. 4) in a model of
    ``model_format`` (token tensors are padded in that format's :func:`rows_of` layout); no
    input side for a LUM that reads the graph input (``T_b1 = 0``)."""
    s = _lum_spec(layer_type, params, model_format)
    if _reads_graph_input(layer_type, params):
        return PaddingKeys((), _hwc_of(s.output_shape))
    return PaddingKeys(tuple(_hwc_of(x) for x in s.input_shapes), _hwc_of(s.output_shape))


def _pad_conv(name: str, inp: str, out: str, c_in: int, c_out: int, h: int, w: int, role: str) -> Op:
    a = dict(c_in=c_in, c_out=c_out, k_h=1, k_w=1, s_h=1, s_w=1, d_h=1, d_w=1, groups=1,
             pads=(0, 0, 0, 0), bias=True, depthwise=False, padding="valid")
    return Op("conv", name, (inp,), out, (1, c_out, h, w), a, PAD_ACT, role)


def _model_name(kind: str, layer_type: str, params: Mapping[str, Any]) -> str:
    items = ",".join(f"{k}={params[k]}" for k in sorted(params))
    return f"{kind}_{layer_type}_" + hashlib.sha1(items.encode()).hexdigest()[:10]


def single_layer_model(layer_type: str, params: Mapping[str, Any], model_format: str = "onnx") -> ModelIR:
    """Fig. 5a: the LUM alone, its inputs graph inputs, for ``model_format``."""
    s = _lum_spec(layer_type, params, model_format)
    shapes: Sequence[tuple[int, ...]] = s.input_shapes
    out_shape: tuple[int, ...] = s.output_shape
    shapes, out_shape = SPECS[layer_type].single_layer_io(params, s.input_shapes, s.output_shape, model_format)
    inputs = tuple(TensorSpec(f"x{i}", tuple(shp)) for i, shp in enumerate(shapes))
    ops = _lum_ops(layer_type, params, [t.name for t in inputs], s, "y", single=True, model_format=model_format)
    return ModelIR(_model_name("single", layer_type, params), "single", inputs,
                   (TensorSpec("y", out_shape),), tuple(ops), layer_type, dict(params))


def padding_model(h: int, w: int, c: int) -> ModelIR:
    """Fig. 5b: conv 1x1 (1 -> c) + ReLU, then conv 1x1 (c -> 1) + ReLU at ``h x w``."""
    h, w, c = int(h), int(w), int(c)
    if min(h, w, c) < 1:
        raise LayerSpecError(f"padding pair needs h, w, c >= 1, got {(h, w, c)}")
    ops = (
        _pad_conv("pad_in", "x", "pad_in_out", 1, c, h, w, "pad_in"),
        _pad_conv("pad_out", "pad_in_out", "y", c, 1, h, w, "pad_out"),
    )
    return ModelIR(f"padding_{h}x{w}x{c}", "padding", (TensorSpec("x", (1, 1, h, w)),),
                   (TensorSpec("y", (1, 1, h, w)),), ops, pad_key=(h, w, c))


def _input_side(layer_type: str, params: Mapping[str, Any], s: _LumSpec
                ) -> tuple[tuple[TensorSpec, ...], list[Op], list[str]]:
    """Graph inputs, pad-in convs and the tensors the LUM reads (Fig. 5c's input side)."""
    graph_inputs: dict[tuple[int, int], TensorSpec] = {}
    ops: list[Op] = []
    lum_ins: list[str] = []
    if _reads_graph_input(layer_type, params):
        graph_inputs[(0, 0)] = TensorSpec("x", tuple(s.input_shapes[0]))
        lum_ins.append("x")
    for i, shp in enumerate(s.input_shapes if not lum_ins else ()):
        hw = (shp[2], shp[3])
        if hw not in graph_inputs:
            graph_inputs[hw] = TensorSpec(f"x{len(graph_inputs)}" if graph_inputs else "x", (1, 1, *hw))
        name = "pad_in" if len(s.input_shapes) == 1 else f"pad_in{i}"
        ops.append(_pad_conv(name, graph_inputs[hw].name, f"{name}_out", 1, shp[1], shp[2], shp[3], "pad_in"))
        lum_ins.append(f"{name}_out")
    return tuple(graph_inputs.values()), ops, lum_ins


def padded_model(layer_type: str, params: Mapping[str, Any], model_format: str = "onnx") -> ModelIR:
    """Fig. 5c: a pad-in conv per LUM input, the LUM, a pad-out conv, for ``model_format``
    (which decides the layout of token tensors, :func:`estimator.layers.registry.rows_of`).

    A conv2d with ``graph_input=1`` (a network's stem) reads the graph input itself, as it
    does in a network, where the host writes the image: only the output side is padded,
    and Eq. 4 runs with ``T_b1 = 0`` (:func:`padding_keys`). On Vela a pad-in conv writing
    a 3-channel map costs up to 10x its padding pair (a 224x224x3 NHWC write to DRAM), which
    smart padding would charge to the stem."""
    s = _lum_spec(layer_type, params, model_format)
    graph_inputs, ops, lum_ins = _input_side(layer_type, params, s)
    ops += _lum_ops(layer_type, params, lum_ins, s, "lum_out", model_format=model_format)
    _, c_out, h_out, w_out = s.output_shape
    ops.append(_pad_conv("pad_out", "lum_out", "y", c_out, 1, h_out, w_out, "pad_out"))
    outputs = [TensorSpec("y", (1, 1, h_out, w_out))]
    for i in SPECS[layer_type].shared_inputs(params):  # a second reader (count() checked the indices)
        _, c, h, w = s.input_shapes[i]
        outputs.append(TensorSpec(f"y_shared{i}", (1, 1, h, w)))
        ops.append(_pad_conv(f"pad_out_shared{i}", lum_ins[i], outputs[-1].name, c, 1, h, w, "pad_out"))
    return ModelIR(_model_name("padded", layer_type, params), "padded", graph_inputs,
                   tuple(outputs), tuple(ops), layer_type, dict(params))


def chained_model(first: tuple[str, Mapping[str, Any]], second: tuple[str, Mapping[str, Any]]) -> ModelIR:
    """Two LUMs in a row, padded as one (the A -> B model of a fusion test,
    ``bench.fusion_probe``): the first's pad-in conv(s), the first LUM, the second LUM
    reading the first's output, the second's pad-out conv. The padding is the same as in
    ``padded_model(*first)`` on the input side and ``padded_model(*second)`` on the output
    side. The second LUM reads one tensor, of the first's output shape; its IR ops are
    renamed ``next``, ``next/...`` (the first keeps ``lum``)."""
    (ta, pa), (tb, pb) = first, second
    sa, sb = _lum_spec(ta, pa), _lum_spec(tb, pb)
    if len(sb.input_shapes) != 1 or tuple(sb.input_shapes[0]) != tuple(sa.output_shape):
        raise LayerSpecError(f"{tb} reading {[list(x) for x in sb.input_shapes]} cannot follow {ta} writing "
                             f"{list(sa.output_shape)}: the second layer of a chain reads the first's output alone")
    graph_inputs, ops, lum_ins = _input_side(ta, pa, sa)
    ops += _lum_ops(ta, pa, lum_ins, sa, "mid")
    b_ops = _lum_ops(tb, pb, ["mid"], sb, "lum_out")
    own = {op.output for op in b_ops}

    def renamed(x: str) -> str:
        return "next" + x[3:] if x.startswith("lum") else f"next/{x}"

    for op in b_ops:
        ops.append(Op(op.kind, renamed(op.name), tuple(renamed(i) if i in own else i for i in op.inputs),
                      renamed(op.output), op.shape, op.attrs, op.act, op.role))
    _, c_out, h_out, w_out = sb.output_shape
    ops.append(_pad_conv("pad_out", renamed("lum_out"), "y", c_out, 1, h_out, w_out, "pad_out"))
    params = {"first": {"type": ta, **pa}, "second": {"type": tb, **pb}}
    return ModelIR(_model_name("chain", f"{ta}+{tb}", {k: str(v) for k, v in params.items()}), "chain", graph_inputs,
                   (TensorSpec("y", (1, 1, h_out, w_out)),), tuple(ops), None, params)


# ------------------------------------------------------------------- weights and inputs


def _rng(seed: int, name: str) -> np.random.Generator:
    h = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")
    return np.random.default_rng(h)


def make_weights(ir: ModelIR, seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Deterministic float32 weights per op name, shared by all emitters.

    Layouts: conv ``"w"`` OIHW ``(c_out, c_in // groups, k_h, k_w)``, ``"b"`` ``(c_out,)``;
    gemm ``"w"`` ``(c_out, c_in)`` (PyTorch Linear / ONNX Gemm transB=1 / TFLite
    FullyConnected), ``"b"`` ``(c_out,)``; act prelu ``"slope"`` ``(c,)`` (also beside the
    weights of an op whose fused ``act`` is prelu). Weights are
    N(0, 1/fan_in) so activations stay O(1) (no overflow, no denormals skewing timings).
    """
    out: dict[str, dict[str, np.ndarray]] = {}
    for op in ir.ops:
        r = _rng(seed, op.name)
        a = op.attrs
        if op.kind == "conv":
            cig = a["c_in"] // a["groups"]
            fan = cig * a["k_h"] * a["k_w"]
            w = r.standard_normal((a["c_out"], cig, a["k_h"], a["k_w"]), dtype=np.float32) / np.float32(math.sqrt(fan))
            d = {"w": w}
            if a.get("bias", True):
                d["b"] = (0.1 * r.standard_normal(a["c_out"], dtype=np.float32)).astype(np.float32)
            out[op.name] = d
        elif op.kind == "gemm":
            w = r.standard_normal((a["c_out"], a["c_in"]), dtype=np.float32) / np.float32(math.sqrt(a["c_in"]))
            d = {"w": w}
            if a.get("bias", True):
                d["b"] = (0.1 * r.standard_normal(a["c_out"], dtype=np.float32)).astype(np.float32)
            out[op.name] = d
        elif op.kind == "act" and a.get("kind") == "prelu":
            out[op.name] = {"slope": (0.25 * np.ones(op.shape[1], dtype=np.float32))}
        elif op.kind in ("add", "mul") and a.get("const"):
            b = 0.1 * r.standard_normal(tuple(a["const"]), dtype=np.float32)
            out[op.name] = {"b": (b + np.float32(1.0) if op.kind == "mul" else b).astype(np.float32)}
        elif op.kind == "batchnorm":
            c = int(a["c"])
            out[op.name] = {"scale": (1.0 + 0.1 * r.standard_normal(c)).astype(np.float32),
                            "shift": (0.1 * r.standard_normal(c)).astype(np.float32),
                            "mean": (0.1 * r.standard_normal(c)).astype(np.float32),
                            "var": (1.0 + 0.1 * np.abs(r.standard_normal(c))).astype(np.float32)}
        elif op.kind in SPECS:  # an op kind of the layer type's own (estimator.layers)
            own = SPECS[op.kind].op_weights(op, r)
            if own:
                out[op.name] = own
        if op.act == "prelu":  # a fused PReLU's slopes (rendered as a PRelu node after the op)
            c = op.shape[1] if len(op.shape) > 1 else op.shape[0]
            out.setdefault(op.name, {})["slope"] = 0.25 * np.ones(c, dtype=np.float32)
        if op.role in ("pad_in", "pad_out") and op.name in out:
            # Padding convs get non-negative weights and biases. With signed random weights a
            # padding conv's ReLU output can be identically zero (e.g. pad_out after a global
            # pool, whose input is nearly constant): int8 calibration then collapses that
            # tensor's scale (XNNPACK refuses it) and no real network looks like that. Only
            # signs change; the ops, shapes and work are the same. The LUM keeps its weights.
            out[op.name] = {k: np.abs(v) for k, v in out[op.name].items()}
    return out


def make_inputs(ir: ModelIR, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic float32 N(0, 1) feeds for the graph inputs."""
    return {t.name: _rng(seed, "input:" + t.name).standard_normal(t.shape, dtype=np.float32) for t in ir.inputs}


# ------------------------------------------------------------------------- ONNX emitter


def _onnx_act(kind: str, x: str, y: str, name: str, a: Mapping[str, Any], inits: list, weights: Mapping[str, np.ndarray],
              c: int, rank: int = 4) -> list:
    from onnx import helper, numpy_helper

    def const(nm: str, v: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(v, nm))
        return nm

    mk = helper.make_node
    if kind == "relu":
        return [mk("Relu", [x], [y], name=name)]
    if kind in ("relu6", "clip"):
        lo, hi = (0.0, 6.0) if kind == "relu6" else (float(a.get("min", -1.0)), float(a.get("max", 1.0)))
        return [mk("Clip", [x, const(f"{name}/min", np.array(lo, np.float32)),
                            const(f"{name}/max", np.array(hi, np.float32))], [y], name=name)]
    if kind == "sigmoid":
        return [mk("Sigmoid", [x], [y], name=name)]
    if kind == "hardsigmoid":
        return [mk("HardSigmoid", [x], [y], name=name, alpha=1.0 / 6.0, beta=0.5)]
    if kind == "hardswish":
        return [mk("HardSwish", [x], [y], name=name)]
    if kind == "silu":
        return [mk("Sigmoid", [x], [f"{name}/sig"], name=f"{name}/sigmoid"),
                mk("Mul", [x, f"{name}/sig"], [y], name=name)]
    if kind == "tanh":
        return [mk("Tanh", [x], [y], name=name)]
    if kind == "leakyrelu":
        return [mk("LeakyRelu", [x], [y], name=name, alpha=float(a.get("alpha", 0.1)))]
    if kind == "prelu":
        slope = weights["slope"].reshape((c,) + (1,) * (rank - 2))  # per channel (axis 1)
        return [mk("PRelu", [x, const(f"{name}/slope", slope)], [y], name=name)]
    if kind == "elu":
        return [mk("Elu", [x], [y], name=name, alpha=float(a.get("alpha", 1.0)))]
    if kind == "gelu":  # exact GELU, x * 0.5 * (1 + erf(x / sqrt 2)): what torch exports at opset 17
        return [
            mk("Div", [x, const(f"{name}/sqrt2", np.array(math.sqrt(2.0), np.float32))], [f"{name}/d"], name=f"{name}/div"),
            mk("Erf", [f"{name}/d"], [f"{name}/e"], name=f"{name}/erf"),
            mk("Add", [f"{name}/e", const(f"{name}/one", np.array(1.0, np.float32))], [f"{name}/a"], name=f"{name}/add"),
            mk("Mul", [x, f"{name}/a"], [f"{name}/m"], name=f"{name}/mul"),
            mk("Mul", [f"{name}/m", const(f"{name}/half", np.array(0.5, np.float32))], [y], name=name),
        ]
    if kind == "mish":
        return [mk("Softplus", [x], [f"{name}/sp"], name=f"{name}/softplus"),
                mk("Tanh", [f"{name}/sp"], [f"{name}/t"], name=f"{name}/tanh"),
                mk("Mul", [x, f"{name}/t"], [y], name=name)]
    if kind == "softplus":
        return [mk("Softplus", [x], [y], name=name)]
    raise LayerSpecError(f"activation {kind!r} has no ONNX rendering")


def to_onnx(ir: ModelIR, seed: int = 0) -> bytes:
    """Serialize a :class:`ModelIR` to an ONNX model (opset :data:`OPSET`, float32)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = make_weights(ir, seed)
    nodes: list = []
    inits: list = []

    def init(nm: str, v: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(v, nm))
        return nm

    for op in ir.ops:
        a = op.attrs
        # with a fused activation, the main node writes an intermediate tensor
        main_out = f"{op.name}/pre_act" if op.act else op.output
        w = weights.get(op.name, {})
        if op.kind == "conv":
            ins = list(op.inputs) + [init(f"{op.name}/W", w["w"])]
            if "b" in w:
                ins.append(init(f"{op.name}/B", w["b"]))
            nodes.append(helper.make_node(
                "Conv", ins, [main_out], name=op.name, kernel_shape=[a["k_h"], a["k_w"]],
                strides=[a["s_h"], a["s_w"]], dilations=[a.get("d_h", 1), a.get("d_w", 1)],
                pads=[a["pads"][0], a["pads"][1], a["pads"][2], a["pads"][3]], group=a["groups"]))
        elif op.kind == "gemm":
            ins = list(op.inputs) + [init(f"{op.name}/W", w["w"])]
            if "b" in w:
                ins.append(init(f"{op.name}/B", w["b"]))
            nodes.append(helper.make_node("Gemm", ins, [main_out], name=op.name, transB=1))
        elif op.kind in ("maxpool", "avgpool"):
            kw: dict[str, Any] = dict(kernel_shape=[a["k_h"], a["k_w"]], strides=[a["s_h"], a["s_w"]],
                                      pads=list(a["pads"]))
            if op.kind == "avgpool":
                kw["count_include_pad"] = 0
            nodes.append(helper.make_node("MaxPool" if op.kind == "maxpool" else "AveragePool",
                                          list(op.inputs), [main_out], name=op.name, **kw))
        elif op.kind == "globalpool":
            nodes.append(helper.make_node("GlobalMaxPool" if a.get("mode") == "max" else "GlobalAveragePool",
                                          list(op.inputs), [main_out], name=op.name))
        elif op.kind in ("add", "mul"):
            ins = list(op.inputs) + ([init(f"{op.name}/B", w["b"])] if a.get("const") else [])
            nodes.append(helper.make_node(op.kind.capitalize(), ins, [main_out], name=op.name))
        elif op.kind == "batchnorm":
            ins = [op.inputs[0]] + [init(f"{op.name}/{k}", w[k]) for k in ("scale", "shift", "mean", "var")]
            nodes.append(helper.make_node("BatchNormalization", ins, [main_out], name=op.name, epsilon=1e-5))
        elif op.kind == "concat":
            nodes.append(helper.make_node("Concat", list(op.inputs), [main_out], name=op.name, axis=a.get("axis", 1)))
        elif op.kind == "resize":
            sizes = init(f"{op.name}/sizes", np.array(op.shape, dtype=np.int64))
            kw = {"mode": a["mode"], "coordinate_transformation_mode": a["coord"]}
            if a["mode"] == "nearest":
                kw["nearest_mode"] = "floor"
            nodes.append(helper.make_node("Resize", [op.inputs[0], "", "", sizes], [main_out], name=op.name, **kw))
        elif op.kind == "act":
            nodes += _onnx_act(a["kind"], op.inputs[0], main_out, op.name, a, inits, w, op.shape[1])
        elif op.kind == "flatten":
            nodes.append(helper.make_node("Flatten", list(op.inputs), [main_out], name=op.name, axis=1))
        elif op.kind == "reshape":
            shp = init(f"{op.name}/shape", np.array(op.shape, dtype=np.int64))
            nodes.append(helper.make_node("Reshape", [op.inputs[0], shp], [main_out], name=op.name))
        elif op.kind in SPECS:  # an op kind of the layer type's own (estimator.layers)
            nodes += SPECS[op.kind].onnx_nodes(op, main_out, w, init)
        else:
            raise LayerSpecError(f"IR op kind {op.kind!r} has no ONNX rendering")
        if op.act:
            c = op.shape[1] if len(op.shape) > 1 else op.shape[0]
            nodes += _onnx_act(op.act, main_out, op.output, f"{op.name}/act", {}, inits, w, c, len(op.shape))

    graph = helper.make_graph(
        nodes, ir.name,
        [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.shape)) for t in ir.inputs],
        [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.shape)) for t in ir.outputs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="confident-latency-bench")
    model.ir_version = 8  # readable by every ONNX Runtime >= 1.14
    onnx.checker.check_model(model)
    return model.SerializeToString()
