"""The layer vocabulary: layer types, their feature vectors, and how their operations,
parameters and bytes moved are counted.

Each layer type is one module of this package (``conv2d.py``, ``dwconv2d.py``, ``fc.py``, ...)
holding a :class:`~estimator.layers.registry.LayerTypeSpec` subclass: its features and
counts, its smart-padding layer under measurement, and its sampling draws and network
prior. ``bench`` samples raw parameters of a type and builds models from them, the
estimator extracts raw parameters from ONNX and turns them into features, the proto
``LayerSpec`` carries ``type`` + the raw parameter map, and the service answers
``EstimateLayers`` from the same raw parameters. A new type is one new module.

:func:`describe` turns raw parameters into a :class:`LayerCounts`: the feature vector the
models see (Table 2 of the smart-padding paper, extended), MACs, parameters, the number of
operations the latency model normalises by (``latency = t_op * ops``, Eq. 7), bytes moved,
and the output shape.

``act`` (the types with :attr:`~LayerTypeSpec.takes_act`) is the fused activation kind (a
key of :data:`ACTIVATION_KINDS`; absent, ``None`` or ``"none"``: no activation), and the
``act`` feature its code (-1 for none): backends run different kernels for different fused
activations (ONNX Runtime's CPU convolutions apply ReLU in the kernel but ReLU6 as a second
pass). A *benchmark* row without ``act`` carries its LUM's default activation
(:data:`LUM_DEFAULT_ACT`); :func:`bench_params` writes it out.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from .params import ACTIVATION_KINDS, RESIZE_MODES, LayerSpecError, conv_out, fused_act, hwc
from .registry import SPECS, Layer, LayerCounts, LayerType, LayerTypeSpec, discover, spec_for

discover()

__all__ = [
    "COLD_TYPES",
    "describe_strict",
    "weight_bound",
    "LayerType",
    "LayerTypeSpec",
    "LayerCounts",
    "Layer",
    "SPECS",
    "LAYER_TYPES",
    "BENCHABLE_TYPES",
    "SAMPLED_TYPES",
    "sampled_types",
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

#: All type names, in a stable order.
LAYER_TYPES: tuple[str, ...] = tuple(SPECS)
#: Types smart padding can measure.
BENCHABLE_TYPES: tuple[str, ...] = tuple(t for t, s in SPECS.items() if s.benchable)
#: Benchable types with a sampler (what ``bench run`` plans).
SAMPLED_TYPES: tuple[str, ...] = tuple(t for t in BENCHABLE_TYPES if SPECS[t].sampled)


def sampled_types(model_format: str | None = None) -> tuple[str, ...]:
    """:data:`SAMPLED_TYPES` whose LUM renders to ``model_format`` (all with None)."""
    return tuple(t for t in SAMPLED_TYPES if model_format is None or model_format in SPECS[t].model_formats)


#: Types that take a fused activation: the producers device fusion rules may fold an
#: activation into (:mod:`estimator.fusion`).
FUSED_ACT_TYPES: tuple[str, ...] = tuple(t for t, s in SPECS.items() if s.takes_act)
#: Fused activation of the benchmarked LUM per type when a benchmark row's raw params name
#: none (Table 2 of the paper).
LUM_DEFAULT_ACT: dict[str, str | None] = {t: s.lum_default_act for t, s in SPECS.items() if s.takes_act and s.benchable}
#: Layer types with the ``cold`` feature: those whose weights can outweigh their activations.
COLD_TYPES = tuple(t for t, s in SPECS.items() if "cold" in s.features)


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


def weight_bound(counts: LayerCounts) -> bool:
    """Whether a layer of :data:`COLD_TYPES` has more weights than input and output elements
    (a classifier; a wide convolution on a small map): inside a network big enough not to
    keep its weights in the last-level cache, its time is their trip from DRAM."""
    f, out = counts.features, counts.output_shape
    n = out[0] if out else 1
    inputs = n * (f["c_in"] if "m" in f else f.get("h", 1) * f.get("w", 1) * f.get("c_in", f.get("c", 1)))
    return counts.params > inputs + math.prod(out)


class _ReadKeys(dict):
    """Raw parameters that note which keys a type's ``count`` reads (iterating them counts as
    reading every key, so a type that walks its params never has an unread one)."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        super().__init__(params)
        self.read: set[str] = set()

    def __getitem__(self, k: Any) -> Any:
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k: Any, default: Any = None) -> Any:
        self.read.add(k)
        return super().get(k, default)

    def __contains__(self, k: Any) -> bool:
        self.read.add(k)
        return super().__contains__(k)

    def __iter__(self) -> Any:
        self.read.update(self.keys())
        return super().__iter__()

    def items(self) -> Any:
        self.read.update(self.keys())
        return super().items()


#: (type, set of keys) that :func:`describe_strict` found all read
_ALL_READ: set[tuple[str, tuple]] = set()


def describe_strict(layer_type: str, params: Mapping[str, Any], *, elem_bytes: int = 4) -> LayerCounts:
    """:func:`describe`, refusing a parameter the type's ``count`` never reads: a misspelt or
    foreign key (``stride`` for conv2d's ``s_h``/``s_w``) that a layer would otherwise silently
    go without. The message names the keys it does read or look for."""
    key = (layer_type, tuple(params))  # (the same keys in another order: one more entry)
    if key in _ALL_READ:  # (a batch of configurations mostly repeats one set of keys)
        return spec_for(layer_type).count(dict(params), elem_bytes)
    rec = _ReadKeys(params)
    counts = spec_for(layer_type).count(rec, elem_bytes)
    unread = sorted(set(params) - rec.read)
    if not unread:
        if len(_ALL_READ) >= 4096:
            _ALL_READ.clear()
        _ALL_READ.add(key)
    else:
        raise LayerSpecError(f"unknown parameter{'s' if len(unread) > 1 else ''} {', '.join(map(repr, unread))} for "
                             f"{layer_type}; it reads {', '.join(sorted(rec.read))}")
    return counts


def feature_names(layer_type: str) -> tuple[str, ...]:
    return spec_for(layer_type).features


def describe(layer_type: str, params: Mapping[str, Any], *, elem_bytes: int = 4) -> LayerCounts:
    """Counts and features of a layer from its raw parameters.

    Raises :class:`LayerSpecError` with a precise message for an unknown type, a missing
    parameter, or an impossible configuration.
    """
    return spec_for(layer_type).count(dict(params), elem_bytes)


def feature_vector(layer_type: str, features: Mapping[str, float]) -> list[float]:
    """The model input for a layer: its features in the vocabulary's order."""
    return [float(features[k]) for k in feature_names(layer_type)]
