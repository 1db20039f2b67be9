"""Feasibility and the CM_O penalty: how an estimate with intervals enters the search.

Feasibility (the latency constraint)
-----------------------------------
A candidate is feasible when the upper bound of its CM_LV interval at the chosen
confidence ``c`` (``--confidence``, default 0.9) is within the budget ``B``::

    constraint = CM_LV_upper(c) - B   <=   0

This is the value Optuna's constraint machinery sees (:func:`latency_constraint` is the
``constraints_func``; on Optuna >= 5, where ``constraints_func`` is deprecated, the same
value is stored with ``Trial.set_constraint``). The samplers use it to steer away from
infeasible regions, and infeasible trials never become the best.

The CM_O penalty
----------------
CM_O is calibrated on k-NN distances to the benchmarked configurations: it widens where a
network leaves the design space the profile was measured on, i.e. where the estimate
itself is less trustworthy. With ``t`` the point estimate, ``[lo_O, hi_O]`` the network's
CM_O interval at confidence ``c``, ``n_ood`` the number of layers flagged
``out_of_design_space`` (outside the benchmarked feature ranges, farther from the data
than any benchmarked row, or with no data at all: roofline fallback) and ``n`` the
number of layers::

    u         = (hi_O - lo_O) / t                     CM_O width relative to the prediction
    u_ood     = sum over flagged layers of their own CM_O width / t
    f         = n_ood / n                             fraction of layers outside the design space
    P         = ln(1 + u) + ln(1 + u_ood) + f
    objective = score - |score| * (1 - exp(-W * P))   W = --penalty-weight (default 0.1)

``P`` is dimensionless and grows with both the CM_O width and the number of flagged
layers (the log keeps one enormous interval from swamping everything else). ``u_ood`` is
the share of the estimate's outlier uncertainty that comes from the flagged layers: the
network-level ``u`` alone can be *narrower* for a network with one large out-of-space
layer than for an in-space one (Eq. 8 narrows relative widths as layers add up, and a
big layer dilutes the rest), so ``u_ood`` makes sure a candidate resting on
extrapolated layers pays for it, in proportion to how much of its latency they carry. The penalty
takes the fraction ``1 - exp(-W * P)`` of the score's magnitude away, so one weight works
for any objective scale (a NASWOT score in the hundreds, an accuracy in [0, 1]), and it
never takes more than all of it: a positive score stays positive, ranks are decided by
``score * exp(-W * P)``. A score of exactly 0 is not penalised; ``W = 0`` turns the
penalty off. Typical values (``imx93``, default space, 100-trial runs): a network CM_O
0.9-1.3x as wide as its CM_LV at the median, ``P`` 0.76-2.5, so ``W = 0.1`` takes 7-22 %
off, and each 10 % of layers outside the design space another ~1 %; raise ``W`` to trust
the estimates' confidence more than the score. In multi-objective mode the penalised score is the first objective and the point
estimate ``t`` the second.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["Estimate", "Penalty", "penalty", "penalised", "constraint_value", "latency_constraint",
           "CONSTRAINT_KEY", "CONSTRAINT_METRIC", "METRICS"]

METRICS = ("CM_TV", "CM_LV", "CM_O")
#: the metric whose upper bound the budget constrains
CONSTRAINT_METRIC = "CM_LV"
#: name of the latency constraint (Trial.set_constraint key / user attribute)
CONSTRAINT_KEY = "latency_budget"


@dataclass
class Estimate:
    """The estimator's answer for one candidate, reduced to what the search records."""

    total_ms: float
    confidence: float
    #: metric -> (lower_ms, upper_ms) at ``confidence``
    intervals: dict[str, tuple[float, float]]
    n_layers: int
    n_out_of_design_space: int
    n_fallback: int
    #: the layers flagged out_of_design_space: name, type, prediction_ms, fallback, reasons
    ood_layers: list[dict[str, Any]] = field(default_factory=list)
    model_version: str = ""
    warnings: list[str] = field(default_factory=list)
    #: the layers that drive the CM_O interval, and why (``NetworkResult.cm_o_drivers``)
    cm_o_drivers: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_result(cls, result: Any, confidence: float) -> "Estimate":
        """From a :class:`estimator.interface.NetworkResult` queried at ``confidence``."""
        ivs = {m: tuple(float(x) for x in result.interval(m, confidence)) for m in METRICS}
        ood = [{"name": l["name"], "type": l["type"], "prediction_ms": float(l["prediction_ms"]),
                "fallback": bool(l["fallback"]), "reasons": list(l.get("ood_reasons") or []),
                "cm_o_width_ms": _layer_width(l, "CM_O", confidence)}
               for l in result.layers if l.get("out_of_design_space")]
        warns = [w for w in result.warnings if not str(w).startswith("onnxsim skipped")]
        return cls(total_ms=float(result.total_ms), confidence=float(confidence), intervals=ivs,  # type: ignore[arg-type]
                   n_layers=int(result.n_layers), n_out_of_design_space=int(result.n_out_of_design_space),
                   n_fallback=int(result.n_fallback), ood_layers=ood, model_version=result.model_version,
                   warnings=warns, cm_o_drivers=[dict(d) for d in getattr(result, "cm_o_drivers", None) or ()])

    def interval(self, metric: str) -> tuple[float, float]:
        return self.intervals[metric]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the trial's ``estimate`` user attribute)."""
        d = asdict(self)
        d["latency_ms"] = d.pop("total_ms")
        d["intervals"] = {m: list(v) for m, v in self.intervals.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Estimate | None":
        if not d or "latency_ms" not in d:
            return None
        return cls(total_ms=float(d["latency_ms"]), confidence=float(d.get("confidence", 0.9)),
                   intervals={m: (float(v[0]), float(v[1])) for m, v in (d.get("intervals") or {}).items()},
                   n_layers=int(d.get("n_layers", 0)), n_out_of_design_space=int(d.get("n_out_of_design_space", 0)),
                   n_fallback=int(d.get("n_fallback", 0)), ood_layers=list(d.get("ood_layers") or []),
                   model_version=str(d.get("model_version", "")), warnings=list(d.get("warnings") or []),
                   cm_o_drivers=list(d.get("cm_o_drivers") or []))


def _layer_width(layer: Mapping[str, Any], metric: str, confidence: float) -> float:
    """Width (ms) of a per-layer row's interval at the confidence level nearest ``confidence``."""
    per = (layer.get("intervals") or {}).get(metric) or {}
    if not per:
        return 0.0
    lo, hi = per[min(per, key=lambda c: abs(float(c) - confidence))]
    return float(hi) - float(lo)


@dataclass
class Penalty:
    """The CM_O penalty's terms (see the module docstring)."""

    cm_o_rel_width: float
    ood_fraction: float
    weight: float
    ood_cm_o_rel_width: float = 0.0

    @property
    def P(self) -> float:
        return math.log1p(self.cm_o_rel_width) + math.log1p(self.ood_cm_o_rel_width) + self.ood_fraction

    @property
    def fraction(self) -> float:
        """The fraction of ``|score|`` taken away: ``1 - exp(-W * P)``."""
        return -math.expm1(-self.weight * self.P)

    def amount(self, score: float) -> float:
        """What is subtracted from ``score``."""
        return abs(score) * self.fraction

    def to_dict(self, score: float | None = None) -> dict[str, Any]:
        d = {"cm_o_rel_width": self.cm_o_rel_width, "ood_cm_o_rel_width": self.ood_cm_o_rel_width,
             "ood_fraction": self.ood_fraction, "P": self.P,
             "weight": self.weight, "fraction": self.fraction}
        if score is not None:
            d["amount"] = self.amount(score)
        return d


def penalty(est: Estimate, weight: float) -> Penalty:
    lo, hi = est.intervals["CM_O"]
    t = est.total_ms
    rel = (hi - lo) / t if t > 0 else (math.inf if hi > lo else 0.0)
    frac = est.n_out_of_design_space / est.n_layers if est.n_layers else 0.0
    ood_w = sum(float(l.get("cm_o_width_ms", 0.0)) for l in est.ood_layers)
    ood_rel = ood_w / t if t > 0 else (math.inf if ood_w > 0 else 0.0)
    return Penalty(cm_o_rel_width=float(rel), ood_fraction=float(frac), weight=float(weight),
                   ood_cm_o_rel_width=float(ood_rel))


def penalised(score: float, pen: Penalty) -> float:
    """``score - |score| * (1 - exp(-W * P))``."""
    return float(score - pen.amount(score))


def constraint_value(est: Estimate, budget_ms: float) -> float:
    """``CM_LV upper - budget`` (feasible when <= 0), in milliseconds."""
    return float(est.intervals[CONSTRAINT_METRIC][1] - budget_ms)


def latency_constraint(trial: Any) -> Sequence[float]:
    """Optuna ``constraints_func``: ``[CM_LV upper - budget]`` as recorded on the trial.

    Trials that did not get that far (failed before the estimate) count as infeasible.
    """
    v = (getattr(trial, "user_attrs", None) or {}).get("constraint_ms")
    return [float(v)] if v is not None else [math.inf]
