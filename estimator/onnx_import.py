"""ONNX -> :class:`Network`: the layers the estimator predicts, in topological order.

Pipeline of :func:`load_network`
--------------------------------
1. :func:`load_model` parses a path, bytes or ``onnx.ModelProto``. External-data files are
   never read and initializers may carry dims but no data (stripped models): weights are
   not needed, only their shapes.
2. Dynamic input dimensions are fixed from ``input_shapes``; any left raise
   :class:`DynamicShapeError` naming each dynamic input and its dims.
3. onnxsim simplifies the graph (constant folding, BN folding, dropout removal). This is
   the same for every device. If it fails, times out, or cannot run because initializers
   carry no data, the original graph is used and a warning is recorded. On the fast path
   (``fast=True``, the default) a graph onnxsim would return unchanged (see
   :func:`_already_simple`: vocabulary ops only, nothing to fold, fuse or remove) is taken
   as simplified without starting the onnxsim worker.
4. Every tensor's shape. On the fast path :mod:`estimator.onnx_shapes` propagates them in
   one pass (evaluating small constant subgraphs with numpy on the way); wherever it cannot
   reproduce the reference exactly (an unknown operator, a node out of order, ...) the
   reference runs instead: ONNX shape inference (with data propagation) on a light copy of
   the model without large weight data, and on an unsimplified graph small constant
   subgraphs (shape arithmetic such as torch's ``chunk``) evaluated with ONNX's reference
   implementation between inference rounds, so the fallback finds the same shapes onnxsim
   would have. Both give the same shapes (``tests/test_fastpath.py``); the fast path fills
   :attr:`Network.model`'s ``value_info`` only when the record is read.
5. Every node becomes part of exactly one layer or is listed in :attr:`Network.free_nodes`
   with the reason it costs nothing (constants, identities, dropout, shape arithmetic,
   no-ops such as a reshape to the same shape or a one-input concat, dead code).
   Each layer type's module claims its ONNX operators and turns their nodes into layers
   (``onnx_ops`` and ``from_onnx`` in :mod:`estimator.layers`, dispatched through
   :data:`estimator.layers.registry.ONNX_OPS`); this module walks the graph and never
   names a layer type's pattern. Operators no type claims become layers of type ``other``
   carrying their ``op_type``: nothing is dropped and nothing is silently zero. On the unsimplified
   graph the same torch export gives the same layers as on the simplified one (onnxsim runs
   without its MatMul + Add -> Gemm fusion, which wraps a Linear over tokens in two Reshapes).
6. Device fusion rules (:class:`~estimator.fusion.FusionRules`) fold activations into the
   producing conv/dwconv/fc/add/mul and, where onnxsim did not, BatchNormalization into
   the preceding conv. SiLU appears as ``Sigmoid`` + ``Mul(x, sigmoid(x))`` and HardSwish
   as the ``HardSwish`` op or ``Mul(x, HardSigmoid(x))``; both are recognised as one
   activation.

Native core
-----------
Where ``pip install`` found a C compiler, it built :mod:`estimator.native_import` (setup.py),
a typed Cython twin of steps 4-6 for stripped MobileNet-class graphs: ``load_network`` of
MobileNetV2 in 0.43 ms against 2.9-3.4 ms in Python (README, "Service speed"). It gives up
on anything it does not reproduce exactly, and this module's Python code answers; that code
is the truth (tests/test_native_import.py holds the twin to it field by field).

Simplification timeout
----------------------
onnxsim is C++; a thread running it cannot be stopped, and it may hold the GIL. So by
default onnxsim runs in one long-lived worker process (started on first use, reused for
every later call, so the NAS fast path pays no process start per call). The parent waits
for the reply with ``select`` and a deadline; on timeout (or if onnxsim crashes the
worker) the worker is killed, the network is extracted from the unsimplified graph with a
warning, and the next call starts a fresh worker. Calls from several threads share the
worker one at a time. ``simplify_timeout_s=None`` runs onnxsim in-process instead: no
timeout, no isolation, no serialisation cost.

Parameter accounting
--------------------
Parameters are those of the deployed kernels: after BN folding, a conv has its weights
plus one bias per output channel, whether or not torch's conv had a bias. torch counts the
BN's scale and shift instead of that bias, so a network's ``params`` equals torch's
parameter count minus one per output channel of every BN that was folded into a conv. A
BatchNormalization that cannot be folded (e.g. DenseNet's pre-activation BN after a
concat) becomes a broadcast ``mul`` layer (flag ``batchnorm``) with its scale and shift
(2 x channels) as parameters, which matches torch. PReLU slopes count as parameters;
scalar constants and buffers (e.g. YOLO anchor grids) do not.

Impossible nodes
----------------
A convolution or pooling window that does not fit its padded input, a non-positive kernel,
stride or dilation, negative pads, or convolution groups that do not divide the input and
output channels raise :class:`ImpossibleShapeError` (an :class:`OnnxImportError`) naming
the node, its window and its input: no runtime could execute such a model, so there is
nothing to estimate.

Layer flags
-----------
``unknown_op`` (type ``other``: operator outside the vocabulary), ``batch_gt_1``,
``unknown_shape`` (a shape could not be inferred; counts use 1s), ``ceil_mode`` (pool
output computed with ceil; bottom/right pads are extended so the counts match),
``bn_folded`` (a BN folded by the fusion rules, not by onnxsim), ``batchnorm``
(standalone BN as a broadcast mul), ``const_operand`` (add/mul with a constant operand),
``dynamic_weight`` (conv/gemm weight computed at run time), ``conv1d``/``pool1d`` (mapped
with h = 1), ``conv3d``/``pool3d`` (type other), ``non_channel_axis`` (concat along
another axis: h = w = 1, channels = elements per batch item), ``auto_pad``,
``shape_mismatch`` (the vocabulary's output shape differs from ONNX's),
``describe_failed`` (the node could not be mapped for another reason; type other, with a
warning),
``domain=...`` (operator from a non-default domain), ``subgraph`` (If/Loop/Scan: inner
nodes are not counted), ``embedding`` (Gather from a constant table), ``dilated_pool``,
``resizes_batch_or_channels``, ``pads_batch``.
"""
from __future__ import annotations

import atexit
import contextlib
import heapq
import io
import json
import math
import os
import select
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from itertools import chain, filterfalse
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, numpy_helper

from .errors import NotFoundError
from .fusion import FusionRules
from .layers import FUSED_ACT_TYPES, SPECS, Layer, LayerSpecError, LayerType, describe, hwc
from .layers.params import rows_chw
from .layers.importing import Draft as _Draft
from .layers.importing import ImpossibleShapeError, OnnxImportError
from .layers.importing import Unsupported as _Unsupported
from .layers.importing import attrs as _attrs
from .layers.registry import ONNX_OPS, LayerTypeSpec
from .onnx_shapes import (GraphNode, graph_nodes, initializer_info, is_dataless, propagate_shapes,
                          to_array)

__all__ = [
    "Network",
    "OnnxImportError",
    "OnnxFileNotFoundError",
    "DynamicShapeError",
    "InputShapeError",
    "ImpossibleShapeError",
    "load_model",
    "load_network",
    "native_core",
    "clear_counts_cache",
    "parse_input_shape",
    "DEFAULT_SIMPLIFY_TIMEOUT_S",
]

#: Default wall-clock limit for onnxsim, in seconds.
DEFAULT_SIMPLIFY_TIMEOUT_S = 60.0
_VALUE_INFO_LOCK = threading.Lock()

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, onnx.ModelProto]
Shape = tuple[int, ...]


class OnnxFileNotFoundError(OnnxImportError, NotFoundError):
    """The ONNX file does not exist."""


class DynamicShapeError(OnnxImportError):
    """An input has dynamic dimensions and no shape was given for it."""


class InputShapeError(OnnxImportError):
    """``input_shapes`` does not fit the model's inputs."""


def _one_line(s: object) -> str:
    return " ".join(str(s).split())


# ----------------------------------------------------------------------------- loading


def load_model(src: ModelSource) -> onnx.ModelProto:
    """Parse and sanity-check an ONNX model from a path, bytes or a ``ModelProto``.

    External data is never loaded (tensors stored outside the file keep their dims).
    A ``ModelProto`` is checked and returned as is (not copied).
    Raises :class:`OnnxImportError` (or :class:`OnnxFileNotFoundError`) with a one-line message.
    """
    return _load(src)[0]


