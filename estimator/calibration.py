"""Network-level calibration: whole networks timed on the target (a profile's ``networks.csv``)
correct the Eq. 7 total and calibrate the network intervals conformally.

1. Bias correction of the Eq. 7 total ``p``, fitted on relative errors. Walking ``none``, then
   :data:`METHODS` simplest first (``scale`` ``a p``, ``scale+constant``, ``scale+per-layer``,
   ``per-type`` ``sum_t a_t p_t``, ``per-kernel`` with convolutions split by kernel window), a method
   is adopted when its cross-validated mean |relative error| is :data:`ADOPT_GAIN` below that of
   every simpler one, ``none`` included: a richer form never wins with a worse cross-validated error
   than a simpler one, and a gain under :data:`ADOPT_GAIN` is not worth a correction's own error (on
   a profile's own machine a 1.035 scale raised the held-out error 5.5 -> 7.9 %). Nor is a gain
   within the rows' noise: paired row by row with the correction it would replace, the gain must be
   :data:`ADOPT_T` standard errors or more. On a shared VM whose rounds moved 20-30 % apart, the
   corrections that passed the 10 % alone but not this (gains of 1.1-1.9 standard errors) raised
   the held-out error in all four runs where they were chosen (docs/results.md). The folds hold out
   whole families (a NAS space, a zoo family, a user file); one family tries only ``scale``,
   leave-one-out. The error decides, not the cross-validated 90 % band: the intervals are calibrated
   conformally on whichever correction is chosen (2.), and a 90 % band of 60 rows rests on its 6
   largest residuals (measured: ``scale`` cross-validated 9.6 % against ``none``'s 12.8 % with a
   band 7 % narrower; ``per-type`` had the narrower band at 37.0 % against ``scale``'s 36.0 %).
   ``per-type``'s factors ``a_t`` are pulled toward the common scale ``s`` by :data:`TYPE_RIDGE` and
   kept within ``[s / TYPE_BOUND, s TYPE_BOUND]``: a type the networks spend time on never costs 0.
   Why it exists: another machine is not off by one factor (the Intel ``host-cpu`` on an AMD VM ran
   conv2d 1.7x, fc 0.3x its estimate).
2. Conformal intervals per metric ``m``: a row's score is ``(|ln(y / yhat)| + d) / (s_m + beta_m)``,
   ``yhat`` the leave-one-out prediction, ``d`` the row's drift (:func:`drift_of`: half the log
   spread of its interleaved rounds, so that the band holds at another moment of the measuring
   window, not only at the rounds' median), ``s_m = ln(1 + h)``, ``h`` the relative half-width of the
   network's Eq. 8 interval at :data:`REFERENCE_CONFIDENCE`, ``beta_m`` the rows' median ``s_m``.
   The interval is ``yhat exp(+-q (s_m + beta_m))``, ``q`` the ``ceil(c (n+1))``-th smallest score
   (the largest, with a warning, if too few rows). With two or more families ``q`` is at least that
   quantile of the leave-family-out scores: a deployed network's family is rarely a calibration family
   (held-out zoo, profile's own VM: 21/26 covered at 18 % width by leave-one-out scores, 25/26 at 21 %).
3. Coverage holds for networks like the calibration networks. One with fallback layers of a type
   no row has, with :data:`UNSEEN_SHARE` or more of its time in a type no row has, farther (L1 over per-type time
   shares) from every row than the rows are from each other, or with a total beyond 2x their range,
   is ``in_scope = False`` and keeps at least its uncalibrated band; a family shifted beyond :data:`FAMILY_SHIFT_WARN` when predicted from
   the others makes :func:`family_warning` warn; under :data:`MIN_NETWORKS` rows, no calibration.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .aggregate import conformal_index

#: a type with at least this share of a network's time that no calibration network has puts
#: the network out of the calibration's scope
UNSEEN_SHARE = 0.01

__all__ = ["MIN_NETWORKS", "REFERENCE_CONFIDENCE", "METHODS", "NO_CORRECTION", "ADOPT_GAIN", "ADOPT_T", "TYPE_RIDGE", "TYPE_BOUND",
           "OTHER_TYPES", "FAMILY_SHIFT_WARN", "UNSEEN_SHARE", "CalibrationRow", "Correction", "NetworkCalibration", "CalibratedTotal",
           "fit_calibration", "fit_correction", "drift_of", "cross_validate", "conformal_quantile", "family_warning", "type_times",
           "GROUP_METHODS", "KERNEL_TYPES", "layer_kind", "by_type"]

#: fewer network rows than this leave a profile uncalibrated (with a warning)
MIN_NETWORKS = 20
#: the Eq. 8 level whose relative half-width measures a network's uncertainty
REFERENCE_CONFIDENCE = 0.9
#: bias corrections, simplest first (see the module docstring)
METHODS = ("scale", "scale+constant", "scale+per-layer", "per-type", "per-kernel")
#: the corrections with one factor per group of layers (a type, or a kind: :func:`layer_kind`)
GROUP_METHODS = ("per-type", "per-kernel")
#: the layer types whose kind (``per-kernel``) carries their kernel window
KERNEL_TYPES = ("conv2d", "dwconv2d")
#: between a kind's type and its kernel window: ``dwconv2d@7x7``
KIND_SEP = "@"
#: no correction at all: the Eq. 7 total stays, only the intervals are calibrated
NO_CORRECTION = "none"
#: a correction is adopted when its cross-validated mean |relative error| is this fraction below that
#: of every simpler one, none included (see the module docstring)
ADOPT_GAIN = 0.10
#: a correction is adopted only when its gain over the correction it would replace, paired row by
#: row, is this many standard errors or more (see the module docstring)
ADOPT_T = 2.0
#: ``per-type``'s pull of each type's scale toward the common one, against the sum of the
#: rows' squared relative residuals (chosen on the Intel ``host-cpu`` profile calibrated on an
#: AMD VM with the default set's 60 rows: 0.01-1 gave leave-family-out bands of 39-58 %, 0.1
#: and 0.3 the narrowest, 0.1 the lower leave-family-out error, 11.1 %)
TYPE_RIDGE = 0.1
#: ``per-type`` / ``per-kernel`` keep each group's factor within ``[s / TYPE_BOUND, s TYPE_BOUND]``
#: of the common scale ``s``. The farthest from it on measured cases: LiteRT on an ONNX Runtime
#: profile, dwconv2d@7x7 12.2 where the networks ran about 1.9x their estimate (47 % uncalibrated
#: error), about 6x; another CPU, fc 0.3x beside conv2d's 1.7x, at most 1/5.7 (``s`` lies between).
#: 8 holds both with room. Unbounded, fc (2-27 % of the default set's time by family) took 0 on
#: another CPU, and matmul (7 % of the hybrid space's) 0.04 on the shipped host-cpu.
TYPE_BOUND = 8.0
#: the type column of ``per-type`` that collects the types no calibration row has
OTHER_TYPES = "*"
#: a family whose leave-family-out median error exceeds this (log units: 20 %) makes the
#: calibration warn that its families disagree (see the module docstring)
FAMILY_SHIFT_WARN = math.log(1.2)
_METRICS = ("CM_TV", "CM_LV", "CM_O")


@dataclass(frozen=True)
class CalibrationRow:
    """One whole network: its measurement and the estimator's uncalibrated view of it."""

    name: str
    family: str
    measured_ms: float
    predicted_ms: float  # Eq. 7 total
    n_layers: int
    #: metric -> relative half-width of the Eq. 8 interval at REFERENCE_CONFIDENCE
    spread: Mapping[str, float]
    #: layer kind (:func:`layer_kind`: the type, with the kernel window for convolutions) ->
    #: share of the predicted total
    shares: Mapping[str, float] = field(default_factory=dict)
    #: how far the target moved while the network was measured: half the log of its round
    #: medians' max / min (:func:`drift_of`); it widens the row's conformal score
    drift: float = 0.0


