"""The estimation interface: what NAS and pruning code ask of a latency estimator.

:class:`Estimation` is one small interface with two implementations, as Optuna's storages
are one interface with an in-memory and a gRPC implementation:

* :class:`estimator.inprocess.InProcessEstimation`: the device profiles loaded in this
  process, no network round trip (``nas search``'s default);
* :class:`service.client.EstimationClient`: a running estimation service over gRPC
  (``nas search --service HOST:PORT``).

Both return the same plain records (:class:`NetworkResult`, :class:`LayerResult`, the
``list_devices`` dicts) and raise :class:`EstimationError` with the gRPC status name the
service would answer with, so a caller never tells them apart
(``tests/test_interface.py`` holds the two to equal answers for the same network).

This module imports nothing heavy: the gRPC client depends on it and stays as light to
import as its own dependencies.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from .errors import UserError

__all__ = ["Estimation", "EstimationError", "EstimationWarning", "onnx_too_large", "NetworkResult", "LayerResult", "Intervals", "spec_parts",
           "calibration_record", "refinement_record", "CALIBRATION_TEXT_KEYS", "WIDE_CM_O_FACTOR", "cm_o_is_wide",
           "cm_o_driver_record", "cm_o_driver_lines"]

#: metric -> confidence (rounded to 12 digits) -> (lower_ms, upper_ms)
Intervals = dict[str, dict[float, tuple[float, float]]]


class EstimationWarning(UserWarning):
    """What concerns a whole :meth:`Estimation.estimate_layers` request without failing it
    (profile rows left out of training, layers with 0 channels, layers not estimated),
    issued with :func:`warnings.warn` by either implementation: a list of layer results has
    no field for it, and a network result carries its own ``warnings``."""


def onnx_too_large(size: int, max_bytes: int) -> str:
    """The refusal of an ONNX model over a service's limit: the server's, and the client's
    before it sends one (gRPC would refuse it in transport, with a generic message)."""
    return (f"the ONNX model is {size} bytes; this server accepts at most {max_bytes} bytes "
            f"({max_bytes / 2**20:.1f} MiB, --max-message-mb); strip the initializer data "
            "(the Python client does so by default)")


def warn_all(messages: Iterable[str], stacklevel: int = 3) -> None:
    """Issue each of ``messages`` as an :class:`EstimationWarning` (at the caller's caller)."""
    import warnings  # noqa: PLC0415

    for m in messages:
        warnings.warn(str(m), EstimationWarning, stacklevel=stacklevel)


class EstimationError(UserError):
    """A request the estimator refused or could not answer: ``code`` is the gRPC status
    name (``INVALID_ARGUMENT``, ``NOT_FOUND``, ``UNAVAILABLE``, ...), the same from either
    implementation."""

    def __init__(self, code: str, message: str, *, request_id: str = "") -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
        self.message = message
        self.request_id = request_id
        self.grpc_status = code or "UNKNOWN"

    @classmethod
    def from_user_error(cls, e: UserError) -> "EstimationError":
        """The error the service answers ``e`` with (its ``grpc_status``, its message)."""
        return cls(getattr(e, "grpc_status", "INVALID_ARGUMENT"), str(e))

    def __eq__(self, other: object) -> bool:
        """Equal status and message (the request id is the wire's), so that results
        carrying an error compare equal from either implementation."""
        if not isinstance(other, EstimationError):
            return NotImplemented
        return (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))


# --------------------------------------------------------------------------- results


def _pick(intervals: Intervals, metric: str, confidence: float | None) -> tuple[float, float]:
    per = intervals[metric]
    if confidence is None:
        return per[min(per)]
    c = round(float(confidence), 12)
    if c not in per:
        raise KeyError(f"no {metric} interval at confidence {confidence}; have {sorted(per)}")
    return per[c]


