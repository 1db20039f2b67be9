"""``bench agent``: serve a local runner to hosts over gRPC (the bench agent), until
SIGINT/SIGTERM.

Run it on the board, e.g. on an i.MX93 with the Ethos-U delegate::

    bench agent --runner litert --delegate /usr/lib/libethosu_delegate.so \\
        --host 0.0.0.0 --port 50061 --token-file ~/.bench-token

and on the host ``bench run --runner agent --agent BOARD:50061 --token ...``. The agent
refuses models above ``--max-model-mb``, wrong tokens and malformed models with precise
gRPC statuses and keeps serving; it times one model at a time. Regenerating its gRPC
modules (``python proto/generate.py``) needs grpcio-tools, which serving does not.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from estimator.cliutil import integer, number
from estimator.errors import UserError

from .runners.base import RUNNERS, RunnerError, get_runner

DEFAULT_PORT = 50061


def _parse_value(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        if "=" not in item:
            raise UserError(f"{flag} takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        if not k.strip():
            raise UserError(f"{flag} takes KEY=VALUE, got {item!r}")
        out[k.strip()] = v
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agent", help="serve a local runner to hosts over gRPC (bench agent on a board)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runner", default="litert", choices=sorted(r for r in RUNNERS if r != "agent"),
                   help="local runner that times the models (default litert)")
    p.add_argument("--port", type=integer(0, 65535), required=True,
                   help=f"port to listen on (e.g. {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 to accept other machines)")
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--token", default=None, help="shared token clients must send (visible in ps; prefer --token-file)")
    tok.add_argument("--token-file", type=Path, default=None, help="file holding the shared token")
    p.add_argument("--max-model-mb", type=number(above=0), default=64.0,
                   help="largest model accepted, in MiB (default 64)")
    p.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate: serve over TLS (with --tls-key)")
    p.add_argument("--tls-key", type=Path, default=None, help="PEM private key of --tls-cert")
    g = p.add_argument_group("runner options (passed to the runner only when given)")
    g.add_argument("--threads", type=integer(min=1), default=None, help="interpreter threads (litert)")
    g.add_argument("--delegate", default=None, metavar="PATH", help="external delegate library (litert)")
    g.add_argument("--delegate-option", action="append", metavar="KEY=VALUE",
                   help="delegate option, repeatable (litert)")
    g.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="any other runner option, repeatable, e.g. precision=fp16 (tensorrt)")
    p.set_defaults(func=cmd_agent)


def _runner_options(a: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {k: _parse_value(v) for k, v in _pairs(a.option, "--option").items()}
    if a.threads is not None:
        opts["threads"] = a.threads
    if a.delegate is not None:
        opts["delegate"] = a.delegate
    if a.delegate_option:
        opts["delegate_options"] = _pairs(a.delegate_option, "--delegate-option")
    return opts


def _token(a: argparse.Namespace) -> str | None:
    if a.token_file is not None:
        try:
            token = a.token_file.read_text().strip()
        except OSError as e:
            raise UserError(f"cannot read --token-file {a.token_file}: {e.strerror or e}") from None
        if not token:
            raise UserError(f"--token-file {a.token_file} is empty")
        return token
    if a.token is not None:
        if not a.token.strip():
            raise UserError("--token is empty")
        return a.token.strip()
    return None


def cmd_agent(a: argparse.Namespace) -> int:
    from .agent import make_server

    if bool(a.tls_cert) != bool(a.tls_key):
        raise UserError("TLS needs both --tls-cert and --tls-key")
    for f in (a.tls_cert, a.tls_key):
        if f is not None and not f.is_file():
            raise UserError(f"{f} does not exist")
    token = _token(a)
    opts = _runner_options(a)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        runner = get_runner(a.runner, **opts)
    except RunnerError as e:
        raise UserError(f"runner {a.runner!r}: {e}") from None
    except TypeError as e:  # an option the runner's constructor does not take
        raise UserError(f"runner {a.runner!r} does not take these options ({', '.join(opts) or 'none'}): {e}") from None
    if a.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        print("bench agent: warning: serving beyond this machine without a token (--token-file)", file=sys.stderr)
    try:
        server = make_server(runner, host=a.host, port=a.port, token=token,
                             max_model_bytes=int(a.max_model_mb * 2**20),
                             tls_cert=a.tls_cert, tls_key=a.tls_key)
    except (OSError, ValueError) as e:
        runner.close()
        raise UserError(str(e)) from None

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    print(f"bench agent: runner {a.runner} ({runner.model_format}) on {a.host}:{server.port}"
          f"{', token required' if token else ''}{', TLS' if a.tls_cert else ''}; Ctrl-C or SIGTERM stops it",
          file=sys.stderr, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        print("bench agent: stopping (letting a running timing finish)", file=sys.stderr, flush=True)
        server.stop(grace=10.0)
        runner.close()
        for s, h in previous.items():
            signal.signal(s, h)
    print("bench agent: stopped", file=sys.stderr, flush=True)
    return 0