def _load(src: ModelSource, nodes: list[GraphNode] | None = None) -> tuple[onnx.ModelProto, bytes | None]:
    """The model and, when it was parsed from bytes, those bytes. With ``nodes`` (an empty
    list), the graph's nodes are appended to it as :class:`GraphNode` and validated from there."""
    if isinstance(src, onnx.ModelProto):
        _validate(src, "model", nodes)
        return src, None
    if isinstance(src, (bytes, bytearray, memoryview)):
        data, what = bytes(src), "ONNX bytes"
    elif isinstance(src, (str, os.PathLike)):
        path = Path(src)
        what = str(path)
        if not path.exists():
            raise OnnxFileNotFoundError(f"{path}: no such file")
        if path.is_dir():
            raise OnnxImportError(f"{path}: is a directory, not an ONNX file")
        try:
            data = path.read_bytes()
        except OSError as e:
            raise OnnxImportError(f"{path}: cannot read: {e.strerror or e}") from None
    else:
        raise OnnxImportError(f"cannot load an ONNX model from a {type(src).__name__}; "
                              "give a path, bytes or an onnx.ModelProto")
    if not data:
        raise OnnxImportError(f"{what}: empty (0 bytes), not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise OnnxImportError(
            f"{what}: not a valid ONNX model: protobuf parsing failed ({_one_line(e) or 'decode error'}); "
            "the file is truncated or not ONNX") from None
    _validate(model, what, nodes)
    return model, data


def _validate(model: onnx.ModelProto, what: str, nodes: list[GraphNode] | None = None) -> None:
    if model.ir_version <= 0 or not model.HasField("graph"):
        missing = "an IR version" if model.ir_version <= 0 else "a graph"
        raise OnnxImportError(f"{what}: not an ONNX model (it has no {missing})")
    if not model.opset_import:
        raise OnnxImportError(f"{what}: the model declares no opset (opset_import is missing); truncated or not ONNX")
    g = model.graph
    if not g.node:
        raise OnnxImportError(f"{what}: the ONNX graph has no nodes")
    if nodes is not None:
        nodes.extend(graph_nodes(model))
    all_nodes: Sequence[Any] = nodes if nodes is not None else g.node
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    empty_defined = "" in defined
    defined.update(chain.from_iterable([n.output for n in all_nodes]))
    if not empty_defined:
        defined.discard("")  # (an omitted optional output)
    read = set(chain.from_iterable([n.input for n in all_nodes]))
    read.discard("")
    for n in all_nodes if not read <= defined else ():  # (find the first offender)
        for i in n.input:
            if i and i not in defined:
                raise OnnxImportError(
                    f"{what}: node {n.name or n.op_type!r} ({n.op_type}) reads {i!r}, which no node, input or "
                    "initializer defines; the model is truncated or malformed")
    for o in g.output:
        if o.name not in defined:
            raise OnnxImportError(f"{what}: graph output {o.name!r} is not produced by any node; malformed model")


# ------------------------------------------------------------------------ input shapes


def parse_input_shape(text: str) -> tuple[str | None, Shape]:
    """Parse ``1x3x224x224`` or ``name:1x3x224x224`` (the name may itself contain ``:``)."""
    t = text.strip()
    name: str | None = None
    if ":" in t:
        name, t = t.rsplit(":", 1)
        name = name.strip()
        if not name:
            raise InputShapeError(f"bad input shape {text!r}: empty input name before ':'")
    dims = t.lower().replace(",", "x").split("x")
    try:
        shape = tuple(int(d) for d in dims)
    except ValueError:
        raise InputShapeError(
            f"bad input shape {text!r}: expected dims like 1x3x224x224 or NAME:1x3x224x224") from None
    if not shape or min(shape) < 1:
        raise InputShapeError(f"bad input shape {text!r}: every dimension must be an integer >= 1")
    return name, shape


def _dim_str(d: onnx.TensorShapeProto.Dimension) -> str:
    if d.HasField("dim_value") and d.dim_value > 0:
        return str(d.dim_value)
    if d.HasField("dim_param") and d.dim_param:
        return d.dim_param
    return "?"


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    init = {t.name for t in model.graph.initializer} | {t.values.name for t in model.graph.sparse_initializer}
    return [vi for vi in model.graph.input if vi.name not in init]


def _fix_inputs(model: onnx.ModelProto, input_shapes: Any) -> dict[str, Shape]:
    """Write fixed shapes into the model's graph inputs; return {name: shape}."""
    inputs = _graph_inputs(model)
    names = [vi.name for vi in inputs]
    if not inputs:
        raise InputShapeError("the model has no graph inputs")
    given: dict[str, Shape] = {}
    if input_shapes is None:
        pass
    elif isinstance(input_shapes, Mapping):
        for k, v in input_shapes.items():
            given[str(k)] = _as_shape(v, str(k))
    elif isinstance(input_shapes, Sequence) and not isinstance(input_shapes, (str, bytes)):
        if len(names) != 1:
            raise InputShapeError(
                f"a single input shape was given but the model has {len(names)} inputs ({', '.join(names)}); "
                "give one shape per input name")
        given[names[0]] = _as_shape(input_shapes, names[0])
    else:
        raise InputShapeError(f"input_shapes must be a mapping name -> shape or one shape, got {input_shapes!r}")
    unknown = [k for k in given if k not in names]
    if unknown:
        raise InputShapeError(
            f"input shape given for unknown input {', '.join(map(repr, unknown))}; "
            f"the model's inputs are: {', '.join(names)}")
    fixed: dict[str, Shape] = {}
    dynamic: list[str] = []
    examples: list[str] = []
    for vi in inputs:
        if not vi.type.HasField("tensor_type"):
            raise InputShapeError(f"input {vi.name!r} is not a tensor ({vi.type.WhichOneof('value')}); "
                                  "only tensor inputs are supported")
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if vi.name in given:
            shape = given[vi.name]
            if dims is not None:
                if len(dims) != len(shape):
                    raise InputShapeError(
                        f"input {vi.name!r} has rank {len(dims)} [{', '.join(_dim_str(d) for d in dims)}], "
                        f"but the given shape {'x'.join(map(str, shape))} has rank {len(shape)}")
                for i, (d, s) in enumerate(zip(dims, shape)):
                    if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != s:
                        raise InputShapeError(
                            f"input {vi.name!r} has fixed dimension {i} = {d.dim_value}, "
                            f"but the given shape {'x'.join(map(str, shape))} says {s}")
            tt.ClearField("shape")
            for s in shape:
                tt.shape.dim.add().dim_value = s
            fixed[vi.name] = shape
        elif dims is None:
            dynamic.append(f"{vi.name!r} [unknown rank]")
            examples.append(f"{vi.name}:1x3x224x224")
        elif any(not (d.HasField("dim_value") and d.dim_value > 0) for d in dims):
            dynamic.append(f"{vi.name!r} [{', '.join(_dim_str(d) for d in dims)}]")
            examples.append(f"{vi.name}:" + "x".join(str(d.dim_value) if d.dim_value > 0 else "1" for d in dims))
        else:
            fixed[vi.name] = tuple(int(d.dim_value) for d in dims)
    if dynamic:
        if len(names) == 1:
            examples = [examples[0].rsplit(":", 1)[1]]
        raise DynamicShapeError(
            f"dynamic input dimensions: {'; '.join(dynamic)}; fix them with input_shapes "
            f"(CLI: {' '.join('--input-shape ' + e for e in examples)})")
    return fixed


def _as_shape(v: Any, name: str) -> Shape:
    if isinstance(v, str):
        return parse_input_shape(v)[1]
    try:
        shape = tuple(int(d) for d in v)
        ok = all(float(d) == int(d) for d in v)
    except (TypeError, ValueError):
        raise InputShapeError(f"shape for input {name!r} must be a sequence of integers, got {v!r}") from None
    if not ok or not shape or min(shape) < 1:
        raise InputShapeError(f"shape for input {name!r} must be integers >= 1, got {v!r}")
    return shape


# -------------------------------------------------------------------------- the network


