"""Whole networks OUTSIDE the validation set for a network-level correction of ``imx93``.

The ``imx93`` profile sums per-layer predictions; what is left of its error against Vela's
whole-network estimate is a schedule effect no per-layer benchmark sees (docs/boards.md,
"What a per-layer benchmark cannot see on Vela"). This script builds a training set of whole networks that are not
the 13 configurations of ``tests/perf/imx93_validation.py`` and records, per network,
Vela's whole-network ms, the estimator's prediction and CM_LV interval and a few cheap
network-level features. ``--fit`` then fits a small model of ``log(Vela / predicted)``
from those features and evaluates it honestly on the 13 validation networks.

Training networks (``training_networks()``):

* ``nas_mobilenet`` / ``nas_resnet``: architectures sampled (Optuna ``RandomSampler``,
  fixed seeds) from the built-in search spaces of :mod:`nas.spaces`, exported as the NAS
  search exports them (:func:`nas.export.export_onnx`: BatchNorm folded);
* variants of the zoo families (:mod:`estimator.zoo`, and the validation script's
  EfficientNet-Lite0) at other resolutions, width multipliers and depths.

Every network is converted and compiled exactly as the validation does it: its ONNX is
written to the cache as ``<label>_<res>.onnx`` and :func:`imx93_validation.vela_estimate`
does the rest (content-keyed int8 TFLite and Vela results under ``--cache``, default
``bench-data/imx93-netcorr/``). The table goes to ``--csv`` (default
``bench-data/imx93-netcorr.csv``); networks already in it are skipped.

Evaluation rule (fixed before any result was seen)
--------------------------------------------------
* Target ``y = log(Vela ms / predicted ms)``; model: ridge regression (``alpha = 3`` on
  standardised features, no tuning) on the features of :data:`FEATURES`.
* Validation network of family F (mobilenet_v1, mobilenet_v2, mobilenet_v3, resnet,
  efficientnet, squeezenet, shufflenet, mnasnet, googlenet, yolov5) is corrected by a model
  fitted without any training network of family F. A network's family is the builder it
  comes from: zoo variants carry their zoo family, NAS samples the families
  ``nas_mobilenet`` / ``nas_resnet``. (A stricter variant that also drops ``nas_mobilenet``
  for the inverted-residual families mobilenet_v2/v3, efficientnet, mnasnet and
  ``nas_resnet`` for resnet is reported alongside, not used for the decision.)
* Corrected interval: the CM_LV interval scaled by the factor, widened to the split
  conformal band ``f * pred * exp(+-q)``, ``q`` the ``ceil(0.9 (n + 1))``-th smallest
  out-of-fold |residual| of the correction on the (fold's) training networks (the union
  of the two intervals).
* Adopt only if the leave-family-out mean |error| over the 13 drops by >= 1.5 points AND
  CM_LV coverage stays >= 12/13.

    python tests/perf/imx93_network_correction.py --limit 3          # time a few
    python tests/perf/imx93_network_correction.py                    # generate all
    python tests/perf/imx93_network_correction.py --fit              # evaluate
    python tests/perf/imx93_network_correction.py --explore          # training set only
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import imx93_validation as val  # noqa: E402

#: validation label -> family (the leave-family-out groups)
VALIDATION_FAMILY = {
    "mobilenet_v1": "mobilenet_v1", "mobilenet_v2": "mobilenet_v2", "mobilenet_v3": "mobilenet_v3",
    "resnet18": "resnet", "resnet50": "resnet", "efficientnet_b0": "efficientnet",
    "efficientnet_lite0": "efficientnet", "squeezenet": "squeezenet", "shufflenet_v2": "shufflenet",
    "mnasnet": "mnasnet", "googlenet": "googlenet", "yolov5n": "yolov5", "yolov5s": "yolov5",
}
#: the stricter variant: NAS spaces that imitate a validation family
STRICT_EXTRA = {"mobilenet_v2": {"nas_mobilenet"}, "mobilenet_v3": {"nas_mobilenet"},
                "efficientnet": {"nas_mobilenet"}, "mnasnet": {"nas_mobilenet"}, "resnet": {"nas_resnet"}}

#: network-level features of the correction model (chosen before any result)
FEATURES = ["log_pred_ms", "share_conv2d", "share_dwconv2d", "share_elementwise", "share_activation",
            "share_concat", "share_pool", "stem_share", "log2_max_tensor", "big_tensor_share", "log_n_layers",
            "n_concat_per_layer"]
ALPHA = 3.0
CONFIDENCE = 0.9
SRAM_BYTES = 384 * 1024


# --------------------------------------------------------------------------- networks


def _randomize_bn(model: Any) -> Any:
    """As :func:`estimator.zoo.build`: random BN statistics (for builders called directly)."""
    import torch
    from torch import nn

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None:
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return model.eval()


def _zoo(name: str, res: int, **kw: Any) -> Callable[[], bytes]:
    def make() -> bytes:
        from estimator import zoo
        return zoo.export_onnx(zoo.build(name, res, **kw), res)
    return make


def _zoo_class(cls: str, res: int, *args: Any, **kw: Any) -> Callable[[], bytes]:
    def make() -> bytes:
        import torch

        from estimator import zoo
        torch.manual_seed(0)
        model = _randomize_bn(getattr(zoo, cls)(*args, **kw))
        return zoo.export_onnx(model, res)
    return make


def _resnet(res: int, block: str, layers: tuple[int, ...]) -> Callable[[], bytes]:
    def make() -> bytes:
        import torch

        from estimator import zoo
        torch.manual_seed(0)
        model = _randomize_bn(zoo.ResNet(getattr(zoo, block), layers))
        return zoo.export_onnx(model, res)
    return make


def _lite0(res: int) -> Callable[[], bytes]:
    def make() -> bytes:
        from estimator import zoo
        return zoo.export_onnx(val.efficientnet_lite0(), res)
    return make


def _nas(space: str, seed: int) -> tuple[int, Callable[[], bytes], dict[str, Any]]:
    import optuna
    import torch

    from nas import spaces
    from nas.export import export_onnx

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    trial = study.ask()
    torch.manual_seed(seed)
    arch = spaces.sample(spaces.SPACES[space], trial)
    params = dict(trial.params)

    def make() -> bytes:
        torch.manual_seed(seed)
        a = spaces.rebuild(spaces.SPACES[space], params)
        return export_onnx(a.module.eval(), a.input_shape)
    return arch.resolution, make, params


def training_networks() -> list[tuple[str, str, int, Callable[[], bytes], dict[str, Any]]]:
    """(label, family, resolution, ONNX maker, description), interleaved so that a cut
    run still covers every source."""
    zoo_nets: list[tuple[str, str, int, Callable[[], bytes], dict[str, Any]]] = []

    def z(label: str, fam: str, res: int, make: Callable[[], bytes], **desc: Any) -> None:
        zoo_nets.append((label, fam, res, make, desc))

    z("mnv1_w050", "mobilenet_v1", 160, _zoo("mobilenet_v1", 160, width_mult=0.5), width=0.5)
    z("mnv2_w075", "mobilenet_v2", 192, _zoo("mobilenet_v2", 192, width_mult=0.75), width=0.75)
    z("resnet18", "resnet", 160, _zoo("resnet18", 160))
    z("effb0", "efficientnet", 192, _zoo("efficientnet_b0", 192))
    z("squeezenet", "squeezenet", 160, _zoo("squeezenet", 160))
    z("shufflenet_x05", "shufflenet", 224, _zoo("shufflenet_v2", 224, channels=(24, 48, 96, 192, 1024)),
      width=0.5)
    z("mnasnet", "mnasnet", 160, _zoo("mnasnet", 160))
    z("googlenet", "googlenet", 160, _zoo("googlenet", 160))
    z("yolov5n", "yolov5", 256, _zoo("yolov5s", 256, width=0.25, depth=0.33))
    z("mnv3", "mobilenet_v3", 160, _zoo("mobilenet_v3", 160))
    z("regnetx400", "regnet", 224, _zoo("regnet_x_400mf", 224))
    z("densenet_small", "densenet", 160, _zoo("densenet121", 160, block_config=(4, 8, 12, 8), growth_rate=24))
    z("mnv1_w075", "mobilenet_v1", 192, _zoo("mobilenet_v1", 192, width_mult=0.75), width=0.75)
    z("mnv2_w050", "mobilenet_v2", 160, _zoo("mobilenet_v2", 160, width_mult=0.5), width=0.5)
    z("resnet34", "resnet", 192, _resnet(192, "_BasicBlock", (3, 4, 6, 3)), layers=[3, 4, 6, 3])
    z("lite0", "efficientnet", 160, _lite0(160))
    z("squeezenet", "squeezenet", 256, _zoo("squeezenet", 256))
    z("shufflenet_x15", "shufflenet", 160, _zoo("shufflenet_v2", 160, channels=(24, 176, 352, 704, 1024)),
      width=1.5)
    z("mnasnet", "mnasnet", 192, _zoo("mnasnet", 192))
    z("googlenet", "googlenet", 192, _zoo("googlenet", 192))
    z("yolov5s", "yolov5", 256, _zoo("yolov5s", 256))
    z("mnv3", "mobilenet_v3", 192, _zoo("mobilenet_v3", 192))
    z("vgg16", "vgg", 96, _zoo("vgg16", 96))
    z("mnv1", "mobilenet_v1", 128, _zoo("mobilenet_v1", 128))
    z("mnv2_w140", "mobilenet_v2", 160, _zoo("mobilenet_v2", 160, width_mult=1.4), width=1.4)
    z("resnet50", "resnet", 160, _zoo("resnet50", 160))
    z("effb0", "efficientnet", 160, _zoo("efficientnet_b0", 160))
    z("shufflenet_r248", "shufflenet", 192, _zoo("shufflenet_v2", 192, repeats=(2, 4, 8)), repeats=[2, 4, 8])
    z("yolov5n", "yolov5", 416, _zoo("yolov5s", 416, width=0.25, depth=0.33))
    z("regnetx_small", "regnet", 160, _zoo("regnet_x_400mf", 160, depths=(1, 1, 4, 6)), depths=[1, 1, 4, 6])
    z("lite0", "efficientnet", 256, _lite0(256))
    z("mnasnet", "mnasnet", 128, _zoo("mnasnet", 128))
    z("googlenet", "googlenet", 128, _zoo("googlenet", 128))
    z("resnet18", "resnet", 128, _zoo("resnet18", 128))
    z("yolov5_w0375", "yolov5", 320, _zoo("yolov5s", 320, width=0.375, depth=0.33), width=0.375)
    z("mnv3", "mobilenet_v3", 128, _zoo("mobilenet_v3", 128))
    z("squeezenet", "squeezenet", 128, _zoo("squeezenet", 128))
    z("densenet_tiny", "densenet", 128, _zoo("densenet121", 128, block_config=(3, 6, 6, 4), growth_rate=16))
    z("resnet_bneck2222", "resnet", 128, _resnet(128, "_Bottleneck", (2, 2, 2, 2)), layers=[2, 2, 2, 2])
    z("mnv1_w050", "mobilenet_v1", 224, _zoo("mobilenet_v1", 224, width_mult=0.5), width=0.5)
    z("mnv2", "mobilenet_v2", 128, _zoo("mobilenet_v2", 128))

    out: list[tuple[str, str, int, Callable[[], bytes], dict[str, Any]]] = []
    nas_seeds = list(range(1, 91))
    zi = 0
    for k, seed in enumerate(nas_seeds):
        space = "mobilenet" if k % 3 != 2 else "resnet"
        res, make, params = _nas(space, seed)
        out.append((f"nas_{space}_s{seed}", f"nas_{space}", res, make, {"space": space, "seed": seed, **params}))
        if zi < len(zoo_nets):
            out.append(zoo_nets[zi])
            zi += 1
    out += zoo_nets[zi:]
    return out


# ---------------------------------------------------------------------------- features


def network_features(est: Any, onnx_b: bytes, label: str) -> dict[str, Any]:
    """The estimator's prediction, CM_LV interval and network-level features."""
    net = est.load_network(onnx_b)
    ne = est.estimate_network(net, confidence=[CONFIDENCE], name=label)
    return features_of(net, ne)


