"""Benchmark-shaped rows drawn from a KNOWN synthetic latency function, for unit tests of
the model/calibration math only. These are not measurements and are never written
anywhere but a test's temporary directory.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from estimator.dataset import write_measurements
from estimator.layers import describe


def conv_true_ms(p: dict[str, Any], ops: float) -> float:
    """Known latency of a synthetic conv: throughput improves with channels, plus overhead."""
    eff = 1.0 + 16.0 / p["c_in"] + 8.0 / p["c_out"]
    return ops * 2e-9 * eff + 0.003


def add_true_ms(p: dict[str, Any], ops: float) -> float:
    return ops * 1.5e-7 + 0.002


def conv_params(rng: np.random.Generator, c_max: int = 128) -> dict[str, Any]:
    h = int(rng.choice([8, 14, 16, 28, 32, 56]))
    k = int(rng.choice([1, 3, 5]))
    return dict(h=h, w=h, c_in=int(rng.integers(4, c_max + 1)), c_out=int(rng.integers(4, c_max + 1)), k_h=k, k_w=k,
                s_h=1, s_w=1)


def rows(n: int, seed: int = 0, *, layer_type: str = "conv2d", noise: float = 0.08, rel_width: float = 0.2,
         c_max: int = 128) -> list[dict[str, Any]]:
    """``n`` dataset rows whose true latency lies inside ``[t_lum_lo_ms, t_lum_hi_ms]``.

    The row dict also carries ``t_true_ms`` (not a dataset column) for coverage tests.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if layer_type == "conv2d":
            p = conv_params(rng, c_max)
            c = describe("conv2d", p)
            base = conv_true_ms(p, c.ops)
        elif layer_type == "add":
            h = int(rng.choice([7, 14, 28, 56]))
            p = dict(h=h, w=h, c=int(rng.integers(8, 257)))
            c = describe("add", p)
            base = add_true_ms(p, c.ops)
        else:
            raise ValueError(layer_type)
        true = base * (1.0 + noise * rng.standard_normal())
        w = true * rel_width * rng.random()
        lo = true - w * rng.random()
        hi = lo + w
        out.append(dict(layer_type=layer_type, params=p, ops=c.ops, t_single_ms=2.0 * true + 0.05,
                        t_padded_ms=hi + 0.1, t_b1_ms=0.1, t_b2_ms=0.1 + w, t_lum_lo_ms=lo, t_lum_hi_ms=hi,
                        t_lum_ms=(lo + hi) / 2, padded_p10_ms=hi, padded_p90_ms=hi, padded_mad_ms=0.0, n_runs=10,
                        runner="synthetic", env_id="synthetic", t_true_ms=true))
    return out


def write_profile(root: Path, name: str, data: list[dict[str, Any]], **meta_over: Any) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    meta = {
        "schema": 1,
        "name": name,
        "hardware": "synthetic test fixture (no hardware)",
        "runner": "onnxruntime",
        "precision": "fp32",
        "threads": 1,
        "provenance": {"kind": "estimated", "source": "tests/synthetic.py known function (unit-test fixture)",
                       "host": "test", "versions": {}, "date": "2025-01-01"},
        "training": {"n_estimators": 40, "grid_estimators": 30, "grid_max_features": [1.0, 0.5],
                     "grid_min_samples_leaf": [1, 3]},
    }
    meta.update(meta_over)
    (d / "profile.json").write_text(json.dumps(meta, indent=1))
    write_measurements(d / "measurements.csv", data)
    return d
