"""Weightless ONNX: a model's graph, shapes and small constants without its weight data.

The estimator needs shapes, not weights, so the service's client sends models stripped (a
ResNet-50 query is tens of kilobytes instead of 100 MB), and profiles keep the whole
networks they were calibrated on stripped (``profiles/<name>/networks/*.onnx``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto

__all__ = ["strip_initializers", "model_bytes", "KEEP_INT_ELEMENTS", "SMALL_ELEMENTS"]

#: Integer (and bool) initializers up to this many elements keep their data (shape
#: arguments, indices, axes); any initializer up to SMALL_ELEMENTS keeps its data (scalars,
#: Resize scales, Clip bounds, quantisation parameters).
KEEP_INT_ELEMENTS = 4096
SMALL_ELEMENTS = 16
_INT_TYPES = {TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.UINT16, TensorProto.UINT32,
              TensorProto.UINT64, TensorProto.BOOL}
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")


def _keep_data(t: TensorProto) -> bool:
    n = 1
    for d in t.dims:
        n *= int(d)
    if n <= SMALL_ELEMENTS:
        return True
    return t.data_type in _INT_TYPES and n <= KEEP_INT_ELEMENTS


def _strip_tensor(t: TensorProto) -> None:
    for f in _DATA_FIELDS:
        t.ClearField(f)
    if t.data_location == TensorProto.EXTERNAL:
        t.ClearField("external_data")
        t.data_location = TensorProto.DEFAULT


def strip_initializers(model: onnx.ModelProto | bytes | str | os.PathLike) -> onnx.ModelProto:
    """A copy of ``model`` without weight data: initializers keep name, type and dims.

    Kept with their data: integer tensors up to :data:`KEEP_INT_ELEMENTS` elements (shape
    arguments of Reshape/Slice/Expand/Tile/Pad/Split/Squeeze, indices, axes) and every
    tensor up to :data:`SMALL_ELEMENTS` elements (scalars, Resize scales, Clip bounds,
    quantisation scales and zero points). Large float ``Constant`` nodes of the main graph
    become (stripped) initializers of the same name, which means the same to every
    consumer. Tensors stored as external data become plain dataless tensors, so the
    external files are never needed. The input is not modified.
    """
    if isinstance(model, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(model)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        m = onnx.ModelProto()
        m.ParseFromString(bytes(model))
    else:
        m = onnx.load(os.fspath(model), load_external_data=False)
    g = m.graph
    for t in g.initializer:
        if not _keep_data(t):
            _strip_tensor(t)
    keep_nodes = []
    moved = False
    for node in g.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            val = next((a for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                       None)
            if val is not None and len(node.attribute) == 1 and not _keep_data(val.t):
                t = g.initializer.add()
                t.CopyFrom(val.t)
                t.name = node.output[0]
                _strip_tensor(t)
                moved = True
                continue
        keep_nodes.append(node)
    if moved:
        g.ClearField("node")
        g.node.extend(keep_nodes)
    return m


def model_bytes(model: Any, strip: bool = True) -> bytes:
    """The serialized ONNX of ``model`` (a path, bytes or an ``onnx.ModelProto``), without
    its weight data when ``strip``: what the service's client sends, and what the in-process
    estimator imports, so both take the same import path. A model that does not parse is
    returned as it is, for the importer to refuse with the precise reason."""
    if isinstance(model, onnx.ModelProto):
        return (strip_initializers(model) if strip else model).SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if strip:
            try:
                return strip_initializers(path).SerializeToString()
            except FileNotFoundError:
                raise
            except Exception:  # noqa: BLE001 - not parseable here: let the importer say precisely why
                return path.read_bytes()
        return path.read_bytes()
    else:
        raise TypeError(f"model must be a path, bytes, an onnx.ModelProto or a list of layer specs, "
                        f"got {type(model).__name__}")
    if not strip:
        return data
    try:
        return strip_initializers(data).SerializeToString()
    except Exception:  # noqa: BLE001 - malformed: as it is, the importer refuses it with why
        return data
