"""The estimation service: ``estimation.v1.Estimation`` (``proto/estimation.proto``) over the
estimator's public API (:class:`estimator.predict.Estimator`).

It is built from the pieces of the in-process implementation of the estimation interface
(:mod:`estimator.inprocess`: device loading, model versions, device records, validation of
layer specs, counts and input shapes), so that a client of the service and an in-process
caller get the same answers; what is its own is the wire (proto conversions, limits,
deadlines, the response cache, health, logging).

Behaviour
---------
* At start every profile under the profiles directory is loaded (models trained, or
  loaded from the local model cache). The standard health service answers
  ``NOT_SERVING`` until then and ``SERVING`` after; estimate calls made meanwhile get
  ``UNAVAILABLE`` (the Python client retries those). Server reflection is on.
* Devices live in an immutable *registry* (device -> estimator). A reload (``SIGHUP`` or
  the ``ReloadProfiles`` RPC) builds a new registry off to the side, reusing nothing but
  the model cache, and swaps the reference at once. A request takes the registry it
  starts with and finishes on it, so no request is lost or sees a half-built set; each
  item of a stream takes the registry current when the item is processed. A device
  whose new profile fails to load keeps its old models (the error is reported).
* Refusals, each with a precise status, after which the server keeps serving:
  ``INVALID_ARGUMENT`` (malformed ONNX, impossible shapes (the importer's
  :class:`~estimator.onnx_import.ImpossibleShapeError`, or counts beyond what the models
  evaluate), unknown confidence, bad layer spec; any :class:`~estimator.errors.UserError`
  without a more specific status),
  ``NOT_FOUND`` (unknown device, listing the known ones), ``RESOURCE_EXHAUSTED`` (ONNX
  larger than ``max_onnx_bytes``, more than ``max_layers`` layers; gRPC's own receive
  limit sits 1 MiB above ``max_onnx_bytes`` so the precise check fires first),
  ``UNAUTHENTICATED`` (token), ``DEADLINE_EXCEEDED`` (checked between the import and
  the prediction), ``INTERNAL`` for bugs (logged with a traceback).
* Identical requests for ONNX bytes (same bytes, device, model version, confidence
  levels, per_layer and input shapes) are answered from a bounded LRU cache
  (``cached=true``).
* ``EstimateNetworks`` answers one response per request, in order; an item that fails
  gets a response with ``error`` set and the stream goes on. Every RPC runs the
  estimator's fast path (:mod:`estimator.fastpath`; ``fast=False`` serves from the
  reference path, for comparisons); per-layer rows are built only when ``per_layer`` is
  set, and the ONNX bytes are hashed only when the response cache is on. After loading, the
  live objects (the models) are frozen out of the cyclic garbage collector's sight, so that
  collections triggered by requests do not walk them.
* Structured logs: one JSON object per line (request id, rpc, device, status, duration)
  when :func:`setup_json_logging` is installed (the ``estimation-service`` command does).
* Shutdown (:meth:`EstimationServer.stop`): new calls are refused, running ones may finish
  for the grace period; gRPC then cancels those still running (their clients get
  ``UNAVAILABLE``), each is logged once as cut at shutdown, and ``stop`` returns. The
  request threads are daemon threads (:class:`_RequestThreads`), so a cut call's handler,
  still computing, does not keep the process alive past the grace period.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import queue
import sys
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Mapping, Sequence

import grpc

from estimator.errors import NotFoundError, TooLargeError, UserError
from estimator.inprocess import (batch_items, check_input_shapes, check_ranges, estimate_batch, freeze_gc,
                                 layers_from_parts, load_devices, pair_layers, release_gc)
from estimator.interface import calibration_record, cm_o_driver_record, onnx_too_large, refinement_record
from estimator.predict import METRICS, Estimator, LayerEstimate, NetworkEstimate, parse_confidence
from estimator.profile import default_root
from proto import estimation_pb2 as pb2
from proto import estimation_pb2_grpc as pb2_grpc
from proto.serving import TokenInterceptor, add_health_and_reflection, bind, display_address, set_health

__all__ = [
    "SERVICE_NAME",
    "ServerLimits",
    "DeviceEntry",
    "Registry",
    "load_registry",
    "EstimationServicer",
    "EstimationServer",
    "EmbeddedServer",
    "JsonLogFormatter",
    "setup_json_logging",
    "DEFAULT_MAX_MESSAGE_MB",
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_WORKERS",
]

log = logging.getLogger("service")
log.addHandler(logging.NullHandler())  # a library: silent unless the application configures logging

SERVICE_NAME = pb2.DESCRIPTOR.services_by_name["Estimation"].full_name
DEFAULT_MAX_MESSAGE_MB = 64.0
DEFAULT_CACHE_SIZE = 256
DEFAULT_WORKERS = 8
DEFAULT_MAX_LAYERS = 100_000
DEFAULT_MAX_CONFIDENCE_LEVELS = 16
#: gRPC's receive limit sits this far above max_onnx_bytes, so the precise check fires first.
_MESSAGE_HEADROOM = 1 << 20


# ------------------------------------------------------------------------------ logging


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, plus the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            doc.update(fields)
        if record.exc_info:
            doc["traceback"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(doc, default=str)


def setup_json_logging(level: int = logging.INFO, stream: Any = None) -> Callable[[], None]:
    """Send the ``service`` and ``proto.serving`` loggers, and Python warnings, to ``stream``
    (stderr) as JSON lines. Returns a function that restores the previous configuration."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    names = ("service", "proto.serving", "py.warnings")
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in names}
    logging.captureWarnings(True)
    for name in names:
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level)
        lg.propagate = False

    def restore() -> None:
        logging.captureWarnings(False)
        for n, (handlers, lvl, prop) in saved.items():
            lg = logging.getLogger(n)
            lg.handlers[:] = handlers
            lg.setLevel(lvl)
            lg.propagate = prop

    return restore


