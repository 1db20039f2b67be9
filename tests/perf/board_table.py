"""The seed paper's i.MX93 board measurements as a test of a device profile (a script, not a
unit test: it prints figures and asserts nothing).

The "Measured [ms]" column of Table 3 of Wess et al., "Conformal Prediction based Confidence
for Latency Estimation of DNN Accelerators: A Black-box Approach" (IEEE Access 2024) is the
only measurement of real i.MX93 hardware here: ten networks, int8 TensorFlow Lite on the
Ethos-U65 NPU. They are a test only: no parameter of the estimator, of a profile or of its
network calibration is chosen from them, and nothing here feeds back into one.

Each network is built by :mod:`estimator.zoo` (random weights) at its standard input side,
which the paper does not state: 640 for the YOLOs (Ultralytics' default), 224 for
MobileNetV1, 299 for Inception-v4. For each, the script prints the board time, the estimate
on ``--device``, its signed error, the 90 % CM_LV interval, the interval's width relative to
the estimate ((hi - lo) / estimate) and whether it covers the board time; then a summary
(mean |error|, coverage, mean width). It does this twice: for the profile as shipped
(network-calibrated where the profile has network rows) and uncalibrated, the Eq. 7/8 sum
and convolution of the layer models (``Estimator.estimate_network(..., calibrate=False)``).
A profile without network rows gives the same numbers twice, and the script says so. Last,
per network: layers, layers outside the benchmarked design space, fallback layers, layers the
profile places on the target's CPU, and the import time.

    python tests/perf/board_table.py                              # the shipped imx93
    python tests/perf/board_table.py --device imx93 --root DIR --json out.json

The first run on a profile trains its models (minutes; cached under ``$CL_CACHE_DIR``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: Wess et al. 2024, Table 3 ("Percentage prediction errors ... for the i.MX93"), column
#: "Measured [ms]": the NXP i.MX93 board, int8 on the Ethos-U65 NPU. A test, never training
#: data. (label, zoo name, input side, board ms)
BOARD: list[tuple[str, str, int, float]] = [
    ("YOLOv5s", "yolov5s", 640, 103.6),
    ("YOLOv5m", "yolov5m", 640, 213.0),
    ("YOLOv5l", "yolov5l", 640, 383.1),
    ("YOLOv8n", "yolov8n", 640, 67.6),
    ("YOLOv8s", "yolov8s", 640, 138.9),
    ("YOLOv8m", "yolov8m", 640, 294.8),
    ("YOLOv8l", "yolov8l", 640, 486.0),
    ("YOLOv8x", "yolov8x", 640, 763.8),
    ("MobileNetV1", "mobilenet_v1", 224, 4.97),
    ("InceptionV4", "inception_v4", 299, 66.4),
]

CONFIDENCE = 0.9
FORMS = ("shipped", "uncalibrated")


def _cell(net: Any, board: float) -> dict[str, Any]:
    lo, hi = net.interval("CM_LV", CONFIDENCE)
    return {"estimate_ms": net.total_ms, "err_pct": 100.0 * (net.total_ms - board) / board, "cm_lv": [lo, hi],
            "rel_width": (hi - lo) / net.total_ms, "covered": bool(lo <= board <= hi),
            "calibration": dict(net.calibration)}


def _table(rows: list[dict[str, Any]], form: str) -> dict[str, Any]:
    hdr = ["network", "res", "board ms", "estimate ms", "err %", f"CM_LV {CONFIDENCE:g} [ms]", "width", "covers"]
    lines = []
    for r in rows:
        c = r[form]
        lines.append([r["network"], str(r["resolution"]), f"{r['board_ms']:.2f}", f"{c['estimate_ms']:.2f}",
                      f"{c['err_pct']:+.1f}", f"[{c['cm_lv'][0]:.2f}, {c['cm_lv'][1]:.2f}]",
                      f"{c['rel_width']:.0%}", "yes" if c["covered"] else "NO"])
    w = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(hdr)]
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    print("  ".join("-" * x for x in w))
    for l in lines:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)))
    cells = [r[form] for r in rows]
    summary = {"mean_abs_err_pct": statistics.fmean(abs(c["err_pct"]) for c in cells),
               "max_abs_err_pct": max(abs(c["err_pct"]) for c in cells),
               "mean_err_pct": statistics.fmean(c["err_pct"] for c in cells),
               "covered": sum(c["covered"] for c in cells), "n": len(cells),
               "mean_rel_width": statistics.fmean(c["rel_width"] for c in cells)}
    print(f"{form}: mean |error| {summary['mean_abs_err_pct']:.1f} % (max {summary['max_abs_err_pct']:.1f} %, "
          f"mean signed {summary['mean_err_pct']:+.1f} %); CM_LV {CONFIDENCE:g} covers {summary['covered']}/"
          f"{summary['n']} at mean width {summary['mean_rel_width']:.0%}")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="imx93", help="device profile (default imx93)")
    ap.add_argument("--root", default=None, help="profiles directory (default: $CL_PROFILES or profiles/)")
    ap.add_argument("--json", default=None, help="write all results here")
    a = ap.parse_args(argv)

    from estimator import zoo
    from estimator.predict import Estimator

    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    est = Estimator.from_profile(a.device, root=a.root)
    log(f"profile {a.device}: models ready in {time.perf_counter() - t0:.1f} s")
    prof = est.profile
    cal = est.calibration_info()
    rows: list[dict[str, Any]] = []
    for label, name, res, board in BOARD:
        t0 = time.perf_counter()
        data = zoo.export_onnx(name, res)
        t1 = time.perf_counter()
        net = est.load_network(data)
        t2 = time.perf_counter()
        shipped = est.estimate_network(net, [CONFIDENCE], name=label)
        raw = est.estimate_network(net, [CONFIDENCE], name=label, calibrate=False)
        t3 = time.perf_counter()
        fb = sorted({l.type if l.type != "other" else f"other({l.op_type})" for l in shipped.layers if l.fallback})
        cpu = sorted({l.op_type or l.type for l in shipped.layers if "runs_on_cpu" in l.flags})
        rows.append({"network": label, "zoo": name, "resolution": res, "board_ms": board,
                     "shipped": _cell(shipped, board), "uncalibrated": _cell(raw, board),
                     "n_layers": shipped.n_layers, "n_free_nodes": len(shipped.free_nodes),
                     "n_fallback": shipped.n_fallback, "fallback_types": fb,
                     "n_out_of_design_space": shipped.n_out_of_design_space,
                     "n_runs_on_cpu": sum("runs_on_cpu" in l.flags for l in shipped.layers), "cpu_ops": cpu,
                     "n_cpu_possible": sum("cpu_fallback_possible" in l.flags for l in shipped.layers),
                     "onnx_mb": len(data) / 1e6, "export_s": t1 - t0, "import_s": t2 - t1, "estimate_s": t3 - t2})
        log(f"{label}@{res}: export {t1 - t0:.1f} s, import {t2 - t1:.1f} s, estimate {t3 - t2:.1f} s")

    print(f"seed paper, Table 3: the i.MX93 board (measured) against {prof.name} "
          f"({prof.provenance.kind}: {prof.provenance.summary()})")
    print("a test only: nothing in the profile or the estimator was chosen from these ten numbers")
    summaries: dict[str, Any] = {}
    for form in FORMS:
        print()
        if form == "shipped":
            what = (f"network-calibrated ({cal.get('method')}, {cal.get('n_networks')} networks)" if cal["applied"]
                    else f"no network calibration applies ({cal.get('reason', '?')}): the same as uncalibrated")
            print(f"{prof.name} as shipped: {what}")
        else:
            print(f"{prof.name} uncalibrated (Eq. 7/8 of the layer models)")
        summaries[form] = _table(rows, form)
    print()
    print("per network: layers (free nodes), out of the benchmarked design space, fallback layers, layers on the "
          "target's CPU, import time")
    for r in rows:
        fb = f"{r['n_fallback']}" + (f" ({', '.join(r['fallback_types'])})" if r["fallback_types"] else "")
        cpu = f"{r['n_runs_on_cpu']}" + (f" ({', '.join(r['cpu_ops'])})" if r["cpu_ops"] else "")
        maybe = f", {r['n_cpu_possible']} may run on the CPU" if r["n_cpu_possible"] else ""
        print(f"  {r['network']:<12} {r['n_layers']:4d} layers ({r['n_free_nodes']} free), "
              f"{r['n_out_of_design_space']} out of design space, fallback {fb}, "
              f"on the CPU {cpu}{maybe}; ONNX {r['onnx_mb']:.0f} MB, import {r['import_s']:.1f} s")
    if a.json:
        doc = {"device": prof.name, "confidence": CONFIDENCE, "provenance": prof.provenance.to_dict(),
               "calibration": cal, "rows": rows, "summary": summaries}
        Path(a.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
