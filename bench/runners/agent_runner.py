"""Agent runner: times models on a remote board through its bench agent (``bench agent``,
:mod:`bench.agent`).

The host generates each model in the agent's format (``model_format`` comes from the
agent's ``Describe``), sends its bytes, and returns the agent's timing. The environment
is the agent's (the board's runner, runtime versions, delegate, host) plus the agent's
address, so a profile measured through an agent records the board, not the host.

``prepare`` only checks the model locally (size against the agent's limit) and keeps the
bytes; the agent prepares and times it in one ``Time`` call. The agent's view of the
prepared model (its ``Prepared.info``: e.g. CPU-placed operators, precision) is merged
into ``Prepared.info`` after :meth:`AgentRunner.time`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from proto import bench_agent_pb2 as pb2
from proto import bench_agent_pb2_grpc as pb2_grpc

from .base import Prepared, Runner, RunnerError, Timing

__all__ = ["AgentRunner"]


@dataclass
class _Remote:
    model: bytes
    sha256: str


class AgentRunner(Runner):
    """Options: ``agent`` (``"HOST:PORT"``), ``token`` (shared token, sent as
    ``authorization: Bearer <token>``), ``timeout_s`` (deadline of each Time call; engine
    builds on a board can take minutes), ``connect_timeout_s`` (Describe at construction),
    ``tls_ca`` (PEM file of the CA that signed the agent's certificate: use TLS),
    ``tls_server_name`` (override the name checked against the certificate).
    """

    name = "agent"

    def __init__(self, agent: str, token: str | None = None, timeout_s: float = 600.0,
                 connect_timeout_s: float = 10.0, tls_ca: str | Path | None = None,
                 tls_server_name: str | None = None) -> None:
        port = str(agent).rpartition(":")[2] if agent else ""
        if not agent or ":" not in str(agent) or not port.isdigit() or not 0 < int(port) < 65536:
            raise RunnerError(f"agent address must be HOST:PORT with a port in 1-65535, got {agent!r}")
        self.address = str(agent)
        self.timeout_s = float(timeout_s)
        self._metadata = (("authorization", f"Bearer {token.strip()}"),) if token else ()
        options: list[tuple[str, Any]] = [("grpc.max_send_message_length", -1),
                                          ("grpc.max_receive_message_length", 64 << 20)]
        if tls_ca:
            try:
                creds = grpc.ssl_channel_credentials(root_certificates=Path(tls_ca).read_bytes())
            except OSError as e:
                raise RunnerError(f"cannot read the agent's CA certificate {tls_ca}: {e}") from e
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(self.address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(self.address, options=options)
        self._stub = pb2_grpc.BenchAgentStub(self._channel)
        try:
            self.describe: pb2.DescribeResponse = self._stub.Describe(
                pb2.DescribeRequest(), timeout=float(connect_timeout_s), metadata=self._metadata)
        except grpc.RpcError as e:
            self._channel.close()
            raise self._error("cannot use the bench agent", e) from None
        # the agent's format and provenance, per instance (the class defaults are placeholders)
        self.model_format = self.describe.model_format  # type: ignore[misc]
        self.provenance = self.describe.provenance  # type: ignore[misc]
        self.remote_runner = self.describe.runner
        try:
            self._remote_env: dict[str, Any] = json.loads(self.describe.environment_json or "{}")
        except json.JSONDecodeError as e:
            raise RunnerError(f"bench agent at {self.address} sent an unreadable environment: {e}") from None

    def _error(self, what: str, e: grpc.RpcError) -> RunnerError:
        code = e.code() if hasattr(e, "code") else None
        details = e.details() if hasattr(e, "details") else str(e)
        return RunnerError(f"{what} at {self.address}: {code.name if code else 'ERROR'}: {details}")

    # ------------------------------------------------------------------ Runner API

    def prepare(self, model: bytes) -> Prepared:
        model = bytes(model)
        limit = int(self.describe.max_model_bytes)
        if limit and len(model) > limit:
            raise RunnerError(f"model is {len(model)} bytes; the bench agent at {self.address} "
                              f"accepts at most {limit} bytes")
        if not model:
            raise RunnerError("empty model")
        sha = hashlib.sha256(model).hexdigest()
        return Prepared(_Remote(model, sha), self.model_format, {"agent": self.address, "model_sha256": sha})

    def _time(self, prepared: Prepared, warmup: int, runs: int, per_layer: bool) -> pb2.TimeResponse:
        remote: _Remote = prepared.handle
        req = pb2.TimeRequest(model=remote.model, model_format=prepared.model_format, warmup=max(int(warmup), 0),
                              runs=int(runs), per_layer=per_layer)
        try:
            resp: pb2.TimeResponse = self._stub.Time(req, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error("the bench agent refused or failed the model", e) from None
        if resp.model_sha256 and resp.model_sha256 != remote.sha256:
            raise RunnerError(f"bench agent at {self.address} timed another model "
                              f"(sha256 {resp.model_sha256[:12]} != {remote.sha256[:12]})")
        try:
            remote_info = json.loads(resp.info_json or "{}")
        except json.JSONDecodeError:
            remote_info = {"info_json": resp.info_json}
        prepared.info.update(remote_info)
        prepared.info["agent_prepare_ms"] = resp.prepare_ms
        return resp

    def time(self, prepared: Prepared, *, warmup: int, runs: int) -> Timing:
        if runs < 1:
            raise RunnerError(f"runs must be >= 1, got {runs}")
        m = self._time(prepared, warmup, runs, False).timing
        return Timing(median_ms=m.median_ms, p10_ms=m.p10_ms, p90_ms=m.p90_ms, mad_ms=m.mad_ms,
                      mean_ms=m.mean_ms, std_ms=m.std_ms, min_ms=m.min_ms, n=m.n)

    def per_layer(self, prepared: Prepared) -> dict[str, float]:
        resp = self._time(prepared, 1, 1, True)
        if not resp.per_layer_ms:
            raise RunnerError(f"bench agent at {self.address} ({self.remote_runner}) gave no per-layer times: "
                              f"{resp.per_layer_error or 'no reason given'}")
        return dict(resp.per_layer_ms)

    def environment(self) -> dict[str, Any]:
        env = dict(self._remote_env)
        env.setdefault("runner", self.remote_runner)
        env.setdefault("provenance", self.provenance)
        env["agent"] = self.address
        env["agent_version"] = self.describe.agent_version
        env["via"] = "bench agent (gRPC benchagent.v1)"
        return env

    def close(self) -> None:
        self._channel.close()