def features_of(net: Any, ne: Any) -> dict[str, Any]:
    pred = {row.name: row for row in ne.layers}
    total = ne.total_ms
    by_type: dict[str, float] = {}
    n_concat = 0
    max_elems = 0
    big_ms = 0.0
    stem_ms = 0.0
    first_conv_seen = False
    for layer in net.layers:
        if layer.type == "concat":
            n_concat += 1
        row = pred.get(layer.name)
        ms = row.prediction_ms if row is not None else 0.0
        by_type[layer.type] = by_type.get(layer.type, 0.0) + ms
        elems = max((math.prod(max(int(d), 1) for d in s) for s in layer.output_shapes), default=0)
        max_elems = max(max_elems, elems)
        if elems > SRAM_BYTES:  # int8: one byte per element
            big_ms += ms
        if not first_conv_seen and layer.type == "conv2d":
            first_conv_seen = True
            stem_ms = ms
    lo, hi = ne.interval("CM_LV", CONFIDENCE)
    n = max(ne.n_layers, 1)
    share = lambda *ts: sum(by_type.get(t, 0.0) for t in ts) / total if total > 0 else 0.0  # noqa: E731
    f: dict[str, Any] = {
        "pred_ms": total, "cm_lv_lo": lo, "cm_lv_hi": hi, "n_layers": ne.n_layers,
        "n_ood": ne.n_out_of_design_space, "n_fallback": ne.n_fallback, "n_concat": n_concat,
        "max_tensor_elems": max_elems,
        "log_pred_ms": math.log(total), "share_conv2d": share("conv2d"), "share_dwconv2d": share("dwconv2d"),
        "share_elementwise": share("add", "mul"), "share_activation": share("activation"),
        "share_concat": share("concat"), "share_pool": share("maxpool", "avgpool", "globalpool"),
        "stem_share": stem_ms / total if total > 0 else 0.0, "log2_max_tensor": math.log2(max(max_elems, 1)),
        "big_tensor_share": big_ms / total if total > 0 else 0.0, "log_n_layers": math.log(n),
        "n_concat_per_layer": n_concat / n, "ood_share": ne.n_out_of_design_space / n,
    }
    for t, ms in sorted(by_type.items()):
        f[f"ms_{t}"] = ms
    return f


