"""Which layers drive a network's CM_O interval, and why.

CM_O's difficulty is a layer's k-NN distance from the benchmarked configurations of its
type, so one layer far outside the design space can widen a network's CM_O interval to
hundreds of times its estimate. A network's estimate therefore names the layers behind
it (``NetworkEstimate.cm_o_drivers``, and from there the CLI, the Python API, the service
and the NAS report). :func:`cm_o_drivers` is the one definition:

* a layer's contribution is its CM_O upper bound minus its estimate, at the highest
  requested confidence; its ``share`` is that over the sum of it over all layers (the
  network interval is the Eq. 8 convolution, not this sum, but the sum ranks the layers);
* the top :data:`MAX_DRIVERS` layers by contribution are listed (a layer inside the design
  space only with a share of at least :data:`MIN_SHARE`), each with why: the
  features outside its type's benchmarked ``[min, max]`` and by how much (from its
  ``range:<feature>`` reasons and :attr:`~estimator.models.TypeModel.feat_min` /
  ``feat_max``); its k-NN distance relative to the type's threshold (the largest
  leave-one-out distance among the benchmarked rows) when every feature is in range; or
  that its type has no data (roofline fallback) or runs on the CPU.

:meth:`estimator.predict.Estimator.estimate_network` computes them when a layer is out of
the design space or a network CM_O upper bound exceeds
:data:`estimator.interface.WIDE_CM_O_FACTOR` times the estimate, and leaves them empty
otherwise (no cost in the common case).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .interface import cm_o_driver_record

__all__ = ["MAX_DRIVERS", "cm_o_drivers"]

#: at most this many layers are named
MAX_DRIVERS = 5
#: a layer inside the design space is named only with at least this share
MIN_SHARE = 0.01


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e6 else f"{x:.4g}"


def _out_of_range(layer: Any, reasons: Sequence[str], model: Any) -> list[dict[str, float | str]]:
    """``{feature, value, min, max}`` of each ``range:<feature>`` reason, farthest out first."""
    if model is None:
        return []
    names = list(model.feature_names)
    out = []
    for r in reasons:
        if not r.startswith("range:") or r[6:] not in names:
            continue
        f = r[6:]
        j = names.index(f)
        out.append({"feature": f, "value": float(layer.features.get(f, np.nan)), "min": float(model.feat_min[j]),
                    "max": float(model.feat_max[j])})
    return sorted(out, key=lambda o: -_factor(o))


def _factor(o: dict[str, Any]) -> float:
    """How far out a feature is: value / max above the range, min / value below it (inf at 0)."""
    v, lo, hi = float(o["value"]), float(o["min"]), float(o["max"])
    if v > hi:
        return v / hi if hi > 0 else np.inf
    return lo / v if v > 0 else np.inf


def _range_text(o: dict[str, Any]) -> str:
    v, lo, hi = float(o["value"]), float(o["min"]), float(o["max"])
    k = _factor(o)
    finite = bool(np.isfinite(k))
    if v > hi:  # by how much: a percentage up to twice the maximum, a factor beyond
        pct = 100 * (k - 1)
        by = "" if not finite else f" ({k:.3g}x)" if k >= 2 else f" (+{pct:.0f} %)" if pct >= 10 else f" (+{pct:.2g} %)"
        return f"{o['feature']}={_num(v)} > benchmarked max {_num(hi)}{by}"
    return f"{o['feature']}={_num(v)} < benchmarked min {_num(lo)}" + (f" ({k:.3g}x smaller)" if finite else "")


def _why(layer: Any, reasons: Sequence[str], out_of_range: list[dict[str, Any]], knn_ratio: float | None) -> str:
    parts = []
    if "cpu_unverified" in reasons:
        parts.append("runs on the target's CPU: an unverified CPU roofline estimate (op_mapping.cpu_estimate)")
    elif "no_data" in reasons:
        kind = layer.type if layer.type != "other" else f"other({layer.op_type or '?'})"
        parts.append(f"no benchmark data for {kind} on this device: roofline fallback")
    parts += [_range_text(o) for o in out_of_range]
    if "batch" in reasons:
        parts.append(f"batch {layer.params.get('n')} (profiles are benchmarked at batch 1)")
    if knn_ratio is not None:
        what = f"k-NN distance {knn_ratio:.3g}x the {layer.type} threshold"
        if "knn" in reasons:
            parts.append(f"every feature in the benchmarked range, but {what} (farther from the benchmarked rows "
                         f"than any of them is from the rest)")
        else:
            parts.append(f"inside the benchmarked design space ({what})")
    for r in reasons:
        if r.startswith("unbenchmarked:"):
            f = r.split(":", 1)[1]
            parts.append(f"{f}={_num(float(layer.features.get(f, 0.0)))}: no benchmarked {layer.type} row has it "
                         f"(predicted as the rows' operation)")
    known = {"no_data", "cpu_unverified", "batch", "knn"}
    parts += [r for r in reasons if r not in known and not r.startswith(("range:", "unbenchmarked:"))]
    return "; ".join(parts) or "inside the benchmarked design space"


def cm_o_drivers(layers: Sequence[Any], pred_ms: Sequence[float], cm_o_upper_ms: Sequence[float],
                 reasons: Sequence[Sequence[str]], knn_distance: Sequence[float], models: Any, confidence: float,
                 limit: int = MAX_DRIVERS) -> list[dict[str, Any]]:
    """The layers that drive a network's CM_O interval (see the module docstring), as
    :func:`estimator.interface.cm_o_driver_record` dicts, largest share first.

    ``layers``: the estimated layers (per-layer row order); ``pred_ms`` and
    ``cm_o_upper_ms``: their estimates and CM_O upper bounds at ``confidence``;
    ``reasons``: their ``ood_reasons``; ``knn_distance``: their k-NN difficulty as the
    prediction computed it (:class:`~estimator.conformal.BatchPrediction`); ``models``: the
    :class:`~estimator.models.DeviceModels` that estimated them."""
    n = len(layers)
    if n == 0:
        return []
    pred = np.asarray(pred_ms, dtype=float)
    width = np.maximum(np.asarray(cm_o_upper_ms, dtype=float) - pred, 0.0)
    total = float(width.sum())
    order = np.argsort(-width, kind="stable")[:limit].tolist()
    # a layer in the design space with a negligible share is left to "the other layers"
    order = order[:1] + [i for i in order[1:] if reasons[i] or (total > 0 and width[i] >= MIN_SHARE * total)]
    # the k-NN ratio of the named layers with a model and every feature in range
    knn: dict[int, float] = {}
    for i in order:
        m = models.types.get(layers[i].type)
        if (m is not None and m.knn_threshold > 0 and "cpu_unverified" not in reasons[i]
                and not any(r.startswith("range:") for r in reasons[i])):
            knn[i] = float(knn_distance[i]) / m.knn_threshold
    out = []
    for i in order:
        l, why = layers[i], list(reasons[i])
        oor = _out_of_range(l, why, models.types.get(l.type))
        out.append(cm_o_driver_record({
            "index": i, "name": l.name, "type": l.type, "op_type": l.op_type or "",
            "share": float(width[i]) / total if total > 0 else 0.0, "prediction_ms": float(pred[i]),
            "cm_o_upper_ms": float(cm_o_upper_ms[i]), "confidence": float(confidence), "reasons": why,
            "out_of_range": oor, "knn_ratio": knn.get(i), "why": _why(l, why, oor, knn.get(i))}))
    return out
