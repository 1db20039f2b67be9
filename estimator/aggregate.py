"""Per-layer conformal predictive distributions and their network-level convolution (Eq. 8).

Per-layer distributions
-----------------------
Every layer's predictive distribution for one confidence metric is described by three
numbers and a shared *family* (one family per layer type and metric, holding the sorted
calibration scores of that type's conformal regressor):

``log`` family (layer types with a model; CM_TV, CM_LV, CM_O)
    ``Y = center * (1 + scale * A_K)^eps``: a factor ``1 + scale * A_K`` above or below the
    estimate, where ``A_1 <= ... <= A_n`` are the calibration nonconformity scores
    ``(max(y / y_hat, y_hat / y) - 1) / sigma`` (crepes ``ConformalRegressor.alphas`` of the
    factor residuals), ``scale`` is the layer's relative difficulty ``sigma``, ``eps`` is a
    random sign (+1 or -1) and ``K`` is drawn with ``P(K <= k) = k / (n + 1)`` for
    ``k < n`` (the last score takes the remaining ``2/(n+1)``; i.e. ``K = min(J, n)`` with
    ``J`` uniform on ``1..n+1``). This is the conformal predictive system of that symmetric
    normalized score: its central ``c`` interval is exactly ``[center / (1 + q * scale),
    center * (1 + q * scale)]``, ``q = A_(ceil(c (n+1)))``, crepes'
    ``ConformalRegressor.predict_int`` half-width ``q * scale`` taken as a factor, for every
    ``c <= n/(n+1)``. Beyond that level conformal prediction cannot bound the value with
    ``n`` points; we use the largest score instead of an infinite interval (and the caller
    warns). The interval is log-symmetric (``lo * hi = center^2``), scales with the
    estimate and never reaches 0; its upper bound is the additive ``center + q * scale *
    center`` of the same score, so a layer far outside the design space widens linearly
    with its difficulty, not exponentially (``center * exp(q * scale)`` would make the
    largest scores of a type, times a far layer's difficulty, into factors of 10^30). The
    assumption is that a layer's error is multiplicative (a kernel 30 % slower than
    predicted is 30 % slower whatever its size), which is what a latency spanning 6-8
    decades across a type's configurations shows. Calibrating each side apart (signed
    scores, taken at ``(1 -+ c) / 2``) lost: on ``host-cpu``'s 26 held-out zoo networks (the
    same timings) it widened the uncalibrated 90 % bands from 121 % to 139 % (CM_LV), 278 %
    to 581 % (CM_TV) and 23x to 55x (CM_O) at no gain in coverage, since the rows' misses
    above their predictions have a heavy tail; one score for both sides spends the
    miscoverage where the misses are.

``mult`` family (roofline fallback for types without data)
    ``Y = scale * F_K`` with ``F`` sorted multiplicative factors (measured latency /
    roofline latency over the profile's benchmark rows, all positive) and the same ``K``
    law; ``center`` is the point estimate. Its ``c`` interval is ``scale * [F_lo, F_hi]``
    with ``lo = max(1, ceil((1-c)/2 (n+1)))``, ``hi = min(n, ceil((1+c)/2 (n+1)))``.

All values are milliseconds, and every draw of both families is positive, so every
interval of a positive estimate, a layer's or a network's, has a positive lower bound.

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
``coupling="type"`` takes layer errors as perfectly correlated *within* a
family (a layer type, or all fallback layers) and independent across families: every
layer of a family takes the same draw (slot 0 of its stream), so a family contributes
``sum(center * (1 + scale * draw)^eps)`` (``log``) or ``sum(scale) x draw`` (``mult``) to a sample.
Since each layer's draw is log-symmetric around its point estimate, the network's Monte Carlo
median lies at or above the Eq. 7 sum (a factor ``e^a`` above costs more than ``e^-a`` below
saves); the Eq. 7 sum stays the point estimate. Measured networks show why: what a
per-layer model gets wrong is mostly systematic per type (one kernel family slower in
context than in the benchmark, a sparsely benchmarked region such as grouped
convolutions, a roofline for unmodelled operators), and independence lets such errors
cancel across the layers of a network that share them.

Where the draws come from (sample slots)
----------------------------------------
Each family has its own random stream, and the ``j``-th layer of a family (in network
order) always takes the ``j``-th *slot* of that stream: ``n_samples`` outcome indices drawn
uniformly (``Generator.integers``) by a generator seeded with ``(seed, family key, j //
SLOT_BLOCK)``, row ``j % SLOT_BLOCK`` of that block (rows of a block are drawn in order, so
drawing fewer rows gives a prefix of the same numbers). The family key is the family's
``name`` (its position in the batch for unnamed or repeated names). Within a sample every
layer has its own independent draw and samples are independent of each other, exactly as
Eq. 8 needs; what the slots add is that the draws do not depend on which *other* layer
types a network contains or on how many: two NAS candidates that share a layer type see
the same draws for its first layers (common random numbers, so their intervals differ by
their layers, not by Monte Carlo noise), and a service can keep the drawn blocks of a
family and re-use them for every request (:class:`SampleBank`). The straightforward
reference (:meth:`DistBatch.sum_samples`) draws the blocks anew each time; the bank gives
the same totals up to floating-point summation order (relative 1e-15).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

__all__ = ["Family", "DistBatch", "SampleBank", "conformal_index", "layer_intervals", "aggregate",
           "intervals_from_samples",
           "NetworkInterval", "DEFAULT_SAMPLES", "DEFAULT_SEED", "COUPLINGS", "DEFAULT_COUPLING", "SLOT_BLOCK"]

DEFAULT_SAMPLES = 10_000
DEFAULT_SEED = 20240611
#: Sample slots per generator block (see "Where the draws come from").
SLOT_BLOCK = 8


def _factor(center: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``center * (1 + a)`` where ``a >= 0`` and ``center / (1 - a)`` where ``a < 0`` (``a``:
    difficulty times signed score), in place in ``a``."""
    neg = a < 0
    np.abs(a, out=a)
    a += 1.0
    np.reciprocal(a, out=a, where=neg)
    a *= center
    return a


