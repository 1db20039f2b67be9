"""Parsing of the CLI's quantities: latency budgets (with a unit) and durations."""
from __future__ import annotations

import math
import re

from estimator.cliutil import parse_option
from estimator.errors import UserError

__all__ = ["parse_budget", "parse_duration", "parse_option", "format_ms"]

_NUM = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"  # signed, so that "-5ms" is refused as not positive
_BUDGET_RULE = "a positive latency with a unit, such as 50ms, 500us or 0.05s"
_DURATION_RULE = "a positive duration in seconds or with a unit, such as 300, 90s, 5min or 2h"
_TIME_UNITS_MS = {"ms": 1.0, "us": 1e-3, "µs": 1e-3, "μs": 1e-3, "s": 1e3}
_DURATION_UNITS_S = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_budget(text: str) -> float:
    """``"50ms"``, ``"500us"``, ``"0.05s"`` -> milliseconds. A bare number is refused."""
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*([a-zA-Zµμ]*)", s)
    if not m:
        raise UserError(f"--budget must be {_BUDGET_RULE}, got {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    if not unit and value > 0:
        raise UserError(f"--budget {text!r} has no unit: write {s}ms (or us, s); a bare number is ambiguous")
    if unit and unit not in _TIME_UNITS_MS:
        raise UserError(f"--budget must be {_BUDGET_RULE}, got {text!r} (unknown unit {unit!r})")
    ms = value * _TIME_UNITS_MS.get(unit, 1.0)
    if ms > 0 and math.isfinite(ms):  # one budget in any unit is one number: 2300us = 2.3ms exactly
        ms = float(f"{ms:.12g}")
    if not (ms > 0 and math.isfinite(ms)):
        raise UserError(f"--budget must be {_BUDGET_RULE}, got {text!r}")
    return ms


def parse_duration(text: str) -> float:
    """``"300"`` (seconds), ``"90s"``, ``"5min"``, ``"2h"`` -> seconds."""
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*([a-zA-Z]*)", s)
    if not m or (m.group(2) and m.group(2) not in _DURATION_UNITS_S):
        raise UserError(f"--timeout must be {_DURATION_RULE}, got {text!r}")
    v = float(m.group(1)) * _DURATION_UNITS_S.get(m.group(2) or "s", 1.0)
    if not (v > 0 and math.isfinite(v)):
        raise UserError(f"--timeout must be {_DURATION_RULE}, got {text!r}")
    return v


def format_ms(ms: float) -> str:
    if not math.isfinite(ms):
        return str(ms)
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1e3:.0f} us"