def _event(level: int, msg: str, **fields: Any) -> None:
    if log.isEnabledFor(level):
        log.log(level, msg, extra={"fields": fields})


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ServerLimits:
    max_onnx_bytes: int = int(DEFAULT_MAX_MESSAGE_MB * 2**20)
    max_layers: int = DEFAULT_MAX_LAYERS
    max_confidence_levels: int = DEFAULT_MAX_CONFIDENCE_LEVELS

    @property
    def max_message_bytes(self) -> int:
        return self.max_onnx_bytes + _MESSAGE_HEADROOM

    def to_pb(self) -> pb2.ServerLimits:
        return pb2.ServerLimits(max_message_bytes=self.max_message_bytes, max_onnx_bytes=self.max_onnx_bytes,
                                max_layers=self.max_layers, max_confidence_levels=self.max_confidence_levels)


@dataclass(frozen=True)
class DeviceEntry:
    """One loaded device: its estimator, the ListDevices record and the model version."""

    name: str
    estimator: Estimator
    model_version: str
    info: pb2.DeviceInfo


@dataclass(frozen=True)
class Registry:
    """An immutable set of loaded devices (swapped whole on reload)."""

    generation: int
    devices: Mapping[str, DeviceEntry]
    errors: tuple[str, ...] = ()
    root: Path | None = None

    def get(self, device: str) -> DeviceEntry:
        if not device:
            raise UserError(f"no device given; known devices: {', '.join(self.devices) or 'none'}")
        try:
            return self.devices[device]
        except KeyError:
            known = ", ".join(sorted(self.devices)) or "none"
            raise NotFoundError(f"unknown device {device!r}; known devices: {known}") from None


def device_info_pb(info: Mapping[str, Any]) -> pb2.DeviceInfo:
    """A device record (:func:`estimator.inprocess.device_record`) as proto."""
    m = pb2.DeviceInfo(
        name=info["name"], hardware=info["hardware"], runner=info["runner"], precision=info["precision"],
        provenance=pb2.Provenance(**info["provenance"]), model_version=info["model_version"],
        threads=int(info["threads"] or 0), description=info["description"], target=info["target"],
        cpu_fallback_ops=info["cpu_fallback_ops"], calibration=pb2.Calibration(**info["calibration"]),
        host_warnings=info["host_warnings"], refined=pb2.Refinement(**info["refined"]),
        fallback_types=info["fallback_types"])
    for t, d in info["coverage"].items():
        cov = m.coverage.add(type=t, n_samples=int(d["n_samples"]))
        for f, (lo, hi) in d["ranges"].items():
            cov.ranges.add(feature=f, min=float(lo), max=float(hi))
    return m


def load_registry(root: str | Path, *, previous: Registry | None = None, cache_root: str | Path | None = None,
                  n_jobs: int = 1, fast: bool = True) -> Registry:
    """Load every profile under ``root`` into a new :class:`Registry` (``previous`` is not touched).

    A profile that fails to load is reported in ``errors``; if ``previous`` had that
    device, its old entry is kept. ``fast=False`` serves from the estimator's reference
    path (same answers, slower; for comparisons).
    """
    root = Path(root)
    devices: dict[str, DeviceEntry] = {}
    errors: list[str] = []
    for name, dev, msg, seconds in load_devices(root, cache_root=cache_root, n_jobs=n_jobs, fast=fast):
        if dev is not None:
            devices[name] = DeviceEntry(name, dev.estimator, dev.model_version, device_info_pb(dev.info))
            _event(logging.INFO, "device loaded", device=name, model_version=dev.model_version,
                   from_cache=bool(getattr(dev.estimator.models, "loaded_from_cache", False)),
                   duration_ms=round(seconds * 1e3, 1))
            for w in dev.estimator.profile_warnings():  # (each estimate carries it too)
                _event(logging.WARNING, "device rows left out", device=name, warning=w)
            continue
        errors.append(msg)
        if not name:
            continue
        kept = previous.devices.get(name) if previous is not None else None
        if kept is not None:
            devices[name] = kept
        _event(logging.ERROR, "device failed to load", device=name, error=msg, kept_previous=kept is not None)
    gen = (previous.generation + 1) if previous is not None else 1
    return Registry(gen, dict(sorted(devices.items())), tuple(errors), root)


