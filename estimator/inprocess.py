"""The in-process implementation of the estimation interface (:mod:`estimator.interface`).

:class:`InProcessEstimation` loads every profile of a profiles directory into an
:class:`~estimator.predict.Estimator` and answers in this process: no server, no
serialisation of the answer, no network round trip. ``nas search`` uses it unless
``--service HOST:PORT`` names a running service; the estimation service
(:mod:`service.server`) is built from the same pieces, so both answer alike:

* :func:`load_devices`: one loader (models from the local cache, fusion rules parsed,
  fast path warmed up) and one :func:`model_version` per device;
* :func:`device_record`: the ``list_devices`` dict of a device;
* :func:`layers_from_parts`, :func:`check_ranges`, :func:`check_input_shapes`: the
  validation of bare layer configurations, counts and input shapes;
* :func:`batch_items` and :func:`estimate_batch`: a batch of bare configurations
  (``estimate_layers``, ``EstimateLayers``) answered item by item: a bad one gets its own
  error, one with 0 channels 0 ms;
* :func:`layer_record` and :func:`pair_layers`: a per-layer row with its imported layer's
  ONNX nodes and fused activation.

A model reaches the importer as the bytes the gRPC client would send
(:func:`estimator.onnx_strip.model_bytes`), so both take the same import path.
"""
from __future__ import annotations

import copy
import gc
import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .errors import NotFoundError, UserError
from .interface import (Estimation, EstimationError, LayerResult, NetworkResult, calibration_record,
                        cm_o_driver_record, refinement_record, spec_parts, warn_all)
from .layers import LAYER_TYPES, SPECS, LayerSpecError
from .predict import METRICS, Estimator, LayerEstimate, NetworkEstimate, make_layer, parse_confidence
from .profile import default_root, list_profiles, load_profile

__all__ = ["InProcessEstimation", "LoadedDevice", "load_device", "load_devices", "model_version", "device_record",
           "layers_from_parts", "check_ranges", "check_input_shapes", "BatchItem", "batch_items", "estimate_batch",
           "ZERO_CHANNELS", "layer_record", "pair_layers", "freeze_gc", "release_gc", "MAX_FEATURE", "MAX_DIM"]

#: Largest feature value the models evaluate (the forests compare in float32).
MAX_FEATURE = float(np.finfo(np.float32).max) / 16
#: Largest dimension accepted in input shapes.
MAX_DIM = 2**31 - 1


# --------------------------------------------------------------------------- devices


def model_version(est: Estimator) -> str:
    """A short hash of what determines every answer: trained models and profile metadata."""
    h = hashlib.sha256()
    h.update(str(getattr(est.models, "cache_key", "")).encode())
    h.update(json.dumps(est.profile.to_dict(), sort_keys=True, default=str).encode())
    h.update(f"{est.n_samples}:{est.seed}".encode())
    return h.hexdigest()[:16]


def device_record(est: Estimator, version: str) -> dict[str, Any]:
    """The ``list_devices`` entry of ``est``: provenance, coverage, versions, calibration."""
    prof = est.profile
    pv = prof.provenance
    space = est.models.design_space()
    return {
        "name": prof.name, "hardware": str(prof.hardware or ""), "runner": str(prof.runner or ""),
        "precision": str(prof.precision or ""), "threads": int(prof.threads or 0) or None,
        "description": str(prof.description or ""), "target": str(est.models.target), "model_version": version,
        "provenance": {"kind": str(pv.kind or ""), "source": str(pv.source or ""), "host": str(pv.host or ""),
                       "versions": {str(k): str(v) for k, v in pv.versions.items()}, "date": str(pv.date or "")},
        "coverage": {t: {"n_samples": int(d["n_rows"]),
                         "ranges": {f: (float(lo), float(hi)) for f, (lo, hi) in d["features"].items()}}
                     for t, d in space.items()},
        "fallback_types": [t for t in LAYER_TYPES if t not in space],
        "cpu_fallback_ops": [str(o) for o in prof.cpu_fallback_ops],
        "calibration": calibration_record(est.calibration_info()),
        "host_warnings": [str(w) for w in est.host_warnings()],
        "refined": refinement_record(prof.refinement_summary()),
    }


@dataclass(frozen=True)
class LoadedDevice:
    """One loaded device: its estimator, model version and ``list_devices`` record."""

    name: str
    estimator: Estimator
    model_version: str
    info: dict[str, Any]