def drift_of(spread_pct: float) -> float:
    """A row's drift from its round-to-round spread (``max / min - 1`` of the round medians,
    in %): ``ln(1 + spread) / 2``, how far a timing at another moment of the measuring window
    lay from the rows' median at most."""
    return 0.5 * math.log1p(max(float(spread_pct), 0.0) / 100.0) if math.isfinite(float(spread_pct)) else 0.0


def layer_kind(layer_type: str, features: Mapping[str, Any]) -> str:
    """A layer's kind, the group ``per-kernel`` scales: its type, and for the types of
    :data:`KERNEL_TYPES` its kernel window (``dwconv2d@7x7``). A :class:`CalibrationRow`'s
    ``shares`` are keyed by kind."""
    if layer_type in KERNEL_TYPES and "k_h" in features and "k_w" in features:
        return f"{layer_type}{KIND_SEP}{int(features['k_h'])}x{int(features['k_w'])}"
    return layer_type


def by_type(shares: Mapping[str, float]) -> dict[str, float]:
    """Shares keyed by kind (:func:`layer_kind`) -> keyed by type."""
    out: dict[str, float] = {}
    for k, v in shares.items():
        t = k.split(KIND_SEP, 1)[0]
        out[t] = out.get(t, 0.0) + v
    return out