# ------------------------------------------------------------------------ conversions


def calibration_pb(info: Mapping[str, Any]) -> pb2.Calibration:
    """A :meth:`estimator.predict.Estimator.calibration_info` (or an estimate's ``calibration``) as proto."""
    return pb2.Calibration(**calibration_record(info))


def refinement_pb(summary: Mapping[str, Any]) -> pb2.Refinement:
    """A :meth:`estimator.profile.Profile.refinement_summary` as proto."""
    return pb2.Refinement(**refinement_record(summary))


def cm_o_driver_pb(d: Mapping[str, Any]) -> pb2.CmoDriver:
    """A :func:`estimator.interface.cm_o_driver_record` as proto."""
    r = cm_o_driver_record(d)
    r["out_of_range"] = [pb2.FeatureOutOfRange(**o) for o in r["out_of_range"]]
    if r["knn_ratio"] is None:
        del r["knn_ratio"]
    return pb2.CmoDriver(**r)


def _intervals_pb(intervals: Mapping[str, Mapping[float, tuple[float, float]]]) -> list[pb2.Interval]:
    return [pb2.Interval(metric=m, confidence=float(c), lower_ms=float(lo), upper_ms=float(hi))
            for m in METRICS if m in intervals for c, (lo, hi) in sorted(intervals[m].items())]


#: id(features dict) -> (that dict, a serialized LayerEstimate holding only those features)
_FEATURES_PB: dict[int, tuple[Mapping[str, Any], bytes]] = {}
_FEATURES_PB_MAX = 4096


def _features_pb(feats: Mapping[str, Any]) -> bytes:
    """The ``features`` map of a layer row, serialized once per features dict: an imported
    layer's features are its (remembered, read-only) counts' dict, shared by every layer
    with those parameters, and filling a protobuf map entry by entry is the dearest part of
    a row (about 5 us for a convolution's 17 features, against 2 us to merge the bytes).
    The entry keeps the dict alive, so its id stays its own."""
    hit = _FEATURES_PB.get(id(feats))
    if hit is not None and hit[0] is feats:
        return hit[1]
    data = pb2.LayerEstimate(features={k: float(v) for k, v in feats.items()}).SerializeToString()
    if len(_FEATURES_PB) >= _FEATURES_PB_MAX:
        _FEATURES_PB.clear()
    _FEATURES_PB[id(feats)] = (feats, data)
    return data


def _fill_layer_pb(m: pb2.LayerEstimate, row: LayerEstimate, layer: Any = None, _metrics: Sequence[str] = METRICS,
                   _isfinite: Callable[[float], bool] = math.isfinite) -> pb2.LayerEstimate:
    """Write one row into ``m`` (a message already in its response: no copy). (Numbers go in
    as they are: a double field takes any real number, numpy scalars included.) With the
    imported ``layer``, its features come from :func:`_features_pb` when they are the row's
    (a layer the estimator marked cold has one more)."""
    feats = getattr(layer, "features", None)
    if feats is not None and feats == row.features:
        m.MergeFromString(_features_pb(feats))
    else:
        m.features.update({k: float(v) for k, v in row.features.items()})
    m.name = row.name
    m.type = row.type
    if row.op_type:
        m.op_type = row.op_type
    m.prediction_ms = row.prediction_ms
    add = m.intervals.add
    iv = row.intervals
    for metric in _metrics:
        per = iv.get(metric)
        if per:
            for c, (lo, hi) in (per.items() if len(per) == 1 else sorted(per.items())):
                add(metric=metric, confidence=c, lower_ms=lo, upper_ms=hi)
    if row.out_of_design_space:
        m.out_of_design_space = True
    if row.fallback:
        m.fallback = True
    if row.flags:
        m.flags.extend([str(f) for f in row.flags])
    m.ops = row.ops
    if row.ood_reasons:
        m.ood_reasons.extend([str(r) for r in row.ood_reasons])
    t = row.t_op_ms
    if t is not None and _isfinite(t):
        m.t_op_ms = t
    if layer is not None:
        nodes = getattr(layer, "nodes", ()) or ()
        if nodes:
            m.nodes.extend([str(n) for n in nodes])
        act = getattr(layer, "activation", "") or ""
        if act:
            m.activation = str(act)
    return m


def _layer_pb(row: LayerEstimate, layer: Any = None) -> pb2.LayerEstimate:
    return _fill_layer_pb(pb2.LayerEstimate(), row, layer)


def _layers_from_specs(specs: Sequence[pb2.LayerSpec], where: str) -> list[Any]:
    return layers_from_parts(((s.type, s.name, s.params, s.options) for s in specs), where)


# ---------------------------------------------------------------------------- servicer


