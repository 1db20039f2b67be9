"""Fusion rules: which operations a device's backend folds into one kernel.

Fusion is a property of the device (its compiler or runtime), not of the ONNX file, so the
rules are plain data that a device profile carries in its JSON and passes to
:func:`estimator.onnx_import.load_network`. ONNX-level clean-up (onnxsim: BN folding,
constant folding, dropout removal) happens first and is the same for every device; these
rules are applied to what remains (ANNETTE's mapping model).

* ``activations``: producer layer type -> the activation kinds (keys of
  :data:`estimator.layers.ACTIVATION_KINDS`) that fold into a producer of that type. A
  folded activation disappears as a layer and is recorded as the producer's ``activation``.
* ``bn_into_conv``: fold a ``BatchNormalization`` that directly follows a ``Conv`` into it
  (the conv gains a bias). onnxsim already does this; the rule matters when simplification
  was skipped or failed, so that the layer list does not depend on onnxsim's success.
* ``single_consumer``: fold only when the producer's output has exactly one consumer (the
  activation) and is not a graph output. A backend cannot fuse an activation into a kernel
  whose pre-activation output someone else still reads.
* ``detected`` (optional, in a profile only): how the rules were found, when ``bench fusion``
  timed them (method, runner, rounds, date, each pair's verdict and saving;
  :func:`bench.fusion_probe.detected_block`). Evidence, not a rule: the rules above are what
  the importer applies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import UserError
from .layers import ACTIVATION_KINDS, FUSED_ACT_TYPES, LayerType

__all__ = ["FusionRules", "FusionRulesError", "DEFAULT_FUSION", "NO_FUSION", "FUSABLE_PRODUCERS"]

#: Layer types an activation may fold into (the vocabulary's types with an ``act`` feature).
FUSABLE_PRODUCERS: tuple[str, ...] = FUSED_ACT_TYPES


class FusionRulesError(UserError, ValueError):
    """Fusion rules that name an unknown layer type or activation kind, or are malformed."""


@dataclass(frozen=True)
class FusionRules:
    """Which activations fold into which producers (plain data, JSON round-trip)."""

    activations: dict[str, frozenset[str]] = field(default_factory=dict)
    bn_into_conv: bool = True
    single_consumer: bool = True

    def __post_init__(self) -> None:
        acts: dict[str, frozenset[str]] = {}
        for producer, kinds in dict(self.activations).items():
            if producer not in FUSABLE_PRODUCERS:
                raise FusionRulesError(
                    f"fusion rules: {producer!r} cannot take a fused activation; "
                    f"allowed producers: {', '.join(FUSABLE_PRODUCERS)}")
            if isinstance(kinds, str):
                raise FusionRulesError(f"fusion rules: activations of {producer!r} must be a list, got {kinds!r}")
            ks = frozenset(str(k) for k in kinds)
            unknown = sorted(ks - set(ACTIVATION_KINDS))
            if unknown:
                raise FusionRulesError(
                    f"fusion rules: unknown activation kind(s) {', '.join(map(repr, unknown))} for {producer!r}; "
                    f"known: {', '.join(ACTIVATION_KINDS)}")
            acts[producer] = ks
        object.__setattr__(self, "activations", acts)

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.activations.items(), key=lambda kv: kv[0])), self.bn_into_conv,
                     self.single_consumer))

    def folds(self, producer_type: str, kind: str) -> bool:
        """Whether an activation of ``kind`` folds into a producer of ``producer_type``."""
        return kind in self.activations.get(producer_type, ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "activations": {p: sorted(k) for p, k in sorted(self.activations.items())},
            "bn_into_conv": self.bn_into_conv,
            "single_consumer": self.single_consumer,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "FusionRules":
        """Rules from plain data; missing keys take the defaults of :data:`DEFAULT_FUSION`."""
        if d is None:
            return DEFAULT_FUSION
        if not isinstance(d, Mapping):
            raise FusionRulesError(f"fusion rules must be a mapping, got {type(d).__name__}")
        unknown = sorted(set(d) - {"activations", "bn_into_conv", "single_consumer", "detected"})
        if unknown:
            raise FusionRulesError(f"fusion rules: unknown key(s) {', '.join(map(repr, unknown))}")
        if not isinstance(d.get("detected", {}), Mapping):
            raise FusionRulesError(f"fusion rules: 'detected' must be a mapping, got {type(d['detected']).__name__}")
        acts = d.get("activations", DEFAULT_FUSION.to_dict()["activations"])
        if not isinstance(acts, Mapping):
            raise FusionRulesError(f"fusion rules: 'activations' must be a mapping, got {type(acts).__name__}")
        flags = {}
        for key in ("bn_into_conv", "single_consumer"):
            v = d.get(key, getattr(DEFAULT_FUSION, key))
            if not isinstance(v, bool):
                raise FusionRulesError(f"fusion rules: {key!r} must be true or false, got {v!r}")
            flags[key] = v
        return cls(activations={str(p): frozenset(k) for p, k in acts.items()}, **flags)


_ALL_KINDS = frozenset(ACTIVATION_KINDS)

#: The generic default: every activation folds into conv2d, dwconv2d, fc, add and mul when
#: the producer's output has exactly one consumer; BN folds into a preceding conv.
DEFAULT_FUSION = FusionRules(
    activations={t: _ALL_KINDS for t in (LayerType.CONV2D, LayerType.DWCONV2D, LayerType.FC, LayerType.ADD,
                                         LayerType.MUL)},
    bn_into_conv=True,
    single_consumer=True,
)

#: Nothing fuses: every activation (and every BN onnxsim left) is a layer of its own.
NO_FUSION = FusionRules(activations={}, bn_into_conv=False, single_consumer=True)