@dataclass
class LayerResult:
    """One layer's estimate (milliseconds).

    In a batch (:meth:`Estimation.estimate_layers`), a configuration that cannot be
    estimated has ``error`` set (its name and type echoed, zeros elsewhere): check
    :attr:`ok` or call :meth:`raise_for_error`. A layer with 0 channels
    (:meth:`~estimator.layers.LayerTypeSpec.zero_channels`) is no error: 0 ms, every
    interval ``(0, 0)``, flagged ``zero_channels``."""

    name: str
    type: str
    op_type: str
    features: dict[str, float]
    prediction_ms: float
    intervals: Intervals
    out_of_design_space: bool
    fallback: bool
    flags: list[str] = field(default_factory=list)
    ood_reasons: list[str] = field(default_factory=list)
    t_op_ms: float | None = None
    ops: float = 0.0
    nodes: list[str] = field(default_factory=list)
    activation: str = ""
    error: EstimationError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> "LayerResult":
        if self.error is not None:
            raise self.error
        return self

    def interval(self, metric: str = "CM_LV", confidence: float | None = None) -> tuple[float, float]:
        """``(lower_ms, upper_ms)`` of ``metric`` at ``confidence`` (default: the lowest
        level); an item that failed raises its error."""
        self.raise_for_error()
        return _pick(self.intervals, metric, confidence)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data; ``error`` (``{code, message}``) only when set."""
        out = {"name": self.name, "type": self.type, "op_type": self.op_type, "features": dict(self.features),
               "prediction_ms": self.prediction_ms,
               "intervals": {m: dict(per) for m, per in self.intervals.items()},
               "out_of_design_space": self.out_of_design_space, "fallback": self.fallback,
               "flags": list(self.flags), "ood_reasons": list(self.ood_reasons), "t_op_ms": self.t_op_ms,
               "ops": self.ops, "nodes": list(self.nodes), "activation": self.activation}
        if self.error is not None:
            out["error"] = {"code": self.error.code, "message": self.error.message}
        return out


@dataclass
class NetworkResult:
    """One network's estimate (milliseconds). On a stream, a failed item has ``error`` set
    (and zeros elsewhere): check :attr:`ok` or call :meth:`raise_for_error`."""

    total_ms: float
    #: metric -> confidence -> (lower_ms, upper_ms)
    intervals: Intervals
    #: per-layer rows (dicts: name, type, op_type, features, prediction_ms, intervals,
    #: out_of_design_space, fallback, flags, ood_reasons, t_op_ms, ops, nodes, activation)
    layers: list[dict[str, Any]]
    warnings: list[str]
    n_layers: int
    n_out_of_design_space: int
    n_fallback: int
    model_version: str
    cached: bool
    server_time_ms: float
    device: str = ""
    name: str = ""
    confidence: list[float] = field(default_factory=list)
    request_id: str = ""
    error: EstimationError | None = None
    #: the Eq. 7/8 values {"total_ms", "intervals"} when total_ms/intervals are calibrated, else None
    uncalibrated: dict[str, Any] | None = None
    #: what calibration applied (``applied``, ``method``, ``n_networks``, ``source``, ...)
    calibration: dict[str, Any] = field(default_factory=lambda: {"applied": False})
    #: the layers that drive the CM_O interval, and why (:func:`cm_o_driver_record` dicts;
    #: :mod:`estimator.drivers`); set when a layer is out of the design space or CM_O is wide
    cm_o_drivers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> "NetworkResult":
        if self.error is not None:
            raise self.error
        return self

    def interval(self, metric: str = "CM_LV", confidence: float | None = None) -> tuple[float, float]:
        """``(lower_ms, upper_ms)`` of ``metric`` at ``confidence`` (default: the lowest level)."""
        return _pick(self.intervals, metric, confidence)


# ------------------------------------------------------------------- plain records

#: the text fields of a calibration record (set only when non-empty)
CALIBRATION_TEXT_KEYS = ("reason", "method", "formula", "kind", "runner", "source", "date", "validation")


def calibration_record(info: Mapping[str, Any]) -> dict[str, Any]:
    """An estimator's calibration info (:meth:`estimator.predict.Estimator.calibration_info`,
    an estimate's ``calibration``) as both implementations report it: the text fields that
    are set, and the numbers only when calibration applied (a number of networks also when
    too few were there). The service's ``Calibration`` message carries exactly these fields."""
    applied = bool(info.get("applied"))
    out: dict[str, Any] = {"applied": applied}
    for key in CALIBRATION_TEXT_KEYS:
        if info.get(key):
            out[key] = str(info[key])
    n = int(info.get("n_networks") or 0)
    if applied:
        cv, unc = info.get("cv_mean_abs_error_pct"), info.get("uncalibrated_mean_abs_error_pct")
        out.update(n_networks=n, families=[str(f) for f in info.get("families") or ()],
                   runner_options={str(k): str(v) for k, v in (info.get("runner_options") or {}).items()},
                   cv_mean_abs_error_pct=float(cv) if cv is not None else 0.0,
                   uncalibrated_mean_abs_error_pct=float(unc) if unc is not None else 0.0,
                   in_scope=bool(info.get("in_scope", False)))
    elif n:
        out["n_networks"] = n
    return out