def load_device(name: str, root: str | Path, *, cache_root: str | Path | None = None, n_jobs: int = 1,
                fast: bool = True) -> LoadedDevice:
    """Load (train, or read from the model cache) profile ``name`` of ``root``, ready to answer."""
    est = Estimator.from_profile(load_profile(name, root), cache_root=cache_root, n_jobs=n_jobs, fast=fast)
    est.fusion_rules()  # parse once, before any request needs it
    if fast:
        est.warm_up()  # fast evaluators and the first Monte Carlo sample blocks, before any request
    version = model_version(est)
    return LoadedDevice(name, est, version, device_record(est, version))


def load_devices(root: str | Path, *, cache_root: str | Path | None = None, n_jobs: int = 1, fast: bool = True
                 ) -> Iterator[tuple[str, LoadedDevice | None, str, float]]:
    """Load every profile under ``root``: ``(name, device or None, error, seconds)`` each.

    A profile that fails to load yields its error (one line) instead of stopping the others;
    a missing ``root`` yields one error under the name ``""``."""
    root = Path(root)
    if not root.is_dir():
        yield "", None, f"{root}: profiles directory does not exist", 0.0
        return
    for name in list_profiles(root):
        t0 = time.perf_counter()
        try:
            dev = load_device(name, root, cache_root=cache_root, n_jobs=n_jobs, fast=fast)
        except Exception as e:  # one bad profile must not take the others down
            msg = f"{root / name}: {e}" if isinstance(e, UserError) else f"{root / name}: {type(e).__name__}: {e}"
            yield name, None, msg, time.perf_counter() - t0
            continue
        yield name, dev, "", time.perf_counter() - t0


_GC_LOCK = threading.Lock()
_GC_HOLDERS: set[int] = set()


def freeze_gc(holder: object) -> None:
    """Move what is alive now (the loaded models: hundreds of thousands of objects) out of
    the cyclic garbage collector's sight. Requests allocate many short-lived objects (a
    10,000-layer EstimateLayers about a hundred thousand), and every full collection they
    trigger would otherwise walk all the models again (tens of ms each time). Models of a
    replaced set are still freed by reference counting; the collection before the freeze
    reclaims any cycles left by the previous one. :func:`release_gc` undoes it when the
    last holder that froze lets go."""
    with _GC_LOCK:
        _GC_HOLDERS.add(id(holder))
        gc.unfreeze()
        gc.collect()
        gc.freeze()


def release_gc(holder: object) -> None:
    with _GC_LOCK:
        if id(holder) in _GC_HOLDERS:
            _GC_HOLDERS.discard(id(holder))
            if not _GC_HOLDERS:
                gc.unfreeze()


# ------------------------------------------------------------------------ validation


def _number(v: float) -> int | float:
    v = float(v)
    return int(v) if v.is_integer() and abs(v) < 2**63 else v


Part = tuple[str, str, Mapping[str, float], Mapping[str, str]]


def layers_from_parts(parts: Iterable[Part], where: str) -> list[Any]:
    """Layers from bare configurations ``(type, name, numbers, options)``
    (:func:`estimator.interface.spec_parts`; the service's ``LayerSpec``): integral numbers
    become ints, options join them; a bad one raises :class:`LayerSpecError` naming it."""
    out = [_layer_of(i, part, where) for i, part in enumerate(parts)]
    check_ranges(out, where)
    return out


def _layer_of(i: int, part: Part, where: str, *, zero_ok: bool = False) -> Any:
    """The layer of configuration ``i`` (None: it has 0 channels and ``zero_ok``)."""
    typ, name, numbers, options = part
    label = f"{where}[{i}] ({typ or '?'}{' ' + repr(name) if name else ''})"
    params: dict[str, Any] = {k: _number(v) for k, v in numbers.items()}
    if options:
        clash = sorted(set(params) & set(options))
        if clash:
            raise LayerSpecError(f"{label}: {', '.join(clash)} given both as a number and as an option")
        params.update(dict(options))
    try:
        if zero_ok and typ in SPECS and SPECS[typ].zero_channels(params):
            return None
        return make_layer(typ, params, name, strict=True)
    except UserError as e:
        raise LayerSpecError(f"{label}: {e}") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise LayerSpecError(f"{label}: {type(e).__name__}: {e}") from None


def check_ranges(layers: Sequence[Any], where: str) -> None:
    """Refuse a layer whose counts cannot be evaluated (non-finite or beyond float32)."""
    for i, layer in enumerate(layers):
        _check_range(i, layer, where)


