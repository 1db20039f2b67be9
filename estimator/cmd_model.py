"""``estimator predict | train | evaluate | devices``: the model commands.

* ``estimator predict MODEL.onnx --device NAME`` prints the per-layer table (prediction,
  CM_TV / CM_LV / CM_O intervals, out-of-design-space and fallback flags) and the network
  totals; a network CM_O upper bound above 10x the estimate is followed by the layers that
  drive it and why (:mod:`estimator.drivers`); ``--json`` prints
  :meth:`NetworkEstimate.to_dict` instead (``cm_o_drivers`` included); ``--plot FILE`` draws
  the per-layer interval widths (the paper's Fig. 13).
* ``estimator train --device NAME`` trains (or loads from the cache) and prints per-type
  out-of-bag metrics: RMSPE, share within +-10 %, calibration coverage of each metric.
* ``estimator evaluate --device NAME --networks DIR`` compares the estimates with whole
  networks measured on the target: a network set written by ``bench networks`` (or a
  profile directory's ``networks.csv``). Measuring is bench's job; the estimator reads what
  bench wrote. Printed: per-network % error, mean |error|, empirical coverage and mean
  relative width of each metric's interval, calibrated and uncalibrated side by side when
  the profile is calibrated, and a predicted-vs-measured plot. Networks of the profile's
  own calibration set are left out (they would be in-sample). ``--target single`` uses
  models trained on single-layer times, ``--target both`` compares the two (the paper's
  Tables 3-5).
* ``estimator devices`` lists the profiles with their provenance, calibration and refinement.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from .aggregate import COUPLINGS, DEFAULT_COUPLING
from .cliargs import MODEL_HELP, input_shapes_from_args, model_source
from .cliutil import integer
from .errors import UserError
from .interface import cm_o_driver_lines, cm_o_is_wide
from .models import METRICS, TARGETS
from .predict import Estimator, NetworkEstimate, parse_confidence
from .profile import Profile, default_root, list_profiles, load_profile

__all__ = ["register", "evaluate_estimates", "uncalibrated_view", "plot_layer_widths", "plot_pred_vs_measured"]


# ---------------------------------------------------------------------- helpers


def _confidences(values: Sequence[str] | None) -> list[float]:
    if not values:
        return [0.9]
    out: list[float] = []
    for v in values:
        for part in str(v).split(","):
            if part.strip():
                try:
                    c = float(part)
                except ValueError:
                    raise UserError(f"--confidence must be numbers in (0, 1), got {part.strip()!r}") from None
                if not 0.0 < c < 1.0:
                    raise UserError(f"--confidence must be in (0, 1), got {part.strip()}")
                out.append(c)
    return parse_confidence(out)


def _progress(enabled: bool) -> tuple[Callable[[str, int, int], None] | None, Callable[[], None]]:
    if not enabled:
        return None, lambda: None
    try:
        from tqdm import tqdm  # noqa: PLC0415
    except ImportError:  # pragma: no cover
        return None, lambda: None
    bar: dict[str, Any] = {}

    def cb(name: str, i: int, n: int) -> None:
        if "b" not in bar:
            bar["b"] = tqdm(total=n + 1, desc="training", unit="type", file=sys.stderr, leave=False)
        b = bar["b"]
        b.set_postfix_str(name)
        b.n = i
        b.refresh()

    def close() -> None:
        if "b" in bar:
            bar["b"].close()

    return cb, close


def _estimator(args: argparse.Namespace, target: str | None = None) -> Estimator:
    cb, close = _progress(not getattr(args, "no_progress", False) and sys.stderr.isatty())
    try:
        return Estimator.from_profile(args.device, root=args.profiles, target=target or args.target,
                                      retrain=getattr(args, "retrain", False), n_jobs=getattr(args, "jobs", 1),
                                      progress=cb, coupling=getattr(args, "coupling", "independent"))
    finally:
        close()


def _fmt_ms(x: float) -> str:
    if not math.isfinite(x):
        return "inf"
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.4g}"


def _fmt_iv(iv: tuple[float, float]) -> str:
    return f"[{_fmt_ms(iv[0])}, {_fmt_ms(iv[1])}]"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _short(s: str, n: int = 28) -> str:
    return s if len(s) <= n else s[: n - 1] + "~"


# ---------------------------------------------------------------------- predict


def print_estimate(est: NetworkEstimate, out: Any = None) -> None:
    out = out if out is not None else sys.stdout
    c = est.confidence[0]
    rows = []
    for i, l in enumerate(est.layers):
        flags = []
        on_cpu = "runs_on_cpu" in l.flags
        if on_cpu:  # estimated as CPU time, never as NPU time
            flags.append("CPU" + ("(unverified)" if "cpu_unverified" in l.flags else ""))
        elif l.fallback:
            flags.append("FALLBACK")
        reasons = [r for r in l.ood_reasons if r not in ("no_data", "cpu_unverified")]
        if l.out_of_design_space:
            flags.append("OOD(" + ",".join(reasons) + ")" if reasons else "OOD")
        flags += [f for f in l.flags if f in ("cpu_fallback_op", "cpu_fallback_possible") and not on_cpu]
        kind = l.type if l.type != "other" else f"other:{l.op_type}"
        rows.append([str(i), _short(l.name), kind, _fmt_ms(l.prediction_ms)]
                    + [_fmt_iv(l.intervals[m][c]) for m in METRICS] + [" ".join(flags)])
    header = ["#", "layer", "type", "pred ms"] + [f"{m} {c:g}" for m in METRICS] + ["flags"]
    print(f"device {est.device} (target {est.target}); {len(est.layers)} layers, "
          f"{est.n_fallback} fallback, {est.n_out_of_design_space} out of design space", file=out)
    print(_table(rows, header), file=out)
    print("", file=out)
    how = {"type": "layer errors correlated within a layer type, independent across types",
           "independent": "independent layer errors"}
    cal = est.calibration
    if est.uncalibrated is not None:
        print(f"total: {_fmt_ms(est.total_ms)} ms, calibrated on {cal.get('n_networks')} whole networks "
              f"({cal.get('kind')} by {cal.get('runner')}, {cal.get('date', '')[:10]}): {cal.get('formula')}", file=out)
    else:
        print(f"total: {_fmt_ms(est.total_ms)} ms (intervals: {how.get(est.coupling, est.coupling)})", file=out)
    named = False

    def drivers(total: float, intervals: dict) -> None:  # right under a wide CM_O line
        nonlocal named
        if not cm_o_is_wide(total, intervals):
            return
        if named:
            print("    (the layers that drive CM_O: listed above)", file=out)
            return
        upper = max(hi for _, hi in intervals["CM_O"].values())
        for line in cm_o_driver_lines(est.cm_o_drivers, total, upper, indent="    "):
            print(line, file=out)
        named = True

    for m in METRICS:
        parts = [f"{cc:g}: {_fmt_iv(est.intervals[m][cc])} ms (rel. width {est.relative_width(m, cc):.1%})"
                 for cc in est.confidence]
        print(f"  {m}: " + "; ".join(parts), file=out)
        if m == "CM_O":
            drivers(est.total_ms, est.intervals)
    if est.uncalibrated is not None:
        u = est.uncalibrated
        print(f"uncalibrated (Eq. 7/8, {how.get(est.coupling, est.coupling)}): {_fmt_ms(u['total_ms'])} ms", file=out)
        for m in METRICS:
            print(f"  {m}: " + "; ".join(f"{cc:g}: {_fmt_iv(u['intervals'][m][cc])} ms" for cc in est.confidence),
                  file=out)
            if m == "CM_O":
                drivers(u["total_ms"], u["intervals"])
    elif cal.get("reason"):
        print(f"calibration: none ({cal['reason']})", file=out)
    for w in est.warnings:
        print(f"warning: {w}", file=out)


def plot_layer_widths(est: NetworkEstimate, path: str | Path, confidence: float | None = None) -> Path:
    """Per-layer interval widths of the three metrics (the paper's Fig. 13)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    c = confidence or est.confidence[0]
    n = len(est.layers)
    x = np.arange(n)
    fig, ax = plt.subplots(figsize=(max(8.0, min(0.12 * n + 4, 30.0)), 4.5))
    bw = 0.28
    colors = {"CM_TV": "tab:blue", "CM_LV": "tab:orange", "CM_O": "tab:green"}
    for k, m in enumerate(METRICS):
        w = [l.intervals[m][c][1] - l.intervals[m][c][0] for l in est.layers]
        ax.bar(x + (k - 1) * bw, w, bw, label=f"{m} {c:g}", color=colors[m])
    ood = [i for i, l in enumerate(est.layers) if l.out_of_design_space]
    if ood:
        top = max((l.intervals[m][c][1] - l.intervals[m][c][0]) for l in est.layers for m in METRICS)
        ax.scatter(ood, [top * 1.05] * len(ood), marker="v", color="red", s=14, label="out of design space")
    ax.set_xlabel("layer index")
    ax.set_ylabel("interval width (ms)")
    ax.set_title(f"{est.name or 'network'} on {est.device}: per-layer {c:g} interval widths")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_xlim(-1, n)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cmd_predict(args: argparse.Namespace) -> int:
    confs = _confidences(args.confidence)
    est = _estimator(args)
    src, name = model_source(args.model)
    net = est.estimate_network(src, confs, input_shapes=input_shapes_from_args(args.input_shape), name=name)
    if args.json:
        json.dump(net.to_dict(), sys.stdout, indent=2, default=_json_default)
        print()
    else:
        print_estimate(net)
    if args.plot:
        p = plot_layer_widths(net, args.plot)
        print(f"wrote {p}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


# ------------------------------------------------------------------------ train


def _cmd_train(args: argparse.Namespace) -> int:
    est = _estimator(args)
    m = est.models
    rep = m.report
    if args.json:
        json.dump({"device": est.device, "cache_key": m.cache_key, "loaded_from_cache": m.loaded_from_cache,
                   "report": rep}, sys.stdout, indent=2, default=_json_default)
        print()
        return 0
    src = "loaded from cache" if m.loaded_from_cache else "trained"
    print(f"device {est.device}: models {src} (target {m.target}, key {m.cache_key[:12]})")
    if not m.loaded_from_cache and (rep.get("cached_types") or rep.get("cached_grid_types")):
        print(f"retrained incrementally in {rep['train_seconds']:.1f} s: types from the cache: "
              f"{', '.join(rep.get('cached_types') or []) or 'none'}; trained with a cached grid search: "
              f"{', '.join(rep.get('cached_grid_types') or []) or 'none'}")
    rows = []
    for t, r in sorted(rep["types"].items()):
        cov = r["coverage"]["0.9"]
        hp = r["hyperparams"]
        rows.append([t, str(r["n_rows"]), str(r["no_latency_rows"]), f"{100 * r['oob_rmspe']:.1f}",
                     f"{100 * r['oob_within_10pct']:.1f}",
                     f"{cov['CM_TV']:.3f}", f"{cov['CM_LV']:.3f}", f"{cov['CM_O']:.3f}",
                     f"mf={hp['max_features']:g} msl={hp['min_samples_leaf']} (grid on {r.get('grid_rows', '-')} rows)"])
    print(_table(rows, ["type", "rows", "no latency", "OOB RMSPE %", "within 10 %", "cov TV .9", "cov LV .9",
                        "cov O .9", "forest"]))
    if rep["too_few_rows"]:
        print("too few rows (roofline fallback): " + ", ".join(f"{t} ({n})" for t, n in rep["too_few_rows"].items()))
    if rep["skipped_rows"]:
        print("skipped rows: " + "; ".join(f"{k}: {v}" for k, v in rep["skipped_rows"].items()))
    for w in est.profile_warnings():
        print(f"warning: {w}")
    fb = rep["fallback"]
    print(f"fallback roofline: {fb['peak_gops_per_s']:.2f} Gop/s, {fb['peak_gbytes_per_s']:.2f} GB/s, "
          f"overhead {fb['overhead_us']:.2f} us per layer, median measured/(overhead + roofline) "
          f"{fb['median_ratio']:.2f} over {fb['n_rows']} rows")
    print("coverage columns: out-of-bag calibration coverage of the whole measured interval (by construction "
          "close to 0.9; held-out coverage is what `estimator evaluate` and tests/perf check)")
    return 0


# --------------------------------------------------------------------- evaluate


def uncalibrated_view(est: NetworkEstimate) -> NetworkEstimate:
    """``est`` with its Eq. 7/8 total and intervals (itself when it is not calibrated)."""
    if est.uncalibrated is None:
        return est
    return dataclasses.replace(est, total_ms=est.uncalibrated["total_ms"], intervals=est.uncalibrated["intervals"],
                               uncalibrated=None, calibration={"applied": False})


def evaluate_estimates(estimates: dict[str, NetworkEstimate], measured: dict[str, float],
                       confidences: Sequence[float], families: dict[str, str] | None = None) -> dict[str, Any]:
    """Per-network % error and, per metric and confidence, coverage and relative width
    (and the mean |error| per family when ``families`` names them)."""
    per: dict[str, Any] = {}
    for name, est in estimates.items():
        t = measured[name]
        row: dict[str, Any] = {"measured_ms": t, "predicted_ms": est.total_ms,
                               "family": (families or {}).get(name, ""),
                               "error_pct": 100.0 * (est.total_ms - t) / t, "intervals": {},
                               "n_fallback": est.n_fallback, "n_out_of_design_space": est.n_out_of_design_space}
        for m in METRICS:
            row["intervals"][m] = {}
            for c in confidences:
                lo, hi = est.intervals[m][c]
                row["intervals"][m][f"{c:g}"] = {"lower": lo, "upper": hi, "covered": bool(lo <= t <= hi),
                                                 "rel_width": (hi - lo) / t}
        per[name] = row
    errs = [abs(r["error_pct"]) for r in per.values()]
    summary: dict[str, Any] = {"n_networks": len(per),
                               "mean_abs_error_pct": sum(errs) / len(errs) if errs else float("nan"),
                               "max_abs_error_pct": max(errs) if errs else float("nan"), "metrics": {}}
    for m in METRICS:
        summary["metrics"][m] = {}
        for c in confidences:
            k = f"{c:g}"
            cells = [r["intervals"][m][k] for r in per.values()]
            summary["metrics"][m][k] = {
                "coverage": sum(x["covered"] for x in cells) / len(cells) if cells else float("nan"),
                "mean_rel_width": sum(x["rel_width"] for x in cells) / len(cells) if cells else float("nan"),
            }
    if families:
        by: dict[str, list[float]] = {}
        for r in per.values():
            by.setdefault(r["family"], []).append(abs(r["error_pct"]))
        summary["families"] = {f: {"n": len(e), "mean_abs_error_pct": sum(e) / len(e)} for f, e in sorted(by.items())}
    return {"networks": per, "summary": summary}


def plot_pred_vs_measured(results: dict[str, dict[str, Any]], path: str | Path, *, metric: str = "CM_LV",
                          confidence: float = 0.9, title: str = "") -> Path:
    """Predicted vs measured network latency with ``metric`` intervals (one series per target)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 6))
    lo_all, hi_all = math.inf, 0.0
    for (target, res), color in zip(results.items(), ("tab:blue", "tab:gray", "tab:red", "tab:olive", "tab:green")):
        xs, ys, el, eu = [], [], [], []
        for name, r in res["networks"].items():
            iv = r["intervals"][metric][f"{confidence:g}"]
            xs.append(r["measured_ms"])
            ys.append(r["predicted_ms"])
            el.append(max(r["predicted_ms"] - iv["lower"], 0.0))
            eu.append(max(iv["upper"] - r["predicted_ms"], 0.0))
            ax.annotate(name, (r["measured_ms"], r["predicted_ms"]), fontsize=6, alpha=0.7,
                        xytext=(3, 3), textcoords="offset points")
        ax.errorbar(xs, ys, yerr=[el, eu], fmt="o", ms=4, capsize=2, color=color,
                    label=f"{target} ({metric} {confidence:g}); mean |err| "
                          f"{res['summary']['mean_abs_error_pct']:.1f} %")
        if xs:
            lo_all = min(lo_all, *xs, *ys)
            hi_all = max(hi_all, *xs, *ys)
    if hi_all > 0:
        ax.plot([lo_all * 0.8, hi_all * 1.25], [lo_all * 0.8, hi_all * 1.25], "k--", lw=0.8, label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("measured latency (ms)")
    ax.set_ylabel("predicted latency (ms)")
    ax.set_title(title or "predicted vs measured")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .profile import read_network_set  # noqa: PLC0415

    confs = _confidences(args.confidence)
    rows: list[dict[str, Any]] = []
    for d in args.networks:
        rows += [dict(r, set=str(d)) for r in read_network_set(d)]
    if not rows:
        raise UserError(f"no networks in {', '.join(args.networks)}")
    names = [r["name"] for r in rows]
    if len(set(names)) != len(names):
        raise UserError("the network sets name one network twice; evaluate them one at a time")
    targets = list(TARGETS) if args.target == "both" else [args.target]
    ests = {t: _estimator(args, target=t) for t in targets}
    prof = next(iter(ests.values())).profile
    own = {r["onnx_sha256"] for r in prof.network_rows()}
    inside = [r["name"] for r in rows if r["onnx_sha256"] in own]
    rows = [r for r in rows if r["onnx_sha256"] not in own]
    if inside:
        print(f"warning: {len(inside)} network(s) are in {prof.name}'s own calibration set and are left out "
              f"(in-sample): {', '.join(inside[:5])}{' ...' if len(inside) > 5 else ''}", file=sys.stderr)
    if not rows:
        raise UserError(f"every network given is in {prof.name}'s calibration set; evaluate on networks it has not seen")
    want = prof.calibration.get("runner") if prof.has_networks else prof.runner
    got = sorted({r["runner"] for r in rows})
    if got != [want]:
        print(f"warning: the networks were measured with {', '.join(got)}; {prof.name}'s numbers come from {want}",
              file=sys.stderr)
    names = [r["name"] for r in rows]
    measured = {r["name"]: r["measured_ms"] for r in rows}
    families = {r["name"]: r["family"] for r in rows}
    results: dict[str, Any] = {}
    calibrated = False
    for t, est in ests.items():
        estimates = {r["name"]: est.estimate_network(r["onnx_path"], confs, name=r["name"], per_layer=False)
                     for r in rows}
        results[t] = evaluate_estimates(estimates, measured, confs, families)
        if any(e.uncalibrated is not None for e in estimates.values()):
            calibrated = True
            results[f"{t} uncalibrated"] = evaluate_estimates(
                {n: uncalibrated_view(e) for n, e in estimates.items()}, measured, confs, families)
    cal = next(iter(ests.values())).calibration_info()
    c0 = confs[0]
    if args.json:
        doc = {"device": prof.name, "networks": [str(d) for d in args.networks], "confidence": confs,
               "left_out_in_sample": inside, "calibration": cal, "results": results}
        json.dump(doc, sys.stdout, indent=2, default=_json_default)
        print()
    else:
        keys = list(results)
        header = ["network", "family", "measured ms"]
        for k in keys:
            header += [f"{k} ms", "err %"]
        header += [f"{k} {m} {c0:g} cov/width" for k in keys[:2 if calibrated else 1] for m in ("CM_LV",)]
        table = []
        for n in names:
            row = [_short(n, 32), _short(families[n], 20), _fmt_ms(measured[n])]
            for k in keys:
                r = results[k]["networks"][n]
                row += [_fmt_ms(r["predicted_ms"]), f"{r['error_pct']:+.1f}"]
            for k in keys[:2 if calibrated else 1]:
                cell = results[k]["networks"][n]["intervals"]["CM_LV"][f"{c0:g}"]
                row.append(f"{'yes' if cell['covered'] else 'NO'} {cell['rel_width']:.0%}")
            table.append(row)
        print(f"device {prof.name}: {len(names)} networks from {', '.join(map(str, args.networks))}")
        if calibrated:
            print(f"calibration: {cal.get('method')} ({cal.get('formula')}) on {cal.get('n_networks')} networks "
                  f"{cal.get('kind')} by {cal.get('runner')} {_fmt_opts(cal.get('runner_options') or {})}")
        print(_table(table, header))
        for k in keys:
            s = results[k]["summary"]
            print(f"\n[{k}] mean |error| {s['mean_abs_error_pct']:.1f} %, max {s['max_abs_error_pct']:.1f} %")
            for m in METRICS:
                for c in confs:
                    x = s["metrics"][m][f"{c:g}"]
                    print(f"  {m} {c:g}: coverage {x['coverage']:.2f} ({round(x['coverage'] * s['n_networks'])}/"
                          f"{s['n_networks']}), mean relative width {x['mean_rel_width']:.1%}")
    if args.plot:
        p = plot_pred_vs_measured(results, args.plot, confidence=c0, title=f"{prof.name}: {', '.join(got)}")
        print(f"wrote {p}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _fmt_opts(opts: dict[str, Any]) -> str:
    return ("(" + ", ".join(f"{k} {v}" for k, v in sorted(opts.items())) + ")") if opts else ""


# ---------------------------------------------------------------------- devices


def _refined(r: dict[str, Any], runner: str) -> str:
    """One cell for :meth:`Profile.refinement_summary`: rows added, at what cost, toward what
    (the runner when it is not the profile's own)."""
    if not r["configurations"] and not r.get("rounds"):
        return "none"
    targets = r["targets"][:1] + ([f"+{len(r['targets']) - 1}"] if len(r["targets"]) > 1 else [])
    by = " ".join(x for x in (r["runner"], _fmt_opts(r["runner_options"])) if x) if r["runner"] != runner else ""
    return (f"{r['configurations']} rows, {r['rounds']} rounds, {r['device_seconds']:.0f} s{' by ' + by if by else ''}, "
            f"{r['date'][:10]}, toward {' '.join(targets) or '-'}")


def _cmd_devices(args: argparse.Namespace) -> int:
    root = Path(args.profiles) if args.profiles else default_root()
    names = list_profiles(root)
    profs: list[Profile] = [load_profile(n, root) for n in names]
    if args.json:
        json.dump({"root": str(root), "devices": [p.summary() for p in profs]}, sys.stdout, indent=2)
        print()
        return 0
    if not profs:
        print(f"no device profiles in {root} (set CL_PROFILES or pass --profiles)")
        return 0
    rows = []
    for p in profs:
        c = p.calibration_summary()
        cal = (f"{c['networks']} networks, {c['kind']} by {c['runner']} {_fmt_opts(c['runner_options'])}, "
               f"{c['date'][:10]}" if c["networks"] else "none")
        rows.append([p.name, p.provenance.kind, p.runner, p.precision, str(p.threads or "-"), _short(p.hardware, 40),
                     p.provenance.date[:10], _short(cal, 56), _short(_refined(p.refinement_summary(), p.runner), 64),
                     _short(p.provenance.source, 48)])
    print(f"profiles in {root}")
    print(_table(rows, ["device", "kind", "runner", "precision", "threads", "hardware", "date", "calibration",
                        "refined", "source"]))
    return 0


# --------------------------------------------------------------------- register


def _common(p: argparse.ArgumentParser, device: bool = True) -> None:
    if device:
        p.add_argument("--device", required=True, help="device profile name (see `estimator devices`) or directory")
    p.add_argument("--profiles", default=None, metavar="DIR",
                   help="profiles directory (default: $CL_PROFILES or the repository's profiles/)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predict", help="per-layer and network latency with CM_TV/CM_LV/CM_O intervals",
                              description="Per-layer table (prediction, CM_TV/CM_LV/CM_O intervals, "
                                          "out-of-design-space and fallback flags) and network totals.")
    p.add_argument("model", metavar="MODEL.onnx", help=MODEL_HELP)
    _common(p)
    p.add_argument("--confidence", action="append", metavar="C",
                   help="confidence level(s) in (0, 1), repeatable or comma-separated (default 0.9)")
    p.add_argument("--input-shape", action="append", metavar="[NAME:]1x3x224x224",
                   help="fix dynamic input dims (repeat for several inputs)")
    p.add_argument("--target", choices=TARGETS, default="lum",
                   help="training target: smart-padding LUM times (default) or single-layer times")
    p.add_argument("--coupling", choices=COUPLINGS, default=DEFAULT_COUPLING,
                   help="network intervals (Eq. 8): 'type' (default): layer errors correlated within a layer "
                        "type, independent across types; or 'independent'")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument("--plot", metavar="FILE", help="write a per-layer interval-width figure (png/pdf/svg)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while training")
    p.set_defaults(func=_cmd_predict)

    t = subparsers.add_parser("train", help="train (or load cached) models of a device and print their metrics")
    _common(t)
    t.add_argument("--target", choices=TARGETS, default="lum", help="training target (default lum)")
    t.add_argument("--retrain", action="store_true", help="ignore the cache and train again")
    t.add_argument("--jobs", type=integer(min=1), default=1, help="parallel jobs for the forests (default 1)")
    t.add_argument("--json", action="store_true", help="print the training report as JSON")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=_cmd_train)

    e = subparsers.add_parser("evaluate", help="compare estimates with whole networks measured on the target",
                              description="Compare the estimates with whole networks measured on the target: a "
                                          "network set written by `bench networks` (or a profile directory).")
    _common(e)
    e.add_argument("--networks", required=True, action="append", metavar="DIR",
                   help="a network set: DIR/networks.csv + DIR/networks/ (bench networks --out DIR; repeatable)")
    e.add_argument("--confidence", action="append", metavar="C", help="confidence level(s) (default 0.9)")
    e.add_argument("--target", choices=(*TARGETS, "both"), default="lum",
                   help="lum (smart padding), single (single-layer times) or both side by side")
    e.add_argument("--coupling", choices=COUPLINGS, default=DEFAULT_COUPLING,
                   help="network intervals: layer errors correlated within a type (default) or independent")
    e.add_argument("--plot", metavar="FILE", help="write a predicted-vs-measured figure")
    e.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=_cmd_evaluate)

    d = subparsers.add_parser("devices", help="list device profiles with their provenance")
    _common(d, device=False)
    d.add_argument("--json", action="store_true", help="print as JSON")
    d.set_defaults(func=_cmd_devices)