@dataclass(frozen=True, eq=False)
class Family:
    """Sorted calibration scores shared by the layers of one type (for one metric)."""

    kind: Literal["log", "mult"]
    scores: np.ndarray  # ascending, finite, >= 0 for "log", > 0 for "mult"
    name: str = ""

    def __post_init__(self) -> None:
        s = np.asarray(self.scores, dtype=float)
        if s.ndim != 1 or s.size == 0:
            raise ValueError(f"family {self.name!r}: scores must be a non-empty 1-D array")
        if not np.all(np.isfinite(s)):
            raise ValueError(f"family {self.name!r}: scores must be finite")
        if self.kind not in ("log", "mult"):
            raise ValueError(f"family {self.name!r}: unknown kind {self.kind!r}")
        if self.kind == "mult" and np.any(s <= 0):
            raise ValueError(f"family {self.name!r}: multiplicative factors must be positive")

        object.__setattr__(self, "scores", np.sort(s))

    @property
    def n(self) -> int:
        return int(self.scores.size)

    def max_certified_confidence(self) -> float:
        """The largest ``c`` for which the conformal interval is finite (``n / (n+1)``)."""
        return self.n / (self.n + 1.0)

    @property
    def n_outcomes(self) -> int:
        """Size of the uniform index a draw takes (log: sign x ``J``, mult: ``J``; ``J`` in 0..n)."""
        return 2 * (self.n + 1) if self.kind == "log" else self.n + 1

    def values(self, v: np.ndarray) -> np.ndarray:
        """The unit draw (score times sign for log) of each outcome index in ``v``."""
        n = self.n
        if self.kind == "log":
            # one integer per draw: its low bit is the sign, the rest J uniform on 0..n
            a = self.scores[np.minimum(v >> 1, n - 1)]
            a *= (v & 1) * 2.0 - 1.0
            return a
        return self.scores[np.minimum(v, n - 1)]

    def table(self) -> np.ndarray:
        """:meth:`values` of every outcome index, ``table()[v] == values(v)`` (cached)."""
        t = self.__dict__.get("_table")
        if t is None:
            t = self.values(np.arange(self.n_outcomes, dtype=np.int64))
            t.setflags(write=False)
            object.__setattr__(self, "_table", t)
        return t


