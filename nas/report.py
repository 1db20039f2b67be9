"""Reports of a study: summary (JSON + text), trial table, best architecture, per-layer table, plot.

Everything here reads the study from its storage, so it covers every worker's trials and
works on a finished or a running study (``nas show``).

Files written by :func:`write_reports` into the output directory:

==================  =====================================================================
``best.onnx``       the best feasible architecture, simplified ONNX *with* weights (BN
                    folded; the network that was estimated)
``best.json``       its description, parameters, latency with intervals, the share of the
                    budget it uses, the layers that drive its CM_O interval, score, penalty
``best_layers.csv`` per-layer table: prediction, CM_TV/CM_LV/CM_O bounds, flags, reasons
``best_layers.txt`` the same, aligned text
``trials.csv``      every trial: state, feasibility, score, penalty, latency and bounds
``pareto.png``      latency (point estimate, CM_LV bars) vs penalised score; infeasible
                    candidates grey, the budget as a line, the Pareto front and the best
``pareto.json``     the feasible Pareto set (penalised score up, latency down)
``summary.json``    counts (feasible, rejected by the budget, penalised by CM_O), best
                    (with ``budget_use`` and ``cm_o_drivers``), why it won, timings
``summary.txt``     the same for humans
==================  =====================================================================
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from estimator.interface import cm_o_driver_lines, cm_o_is_wide

from .scoring import CONSTRAINT_METRIC, METRICS, Estimate
from .units import format_ms

__all__ = ["TrialRecord", "records", "summarize", "summary_text", "trials_table", "write_reports",
           "pareto_front", "layer_rows", "write_text_atomic", "budget_use"]


@dataclass
class TrialRecord:
    number: int
    state: str
    params: dict[str, Any]
    feasible: bool | None = None
    score: float | None = None
    penalised: float | None = None
    latency_ms: float | None = None
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    constraint_ms: float | None = None
    n_layers: int = 0
    n_ood: int = 0
    n_fallback: int = 0
    ood_layers: list[dict[str, Any]] = field(default_factory=list)
    penalty: dict[str, Any] = field(default_factory=dict)
    arch: Any = None
    fail_reason: str = ""
    retry_of: int | None = None
    timing_s: dict[str, float] = field(default_factory=dict)
    cache_hit: bool = False
    n_params: int | None = None
    #: ``nas search --refine``: the profile, model version and refine step that estimated it
    model: dict[str, Any] = field(default_factory=dict)
    #: the layers that drive its CM_O interval, and why (:func:`estimator.interface.cm_o_driver_record`)
    cm_o_drivers: list[dict[str, Any]] = field(default_factory=list)
    #: the version of the models that estimated it
    model_version: str = ""

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"


def _record(t: Any) -> TrialRecord:
    a = dict(t.user_attrs)
    est = Estimate.from_dict(a.get("estimate"))
    res = dict(a.get("result") or {})
    state = t.state.name
    r = TrialRecord(number=int(t.number), state=state, params=dict(t.params), arch=a.get("arch"),
                    fail_reason=str(a.get("fail_reason", "")), retry_of=t.system_attrs.get("failed_trial"),
                    penalty=dict(res.get("penalty") or {}), timing_s=dict(res.get("timing_s") or {}),
                    cache_hit=bool(res.get("cache_hit", False)), n_params=res.get("n_params"),
                    constraint_ms=a.get("constraint_ms"), model=dict(a.get("model") or {}))
    if est is not None:
        r.latency_ms = est.total_ms
        r.intervals = dict(est.intervals)
        r.n_layers, r.n_ood, r.n_fallback = est.n_layers, est.n_out_of_design_space, est.n_fallback
        r.ood_layers = list(est.ood_layers)
        r.cm_o_drivers = list(est.cm_o_drivers)
        r.model_version = est.model_version
    if state == "COMPLETE":
        r.score = res.get("score")
        r.penalised = float(t.values[0]) if t.values else res.get("penalised_score")
        c = r.constraint_ms
        if c is None:
            cons = getattr(t, "constraints", None) or {}
            c = max(cons.values()) if cons else None
        r.feasible = (c is not None and float(c) <= 0.0)
    return r


def records(study: Any) -> list[TrialRecord]:
    recs = [_record(t) for t in study.get_trials(deepcopy=False)]
    retried = {r.retry_of: r.number for r in recs if r.retry_of is not None}
    for r in recs:  # a trial failed by the storage (its worker stopped) has no reason of its own
        if r.state == "FAIL" and not r.fail_reason:
            r.fail_reason = ("no reason recorded: its worker stopped (killed, interrupted or out of heartbeats)"
                             + (f"; retried as trial {retried[r.number]}" if r.number in retried else ""))
    return recs


def pareto_front(recs: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Feasible complete trials not dominated in (penalised score up, latency down)."""
    pts = [r for r in recs if r.complete and r.feasible and r.penalised is not None and r.latency_ms is not None]
    front = []
    for r in pts:
        dominated = any((o.penalised >= r.penalised and o.latency_ms <= r.latency_ms  # type: ignore[operator]
                         and (o.penalised > r.penalised or o.latency_ms < r.latency_ms))  # type: ignore[operator]
                        for o in pts if o is not r)
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: r.latency_ms)  # type: ignore[arg-type,return-value]


