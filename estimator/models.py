"""Per-device, per-layer-type latency models with conformal confidence (CM_TV, CM_LV, CM_O).

Models
------
For every layer type with at least ``min_rows`` usable benchmark rows, one
``RandomForestRegressor`` predicts the time per operation ``t_op = t_lum / ops`` from the
layer's feature vector (:func:`estimator.layers.feature_vector`); a layer's latency is
``t_op * ops`` (Eq. 7). ``t_op`` is divided by the type's median ``t_op`` (scikit-learn
stops splitting nodes whose impurity is below machine epsilon, and raw ``t_op`` values
around 1e-9 ms would make every tree a stump), and the forest is fitted on
``log(t_op)`` and predicts ``exp`` of the trees' mean: a
benchmark's layers span 6-8 decades of ops and ``t_op`` spans 3-4 decades (dispatch
overhead dominates small layers), so a squared-error forest on raw ``t_op`` spends its
splits on the small layers and mispredicts the large ones (measured on an ONNX Runtime
CPU benchmark: held-out RMSPE 0.6-2 with log vs 2-1900 with the raw target, per type).
Rows that measured no latency (their whole interval at or below 0 ms or their padded
model's run-to-run spread, :attr:`TrainingData.resolved`) are trained on half the type's
smallest measured latency and calibrate nothing (below). The hyperparameters
(``max_features`` x ``min_samples_leaf``) are chosen from a small grid by the out-of-bag
RMSPE of ``t_op`` over the type's first :func:`grid_rows` rows (below; those that measured a
latency: a relative error against ~0 ms is noise over nothing); every forest uses a
fixed seed, so training is deterministic.

Incremental retraining
----------------------
``bench refine`` appends rows for a few types per round and retrains. The model cache
(:mod:`estimator.cache`) therefore keeps each type's trained model under a key over that
type's training rows (:meth:`TrainingData.digest`, with the options, target, precision,
code and library versions), and a model set is assembled from them
(:class:`_TypeCache`): only the types whose rows changed are trained again. The fallback is
fitted on every row each time (about 15 ms on 24k rows).

The grid search (9 forests of ``grid_estimators`` trees, about 85 % of a type's training
time) sees only the type's first ``grid_rows(n)`` rows: the largest checkpoint at or below
``n`` of the series ``min_rows``, ``x grid_growth`` (1.25 by default: 20, 25, 31, ..., 1616,
2020, ...), and is cached under a key over those rows. Rows appended to a type reuse its
search until the type grows past the next checkpoint, i.e. by up to 25 %; then it runs
again, on more rows. The choice is a function of the rows alone, never of what the cache
held: a model set assembled from cached parts is bit for bit the one a cold cache trains
from the same ``measurements.csv`` (``tests/test_profile.py``). The search's rows are a
prefix (at least 80 %) of the type's, in the measurements' order, so rows appended after
it do not change it; a profile whose rows were reordered searches again. ``grid_growth``
1 makes every row count a checkpoint (the search sees all rows: no reuse); ``estimator
train --retrain`` reads no cache entry at all. The retraining cost is printed by
``tests/perf/retrain.py``.

Confidence (crepes, out-of-bag calibration, no data split)
----------------------------------------------------------
Calibration uses the forest's out-of-bag predictions of the training rows
(``oob_prediction_``) and crepes ``DifficultyEstimator`` fitted with ``oob=True``; the
residuals and difficulties go into crepes ``ConformalRegressor`` (its ``alphas`` are the
calibration scores). Every metric scores a **factor residual**: a row's residual is
``max(y / y_hat, y_hat / y) - 1`` at its training point (below), the same for ``t_op`` and
for latency since ``ops`` is fixed, and the difficulties are relative
(:func:`estimator.conformal.sigmas`), so a layer's interval is ``[y_hat / (1 + q sigma),
y_hat (1 + q sigma)]``: its width scales with the estimate, its lower bound is never 0, and
its upper bound is the additive ``y_hat + q sigma y_hat`` of the same score
(:mod:`estimator.aggregate` says why not ``y_hat exp(+-q sigma)``). The assumption is that a
layer's error is multiplicative: a kernel 30 % slower than the model says is 30 % slower
whatever its size. Let ``s`` be the spread of the trees' log predictions (the square root of
crepes' out-of-bag tree variance; by the delta method the relative spread of ``t_op``). Then:

* **CM_TV** (variance-based difficulty): ``sigma = s + beta_TV``, ``beta_TV = beta_rel *
  median(s)`` over the calibration rows.
* **CM_LV** (variance-based difficulty with an absolute floor): ``sigma = (s * y_hat +
  beta_LV) / y_hat``, ``y_hat`` in ms, ``beta_LV = beta_rel * median`` of the trees' spread
  in ms (``s * y_hat``) over the calibration rows: layers far below their type's typical size
  get at least a fixed absolute width (timer resolution, dispatch overhead), large layers
  proportional widths, as in the paper's Fig. 9b.
* **CM_O** (k-NN difficulty on the feature vectors alone): ``d`` is
  the sum of distances to the ``k`` nearest benchmarked configurations (leave-one-out
  for calibration) in feature space min-max scaled to the benchmarked range (crepes'
  scaling); ``sigma = d + beta_O``, ``beta_O = knn_beta_rel x`` the larger of the
  median and the mean leave-one-out distance (``knn_beta_rel`` 1 by default: the floor is
  the type's typical distance between benchmarked rows). The band's factor ``1 + q (d +
  beta_O)`` grows linearly with the distance from the benchmarked design space whatever
  the layer's size. crepes' k-NN estimator clips
  scaled features to the
  training range, which would cap the distance of an out-of-range layer; we switch that
  clipping off after fitting (``nn_scaler.clip = False``) so distances keep growing
  outside the range. The features are scaled linearly, not in log space: log scaling
  compresses extrapolation (on an ONNX Runtime CPU benchmark, ResNet-18 at 1024x1024,
  whose convs reach 2.4x the largest benchmarked FLOPs, sat at 1.0x the typical
  leave-one-out distance in log space and at 11x in linear space; in-space networks at
  0.4-1.2x in both).

Why not crepes' min-max scaled difficulty plus a constant ``beta``: a profile's layers
span 6-8 decades of ops and 3-4 of ``t_op``, so any constant floor in ``t_op`` or ms units
is negligible for some layers and dominant for others. Floors relative to the prediction
(TV, O) or at the type's typical spread (LV) keep the normalisation meaningful across that
range. For the test-time spread, crepes'
``DifficultyEstimator.apply(X)`` with ``oob=True`` would reuse the training rows'
out-of-bag masks for new objects; no tree has seen a new layer, so we use the spread over
*all* trees (the same code, :func:`estimator.conformal.sigmas`, computes calibration and test difficulties).

How the smart-padding interval enters calibration
-------------------------------------------------
A smart-padding measurement does not give the layer's latency, it gives an interval
``[t_lum_lo, t_lum_hi]`` (Eq. 4) that contains it (intersected with ``[0, inf)``: a
latency is never negative). The model is trained on one point of that interval: its
midpoint (the paper's choice), unless the profile's ``training.padding_split_by_type``
(``{"dwconv2d": 0.77, ...}``) gives a layer type a split ``a``, the pad-in conv's share of
the padding in its padded models, measured where the runner reports the LUM's own time
inside them (``tests/perf/padding_split.py --lum-types``): the padded model's padding
costs ``pad_in(input shape) + pad_out(output shape) = a * T_b1 + (1 - a) * T_b2``, so a
row of that type trains on ``T_c - a * T_b1 - (1 - a) * T_b2`` clipped into ``[lo, hi]``
(``a = 0.5`` is the midpoint); rows without ``T_c``, ``T_b1``, ``T_b2`` (and single-layer
targets) always train on the midpoint.
A row of a layer with weights (convolutions, fully connected) whose whole interval lies at or
below zero (or its padded model's run-to-run spread) although the layer alone (``t_single``) ran
longer than its padding-only pair is not trained on (:func:`eq4_failed`; counted in the training
report's ``skipped_rows``): such a layer cannot fuse into a 1x1 pad, so a padded model cannot
hide it when it is slower than its pads; the padded and the padding-only model were timed in
different states of the machine, and clipped to 0 the row would train the log target on its
floor. Layers without weights keep such rows: they may fuse into a pad (a Vela activation: 44 of
``imx93``'s rows look like that) or cost nothing. Measured: 10 of ``host-cpu``'s 18,753 rows (1
conv2d, 8 depthwise, 1 fc; 2 of them above 0 ms but within their spread), none of ``imx93``'s.
One such row, a depthwise layer of 32 channels at 112x112 (padded model 0.259 ms, its pair 0.262
ms, alone 0.376 ms), had MobileNetV2's first depthwise layer predicted at 0.017 ms (0.16 ms
without it; 0.29 ms inside the network on a VM 1.4-1.6x slower). Rows at 0 whose layer alone is
faster than its pads still train, at the floor.
Every metric's residual is taken at the row's **training point**, not over the whole
measured interval. An Eq. 4 interval's low end is at or below 0 ms on 15-85 % of
``host-cpu``'s rows per type (3-79 % on ``imx93``: a padding pair timed a little slower than
the padded model), and no band of factors reaches 0: scored as the worst case over the
interval, with the low end at the floor, the 90 % quantiles of log residuals rose to 11-34
on ``host-cpu``'s add, avgpool, globalpool, matmul, maxpool, mul and resize; at the training
point they are 1.7-2.8. Only rows whose interval reaches above 0 ms and above the padded
model's run-to-run spread (``padded_mad_ms``) are scored: a row timed at or below 0 ms (8-34 %
of ``host-cpu``'s rows per type, 0-25 % of ``imx93``'s) or at or below that spread (another
1-4 % of ``host-cpu``'s rows per type; ``imx93``'s Vela estimates have none) says the layer
costs less than its padding pair's noise, a latency with no factor to score; it trains the
forest at the floor and calibrates nothing. Scored against the floor, two rows at or below
0 ms of a 20-row profile made a network's CM_LV upper bound 10^4 times its estimate; trained
and scored at its own midpoint, one row of 20 whose interval was ``[0, 2e-5]`` ms (its padded
model's runs spread 0.007 ms) took a ResNet's CM_LV upper bound from 22x to 9,000x its
estimate and its estimate from 22.7 to 17.5 ms; a second such row, to 1.25 ms. The floor is
half the smallest *measured* latency, so such a row cannot drag it down either. The
interval's width is a property of the measurement; where it is wide the training point is
uncertain too, which the forest's spread (CM_TV, CM_LV) sees. The scores
are crepes ``ConformalRegressor`` alphas; per-layer intervals and the predictive
distributions used for aggregation are built from them in :mod:`estimator.aggregate`.

Which rows calibrate
--------------------
By default every row is a calibration row (out-of-bag). ``calibration_rows`` N > 0 (written by
``bench refine`` into the refined profile's ``training``: the base's row count) keeps the scores
and the three difficulty floors to the first N rows of the measurements, the base's sampling
plan; the rows after them (chosen by refinement for their uncertainty, thousands of small
layers) train the forests and the k-NN only. Calibrating on them had lowered CM_LV's floor
about ninefold and raised conv2d's 90 % quantile from 2.3 to 7.2 on host-cpu, widening every
interval (tests/perf/refine_curve.py). A type with fewer than :data:`CALIBRATION_MIN_ROWS` (100)
calibration rows calibrates on all of its rows: on imx93, a 20 + 20 plan's 40 rows per type left
90 % quantiles near their scores' maximum, and held-out CM_LV widths near 300 % against 137 %.

out_of_design_space rule
------------------------
A layer is flagged when any of these holds (reasons are kept per layer):

* ``no_data``: its type has no model (fallback, see below);
* ``range:<feature>``: a feature lies outside ``[min, max]`` of the benchmarked rows of
  its type;
* ``knn``: its k-NN distance to the benchmarked rows exceeds the largest leave-one-out
  k-NN distance among the benchmarked rows themselves (it is farther from the data than
  any benchmarked configuration is from the rest);
* ``unbenchmarked:<feature>``: a feature of :data:`FLAGGED_WHEN_FIXED` (a constant operand,
  a batch normalisation, shared concatenation inputs) that every benchmarked row of its type
  held at one value, and the layer has another: the model cannot see it, so the layer is
  predicted as the rows' operation;
* ``batch``: batch size ``n > 1`` (profiles are benchmarked at batch 1).

Fallback rule (types without data, type ``other``, or fewer than ``min_rows`` rows)
----------------------------------------------------------------------------------
A roofline plus a fixed per-layer overhead, fitted to the whole profile: peak rates
``P`` (ops/ms) and ``B`` (bytes/ms) are the ``fallback_peak_quantile`` quantiles of
``ops / t`` and ``bytes / t`` over all usable benchmark rows (of all types);
``roof = max(ops / P, bytes / B)``; ``base = t0 + roof``, where the overhead ``t0`` is
the quantile of the measured latencies (0.5, 1, 2, 5 or 10 %) that makes the ratios
``R = t_measured / base`` tightest (smallest 90 % quantile of ``|ln(R / median(R))|``).
Without ``t0`` a small operator's time is mostly overhead the roofline does not see: its
ratio to the roofline is tens of times the median, so the ratios' distribution gets a tail
whose sum over many small fallback layers (ShuffleNet's reshapes and transposes) lands
far above the sum of their point estimates. The ratios ``R`` over the same rows form the
fallback's predictive distribution: point estimate ``base * median(R)``; CM_TV and CM_LV
are ``base * R`` (its conformal quantiles); CM_O is log-symmetric around the point
estimate: ``base * m * exp(+-lam *
|ln(R / m)|)`` with ``m = median(R)`` and ``lam = max(2, ln(fallback_o_min_factor) /
d90)``, ``d90`` being the 90 % conformal quantile of ``|ln(R / m)|``: at least twice the
log-width of the ratios' spread, and the 90 % interval reaches at least a factor
``fallback_o_min_factor`` (default 4) below and above the point estimate. Fallback layers are always flagged out_of_design_space.
"""
from __future__ import annotations

