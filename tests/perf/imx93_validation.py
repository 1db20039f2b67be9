"""Whole-network validation of the ``imx93`` profile against Arm Vela's own estimate.

For each network (MobileNet V1/V2/V3, ResNet-18/50, EfficientNet-B0 and an
EfficientNet-Lite0, SqueezeNet, ShuffleNet V2, MNASNet, GoogLeNet, YOLOv5n/s at 320):

1. build it in torch (random weights, :mod:`estimator.zoo`), export ONNX;
2. convert the ONNX to full-integer int8 TFLite (:mod:`bench.tflite_convert`);
3. compile the TFLite with Vela for the i.MX93 configuration (ethos-u65-256,
   Ethos_U65_High_End, Dedicated_Sram_384KB): Vela's whole-network estimate is the
   reference ("Vela ms"). It is a cost model, not hardware, and it gives operators it
   leaves on the CPU no time (they are counted in the "cpu" column);
4. predict the same ONNX with the estimator for ``--device imx93``, from models trained
   on smart-padding times (``target="lum"``) and on single-layer times
   (``target="single"``, the paper's single-layer benchmarking, Sec. IV-A).

It prints one row per network (% error of each prediction against Vela's estimate,
the 90 % CM_LV interval and whether it covers Vela's number) and a summary: mean |error|
and CM_LV coverage for smart padding (targets: <= 5 %, >= 90 %) and the single-layer
models' mean error (the paper measured +298.8 % on the real i.MX93). ``--breakdown``
attributes Vela's per-operator cycles to the estimator's layers (through the ONNX node
names that the converter keeps in the TFLite tensor names) and compares per layer type.

    python tests/perf/imx93_validation.py                       # all networks
    python tests/perf/imx93_validation.py --networks mobilenet_v2,resnet18 --breakdown
    python tests/perf/imx93_validation.py --json out.json

The numbers are what ``estimator predict`` returns: layers whose ONNX op the profile lists
in ``op_mapping.free_ops`` (views on Vela: Reshape, Flatten, Split, Slice, ...) are free
nodes there (listed, not estimated); ``--breakdown`` shows them as ``<type> (free)``.

The breakdown attributes each of Vela's per-operator rows to an estimator layer by its
TFLite tensor name, which the converter derives from the ONNX node name. Vela names an
operator by its output tensor, so a convolution that writes straight into a
concatenation's output carries the concatenation's name; such rows are counted under the
operator's own type (``conv2d``) or as ``concat<-Op``.

Intermediate files (ONNX, TFLite, Vela results) are cached under ``--cache``
(default ``bench-data/imx93-validation/``, git-ignored), keyed by content, so a rerun only
repeats the estimator part. Needs the ``tflite`` extra (TensorFlow, ethos-u-vela).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# (label, zoo name, resolution, builder kwargs)
NETWORKS: list[tuple[str, str, int, dict[str, Any]]] = [
    ("mobilenet_v1", "mobilenet_v1", 224, {}),
    ("mobilenet_v2", "mobilenet_v2", 224, {}),
    ("mobilenet_v3", "mobilenet_v3", 224, {}),
    ("resnet18", "resnet18", 224, {}),
    ("resnet50", "resnet50", 224, {}),
    ("efficientnet_b0", "efficientnet_b0", 224, {}),
    ("efficientnet_lite0", "efficientnet_lite0", 224, {}),
    ("squeezenet", "squeezenet", 224, {}),
    ("shufflenet_v2", "shufflenet_v2", 224, {}),
    ("mnasnet", "mnasnet", 224, {}),
    ("googlenet", "googlenet", 224, {}),
    ("yolov5n", "yolov5s", 320, {"width": 0.25, "depth": 0.33}),
    ("yolov5s", "yolov5s", 320, {}),
]


# ------------------------------------------------------------------ EfficientNet-Lite0


def efficientnet_lite0() -> Any:
    """EfficientNet-Lite0 (Google's edge variant of B0): MBConv blocks without
    squeeze-excitation, ReLU6 instead of SiLU, the B0 stage layout (random weights)."""
    import torch
    from torch import nn

    def cbr(ci: int, co: int, k: int = 1, s: int = 1, g: int = 1, act: bool = True) -> nn.Sequential:
        layers: list[nn.Module] = [nn.Conv2d(ci, co, k, s, (k - 1) // 2, groups=g, bias=False), nn.BatchNorm2d(co)]
        if act:
            layers.append(nn.ReLU6())
        return nn.Sequential(*layers)

    class MB(nn.Module):
        def __init__(self, ci: int, co: int, k: int, s: int, e: int) -> None:
            super().__init__()
            mid = ci * e
            layers = [] if e == 1 else [cbr(ci, mid)]
            layers += [cbr(mid, mid, k, s, mid), cbr(mid, co, act=False)]
            self.block = nn.Sequential(*layers)
            self.res = s == 1 and ci == co

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.block(x)
            return x + y if self.res else y

    cfg = [(1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3), (6, 112, 3, 1, 5),
           (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]
    layers: list[nn.Module] = [cbr(3, 32, 3, 2)]
    c = 32
    for e, co, n, s, k in cfg:
        for i in range(n):
            layers.append(MB(c, co, k, s if i == 0 else 1, e))
            c = co
    layers.append(cbr(c, 1280))
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000))
    torch.manual_seed(0)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return net.eval()


def export(zoo_name: str, resolution: int, kwargs: dict[str, Any]) -> bytes:
    from estimator import zoo

    if zoo_name == "efficientnet_lite0":
        return zoo.export_onnx(efficientnet_lite0(), resolution)
    return zoo.export_onnx(zoo.build(zoo_name, resolution, **kwargs), resolution)


# ----------------------------------------------------------------------------- caching


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:16]


def _cached(path: Path, make: Callable[[], bytes]) -> bytes:
    if path.is_file():
        return path.read_bytes()
    data = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data


def vela_estimate(label: str, resolution: int, kwargs: dict[str, Any], zoo_name: str, cache: Path,
                  log: Callable[[str], None]) -> dict[str, Any]:
    """ONNX, int8 TFLite and Vela's estimate of one network (cached by content)."""
    from bench import tflite_convert as tc
    from bench.runners.vela_runner import VelaRunner, vela_version

    onnx_b = _cached(cache / f"{label}_{resolution}.onnx", lambda: export(zoo_name, resolution, kwargs))
    key = _sha(onnx_b)
    t0 = time.monotonic()
    tfl = _cached(cache / f"{label}_{resolution}_{key}_int8.tflite", lambda: tc.convert_onnx(onnx_b, "int8"))
    t1 = time.monotonic()
    vpath = cache / f"{label}_{resolution}_{_sha(tfl)}_vela{vela_version()}.json"
    if vpath.is_file():
        res = json.loads(vpath.read_text())
    else:
        runner = VelaRunner()
        prep = runner.prepare(tfl)
        est = prep.handle
        res = {"estimate_ms": est.inference_ms, "per_layer_ms": est.per_layer_ms, "cpu_ops": est.cpu_ops,
               "npu_ops": est.npu_ops, "configuration": runner.configuration, "vela": runner.version,
               "compile_s": time.monotonic() - t1}
        vpath.write_text(json.dumps(res, indent=1))
    if "per_op_rows" not in res:  # Vela's per-operator rows with their operator types (for --breakdown)
        res["per_op_rows"] = vela_rows(tfl)
        vpath.write_text(json.dumps(res, indent=1))
    log(f"{label}: int8 TFLite {len(tfl) / 1e6:.1f} MB (conversion {t1 - t0:.1f} s, 0 if cached), "
        f"Vela {res['estimate_ms']:.3f} ms, {len(res['cpu_ops'])} CPU op(s)")
    res["onnx"] = onnx_b
    return res


def vela_rows(tfl: bytes) -> list[list[Any]]:
    """Vela's per-layer CSV rows ``[original operator, output tensor name, ms]`` (NPU only)."""
    import csv
    import subprocess
    import tempfile

    from bench.runners.vela_runner import VelaRunner

    runner = VelaRunner()
    with tempfile.TemporaryDirectory(prefix="vela-rows-") as tmp:
        mp = Path(tmp) / "m.tflite"
        mp.write_bytes(tfl)
        out = Path(tmp) / "out"
        subprocess.run(runner._command(mp, out), cwd=tmp, capture_output=True, check=True)  # noqa: SLF001
        rows = list(csv.DictReader(open(next(out.glob("*_per-layer.csv")), newline="")))
    clock = runner.core_clock_hz or 1e9
    return [[r["Original Operator"], r["Name"], float(r["Op Cycles"] or 0) / clock * 1e3]
            for r in rows if (r.get("Target") or "").upper() != "CPU"]


#: Vela operator -> our layer type, for cycles Vela reports under another op's tensor name
#: (convolutions that write straight into a concatenation's output are named after it).
_VELA_TYPE = {"Conv2D": "conv2d", "DepthwiseConv2D": "dwconv2d", "FullyConnected": "fc", "MaxPool": "maxpool",
              "AvgPool": "avgpool", "Mean": "globalpool"}
#: Vela operator -> the layer types it can be all of (for the per-layer errors of --breakdown;
#: a SiLU is Logistic + Mul)
_OWN_KIND = {**{o: {t} for o, t in _VELA_TYPE.items()}, "Add": {"add"}, "Mul": {"mul", "activation"},
             **{o: {"activation"} for o in ("Sigmoid", "Logistic", "HardSwish", "Tanh", "LeakyRelu", "Relu",
                                            "Relu6", "Gelu", "Softplus")}}


# ---------------------------------------------------------------------------- breakdown


def attribute(per_layer_ms: dict[str, float], layers: list[Any]) -> tuple[dict[int, float], float]:
    """Vela per-operator ms -> estimator layer index (via ONNX node names in TFLite tensor
    names); returns (ms per layer index, unattributed ms)."""
    from bench.tflite_convert import _sanitize

    owner: dict[str, int] = {}
    for i, layer in enumerate(layers):
        for n in list(layer.nodes) + [layer.name]:
            owner.setdefault(_sanitize(n), i)
    names = sorted(owner, key=len, reverse=True)
    out: dict[int, float] = {}
    lost = 0.0
    for tname, ms in per_layer_ms.items():
        hit = None
        for part in tname.split(";"):
            for n in names:
                if part == n or part.startswith(n + "/"):
                    hit = owner[n]
                    break
            if hit is not None:
                break
        if hit is None and tname.split(";")[0].split(":")[0] in ("PartitionedCall", "StatefulPartitionedCall"):
            hit = len(layers) - 1  # the graph output's producer keeps the signature's name
        if hit is None:
            lost += ms
        else:
            out[hit] = out.get(hit, 0.0) + ms
    return out, lost


# ---------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="imx93")
    ap.add_argument("--profiles", default=None, help="profiles root (default: the repository's profiles/)")
    ap.add_argument("--networks", default=None, help="comma-separated labels (default: all): "
                    + ", ".join(n for n, *_ in NETWORKS))
    ap.add_argument("--cache", default=str(ROOT / "bench-data" / "imx93-validation"))
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--breakdown", action="store_true", help="per-layer-type comparison with Vela's per-operator cycles")
    ap.add_argument("--json", default=None, help="write all results here")
    ap.add_argument("--prepare-only", action="store_true",
                    help="only build, convert and Vela-compile the networks (fills the cache), no estimator")
    a = ap.parse_args(argv)

    from estimator.predict import Estimator

    nets = NETWORKS
    if a.networks:
        want = [s.strip() for s in a.networks.split(",") if s.strip()]
        known = {n for n, *_ in NETWORKS}
        bad = [w for w in want if w not in known]
        if bad:
            ap.error(f"unknown network(s) {bad}; known: {sorted(known)}")
        nets = [n for n in NETWORKS if n[0] in want]
    cache = Path(a.cache)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731

    if a.prepare_only:
        for label, zoo_name, res, kw in nets:
            vela_estimate(label, res, kw, zoo_name, cache, log)
        return 0
    est = {t: Estimator.from_profile(a.device, root=a.profiles, target=t) for t in ("lum", "single")}
    prof = est["lum"].profile
    log(f"profile {prof.name}: {prof.provenance.kind}; {prof.provenance.source}")
    conf = a.confidence
    rows: list[dict[str, Any]] = []
    type_tot: dict[str, list[float]] = {}
    layer_err: dict[str, list[float]] = {}  # type -> [layers, Vela ms, sum |prediction - Vela| ms]
    for label, zoo_name, res, kw in nets:
        v = vela_estimate(label, res, kw, zoo_name, cache, log)
        ref = v["estimate_ms"]
        r: dict[str, Any] = {"network": label, "resolution": res, "vela_ms": ref, "cpu_ops": v["cpu_ops"],
                             "npu_ops": v["npu_ops"]}
        for t, e in est.items():
            src: Any = e.load_network(v["onnx"])
            ne = e.estimate_network(src, confidence=[conf], name=label)
            lo, hi = ne.interval("CM_LV", conf)
            r[t] = {"pred_ms": ne.total_ms, "err_pct": 100.0 * (ne.total_ms - ref) / ref, "cm_lv": [lo, hi],
                    "covered": bool(lo <= ref <= hi), "rel_width": (hi - lo) / ref,
                    "n_fallback": ne.n_fallback, "n_ood": ne.n_out_of_design_space,
                    "cpu_flagged": sum("cpu_fallback_op" in l.flags for l in ne.layers)}
            if t == "lum":
                r["cm_o"] = list(ne.interval("CM_O", conf))
                r["cm_tv"] = list(ne.interval("CM_TV", conf))
                if a.breakdown:
                    net = src
                    pred_of = {row.name: row.prediction_ms for row in ne.layers}
                    free_layers = {layer.name for layer in net.layers if layer.name not in pred_of}

                    def key(layer: Any) -> str:
                        if layer.name in free_layers:
                            return f"{layer.type} (free)"
                        if layer.type == "activation":
                            return f"activation:{layer.params.get('kind')}"
                        return layer.type if layer.type != "other" else f"other:{layer.op_type}"

                    for layer in net.layers:
                        tt = type_tot.setdefault(key(layer), [0.0, 0.0, 0])
                        tt[1] += pred_of.get(layer.name, 0.0)
                        tt[2] += 1
                    own_ms: dict[int, float] = {}
                    own_ops: dict[int, set[str]] = {}
                    for vop, name, ms in v["per_op_rows"]:
                        per, lost = attribute({name: ms}, net.layers)
                        if per:
                            i0 = next(iter(per))
                            own_ms[i0] = own_ms.get(i0, 0.0) + ms
                            own_ops.setdefault(i0, set()).add(vop)
                            k = key(net.layers[i0])
                            if k in ("concat", "reshape", "reshape (free)") and vop not in ("Concat", "Reshape"):
                                # a producer writing straight into a concat/reshape output
                                k = _VELA_TYPE.get(vop, f"{k}<-{vop}")
                        else:
                            k = "(unattributed Vela ops)"
                        type_tot.setdefault(k, [0.0, 0.0, 0])[0] += ms
                    # per-layer accuracy where the attribution is clean: every Vela operator
                    # under the layer's name is of the layer's own kind
                    for i0, vv in own_ms.items():
                        layer = net.layers[i0]
                        if vv <= 0 or layer.name in free_layers or any(
                                layer.type not in _OWN_KIND.get(o, ()) for o in own_ops[i0]):
                            continue
                        le = layer_err.setdefault(layer.type, [0, 0.0, 0.0])
                        le[0] += 1
                        le[1] += vv
                        le[2] += abs(pred_of.get(layer.name, 0.0) - vv)
        rows.append(r)

    # ----------------------------------------------------------------------- report
    hdr = ["network", "res", "Vela ms", "cpu", "smart-pad ms", "err %", f"CM_LV {conf:g} [ms]", "in",
           "single ms", "err %", "ood/fallback"]
    lines = []
    for r in rows:
        s, g = r["lum"], r["single"]
        lines.append([r["network"], str(r["resolution"]), f"{r['vela_ms']:.3f}", str(len(r["cpu_ops"])),
                      f"{s['pred_ms']:.3f}", f"{s['err_pct']:+.1f}", f"[{s['cm_lv'][0]:.3f}, {s['cm_lv'][1]:.3f}]",
                      "yes" if s["covered"] else "NO", f"{g['pred_ms']:.3f}", f"{g['err_pct']:+.1f}",
                      f"{s['n_ood']}/{s['n_fallback']}"])
    w = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(hdr)]
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    print("  ".join("-" * x for x in w))
    for l in lines:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)))
    n = len(rows)
    mae = sum(abs(r["lum"]["err_pct"]) for r in rows) / n
    cov = sum(r["lum"]["covered"] for r in rows) / n
    width = sum(r["lum"]["rel_width"] for r in rows) / n
    s_mean = sum(r["single"]["err_pct"] for r in rows) / n
    s_mae = sum(abs(r["single"]["err_pct"]) for r in rows) / n
    ratio = math.exp(sum(math.log(r["single"]["pred_ms"] / r["lum"]["pred_ms"]) for r in rows) / n)
    print()
    print(f"smart padding  : mean |error| {mae:.1f} % (target <= 5 %), CM_LV {conf:g} coverage "
          f"{cov:.0%} ({sum(r['lum']['covered'] for r in rows)}/{n}; target >= 90 %), mean rel. width {width:.1%}")
    print(f"single layer   : mean error {s_mean:+.1f} %, mean |error| {s_mae:.1f} % "
          f"(paper, real i.MX93: +298.8 %); single/smart-padding prediction ratio (geo. mean) {ratio:.2f}x")
    print(f"reference      : Vela {prof.provenance.versions.get('ethos-u-vela', '?')} whole-network estimates "
          "(ethos-u65-256, Ethos_U65_High_End, Dedicated_Sram_384KB): a cost model, not hardware; "
          "CPU-placed operators get no time in it")
    cpu = {r["network"]: sorted({c["op"] for c in r["cpu_ops"]}) for r in rows if r["cpu_ops"]}
    if cpu:
        print("Vela CPU ops   : " + "; ".join(f"{k}: {', '.join(v)}" for k, v in cpu.items()))
    if a.breakdown and type_tot:
        print()
        print("per layer type (all networks): Vela ms attributed vs smart-padding prediction")
        for k, (vv, pp, cnt) in sorted(type_tot.items(), key=lambda kv: -kv[1][0]):
            err = f"{100 * (pp - vv) / vv:+.1f} %" if vv > 0 else "-"
            print(f"  {k:34s} n={cnt:4d}  Vela {vv:9.3f} ms  pred {pp:9.3f} ms  {err}")
        if layer_err:
            print()
            print("per layer (layers whose Vela operators are all of their own kind): sum |prediction - Vela| / Vela")
            tot = [0, 0.0, 0.0]
            for k, (cnt, vv, ae) in sorted(layer_err.items(), key=lambda kv: -kv[1][1]):
                print(f"  {k:12s} n={cnt:4d}  Vela {vv:9.3f} ms  sum |error| {100 * ae / vv:5.1f} %")
                tot = [tot[0] + cnt, tot[1] + vv, tot[2] + ae]
            print(f"  {'all':12s} n={tot[0]:4d}  Vela {tot[1]:9.3f} ms  sum |error| {100 * tot[2] / tot[1]:5.1f} %")
    if a.json:
        doc = {"device": a.device, "confidence": conf, "provenance": prof.provenance.to_dict(), "rows": rows,
               "summary": {"mean_abs_err_pct": mae, "coverage": cov, "mean_rel_width": width,
                           "single_mean_err_pct": s_mean, "single_mean_abs_err_pct": s_mae,
                           "single_over_lum": ratio},
               "breakdown": type_tot, "layer_errors": layer_err}
        Path(a.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
