"""``estimation-service``: serve latency estimates with conformal confidence over gRPC."""
from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from typing import Any, Sequence

from estimator.cliutil import integer, number, run
from estimator.errors import UserError

#: Subcommand modules; each exposes ``register(subparsers)``.
COMMANDS = ["service.cli"]

DEFAULT_PORT = 50071

SERVE_DOC = """\
Serve every device profile under --profiles over gRPC (estimation.v1.Estimation, see
proto/estimation.proto) until SIGTERM or SIGINT.

Health (grpc.health.v1) answers NOT_SERVING while the profiles load and SERVING after;
server reflection is on, so grpcurl works. SIGHUP reloads the profiles (so does the
ReloadProfiles RPC): new estimators are built off to the side and swapped in, and
in-flight requests finish on the old ones. SIGTERM/SIGINT stop accepting calls, drain the
running ones for up to --grace seconds, cut (and log) those still running then, and exit 0.
Logs are JSON lines on stderr.

Example:
    estimation-service serve --profiles profiles --port 50071 --token-file ~/.service-token
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the device profiles over gRPC until SIGTERM/SIGINT",
                       description=SERVE_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", type=Path, default=None,
                   help="profiles directory (default: $CL_PROFILES, else the checkout's profiles/)")
    p.add_argument("--port", type=integer(0, 65535), required=True,
                   help=f"port to listen on (e.g. {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 to accept other machines)")
    p.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate: serve over TLS (with --tls-key)")
    p.add_argument("--tls-key", type=Path, default=None, help="PEM private key of --tls-cert")
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--token", default=None, help="token clients must send (visible in ps; prefer --token-file)")
    tok.add_argument("--token-file", type=Path, default=None, help="file holding the token (first line)")
    p.add_argument("--max-message-mb", type=number(above=0), default=64.0,
                   help="largest ONNX model accepted, in MiB (default 64; the gRPC limit is 1 MiB above)")
    p.add_argument("--max-layers", type=integer(min=1), default=100_000,
                   help="most layers per request (default 100000)")
    p.add_argument("--cache-size", type=integer(min=0), default=256,
                   help="responses kept for identical ONNX requests (LRU; 0 disables; default 256)")
    p.add_argument("--workers", type=integer(min=1), default=8, help="request threads (default 8)")
    p.add_argument("--grace", type=number(min=0), default=10.0,
                   help="seconds running calls may take to finish on SIGTERM/SIGINT; those still running "
                        "then are cut and logged, and the process exits (default 10)")
    p.add_argument("--n-jobs", type=integer(min=1), default=1,
                   help="threads for training models not in the cache (default 1)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(func=cmd_serve)


def _token(a: argparse.Namespace) -> str | None:
    from proto.serving import read_token_file

    if a.token_file is not None:
        try:
            return read_token_file(a.token_file)
        except ValueError as e:
            raise UserError(f"--token-file: {e}") from None
    if a.token is not None:
        if not a.token.strip():
            raise UserError("--token is empty")
        return a.token.strip()
    return None


def cmd_serve(a: argparse.Namespace) -> int:
    from estimator.profile import default_root

    from .server import setup_json_logging

    if bool(a.tls_cert) != bool(a.tls_key):
        raise UserError("TLS needs both --tls-cert and --tls-key")
    for f in (a.tls_cert, a.tls_key):
        if f is not None and not f.is_file():
            raise UserError(f"{f} does not exist")
    root = a.profiles if a.profiles is not None else default_root()
    if not root.is_dir():
        raise UserError(f"--profiles {root}: no such directory")
    token = _token(a)
    restore_logging = setup_json_logging(getattr(logging, a.log_level.upper()))
    try:
        return _serve(a, root, token)
    finally:
        restore_logging()


def _serve(a: argparse.Namespace, root: Path, token: str | None) -> int:
    from .server import EstimationServer

    if a.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        logging.getLogger("service").warning("serving beyond this machine without a token (--token-file)")
    server = EstimationServer(root, a.port, host=a.host, token=token, tls_cert=a.tls_cert, tls_key=a.tls_key,
                              max_message_mb=a.max_message_mb, cache_size=a.cache_size, workers=a.workers,
                              max_layers=a.max_layers, n_jobs=a.n_jobs, grace_s=a.grace)
    stop = threading.Event()

    def on_stop(signum: int, frame: Any) -> None:
        stop.set()

    def on_hup(signum: int, frame: Any) -> None:
        threading.Thread(target=_reload, args=(server,), name="estimation-reload", daemon=True).start()

    try:
        server.start(wait=False)  # health says NOT_SERVING until the profiles are loaded
    except (OSError, ValueError) as e:
        raise UserError(str(e)) from None
    handled = [signal.SIGTERM, signal.SIGINT] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {s: signal.getsignal(s) for s in handled}
    try:
        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, on_hup)
        # the listening line for humans and scripts (stdout, flushed)
        print(f"estimation-service: listening on {server.address}", flush=True)
        while not stop.wait(0.5):
            if server.load_error is not None:
                server.stop(0)
                raise UserError(f"loading the profiles failed: {server.load_error}")
        server.stop(a.grace)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _reload(server: Any) -> None:
    try:
        server.reload()
    except Exception:  # logged; the old set keeps serving
        logging.getLogger("service").exception("reload on SIGHUP failed")


def main(argv: Sequence[str] | None = None) -> int:
    return run("estimation-service", __doc__.strip().split("\n")[0].split(": ", 1)[1], COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