import hashlib
import json
import math
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .aggregate import DistBatch, Family, conformal_index, layer_intervals
from .conformal import METRICS, BatchPrediction, sigmas
from .dataset import excluded_message
from .fastpath import FastKNN, FlatForests
from .errors import UserError
from .layers import SPECS, Layer, LayerSpecError, LayerType, bench_params, describe, feature_names, feature_vector

__all__ = [
    "MODEL_CODE_VERSION",
    "METRICS",
    "TARGETS",
    "ModelError",
    "TrainingOptions",
    "TypeModel",
    "FallbackModel",
    "DeviceModels",
    "ReferenceModel",
    "ReferenceParts",
    "BatchPrediction",
    "TrainingData",
    "prepare_training_data",
    "eq4_failed",
    "training_data",
    "train_models",
    "get_models",
    "grid_rows",
    "elem_bytes_for",
]

#: The sources that determine a trained model (the training code, the rows it may train on, the conformal
#: difficulties, the layer vocabulary's features, the predictive-distribution families, the flattened forests and
#: k-NN arrays).
_TRAINING_SOURCES = ("models.py", "dataset.py", "conformal.py", "aggregate.py", "fastpath.py", "layers/*.py")


def _code_version() -> str:
    h = hashlib.sha256()
    for pattern in _TRAINING_SOURCES:
        for path in sorted(Path(__file__).parent.glob(pattern)):
            h.update(path.read_bytes())
    return f"models-8:{h.hexdigest()[:16]}"


#: Part of the model cache key: a hash of :data:`_TRAINING_SOURCES`, so any change to the
#: training code retrains instead of loading cached models made by other code.
MODEL_CODE_VERSION = _code_version()
#: with ``calibration_rows``, a type with fewer calibration rows than this calibrates on all of
#: its rows (a 90 % conformal quantile of a few dozen scores is close to their maximum)
CALIBRATION_MIN_ROWS = 100
TARGETS: tuple[str, ...] = ("lum", "single")


class ModelError(UserError):
    """Training options or data that cannot produce a model."""


# ------------------------------------------------------------------------ options