def _groups(method: str, shares: Sequence[Mapping[str, float]]) -> list[Mapping[str, float]]:
    """The shares ``method`` scales: by type for ``per-type``, by kind for ``per-kernel``."""
    return [by_type(sh) for sh in shares] if method == "per-type" else list(shares)


def type_times(p: np.ndarray, shares: Sequence[Mapping[str, float]], types: Sequence[str]) -> np.ndarray:
    """Each network's Eq. 7 time per type of ``types`` (rows: networks); the column
    :data:`OTHER_TYPES` gets the time of every other type."""
    p = np.asarray(p, dtype=float)
    out = np.zeros((len(p), len(types)))
    col = {t: j for j, t in enumerate(types)}
    other = col.get(OTHER_TYPES)
    for i, sh in enumerate(shares):
        for t, v in sh.items():
            j = col.get(t, other)
            if j is not None:
                out[i, j] += v * p[i]
    return out


def _columns(method: str, p: np.ndarray, n: np.ndarray, shares: Sequence[Mapping[str, float]] = (),
             types: Sequence[str] = ()) -> np.ndarray:
    """The design matrix of ``method`` (rows: networks)."""
    if method in ("scale", NO_CORRECTION):
        return p[:, None]
    if method == "scale+constant":
        return np.stack([p, np.ones_like(p)], axis=1)
    if method == "scale+per-layer":
        return np.stack([p, n, np.ones_like(p)], axis=1)
    if method in GROUP_METHODS:
        return type_times(p, _groups(method, shares), types)
    raise ValueError(f"unknown correction {method!r}; known: {', '.join(METHODS)}")