def _family_keys(families: Sequence[Family]) -> list[str]:
    """Stream keys: the family name, made unique by position where missing or repeated."""
    seen: set[str] = set()
    keys = []
    for i, f in enumerate(families):
        k = f.name if f.name and f.name not in seen else f"{f.name}#{i}"
        seen.add(k)
        keys.append(k)
    return keys


def _slot_rng(seed: int, key: str, block: int) -> np.random.Generator:
    """The generator of sample-slot block ``block`` of the family stream ``key``."""
    k = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([int(seed) % (1 << 64), k, int(block)]))


def _draw_slots(fam: Family, seed: int, key: str, block: int, rows: int, n_samples: int) -> np.ndarray:
    """Outcome indices of the first ``rows`` slots of a block, shape ``(rows, n_samples)``."""
    return _slot_rng(seed, key, block).integers(0, fam.n_outcomes, size=(rows, n_samples))


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
    scale: np.ndarray  # (N,) log: relative difficulty; mult: base latency in ms
    family: np.ndarray  # (N,) int index into families
    families: list[Family] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.center = np.ascontiguousarray(self.center, dtype=float).reshape(-1)
        self.scale = np.ascontiguousarray(self.scale, dtype=float).reshape(-1)
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

    def sample(self, n_samples: int, seed: int = DEFAULT_SEED) -> np.ndarray:
        """Per-layer draws, shape ``(N, n_samples)`` (memory: N x n_samples floats); the same
        draws whose per-sample sums :meth:`sum_samples` returns."""
        out = np.empty((len(self), n_samples))
        for rows, b, v in self._slot_draws(n_samples, seed):
            out[rows] = self._scaled(rows, v)
        return out

    def _slot_draws(self, n_samples: int, seed: int):
        """Yields ``(rows, block, outcome indices)`` for every block of every family."""
        keys = _family_keys(self.families)
        for fi in np.unique(self.family):
            fam = self.families[int(fi)]
            rows_all = np.flatnonzero(self.family == fi)
            for b, s in enumerate(range(0, rows_all.size, SLOT_BLOCK)):
                rows = rows_all[s:s + SLOT_BLOCK]
                yield rows, b, _draw_slots(fam, seed, keys[int(fi)], b, rows.size, n_samples)

    def _scaled(self, rows: np.ndarray, v: np.ndarray) -> np.ndarray:
        fam = self.families[int(self.family[rows[0]])]
        a = fam.values(v)
        a *= self.scale[rows, None]
        if fam.kind == "log":
            _factor(self.center[rows, None], a)
        return a

    def sum_samples(self, n_samples: int, seed: int = DEFAULT_SEED,
                    shared: bool = False) -> np.ndarray:
        """Draws of the network total, shape ``(n_samples,)``, block by block (the reference
        implementation; :class:`SampleBank` gives the same totals from kept blocks).
        ``shared``: every layer of a family takes the family's first slot (``coupling="type"``)."""
        total = np.zeros(n_samples)
        if shared:
            keys = _family_keys(self.families)
            for fi in np.unique(self.family):
                fam = self.families[int(fi)]
                rows = np.flatnonzero(self.family == fi)
                v = fam.values(_draw_slots(fam, seed, keys[int(fi)], 0, 1, n_samples)[0])
                if fam.kind == "log":
                    total += _factor(self.center[rows, None], np.outer(self.scale[rows], v)).sum(axis=0)
                else:
                    total += float(self.scale[rows].sum()) * v
            return total
        for rows, _, v in self._slot_draws(n_samples, seed):
            d = self._scaled(rows, v)
            total += d.sum(axis=0)
        return total


