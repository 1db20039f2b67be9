"""The Python client of the estimation service (``estimation.v1.Estimation``).

.. code-block:: python

    from service.client import EstimationClient

    with EstimationClient("127.0.0.1:50071", token=...) as c:
        c.list_devices()
        r = c.estimate_network("mobilenet_v2.onnx", "host-cpu", confidence=(0.9, 0.95))
        r.total_ms, r.interval("CM_LV", 0.9), r.layers[0]["out_of_design_space"]
        for r in c.estimate_networks((m, "host-cpu") for m in candidates):   # one stream
            ...
        c.estimate_layers([{"type": "conv2d", "params": {"h": 56, "w": 56, "c_in": 64, "c_out": 64,
                                                         "k_h": 3, "k_w": 3}}], "host-cpu")

:class:`EstimationClient` is the gRPC implementation of the estimation interface
(:class:`estimator.interface.Estimation`); :class:`estimator.inprocess.InProcessEstimation`
is the in-process one, and both return the same records. It depends on ``grpc``, ``onnx``
and the generated ``proto`` modules only (never on the estimator's internals); its imports
from ``estimator`` are the interface with its plain records (:class:`NetworkResult`,
:class:`LayerResult`, :class:`EstimationError`) and :mod:`estimator.onnx_strip` (the one
definition of a weightless model).

* Models are sent with their initializer data stripped (:func:`strip_initializers`,
  ``strip=True``): the server needs shapes, not weights, so a ResNet-50 query is tens of
  kilobytes instead of 100 MB.
* Calls that fail with ``UNAVAILABLE`` (server starting, restarting, loading its
  profiles) are retried ``retries`` times with exponential backoff, within the call's
  deadline. A broken stream is resumed: the requests not yet answered are sent again.
* Every other failure raises :class:`EstimationError` with the gRPC status name
  (``code``) and the server's message; on a stream, a bad item yields a
  :class:`NetworkResult` whose ``error`` is set and the stream goes on, and in a batch of
  layers a bad configuration a :class:`LayerResult` whose ``error`` is set.
"""
from __future__ import annotations

import collections
import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import grpc

from estimator.interface import (CALIBRATION_TEXT_KEYS, Estimation, EstimationError, Intervals, LayerResult,
                                 NetworkResult, cm_o_driver_record, onnx_too_large, spec_parts, warn_all)
from estimator.onnx_strip import model_bytes, strip_initializers
from proto import estimation_pb2 as pb2
from proto import estimation_pb2_grpc as pb2_grpc

__all__ = ["EstimationClient", "EstimationError", "NetworkResult", "LayerResult", "strip_initializers",
           "DEFAULT_TIMEOUT_S", "network_result", "layer_result", "calibration_dict", "refinement_dict",
           "cm_o_driver_dict"]

DEFAULT_TIMEOUT_S = 30.0
_MAX_MESSAGE = 256 << 20
#: requests up to this size are sent without asking the server's limits (its smallest is 1 MiB)
_ASK_LIMITS_ABOVE = 1 << 20


def _error(e: grpc.RpcError) -> EstimationError:
    """The :class:`EstimationError` of a failed call: its status name, details and request id."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    rid = ""
    try:
        for k, v in e.trailing_metadata() or ():  # type: ignore[attr-defined]
            if k == "x-request-id":
                rid = str(v)
    except Exception:  # noqa: BLE001 - metadata is best effort
        pass
    return EstimationError(code.name if code is not None else "UNKNOWN", details or "", request_id=rid)


# --------------------------------------------------------------------------- results

def _intervals(items: Iterable[pb2.Interval]) -> Intervals:
    out: Intervals = {}
    for iv in items:
        out.setdefault(iv.metric, {})[round(iv.confidence, 12)] = (iv.lower_ms, iv.upper_ms)
    return out


def _layer_fields(m: pb2.LayerEstimate) -> dict[str, Any]:
    """A ``LayerEstimate``'s :class:`LayerResult` fields, read once from the message."""
    err = None
    if m.HasField("error") and (m.error.code or m.error.message):
        err = EstimationError(m.error.code, m.error.message)
    return {"name": m.name, "type": m.type, "op_type": m.op_type, "features": dict(m.features),
            "prediction_ms": m.prediction_ms, "intervals": _intervals(m.intervals),
            "out_of_design_space": m.out_of_design_space, "fallback": m.fallback, "flags": m.flags[:],
            "ood_reasons": m.ood_reasons[:], "t_op_ms": m.t_op_ms if m.HasField("t_op_ms") else None, "ops": m.ops,
            "nodes": m.nodes[:], "activation": m.activation, "error": err}


