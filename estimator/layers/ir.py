"""The framework-neutral model IR that smart-padding benchmark models are built in.

A layer-type module (:mod:`estimator.layers`) writes its layer under measurement as
:class:`Op` s; ``bench.modelgen`` wraps them in padding convolutions and renders the model
to ONNX, ``bench.tflite_models`` to TFLite. Shapes are NCHW for rank 4. Weights are not
part of the IR: the emitters draw them, seeded, from ``bench.modelgen.make_weights``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

__all__ = ["TensorSpec", "Op", "jsonable", "tf_axis"]


def tf_axis(axis: int, rank: int) -> int:
    """The TensorFlow axis of IR axis ``axis`` of a rank-``rank`` tensor: rank 4 is NCHW in the
    IR and NHWC in TensorFlow/TFLite (channels last), other ranks keep their axes."""
    a = axis % rank
    return (0, 3, 1, 2)[a] if rank == 4 else a


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output (float32)."""

    name: str
    shape: tuple[int, ...]


def jsonable(v: Any) -> Any:
    """``v`` with NumPy scalars made Python numbers and tuples made lists (for JSON)."""
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


@dataclass(frozen=True)
class Op:
    """One operation of a benchmark model.

    ``inputs`` are tensor names (graph inputs or earlier ops' ``output``); ``shape`` is the
    output shape (NCHW for rank 4); ``attrs`` depend on ``kind`` (``bench.modelgen``'s
    docstring lists the kinds); ``act`` is a fused activation; ``role`` is ``"pad_in"``,
    ``"lum"``, ``"pad_out"`` or ``"aux"`` (flatten/reshape glue).
    """

    kind: str
    name: str
    inputs: tuple[str, ...]
    output: str
    shape: tuple[int, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    act: str | None = None
    role: str = "lum"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "inputs": list(self.inputs), "output": self.output,
                "shape": list(self.shape), "attrs": jsonable(dict(self.attrs)), "act": self.act, "role": self.role}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Op":
        attrs = dict(d.get("attrs", {}))
        if "pads" in attrs:
            attrs["pads"] = tuple(attrs["pads"])
        return cls(d["kind"], d["name"], tuple(d["inputs"]), d["output"], tuple(d["shape"]), attrs,
                   d.get("act"), d.get("role", "lum"))
