"""One CLI toolkit for all four commands (``bench``, ``estimator``, ``estimation-service``,
``nas``): argparse subcommands registered by small modules, one error policy, and the
``KEY=VALUE`` option syntax (:func:`parse_option`).

Each command module exposes ``register(subparsers)`` which adds its subparser(s) and sets
``func`` (called with the parsed namespace, returns an exit code). :func:`run` builds the
parser from a list of such modules and turns :class:`~estimator.errors.UserError` (and
``KeyboardInterrupt``) into a one-line message and a non-zero exit: no tracebacks for
bad input. Set ``CL_DEBUG=1`` to see tracebacks of unexpected errors.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Sequence

from .errors import UserError


def run(prog: str, description: str, command_modules: Sequence[str], argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules:
        importlib.import_module(name).register(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # an unexpected failure: still one line unless debugging
        if os.environ.get("CL_DEBUG"):
            raise
        print(f"{prog}: internal error: {type(e).__name__}: {e} (set CL_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


def parse_option(text: str, flag: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE parsed as JSON when it is JSON (numbers, lists, true/false)."""
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise UserError(f"{flag} {text!r}: write KEY=VALUE, e.g. {flag} resolutions=[96,128]")
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, list):
        value = tuple(value)
    return key, value
