"""How close can any per-layer model get to Vela's whole-network estimate? (issue 5)

The ``imx93`` profile predicts a network as the sum of per-layer predictions, from forests
trained on smart-padding benchmarks of *sampled* configurations. This script removes the
forests from the question: for every layer the estimator sees in the validation networks
of ``tests/perf/imx93_validation.py``, it benchmarks *exactly that configuration* with
smart padding under the same Vela settings (Fig. 5c padded model and Fig. 5b padding
pairs, :mod:`bench.modelgen`), and sums per network:

* ``exact-split``: each layer's training point (Eq. 4 with the profile's per-type padding
  split, :func:`estimator.models._training_point`): what the forests would predict if they
  interpolated perfectly;
* ``exact-mid``: the same at Eq. 4's midpoint;
* ``exact-LUM``: the LUM's own per-operator Vela time inside its padded model (what the
  split approximates; concatenations, whose own time Vela does not report, keep their
  training point).

Layers that cannot be benchmarked (types ``other`` and ``transpose``, or a configuration
Vela rejects) keep the estimator's prediction; the ``unmeasured ms`` column says how much.
Against Vela's whole-network estimate, the mean |error| of ``exact-split`` is the floor of
per-layer composition on this set: no better forest or denser sampling gets below it;
what is left is Vela's whole-network schedule (how its scheduler shares the 384 KiB SRAM
among neighbouring layers), which a benchmark of one layer does not see.

Measurements are appended, one JSON line per configuration, to ``--db`` (default
``bench-data/imx93-layer-ceiling.jsonl``, git-ignored) and reused: a rerun only reports.
The networks, their ONNX and Vela's whole-network estimates come from the validation
script's cache (``--cache``). Needs the ``tflite`` extra (TensorFlow, ethos-u-vela).

    python tests/perf/imx93_layer_ceiling.py                  # ~500 configurations, ~6 min
    python tests/perf/imx93_layer_ceiling.py --networks mobilenet_v2,resnet18
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

#: layer types without a smart-padding benchmark (they keep the estimator's prediction)
UNBENCHED = frozenset({"other", "transpose"})


def config_key(layer_type: str, params: dict[str, Any]) -> str:
    return json.dumps([layer_type, params], sort_keys=True)


def layer_key(layer: Any) -> str:
    """The key of a layer's benchmark configuration (``act`` written out, see
    :func:`estimator.layers.layer_bench_params`)."""
    from estimator.layers import layer_bench_params

    return config_key(layer.type, layer_bench_params(layer.type, layer.params))


def layer_configs(est: Any, onnx_bytes: bytes) -> list[Any]:
    """The layers ``est`` estimates for a network (free layers left out), as imported."""
    net = est.load_network(onnx_bytes)
    return est._split_free(net.layers)[0]  # noqa: SLF001 (the estimator's own split)


def measure(runner: Any, layer_type: str, params: dict[str, Any], pairs: dict[tuple, float]) -> dict[str, Any]:
    """Smart padding for one configuration: ``T_c``, ``T_b1``, ``T_b2`` (padding pairs cached
    in ``pairs``) and the LUM's own per-operator time inside the padded model."""
    from bench.modelgen import padding_keys, padding_model
    from bench.smartpad import render_model
    from padding_split import lum_in_padded

    def pair(key: tuple) -> float:
        if key not in pairs:
            pairs[key] = runner.time(runner.prepare(render_model(padding_model(*key), runner.model_format))).median_ms
        return pairs[key]

    prepared, lum = lum_in_padded(runner, layer_type, params)
    keys = padding_keys(layer_type, params)
    return {"t_c": runner.time(prepared).median_ms, "t_b1": sum(pair(k) for k in keys.inputs),
            "t_b2": pair(keys.output), "t_lum": sum(lum.values()), "lum_ops": sorted(lum)}


def points(rec: dict[str, Any], split: float) -> tuple[float, float, float]:
    """``(lo, hi, training point at split)`` of a measured configuration: Eq. 4
    (:func:`bench.smartpad.lum_interval`), clipped and placed as training does
    (:func:`estimator.models._interval`, :func:`estimator.models._training_point`)."""
    from bench.smartpad import lum_interval
    from estimator.models import _interval, _training_point

    iv = lum_interval(rec["t_c"], rec["t_b1"], rec["t_b2"])
    row = {"t_padded_ms": rec["t_c"], "t_b1_ms": rec["t_b1"], "t_b2_ms": rec["t_b2"], "t_lum_lo_ms": iv.lo,
           "t_lum_hi_ms": iv.hi}
    lo, hi = _interval(row, "lum")
    return lo, hi, _training_point(row, lo, hi, "lum", split)


def network_sums(layers: list[Any], pred_ms: dict[str, float], recs: dict[str, dict[str, Any]],
                 splits: dict[str, float]) -> dict[str, float]:
    """Per-network sums over ``layers`` (see the module docstring); ``pred_ms``: the estimator's
    per-layer predictions by layer name, used where a layer has no measurement."""
    s = {"model": 0.0, "exact_split": 0.0, "exact_mid": 0.0, "exact_lum": 0.0, "lo": 0.0, "hi": 0.0,
         "unmeasured": 0.0}
    for layer in layers:
        p = pred_ms.get(layer.name, 0.0)
        s["model"] += p
        rec = recs.get(layer_key(layer))
        if rec is None or "error" in rec:
            for k in ("exact_split", "exact_mid", "exact_lum", "lo", "hi", "unmeasured"):
                s[k] += p
            continue
        lo, hi, tp = points(rec, splits.get(layer.type, 0.5))
        s["exact_split"] += tp
        s["exact_mid"] += (lo + hi) / 2.0
        s["exact_lum"] += tp if (layer.type == "concat" or not rec["lum_ops"]) else rec["t_lum"]
        s["lo"] += lo
        s["hi"] += hi
    return s