@dataclass(frozen=True)
class Correction:
    """A fitted bias correction ``yhat = coef . columns`` (see :func:`_columns`); ``types``
    names ``per-type``'s columns."""

    method: str
    coef: tuple[float, ...]
    types: tuple[str, ...] = ()

    def predict_many(self, p: np.ndarray, n: np.ndarray, shares: Sequence[Mapping[str, float]] = ()) -> np.ndarray:
        x = _columns(self.method, np.asarray(p, dtype=float), np.asarray(n, dtype=float), shares, self.types)
        return x @ np.asarray(self.coef)

    def predict(self, p: float, n: float, shares: Mapping[str, float] | None = None) -> float:
        return float(self.predict_many(np.array([p]), np.array([n]), [shares or {}])[0])

    def describe(self) -> str:
        if self.method in GROUP_METHODS:
            parts = [f"{t} {c:.3g}" for t, c in zip(self.types, self.coef) if t != OTHER_TYPES]
            what, rest = (("type's", "types") if self.method == "per-type" else
                          ("type's (convolutions: each kernel window's)", "kinds"))
            return (f"each {what} Eq. 7 time x its scale: {', '.join(parts)}; other {rest} "
                    f"{self.coef[self.types.index(OTHER_TYPES)]:.3g}")
        if self.method == NO_CORRECTION:
            return "the Eq. 7 total as it is"
        names = {"scale": ("p",), "scale+constant": ("p", "1"), "scale+per-layer": ("p", "n", "1")}[self.method]
        return " + ".join({"p": f"{c:.4g} x Eq. 7 total", "n": f"{c * 1e3:.4g} us per layer",
                           "1": f"{c:.4g} ms"}[f] for f, c in zip(names, self.coef))

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "coefficients": list(self.coef), "formula": self.describe(),
                **({"types": list(self.types)} if self.types else {})}


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative ``c`` minimising ``|(y - x c) / y|^2``."""
    from scipy.optimize import nnls  # noqa: PLC0415 (scipy comes with scikit-learn)

    return nnls(x / y[:, None], np.ones_like(y))[0]


def _fit_per_group(method: str, y: np.ndarray, p: np.ndarray, shares: Sequence[Mapping[str, float]], scale: float
                   ) -> Correction:
    """``per-type`` / ``per-kernel``: relative residuals plus the ridge rows
    ``sqrt(TYPE_RIDGE) (a_t / s - 1)``, each ``a_t`` within :data:`TYPE_BOUND` of ``s``;
    :data:`OTHER_TYPES` keeps ``s``."""
    from scipy.optimize import lsq_linear  # noqa: PLC0415 (scipy comes with scikit-learn)

    groups = _groups(method, shares)
    types = sorted({t for sh in groups for t, v in sh.items() if v > 0})
    if not types:
        return Correction(method, (scale,), (OTHER_TYPES,))
    k = len(types)
    a = np.concatenate([type_times(p, groups, types) / y[:, None], np.eye(k) * math.sqrt(TYPE_RIDGE) / scale])
    b = np.concatenate([np.ones_like(y), np.full(k, math.sqrt(TYPE_RIDGE))])
    coef = lsq_linear(a, b, bounds=(scale / TYPE_BOUND, scale * TYPE_BOUND), method="bvls").x
    return Correction(method, tuple(float(c) for c in coef) + (scale,), tuple(types) + (OTHER_TYPES,))


def fit_correction(method: str, measured: np.ndarray, predicted: np.ndarray, n_layers: np.ndarray,
                   shares: Sequence[Mapping[str, float]] = ()) -> Correction:
    """Least squares on relative errors, non-negative (``per-type`` and ``per-kernel``: bounded,
    see the module docstring); ``shares`` (each row's kind shares of its Eq. 7 total,
    :func:`layer_kind`) are what ``per-type`` and ``per-kernel`` fit."""
    y = np.asarray(measured, dtype=float)
    p = np.asarray(predicted, dtype=float)
    n = np.asarray(n_layers, dtype=float)
    if method == NO_CORRECTION:
        return Correction(NO_CORRECTION, (1.0,))
    scale = float(np.sum(p / y) / np.sum((p / y) ** 2))
    if method == "scale":
        return Correction("scale", (scale,))
    if method in GROUP_METHODS:
        if len(shares) != len(y):
            raise ValueError(f"{method} needs every row's shares")
        return _fit_per_group(method, y, p, shares, scale)
    coef = _nnls(_columns(method, p, n), y)
    if coef[0] <= 0:  # all of the time in the overheads: not a correction of the estimate
        return Correction("scale", (scale,))
    return Correction(method, tuple(float(c) for c in coef))


def _folds(families: Sequence[str], by_family: bool = True) -> tuple[list[np.ndarray], str]:
    """Held-out index sets: one per family (leave-family-out) when ``by_family`` and there
    are at least two families, else one per row (leave-one-out)."""
    fams = list(dict.fromkeys(families))
    if by_family and len(fams) >= 2:
        arr = np.asarray(families)
        return [np.flatnonzero(arr == f) for f in fams], "leave-family-out"
    return [np.array([i]) for i in range(len(families))], "leave-one-out"


def cross_validate(rows: Sequence[CalibrationRow], method: str, folds: list[np.ndarray] | None = None
                   ) -> np.ndarray:
    """Out-of-fold predictions of ``method`` for every row (``folds`` default: leave-one-out)."""
    y = np.array([r.measured_ms for r in rows])
    p = np.array([r.predicted_ms for r in rows])
    n = np.array([r.n_layers for r in rows], dtype=float)
    shares = [r.shares for r in rows]
    folds = folds if folds is not None else _folds([r.family for r in rows], by_family=False)[0]
    out = np.empty_like(y)
    for held in folds:
        train = np.setdiff1d(np.arange(len(rows)), held)
        if train.size == 0:
            raise ValueError("a fold holds every row")
        c = fit_correction(method, y[train], p[train], n[train], [shares[i] for i in train])
        out[held] = c.predict_many(p[held], n[held], [shares[i] for i in held])
    return out


def conformal_quantile(scores: np.ndarray, confidence: float) -> tuple[float, bool]:
    """The conformal quantile of sorted ``scores`` at ``confidence``: the
    ``ceil(confidence (n+1))``-th smallest, and whether ``n`` scores certify it (when they
    do not, the largest score, flagged False)."""
    s = np.sort(np.asarray(scores, dtype=float))
    n = s.size
    certified = math.ceil(confidence * (n + 1) - 1e-12) <= n
    return float(s[conformal_index(n, confidence)]), certified


def _mean_abs_rel(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / y))


def _spread(rel_half_width: np.ndarray | float) -> Any:
    """A network's Eq. 8 spread in log units (see the module docstring)."""
    return np.log1p(rel_half_width)


