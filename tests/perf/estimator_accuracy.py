"""Accuracy and calibration of the estimator on a real device profile (a script, not a test).

Prints numbers; asserts nothing. Run it on a quiet machine against a real profile (for the
local CPU: a ``host-cpu`` profile measured with ``bench run --runner onnxruntime``):

    python tests/perf/estimator_accuracy.py --device host-cpu                 # full
    python tests/perf/estimator_accuracy.py --device host-cpu --skip-networks # layers only
    python tests/perf/estimator_accuracy.py --device host-cpu --networks resnet18,mobilenet_v2 --runs 5

Sections
--------
1. Layer level, held-out configurations: per layer type, the profile's rows are split
   (``--holdout``, default 20 %, seeded); models trained on the rest (smart padding
   ``lum`` and ``single``-layer targets) predict the held-out rows. Printed: RMSPE, share
   within +-10 %, and for each metric the empirical coverage at 0.9 of the held-out
   *measured interval* (the calibration target, see ``estimator.models``) and of its
   midpoint, with the median relative width.
2. Network level: >= 12 zoo networks exported and measured whole with ONNX Runtime (the
   profile's thread count) in ``--rounds`` interleaved rounds (median of the rounds'
   medians; "spread" = max/min - 1 over the rounds shows how much the machine moved),
   predicted with the full-profile models. Printed per network:
   measured, smart-padding and single-layer predictions and % errors (Tables 3-5 of the
   paper), CM_LV 90 % coverage and relative width; then mean |error|, and per metric the
   coverage and mean relative width, under the estimator's default coupling of layer
   errors (``lum``: correlated within a layer type, independent across types) and, as
   ``lum_independent``, under independent layer errors (Eq. 8).
3. CM_O on an out-of-design-space network (``--ood-network NAME@RES``, default
   ``resnet18@1024``): its CM_O 90 % relative width divided by the median over the
   in-space networks of section 2 (target: >= 3x), and the share of its layers flagged.

``--measurements DIR/accuracy.json`` takes section 2's measured latencies from an earlier
run instead of measuring again, so two profiles (or two estimator versions) are compared
on the same measurement window; the machine's drift between runs is larger than most
changes worth comparing.

``--out DIR`` writes ``accuracy.json`` and the predicted-vs-measured figure there.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from estimator import zoo  # noqa: E402
from estimator.aggregate import COUPLINGS, layer_intervals  # noqa: E402
from estimator.cmd_model import evaluate_estimates, plot_pred_vs_measured, uncalibrated_view  # noqa: E402
from estimator.models import METRICS, TrainingOptions, prepare_training_data, train_models  # noqa: E402
from estimator.predict import Estimator, make_layer  # noqa: E402
from estimator.profile import load_profile  # noqa: E402

DEFAULT_NETWORKS = ("resnet18,resnet50,mobilenet_v1,mobilenet_v2,mobilenet_v3,efficientnet_b0,shufflenet_v2,"
                    "squeezenet,densenet121,googlenet,mnasnet,regnet_x_400mf,vgg16,yolov5s")


def _split(rows: list[dict[str, Any]], holdout: float, seed: int) -> tuple[list, list]:
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_type.setdefault(r["layer_type"], []).append(r)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for t in sorted(by_type):
        rs = by_type[t]
        idx = rng.permutation(len(rs))
        k = int(round(holdout * len(rs)))
        test += [rs[i] for i in idx[:k]]
        train += [rs[i] for i in idx[k:]]
    return train, test


def layer_level(profile: Any, holdout: float, seed: int, jobs: int) -> dict[str, Any]:
    rows = list(profile.rows())
    train, test = _split(rows, holdout, seed)
    opts = TrainingOptions.from_dict(profile.training)
    out: dict[str, Any] = {"holdout": holdout, "n_train": len(train), "n_test": len(test), "targets": {}}
    for target in ("lum", "single"):
        t0 = time.perf_counter()
        models = train_models(train, profile_name=profile.name, precision=profile.precision, target=target,
                              options=opts, n_jobs=jobs)
        data, _ = prepare_training_data(test, target, models.elem_bytes)
        per: dict[str, Any] = {}
        for t, d in sorted(data.items()):
            layers = [make_layer(t, p) for p in d.params]
            bp = models.predict_layers(layers)
            ok = d.mid > 0
            rel = (bp.pred_ms[ok] - d.mid[ok]) / d.mid[ok]
            row: dict[str, Any] = {
                "n_test": int(d.mid.size), "modelled": t in models.types,
                "rmspe": float(np.sqrt(np.mean(rel ** 2))) if rel.size else float("nan"),
                "within_10pct": float(np.mean(np.abs(rel) <= 0.1)) if rel.size else float("nan"),
                "median_abs_pct": float(np.median(np.abs(rel)) * 100) if rel.size else float("nan"),
                "metrics": {},
            }
            for m in METRICS:
                lo, hi = layer_intervals(bp.dists[m], 0.9)
                row["metrics"][m] = {
                    "coverage_interval": float(np.mean((lo <= d.lo) & (d.hi <= hi))),
                    "coverage_mid": float(np.mean((lo <= d.mid) & (d.mid <= hi))),
                    "median_rel_width": float(np.median((hi - lo)[ok] / d.mid[ok])) if ok.any() else float("nan"),
                }
            per[t] = row
        out["targets"][target] = {"types": per, "train_seconds": time.perf_counter() - t0}
    return out


def print_layer_level(res: dict[str, Any]) -> None:
    print(f"\n== 1. layer level: {res['n_train']} training rows, {res['n_test']} held-out rows "
          f"({res['holdout']:.0%} per type) ==")
    for target, tr in res["targets"].items():
        print(f"\n[{target}] (trained in {tr['train_seconds']:.1f} s)")
        hdr = f"{'type':<11} {'n':>4} {'RMSPE %':>8} {'<=10 %':>7} {'med|e|%':>8}"
        for m in METRICS:
            hdr += f"  {m + ' cov int/mid, width':>28}"
        print(hdr)
        for t, r in tr["types"].items():
            line = (f"{t:<11} {r['n_test']:>4} {100 * r['rmspe']:>8.1f} {100 * r['within_10pct']:>7.1f} "
                    f"{r['median_abs_pct']:>8.1f}")
            for m in METRICS:
                x = r["metrics"][m]
                line += f"  {x['coverage_interval']:>9.2f} / {x['coverage_mid']:.2f}, {x['median_rel_width']:>7.1%}"
            if not r["modelled"]:
                line += "  (fallback)"
            print(line)


def reuse_measurements(path: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """The measured latencies of an earlier run's ``accuracy.json`` (``--out``), with the
    networks exported again (the zoo's export is deterministic): a changed profile or
    estimator is compared with the one before on the same measurement window."""
    doc = json.loads(Path(path).read_text())
    net = doc["networks"]
    lum = net["results"]["lum"]["networks"]
    missing = [n for n in names if n not in lum]
    if missing:
        raise SystemExit(f"{path} has no measurement of {', '.join(missing)}")
    return {n: {"onnx": zoo.export_onnx(n, int(net["resolution"][n])), "resolution": int(net["resolution"][n]),
                "environment": net["environment"], "timing": net["timing"][n], "measured_ms": lum[n]["measured_ms"]}
            for n in names}


def measure_zoo(names: list[str], threads: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Time zoo networks whole with ONNX Runtime through bench's one whole-network path
    (:mod:`bench.network_measure`: interleaved rounds, committed to ``--db`` as taken)."""
    from bench.calibrate import measure
    from bench.measure import make_runner
    from bench.network_sources import zoo_specs

    specs = zoo_specs([(n, args.resolution) for n in names])
    m = measure("estimator-accuracy", make_runner("onnxruntime", {"threads": threads}), specs, fusion=None,
                db=args.db, rounds=args.rounds, runs=args.runs, warmup=args.warmup, options={"threads": threads},
                progress=sys.stderr.isatty(), log=lambda text: print(f"  .. {text}", file=sys.stderr))
    out = {}
    for n, r in zip(names, m.results):
        out[n] = {"onnx": r.spec.weightless_onnx, "resolution": r.spec.detail["resolution"], "environment": m.environment,
                  "measured_ms": r.measured_ms,
                  "timing": {"rounds": r.rounds, "round_medians_ms": r.round_medians_ms, "spread_pct": r.spread_pct,
                             "runs": r.runs}}
    return out


def network_level(est: dict[str, Estimator], names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    prof = next(iter(est.values())).profile
    threads = args.threads if args.threads is not None else prof.threads
    if args.measurements:
        meas = reuse_measurements(args.measurements, names)
    else:
        meas = measure_zoo(names, threads, args)
    results = {}
    runs = dict(est)
    lum = est["lum"]
    for coupling in COUPLINGS:  # the same predictions, intervals under each coupling of layer errors
        if coupling != lum.coupling:
            runs[f"lum_{coupling}"] = Estimator(lum.profile, lum.models, coupling=coupling)
    for target, e in runs.items():
        # the per-layer model itself (Eq. 7/8): a calibrated profile's calibration is issue 18's (calibration.py)
        estimates = {n: uncalibrated_view(e.estimate_network(meas[n]["onnx"], [0.9], name=n)) for n in names}
        results[target] = evaluate_estimates(estimates, {n: meas[n]["measured_ms"] for n in names}, [0.9])
        results[target]["layers"] = {n: {"n_layers": len(x.layers), "n_fallback": x.n_fallback,
                                         "n_out_of_design_space": x.n_out_of_design_space}
                                     for n, x in estimates.items()}
    return {"threads": threads, "resolution": {n: meas[n]["resolution"] for n in names},
            "timing": {n: meas[n]["timing"] for n in names}, "environment": next(iter(meas.values()))["environment"],
            "results": results}


def print_network_level(res: dict[str, Any], names: list[str]) -> None:
    lum, single = res["results"]["lum"], res["results"]["single"]
    print(f"\n== 2. network level: {len(names)} networks, ONNX Runtime, threads {res['threads']} ==")
    print(f"{'network':<16} {'res':>4} {'meas ms':>9} {'spread':>7} {'smart ms':>9} {'err %':>7} {'single ms':>10} {'err %':>8}"
          f"  {'CM_LV .9 cov':>12} {'width':>7}  {'OOD/layers':>10}")
    for n in names:
        a, b = lum["networks"][n], single["networks"][n]
        lv = a["intervals"]["CM_LV"]["0.9"]
        lay = lum["layers"][n]
        print(f"{n:<16} {res['resolution'][n]:>4} {a['measured_ms']:>9.3f} {res['timing'][n]['spread_pct']:>6.1f}% "
              f"{a['predicted_ms']:>9.3f} "
              f"{a['error_pct']:>+7.1f} {b['predicted_ms']:>10.3f} {b['error_pct']:>+8.1f}  "
              f"{'yes' if lv['covered'] else 'NO':>12} {lv['rel_width']:>7.1%}  "
              f"{lay['n_out_of_design_space']:>4}/{lay['n_layers']:<5}")
    for target, r in res["results"].items():  # lum_independent: same predictions, independent-error intervals
        s = r["summary"]
        print(f"[{target}] mean |error| {s['mean_abs_error_pct']:.1f} %, max {s['max_abs_error_pct']:.1f} %")
        for m in METRICS:
            x = s["metrics"][m]["0.9"]
            print(f"    {m} 0.9: coverage {x['coverage']:.2f} ({round(x['coverage'] * s['n_networks'])}/"
                  f"{s['n_networks']}), mean relative width {x['mean_rel_width']:.1%}")


def ood_check(est: Estimator, spec: str, in_space: dict[str, Any] | None, names: list[str]) -> dict[str, Any]:
    name, _, res_s = spec.partition("@")
    res = int(res_s) if res_s else 1024
    onnx_bytes = zoo.export_onnx(name, res)
    e = est.estimate_network(onnx_bytes, [0.9], name=f"{name}@{res}")
    lo, hi = e.intervals["CM_O"][0.9]
    width = (hi - lo) / e.total_ms
    out: dict[str, Any] = {"network": f"{name}@{res}", "total_ms": e.total_ms, "cm_o_rel_width": width,
                           "layers_flagged": e.n_out_of_design_space, "n_layers": len(e.layers)}
    if in_space:
        # relative to the predicted total, like the out-of-space network's width
        widths = []
        for n in names:
            r = in_space["networks"][n]
            iv = r["intervals"]["CM_O"]["0.9"]
            widths.append((iv["upper"] - iv["lower"]) / r["predicted_ms"])
        ref = statistics.median(widths)
        out["in_space_median_cm_o_rel_width"] = ref
        out["ratio"] = width / ref if ref > 0 else float("inf")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", required=True, help="device profile (name or directory)")
    ap.add_argument("--profiles", default=None, help="profiles directory (default: $CL_PROFILES or profiles/)")
    ap.add_argument("--networks", default=DEFAULT_NETWORKS, help="comma-separated zoo names (default: 14 networks)")
    ap.add_argument("--resolution", type=int, default=None, help="input resolution (default 224; 640 for yolo)")
    ap.add_argument("--ood-network", default="resnet18@1024", help="NAME@RES outside the design space")
    ap.add_argument("--holdout", type=float, default=0.2, help="held-out share per layer type (default 0.2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per network and round (default 20)")
    ap.add_argument("--rounds", type=int, default=7,
                    help="interleaved measurement rounds per network; the median of the rounds' medians is the "
                         "measured latency (default 7)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="ORT threads (default: the profile's)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel jobs for training the forests")
    ap.add_argument("--skip-layers", action="store_true")
    ap.add_argument("--skip-networks", action="store_true")
    ap.add_argument("--out", default=None, help="directory for accuracy.json and the figure")
    ap.add_argument("--db", default="bench-data/estimator-accuracy.sqlite",
                    help="benchmark database the network rounds are committed to (a rerun with the same settings "
                         "reuses them)")
    ap.add_argument("--measurements", default=None, metavar="ACCURACY_JSON",
                    help="reuse the network latencies measured by an earlier run (its --out accuracy.json) instead "
                         "of measuring: compares a changed profile or estimator on the same measurement window")
    args = ap.parse_args(argv)

    prof = load_profile(args.device, args.profiles)
    print(f"profile {prof.name}: {prof.hardware}; runner {prof.runner}, {prof.precision}, threads {prof.threads}; "
          f"{prof.provenance.kind}: {prof.provenance.source}")
    doc: dict[str, Any] = {"device": prof.name, "profile": prof.to_dict()}
    if not args.skip_layers:
        doc["layers"] = layer_level(prof, args.holdout, args.seed, args.jobs)
        print_layer_level(doc["layers"])
    names = [n.strip() for n in args.networks.split(",") if n.strip()]
    est = {t: Estimator.from_profile(prof, target=t, n_jobs=args.jobs) for t in ("lum", "single")}
    if not args.skip_networks:
        if prof.runner != "onnxruntime":
            print(f"note: profile runner is {prof.runner!r}; section 2 measures with onnxruntime on this host")
        doc["networks"] = network_level(est, names, args)
        print_network_level(doc["networks"], names)
    in_space = doc.get("networks", {}).get("results", {}).get("lum")
    ood = ood_check(est["lum"], args.ood_network, in_space, names)
    doc["ood"] = ood
    print(f"\n== 3. CM_O on {ood['network']}: relative 0.9 width {ood['cm_o_rel_width']:.1%}, "
          f"{ood['layers_flagged']}/{ood['n_layers']} layers flagged out of design space ==")
    if "ratio" in ood:
        print(f"    in-space median CM_O relative width {ood['in_space_median_cm_o_rel_width']:.1%}; "
              f"ratio {ood['ratio']:.2f}x (target >= 3x)")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "accuracy.json").write_text(json.dumps(doc, indent=2, default=lambda o: None if isinstance(o, float)
                                                      and not math.isfinite(o) else str(o)))
        if "networks" in doc:
            res = {t: doc["networks"]["results"][t] for t in ("lum", "single")}
            plot_pred_vs_measured(res, out / "pred_vs_measured.png", title=f"{prof.name}: ONNX Runtime")
        print(f"\nwrote {out / 'accuracy.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