@dataclass
class Network:
    """A network as the estimator sees it: layers after simplification and fusion."""

    layers: list[Layer]
    inputs: dict[str, Shape]
    outputs: dict[str, Shape | None] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: ONNX node name -> why it costs nothing (constant, identity, dropout, shape arithmetic, dead).
    free_nodes: dict[str, str] = field(default_factory=dict)
    _model: onnx.ModelProto | None = field(default=None, repr=False, compare=False)
    simplified: bool = False
    opset: int = 0
    name: str = ""
    #: The fast path propagated shapes itself: ``value_info`` is filled (by ONNX shape
    #: inference, with constant folding when True) on first access of :attr:`model`.
    _pending_value_info: bool | None = field(default=None, repr=False, compare=False)
    #: The native core imported the network: ``_model`` is the model as parsed, to be
    #: prepared as the Python path does (_prepare_model) on first access of :attr:`model`.
    _unprepared: bool = field(default=False, repr=False, compare=False)

    @property
    def model(self) -> onnx.ModelProto | None:
        """The graph the layers were extracted from (simplified when ``simplified``), with node
        names made unique and inferred shapes in ``value_info``. It describes structure, not
        weights: initializers over 4 KiB keep their dims and type but not their data."""
        if self._pending_value_info is not None and self._model is not None:
            with _VALUE_INFO_LOCK:
                if self._unprepared:
                    _prepare_model(self._model)
                    self._unprepared = False
                fold = self._pending_value_info
                if fold is not None:
                    _infer_shapes(self._model, [], fold=fold)
                    self._pending_value_info = None
        return self._model

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def params(self) -> int:
        return sum(layer.n_params for layer in self.layers)

    @property
    def ops(self) -> float:
        return float(sum(layer.ops for layer in self.layers))

    @property
    def bytes(self) -> int:
        return sum(layer.bytes for layer in self.layers)

    @property
    def totals(self) -> dict[str, float]:
        return {"layers": len(self.layers), "macs": self.macs, "params": self.params, "ops": self.ops,
                "bytes": self.bytes}

    @property
    def other_layers(self) -> list[Layer]:
        """Layers of type ``other`` (operators outside the vocabulary)."""
        return [layer for layer in self.layers if layer.type == LayerType.OTHER]

    def covered_nodes(self) -> list[str]:
        """Every node name, once: layers' nodes then free nodes."""
        return [n for layer in self.layers for n in layer.nodes] + list(self.free_nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "opset": self.opset,
            "simplified": self.simplified,
            "inputs": {k: list(v) for k, v in self.inputs.items()},
            "outputs": {k: (list(v) if v is not None else None) for k, v in self.outputs.items()},
            "totals": self.totals,
            "layers": [layer.to_dict() for layer in self.layers],
            "other_ops": sorted({layer.op_type for layer in self.other_layers}),
            "free_nodes": dict(self.free_nodes),
            "warnings": list(self.warnings),
        }


def load_network(
    src: ModelSource,
    input_shapes: Mapping[str, Sequence[int] | str] | Sequence[int] | None = None,
    fusion: FusionRules | Mapping[str, Any] | None = None,
    simplify: bool = True,
    simplify_timeout_s: float | None = DEFAULT_SIMPLIFY_TIMEOUT_S,
    fast: bool = True,
) -> Network:
    """Extract the layers of an ONNX model.

    ``input_shapes`` fixes dynamic input dims (``{name: shape}``, or one shape for a
    single-input model); ``fusion`` is a device's :class:`FusionRules` (or its dict form),
    :data:`~estimator.fusion.DEFAULT_FUSION` when ``None``. ``simplify_timeout_s`` bounds
    onnxsim (run in a reused worker process); ``None`` runs it in-process without a limit.

    ``fast`` (default) propagates shapes with :mod:`estimator.onnx_shapes` instead of ONNX
    shape inference wherever that gives the same shapes (it falls back to ONNX's otherwise),
    fills ``Network.model``'s ``value_info`` only when it is read, and does not start onnxsim
    for a graph it would leave as it is (nothing to fold, fuse or remove; see
    :func:`_already_simple`). ``fast=False`` is the reference path. Both give the same layers.

    On the fast path, with ``simplify`` on and no ``input_shapes``, bytes or a path go to the
    native core (:mod:`estimator.native_import`, where pip built it: see :func:`native_core`) first;
    it returns nothing for whatever it does not reproduce exactly, and the Python importer
    runs as without it.
    """
    rules = fusion if isinstance(fusion, FusionRules) else FusionRules.from_dict(fusion)
    if fast and simplify and input_shapes is None and isinstance(src, (bytes, bytearray, memoryview, str, os.PathLike)):
        net = _load_native(src, rules)
        if net is not None:
            return net
    nodes: list[GraphNode] | None = [] if fast else None
    model, raw = _load(src, nodes)
    if isinstance(src, onnx.ModelProto):  # never modify the caller's model
        model = onnx.ModelProto()
        model.CopyFrom(src)
    if input_shapes is not None:
        raw = None  # the inputs may change: serialise the modified model for onnxsim
    inputs = _fix_inputs(model, input_shapes)
    warnings: list[str] = []
    simplified = False
    shapes: dict[str, Shape | None] | None = None
    dataless: list[str] = []
    inits = None  # (initializer_info: one scan of the initializers, shared with the shape propagation)
    if simplify:
        if nodes is not None:
            inits = initializer_info(model)
            dataless = [info[1] for info in inits if info[4]]
        else:
            dataless = [t.name for t in model.graph.initializer if _dataless(t)]
        if dataless:
            warnings.append(_onnxsim_skipped(len(dataless), dataless[0]))
        elif nodes is not None and _already_simple(model, nodes, propagate_shapes(model, nodes)):
            simplified = True  # onnxsim would return the graph as it is
        else:
            try:
                model = _run_onnxsim(model, simplify_timeout_s, raw)
                simplified = True
                if nodes is not None:
                    nodes = graph_nodes(model)
            except _SimplifyFailed as e:
                warnings.append(f"onnxsim failed ({e}); layers come from the unsimplified graph")
    stripped = _prepare_model(model, nodes)
    fold = not simplified
    const_values: dict[str, np.ndarray] = {}
    if nodes is not None:
        # initializers without data: those found above (nothing changed them since), or none
        # after onnxsim (which only runs on models with all data) or without simplify
        known = set(dataless).union(stripped) if simplify and not simplified else None
        # (the initializers' dims and types are as scanned: only onnxsim replaces the model)
        shapes = propagate_shapes(model, nodes, dataless=known, const_values=const_values,
                                  inits=inits if known is not None else None)
    pending = None
    if shapes is None:
        shapes = _infer_shapes(model, warnings, fold=fold)
    else:
        pending = fold
    ex = _Extractor(model, shapes, rules, warnings, nodes, const_values if pending is not None else None)
    layers, free = ex.run()
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    outputs = {o.name: shapes.get(o.name) for o in model.graph.output}
    return _network(layers, inputs, outputs, warnings, free, model, simplified, opset, model.graph.name, pending)


def _onnxsim_skipped(n: int, first: str) -> str:
    """The warning when onnxsim cannot run because ``n`` initializers (``first`` of them) carry no data."""
    return (f"onnxsim skipped: {n} initializer(s) carry no data (stripped or external weights, "
            f"e.g. {first!r}); layers come from the unsimplified graph")


def _prepare_model(model: onnx.ModelProto, nodes: list[GraphNode] | None = None) -> list[str]:
    """The model as :attr:`Network.model` keeps it: large initializers without their data
    (the record describes structure; weights would only cost memory) and unique node names.
    Returns the names of the stripped initializers."""
    stripped = _strip_large(model, _STRIP_BYTES)
    _name_nodes(model, nodes)
    return stripped


def _network(layers: list[Layer], inputs: dict[str, Shape], outputs: dict[str, Shape | None], warnings: list[str],
             free: dict[str, str], model: onnx.ModelProto, simplified: bool, opset: int, name: str,
             pending: bool | None, unprepared: bool = False) -> Network:
    """The :class:`Network` (the tail of :func:`load_network`, shared by the native core)."""
    batch = {k: v[0] for k, v in inputs.items() if len(v) >= 2 and v[0] > 1}
    if batch:
        warnings.append("batch > 1 in input(s) " + ", ".join(f"{k!r} ({b})" for k, b in batch.items())
                        + "; affected layers are flagged batch_gt_1")
    others = sorted({layer.op_type for layer in layers if layer.type == LayerType.OTHER})
    if others:
        warnings.append(f"operators outside the layer vocabulary (kept as type 'other'): {', '.join(others)}")
    return Network(layers=layers, inputs=inputs, outputs=outputs, warnings=warnings, free_nodes=free, _model=model,
                   simplified=simplified, opset=opset, name=name, _pending_value_info=pending,
                   _unprepared=unprepared)


_UNSET: Any = object()
#: estimator.native_import once looked up (None: not built); tests set it to compare the two paths
_native: Any = _UNSET