def best_feasible(recs: Sequence[TrialRecord]) -> TrialRecord | None:
    """Highest penalised score among feasible trials (ties: lower latency, then earlier)."""
    ok = [r for r in recs if r.complete and r.feasible and r.penalised is not None]
    if not ok:
        return None
    return max(ok, key=lambda r: (r.penalised, -(r.latency_ms or 0.0), -r.number))


def _ood_text(r: TrialRecord, limit: int = 4) -> str:
    items = [f"{l.get('name', '?')} ({l.get('type', '?')}: {', '.join(l.get('reasons') or ['flagged'])})"
             for l in r.ood_layers[:limit]]
    more = f", +{len(r.ood_layers) - limit} more" if len(r.ood_layers) > limit else ""
    return "; ".join(items) + more


def _drivers_text(r: TrialRecord, limit: int = 3) -> str:
    """The layers that drive the trial's CM_O interval, in one line."""
    return "; ".join(f"#{d['index']} {d['name']} ({d['type']}) {100 * float(d['share']):.0f} %: {d['why']}"
                     for d in r.cm_o_drivers[:limit])


def _penalty_text(r: TrialRecord) -> str:
    p = r.penalty or {}
    if not p:
        return "no penalty recorded"
    return (f"penalty {p.get('amount', 0.0):.4g} = {100 * p.get('fraction', 0.0):.1f} % of |score| "
            f"(W {p.get('weight', 0):g}, P {p.get('P', 0):.3g} = ln(1 + CM_O width / prediction "
            f"{p.get('cm_o_rel_width', 0):.3g}) + ln(1 + flagged layers' CM_O width / prediction "
            f"{p.get('ood_cm_o_rel_width', 0):.3g}) + out-of-design-space fraction {r.n_ood}/{r.n_layers})")


