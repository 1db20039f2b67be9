"""The estimator's public face: per-layer and per-network latency with three conformal intervals.

.. code-block:: python

    from estimator.predict import Estimator

    est = Estimator.from_profile("host-cpu")            # trains or loads cached models
    net = est.estimate_network("resnet18.onnx", confidence=[0.9, 0.95])
    net.total_ms, net.interval("CM_LV", 0.9)
    net.to_dict()                                        # JSON-ready

Latency is in milliseconds everywhere. Every layer is estimated: types with a model use
their random forest, all others (no data, type ``other``, too few rows) the profile's
roofline fallback, flagged ``fallback`` and ``out_of_design_space``; nothing is dropped
and no layer is silently zero. Layers of one type are predicted in one batched model
call. The network total is the sum of layer predictions (Eq. 7); its intervals come from
the Monte Carlo convolution of the layers' conformal predictive distributions (Eq. 8,
:mod:`estimator.aggregate`). When a layer lies outside the design space or a CM_O upper bound
exceeds 10x the total, ``cm_o_drivers`` names the layers that drive CM_O and why
(:mod:`estimator.drivers`), with or without the per-layer rows.

Network calibration
-------------------
When the profile has network rows (``networks.csv``: whole networks measured on the
target, at least :data:`estimator.calibration.MIN_NETWORKS`), ``total_ms`` and
``intervals`` are the *calibrated* values (:mod:`estimator.calibration`): the Eq. 7 total
corrected for the bias the rows show, and intervals calibrated conformally on them. The
Eq. 7/8 values stay under ``uncalibrated``, and ``calibration`` says what applied (method,
how many networks, measured by what, when) or why nothing did. Per-layer rows are always
the layer models' own. The calibration is fitted on first use, from this estimator's own
uncalibrated estimates of the rows' networks (so it matches its coupling and sampling).
A profile used on a host or runtime other than the one its numbers were measured (or
calibrated) on adds a warning to every estimate (:mod:`estimator.fingerprint`).

Layers on the target's CPU
--------------------------
An accelerator profile (Vela's imx93) says which layers its compiler leaves on the CPU:
ONNX ops outside its supported set (``op_mapping.cpu_fallback_ops``). Those layers are
flagged ``runs_on_cpu``. Where the profile has ``op_mapping.cpu_estimate`` and no row measured them,
they are estimated by that CPU roofline, ``overhead + max(ops / peak ops, bytes / peak
bandwidth)`` (:meth:`Estimator.cpu_layers`), flagged ``cpu_unverified`` and
``out_of_design_space``, with intervals a log-uniform factor ``factor`` either side at every
confidence (at 0.9 about x/÷ 3.5 for factor 4): never 0 ms, never NPU time. A warning counts
them and their share of the total.

Fast and reference paths
------------------------
By default (``Estimator(..., fast=True)``) estimates use the fast path: ONNX shapes
propagated by the importer itself (:func:`estimator.onnx_import.load_network` with
``fast=True``), flattened forests and precomputed k-NN trees (:mod:`estimator.fastpath`)
and kept Monte Carlo sample blocks (:class:`~estimator.aggregate.SampleBank`).
``fast=False`` (per estimator, or per call of :meth:`Estimator.estimate_network`,
:meth:`Estimator.estimate_layers`, :meth:`Estimator.predict_batch`) runs the straightforward
reference path: ONNX shape inference, and per layer type the libraries' public calls
(scikit-learn's ``predict`` of the forest and of every tree, crepes'
``DifficultyEstimator.apply``, and ``ConformalRegressor.predict_int`` per metric and
confidence for the per-layer intervals), fresh Monte Carlo draws. Both give the same numbers (``tests/test_fastpath.py``:
1e-9 relative, in practice equal up to floating-point summation order).
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .aggregate import (COUPLINGS, DEFAULT_COUPLING, DEFAULT_SAMPLES, DEFAULT_SEED, DistBatch, Family, SampleBank,
                        aggregate, layer_intervals)
from .calibration import MIN_NETWORKS, REFERENCE_CONFIDENCE, layer_kind
from .dataset import excluded_message
from .drivers import cm_o_drivers
from .errors import UserError
from .interface import cm_o_is_wide
from .layers import Layer, describe, describe_strict, weight_bound
from .fingerprint import last_level_cache_bytes
from .models import METRICS, BatchPrediction, DeviceModels, elem_bytes_for, get_models
from .profile import Profile, load_profile

__all__ = ["Estimator", "LayerEstimate", "NetworkEstimate", "make_layer", "parse_confidence", "METRICS"]


def parse_confidence(confidence: float | Iterable[float] | None) -> list[float]:
    """Validate and normalise confidence levels (sorted, unique, each in (0, 1))."""
    if confidence is None:
        return [0.9]
    if isinstance(confidence, (int, float)):
        confidence = [confidence]
    out: list[float] = []
    for c in confidence:
        try:
            cf = float(c)
        except (TypeError, ValueError):
            raise UserError(f"confidence must be a number in (0, 1), got {c!r}") from None
        if not (0.0 < cf < 1.0) or not math.isfinite(cf):
            raise UserError(f"confidence must be in (0, 1) (e.g. 0.9), got {c!r}")
        out.append(cf)
    if not out:
        raise UserError("at least one confidence level is needed")
    return sorted(set(out))


def _ckey(c: float) -> str:
    return f"{c:g}"


def make_layer(layer_type: str, params: Mapping[str, Any], name: str = "", *, strict: bool = False) -> Layer:
    """A :class:`~estimator.layers.Layer` from a bare configuration (pruning tools, tests);
    ``strict``: a parameter the type does not read is an error (:func:`~estimator.layers.describe_strict`)."""
    counts = describe_strict(layer_type, params) if strict else describe(layer_type, params)
    return Layer(name=name or layer_type, type=layer_type, params=dict(params), counts=counts)


@dataclass
class LayerEstimate:
    name: str
    type: str
    op_type: str
    features: dict[str, float]
    ops: float
    prediction_ms: float
    t_op_ms: float | None  # time per operation (None for fallback layers)
    #: metric -> confidence -> (lower_ms, upper_ms)
    intervals: dict[str, dict[float, tuple[float, float]]]
    out_of_design_space: bool
    ood_reasons: list[str]
    fallback: bool
    flags: list[str] = field(default_factory=list)

    def interval(self, metric: str = "CM_LV", confidence: float | None = None) -> tuple[float, float]:
        per = self.intervals[metric]
        return per[confidence if confidence is not None else min(per)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "op_type": self.op_type,
            "features": dict(self.features),
            "ops": self.ops,
            "prediction_ms": self.prediction_ms,
            "t_op_ms": self.t_op_ms,
            "intervals": {m: {_ckey(c): [lo, hi] for c, (lo, hi) in per.items()} for m, per in self.intervals.items()},
            "out_of_design_space": self.out_of_design_space,
            "ood_reasons": list(self.ood_reasons),
            "fallback": self.fallback,
            "flags": list(self.flags),
        }


@dataclass
class NetworkEstimate:
    device: str
    target: str
    total_ms: float
    confidence: list[float]
    #: metric -> confidence -> (lower_ms, upper_ms)
    intervals: dict[str, dict[float, tuple[float, float]]]
    layers: list[LayerEstimate]
    warnings: list[str] = field(default_factory=list)
    coupling: str = DEFAULT_COUPLING
    #: ONNX node -> why it costs nothing (from the importer; not estimated, listed for transparency)
    free_nodes: dict[str, str] = field(default_factory=dict)
    name: str = ""
    #: (layers, fallback, out of design space) when the rows were not built
    #: (``estimate_network(..., per_layer=False)``: ``layers`` is then empty)
    layer_counts: tuple[int, int, int] | None = field(default=None, repr=False)
    #: the Eq. 7/8 values {"total_ms", "intervals"} when ``total_ms``/``intervals`` are calibrated
    uncalibrated: dict[str, Any] | None = None
    #: what calibration applied: {"applied": bool, ...} (see :meth:`Estimator.calibration_info`)
    calibration: dict[str, Any] = field(default_factory=lambda: {"applied": False})
    #: the layers that drive the CM_O interval, and why (:mod:`estimator.drivers`): set when a
    #: layer is out of the design space or a CM_O upper bound is wide, else empty
    cm_o_drivers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        return self.layer_counts[0] if self.layer_counts is not None else len(self.layers)

    @property
    def n_fallback(self) -> int:
        if self.layer_counts is not None:
            return self.layer_counts[1]
        return sum(l.fallback for l in self.layers)

    @property
    def n_out_of_design_space(self) -> int:
        if self.layer_counts is not None:
            return self.layer_counts[2]
        return sum(l.out_of_design_space for l in self.layers)

    def interval(self, metric: str = "CM_LV", confidence: float | None = None) -> tuple[float, float]:
        per = self.intervals[metric]
        return per[confidence if confidence is not None else self.confidence[0]]

    def relative_width(self, metric: str = "CM_LV", confidence: float | None = None) -> float:
        lo, hi = self.interval(metric, confidence)
        return (hi - lo) / self.total_ms if self.total_ms > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device": self.device,
            "target": self.target,
            "unit": "ms",
            "total_ms": self.total_ms,
            "confidence": list(self.confidence),
            "coupling": self.coupling,
            "intervals": {m: {_ckey(c): [lo, hi] for c, (lo, hi) in per.items()} for m, per in self.intervals.items()},
            "n_layers": self.n_layers,
            "n_fallback": self.n_fallback,
            "n_out_of_design_space": self.n_out_of_design_space,
            "layers": [l.to_dict() for l in self.layers],
            "free_nodes": dict(self.free_nodes),
            "warnings": list(self.warnings),
            "uncalibrated": None if self.uncalibrated is None else {
                "total_ms": self.uncalibrated["total_ms"],
                "intervals": {m: {_ckey(c): [lo, hi] for c, (lo, hi) in per.items()}
                              for m, per in self.uncalibrated["intervals"].items()}},
            "calibration": dict(self.calibration),
            "cm_o_drivers": [dict(d) for d in self.cm_o_drivers],
        }


class Estimator:
    """Latency estimates with CM_TV / CM_LV / CM_O intervals for one device profile."""

    def __init__(self, profile: Profile, models: DeviceModels, *, n_samples: int = DEFAULT_SAMPLES,
                 seed: int = DEFAULT_SEED, coupling: str = DEFAULT_COUPLING, fast: bool = True,
                 sample_bank_mb: float = 192.0, mc_threads: int | None = None) -> None:
        if n_samples < 100:
            raise UserError(f"n_samples must be >= 100, got {n_samples}")
        if coupling not in COUPLINGS:
            raise UserError(f"coupling must be one of {', '.join(COUPLINGS)}, got {coupling!r}")
        self.coupling = coupling
        self.profile = profile
        self.models = models
        self.n_samples = int(n_samples)
        self.seed = int(seed)
        self.fast = bool(fast)
        self._fusion: Any = None
        self._fast_models: Any = None
        self._fast_lock = threading.Lock()
        self.sample_bank = SampleBank(int(sample_bank_mb * 2**20))
        #: threads for the Monte Carlo sums on the fast path (None: one per metric, at most
        #: the CPUs this process may use; 1: none)
        self.mc_threads = mc_threads
        self._pool: Any = None
        self._calibration: tuple[Any, dict[str, Any], list[str]] | None = None
        self._cal_lock = threading.Lock()
        self._host_warning: list[str] | None = None
        self._cold: tuple[float | None, frozenset[str]] | None = None

    @classmethod
    def from_profile(cls, profile: str | Path | Profile, *, root: str | Path | None = None, target: str = "lum",
                     cache_root: str | Path | None = None, retrain: bool = False, n_jobs: int = 1,
                     progress: Callable[[str, int, int], None] | None = None, n_samples: int = DEFAULT_SAMPLES,
                     seed: int = DEFAULT_SEED, coupling: str = DEFAULT_COUPLING, fast: bool = True) -> "Estimator":
        prof = profile if isinstance(profile, Profile) else load_profile(profile, root)
        models = get_models(prof, target=target, cache_root=Path(cache_root) if cache_root else None,
                            retrain=retrain, n_jobs=n_jobs, progress=progress)
        return cls(prof, models, n_samples=n_samples, seed=seed, coupling=coupling, fast=fast)

    @property
    def device(self) -> str:
        return self.profile.name

    # ------------------------------------------------------------------ paths
    def _use_fast(self, fast: bool | None) -> bool:
        return self.fast if fast is None else bool(fast)

    def fast_models(self) -> Any:
        """The fast evaluators of this estimator's models (built on first use, then kept)."""
        fm = self._fast_models
        if fm is None:
            with self._fast_lock:
                if self._fast_models is None:
                    from .fastpath import FastModels  # noqa: PLC0415

                    self._fast_models = FastModels(self.models)
                fm = self._fast_models
        return fm

    def _mc_pool(self) -> Any:
        """Threads for the three metrics' Monte Carlo sums (their matrix products release the
        GIL) when ``mc_threads`` > 1 asks for them; None (the sums run on the calling thread)
        by default: on a 2-core VM the hand-off cost more than it saved (MobileNetV2 on
        host-cpu, in-process p50 5.3 ms without the pool, 5.8 ms with it; 6.2 vs 6.9 ms with
        independent coupling), and a server already runs requests on several threads."""
        n = min(len(METRICS), self.mc_threads or 1)
        if n <= 1:
            return None
        pid = os.getpid()
        pool = self._pool
        if pool is None or pool[0] != pid:  # (a forked child does not inherit the threads)
            with self._fast_lock:
                if self._pool is None or self._pool[0] != pid:
                    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

                    self._pool = (pid, ThreadPoolExecutor(max_workers=n, thread_name_prefix="estimator-mc"))
                pool = self._pool
        return pool[1]

    def warm_up(self) -> None:
        """Build the fast evaluators and their k-d trees and draw the first Monte Carlo sample
        block of every family now, so that the first requests do not pay for it (the service
        calls this)."""
        fm = self.fast_models()
        for te in fm.types.values():
            te.knn._kdtree()  # (imports scipy.spatial, 0.2 s)
        fams = [f for t in fm.types.values() for f in t.model.families.values()]
        fams += list(self.models.fallback.families.values())
        for k, m in enumerate(METRICS):
            mfams = [f for f in fams if f.name.endswith(":" + m)]
            dist = DistBatch(np.zeros(len(mfams)), np.zeros(len(mfams)), np.arange(len(mfams)), mfams)
            self.sample_bank.sum_samples(dist, self.n_samples, self.seed + k)

    # ------------------------------------------------------------------ layers
    def predict_batch(self, layers: Sequence[Layer], *, fast: bool | None = None) -> BatchPrediction:
        """Raw batched prediction (arrays + per-metric predictive distributions)."""
        if self._use_fast(fast):
            return self.fast_models().predict_layers(layers)
        return self.models.predict_layers(layers)

    def layer_distributions(self, layers: Sequence[Layer]) -> dict[str, DistBatch]:
        """Each layer's conformal predictive distribution per metric (for custom aggregation)."""
        return self.predict_batch(layers).dists

    def _bounds(self, layers: Sequence[Layer], bp: BatchPrediction, m: str, c: float,
                use_fast: bool) -> tuple[np.ndarray, np.ndarray]:
        """Every layer's (lower, upper) of metric ``m`` at ``c``: vectorised over the batch, or
        (reference path) crepes' predict_int type by type."""
        if use_fast:
            return layer_intervals(bp.dists[m], c)
        lo, hi = self.models.crepes_layer_intervals(layers, bp.dists[m], m, c)
        cpu_est = [i for i, why in enumerate(bp.reasons) if "cpu_unverified" in why]
        if cpu_est:  # the CPU estimate is no type's conformal regressor
            idx = np.array(cpu_est)
            lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
            lo[idx], hi[idx] = layer_intervals(bp.dists[m].take(idx), c)
        return lo, hi

    def _rows(self, layers: Sequence[Layer], bp: BatchPrediction, confs: list[float],
              use_fast: bool = True) -> list[LayerEstimate]:
        cpu_est = {i for i, why in enumerate(bp.reasons) if "cpu_unverified" in why}
        # per metric and confidence, every layer's (lower, upper) as Python floats
        pairs = {m: {c: list(zip(*(a.tolist() for a in self._bounds(layers, bp, m, c, use_fast)))) for c in confs}
                 for m in METRICS}
        # each layer's {metric: {confidence: (lower, upper)}}, built column-wise
        if len(confs) == 1:
            one = confs[0]
            columns = [[{one: p} for p in pairs[m][one]] for m in METRICS]
        else:
            columns = [[dict(zip(confs, per)) for per in zip(*(pairs[m][c] for c in confs))] for m in METRICS]
        intervals = [dict(zip(METRICS, per)) for per in zip(*columns)]
        cpu_ops = set(self.profile.cpu_fallback_ops)
        maybe_cpu = self.profile.conditional_cpu_ops
        pred, t_ops = bp.pred_ms.tolist(), bp.t_op_ms.tolist()
        fallback, ood = bp.fallback.tolist(), bp.out_of_design_space.tolist()
        rows: list[LayerEstimate] = []
        for i, (l, iv, p_ms, t_op, fb, o, why) in enumerate(zip(layers, intervals, pred, t_ops, fallback, ood,
                                                                bp.reasons)):
            flags = list(l.flags)
            if l.op_type and l.op_type in cpu_ops:  # the same test as cpu_layers
                flags += ["cpu_fallback_op", "runs_on_cpu"]
            elif l.op_type and l.op_type in maybe_cpu:
                flags.append("cpu_fallback_possible")
            if i in cpu_est:
                flags.append("cpu_unverified")
            rows.append(LayerEstimate(
                name=l.name, type=l.type, op_type=l.op_type, features=dict(l.features), ops=float(l.ops),
                prediction_ms=p_ms, t_op_ms=None if fb else t_op, intervals=iv,
                out_of_design_space=o, ood_reasons=list(why), fallback=fb, flags=flags))
        return rows

    def cold_network_bytes(self) -> float | None:
        """Bytes above which a network's weight-bound layers (:func:`~estimator.layers.
        weight_bound`: weights outweigh input and output) read their weights from DRAM: half
        the last-level cache of the profile's host (its fingerprint), when the profile holds
        rows measured cold (``bench profile --cold-from``: a model with the ``cold`` feature);
        ``None`` otherwise. A network's bytes are the sum of its layers' (weights, inputs and
        outputs): a network whose weights and maps fit in the cache with room to spare keeps
        its weights there between inferences; a bigger one evicts them (docs/calibration.md,
        "Weight-bound layers")."""
        return self._cold_state()[0]

    def _cold_state(self) -> tuple[float | None, frozenset[str]]:
        """(:meth:`cold_network_bytes`, the types whose model learnt ``cold``), worked out once."""
        if self._cold is None:
            types = frozenset(t for t, m in self.models.types.items() if "cold" in m.feature_names)
            llc = last_level_cache_bytes(self.profile.fingerprint) if types else 0
            self._cold = (llc / 2 if llc else None, types)
        return self._cold

    def network_runs_cold(self, layers: Sequence[Layer]) -> bool:
        """Whether a network of these layers outgrows :meth:`cold_network_bytes` (never for a
        profile without cold rows)."""
        limit = self._cold_state()[0]
        return limit is not None and sum(l.bytes for l in layers) > limit

    def as_cold(self, layer: Layer) -> Layer:
        """``layer`` as it runs inside a network that :meth:`network_runs_cold`: a copy with
        ``cold=1`` and the flag ``weights_cold`` when it is weight-bound and its type's model
        learnt ``cold``; otherwise ``layer`` itself."""
        if layer.type not in self._cold_state()[1] or not weight_bound(layer.counts):
            return layer
        return dataclasses.replace(layer, counts=dataclasses.replace(layer.counts, features={**layer.features, "cold": 1.0}),
                                   flags=[*layer.flags, "weights_cold"])

    def _mark_cold(self, layers: list[Layer]) -> list[Layer]:
        """``layers`` as they run in their network (:meth:`as_cold` when it
        :meth:`network_runs_cold`; copies, the imported network is not changed)."""
        return [self.as_cold(l) for l in layers] if self.network_runs_cold(layers) else layers

    def context_layers(self, layers: Sequence[Layer]) -> list[Layer | None]:
        """``layers`` (a network's, in order) as this device estimates them inside that network:
        ``None`` for a layer it runs for free (``op_mapping.free_ops``), weight-bound layers
        marked cold when the network outgrows :meth:`cold_network_bytes`. The layers a
        network estimate sums are exactly the ones that are not ``None``."""
        layers = list(layers)
        kept, _, _ = self._split_free(layers)
        cold = iter(self._mark_cold(kept))
        ids = {id(l) for l in kept}
        return [next(cold) if id(l) in ids else None for l in layers]

    def cpu_layers(self, layers: Sequence[Layer]) -> list[int]:
        """The indices of the layers the target runs on its CPU: their ONNX op is in
        ``op_mapping.cpu_fallback_ops``."""
        cpu_ops = set(self.profile.cpu_fallback_ops)
        return [i for i, l in enumerate(layers) if l.op_type and l.op_type in cpu_ops]

    def _on_cpu(self, layers: Sequence[Layer], bp: BatchPrediction) -> BatchPrediction:
        """``bp`` with the layers the target runs on its CPU estimated by the profile's CPU
        roofline (``op_mapping.cpu_estimate``; see the module docstring): their point
        estimates, reasons (``cpu_unverified``) and predictive distributions replaced. ``bp``
        itself where the profile has no CPU estimate or no layer runs on the CPU."""
        est = self.profile.cpu_estimate
        cpu = self.cpu_layers(layers) if est else []
        if not cpu:
            return bp
        idx = np.array(cpu, dtype=np.int64)
        eb = elem_bytes_for(self.profile.precision)

        def nbytes(l: Layer) -> float:  # at the profile's element size (int8 on an NPU)
            try:
                return float(describe(l.type, l.params, elem_bytes=eb).bytes)
            except UserError:
                return float(l.bytes) * eb / 4.0

        ops = np.array([max(float(layers[i].ops), 1.0) for i in idx])
        byt = np.array([max(nbytes(layers[i]), 1.0) for i in idx])
        point = float(est["overhead_ms"]) + np.maximum(ops / (float(est["gops_per_s"]) * 1e6),
                                                       byt / (float(est["gbytes_per_s"]) * 1e6))
        f = float(est["factor"])
        fam = Family("mult", np.exp(np.linspace(-math.log(f), math.log(f), 201)), name="cpu_estimate")
        n = len(layers)
        take = np.arange(n)
        take[idx] = n + np.arange(idx.size)
        dists = {m: DistBatch.concat([d, DistBatch(point, point, np.zeros(idx.size, dtype=np.int64), [fam])]).take(take)
                 for m, d in bp.dists.items()}
        pred, t_op = bp.pred_ms.copy(), bp.t_op_ms.copy()
        pred[idx], t_op[idx] = point, np.nan
        fb, ood = bp.fallback.copy(), bp.out_of_design_space.copy()
        fb[idx], ood[idx] = True, True
        reasons = [list(r) for r in bp.reasons]
        for i in idx.tolist():
            reasons[i] = ["cpu_unverified"] + [r for r in reasons[i] if r != "no_data"]
        knn = bp.knn_distance.copy()
        knn[idx] = np.nan
        return BatchPrediction(pred, t_op, bp.ops, fb, ood, reasons, dists, knn)

    def _split_free(self, layers: Iterable[Layer]) -> tuple[list[Layer], dict[str, str], list[str]]:
        """Split off the layers whose ONNX op the profile lists in ``op_mapping.free_ops``
        (ops the target turns into views, e.g. Reshape or Slice on Vela): ``(layers to
        estimate, free node -> reason, warnings)``. Free layers are not estimated; every
        ONNX node of theirs goes to the network's ``free_nodes`` with the reason, and a
        warning counts them, so nothing is dropped silently."""
        layers = list(layers)
        free_ops = set(self.profile.free_ops)
        if not free_ops:
            return layers, {}, []
        keep: list[Layer] = []
        free: dict[str, str] = {}
        counts: dict[str, int] = {}
        for l in layers:
            if l.op_type and l.op_type in free_ops:
                why = (f"{l.op_type} ({l.type} layer {l.name}) is free on {self.device}: op_mapping.free_ops "
                       f"(the target executes it as a view)")
                for n in list(l.nodes) or [l.name]:
                    free[str(n)] = why
                counts[l.op_type] = counts.get(l.op_type, 0) + 1
            else:
                keep.append(l)
        warns = []
        if counts:
            what = ", ".join(f"{n} {op}" for op, n in sorted(counts.items()))
            warns.append(f"{sum(counts.values())} layer(s) ({what}) cost nothing on {self.device} "
                         f"(op_mapping.free_ops): listed in free_nodes, not estimated")
        return keep, free, warns

    def _warnings(self, layers: Sequence[Layer], bp: BatchPrediction, confs: list[float]) -> list[str]:
        out: list[str] = []
        cpu_est = [i for i in range(len(layers)) if "cpu_unverified" in bp.reasons[i]]
        roof = [i for i in map(int, np.flatnonzero(bp.fallback)) if "cpu_unverified" not in bp.reasons[i]]
        fb_types = sorted({layers[i].type if layers[i].type != "other" else f"other({layers[i].op_type or '?'})"
                           for i in roof})
        if fb_types:
            out.append(f"{len(roof)} layer(s) of type(s) {', '.join(fb_types)} have no benchmark data "
                       f"on {self.device}: roofline fallback, flagged out_of_design_space")
        if cpu_est:
            est = self.profile.cpu_estimate or {}
            ops: dict[str, int] = {}
            for i in cpu_est:
                ops[layers[i].op_type or layers[i].type] = ops.get(layers[i].op_type or layers[i].type, 0) + 1
            t = float(bp.pred_ms[cpu_est].sum())
            out.append(f"{len(cpu_est)} layer(s) run on the CPU on {self.device} ("
                       + ", ".join(f"{n} {o}" for o, n in sorted(ops.items())) + f"), flagged runs_on_cpu: their cost "
                       f"is not measured, {t:.3g} ms of the total is an unverified CPU roofline estimate "
                       f"(op_mapping.cpu_estimate: {est.get('gops_per_s')} Gop/s, {est.get('gbytes_per_s')} GB/s, "
                       f"{est.get('overhead_ms')} ms per layer; intervals x/÷ {est.get('factor')}), flagged "
                       f"cpu_unverified")
        zero = np.flatnonzero((bp.pred_ms <= 0) & ~bp.fallback)
        if zero.size:
            types = sorted({layers[i].type for i in map(int, zero)})
            out.append(f"{zero.size} layer(s) ({', '.join(types)}) are predicted at 0 ms: their benchmark rows "
                       f"measured at or below the timing resolution (see their intervals)")
        n_ood = int((bp.out_of_design_space & ~bp.fallback).sum())
        if n_ood:
            out.append(f"{n_ood} modelled layer(s) lie outside the benchmarked design space (see ood_reasons)")
        for c in confs:
            bad = bp.dists["CM_LV"].uncertified(c)
            if bad.any():
                types = sorted({layers[i].type for i in map(int, np.flatnonzero(bad))})
                out.append(f"confidence {c:g} needs more calibration points than the profile has for "
                           f"{', '.join(types)}; those intervals use the largest calibration score")
        ops = [l.op_type for l in layers if l.op_type]
        on_cpu = sorted(set(ops).intersection(self.profile.cpu_fallback_ops))
        if on_cpu and not cpu_est:
            n = sum(o in on_cpu for o in ops)
            out.append(f"{n} layer(s) ({', '.join(on_cpu)}) run on the CPU on {self.device} "
                       f"(op_mapping.cpu_fallback_ops), flagged cpu_fallback_op; their estimates come from this "
                       f"profile's accelerator data, not from a CPU measurement")
        maybe = self.profile.conditional_cpu_ops
        may_cpu = sorted(set(ops).intersection(maybe).difference(on_cpu))
        if may_cpu:
            n = sum(o in may_cpu for o in ops)
            out.append(f"{n} layer(s) ({', '.join(may_cpu)}) may run on the CPU on {self.device}, depending on "
                       f"their attributes, flagged cpu_fallback_possible: " + "; ".join(f"{o}: {maybe[o]}"
                                                                                          for o in may_cpu))
        if self.profile.provenance.kind == "estimated":
            out.append(f"profile {self.device} holds estimated numbers (cost model), not measurements: "
                       f"{self.profile.provenance.summary()} (full provenance: estimator devices --json)")
        return out

    def estimate_layers(self, layers: Sequence[Layer], confidence: float | Iterable[float] = (0.9,), *,
                        fast: bool | None = None) -> list[LayerEstimate]:
        """One row per layer (input order), all types in one batched model call each."""
        return self.estimate_layers_with_warnings(layers, confidence, fast=fast)[0]

    def estimate_layers_with_warnings(self, layers: Sequence[Layer], confidence: float | Iterable[float] = (0.9,),
                                      *, fast: bool | None = None) -> tuple[list[LayerEstimate], list[str]]:
        """Like :meth:`estimate_layers`, plus the warnings (fallback, out of design space, ...)."""
        confs = parse_confidence(confidence)
        layers = list(layers)
        bp = self._on_cpu(layers, self.predict_batch(layers, fast=fast))
        return (self._rows(layers, bp, confs, self._use_fast(fast)),
                self._warnings(layers, bp, confs) + self.host_warnings() + self.profile_warnings())

    # ----------------------------------------------------------------- network
    def fusion_rules(self) -> Any:
        if self._fusion is None:
            self._fusion = self.profile.fusion_rules()
        return self._fusion

    def load_network(self, src: Any, input_shapes: Any = None, *, fast: bool | None = None) -> Any:
        """ONNX (path, bytes or ModelProto) -> Network, with this device's fusion rules."""
        from .onnx_import import load_network  # noqa: PLC0415 (ONNX front end only when needed)

        return load_network(src, input_shapes=input_shapes, fusion=self.fusion_rules(), fast=self._use_fast(fast))

    def estimate_network(self, network: Any, confidence: float | Iterable[float] = (0.9,), *,
                         input_shapes: Any = None, name: str = "", fast: bool | None = None,
                         per_layer: bool = True, calibrate: bool = True) -> NetworkEstimate:
        """Estimate a network: an ONNX model (path/bytes/ModelProto, fused with the profile's
        rules) or an already imported object with ``.layers`` (taken as already fused).

        ``fast`` picks the fast or the reference path for this call (default: the
        estimator's). ``per_layer=False`` skips the per-layer rows (``layers`` is empty, the
        counts are in ``layer_counts``). ``calibrate=False`` returns the Eq. 7/8 values even
        when the profile is calibrated (see the module docstring)."""
        confs = parse_confidence(confidence)
        cal, info, cal_warns = self.calibration_state() if calibrate else (None, {"applied": False}, [])
        mc_confs = confs if cal is None else sorted(set(confs) | {REFERENCE_CONFIDENCE})
        est, layers, bp = self._estimate(network, confs, mc_confs, input_shapes, name, fast, per_layer)
        est.warnings += self.host_warnings() + self.profile_warnings() + cal_warns
        if cal is None or est.total_ms <= 0:
            est.calibration = dict(info)
            if cal is not None:
                est.calibration.update(applied=False, reason="the network's Eq. 7 total is 0 ms")
            est.intervals = {m: {c: per[c] for c in confs} for m, per in est.intervals.items()}
            return self._with_drivers(est, layers, bp, fast)
        fallback_types = sorted({l.type for l in layers if l.type not in self.models.types})
        res = cal.apply(est.total_ms, len(layers), est.intervals, _kind_shares(layers, bp.pred_ms), confs,
                        fallback_types)
        est.uncalibrated = {"total_ms": est.total_ms,
                            "intervals": {m: {c: per[c] for c in confs} for m, per in est.intervals.items()}}
        est.total_ms, est.intervals = res.total_ms, res.intervals
        est.calibration = {**info, "in_scope": res.in_scope}
        if not res.in_scope:
            est.warnings.append(
                f"this network is out of the scope of {self.device}'s calibration on {cal.n} networks ({res.why}): "
                "coverage is not guaranteed; its intervals keep at least their uncalibrated width (the union of the "
                "calibrated, the uncalibrated and the bias-corrected Eq. 8 intervals)")
        for c in res.uncertified:
            est.warnings.append(f"confidence {c:g} needs more network rows than the {cal.n} of {self.device}: the "
                                f"calibrated intervals use the largest calibration score")
        return self._with_drivers(est, layers, bp, fast)

    def _with_drivers(self, est: NetworkEstimate, layers: Sequence[Layer], bp: BatchPrediction,
                      fast: bool | None) -> NetworkEstimate:
        """``est`` with its :attr:`~NetworkEstimate.cm_o_drivers` when a layer is out of the
        design space or a CM_O upper bound (calibrated or not) is wide
        (:func:`~estimator.interface.cm_o_is_wide`), at the highest requested confidence
        (:mod:`estimator.drivers`)."""
        unc = est.uncalibrated
        if not (bp.out_of_design_space.any() or cm_o_is_wide(est.total_ms, est.intervals)
                or (unc is not None and cm_o_is_wide(unc["total_ms"], unc["intervals"]))):
            return est
        c = max(est.confidence)
        if est.layers:
            upper = [row.intervals["CM_O"][c][1] for row in est.layers]
        else:
            upper = self._bounds(layers, bp, "CM_O", c, self._use_fast(fast))[1].tolist()
        est.cm_o_drivers = cm_o_drivers(layers, bp.pred_ms.tolist(), upper, bp.reasons, bp.knn_distance,
                                        self.models, c)
        return est

    def _estimate(self, network: Any, confs: list[float], mc_confs: list[float], input_shapes: Any, name: str,
                  fast: bool | None, per_layer: bool) -> tuple[NetworkEstimate, list[Layer], BatchPrediction]:
        """The Eq. 7/8 estimate (intervals at ``mc_confs``, rows at ``confs``), its estimated
        layers and their batch prediction."""
        use_fast = self._use_fast(fast)
        if hasattr(network, "layers"):
            net = network
        else:
            net = self.load_network(network, input_shapes, fast=use_fast)
            if not name and isinstance(network, (str, Path)):
                name = Path(network).stem
        layers, dev_free, free_warns = self._split_free(net.layers)
        layers = self._mark_cold(layers)
        bp = self._on_cpu(layers, self.predict_batch(layers, fast=use_fast))
        intervals: dict[str, dict[float, tuple[float, float]]] = {}
        bank = self.sample_bank if use_fast else None

        def one(k: int) -> Any:
            return aggregate(bp.dists[METRICS[k]], mc_confs, n_samples=self.n_samples, seed=self.seed + k,
                             coupling=self.coupling, bank=bank)[0]

        pool = self._mc_pool() if use_fast and len(layers) else None
        # with a pool, the Monte Carlo sums run on its threads while this one builds the rows
        pending = [pool.submit(one, k) for k in range(len(METRICS))] if pool is not None else None
        rows = self._rows(layers, bp, confs, use_fast) if per_layer else []
        results = [f.result() for f in pending] if pending is not None else [one(k) for k in range(len(METRICS))]
        for m, res in zip(METRICS, results):
            intervals[m] = {c: (res[c].lower, res[c].upper) for c in mc_confs}
        warns = [str(w) for w in getattr(net, "warnings", [])] + free_warns + self._warnings(layers, bp, confs)
        fn = getattr(net, "free_nodes", None) or {}
        free = {str(k): str(v) for k, v in fn.items()} if isinstance(fn, Mapping) else {str(k): "" for k in fn}
        free.update(dev_free)
        counts = None if per_layer else (len(layers), int(bp.fallback.sum()), int(bp.out_of_design_space.sum()))
        est = NetworkEstimate(device=self.device, target=self.models.target, total_ms=float(bp.pred_ms.sum()),
                              confidence=confs, intervals=intervals, layers=rows, warnings=warns,
                              free_nodes=free, name=name or str(getattr(net, "name", "") or ""),
                              coupling=self.coupling, layer_counts=counts)
        return est, layers, bp

    # ------------------------------------------------------------- calibration
    def profile_warnings(self) -> list[str]:
        """One line naming the profile's layer rows that training left out as impossible
        (:meth:`estimator.profile.Profile.rows`), or none; every estimate carries it."""
        excluded = (getattr(self.models, "report", None) or {}).get("excluded_rows") or []
        return [excluded_message(self.profile.measurements_path, excluded)] if excluded else []

    def host_warnings(self) -> list[str]:
        """The fingerprint warning (:mod:`estimator.fingerprint`) when this machine differs
        from where the numbers that apply here were measured: the network rows' target when
        the profile is calibrated, else the layer rows' (computed once)."""
        if self._host_warning is None:
            from . import fingerprint as fp  # noqa: PLC0415

            prof = self.profile
            cal = prof.calibration if prof.has_networks and len(prof.network_rows()) >= MIN_NETWORKS else {}
            if cal:
                threads = (cal.get("runner_options") or {}).get("threads")
                recorded = dict(cal.get("fingerprint") or {})
                w = fp.mismatch_warning(self.device, recorded, str(cal.get("runner", "")), what="calibrated") \
                    if recorded else None
                if w is None and not recorded and cal.get("runner") in fp.HOST_RUNNERS:
                    w = (f"profile {self.device} records no fingerprint of the machine its networks were measured "
                         f"on (runner {cal.get('runner')}, threads {threads}): its estimates hold there only")
            else:
                w = fp.mismatch_warning(self.device, prof.recorded_fingerprint(), prof.runner)
            self._host_warning = [w] if w else []
        return list(self._host_warning)

    def calibration_state(self) -> tuple[Any, dict[str, Any], list[str]]:
        """``(NetworkCalibration or None, calibration info, warnings)``, fitted on first use."""
        if self._calibration is None:
            with self._cal_lock:
                if self._calibration is None:
                    self._calibration = self._fit_calibration()
        return self._calibration

    def _fit_calibration(self) -> tuple[Any, dict[str, Any], list[str]]:
        from .calibration import fit_calibration  # noqa: PLC0415
        from .profile import ProfileError  # noqa: PLC0415

        prof = self.profile
        if not prof.has_networks:
            return None, {"applied": False, "reason": "the profile has no network rows (bench calibrate)"}, []
        rows = prof.network_rows()
        c = prof.calibration
        if len(rows) < MIN_NETWORKS:
            why = f"{len(rows)} network rows, calibration needs at least {MIN_NETWORKS}"
            return None, {"applied": False, "reason": why, "n_networks": len(rows)}, [
                f"profile {self.device} has {len(rows)} network rows; calibration needs at least {MIN_NETWORKS}: "
                f"estimates are uncalibrated (Eq. 7/8)"]
        crows = []
        for r in rows:
            try:
                crows.append(self.calibration_row(r["onnx_path"], r["name"], r["family"] or r["name"],
                                                  r["measured_ms"], spread_pct=r.get("spread_pct") or 0.0)[0])
            except UserError as e:
                raise ProfileError(f"{prof.networks_path}: network {r['name']!r} ({r['onnx']}): {e}") from e
        cal = fit_calibration(crows)
        rep = cal.report
        info = {"applied": True, "method": rep["method"], "formula": rep["correction"]["formula"],
                "n_networks": rep["n_networks"], "families": sorted(rep["families"]),
                "kind": c.get("kind", ""), "runner": c.get("runner", ""),
                "runner_options": dict(c.get("runner_options") or {}), "source": c.get("source", ""),
                "date": c.get("date", ""), "validation": rep["validation"],
                "cv_mean_abs_error_pct": round(rep["cv_mean_abs_error_pct"][rep["method"]], 2),
                "uncalibrated_mean_abs_error_pct": round(rep["uncalibrated_mean_abs_error_pct"], 2)}
        warns = []
        if rep.get("warning"):
            info["warning"] = rep["warning"]
            warns.append(f"calibration of {self.device}: {rep['warning']}")
        return cal, info, warns

    def calibration_row(self, network: Any, name: str, family: str, measured_ms: float, *, spread_pct: float = 0.0
                        ) -> tuple[Any, dict[str, dict[float, tuple[float, float]]]]:
        """A whole network as network calibration sees it: its
        :class:`~estimator.calibration.CalibrationRow` (this estimator's uncalibrated Eq. 7
        total, Eq. 8 spreads and kind shares, with ``measured_ms``) and its Eq. 8 intervals
        at :data:`~estimator.calibration.REFERENCE_CONFIDENCE`."""
        from .calibration import CalibrationRow, drift_of  # noqa: PLC0415

        est, layers, bp = self._estimate(network, [REFERENCE_CONFIDENCE], [REFERENCE_CONFIDENCE], None, name,
                                         None, False)
        total = est.total_ms
        spread = {m: (per[REFERENCE_CONFIDENCE][1] - per[REFERENCE_CONFIDENCE][0]) / (2 * total) if total > 0 else 0.0
                  for m, per in est.intervals.items()}
        row = CalibrationRow(name=name, family=family, measured_ms=float(measured_ms), predicted_ms=total,
                             n_layers=len(layers), spread=spread, shares=_kind_shares(layers, bp.pred_ms),
                             drift=drift_of(spread_pct))
        return row, est.intervals

    def calibration_info(self) -> dict[str, Any]:
        """What calibration applies to this device's network estimates (see :meth:`calibration_state`)."""
        return dict(self.calibration_state()[1])


def _kind_shares(layers: Sequence[Layer], pred_ms: np.ndarray) -> dict[str, float]:
    """Each layer kind's share of a network's predicted total (the kind: the type, with the
    kernel window for convolutions; :func:`estimator.calibration.layer_kind`)."""
    total = float(pred_ms.sum())
    out: dict[str, float] = {}
    if total <= 0:
        return out
    for l, t in zip(layers, pred_ms.tolist()):
        k = layer_kind(l.type, l.features)
        out[k] = out.get(k, 0.0) + t / total
    return out