def native_core() -> Any:
    """:mod:`estimator.native_import`, the typed Cython twin of this importer's hot path, or
    None where it is not built. ``pip install`` builds it where a C compiler exists (setup.py;
    ``python setup.py build_ext --inplace`` rebuilds it in a checkout). Looked up once per
    process, on first use (it imports this module)."""
    global _native
    if _native is _UNSET:
        try:
            from . import native_import as mod  # noqa: PLC0415
        except ImportError:
            mod = None
        _native = mod
    return _native


def _load_native(src: ModelSource, rules: FusionRules) -> Network | None:
    """:func:`load_network` (fast path, simplify on, no input shapes) by the native core, or
    None where it does not reproduce the Python importer exactly (then the caller runs it)."""
    mod = native_core()
    if mod is None:
        return None
    try:
        if isinstance(src, (str, os.PathLike)):
            path = Path(src)
            if not path.is_file():
                return None
            data = path.read_bytes()
        else:
            data = bytes(src)
        res = mod.extract(data, rules)
        if res is None:
            return None
        model = onnx.ModelProto()
        model.ParseFromString(data)  # (what protobuf rejects, the Python path reports)
    except Exception:  # noqa: BLE001 - malformed input or a native-core failure: the Python path decides
        return None
    drafts, free, shapes, graph_inputs, inputs, outputs, opset, name, n_dataless, first_dataless = res
    warnings = [_onnxsim_skipped(n_dataless, first_dataless)]
    get = shapes.get
    ds = [_Draft(*d) for d in drafts]
    shared = _shared_tensors(ds, outputs)
    layers = [_finish_layer(d, get, graph_inputs, warnings, shared) for d in ds]
    return _network(layers, inputs, outputs, warnings, free, model, False, opset, name, True, unprepared=True)


#: Operators a graph may consist of for onnxsim to leave it unchanged (see _already_simple).
_SIMPLE_OPS = frozenset({"Conv", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Add",
                         "Mul", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat", "Gemm",
                         "Flatten", "Softmax"})


def _already_simple(model: onnx.ModelProto, nodes: Sequence[GraphNode],
                    shapes: Mapping[str, Shape | None] | None) -> bool:
    """Whether onnxsim would return the graph as it is, judged conservatively: only
    operators from :data:`_SIMPLE_OPS`; no node whose inputs are all constant (nothing to
    fold; no Constant nodes), no element-wise op with a constant operand (no bias or scale
    for the optimizer to fuse into a conv or Gemm), no Concat of a single input or of another
    Concat, no Flatten of a tensor that already has rank <= 2, no dead node or unused
    initializer, every shape known. Anything else goes through onnxsim as before."""
    if shapes is None:
        return False
    g = model.graph
    static = {t.name for t in g.initializer}
    if len(g.sparse_initializer):
        return False
    producer: dict[str, GraphNode] = {}
    for n in nodes:
        for o in n.output:
            if o:
                producer[o] = n
    used: set[str] = set()
    for n in nodes:
        if n.domain not in ("", "ai.onnx") or n.op_type not in _SIMPLE_OPS:
            return False
        ins = [x for x in n.input if x]
        used.update(ins)
        if not ins or all(x in static for x in ins) or static.intersection(ins[:1]):
            return False
        if n.op_type in ("Add", "Mul") and any(x in static for x in ins):
            return False
        if n.op_type == "Concat" and (len(ins) < 2 or any(x in producer and producer[x].op_type == "Concat"
                                                          for x in ins)):
            return False
        if n.op_type == "Flatten" and len(shapes.get(ins[0]) or ()) <= 2:
            return False
        if any(shapes.get(o) is None for o in n.output if o):
            return False
    if any(t.name not in used for t in g.initializer):
        return False
    live = _live_node_ids(producer, [o.name for o in g.output])
    return len(live) == len(nodes) and all(o.name in producer for o in g.output)


def _live_node_ids(producer: Mapping[str, Any], outputs: Iterable[str]) -> set[int]:
    """``id()`` of every node the graph outputs depend on (``producer``: tensor -> node)."""
    live: set[int] = set()
    stack = list(outputs)
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        n = producer.get(t)
        if n is None or id(n) in live:
            continue
        live.add(id(n))
        stack.extend(x for x in n.input if x)
    return live


# ------------------------------------------------------------------------- model utils


#: True for an initializer whose values are not in the model (external or stripped).
_dataless = is_dataless


def _strip_large(model: onnx.ModelProto, max_bytes: int = 4096) -> list[str]:
    """Drop the data of initializers over ``max_bytes`` (dims and type stay); their names."""
    out = []
    for t in model.graph.initializer:
        if t.ByteSize() > max_bytes:
            for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                t.ClearField(f)
            out.append(t.name)
    return out


def _name_nodes(model: onnx.ModelProto, nodes: Sequence[GraphNode] | None = None) -> None:
    """Give every node a unique, non-empty name (``<op_type>_<index>`` where missing); with
    ``nodes`` (the graph's nodes as :class:`GraphNode`), they are renamed too."""
    names = [n.name for n in (nodes if nodes is not None else model.graph.node)]
    if "" not in names and len(set(names)) == len(names):
        return  # (the usual case: all named, uniquely)
    seen: set[str] = set()
    for i, n in enumerate(nodes if nodes is not None else model.graph.node):
        if not n.name or n.name in seen:
            base = f"{n.op_type}_{i}"
            name, k = base, 1
            while name in seen:
                name, k = f"{base}_{k}", k + 1
            n.name = name
            if nodes is not None:
                model.graph.node[i].name = name
        seen.add(n.name)


