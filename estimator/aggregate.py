"""Per-layer conformal predictive distributions and their network-level convolution (Eq. 8).

Per-layer distributions
-----------------------
Every layer's predictive distribution for one confidence metric is described by three
numbers and a shared *family* (one family per layer type and metric, holding the sorted
calibration scores of that type's conformal regressor):

``sym`` family (layer types with a model; CM_TV, CM_LV, CM_O)
    ``Y = center + scale * eps * A_K`` where ``A_1 <= ... <= A_n`` are the calibration
    nonconformity scores ``|residual| / sigma`` (crepes ``ConformalRegressor.alphas``),
    ``eps`` is a random sign and ``K`` is drawn with ``P(K <= k) = k / (n + 1)`` for
    ``k < n`` (the last score takes the remaining ``2/(n+1)``; i.e. ``K = min(J, n)`` with
    ``J`` uniform on ``1..n+1``). This is the conformal
    predictive system of the symmetric normalized nonconformity score: its central
    ``c`` interval is exactly ``center +- A_(ceil(c (n+1))) * scale``, i.e. crepes'
    ``ConformalRegressor.predict_int`` interval for every ``c <= n/(n+1)``. Beyond
    that level conformal prediction cannot bound the value with ``n`` points; we use
    the largest score instead of an infinite interval (and the caller warns).

``mult`` family (roofline fallback for types without data)
    ``Y = scale * F_K`` with ``F`` sorted multiplicative factors (measured latency /
    roofline latency over the profile's benchmark rows) and the same ``K`` law;
    ``center`` is the point estimate. Its ``c`` interval is ``scale * [F_lo, F_hi]`` with
    ``lo = max(1, ceil((1-c)/2 (n+1)))``, ``hi = min(n, ceil((1+c)/2 (n+1)))``.

All values are milliseconds. Interval bounds are clipped at ``clip_min`` (default 0: a
latency is never negative). The *samples* are not clipped: clipping each layer's draws at
0 would push the network distribution of a network with very wide layer intervals above
its own point estimate; as in the paper, an interval reaching below 0 is read as a sign
of low confidence, and only the reported bounds are clipped (clipping commutes with
quantiles, so a single layer's interval is still reproduced exactly).

Network level
-------------
The point estimate is the sum of the layers' point estimates (Eq. 7). Each metric's
network distribution is the convolution of the layers' distributions (Eq. 8), assuming
independent layer errors, computed by Monte Carlo: ``n_samples`` joint draws from every
layer's distribution (the bootstrap of the calibration scores), summed per draw; the
interval at confidence ``c`` is the equal-tailed pair of empirical quantiles
(``inverted_cdf``) of the sums. A fixed ``seed`` makes the result deterministic. For a
single-layer network this reproduces the layer interval (up to Monte Carlo resolution
at jump points of the discrete distribution). Independence is the paper's assumption;
``coupling="comonotone"`` gives the other extreme (perfectly correlated layer errors:
the sum of the layer intervals), to be compared against measured networks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

__all__ = ["Family", "DistBatch", "conformal_index", "layer_intervals", "aggregate", "NetworkInterval",
           "DEFAULT_SAMPLES", "DEFAULT_SEED", "COUPLINGS"]

DEFAULT_SAMPLES = 10_000
DEFAULT_SEED = 20240611


@dataclass(frozen=True, eq=False)
class Family:
    """Sorted calibration scores shared by the layers of one type (for one metric)."""

    kind: Literal["sym", "mult"]
    scores: np.ndarray  # ascending, finite, >= 0 for "sym", > 0 for "mult"
    name: str = ""

    def __post_init__(self) -> None:
        s = np.asarray(self.scores, dtype=float)
        if s.ndim != 1 or s.size == 0:
            raise ValueError(f"family {self.name!r}: scores must be a non-empty 1-D array")
        if not np.all(np.isfinite(s)):
            raise ValueError(f"family {self.name!r}: scores must be finite")
        if self.kind not in ("sym", "mult"):
            raise ValueError(f"family {self.name!r}: unknown kind {self.kind!r}")
        object.__setattr__(self, "scores", np.sort(s))

    @property
    def n(self) -> int:
        return int(self.scores.size)

    def max_certified_confidence(self) -> float:
        """The largest ``c`` for which the conformal interval is finite (``n / (n+1)``)."""
        return self.n / (self.n + 1.0)


def conformal_index(n: int, p: float) -> int:
    """0-based index into ``n`` ascending scores of the smallest ``k`` with ``k/(n+1) >= p``.

    Computed exactly as crepes does (``n - int((1 - p) * (n + 1))``, so intervals agree
    with ``ConformalRegressor.predict_int`` bit for bit, including its floating-point
    behaviour at exact integer boundaries), clipped to ``[0, n-1]`` (see the module
    docstring for why the top is clipped).
    """
    k = n - int((1.0 - p) * (n + 1))
    return int(min(max(k, 0), n - 1))


@dataclass
class DistBatch:
    """Predictive distributions of ``N`` layers for one metric (see module docstring)."""

    center: np.ndarray  # (N,) point predictions, ms
    scale: np.ndarray  # (N,) ms (sym: per-unit-score half width; mult: base latency)
    family: np.ndarray  # (N,) int index into families
    families: list[Family] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.center = np.asarray(self.center, dtype=float).reshape(-1)
        self.scale = np.asarray(self.scale, dtype=float).reshape(-1)
        self.family = np.asarray(self.family, dtype=np.int64).reshape(-1)
        if not (self.center.shape == self.scale.shape == self.family.shape):
            raise ValueError("center, scale and family must have the same length")
        if self.family.size and (self.family.min() < 0 or self.family.max() >= len(self.families)):
            raise ValueError("family index out of range")

    def __len__(self) -> int:
        return int(self.center.size)

    @staticmethod
    def concat(parts: Sequence["DistBatch"]) -> "DistBatch":
        fams: list[Family] = []
        centers, scales, idx = [], [], []
        for p in parts:
            off = len(fams)
            fams.extend(p.families)
            centers.append(p.center)
            scales.append(p.scale)
            idx.append(p.family + off)
        if not parts:
            return DistBatch(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), [])
        return DistBatch(np.concatenate(centers), np.concatenate(scales), np.concatenate(idx), fams)

    def take(self, index: Sequence[int] | np.ndarray) -> "DistBatch":
        index = np.asarray(index, dtype=np.int64)
        return DistBatch(self.center[index], self.scale[index], self.family[index], self.families)

    def uncertified(self, confidence: float) -> np.ndarray:
        """Mask of layers whose family has too few scores to certify ``confidence``."""
        lim = np.array([f.max_certified_confidence() for f in self.families]) if self.families else np.zeros(0)
        return lim[self.family] < confidence if self.family.size else np.zeros(0, dtype=bool)

    def sample(self, n_samples: int, rng: np.random.Generator, clip_min: float | None = None) -> np.ndarray:
        """Per-layer draws, shape ``(N, n_samples)`` (memory: N x n_samples floats)."""
        out = np.empty((len(self), n_samples))
        for fi in np.unique(self.family):
            rows = np.flatnonzero(self.family == fi)
            out[rows] = self._draw(int(fi), rows, n_samples, rng)
        if clip_min is not None:
            np.maximum(out, clip_min, out=out)
        return out

    def _draw(self, fi: int, rows: np.ndarray, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        fam = self.families[fi]
        n = fam.n
        if fam.kind == "sym":
            # one integer per draw: its low bit is the sign, the rest J uniform on 0..n
            v = rng.integers(0, 2 * (n + 1), size=(rows.size, n_samples))
            a = fam.scores[np.minimum(v >> 1, n - 1)]
            a *= (v & 1) * 2.0 - 1.0
            a *= self.scale[rows, None]
            a += self.center[rows, None]
            return a
        j = rng.integers(0, n + 1, size=(rows.size, n_samples))
        a = fam.scores[np.minimum(j, n - 1)]
        a *= self.scale[rows, None]
        return a

    def sum_samples(self, n_samples: int, rng: np.random.Generator, clip_min: float | None = None,
                    chunk: int = 256) -> np.ndarray:
        """Draws of the network total, shape ``(n_samples,)``, without materialising all layers."""
        total = np.zeros(n_samples)
        for fi in np.unique(self.family):
            rows_all = np.flatnonzero(self.family == fi)
            for s in range(0, rows_all.size, chunk):
                rows = rows_all[s:s + chunk]
                d = self._draw(int(fi), rows, n_samples, rng)
                if clip_min is not None:
                    np.maximum(d, clip_min, out=d)
                total += d.sum(axis=0)
        return total


def layer_intervals(dist: DistBatch, confidence: float, clip_min: float | None = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer ``confidence`` intervals ``(lo, hi)`` (arrays of length N), exact."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lo = np.empty(len(dist))
    hi = np.empty(len(dist))
    for fi in np.unique(dist.family):
        rows = np.flatnonzero(dist.family == fi)
        fam = dist.families[int(fi)]
        if fam.kind == "sym":
            q = fam.scores[conformal_index(fam.n, confidence)]
            lo[rows] = dist.center[rows] - q * dist.scale[rows]
            hi[rows] = dist.center[rows] + q * dist.scale[rows]
        else:
            f_lo = fam.scores[conformal_index(fam.n, (1.0 - confidence) / 2.0)]
            f_hi = fam.scores[conformal_index(fam.n, (1.0 + confidence) / 2.0)]
            lo[rows] = dist.scale[rows] * f_lo
            hi[rows] = dist.scale[rows] * f_hi
    if clip_min is not None:
        np.maximum(lo, clip_min, out=lo)
        np.maximum(hi, clip_min, out=hi)
    return lo, hi


@dataclass(frozen=True)
class NetworkInterval:
    confidence: float
    lower: float
    upper: float

    @property
    def width(self) -> float:
        return self.upper - self.lower


COUPLINGS = ("independent", "comonotone")


def aggregate(dist: DistBatch, confidences: Sequence[float], *, n_samples: int = DEFAULT_SAMPLES,
              seed: int = DEFAULT_SEED, clip_min: float | None = 0.0, coupling: str = "independent",
              return_samples: bool = False) -> tuple[dict[float, NetworkInterval], np.ndarray | None]:
    """Network-level intervals of one metric.

    ``coupling="independent"`` (default): Monte Carlo convolution of the layers'
    distributions (Eq. 8), i.e. independent layer errors; relative widths shrink roughly
    as 1/sqrt(layers). ``coupling="comonotone"``: perfectly correlated layer errors (every
    layer at the same quantile), whose interval is exactly the sum of the layer intervals;
    the conservative bound when layer errors share a systematic cause.

    Returns ``({confidence: NetworkInterval}, samples_or_None)`` (samples only for the
    independent coupling). Deterministic for a fixed ``seed``. An empty network has the
    degenerate interval ``[0, 0]``.
    """
    for c in confidences:
        if not 0.0 < c < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {c}")
    if coupling not in COUPLINGS:
        raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
    if coupling == "comonotone":
        out_c: dict[float, NetworkInterval] = {}
        for c in confidences:
            lo_l, hi_l = layer_intervals(dist, c, clip_min=None)
            l_, h_ = float(lo_l.sum()), float(hi_l.sum())
            if clip_min is not None:
                l_, h_ = max(l_, clip_min), max(h_, clip_min)
            out_c[float(c)] = NetworkInterval(float(c), l_, h_)
        return out_c, None
    if len(dist) == 0:
        return {float(c): NetworkInterval(float(c), 0.0, 0.0) for c in confidences}, (
            np.zeros(n_samples) if return_samples else None)
    rng = np.random.default_rng(seed)
    total = dist.sum_samples(n_samples, rng)
    out: dict[float, NetworkInterval] = {}
    for c in confidences:
        q = np.quantile(total, [(1.0 - c) / 2.0, (1.0 + c) / 2.0], method="inverted_cdf")
        lo, hi = float(q[0]), float(q[1])
        if clip_min is not None:
            lo, hi = max(lo, clip_min), max(hi, clip_min)
        out[float(c)] = NetworkInterval(float(c), lo, hi)
    return out, (total if return_samples else None)
