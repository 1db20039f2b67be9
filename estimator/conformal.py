"""The three conformal metrics and what the forests hand them, shared by the reference
models (:mod:`estimator.models`) and the fast path (:mod:`estimator.fastpath`).

* CM_TV: variance-based difficulty, calibrated on t_op residuals;
* CM_LV: variance-based difficulty, calibrated on latency residuals;
* CM_O: k-NN difficulty on the feature vectors (distance to the benchmarked design space).

:func:`sigmas` is the one definition of their difficulties: calibration and prediction,
reference and fast path, all call it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .aggregate import DistBatch

__all__ = ["METRICS", "BatchPrediction", "sigmas"]

METRICS: tuple[str, ...] = ("CM_TV", "CM_LV", "CM_O")

_TINY = 1e-12


def sigmas(betas: Mapping[str, float], p: np.ndarray, rel_sd: np.ndarray, d_knn: np.ndarray, t_scale: float,
           ops: np.ndarray) -> dict[str, np.ndarray]:
    """Difficulties of the three metrics (the same code for calibration and prediction).

    ``p``: t_op / t_scale; ``rel_sd``: relative spread of the trees' t_op predictions;
    ``d_knn``: k-NN distance. CM_TV and CM_O are in (scaled) t_op units and proportional
    to ``p`` (relative difficulties), CM_LV is in ms with an absolute floor.
    """
    p_ = np.maximum(p, _TINY)
    return {
        "CM_TV": p_ * (rel_sd + betas["CM_TV"]),
        "CM_LV": rel_sd * p * t_scale * ops + betas["CM_LV"],
        "CM_O": p_ * (d_knn + betas["CM_O"]),
    }


@dataclass
class BatchPrediction:
    """Per-layer predictions for a list of layers (input order)."""

    pred_ms: np.ndarray
    t_op_ms: np.ndarray  # nan for fallback layers
    ops: np.ndarray
    fallback: np.ndarray  # bool
    out_of_design_space: np.ndarray  # bool
    reasons: list[list[str]]
    dists: dict[str, DistBatch]  # metric -> per-layer predictive distributions