def explain_winner(best: TrialRecord, recs: Sequence[TrialRecord], limit: int = 5) -> list[dict[str, Any]]:
    """Feasible candidates whose raw score was at least the winner's but that lost after the
    penalty; one entry per distinct architecture (repeated trials listed together)."""
    out: list[dict[str, Any]] = []
    if best.score is None:
        return out
    groups: dict[str, list[TrialRecord]] = {}
    for r in recs:
        if (r.complete and r.feasible and r is not best and r.score is not None and r.penalised is not None
                and r.score >= best.score and r.penalised < best.penalised and r.params != best.params):  # type: ignore[operator]
            groups.setdefault(json.dumps(r.params, sort_keys=True, default=str), []).append(r)
    for rs in sorted(groups.values(), key=lambda g: (-g[0].score, g[0].number))[:limit]:  # type: ignore[operator]
        r = rs[0]
        label = f"trial {r.number}" if len(rs) == 1 else f"trials {', '.join(str(x.number) for x in rs)}"
        out.append({"trial": r.number, "trials": [x.number for x in rs], "score": r.score, "penalised": r.penalised,
                    "latency_ms": r.latency_ms, "n_out_of_design_space": r.n_ood, "n_layers": r.n_layers,
                    "penalty": r.penalty, "ood_layers": r.ood_layers[:10], "cm_o_drivers": r.cm_o_drivers,
                    "params": r.params,
                    "why": f"{label}: score {r.score:.6g} >= {best.score:.6g} (trial {best.number}) but "
                           f"penalised {r.penalised:.6g} < {best.penalised:.6g}: {_penalty_text(r)}"
                           + (f"; outside the design space: {_ood_text(r)}" if r.ood_layers else "")
                           + (f"; CM_O driven by {_drivers_text(r)}" if r.cm_o_drivers else "")})
    return out


def _mean_timing(recs: Sequence[TrialRecord]) -> dict[str, float]:
    rows = [r.timing_s for r in recs if r.complete and r.timing_s and not r.cache_hit]
    if not rows:
        return {}
    keys = sorted({k for t in rows for k in t})
    return {k: float(sum(t.get(k, 0.0) for t in rows) / len(rows)) for k in keys}


def _trials_by_model(recs: Sequence[TrialRecord]) -> dict[str, int]:
    return dict(Counter(f"{r.model.get('profile')}@{r.model.get('model_version')}" for r in recs
                        if r.complete and r.model))


def budget_use(r: TrialRecord, budget_ms: float, confidence: float) -> dict[str, Any]:
    """How much of the budget a trial uses: its estimate and its constrained upper bound
    (:data:`~nas.scoring.CONSTRAINT_METRIC` at ``confidence``), in ms and as fractions of
    ``budget_ms``."""
    t = float(r.latency_ms) if r.latency_ms is not None else math.nan
    iv = r.intervals.get(CONSTRAINT_METRIC)
    u = float(iv[1]) if iv is not None else math.nan
    ok = budget_ms > 0 and math.isfinite(budget_ms)
    return {"budget_ms": budget_ms, "metric": CONSTRAINT_METRIC, "confidence": confidence, "estimate_ms": t,
            "estimate_fraction": t / budget_ms if ok else None, "upper_ms": u,
            "upper_fraction": u / budget_ms if ok else None}


def _budget_text(b: Mapping[str, Any]) -> str:
    def pct(x: Any) -> str:
        if x is None or not math.isfinite(float(x)):
            return "?"
        return f"{100 * float(x):.0f} %" if float(x) >= 0.01 else f"{100 * float(x):.2g} %"

    return (f"winner: {format_ms(b['estimate_ms'])} = {pct(b['estimate_fraction'])} of the "
            f"{format_ms(b['budget_ms'])} budget; {b['metric']} upper {format_ms(b['upper_ms'])} = "
            f"{pct(b['upper_fraction'])} (at {b['confidence']:g})")