class SampleBank:
    """Kept sample slots (their outcome indices), one contiguous matrix per family stream, so
    that a network total costs a gather from each layer's outcome table (``log``: ``center *
    (1 + scale * |Family.table()|)^eps``, as many values as the family has outcomes, a few hundred
    to a few thousand) or one matrix-vector product (``mult``) per family instead of fresh
    random draws. Slots are drawn block by block as networks need them.

    Thread-safe; bounded by ``max_bytes`` (the least recently used families are dropped and
    drawn again when needed; a family that alone would not fit is drawn for the call and
    not kept). The totals equal :meth:`DistBatch.sum_samples` up to summation order.
    """

    def __init__(self, max_bytes: int = 192 << 20) -> None:
        self.max_bytes = int(max_bytes)
        #: key -> [family, slot matrix (capacity x n_samples), filled rows]
        self._fams: OrderedDict[tuple, list] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._fams)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._fams.clear()
            self._bytes = 0

    def _slots(self, fam: Family, seed: int, key: str, rows: int, n_samples: int) -> np.ndarray:
        """The outcome indices of the first ``rows`` slots of a family stream, ``(rows, n_samples)``."""
        k = (int(seed), key, id(fam), int(n_samples))
        with self._lock:
            ent = self._fams.get(k)
            if ent is not None and ent[0] is fam:
                self._fams.move_to_end(k)
                if ent[2] >= rows:
                    return ent[1][:rows]
            else:
                ent = None
            filled = ent[2] if ent is not None else 0
            old = ent[1] if ent is not None else None
        n_blocks = -(-rows // SLOT_BLOCK)
        cap = max(n_blocks, 2 * (filled // SLOT_BLOCK)) * SLOT_BLOCK
        mat = np.empty((cap, n_samples), dtype=np.int32)
        if filled:
            mat[:filled] = old[:filled]  # type: ignore[index]
        for b in range(filled // SLOT_BLOCK, n_blocks):
            mat[b * SLOT_BLOCK:(b + 1) * SLOT_BLOCK] = _draw_slots(fam, seed, key, b, SLOT_BLOCK, n_samples)
        done = n_blocks * SLOT_BLOCK
        if mat.nbytes <= self.max_bytes:
            with self._lock:
                cur = self._fams.get(k)
                if cur is None or cur[2] < done:
                    if cur is not None:
                        self._bytes -= cur[1].nbytes
                    self._fams[k] = [fam, mat, done]  # the family is kept alive, so its id stays unique
                    self._fams.move_to_end(k)
                    self._bytes += mat.nbytes
                    while self._bytes > self.max_bytes and len(self._fams) > 1:
                        first = next(iter(self._fams))
                        if first == k:
                            self._fams.move_to_end(k)
                            continue
                        self._bytes -= self._fams.pop(first)[1].nbytes
        return mat[:rows]

    def sum_samples(self, dist: DistBatch, n_samples: int, seed: int = DEFAULT_SEED, shared: bool = False
                    ) -> np.ndarray:
        """Draws of the network total, the numbers :meth:`DistBatch.sum_samples` gives
        (``shared``: one draw per family, ``coupling="type"``)."""
        total = np.zeros(n_samples)
        if not len(dist):
            return total
        mc = native_mc() if shared else None
        keys = _family_keys(dist.families)
        fam_idx = dist.family
        order = np.argsort(fam_idx, kind="stable") if fam_idx.size > 1 and np.any(fam_idx[1:] < fam_idx[:-1]) else None
        fam_sorted = fam_idx if order is None else fam_idx[order]
        # the layers' centres and scales in family order, so that each family's are a slice
        center, scale = (dist.center, dist.scale) if order is None else (dist.center[order], dist.scale[order])
        cuts = np.flatnonzero(fam_sorted[1:] != fam_sorted[:-1]) + 1
        bounds = [0, *cuts.tolist(), int(fam_sorted.size)]
        native: tuple[list, list, list] = ([], [], [])  # log families for the kernel: tables, slots, row bounds
        for s0, e0 in zip(bounds[:-1], bounds[1:]):
            fi = int(fam_sorted[s0])
            fam = dist.families[fi]
            table = fam.table()
            if fam.kind == "log":
                if shared:  # the family's total for every outcome, then one gather
                    slots = self._slots(fam, seed, keys[fi], 1, n_samples)[0]
                    if mc is None:
                        total += np.take(_shared_log_total(fam, center[s0:e0], scale[s0:e0]), slots)
                    else:
                        native[0].append(table)
                        native[1].append(slots)
                        native[2].extend((s0, e0))
                else:
                    # each layer's value of every outcome
                    per_outcome = _factor(center[s0:e0, None], np.outer(scale[s0:e0], table))
                    v = self._slots(fam, seed, keys[fi], e0 - s0, n_samples)
                    total += np.take_along_axis(per_outcome, v, axis=1).sum(axis=0)
            elif shared:
                total += float(scale[s0:e0].sum()) * np.take(table, self._slots(fam, seed, keys[fi], 1, n_samples)[0])
            else:
                total += scale[s0:e0] @ np.take(table, self._slots(fam, seed, keys[fi], e0 - s0, n_samples))
        if native[0]:
            mc.add_shared_log(total, native[0], native[1], center, scale, np.array(native[2], dtype=np.intp))
        return total


_UNSET = object()
_native_mc: object = _UNSET


def native_mc() -> object | None:
    """:mod:`estimator.native_mc`, the compiled kernel of the ``log`` families' shared-draw totals
    (:func:`_shared_log_total` and the gathers, all families in one call), or None where it is not built
    (``pip install`` builds it where a C compiler exists, as :mod:`estimator.native_import`)."""
    global _native_mc
    if _native_mc is _UNSET:
        try:
            from . import native_mc as mod  # noqa: PLC0415
        except ImportError:
            mod = None
        _native_mc = mod
    return _native_mc


def _shared_log_total(fam: Family, center: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``sum(center * factor(scale * u))`` over a ``log`` family's layers for every outcome ``u``
    of its table: above the estimate the factor is linear, ``sum(center) + u * center @ scale``;
    below it ``center @ (1 / (1 + scale * |u|))``, a matrix only over the outcomes below, with
    one row per distinct ``scale`` (its layers' centres summed): a network's layers of one type
    share a few scales (DeiT-Tiny's 260 layers, 12 identical blocks, have about 20)."""
    t = fam.table()
    below = fam.__dict__.get("_below")
    if below is None:  # (the outcomes below the estimate and their |u|, kept with the table)
        neg = np.flatnonzero(t < 0)
        below = (neg, -t[neg])
        object.__setattr__(fam, "_below", below)
    neg, mag = below
    g = t * float(center @ scale)
    g += float(center.sum())
    if scale.size > 1:
        scale, inv = np.unique(scale, return_inverse=True)
        center = np.bincount(inv, weights=center, minlength=scale.size)
    m = np.multiply.outer(scale, mag)
    m += 1.0
    np.reciprocal(m, out=m)
    g[neg] = center @ m
    return g


def layer_intervals(dist: DistBatch, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer ``confidence`` intervals ``(lo, hi)`` (arrays of length N), exact."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    # per family: log (center / (1 + q scale), center (1 + q scale)) or mult (scale * [f_lo, f_hi])
    n_fam = len(dist.families)
    log = np.zeros(n_fam, dtype=bool)
    q_lo = np.zeros(n_fam)
    q_hi = np.zeros(n_fam)
    for i, fam in enumerate(dist.families):
        if fam.kind == "log":
            log[i] = True
            q_lo[i] = q_hi[i] = fam.scores[conformal_index(fam.n, confidence)]
        else:
            q_lo[i] = fam.scores[conformal_index(fam.n, (1.0 - confidence) / 2.0)]
            q_hi[i] = fam.scores[conformal_index(fam.n, (1.0 + confidence) / 2.0)]
    fi = dist.family
    s, a, b = log[fi], q_lo[fi], q_hi[fi]
    lo = np.where(s, dist.center / (1.0 + a * dist.scale), dist.scale * a)
    hi = np.where(s, dist.center * (1.0 + b * dist.scale), dist.scale * b)
    return lo, hi


@dataclass(frozen=True)
class NetworkInterval:
    confidence: float
    lower: float
    upper: float

    @property
    def width(self) -> float:
        return self.upper - self.lower


COUPLINGS = ("independent", "type")
#: The estimator's default coupling (``estimator predict/evaluate``, the service, nas): on
#: the measured host-cpu profile, independent CM_LV 90 % intervals covered 11 of 14
#: networks, per-type coupling all 14 (README, tests/perf/estimator_accuracy.py).
DEFAULT_COUPLING = "type"


def aggregate(dist: DistBatch, confidences: Sequence[float], *, n_samples: int = DEFAULT_SAMPLES,
              seed: int = DEFAULT_SEED, coupling: str = "independent",
              return_samples: bool = False, bank: SampleBank | None = None
              ) -> tuple[dict[float, NetworkInterval], np.ndarray | None]:
    """Network-level intervals of one metric.

    ``coupling="independent"`` (default): Monte Carlo convolution of the layers'
    distributions (Eq. 8), i.e. independent layer errors; relative widths shrink roughly
    as 1/sqrt(layers). ``coupling="type"``: perfectly correlated within a layer type
    (family), independent across types (see the module docstring).

    ``bank`` takes the draws from kept sample-slot blocks (the same numbers, see
    :class:`SampleBank`); without it every block is drawn here.

    Returns ``({confidence: NetworkInterval}, samples_or_None)`` (the Monte Carlo totals
    when ``return_samples``). Deterministic for a fixed ``seed``. An empty network has the
    degenerate interval ``[0, 0]``.
    """
    for c in confidences:
        if not 0.0 < c < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {c}")
    if coupling not in COUPLINGS:
        raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
    if len(dist) == 0:
        return {float(c): NetworkInterval(float(c), 0.0, 0.0) for c in confidences}, (
            np.zeros(n_samples) if return_samples else None)
    shared = coupling == "type"
    total = (bank.sum_samples(dist, n_samples, seed, shared=shared) if bank is not None
             else dist.sum_samples(n_samples, seed, shared=shared))
    return intervals_from_samples(total, confidences), (total if return_samples else None)


def _inverted_cdf_index(n: int, p: float) -> int:
    """The 0-based order statistic that ``np.quantile(..., method="inverted_cdf")`` returns
    for level ``p`` of ``n`` values (its own arithmetic: ``n * p - 1``, rounded up unless
    exact, at least 0)."""
    v = n * p - 1.0
    prev = float(np.floor(v))
    k = prev if v - prev == 0 else prev + 1.0
    return max(int(k), 0)


def _kth_smallest(a: np.ndarray, k: int) -> float:
    """The ``k``-th smallest value of ``a`` (0-based), exactly, without selecting over the
    whole array when ``k`` lies in a tail: a strided subsample gives a threshold that
    brackets the ``k``-th value with a margin, the values on the tail's side of it are
    selected from (a few hundred of 10,000), and a threshold that failed to bracket falls
    back to the full selection. Ties are harmless: every value left out lies strictly
    beyond every value kept."""
    n = a.size
    step = 16
    if n >= 64 * step and (k < n // 4 or k >= n - n // 4):
        sub = a[::step]
        m = sub.size
        lower = k < n // 4
        r = k if lower else n - 1 - k  # rank from the tail's end
        j = min(m - 1, int((r + 1) * m / n * 1.5) + 8)  # the subsample's rank past it, with margin
        if lower:
            thr = np.partition(sub, j)[j]
            cand = a[a <= thr]
            if cand.size > k:
                return float(np.partition(cand, k)[k])
        else:
            thr = np.partition(sub, m - 1 - j)[m - 1 - j]
            cand = a[a >= thr]
            skipped = n - cand.size  # all smaller than every kept value
            if skipped <= k:
                i = k - skipped
                return float(np.partition(cand, i)[i])
    return float(np.partition(a, k)[k])


def _quantiles(total: np.ndarray, levels: Sequence[float]) -> list[float]:
    """``np.quantile(total, levels, method="inverted_cdf")``, the same values, by tail
    selection (:func:`_kth_smallest`): three of these per estimate were a tenth of the
    service's time per network. Anything but finite values goes to numpy itself."""
    if total.ndim != 1 or not total.size or not np.isfinite(total.sum()):
        return [float(x) for x in np.quantile(total, levels, method="inverted_cdf")]
    n = total.size
    return [_kth_smallest(total, _inverted_cdf_index(n, float(p))) for p in levels]


def intervals_from_samples(total: np.ndarray, confidences: Sequence[float]
                           ) -> dict[float, NetworkInterval]:
    """Equal-tailed ``inverted_cdf`` quantile intervals of Monte Carlo totals."""
    levels = [p for c in confidences for p in ((1.0 - c) / 2.0, (1.0 + c) / 2.0)]
    q = _quantiles(total, levels)
    out: dict[float, NetworkInterval] = {}
    for i, c in enumerate(confidences):
        lo, hi = float(q[2 * i]), float(q[2 * i + 1])
        out[float(c)] = NetworkInterval(float(c), lo, hi)
    return out