def _light_copy(model: onnx.ModelProto, max_bytes: int = 4096) -> onnx.ModelProto:
    """The model without the data of large initializers (dims kept), for shape inference."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g, src = light.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    for t in src.initializer:
        if t.data_location == TensorProto.EXTERNAL or _dataless(t) or t.ByteSize() > max_bytes:
            stub = g.initializer.add()
            stub.name, stub.data_type = t.name, t.data_type
            stub.dims.extend(t.dims)
        else:
            g.initializer.append(t)
    return light


def _shape_of_type(tp: onnx.TypeProto) -> Shape | None:
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    dims = tp.tensor_type.shape.dim
    if any(not d.HasField("dim_value") or d.dim_value < 0 for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _collect_shapes(model: onnx.ModelProto, value_info: Iterable[onnx.ValueInfoProto],
                    outputs: Iterable[onnx.ValueInfoProto]) -> dict[str, Shape | None]:
    shapes: dict[str, Shape | None] = {}
    for vi in [*model.graph.input, *value_info, *outputs]:
        s = _shape_of_type(vi.type)
        if s is not None or vi.name not in shapes:
            shapes[vi.name] = s
    for t in model.graph.initializer:
        shapes[t.name] = tuple(int(d) for d in t.dims)
    return shapes


def _infer_shapes(model: onnx.ModelProto, warnings: list[str], fold: bool = False) -> dict[str, Shape | None]:
    """Shapes of all tensors; stores the inferred value_info in ``model``.

    With ``fold`` (the graph was not simplified), small constant subgraphs (shape
    arithmetic such as ``Shape -> Gather -> Div -> Slice``) are evaluated with the ONNX
    reference implementation and inference is repeated until nothing new folds, so
    shapes that depend on them become known.
    """
    light = _light_copy(model)
    value_info: list[onnx.ValueInfoProto] = list(model.graph.value_info)
    outputs: list[onnx.ValueInfoProto] = list(model.graph.output)
    shapes = _collect_shapes(model, value_info, outputs)
    known: dict[str, np.ndarray] = {}
    for _ in range(256 if fold else 1):
        try:
            inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
        except Exception as e:  # onnx raises several types; a partial result is still useful
            warnings.append(f"ONNX shape inference failed ({_one_line(e)[:300]}); some shapes are unknown")
            break
        value_info, outputs = list(inferred.graph.value_info), list(inferred.graph.output)
        shapes = _collect_shapes(model, value_info, outputs)
        if not fold or not _fold_pass(light, shapes, known):
            break
    del model.graph.value_info[:]
    model.graph.value_info.extend(value_info)
    for name, v in known.items():  # folded tensors: their shapes are those of their values
        if shapes.get(name) is None:
            shapes[name] = tuple(v.shape)
    return shapes


#: Constant subgraphs are folded only while their inputs are this small (shape arithmetic).
_FOLD_MAX_ELEMS = 1 << 16


def _fold_pass(light: onnx.ModelProto, shapes: dict[str, Shape | None], known: dict[str, np.ndarray]) -> bool:
    """Evaluate the nodes of ``light`` whose inputs are all known small constants (or whose
    value is a known shape); replace them by initializers. Returns whether any folded."""
    from onnx.reference import ReferenceEvaluator

    opsets = {o.domain or "": o.version for o in light.opset_import}
    for t in light.graph.initializer:
        if t.name not in known and not _dataless(t) and math.prod(t.dims) <= _FOLD_MAX_ELEMS:
            with contextlib.suppress(Exception):
                known[t.name] = numpy_helper.to_array(t)
    keep: list[onnx.NodeProto] = []
    new: list[TensorProto] = []
    for n in light.graph.node:
        ins = [i for i in n.input if i]
        vals: list[np.ndarray] | None = None
        try:
            if n.domain not in ("", "ai.onnx") or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                      for a in n.attribute):
                vals = None
            elif n.op_type in ("Shape", "Size") and ins and shapes.get(ins[0]) is not None:
                shp = np.array(shapes[ins[0]], dtype=np.int64)
                if n.op_type == "Size":
                    vals = [np.array(int(np.prod(shp)), dtype=np.int64)]
                else:
                    a = _attrs(n)
                    vals = [shp[a.get("start", 0): a.get("end", len(shp))]]
            elif n.op_type == "Constant" or (
                    ins and all(i in known for i in ins) and not n.op_type.startswith("Random")
                    and sum(known[i].size for i in ins) <= _FOLD_MAX_ELEMS):
                feeds = {i: known[i] for i in ins}
                res = ReferenceEvaluator(n, opsets={"": opsets.get("", 13)}).run(None, feeds)
                vals = list(res) if isinstance(res, (list, tuple)) else None
        except Exception:
            vals = None
        outs = [o for o in n.output if o]
        if vals is None or len(vals) < len(outs) or any(not isinstance(v, np.ndarray) for v in vals[:len(outs)]):
            keep.append(n)
            continue
        for o, v in zip(outs, vals):
            known[o] = v
            new.append(numpy_helper.from_array(v, o))
    if not new:
        return False
    del light.graph.node[:]
    light.graph.node.extend(keep)
    light.graph.initializer.extend(new)
    return True


# ------------------------------------------------------------------------- simplifying


class _SimplifyFailed(Exception):
    pass


# The worker is a self-contained script: it does not import this package, so it starts
# fast and works wherever onnx and onnxsim import. Protocol over stdin/stdout:
# request = >QQ (header length, model length) + JSON header + model bytes;
# reply = >BQ (status 0 ok / 1 error, payload length) + payload (model bytes / message).
_WORKER_SOURCE = r"""
import json, os, struct, sys
def _read(fd, n):
    chunks, left = [], n
    while left:
        b = os.read(fd, min(left, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)
def _write(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
_STRIP_BYTES = %d
out = os.dup(1)
os.dup2(2, 1)  # anything onnxsim prints goes to stderr, never into the protocol
# onnxsim 0.8's package imports torch and sympy for tools the simplifier does not use (both
# optional there): 1.4 of the worker's 1.7 s of CPU to start. They are hidden while onnxsim
# imports (the 14 zoo networks simplify to the same bytes), and importable again afterwards.
_HIDDEN = ("torch", "sympy")
for _m in _HIDDEN:
    sys.modules.setdefault(_m, None)
try:
    import onnx, onnxsim
except ImportError:  # an onnxsim that needs them after all
    for _m in [m for m in sys.modules if m.split(".")[0] == "onnxsim"]:
        del sys.modules[_m]
    for _m in _HIDDEN:
        if sys.modules.get(_m, 0) is None:
            del sys.modules[_m]
    import onnx, onnxsim
for _m in _HIDDEN:
    if sys.modules.get(_m, 0) is None:
        del sys.modules[_m]
_write(out, b"R")
while True:
    head = _read(0, 16)
    if head is None:
        break
    hlen, mlen = struct.unpack(">QQ", head)
    opts = json.loads(_read(0, hlen) or b"{}")
    data = _read(0, mlen)
    if data is None:
        break
    try:
        m = onnx.ModelProto()
        m.ParseFromString(data)
        s, _ = onnxsim.simplify(m, **opts)
        for t in s.graph.initializer:  # weights are not needed back, only their dims
            if t.ByteSize() > _STRIP_BYTES:
                for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    t.ClearField(f)
        status, payload = 0, s.SerializeToString()
    except Exception as e:
        status, payload = 1, (type(e).__name__ + ": " + str(e)).encode("utf-8", "replace")
    _write(out, struct.pack(">BQ", status, len(payload)) + payload)
"""

#: Initializers above this size keep only their dims in :attr:`Network.model`.
_STRIP_BYTES = 4096
_WORKER_SOURCE = _WORKER_SOURCE % _STRIP_BYTES


class _SimplifyWorker:
    """One long-lived onnxsim process, restarted after a timeout or crash."""

    START_TIMEOUT_S = 120.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pid = 0  # the process that started the worker (a forked child must not share it)

    def _start(self) -> subprocess.Popen:
        stderr = None if os.environ.get("CL_DEBUG") else subprocess.DEVNULL
        try:
            proc = subprocess.Popen([sys.executable or "python3", "-c", _WORKER_SOURCE], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=stderr, bufsize=0, close_fds=True)
        except OSError as e:
            raise _SimplifyFailed(f"cannot start the onnxsim worker: {e}") from None
        self._proc, self._pid = proc, os.getpid()
        try:
            if _read_exact(_fd(proc.stdout), 1, time.monotonic() + self.START_TIMEOUT_S) != b"R":
                raise _SimplifyFailed("onnxsim worker sent a bad greeting")
        except _SimplifyFailed:
            self.stop()
            raise
        except TimeoutError:
            self.stop()
            raise _SimplifyFailed(f"onnxsim worker did not start within {self.START_TIMEOUT_S:g} s") from None
        except (EOFError, OSError):
            code = self.stop()
            raise _SimplifyFailed(f"onnxsim worker exited during start-up (exit code {code}; "
                                  "are onnx and onnxsim importable?)") from None
        return proc

    def stop(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        with contextlib.suppress(Exception):
            proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(5)
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                with contextlib.suppress(Exception):
                    f.close()
        return proc.returncode

    def close(self) -> None:
        """Let an idle worker exit (end of input), then make sure it has."""
        proc = self._proc
        if proc is not None and self._pid == os.getpid():
            with contextlib.suppress(Exception):
                if proc.stdin is not None:
                    proc.stdin.close()
            with contextlib.suppress(Exception):
                proc.wait(2)
            self.stop()

    def simplify(self, data: bytes, opts: dict[str, Any], timeout_s: float) -> bytes:
        with self._lock:
            if self._proc is not None and (self._pid != os.getpid() or self._proc.poll() is not None):
                if self._pid == os.getpid():
                    self.stop()
                self._proc = None  # inherited from a parent process: leave it to the parent
            proc = self._proc or self._start()
            header = json.dumps(opts).encode()
            deadline = time.monotonic() + timeout_s
            try:
                _write_all(_fd(proc.stdin), struct.pack(">QQ", len(header), len(data)) + header + data)
                status, n = struct.unpack(">BQ", _read_exact(_fd(proc.stdout), 9, deadline))
                payload = _read_exact(_fd(proc.stdout), n, deadline)
            except TimeoutError:
                self.stop()
                raise _SimplifyFailed(f"timed out after {timeout_s:g} s") from None
            except (OSError, EOFError, struct.error):
                code = self.stop()
                raise _SimplifyFailed(f"onnxsim worker died (exit code {code})") from None
            if status != 0:
                raise _SimplifyFailed(_one_line(payload.decode("utf-8", "replace"))[:500])
            return payload


def _fd(f: Any) -> int:
    if f is None:
        raise OSError("onnxsim worker pipe is closed")
    return int(f.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    left = n
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise TimeoutError
        b = os.read(fd, min(left, 1 << 20))
        if not b:
            raise EOFError
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


_WORKER = _SimplifyWorker()
atexit.register(_WORKER.close)

#: Options passed to ``onnxsim.simplify``: BN folding on, no numeric checking, and no MatMul +
#: Add -> Gemm fusion: on a 3-D MatMul it wraps the Gemm in two Reshapes, so that a model with its
#: weights gave other layers (reshape, fc, reshape) than the same model stripped (one fc, bias
#: folded by the importer), which onnxsim leaves alone.
_ONNXSIM_OPTS: dict[str, Any] = {"check_n": 0, "skip_fuse_bn": False, "skipped_optimizers": [
    "fuse_matmul_add_bias_into_gemm", "fuse_matmul_add_bias_into_gemm_batched"]}


def _run_onnxsim(model: onnx.ModelProto, timeout_s: float | None, raw: bytes | None = None) -> onnx.ModelProto:
    """Simplify; ``raw`` are the model's serialised bytes when the caller has them unchanged.

    The worker needs ``select`` on pipes (POSIX); elsewhere onnxsim runs in-process.
    """
    if timeout_s is None or os.name == "nt":
        try:
            import onnxsim
        except ImportError as e:
            raise _SimplifyFailed(f"onnxsim is not installed: {e}") from None
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                out, _ = onnxsim.simplify(model, **_ONNXSIM_OPTS)
        except Exception as e:
            raise _SimplifyFailed(f"{type(e).__name__}: {_one_line(e)[:500]}") from None
        return out
    if timeout_s <= 0:
        raise _SimplifyFailed(f"timed out after {timeout_s:g} s")
    try:
        data = raw if raw is not None else model.SerializeToString()
    except ValueError as e:  # > 2 GiB
        raise _SimplifyFailed(f"model cannot be serialised: {_one_line(e)}") from None
    out = onnx.ModelProto()
    out.ParseFromString(_WORKER.simplify(data, _ONNXSIM_OPTS, float(timeout_s)))
    return out


# -------------------------------------------------------------------------- extraction

_FREE_OPS = {
    "Constant": "constant",
    "Identity": "identity (no-op)",
    "Dropout": "dropout (identity at inference)",
    "Shape": "shape computation (input shapes are fixed)",
    "Size": "shape computation (input shapes are fixed)",
}
_ALIAS_OPS = {"Identity", "Dropout"}
_DEAD_CODE = "dead code (does not reach a graph output)"
_CONST_FOLDED = "constant folding (computed from constants and shapes only)"
_CONCAT_NOOP = "no-op (concat of a single input)"


def _noop_same_shape(op: str) -> str:
    """The free-node reason of a no-op ``op`` (output shape = input shape)."""
    return f"no-op ({op} leaves its input unchanged)"

#: Ops that are no-ops when their output has the input's shape (onnxsim removes them; the
#: unsimplified graph may still have them).
_NOOP_IF_SAME_SHAPE = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Tile", "Resize", "Upsample",
                       "Transpose", "Slice", "Pad"}

#: Ops :meth:`_Extractor._noop_reason` may find to be no-ops.
_NOOP_OPS = frozenset(_ALIAS_OPS | {"Concat", "Split"} | _NOOP_IF_SAME_SHAPE)


def _has_subgraph(node: Any) -> bool:
    """Whether a node carries a graph attribute (If/Loop/Scan bodies)."""
    if not node.attribute or (getattr(node, "attrs_cache", None) is not None and node.attrs_simple):
        return False  # no attributes, or all already converted and of plain types
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _outer_reads(node: Any) -> list[str]:
    """The tensors of the enclosing graphs that a node's subgraphs (If branches, Loop and
    Scan bodies, nested at any depth) read by name without taking them as inputs."""
    out: dict[str, None] = {}
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
        for g in graphs:
            defined = {i.name for i in g.input} | {t.name for t in g.initializer} | {
                t.values.name for t in g.sparse_initializer}
            for n in g.node:
                for t in [*n.input, *_outer_reads(n)]:
                    if t and t not in defined:
                        out[t] = None
                defined.update(n.output)
    return list(out)


def _with_outer_reads(node: Any) -> Any:
    """``node`` with its subgraphs' outer reads (:func:`_outer_reads`) added to its inputs, so
    that what only a subgraph reads is live, ordered before it and not constant (a
    :class:`GraphNode` copy; the model is not changed)."""
    reads = [t for t in _outer_reads(node) if t not in node.input]
    if not reads:
        return node
    copy = GraphNode(node)
    copy.input = [*copy.input, *reads]
    return copy


class _Extractor:
    def __init__(self, model: onnx.ModelProto, shapes: dict[str, Shape | None], rules: FusionRules,
                 warnings: list[str], nodes: Sequence[GraphNode] | None = None,
                 values: Mapping[str, np.ndarray] | None = None) -> None:
        self.g = model.graph
        self.shapes = shapes
        self.rules = rules
        self.warnings = warnings
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.init = {t.name: t for t in self.g.initializer}
        self.const_nodes: dict[str, onnx.NodeProto] = {}
        # values of initializers and Constant outputs already read (by the shape propagation)
        self._values: dict[str, np.ndarray | None] = dict(values) if values else {}
        self.nodes = self._topo_sort([_with_outer_reads(n) if _has_subgraph(n) else n
                                      for n in (nodes if nodes is not None else self.g.node)])
        # Aliases: outputs of Identity/Dropout and of no-ops stand for their input.
        self.alias: dict[str, str] = {}
        self.noop: dict[str, str] = {}
        noop_ops = _NOOP_OPS
        for n in self.nodes:
            op = n.op_type
            if op not in noop_ops:
                if op == "Constant" and n.output:
                    self.const_nodes[n.output[0]] = n
                continue
            if n.domain not in ("", "ai.onnx") or not n.input or not n.input[0] or not n.output:
                continue
            reason = self._noop_reason(n)
            if reason:
                self.alias[n.output[0]] = self._resolve(n.input[0])
                self.noop[n.name] = reason
        # every alias points at its canonical tensor, so that canon() is one lookup
        for t in self.alias:
            self.alias[t] = self._resolve(t)
        canon = self.canon
        self.graph_outputs = {canon(o.name) for o in self.g.output}
        self.graph_inputs = {i.name for i in self.g.input} - set(self.init)
        self.live = self._live_nodes()
        # consumers of every (canonical) tensor among the live nodes that are not no-ops, and
        # the static tensors: constants and everything computed from constants and shapes only
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        static = self.static = set(self.init) | {t.values.name for t in self.g.sparse_initializer}
        consumers, live, noop = self.consumers, self.live, self.noop
        alias = self.alias
        get, aliased = alias.get, alias.keys()
        for n in self.nodes:
            ins = n.input
            if "" in ins:
                ins = [get(x, x) for x in ins if x]
            elif not aliased.isdisjoint(ins):
                ins = list(map(get, ins, ins))
            if n.name in live and n.name not in noop:
                for i in ins:
                    users = consumers.get(i)
                    if users is None:
                        consumers[i] = [n]
                    elif users[-1] is not n:  # (a node reading a tensor twice is listed once)
                        users.append(n)
            op = n.op_type
            if (op == "Constant" or op == "Shape" or op == "Size"
                    or (ins and static.issuperset(ins) and n.domain in ("", "ai.onnx")
                        and not op.startswith("Random"))):
                outs = n.output
                static.update(outs if "" not in outs else [o for o in outs if o])
        self.claimed: set[str] = set()
        self._nchw: dict[Shape, tuple[int, int, int, int]] = {}  # (nchw() per shape)
        # shape() and is_static() as single lookups: aliases entered under their own names
        if alias:
            by_name = dict(shapes)
            for t, c in alias.items():
                if by_name.get(t) is None and shapes.get(c) is not None:
                    by_name[t] = shapes[c]
            static_any = {t for t in static if t not in alias}
            static_any.update([t for t, c in alias.items() if c in static])
        else:
            by_name, static_any = shapes, static
        self.shape = by_name.get  # type: ignore[method-assign]
        self.is_static = static_any.__contains__  # type: ignore[method-assign]

    # -- graph helpers

    def _topo_sort(self, nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
        """The nodes in topological order (sets ``_unique_outputs``: no tensor has two producers)."""
        outputs = list(chain.from_iterable([n.output for n in nodes]))
        pending = set(outputs)  # (outputs of this node and the ones after it)
        empty = outputs.count("")
        if empty:
            pending.discard("")
        self._unique_outputs = len(pending) == len(outputs) - empty
        if self._unique_outputs:
            # Already in topological order (the usual case): the heap below would return
            # exactly this order (it always takes the smallest ready index).
            for n in nodes:
                if not pending.isdisjoint(n.input):
                    break
                pending.difference_update(n.output)
            else:
                return list(nodes)
        produced_by: dict[str, int] = {}
        for i, n in enumerate(nodes):
            for o in n.output:
                if o:
                    produced_by[o] = i
        deps: list[set[int]] = []
        users: list[list[int]] = [[] for _ in nodes]
        for i, n in enumerate(nodes):
            d = {produced_by[x] for x in n.input if x in produced_by and produced_by[x] != i}
            deps.append(d)
            for j in d:
                users[j].append(i)
        remaining = [len(d) for d in deps]
        ready = [i for i, r in enumerate(remaining) if r == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for u in users[i]:
                remaining[u] -= 1
                if remaining[u] == 0:
                    heapq.heappush(ready, u)
        if len(order) != len(nodes):
            stuck = next(nodes[i] for i, r in enumerate(remaining) if r > 0)
            raise OnnxImportError(f"the ONNX graph has a cycle (through node {stuck.name!r}); malformed model")
        return [nodes[i] for i in order]

    def _noop_reason(self, n: onnx.NodeProto) -> str | None:
        op = n.op_type
        if op in _FREE_OPS and op in _ALIAS_OPS:
            return _FREE_OPS[op]
        if op == "Concat" and len([x for x in n.input if x]) == 1:
            return _CONCAT_NOOP
        if op == "Split" and len([o for o in n.output if o]) == 1:
            return "no-op (split into a single output)"
        if op not in _NOOP_IF_SAME_SHAPE:
            return None
        xs, ys = self.shapes.get(n.input[0]), self.shapes.get(n.output[0])
        if xs is None or xs != ys:
            return None
        a = _attrs(n)
        if op == "Transpose" and list(a.get("perm", range(len(xs) - 1, -1, -1))) != list(range(len(xs))):
            return None
        if op == "Slice":
            steps = self.value(n.input[4]) if len(n.input) > 4 and n.input[4] else np.ones(1)
            if steps is None or np.any(np.asarray(steps) != 1):
                return None
        if op == "Pad":
            pads = self.value(n.input[1]) if len(n.input) > 1 and n.input[1] else np.asarray(a.get("pads", [0]))
            if pads is None or np.any(np.asarray(pads) != 0):
                return None
        return _noop_same_shape(op)

    def _live_nodes(self) -> set[str]:
        if self._unique_outputs:
            # One pass against the (topological) order: a node's consumers come after it, so
            # by the time it is reached, every tensor a live node reads is in ``needed``.
            needed = {o.name for o in self.g.output}
            needed.discard("")  # (an omitted optional output or input never makes a node live)
            live: set[str] = set()
            for n in reversed(self.nodes):
                if not needed.isdisjoint(n.output):
                    live.add(n.name)
                    needed.update(n.input)
                    needed.discard("")
            return live
        producer = {o: n for n in self.nodes for o in n.output if o}
        ids = _live_node_ids(producer, [o.name for o in self.g.output])
        return {n.name for n in self.nodes if id(n) in ids}

    def _resolve(self, t: str) -> str:
        while t in self.alias:
            t = self.alias[t]
        return t

    def canon(self, t: str) -> str:
        return self.alias.get(t, t)

    def shape(self, t: str) -> Shape | None:  # (replaced by one dict lookup once the aliases are known)
        s = self.shapes.get(t)
        if s is None and t in self.alias:
            s = self.shapes.get(self.alias[t])
        return s

    def is_static(self, t: str) -> bool:  # (replaced by one set lookup once the static tensors are known)
        return self.alias.get(t, t) in self.static

    def value(self, t: str) -> np.ndarray | None:
        t = self._resolve(t)  # (also while the aliases are being collected)
        if t in self._values:
            return self._values[t]
        v: np.ndarray | None = None
        try:
            if t in self.init and not _dataless(self.init[t]):
                v = to_array(self.init[t])
            elif t in self.const_nodes:
                a = _attrs(self.const_nodes[t])
                if "value" in a and isinstance(a["value"], np.ndarray):
                    v = a["value"]
                elif "value" in a and isinstance(a["value"], TensorProto):
                    v = to_array(a["value"])
                else:
                    for k in ("value_float", "value_floats", "value_int", "value_ints"):
                        if k in a:
                            v = np.asarray(a[k])
        except Exception:
            v = None
        self._values[t] = v
        return v

    def cons(self, t: str) -> list[onnx.NodeProto]:
        return self.consumers.get(self.alias.get(t, t), [])

    def act_inputs(self, node: onnx.NodeProto) -> list[str]:
        static, get = self.static, self.alias.get
        return [c for x in node.input if x and (c := get(x, x)) not in static]

    def outs(self, node: onnx.NodeProto) -> list[str]:
        get = self.alias.get
        return [get(o, o) for o in node.output if o]

    # -- the walk

    def run(self) -> tuple[list[Layer], dict[str, str]]:
        drafts: list[_Draft] = []
        free: dict[str, str] = {}
        claimed, draft = self.claimed, self._draft
        live, noop, static = self.live, self.noop, self.static
        for n in self.nodes:
            name = n.name
            if name in claimed:
                continue
            # why the node costs nothing, if it does not
            if name not in live:
                reason: str | None = _DEAD_CODE
            elif name in noop:
                reason = noop[name]
            elif n.op_type in _FREE_OPS and n.domain in ("", "ai.onnx"):
                reason = _FREE_OPS[n.op_type]
            else:
                outs = n.output
                if "" in outs:
                    outs = [o for o in outs if o]
                reason = _CONST_FOLDED if outs and static.issuperset(outs) else None
            if reason:
                free[name] = reason
                claimed.add(name)
                continue
            d = draft(n)
            claimed.update(d.nodes)
            drafts.append(d)
        drafts = self._fuse(drafts)
        shape, graph_inputs, warnings = self.shape, self.graph_inputs, self.warnings
        shared = _shared_tensors(drafts, self.graph_outputs)
        return [_finish_layer(d, shape, graph_inputs, warnings, shared) for d in drafts], free

    def _draft(self, n: onnx.NodeProto) -> _Draft:
        if n.domain not in ("", "ai.onnx"):
            return self.other(n, extra_flags=[f"domain={n.domain}"])
        if _has_subgraph(n):
            return self.other(n, extra_flags=["subgraph"])
        op = n.op_type
        try:
            for spec in ONNX_OPS.get(op, ()):
                d = spec.from_onnx(n, self)
                if d is not None:
                    return d
        except _Unsupported as e:
            return self.other(n, extra_flags=list(e.args))
        except OnnxImportError:
            raise
        except Exception as e:  # a malformed node must not abort the whole network
            self.warnings.append(f"node {n.name!r} ({op}) could not be mapped ({type(e).__name__}: "
                                 f"{_one_line(e)[:200]}); kept as type 'other'")
            return self.other(n, extra_flags=["describe_failed"])
        return self.other(n)

    # -- shape helpers

    def nchw(self, t: str, d: _Draft | None = None) -> tuple[int, int, int, int]:
        """(n, c, h, w) of a tensor; rank 3 (N, C, L) gives h = 1."""
        s = self.shape(t)
        if s is None:
            if d is not None:
                d.flag("unknown_shape")
            return 1, 1, 1, 1
        try:
            return self._nchw[s]
        except KeyError:
            pass
        except TypeError:  # (a shape that is not a tuple)
            n, h, w, c = hwc(s)
            return n, c, h, w
        n, h, w, c = hwc(s)
        r = self._nchw[s] = n, c, h, w
        return r

    def elems(self, t: str) -> int | None:
        s = self.shape(t)
        return None if s is None else math.prod(s)

    def base(self, n: onnx.NodeProto, layer_type: str, nodes: list[str] | None = None) -> _Draft:
        get, ins, outs = self.alias.get, n.input, n.output
        # act_inputs() and outs(), without a comprehension where no input or output is omitted
        acts = (list(filterfalse(self.static.__contains__, map(get, ins, ins))) if "" not in ins
                else self.act_inputs(n))
        return _Draft(layer_type, {}, n.op_type, nodes or [n.name], acts,
                      list(map(get, outs, outs)) if "" not in outs else self.outs(n))

    def spatial_params(self, d: _Draft, t: str) -> tuple[int, int, int, int]:
        n, c, h, w = self.nchw(t, d)
        p = d.params
        p["n"], p["h"], p["w"], p["c"] = n, h, w, c
        if n > 1:
            d.flag("batch_gt_1")
        return n, c, h, w

    def rows_params(self, d: _Draft, t: str) -> tuple[int, int, int, int]:
        n, c, h, w = self.nchw(t, d)
        if n > 1:
            d.flag("batch_gt_1")  # (the leading dim is folded into the rows: one kernel reads them all)
            s = self.shape(t)
            c, h, w = rows_chw(s) if s is not None else (n * c, h, w)
        p = d.params
        p["n"], p["h"], p["w"], p["c"] = 1, h, w, c
        return 1, c, h, w

    def other(self, n: onnx.NodeProto, extra_flags: Iterable[str] = ()) -> _Draft:
        d = self.base(n, LayerType.OTHER)
        d.op_type = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
        d.flag("unknown_op")
        for f in extra_flags:
            d.flag(f)
        first = next((x for x in d.inputs if self.shape(x) is not None), None)
        if first is None:
            d.flag("unknown_shape")
            d.params = dict(n=1, h=1, w=1, c=1)
            in_el = 1
        else:
            self.spatial_params(d, first)
            in_el = self.elems(first) or 1
        sizes = [self.elems(o) for o in n.output if o]
        if any(s is None for s in sizes):
            d.flag("unknown_shape")
        d.params["elems_out"] = max(sum(s or 0 for s in sizes), 1) if sizes and all(s is not None for s in sizes) else in_el
        return d

    # -- fusion and counting

    def _fuse(self, drafts: list[_Draft]) -> list[_Draft]:
        producer: dict[str, int] = {}
        kept: list[_Draft | None] = list(drafts)
        for i, d in enumerate(drafts):
            if d.type == LayerType.ACTIVATION and d.kind is not None and len(d.inputs) == 1:
                x = d.inputs[0]
                j = producer.get(x)
                p = kept[j] if j is not None else None
                if (p is not None and p.activation is None and p.outputs == [x]
                        and self.rules.folds(p.type, d.kind)
                        and (not self.rules.single_consumer
                             or (x not in self.graph_outputs and all(c.name in d.nodes for c in self.cons(x))))):
                    p.activation = d.kind
                    p.nodes.extend(d.nodes)
                    p.outputs = list(d.outputs)
                    p.extra_params += int(d.params.get("const_params", 0))
                    kept[i] = None
                    for o in p.outputs:
                        producer[o] = j  # type: ignore[assignment]
                    continue
            for o in d.outputs:
                producer[o] = i
        return [d for d in kept if d is not None]

    def _finish(self, d: _Draft) -> Layer:
        return _finish_layer(d, self.shape, self.graph_inputs, self.warnings)


def _shared_tensors(drafts: Sequence[_Draft], graph_outputs: Any) -> set[str]:
    """The tensors a layer cannot write straight into the one layer that reads them: those more
    than one layer reads, or a layer and the graph's outputs, and those no layer computes (a
    graph input, a free node's output, a view: :attr:`~estimator.layers.registry.LayerTypeSpec.
    output_is_view`, such as a reshape or a part of a split). From the fused drafts' inputs
    and outputs; a reader behind a free node is not seen."""
    seen, shared = set(graph_outputs), set()
    if not any(d.type in _TRACKS_SHARED for d in drafts):  # (no layer asks: most networks)
        return shared
    written = {o for d in drafts if d.type not in _VIEW_TYPES for o in d.outputs}
    for d in drafts:
        for x in d.inputs:
            (shared if x in seen or x not in written else seen).add(x)
    return shared


def _finish_layer(d: _Draft, shape: Any, graph_inputs: Any, warnings: list[str], shared: Any = ()) -> Layer:
    """The :class:`Layer` of a fused draft (shared by the Python extractor and the native
    core): raw parameters, counts, shapes and flags. ``shape``: tensor name -> shape (a tuple) or None;
    ``graph_inputs``: the graph's input names; ``shared``: the tensors no layer can write
    straight into their reader (:func:`_shared_tensors`; raw param ``shared`` of the types that
    track it); warnings are appended to ``warnings``."""
    params = dict(d.params)
    if not _PLAIN_TYPES.issuperset(map(type, params.values())):  # (the usual case: nothing to convert)
        for k, v in params.items():
            if type(v) is not int and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                params[k] = int(v)
    if d.activation is not None and d.type in FUSED_ACT_TYPES:
        params["act"] = d.activation  # the fused activation is a feature (estimator.layers)
    if d.type == _CONV2D and d.inputs and d.inputs[0] in graph_inputs:
        params["graph_input"] = 1  # a stem: reads the network's input (a feature, estimator.layers)
    if d.type in _TRACKS_SHARED and shared and len(set(d.inputs)) == len(d.inputs):
        # the inputs it copies (a feature, estimator.layers)
        params = SPECS[d.type].with_shared_inputs(params, [x in shared for x in d.inputs])
    if d.flags and d.type in _FLAG_PARAM_TYPES:
        params = SPECS[d.type].with_flags(params, d.flags)  # e.g. a constant operand (a feature)
    try:
        counts = _describe(d.type, params)
    except (LayerSpecError, TypeError, ValueError) as e:
        warnings.append(f"layer {d.nodes[0]!r} ({d.op_type}): {e}; counted as type 'other'")
        d.flag("describe_failed")
        d.flag("unknown_op")
        xs = shape(d.inputs[0]) if d.inputs else None
        n_, h, w, c = hwc(xs) if xs is not None else (1, 1, 1, 1)
        outs = [_elems(shape(o)) for o in d.outputs]
        params = dict(n=n_, h=h, w=w, c=c, elems_out=max(sum(o or 0 for o in outs), 1))
        d.type = LayerType.OTHER
        counts = describe(d.type, params)
    if d.extra_params:
        counts = replace(counts, params=counts.params + d.extra_params, bytes=counts.bytes + 4 * d.extra_params)
    in_shapes = list(map(shape, d.inputs))
    out_shapes = list(map(shape, d.outputs))
    if d.check_shape:
        # The vocabulary's output size must agree with ONNX's (before any fused activation,
        # which keeps the shape).
        ys = out_shapes[0] if out_shapes else None
        if ys is not None and math.prod(ys) != math.prod(counts.output_shape):
            d.flag("shape_mismatch")
    if None in in_shapes or None in out_shapes:
        d.flag("unknown_shape")
        in_shapes = [s if s is not None else () for s in in_shapes]
        out_shapes = [s if s is not None else () for s in out_shapes]
    # (name, type, params, counts, op_type, nodes, input_shapes, output_shapes, activation, flags)
    return Layer(d.nodes[0], d.type, params, counts, d.op_type, list(d.nodes), in_shapes, out_shapes, d.activation,
                 list(d.flags))


def _elems(s: Shape | None) -> int | None:
    return None if s is None else math.prod(s)


_CONV2D = LayerType.CONV2D
#: the types whose raw param ``shared`` lists the inputs another layer also reads
_TRACKS_SHARED = frozenset(t for t, spec in SPECS.items() if spec.tracks_shared_inputs)
#: the types whose raw params follow from the importer's flags (LayerTypeSpec.with_flags)
_FLAG_PARAM_TYPES = frozenset(t for t, spec in SPECS.items() if type(spec).with_flags is not LayerTypeSpec.with_flags)
#: the types whose output is a view of their input (see :func:`_shared_tensors`)
_VIEW_TYPES = frozenset(t for t, spec in SPECS.items() if spec.output_is_view)
#: parameter value types that _finish_layer leaves as they are
_PLAIN_TYPES = frozenset({int, bool, float, str, list, tuple, type(None)})

#: (type, raw parameters) -> LayerCounts, for :func:`_describe`
_COUNTS: dict[tuple, Any] = {}
_COUNTS_MAX = 1 << 14


def clear_counts_cache() -> None:
    """Forget the remembered layer counts (for measuring cold imports)."""
    _COUNTS.clear()


def _describe(layer_type: str, params: dict[str, Any]) -> Any:
    """:func:`~estimator.layers.describe`, remembered per (type, raw parameters): networks
    repeat blocks and NAS candidates share most layer configurations. The counts are
    shared by every layer with those parameters (read-only: nothing modifies them)."""
    try:
        key: tuple = (layer_type, tuple(params), tuple(params.values()))
        hit = _COUNTS.get(key)
    except TypeError:  # a list value (concat channels)
        key = (layer_type, tuple(params), tuple([tuple(v) if isinstance(v, list) else v for v in params.values()]))
        try:
            hit = _COUNTS.get(key)
        except TypeError:  # something else unhashable: not remembered
            return describe(layer_type, params)
    if hit is None:
        hit = describe(layer_type, params)
        if len(_COUNTS) >= _COUNTS_MAX:
            _COUNTS.clear()
        _COUNTS[key] = hit
    return hit




