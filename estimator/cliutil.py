"""One CLI toolkit for all four commands (``bench``, ``estimator``, ``estimation-service``,
``nas``): argparse subcommands registered by small modules, and one error policy.

Each command module exposes ``register(subparsers)`` which adds its subparser(s) and sets
``func`` (called with the parsed namespace, returns an exit code). :func:`run` builds the
parser from a list of such modules and turns :class:`~estimator.errors.UserError` (and
``KeyboardInterrupt``) into a one-line message and a non-zero exit: no tracebacks for
bad input. Set ``CL_DEBUG=1`` to see tracebacks of unexpected errors.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

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
