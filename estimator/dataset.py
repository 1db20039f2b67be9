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
from pathlib import Path
from typing import Any, Iterator

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

NETWORK_COLUMNS: tuple[str, ...] = (
    "name", "family", "source", "detail", "onnx", "onnx_sha256", "measured_ms", "spread_pct", "p10_ms", "p90_ms",
    "rounds", "runs", "kind", "runner", "measured_at",
)
NETWORK_SOURCES = ("space", "zoo", "onnx")
_NET_FLOAT = ("measured_ms", "spread_pct", "p10_ms", "p90_ms")


class DatasetError(UserError, ValueError):
    pass


def parse_row(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(row)
    for c in _FLOAT:
        v = row.get(c, "")
        out[c] = float(v) if v not in ("", None) else float("nan")
    out["params"] = json.loads(row["params"])
    out["n_runs"] = int(row.get("n_runs") or 0)
    return out


def read_measurements(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield parsed rows of a measurements CSV, checking its header first."""
    path = Path(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DatasetError(f"{path}: missing columns {missing}")
        for i, row in enumerate(reader, start=2):
            try:
                yield parse_row(row)
            except (ValueError, KeyError) as e:
                raise DatasetError(f"{path}:{i}: {e}") from e


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
    if not out["measured_ms"] > 0:
        raise ValueError(f"measured_ms must be > 0, got {out['measured_ms']}")
    if not out["onnx"]:
        raise ValueError("empty onnx path")
    return out


def read_network_rows(path: str | Path) -> list[dict[str, Any]]:
    """Parsed rows of a ``networks.csv``, header and values checked (names unique)."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in NETWORK_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DatasetError(f"{path}: missing columns {missing}")
        for i, row in enumerate(reader, start=2):
            try:
                r = _parse_network_row(row)
            except (ValueError, KeyError) as e:
                raise DatasetError(f"{path}:{i}: {e}") from e
            if r["name"] in seen:
                raise DatasetError(f"{path}:{i}: network {r['name']!r} appears twice")
            seen.add(r["name"])
            rows.append(r)
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
