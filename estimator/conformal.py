"""The three conformal metrics and what the forests hand them, shared by the reference
models (:mod:`estimator.models`) and the fast path (:mod:`estimator.fastpath`).

All three are calibrated on factor residuals ``max(y / y_hat, y_hat / y) - 1`` and their
difficulties are relative, so every interval is ``[y_hat / (1 + q sigma), y_hat (1 + q
sigma)]``: it scales with the estimate and never reaches 0 (:mod:`estimator.aggregate`).

* CM_TV: variance-based difficulty, relative: the trees' spread plus a floor;
* CM_LV: variance-based difficulty with an absolute floor in ms, relative to the estimate;
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

_TINY = 1e-300

def sigmas(betas: Mapping[str, float], p: np.ndarray, rel_sd: np.ndarray, d_knn: np.ndarray, t_scale: float,
           ops: np.ndarray) -> dict[str, np.ndarray]:
    """Relative difficulties of the three metrics (the same code for calibration and
    prediction).

    ``p``: t_op / t_scale; ``rel_sd``: spread of the trees' log predictions (the relative
    spread of ``t_op``); ``d_knn``: k-NN distance. CM_TV is ``rel_sd + beta_TV``; CM_O is
    ``d_knn + beta_O``; CM_LV is ``(rel_sd * y_hat + beta_LV) / y_hat``, ``y_hat = p *
    t_scale * ops`` in ms and ``beta_LV`` an absolute floor in ms (timer resolution, dispatch
    overhead), so a layer far below its type's typical size gets a relatively wider band.
    """
    y_ms = np.maximum(p * t_scale * ops, _TINY)
    return {
        "CM_TV": rel_sd + betas["CM_TV"],
        "CM_LV": rel_sd + betas["CM_LV"] / y_ms,
        "CM_O": d_knn + betas["CM_O"],
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
    #: each layer's k-NN difficulty (its model's distance to the benchmarked rows; nan
    #: without a model): what CM_O grows with, read again to explain it (estimator.drivers)
    knn_distance: np.ndarray