def _check_range(i: int, layer: Any, where: str) -> None:
    lim = MAX_FEATURE
    ops = float(layer.ops)
    feats = layer.features
    # quick test: a sum of magnitudes within the limit bounds each one (NaN and inf fail it,
    # and so does a large sum of small values, which the exact test below then lets through)
    if abs(ops) <= lim and sum(map(abs, feats.values())) <= lim:
        return
    for k, v in [("ops", ops)] + [(k, float(v)) for k, v in feats.items()]:
        if not math.isfinite(v) or abs(v) > lim:
            raise UserError(f"impossible shapes: {where}[{i}] ({layer.type} {layer.name!r}): {k} = {v:.3g} is "
                            f"beyond what the latency models can evaluate (at most {lim:.3g})")


#: The flag of a layer with 0 channels (:meth:`estimator.layers.LayerTypeSpec.zero_channels`).
ZERO_CHANNELS = "zero_channels"


@dataclass(frozen=True)
class BatchItem:
    """One configuration of a batch: its layer to estimate, or none (0 channels, or
    ``error``). ``name`` is echoed as a layer's name is (default: the type)."""

    name: str
    type: str
    layer: Any = None
    error: EstimationError | None = None


def batch_items(parts: Iterable[Part], where: str) -> list[BatchItem]:
    """A batch's configurations checked one by one, as :func:`layers_from_parts` checks a
    layer list, except that a bad one gets its own error (the message names it) instead
    of refusing the batch, and one with 0 channels no layer (it costs 0 ms)."""
    out = []
    for i, part in enumerate(parts):
        typ, name = part[0], part[1]
        try:
            layer = _layer_of(i, part, where, zero_ok=True)
            if layer is not None:
                _check_range(i, layer, where)
        except UserError as e:
            out.append(BatchItem(name or typ, typ, error=EstimationError.from_user_error(e)))
            continue
        out.append(BatchItem(name or typ, typ, layer))
    return out


def estimate_batch(est: Estimator, items: Sequence[BatchItem], confs: Sequence[float]
                   ) -> tuple[list[LayerEstimate | None], list[str]]:
    """One row per item, in order, and the warnings: the estimator's rows for the layers
    (all in one call), a 0 ms row with every interval ``(0, 0)`` flagged
    :data:`ZERO_CHANNELS` for a layer with 0 channels, and None for an item with an error."""
    layers = [it.layer for it in items if it.layer is not None]
    rows, warns = est.estimate_layers_with_warnings(layers, confs) if layers else ([], [])
    it_rows = iter(rows)
    out: list[LayerEstimate | None] = []
    n_zero = 0
    for it in items:
        if it.error is not None:
            out.append(None)
        elif it.layer is not None:
            out.append(next(it_rows))
        else:
            n_zero += 1
            out.append(LayerEstimate(name=it.name, type=it.type, op_type="", features={}, ops=0.0, prediction_ms=0.0,
                                     t_op_ms=None, intervals={m: {c: (0.0, 0.0) for c in confs} for m in METRICS},
                                     out_of_design_space=False, ood_reasons=[], fallback=False,
                                     flags=[ZERO_CHANNELS]))
    bad = [it.error.message for it in items if it.error is not None]
    if n_zero:
        warns = warns + [f"{n_zero} layer(s) have 0 channels: 0 ms, flagged {ZERO_CHANNELS}"]
    if bad:
        warns = warns + [f"{len(bad)} of {len(items)} layer(s) not estimated (see their error): {bad[0]}"
                         + (f"; and {len(bad) - 1} more" if len(bad) > 1 else "")]
    return out, warns


def check_input_shapes(shapes: Mapping[str, Sequence[int]]) -> Any:
    """``{input: dims}`` checked (every dim in [1, MAX_DIM]); the key ``""`` (the only
    input) gives its dims alone, as the importer takes them. ``None`` when empty."""
    if not shapes:
        return None
    out: dict[str, list[int]] = {}
    for k, dims in shapes.items():
        dims = [int(d) for d in dims]
        if not dims or any(d < 1 or d > MAX_DIM for d in dims):
            raise UserError(f"input_shapes[{k!r}] = {dims}: every dimension must be in [1, {MAX_DIM}]")
        out[k] = dims
    if "" in out:
        if len(out) > 1:
            raise UserError("input_shapes: the key '' (the only input) cannot be mixed with named inputs")
        return out[""]
    return out


# --------------------------------------------------------------------------- records


def _intervals(per_metric: Mapping[str, Mapping[float, tuple[float, float]]]) -> dict[str, dict[float, tuple]]:
    """metric -> confidence -> (lower, upper) keyed as the client keys them (12 digits)."""
    return {m: {round(float(c), 12): (float(lo), float(hi)) for c, (lo, hi) in per_metric[m].items()}
            for m in METRICS if per_metric.get(m)}


