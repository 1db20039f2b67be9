"""What every gRPC server of this project does the same way: bearer-token auth, TLS or
plain binding, the standard health service and server reflection.

Shared by the bench agent (:mod:`bench.agent`) and the estimation service
(:mod:`service.server`). It lives beside the wire contract because both servers (and
their clients) depend on ``proto`` and on nothing else in common; it imports only
``grpc`` and the standard health/reflection packages.
"""
from __future__ import annotations

import hmac
import logging
from pathlib import Path
from typing import Any, Callable, Iterable

import grpc

__all__ = ["HEALTH_PREFIX", "TokenInterceptor", "bind", "add_health_and_reflection", "set_health", "bind_address",
           "display_address", "bearer_metadata", "read_token_file"]

HEALTH_PREFIX = "/grpc.health.v1.Health/"

_log = logging.getLogger("proto.serving")


def bearer_metadata(token: str) -> tuple[str, str]:
    """The call metadata entry that carries ``token``."""
    return ("authorization", f"Bearer {token}")


def read_token_file(path: str | Path) -> str:
    """A token from a file (first line, surrounding whitespace removed); ValueError if empty."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read the token file {p}: {e.strerror or e}") from None
    lines = text.strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token:
        raise ValueError(f"the token file {p} is empty")
    return token


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every call but health checks unless it carries ``authorization: Bearer <token>``.

    The comparison is constant-time. A refused call gets ``UNAUTHENTICATED`` from a handler
    of the same streaming shape as the real one, so streaming clients see a clean status.
    ``on_deny(method)`` is called for each refusal (logging).
    """

    MESSAGE = "missing or wrong token: send metadata 'authorization: Bearer <token>'"

    def __init__(self, token: str, *, open_prefixes: Iterable[str] = (HEALTH_PREFIX,),
                 on_deny: Callable[[str], None] | None = None) -> None:
        if not token or not token.strip():
            raise ValueError("the token is empty")
        self._expected = f"Bearer {token.strip()}".encode()
        self._open = tuple(open_prefixes)
        self._on_deny = on_deny

    @classmethod
    def deny_handler(cls, handler: Any, message: str | None = None) -> Any:
        msg = message or cls.MESSAGE

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, msg)

        def deny_stream(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, msg)
            yield  # pragma: no cover - makes this a generator, as streaming handlers are

        req_stream = bool(handler and handler.request_streaming)
        resp_stream = bool(handler and handler.response_streaming)
        if req_stream and resp_stream:
            return grpc.stream_stream_rpc_method_handler(deny_stream)
        if req_stream:
            return grpc.stream_unary_rpc_method_handler(deny)
        if resp_stream:
            return grpc.unary_stream_rpc_method_handler(deny_stream)
        return grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method = handler_call_details.method
        if method.startswith(self._open):
            return continuation(handler_call_details)
        got = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                got = value.encode() if isinstance(value, str) else bytes(value)
                break
        if hmac.compare_digest(got, self._expected):
            return continuation(handler_call_details)
        if self._on_deny is not None:
            self._on_deny(method)
        return self.deny_handler(continuation(handler_call_details))


def bind_address(host: str, port: int) -> str:
    """``host:port`` as grpc's ``add_*_port`` wants it (IPv6 literals bracketed)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def display_address(host: str, port: int) -> str:
    """An address a local client can dial for a server bound to ``host:port``."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "localhost"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def bind(server: grpc.Server, host: str, port: int, *, tls_cert: str | Path | None = None,
         tls_key: str | Path | None = None, what: str = "server") -> int:
    """Add a plain or TLS port to ``server``; returns the bound port (useful with ``port=0``).

    Raises ``ValueError`` for half a TLS configuration or unreadable PEM files and
    ``OSError`` when the address cannot be bound.
    """
    addr = bind_address(host, port)
    if tls_cert or tls_key:
        if not (tls_cert and tls_key):
            raise ValueError("TLS needs both a certificate and its private key")
        try:
            key, cert = Path(tls_key).read_bytes(), Path(tls_cert).read_bytes()
        except OSError as e:
            raise ValueError(f"cannot read TLS file {e.filename}: {e.strerror or e}") from None
        creds = grpc.ssl_server_credentials([(key, cert)])
        try:
            bound = server.add_secure_port(addr, creds)
        except RuntimeError as e:
            raise OSError(f"cannot bind the {what} to {addr}: {e}") from e
    else:
        try:
            bound = server.add_insecure_port(addr)
        except RuntimeError as e:
            raise OSError(f"cannot bind the {what} to {addr}: {e}") from e
    if not bound:
        raise OSError(f"cannot bind the {what} to {addr} (address in use or not local?)")
    return int(bound)


def add_health_and_reflection(server: grpc.Server, service_names: Iterable[str]) -> Any:
    """Register ``grpc.health.v1.Health`` and server reflection for ``service_names``.

    Returns the health servicer; every service starts ``NOT_SERVING`` (call ``set`` with
    ``SERVING`` when ready).
    """
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # noqa: PLC0415
    from grpc_reflection.v1alpha import reflection  # noqa: PLC0415

    names = list(service_names)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    reflection.enable_server_reflection((*names, health_name, reflection.SERVICE_NAME), server)
    for n in ("", *names):
        health_servicer.set(n, health_pb2.HealthCheckResponse.NOT_SERVING)
    return health_servicer


def set_health(health_servicer: Any, service_names: Iterable[str], serving: bool) -> None:
    """Mark the overall health (``""``) and each named service SERVING or NOT_SERVING."""
    from grpc_health.v1 import health_pb2  # noqa: PLC0415

    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for n in ("", *service_names):
        health_servicer.set(n, status)