# -------------------------------------------------------------------------- generation


COLUMNS = ["label", "family", "resolution", "source", "vela_ms", "npu_ops", "cpu_ops", "compile_s", "wall_s",
           "pred_ms", "cm_lv_lo", "cm_lv_hi", "n_layers", "n_ood", "n_fallback", "n_concat", "max_tensor_elems",
           *[c for c in FEATURES if c not in ("log_pred_ms",)], "log_pred_ms", "ood_share", "ms_by_type", "desc"]


def _row(label: str, family: str, res: int, source: str, v: dict[str, Any], f: dict[str, Any], wall: float,
         desc: dict[str, Any]) -> dict[str, Any]:
    r = {"label": label, "family": family, "resolution": res, "source": source, "vela_ms": v["estimate_ms"],
         "npu_ops": v["npu_ops"] if isinstance(v["npu_ops"], int) else len(v["npu_ops"]),
         "cpu_ops": len(v["cpu_ops"]), "compile_s": round(float(v.get("compile_s", 0.0)), 2), "wall_s": round(wall, 1)}
    r.update({k: f[k] for k in COLUMNS if k in f})
    r["ms_by_type"] = json.dumps({k[3:]: round(x, 5) for k, x in f.items() if k.startswith("ms_")}, sort_keys=True)
    r["desc"] = json.dumps(desc, sort_keys=True, default=str)
    return r