def load_db(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[r["key"]] = r
    return out


def measure_missing(layers_by_net: dict[str, list[Any]], db: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Benchmark every configuration not yet in ``db`` (one JSON line each, flushed as taken)."""
    from bench.runners.vela_runner import VelaRunner

    from estimator.layers import layer_bench_params

    recs = load_db(db)
    todo: dict[str, tuple[str, dict[str, Any]]] = {}
    for layers in layers_by_net.values():
        for layer in layers:
            k = layer_key(layer)
            if layer.type not in UNBENCHED and k not in recs:
                todo.setdefault(k, (layer.type, layer_bench_params(layer.type, layer.params)))
    log(f"{len(recs)} configurations measured before, {len(todo)} to measure")
    if not todo:
        return recs
    runner = VelaRunner()
    pairs: dict[tuple, float] = {}
    t0 = time.monotonic()
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db, "a") as out:
        for i, (k, (lt, p)) in enumerate(todo.items(), 1):
            rec: dict[str, Any] = {"key": k, "type": lt, "params": p}
            try:
                rec.update(measure(runner, lt, p, pairs))
            except Exception as e:  # noqa: BLE001 (recorded in the file and counted in the report)
                rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            out.write(json.dumps(rec) + "\n")
            out.flush()
            recs[k] = rec
            if i % 25 == 0 or i == len(todo):
                log(f"  {i}/{len(todo)} configurations, {time.monotonic() - t0:.0f} s")
    return recs


def main(argv: list[str] | None = None) -> int:
    import imx93_validation as V

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="imx93")
    ap.add_argument("--profiles", default=None, help="profiles root (default: the repository's profiles/)")
    ap.add_argument("--networks", default=None, help="comma-separated labels (default: all validation networks)")
    ap.add_argument("--cache", default=str(ROOT / "bench-data" / "imx93-validation"),
                    help="the validation script's cache of ONNX, TFLite and Vela results")
    ap.add_argument("--db", default=str(ROOT / "bench-data" / "imx93-layer-ceiling.jsonl"))
    a = ap.parse_args(argv)

    from estimator.predict import Estimator

    nets = V.NETWORKS
    if a.networks:
        want = {s.strip() for s in a.networks.split(",") if s.strip()}
        unknown = want - {n for n, *_ in V.NETWORKS}
        if unknown:
            ap.error(f"unknown network(s) {sorted(unknown)}; known: {[n for n, *_ in V.NETWORKS]}")
        nets = [n for n in V.NETWORKS if n[0] in want]
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    est = Estimator.from_profile(a.device, root=a.profiles)
    splits = dict(est.profile.to_dict().get("training", {}).get("padding_split_by_type", {}))
    vela: dict[str, Any] = {}
    layers_by_net: dict[str, list[Any]] = {}
    for label, zoo_name, res, kw in nets:
        vela[label] = V.vela_estimate(label, res, kw, zoo_name, Path(a.cache), log)
        layers_by_net[label] = layer_configs(est, vela[label]["onnx"])
    recs = measure_missing(layers_by_net, Path(a.db), log)
    failed = sum(1 for r in recs.values() if "error" in r)

    cols = [("model", "model"), ("exact_split", "exact-split"), ("exact_mid", "exact-mid"), ("exact_lum", "exact-LUM")]
    print(f"{'network':20s} {'Vela ms':>8s}" + "".join(f" {t:>11s} {'err %':>6s}" for _, t in cols)
          + f" {'in [lo,hi]':>10s} {'unmeasured ms':>13s}")
    errs: dict[str, list[float]] = {k: [] for k, _ in cols}
    inside = 0
    for label, *_ in nets:
        ref = vela[label]["estimate_ms"]
        ne = est.estimate_network(vela[label]["onnx"], confidence=[0.9], per_layer=True)
        s = network_sums(layers_by_net[label], {r.name: r.prediction_ms for r in ne.layers}, recs, splits)
        line = f"{label:20s} {ref:8.3f}"
        for k, _ in cols:
            e = 100.0 * (s[k] - ref) / ref
            errs[k].append(e)
            line += f" {s[k]:11.3f} {e:+6.1f}"
        ok = s["lo"] <= ref <= s["hi"]
        inside += ok
        print(line + f" {'yes' if ok else 'no':>10s} {s['unmeasured']:13.3f}")
    print()
    for k, title in cols:
        v = errs[k]
        absv = [abs(x) for x in v]
        print(f"{title:12s}: mean |error| {statistics.mean(absv):5.1f} %, median {statistics.median(absv):5.1f} %, "
              f"max {max(absv):5.1f} %, mean signed {statistics.mean(v):+5.1f} %")
    print(f"Vela's whole-network estimate inside the summed exact Eq. 4 interval [sum lo, sum hi]: {inside}/{len(nets)}")
    print(f"configurations: {len(recs)} in {a.db} ({failed} that Vela could not compile keep the model's prediction)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
