"""Command-line arguments shared by the ``estimator`` subcommands: the model argument
(an ONNX file or a ``zoo:NAME[@RESOLUTION]`` reference) and ``--input-shape``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import UserError
from .onnx_import import InputShapeError, parse_input_shape

ZOO_PREFIX = "zoo:"
MODEL_HELP = ("ONNX file, or zoo:NAME[@RESOLUTION] for a reference network built in code "
              "(e.g. zoo:mobilenet_v2, zoo:resnet18@160; see estimator.zoo.names())")


def input_shapes_from_args(specs: list[str] | None) -> dict[str, tuple[int, ...]] | tuple[int, ...] | None:
    """``--input-shape`` values -> ``input_shapes`` for :func:`estimator.onnx_import.load_network`."""
    if not specs:
        return None
    parsed = [parse_input_shape(s) for s in specs]
    unnamed = [shape for name, shape in parsed if name is None]
    if unnamed:
        if len(parsed) > 1:
            raise InputShapeError("give NAME:DIMS for every --input-shape when there is more than one")
        return unnamed[0]
    out: dict[str, tuple[int, ...]] = {}
    for name, shape in parsed:
        assert name is not None
        if name in out:
            raise InputShapeError(f"--input-shape given twice for input {name!r}")
        out[name] = shape
    return out


def model_source(arg: str) -> tuple[Any, str]:
    """The model argument -> (source for ``load_network``, display name).

    ``zoo:NAME[@RES]`` builds the reference network in torch and exports it to ONNX in
    memory (nothing is downloaded); anything else is a path to an ONNX file.
    """
    if arg.startswith(ZOO_PREFIX):
        from . import zoo  # noqa: PLC0415  (torch is imported only for zoo references)

        ref = arg[len(ZOO_PREFIX):]
        name, _, res = ref.partition("@")
        if name not in zoo.names():
            raise UserError(f"unknown zoo network {name!r}; known: {', '.join(zoo.names())}")
        try:
            resolution = int(res) if res else None
        except ValueError:
            raise UserError(f"zoo resolution must be an integer, got {res!r} in {arg!r}") from None
        if resolution is not None and not 16 <= resolution <= 4096:
            raise UserError(f"zoo resolution must be in [16, 4096], got {resolution}")
        kw = {"resolution": resolution} if resolution else {}
        return zoo.export_onnx(name, **kw), ref
    return Path(arg), Path(arg).stem