def read_csv(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = list(csv.DictReader(open(path, newline="")))
    for r in rows:
        for k, x in r.items():
            if k in ("label", "family", "source", "ms_by_type", "desc"):
                continue
            try:
                r[k] = float(x)
            except (TypeError, ValueError):
                pass
    return rows


def generate(a: argparse.Namespace) -> int:
    from estimator.predict import Estimator

    cache = Path(a.cache)
    out = Path(a.csv)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    done = {(r["label"], int(r["resolution"])) for r in read_csv(out)}
    est = Estimator.from_profile(a.device, target="lum")
    nets = training_networks()
    if a.limit:
        nets = nets[: a.limit]
    new = not out.is_file()
    fh = open(out, "a", newline="")
    wr = csv.DictWriter(fh, fieldnames=COLUMNS)
    if new:
        wr.writeheader()
    t_start = time.monotonic()
    n_new = 0
    for i, (label, fam, res, make, desc) in enumerate(nets):
        if (label, res) in done:
            continue
        if a.deadline and time.time() > a.deadline:
            log(f"deadline reached after {n_new} new network(s)")
            break
        t0 = time.monotonic()
        try:
            val._cached(cache / f"{label}_{res}.onnx", make)  # noqa: SLF001
            v = val.vela_estimate(label, res, {}, "", cache, log)
            f = network_features(est, v["onnx"], label)
        except Exception as e:  # noqa: BLE001 - record and go on
            log(f"[{i + 1}/{len(nets)}] {label}_{res}: FAILED {type(e).__name__}: {str(e)[:300]}")
            continue
        wall = time.monotonic() - t0
        wr.writerow(_row(label, fam, res, "nas" if label.startswith("nas_") else "zoo", v, f, wall, desc))
        fh.flush()
        n_new += 1
        log(f"[{i + 1}/{len(nets)}] {label}_{res} ({fam}): Vela {v['estimate_ms']:.3f} ms, pred {f['pred_ms']:.3f} ms "
            f"({100 * (f['pred_ms'] / v['estimate_ms'] - 1):+.1f} %), {wall:.0f} s; "
            f"{time.monotonic() - t_start:.0f} s so far")
    fh.close()
    return 0


def validation_rows(a: argparse.Namespace) -> list[dict[str, Any]]:
    """The 13 validation networks (from the validation script's cache) with the same features."""
    from estimator.predict import Estimator

    est = Estimator.from_profile(a.device, target="lum")
    log = lambda s: None  # noqa: E731
    rows = []
    for label, zoo_name, res, kw in val.NETWORKS:
        v = val.vela_estimate(label, res, kw, zoo_name, Path(a.val_cache), log)
        f = network_features(est, v["onnx"], label)
        rows.append(_row(label, VALIDATION_FAMILY[label], res, "validation", v, f, 0.0, {}))
    return rows


# -------------------------------------------------------------------------- correction


def _matrix(rows: list[dict[str, Any]], feats: list[str]) -> Any:
    import numpy as np
    return np.array([[float(r[k]) for k in feats] for r in rows], dtype=float)


def _target(rows: list[dict[str, Any]]) -> Any:
    import numpy as np
    return np.array([math.log(float(r["vela_ms"]) / float(r["pred_ms"])) for r in rows])


def fit_ridge(X: Any, y: Any, alpha: float = ALPHA) -> dict[str, Any]:
    """Ridge on standardised features: ``y ~ b0 + sum_j w_j (x_j - mu_j) / sd_j``."""
    import numpy as np
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    Z = (X - mu) / sd
    ym = y.mean()
    w = np.linalg.solve(Z.T @ Z + alpha * np.eye(Z.shape[1]), Z.T @ (y - ym))
    return {"mean": mu, "scale": sd, "coef": w, "intercept": ym}


def predict_ridge(m: dict[str, Any], X: Any) -> Any:
    return m["intercept"] + ((X - m["mean"]) / m["scale"]) @ m["coef"]


def conformal_q(abs_res: Any, confidence: float = CONFIDENCE) -> float:
    """The split-conformal quantile of the |residuals|: the rank the estimator's own intervals
    use (:func:`estimator.aggregate.conformal_index`, crepes' rule; the largest when the
    rank exceeds n)."""
    import numpy as np

    from estimator.aggregate import conformal_index

    a = np.sort(np.asarray(abs_res))
    return float(a[conformal_index(len(a), confidence)])


def group_oof(rows: list[dict[str, Any]], feats: list[str], alpha: float = ALPHA) -> Any:
    """Out-of-fold predictions of y, leaving one family out at a time."""
    import numpy as np
    X, y = _matrix(rows, feats), _target(rows)
    fam = np.array([r["family"] for r in rows])
    out = np.zeros(len(rows))
    for g in sorted(set(fam)):
        te = fam == g
        if te.all():
            out[te] = 0.0
            continue
        out[te] = predict_ridge(fit_ridge(X[~te], y[~te], alpha), X[te])
    return out


def corrected(train: list[dict[str, Any]], targets: list[dict[str, Any]], feats: list[str],
              alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Fit on ``train``, correct ``targets``: factor, corrected prediction and CM_LV interval."""
    import numpy as np
    X, y = _matrix(train, feats), _target(train)
    model = fit_ridge(X, y, alpha)
    q = conformal_q(np.abs(y - group_oof(train, feats, alpha)))
    yhat = predict_ridge(model, _matrix(targets, feats))
    out = []
    for r, yh in zip(targets, yhat):
        f = math.exp(float(yh))
        p, lo, hi = float(r["pred_ms"]), float(r["cm_lv_lo"]), float(r["cm_lv_hi"])
        out.append({"factor": f, "pred": f * p, "lo": min(f * lo, f * p * math.exp(-q)),
                    "hi": max(f * hi, f * p * math.exp(q)), "lo_scaled": f * lo, "hi_scaled": f * hi, "q": q})
    return out


def _stats(rows: list[dict[str, Any]], preds: list[float], los: list[float], his: list[float]) -> dict[str, Any]:
    import numpy as np
    v = np.array([float(r["vela_ms"]) for r in rows])
    p, lo, hi = np.array(preds), np.array(los), np.array(his)
    e = 100 * (p - v) / v
    cov = (lo <= v) & (v <= hi)
    return {"n": len(rows), "mean_abs": float(np.abs(e).mean()), "median_abs": float(np.median(np.abs(e))),
            "max_abs": float(np.abs(e).max()), "mean_signed": float(e.mean()), "covered": int(cov.sum()),
            "mean_width_pct": float(100 * ((hi - lo) / v).mean()), "err": [float(x) for x in e]}


def _fmt(name: str, s: dict[str, Any]) -> str:
    return (f"{name:34s} mean |err| {s['mean_abs']:5.1f} %  median {s['median_abs']:5.1f}  max {s['max_abs']:5.1f}  "
            f"signed {s['mean_signed']:+5.1f}  CM_LV {s['covered']}/{s['n']}  width {s['mean_width_pct']:5.0f} %")


def evaluate(train: list[dict[str, Any]], valid: list[dict[str, Any]], json_out: str | None,
             feats: list[str] | None = None) -> int:
    """The fixed evaluation (module docstring)."""
    import numpy as np
    feats = feats or FEATURES
    print(f"training networks: {len(train)} ({sum(r['source'] == 'nas' for r in train)} NAS, "
          f"{sum(r['source'] == 'zoo' for r in train)} zoo variants); families: "
          + ", ".join(f"{g} {sum(r['family'] == g for r in train)}" for g in sorted({r['family'] for r in train})))
    print(f"features: {', '.join(feats)}; ridge alpha {ALPHA}")
    doc: dict[str, Any] = {"features": feats, "alpha": ALPHA}
    before_v = _stats(valid, [r["pred_ms"] for r in valid], [r["cm_lv_lo"] for r in valid],
                      [r["cm_lv_hi"] for r in valid])
    results: dict[str, list[dict[str, Any]]] = {}
    for variant in ("leave-family-out", "strict"):
        res = []
        for r in valid:
            fam = r["family"]
            drop = {fam} | (STRICT_EXTRA.get(fam, set()) if variant == "strict" else set())
            tr = [t for t in train if t["family"] not in drop]
            res.append(corrected(tr, [r], feats)[0])
        results[variant] = res
    # a constant factor (the training mean of y), for reference only
    const = []
    for r in valid:
        tr = [t for t in train if t["family"] != r["family"]]
        const.append(math.exp(float(_target(tr).mean())) * float(r["pred_ms"]))
    print()
    print("validation (13 networks)")
    print(_fmt("  before", before_v))
    out_v = {}
    for variant, res in results.items():
        s = _stats(valid, [c["pred"] for c in res], [c["lo"] for c in res], [c["hi"] for c in res])
        s2 = _stats(valid, [c["pred"] for c in res], [c["lo_scaled"] for c in res], [c["hi_scaled"] for c in res])
        out_v[variant] = {"union": s, "scaled": s2, "factors": [c["factor"] for c in res], "q": [c["q"] for c in res]}
        print(_fmt(f"  after, {variant}", s))
        print(_fmt("    (interval only scaled)", s2))
    sc = _stats(valid, const, [0] * len(valid), [0] * len(valid))
    print(f"  {'constant factor (reference)':32s} mean |err| {sc['mean_abs']:5.1f} %  median {sc['median_abs']:5.1f}  "
          f"max {sc['max_abs']:5.1f}")
    print()
    print(f"  {'network':20s} {'Vela':>8s} {'before':>7s} {'factor':>7s} {'after':>7s}  in (before/after)")
    lfo = results["leave-family-out"]
    for i, r in enumerate(valid):
        print(f"  {r['label']:20s} {float(r['vela_ms']):8.3f} {before_v['err'][i]:+6.1f}% {lfo[i]['factor']:7.3f} "
              f"{out_v['leave-family-out']['union']['err'][i]:+6.1f}%  "
              f"{'yes' if r['cm_lv_lo'] <= r['vela_ms'] <= r['cm_lv_hi'] else 'NO'}/"
              f"{'yes' if lfo[i]['lo'] <= r['vela_ms'] <= lfo[i]['hi'] else 'NO'}")
    # training set, leave-one-family-out cross-validation (each fold with its own q)
    fams = sorted({r["family"] for r in train})
    cv_pred, cv_lo, cv_hi, order = [], [], [], []
    for g in fams:
        te = [r for r in train if r["family"] == g]
        tr = [r for r in train if r["family"] != g]
        for r, c in zip(te, corrected(tr, te, feats)):
            cv_pred.append(c["pred"])
            cv_lo.append(c["lo"])
            cv_hi.append(c["hi"])
            order.append(r)
    before_t = _stats(order, [r["pred_ms"] for r in order], [r["cm_lv_lo"] for r in order],
                      [r["cm_lv_hi"] for r in order])
    after_t = _stats(order, cv_pred, cv_lo, cv_hi)
    print()
    print("training set, leave-one-family-out CV")
    print(_fmt("  before", before_t))
    print(_fmt("  after", after_t))
    for g in fams:
        idx = [i for i, r in enumerate(order) if r["family"] == g]
        b = np.mean([abs(before_t["err"][i]) for i in idx])
        aa = np.mean([abs(after_t["err"][i]) for i in idx])
        bs = np.mean([before_t["err"][i] for i in idx])
        print(f"    {g:16s} n={len(idx):3d}  mean |err| {b:5.1f} -> {aa:5.1f} %  (signed before {bs:+5.1f})")
    full = fit_ridge(_matrix(train, feats), _target(train))
    print()
    print("ridge on all training networks (standardised coefficients):")
    print(f"  intercept {full['intercept']:+.4f}; " + ", ".join(f"{k} {w:+.4f}" for k, w in zip(feats, full["coef"])))
    drop = before_v["mean_abs"] - out_v["leave-family-out"]["union"]["mean_abs"]
    cov = out_v["leave-family-out"]["union"]["covered"]
    adopt = drop >= 1.5 and cov >= 12
    print()
    print(f"adoption rule: mean |error| drop {drop:+.2f} points (>= 1.5 needed), CM_LV coverage {cov}/13 "
          f"(>= 12 needed) -> {'ADOPT' if adopt else 'do not adopt'}")
    doc.update({"validation_before": before_v, "validation_after": out_v, "train_cv_before": before_t,
                "train_cv_after": after_t, "adopt": adopt, "drop_points": drop,
                "validation_labels": [r["label"] for r in valid]})
    if json_out:
        Path(json_out).write_text(json.dumps(doc, indent=1, default=str))
    return 0


def explore(train: list[dict[str, Any]]) -> int:
    """Training set only (no validation network is read): other models and feature sets
    under leave-one-family-out CV, and the within-distribution (random 10-fold) figures.
    Run after the fixed evaluation; nothing here was used for the adoption decision."""
    import numpy as np
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.model_selection import KFold

    y = _target(train)
    fam = np.array([r["family"] for r in train])
    v = np.array([float(r["vela_ms"]) for r in train])
    p = np.array([float(r["pred_ms"]) for r in train])
    e0 = 100 * (p - v) / v

    def mae(yhat: Any, m: Any = None) -> float:
        e = 100 * (p * np.exp(yhat) - v) / v
        return float(np.abs(e if m is None else e[m]).mean())

    def lofo(fit: Callable[..., Any], pred: Callable[..., Any], feats: list[str]) -> float:
        X = _matrix(train, feats)
        out = np.zeros(len(train))
        for g in sorted(set(fam)):
            te = fam == g
            out[te] = pred(fit(X[~te], y[~te]), X[te])
        return mae(out)

    print(f"training set ({len(train)} networks), leave-one-family-out CV, mean |error|:")
    print(f"  no correction                 {float(np.abs(e0).mean()):5.1f} %")
    print(f"  constant factor               {lofo(lambda X, t: t.mean(), lambda m, X: np.full(len(X), m), FEATURES):5.1f} %")
    small = ["log2_max_tensor", "big_tensor_share", "stem_share", "share_concat"]
    for feats, name in ((FEATURES, f"all {len(FEATURES)}"), (small, "4 (" + ", ".join(small) + ")")):
        for alpha in (3.0, 30.0, 300.0):
            r = lofo(lambda X, t: fit_ridge(X, t, alpha), predict_ridge, feats)
            print(f"  ridge alpha {alpha:5g}, features {name}: {r:5.1f} %")
        r = lofo(lambda X, t: RandomForestRegressor(100, max_depth=3, min_samples_leaf=5, random_state=0).fit(X, t),
                 lambda m, X: m.predict(X), feats)
        print(f"  forest depth 3, features {name}: {r:5.1f} %")
    X = _matrix(train, FEATURES)
    out = np.zeros(len(train))
    for tr, te in KFold(10, shuffle=True, random_state=0).split(X):
        out[te] = predict_ridge(fit_ridge(X[tr], y[tr]), X[te])
    print("random 10-fold CV (within distribution), the fixed ridge:")
    print(f"  all {len(train)}: {float(np.abs(e0).mean()):.1f} -> {mae(out):.1f} %")
    for g in ("nas_mobilenet", "nas_resnet"):
        m = fam == g
        print(f"  {g} ({int(m.sum())}): {float(np.abs(e0[m]).mean()):.1f} -> {mae(out, m):.1f} %")
    m = np.isin(fam, ["nas_mobilenet", "nas_resnet"])
    outn = np.zeros(int(m.sum()))
    Xn, yn = X[m], y[m]
    for tr, te in KFold(10, shuffle=True, random_state=0).split(Xn):
        outn[te] = predict_ridge(fit_ridge(Xn[tr], yn[tr]), Xn[te])
    en = 100 * (p[m] * np.exp(outn) - v[m]) / v[m]
    print(f"  fitted on the NAS networks only ({int(m.sum())}): {float(np.abs(e0[m]).mean()):.1f} -> "
          f"{float(np.abs(en).mean()):.1f} %")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="imx93")
    ap.add_argument("--cache", default=str(ROOT / "bench-data" / "imx93-netcorr"))
    ap.add_argument("--val-cache", default=str(ROOT / "bench-data" / "imx93-validation"))
    ap.add_argument("--csv", default=str(ROOT / "bench-data" / "imx93-netcorr.csv"))
    ap.add_argument("--limit", type=int, default=0, help="only the first N networks of the list")
    ap.add_argument("--deadline", type=float, default=0.0, help="stop starting networks after this UNIX time")
    ap.add_argument("--list", action="store_true", help="list the training networks and exit")
    ap.add_argument("--fit", action="store_true", help="fit and evaluate the correction")
    ap.add_argument("--json", default=None, help="with --fit: write the evaluation here")
    ap.add_argument("--explore", action="store_true",
                    help="training set only: other models / features by CV (after the fixed evaluation)")
    a = ap.parse_args(argv)
    if a.list:
        for label, fam, res, _, desc in training_networks():
            print(f"{label}_{res}  {fam}  {json.dumps(desc, default=str)[:120]}")
        return 0
    if a.explore:
        return explore(read_csv(Path(a.csv)))
    if a.fit:
        return evaluate(read_csv(Path(a.csv)), validation_rows(a), a.json)
    return generate(a)


if __name__ == "__main__":
    raise SystemExit(main())