def summarize(study: Any, recs: Sequence[TrialRecord] | None = None) -> dict[str, Any]:
    """Counts, best feasible, Pareto set and the penalty's effect (JSON-ready)."""
    recs = list(recs) if recs is not None else records(study)
    attrs = dict(study.user_attrs)
    steps = attrs.pop("refine", None) or []  # nas search --refine: one record per step (nas.refine)
    states: dict[str, int] = {}
    for r in recs:
        states[r.state] = states.get(r.state, 0) + 1
    complete = [r for r in recs if r.complete]
    feasible = [r for r in complete if r.feasible]
    best = best_feasible(recs)
    front = pareto_front(recs)
    unpen = max(feasible, key=lambda r: (r.score, -r.number)) if feasible and all(
        r.score is not None for r in feasible) else None
    latencies = [r.constraint_ms + attrs.get("budget_ms", 0.0) for r in complete if r.constraint_ms is not None]
    doc: dict[str, Any] = {
        "study": study.study_name,
        "settings": attrs,
        "directions": [d.name.lower() for d in study.directions],
        "n_trials": len(recs),
        "states": states,
        "n_complete": len(complete),
        "n_feasible": len(feasible),
        "n_rejected_by_budget": len(complete) - len(feasible),
        "n_penalised_ood": sum(1 for r in complete if r.n_ood > 0),
        "n_failed": states.get("FAIL", 0),
        "n_running": states.get("RUNNING", 0) + states.get("WAITING", 0),
        "n_retried": sum(1 for r in recs if r.retry_of is not None),
        "min_cm_lv_upper_ms": min(latencies) if latencies else None,
        "mean_penalty_P": (sum(r.penalty.get("P", 0.0) for r in complete) / len(complete)) if complete else None,
        "best": None,
        "pareto": [{"trial": r.number, "penalised": r.penalised, "score": r.score, "latency_ms": r.latency_ms,
                    "CM_LV": r.intervals.get("CM_LV"), "arch": r.arch} for r in front],
        "penalty_decided": [],
        "failures": [{"trial": r.number, "reason": r.fail_reason} for r in recs if r.state == "FAIL"][-20:],
        "mean_timing_s": _mean_timing(recs),
        "trials_by_model_version": dict(Counter(r.model_version for r in recs if r.complete)),
    }
    if steps:
        last = steps[-1]
        doc["refine"] = {"steps": len(steps), "device_minutes": sum(x.get("device_seconds", 0.0) for x in steps) / 60,
                         "measured": sum(x.get("measured", 0) for x in steps), "rows": last.get("rows", 0),
                         "profile": last.get("profile"), "model_version": last.get("model_version"),
                         "trials_by_model": _trials_by_model(recs), "history": steps}
    if best is not None:
        doc["best"] = {"trial": best.number, "score": best.score, "penalised": best.penalised,
                       "latency_ms": best.latency_ms, "intervals": {k: list(v) for k, v in best.intervals.items()},
                       "constraint_ms": best.constraint_ms, "n_layers": best.n_layers,
                       "n_out_of_design_space": best.n_ood, "n_fallback": best.n_fallback,
                       "ood_layers": best.ood_layers, "cm_o_drivers": best.cm_o_drivers,
                       "budget_use": budget_use(best, float(attrs.get("budget_ms", math.nan)),
                                                float(attrs.get("confidence", 0.9))),
                       "penalty": best.penalty, "params": best.params, "arch": best.arch, "n_params": best.n_params}
        doc["penalty_decided"] = explain_winner(best, recs)
        doc["unpenalised_best_trial"] = unpen.number if unpen is not None else None
    return doc


