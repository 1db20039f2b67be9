"""Warm vs cold caches: every layer's time in a benchmark model and inside a real network
(a script, not a test: prints figures).

For each layer of a zoo network that smart padding can benchmark, it prints the LUM's kernel
time inside its padded benchmark model measured back to back (warm, the default protocol),
the same after a ``--flush`` MiB buffer write before every run (the ``onnxruntime`` runner's
``flush_cache_mb``, ``bench run --flush-cache``), and the same layer's kernel time inside the
network (ONNX Runtime's per-node profiler, 1 thread), with the bytes it moves and whether it
is weight-bound (:func:`estimator.layers.weight_bound`). Then, per layer type, the sums of the
three, and the sum the estimator's rule gives (weight-bound layers cold, the others warm:
``bench profile --cold-from``). Layers ONNX Runtime fuses into another node (an ``Add`` into
its convolution) time 0 inside the network and are left out of the sums.

    taskset -c 1 python tests/perf/cold_cache.py --network mobilenet_v2 --flush 64
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import onnx  # noqa: E402

from bench.modelgen import padded_model, to_onnx  # noqa: E402
from bench.runners.base import get_runner  # noqa: E402
from bench.smartpad import lum_profile_ms  # noqa: E402
from estimator import zoo  # noqa: E402
from estimator.layers import weight_bound  # noqa: E402
from estimator.onnx_import import load_network  # noqa: E402
from tests.perf.network_breakdown import node_index, onnx_node  # noqa: E402


def in_network_ms(per_node: dict[str, float], data: bytes, layers: list) -> tuple[dict[int, float], float]:
    """Each layer's share of a network's per-node profile (kernels mapped to ONNX nodes as
    ``network_breakdown.py`` maps them), and the time no layer claims (layout reorders)."""
    idx = node_index(onnx.load_from_string(data))
    node_layer = {n: i for i, layer in enumerate(layers) for n in layer.nodes}
    got: dict[int, float] = collections.defaultdict(float)
    other = 0.0
    for kernel, ms in per_node.items():
        i = node_layer.get(onnx_node(kernel, idx))
        if i is None:
            other += ms
        else:
            got[i] += ms
    return got, other


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--network", default="mobilenet_v2", help="zoo network, NAME or NAME@RES (default mobilenet_v2)")
    ap.add_argument("--flush", type=float, default=64.0, help="flush buffer, MiB (default 64)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--affinity", default="1", help="CPU to pin ONNX Runtime to (default 1)")
    a = ap.parse_args(argv)
    name, _, res = a.network.partition("@")
    data = zoo.export_onnx(name, int(res) if res else zoo.default_resolution(name))
    layers = load_network(data).layers
    warm = get_runner("onnxruntime", threads=1, affinity=a.affinity)
    cold = get_runner("onnxruntime", threads=1, affinity=a.affinity, flush_cache_mb=a.flush)
    rows, seen = [], {}
    with warm, cold:
        net, other = in_network_ms(warm.per_layer(warm.prepare(data), warmup=5, runs=a.runs + 10), data, layers)
        for i, layer in enumerate(layers):
            key = (layer.type, json.dumps(layer.params, sort_keys=True, default=str))
            if key not in seen:
                try:
                    ir = padded_model(layer.type, layer.params)
                except Exception:  # noqa: BLE001 (a type smart padding cannot render: not benchmarked)
                    seen[key] = None
                    continue
                model = to_onnx(ir)
                seen[key] = (lum_profile_ms(warm.per_layer(warm.prepare(model), warmup=5, runs=a.runs), ir),
                             lum_profile_ms(cold.per_layer(cold.prepare(model), warmup=5, runs=a.runs), ir))
            if seen[key] is not None:
                rows.append((i, layer, net.get(i, 0.0), *seen[key]))
    print(f"{a.network}: {len(layers)} layers; ORT per-node total {sum(net.values()) + other:.3f} ms, "
          f"{other:.3f} ms in nodes of no layer (layout reorders)")
    print(f"{'#':>3} {'type':<10} {'MB moved':>8} {'wb':>2} {'in network':>10} {'warm':>7} {'cold':>7}  layer")
    for i, layer, n, w, c in rows:
        wb = weight_bound(layer.counts)
        print(f"{i:>3} {layer.type:<10} {layer.bytes / 2**20:>8.2f} {'y' if wb else '':>2} {n:>10.3f} {w:>7.3f} {c:>7.3f}  "
              f"{layer.name[:48]}")
    print(f"\n{'type':<10} {'layers':>6} {'in network':>10} {'warm':>16} {'cold':>16} {'rule':>16}  (rule: weight-bound cold)")
    by = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    for _, layer, n, w, c in rows:
        if n <= 0:  # fused into another node inside the network
            continue
        for t in (layer.type, "all"):
            b = by[t]
            b[0] += 1
            b[1] += n
            b[2] += w
            b[3] += c
            b[4] += c if weight_bound(layer.counts) else w
    for t, (k, n, w, c, r) in by.items():
        pct = (lambda x: f"({100 * (x / n - 1):+.0f} %)" if n > 0 else "")
        print(f"{t:<10} {k:>6} {n:>10.3f} {w:>8.3f} {pct(w):>7} {c:>8.3f} {pct(c):>7} {r:>8.3f} {pct(r):>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