def layer_result(m: pb2.LayerEstimate) -> LayerResult:
    return LayerResult(**_layer_fields(m))


def _layer_row(m: pb2.LayerEstimate) -> dict[str, Any]:
    """``layer_result(m).to_dict()`` without the record in between: a network's per-layer row
    (no second copy of its features and intervals)."""
    row = _layer_fields(m)
    err = row.pop("error")
    if err is not None:
        row["error"] = {"code": err.code, "message": err.message}
    return row


def calibration_dict(m: pb2.Calibration) -> dict[str, Any]:
    """A ``Calibration`` message as :func:`estimator.interface.calibration_record` (only what is set)."""
    out: dict[str, Any] = {"applied": m.applied}
    for key in CALIBRATION_TEXT_KEYS:
        if getattr(m, key):
            out[key] = getattr(m, key)
    if m.applied:
        out.update(n_networks=m.n_networks, families=list(m.families), runner_options=dict(m.runner_options),
                   cv_mean_abs_error_pct=m.cv_mean_abs_error_pct,
                   uncalibrated_mean_abs_error_pct=m.uncalibrated_mean_abs_error_pct, in_scope=m.in_scope)
    elif m.n_networks:
        out["n_networks"] = m.n_networks
    return out


def refinement_dict(m: pb2.Refinement) -> dict[str, Any]:
    """A ``Refinement`` message as :func:`estimator.interface.refinement_record`
    (``{"configurations": 0}`` for a device that was not refined, or an older server)."""
    if not (m.configurations or m.rounds or m.base):
        return {"configurations": 0}
    return {"configurations": m.configurations, "base": m.base, "targets": list(m.targets),
            "excluded": list(m.excluded), "rounds": m.rounds, "device_seconds": m.device_seconds,
            "runner": m.runner, "runner_options": dict(m.runner_options), "source": m.source, "date": m.date}


def cm_o_driver_dict(m: pb2.CmoDriver) -> dict[str, Any]:
    """A ``CmoDriver`` message as :func:`estimator.interface.cm_o_driver_record`."""
    return cm_o_driver_record({
        "index": m.index, "name": m.name, "type": m.type, "op_type": m.op_type, "share": m.share,
        "prediction_ms": m.prediction_ms, "cm_o_upper_ms": m.cm_o_upper_ms, "confidence": m.confidence,
        "reasons": list(m.reasons),
        "out_of_range": [{"feature": o.feature, "value": o.value, "min": o.min, "max": o.max} for o in m.out_of_range],
        "knn_ratio": m.knn_ratio if m.HasField("knn_ratio") else None, "why": m.why})


def network_result(m: pb2.EstimateNetworkResponse) -> NetworkResult:
    err = None
    if m.HasField("error") and (m.error.code or m.error.message):
        err = EstimationError(m.error.code, m.error.message, request_id=m.request_id)
    return NetworkResult(total_ms=m.total_ms, intervals=_intervals(m.intervals),
                         layers=[_layer_row(l) for l in m.layers], warnings=list(m.warnings),
                         n_layers=m.n_layers, n_out_of_design_space=m.n_out_of_design_space, n_fallback=m.n_fallback,
                         model_version=m.model_version, cached=m.cached, server_time_ms=m.server_time_ms,
                         device=m.device, name=m.name, confidence=list(m.confidence), request_id=m.request_id,
                         error=err,
                         uncalibrated=({"total_ms": m.uncalibrated.total_ms,
                                        "intervals": _intervals(m.uncalibrated.intervals)}
                                       if m.HasField("uncalibrated") else None),
                         calibration=calibration_dict(m.calibration),
                         cm_o_drivers=[cm_o_driver_dict(d) for d in m.cm_o_drivers])


# ----------------------------------------------------------------------------- specs


