"""Where a host-cpu network estimate goes wrong, per layer type (a script, not a test).

For each zoo network: export ONNX, run ONNX Runtime's own per-node profiler on it (the
profile's runner settings: CPU EP, graph optimisation 'all', the profile's threads), map
every profiled kernel back to the estimator's layer that holds its ONNX node, and print,
per layer type, the measured kernel time and the estimator's prediction side by side.
Kernel times are measured *inside the network*, so they show which layer types the
smart-padding models over- or under-predict in context; what ORT spends between kernels
is the gap between the sum of kernel times and the whole-network latency ("between
kernels" row).

    python tests/perf/network_breakdown.py --device host-cpu --networks resnet18,mobilenet_v2

Profiled kernels are mapped to ONNX nodes by name: ORT keeps the node name, or names a
rewritten node after its output tensor (``<tensor>_nchwc``, layout transforms) or
prefixes it (``fused ...``); layout reorders ORT inserts (``ReorderInput``/``ReorderOutput``)
belong to no ONNX node and are listed as "layout reorders". Run it on a quiet machine
(pin it: ``taskset -c 1``); the per-type ratios are what matters, not single numbers.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.runners.base import get_runner  # noqa: E402
from estimator import zoo  # noqa: E402
from estimator.predict import Estimator  # noqa: E402


def _node_index(model: onnx.ModelProto) -> dict[str, str]:
    """ONNX node name for every name ORT may give its kernel: the node name and its outputs."""
    idx: dict[str, str] = {}
    for n in model.graph.node:
        idx[n.name] = n.name
        for o in n.output:
            idx.setdefault(o, n.name)
    return idx


def _onnx_node(kernel: str, idx: dict[str, str]) -> str | None:
    name = kernel
    for suffix in ("_nchwc", "_token_0", "_token_1"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for prefix in ("fused ", "Fused "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return idx.get(name)


def breakdown(est: Estimator, name: str, res: int, runs: int) -> dict[str, dict[str, float]]:
    data = zoo.export_onnx(name, res)
    model = onnx.load_from_string(data)
    idx = _node_index(model)
    r = get_runner("onnxruntime", threads=est.profile.threads or 1)
    with r:
        prep = r.prepare(data)
        whole = r.time(prep, warmup=5, runs=runs).median_ms
        per_node = r.per_layer(prep, warmup=5, runs=runs)
    net = est.load_network(data)
    e = est.estimate_network(net, [0.9], name=name)
    owner = {n: layer.type for layer in net.layers for n in layer.nodes}
    types: dict[str, dict[str, float]] = defaultdict(lambda: {"measured": 0.0, "predicted": 0.0, "n": 0})
    for le in e.layers:
        t = types[le.type]
        t["predicted"] += le.prediction_ms
        t["n"] += 1
    for kernel, ms in per_node.items():
        node = _onnx_node(kernel, idx)
        if node is None:
            key = "layout reorders" if "reorder" in kernel.lower() else "unmapped kernels"
        elif node in owner:
            key = owner[node]
        else:
            key = "free nodes"  # nodes the estimator counts as free (reshape of constants, ...)
        types[key]["measured"] += ms
    kernels = sum(per_node.values())
    types["between kernels"]["measured"] += max(0.0, whole - kernels)
    types["= network"] = {"measured": whole, "predicted": e.total_ms, "n": len(e.layers)}
    return dict(types)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="host-cpu")
    ap.add_argument("--profiles", default=None)
    ap.add_argument("--networks", default="resnet18,mobilenet_v2,efficientnet_b0,regnet_x_400mf,squeezenet")
    ap.add_argument("--resolution", type=int, default=None)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args(argv)
    est = Estimator.from_profile(a.device, root=a.profiles)
    total: dict[str, dict[str, float]] = defaultdict(lambda: {"measured": 0.0, "predicted": 0.0, "n": 0})
    for name in [n for n in a.networks.split(",") if n]:
        res = a.resolution or (640 if name.startswith("yolo") else 224)
        rows = breakdown(est, name, res, a.runs)
        print(f"\n{name}@{res}")
        print(f"  {'type':<18} {'n':>4} {'measured ms':>12} {'predicted ms':>13} {'pred/meas':>10}")
        for t, x in sorted(rows.items(), key=lambda kv: (kv[0].startswith("="), -kv[1]["measured"])):
            ratio = f"{x['predicted'] / x['measured']:.2f}" if x["measured"] > 0 and x["predicted"] > 0 else "-"
            print(f"  {t:<18} {int(x['n']):>4} {x['measured']:>12.3f} {x['predicted']:>13.3f} {ratio:>10}")
            if not t.startswith("="):
                for k in ("measured", "predicted", "n"):
                    total[t][k] += x[k]
    print("\nall networks")
    for t, x in sorted(total.items(), key=lambda kv: -kv[1]["measured"]):
        ratio = f"{x['predicted'] / x['measured']:.2f}" if x["measured"] > 0 and x["predicted"] > 0 else "-"
        print(f"  {t:<18} {int(x['n']):>4} {x['measured']:>12.3f} {x['predicted']:>13.3f} {ratio:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
