"""Warm vs cold caches: a layer's time in a benchmark model and inside a real network
(a script, not a test: prints figures).

For the fully connected head and the largest 1x1 convolution of MobileNetV2 it prints the
LUM's kernel time inside the padded benchmark model measured back to back (warm, the
default protocol), the same after a ``--flush`` MiB buffer write before every run (the
``onnxruntime`` runner's ``flush_cache_mb``, ``bench run --flush-cache``), and the same
layer's kernel time inside MobileNetV2 (ONNX Runtime's per-node profiler, 1 thread).

    taskset -c 1 python tests/perf/cold_cache.py --flush 64
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.modelgen import padded_model, to_onnx  # noqa: E402
from bench.runners.base import get_runner  # noqa: E402
from bench.smartpad import lum_profile_ms  # noqa: E402
from estimator import zoo  # noqa: E402

# (label, layer type, params, substring of the MobileNetV2 ONNX node name)
LAYERS = [
    ("fc 1280->1000 (classifier)", "fc", dict(c_in=1280, c_out=1000), "classifier"),
    ("conv 1x1 320->1280 @7 (head)", "conv2d", dict(h=7, w=7, c_in=320, c_out=1280, k_h=1, k_w=1, act="relu6"),
     "features.18/"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flush", type=float, default=64.0, help="flush buffer, MiB (default 64)")
    ap.add_argument("--runs", type=int, default=40)
    a = ap.parse_args(argv)
    warm, cold = get_runner("onnxruntime", threads=1), get_runner("onnxruntime", threads=1, flush_cache_mb=a.flush)
    with warm, cold:
        net = warm.per_layer(warm.prepare(zoo.export_onnx("mobilenet_v2", 224)), warmup=5, runs=a.runs)
        print(f"{'layer':<30} {'warm ms':>8} {'cold ms':>8} {'in MobileNetV2 ms':>18}")
        for label, t, p, key in LAYERS:
            ir = padded_model(t, p)
            model = to_onnx(ir)
            w = lum_profile_ms(warm.per_layer(warm.prepare(model), warmup=5, runs=a.runs), ir)
            c = lum_profile_ms(cold.per_layer(cold.prepare(model), warmup=5, runs=a.runs), ir)
            n = sum(ms for node, ms in net.items() if key in node)
            print(f"{label:<30} {w:>8.3f} {c:>8.3f} {n:>18.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