def _band(pred: np.ndarray, y: np.ndarray, u: np.ndarray) -> float:
    """Mean width of the conformal 90 % band built from out-of-fold ``pred``, relative to its
    centre: what the intervals would be, whatever the level (relative to ``y``, a correction
    that predicts low would look narrow; ``none`` often does)."""
    s = _spread(u)
    norm = s + np.median(s)
    q, _ = conformal_quantile(np.abs(np.log(y / pred)) / norm, REFERENCE_CONFIDENCE)
    return float(np.mean(np.exp(q * norm) - np.exp(-q * norm)))


def _share_matrix(shares: Sequence[Mapping[str, float]]) -> tuple[dict[str, int], np.ndarray]:
    """Share vectors as ``(column of each key, matrix)``, a row per vector (a missing key is a
    share of 0), the columns in the order keys first appear: L1 distances between rows, and to
    a new vector, are the same numbers in every process (no set order involved)."""
    cols: dict[str, int] = {}
    for sh in shares:
        for k in sh:
            cols.setdefault(k, len(cols))
    mat = np.zeros((len(shares), len(cols)))
    for i, sh in enumerate(shares):
        for k, v in sh.items():
            mat[i, cols[k]] = v
    return cols, mat


@dataclass
class CalibratedTotal:
    total_ms: float
    #: metric -> confidence -> (lower, upper)
    intervals: dict[str, dict[float, tuple[float, float]]]
    in_scope: bool
    #: confidences the rows cannot certify (largest score used)
    uncertified: list[float]
    nearest: str = ""
    distance: float = 0.0
    #: why the network is out of scope ("" when in scope)
    why: str = ""