def summary_text(doc: Mapping[str, Any], *, files: Iterable[str] = ()) -> str:
    s = doc.get("settings", {})
    conf = s.get("confidence", 0.9)
    lines = [f"NAS study {doc['study']!r}: device {s.get('device', '?')}, space {s.get('space', '?')}, "
             f"objective {s.get('objective', '?')}" + (" (a zero-cost proxy, not accuracy)"
                                                       if s.get("objective") in ("naswot", "synflow") else ""),
             f"budget {format_ms(float(s.get('budget_ms', float('nan'))))} on the CM_LV upper bound at confidence "
             f"{conf:g}; CM_O penalty weight {s.get('penalty_weight', '?')}; "
             + ("multi-objective (penalised score up, latency down)" if s.get("multi_objective") else "single objective"),
             f"trials: {doc['n_trials']} (" + ", ".join(f"{v} {k.lower()}" for k, v in sorted(doc['states'].items()))
             + ")",
             f"  feasible: {doc['n_feasible']}",
             f"  rejected by the budget (CM_LV upper > budget): {doc['n_rejected_by_budget']}",
             f"  penalised by CM_O for layers outside the benchmarked design space: {doc['n_penalised_ood']} "
             f"(every candidate also pays for its CM_O width; mean P {doc['mean_penalty_P']:.3g})"
             if doc.get("mean_penalty_P") is not None else
             f"  penalised by CM_O for layers outside the benchmarked design space: {doc['n_penalised_ood']}"]
    if doc.get("n_failed"):
        lines.append(f"  failed: {doc['n_failed']}" + (f" (last: trial {doc['failures'][-1]['trial']}: "
                                                        f"{doc['failures'][-1]['reason']})" if doc.get("failures") else ""))
    if doc.get("n_retried"):
        lines.append(f"  retried after a dead worker: {doc['n_retried']}")
    models = doc.get("trials_by_model_version") or {}
    if len(models) > 1 and not doc.get("refine"):
        lines.append(f"  estimated with {len(models)} models (" + ", ".join(f"{v or '?'}: {n}" for v, n in models.items())
                     + "): a study continued with other profiles; scores across them do not compare")
    b = doc.get("best")
    if b is None:
        lines.append("no feasible architecture yet"
                     + (f" (smallest CM_LV upper bound seen: {format_ms(doc['min_cm_lv_upper_ms'])})"
                        if doc.get("min_cm_lv_upper_ms") is not None else ""))
    else:
        iv = b["intervals"]
        lines += [f"best feasible: trial {b['trial']}"]
        if b.get("budget_use"):
            lines.append(f"  {_budget_text(b['budget_use'])}")
        lines.append(f"  latency {format_ms(b['latency_ms'])}; at {conf:g}: " + ", ".join(
            f"{m} [{iv[m][0]:.3f}, {iv[m][1]:.3f}] ms" for m in METRICS if m in iv))
        if "CM_O" in iv and cm_o_is_wide(b["latency_ms"], {"CM_O": {conf: tuple(iv["CM_O"])}}):
            lines += cm_o_driver_lines(b.get("cm_o_drivers") or [], b["latency_ms"], iv["CM_O"][1], indent="    ") \
                or ["    (this study did not record the layers that drive CM_O: `estimator predict best.onnx` "
                    "names them)"]
        lines += [f"  score {b['score']:.6g}, penalised {b['penalised']:.6g} "
                  f"({b['penalty'].get('amount', 0):.4g} off: CM_O width / prediction "
                  f"{b['penalty'].get('cm_o_rel_width', 0):.3g}, {b['n_out_of_design_space']}/{b['n_layers']} layers "
                  f"outside the design space, {b['n_fallback']} fallback)",
                  f"  architecture: {_cut(json.dumps(b['arch'], separators=(',', ':')), 600)}"]
        if doc.get("penalty_decided"):
            lines.append("why it won: these candidates scored at least as high but lost to the CM_O penalty:")
            lines += [f"  {x['why']}" for x in doc["penalty_decided"]]
        elif doc.get("unpenalised_best_trial") not in (None, b["trial"]):
            lines.append(f"note: without the penalty trial {doc['unpenalised_best_trial']} would have won")
    r = doc.get("refine")
    if r:
        lines.append(f"refinement (--refine): {r['steps']} step(s), {r['device_minutes']:.2f} device min, "
                     f"{r['measured']} layer configurations measured; {r['profile']} holds {r['rows']} refined rows "
                     f"(model {r['model_version']}); trials per model: "
                     + ", ".join(f"{k} {v}" for k, v in r["trials_by_model"].items()))
    if doc.get("pareto") and s.get("multi_objective"):
        lines.append(f"Pareto set ({len(doc['pareto'])}): " + ", ".join(
            f"#{p['trial']} {p['latency_ms']:.3f} ms / {p['penalised']:.4g}" for p in doc["pareto"][:20]))
    t = doc.get("mean_timing_s") or {}
    if t.get("total"):
        parts = [f"{k} {t[k]:.3f}" for k in ("build", "export", "simplify", "strip", "estimate", "objective")
                 if k in t]
        lines.append(f"mean time per candidate {t['total']:.3f} s ({1 / t['total']:.2f}/s): " + ", ".join(parts))
    files = list(files)
    if files:
        lines.append("files: " + " ".join(files))
    return "\n".join(lines) + "\n"


