"""``estimator predict | train | evaluate | devices``: the model commands.

* ``estimator predict MODEL.onnx --device NAME`` prints the per-layer table (prediction,
  CM_TV / CM_LV / CM_O intervals, out-of-design-space and fallback flags) and the network
  totals; ``--json`` prints :meth:`NetworkEstimate.to_dict` instead; ``--plot FILE`` draws
  the per-layer interval widths (the paper's Fig. 13).
* ``estimator train --device NAME`` trains (or loads from the cache) and prints per-type
  out-of-bag metrics: RMSPE, share within +-10 %, calibration coverage of each metric.
* ``estimator evaluate --device NAME --networks resnet18,mobilenet_v2`` builds the
  networks from :mod:`estimator.zoo`, measures them whole on a runner
  (``bench.runners``, imported lazily: the estimator library does not depend on bench),
  and compares: per-network % error, mean |error|, empirical coverage and mean relative
  width of each metric's interval, and a predicted-vs-measured plot. ``--target single``
  uses models trained on single-layer times, ``--target both`` compares the two (the
  paper's Tables 3-5).
* ``estimator devices`` lists the profiles with their provenance.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from .aggregate import COUPLINGS, DEFAULT_COUPLING
from .cliargs import MODEL_HELP, input_shapes_from_args, model_source
from .errors import UserError
from .models import METRICS, TARGETS
from .predict import Estimator, NetworkEstimate, parse_confidence
from .profile import Profile, default_root, list_profiles, load_profile

__all__ = ["register", "measure_networks", "evaluate_estimates", "plot_layer_widths", "plot_pred_vs_measured"]


# ---------------------------------------------------------------------- helpers


def _confidences(values: Sequence[str] | None) -> list[float]:
    if not values:
        return [0.9]
    out: list[float] = []
    for v in values:
        for part in str(v).split(","):
            if part.strip():
                try:
                    out.append(float(part))
                except ValueError:
                    raise UserError(f"--confidence must be numbers in (0, 1), got {part!r}") from None
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
        if l.fallback:
            flags.append("FALLBACK")
        if l.out_of_design_space:
            flags.append("OOD(" + ",".join(r for r in l.ood_reasons if r != "no_data") + ")"
                         if [r for r in l.ood_reasons if r != "no_data"] else "OOD")
        flags += [f for f in l.flags if f in ("cpu_fallback_op", "cpu_fallback_possible")]
        kind = l.type if l.type != "other" else f"other:{l.op_type}"
        rows.append([str(i), _short(l.name), kind, _fmt_ms(l.prediction_ms)]
                    + [_fmt_iv(l.intervals[m][c]) for m in METRICS] + [" ".join(flags)])
    header = ["#", "layer", "type", "pred ms"] + [f"{m} {c:g}" for m in METRICS] + ["flags"]
    print(f"device {est.device} (target {est.target}); {len(est.layers)} layers, "
          f"{est.n_fallback} fallback, {est.n_out_of_design_space} out of design space", file=out)
    print(_table(rows, header), file=out)
    print("", file=out)
    how = {"type": "layer errors correlated within a layer type, independent across types",
           "independent": "independent layer errors", "comonotone": "comonotone layer errors"}
    print(f"total: {_fmt_ms(est.total_ms)} ms (intervals: {how.get(est.coupling, est.coupling)})", file=out)
    for m in METRICS:
        parts = [f"{cc:g}: {_fmt_iv(est.intervals[m][cc])} ms (rel. width {est.relative_width(m, cc):.1%})"
                 for cc in est.confidence]
        print(f"  {m}: " + "; ".join(parts), file=out)
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
    rows = []
    for t, r in sorted(rep["types"].items()):
        cov = r["coverage"]["0.9"]
        hp = r["hyperparams"]
        rows.append([t, str(r["n_rows"]), f"{100 * r['oob_rmspe']:.1f}", f"{100 * r['oob_within_10pct']:.1f}",
                     f"{cov['CM_TV']:.3f}", f"{cov['CM_LV']:.3f}", f"{cov['CM_O']:.3f}",
                     f"mf={hp['max_features']:g} msl={hp['min_samples_leaf']}"])
    print(_table(rows, ["type", "rows", "OOB RMSPE %", "within 10 %", "cov TV .9", "cov LV .9", "cov O .9",
                        "forest"]))
    if rep["too_few_rows"]:
        print("too few rows (roofline fallback): " + ", ".join(f"{t} ({n})" for t, n in rep["too_few_rows"].items()))
    if rep["skipped_rows"]:
        print("skipped rows: " + "; ".join(f"{k}: {v}" for k, v in rep["skipped_rows"].items()))
    fb = rep["fallback"]
    print(f"fallback roofline: {fb['peak_gops_per_s']:.2f} Gop/s, {fb['peak_gbytes_per_s']:.2f} GB/s, "
          f"overhead {fb['overhead_us']:.2f} us per layer, median measured/(overhead + roofline) "
          f"{fb['median_ratio']:.2f} over {fb['n_rows']} rows")
    print("coverage columns: out-of-bag calibration coverage of the whole measured interval (by construction "
          "close to 0.9; held-out coverage is what `estimator evaluate` and tests/perf check)")
    return 0


# --------------------------------------------------------------------- evaluate


def measure_networks(names: Sequence[str], *, runner: str = "onnxruntime", resolution: int | None = None,
                     warmup: int = 5, runs: int = 20, rounds: int = 1, runner_options: dict[str, Any] | None = None,
                     progress: bool = False) -> dict[str, dict[str, Any]]:
    """Export zoo networks and time them whole on a runner (``bench.runners``).

    With ``rounds > 1`` every network is prepared first and then timed ``rounds`` times
    round-robin (``warmup`` + ``runs`` each time), so a slow spell of a shared machine
    hits all networks alike instead of one; the measurement is the median of the rounds'
    medians, and ``round_medians_ms`` / ``spread_pct`` (max/min - 1 over the rounds) say
    how much the machine moved.

    Returns ``{name: {"onnx": bytes, "measured_ms": median, "timing": {...}}}``.
    """
    from bench.runners.base import RunnerError, get_runner  # noqa: PLC0415 (the library does not need bench)

    from . import zoo  # noqa: PLC0415

    opts = {k: v for k, v in (runner_options or {}).items() if v is not None}
    try:
        r = get_runner(runner, **opts)
    except RunnerError as e:
        raise UserError(str(e)) from e
    if rounds < 1:
        raise UserError(f"rounds must be >= 1, got {rounds}")
    out: dict[str, dict[str, Any]] = {}
    prepared: dict[str, Any] = {}
    medians: dict[str, list[float]] = {n: [] for n in names}
    bar: Any = None
    if progress:
        from tqdm import tqdm  # noqa: PLC0415

        bar = tqdm(total=len(names) * (rounds + 1), desc="measuring", unit="step", file=sys.stderr, leave=False)
    with r:
        env = r.environment()
        for name in names:
            res = resolution or (640 if name.startswith("yolo") else 224)
            data = zoo.export_onnx(name, res)
            try:
                prepared[name] = r.prepare(data)
            except RunnerError as e:
                raise UserError(f"{name}: {e}") from e
            out[name] = {"onnx": data, "resolution": res, "environment": env}
            if bar is not None:
                bar.update()
        for _ in range(rounds):
            for name in names:
                try:
                    timing = r.time(prepared[name], warmup=warmup, runs=runs)
                except RunnerError as e:
                    raise UserError(f"{name}: {e}") from e
                medians[name].append(timing.median_ms)
                out[name]["timing"] = timing.to_dict()  # the last round's statistics
                if bar is not None:
                    bar.update()
    if bar is not None:
        bar.close()
    for name in names:
        m = medians[name]
        out[name]["measured_ms"] = statistics.median(m)
        out[name]["timing"].update(rounds=rounds, round_medians_ms=m, spread_pct=100.0 * (max(m) / min(m) - 1.0))
    return out


def evaluate_estimates(estimates: dict[str, NetworkEstimate], measured: dict[str, float],
                       confidences: Sequence[float]) -> dict[str, Any]:
    """Per-network % error and, per metric and confidence, coverage and relative width."""
    per: dict[str, Any] = {}
    for name, est in estimates.items():
        t = measured[name]
        row: dict[str, Any] = {"measured_ms": t, "predicted_ms": est.total_ms,
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
    return {"networks": per, "summary": summary}


def plot_pred_vs_measured(results: dict[str, dict[str, Any]], path: str | Path, *, metric: str = "CM_LV",
                          confidence: float = 0.9, title: str = "") -> Path:
    """Predicted vs measured network latency with ``metric`` intervals (one series per target)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 6))
    lo_all, hi_all = math.inf, 0.0
    for (target, res), color in zip(results.items(), ("tab:blue", "tab:red", "tab:green")):
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
    from . import zoo  # noqa: PLC0415

    confs = _confidences(args.confidence)
    names = [n.strip() for n in args.networks.split(",") if n.strip()] if args.networks else zoo.names()
    unknown = [n for n in names if n not in zoo.names()]
    if unknown:
        raise UserError(f"unknown network(s) {', '.join(unknown)}; known: {', '.join(zoo.names())}")
    targets = list(TARGETS) if args.target == "both" else [args.target]
    ests = {t: _estimator(args, target=t) for t in targets}
    prof = next(iter(ests.values())).profile
    threads = args.threads if args.threads is not None else prof.threads
    runner_opts = {"threads": threads} if args.runner == "onnxruntime" else {}
    if args.runner != prof.runner:
        print(f"warning: profile {prof.name} was measured with runner {prof.runner!r}, evaluating on "
              f"{args.runner!r}", file=sys.stderr)
    meas = measure_networks(names, runner=args.runner, resolution=args.resolution, warmup=args.warmup,
                            runs=args.runs, rounds=args.rounds, runner_options=runner_opts,
                            progress=sys.stderr.isatty() and not args.no_progress)
    results: dict[str, Any] = {}
    for t, est in ests.items():
        estimates = {n: est.estimate_network(meas[n]["onnx"], confs, name=n) for n in names}
        results[t] = evaluate_estimates(estimates, {n: meas[n]["measured_ms"] for n in names}, confs)
    c0 = confs[0]
    if args.json:
        doc = {"device": prof.name, "runner": args.runner, "threads": threads, "confidence": confs,
               "resolution": {n: meas[n]["resolution"] for n in names},
               "timing": {n: meas[n]["timing"] for n in names},
               "environment": next(iter(meas.values()))["environment"] if meas else {}, "results": results}
        json.dump(doc, sys.stdout, indent=2, default=_json_default)
        print()
    else:
        header = ["network", "measured ms"] + (["spread %"] if args.rounds > 1 else [])
        for t in targets:
            header += [f"{t} pred ms", f"{t} err %"]
        header += [f"{m} {c0:g} cov/width" for m in METRICS]
        rows = []
        main = results[targets[0]]
        for n in names:
            row = [n, _fmt_ms(meas[n]["measured_ms"])]
            if args.rounds > 1:
                row.append(f"{meas[n]['timing']['spread_pct']:.1f}")
            for t in targets:
                r = results[t]["networks"][n]
                row += [_fmt_ms(r["predicted_ms"]), f"{r['error_pct']:+.1f}"]
            for m in METRICS:
                cell = main["networks"][n]["intervals"][m][f"{c0:g}"]
                row.append(f"{'yes' if cell['covered'] else 'NO'} {cell['rel_width']:.0%}")
            rows.append(row)
        print(f"device {prof.name}, runner {args.runner}, threads {threads}")
        print(_table(rows, header))
        for t in targets:
            s = results[t]["summary"]
            print(f"\n[{t}] mean |error| {s['mean_abs_error_pct']:.1f} %, max {s['max_abs_error_pct']:.1f} %")
            for m in METRICS:
                for c in confs:
                    x = s["metrics"][m][f"{c:g}"]
                    print(f"  {m} {c:g}: coverage {x['coverage']:.2f}, mean relative width {x['mean_rel_width']:.1%}")
    if args.plot:
        p = plot_pred_vs_measured(results, args.plot, confidence=c0, title=f"{prof.name}: {args.runner}")
        print(f"wrote {p}", file=sys.stderr if args.json else sys.stdout)
    return 0