@dataclass
class NetworkCalibration:
    """A fitted network calibration (see the module docstring)."""

    correction: Correction
    #: metric -> sorted nonconformity scores
    scores: dict[str, np.ndarray]
    #: metric -> beta (the floor added to a network's log spread)
    floor: dict[str, float]
    #: metric -> sorted scores of the leave-family-out predictions (None with one family):
    #: every network's band is at least theirs (see the module docstring)
    shift_scores: dict[str, np.ndarray] | None
    #: the calibration networks' composition, for the scope check
    names: list[str]
    shares: list[Mapping[str, float]]
    totals: tuple[float, float]  # (min, max) Eq. 7 totals of the rows
    max_nn: float  # largest leave-one-out nearest-neighbour distance among the rows
    report: dict[str, Any]

    @property
    def n(self) -> int:
        return len(self.names)

    @functools.cached_property
    def _seen_types(self) -> frozenset[str]:
        """The layer types some calibration network has time in."""
        return frozenset(t for s in self.shares for t, v in by_type(s).items() if v > 0)

    @functools.cached_property
    def _rows_matrix(self) -> tuple[dict[str, int], np.ndarray]:
        """The rows' type shares as a matrix, one column per type some row has."""
        return _share_matrix(self.shares)

    def _scope(self, predicted_ms: float, shares: Mapping[str, float], fallback_types: Sequence[str] = ()
               ) -> tuple[bool, str, float, str]:
        """``(in scope, nearest row, its distance, why not)``."""
        shares = by_type(shares)
        cols, mat = self._rows_matrix
        v = np.zeros(len(cols))
        beyond = 0.0  # the shares of types no row has
        for t, x in shares.items():
            if t in cols:
                v[cols[t]] = x
            else:
                beyond += abs(x)
        d = np.abs(mat - v).sum(axis=1) + beyond
        i = int(np.argmin(d))
        lo, hi = self.totals
        seen = self._seen_types
        unseen = sorted(t for t, v in shares.items() if v >= UNSEEN_SHARE and t not in seen)
        new_fallback = sorted(set(fallback_types) - seen)
        why = ""
        if new_fallback:
            why = (f"layers of type(s) {', '.join(new_fallback)} have no benchmark rows (roofline fallback) and no "
                   "calibration network has them")
        elif unseen:
            why = f"no calibration network has layers of type(s) {', '.join(unseen)}"
        elif not lo / 2 <= predicted_ms <= hi * 2:
            why = "its Eq. 7 total is outside 0.5-2x the calibration networks' range"
        elif d[i] > self.max_nn + 1e-12:
            why = (f"its composition is farther from every calibration network (nearest: {self.names[i]}, "
                   f"distance {d[i]:.2f}) than they are from each other (at most {self.max_nn:.2f})")
        return not why, self.names[i], float(d[i]), why

    def apply(self, predicted_ms: float, n_layers: int, intervals: Mapping[str, Mapping[float, tuple[float, float]]],
              shares: Mapping[str, float], confidences: Sequence[float],
              fallback_types: Sequence[str] = ()) -> CalibratedTotal:
        """Calibrate one network's Eq. 7 total and Eq. 8 ``intervals`` (which must hold
        :data:`REFERENCE_CONFIDENCE` for every metric) at ``confidences``. A network out of
        the calibration's scope keeps at least its uncalibrated band (the union with it and
        with the bias-corrected one): the guarantee holds for networks like the rows only."""
        yhat = self.correction.predict(predicted_ms, n_layers, shares)
        factor = yhat / predicted_ms if predicted_ms > 0 else 1.0
        in_scope, nearest, dist, why = self._scope(predicted_ms, shares, fallback_types)
        out: dict[str, dict[float, tuple[float, float]]] = {}
        uncertified: set[float] = set()
        for m, scores in self.scores.items():
            lo_r, hi_r = intervals[m][REFERENCE_CONFIDENCE]
            u = (hi_r - lo_r) / (2.0 * predicted_ms) if predicted_ms > 0 else 0.0
            width = float(_spread(u)) + self.floor[m]
            out[m] = {}
            for c in confidences:
                q, ok = conformal_quantile(scores, c)
                if not ok:
                    uncertified.add(float(c))
                if self.shift_scores is not None:  # every network as a family the rows never saw
                    q = max(q, conformal_quantile(self.shift_scores[m], c)[0])
                lo, hi = yhat * math.exp(-q * width), yhat * math.exp(q * width)
                if not in_scope:
                    lo_u, hi_u = intervals[m][c]
                    lo, hi = min(lo, lo_u * factor, lo_u), max(hi, hi_u * factor, hi_u)
                out[m][float(c)] = (lo, hi)
        return CalibratedTotal(yhat, out, in_scope, sorted(uncertified), nearest, dist, why)