def trials_table(recs: Sequence[TrialRecord], *, limit: int | None = 20, sort: str = "best") -> str:
    """An aligned table of trials (best first, running ones included)."""
    rows = list(recs)
    if sort == "best":
        rows.sort(key=lambda r: (0 if r.state == "RUNNING" else 1 if r.complete and r.feasible else
                                 2 if r.complete else 3, -(r.penalised if r.penalised is not None else -math.inf),
                                 r.number))
    if limit is not None:
        rows = rows[:limit]
    head = ["#", "state", "feasible", "score", "penalised", "latency_ms", "CM_LV_hi", "CM_O_width", "ood", "note"]
    out = [head]
    for r in rows:
        lv = r.intervals.get("CM_LV")
        o = r.intervals.get("CM_O")
        note = r.fail_reason[:60] if r.state == "FAIL" else (f"retry of #{r.retry_of}" if r.retry_of is not None else "")
        out.append([str(r.number), r.state.lower(), "" if r.feasible is None else ("yes" if r.feasible else "no"),
                    "" if r.score is None else f"{r.score:.5g}", "" if r.penalised is None else f"{r.penalised:.5g}",
                    "" if r.latency_ms is None else f"{r.latency_ms:.3f}", "" if lv is None else f"{lv[1]:.3f}",
                    "" if o is None else f"{o[1] - o[0]:.3f}", f"{r.n_ood}/{r.n_layers}" if r.n_layers else "", note])
    widths = [max(len(row[i]) for row in out) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in out) + "\n"


# ---------------------------------------------------------------------------- files


def _cut(text: str, n: int) -> str:
    """``text``, or its first ``n`` characters and how much is left out (summary.json has it whole)."""
    return text if len(text) <= n else f"{text[:n]}... ({len(text) - n} more characters in summary.json)"


