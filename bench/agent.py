"""The bench agent: a gRPC server (``benchagent.v1.BenchAgent``, ``proto/bench_agent.proto``)
that wraps any local runner, so that a host running ``bench`` can time models on a board.

Behaviour:

* ``Describe`` returns the runner's name, model format, provenance, environment (as JSON)
  and the agent's limits. It never waits for a timing.
* ``Time`` prepares the received model with the runner and times it. Time-consuming work
  runs under one lock, so timings never overlap (a second caller waits). The last
  prepared model is kept (keyed by the SHA-256 of its bytes), so a per-layer request for
  the model just timed does not prepare it again.
* Refusals, each with a precise status, after which the agent keeps serving:
  ``RESOURCE_EXHAUSTED`` for a model above ``max_model_bytes`` (the server's gRPC
  receive limit is set 1 MiB above it, so this check, with its message, is the one that
  fires), ``INVALID_ARGUMENT`` for a wrong format, out-of-range warmup/runs or a model the
  runner rejects (with the runner's message), ``UNAUTHENTICATED`` when a shared token is
  configured and the call's ``authorization`` metadata is not ``Bearer <token>``, and
  ``INTERNAL`` when the runner fails on a model it accepted.
* The standard ``grpc.health.v1.Health`` service answers without a token (for probes);
  server reflection is on (with the token, when one is set) so ``grpcurl`` works.
* Optional TLS (``tls_cert``/``tls_key`` PEM files): use it whenever a token crosses a
  network you do not trust, since the token is otherwise sent in clear.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from proto import bench_agent_pb2 as pb2
from proto import bench_agent_pb2_grpc as pb2_grpc
from proto.serving import TokenInterceptor, add_health_and_reflection, bind, set_health

from .runners.base import Prepared, Runner, RunnerError, Timing

__all__ = ["AgentLimits", "BenchAgentServicer", "AgentServer", "make_server", "timing_to_pb", "timing_from_pb",
           "SERVICE_NAME", "DEFAULT_MAX_MODEL_BYTES"]

log = logging.getLogger("bench.agent")

SERVICE_NAME = pb2.DESCRIPTOR.services_by_name["BenchAgent"].full_name
DEFAULT_MAX_MODEL_BYTES = 64 << 20
#: Headroom above max_model_bytes for the rest of the request, so our check fires first.
_MESSAGE_HEADROOM = 1 << 20


@dataclass(frozen=True)
class AgentLimits:
    max_model_bytes: int = DEFAULT_MAX_MODEL_BYTES
    max_warmup: int = 10_000
    max_runs: int = 100_000


def timing_to_pb(t: Timing) -> pb2.Timing:
    return pb2.Timing(median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms, mad_ms=t.mad_ms,
                      mean_ms=t.mean_ms, std_ms=t.std_ms, min_ms=t.min_ms, n=t.n)


def timing_from_pb(m: pb2.Timing) -> Timing:
    return Timing(median_ms=m.median_ms, p10_ms=m.p10_ms, p90_ms=m.p90_ms, mad_ms=m.mad_ms,
                  mean_ms=m.mean_ms, std_ms=m.std_ms, min_ms=m.min_ms, n=m.n)


def _package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("confident-latency")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class BenchAgentServicer(pb2_grpc.BenchAgentServicer):
    """``BenchAgent`` over one local :class:`Runner`."""

    def __init__(self, runner: Runner, limits: AgentLimits = AgentLimits(), cache_size: int = 1) -> None:
        self.runner = runner
        self.limits = limits
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Prepared] = OrderedDict()
        self._cache_size = max(int(cache_size), 0)
        self._version = _package_version()

    # ------------------------------------------------------------------ RPCs

    def Describe(self, request: pb2.DescribeRequest, context: grpc.ServicerContext) -> pb2.DescribeResponse:
        try:
            env = self.runner.environment()
        except Exception as e:  # the runner's problem, reported, not fatal
            log.exception("environment() failed")
            context.abort(grpc.StatusCode.INTERNAL, f"runner {self.runner.name!r} environment() failed: {e}")
        return pb2.DescribeResponse(
            runner=self.runner.name, model_format=self.runner.model_format, provenance=self.runner.provenance,
            environment_json=_json(env), max_model_bytes=self.limits.max_model_bytes,
            max_warmup=self.limits.max_warmup, max_runs=self.limits.max_runs, agent_version=self._version)

    def Time(self, request: pb2.TimeRequest, context: grpc.ServicerContext) -> pb2.TimeResponse:
        size = len(request.model)
        lim = self.limits
        if size > lim.max_model_bytes:
            log.warning("refused a %d-byte model (limit %d)", size, lim.max_model_bytes)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"model is {size} bytes; this agent accepts at most {lim.max_model_bytes} bytes "
                          f"({lim.max_model_bytes / 2**20:.1f} MiB, set by --max-model-mb)")
        if size == 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty model")
        fmt = request.model_format or self.runner.model_format
        if fmt != self.runner.model_format:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"this agent's runner {self.runner.name!r} takes {self.runner.model_format} models, "
                          f"got model_format={fmt!r}")
        if not 1 <= request.runs <= lim.max_runs:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"runs must be in [1, {lim.max_runs}], got {request.runs}")
        if request.warmup > lim.max_warmup:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"warmup must be in [0, {lim.max_warmup}], got {request.warmup}")
        sha = hashlib.sha256(request.model).hexdigest()
        with self._lock:  # one timing at a time
            prepared, prepare_ms = self._prepared(sha, request.model, context)
            try:
                timing = self.runner.time(prepared, warmup=int(request.warmup), runs=int(request.runs))
            except Exception as e:
                log.warning("timing %s failed: %s", sha[:12], e)
                self._evict(sha)
                context.abort(grpc.StatusCode.INTERNAL,
                              f"runner {self.runner.name!r} failed while timing the model: {type(e).__name__}: {e}")
            per_layer: dict[str, float] = {}
            per_layer_error = ""
            if request.per_layer:
                try:
                    per_layer = {str(k): float(v) for k, v in self.runner.per_layer(prepared).items()}
                except RunnerError as e:
                    per_layer_error = str(e)
                except Exception as e:
                    per_layer_error = f"{type(e).__name__}: {e}"
        log.info("timed %s (%d bytes): median %.4f ms over %d runs%s", sha[:12], size, timing.median_ms, timing.n,
                 f", {len(per_layer)} layers" if per_layer else "")
        return pb2.TimeResponse(timing=timing_to_pb(timing), per_layer_ms=per_layer, per_layer_error=per_layer_error,
                                info_json=_json(prepared.info), prepare_ms=prepare_ms, model_sha256=sha)

    # ------------------------------------------------------------------ helpers

    def _prepared(self, sha: str, model: bytes, context: grpc.ServicerContext) -> tuple[Prepared, float]:
        hit = self._cache.get(sha)
        if hit is not None:
            self._cache.move_to_end(sha)
            return hit, 0.0
        t0 = time.perf_counter()
        try:
            prepared = self.runner.prepare(bytes(model))
        except RunnerError as e:
            log.warning("runner rejected model %s: %s", sha[:12], e)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"runner {self.runner.name!r} rejected the model: {e}")
        except Exception as e:
            log.exception("prepare failed")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"runner {self.runner.name!r} could not prepare the model: {type(e).__name__}: {e}")
        prepare_ms = (time.perf_counter() - t0) * 1e3
        if self._cache_size:
            self._cache[sha] = prepared
            while len(self._cache) > self._cache_size:
                _, old = self._cache.popitem(last=False)
                self._release(old)
        return prepared, prepare_ms

    def _evict(self, sha: str) -> None:
        old = self._cache.pop(sha, None)
        if old is not None:
            self._release(old)

    def _release(self, prepared: Prepared) -> None:
        release = getattr(self.runner, "release", None)
        if callable(release):
            try:
                release(prepared)
            except Exception:  # pragma: no cover - best effort
                log.exception("release failed")


class _TokenInterceptor(TokenInterceptor):
    """Refuses every call but health checks unless it carries ``authorization: Bearer <token>``
    (the shared :class:`proto.serving.TokenInterceptor`, logging refusals as the agent)."""

    def __init__(self, token: str) -> None:
        super().__init__(token, on_deny=lambda method: log.warning("refused %s: bad or missing token", method))


class AgentServer:
    """A started bench agent; :attr:`port` is the bound port (useful with ``port=0``)."""

    def __init__(self, server: grpc.Server, host: str, port: int, servicer: BenchAgentServicer) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.servicer = servicer

    @property
    def address(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else ("localhost" if self.host == "::" else self.host)
        return f"{host}:{self.port}"

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting calls, let running ones finish for up to ``grace`` seconds."""
        self.server.stop(grace).wait()

    def wait(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)