def pair_layers(rows: Sequence[LayerEstimate], layers: Sequence[Any]) -> Iterator[tuple[LayerEstimate, Any]]:
    """Each row with the imported layer it estimates (by name, in order): the estimator
    leaves out the layers the device runs for free, so rows and layers do not line up
    one to one. A row without its layer gets ``None``."""
    j, n = 0, len(layers)
    for row in rows:
        k = j
        while k < n and layers[k].name != row.name:
            k += 1
        if k < n:
            yield row, layers[k]
            j = k + 1
        else:
            yield row, None


def layer_record(row: LayerEstimate, layer: Any = None) -> dict[str, Any]:
    """A per-layer row as both implementations report it (:class:`LayerResult` fields),
    with the imported ``layer``'s ONNX nodes and fused activation."""
    t = row.t_op_ms
    nodes = [str(n) for n in (getattr(layer, "nodes", ()) or ())] if layer is not None else []
    return {"name": row.name, "type": row.type, "op_type": row.op_type or "",
            "features": dict(zip(row.features, map(float, row.features.values()))),
            "prediction_ms": float(row.prediction_ms),
            "intervals": _intervals(row.intervals), "out_of_design_space": bool(row.out_of_design_space),
            "fallback": bool(row.fallback), "flags": [str(f) for f in row.flags],
            "ood_reasons": [str(r) for r in row.ood_reasons],
            "t_op_ms": float(t) if t is not None and math.isfinite(t) else None, "ops": float(row.ops),
            "nodes": nodes, "activation": str(getattr(layer, "activation", "") or "") if layer is not None else ""}


def network_result(res: NetworkEstimate, dev: LoadedDevice, layers: Sequence[Any] | None) -> NetworkResult:
    """``res`` as the :class:`NetworkResult` the service answers (rows only with ``layers``)."""
    rows = [layer_record(r, l) for r, l in pair_layers(res.layers, layers)] if layers is not None else []
    unc = res.uncalibrated
    return NetworkResult(
        total_ms=float(res.total_ms), intervals=_intervals(res.intervals), layers=rows,
        warnings=[str(w) for w in res.warnings], n_layers=int(res.n_layers),
        n_out_of_design_space=int(res.n_out_of_design_space), n_fallback=int(res.n_fallback),
        model_version=dev.model_version, cached=False, server_time_ms=0.0, device=dev.name, name=res.name or "",
        confidence=[float(c) for c in res.confidence],
        uncalibrated=None if unc is None else {"total_ms": float(unc["total_ms"]),
                                               "intervals": _intervals(unc["intervals"])},
        calibration=calibration_record(res.calibration),
        cm_o_drivers=[cm_o_driver_record(d) for d in res.cm_o_drivers])


# ---------------------------------------------------------------------- implementation