def _nn_distances(shares: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Each vector's L1 distance to its nearest other vector (inf when it is alone)."""
    _, mat = _share_matrix(shares)
    if len(mat) < 2:
        return np.full(len(mat), np.inf)
    d = np.abs(mat[:, None, :] - mat[None, :, :]).sum(axis=2)
    np.fill_diagonal(d, np.inf)
    return d.min(axis=1)


def family_warning(by_family: Mapping[str, Mapping[str, Any]]) -> str:
    """The warning when the families' leave-family-out shifts disagree (see the module
    docstring), or ``""``."""
    shifts = {f: v["shift"] for f, v in by_family.items() if "shift" in v}
    if not shifts or max(abs(v) for v in shifts.values()) <= FAMILY_SHIFT_WARN:
        return ""
    parts = ", ".join(f"{f} {100 * math.expm1(v):+.0f} %" for f, v in shifts.items())
    return (f"the calibration networks' families disagree about the bias (each predicted by the correction fitted "
            f"on the others: {parts}); the correction may not carry to networks unlike them: calibrate on networks "
            f"like the ones you deploy (--onnx/--zoo), and where a base profile from another machine is off like "
            f"this, measure a profile of this machine (bench adapt)")


def _paired_t(better: np.ndarray, worse: np.ndarray) -> float:
    """The paired t statistic of the per-row errors ``worse - better`` (how many standard
    errors the mean gain lies above 0; inf for an exact, positive gain)."""
    d = np.asarray(worse, dtype=float) - np.asarray(better, dtype=float)
    if d.size < 2:
        return 0.0
    se = float(d.std(ddof=1)) / math.sqrt(d.size)
    mean = float(d.mean())
    return mean / se if se > 0 else (math.inf if mean > 0 else 0.0)


def _choose(row_err: Mapping[str, np.ndarray], methods: Sequence[str], scheme: str) -> tuple[str, str]:
    """The correction to apply (see the module docstring) and why, in a line: each of
    ``methods`` in turn is adopted when its cross-validated mean |error| is :data:`ADOPT_GAIN`
    below every simpler one's, ``none`` included, and its gain over the correction it would
    replace is :data:`ADOPT_T` standard errors or more (``row_err``: method -> each row's
    cross-validated |relative error|)."""
    cv_err = {m: float(np.mean(e)) for m, e in row_err.items()}
    chosen, simpler = NO_CORRECTION, [NO_CORRECTION]
    noise: dict[str, float] = {}  # methods 10 % below the others whose gain was within the noise: their t
    for m in methods:
        if cv_err[m] <= (1.0 - ADOPT_GAIN) * min(cv_err[s] for s in simpler):
            t = _paired_t(row_err[m], row_err[chosen])
            if t >= ADOPT_T:
                chosen = m
            else:
                noise[m] = t
        simpler.append(m)
    pct = {m: f"{100 * cv_err[m]:.1f} %" for m in simpler}
    within = "".join(f"; {m} {pct[m]}: its gain is {t:.1f} standard errors, within the noise" for m, t in noise.items()
                     if simpler.index(m) > simpler.index(chosen))
    if chosen == NO_CORRECTION:
        best = min(methods, key=cv_err.__getitem__)
        return chosen, (f"none: {scheme} mean |error| {pct[chosen]}; no correction is {100 * ADOPT_GAIN:.0f} % "
                        f"below it by more than the noise (the best: {best} {pct[best]}){within}")
    i = simpler.index(chosen)
    best = min(simpler[:i], key=cv_err.__getitem__)
    why = f"{chosen}: {scheme} mean |error| {pct[chosen]} against {best} {pct[best]}"
    lower = [m for m in simpler[i + 1:] if cv_err[m] < cv_err[chosen] and m not in noise]
    if lower:  # a richer one lower, but not by ADOPT_GAIN
        m = min(lower, key=cv_err.__getitem__)
        why += f" ({m} {pct[m]}: not {100 * ADOPT_GAIN:.0f} % below)"
    return chosen, why + within


def fit_calibration(rows: Sequence[CalibrationRow], info: Mapping[str, Any] | None = None) -> NetworkCalibration:
    """Select and fit the correction, then the conformal scores (see the module docstring).
    Needs at least two rows (:data:`MIN_NETWORKS` is the caller's policy)."""
    rows = [r for r in rows if r.predicted_ms > 0 and r.measured_ms > 0]
    if len(rows) < 3:
        raise ValueError(f"network calibration needs at least 3 usable rows, got {len(rows)}")
    y = np.array([r.measured_ms for r in rows])
    p = np.array([r.predicted_ms for r in rows])
    n = np.array([r.n_layers for r in rows], dtype=float)
    shares = [r.shares for r in rows]
    families = [r.family for r in rows]
    folds, scheme = _folds(families)
    u_lv = np.array([r.spread.get("CM_LV", 0.0) for r in rows])
    cv = {m: cross_validate(rows, m, folds) for m in METHODS + (NO_CORRECTION,)}
    row_err = {m: np.abs(pred - y) / y for m, pred in cv.items()}
    cv_err = {m: float(np.mean(e)) for m, e in row_err.items()}
    cv_band = {m: _band(pred, y, u_lv) for m, pred in cv.items()}
    lofo = scheme == "leave-family-out"
    chosen, choice = _choose(row_err, METHODS if lofo else METHODS[:1], scheme)
    correction = fit_correction(chosen, y, p, n, shares)
    loo = cross_validate(rows, chosen)  # the scores' out-of-fold predictions (jackknife)
    lofo_pred = cv[chosen] if lofo else None
    scores: dict[str, np.ndarray] = {}
    shift: dict[str, np.ndarray] = {}
    floor: dict[str, float] = {}
    metrics = [m for m in _METRICS if all(m in r.spread for r in rows)]
    drift = np.array([r.drift for r in rows])
    for m in metrics:
        sp = _spread(np.array([r.spread[m] for r in rows]))
        floor[m] = float(np.median(sp))
        scores[m] = np.sort((np.abs(np.log(y / loo)) + drift) / (sp + floor[m]))
        if lofo_pred is not None:
            shift[m] = np.sort((np.abs(np.log(y / lofo_pred)) + drift) / (sp + floor[m]))
    nn = _nn_distances([by_type(sh) for sh in shares])
    by_family: dict[str, dict[str, Any]] = {}
    for f in dict.fromkeys(families):
        idx = [i for i, g in enumerate(families) if g == f]
        by_family[f] = {"n": len(idx),
                        "uncalibrated_mean_abs_error_pct": 100 * _mean_abs_rel(p[idx], y[idx]),
                        "calibrated_mean_abs_error_pct": 100 * _mean_abs_rel(cv[chosen][idx], y[idx])}
        if lofo_pred is not None:
            by_family[f]["shift"] = float(np.median(np.log(y[idx] / lofo_pred[idx])))
    warning = family_warning(by_family)
    report = {
        **dict(info or {}),
        "n_networks": len(rows),
        "families": by_family,
        "validation": scheme,
        "method": chosen,
        "correction": correction.to_dict(),
        "bias_pct": 100.0 * (float(np.median(y / p)) - 1.0),
        "uncalibrated_mean_abs_error_pct": 100 * _mean_abs_rel(p, y),
        "cv_mean_abs_error_pct": {m: 100 * e for m, e in cv_err.items()},
        "cv_band_pct": {m: 100 * w for m, w in cv_band.items()},
        "loo_mean_abs_error_pct": 100 * _mean_abs_rel(loo, y),
        "choice": choice,
        "adopt_gain": ADOPT_GAIN,
        "adopt_t": ADOPT_T,
        **({"warning": warning} if warning else {}),
    }
    return NetworkCalibration(correction=correction, scores=scores, floor=floor,
                              shift_scores=shift if lofo_pred is not None else None, names=[r.name for r in rows],
                              shares=[by_type(r.shares) for r in rows], totals=(float(p.min()), float(p.max())),
                              max_nn=float(nn.max()) if np.isfinite(nn).any() else 0.0, report=report)