# ---------------------------------------------------------------------- devices


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
    rows = [[p.name, p.provenance.kind, p.runner, p.precision, str(p.threads or "-"), _short(p.hardware, 40),
             p.provenance.date, _short(p.provenance.source, 60)] for p in profs]
    print(f"profiles in {root}")
    print(_table(rows, ["device", "kind", "runner", "precision", "threads", "hardware", "date", "source"]))
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
                        "type, independent across types; 'independent'; or 'comonotone' (the sum of the layer "
                        "intervals)")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument("--plot", metavar="FILE", help="write a per-layer interval-width figure (png/pdf/svg)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while training")
    p.set_defaults(func=_cmd_predict)

    t = subparsers.add_parser("train", help="train (or load cached) models of a device and print their metrics")
    _common(t)
    t.add_argument("--target", choices=TARGETS, default="lum", help="training target (default lum)")
    t.add_argument("--retrain", action="store_true", help="ignore the cache and train again")
    t.add_argument("--jobs", type=int, default=1, help="parallel jobs for the forests (default 1)")
    t.add_argument("--json", action="store_true", help="print the training report as JSON")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=_cmd_train)

    e = subparsers.add_parser("evaluate", help="measure zoo networks whole and compare with the predictions")
    _common(e)
    e.add_argument("--runner", default="onnxruntime", help="bench runner to measure with (default onnxruntime)")
    e.add_argument("--networks", default=None,
                   help="comma-separated zoo names (default: all of estimator.zoo)")
    e.add_argument("--resolution", type=int, default=None, help="input resolution (default 224; 640 for yolo)")
    e.add_argument("--confidence", action="append", metavar="C", help="confidence level(s) (default 0.9)")
    e.add_argument("--target", choices=(*TARGETS, "both"), default="lum",
                   help="lum (smart padding), single (single-layer times) or both side by side")
    e.add_argument("--coupling", choices=COUPLINGS, default=DEFAULT_COUPLING,
                   help="network intervals: layer errors correlated within a type (default), independent, or "
                        "comonotone")
    e.add_argument("--threads", type=int, default=None, help="runner threads (default: the profile's)")
    e.add_argument("--warmup", type=int, default=5, help="untimed runs per network (default 5)")
    e.add_argument("--runs", type=int, default=20, help="timed runs per network and round (default 20)")
    e.add_argument("--rounds", type=int, default=1,
                   help="time every network this many times, round-robin, and take the median of the rounds "
                        "(default 1; use 5-10 on a shared machine)")
    e.add_argument("--plot", metavar="FILE", help="write a predicted-vs-measured figure")
    e.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=_cmd_evaluate)

    d = subparsers.add_parser("devices", help="list device profiles with their provenance")
    _common(d, device=False)
    d.add_argument("--json", action="store_true", help="print as JSON")
    d.set_defaults(func=_cmd_devices)
