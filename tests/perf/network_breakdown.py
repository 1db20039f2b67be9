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
    python tests/perf/network_breakdown.py --networks mobilenet_v2 --layers dwconv2d --bench  # per layer

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


def node_index(model: onnx.ModelProto) -> dict[str, str]:
    """ONNX node name for every name ORT may give its kernel: the node name and its outputs."""
    idx: dict[str, str] = {}
    for n in model.graph.node:
        idx[n.name] = n.name
        for o in n.output:
            idx.setdefault(o, n.name)
    return idx


def onnx_node(kernel: str, idx: dict[str, str]) -> str | None:
    """The ONNX node an ORT per-node profile's kernel belongs to (None: a layout reorder)."""
    name = kernel
    for suffix in ("_nchwc", "_token_0", "_token_1"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for prefix in ("fused ", "Fused "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return idx.get(name)


def layer_rows(est: Estimator, name: str, res: int, runs: int, layer_type: str, bench: bool) -> list[dict]:
    """Per layer of one type: its kernel time inside the network, the prediction and, with
    ``bench``, the same configuration measured now as the benchmark measures it (the LUM's
    kernel time inside the padded model, and smart padding's T_LUM midpoint): which of
    the benchmark protocol and the model is off, layer by layer."""
    from bench.modelgen import padded_model, padding_keys, padding_model, to_onnx  # noqa: PLC0415
    from bench.smartpad import lum_interval, lum_profile_ms  # noqa: PLC0415

    data = zoo.export_onnx(name, res)
    model = onnx.load_from_string(data)
    idx = node_index(model)
    net = est.load_network(data)
    e = est.estimate_network(net, [0.9], name=name)
    pred = {le.name: le for le in e.layers}
    r = get_runner("onnxruntime", threads=est.profile.threads or 1)
    out = []
    with r:
        per_node = r.per_layer(r.prepare(data), warmup=5, runs=runs)
        in_net: dict[str, float] = defaultdict(float)
        owner = {n: layer.name for layer in net.layers for n in layer.nodes}
        for kernel, ms in per_node.items():
            node = onnx_node(kernel, idx)
            if node in owner:
                in_net[owner[node]] += ms
        for layer in net.layers:
            if layer.type != layer_type:
                continue
            row = {"layer": layer.name, "params": dict(layer.params), "network_ms": in_net.get(layer.name, 0.0),
                   "predicted_ms": pred[layer.name].prediction_ms}
            if bench:
                ir = padded_model(layer.type, layer.params)
                prep = r.prepare(to_onnx(ir))
                row["padded_kernel_ms"] = lum_profile_ms(r.per_layer(prep, warmup=5, runs=runs), ir)
                t_c = r.time(prep, warmup=5, runs=runs).median_ms
                keys = padding_keys(layer.type, layer.params)
                tb = {k: r.time(r.prepare(to_onnx(padding_model(*k))), warmup=5, runs=runs).median_ms
                      for k in keys.all()}
                row["t_lum_ms"] = lum_interval(t_c, sum(tb[k] for k in keys.inputs), tb[keys.output]).mid
            out.append(row)
    return out


def breakdown(est: Estimator, name: str, res: int, runs: int) -> dict[str, dict[str, float]]:
    data = zoo.export_onnx(name, res)
    model = onnx.load_from_string(data)
    idx = node_index(model)
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
        node = onnx_node(kernel, idx)
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
    ap.add_argument("--layers", default=None, metavar="TYPE",
                    help="instead of the per-type table, one row per layer of TYPE (e.g. dwconv2d)")
    ap.add_argument("--bench", action="store_true",
                    help="with --layers: also measure each layer as the benchmark does (padded-model kernel, T_LUM)")
    a = ap.parse_args(argv)
    est = Estimator.from_profile(a.device, root=a.profiles)
    if a.layers:
        for name in [n for n in a.networks.split(",") if n]:
            res = a.resolution or zoo.default_resolution(name)
            rows = layer_rows(est, name, res, a.runs, a.layers, a.bench)
            print(f"\n{name}@{res}: {a.layers} layers")
            print(f"  {'layer':<28} {'in network':>10} {'predicted':>10} {'padded kernel':>14} {'T_LUM':>8}  params")
            for x in rows:
                p = {k: v for k, v in x["params"].items() if not k.startswith("p_")}
                print(f"  {x['layer'][:28]:<28} {x['network_ms']:>10.4f} {x['predicted_ms']:>10.4f} "
                      f"{x.get('padded_kernel_ms', float('nan')):>14.4f} {x.get('t_lum_ms', float('nan')):>8.4f}  {p}")
            tot = {k: sum(x.get(k, 0.0) for x in rows) for k in ("network_ms", "predicted_ms", "padded_kernel_ms", "t_lum_ms")}
            print(f"  {'sum':<28} {tot['network_ms']:>10.4f} {tot['predicted_ms']:>10.4f} {tot['padded_kernel_ms']:>14.4f} "
                  f"{tot['t_lum_ms']:>8.4f}")
        return 0
    total: dict[str, dict[str, float]] = defaultdict(lambda: {"measured": 0.0, "predicted": 0.0, "n": 0})
    for name in [n for n in a.networks.split(",") if n]:
        res = a.resolution or zoo.default_resolution(name)
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