def _spec_pb(spec: Any, index: int) -> pb2.LayerSpec:
    if isinstance(spec, pb2.LayerSpec):
        return spec
    typ, name, numbers, options = spec_parts(spec, index)
    return pb2.LayerSpec(type=typ, name=name, params=numbers, options=options)


def _confidences(confidence: float | Iterable[float] | None) -> list[float]:
    """The request's levels: none for None (the server's default, 0.9); an empty list is
    refused here, as in process (on the wire it would read as "none given")."""
    if confidence is None:
        return []
    if isinstance(confidence, (int, float)):
        return [float(confidence)]
    out = [float(c) for c in confidence]
    if not out:
        raise EstimationError("INVALID_ARGUMENT", "at least one confidence level is needed")
    return out


class _Unsent:
    """A stream item that could not be sent: its error, answered in its place."""

    __slots__ = ("error",)

    def __init__(self, error: EstimationError) -> None:
        self.error = error

    def result(self) -> NetworkResult:
        return NetworkResult(total_ms=0.0, intervals={}, layers=[], warnings=[], n_layers=0, n_out_of_design_space=0,
                             n_fallback=0, model_version="", cached=False, server_time_ms=0.0,
                             request_id=self.error.request_id, error=self.error)


# ---------------------------------------------------------------------------- client