def write_text_atomic(path: Path, text: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(text, bytes):
        tmp.write_bytes(text)
    else:
        tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _trials_csv(recs: Sequence[TrialRecord]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    cols = ["number", "state", "feasible", "score", "penalised", "latency_ms"]
    for m in METRICS:
        cols += [f"{m}_lower_ms", f"{m}_upper_ms"]
    cols += ["constraint_ms", "n_layers", "n_out_of_design_space", "n_fallback", "penalty_P", "cm_o_rel_width",
             "ood_fraction", "retry_of", "fail_reason", "params"]
    w.writerow(cols)
    for r in recs:
        row: list[Any] = [r.number, r.state, "" if r.feasible is None else int(r.feasible), r.score, r.penalised,
                          r.latency_ms]
        for m in METRICS:
            row += list(r.intervals.get(m, ("", "")))
        row += [r.constraint_ms, r.n_layers, r.n_ood, r.n_fallback, r.penalty.get("P"), r.penalty.get("cm_o_rel_width"),
                r.penalty.get("ood_fraction"), "" if r.retry_of is None else r.retry_of, r.fail_reason,
                json.dumps(r.params, sort_keys=True)]
        w.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def layer_rows(result: Any, confidence: float) -> list[dict[str, Any]]:
    """Per-layer rows of a :class:`estimator.interface.NetworkResult` at ``confidence``."""
    rows = []
    c = round(float(confidence), 12)
    for i, l in enumerate(result.layers):
        row: dict[str, Any] = {"index": i, "name": l["name"], "type": l["type"], "op_type": l.get("op_type", ""),
                               "prediction_ms": l["prediction_ms"]}
        for m in METRICS:
            lo, hi = (l["intervals"].get(m) or {}).get(c, (math.nan, math.nan))
            row[f"{m}_lower_ms"], row[f"{m}_upper_ms"] = lo, hi
        flags = []
        if l.get("out_of_design_space"):
            flags.append("OOD")
        if l.get("fallback"):
            flags.append("FALLBACK")
        row["flags"] = " ".join(flags + list(l.get("flags") or []))
        row["ood_reasons"] = " ".join(l.get("ood_reasons") or [])
        rows.append(row)
    return rows


def _layers_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def _layers_text(rows: Sequence[Mapping[str, Any]], head: str) -> str:
    table = [["#", "layer", "type", "pred_ms", "CM_TV", "CM_LV", "CM_O", "flags", "reasons"]]
    for r in rows:
        table.append([str(r["index"]), str(r["name"])[-48:], r["type"], f"{r['prediction_ms']:.4f}"]
                     + [f"[{r[f'{m}_lower_ms']:.4f}, {r[f'{m}_upper_ms']:.4f}]" for m in METRICS]
                     + [r["flags"], r["ood_reasons"]])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    body = "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)
    return head + "\n" + body + "\n"


def plot(recs: Sequence[TrialRecord], doc: Mapping[str, Any], path: Path) -> None:
    """Latency (CM_LV bars) vs penalised score; infeasible grey; budget line; Pareto front; best."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # noqa: PLC0415

    s = doc.get("settings", {})
    budget = s.get("budget_ms")
    pts = [(r, float(r.latency_ms), float(r.penalised)) for r in recs
           if r.complete and r.latency_ms is not None and r.penalised is not None]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    for feas, color, label in ((False, "0.72", "infeasible (CM_LV upper > budget)"),
                               (True, None, "feasible")):
        sel = [p for p in pts if bool(p[0].feasible) == feas]
        if not sel:
            continue
        x = [p[1] for p in sel]
        y = [p[2] for p in sel]
        lv = [p[0].intervals.get("CM_LV", (p[1], p[1])) for p in sel]
        xerr = [[max(xi - l[0], 0.0) for xi, l in zip(x, lv)], [max(l[1] - xi, 0.0) for xi, l in zip(x, lv)]]
        if feas:
            ood = [p[0].n_ood / p[0].n_layers if p[0].n_layers else 0.0 for p in sel]
            ax.errorbar(x, y, xerr=xerr, fmt="none", ecolor="tab:blue", alpha=0.35, lw=1, zorder=2)
            sc = ax.scatter(x, y, c=ood, cmap="viridis_r", vmin=0, vmax=max(max(ood), 0.05), s=28, zorder=3,
                            edgecolors="k", linewidths=0.3, label=label)
            fig.colorbar(sc, ax=ax, label="fraction of layers outside the design space")
        else:
            ax.errorbar(x, y, xerr=xerr, fmt="o", color=color, ecolor=color, ms=4, alpha=0.8, lw=1, zorder=1,
                        label=label)
    front = pareto_front(recs)
    if len(front) > 1:
        ax.plot([float(r.latency_ms or 0.0) for r in front], [float(r.penalised or 0.0) for r in front], "-",
                color="tab:red", lw=1.2, zorder=4, label="Pareto front (feasible)")
    b = doc.get("best")
    if b is not None:
        ax.scatter([b["latency_ms"]], [b["penalised"]], marker="*", s=220, color="tab:red", edgecolors="k",
                   zorder=5, label=f"best feasible (#{b['trial']})")
    if budget is not None:
        ax.axvline(float(budget), color="tab:red", ls="--", lw=1, label=f"budget {format_ms(float(budget))}")
    ax.set_xlabel(f"latency estimate (ms); bars: CM_LV at {s.get('confidence', 0.9):g}")
    ax.set_ylabel(f"{s.get('objective', 'score')} - CM_O penalty")
    ax.set_title(f"{doc.get('study')} on {s.get('device', '?')}: {doc.get('n_feasible', 0)} feasible / "
                 f"{doc.get('n_complete', 0)} candidates")
    ax.grid(alpha=0.3)
    if pts:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_text_atomic(path, buf.getvalue())


#: the files about the best feasible architecture (written with it, removed without it)
BEST_FILES = ("best.onnx", "best.json", "best_layers.csv", "best_layers.txt")


def write_reports(out_dir: Path, study: Any, *, estimation: Any = None, space_fn: Any = None,
                  space_options: Mapping[str, Any] | None = None, init_seed: int = 0,
                  device: str | None = None) -> dict[str, Any]:
    """Write every report file; rebuild, export and re-estimate the best when ``estimation``
    (an :class:`estimator.interface.Estimation`) is given
    (on ``device``, default the study's: ``--refine`` re-estimates on the refined profile)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    recs = records(study)
    doc = summarize(study, recs)
    files = []
    write_text_atomic(out_dir / "trials.csv", _trials_csv(recs))
    files.append("trials.csv")
    write_text_atomic(out_dir / "pareto.json", json.dumps(doc["pareto"], indent=2, default=str) + "\n")
    files.append("pareto.json")
    best = doc.get("best")
    if best is not None and estimation is not None and space_fn is not None:
        files += _write_best(out_dir, best, doc, estimation, space_fn, space_options or {}, init_seed, device)
    else:  # never leave another study's (or an earlier state's) best beside this summary
        for name in BEST_FILES:
            (out_dir / name).unlink(missing_ok=True)
    plot(recs, doc, out_dir / "pareto.png")
    files.append("pareto.png")
    files += ["summary.json", "summary.txt"]
    doc["files"] = files
    write_text_atomic(out_dir / "summary.json", json.dumps(doc, indent=2, default=str) + "\n")
    write_text_atomic(out_dir / "summary.txt", summary_text(doc, files=files))
    return doc


def _write_best(out_dir: Path, best: dict[str, Any], doc: dict[str, Any], estimation: Any, space_fn: Any,
                space_options: Mapping[str, Any], init_seed: int, device: str | None = None) -> list[str]:
    import torch  # noqa: PLC0415

    from estimator.onnx_strip import strip_initializers  # noqa: PLC0415

    from . import export as nas_export  # noqa: PLC0415
    from .spaces import rebuild  # noqa: PLC0415

    s = doc["settings"]
    conf = float(s.get("confidence", 0.9))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        arch = rebuild(space_fn, best["params"], space_options, name=str(s.get("space", "")))
    model = nas_export.to_onnx(arch.module, arch.input_shape)
    write_text_atomic(out_dir / "best.onnx", model.SerializeToString())
    device = device or s["device"]
    result = estimation.estimate_network(strip_initializers(model), device, confidence=(conf,), per_layer=True,
                                     strip=False)
    rows = layer_rows(result, conf)
    reest = {"total_ms": result.total_ms,
             "intervals": {m: list(result.interval(m, conf)) for m in METRICS},
             "n_out_of_design_space": result.n_out_of_design_space, "n_fallback": result.n_fallback,
             "cm_o_drivers": list(result.cm_o_drivers), "model_version": result.model_version, "profile": device}
    same = math.isclose(result.total_ms, best["latency_ms"], rel_tol=1e-9, abs_tol=1e-12)
    best["reestimate"] = reest
    best["reestimate_matches"] = same
    doc_best = dict(best, description=arch.description, input_shape=list(arch.input_shape), space=s.get("space"),
                    space_options=s.get("space_options"), device=s["device"], budget_ms=s.get("budget_ms"),
                    confidence=conf, unit="ms", onnx="best.onnx")
    write_text_atomic(out_dir / "best.json", json.dumps(doc_best, indent=2, default=str) + "\n")
    write_text_atomic(out_dir / "best_layers.csv", _layers_csv(rows))
    head = (f"best feasible trial {best['trial']} on {s['device']}: {format_ms(result.total_ms)}, CM_LV at {conf:g} "
            f"[{reest['intervals']['CM_LV'][0]:.3f}, {reest['intervals']['CM_LV'][1]:.3f}] ms, "
            f"{result.n_out_of_design_space}/{result.n_layers} layers out of design space (OOD), "
            f"{result.n_fallback} fallback (FALLBACK)")
    write_text_atomic(out_dir / "best_layers.txt", _layers_text(rows, head))
    return list(BEST_FILES)