class _Deadline(Exception):
    """The call's deadline passed (or the client cancelled it): stop working on it."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.DEADLINE_EXCEEDED) -> None:
        super().__init__(message)
        self.code = code


class _LRU:
    """A bounded, thread-safe LRU map."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = max(int(maxsize), 0)
        self._d: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> Any:
        with self._lock:
            v = self._d.get(key)
            if v is None:
                self.misses += 1
                return None
            self._d.move_to_end(key)
            self.hits += 1
            return v

    def put(self, key: Any, value: Any) -> None:
        if not self.maxsize:
            return
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


_STATUS = {c.name: c for c in grpc.StatusCode}
#: Statuses that are the client's business (logged at INFO); others at WARNING.
_EXPECTED = (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)


def _status_of(e: UserError) -> grpc.StatusCode:
    return _STATUS.get(getattr(e, "grpc_status", "INVALID_ARGUMENT"), grpc.StatusCode.INVALID_ARGUMENT)


def _request_id(request: Any, context: grpc.ServicerContext) -> str:
    rid = getattr(request, "request_id", "") or ""
    if not rid:
        for k, v in context.invocation_metadata() or ():
            if k == "x-request-id":
                rid = v if isinstance(v, str) else bytes(v).decode("utf-8", "replace")
                break
    return rid[:128] or uuid.uuid4().hex[:16]


def _check_deadline(context: grpc.ServicerContext, stage: str) -> None:
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        raise _Deadline(f"deadline exceeded {stage}")
    if not context.is_active():
        raise _Deadline(f"call cancelled by the client {stage}", grpc.StatusCode.CANCELLED)


def _native_built() -> bool:
    """Whether pip built the native ONNX importer (found without importing the ONNX front end,
    which the first request imports)."""
    return importlib.util.find_spec("estimator.native_import") is not None