def make_server(runner: Runner, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                max_model_bytes: int = DEFAULT_MAX_MODEL_BYTES, max_workers: int = 4,
                tls_cert: str | Path | None = None, tls_key: str | Path | None = None,
                limits: AgentLimits | None = None) -> AgentServer:
    """Create and start a bench agent serving ``runner`` on ``host:port``."""
    if limits is None:
        limits = AgentLimits(max_model_bytes=int(max_model_bytes))
    if limits.max_model_bytes < 1:
        raise ValueError(f"max_model_bytes must be >= 1, got {limits.max_model_bytes}")
    if token is not None and not token.strip():
        raise ValueError("the token is empty")
    receive = limits.max_model_bytes + _MESSAGE_HEADROOM
    interceptors = [_TokenInterceptor(token.strip())] if token else []
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max(max_workers, 2), thread_name_prefix="bench-agent"),
        interceptors=interceptors,
        options=[("grpc.max_receive_message_length", receive), ("grpc.max_send_message_length", 64 << 20)],
    )
    servicer = BenchAgentServicer(runner, limits)
    pb2_grpc.add_BenchAgentServicer_to_server(servicer, server)
    health_servicer = add_health_and_reflection(server, [SERVICE_NAME])
    bound = bind(server, host, port, tls_cert=tls_cert, tls_key=tls_key, what="bench agent")
    server.start()
    set_health(health_servicer, [SERVICE_NAME], serving=True)
    log.info("bench agent serving runner %r (%s) on %s:%d%s%s", runner.name, runner.model_format, host, bound,
             ", token required" if token else "", ", TLS" if tls_cert else "")
    return AgentServer(server, host, bound, servicer)