def refinement_record(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A :meth:`estimator.profile.Profile.refinement_summary` as both implementations report
    it (``{"configurations": 0}`` for a profile that was not refined); the service's
    ``Refinement`` message carries exactly these fields."""
    out = {"configurations": int(summary.get("configurations") or 0), "base": str(summary.get("base") or ""),
           "targets": [str(t) for t in summary.get("targets") or ()],
           "excluded": [str(t) for t in summary.get("excluded") or ()], "rounds": int(summary.get("rounds") or 0),
           "device_seconds": float(summary.get("device_seconds") or 0.0), "runner": str(summary.get("runner") or ""),
           "runner_options": {str(k): str(v) for k, v in (summary.get("runner_options") or {}).items()},
           "source": str(summary.get("source") or ""), "date": str(summary.get("date") or "")}
    if not (out["configurations"] or out["rounds"] or out["base"]):
        return {"configurations": 0}
    return out


#: a network CM_O upper bound above this multiple of the estimate is never shown without the
#: layers that drive it (:func:`cm_o_is_wide`)
WIDE_CM_O_FACTOR = 10.0


def cm_o_is_wide(total_ms: float, intervals: Mapping[str, Mapping[float, tuple[float, float]]]) -> bool:
    """Whether a CM_O upper bound in ``intervals`` (any confidence) exceeds
    :data:`WIDE_CM_O_FACTOR` times ``total_ms``."""
    return any(float(hi) > WIDE_CM_O_FACTOR * float(total_ms) for _, hi in (intervals.get("CM_O") or {}).values())


def cm_o_driver_record(d: Mapping[str, Any]) -> dict[str, Any]:
    """One layer that drives a network's CM_O interval, as every output reports it (the
    service's ``CmoDriver`` message carries exactly these fields; :mod:`estimator.drivers`
    says how they are computed): ``index`` (its position among the per-layer rows),
    ``name``, ``type``, ``op_type``, ``share`` (its CM_O upper bound minus its estimate, over
    the sum of that over all layers), ``prediction_ms``, ``cm_o_upper_ms``, ``confidence``,
    ``reasons`` (its ``ood_reasons``), ``out_of_range`` (``{feature, value, min, max}`` per
    feature outside the benchmarked range), ``knn_ratio`` (its k-NN distance over its type's
    threshold, when every feature is in range; None otherwise and without a model) and ``why``
    (the same in words)."""
    k = d.get("knn_ratio")
    return {"index": int(d["index"]), "name": str(d["name"]), "type": str(d["type"]),
            "op_type": str(d.get("op_type") or ""), "share": float(d["share"]),
            "prediction_ms": float(d["prediction_ms"]), "cm_o_upper_ms": float(d["cm_o_upper_ms"]),
            "confidence": float(d["confidence"]), "reasons": [str(r) for r in d.get("reasons") or ()],
            "out_of_range": [{"feature": str(o["feature"]), "value": float(o["value"]), "min": float(o["min"]),
                              "max": float(o["max"])} for o in d.get("out_of_range") or ()],
            "knn_ratio": None if k is None else float(k), "why": str(d.get("why") or "")}


def cm_o_driver_lines(drivers: Sequence[Mapping[str, Any]], total_ms: float, upper_ms: float,
                      indent: str = "  ") -> list[str]:
    """The drivers in words, for text output right under a network's CM_O line: a heading
    (how far the upper bound ``upper_ms`` is above the estimate ``total_ms``) and one line
    per layer (``#index name (type) share: why``)."""
    if not drivers:
        return []
    times = f"{upper_ms / total_ms:.3g}x the estimate" if total_ms > 0 else "above a 0 ms estimate"
    c = float(drivers[0]["confidence"])
    out = [f"{indent}CM_O upper bound {_ms(upper_ms)} is {times}; the layers that drive it (share of the "
           f"summed per-layer CM_O upper - estimate at {c:g}):"]
    for d in drivers:
        kind = d["type"] if d["type"] != "other" else f"other:{d.get('op_type') or '?'}"
        out.append(f"{indent}  #{d['index']} {d['name']} ({kind}) {100 * float(d['share']):.0f} %: {d['why']}")
    rest = 1.0 - sum(float(d["share"]) for d in drivers)
    if rest >= 0.005:
        out.append(f"{indent}  the other layers: {100 * rest:.0f} %")
    return out


def _ms(x: float) -> str:
    return f"{x:.0f} ms" if abs(x) >= 1000 else f"{x:.4g} ms"


def spec_parts(spec: Any, index: int) -> tuple[str, str, dict[str, float], dict[str, str]]:
    """A bare layer configuration as ``(type, name, numbers, options)``.

    A spec is a dict ``{type, params, name?}`` or a tuple ``(type, params[, name])``.
    Numeric parameters become floats, strings (``act="relu6"``) options, and lists (concat
    ``channels=[16, 32]``) comma-joined options: the form the service's ``LayerSpec``
    carries, so both implementations build the same layers from it. A parameter set to None
    is left out; a value of another kind goes as its text, so that the type refuses it in
    that configuration's own error and the batch's other layers are answered."""
    if isinstance(spec, Mapping):
        extra = sorted(set(spec) - {"type", "params", "name"})
        if extra:
            raise TypeError(f"layer spec {index}: unknown key(s) {', '.join(map(repr, extra))}; a spec is "
                            f"{{type, params, name?}} (string parameters such as act='relu6' go in params)")
        typ, params, name = spec.get("type"), spec.get("params", {}), spec.get("name", "")
    elif isinstance(spec, (tuple, list)) and len(spec) in (2, 3):
        typ, params = spec[0], spec[1]
        name = spec[2] if len(spec) == 3 else ""
    else:
        raise TypeError(f"layer spec {index}: give a dict {{type, params, name?}} or a tuple (type, params[, name]), "
                        f"got {spec!r}")
    if not isinstance(typ, str) or not isinstance(params, Mapping):
        raise TypeError(f"layer spec {index}: type must be a string and params a mapping, got {spec!r}")
    numbers: dict[str, float] = {}
    options: dict[str, str] = {}
    for k, v in params.items():
        if isinstance(v, bool):
            numbers[str(k)] = float(v)
        elif isinstance(v, (int, float)) or hasattr(v, "__float__") and not isinstance(v, str):
            numbers[str(k)] = float(v)
        elif isinstance(v, str):
            options[str(k)] = v
        elif isinstance(v, (list, tuple)):
            options[str(k)] = ",".join(str(x) for x in v)
        elif v is not None:
            options[str(k)] = repr(v)[:200]
    return typ, str(name or ""), numbers, options


# ------------------------------------------------------------------------- interface


class Estimation(ABC):
    """Latency estimates with CM_TV, CM_LV and CM_O intervals for the devices one
    estimator serves (see the module docstring for the implementations).

    ``model`` is a path, ONNX bytes, an ``onnx.ModelProto`` or a list of layer specs
    (:func:`spec_parts`); confidence levels are in (0, 1) (default 0.9); latency is in
    milliseconds. Refusals raise :class:`EstimationError`.
    """

    #: where the estimates are made, for messages: ``"in-process"`` or the service's ``HOST:PORT``
    where: str = ""

    @abstractmethod
    def list_devices(self) -> list[dict[str, Any]]:
        """Every loaded device: name, hardware, runner, provenance, coverage (type -> rows
        and feature ranges), model version, calibration, refinement, host warnings."""

    @abstractmethod
    def profile_errors(self) -> list[str]:
        """Why each profile that failed to load failed (its devices are not listed)."""

    @abstractmethod
    def reload_profiles(self) -> dict[str, Any]:
        """Load the profiles directory again: ``{"devices", "errors", "generation"}``. A
        device whose new profile fails to load keeps its old models."""

    @abstractmethod
    def estimate_network(self, model: Any, device: str, *, confidence: float | Iterable[float] | None = (0.9,),
                         per_layer: bool = True,
                         input_shapes: Mapping[str, Sequence[int]] | Sequence[int] | None = None,
                         strip: bool = True, name: str = "") -> NetworkResult:
        """Estimate one network: total, one interval per metric and confidence, per-layer
        rows (``per_layer``). ``input_shapes`` fixes dynamic dims; ``strip`` drops the
        weight data first (the estimate needs shapes only)."""

    @abstractmethod
    def estimate_layers(self, specs: Iterable[Any], device: str,
                        confidence: float | Iterable[float] | None = (0.9,)) -> list[LayerResult]:
        """Estimate bare layer configurations (pruning tools); one result per spec, in order.

        A configuration that cannot be estimated gets a result with ``error`` set (its
        message names it: ``layers[3] (conv2d 'x'): ...``) and the others are answered; a
        layer with 0 channels gets 0 ms, flagged ``zero_channels``. What concerns the whole
        request (unknown device, no layers, a bad confidence, too many layers) raises; what
        concerns it without failing it is issued as an :class:`EstimationWarning`."""

    def close(self) -> None:
        """Release what the implementation holds (a channel, loaded models)."""

    def __enter__(self) -> "Estimation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
