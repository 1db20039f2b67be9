"""One CLI toolkit for all four commands (``bench``, ``estimator``, ``estimation-service``,
``nas``): argparse subcommands registered by small modules, one error policy, and the
``KEY=VALUE`` option syntax (:func:`parse_option`).

Each command module exposes ``register(subparsers)`` which adds its subparser(s) and sets
``func`` (called with the parsed namespace, returns an exit code). :func:`run` builds the
parser from a list of such modules and turns :class:`~estimator.errors.UserError` (and
``KeyboardInterrupt``) into a one-line message and a non-zero exit: no tracebacks for
bad input. Set ``CL_DEBUG=1`` to see tracebacks of unexpected errors.

Bad command lines get the same one line (exit 2), never a usage block. Numeric options
declare their rule with :func:`integer` or :func:`number` as ``type``; a value that breaks
it is refused at parse time as ``--OPTION must be RULE, got VALUE``. Plain ``type=int`` and
``type=float`` get the same treatment (``float`` refuses nan and inf). An argument such as
``-5ms`` or ``-3`` is always a value, never an option, so it reaches the option that takes
it and that option's rule explains what is wrong with it.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import sys
from typing import Any, Callable, NoReturn, Sequence

from .errors import UserError

__all__ = ["run", "build_parser", "integer", "number", "Rule", "CliParser", "DefaultsHelpFormatter"]


class Rule:
    """An option's ``type`` that states its rule. ``parse`` turns the text into a value (or
    raises ValueError), ``within`` says whether the value keeps the bounds; ``kind``
    (``"an integer"``) and ``bounds`` (``">= 1"``) word the refusal: ``--OPTION must be
    BOUNDS, got VALUE`` for a value out of bounds, ``--OPTION must be KIND BOUNDS, got
    'VALUE'`` for one that does not parse."""

    def __init__(self, kind: str, parse: Callable[[str], Any], bounds: str = "",
                 within: Callable[[Any], bool] = lambda v: True) -> None:
        self.kind, self.parse, self.bounds, self.within = kind, parse, bounds, within
        self.__name__ = kind  # argparse names a type by its __name__

    def __call__(self, text: str) -> Any:
        value = self.parse(text)
        if not self.within(value):
            raise ValueError(f"{value} is out of bounds ({self.bounds})")
        return value

    def refusal(self, option: str, text: str) -> str:
        """The one-line message for ``text`` given to ``option`` (which refused it)."""
        try:
            self.parse(text)
        except ValueError:
            return f"{option} must be {' '.join(filter(None, (self.kind, self.bounds)))}, got {text!r}"
        return f"{option} must be {self.bounds}, got {text.strip()}"


def _bounds(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> tuple[str, Callable[[Any], bool]]:
    def within(v: float) -> bool:
        return ((lo is None or (v > lo if lo_open else v >= lo))
                and (hi is None or (v < hi if hi_open else v <= hi)))

    if lo is not None and hi is not None:
        text = f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    elif lo is not None:
        text = f"{'>' if lo_open else '>='} {lo:g}"
    elif hi is not None:
        text = f"{'<' if hi_open else '<='} {hi:g}"
    else:
        text = ""
    return text, within


def integer(min: int | None = None, max: int | None = None) -> Rule:
    """``type`` of an integer option, optionally bounded: ``integer(min=1)``, ``integer(0, 65535)``."""
    return Rule("an integer", int, *_bounds(min, max, False, False))


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text!r} is not a finite number")
    return v


def number(min: float | None = None, max: float | None = None, *, above: float | None = None,
           below: float | None = None) -> Rule:
    """``type`` of a finite real option, optionally bounded: ``number(min=0)`` (>= 0),
    ``number(above=0)`` (> 0), ``number(above=0, below=1)`` (in (0, 1))."""
    if (min is not None and above is not None) or (max is not None and below is not None):
        raise TypeError("give min or above, and max or below, not both")
    lo, hi = (above if above is not None else min), (below if below is not None else max)
    return Rule("a number", _finite, *_bounds(lo, hi, above is not None, below is not None))


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``(default: X)`` after an option's help, only where X says something: not for
    required options, flags, or defaults of None or an empty list."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default is None or action.default == [] or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


class _CommandLineError(UserError):
    """A command line argparse refused (unknown option, missing argument, broken rule)."""


class CliParser(argparse.ArgumentParser):
    """The parser of every command and subcommand (subparsers inherit the class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # '-' then a digit (or '.' and a digit) is a value: no option of these CLIs is spelt so
        self._negative_number_matcher = re.compile(r"^-\.?\d")
        self.register("type", int, integer())
        self.register("type", float, number())

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        rule = self._registry_get("type", action.type, action.type)
        if isinstance(rule, Rule):
            try:
                return rule(arg_string)
            except (TypeError, ValueError):
                name = max(action.option_strings, key=len) if action.option_strings else action.metavar or action.dest
                raise argparse.ArgumentError(None, rule.refusal(str(name), arg_string)) from None
        return super()._get_value(action, arg_string)

    def error(self, message: str) -> NoReturn:  # one line via run(), not usage + message
        raise _CommandLineError(message)


#: the packages of this distribution: an ImportError naming one of them is a bug, not a
#: dependency missing on this machine
_OWN_PACKAGES = ("bench", "estimator", "nas", "service", "proto")


def build_parser(prog: str, description: str, command_modules: Sequence[str]) -> CliParser:
    """The parser of command ``prog`` with the subcommands of ``command_modules``.

    A module whose third-party dependency is not installed (a board with the agent's
    packages only: no onnx, torch or scikit-learn) registers nothing; the others still
    work, ``--help`` names what is missing, and a command line that needs it says why in
    its one-line error (``parser.unavailable``: module -> missing package)."""
    parser = CliParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    unavailable: dict[str, str] = {}
    for name in command_modules:
        names, choices = dict(sub._name_parser_map), list(sub._choices_actions)
        try:
            importlib.import_module(name).register(sub)
        except ImportError as e:
            missing = (e.name or "").split(".")[0]
            if not missing or missing in _OWN_PACKAGES:
                raise
            unavailable[name] = missing
            # drop what the module registered before its import failed
            sub._name_parser_map.clear()
            sub._name_parser_map.update(names)
            sub._choices_actions[:] = choices
    parser.unavailable = unavailable  # type: ignore[attr-defined]
    if unavailable:
        parser.epilog = "Not available here: " + _unavailable_text(unavailable) + "."
    return parser


def _unavailable_text(unavailable: dict[str, str]) -> str:
    return ", ".join(f"the commands of {m} (package {pkg!r} is not installed)" for m, pkg in unavailable.items())


def run(prog: str, description: str, command_modules: Sequence[str], argv: Sequence[str] | None = None) -> int:
    parser = build_parser(prog, description, command_modules)
    try:
        args = parser.parse_args(argv)
    except _CommandLineError as e:
        unavailable = getattr(parser, "unavailable", None)
        extra = f"; not available here: {_unavailable_text(unavailable)}" if unavailable and "invalid choice" in str(e) else ""
        print(f"{prog}: error: {e}{extra}", file=sys.stderr)
        return 2
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