class InProcessEstimation(Estimation):
    """The devices of a profiles directory, estimated in this process.

    ``profiles_dir`` defaults to :func:`estimator.profile.default_root`. Every profile is
    loaded at construction (models from the local cache, trained on a miss); one that fails
    is reported by :meth:`profile_errors`. ``fast=False`` answers from the estimator's
    reference path (same numbers, slower). After loading, the models are moved out of the
    cyclic garbage collector's sight (:func:`freeze_gc`) until :meth:`close`.

    .. code-block:: python

        with InProcessEstimation() as est:
            r = est.estimate_network("mobilenet_v2.onnx", "host-cpu", confidence=(0.9, 0.95))
            r.total_ms, r.interval("CM_LV", 0.9)
    """

    where = "in-process"

    def __init__(self, profiles_dir: str | Path | None = None, *, cache_root: str | Path | None = None,
                 n_jobs: int = 1, fast: bool = True) -> None:
        self.profiles_dir = Path(profiles_dir) if profiles_dir is not None else default_root()
        self.cache_root = cache_root
        self.n_jobs = n_jobs
        self.fast = bool(fast)
        self.devices: dict[str, LoadedDevice] = {}
        self.errors: list[str] = []
        self.generation = 0
        self._lock = threading.Lock()
        self.reload_profiles()

    # ------------------------------------------------------------------ devices
    def reload_profiles(self) -> dict[str, Any]:
        with self._lock:
            devices: dict[str, LoadedDevice] = {}
            errors: list[str] = []
            for name, dev, err, _ in load_devices(self.profiles_dir, cache_root=self.cache_root, n_jobs=self.n_jobs,
                                                  fast=self.fast):
                if dev is not None:
                    devices[name] = dev
                else:
                    errors.append(err)
                    if name in self.devices:  # keeps its old models
                        devices[name] = self.devices[name]
            self.devices = dict(sorted(devices.items()))
            self.errors = errors
            self.generation += 1
            freeze_gc(self)
            return {"devices": list(self.devices), "errors": list(errors), "generation": self.generation}

    def list_devices(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(d.info) for d in self.devices.values()]  # the caller's to change

    def profile_errors(self) -> list[str]:
        return list(self.errors)

    def device(self, name: str) -> LoadedDevice:
        """The loaded device ``name`` (NOT_FOUND lists the known ones)."""
        if not name:
            raise EstimationError("INVALID_ARGUMENT", f"no device given; known devices: "
                                                      f"{', '.join(self.devices) or 'none'}")
        dev = self.devices.get(name)
        if dev is None:
            known = ", ".join(sorted(self.devices)) or "none"
            raise EstimationError.from_user_error(NotFoundError(f"unknown device {name!r}; known devices: {known}"))
        return dev

    def close(self) -> None:
        release_gc(self)

    # --------------------------------------------------------------- estimation
    def estimate_network(self, model: Any, device: str, *, confidence: float | Iterable[float] | None = (0.9,),
                         per_layer: bool = True,
                         input_shapes: Mapping[str, Sequence[int]] | Sequence[int] | None = None,
                         strip: bool = True, name: str = "") -> NetworkResult:
        t0 = time.perf_counter()
        dev = self.device(device)
        parts = data = None  # converted here, as the client converts before it sends
        if isinstance(model, (list, tuple)) and (not model or isinstance(model[0], (Mapping, tuple, list))):
            parts = [spec_parts(s, i) for i, s in enumerate(model)]
        else:
            from .onnx_strip import model_bytes  # noqa: PLC0415 (the ONNX front end only when a model comes)

            data = model_bytes(model, strip)
        out = _answer(lambda: self._network(data, parts, dev, confidence, per_layer, input_shapes, name))
        out.server_time_ms = (time.perf_counter() - t0) * 1e3
        return out

    def _network(self, data: bytes | None, parts: list[Any] | None, dev: LoadedDevice, confidence: Any,
                 per_layer: bool, input_shapes: Any, name: str) -> NetworkResult:
        confs = parse_confidence(confidence)
        est = dev.estimator
        if parts is not None:
            if not parts:
                raise UserError("the layer list is empty")
            if input_shapes:  # (an empty mapping gives none, as on the wire)
                raise UserError("input_shapes applies to ONNX models, not to layer lists")
            layers = layers_from_parts(parts, "layers")
            res = est.estimate_network(SimpleNamespace(layers=layers, warnings=[], free_nodes={}, name=name), confs,
                                       name=name, per_layer=per_layer)
        else:
            if input_shapes is None or isinstance(input_shapes, Mapping):
                shapes = check_input_shapes({str(k): v for k, v in (input_shapes or {}).items()})
            else:
                shapes = check_input_shapes({"": input_shapes})
            net = est.load_network(data, shapes)  # impossible shapes raise ImpossibleShapeError
            check_ranges(net.layers, "layers")
            res = est.estimate_network(net, confs, name=str(getattr(net, "name", "") or ""), per_layer=per_layer)
            layers = list(net.layers)
        out = network_result(res, dev, layers if per_layer else None)
        if name:
            out.name = name
        return out

    def estimate_layers(self, specs: Iterable[Any], device: str,
                        confidence: float | Iterable[float] | None = (0.9,)) -> list[LayerResult]:
        dev = self.device(device)
        parts = [spec_parts(s, i) for i, s in enumerate(specs)]

        def run() -> tuple[list[LayerResult], list[str]]:
            confs = parse_confidence(confidence)
            if not parts:
                raise UserError("no layers given")
            items = batch_items(parts, "layers")
            rows, warns = estimate_batch(dev.estimator, items, confs)
            return [LayerResult(**layer_record(r)) if r is not None else
                    LayerResult(name=it.name, type=it.type, op_type="", features={}, prediction_ms=0.0, intervals={},
                                out_of_design_space=False, fallback=False, error=it.error)
                    for it, r in zip(items, rows)], warns

        results, warns = _answer(run)
        warn_all(warns)
        return results


def _answer(call: Callable[[], Any]) -> Any:
    """``call()``, with its refusals as the :class:`EstimationError` the service answers:
    a :class:`UserError`'s own status, and ``INTERNAL`` for anything else (a bug in one
    request fails that request, as it does on the service)."""
    try:
        return call()
    except EstimationError:
        raise
    except UserError as e:
        raise EstimationError.from_user_error(e) from None
    except Exception as e:  # noqa: BLE001 - the service's INTERNAL
        raise EstimationError("INTERNAL", f"internal error: {type(e).__name__}: {e}") from e