@dataclass(frozen=True)
class TrainingOptions:
    n_estimators: int = 100
    grid_estimators: int = 60
    grid_max_features: tuple[float, ...] = (1.0, 0.6, 0.33)
    grid_min_samples_leaf: tuple[int, ...] = (1, 3, 5)
    knn_k: int = 10
    knn_beta_rel: float = 1.0
    beta_rel: float = 0.1
    min_rows: int = 20
    seed: int = 0
    fallback_peak_quantile: float = 0.95
    fallback_o_min_factor: float = 4.0
    # the grid search sees a type's first grid_rows(n) rows: the last checkpoint of the series
    # min_rows, x grid_growth, ... at or below n (1.0: all rows; see the module docstring)
    grid_growth: float = 1.25
    # per-type padding splits, ((layer type, alpha), ...) sorted: smart-padding rows of these
    # types train on T_c - alpha * T_b1 - (1 - alpha) * T_b2, the others on Eq. 4's midpoint
    # (alpha 0.5; see the module docstring); a profile's training.padding_split_by_type
    # {"dwconv2d": 0.87, ...} (tests/perf/padding_split.py --lum-types)
    padding_split_by_type: tuple[tuple[str, float], ...] = ()
    # conformal calibration (scores and difficulty floors) uses only the first N rows of the
    # measurements (a profile's sampling plan); later rows (bench refine's, chosen for their
    # uncertainty) train the forests only. 0: every row calibrates (see the module docstring)
    calibration_rows: int = 0

    def __post_init__(self) -> None:
        def bad(msg: str) -> ModelError:
            return ModelError(f"training option {msg}")

        if self.n_estimators < 20 or self.grid_estimators < 20:
            raise bad(f"n_estimators/grid_estimators must be >= 20 (out-of-bag estimates need trees), "
                      f"got {self.n_estimators}/{self.grid_estimators}")
        if not self.grid_max_features or any(not (0.0 < f <= 1.0) for f in self.grid_max_features):
            raise bad(f"grid_max_features must be fractions in (0, 1], got {list(self.grid_max_features)}")
        if not self.grid_min_samples_leaf or any(int(m) != m or m < 1 for m in self.grid_min_samples_leaf):
            raise bad(f"grid_min_samples_leaf must be integers >= 1, got {list(self.grid_min_samples_leaf)}")
        if self.knn_k < 1:
            raise bad(f"knn_k must be >= 1, got {self.knn_k}")
        if self.min_rows < 5:
            raise bad(f"min_rows must be >= 5, got {self.min_rows}")
        if not (self.beta_rel > 0 and self.knn_beta_rel > 0):
            raise bad("beta_rel and knn_beta_rel must be > 0")
        if not (0.5 <= self.fallback_peak_quantile <= 1.0):
            raise bad(f"fallback_peak_quantile must be in [0.5, 1], got {self.fallback_peak_quantile}")
        if self.fallback_o_min_factor < 1.0:
            raise bad(f"fallback_o_min_factor must be >= 1, got {self.fallback_o_min_factor}")
        if not (1.0 <= self.grid_growth <= 100.0):  # also refuses NaN
            raise bad(f"grid_growth must be in [1, 100] (1: the grid search sees every row), got {self.grid_growth!r}")
        if isinstance(self.calibration_rows, bool) or int(self.calibration_rows) != self.calibration_rows \
                or self.calibration_rows < 0:
            raise bad(f"calibration_rows must be an integer >= 0 (0: every row), got {self.calibration_rows!r}")
        for t, a in self.padding_split_by_type:
            if t not in SPECS or not (0.0 <= a <= 1.0):
                raise bad(f"padding_split_by_type: {t!r}: {a!r} must map a layer type to a split in [0, 1]")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["grid_max_features"] = [float(x) for x in self.grid_max_features]
        d["grid_min_samples_leaf"] = [int(x) for x in self.grid_min_samples_leaf]
        if self.padding_split_by_type:
            d["padding_split_by_type"] = dict(self.padding_split_by_type)
        else:  # the default trains exactly as before: keep earlier cache keys
            del d["padding_split_by_type"]
        if not self.calibration_rows:  # the default trains exactly as before: keep earlier cache keys
            del d["calibration_rows"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "TrainingOptions":
        if not d:
            return cls()
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ModelError(f"unknown training options {unknown}; known: {sorted(known)}")
        kw: dict[str, Any] = {}
        for k, v in d.items():
            default = getattr(cls(), k)
            try:
                if k == "padding_split_by_type":
                    if not isinstance(v, Mapping) or any(isinstance(x, bool) for x in v.values()):
                        raise TypeError
                    kw[k] = tuple(sorted((str(t), float(x)) for t, x in v.items()))
                elif isinstance(default, tuple):
                    if not isinstance(v, (list, tuple)):
                        raise TypeError
                    kw[k] = tuple(type(default[0])(x) for x in v)
                elif isinstance(default, bool) or isinstance(v, bool):
                    raise TypeError
                elif isinstance(default, int):
                    if float(v) != int(v):
                        raise TypeError
                    kw[k] = int(v)
                else:
                    kw[k] = float(v)
            except (TypeError, ValueError):
                like = '{"dwconv2d": 0.87}' if k == "padding_split_by_type" else repr(default)
                raise ModelError(f"training option {k!r} must be like {like}, got {v!r}") from None
        return cls(**kw)


def elem_bytes_for(precision: str) -> int:
    p = precision.lower()
    if "int8" in p or "uint8" in p or p in ("i8", "u8", "q8"):
        return 1
    if "16" in p:
        return 2
    return 4


# ----------------------------------------------------------------------- data prep


@dataclass
class TrainingData:
    """Usable benchmark rows of one type, as arrays."""

    layer_type: str
    X: np.ndarray  # (n, d) raw features
    ops: np.ndarray  # (n,)
    bytes: np.ndarray  # (n,)
    lo: np.ndarray  # (n,) measured interval, ms (clipped at 0)
    hi: np.ndarray
    mid: np.ndarray  # (n,) training point, ms, in [lo, hi]: the midpoint unless a per-type padding split
    params: list[dict[str, Any]] = field(default_factory=list)
    #: (n,) bool: the rows conformal calibration uses (``TrainingOptions.calibration_rows``);
    #: None: every row
    calibrate: np.ndarray | None = None
    #: (n,) the padded model's run-to-run spread (its runs' MAD), ms: a row whose whole interval
    #: lies at or below it measured no latency (:attr:`resolved`); None: 0 for every row
    noise: np.ndarray | None = None

    @property
    def resolved(self) -> np.ndarray:
        """(n,) bool: the rows that measured a latency, their interval's top ``hi`` above the
        padded model's run-to-run spread (above 0 without one). The others say the layer costs
        less than its padding pair's noise: they train at the type's floor and score nothing
        (see the module docstring)."""
        return self.hi > (0.0 if self.noise is None else self.noise)

    @property
    def measured(self) -> np.ndarray:
        """(n,) bool: the rows whose latency the model's errors are taken against and whose
        smallest sets the floor: :attr:`resolved` with a positive training point, or every
        positive one where no row is above its noise."""
        pos = self.mid > 0
        m = self.resolved & pos
        return m if m.any() else pos

    def head(self, n: int) -> "TrainingData":
        """The first ``n`` rows (in the measurements' order)."""
        if n >= self.X.shape[0]:
            return self
        return TrainingData(self.layer_type, self.X[:n], self.ops[:n], self.bytes[:n], self.lo[:n], self.hi[:n],
                            self.mid[:n], self.params[:n], None if self.calibrate is None else self.calibrate[:n],
                            None if self.noise is None else self.noise[:n])

    def calibration_mask(self) -> np.ndarray:
        """The rows that calibrate: :attr:`calibrate`, or every row when it is None or leaves
        fewer than :data:`CALIBRATION_MIN_ROWS`."""
        n = self.X.shape[0]
        if self.calibrate is None or int(self.calibrate.sum()) < min(CALIBRATION_MIN_ROWS, n):
            return np.ones(n, dtype=bool)
        return self.calibrate

    def digest(self) -> str:
        """SHA-256 of what training reads (type, shapes and arrays): part of the type's and
        its grid search's cache keys."""
        h = hashlib.sha256(f"{self.layer_type}:{self.X.shape}".encode())
        for a in (self.X, self.ops, self.bytes, self.lo, self.hi, self.mid):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        if self.calibrate is not None and not self.calibrate.all():  # every row: the key as before
            h.update(b"calibrate:" + np.packbits(self.calibrate).tobytes())
        if self.noise is not None and np.any(self.noise > 0):  # no spread: the key as before
            h.update(b"noise:" + np.ascontiguousarray(self.noise, dtype=np.float64).tobytes())
        return h.hexdigest()


def _interval(row: Mapping[str, Any], target: str) -> tuple[float, float] | None:
    if target == "single":
        t = row.get("t_single_ms", float("nan"))
        return (max(t, 0.0), max(t, 0.0)) if math.isfinite(t) else None
    lo, hi = row.get("t_lum_lo_ms", float("nan")), row.get("t_lum_hi_ms", float("nan"))
    if math.isfinite(lo) and math.isfinite(hi):
        lo, hi = min(lo, hi), max(lo, hi)
        return max(lo, 0.0), max(hi, 0.0)
    t = row.get("t_lum_ms", float("nan"))
    return (max(t, 0.0), max(t, 0.0)) if math.isfinite(t) else None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _noise(row: Mapping[str, Any]) -> float:
    """The padded model's run-to-run spread (``padded_mad_ms``), 0 where unknown."""
    mad = row.get("padded_mad_ms", float("nan"))
    return float(mad) if _finite(mad) and mad > 0 else 0.0


def eq4_failed(row: Mapping[str, Any], interval: tuple[float, float], weights: float) -> bool:
    """Whether a smart-padding row's Eq. 4 lost its layer: a layer with ``weights`` (it
    cannot fuse into a 1x1 pad) whose interval (clipped at 0) is empty of time,
    ``t_lum_hi`` at or below 0 or the padded model's run-to-run spread, although it alone
    ran longer than its padding-only pair (``t_single > max(T_b1, T_b2)``). A padded model
    cannot hide such a layer; the timings moved between the padded and the padding-only
    model, and the row says nothing about the layer (see the module docstring)."""
    if weights <= 0 or interval[1] > _noise(row):
        return False
    t_a, b1, b2 = (row.get(k, float("nan")) for k in ("t_single_ms", "t_b1_ms", "t_b2_ms"))
    return _finite(t_a) and _finite(b1) and _finite(b2) and t_a > max(b1, b2)


def _training_point(row: Mapping[str, Any], lo: float, hi: float, target: str, split: float) -> float:
    """The latency a row trains on: ``T_c - a * T_b1 - (1 - a) * T_b2`` (``a``: padding
    split) clipped into its interval ``[lo, hi]`` (already clipped at 0); the midpoint for
    ``a = 0.5``, for single-layer targets and for rows without ``T_c``, ``T_b1``, ``T_b2``."""
    mid = (lo + hi) / 2.0
    if target != "lum" or split == 0.5:
        return mid
    t_c, b1, b2 = (row.get(k, float("nan")) for k in ("t_padded_ms", "t_b1_ms", "t_b2_ms"))
    if not all(_finite(v) for v in (t_c, b1, b2)):
        return mid
    return min(max(t_c - split * b1 - (1.0 - split) * b2, lo), hi)


def prepare_training_data(rows: Iterable[Mapping[str, Any]], target: str = "lum", elem_bytes: int = 4,
                          padding_split_by_type: Mapping[str, float] | None = None,
                          calibration_rows: int = 0) -> tuple[dict[str, TrainingData], dict[str, Any]]:
    """Group benchmark rows by type into arrays; returns ``(data_by_type, skipped_report)``.

    ``padding_split_by_type`` (``TrainingOptions.padding_split_by_type``) sets the smart-padding
    rows' training point (``TrainingData.mid``, see :func:`_training_point`) of the types it
    names (the others: the midpoint, a split of 0.5); the intervals ``lo``/``hi`` do not depend on it.
    ``calibration_rows`` > 0 marks the rows at or after that position in ``rows`` as training
    only (``TrainingData.calibrate``)."""
    by_type = dict(padding_split_by_type or {})
    if target not in TARGETS:
        raise ModelError(f"unknown training target {target!r}; known: {', '.join(TARGETS)}")
    acc: dict[str, dict[str, list]] = {}
    skipped: dict[str, int] = {}
    ops_mismatch = 0

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    for i, row in enumerate(rows):
        t = row.get("layer_type")
        if t not in SPECS:
            skip(f"unknown layer type {t!r}")
            continue
        if t == LayerType.OTHER:  # unrelated operators share this type: never modelled, always fallback
            skip("other: never modelled")
            continue
        iv = _interval(row, target)
        if iv is None:
            skip(f"{t}: no {target} time")
            continue
        params = bench_params(t, row["params"])  # the LUM's default activation written out
        try:
            c = describe(t, params, elem_bytes=elem_bytes)
        except LayerSpecError as e:
            skip(f"{t}: invalid params ({e})")
            continue
        if target == "lum" and eq4_failed(row, iv, c.features.get("params", 0)):
            skip(f"{t}: Eq. 4 lost the layer (T_LUM at or below 0 or its padded model's noise although it alone "
                 "outlasts its padding pair)")
            continue
        stored = row.get("ops", float("nan"))
        if math.isfinite(stored) and abs(stored - c.ops) > 1e-6 * max(c.ops, 1.0):
            ops_mismatch += 1
        a = acc.setdefault(t, {"X": [], "ops": [], "bytes": [], "lo": [], "hi": [], "mid": [], "params": [],
                               "cal": [], "noise": []})
        a["cal"].append(calibration_rows <= 0 or i < calibration_rows)
        a["X"].append(feature_vector(t, c.features))
        a["ops"].append(float(c.ops))
        a["bytes"].append(float(c.bytes))
        a["lo"].append(iv[0])
        a["hi"].append(iv[1])
        a["mid"].append(_training_point(row, iv[0], iv[1], target, by_type.get(t, 0.5)))
        a["noise"].append(_noise(row) if target == "lum" else 0.0)
        a["params"].append(params)
    out: dict[str, TrainingData] = {}
    for t, a in acc.items():
        lo, hi = np.asarray(a["lo"]), np.asarray(a["hi"])
        cal = np.asarray(a["cal"], dtype=bool)
        noise = np.asarray(a["noise"], dtype=float)
        out[t] = TrainingData(t, np.asarray(a["X"], dtype=float), np.asarray(a["ops"]), np.asarray(a["bytes"]),
                              lo, hi, np.asarray(a["mid"], dtype=float), a["params"], None if cal.all() else cal,
                              noise if np.any(noise > 0) else None)
    report = {"skipped": skipped, "ops_mismatch": ops_mismatch}
    return out, report


def training_data(rows: Iterable[Mapping[str, Any]], target: str, elem_bytes: int, options: TrainingOptions
                  ) -> tuple[dict[str, TrainingData], dict[str, Any]]:
    """:func:`prepare_training_data` with the options that shape training rows taken from
    ``options`` (padding splits, calibration rows): what :func:`train_models` trains on."""
    return prepare_training_data(rows, target, elem_bytes, padding_split_by_type=dict(options.padding_split_by_type),
                                 calibration_rows=options.calibration_rows)


# ------------------------------------------------------------------- type models


def grid_rows(n: int, options: TrainingOptions) -> int:
    """How many of a type's ``n`` rows (the first ones, in the measurements' order) its
    hyperparameter grid search sees: the largest checkpoint ``c <= n`` of the series
    ``c_0 = min_rows``, ``c_{k+1} = max(c_k + 1, floor(c_k * grid_growth))`` (20, 25, 31, 38,
    47, ... for the defaults); ``n`` itself below ``min_rows`` or with ``grid_growth`` 1."""
    g = options.grid_growth
    if g <= 1.0 or n <= options.min_rows:
        return n
    c = options.min_rows
    while True:
        nxt = max(c + 1, int(math.floor(c * g)))
        if nxt > n:
            return c
        c = nxt


def grid_data(data: TrainingData, options: TrainingOptions) -> TrainingData:
    """The rows a type's grid search sees (:func:`grid_rows`; all of them if those first
    rows have no positive latency)."""
    head = data.head(grid_rows(data.X.shape[0], options))
    return head if np.any(head.mid > 0) else data


def _rmspe(pred: np.ndarray, true: np.ndarray) -> float:
    m = true > 0
    if not m.any():
        return float("nan")
    return float(np.sqrt(np.mean(((pred[m] - true[m]) / true[m]) ** 2)))


def _within(pred: np.ndarray, true: np.ndarray, tol: float = 0.10) -> float:
    m = true > 0
    if not m.any():
        return float("nan")
    return float(np.mean(np.abs(pred[m] - true[m]) / true[m] <= tol))


def _forest(n_estimators: int, max_features: float, min_samples_leaf: int, seed: int, n_jobs: int):
    from sklearn.ensemble import RandomForestRegressor  # noqa: PLC0415

    return RandomForestRegressor(n_estimators=n_estimators, max_features=max_features,
                                 min_samples_leaf=min_samples_leaf, bootstrap=True, oob_score=True,
                                 random_state=seed, n_jobs=n_jobs)


#: Features a type's model leaves out when every row has the same value: ``act`` and
#: ``graph_input`` (below), ``cold`` (fc, conv2d), set only on rows a profile took from a
#: cache-flushed environment (``bench profile --cold-from``), and ``c_shared`` (concat),
#: set only on rows measured with shared inputs (``bench run --context concat-shared``), and
#: ``const_b`` (add, mul) and ``batchnorm`` (mul), set only on rows measured with a constant
#: operand (``bench run --context const-operand``).
OPTIONAL_FEATURES = ("act", "graph_input", "cold", "c_shared", "const_b", "batchnorm")
#: Of those, the ones that change the operation itself (a constant second operand, a batch
#: normalisation's scale and shift, concatenation inputs shared with other consumers): a layer
#: whose value differs from the one every row of its type held is outside the benchmarked
#: design space (reason ``unbenchmarked:<feature>``), not silently predicted as the rows'
#: operation. ``act`` is left out on purpose (see :func:`_model_features`), ``graph_input``
#: because a profile without such rows measured its stems padded as documented, and
#: ``cold`` because the estimator sets it only where its type learnt it.
FLAGGED_WHEN_FIXED = ("const_b", "batchnorm", "c_shared")


def _model_features(layer_type: str, X: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    """The features a type's model uses, and those columns of ``X``: the vocabulary's,
    less ``act`` where the benchmark held the fused activation fixed (a profile measured
    with one activation per type then treats every activation its fusion rules fold as
    that one, instead of flagging them all out of range), ``graph_input`` (conv2d)
    where no row read the network's input, ``cold`` where no row was measured cold,
    ``c_shared`` (concat) where no row had a shared input, and ``const_b``/``batchnorm``
    (add, mul) where no row had a constant operand."""
    names = feature_names(layer_type)
    keep = [j for j, f in enumerate(names) if f not in OPTIONAL_FEATURES or (X.size and np.ptp(X[:, j]) > 0)]
    return tuple(names[j] for j in keep), X[:, keep]


def _fixed_features(layer_type: str, X: np.ndarray) -> dict[str, float]:
    """The :data:`FLAGGED_WHEN_FIXED` features :func:`_model_features` leaves out, with the
    one value every row has."""
    names = feature_names(layer_type)
    if not X.size:
        return {}
    return {f: float(X[0, j]) for j, f in enumerate(names) if f in FLAGGED_WHEN_FIXED and np.ptp(X[:, j]) == 0}


@dataclass
class ReferenceModel:
    """The scikit-learn and crepes objects of one layer type: what the reference path
    (``fast=False``) evaluates. Kept in the cache's pickle, loaded only when asked for."""

    forest: Any  # sklearn RandomForestRegressor
    var_de: Any  # crepes DifficultyEstimator (variance, oob)
    knn_de: Any  # crepes DifficultyEstimator (k-NN, oob / leave-one-out)
    regressors: dict[str, Any]  # metric -> crepes ConformalRegressor


@dataclass
class ReferenceParts:
    """Every type's :class:`ReferenceModel` of one model set (the cache's pickle)."""

    cache_key: str
    types: dict[str, ReferenceModel]


@dataclass
class TypeModel:
    """One layer type's model: its numbers and k-NN arrays (plain data, what the model cache
    stores as arrays; the flattened forest is in :attr:`DeviceModels.forests`), and its
    scikit-learn forest and crepes objects (:attr:`reference`, loaded when first asked for)."""

    layer_type: str
    feature_names: tuple[str, ...]
    n_rows: int
    t_scale: float  # ms per op that the forest's target is divided by
    hyperparams: dict[str, Any]
    grid: list[dict[str, Any]]
    betas: dict[str, float]  # difficulty floors (see estimator.conformal.sigmas)
    knn: FastKNN  # the k-NN difficulty's training matrix and scaling
    knn_threshold: float
    feat_min: np.ndarray
    feat_max: np.ndarray
    families: dict[str, Family]
    report: dict[str, Any]
    #: the ReferenceModel, or a function that loads it (called once, when first needed)
    reference_source: Any = field(default=None, repr=False, compare=False)
    #: feature -> the one value every row held (:func:`_fixed_features`)
    fixed: dict[str, float] = field(default_factory=dict)

    def unbenchmarked(self, features: Mapping[str, float]) -> list[str]:
        """``unbenchmarked:<feature>`` for each :attr:`fixed` feature of which ``features`` (a
        layer's) has another value than every row had."""
        return [f"unbenchmarked:{f}" for f, v in self.fixed.items() if float(features.get(f, 0.0)) != v]

    @property
    def reference(self) -> ReferenceModel:
        src = self.reference_source
        if not isinstance(src, ReferenceModel):
            if src is None:
                raise ModelError(f"{self.layer_type}: no reference model (scikit-learn/crepes objects)")
            src = self.reference_source = src()
        return src

    forest = property(lambda self: self.reference.forest, doc="scikit-learn's forest (reference path)")
    var_de = property(lambda self: self.reference.var_de, doc="crepes' variance difficulty estimator")
    knn_de = property(lambda self: self.reference.knn_de, doc="crepes' k-NN difficulty estimator")
    regressors = property(lambda self: self.reference.regressors, doc="metric -> crepes ConformalRegressor")

    _SCALARS = ("feature_names", "n_rows", "t_scale", "hyperparams", "grid", "betas", "knn_threshold", "report",
                "fixed")

    def arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(JSON-ready numbers, plain arrays)`` for the model cache (:meth:`from_arrays`)."""
        p = f"type.{self.layer_type}."
        meta = {k: getattr(self, k) for k in self._SCALARS}
        meta["feature_names"] = list(self.feature_names)
        meta["families"] = {m: [f.kind, f.name] for m, f in self.families.items()}
        arr = {p + "feat_min": self.feat_min, p + "feat_max": self.feat_max, **self.knn.arrays(p + "knn.")}
        arr.update({f"{p}scores.{m}": f.scores for m, f in self.families.items()})
        return meta, arr

    @classmethod
    def from_arrays(cls, t: str, meta: Mapping[str, Any], a: Mapping[str, np.ndarray],
                    reference_source: Any) -> "TypeModel":
        p = f"type.{t}."
        kw = {k: meta[k] for k in cls._SCALARS}
        kw["feature_names"] = tuple(meta["feature_names"])
        fams = {m: Family(kind, a[f"{p}scores.{m}"], name=name) for m, (kind, name) in meta["families"].items()}
        return cls(layer_type=t, knn=FastKNN.from_arrays(a, p + "knn."), feat_min=a[p + "feat_min"],
                   feat_max=a[p + "feat_max"], families=fams, reference_source=reference_source, **kw)

    # -- training
    @staticmethod
    def _targets(data: TrainingData, options: TrainingOptions
                 ) -> tuple[tuple[str, ...], np.ndarray, float, np.ndarray, np.ndarray]:
        """``(feature names, X, t_scale, y, y_fit)``: the model's features, the target
        ``y = t_op / t_scale`` and what the forest fits, ``log(y)``."""
        t = data.layer_type
        names, X = _model_features(t, data.X)
        ops = data.ops
        t_op = data.mid / ops
        measured = data.measured
        if not measured.any():
            raise ModelError(f"{t}: no positive measured latency")
        t_scale = float(np.median(t_op[measured]))
        y = t_op / t_scale
        # rows that measured no latency (at or below 0 ms or their padded model's noise) train
        # on half the type's smallest measured latency
        floor_ms = 0.5 * float(data.mid[measured].min())
        y_fit = np.log(np.where(measured, np.maximum(data.mid, floor_ms), floor_ms) / ops / t_scale)
        return names, X, t_scale, y, y_fit

    @classmethod
    def grid_search(cls, data: TrainingData, options: TrainingOptions, n_jobs: int = 1) -> list[dict[str, Any]]:
        """The out-of-bag RMSPE of ``t_op`` of every grid cell (``grid_estimators`` trees),
        fitted on all of ``data`` (:meth:`fit` passes the first :func:`grid_rows`), scored on
        the rows that measured a latency (:attr:`TrainingData.measured`): a relative error
        against a row within its noise is that noise over ~0."""
        _, X, _, y, y_fit = cls._targets(data, options)
        ok = data.measured
        grid: list[dict[str, Any]] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Some inputs do not have OOB scores"
            for mf in options.grid_max_features:
                for msl in options.grid_min_samples_leaf:
                    rf = _forest(options.grid_estimators, mf, msl, options.seed, n_jobs).fit(X, y_fit)
                    oob = np.exp(rf.oob_prediction_)
                    score = _rmspe(oob[ok], y[ok])
                    if not math.isfinite(score):
                        score = float(np.sqrt(np.nanmean((oob[ok] - y[ok]) ** 2)))
                    grid.append({"max_features": mf, "min_samples_leaf": msl, "oob_rmspe": score,
                                 "rows": int(X.shape[0])})
        return grid

    @staticmethod
    def best_cell(grid: Sequence[Mapping[str, Any]]) -> tuple[float, int]:
        """``(max_features, min_samples_leaf)`` of the grid's lowest score (the first on ties)."""
        best: tuple[float, float, int] | None = None
        for g in grid:
            if best is None or g["oob_rmspe"] < best[0] - 1e-12:
                best = (g["oob_rmspe"], float(g["max_features"]), int(g["min_samples_leaf"]))
        if best is None:
            raise ModelError("empty hyperparameter grid")
        return best[1], best[2]

    @classmethod
    def fit(cls, data: TrainingData, options: TrainingOptions, n_jobs: int = 1,
            grid: Sequence[Mapping[str, Any]] | None = None) -> "TypeModel":
        """Train one type's model. The hyperparameters are the best cell of ``grid``, by default
        :meth:`grid_search` over the type's first :func:`grid_rows` rows; a ``grid`` given (the
        cached search of those rows) skips the search and gives the same model."""
        from crepes import ConformalRegressor  # noqa: PLC0415
        from crepes.extras import DifficultyEstimator  # noqa: PLC0415

        t = data.layer_type
        n = data.X.shape[0]
        if grid is None:
            grid = cls.grid_search(grid_data(data, options), options, n_jobs)
        grid = [dict(g) for g in grid]
        mf, msl = cls.best_cell(grid)
        names, X, t_scale, y, y_fit = cls._targets(data, options)
        ops = data.ops

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Some inputs do not have OOB scores"
            forest = _forest(options.n_estimators, mf, msl, options.seed, n_jobs).fit(X, y_fit)
        oob_log = np.asarray(forest.oob_prediction_, dtype=float)
        oob = np.exp(oob_log)
        if not np.all(np.isfinite(oob)):
            raise ModelError(f"{t}: some rows have no out-of-bag prediction; raise n_estimators")

        # difficulty estimators (crepes), out-of-bag. The spread of the trees' t_op
        # predictions: t_op_hat times the standard deviation of the trees' log predictions
        # (delta method).
        var_de = DifficultyEstimator().fit(X, learner=forest, scaler=False, beta=0.0, oob=True)
        rel_sd = np.sqrt(np.maximum(np.asarray(var_de.apply(), dtype=float), 0.0))
        sd_ms = rel_sd * oob * t_scale * ops
        cal = data.calibration_mask()  # the rows that calibrate (the plan's; see the module docstring)
        beta_tv = options.beta_rel * float(np.median(rel_sd[cal])) or options.beta_rel * 1e-3
        beta_lv = options.beta_rel * float(np.median(sd_ms[cal])) or max(
            options.beta_rel * 1e-3 * float(np.median(data.mid[cal])), 1e-9)
        k = max(1, min(options.knn_k, n - 1))
        knn_de = DifficultyEstimator().fit(X, k=k, scaler=False, beta=0.0, oob=True)
        knn_de.nn_scaler.clip = False  # keep growing outside the benchmarked range (see docstring)
        # crepes uses n_jobs=-1: a thread pool per query costs ~10 ms. A k-d tree always (scikit-
        # learn's "auto" turns to brute force above 15 features, whose expanded distance
        # formula differs from the direct one in the last bits, and so from the fast path)
        knn_de.nn.set_params(n_jobs=1, algorithm="kd_tree").fit(knn_de.nn._fit_X)
        d_loo = np.asarray(knn_de.apply(), dtype=float)
        beta_o = max(options.knn_beta_rel * float(np.median(d_loo[cal])),
                     options.knn_beta_rel * float(np.mean(d_loo[cal])), 1e-9)
        betas = {"CM_TV": beta_tv, "CM_LV": beta_lv, "CM_O": beta_o}
        sig = sigmas(betas, oob, rel_sd, d_loo, t_scale, ops)

        # factor residual at the training point (floored as the forest's target; see the module
        # docstring): max(y / y_hat, y_hat / y) - 1, the same for t_op and for latency
        r_fac = np.expm1(np.abs(y_fit - oob_log))
        # a row timed at or below 0 ms or its padded model's noise (its whole Eq. 4 interval)
        # measured no latency: it trains the forest at the floor but has no log residual to
        # score (see the module docstring)
        scored = cal & data.resolved
        if scored.sum() < 2:
            scored = cal
        regressors = {m: ConformalRegressor().fit(r_fac[scored], sigmas=sig[m][scored]) for m in METRICS}
        families = {m: Family("log", np.asarray(cr.alphas, dtype=float), name=f"{t}:{m}")
                    for m, cr in regressors.items()}

        ref = ReferenceModel(forest, var_de, knn_de, regressors)
        model = cls(t, names, n, t_scale,
                    {"max_features": mf, "min_samples_leaf": msl, "n_estimators": options.n_estimators},
                    grid, betas, FastKNN.from_estimator(knn_de), float(d_loo.max()),
                    X.min(axis=0), X.max(axis=0), families, {}, ref, _fixed_features(t, data.X))
        model.report = model._oob_report(data, oob, sig)
        model.report["grid_rows"] = int(grid[0].get("rows", n))
        return model

    def _oob_report(self, data: TrainingData, oob: np.ndarray, sigmas: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Out-of-bag metrics (latency RMSPE, share within +-10 %, calibration coverage) over the
        rows that measured a latency: a row at the floor has no factor to err by or to cover."""
        ops, s = data.ops, self.t_scale
        pred_ms = oob * s * ops
        ok = data.measured
        rep: dict[str, Any] = {
            "n_rows": self.n_rows,
            # rows at or below 0 ms or their padded model's spread: at the floor, unscored
            "no_latency_rows": int((~data.resolved).sum()),
            "hyperparams": dict(self.hyperparams),
            "oob_rmspe": _rmspe(pred_ms[ok], data.mid[ok]),
            "oob_within_10pct": _within(pred_ms[ok], data.mid[ok]),
            "median_interval_rel_width": float(np.median((data.hi - data.lo) / np.maximum(data.mid, 1e-300))),
            "coverage": {},
        }
        for c in (0.9,):
            cov: dict[str, float] = {}
            for m in METRICS:  # each interval against the row's training point (see the module docstring)
                f = 1.0 + self.regressors[m].predict_int(np.zeros_like(pred_ms), sigmas=sigmas[m], confidence=c)[:, 1]
                inside = (pred_ms / f <= data.mid * (1 + 1e-12)) & (data.mid <= pred_ms * f * (1 + 1e-12))
                cov[m] = float(np.mean(inside[ok]))
            rep["coverage"][str(c)] = cov
        return rep

    # -- prediction
    def predict(self, X: np.ndarray, ops: np.ndarray) -> dict[str, Any]:
        """Batch prediction for ``m`` layers of this type, through scikit-learn's public API
        (the reference path): the forest's ``predict`` for the point estimate, every tree's
        ``predict`` for their spread (what crepes' variance difficulty estimator computes)."""
        X = np.asarray(X, dtype=float)
        mean = self.forest.predict(X)
        sd = np.sqrt(np.var([est.predict(X) for est in self.forest.estimators_], axis=0))
        p = np.exp(mean)
        rel_sd = sd
        d_knn = np.asarray(self.knn_de.apply(X), dtype=float)
        sig = sigmas(self.betas, p, rel_sd, d_knn, self.t_scale, ops)
        t_op_ms = p * self.t_scale
        pred_ms = t_op_ms * ops
        below, above = X < self.feat_min, X > self.feat_max
        reasons: list[list[str]] = []
        for i in range(X.shape[0]):
            r = [f"range:{self.feature_names[j]}" for j in np.flatnonzero(below[i] | above[i])]
            if d_knn[i] > self.knn_threshold * (1 + 1e-9):
                r.append("knn")
            reasons.append(r)
        return {
            "t_op_ms": t_op_ms,
            "pred_ms": pred_ms,
            "sigmas": sig,
            "knn_distance": d_knn,
            "reasons": reasons,
            "dist": {m: (pred_ms, sig[m]) for m in METRICS},
        }


    def crepes_intervals(self, metric: str, center: np.ndarray, scale: np.ndarray,
                         confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """Per-layer ``confidence`` intervals from crepes' ``ConformalRegressor.predict_int``:
        its half-width ``q * scale`` around 0 is the factor ``1 + q * scale`` below and above
        ``center`` (the reference path; :func:`estimator.aggregate.layer_intervals` computes the
        same vectorised). ``center``/``scale``: this type's rows of the metric's
        :class:`~estimator.aggregate.DistBatch`. Where crepes cannot bound the value with the
        calibration set (infinite interval), the largest score is used, as in
        :mod:`estimator.aggregate`."""
        cr = self.regressors[metric]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "too few calibration examples": handled below
            half = cr.predict_int(np.zeros_like(center), sigmas=scale, confidence=confidence)[:, 1]
        half = np.where(np.isinf(half), float(np.max(cr.alphas)) * scale, half)
        return center / (1.0 + half), center * (1.0 + half)


# ---------------------------------------------------------------------- fallback


@dataclass
class FallbackModel:
    """Roofline over the whole profile for layer types without a model (see docstring)."""

    peak_ops_per_ms: float
    peak_bytes_per_ms: float
    overhead_ms: float
    median_ratio: float
    lam: float
    n_rows: int
    families: dict[str, Family]

    @classmethod
    def fit(cls, data: Mapping[str, TrainingData], options: TrainingOptions) -> "FallbackModel":
        ops = np.concatenate([d.ops for d in data.values()]) if data else np.zeros(0)
        byt = np.concatenate([d.bytes for d in data.values()]) if data else np.zeros(0)
        t = np.concatenate([d.mid for d in data.values()]) if data else np.zeros(0)
        ok = np.concatenate([d.measured for d in data.values()]) if data else np.zeros(0, dtype=bool)
        if ok.sum() < 2:
            raise ModelError("the profile has fewer than 2 usable measurements with a positive latency; "
                             "no model (not even the roofline fallback) can be fitted")
        ops, byt, t = ops[ok], byt[ok], t[ok]
        q = options.fallback_peak_quantile
        P = float(np.quantile(ops / t, q))
        B = float(np.quantile(byt / t, q))
        roof = np.maximum(ops / P, byt / B)

        def spread(t0: float) -> float:
            r = t / (t0 + roof)
            return float(np.quantile(np.abs(np.log(r / np.median(r))), 0.9))

        t0 = min((float(np.quantile(t, q)) for q in (0.005, 0.01, 0.02, 0.05, 0.1)), key=spread)
        R = t / (t0 + roof)
        m = float(np.median(R))
        # CM_O: log-symmetric around the point estimate, log-width lam x that of the ratios
        dev = np.abs(np.log(R / m))
        sym = np.sort(np.concatenate([-dev, dev]))
        d90 = min(sym[conformal_index(sym.size, 0.95)], -sym[conformal_index(sym.size, 0.05)])
        f_min = options.fallback_o_min_factor
        if d90 > 0:
            lam = max(2.0, math.log(f_min) / d90)
            fam_o = m * np.exp(lam * sym)
        else:  # (nearly) all ratios equal: give CM_O its minimum factor explicitly
            lam = float("inf")
            fam_o = m * np.array([1.0 / f_min, 1.0, f_min])
        families = {
            "CM_TV": Family("mult", R, name="fallback:CM_TV"),
            "CM_LV": Family("mult", R, name="fallback:CM_LV"),
            "CM_O": Family("mult", fam_o, name="fallback:CM_O"),
        }
        return cls(P, B, t0, m, lam, int(ok.sum()), families)

    def roofline_ms(self, ops: np.ndarray, byt: np.ndarray) -> np.ndarray:
        return np.maximum(np.asarray(ops, float) / self.peak_ops_per_ms, np.asarray(byt, float) / self.peak_bytes_per_ms)

    def predict(self, ops: np.ndarray, byt: np.ndarray) -> dict[str, Any]:
        base = self.overhead_ms + self.roofline_ms(ops, byt)
        pred = base * self.median_ratio
        return {"pred_ms": pred, "base_ms": base,
                "dist": {m: (pred, base) for m in METRICS}}

    def arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(JSON-ready numbers, plain arrays)`` for the model cache (:meth:`from_arrays`)."""
        meta = {k: getattr(self, k) for k in ("peak_ops_per_ms", "peak_bytes_per_ms", "overhead_ms", "median_ratio",
                                              "lam", "n_rows")}
        meta["families"] = {m: [f.kind, f.name] for m, f in self.families.items()}
        return meta, {f"fallback.scores.{m}": f.scores for m, f in self.families.items()}

    @classmethod
    def from_arrays(cls, meta: Mapping[str, Any], a: Mapping[str, np.ndarray]) -> "FallbackModel":
        fams = {m: Family(kind, a[f"fallback.scores.{m}"], name=name) for m, (kind, name) in meta["families"].items()}
        return cls(meta["peak_ops_per_ms"], meta["peak_bytes_per_ms"], meta["overhead_ms"], meta["median_ratio"],
                   meta["lam"], meta["n_rows"], fams)

    def describe(self) -> dict[str, Any]:
        return {"peak_gops_per_s": self.peak_ops_per_ms / 1e6, "peak_gbytes_per_s": self.peak_bytes_per_ms / 1e6,
                "overhead_us": 1e3 * self.overhead_ms, "median_ratio": self.median_ratio, "cm_o_log_width_factor": self.lam, "n_rows": self.n_rows}


# ---------------------------------------------------------------- device models


@dataclass
class DeviceModels:
    """Everything trained from one profile (what the cache stores: :meth:`arrays` as an
    ``.npz``, the scikit-learn and crepes objects as a pickle read when first needed)."""

    cache_key: str
    profile_name: str
    target: str
    options: TrainingOptions
    elem_bytes: int
    types: dict[str, TypeModel]
    fallback: FallbackModel
    data_hash: str
    versions: dict[str, str]
    code_version: str
    report: dict[str, Any]
    forests: FlatForests  # every type's trees, flattened (the fast path walks these)
    #: type -> the key of its entry in the model cache (empty when trained without the cache)
    type_keys: dict[str, str] = field(default_factory=dict)
    loaded_from_cache: bool = False

    #: version of the array layout (:meth:`arrays`); another one is a cache miss
    ARRAY_FORMAT = 2

    def arrays(self) -> dict[str, np.ndarray]:
        """The model set as plain arrays (numbers and report as JSON in ``meta``), no objects."""
        types_meta, arr = {}, {}
        for t, m in sorted(self.types.items()):
            types_meta[t], a = m.arrays()
            arr.update(a)
        fb_meta, a = self.fallback.arrays()
        arr.update(a)
        arr.update(self.forests.arrays())
        meta = {"format": self.ARRAY_FORMAT, "cache_key": self.cache_key, "profile_name": self.profile_name,
                "target": self.target, "options": self.options.to_dict(), "elem_bytes": self.elem_bytes,
                "data_hash": self.data_hash, "versions": self.versions, "code_version": self.code_version,
                "report": self.report, "types": types_meta, "fallback": fb_meta, "type_keys": self.type_keys}
        arr["meta"] = np.frombuffer(json.dumps(meta, default=_json_default).encode(), dtype=np.uint8)
        return arr

    @classmethod
    def from_arrays(cls, a: Mapping[str, np.ndarray],
                    reference: Callable[[str, "DeviceModels"], ReferenceModel]) -> "DeviceModels":
        """The inverse of :meth:`arrays`; ``reference(type, models)`` gives a type's
        scikit-learn/crepes objects (called once per type, when the reference path first
        needs them)."""
        meta = json.loads(a["meta"].tobytes())
        if meta.get("format") != cls.ARRAY_FORMAT:
            raise ValueError(f"array format {meta.get('format')!r}, expected {cls.ARRAY_FORMAT}")
        types = {t: TypeModel.from_arrays(t, m, a, None) for t, m in meta["types"].items()}
        out = cls(meta["cache_key"], meta["profile_name"], meta["target"], TrainingOptions.from_dict(meta["options"]),
                  meta["elem_bytes"], types, FallbackModel.from_arrays(meta["fallback"], a), meta["data_hash"],
                  meta["versions"], meta["code_version"], meta["report"], FlatForests.from_arrays(a),
                  dict(meta["type_keys"]))
        for t, m in types.items():
            m.reference_source = _Once(partial(reference, t, out))
        return out

    def reference_parts(self) -> ReferenceParts:
        return ReferenceParts(self.cache_key, {t: m.reference for t, m in self.types.items()})

    @property
    def modelled_types(self) -> list[str]:
        return sorted(self.types)

    def design_space(self) -> dict[str, Any]:
        """Per modelled type: rows and benchmarked feature ranges (for ListDevices)."""
        return {t: {"n_rows": m.n_rows,
                    "features": {f: [float(lo), float(hi)] for f, lo, hi in zip(m.feature_names, m.feat_min, m.feat_max)}}
                for t, m in sorted(self.types.items())}

    def _layer_bytes(self, layer: Layer) -> float:
        if self.elem_bytes == 4:
            return float(layer.bytes)
        try:
            return float(describe(layer.type, layer.params, elem_bytes=self.elem_bytes).bytes)
        except LayerSpecError:
            return float(layer.bytes) * self.elem_bytes / 4.0

    def crepes_layer_intervals(self, layers: Sequence[Layer], dist: DistBatch, metric: str,
                               confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """Per-layer intervals of one metric on the reference path: crepes' ``predict_int``
        per modelled type (:meth:`TypeModel.crepes_intervals`), the fallback's predictive
        distribution (:func:`~estimator.aggregate.layer_intervals`) for the other layers."""
        lo, hi = np.empty(len(layers)), np.empty(len(layers))
        by_type: dict[str, list[int]] = {}
        for i, l in enumerate(layers):
            by_type.setdefault(l.type, []).append(i)
        for t, idx_list in by_type.items():
            idx = np.asarray(idx_list, dtype=np.int64)
            model = self.types.get(t)
            if model is None:
                lo[idx], hi[idx] = layer_intervals(dist.take(idx), confidence)
            else:
                lo[idx], hi[idx] = model.crepes_intervals(metric, dist.center[idx], dist.scale[idx], confidence)
        return lo, hi

    def predict_layers(self, layers: Sequence[Layer]) -> BatchPrediction:
        """Predict all layers, batching each type into one model call (the reference path;
        :class:`estimator.fastpath.FastModels` gives the same numbers faster)."""
        N = len(layers)
        pred = np.zeros(N)
        t_op = np.full(N, np.nan)
        knn = np.full(N, np.nan)
        ops = np.array([max(float(l.ops), 1.0) for l in layers]) if N else np.zeros(0)
        fb = np.zeros(N, dtype=bool)
        reasons: list[list[str]] = [[] for _ in range(N)]
        by_type: dict[str, list[int]] = {}
        for i, l in enumerate(layers):
            by_type.setdefault(l.type, []).append(i)
            n = l.params.get("n", 1) if isinstance(l.params, Mapping) else 1
            try:
                if int(n) > 1:
                    reasons[i].append("batch")
            except (TypeError, ValueError):
                pass
        parts: dict[str, list[DistBatch]] = {m: [] for m in METRICS}
        order: list[np.ndarray] = []
        for t, idx_list in sorted(by_type.items()):
            idx = np.asarray(idx_list, dtype=np.int64)
            model = self.types.get(t)
            if model is not None:
                X = np.array([[layers[i].features[f] for f in model.feature_names] for i in idx], dtype=float)
                out = model.predict(X, ops[idx])
                t_op[idx] = out["t_op_ms"]
                knn[idx] = out["knn_distance"]
                for j, i in enumerate(idx):
                    reasons[i].extend(out["reasons"][j])
                    if model.fixed:
                        reasons[i].extend(model.unbenchmarked(layers[i].features))
                fams = model.families
            else:
                byt = np.array([self._layer_bytes(layers[i]) for i in idx])
                out = self.fallback.predict(ops[idx], byt)
                fb[idx] = True
                for i in idx:
                    reasons[i].insert(0, "no_data")
                fams = self.fallback.families
            pred[idx] = out["pred_ms"]
            for m in METRICS:
                c, s = out["dist"][m]
                parts[m].append(DistBatch(c, s, np.zeros(idx.size, dtype=np.int64), [fams[m]]))
            order.append(idx)
        dists: dict[str, DistBatch] = {}
        if order:
            perm = np.concatenate(order)
            inv = np.empty_like(perm)
            inv[perm] = np.arange(perm.size)
            for m in METRICS:
                dists[m] = DistBatch.concat(parts[m]).take(inv)
        else:
            for m in METRICS:
                dists[m] = DistBatch.concat([])
        ood = np.array([bool(r) for r in reasons], dtype=bool)
        return BatchPrediction(pred, t_op, ops, fb, ood, reasons, dists, knn)


# ------------------------------------------------------------------ train / cache


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class _Once:
    """Calls ``load`` once, when first called (thread-safe); returns its result after that."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._value: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._load()
        return self._value


class _TypeCache:
    """The per-type entries of the model cache (:mod:`estimator.cache`) for one training run:
    a type's trained model, keyed by its training rows, and its grid search, keyed by the
    rows the search saw (:func:`grid_rows`). ``read=False`` (a forced retrain) writes
    entries but never reads one."""

    def __init__(self, root: Path | None, *, target: str, precision: str, options: TrainingOptions,
                 read: bool = True) -> None:
        self.root, self.options, self.read = root, options, read
        self.spec = {"options": options.to_dict(), "target": target, "precision": precision}
        self.reused: list[str] = []  # types whose model came from the cache
        self.grid_reused: list[str] = []  # types retrained with a cached grid search

    def _key(self, part: str, digest: str) -> str:
        from . import cache  # noqa: PLC0415

        return cache.cache_key(digest, {"part": part, **self.spec}, MODEL_CODE_VERSION)

    def type_key(self, data: TrainingData) -> str:
        return self._key("type", data.digest())

    def get(self, data: TrainingData, n_jobs: int = 1) -> tuple[TypeModel, FlatForests, str]:
        """A type's ``(model, flattened forest, cache key)``: from the cache, or trained now
        (with the cached grid search of its first :func:`grid_rows` rows where there is one)
        and stored."""
        from . import cache  # noqa: PLC0415

        t = data.layer_type
        key = self.type_key(data)
        if self.read:
            hit = self.load(key, t, lambda: data)
            if hit is not None:
                self.reused.append(t)
                return (*hit, key)
        gdata = grid_data(data, self.options)
        gkey = self._key("grid", gdata.digest())
        grid = self._load_grid(gkey) if self.read else None
        if grid is None:
            grid = TypeModel.grid_search(gdata, self.options, n_jobs)
            blob = json.dumps({"cache_key": gkey, "layer_type": t, "grid": grid}, default=_json_default).encode()
            cache.store_arrays(gkey, {"meta": np.frombuffer(blob, dtype=np.uint8)}, self.root, "grids")
        else:
            self.grid_reused.append(t)
        model = TypeModel.fit(data, self.options, n_jobs=n_jobs, grid=grid)
        flat = FlatForests.from_forests({t: model.forest})
        self.store(key, model, flat)
        return model, flat, key

    def _load_grid(self, key: str) -> list[dict[str, Any]] | None:
        from . import cache  # noqa: PLC0415

        a = cache.load_arrays(key, self.root, "grids")
        try:
            meta = json.loads(a["meta"].tobytes()) if a is not None else None
            if meta is not None and meta["cache_key"] == key:
                return [dict(g) for g in meta["grid"]]
        except Exception as e:  # a damaged entry is a miss
            warnings.warn(f"ignoring cache entry {key}: {type(e).__name__}: {e}", cache.CacheWarning, stacklevel=2)
        return None

    def store(self, key: str, model: TypeModel, flat: FlatForests) -> None:
        """The type's pickle first, then its arrays (arrays under a key imply its pickle)."""
        from . import cache  # noqa: PLC0415

        t = model.layer_type
        cache.store(key, ReferenceParts(key, {t: model.reference}), self.root, "types")
        meta, arr = model.arrays()
        arr.update(flat.arrays())
        blob = json.dumps({"format": DeviceModels.ARRAY_FORMAT, "cache_key": key, "layer_type": t, "type": meta},
                          default=_json_default).encode()
        arr["meta"] = np.frombuffer(blob, dtype=np.uint8)
        cache.store_arrays(key, arr, self.root, "types")

    def load(self, key: str, t: str, data: Callable[[], TrainingData]) -> tuple[TypeModel, FlatForests] | None:
        """The cached ``(model, flattened forest)`` of type ``t``; its reference objects come
        from the entry's pickle when first asked for (``data()``: the type's rows, to retrain)."""
        from . import cache  # noqa: PLC0415

        a = cache.load_arrays(key, self.root, "types")
        if a is None:
            return None
        try:
            meta = json.loads(a["meta"].tobytes())
            if meta.get("format") != DeviceModels.ARRAY_FORMAT or meta["cache_key"] != key or meta["layer_type"] != t:
                raise ValueError("written under another key or format")
            model = TypeModel.from_arrays(t, meta["type"], a, None)
            flat = FlatForests.from_arrays(a)
        except Exception as e:  # an incompatible or damaged entry is a miss, not a crash
            warnings.warn(f"ignoring cache entry {key}: {type(e).__name__}: {e}", cache.CacheWarning, stacklevel=2)
            return None
        model.reference_source = _Once(partial(self.reference, key, t, data, model.grid))
        return model, flat

    def reference(self, key: str, t: str, data: Callable[[], TrainingData],
                  grid: Sequence[Mapping[str, Any]]) -> ReferenceModel:
        """Type ``t``'s scikit-learn/crepes objects: the entry's pickle, or (gone or refused)
        retrained from ``data()`` with the recorded ``grid`` (the same objects) and stored."""
        from . import cache  # noqa: PLC0415

        parts = cache.load(key, self.root, "types")
        if isinstance(parts, ReferenceParts) and isinstance(parts.types.get(t), ReferenceModel):
            return parts.types[t]
        model = TypeModel.fit(data(), self.options, grid=grid)
        cache.store(key, ReferenceParts(key, {t: model.reference}), self.root, "types")
        return model.reference


def train_models(rows: Iterable[Mapping[str, Any]], *, profile_name: str, precision: str = "fp32",
                 target: str = "lum", options: TrainingOptions | None = None, n_jobs: int = 1,
                 cache_key: str = "", data_hash: str = "",
                 progress: Callable[[str, int, int], None] | None = None,
                 parts: _TypeCache | None = None) -> DeviceModels:
    """Train all type models and the fallback from benchmark rows (deterministic). With
    ``parts`` (:func:`get_models`), each type's model comes from the model cache where its
    rows were trained on before, and is stored there otherwise."""
    from .cache import library_versions  # noqa: PLC0415

    options = options or TrainingOptions()
    eb = elem_bytes_for(precision)
    data, prep = training_data(rows, target, eb, options)
    t0 = time.perf_counter()
    types: dict[str, TypeModel] = {}
    flats: dict[str, FlatForests] = {}
    keys: dict[str, str] = {}
    few: dict[str, int] = {}
    todo = sorted(data)
    for i, t in enumerate(todo):
        if progress:
            progress(t, i, len(todo))
        d = data[t]
        if d.X.shape[0] < options.min_rows or not np.any(d.mid > 0):
            few[t] = int(d.X.shape[0])
            continue
        if parts is None:
            types[t] = TypeModel.fit(d, options, n_jobs=n_jobs)
            flats[t] = FlatForests.from_forests({t: types[t].forest})
        else:
            types[t], flats[t], keys[t] = parts.get(d, n_jobs)
    if progress:
        progress("fallback", len(todo), len(todo))
    fallback = FallbackModel.fit(data, options)  # all rows of all types, but cheap (~15 ms on 24k rows)
    report = {
        "target": target,
        "rows_used": {t: int(d.X.shape[0]) for t, d in data.items()},
        "skipped_rows": prep["skipped"],
        "ops_mismatch_rows": prep["ops_mismatch"],
        "too_few_rows": few,
        "types": {t: m.report for t, m in types.items()},
        "fallback": fallback.describe(),
        "train_seconds": time.perf_counter() - t0,
    }
    if parts is not None:
        report["cached_types"] = sorted(parts.reused)
        report["cached_grid_types"] = sorted(parts.grid_reused)
    forests = FlatForests.concat([flats[t] for t in sorted(types)])
    return DeviceModels(cache_key, profile_name, target, options, eb, types, fallback, data_hash,
                        library_versions(), MODEL_CODE_VERSION, report, forests, keys)


def get_models(profile: Any, *, target: str = "lum", cache_root: Any = None, retrain: bool = False,
               n_jobs: int = 1, options: TrainingOptions | None = None,
               progress: Callable[[str, int, int], None] | None = None) -> DeviceModels:
    """The trained models of a :class:`~estimator.profile.Profile`, from the cache or trained now.

    The model set's cache key covers the measurements' bytes, the training options and
    target, the training code version and the library versions (:mod:`estimator.cache`). A
    hit reads the arrays only; a type's scikit-learn and crepes objects come from its type
    entry's pickle when the reference path first needs them (retrained, deterministically,
    if that is gone). A miss trains only the types whose rows have no type entry
    (:class:`_TypeCache`; see "Incremental retraining" in the module docstring);
    ``retrain=True`` reads no entry at all. The rows that cannot be measurements are left
    out, and listed as ``[line, reason]`` in the report's ``excluded_rows``
    (:meth:`estimator.profile.Profile.rows`).
    """
    from . import cache  # noqa: PLC0415

    if target not in TARGETS:
        raise ModelError(f"unknown training target {target!r}; known: {', '.join(TARGETS)}")
    opts = options or TrainingOptions.from_dict(profile.training)
    data_hash = profile.data_hash()
    key = cache.cache_key(data_hash, {"options": opts.to_dict(), "target": target, "precision": profile.precision},
                          MODEL_CODE_VERSION)
    parts = _TypeCache(cache_root, target=target, precision=profile.precision, options=opts, read=not retrain)

    def train() -> DeviceModels:
        excluded: list[tuple[int, str]] = []
        try:
            models = train_models(profile.rows(excluded), profile_name=profile.name, precision=profile.precision,
                                  target=target, options=opts, n_jobs=n_jobs, cache_key=key, data_hash=data_hash,
                                  progress=progress, parts=parts)
        except ModelError as e:
            if not excluded:
                raise
            raise ModelError(f"{e}; {excluded_message(profile.measurements_path, excluded)}") from e
        models.report["excluded_rows"] = [[line, why] for line, why in excluded]
        cache.store_arrays(key, models.arrays(), cache_root)  # after the type entries it names
        return models

    rows: dict[str, TrainingData] = {}
    lock = threading.Lock()

    def type_rows(t: str) -> TrainingData:  # the profile's rows of type t, read once (to retrain a reference)
        with lock:
            if not rows:
                rows.update(training_data(profile.rows([]), target, elem_bytes_for(profile.precision), opts)[0])
        return rows[t]

    def reference(t: str, models: DeviceModels) -> ReferenceModel:
        return parts.reference(models.type_keys[t], t, partial(type_rows, t), models.types[t].grid)

    if not retrain:
        arrays = cache.load_arrays(key, cache_root)
        if arrays is not None:
            try:
                hit = DeviceModels.from_arrays(arrays, reference)
            except Exception as e:  # an incompatible or damaged entry is a miss, not a crash
                warnings.warn(f"ignoring cache entry {key}: {type(e).__name__}: {e}", cache.CacheWarning, stacklevel=2)
            else:
                if hit.cache_key == key:
                    hit.loaded_from_cache = True
                    return hit
                warnings.warn(f"ignoring cache entry {key}: its content was written under another key",
                              cache.CacheWarning, stacklevel=2)
    return train()
