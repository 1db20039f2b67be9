"""The benchmark dataset formats: layer rows (one per layer under measurement, LUM) and
network rows (one per whole network measured on the target).

``bench`` writes them (``bench export``, ``bench calibrate``, ``bench networks``), device
profiles ship them, ``estimator`` trains and calibrates on them. This module is the single
definition of their columns. All times are milliseconds.

Layer rows (``measurements.csv``)
---------------------------------
layer_type      vocabulary type name (``estimator.layers``)
params          JSON object of the layer's raw parameters (features are derived from it by
                ``estimator.layers.describe``; they are not stored, so they cannot drift)
ops             operations of the LUM (``describe(...).ops``), stored for convenience
t_single_ms     median latency of the single-layer model (Fig. 5a)
t_padded_ms     median latency T_c of the padded-layer model (Fig. 5c)
t_b1_ms         median latency T_b1 of the input padding-only pair (h_in, w_in, c_in)
t_b2_ms         median latency T_b2 of the output padding-only pair (h_out, w_out, c_out)
t_lum_lo_ms     T_c - max(T_b1, T_b2)   (Eq. 4)
t_lum_hi_ms     T_c - min(T_b1, T_b2)   (Eq. 4)
t_lum_ms        midpoint of [t_lum_lo_ms, t_lum_hi_ms]: the training target at the default
                padding split (a profile's ``training.padding_split_by_type`` a trains its
                types on t_padded_ms - a * t_b1_ms - (1 - a) * t_b2_ms instead, see estimator.models)
padded_p10_ms, padded_p90_ms, padded_mad_ms   dispersion of the padded-model runs
n_runs          timed runs per measurement
runner          runner name
env_id          id of the environment/provenance record the row was measured under

A layer row that cannot be a measurement (:func:`implausible`: a time that is NaN or
infinite, a model time at or below zero, a layer time above its padded model's, or
``t_lum_hi_ms`` far below zero) is left out by the reader, which reports its line and why
(:func:`read_measurements`).
A cell that is not a number, a short row or undecodable bytes make the file unreadable
(:class:`DatasetError` naming file and line).

Network rows (``networks.csv``, beside a ``networks/`` folder of weightless ONNX files)
-------------------------------------------------------------------------------------
name            unique within the file, e.g. ``space:mobilenet#s0-7``, ``zoo:resnet18@224``
family          the group leave-family-out validation holds out together (``space:mobilenet``,
                ``zoo:resnet`` for resnet18 and resnet50, ``onnx:<file stem>``)
source          ``space`` | ``zoo`` | ``onnx``: where the network came from
detail          JSON: the space, its options, seed and sampled architecture; the zoo name,
                resolution and builder arguments; or the file's path and SHA-256
onnx            the network as the estimator reads it (simplified, weights stripped,
                :mod:`estimator.onnx_strip`), relative to the CSV's folder
onnx_sha256     SHA-256 of that file
measured_ms     median over rounds of each round's median (what calibration fits)
spread_pct      max / min - 1 of the round medians (how much the target moved meanwhile)
p10_ms, p90_ms  medians over rounds of the rounds' 10th and 90th percentiles
rounds, runs    rounds (interleaved over all networks) and timed runs per round
kind            ``measured`` (hardware) | ``estimated`` (a cost model's whole-network estimate)
runner          runner name
measured_at     ISO date-time of the last round
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .errors import UserError

COLUMNS: tuple[str, ...] = (
    "layer_type",
    "params",
    "ops",
    "t_single_ms",
    "t_padded_ms",
    "t_b1_ms",
    "t_b2_ms",
    "t_lum_lo_ms",
    "t_lum_hi_ms",
    "t_lum_ms",
    "padded_p10_ms",
    "padded_p90_ms",
    "padded_mad_ms",
    "n_runs",
    "runner",
    "env_id",
)

_FLOAT = {c for c in COLUMNS if c.endswith("_ms")} | {"ops"}

#: The layer time columns: T_LUM = T_c - padding (Eq. 4), which smart padding may put below zero.
LUM_COLUMNS = ("t_lum_lo_ms", "t_lum_hi_ms", "t_lum_ms")
#: How far below zero ``t_lum_hi_ms`` (T_c less the cheaper padding pair) may go, in units of
#: the padded model's time T_c: below ``-NEGATIVE_LUM_LIMIT * t_padded_ms`` the row is impossible.
#: Chosen on measured rows with margin: the lowest ratios are -2.21 (the Intel host-cpu of
#: 2026-11-26, a mul), -0.65 (the AMD host-cpu shipped since), -0.71 (imx93) and -1.24 (the small
#: onnxruntime profiles the tests measure, three runs a model); 3 keeps each with a third to
#: spare. A sign or unit slip lies beyond (-5 ms on a 0.085 ms maxpool: -59; -0.4 ms: -4.7) and
#: would train at the 0 ms floor, dragging down its configuration and its neighbours. The other two columns get
#: no such bound: T_c less the dearer pair is genuinely far below zero for a layer that shrinks
#: its input (a globalpool over 224x224x16: t_lum_lo_ms -54 x T_c, its input pair 18 ms
#: against a padded model of 0.33 ms; host-cpu down to -3.8 x), and training clips it at 0 ms.
NEGATIVE_LUM_LIMIT = 3.0
#: Times that are never negative (t_single_ms and t_padded_ms must be above zero: a model runs).
_NON_NEGATIVE = ("t_b1_ms", "t_b2_ms", "padded_p10_ms", "padded_p90_ms", "padded_mad_ms")
_TIMES = tuple(c for c in COLUMNS if c.endswith("_ms"))

NETWORK_COLUMNS: tuple[str, ...] = (
    "name", "family", "source", "detail", "onnx", "onnx_sha256", "measured_ms", "spread_pct", "p10_ms", "p90_ms",
    "rounds", "runs", "kind", "runner", "measured_at",
)
NETWORK_SOURCES = ("space", "zoo", "onnx")
_NET_FLOAT = ("measured_ms", "spread_pct", "p10_ms", "p90_ms")


class DatasetError(UserError, ValueError):
    pass


def parse_row(row: dict[str, str]) -> dict[str, Any]:
    """One CSV row with its numbers and ``params`` parsed (an empty number cell is NaN);
    ValueError names the column of a cell that does not parse."""
    out: dict[str, Any] = dict(row)
    for c in _FLOAT:
        v = row.get(c, "")
        try:
            out[c] = float(v) if v not in ("", None) else float("nan")
        except ValueError:
            raise ValueError(f"{c}: not a number: {v!r}") from None
    try:
        out["params"] = json.loads(row["params"])
    except ValueError as e:
        raise ValueError(f"params: not JSON ({e}): {row['params']!r}") from None
    if not isinstance(out["params"], dict):
        raise ValueError(f"params: not a JSON object: {row['params']!r}")
    try:
        out["n_runs"] = int(row.get("n_runs") or 0)
    except ValueError:
        raise ValueError(f"n_runs: not an integer: {row.get('n_runs')!r}") from None
    return out


def implausible(row: Mapping[str, Any]) -> str | None:
    """Why a parsed layer row cannot be a measurement, or None if it can.

    Impossible: a time column that is NaN (or empty) or infinite, where only ``t_single_ms``
    may be empty (the single-layer model was not timed); ``t_single_ms`` or ``t_padded_ms``
    at or below zero (a model takes time); a negative padding or dispersion time; a layer time
    (:data:`LUM_COLUMNS`) above ``t_padded_ms`` (T_LUM is T_c less a padding time); or
    ``t_lum_hi_ms`` below ``-NEGATIVE_LUM_LIMIT * t_padded_ms``. Other negative layer times are
    genuine smart-padding outcomes (the layer costs less than its padding pair's noise, or
    shrinks its input) and stay."""
    for c in _TIMES:
        v = row.get(c, math.nan)
        if not isinstance(v, (int, float)):
            return f"{c} is {v!r}, not a number"
        if not math.isfinite(v) and not (c == "t_single_ms" and math.isnan(v)):
            return f"{c} is empty or NaN" if math.isnan(v) else f"{c} is {v}"
    t_c = row["t_padded_ms"]
    for c in ("t_single_ms", "t_padded_ms"):
        if row[c] <= 0:  # (False for an empty t_single_ms)
            return f"{c} {row[c]:g} is not above 0"
    for c in _NON_NEGATIVE:
        if row[c] < 0:
            return f"{c} {row[c]:g} is negative"
    for c in LUM_COLUMNS:
        if row[c] > t_c * (1 + 1e-9):
            return f"{c} {row[c]:g} exceeds t_padded_ms {t_c:g}"
    if row["t_lum_hi_ms"] < -NEGATIVE_LUM_LIMIT * t_c:
        return f"t_lum_hi_ms {row['t_lum_hi_ms']:g} is below -{NEGATIVE_LUM_LIMIT:g} x t_padded_ms {t_c:g}"
    return None


def read_measurements(path: str | Path, excluded: list[tuple[int, str]] | None = None) -> Iterator[dict[str, Any]]:
    """Yield the parsed rows of a measurements CSV, checking its header first.

    A row that cannot be a measurement (:func:`implausible`) is appended to ``excluded`` as
    ``(line, reason)`` and not yielded; without an ``excluded`` list it raises
    :class:`DatasetError`, so a row is never dropped unsaid. A cell that does not parse, a
    row with more or fewer cells than the header (a truncated file), bytes that are not UTF-8
    or broken CSV raise :class:`DatasetError` naming the file and line."""
    path = Path(path)
    line = 1
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DatasetError(f"{path}: missing columns {missing}")
            n = len(reader.fieldnames or [])
            for row in reader:
                line = reader.line_num
                if None in row or None in row.values():
                    cells = n + len(row.get(None) or ()) - sum(v is None for v in row.values())
                    raise DatasetError(f"{path}:{line}: {cells} cells where the header has {n}"
                                       + (" (truncated?)" if cells < n else ""))
                try:
                    r = parse_row(row)
                except (ValueError, KeyError) as e:
                    raise DatasetError(f"{path}:{line}: {e}") from e
                why = implausible(r)
                if why is None:
                    yield r
                elif excluded is None:
                    raise DatasetError(f"{path}:{line}: impossible row: {why}")
                else:
                    excluded.append((line, why))
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not a UTF-8 CSV file after line {line} ({e})") from e
    except csv.Error as e:
        raise DatasetError(f"{path}:{reader.line_num}: not CSV ({e})") from e


def excluded_message(path: str | Path, excluded: Sequence[Sequence[Any]], shown: int = 3) -> str:
    """One line naming the layer rows of ``path`` left out as impossible: the first ``shown``
    ``(line, reason)`` pairs of ``excluded`` (:func:`read_measurements`), then how many more."""
    n = len(excluded)
    head = "; ".join(f"line {line}: {why}" for line, why in excluded[:shown])
    more = f"; and {n - shown} more" if n > shown else ""
    return f"{path}: {n} impossible layer row{'s' if n != 1 else ''} left out of training ({head}{more})"


def write_measurements(path: str | Path, rows: list[dict[str, Any]]) -> None:
    path = Path(path)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            r = dict(r)
            if not isinstance(r.get("params"), str):
                r["params"] = json.dumps(r["params"], sort_keys=True)
            w.writerow(r)


def _parse_network_row(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {c: row.get(c, "") for c in NETWORK_COLUMNS}
    for c in _NET_FLOAT:
        v = row.get(c, "")
        out[c] = float(v) if v not in ("", None) else float("nan")
    for c in ("rounds", "runs"):
        out[c] = int(row.get(c) or 0)
    out["detail"] = json.loads(row.get("detail") or "{}")
    if not isinstance(out["detail"], dict):
        raise ValueError("detail must be a JSON object")
    if not out["name"]:
        raise ValueError("empty name")
    if out["source"] not in NETWORK_SOURCES:
        raise ValueError(f"source must be one of {', '.join(NETWORK_SOURCES)}, got {out['source']!r}")
    if out["kind"] not in ("measured", "estimated"):
        raise ValueError(f"kind must be 'measured' or 'estimated', got {out['kind']!r}")
    if not 0 < out["measured_ms"] < math.inf:
        raise ValueError(f"measured_ms must be a positive finite number, got {out['measured_ms']}")
    if not out["onnx"]:
        raise ValueError("empty onnx path")
    return out


def read_network_rows(path: str | Path) -> list[dict[str, Any]]:
    """Parsed rows of a ``networks.csv``, header and values checked (names unique)."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        try:
            missing = [c for c in NETWORK_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DatasetError(f"{path}: missing columns {missing}")
            for row in reader:
                i = reader.line_num
                try:
                    r = _parse_network_row(row)
                except (ValueError, KeyError) as e:
                    raise DatasetError(f"{path}:{i}: {e}") from e
                if r["name"] in seen:
                    raise DatasetError(f"{path}:{i}: network {r['name']!r} appears twice")
                seen.add(r["name"])
                rows.append(r)
        except csv.Error as e:
            raise DatasetError(f"{path}:{reader.line_num}: not CSV ({e})") from e
    return rows


def write_network_rows(path: str | Path, rows: list[dict[str, Any]]) -> None:
    path = Path(path)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=NETWORK_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            r = dict(r)
            if not isinstance(r.get("detail"), str):
                r["detail"] = json.dumps(r.get("detail") or {}, sort_keys=True)
            w.writerow(r)