class EstimationClient(Estimation):
    """A connection to one estimation service: the gRPC implementation of
    :class:`estimator.interface.Estimation`.

    ``address`` is ``host:port``. ``token`` is sent as ``authorization: Bearer <token>``;
    ``root_certificates`` (PEM bytes or a file path) switches to TLS (``tls=True`` uses the
    system roots). ``timeout_s`` is the default deadline per call; ``retries`` how often a
    call that failed with ``UNAVAILABLE`` is tried again (backoff 0.1 s, 0.2 s, ... up to 2 s).
    """

    def __init__(self, address: str, *, token: str | None = None, root_certificates: bytes | str | os.PathLike | None = None,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S, retries: int = 3, tls: bool = False,
                 server_name: str | None = None) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.address = address
        self.where = address
        self.timeout_s = timeout_s
        self.retries = int(retries)
        self._metadata: tuple[tuple[str, str], ...] = ()
        if token is not None:
            if not token.strip():
                raise ValueError("the token is empty")
            self._metadata = (("authorization", f"Bearer {token.strip()}"),)
        options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", _MAX_MESSAGE),
                                          ("grpc.max_send_message_length", _MAX_MESSAGE)]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if root_certificates is not None or tls:
            roots = root_certificates
            if roots is not None and not isinstance(roots, (bytes, bytearray)):
                roots = Path(roots).read_bytes()
            creds = grpc.ssl_channel_credentials(root_certificates=bytes(roots) if roots is not None else None)
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = pb2_grpc.EstimationStub(self._channel)
        self._limits: dict[str, int] | None = None  # the server's, asked when a request is large

    # ------------------------------------------------------------- plumbing
    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "EstimationClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _deadline(self, timeout_s: float | None) -> float | None:
        t = self.timeout_s if timeout_s is None else timeout_s
        return None if t is None else time.monotonic() + float(t)

    @staticmethod
    def _remaining(deadline: float | None) -> float | None:
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    def _backoff(self, attempt: int, deadline: float | None) -> bool:
        """Sleep before retry ``attempt`` (1-based); False when no time or retries are left."""
        if attempt > self.retries:
            return False
        delay = min(0.1 * 2 ** (attempt - 1), 2.0) * (0.75 + 0.5 * random.random())
        rem = self._remaining(deadline)
        if rem is not None and rem <= delay:
            return False
        time.sleep(delay)
        return True

    def _call(self, method: Any, request: Any, timeout_s: float | None) -> Any:
        deadline = self._deadline(timeout_s)
        attempt = 0
        while True:
            try:
                return method(request, timeout=self._remaining(deadline), metadata=self._metadata)
            except grpc.RpcError as e:
                attempt += 1
                if e.code() == grpc.StatusCode.UNAVAILABLE and self._backoff(attempt, deadline):
                    continue
                raise _error(e) from None

    def _check_size(self, req: pb2.EstimateNetworkRequest) -> None:
        """Refuse, before sending, a request larger than the server takes: gRPC would refuse it
        in transport with a generic message, and on a stream end the whole stream. The limits
        are asked once, and only for a request over :data:`_ASK_LIMITS_ABOVE` bytes."""
        size = req.ByteSize()
        if size <= _ASK_LIMITS_ABOVE:
            return
        if self._limits is None:
            self._limits = self.server_info()["limits"]
        max_onnx, max_message = self._limits["max_onnx_bytes"], self._limits["max_message_bytes"]
        if max_onnx and len(req.onnx) > max_onnx:
            raise EstimationError("RESOURCE_EXHAUSTED", onnx_too_large(len(req.onnx), max_onnx))
        if max_message and size > max_message:
            raise EstimationError("RESOURCE_EXHAUSTED", f"the request is {size} bytes; this server accepts messages of "
                                                        f"at most {max_message} bytes (--max-message-mb)")

    # ----------------------------------------------------------------- RPCs
    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until the server's health check says SERVING (profiles loaded)."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: PLC0415

        stub = health_pb2_grpc.HealthStub(self._channel)
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while True:
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=max(min(2.0, deadline - time.monotonic()), 0.01))
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
            except grpc.RpcError as e:
                last = f"{e.code().name}: {e.details()}"
            if time.monotonic() >= deadline:
                raise EstimationError("UNAVAILABLE", f"the service at {self.address} is not ready after "
                                      f"{timeout_s:g} s ({last})")
            time.sleep(0.05)

    def list_devices(self, *, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Every loaded device: provenance, coverage (type -> rows and feature ranges), versions."""
        r = self._call(self._stub.ListDevices, pb2.ListDevicesRequest(), timeout_s)
        out = []
        for d in r.devices:
            pv = d.provenance
            out.append({
                "name": d.name, "hardware": d.hardware, "runner": d.runner, "precision": d.precision,
                "threads": d.threads or None, "description": d.description, "target": d.target,
                "model_version": d.model_version,
                "provenance": {"kind": pv.kind, "source": pv.source, "host": pv.host, "versions": dict(pv.versions),
                               "date": pv.date},
                "coverage": {c.type: {"n_samples": c.n_samples,
                                      "ranges": {fr.feature: (fr.min, fr.max) for fr in c.ranges}}
                             for c in d.coverage},
                "fallback_types": list(d.fallback_types), "cpu_fallback_ops": list(d.cpu_fallback_ops),
                "calibration": calibration_dict(d.calibration), "host_warnings": list(d.host_warnings),
                "refined": refinement_dict(d.refined),
            })
        return out

    def server_info(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """The server's limits, registry generation and profile load errors."""
        r = self._call(self._stub.ListDevices, pb2.ListDevicesRequest(), timeout_s)
        lim = r.limits
        return {"generation": r.generation, "errors": list(r.errors), "devices": [d.name for d in r.devices],
                "limits": {"max_message_bytes": lim.max_message_bytes, "max_onnx_bytes": lim.max_onnx_bytes,
                           "max_layers": lim.max_layers, "max_confidence_levels": lim.max_confidence_levels}}

    def profile_errors(self, *, timeout_s: float | None = None) -> list[str]:
        """The server's profiles that failed to load, each with why."""
        return list(self.server_info(timeout_s=timeout_s)["errors"])

    def reload_profiles(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Ask the server to reload its profile directory; returns devices, errors, generation."""
        r = self._call(self._stub.ReloadProfiles, pb2.ReloadProfilesRequest(), timeout_s)
        return {"devices": list(r.devices), "errors": list(r.errors), "generation": r.generation}

    def network_request(self, model: Any, device: str, *, confidence: float | Iterable[float] | None = (0.9,),
                        per_layer: bool = True, input_shapes: Mapping[str, Sequence[int]] | Sequence[int] | None = None,
                        strip: bool = True, name: str = "", request_id: str = "") -> pb2.EstimateNetworkRequest:
        """The request :meth:`estimate_network` sends (also what a stream item becomes).

        ``model`` is a path, ONNX bytes, an ``onnx.ModelProto`` or a list of layer specs.
        ``input_shapes`` fixes dynamic dims: ``{input_name: shape}`` or one shape.
        """
        req = pb2.EstimateNetworkRequest(device=device, confidence=_confidences(confidence), per_layer=per_layer,
                                         name=name, request_id=request_id)
        if isinstance(model, (list, tuple)) and (not model or isinstance(model[0], (Mapping, tuple, list,
                                                                                   pb2.LayerSpec))):
            req.layers.layers.extend(_spec_pb(s, i) for i, s in enumerate(model))
            if not model:
                req.layers.SetInParent()
        else:
            req.onnx = model_bytes(model, strip)
        if input_shapes is not None:
            if isinstance(input_shapes, Mapping):
                for k, v in input_shapes.items():
                    req.input_shapes[str(k)].dims.extend(int(d) for d in v)
            else:
                req.input_shapes[""].dims.extend(int(d) for d in input_shapes)
        return req

    def estimate_network(self, model: Any, device: str, *, confidence: float | Iterable[float] | None = (0.9,),
                         per_layer: bool = True, input_shapes: Mapping[str, Sequence[int]] | Sequence[int] | None = None,
                         strip: bool = True, timeout_s: float | None = None, name: str = "") -> NetworkResult:
        """Estimate one network: total, one interval per metric and confidence, per-layer rows."""
        req = self.network_request(model, device, confidence=confidence, per_layer=per_layer,
                                   input_shapes=input_shapes, strip=strip, name=name)
        self._check_size(req)
        return network_result(self._call(self._stub.EstimateNetwork, req, timeout_s))

    def estimate_networks(self, items: Iterable[Any], *, confidence: float | Iterable[float] | None = (0.9,),
                          per_layer: bool = False, strip: bool = True, timeout_s: float | None = None
                          ) -> Iterator[NetworkResult]:
        """Estimate many networks over one bidirectional stream; results come in order.

        Each item is ``(model, device)``, a dict ``{model, device, confidence?, per_layer?,
        input_shapes?, name?, strip?}``, or a ready ``EstimateNetworkRequest``. Items are
        converted lazily, so a generator of candidates streams without being materialised.
        A bad item yields a result with ``error`` set, whether the server refused it or it
        could not be sent (a missing file, a malformed item, a model larger than the server
        takes), and the stream goes on. ``timeout_s`` bounds the whole stream (default: none).
        If the connection breaks with ``UNAVAILABLE``, the stream is reopened and the
        unanswered requests are sent again (up to ``retries`` times).
        """
        defaults: dict[str, Any] = {"confidence": confidence, "per_layer": per_layer, "strip": strip}
        source = iter(items)
        pending: collections.deque[pb2.EstimateNetworkRequest] = collections.deque()
        counter = [0]

        def convert(item: Any) -> pb2.EstimateNetworkRequest:
            if isinstance(item, pb2.EstimateNetworkRequest):
                req = pb2.EstimateNetworkRequest()
                req.CopyFrom(item)
            elif isinstance(item, Mapping):
                kw = {**defaults, **{k: v for k, v in item.items() if k not in ("model", "device")}}
                req = self.network_request(item["model"], item["device"], **kw)
            elif isinstance(item, (tuple, list)) and len(item) == 2:
                req = self.network_request(item[0], item[1], **defaults)
            else:
                raise TypeError(f"give (model, device), a dict or an EstimateNetworkRequest, got {type(item).__name__}")
            if not req.request_id:
                req.request_id = str(counter[0])
            self._check_size(req)
            return req

        def converted(item: Any) -> pb2.EstimateNetworkRequest | _Unsent:
            """The item's request, or its error where it cannot be sent."""
            try:
                return convert(item)
            except Exception as e:  # noqa: BLE001 - the item's own error, answered in its place
                err = e if isinstance(e, EstimationError) else (
                    EstimationError.from_user_error(e) if hasattr(e, "grpc_status") else EstimationError(
                        "NOT_FOUND" if isinstance(e, FileNotFoundError) else "INVALID_ARGUMENT",
                        f"{type(e).__name__}: {e}"))
                return _Unsent(EstimationError(err.code, f"stream item {counter[0]}: {err.message}",
                                               request_id=str(counter[0])))
            finally:
                counter[0] += 1

        # Threads: gRPC pulls requests() on its own thread, this generator reads responses.
        # `state` guards pending/carry/epoch and is held only briefly. `pull` serialises
        # next(source) between an old and a new stream, and is never held by the response
        # reader, so a source that waits for earlier results (ask/tell) cannot deadlock.
        state = threading.Lock()
        pull = threading.Lock()
        carry: collections.deque[pb2.EstimateNetworkRequest] = collections.deque()
        current_epoch = [0]
        failed: list[BaseException] = []

        def requests(replay: list[pb2.EstimateNetworkRequest], epoch: int) -> Iterator[pb2.EstimateNetworkRequest]:
            yield from replay
            while True:
                with pull:
                    with state:
                        if epoch != current_epoch[0]:
                            return  # a newer stream took over
                        req = carry.popleft() if carry else None
                        if req is not None:
                            pending.append(req)
                    if req is None:
                        if failed:
                            return
                        try:
                            item = next(source)
                        except StopIteration:
                            return
                        except BaseException as e:  # noqa: BLE001 - the source's own failure: raised to the caller
                            failed.append(e)  # after the answered items
                            return
                        req = converted(item)
                        with state:
                            if epoch != current_epoch[0] and not isinstance(req, _Unsent):
                                carry.append(req)  # pulled for a dead stream: the new one sends it
                                return
                            pending.append(req)  # (an unsent item keeps its place among the answers)
                        if isinstance(req, _Unsent):
                            continue
                yield req

        def unsent_before_answer() -> list[NetworkResult]:
            """Pop (under ``state``) the unsent items ahead of the next request answered."""
            out = []
            while pending and isinstance(pending[0], _Unsent):
                out.append(pending.popleft().result())
            return out

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        attempt = 0
        while True:
            with state:
                current_epoch[0] += 1
                epoch = current_epoch[0]
                replay = [r for r in pending if not isinstance(r, _Unsent)]
            call = self._stub.EstimateNetworks(requests(replay, epoch), timeout=self._remaining(deadline),
                                               metadata=self._metadata)
            try:
                for resp in call:
                    with state:
                        unsent = unsent_before_answer()
                        if pending:
                            pending.popleft()
                    attempt = 0
                    yield from unsent
                    yield network_result(resp)
                with state:
                    unsent = unsent_before_answer()
                yield from unsent
                if failed:
                    raise failed[0]
                return
            except grpc.RpcError as e:
                attempt += 1
                if e.code() == grpc.StatusCode.UNAVAILABLE and self._backoff(attempt, deadline):
                    continue
                raise _error(e) from None
            finally:
                call.cancel()

    def estimate_layers(self, specs: Iterable[Any], device: str, confidence: float | Iterable[float] | None = (0.9,),
                        *, timeout_s: float | None = None) -> list[LayerResult]:
        """Estimate bare layer configurations (pruning tools); one result per spec, in order.

        A spec is a dict ``{type, params, name?}`` or a tuple ``(type, params[, name])``;
        numeric parameters go as numbers, strings (``kind="relu6"``, ``mode="linear"``) and
        integer lists (concat ``channels=[16, 32]``) as options. A spec the server cannot
        estimate gets a result with ``error`` set (:meth:`LayerResult.raise_for_error`); one
        with 0 channels 0 ms, flagged ``zero_channels``.
        """
        req = pb2.EstimateLayersRequest(device=device, confidence=_confidences(confidence),
                                        layers=[_spec_pb(s, i) for i, s in enumerate(specs)])
        r = self._call(self._stub.EstimateLayers, req, timeout_s)
        warn_all(r.warnings)
        return [layer_result(m) for m in r.layers]

    def estimate_layers_response(self, specs: Iterable[Any], device: str,
                                 confidence: float | Iterable[float] | None = (0.9,), *,
                                 timeout_s: float | None = None) -> dict[str, Any]:
        """Like :meth:`estimate_layers`, plus the warnings, model version and server time."""
        req = pb2.EstimateLayersRequest(device=device, confidence=_confidences(confidence),
                                        layers=[_spec_pb(s, i) for i, s in enumerate(specs)])
        r = self._call(self._stub.EstimateLayers, req, timeout_s)
        return {"layers": [layer_result(m) for m in r.layers], "warnings": list(r.warnings),
                "model_version": r.model_version, "server_time_ms": r.server_time_ms}