class EstimationServicer(pb2_grpc.EstimationServicer):
    """``estimation.v1.Estimation`` over a swappable :class:`Registry` of estimators."""

    def __init__(self, profiles_dir: str | Path, *, limits: ServerLimits = ServerLimits(),
                 cache_size: int = DEFAULT_CACHE_SIZE, cache_root: str | Path | None = None, n_jobs: int = 1,
                 fast: bool = True) -> None:
        self.profiles_dir = Path(profiles_dir)
        self.fast = bool(fast)
        self.limits = limits
        self.cache = _LRU(cache_size)
        self.cache_root = cache_root
        self.n_jobs = n_jobs
        self._registry: Registry | None = None
        self._reload_lock = threading.Lock()
        self.loaded = threading.Event()
        self._running: dict[int, tuple[float, dict[str, Any]]] = {}  # call -> (start, log fields)
        self._running_lock = threading.Lock()
        self._next_call = 0

    # -------------------------------------------------------------- registry
    @property
    def registry(self) -> Registry | None:
        return self._registry

    def reload(self) -> Registry:
        """Build a new registry from the profiles directory and swap it in (thread-safe)."""
        with self._reload_lock:
            t0 = time.perf_counter()
            new = load_registry(self.profiles_dir, previous=self._registry, cache_root=self.cache_root,
                                n_jobs=self.n_jobs, fast=self.fast)
            self._registry = new  # one reference assignment: atomic for every reader
            freeze_gc(self)
            first = not self.loaded.is_set()
            self.loaded.set()
            _event(logging.INFO, "profiles loaded" if first else "profiles reloaded", generation=new.generation,
                   devices=list(new.devices), errors=list(new.errors), native_importer=_native_built(),
                   duration_ms=round((time.perf_counter() - t0) * 1e3, 1))
            return new

    def _current(self) -> Registry:
        reg = self._registry
        if reg is None:
            raise _Unavailable("the service is still loading its device profiles; retry shortly")
        return reg

    # ----------------------------------------------------------------- calls
    def _began(self, t0: float, fields: dict[str, Any]) -> int:
        """Register a running call (its start and log fields); the handle for :meth:`_ended`."""
        with self._running_lock:
            self._next_call += 1
            self._running[self._next_call] = (t0, fields)
            return self._next_call

    def _ended(self, call: int) -> bool:
        """The call's handler is done: True if it logs its own line (False: :meth:`cut_calls`
        logged it already)."""
        with self._running_lock:
            return self._running.pop(call, None) is not None

    def cut_calls(self, grace: float) -> int:
        """Log the calls still running once the shutdown's grace period is over (gRPC has
        cancelled them: their clients got ``UNAVAILABLE``), one line each; their handlers,
        if they ever finish, log nothing more. Returns how many there were."""
        with self._running_lock:  # the fields copied here: a handler may still be adding to them
            cut, self._running = [(t0, dict(fields)) for t0, fields in self._running.values()], {}
        now = time.perf_counter()
        for t0, fields in cut:
            _event(logging.WARNING, "rpc", **{
                **fields, "status": grpc.StatusCode.UNAVAILABLE.name, "cut_at_shutdown": True,
                "duration_ms": round((now - t0) * 1e3, 3),
                "error": f"cut at shutdown: still running when the {grace:g} s grace period ended"})
        return len(cut)

    def _unary(self, rpc: str, request: Any, context: grpc.ServicerContext,
               body: Callable[[str], tuple[Any, dict[str, Any]]]) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        rid = _request_id(request, context)
        fields: dict[str, Any] = {"request_id": rid, "rpc": rpc, "device": getattr(request, "device", "")}
        call = self._began(t0, fields)
        _event(logging.DEBUG, "rpc start", **fields)
        try:
            context.set_trailing_metadata((("x-request-id", rid),))
        except Exception:  # pragma: no cover - metadata is best effort
            pass
        code, message = grpc.StatusCode.OK, ""
        try:
            resp, extra = body(rid)
            fields.update(extra)
            return resp
        except UserError as e:
            code, message = _status_of(e), str(e)
        except _Deadline as e:
            code, message = e.code, str(e)
        except _Unavailable as e:
            code, message = grpc.StatusCode.UNAVAILABLE, str(e)
        except Exception as e:  # a bug: report it, keep serving
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}"
            log.exception("internal error in %s", rpc, extra={"fields": {"request_id": rid, "rpc": rpc}})
        finally:
            fields["status"] = code.name
            fields["duration_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            # this thread's CPU time: on a busy machine, what the call cost apart from waiting
            fields["cpu_ms"] = round((time.thread_time() - c0) * 1e3, 3)
            if message:
                fields["error"] = message[:500]
            if self._ended(call):
                _event(logging.INFO if code in _EXPECTED else logging.WARNING, "rpc", **fields)
        context.abort(code, message)

    def ListDevices(self, request: pb2.ListDevicesRequest, context: grpc.ServicerContext) -> pb2.ListDevicesResponse:
        def body(rid: str) -> tuple[Any, dict[str, Any]]:
            reg = self._current()
            resp = pb2.ListDevicesResponse(devices=[e.info for e in reg.devices.values()], errors=list(reg.errors),
                                           generation=reg.generation, limits=self.limits.to_pb())
            return resp, {"n_devices": len(reg.devices)}

        return self._unary("ListDevices", request, context, body)

    def ReloadProfiles(self, request: pb2.ReloadProfilesRequest, context: grpc.ServicerContext
                       ) -> pb2.ReloadProfilesResponse:
        def body(rid: str) -> tuple[Any, dict[str, Any]]:
            reg = self.reload()
            return (pb2.ReloadProfilesResponse(devices=list(reg.devices), errors=list(reg.errors),
                                               generation=reg.generation), {"generation": reg.generation})

        return self._unary("ReloadProfiles", request, context, body)

    def EstimateNetwork(self, request: pb2.EstimateNetworkRequest, context: grpc.ServicerContext
                        ) -> pb2.EstimateNetworkResponse:
        def body(rid: str) -> tuple[Any, dict[str, Any]]:
            resp = self.estimate_network(request, context)
            resp.request_id = rid
            return resp, {"cached": resp.cached, "n_layers": resp.n_layers}

        return self._unary("EstimateNetwork", request, context, body)

    def EstimateLayers(self, request: pb2.EstimateLayersRequest, context: grpc.ServicerContext
                       ) -> pb2.EstimateLayersResponse:
        def body(rid: str) -> tuple[Any, dict[str, Any]]:
            resp = self.estimate_layers(request, context)
            n_err = sum(l.HasField("error") for l in resp.layers)
            return resp, {"n_layers": len(request.layers), **({"n_errors": n_err} if n_err else {})}

        return self._unary("EstimateLayers", request, context, body)

    def EstimateNetworks(self, request_iterator: Iterator[pb2.EstimateNetworkRequest],
                         context: grpc.ServicerContext) -> Iterator[pb2.EstimateNetworkResponse]:
        t_stream = time.perf_counter()
        n = n_err = 0
        stream_id = uuid.uuid4().hex[:16]
        code, message = grpc.StatusCode.OK, ""
        call = self._began(t_stream, {"request_id": stream_id, "rpc": "EstimateNetworks"})
        try:
            for request in request_iterator:
                t0 = time.perf_counter()
                rid = request.request_id or f"{stream_id}/{n}"
                status = "OK"
                try:
                    resp = self.estimate_network(request, context)
                except UserError as e:
                    status = _status_of(e).name
                    resp = pb2.EstimateNetworkResponse(device=request.device, error=pb2.Error(code=status, message=str(e)))
                except _Unavailable as e:
                    status = "UNAVAILABLE"
                    resp = pb2.EstimateNetworkResponse(device=request.device, error=pb2.Error(code=status, message=str(e)))
                except _Deadline:
                    raise
                except Exception as e:
                    status = "INTERNAL"
                    log.exception("internal error in EstimateNetworks", extra={"fields": {"request_id": rid}})
                    resp = pb2.EstimateNetworkResponse(
                        device=request.device,
                        error=pb2.Error(code=status, message=f"internal error: {type(e).__name__}: {e}"))
                resp.request_id = rid
                if status != "OK":
                    n_err += 1
                    resp.server_time_ms = (time.perf_counter() - t0) * 1e3
                _event(logging.INFO, "rpc item", request_id=rid, rpc="EstimateNetworks", device=request.device,
                       status=status, item=n, cached=resp.cached,
                       duration_ms=round((time.perf_counter() - t0) * 1e3, 3),
                       **({"error": resp.error.message[:500]} if status != "OK" else {}))
                n += 1
                yield resp
        except _Deadline as e:
            code, message = e.code, str(e)
        except grpc.RpcError as e:  # the client went away mid-stream
            code, message = grpc.StatusCode.CANCELLED, f"stream broken: {e}"
        finally:
            if self._ended(call):
                _event(logging.INFO, "rpc", request_id=stream_id, rpc="EstimateNetworks", status=code.name, items=n,
                       item_errors=n_err, duration_ms=round((time.perf_counter() - t_stream) * 1e3, 3),
                       **({"error": message} if message else {}))
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            context.abort(code, message)

    # ------------------------------------------------------------ estimation
    def _confidence(self, values: Sequence[float]) -> list[float]:
        if len(values) > self.limits.max_confidence_levels and len(set(values)) > self.limits.max_confidence_levels:
            raise TooLargeError(f"{len(set(values))} confidence levels; at most {self.limits.max_confidence_levels} "
                                "per request")
        return parse_confidence(list(values) if len(values) else None)

    @staticmethod
    def _input_shapes(shapes: Mapping[str, pb2.Shape]) -> Any:
        return check_input_shapes({k: list(s.dims) for k, s in shapes.items()})

    def estimate_network(self, request: pb2.EstimateNetworkRequest, context: grpc.ServicerContext
                         ) -> pb2.EstimateNetworkResponse:
        """One EstimateNetwork (raises UserError/_Deadline/_Unavailable; the caller maps them)."""
        t0 = time.perf_counter()
        _check_deadline(context, "before the estimate started")
        reg = self._current()
        entry = reg.get(request.device)
        confs = self._confidence(request.confidence)
        which = request.WhichOneof("model")
        if which is None:
            raise UserError("the request carries no model: set 'onnx' (serialized ONNX bytes) or 'layers'")
        key = None
        if which == "onnx":
            size = len(request.onnx)
            if size > self.limits.max_onnx_bytes:
                raise TooLargeError(onnx_too_large(size, self.limits.max_onnx_bytes))
            shapes = self._input_shapes(request.input_shapes)
            onnx_bytes = request.onnx
            if self.cache.maxsize:
                key = (entry.name, entry.model_version, hashlib.sha256(onnx_bytes).digest(), tuple(confs),
                       bool(request.per_layer), json.dumps(shapes, sort_keys=True) if shapes is not None else "")
            hit = self.cache.get(key) if key is not None else None
            if hit is not None:
                resp = pb2.EstimateNetworkResponse()
                resp.CopyFrom(hit)
                resp.cached = True
                if request.name:
                    resp.name = request.name
                resp.server_time_ms = (time.perf_counter() - t0) * 1e3
                return resp
            est = entry.estimator
            net = est.load_network(onnx_bytes, shapes)  # impossible shapes raise ImpossibleShapeError
            check_ranges(net.layers, "layers")
            if len(net.layers) > self.limits.max_layers:
                raise TooLargeError(f"the network has {len(net.layers)} layers; this server estimates at most "
                                    f"{self.limits.max_layers} per request")
            _check_deadline(context, "after importing the ONNX model")
            result = est.estimate_network(net, confs, name=str(getattr(net, "name", "") or ""),
                                          per_layer=bool(request.per_layer))
            layers = list(net.layers)
        else:
            specs = request.layers.layers
            if not specs:
                raise UserError("the layer list is empty")
            if len(specs) > self.limits.max_layers:
                raise TooLargeError(f"{len(specs)} layers; this server estimates at most {self.limits.max_layers} "
                                    "per request")
            if request.input_shapes:
                raise UserError("input_shapes applies to ONNX models, not to layer lists")
            layers = _layers_from_specs(specs, "layers")
            _check_deadline(context, "before the prediction")
            result = entry.estimator.estimate_network(
                SimpleNamespace(layers=layers, warnings=[], free_nodes={}, name=request.name), confs,
                name=request.name, per_layer=bool(request.per_layer))
        resp = self._network_pb(result, entry, layers if request.per_layer else None)
        _check_deadline(context, "after the prediction")
        if key is not None:  # cached under the graph's own name; the request's name is applied per answer
            self.cache.put(key, resp)
            out = pb2.EstimateNetworkResponse()
            out.CopyFrom(resp)
            resp = out
            if request.name:
                resp.name = request.name
        resp.server_time_ms = (time.perf_counter() - t0) * 1e3
        return resp

    @staticmethod
    def _network_pb(res: NetworkEstimate, entry: DeviceEntry, layers: Sequence[Any] | None
                    ) -> pb2.EstimateNetworkResponse:
        resp = pb2.EstimateNetworkResponse(
            device=entry.name, total_ms=float(res.total_ms), intervals=_intervals_pb(res.intervals),
            warnings=[str(w) for w in res.warnings], n_layers=res.n_layers,
            n_out_of_design_space=int(res.n_out_of_design_space), n_fallback=int(res.n_fallback),
            model_version=entry.model_version, confidence=[float(c) for c in res.confidence], name=res.name or "",
            calibration=calibration_pb(res.calibration), cm_o_drivers=[cm_o_driver_pb(d) for d in res.cm_o_drivers])
        if res.uncalibrated is not None:
            resp.uncalibrated.total_ms = float(res.uncalibrated["total_ms"])
            resp.uncalibrated.intervals.extend(_intervals_pb(res.uncalibrated["intervals"]))
        if layers is not None:
            add = resp.layers.add
            for row, layer in pair_layers(res.layers, layers):
                _fill_layer_pb(add(), row, layer)
        return resp

    def estimate_layers(self, request: pb2.EstimateLayersRequest, context: grpc.ServicerContext
                        ) -> pb2.EstimateLayersResponse:
        t0 = time.perf_counter()
        _check_deadline(context, "before the estimate started")
        reg = self._current()
        entry = reg.get(request.device)
        confs = self._confidence(request.confidence)
        if not request.layers:
            raise UserError("no layers given")
        if len(request.layers) > self.limits.max_layers:
            raise TooLargeError(f"{len(request.layers)} layers; this server estimates at most "
                                f"{self.limits.max_layers} per request")
        items = batch_items(((s.type, s.name, s.params, s.options) for s in request.layers), "layers")
        _check_deadline(context, "before the prediction")
        rows, warns = estimate_batch(entry.estimator, items, confs)
        _check_deadline(context, "after the prediction")
        resp = pb2.EstimateLayersResponse(model_version=entry.model_version, warnings=[str(w) for w in warns],
                                          device=entry.name)
        add = resp.layers.add
        for it, r in zip(items, rows):
            if r is not None:
                _fill_layer_pb(add(), r)
            else:
                assert it.error is not None
                add(name=it.name, type=it.type, error=pb2.Error(code=it.error.code, message=it.error.message))
        resp.server_time_ms = (time.perf_counter() - t0) * 1e3
        return resp


class _Unavailable(Exception):
    pass


class _RequestThreads(futures.Executor):
    """The request threads: ``workers`` daemon threads taking calls from one queue.

    A :class:`~concurrent.futures.ThreadPoolExecutor`'s threads are joined at interpreter
    exit, so a call cut at shutdown kept the process alive until its handler finished (an
    ``EstimateLayers`` batch of 100 000 layers held it 7 s past a 0.5 s grace). gRPC has
    answered a cut call already and only calls :meth:`submit`; these threads do not hold up
    the exit.
    """

    def __init__(self, workers: int, name: str) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future:
        f: futures.Future = futures.Future()
        self._queue.put((f, fn, args, kwargs))
        return f

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Each thread ends after the calls queued before (``wait``: waits for them)."""
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            f, fn, args, kwargs = job
            if not f.set_running_or_notify_cancel():
                continue
            try:
                f.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - the future carries it, as ThreadPoolExecutor's do
                f.set_exception(e)


# ------------------------------------------------------------------------------ server


class EstimationServer:
    """A gRPC server running :class:`EstimationServicer`, plus health and reflection.

    ``start()`` binds and starts serving (health ``NOT_SERVING``), then loads the profiles
    (in the calling thread, or in the background with ``wait=False``) and turns health to
    ``SERVING``. ``stop(grace)`` refuses new calls and lets running ones finish for up to
    ``grace`` seconds. Usable as a context manager.
    """

    def __init__(self, profiles_dir: str | Path | None = None, port: int = 0, *, host: str = "127.0.0.1",
                 token: str | None = None, tls_cert: str | Path | None = None, tls_key: str | Path | None = None,
                 max_message_mb: float = DEFAULT_MAX_MESSAGE_MB, cache_size: int = DEFAULT_CACHE_SIZE,
                 workers: int = DEFAULT_WORKERS, max_layers: int = DEFAULT_MAX_LAYERS,
                 cache_root: str | Path | None = None, n_jobs: int = 1, grace_s: float = 10.0,
                 fast: bool = True) -> None:
        if not (max_message_mb > 0 and math.isfinite(max_message_mb)):
            raise ValueError(f"max_message_mb must be > 0, got {max_message_mb}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        if max_layers < 1:
            raise ValueError(f"max_layers must be >= 1, got {max_layers}")
        if token is not None and not token.strip():
            raise ValueError("the token is empty")
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("TLS needs both a certificate and its private key")
        self.profiles_dir = Path(profiles_dir) if profiles_dir is not None else default_root()
        self.host = host
        self.requested_port = int(port)
        self.token = token.strip() if token else None
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self.limits = ServerLimits(max_onnx_bytes=int(max_message_mb * 2**20), max_layers=int(max_layers))
        self.cache_size = int(cache_size)
        self.workers = int(workers)
        self.cache_root = cache_root
        self.n_jobs = n_jobs
        self.grace_s = float(grace_s)
        self.fast = bool(fast)  # False: the estimators' reference path (same answers, slower)
        self.port: int = 0
        self.server: grpc.Server | None = None
        self.servicer: EstimationServicer | None = None
        self._health: Any = None
        self._loader: threading.Thread | None = None
        self._threads: _RequestThreads | None = None
        self.load_error: BaseException | None = None
        #: set once the profiles are loaded and health says SERVING (what wait_ready waits for)
        self._ready = threading.Event()

    @property
    def address(self) -> str:
        """``host:port`` a local client dials (``127.0.0.1:PORT`` for the loopback default)."""
        if not self.port:
            raise RuntimeError("the server is not started")
        return display_address(self.host, self.port)

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def start(self, *, wait: bool = True) -> "EstimationServer":
        if self.server is not None:
            raise RuntimeError("the server is already started")
        interceptors = []
        if self.token:
            interceptors.append(TokenInterceptor(
                self.token, on_deny=lambda m: _event(logging.WARNING, "rpc", rpc=m.rsplit("/", 1)[-1],
                                                     status="UNAUTHENTICATED", error="bad or missing token")))
        self._threads = _RequestThreads(self.workers, "estimation")
        server = grpc.server(
            self._threads,
            interceptors=interceptors,
            options=[("grpc.max_receive_message_length", self.limits.max_message_bytes),
                     ("grpc.max_send_message_length", max(self.limits.max_message_bytes, 256 << 20)),
                     ("grpc.so_reuseport", 0)],
        )
        servicer = EstimationServicer(self.profiles_dir, limits=self.limits, cache_size=self.cache_size,
                                      cache_root=self.cache_root, n_jobs=self.n_jobs, fast=self.fast)
        pb2_grpc.add_EstimationServicer_to_server(servicer, server)
        self._health = add_health_and_reflection(server, [SERVICE_NAME])
        self.port = bind(server, self.host, self.requested_port, tls_cert=self.tls_cert, tls_key=self.tls_key,
                         what="estimation service")
        server.start()
        self.server, self.servicer = server, servicer
        _event(logging.INFO, "listening", address=self.address, tls=self.tls, token=bool(self.token),
               profiles=str(self.profiles_dir), workers=self.workers, cache_size=self.cache_size,
               max_onnx_bytes=self.limits.max_onnx_bytes)
        if wait:
            self._load()
        else:
            self._loader = threading.Thread(target=self._load, name="estimation-load", daemon=True)
            self._loader.start()
        return self

    def _load(self) -> None:
        assert self.servicer is not None
        try:
            self.servicer.reload()
        except BaseException as e:  # noqa: BLE001 - reported; the server stays NOT_SERVING
            self.load_error = e
            log.exception("loading the profiles failed")
            raise
        set_health(self._health, [SERVICE_NAME], serving=True)
        self._ready.set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the profiles are loaded and health says SERVING (True), or ``timeout``
        passes (False)."""
        if self.servicer is None:
            raise RuntimeError("the server is not started")
        return self._ready.wait(timeout)

    def reload(self) -> Registry:
        """Reload the profiles (what SIGHUP and the ReloadProfiles RPC do)."""
        if self.servicer is None:
            raise RuntimeError("the server is not started")
        return self.servicer.reload()

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls; running ones may finish for up to ``grace`` seconds (default
        grace_s). Calls still running then are cancelled and logged as cut at shutdown, and
        ``stop`` returns without waiting for their handlers."""
        if self.server is None:
            return
        g = self.grace_s if grace is None else grace
        if self._health is not None:
            set_health(self._health, [SERVICE_NAME], serving=False)
        t0 = time.perf_counter()
        self.server.stop(g).wait()
        cut = 0
        if self.servicer is not None:
            cut = self.servicer.cut_calls(g)
            release_gc(self.servicer)
        if self._threads is not None:
            self._threads.shutdown(wait=False)  # a cut call's thread ends when its handler does
        _event(logging.INFO, "stopped", grace_s=g, drain_ms=round((time.perf_counter() - t0) * 1e3, 1), cut_calls=cut)
        self.server = None

    def wait(self, timeout: float | None = None) -> bool:
        if self.server is None:
            return True
        return self.server.wait_for_termination(timeout)

    def __enter__(self) -> "EstimationServer":
        if self.server is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class EmbeddedServer(EstimationServer):
    """The in-process server the NAS client starts when no ``--service`` address is given.

    .. code-block:: python

        with EmbeddedServer(profiles_dir) as srv:          # loopback, free port, profiles loaded
            client = EstimationClient(srv.address)

    Defaults: the default profiles root (:func:`estimator.profile.default_root`),
    ``127.0.0.1``, a free port, no token, no TLS, a short grace period.
    """

    def __init__(self, profiles_dir: str | Path | None = None, port: int = 0, *, host: str = "127.0.0.1",
                 grace_s: float = 2.0, **kwargs: Any) -> None:
        super().__init__(profiles_dir, port, host=host, grace_s=grace_s, **kwargs)
