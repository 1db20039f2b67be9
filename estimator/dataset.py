"""The benchmark dataset format: one row per layer under measurement (LUM).

``bench`` writes it (``bench export``), device profiles ship it, ``estimator`` trains on it.
This module is the single definition of its columns. All times are milliseconds.

Columns
-------
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
                padding split (a profile's ``training.padding_split`` a trains on
                t_padded_ms - a * t_b1_ms - (1 - a) * t_b2_ms instead, see estimator.models)
padded_p10_ms, padded_p90_ms, padded_mad_ms   dispersion of the padded-model runs
n_runs          timed runs per measurement
runner          runner name
env_id          id of the environment/provenance record the row was measured under
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
